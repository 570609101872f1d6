// conv_direct.comp: a stride-1 convolution whose output is as large as its input ("same"
// padding), forward or input gradient, computed straight from the activations (no columns): for
// a chunk of samples, every output row (channel) m < R and position (y, x) of an H x W plane,
//   FWD = 1:  out[b][m][y][x] = bias[m] + sum over c < I, i < KH, j < KW of
//                               A[c][m][i][j] in[b][c][y + i - PH][x + j - PW]
//   FWD = 0:  out[b][m][y][x] = sum over c < I, i < KH, j < KW of
//                               A[c][m][i][j] in[b][c][y + PH - i][x + PW - j]
// (in taken as 0 outside its plane), each sum in the order c, then i, then j (bias first).
// The forward has out = y, in = x, R = OC, I = C and A the weight transposed to [C][OC][KH][KW];
// the input gradient has out = dx, in = dy, R = C, I = OC and A the weight [OC][C][KH][KW]
// itself. Overwrites out.
//
// Bindings: 0 = in as vec4 texels (the chunk's samples from element p.in_off), 1 = A as vec4
// texels, 2 = out as vec4s (the chunk's samples from element p.out_off), 3 = bias (BIAS only).
// The host (engine/ops/conv_ops.c, vkt_conv_direct) uses it where P = H*W, R*KH*KW and both
// offsets are multiples of 4, on devices whose subgroups hold the workgroup's WG lanes and shuffle.
//
// One workgroup (one subgroup of WG lanes) computes TM rows x 8 WG positions; lane l owns the 8
// consecutive positions (of the chunk's n = nb*P) from (group_y * WG + l) * 8, as two vec4
// pieces, each inside one sample (P % 4 == 0). For each c the lanes fetch A's TM*KH*KW floats of
// that c (contiguous: rows m0 .. m0 + TM - 1) and subgroupShuffle hands each float to every
// lane, as the matmul's texel kernel does with a's tile; for each kernel row i a piece's values
// of the KW taps are one window of KW + 3 floats, read as NWIN aligned texels (its start's place
// in a texel is a constant: the planes start on multiples of 4), and each tap is a fixed
// selection from it, zeroed where the tap falls outside the plane (masks computed once). Each
// accumulator then takes the KH*KW taps of c in a row (a CPU driver keeps the accumulators in
// memory: one load and store per c).
//
// Why: the im2col path writes K*P columns a sample (and, for the input gradient, sums them back
// with col2im), one lane at a time through lavapipe's store loop; this writes the R*P outputs
// only. On fashion_cnn's second conv (32 -> 64 channels, 3x3 on 14x14) the input gradient took
// 29 ms of a 121 ms step on lavapipe that way, 10 ms this way (docs/PERFORMANCE.md).
#version 450
#extension GL_EXT_control_flow_attributes : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#include "conv_abi.h"

layout(local_size_x_id = VKT_SPEC_LOCAL_X, local_size_y_id = VKT_SPEC_LOCAL_Y,
       local_size_z_id = VKT_SPEC_LOCAL_Z) in;
layout(constant_id = VKT_SPEC_CONV_C) const uint R = 1;
layout(constant_id = VKT_SPEC_CONV_H) const uint H = 1;
layout(constant_id = VKT_SPEC_CONV_W) const uint W = 4;
layout(constant_id = VKT_SPEC_CONV_KH) const uint KH = 1;
layout(constant_id = VKT_SPEC_CONV_KW) const uint KW = 1;
layout(constant_id = VKT_SPEC_CONV_PH) const uint PH = 0;
layout(constant_id = VKT_SPEC_CONV_PW) const uint PW = 0;
layout(constant_id = VKT_SPEC_CONV_DIRECT_TM) const uint TM = 32;
layout(constant_id = VKT_SPEC_CONV_DIRECT_FWD) const bool FWD = false;
layout(constant_id = VKT_SPEC_CONV_DIRECT_BIAS) const bool BIAS = false;

layout(binding = 0) uniform samplerBuffer src;
layout(binding = 1) uniform samplerBuffer at;
layout(std430, binding = 2) writeonly buffer Out { vec4 out4[]; };
layout(std430, binding = 3) readonly buffer Bias { float bias[]; };
layout(push_constant) uniform PC { vkt_conv_direct_push p; };

const uint P = H * W;
const uint KK = KH * KW;
const uint WG = gl_WorkGroupSize.x;
const uint NA = (TM * KK / 4 + WG - 1) / WG; // A's texels per lane per c
const uint NWIN = (KW + 9) / 4;              // texels of a piece's window: ceil((3 + KW + 3) / 4)

