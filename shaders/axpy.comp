// axpy: y = a*x + y over n floats.
// Reads x[n]; reads and writes y[n]. One element per invocation, 1D grid (x + y*65535 groups are
// folded so that n up to 2^32 fits under maxComputeWorkGroupCount).
#version 450
#include "vkt_abi.h"

layout(local_size_x_id = VKT_SPEC_LOCAL_X) in;
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) buffer Y { float y[]; };
layout(push_constant) uniform PC { vkt_axpy_push p; };

void main() {
    uint i = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    if (i >= p.n) return;
    y[i] = p.a * x[i] + y[i];
}
