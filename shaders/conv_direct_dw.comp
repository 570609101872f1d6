// conv_direct_dw.comp: the weight gradient of a stride-1 convolution whose output is as large as
// its input ("same" padding), straight from the activations (no columns, no permute), in parts
// of the chunk's positions: part z of the positions [4 z p.pieces, 4 (z + 1) p.pieces) writes
//   part[z][oc][c KH KW + i KW + j] = sum over its positions (b, y, x) of
//                                     dy[b][oc][y][x] x[b][c][y + i - PH][x + j - PW]
// (x taken as 0 outside its plane) and, with BIAS, part[z][oc][C KH KW] = the sum of dy[b][oc]
// over those positions; each sum in position order. conv_dw_reduce then adds the parts, in
// order, into dW (and db): the gradient accumulates over chunks.
//
// Bindings: 0 = dy as vec4 texels (the chunk's samples from element p.dy_off), 1 = x as vec4
// texels (from p.x_off), 2 = the parts [parts][OC][NB], NB = C KH KW (+ 1 with BIAS). The host
// (engine/ops/conv_ops.c, vkt_op_conv_direct_dw) uses it where P = H*W and the offsets are
// multiples of 4, on devices whose subgroups hold the workgroup's WG lanes and shuffle.
//
// One workgroup (one subgroup of WG lanes) computes TM output channels x WG input channels, all
// taps: lane l owns input channel c0 + l and keeps TM x KH KW sums. Each step takes 8 positions
// as two pieces of 4 (each inside one sample: P % 4 == 0): the lanes fetch dy's TM rows of each
// piece (one texel a row) and subgroupShuffle hands each value to every lane; each lane reads
// its channel's window of KW + 3 floats per kernel row (NWIN aligned texels, as
// conv_direct.comp), zeroed where a tap falls outside the plane; then each sum takes the step's
// 8 positions in a row (a CPU driver keeps the sums in memory: one load and store per step).
//
// Why: the columns' path writes K*P columns a sample (im2col) and the output gradient permuted,
// one lane at a time through lavapipe's store loop, before its product; on fashion_cnn's second
// conv that was 25 ms of a 90 ms step on lavapipe (docs/PERFORMANCE.md).
#version 450
#extension GL_EXT_control_flow_attributes : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#include "conv_abi.h"

layout(local_size_x_id = VKT_SPEC_LOCAL_X, local_size_y_id = VKT_SPEC_LOCAL_Y,
       local_size_z_id = VKT_SPEC_LOCAL_Z) in;
layout(constant_id = VKT_SPEC_CONV_C) const uint C = 1;
layout(constant_id = VKT_SPEC_CONV_H) const uint H = 1;
layout(constant_id = VKT_SPEC_CONV_W) const uint W = 4;
layout(constant_id = VKT_SPEC_CONV_KH) const uint KH = 1;
layout(constant_id = VKT_SPEC_CONV_KW) const uint KW = 1;
layout(constant_id = VKT_SPEC_CONV_PH) const uint PH = 0;
layout(constant_id = VKT_SPEC_CONV_PW) const uint PW = 0;
layout(constant_id = VKT_SPEC_CONV_DIRECT_TM) const uint TM = 32;
layout(constant_id = VKT_SPEC_CONV_DIRECT_BIAS) const bool BIAS = false;

layout(binding = 0) uniform samplerBuffer dyt;
layout(binding = 1) uniform samplerBuffer xt;
layout(std430, binding = 2) writeonly buffer Part { float part[]; };
layout(push_constant) uniform PC { vkt_conv_direct_dw_push p; };

const uint P = H * W;
const uint KK = KH * KW;
const uint WG = gl_WorkGroupSize.x;
const uint NA = (TM + WG - 1) / WG; // dy's texels per lane per piece
const uint NWIN = (KW + 9) / 4;     // texels of a window: ceil((3 + KW + 3) / 4)

