// embed_pos: the position embedding's forward, y[b, t, c] = x[b, t, c] + w[t, c]. Reads x[n] and
// w[TC] (the first T rows of the [max_len, C] table, TC = T * C), writes y[n] = x + w[i % TC]
// (the dispatch starts on a sample). x and y are bound as float[] and vec4[]; 4*EW_K elements per
// invocation (ew.glsl); w is read a float at a time (its index wraps at TC, any TC).
#version 450
#extension GL_EXT_control_flow_attributes : require
#include "vkt_abi.h"
#include "embed_abi.h"
#include "ew.glsl"

layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer X4 { vec4 x4[]; };
layout(std430, binding = 2) readonly buffer W { float w[]; };
layout(std430, binding = 3) writeonly buffer Y { float y[]; };
layout(std430, binding = 4) writeonly buffer Y4 { vec4 y4[]; };
layout(push_constant) uniform PC { vkt_embed_pos_push p; };

void ew_apply(uint q, uint m) {
    vec4 v;
    EW_LOAD(v, x, x4, q, m);
    // One modulo per vec4, then a step per lane (lanes past m read a valid w and store nothing).
    uint t = (4u * q) % p.TC;
    [[unroll]] for (uint j = 0u; j < 4u; j++) {
        v[j] += w[t];
        t = t + 1u == p.TC ? 0u : t + 1u;
    }
    EW_STORE(y, y4, q, m, v);
}

void main() { ew_run(p.n); }
