// matmul_wide.glsl: the register-tiled matmul with wide loads, built as the kernels matmul_wide
// (vec4 pieces), matmul_wide64 (MM_F64: 8-float pieces read as dvec4s and written as two vec4s,
// for devices with shaderFloat64; the bits are moved, never used as doubles), matmul_wide64t
// (MM_TEXEL: a and b read as texels) and matmul_wide64t_sgd (MM_SGD_TEXEL: c and s too, for the
// SGD epilogue); see shaders/variants.cmake.
//
// Reads a (NN, NT: [M,K]; TN: [K,M]), b (NN, TN: [K,N]; NT: [N,K]), bias[N], c[M,N] when
// p.beta != 0 or p.k_begin > 0, and s[M,N] in the backward epilogues. Writes c[M,N]:
//   z = sum over k in [k_begin, k_end) of op(a)[m,k] op(b)[k,n]  (+ bias[n]) (+ beta * c)
//   c = epilogue(z)  (mm_epilogue.glsl: z itself, f(z), or z * f'; also z[M,N] when kept)
// where a dispatch with k_begin > 0 continues a K-split: beta is taken as 1 and bias is not added.
// The texel kernels in TN with VKT_SPEC_MM_COLSUM also add a's column sums to binding 8
// (vkt_abi.h).
//
// One workgroup of WG lanes computes TM rows x (WG * TC) columns. The rows are the same for every
// lane and lane l owns the TC contiguous columns from (group_y * WG + l) * TC. Every operand is
// read in W-float pieces along its contiguous dimension (k for a in NN/NT and for b in NT, m for a
// in TN, n for b in NN/TN and for c) and each iteration of the k loop consumes W k-steps. The host
// (engine/ops/matmul.c) uses this kernel only when K, N (and M for TN), k_begin, k_end are multiples
// of W and the views (s and z included) are aligned for W-wide access, and so are the strides
// and offsets (p.lda .. p.x_off: a block of a larger product, vkt_abi.h); TM and TC are multiples
// of W. Rows and columns past M and N are clamped on load and skipped on store (the bounds
// guard).
//
// Why: on lavapipe every storage-buffer load inside a loop becomes a loop over the 8 lanes, so
// the kernel reads few, wide pieces and reuses each for TM (or TC) FMAs. The tile is given by
// specialization constants, which lavapipe's NIR unrolls after specialization (SwiftShader does
// not, and uses matmul_scalar.glsl). The code avoids early exits and guarded loads in unrolled
// loops: both made LLVM's compile time grow many times.
#version 450
#extension GL_EXT_control_flow_attributes : require
#ifdef MM_TEXEL
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#endif
#include "vkt_abi.h"

layout(local_size_x_id = VKT_SPEC_LOCAL_X, local_size_y_id = VKT_SPEC_LOCAL_Y,
       local_size_z_id = VKT_SPEC_LOCAL_Z) in;
layout(constant_id = VKT_SPEC_USER + 0) const uint FORM = VKT_MM_FORM_NN;
layout(constant_id = VKT_SPEC_USER + 1) const uint TM = 32; // rows per workgroup
layout(constant_id = VKT_SPEC_USER + 2) const uint TC = 16; // columns per lane
layout(constant_id = VKT_SPEC_USER + 3) const uint W = 4;   // floats per piece: 4, or 8 with MM_F64

