// act.glsl: the activation kernels act_<name>_<fwd|bwd|bwdy>, built from this file by
// shaders/variants.cmake with ACT (one of act_fn.glsl's ACT_*) and BACKWARD (0 forward, 1 backward
// from the input, 2 backward from the output) defined. The functions themselves live in
// act_fn.glsl, shared with the matmul epilogue (mm_epilogue.glsl). They are separate kernels, not
// specialization constants, because SwiftShader runs every branch on a specialization constant
// (docs/PERFORMANCE.md, "The other kernels").
// Forward (BACKWARD = 0): reads x[n], writes out[n] = f(x) (out may alias x; bindings 2-3 are
// unused and bound to x). Backward (1): reads x[n] (the forward's input) and dy[n], writes
// out[n] = dy * f'(x) (out may alias dy). Backward from the output (2): the same with the
// forward's output y = f(x) bound in place of x (only for what act_grad_y covers: the network
// uses it for activations fused into the matmul before them, whose input is not kept).
// Each array is bound as float[] and vec4[]; 4*EW_K elements per invocation (ew.glsl).
#version 450
#extension GL_EXT_control_flow_attributes : require
#include "vkt_abi.h"
#include "ew.glsl"
#include "act_fn.glsl"

layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer X4 { vec4 x4[]; };
layout(std430, binding = 2) readonly buffer DY { float dy[]; };
layout(std430, binding = 3) readonly buffer DY4 { vec4 dy4[]; };
layout(std430, binding = 4) writeonly buffer O { float o[]; };
layout(std430, binding = 5) writeonly buffer O4 { vec4 o4[]; };
layout(push_constant) uniform PC { vkt_act_push p; };

void ew_apply(uint q, uint m) {
    vec4 v, r;
    EW_LOAD(v, x, x4, q, m);
#if BACKWARD
    vec4 d;
    EW_LOAD(d, dy, dy4, q, m);
#if BACKWARD == 2
    r = d * act_grad_y(ACT, p.alpha, v);
#else
    r = d * act_grad_x(ACT, p.alpha, v);
#endif
#else
    r = act_forward(ACT, p.alpha, v);
#endif
    EW_STORE(o, o4, q, m, r);
}

void main() { ew_run(p.n); }
