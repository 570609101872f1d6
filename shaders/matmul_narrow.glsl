// matmul_narrow.glsl: the matmul of a product with one side of at most NS floats (a classifier's
// 10 outputs), for the CPU drivers, in place and in one dispatch: the form says which side.
//   NT, N <= NS (a dense layer's forward):  one row per lane, all N columns in its registers.
//   TN, M <= NS (its weight gradient):      four columns per lane, all M rows in its registers.
//   NN, K <= NS (its input gradient):       four columns per lane, TM rows per workgroup, all K
//                                           rows of b in its registers.
// Reads and writes what matmul_wide.glsl does (its header), with the same arithmetic: each output
// starts from 0 (or beta c), takes its k terms in k order by fma, then + bias, then the epilogue
// (mm_epilogue.glsl; no optimizer epilogue). So where the padded texel kernel (engine/ops/
// matmul.c, record_padded: the operands copied and zero-padded to multiples of 8) ran a product,
// this kernel gives it bit for bit, without the copies and barriers.
//
// b is read as vec4 texels (binding 2), and so is a in NT (binding 1: a's own row along k), and in
// NN the epilogue's s (binding 1 there). In NN
// and TN a is the operand every lane needs (b's multipliers): its rows may start anywhere (a
// 10-wide row is not 16-byte aligned), so it is read as floats, each lane one float, and
// subgroupShuffle hands each to every lane (one vpermd on lavapipe): out of vec4 texels (binding
// 8) where a's view is whole texels (VKT_SPEC_MM_A_TEXEL), else from binding 6. The workgroup must be one
// subgroup of WG lanes, WG <= NS <= 2 WG. TN with VKT_SPEC_MM_COLSUM also adds a's column sums to
// binding 7 (vkt_abi.h). The host (engine/ops/matmul.c, narrow_fits) checks what
// the texel reads and the vec4 stores need: NT: K, lda, ldb and the offsets of a and b multiples
// of 4; NN and TN: N, ldb, ldc and the offsets of b, c (and s, z) multiples of 4. Rows and
// columns past M, N (and k past K) are clamped on load and skipped on store.
//
// Why: a side of 10 fits neither wide kernel (its pieces are 8 floats), the scalar kernel runs
// such a product at 1-2 GFLOP/s on lavapipe, and the padded kernel spent most of its time on the
// 64-column tile's empty lanes, on copies and on barriers: 14 commands for fashion_mlp's last
// layer (docs/PERFORMANCE.md).
#version 450
#extension GL_EXT_control_flow_attributes : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#include "vkt_abi.h"

layout(local_size_x_id = VKT_SPEC_LOCAL_X, local_size_y_id = VKT_SPEC_LOCAL_Y,
       local_size_z_id = VKT_SPEC_LOCAL_Z) in;
layout(constant_id = VKT_SPEC_USER + 0) const uint FORM = VKT_MM_FORM_NT;
layout(constant_id = VKT_SPEC_USER + 1) const uint TM = 32; // NN: rows per workgroup
layout(constant_id = VKT_SPEC_USER + 2) const uint NS = 16; // the narrow side's bound
layout(constant_id = VKT_SPEC_USER + 3) const uint W = 4;   // floats per texel (4)

layout(std430, binding = 0) buffer Cv { vec4 c4[]; };
layout(std430, binding = 0) buffer C1 { float c1[]; };
layout(binding = 1) uniform samplerBuffer at;
layout(binding = 2) uniform samplerBuffer bt;
layout(std430, binding = 3) readonly buffer Bias { float bias[]; };
layout(std430, binding = 4) readonly buffer Sv { vec4 s4[]; };
layout(std430, binding = 4) readonly buffer S1 { float s1[]; };
layout(std430, binding = 5) writeonly buffer Zv { vec4 z4[]; };
layout(std430, binding = 5) writeonly buffer Z1 { float z1[]; };
layout(std430, binding = 6) readonly buffer A1 { float a1[]; };
// The same a as vec4 texels (VKT_SPEC_MM_A_TEXEL, a_at).
layout(constant_id = VKT_SPEC_MM_A_TEXEL) const uint A_TEXEL = 0;
layout(binding = 8) uniform samplerBuffer a8;
layout(push_constant) uniform PC { vkt_matmul_push p; };
// TN: a's column sums (the bias gradient), added to binding 7 (vkt_abi.h, VKT_SPEC_MM_COLSUM).
layout(constant_id = VKT_SPEC_MM_COLSUM) const uint MM_COLSUM = 0;
layout(std430, binding = 7) buffer ColSum { float cs1[]; };

