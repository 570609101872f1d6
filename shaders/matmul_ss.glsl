// matmul_ss.glsl: SwiftShader's matmul (Subzero JIT, 4-wide SIMD), built as the kernels
// matmul_ss_r<16|32>_<nn|nt|tn> (shaders/variants.cmake), which fix the form (SS_FORM) and the
// number of row groups (SS_G: 4 or 8, i.e. 16 or 32 rows).
//
// Reads a (NN, NT: [M,K]; TN: [K,M]), b (NN, TN: [K,N]; NT: [N,K]), bias[N] when p.has_bias, and
// c[M,N] when p.beta != 0 or p.k_begin > 0. Writes c[M,N]:
//   c = sum over k in [k_begin, k_end) of op(a)[m,k] op(b)[k,n]  (+ bias[n]) (+ beta * c)
// where a dispatch with k_begin > 0 continues a K-split (beta taken as 1, no bias), as in
// matmul_wide.glsl. Every operand is read as vec4s along its contiguous dimension, so the host
// (engine/ops/matmul.c, wide_fits with W = 4) uses it only when K, N (and for TN, M) are multiples of
// 4, the views are 16-byte aligned and k_begin is a multiple of 4, and so are p.lda, p.ldb,
// p.a_off and p.b_off (vkt_abi.h: a block of a larger product); any M (NN, NT) and any
// k_end - k_begin work. Rows and columns past M and N are clamped on load and skipped on store
// (the bounds guard).
//
// One workgroup is one subgroup of 4 lanes and computes R = 4 SS_G rows x 64 columns: lane l owns
// the 16 contiguous columns n0 = 16 (4 group_y + l) .. n0 + 15 of every row. Each iteration of the
// k loop takes 8 k steps:
//  - a: the lanes read 4 different rows (NN, NT: 4 k steps of row 4g + l per vec4; TN: rows
//    16h + 4l .. + 3 of one k step per vec4) and subgroupBroadcast makes op(a)[m0 + r, k + kk] a
//    value that is the same in every lane (R x 8 of them);
//  - b: each lane reads its 16 columns for the 8 k steps (32 vec4s);
//  - then R x 16 FMA chains of 8 steps each, one chain per accumulator.
// If k_end - k_begin is not a multiple of 8, the last iteration's steps 4..7 read row k_end - 1
// (NN, TN) or the last vec4 (NT) again with a multiplied by 0: exact for finite inputs (an inf
// in that row can turn a +-inf result into NaN).
//
// The code is written with macros rather than loops and arrays: glslc -O takes many seconds and
// gigabytes to unroll the tile written as [[unroll]] loops over arrays, and SwiftShader also
// compiles the written-out form several times faster.
//
// Why this shape (what was measured: docs/PERFORMANCE.md, "Why the matmul kernels look as they
// do", from the JIT code of the k loop and `vktrain bench matmul --device swiftshader`): Subzero
// makes every load with a computed index a gather of scalar loads behind mask branches (so vec4
// loads, the fewest per float), merges every loop-carried value with the lane mask at each
// back-edge (so each accumulator takes 8 k steps in a row), keeps all but one FMA chain on the
// stack, and compiles code under a branch on a specialization constant anyway (so one kernel per
// form). 32 rows are the fastest tile whose compile time stays a few seconds.
#version 450
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_ballot : require
#include "vkt_abi.h"

// Specialization constant VKT_SPEC_USER + 0 (the form) is not declared: SS_FORM fixes it.
layout(local_size_x_id = VKT_SPEC_LOCAL_X, local_size_y_id = VKT_SPEC_LOCAL_Y,
       local_size_z_id = VKT_SPEC_LOCAL_Z) in;

layout(std430, binding = 0) buffer Cs { float c1[]; };
layout(std430, binding = 1) readonly buffer As { vec4 a4[]; };
layout(std430, binding = 2) readonly buffer Bs { vec4 b4[]; };
layout(std430, binding = 3) readonly buffer Bias { float bias[]; };
layout(push_constant) uniform PC { vkt_matmul_push p; };

// ---- Macro loops. GLSL has no variadic macros, so every body takes (index, u1, u2).
#define FOR_KK(X, u1, u2) X(0, u1, u2) X(1, u1, u2) X(2, u1, u2) X(3, u1, u2) \
    X(4, u1, u2) X(5, u1, u2) X(6, u1, u2) X(7, u1, u2)
#define FOR_J(X, u1, u2) X(0, u1, u2) X(1, u1, u2) X(2, u1, u2) X(3, u1, u2) X(4, u1, u2) \
    X(5, u1, u2) X(6, u1, u2) X(7, u1, u2) X(8, u1, u2) X(9, u1, u2) X(10, u1, u2) \
    X(11, u1, u2) X(12, u1, u2) X(13, u1, u2) X(14, u1, u2) X(15, u1, u2)
