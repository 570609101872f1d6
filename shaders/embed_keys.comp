// embed_keys: the sort keys of the embedding's backward. Reads ids[n] (float token ids); writes
// keys[i] = (row(ids[i]), i) for i < n and (VKT_EMBED_NO_ROW, i) for n <= i < n2 (embed_abi.h:
// the row rule). One invocation per key; workgroups folded into y.
#version 450
#include "vkt_abi.h"
#include "embed_abi.h"

layout(local_size_x_id = VKT_SPEC_LOCAL_X) in;
layout(std430, binding = 0) readonly buffer I { float ids[]; };
layout(std430, binding = 1) writeonly buffer K { uvec2 keys[]; };
layout(push_constant) uniform PC { vkt_embed_keys_push p; };

void main() {
    uint group = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
    uint i = group * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
    if (i >= p.n2) return;
    uint row = VKT_EMBED_NO_ROW;
    if (i < p.n) {
        float id = ids[i];
        row = id >= 1.0 ? uint(min(id, float(p.V - 1u))) : 0u;
    }
    keys[i] = uvec2(row, i);
}
