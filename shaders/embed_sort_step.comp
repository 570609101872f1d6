// embed_sort_step: one compare-exchange step (k, j) of the bitonic sort of keys[n2] by (row,
// position) (embed_abi.h), for a j of at least the tile (smaller ones run in embed_sort_local).
// Reads and writes keys[n2] (uvec2); one invocation per pair (n2 / 2); workgroups folded into y.
#version 450
#include "vkt_abi.h"
#include "embed_abi.h"

layout(local_size_x_id = VKT_SPEC_LOCAL_X) in;
layout(std430, binding = 0) buffer K { uvec2 keys[]; };
layout(push_constant) uniform PC { vkt_embed_sort_push p; };

void main() {
    uint group = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
    uint t = group * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
    if (t >= p.n2 / 2u) return;
    uint lo = ((t & ~(p.j - 1u)) << 1) | (t & (p.j - 1u)), hi = lo + p.j;
    bool up = (lo & p.k) == 0u;
    uvec2 a = keys[lo], b = keys[hi];
    bool greater = a.x > b.x || (a.x == b.x && a.y > b.y);
    if (greater == up) {
        keys[lo] = b;
        keys[hi] = a;
    }
}
