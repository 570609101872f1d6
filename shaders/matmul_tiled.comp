// matmul_tiled: the GPU-shaped matmul, c[M,N] = op(a) op(b) (+ bias[N]) (+ beta c), with
// shared-memory tiles. Reads a (NN, NT: [M,K]; TN: [K,M]), b (NN, TN: [K,N]; NT: [N,K]), bias[N]
// when p.has_bias, c when p.beta != 0 or p.k_begin > 0, s[M,N] in the backward epilogues; writes
// c[M,N] over k in [k_begin, k_end) (a K-split continues with beta 1 and no bias, as in
// matmul_scalar.glsl), through the activation epilogue of mm_epilogue.glsl (and z[M,N] when it
// keeps the pre-activation). The epilogue is selected by specialization constants, which GPU
// drivers fold; on SwiftShader this kernel would run every activation (it is not its candidate).
//
// A workgroup of TX x TY lanes computes a BM x BN block of c (BM = TY * RM rows, BN = TX * RN
// columns): each step stages a BK-deep slice of a and b in shared memory, every lane loading
// neighbouring elements along the operand's contiguous dimension (coalesced on a GPU), then each
// lane accumulates its RM x RN outputs (rows ty + r * TY, columns tx + c * TX: lanes of a row
// read neighbouring words of the b slice, the a slice is a broadcast). Loads past the matrix read
// zero and stores past it are skipped, so any M, N, K >= 1 works, with any strides and offsets
// (vkt_abi.h: a block of a larger product).
//
// For GPUs (engine/ops/matmul.c lists it as a candidate for devices that are not CPU drivers, where
// the first use of a shape measures it against the others). On the CPU drivers it runs (the
// tests check it there) but slowly: barriers and shared-memory loads are what lavapipe does
// worst (docs/DRIVERS.md).
#version 450
#extension GL_EXT_control_flow_attributes : require
#include "vkt_abi.h"

layout(local_size_x_id = VKT_SPEC_LOCAL_X, local_size_y_id = VKT_SPEC_LOCAL_Y,
       local_size_z_id = VKT_SPEC_LOCAL_Z) in;
layout(constant_id = VKT_SPEC_USER + 0) const uint FORM = VKT_MM_FORM_NN;
layout(constant_id = VKT_SPEC_USER + 1) const uint RM = 4;  // rows per lane
layout(constant_id = VKT_SPEC_USER + 2) const uint RN = 4;  // columns per lane
layout(constant_id = VKT_SPEC_USER + 3) const uint BK = 16; // k per shared-memory slice

const uint TX = gl_WorkGroupSize.x, TY = gl_WorkGroupSize.y;
const uint BM = TY * RM, BN = TX * RN, NT = TX * TY;

layout(std430, binding = 0) buffer Cs { float c1[]; };
layout(std430, binding = 1) readonly buffer As { float a1[]; };
layout(std430, binding = 2) readonly buffer Bs { float b1[]; };
layout(std430, binding = 3) readonly buffer Bias { float bias[]; };
layout(std430, binding = 4) readonly buffer Ss { float s1[]; };
layout(std430, binding = 5) writeonly buffer Zs { float z1[]; };
layout(push_constant) uniform PC { vkt_matmul_push p; };

#include "mm_epilogue.glsl"

shared float sa[BK * BM]; // sa[kk * BM + mm] = op(a)[m0 + mm, k + kk]
shared float sb[BK * BN]; // sb[kk * BN + nn] = op(b)[k + kk, n0 + nn]

