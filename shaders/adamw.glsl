// adamw: one step of torch.optim.AdamW over n parameters.
// Reads g[n]; reads and writes p[n], m[n], v[n]: p *= 1 - lr*wd; m = b1 m + (1-b1) g;
// v = b2 v + (1-b2) g^2; p -= step_size * m / (sqrt(v) / bc2_sqrt + eps), with the bias
// corrections folded into step_size and bc2_sqrt on the host, in PyTorch's order of operations.
// Arrays bound as float[] and vec4[]; 4*EW_K elements per invocation (ew.glsl). Built as the
// kernels adamw and adamw_texel (shaders/variants.cmake), which defines EW_TEXEL and also binds
// g, p, m and v as uniform texel buffers (8-11) for the reads of whole vec4s.
#version 450
#extension GL_EXT_control_flow_attributes : require
#include "vkt_abi.h"
#include "ew.glsl"

layout(std430, binding = 0) readonly buffer G { float g[]; };
layout(std430, binding = 1) readonly buffer G4 { vec4 g4[]; };
layout(std430, binding = 2) buffer P { float param[]; };
layout(std430, binding = 3) buffer P4 { vec4 param4[]; };
layout(std430, binding = 4) buffer M { float m1[]; };
layout(std430, binding = 5) buffer M4 { vec4 m14[]; };
layout(std430, binding = 6) buffer V { float m2[]; };
layout(std430, binding = 7) buffer V4 { vec4 m24[]; };
layout(push_constant) uniform PC { vkt_adamw_push p; };
#ifdef EW_TEXEL
layout(binding = 8) uniform samplerBuffer gt;
layout(binding = 9) uniform samplerBuffer pt;
layout(binding = 10) uniform samplerBuffer mt;
layout(binding = 11) uniform samplerBuffer vt;
#define LOAD(v, a, a4, t, q, m) EW_LOAD_TEXEL(v, a, t, q, m)
#else
#define LOAD(v, a, a4, t, q, m) EW_LOAD(v, a, a4, q, m)
#endif

void ew_apply(uint q, uint m) {
    vec4 grad, w, a, b;
    LOAD(grad, g, g4, gt, q, m);
    LOAD(w, param, param4, pt, q, m);
    LOAD(a, m1, m14, mt, q, m);
    LOAD(b, m2, m24, vt, q, m);
    w *= p.decay;
    a = p.beta1 * a + (1.0 - p.beta1) * grad;
    b = p.beta2 * b + (1.0 - p.beta2) * grad * grad;
    EW_STORE(m1, m14, q, m, a);
    EW_STORE(m2, m24, q, m, b);
    w -= p.step_size * a / (sqrt(b) / p.bc2_sqrt + p.eps);
    EW_STORE(param, param4, q, m, w);
}

void main() { ew_run(p.n); }
