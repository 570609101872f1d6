// embed_fwd: the embedding's forward, a gather of table rows. Reads ids[n] (float token ids) and
// w[nr, C] (rows [r0, r0 + nr) of the [V, C] table); writes y[p, c] = w[row(ids[p]) - r0, c] for
// the positions whose row is bound (embed_abi.h: the row rule and the chunks); with count = 1
// adds the number of ids that are not whole numbers in [0, V) to bad[0]. One invocation per
// output float (p, c), c fastest, so that neighbouring lanes read and write neighbouring floats;
// workgroups folded into y.
#version 450
#include "vkt_abi.h"
#include "embed_abi.h"

layout(local_size_x_id = VKT_SPEC_LOCAL_X) in;
layout(std430, binding = 0) readonly buffer I { float ids[]; };
layout(std430, binding = 1) readonly buffer W { float w[]; };
layout(std430, binding = 2) writeonly buffer Y { float y[]; };
layout(std430, binding = 3) buffer N { uint bad[]; };
layout(push_constant) uniform PC { vkt_embed_push p; };

void main() {
    uint group = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
    uint e = group * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
    if (e >= p.n * p.C) return;
    uint pos = e / p.C, c = e - pos * p.C;
    float id = ids[pos];
    // Truncated toward zero and clamped (NaN fails id >= 1 and reads row 0).
    uint row = id >= 1.0 ? uint(min(id, float(p.V - 1u))) : 0u;
    if (p.count != 0u && c == 0u && !(id >= 0.0 && id < float(p.V) && fract(id) == 0.0))
        atomicAdd(bad[0], 1u);
    if (row - p.r0 < p.nr) y[e] = w[(row - p.r0) * p.C + c];
}
