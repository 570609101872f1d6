// conv_im2col_run: the columns of conv_im2col.comp (same layout, same values) for a stride-1
// convolution whose output is as wide as its input (KW = 2*PW + 1, so OW = W): then row
// k = (c, i, j) of sample b's columns is the input plane x[b][c] read from the fixed shift
// (i - PH)*W + (j - PW) on, with zeros where the tap falls in the padding. Reads x[nb][C][H][W]
// from element act_off of binding 0 (vec4 texels); writes cols[K][nb*P] (binding 1, vec4s).
// One invocation per (row k, sample b), folded into y, walks the sample's P columns 4 at a time;
// its window of the plane slides one texel a step, so each texel is fetched once. The host
// checks P % 4 == 0 (a vec4 of columns stays inside one sample and is aligned), OW >= 4, and
// that the views are texel- and vec4-aligned.
//
// Why: on lavapipe a storage-buffer load is a loop over the lanes with a branch per lane and
// component; conv_im2col.comp makes four such scalar loads per vec4 it writes, this kernel one
// branch-free texel fetch.
#version 450
#extension GL_EXT_control_flow_attributes : require
#include "conv_abi.h"
#include "conv_geom.glsl"

layout(binding = 0) uniform samplerBuffer xt;
layout(std430, binding = 1) writeonly buffer COLS4 { vec4 cols4[]; };
layout(push_constant) uniform PC { vkt_conv_push p; };

vec4 fetch(int t, int last) { return texelFetch(xt, clamp(t, 0, last)); }

void main() {
    uint group = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
    uint w = group * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
    if (w >= K * p.nb) return;
    uint k = w / p.nb, b = w - k * p.nb;
    uint c = k / KK, r = k - c * KK;
    uint i = r / KW, j = r - i * KW;
    // The source of column 0 (may lie before the plane: those taps are all padding), as a texel
    // and a float within it.
    int s0 = int(p.act_off + (b * C + c) * H * W) + (int(i) - int(PH)) * int(W) + int(j) - int(PW);
    int t = s0 >> 2, sh = s0 & 3, last = textureSize(xt) - 1;
    vec4 lo = fetch(t, last);
    uint at = (k * p.n + b * P) / 4u, oh = 0u, ow = 0u;
    for (uint q = 0u; q < P; q += 4u) {
        t++;
        vec4 hi = fetch(t, last);
        vec4 v = sh == 0 ? lo
                 : sh == 1 ? vec4(lo.yzw, hi.x)
                 : sh == 2 ? vec4(lo.zw, hi.xy)
                           : vec4(lo.w, hi.xyz);
        lo = hi;
        [[unroll]] for (uint e = 0u; e < 4u; e++) {
            uint we = ow + e, wrap = we >= OW ? 1u : 0u;
            we -= wrap * OW;
            // Unsigned: a tap before the image wraps to a huge value.
            uint ih = oh + wrap + i - PH, iw = we + j - PW;
            v[e] = ih < H && iw < W ? v[e] : 0.0;
        }
        cols4[at++] = v;
        // (The same steps in every lane: a select, not a branch.)
        ow += 4u;
        bool wrap = ow >= OW;
        ow = wrap ? ow - OW : ow;
        oh += wrap ? 1u : 0u;
    }
}
