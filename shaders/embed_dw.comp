// embed_dw: the embedding's weight gradient from the sorted keys (embed_abi.h). Reads keys[n]
// (uvec2 (row, position), sorted) and dy[n, C]; for each run of equal rows in [r0, r0 + nr),
// adds to dw[row - r0, c] the sum of dy[position, c] over the run in position order (reads and
// writes dw[nr, C]; accumulates). One invocation per (key i, channel c), c fastest: the lane of
// a run's first key sums the run, the others return. Deterministic: no float atomics, and the
// order of every sum is fixed by the sorted keys. Workgroups folded into y.
#version 450
#include "vkt_abi.h"
#include "embed_abi.h"

layout(local_size_x_id = VKT_SPEC_LOCAL_X) in;
layout(std430, binding = 0) readonly buffer K { uvec2 keys[]; };
layout(std430, binding = 1) readonly buffer DY { float dy[]; };
layout(std430, binding = 2) buffer DW { float dw[]; };
layout(push_constant) uniform PC { vkt_embed_dw_push p; };

void main() {
    uint group = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
    uint e = group * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
    if (e >= p.n * p.C) return;
    uint i = e / p.C, c = e - i * p.C;
    uint row = keys[i].x;
    if (row - p.r0 >= p.nr) return;              // another chunk's row
    if (i > 0u && keys[i - 1u].x == row) return; // not the first key of its run
    float s = 0.0;
    for (uint j = i; j < p.n; j++) {
        uvec2 k = keys[j];
        if (k.x != row) break;
        s += dy[k.y * p.C + c];
    }
    dw[(row - p.r0) * p.C + c] += s;
}