void main() {
    uint lane = gl_SubgroupInvocationID;
    uint oc0 = gl_WorkGroupID.x * TM, c = gl_WorkGroupID.y * WG + lane;
    uint cl = min(c, C - 1);
    uint npieces = p.n / 4;
    uint first = gl_WorkGroupID.z * p.pieces, end = min(first + p.pieces, npieces);
    int last_dy = int(p.ntex_dy) - 1, last_x = int(p.ntex_x) - 1;

    float acc[TM][KK];
    float bacc[TM];
    [[unroll]] for (uint r = 0; r < TM; r++) {
        bacc[r] = 0.0;
        [[unroll]] for (uint t = 0; t < KK; t++) acc[r][t] = 0.0;
    }

    for (uint pc = first; pc < end; pc += 2) {
        // a[h][i]: dy rows oc0 + i * WG + lane of piece h (clamped rows feed no stored sum); v:
        // x at each tap of each of the 8 positions; a piece past the end (the part's last step
        // when its piece count is odd) reads piece pc again with every tap zeroed.
        vec4 av[2][NA];
        float v[KK][8];
        [[unroll]] for (uint h = 0; h < 2; h++) {
            bool live = pc + h < end;
            uint pos = 4 * (live ? pc + h : pc);
            uint b = pos / P, pp = pos % P;
            [[unroll]] for (uint i = 0; i < NA; i++) {
                uint oc = min(oc0 + i * WG + lane, p.OC - 1);
                int t = int((p.dy_off + (b * p.OC + oc) * P + pp) / 4);
                av[h][i] = texelFetch(dyt, min(t, last_dy));
            }
            int xb = int(p.x_off + (b * C + cl) * P + pp);
            bool rok[4][KH], cok[4][KW];
            [[unroll]] for (uint q = 0; q < 4; q++) {
                int y = int((pp + q) / W), x = int((pp + q) % W);
                [[unroll]] for (uint i = 0; i < KH; i++) {
                    int yi = y + int(i) - int(PH);
                    rok[q][i] = live && yi >= 0 && yi < int(H);
                }
                [[unroll]] for (uint j = 0; j < KW; j++) {
                    int xj = x + int(j) - int(PW);
                    cok[q][j] = xj >= 0 && xj < int(W);
                }
            }
            [[unroll]] for (uint i = 0; i < KH; i++) {
                int s = (int(i) - int(PH)) * int(W) - int(PW);
                int r = ((s % 4) + 4) % 4;
                int t = (xb + s - r) / 4; // xb, s - r: multiples of 4
                vec4 win[NWIN];
                [[unroll]] for (uint u = 0; u < NWIN; u++)
                    win[u] = texelFetch(xt, clamp(t + int(u), 0, last_x));
                [[unroll]] for (uint j = 0; j < KW; j++)
                    [[unroll]] for (uint q = 0; q < 4; q++) {
                        uint e = uint(r) + j + q;
                        v[i * KW + j][h * 4 + q] = rok[q][i] && cok[q][j] ? win[e / 4][e % 4] : 0.0;
                    }
            }
        }
        [[unroll]] for (uint rr = 0; rr < TM; rr++) {
            float a[8];
            [[unroll]] for (uint h = 0; h < 2; h++)
                [[unroll]] for (uint q = 0; q < 4; q++)
                    a[h * 4 + q] = subgroupShuffle(av[h][rr / WG][q], rr % WG);
            [[unroll]] for (uint t = 0; t < KK; t++) {
                float s = acc[rr][t];
                [[unroll]] for (uint k = 0; k < 8; k++) s = fma(a[k], v[t][k], s);
                acc[rr][t] = s;
            }
            if (BIAS) {
                // A piece past the end adds dy of piece pc again: not for the bias.
                float s = bacc[rr];
                [[unroll]] for (uint k = 0; k < 4; k++) s += a[k];
                if (pc + 1 < end)
                    [[unroll]] for (uint k = 4; k < 8; k++) s += a[k];
                bacc[rr] = s;
            }
        }
    }

    uint NB = C * KK + (BIAS ? 1 : 0);
    [[unroll]] for (uint rr = 0; rr < TM; rr++) {
        uint oc = oc0 + rr;
        if (oc < p.OC) {
            uint base = (gl_WorkGroupID.z * p.OC + oc) * NB;
            if (c < C) [[unroll]] for (uint t = 0; t < KK; t++) part[base + c * KK + t] = acc[rr][t];
            if (BIAS && c == 0) part[base + C * KK] = bacc[rr];
        }
    }
}
