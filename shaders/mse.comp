// mse: squared error of pred[B,N] against target[B,N] (N is the push constant C).
// Reads pred[B*N], target[B*N]; writes loss_rows[B] = sum_n (pred - target)^2 and
// dpred[B*N] = 2 (pred - target) * grad_scale. Row layout: rows.glsl.
#version 450
#extension GL_EXT_control_flow_attributes : require
#include "vkt_abi.h"
#include "rows.glsl"

layout(std430, binding = 0) readonly buffer P { float pred[]; };
layout(std430, binding = 1) readonly buffer T { float target[]; };
layout(std430, binding = 2) writeonly buffer R { float loss_rows[]; };
layout(std430, binding = 3) writeonly buffer D { float dpred[]; };
layout(push_constant) uniform PC { vkt_rows_push p; };

void main() {
    uint row = row_index();
    if (row >= p.B) return; // the whole team of the row returns: no shuffle reads a gone lane
    uint base = row * p.C, c0 = col_first(), step = col_step();
    float s = 0.0;
    for (uint j = c0; j < p.C; j += step) {
        float d = pred[base + j] - target[base + j];
        s += d * d;
        dpred[base + j] = 2.0 * d * p.grad_scale;
    }
    s = row_sum(s);
    if (c0 == 0) loss_rows[row] = s;
}
