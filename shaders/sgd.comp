// sgd: one step of torch.optim.SGD (dampening 0) over n parameters.
// Reads g[n]; reads and writes p[n] and, when p.mode != 0, buf[n] (the momentum buffer; with
// mode 0 it is untouched and bound to p). d = g + wd*p; buf = momentum*buf + d;
// d = nesterov ? d + momentum*buf : buf; p -= lr*d. Arrays bound as float[] and vec4[]; 4*EW_K
// elements per invocation (ew.glsl).
#version 450
#extension GL_EXT_control_flow_attributes : require
#include "vkt_abi.h"
#include "ew.glsl"

layout(std430, binding = 0) readonly buffer G { float g[]; };
layout(std430, binding = 1) readonly buffer G4 { vec4 g4[]; };
layout(std430, binding = 2) buffer P { float param[]; };
layout(std430, binding = 3) buffer P4 { vec4 param4[]; };
layout(std430, binding = 4) buffer B { float buf[]; };
layout(std430, binding = 5) buffer B4 { vec4 buf4[]; };
layout(push_constant) uniform PC { vkt_sgd_push p; };

void ew_apply(uint q, uint m) {
    vec4 w, d, b;
    EW_LOAD(w, param, param4, q, m);
    EW_LOAD(d, g, g4, q, m);
    if (p.weight_decay != 0.0) d += p.weight_decay * w;
    if (p.mode != 0) {
        EW_LOAD(b, buf, buf4, q, m);
        b = p.momentum * b + d;
        EW_STORE(buf, buf4, q, m, b);
        d = p.mode == 2 ? d + p.momentum * b : b;
    }
    w -= p.lr * d;
    EW_STORE(param, param4, q, m, w);
}

void main() { ew_run(p.n); }