layout(std430, binding = 0) buffer Cv { vec4 c4[]; };
#ifdef MM_TEXEL
// a and b as uniform texel buffers of vec4 texels (engine/core/cmd.c makes R32G32B32A32_SFLOAT views).
layout(binding = 1) uniform samplerBuffer at;
layout(binding = 2) uniform samplerBuffer bt;
#endif
#ifdef MM_SGD_TEXEL
// The optimizer epilogue's reads of the parameters (c) through a texel buffer too (the kernel
// matmul_wide64t_sgd).
layout(binding = 6) uniform samplerBuffer ct;
#endif
#ifdef MM_TEXEL
// s through a texel buffer: the activation epilogue's (the backward's saved input or output) and
// the optimizer epilogue's momentum buffer. A storage-buffer load in the epilogue is a loop over
// the lanes per component on lavapipe: fashion_mlp's input gradient of its second layer ran 10%
// faster through texels (docs/PERFORMANCE.md). Unread (b bound) where the epilogue reads no s.
layout(binding = 7) uniform samplerBuffer st;
#endif
#ifdef MM_TEXEL
#else
layout(std430, binding = 1) readonly buffer Av { vec4 a4[]; };
layout(std430, binding = 2) readonly buffer Bv { vec4 b4[]; };
#endif
#ifdef MM_F64
layout(std430, binding = 0) buffer Cd { dvec4 c8[]; };
#ifndef MM_TEXEL
layout(std430, binding = 1) readonly buffer Ad { dvec4 a8[]; };
layout(std430, binding = 2) readonly buffer Bd { dvec4 b8[]; };
#endif
#endif
layout(std430, binding = 3) readonly buffer Bias { float bias[]; };
// The epilogue's s (read) and z (written), in the same W-wide pieces as c.
layout(std430, binding = 4) readonly buffer Sv { vec4 s4[]; };
layout(std430, binding = 5) writeonly buffer Zv { vec4 z4[]; };
#ifdef MM_F64
layout(std430, binding = 4) readonly buffer Sd { dvec4 s8[]; };
layout(std430, binding = 5) writeonly buffer Zd { dvec4 z8[]; };
#endif
// Pieces of 8 floats written as one dvec4 (VKT_SPEC_MM_STORE64; WRITE_PIECE says why).
layout(constant_id = VKT_SPEC_MM_STORE64) const uint STORE64 = 0;
// k steps of W per iteration of the k loop (VKT_SPEC_MM_KSTEPS): 1, or 2 where K is large. On
// lavapipe each iteration ends with a masked write (a load, a blend and a store) of each of the
// TM x TC accumulator vectors; two steps per iteration halve those (docs/PERFORMANCE.md). The host
// sets it only where k_end - k_begin is a multiple of W KSTEPS.
layout(constant_id = VKT_SPEC_MM_KSTEPS) const uint KSTEPS = 1;
layout(push_constant) uniform PC { vkt_matmul_push p; };
// Subgroup-uniform stores (VKT_SPEC_MM_USTORE: the SGD epilogue of the texel kernels with
// TC == W). Mesa 22.3's lavapipe writes a store whose address varies across lanes as a loop over
// the lanes, each lane's components taken out of the vector through the stack (about 1 ns a
// float on the team's Zen 2); a store whose address it can prove the same in every lane, one
// built only of constants and push constants (nir_src_is_always_uniform), it issues once, from
// lane 0. So the epilogue hands each lane's piece to every lane (subgroupShuffle) and stores it
// at that lane's address, eight stores a row, with the workgroup's tile index rebuilt from push
// constants: bit b of x is p.bits[(x >> b) & 1], a push constant read at an index that is the
// same in every invocation of the workgroup, as an index into a push-constant array must be.
// Every lane then stores the same value at the same address (lavapipe: one store); out-of-range
// pieces store what an in-range one stores (below), so no store needs a guard, which would put
// the store under control flow and back in the loop. The cost is compile time: the unrolled
// stores make the pipeline about 2 s longer to build in LLVM.
layout(constant_id = VKT_SPEC_MM_USTORE) const uint USTORE = 0;
uint from_push(uint x) {
    uint r = 0u;
    [[unroll]] for (uint b = 0; b < 32; b++) r |= p.bits[(x >> b) & 1u] << b;
    return r;
}
#ifdef MM_TEXEL
// TN: a's column sums (the bias gradient), added to binding 8 (vkt_abi.h, VKT_SPEC_MM_COLSUM).
layout(constant_id = VKT_SPEC_MM_COLSUM) const uint MM_COLSUM = 0;
layout(std430, binding = 8) buffer ColSum { vec4 cs4[]; };
#endif

