// dropout: out[i] = keep(i) ? in[i] * scale : 0 for i < n, the forward (in = x, out = y) and the
// backward (in = dy, out = dx) alike: the mask is recomputed from its hash (dropout_abi.h), never
// stored. Reads in[n], writes out[n], elements [base, base + n) of a [B, F] view (F = features,
// whole-batch row = row0 + i / F, the mask's element index i % F), each bound as float[] and
// vec4[]; 4*EW_K elements per invocation (ew.glsl).
#version 450
#extension GL_EXT_control_flow_attributes : require
#include "vkt_abi.h"
#include "dropout_abi.h"
#include "ew.glsl"

layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer X4 { vec4 x4[]; };
layout(std430, binding = 2) writeonly buffer O { float o[]; };
layout(std430, binding = 3) writeonly buffer O4 { vec4 o4[]; };
layout(push_constant) uniform PC { vkt_dropout_push p; };

void ew_apply(uint q, uint m) {
    vec4 v;
    EW_LOAD(v, x, x4, q, m);
    // One division per vec4: its first element's row and index, then a step per lane. The lanes
    // past m (the last, partial vec4) draw a mask that is never stored.
    uint i = p.base + 4u * q;
    uint row = i / p.features, e = i - row * p.features;
    row += p.row0;
    vec4 r;
    [[unroll]] for (uint j = 0u; j < 4u; j++) {
        // A select, not x * mask: a dropped element is 0 even where in[i] is inf or NaN.
        r[j] = vkt_dropout_keep(p.key, p.threshold, row, e) ? v[j] * p.scale : 0.0;
        e++;
        if (e == p.features) {
            e = 0u;
            row++;
        }
    }
    EW_STORE(o, o4, q, m, r);
}

void main() { ew_run(p.n); }
