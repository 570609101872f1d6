// matmul_scalar.glsl: the matmul for any shape, one float per load, built as the kernels
// matmul_s<TM>x<TC> (shaders/variants.cmake), which fix the tile at compile time (MM_TM rows per
// workgroup, MM_TC columns per lane).
//
// Reads a (NN, NT: [M,K]; TN: [K,M]), b (NN, TN: [K,N]; NT: [N,K]), bias[N] when p.has_bias,
// c[M,N] when p.beta != 0 or p.k_begin > 0, and s[M,N] in the backward epilogues. Writes c[M,N]:
//   z = sum over k in [k_begin, k_end) of op(a)[m,k] op(b)[k,n]  (+ bias[n]) (+ beta * c)
//   c = epilogue(z)  (mm_epilogue.glsl: z itself, f(z), or z * f'; also z[M,N] when kept)
//
// One workgroup of WG lanes computes TM rows x (WG * TC) columns; the rows are the same for every
// lane and lane l owns columns n0 + l + WG * j (interleaved, so that neighbouring lanes read
// neighbouring floats of b). The three forms differ only in the strides of a and b, so one kernel
// serves them all without branching inside the k loop. Rows and columns past M and N are clamped
// on load and skipped on store; any M, N, K >= 1, any strides and offsets (vkt_abi.h: a block of a
// larger product) and any 4-byte-aligned view offsets work.
//
// The tile is a compile-time constant rather than a specialization constant because SwiftShader
// does not unroll loops bounded by specialization constants and then keeps the tile in memory,
// several times slower (docs/PERFORMANCE.md, "Why the matmul kernels look as they do"). On
// SwiftShader every load with a computed index is a
// per-lane gather whatever its width, so this is also its fast kernel.
#version 450
#extension GL_EXT_control_flow_attributes : require
#include "vkt_abi.h"

layout(local_size_x_id = VKT_SPEC_LOCAL_X, local_size_y_id = VKT_SPEC_LOCAL_Y,
       local_size_z_id = VKT_SPEC_LOCAL_Z) in;
layout(constant_id = VKT_SPEC_USER + 0) const uint FORM = VKT_MM_FORM_NN;

layout(std430, binding = 0) buffer Cs { float c1[]; };
layout(std430, binding = 1) readonly buffer As { float a1[]; };
layout(std430, binding = 2) readonly buffer Bs { float b1[]; };
layout(std430, binding = 3) readonly buffer Bias { float bias[]; };
layout(std430, binding = 4) readonly buffer Ss { float s1[]; };
layout(std430, binding = 5) writeonly buffer Zs { float z1[]; };
layout(push_constant) uniform PC { vkt_matmul_push p; };

#include "mm_epilogue.glsl"

const uint TM = MM_TM;
const uint TC = MM_TC; // a multiple of 4: the epilogue takes 4 of a lane's columns at a time

