// embed_sort_local: the steps of the bitonic sort of keys[n2] (embed_abi.h) that stay inside a
// tile of TILE = 2 * local_size_x keys, in shared memory: k = 0 sorts each tile (every stage up
// to TILE, each tile in the direction its index gives, as the network's first stages do), k > 0
// runs the steps j = TILE / 2 .. 1 of merge stage k. Reads and writes keys[n2] (uvec2); one
// workgroup per tile (n2 / TILE of them, folded into y), two keys per lane.
#version 450
#include "vkt_abi.h"
#include "embed_abi.h"

layout(local_size_x_id = VKT_SPEC_LOCAL_X) in;
layout(std430, binding = 0) buffer K { uvec2 keys[]; };
layout(push_constant) uniform PC { vkt_embed_sort_push p; };

shared uvec2 tile[2 * gl_WorkGroupSize.x];

// The compare-exchange of this lane's pair at step j of stage k; base: the tile's first key.
void cmpx(uint base, uint k, uint j) {
    uint t = gl_LocalInvocationID.x;
    uint lo = ((t & ~(j - 1u)) << 1) | (t & (j - 1u)), hi = lo + j;
    bool up = ((base + lo) & k) == 0u;
    uvec2 a = tile[lo], b = tile[hi];
    bool greater = a.x > b.x || (a.x == b.x && a.y > b.y);
    if (greater == up) {
        tile[lo] = b;
        tile[hi] = a;
    }
    barrier();
}

void main() {
    uint group = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
    uint size = 2u * gl_WorkGroupSize.x, base = group * size;
    if (base >= p.n2) return; // the whole workgroup (folded grid)
    uint l = gl_LocalInvocationID.x;
    tile[l] = keys[base + l];
    tile[l + gl_WorkGroupSize.x] = keys[base + l + gl_WorkGroupSize.x];
    barrier();
    if (p.k == 0u) {
        for (uint k = 2u; k <= size; k <<= 1)
            for (uint j = k >> 1; j > 0u; j >>= 1) cmpx(base, k, j);
    } else {
        for (uint j = size >> 1; j > 0u; j >>= 1) cmpx(base, p.k, j);
    }
    keys[base + l] = tile[l];
    keys[base + l + gl_WorkGroupSize.x] = tile[l + gl_WorkGroupSize.x];
}