#include "mm_epilogue.glsl"

const uint TC4 = TC / 4;

#ifdef MM_F64
void unpack8(dvec4 d, out vec4 lo, out vec4 hi) {
    lo = uintBitsToFloat(uvec4(unpackDouble2x32(d.x), unpackDouble2x32(d.y)));
    hi = uintBitsToFloat(uvec4(unpackDouble2x32(d.z), unpackDouble2x32(d.w)));
}
#endif

// The W floats from element e (a multiple of W) as W/4 vec4s (v[1] = v[0] when W == 4), of an
// array bound as X8 (dvec4 pieces, with MM_F64) and X4 (vec4 pieces), or (read_texels) of a
// texel buffer of vec4 texels; and the same pieces written: where W is 8, as one dvec4 with
// STORE64, else as W/4 vec4 stores. On lavapipe a store is a loop over the lanes per component,
// each moving the component's vector (8 lanes) through the stack to take one lane: a dvec4 has
// half the components of two vec4s, but each is a 64-byte vector. On the team's AVX-512 machine
// those moves stalled (a profile put 20% of the JIT code's samples on them), and two vec4 stores
// made fashion_mlp's step 8% faster; on the Zen 2 machine (AVX2: the 64-byte vector is two
// 32-byte halves) the dvec4 made its weight gradients 3-5% faster, and on a Zen 4 (AVX-512) 2-9%.
// engine/ops/matmul.c sets STORE64 on lavapipe but where the host is an Intel one with AVX-512
// (docs/PERFORMANCE.md); "stores-dvec4" or "stores-vec4" in the context's matmul_variant fixes it.
#ifdef MM_F64
#define READ_PIECE(X8, X4, e, v)                                                               \
    if (W == 8)                                                                                \
        unpack8(X8[(e) / 8], v[0], v[1]);                                                      \
    else                                                                                       \
        v[0] = v[1] = X4[(e) / 4]
#else
#define READ_PIECE(X8, X4, e, v) v[0] = v[1] = X4[(e) / 4]
#endif
#ifdef MM_F64
dvec4 pack8(vec4 lo, vec4 hi) {
    uvec4 l = floatBitsToUint(lo), h = floatBitsToUint(hi);
    return dvec4(packDouble2x32(l.xy), packDouble2x32(l.zw), packDouble2x32(h.xy),
                 packDouble2x32(h.zw));
}
#define WRITE_PIECE(X8, X4, e, v)                                                              \
    if (W == 8 && STORE64 != 0) {                                                              \
        X8[(e) / 8] = pack8(v[0], v[1]);                                                       \
    } else {                                                                                   \
        X4[(e) / 4] = v[0];                                                                    \
        if (W == 8) X4[(e) / 4 + 1] = v[1];                                                    \
    }
#else
#define WRITE_PIECE(X8, X4, e, v)                                                              \
    X4[(e) / 4] = v[0];                                                                        \
    if (W == 8) X4[(e) / 4 + 1] = v[1]
#endif
#ifdef MM_TEXEL
void read_texels(samplerBuffer t, uint e, out vec4 v[2]) {
    v[0] = texelFetch(t, int(e / 4));
    v[1] = W == 8 ? texelFetch(t, int(e / 4 + 1)) : v[0];
}
// bj[kk] = op(b)[k + kk, n0 + 4j .. 4j + 3] from b's texels (bcol and bnb: main's offsets).
void fetch_b(uint j, uint k, uint bcol[TC], uint bnb[TC], out vec4 bj[W]) {
    if (FORM == VKT_MM_FORM_NT) {
        [[unroll]] for (uint c = 0; c < 4; c++) {
            [[unroll]] for (uint h = 0; h < W / 4; h++) {
                vec4 v = texelFetch(bt, int((bcol[4 * j + c] + k) / 4 + h));
                [[unroll]] for (uint i = 0; i < 4; i++) bj[4 * h + i][c] = v[i];
            }
        }
    } else {
        [[unroll]] for (uint kk = 0; kk < W; kk++)
            bj[kk] = texelFetch(bt, int(((k + kk) * p.ldb + bnb[4 * j / W]) / 4 + j % (W / 4)));
    }
}
#endif

