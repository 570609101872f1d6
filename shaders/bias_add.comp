// bias_add: y[R,N] += bias[N] for every row. Reads bias[N]; reads and writes y[R*N].
// One element per invocation, 1-D grid over R*N folded into y (group = y * numX + x).
#version 450
#include "vkt_abi.h"

layout(local_size_x_id = VKT_SPEC_LOCAL_X) in;
layout(std430, binding = 0) readonly buffer B { float bias[]; };
layout(std430, binding = 1) buffer Y { float y[]; };
layout(push_constant) uniform PC { vkt_bias_push p; };

void main() {
    uint i = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * gl_WorkGroupSize.x +
             gl_LocalInvocationID.x;
    if (i >= p.R * p.N) return;
    y[i] += bias[i % p.N];
}