#include "mm_epilogue.glsl"

const uint WG = gl_WorkGroupSize.x;

// Element e of a (NN, TN): with A_TEXEL out of its texel, a fetch and a select per lane, else as a
// float. A storage-buffer load is a loop over the lanes on lavapipe: fashion_mlp's 10-wide weight
// and input gradients ran 25-35% faster through texels (docs/PERFORMANCE.md). The host sets
// A_TEXEL where a's view is whole texels (a 10-wide row still starts anywhere inside it).
float a_at(uint e) {
    if (A_TEXEL == 0) return a1[e];
    vec4 t = texelFetch(a8, int(e / 4));
    uint q = e % 4;
    return q == 0 ? t.x : q == 1 ? t.y : q == 2 ? t.z : t.w;
}

// The float that lane (i % WG) holds in x0 (i < WG) or x1, on every lane.
float from_lane(float x0, float x1, uint i) { return subgroupShuffle(i < WG ? x0 : x1, i % WG); }

// NT: c[m, n] for the lane's row m and every n < N.
void narrow_n(uint lane) {
    uint M = p.m, N = p.n;
    uint m = gl_WorkGroupID.x * WG + lane, mr = min(m, M - 1);
    uint arow = mr * p.lda + p.a_off;
    // b's rows lane and WG + lane (clamped): each k step's texel of row n reaches every lane by
    // shuffles.
    uint brow0 = min(lane, N - 1) * p.ldb + p.b_off;
    uint brow1 = min(WG + lane, N - 1) * p.ldb + p.b_off;
    float acc[NS];
    [[unroll]] for (uint n = 0; n < NS; n++) acc[n] = 0.0;
    if (p.beta != 0.0 || p.k_begin > 0) {
        float beta = p.k_begin > 0 ? 1.0 : p.beta;
        [[unroll]] for (uint n = 0; n < NS; n++)
            acc[n] = beta * c1[mr * p.ldc + min(n, N - 1) + p.c_off];
    }
    for (uint k = p.k_begin; k < p.k_end; k += 4) {
        vec4 av = texelFetch(at, int((arow + k) / 4));
        vec4 b0 = texelFetch(bt, int((brow0 + k) / 4));
        vec4 b1 = texelFetch(bt, int((brow1 + k) / 4));
        [[unroll]] for (uint n = 0; n < NS; n++) {
            [[unroll]] for (uint kk = 0; kk < 4; kk++)
                acc[n] = fma(av[kk], from_lane(b0[kk], b1[kk], n), acc[n]);
        }
    }
    float use_bias = (p.has_bias != 0 && p.k_begin == 0) ? 1.0 : 0.0;
    [[unroll]] for (uint j = 0; j < NS / 4; j++) {
        vec4 v, s = vec4(0.0);
        [[unroll]] for (uint q = 0; q < 4; q++) {
            uint n = min(4 * j + q, N - 1);
            v[q] = acc[4 * j + q] + use_bias * bias[p.bias_off + n];
            if (MM_EPI_READS_S) s[q] = s1[mr * p.ldc + n + p.x_off];
        }
        vec4 y = mm_epi(v, s, p.alpha);
        [[unroll]] for (uint q = 0; q < 4; q++) {
            uint n = 4 * j + q;
            if (m < M && n < N) {
                if (MM_EPI_WRITES_Z) z1[m * p.ldc + n + p.x_off] = v[q];
                c1[m * p.ldc + n + p.c_off] = y[q];
            }
        }
    }
}

// The bias at the four columns from n (clamped), scaled to 0 where absent.
vec4 bias4(uint n, uint N) {
    float use_bias = (p.has_bias != 0 && p.k_begin == 0) ? 1.0 : 0.0;
    uint o = p.bias_off;
    return use_bias * vec4(bias[o + min(n, N - 1)], bias[o + min(n + 1, N - 1)],
                           bias[o + min(n + 2, N - 1)], bias[o + min(n + 3, N - 1)]);
}

