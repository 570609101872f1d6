// norm_ln_fwd: layernorm over rows of D: y = (x - mean) * rstd * gamma + beta with mean and the
// biased variance var of the row, rstd = 1/sqrt(var + eps). Reads x[R, D], gamma[D], beta[D];
// writes y[R, D] and stats[2R] (the row's mean at [2r], rstd at [2r + 1]). Row layout: rows.glsl
// (an invocation or a team of lanes per row). Two passes for the statistics: the mean, then the
// squared deviations from it.
#version 450
#extension GL_EXT_control_flow_attributes : require
#include "norm_abi.h"
#include "rows.glsl"

layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer G { float gamma[]; };
layout(std430, binding = 2) readonly buffer BE { float beta[]; };
layout(std430, binding = 3) writeonly buffer Y { float y[]; };
layout(std430, binding = 4) writeonly buffer S { float stats[]; };
layout(push_constant) uniform PC { vkt_ln_push p; };

void main() {
    uint row = row_index();
    if (row >= p.R) return; // the whole team of the row returns: no shuffle reads a gone lane
    uint base = row * p.D, c0 = col_first(), step = col_step();
    float s = 0.0;
    for (uint j = c0; j < p.D; j += step) s += x[base + j];
    float mean = row_sum(s) / float(p.D);
    float q = 0.0;
    for (uint j = c0; j < p.D; j += step) {
        float d = x[base + j] - mean;
        q += d * d;
    }
    float rstd = 1.0 / sqrt(row_sum(q) / float(p.D) + p.eps);
    for (uint j = c0; j < p.D; j += step)
        y[base + j] = (x[base + j] - mean) * rstd * gamma[j] + beta[j];
    if (c0 == 0u) {
        stats[2u * row] = mean;
        stats[2u * row + 1u] = rstd;
    }
}
