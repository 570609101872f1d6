// add: z = x + a*y over n floats (a residual block's output: its input plus its body's).
// Reads x[n] and y[n], writes z[n]. One element per invocation, the 1D grid of axpy.comp.
#version 450
#include "vkt_abi.h"

layout(local_size_x_id = VKT_SPEC_LOCAL_X) in;
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer Y { float y[]; };
layout(std430, binding = 2) writeonly buffer Z { float z[]; };
layout(push_constant) uniform PC { vkt_axpy_push p; };

void main() {
    uint i = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    if (i >= p.n) return;
    z[i] = x[i] + p.a * y[i];
}
