// conv_dw: the partial products of a split-K weight gradient, for a convolution whose gradient is
// small (at most 4096 floats) next to its product's inner size (the n = nb*P columns of a
// chunk). With A[M, n] the output gradient and B[N, n] the columns (N = the columns' K rows):
//   G[m][c] = sum over j of A[m][j] B[c][j] (c < N), G[m][N] = sum over j of A[m][j] (BIAS)
// over the columns j of part s (the workgroups of y: V-float pieces [s*pieces, (s+1)*pieces)).
// Reads A straight from the output gradient dy[nb][M][P] from element a_off (column b*P + q of A
// is dy[b][m][q]: no permute; bindings 0, 2, 4) and B as cols[N][n] (bindings 1, 3, 5): as vec4
// texels (TEXEL), vec4s (V = 4: P % 4 == 0, a_off % 4 == 0, so that a piece lies inside one
// sample; the host checks) or floats (V = 1), the same views.
// Writes part[s*WG + l][M][NB] (binding 6), NB = N + BIAS: lane l of the workgroup sums its own
// pieces l, l + WG, ... of the part, in order; conv_dw_reduce adds the S*WG partials in order
// (deterministic, no atomics). Workgroups of x: output tiles of TM rows x TN columns.
//
// Why: on lavapipe the engine's matmul gives a product with a tiny output one workgroup, that is
// one core; here every part is a workgroup, each lane holds the whole tile (TM*TN floats) and
// every float it loads feeds TN (A) or TM (B) FMAs, and a texel fetch is a branch-free gather
// where a storage-buffer load is a loop over the lanes (engine/ops/matmul.c).
#version 450
#extension GL_EXT_control_flow_attributes : require
#include "conv_abi.h"

layout(local_size_x_id = VKT_SPEC_LOCAL_X) in;
layout(constant_id = VKT_SPEC_CONV_DW_TM) const uint TM = 1;
layout(constant_id = VKT_SPEC_CONV_DW_TN) const uint TN = 1;
layout(constant_id = VKT_SPEC_CONV_DW_V) const uint V = 1;
layout(constant_id = VKT_SPEC_CONV_DW_TEXEL) const bool TEXEL = false;
layout(constant_id = VKT_SPEC_CONV_DW_P) const uint P = 1;
layout(constant_id = VKT_SPEC_CONV_DW_BIAS) const bool BIAS = false;

layout(binding = 0) uniform samplerBuffer at;
layout(binding = 1) uniform samplerBuffer bt;
layout(std430, binding = 2) readonly buffer A4 { vec4 a4[]; };
layout(std430, binding = 3) readonly buffer B4 { vec4 b4[]; };
layout(std430, binding = 4) readonly buffer A1 { float a1[]; };
layout(std430, binding = 5) readonly buffer B1 { float b1[]; };
layout(std430, binding = 6) writeonly buffer PART { float part[]; };
layout(push_constant) uniform PC { vkt_conv_dw_push p; };

// The V floats from element e (a multiple of V) of A and of B (V = 1: in x).
vec4 load_a(uint e) {
    if (V == 1u) return vec4(a1[e], 0.0, 0.0, 0.0);
    return TEXEL ? texelFetch(at, int(e / 4u)) : a4[e / 4u];
}
vec4 load_b(uint e) {
    if (V == 1u) return vec4(b1[e], 0.0, 0.0, 0.0);
    return TEXEL ? texelFetch(bt, int(e / 4u)) : b4[e / 4u];
}

void main() {
    const uint WG = gl_WorkGroupSize.x;
    uint NB = p.N + (BIAS ? 1u : 0u);
    uint m0 = gl_WorkGroupID.x / p.tiles_n * TM, c0 = gl_WorkGroupID.x % p.tiles_n * TN;
    if (m0 >= p.M || c0 >= NB) return; // the whole workgroup
    uint l = gl_LocalInvocationID.x, s = gl_WorkGroupID.y;
    uint q0 = s * p.pieces, q1 = min(q0 + p.pieces, p.n / V);
    // Rows past the matrix are clamped (their sums are not stored); the bias column reads row
    // N - 1 and replaces it by ones.
    uint arow[TM], brow[TN];
    [[unroll]] for (uint r = 0u; r < TM; r++) arow[r] = min(m0 + r, p.M - 1u) * P;
    [[unroll]] for (uint c = 0u; c < TN; c++) brow[c] = min(c0 + c, p.N - 1u) * p.n;
    float acc[TM][TN];
    [[unroll]] for (uint r = 0u; r < TM; r++) {
        [[unroll]] for (uint c = 0u; c < TN; c++) acc[r][c] = 0.0;
    }
    for (uint q = q0 + l; q < q1; q += WG) {
        uint j = q * V;
        uint abase = p.a_off + j / P * (p.M * P) + j % P;
        vec4 av[TM], bv[TN];
        [[unroll]] for (uint r = 0u; r < TM; r++) av[r] = load_a(abase + arow[r]);
        [[unroll]] for (uint c = 0u; c < TN; c++) {
            bv[c] = load_b(j + brow[c]);
            if (BIAS && c0 + c == p.N) bv[c] = vec4(1.0);
        }
        [[unroll]] for (uint r = 0u; r < TM; r++) {
            [[unroll]] for (uint c = 0u; c < TN; c++) {
                float t = fma(av[r].x, bv[c].x, acc[r][c]);
                if (V == 4u)
                    t = fma(av[r].w, bv[c].w, fma(av[r].z, bv[c].z, fma(av[r].y, bv[c].y, t)));
                acc[r][c] = t;
            }
        }
    }
    uint at0 = (s * WG + l) * p.M;
    [[unroll]] for (uint r = 0u; r < TM; r++) {
        [[unroll]] for (uint c = 0u; c < TN; c++) {
            if (m0 + r < p.M && c0 + c < NB) part[(at0 + m0 + r) * NB + c0 + c] = acc[r][c];
        }
    }
}
