// sgd: one step of torch.optim.SGD (dampening 0) over n parameters.
// Reads g[n]; reads and writes p[n] and, when p.mode != 0, buf[n] (the momentum buffer; with
// mode 0 it is untouched and bound to p). d = g + wd*p; buf = momentum*buf + d;
// d = nesterov ? d + momentum*buf : buf; p -= lr*d. Arrays bound as float[] and vec4[]; 4*EW_K
// elements per invocation (ew.glsl). Built as the kernels sgd and sgd_texel (shaders/variants.cmake),
// which defines EW_TEXEL and also binds g, p and buf as uniform texel buffers (6, 7, 8) for the
// reads of whole vec4s.
#version 450
#extension GL_EXT_control_flow_attributes : require
#include "vkt_abi.h"
#include "ew.glsl"
#include "sgd_fn.glsl"

layout(std430, binding = 0) readonly buffer G { float g[]; };
layout(std430, binding = 1) readonly buffer G4 { vec4 g4[]; };
layout(std430, binding = 2) buffer P { float param[]; };
layout(std430, binding = 3) buffer P4 { vec4 param4[]; };
layout(std430, binding = 4) buffer B { float buf[]; };
layout(std430, binding = 5) buffer B4 { vec4 buf4[]; };
layout(push_constant) uniform PC { vkt_sgd_push p; };
#ifdef EW_TEXEL
layout(binding = 6) uniform samplerBuffer gt;
layout(binding = 7) uniform samplerBuffer pt;
layout(binding = 8) uniform samplerBuffer bt;
#define LOAD(v, a, a4, t, q, m) EW_LOAD_TEXEL(v, a, t, q, m)
#else
#define LOAD(v, a, a4, t, q, m) EW_LOAD(v, a, a4, q, m)
#endif

void ew_apply(uint q, uint m) {
    vec4 w, d, b = vec4(0.0);
    LOAD(w, param, param4, pt, q, m);
    LOAD(d, g, g4, gt, q, m);
    if (p.mode != 0) {
        LOAD(b, buf, buf4, bt, q, m);
    }
    w = sgd_step(d, w, b, p.lr, p.momentum, p.weight_decay, p.mode);
    if (p.mode != 0) {
        EW_STORE(buf, buf4, q, m, b);
    }
    EW_STORE(param, param4, q, m, w);
}

void main() { ew_run(p.n); }
