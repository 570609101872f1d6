// softmax_xent: softmax cross-entropy of logits[B,C] against labels[B] (uint32 class indices).
// Reads logits[B*C], labels[B]; writes loss_rows[B] = logsumexp(row) - row[label] and
// dlogits[B*C] = (softmax(row) - onehot(label)) * grad_scale. Stable: exponents are taken of
// x - max(row) <= 0. A label >= C (corrupt data) gives a NaN loss for the row, so the trainer's
// NaN check stops the run, and reads nothing outside the row. Row layout: rows.glsl.
#version 450
#extension GL_EXT_control_flow_attributes : require
#include "vkt_abi.h"
#include "rows.glsl"

layout(std430, binding = 0) readonly buffer L { float logits[]; };
layout(std430, binding = 1) readonly buffer Y { uint labels[]; };
layout(std430, binding = 2) writeonly buffer R { float loss_rows[]; };
layout(std430, binding = 3) writeonly buffer D { float dlogits[]; };
layout(push_constant) uniform PC { vkt_rows_push p; };

void main() {
    uint row = row_index();
    if (row >= p.B) return; // the whole team of the row returns: no shuffle reads a gone lane
    uint base = row * p.C, c0 = col_first(), step = col_step();
    float m = -1.0 / 0.0;
    for (uint j = c0; j < p.C; j += step) m = max(m, logits[base + j]);
    m = row_max(m);
    float s = 0.0;
    for (uint j = c0; j < p.C; j += step) s += exp(logits[base + j] - m);
    s = row_sum(s);
    uint label = labels[row];
    float inv = 1.0 / s;
    for (uint j = c0; j < p.C; j += step) {
        float prob = exp(logits[base + j] - m) * inv;
        dlogits[base + j] = (prob - (j == label ? 1.0 : 0.0)) * p.grad_scale;
    }
    if (c0 == 0) {
        float picked = uintBitsToFloat(0x7fc00000u); // NaN
        if (label < p.C) picked = logits[base + label]; // an if: ?: would load it anyway
        // (m - picked) first: both may be large (logits of 80) while the loss is small.
        loss_rows[row] = (m - picked) + log(s);
    }
}