void main() {
    uint M = p.m, N = p.n, ldc = p.ldc;
    uint tx = gl_LocalInvocationID.x, ty = gl_LocalInvocationID.y, tid = ty * TX + tx;
    uint m0 = gl_WorkGroupID.x * BM, n0 = gl_WorkGroupID.y * BN;

    float acc[RM][RN];
    [[unroll]] for (uint r = 0; r < RM; r++)
        [[unroll]] for (uint c = 0; c < RN; c++) acc[r][c] = 0.0;

    for (uint k = p.k_begin; k < p.k_end; k += BK) {
        // The slices: the host keeps BK * BM and BK * BN multiples of the lane count.
        [[unroll]] for (uint i = 0; i < BK * BM / NT; i++) {
            uint idx = tid + i * NT, kk, mm;
            if (FORM == VKT_MM_FORM_TN) { // a[K,M]: neighbouring lanes along m
                kk = idx / BM;
                mm = idx % BM;
            } else { // a[M,K]: along k
                mm = idx / BK;
                kk = idx % BK;
            }
            uint m = m0 + mm, kg = k + kk;
            bool inside = m < M && kg < p.k_end;
            uint at = p.a_off + (FORM == VKT_MM_FORM_TN ? kg * p.lda + m : m * p.lda + kg);
            float v = a1[inside ? at : 0u]; // never an index past the buffer
            sa[kk * BM + mm] = inside ? v : 0.0;
        }
        [[unroll]] for (uint i = 0; i < BK * BN / NT; i++) {
            uint idx = tid + i * NT, kk, nn;
            if (FORM == VKT_MM_FORM_NT) { // b[N,K]: along k
                nn = idx / BK;
                kk = idx % BK;
            } else { // b[K,N]: along n
                kk = idx / BN;
                nn = idx % BN;
            }
            uint n = n0 + nn, kg = k + kk;
            bool inside = n < N && kg < p.k_end;
            uint at = p.b_off + (FORM == VKT_MM_FORM_NT ? n * p.ldb + kg : kg * p.ldb + n);
            float v = b1[inside ? at : 0u];
            sb[kk * BN + nn] = inside ? v : 0.0;
        }
        barrier();
        [[unroll]] for (uint kk = 0; kk < BK; kk++) {
            float av[RM], bv[RN];
            [[unroll]] for (uint r = 0; r < RM; r++) av[r] = sa[kk * BM + ty + r * TY];
            [[unroll]] for (uint c = 0; c < RN; c++) bv[c] = sb[kk * BN + tx + c * TX];
            [[unroll]] for (uint r = 0; r < RM; r++)
                [[unroll]] for (uint c = 0; c < RN; c++) acc[r][c] = fma(av[r], bv[c], acc[r][c]);
        }
        barrier(); // the slices are rewritten next step
    }

    // Epilogue: bias, beta, the activation epilogue (four of the lane's columns at a time; RN is a
    // multiple of 4) and the bounds guard on the store.
    bool add_c = p.beta != 0.0 || p.k_begin > 0;
    float beta = p.k_begin > 0 ? 1.0 : p.beta;
    bool add_bias = p.has_bias != 0 && p.k_begin == 0;
    [[unroll]] for (uint r = 0; r < RM; r++) {
        uint m = m0 + ty + r * TY;
        [[unroll]] for (uint c4 = 0; c4 < RN / 4; c4++) {
            vec4 z = vec4(0.0), s = vec4(0.0);
            [[unroll]] for (uint q = 0; q < 4; q++) {
                uint n = n0 + tx + (4 * c4 + q) * TX;
                float v = acc[r][4 * c4 + q];
                if (m < M && n < N) {
                    if (add_bias) v += bias[p.bias_off + n];
                    if (add_c) v += beta * c1[p.c_off + m * ldc + n];
                    if (MM_EPI_READS_S) s[q] = s1[p.x_off + m * ldc + n];
                }
                z[q] = v;
            }
            vec4 y = mm_epi(z, s, p.alpha);
            [[unroll]] for (uint q = 0; q < 4; q++) {
                uint n = n0 + tx + (4 * c4 + q) * TX;
                if (m < M && n < N) {
                    if (MM_EPI_WRITES_Z) z1[p.x_off + m * ldc + n] = z[q];
                    c1[p.c_off + m * ldc + n] = y[q];
                }
            }
        }
    }
}