#define FOR_JJ(X, u1, u2) X(0, u1, u2) X(1, u1, u2) X(2, u1, u2) X(3, u1, u2)
#define FOR_I(X, u1, u2) X(0, u1, u2) X(1, u1, u2) X(2, u1, u2) X(3, u1, u2)
#if SS_G == 4
#define FOR_G(X, u1, u2) X(0, u1, u2) X(1, u1, u2) X(2, u1, u2) X(3, u1, u2)
#elif SS_G == 8
#define FOR_G(X, u1, u2) X(0, u1, u2) X(1, u1, u2) X(2, u1, u2) X(3, u1, u2) \
    X(4, u1, u2) X(5, u1, u2) X(6, u1, u2) X(7, u1, u2)
#else
#error "SS_G is 4 or 8"
#endif

// ---- Accumulators: float c<g><i>_<j> is row m0 + 4g + i, column n0 + j.
#define ZERO1(j, g, i) float c##g##i##_##j = 0.0;
#define ZERO_ROW(i, g, u2) FOR_J(ZERO1, g, i)
#define ZERO_G(g, u1, u2) FOR_I(ZERO_ROW, g, 0)

// ---- Broadcasts: float A<g><i>_<kk> = op(a)[m0 + 4g + i, k + kk], the same in every lane.
#define BCAST(g, i, kk, v) float A##g##i##_##kk = subgroupBroadcast(v, i);
#define BCAST4(g, kk, v) BCAST(g, 0, kk, v) BCAST(g, 1, kk, v) BCAST(g, 2, kk, v) BCAST(g, 3, kk, v)

// ---- FMA chains: each accumulator takes the iteration's 8 k steps in a row, with
// b<kk>_<j> = op(b)[k + kk, n0 + j].
#define FMA1(kk, g, i, j) t = fma(A##g##i##_##kk, b##kk##_##j, t);
#define CHAIN(j, g, i) { float t = c##g##i##_##j; FMA1(0, g, i, j) FMA1(1, g, i, j) \
    FMA1(2, g, i, j) FMA1(3, g, i, j) FMA1(4, g, i, j) FMA1(5, g, i, j) FMA1(6, g, i, j) \
    FMA1(7, g, i, j) c##g##i##_##j = t; }
#define CHAIN_ROW(i, g, u2) FOR_J(CHAIN, g, i)
#define CHAIN_G(g, u1, u2) FOR_I(CHAIN_ROW, g, 0)

// ---- k steps. Steps 0..3 of an iteration are always before k_end (k_end - k multiple of 4);
// steps 4..7 are clamped to the last row or vec4 and their a multiplied by fhi (0 past k_end).
#define KSTEP(kk, u1, u2) uint kr##kk = min(k + kk, klast);
#define ZA0(v) v
#define ZA1(v) v
#define ZA2(v) v
#define ZA3(v) v
#define ZA4(v) (v * fhi)
#define ZA5(v) (v * fhi)
#define ZA6(v) (v * fhi)
#define ZA7(v) (v * fhi)

#if SS_FORM == VKT_MM_FORM_TN
// a: lane l reads rows m0 + 16h + 4l .. + 3 of k step kk as one vec4; component q of lane i is
// row m0 + 16h + 4i + q, that is accumulator row group g = 4h + i, row i' = q.
#define AM(h) uint am##h = (min(m0 + 16 * h + 4 * l, M - 4) + p.a_off) / 4;
#define BCQ(g, lane, kk, v) float A##g##0_##kk = subgroupBroadcast(v.x, lane); \
    float A##g##1_##kk = subgroupBroadcast(v.y, lane); \
    float A##g##2_##kk = subgroupBroadcast(v.z, lane); \
    float A##g##3_##kk = subgroupBroadcast(v.w, lane);
