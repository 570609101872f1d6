// scale: g[i] *= s for i < n. Reads and writes g[n], bound as float[] and vec4[]; 4*EW_K
// elements per invocation (ew.glsl).
#version 450
#extension GL_EXT_control_flow_attributes : require
#include "vkt_abi.h"
#include "ew.glsl"

layout(std430, binding = 0) buffer G { float g[]; };
layout(std430, binding = 1) buffer G4 { vec4 g4[]; };
layout(push_constant) uniform PC { vkt_scale_push p; };

void ew_apply(uint q, uint m) {
    vec4 v;
    EW_LOAD(v, g, g4, q, m);
    EW_STORE(g, g4, q, m, v * p.s);
}

void main() { ew_run(p.n); }
