// attn_stats: the row terms of the attention backward, per sample b, head h and row t:
//   stats[b, h, t] = (lse[b, h, t], delta, 0, 0),
//   delta = sum_d do[b*T + t, h*D + d] * o[b*T + t, h*D + d]  (FlashAttention-2's D_i),
// one vec4 per row, so that attn_bwd reads both with one load (one texel fetch on lavapipe).
// Reads o and do [nb*T, C], lse [nb, heads, T]; writes stats [nb, heads, T, 4]. One invocation
// per (b, h, t) in that order; workgroups folded into y.
#version 450
#extension GL_EXT_control_flow_attributes : require
#include "vkt_abi.h"
#include "attn_abi.h"
#include "attn_common.glsl"

layout(std430, binding = 0) readonly buffer O { float o[]; };
layout(std430, binding = 1) readonly buffer DO { float dout[]; };
layout(std430, binding = 2) readonly buffer LSE { float lse[]; };
layout(std430, binding = 3) writeonly buffer STATS { float stats[]; };

void main() {
    uint group = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
    uint n = group * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
    if (n >= p.nb * p.heads * p.T) return;
    uint bh = n / p.T, t = n - bh * p.T, b = bh / p.heads, h = bh - b * p.heads;
    uint orow = attn_row_at(p.o_base, b, t, h * D), grow = attn_row_at(p.do_base, b, t, h * D);
    float s = 0.0;
    for (uint d4 = 0u; d4 < D4; d4++) {
        vec4 x, g;
        ATTN_LOAD4(x, o, orow, d4);
        ATTN_LOAD4(g, dout, grow, d4);
        s += dot(x, g);
    }
    uint e = p.stats_base + 4u * n;
    stats[e] = lse[p.lse_base + n];
    stats[e + 1u] = s;
    stats[e + 2u] = 0.0;
    stats[e + 3u] = 0.0;
}
