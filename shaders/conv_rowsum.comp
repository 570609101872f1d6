// conv_rowsum: db[R] += the sum of each row of dz[R, N] (a conv layer's bias gradient from a
// chunk's dZ = [OC][nb*P]). Reads dz[R*N]; reads and writes db[R]. One workgroup per row
// (folded into y): lane l sums columns l, l + WG, ... (neighbouring lanes read neighbouring
// floats), then the WG partial sums are added as a tree in shared memory, the same order every
// run (deterministic, no atomics). WG (local_size_x) is a power of two.
#version 450
#include "conv_abi.h"

layout(local_size_x_id = VKT_SPEC_LOCAL_X) in;
layout(std430, binding = 0) readonly buffer DZ { float dz[]; };
layout(std430, binding = 1) buffer DB { float db[]; };
layout(push_constant) uniform PC { vkt_conv_rowsum_push p; };

shared float part[gl_WorkGroupSize.x];

void main() {
    uint row = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
    if (row >= p.R) return; // the whole workgroup (folded grid)
    uint l = gl_LocalInvocationID.x;
    float acc = 0.0;
    for (uint n = l; n < p.N; n += gl_WorkGroupSize.x) acc += dz[row * p.N + n];
    part[l] = acc;
    barrier();
    for (uint s = gl_WorkGroupSize.x / 2u; s > 0u; s >>= 1) {
        if (l < s) part[l] += part[l + s];
        barrier();
    }
    if (l == 0u) db[row] += part[0];
}