#ifndef MM_TEXEL
void read_a(uint e, out vec4 v[2]) { READ_PIECE(a8, a4, e, v); }
void read_b(uint e, out vec4 v[2]) { READ_PIECE(b8, b4, e, v); }
#endif
void read_c(uint e, out vec4 v[2]) { READ_PIECE(c8, c4, e, v); }
void write_c(uint e, vec4 v[2]) { WRITE_PIECE(c8, c4, e, v); }
void read_s(uint e, out vec4 v[2]) { READ_PIECE(s8, s4, e, v); }
void write_z(uint e, vec4 v[2]) { WRITE_PIECE(z8, z4, e, v); }

void main() {
    const uint WG = gl_WorkGroupSize.x;
    const uint TW = TC / W; // pieces per lane along n
    uint M = p.m, N = p.n;
    // The workgroup's row tile and column group: x and y of the grid, or y and x with p.n_fast
    // (consecutive workgroups then share a's rows and walk b's columns; engine/ops/matmul.c says
    // when).
    uvec2 tile = p.n_fast != 0 ? gl_WorkGroupID.yx : gl_WorkGroupID.xy;
    uint m0 = tile.x * TM;
    uint n0 = (tile.y * WG + gl_LocalInvocationID.x) * TC;
    // Clamped starts: a piece that starts past the matrix is moved back inside it (its values
    // then only feed rows or columns that are not stored).
    uint bcol[TC]; // NT: element offset of row n0 + c of b
    uint bn[TC];   // NN, TN, and c: first column of piece t (t < TW)
    uint bnb[TC];  // NN, TN: element offset of piece t of b's row 0
#ifndef MM_TEXEL
    uint arow[TM]; // NN, NT: element offset of row m0 + r of a
    uint am[TM];   // TN: element offset of piece g of a's row 0 (g < TM / W)
    [[unroll]] for (uint r = 0; r < TM; r++) arow[r] = min(m0 + r, M - 1) * p.lda + p.a_off;
    [[unroll]] for (uint g = 0; g < TM / W; g++) am[g] = min(m0 + g * W, M - W) + p.a_off;
#endif
    [[unroll]] for (uint c = 0; c < TC; c++) bcol[c] = min(n0 + c, N - 1) * p.ldb + p.b_off;
    [[unroll]] for (uint t = 0; t < TW; t++) bn[t] = min(n0 + t * W, N - W);
    [[unroll]] for (uint t = 0; t < TW; t++) bnb[t] = bn[t] + p.b_off;

    // acc[r][j] holds columns n0 + 4j .. 4j + 3 of row m0 + r. beta * c is read before the k loop
    // with clamped indices (a guarded read per element in the epilogue compiled far slower).
    vec4 acc[TM][TC4];
    [[unroll]] for (uint r = 0; r < TM; r++)
        [[unroll]] for (uint j = 0; j < TC4; j++) acc[r][j] = vec4(0.0);
    if (p.beta != 0.0 || p.k_begin > 0) {
        float beta = p.k_begin > 0 ? 1.0 : p.beta;
        [[unroll]] for (uint r = 0; r < TM; r++) {
            uint row = min(m0 + r, M - 1) * p.ldc + p.c_off;
            [[unroll]] for (uint t = 0; t < TW; t++) {
                vec4 v[2];
                read_c(row + bn[t], v);
                [[unroll]] for (uint q = 0; q < W / 4; q++) acc[r][t * (W / 4) + q] = beta * v[q];
            }
        }
    }

#ifdef MM_TEXEL
    // a's tile of one k step (TM x W floats, the same for every lane) is TM * W / 4 texels: lane
    // l fetches texels i * WG + l (i < NA), and a shuffle gives each float to every lane (on
    // lavapipe one vpermd, where each lane fetching the whole tile cost 8 times the fetches:
    // docs/PERFORMANCE.md). The workgroup must be one subgroup (engine/ops/matmul.c checks it)
    // and TM * W a multiple of 4 WG. Texel t's element offset without k: NN, NT: row
    // r = t / (W / 4), piece h = t % (W / 4); TN: step kk = t / (TM / 4), rows 4 g .. 4 g + 3
    // with g = t % (TM / 4), clamped to M - 4 (the storage-buffer kernel's am: to M - W).
    const uint NA = TM * W / 4 / WG;
    uint aoff[NA];
    uint lane = gl_SubgroupInvocationID;
    [[unroll]] for (uint i = 0; i < NA; i++) {
        uint t = i * WG + lane;
        if (FORM == VKT_MM_FORM_TN)
            aoff[i] = (t / (TM / 4)) * p.lda + min(m0 + 4 * (t % (TM / 4)), M - 4) + p.a_off;
        else
            aoff[i] = min(m0 + t / (W / 4), M - 1) * p.lda + p.a_off + 4 * (t % (W / 4));
    }
#endif
    // The k loop: KSTEPS steps of W per iteration (the inner loop is unrolled; its body is one
    // step at k).
    for (uint k0 = p.k_begin; k0 < p.k_end; k0 += W * KSTEPS)
    [[unroll]] for (uint ks = 0; ks < KSTEPS; ks++) {
        uint k = k0 + ks * W;
        float a[TM][W]; // a[r][kk] = op(a)[m0 + r, k + kk]
#ifdef MM_TEXEL
        vec4 av[NA];
        [[unroll]] for (uint i = 0; i < NA; i++)
            av[i] = texelFetch(at, int((FORM == VKT_MM_FORM_TN ? k * p.lda : k) + aoff[i]) / 4);
        [[unroll]] for (uint r = 0; r < TM; r++) {
            [[unroll]] for (uint kk = 0; kk < W; kk++) {
                uint t = FORM == VKT_MM_FORM_TN ? kk * (TM / 4) + r / 4 : r * (W / 4) + kk / 4;
                uint q = FORM == VKT_MM_FORM_TN ? r % 4 : kk % 4;
                a[r][kk] = subgroupShuffle(av[t / WG][q], t % WG);
            }
        }
        // The FMAs, each accumulator taking its W in a row in kk order (the same bits either way):
        // - TC4 <= 2: all of the step's b texels first, then per row its TC4 accumulators
        //   together, so that each broadcast a[r][kk] (a shuffle, two permutes on lavapipe) feeds
        //   TC4 x 4 multiply-adds while it is in a register. Traced on the team's Zen 2 machine
        //   against the order below, fashion_mlp's products ran 3-8% faster (layer 0's weight
        //   gradient 3,812 -> 3,499 us, three alternating pairs; docs/PERFORMANCE.md).
        // - wider tiles: b's texels 4 columns at a time, each group followed by its FMAs (the
        //   fetches overlap the FMAs of the group before); there the order above keeps 4 TC4
        //   accumulators live and spilled them (r32c16 ran 35% slower with it).
        if (TC4 <= 2) {
            vec4 bb[TC4][W];
            [[unroll]] for (uint j = 0; j < TC4; j++) fetch_b(j, k, bcol, bnb, bb[j]);
            [[unroll]] for (uint r = 0; r < TM; r++) {
                vec4 s[TC4];
                [[unroll]] for (uint j = 0; j < TC4; j++) s[j] = acc[r][j];
                [[unroll]] for (uint kk = 0; kk < W; kk++) {
                    vec4 av = vec4(a[r][kk]);
                    [[unroll]] for (uint j = 0; j < TC4; j++) s[j] = fma(av, bb[j][kk], s[j]);
                }
                [[unroll]] for (uint j = 0; j < TC4; j++) acc[r][j] = s[j];
            }
        } else {
            [[unroll]] for (uint j = 0; j < TC4; j++) {
                vec4 bj[W];
                fetch_b(j, k, bcol, bnb, bj);
                [[unroll]] for (uint r = 0; r < TM; r++) {
                    vec4 s = acc[r][j];
                    [[unroll]] for (uint kk = 0; kk < W; kk++) s = fma(vec4(a[r][kk]), bj[kk], s);
                    acc[r][j] = s;
                }
            }
        }
#else
        vec4 b[W][TC4]; // b[kk][j] = op(b)[k + kk, n0 + 4j .. 4j + 3]
        if (FORM == VKT_MM_FORM_TN) {
            [[unroll]] for (uint kk = 0; kk < W; kk++) {
                [[unroll]] for (uint g = 0; g < TM / W; g++) {
                    vec4 v[2];
                    read_a((k + kk) * p.lda + am[g], v);
                    [[unroll]] for (uint i = 0; i < W; i++) a[g * W + i][kk] = v[i / 4][i % 4];
                }
            }
        } else {
            [[unroll]] for (uint r = 0; r < TM; r++) {
                vec4 v[2];
                read_a(arow[r] + k, v);
                [[unroll]] for (uint i = 0; i < W; i++) a[r][i] = v[i / 4][i % 4];
            }
        }
        if (FORM == VKT_MM_FORM_NT) {
            [[unroll]] for (uint c = 0; c < TC; c++) {
                vec4 v[2];
                read_b(bcol[c] + k, v);
                [[unroll]] for (uint i = 0; i < W; i++) b[i][c / 4][c % 4] = v[i / 4][i % 4];
            }
        } else {
            [[unroll]] for (uint kk = 0; kk < W; kk++) {
                [[unroll]] for (uint t = 0; t < TW; t++) {
                    vec4 v[2];
                    read_b((k + kk) * p.ldb + bnb[t], v);
                    [[unroll]] for (uint q = 0; q < W / 4; q++) b[kk][t * (W / 4) + q] = v[q];
                }
            }
        }
        // Each accumulator takes its W FMAs in a row, so that a CPU driver that keeps it in
        // memory loads and stores it once per iteration.
        [[unroll]] for (uint r = 0; r < TM; r++) {
            [[unroll]] for (uint j = 0; j < TC4; j++) {
                vec4 s = acc[r][j];
                [[unroll]] for (uint kk = 0; kk < W; kk++) s = fma(vec4(a[r][kk]), b[kk][j], s);
                acc[r][j] = s;
            }
        }
#endif
    }

#ifdef MM_TEXEL
    // a's column sums: in the workgroups of the first column group only (a branch no lane takes
    // costs nothing on lavapipe: docs/PERFORMANCE.md), each lane four rows as one texel per k, in
    // k order from 0 and then added, as bias_grad_texel.comp sums: the same bits as that kernel's.
    if (MM_COLSUM != 0 && FORM == VKT_MM_FORM_TN && tile.y == 0) {
        for (uint i = lane; i < TM / 4; i += WG) {
            uint m = m0 + 4 * i, mc = min(m, M - 4);
            vec4 s = vec4(0.0);
            for (uint k = p.k_begin; k < p.k_end; k++)
                s += texelFetch(at, int((k * p.lda + mc + p.a_off) / 4));
            if (m < M) cs4[m / 4] += s;
        }
    }
#endif
    // Epilogue: bias (read with clamped indices, scaled to 0 when absent), the activation epilogue
    // (s read with clamped indices, as c is above) and the bounds guard.
    float use_bias = (p.has_bias != 0 && p.k_begin == 0) ? 1.0 : 0.0;
    vec4 bsum[TC4];
    [[unroll]] for (uint j = 0; j < TC4; j++) {
        uint n = n0 + 4 * j;
        uint o = p.bias_off;
        bsum[j] = use_bias * vec4(bias[o + min(n, N - 1)], bias[o + min(n + 1, N - 1)],
                                  bias[o + min(n + 2, N - 1)], bias[o + min(n + 3, N - 1)]);
    }
    [[unroll]] for (uint r = 0; r < TM; r++) {
        [[unroll]] for (uint t = 0; t < TW; t++) {
            uint m = m0 + r, n = n0 + t * W;
            vec4 v[2], s[2], y[2];
            [[unroll]] for (uint q = 0; q < W / 4; q++) v[q] = acc[r][t * (W / 4) + q] + bsum[t * (W / 4) + q];
            if (W == 4) v[1] = v[0];
            s[0] = s[1] = vec4(0.0);
            uint cm = min(m, M - 1) * p.ldc + bn[t]; // clamped, without the offsets
#ifdef MM_TEXEL
            if (MM_EPI_READS_S) read_texels(st, cm + p.x_off, s);
#else
            if (MM_EPI_READS_S) read_s(cm + p.x_off, s);
#endif
            [[unroll]] for (uint q = 0; q < W / 4; q++) y[q] = mm_epi(v[q], s[q], p.alpha);
            if (W == 4) y[1] = y[0];
            vec4 b[2]; // the SGD epilogue's momentum
            if (MM_EPI_SGD) {
                // c is the parameter tensor, s the momentum buffer (read with clamped indices,
                // as c is above); z writes the momentum buffer back.
                vec4 w[2];
                b[0] = b[1] = vec4(0.0);
#ifdef MM_SGD_TEXEL
                read_texels(ct, cm + p.c_off, w);
                if (p.sgd_mode != 0u) read_texels(st, cm + p.x_off, b);
#else
                read_c(cm + p.c_off, w);
                if (p.sgd_mode != 0u) read_s(cm + p.x_off, b);
#endif
                [[unroll]] for (uint q = 0; q < W / 4; q++) y[q] = mm_sgd(v[q], w[q], b[q]);
                if (W == 4) y[1] = y[0], b[1] = b[0];
                if (USTORE == 0 && m < M && n < N && p.sgd_mode != 0u)
                    write_z(m * p.ldc + n + p.x_off, b);
            }
#ifdef MM_TEXEL
            if (USTORE != 0 && MM_EPI_SGD && TC == W) {
                // Row mu and lane l's piece at column nu + l W, parameters and momentum, by
                // uniform stores. A piece past N stores the last piece, [N - W, N), which lane lw
                // holds (N is a multiple of W): a store that is made anyway, again. A row past M
                // would read row M - 1's parameters after their update and store a second step:
                // the host sets USTORE only where M is a multiple of TM (the clamp below is for
                // safety), and only with a momentum buffer (z is c otherwise).
                uint mu = min(from_push(m0) + r, M - 1u);
                uint nu = from_push(tile.y * WG * TC);
                uint lw = (N - W - nu) / W;
                // Each lane's piece, or the last piece's where the lane's is past N (one vpermd
                // per component on lavapipe); then lane l's is taken by a constant shuffle.
                uint src = min(lane, lw);
                vec4 ys[2], zs[2];
                [[unroll]] for (uint q = 0; q < 2; q++) {
                    ys[q] = subgroupShuffle(y[q], src);
                    zs[q] = subgroupShuffle(b[q], src);
                }
                [[unroll]] for (uint l = 0; l < WG; l++) {
                    uint e = mu * p.ldc + nu + min(l, lw) * W;
                    vec4 yl[2], zl[2];
                    [[unroll]] for (uint q = 0; q < 2; q++) {
                        yl[q] = subgroupShuffle(ys[q], l);
                        zl[q] = subgroupShuffle(zs[q], l);
                    }
                    write_z(e + p.x_off, zl);
                    write_c(e + p.c_off, yl);
                }
            } else
#endif
            if (m < M && n < N) {
                if (MM_EPI_WRITES_Z) write_z(m * p.ldc + n + p.x_off, v);
                write_c(m * p.ldc + n + p.c_off, y);
            }
        }
    }
}
