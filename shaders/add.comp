// add: z = x + a*y over n floats (a residual block's output: its input plus its body's).
// Reads x[n] and y[n], writes z[n], each bound as float[] and vec4[]; 4*EW_K elements per
// invocation (ew.glsl).
#version 450
#extension GL_EXT_control_flow_attributes : require
#include "vkt_abi.h"
#include "ew.glsl"

layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer X4 { vec4 x4[]; };
layout(std430, binding = 2) readonly buffer Y { float y[]; };
layout(std430, binding = 3) readonly buffer Y4 { vec4 y4[]; };
layout(std430, binding = 4) writeonly buffer Z { float z[]; };
layout(std430, binding = 5) writeonly buffer Z4 { vec4 z4[]; };
layout(push_constant) uniform PC { vkt_axpy_push p; };

void ew_apply(uint q, uint m) {
    vec4 a, b;
    EW_LOAD(a, x, x4, q, m);
    EW_LOAD(b, y, y4, q, m);
    EW_STORE(z, z4, q, m, a + p.a * b);
}

void main() { ew_run(p.n); }