void main() {
    const uint WG = gl_WorkGroupSize.x;
    uint M = p.m, N = p.n, ldc = p.ldc;
    // op(a)[m,k] = a1[a_off + m * sam + k * sak], op(b)[k,n] = b1[b_off + k * sbk + n * sbn].
    uint sam = FORM == VKT_MM_FORM_TN ? 1u : p.lda, sak = FORM == VKT_MM_FORM_TN ? p.lda : 1u;
    uint sbk = FORM == VKT_MM_FORM_NT ? 1u : p.ldb, sbn = FORM == VKT_MM_FORM_NT ? p.ldb : 1u;
    uint m0 = gl_WorkGroupID.x * TM;
    uint n0 = gl_WorkGroupID.y * WG * TC + gl_LocalInvocationID.x;

    uint aoff[TM], boff[TC];
    [[unroll]] for (uint r = 0; r < TM; r++) aoff[r] = min(m0 + r, M - 1) * sam + p.a_off;
    [[unroll]] for (uint j = 0; j < TC; j++) boff[j] = min(n0 + j * WG, N - 1) * sbn + p.b_off;

    float acc[TM][TC];
    [[unroll]] for (uint r = 0; r < TM; r++)
        [[unroll]] for (uint j = 0; j < TC; j++) acc[r][j] = 0.0;

    uint k = p.k_begin;
    for (; k + 4 <= p.k_end; k += 4) {
        float a[TM][4], b[4][TC];
        [[unroll]] for (uint r = 0; r < TM; r++)
            [[unroll]] for (uint kk = 0; kk < 4; kk++) a[r][kk] = a1[aoff[r] + (k + kk) * sak];
        [[unroll]] for (uint kk = 0; kk < 4; kk++)
            [[unroll]] for (uint j = 0; j < TC; j++) b[kk][j] = b1[boff[j] + (k + kk) * sbk];
        // Four FMAs in a row on each accumulator: a CPU driver keeps it in a register meanwhile.
        [[unroll]] for (uint r = 0; r < TM; r++) {
            [[unroll]] for (uint j = 0; j < TC; j++) {
                float t = acc[r][j];
                [[unroll]] for (uint kk = 0; kk < 4; kk++) t = fma(a[r][kk], b[kk][j], t);
                acc[r][j] = t;
            }
        }
    }
    for (; k < p.k_end; k++) {
        float a[TM], b[TC];
        [[unroll]] for (uint r = 0; r < TM; r++) a[r] = a1[aoff[r] + k * sak];
        [[unroll]] for (uint j = 0; j < TC; j++) b[j] = b1[boff[j] + k * sbk];
        [[unroll]] for (uint r = 0; r < TM; r++)
            [[unroll]] for (uint j = 0; j < TC; j++) acc[r][j] = fma(a[r], b[j], acc[r][j]);
    }

    // Epilogue: bias, beta, and the bounds guard on the store (a loop that glslc leaves rolled,
    // for the break: SwiftShader builds the unrolled one many times slower).
    bool add_c = p.beta != 0.0 || p.k_begin > 0;
    float beta = p.k_begin > 0 ? 1.0 : p.beta;
    bool add_bias = p.has_bias != 0 && p.k_begin == 0;
    [[unroll]] for (uint r = 0; r < TM; r++) {
        uint m = m0 + r;
        if (m >= M) break;
        [[unroll]] for (uint j = 0; j < TC; j++) {
            uint n = n0 + j * WG;
            if (n >= N) break;
            float v = acc[r][j];
            if (add_bias) v += bias[p.bias_off + n];
            if (add_c) v += beta * c1[p.c_off + m * ldc + n];
            c1[p.c_off + m * ldc + n] = v;
        }
    }
    // The activation epilogue (mm_epilogue.glsl) on what the lane just stored (its own writes),
    // four outputs at a time, in a loop that is not unrolled. SwiftShader runs every block of a
    // shader, taken or not: here the plain product pays one masked pass of this body, a few
    // percent, where an unrolled epilogue cost far more (docs/PERFORMANCE.md, "Fused step"). The
    // extra read and write of c cost the fused forms little on lavapipe, where this kernel serves
    // only the shapes the wide one cannot take.
    [[dont_unroll]] for (uint i = 0; MM_EPI_ON && i < TM * TC / 4; i++) {
        uint r = i / (TC / 4), j4 = i % (TC / 4), m = m0 + r;
        vec4 z = vec4(0.0), s = vec4(0.0);
        [[unroll]] for (uint q = 0; q < 4; q++) {
            uint n = n0 + (4 * j4 + q) * WG;
            if (m < M && n < N) {
                z[q] = c1[p.c_off + m * ldc + n];
                if (MM_EPI_READS_S) s[q] = s1[p.x_off + m * ldc + n];
                if (MM_EPI_WRITES_Z) z1[p.x_off + m * ldc + n] = z[q];
            }
        }
        vec4 y = mm_epi(z, s, p.alpha);
        [[unroll]] for (uint q = 0; q < 4; q++) {
            uint n = n0 + (4 * j4 + q) * WG;
            if (m < M && n < N) c1[p.c_off + m * ldc + n] = y[q];
        }
    }
}
