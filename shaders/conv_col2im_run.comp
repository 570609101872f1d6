// conv_col2im_run: conv_col2im.comp's input gradient (same values, the same order of the sums)
// for the convolutions conv_im2col_run.comp takes (stride 1, OW = W): then the entries of row
// k = (c, i, j) that im2col copied from plane x[b][c] are the row's sample-b block read from the
// fixed shift -((i - PH)*W + (j - PW)) on, so
//   dx[b][c][e] = sum over taps (i, j) in order of dcols[k][b*P + e - shift(i, j)]
// where the tap's output position lies inside the output. Reads dcols[K][nb*P] (binding 0, vec4
// texels); writes dx[nb][C][H][W] from element act_off of binding 1 (vec4s, overwritten). One
// invocation per (sample b, channel c), folded into y, walks the plane 4 elements at a time with
// one window per tap that slides a texel a step. The host checks H*W % 4 == 0, P % 4 == 0,
// OW >= 4 and the alignments.
#version 450
#extension GL_EXT_control_flow_attributes : require
#include "conv_abi.h"
#include "conv_geom.glsl"

layout(binding = 0) uniform samplerBuffer dct;
layout(std430, binding = 1) writeonly buffer DX4 { vec4 dx4[]; };
layout(push_constant) uniform PC { vkt_conv_push p; };

void main() {
    uint group = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
    uint u = group * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
    if (u >= p.nb * C) return;
    uint b = u / C, c = u - b * C;
    int last = textureSize(dct) - 1;
    // Per tap: its texel window (the texel of element 0's source and the next), its shift in
    // the texel.
    int t[KK], sh[KK];
    vec4 lo[KK];
    [[unroll]] for (uint r = 0u; r < KK; r++) {
        uint i = r / KW, j = r - i * KW;
        int shift = (int(i) - int(PH)) * int(W) + int(j) - int(PW);
        int s0 = int(((c * KK + r) * p.nb + b) * P) - shift;
        t[r] = s0 >> 2;
        sh[r] = s0 & 3;
        lo[r] = texelFetch(dct, clamp(t[r], 0, last));
    }
    uint at = (p.act_off + u * H * W) / 4u, h = 0u, w = 0u;
    for (uint e = 0u; e < H * W; e += 4u) {
        vec4 s = vec4(0.0);
        [[unroll]] for (uint r = 0u; r < KK; r++) {
            uint i = r / KW, j = r - i * KW;
            t[r]++;
            vec4 hi = texelFetch(dct, clamp(t[r], 0, last));
            vec4 v = sh[r] == 0 ? lo[r]
                     : sh[r] == 1 ? vec4(lo[r].yzw, hi.x)
                     : sh[r] == 2 ? vec4(lo[r].zw, hi.xy)
                                  : vec4(lo[r].w, hi.xyz);
            lo[r] = hi;
            [[unroll]] for (uint q = 0u; q < 4u; q++) {
                uint we = w + q, wrap = we >= W ? 1u : 0u;
                we -= wrap * W;
                // The output position this tap read element (h, we) for; unsigned wrap below 0.
                uint oh = h + wrap + PH - i, ow = we + PW - j;
                s[q] += oh < OH && ow < OW ? v[q] : 0.0;
            }
        }
        dx4[at++] = s;
        w += 4u;
        bool wrap = w >= W;
        w = wrap ? w - W : w;
        h += wrap ? 1u : 0u;
    }
}
