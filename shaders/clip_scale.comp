// clip_scale: gradient clipping as torch.nn.utils.clip_grad_norm_. Reads sumsq[0] (the squared
// total norm, from sumsq.comp); reads and writes g[n] (bound as float[] and vec4[]; ew.glsl):
// g *= min(1, max_norm / (sqrt(sumsq) + 1e-6)). The factor is read on the device, so clipping
// needs no host round trip.
#version 450
#extension GL_EXT_control_flow_attributes : require
#include "vkt_abi.h"
#include "ew.glsl"

layout(std430, binding = 0) readonly buffer S { float sumsq[]; };
layout(std430, binding = 1) buffer G { float g[]; };
layout(std430, binding = 2) buffer G4 { vec4 g4[]; };
layout(push_constant) uniform PC { vkt_scale_push p; }; // p.s = max_norm

float coef;

void ew_apply(uint q, uint m) {
    vec4 v;
    EW_LOAD(v, g, g4, q, m);
    EW_STORE(g, g4, q, m, v * coef);
}

void main() {
    coef = min(p.s / (sqrt(sumsq[0]) + 1e-6), 1.0); // one uniform load per invocation
    ew_run(p.n);
}