// The shift of tap (i, j) from the output's position: rows di(i), columns dj(j).
int di(uint i) { return FWD ? int(i) - int(PH) : int(PH) - int(i); }
int dj(uint j) { return FWD ? int(j) - int(PW) : int(PW) - int(j); }

void main() {
    uint lane = gl_SubgroupInvocationID;
    uint m0 = gl_WorkGroupID.x * TM;
    uint nfirst = (gl_WorkGroupID.y * WG + lane) * 8;
    // The lowest column shift of a row's taps (j = 0 forward, KW - 1 backward).
    const int djmin = FWD ? -int(PW) : int(PW) - int(KW - 1);
    // Each piece h: its first position n (clamped inside the chunk: a piece past the end reads
    // the last one and is not stored), its sample's plane 0 in `in` plus the position, and the
    // masks of its 4 positions' taps.
    int inb[2];
    bool ok[8][KK];
    [[unroll]] for (uint h = 0; h < 2; h++) {
        uint n = min(nfirst + 4 * h, p.n - 4);
        uint b = n / P, pp = n % P;
        inb[h] = int(p.in_off + b * p.I * P + pp);
        [[unroll]] for (uint q = 0; q < 4; q++) {
            int y = int((pp + q) / W), x = int((pp + q) % W);
            [[unroll]] for (uint i = 0; i < KH; i++) {
                int yi = y + di(i);
                [[unroll]] for (uint j = 0; j < KW; j++) {
                    int xj = x + dj(j);
                    ok[h * 4 + q][i * KW + j] = yi >= 0 && yi < int(H) && xj >= 0 && xj < int(W);
                }
            }
        }
    }
    int last_in = int(p.ntex_in) - 1, last_a = int(p.ntex_a) - 1;

    vec4 acc[TM][2];
    [[unroll]] for (uint r = 0; r < TM; r++) {
        float b0 = BIAS ? bias[min(m0 + r, R - 1)] : 0.0;
        acc[r][0] = acc[r][1] = vec4(b0);
    }

    for (uint c = 0; c < p.I; c++) {
        // A[c][m0 ..][..][..]: TM*KK floats from a multiple of 4; lane l holds texels i*WG + l.
        int abase = int((c * R + m0) * KK / 4);
        vec4 av[NA];
        [[unroll]] for (uint i = 0; i < NA; i++)
            av[i] = texelFetch(at, min(abase + int(i * WG + lane), last_a));
        // v[i * KW + j][h] = in at tap (i, j) of piece h's 4 positions (0 outside the plane). The
        // window of row i starts at shift s = di(i) W + djmin from the position (tap j at
        // s + dj(j) - djmin); r = s mod 4 is where it starts in its first texel.
        vec4 v[KK][2];
        [[unroll]] for (uint i = 0; i < KH; i++) {
            int s = di(i) * int(W) + djmin;
            int r = ((s % 4) + 4) % 4;
            [[unroll]] for (uint h = 0; h < 2; h++) {
                vec4 win[NWIN];
                int t = (inb[h] + int(c * P) + s - r) / 4; // inb, c * P, s - r: multiples of 4
                [[unroll]] for (uint u = 0; u < NWIN; u++)
                    win[u] = texelFetch(src, clamp(t + int(u), 0, last_in));
                [[unroll]] for (uint j = 0; j < KW; j++)
                    [[unroll]] for (uint q = 0; q < 4; q++) {
                        uint e = uint(r + dj(j) - djmin) + q;
                        v[i * KW + j][h][q] = ok[h * 4 + q][i * KW + j] ? win[e / 4][e % 4] : 0.0;
                    }
            }
        }
        [[unroll]] for (uint rr = 0; rr < TM; rr++) {
            vec4 s0 = acc[rr][0], s1 = acc[rr][1];
            [[unroll]] for (uint tap = 0; tap < KK; tap++) {
                uint e = rr * KK + tap, t = e / 4;
                float a = subgroupShuffle(av[t / WG][e % 4], t % WG);
                s0 = fma(vec4(a), v[tap][0], s0);
                s1 = fma(vec4(a), v[tap][1], s1);
            }
            acc[rr][0] = s0;
            acc[rr][1] = s1;
        }
    }

    [[unroll]] for (uint h = 0; h < 2; h++) {
        uint n = nfirst + 4 * h;
        if (n < p.n) {
            uint b = n / P, pp = n % P;
            uint base = p.out_off + b * R * P + pp;
            [[unroll]] for (uint rr = 0; rr < TM; rr++)
                if (m0 + rr < R) out4[(base + (m0 + rr) * P) / 4] = acc[rr][h];
        }
    }
}