// The epilogue and the store of row m's four columns from n (nc: n clamped inside the row).
void finish4(uint m, uint n, uint nc, vec4 acc, vec4 bsum) {
    uint M = p.m, N = p.n;
    uint cm = min(m, M - 1) * p.ldc + nc;
    vec4 v = acc + bsum;
    vec4 s = vec4(0.0);
    // NN reads s as texels (binding 1, where the host binds it): a storage-buffer load here, in
    // the loop over the rows, is a loop over the lanes per component on lavapipe, and took 2/3 of
    // fashion_mlp's 10-wide input gradient (docs/PERFORMANCE.md).
    if (MM_EPI_READS_S)
        s = FORM == VKT_MM_FORM_NN ? texelFetch(at, int((cm + p.x_off) / 4))
                                   : s4[(cm + p.x_off) / 4];
    vec4 y = mm_epi(v, s, p.alpha);
    if (m < M && n < N) {
        if (MM_EPI_WRITES_Z) z4[(m * p.ldc + n + p.x_off) / 4] = v;
        c4[(m * p.ldc + n + p.c_off) / 4] = y;
    }
}

// beta c at row m's four columns from nc (clamped), or 0.
vec4 start4(uint m, uint nc) {
    if (p.beta == 0.0 && p.k_begin == 0) return vec4(0.0);
    float beta = p.k_begin > 0 ? 1.0 : p.beta;
    return beta * c4[(min(m, p.m - 1) * p.ldc + nc + p.c_off) / 4];
}

// TN: c[m, n .. n + 3] for every m < M and the lane's four columns.
void narrow_m(uint lane) {
    uint M = p.m, N = p.n;
    uint n = (gl_WorkGroupID.y * WG + lane) * 4, nc = min(n, N - 4);
    vec4 acc[NS];
    [[unroll]] for (uint m = 0; m < NS; m++) acc[m] = start4(m, nc);
    for (uint k = p.k_begin; k < p.k_end; k++) {
        vec4 bk = texelFetch(bt, int((k * p.ldb + nc + p.b_off) / 4));
        uint ar = k * p.lda + p.a_off;
        float x0 = a_at(ar + min(lane, M - 1)), x1 = a_at(ar + min(WG + lane, M - 1));
        [[unroll]] for (uint m = 0; m < NS; m++)
            acc[m] = fma(vec4(from_lane(x0, x1, m)), bk, acc[m]);
    }
    // a's column sums, in the first workgroup only: row m by lane m % WG, k in order from 0.
    if (MM_COLSUM != 0 && gl_WorkGroupID.y == 0) {
        for (uint m = lane; m < M; m += WG) {
            float s = 0.0;
            for (uint k = p.k_begin; k < p.k_end; k++) s += a_at(k * p.lda + p.a_off + m);
            cs1[m] += s;
        }
    }
    vec4 bsum = bias4(n, N);
    [[unroll]] for (uint m = 0; m < NS; m++) finish4(m, n, nc, acc[m], bsum);
}

// NN: c[m, n .. n + 3] for the workgroup's TM rows m and the lane's four columns.
void narrow_k(uint lane) {
    uint M = p.m, N = p.n;
    uint n = (gl_WorkGroupID.y * WG + lane) * 4, nc = min(n, N - 4);
    uint kn = p.k_end - p.k_begin; // at most NS
    vec4 bk[NS];
    [[unroll]] for (uint k = 0; k < NS; k++)
        bk[k] = texelFetch(bt, int(((p.k_begin + min(k, kn - 1)) * p.ldb + nc + p.b_off) / 4));
    vec4 bsum = bias4(n, N);
    uint m0 = gl_WorkGroupID.x * TM;
    for (uint r = 0; r < TM; r++) {
        uint m = m0 + r;
        uint ar = min(m, M - 1) * p.lda + p.a_off + p.k_begin;
        float x0 = a_at(ar + min(lane, kn - 1)), x1 = a_at(ar + min(WG + lane, kn - 1));
        vec4 acc = start4(m, nc);
        [[unroll]] for (uint k = 0; k < NS; k++)
            if (k < kn) acc = fma(vec4(from_lane(x0, x1, k)), bk[k], acc);
        finish4(m, n, nc, acc, bsum);
    }
}

void main() {
    uint lane = gl_SubgroupInvocationID;
    if (FORM == VKT_MM_FORM_NT)
        narrow_n(lane);
    else if (FORM == VKT_MM_FORM_TN)
        narrow_m(lane);
    else
        narrow_k(lane);
}