#define LOAD_AM(kk, h, ga, gb, gc, gd) vec4 av##h##_##kk = ZA##kk(a4[kr##kk * (p.lda / 4) + am##h]); \
    BCQ(ga, 0, kk, av##h##_##kk) BCQ(gb, 1, kk, av##h##_##kk) BCQ(gc, 2, kk, av##h##_##kk) \
    BCQ(gd, 3, kk, av##h##_##kk)
#define LOAD_AM0(kk, u1, u2) LOAD_AM(kk, 0, 0, 1, 2, 3)
#define LOAD_AM1(kk, u1, u2) LOAD_AM(kk, 1, 4, 5, 6, 7)
#else
// a: lane l reads row m0 + 4g + l as two vec4s along k (steps 0..3 and 4..7).
#define AROW(g, u1, u2) uint ar##g = (min(m0 + 4 * g + l, M - 1) * p.lda + p.a_off) / 4;
#define LOAD_AK(g, u1, u2) vec4 av##g##_0 = a4[ar##g + kq0]; \
    vec4 av##g##_1 = ZA4(a4[ar##g + kq1]); \
    BCAST4(g, 0, av##g##_0.x) BCAST4(g, 1, av##g##_0.y) BCAST4(g, 2, av##g##_0.z) \
    BCAST4(g, 3, av##g##_0.w) BCAST4(g, 4, av##g##_1.x) BCAST4(g, 5, av##g##_1.y) \
    BCAST4(g, 6, av##g##_1.z) BCAST4(g, 7, av##g##_1.w)
#endif

#if SS_FORM == VKT_MM_FORM_NT
// b: lane l reads column n0 + j as two vec4s along k; component q of the second is step 4 + q.
#define BK(j, u1, u2) uint bk##j = (min(n0 + j, N - 1) * p.ldb + p.b_off) / 4;
#define LOAD_BK(j, u1, u2) vec4 bw##j##_0 = b4[bk##j + kq0], bw##j##_1 = b4[bk##j + kq1]; \
    float b0_##j = bw##j##_0.x, b1_##j = bw##j##_0.y, b2_##j = bw##j##_0.z, b3_##j = bw##j##_0.w, \
        b4_##j = bw##j##_1.x, b5_##j = bw##j##_1.y, b6_##j = bw##j##_1.z, b7_##j = bw##j##_1.w;
#else
// b: lane l reads columns n0 .. n0 + 15 of row k + kk as 4 vec4s.
#define BN(jj, u1, u2) uint bn##jj = (min(n0 + 4 * jj, N - 4) + p.b_off) / 4;
#define SPLIT4(v, name, j0, j1, j2, j3) \
    float name##j0 = v.x, name##j1 = v.y, name##j2 = v.z, name##j3 = v.w;
#define LOAD_BN(kk, u1, u2) uint bo##kk = kr##kk * (p.ldb / 4); \
    vec4 bv##kk##_0 = b4[bo##kk + bn0]; SPLIT4(bv##kk##_0, b##kk##_, 0, 1, 2, 3) \
    vec4 bv##kk##_1 = b4[bo##kk + bn1]; SPLIT4(bv##kk##_1, b##kk##_, 4, 5, 6, 7) \
    vec4 bv##kk##_2 = b4[bo##kk + bn2]; SPLIT4(bv##kk##_2, b##kk##_, 8, 9, 10, 11) \
    vec4 bv##kk##_3 = b4[bo##kk + bn3]; SPLIT4(bv##kk##_3, b##kk##_, 12, 13, 14, 15)
#endif

uint M, N, n0;

// The epilogue: bias, beta (or the partial sum of an earlier K chunk), bounds guard. The
// accumulators go through a local array so that the store code exists once: 32 inlined copies of
// it, one per row, took almost half of the 32-row kernel's compile time.
#define TOARR1(j, g, i) acc[(4 * g + i) * 16 + j] = c##g##i##_##j;
#define TOARR_ROW(i, g, u2) FOR_J(TOARR1, g, i)
#define TOARR_G(g, u1, u2) FOR_I(TOARR_ROW, g, 0)
void store_tile(uint m0, float acc[4 * SS_G * 16]) {
    for (uint r = 0; r < 4 * SS_G; r++) {
        uint m = m0 + r;
        if (m >= M) break;
        for (uint j = 0; j < 16; j++) {
            uint n = n0 + j;
            if (n >= N) break;
            float x = acc[r * 16 + j];
            uint at = p.c_off + m * p.ldc + n;
            if (p.has_bias != 0 && p.k_begin == 0) x += bias[p.bias_off + n];
            if (p.k_begin > 0) x += c1[at];
            else if (p.beta != 0.0) x += p.beta * c1[at];
            c1[at] = x;
        }
    }
}

void main() {
    M = p.m;
    N = p.n;
    uint l = gl_SubgroupInvocationID;
    uint m0 = gl_WorkGroupID.x * (4 * SS_G);
    n0 = (gl_WorkGroupID.y * 4 + l) * 16;
    uint klast = p.k_end - 1, klast4 = p.k_end / 4 - 1;
    FOR_G(ZERO_G, 0, 0)
#if SS_FORM == VKT_MM_FORM_TN
    AM(0)
#if SS_G == 8
    AM(1)
#endif
#else
    FOR_G(AROW, 0, 0)
#endif
#if SS_FORM == VKT_MM_FORM_NT
    FOR_J(BK, 0, 0)
#else
    FOR_JJ(BN, 0, 0)
#endif
    for (uint k = p.k_begin; k < p.k_end; k += 8) {
        float fhi = k + 4 < p.k_end ? 1.0 : 0.0;
        uint kq0 = k / 4, kq1 = min(k / 4 + 1, klast4);
        FOR_KK(KSTEP, 0, 0)
#if SS_FORM == VKT_MM_FORM_TN
        FOR_KK(LOAD_AM0, 0, 0)
#if SS_G == 8
        FOR_KK(LOAD_AM1, 0, 0)
#endif
#else
        FOR_G(LOAD_AK, 0, 0)
#endif
#if SS_FORM == VKT_MM_FORM_NT
        FOR_J(LOAD_BK, 0, 0)
#else
        FOR_KK(LOAD_BN, 0, 0)
#endif
        FOR_G(CHAIN_G, 0, 0)
    }
    float acc[4 * SS_G * 16];
    FOR_G(TOARR_G, 0, 0)
    store_tile(m0, acc);
}
