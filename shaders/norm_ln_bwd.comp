// norm_ln_bwd: layernorm's input gradient per row: with xhat = (x - mean) * rstd and
// g = dy * gamma, dx = rstd * (g - mean(g) - xhat * mean(g * xhat)). Reads x[R, D], dy[R, D],
// stats[2R] (the forward's mean and rstd per row), gamma[D]; writes dx[R, D]. Row layout:
// rows.glsl.
#version 450
#extension GL_EXT_control_flow_attributes : require
#include "norm_abi.h"
#include "rows.glsl"

layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer DY { float dy[]; };
layout(std430, binding = 2) readonly buffer S { float stats[]; };
layout(std430, binding = 3) readonly buffer G { float gamma[]; };
layout(std430, binding = 4) writeonly buffer DX { float dx[]; };
layout(push_constant) uniform PC { vkt_ln_push p; };

void main() {
    uint row = row_index();
    if (row >= p.R) return; // the whole team of the row
    uint base = row * p.D, c0 = col_first(), step = col_step();
    float mean = stats[2u * row], rstd = stats[2u * row + 1u];
    float a = 0.0, b = 0.0;
    for (uint j = c0; j < p.D; j += step) {
        float g = dy[base + j] * gamma[j];
        a += g;
        b += g * ((x[base + j] - mean) * rstd);
    }
    a = row_sum(a) / float(p.D);
    b = row_sum(b) / float(p.D);
    for (uint j = c0; j < p.D; j += step) {
        float g = dy[base + j] * gamma[j];
        dx[base + j] = rstd * (g - a - ((x[base + j] - mean) * rstd) * b);
    }
}
