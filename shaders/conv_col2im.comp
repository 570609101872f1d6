// conv_col2im: the input gradient of a chunk of nb samples from the gradient of its columns.
// Reads dcols[K][nb*P] (binding 0; the layout of conv_im2col); writes dx[nb][C][H][W] from
// element act_off of binding 1 (overwritten). Gather form: each input element sums, in a fixed
// order, the column entries that im2col copied from it, so no two invocations write one float
// (no atomics, the same result every run). One invocation per input element; workgroups folded
// into y.
#version 450
#include "conv_abi.h"
#include "conv_geom.glsl"

layout(std430, binding = 0) readonly buffer DCOLS { float dcols[]; };
layout(std430, binding = 1) writeonly buffer DX { float dx[]; };
layout(push_constant) uniform PC { vkt_conv_push p; };

void main() {
    uint group = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
    uint e = group * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
    if (e >= p.n) return;
    uint t = e / W, w = e - t * W;
    uint u = t / H, h = t - u * H;
    uint b = u / C, c = u - b * C;
    uint np = p.nb * P, hp = h + PH, wp = w + PW;
    float s = 0.0;
    // Every tap (i, j), a fixed count once the geometry is specialized, with the load outside
    // any branch (a loop whose trip count and loads vary by lane took about three times as long
    // on lavapipe): tap (i, j) read (h, w) for the output (oh, ow) = ((h + PH - i) / SH,
    // (w + PW - j) / SW) where both divide exactly and lie inside the output.
    for (uint i = 0u; i < KH; i++) {
        uint th = hp - i, oh = th / SH;
        bool okh = i <= hp && oh * SH == th && oh < OH;
        for (uint j = 0u; j < KW; j++) {
            uint tw = wp - j, ow = tw / SW;
            bool ok = okh && j <= wp && ow * SW == tw && ow < OW;
            float f = dcols[ok ? ((c * KH + i) * KW + j) * np + b * P + oh * OW + ow : 0u];
            if (ok) s += f;
        }
    }
    dx[p.act_off + e] = s;
}
