// attn_ops.c: the attention core ops of attn_ops.h. Each picks its tile from the device's limits
// (rows per workgroup, and the rows of K and V, or of Q and dO, that fit its shared memory beside
// them: 32 KiB on lavapipe and SwiftShader), takes its kernel from the per-device cache (ops.c)
// and records one dispatch per chunk of samples: a chunk is as many samples as keep every binding
// within maxStorageBufferRange (128 MiB on lavapipe), a multiple of the samples that keep every
// chunk's offsets aligned where that many fit. No barriers.
//
// Two ways of reading the streamed rows (the keys and values a query block walks, or the queries
// a key block walks), chosen per device and shape by vkt_attn_tile_for: blocks loaded into
// shared memory by the workgroup (GPUs, SwiftShader, lavapipe where C or D is not a multiple of
// 4), or texel fetches straight from the arrays (lavapipe; attn_fwd.comp says why).
//
// Measured at B 16, T 128, C 128, 4 heads (D 32), best of 5, against the same attention as
// products (per (sample, head) matmuls on q, k, v already laid out head by head, the full T x T
// scores, a row softmax and an elementwise pass standing in for the mask and the softmax
// backward: a lower bound of that path, with no permutes): lavapipe forward 6.9-8.7 ms against
// 27-33, backward 25-32 ms against 39-56; SwiftShader forward 354-526 ms against 53-73, backward
// 1332-1968 against 138-172 (SwiftShader does not unroll loops bounded by specialization
// constants and keeps the rows' registers in memory). So the fused core everywhere for now; a
// products path would pay on SwiftShader.
//
// Not here: the projections (the layer's matmuls), dropout on the attention weights, masks other
// than the causal one.
#include "attn_ops.h"

#include <math.h>
#include <string.h>

#include "attn_abi.h"
#include "vkt_internal.h"
#include "vkt_shaders.h"

// The kernels unroll their loops over a block's rows, an invocation's rows and DU of a row's vec4s
// (attn_fwd.comp): TILE * R * DU is kept under this many vec4 steps. lavapipe's compile time grows
// steeply past it (a block of 32 keys at D = 130 had not compiled after 10 minutes; 2 keys took
// 15 s).
#define UNROLL_MAX 256u
// Rows per shared-memory block at most: more rows halve the barriers per key again, but past 32
// the gain is small.
#define TILE_MAX 32u
// Invocations per workgroup of attn_stats (one per row).
#define STATS_WG 64u

static const vkt_device_info *info_of(vkt_ops *ops) {
    return vkt_device_get_info(vkt_ops_device(ops));
}

static uint32_t d4_of(uint32_t D) { return (D + 3) / 4; }

// The vec4s of a row per unrolled step: the largest divisor of D4 up to 16 (a D = 64 row whole).
static uint32_t du_of(uint32_t D4) {
    uint32_t du = D4 < 16 ? D4 : 16;
    while (D4 % du)
        du--;
    return du;
}

static uint32_t min32(uint32_t a, uint32_t b) { return a < b ? a : b; }

static void check_dims(uint32_t T, uint32_t C, uint32_t heads) {
    VKT_ASSERT(T >= 1 && heads >= 1 && C % heads == 0 && C / heads <= VKT_ATTN_MAX_D);
}

// Measured on lavapipe at B 16, T 128, C 128, 4 heads (D 32), CPU time of the process, on a shared
// machine (+-20%): blocks in shared memory 55 ms forward, 120 ms backward (each shared load in a
// loop is a loop over the lanes there); texels with one row per invocation 10.5 / 30; 16 rows
// per workgroup, 8 keys per block, 4 rows per invocation forward and 2 backward 6.6 / 23.5. More
// rows per invocation than that (the backward's key side holds 4 * R * D4 vec4s) made the
// backward 15x slower (LLVM's spills), so R * D4 stays at most 32 forward and 16 backward. Heads
// over 64 (D4 > 16) hit the same wall in the backward at R = 1: about 10x slower per FLOP.
vkt_attn_tile vkt_attn_tile_for(vkt_ops *ops, uint32_t T, uint32_t C, uint32_t heads) {
    check_dims(T, C, heads);
    const vkt_device_info *d = info_of(ops);
    uint32_t D = C / heads, D4 = d4_of(D);
    vkt_attn_tile t = {0};
    // Texels on lavapipe, when every row is whole vec4 texels (C and D multiples of 4) and one
    // sample's qkv fits a texel view.
    t.texel = d->driver_id == VK_DRIVER_ID_MESA_LLVMPIPE && C % 4 == 0 && D % 4 == 0 &&
              12ull * T * C + 256 <= 16ull * d->max_texel_buffer_elements;
    if (t.texel) {
        t.rows = 16;
        t.fwd_r = D4 <= 8 ? 4 : D4 <= 16 ? 2 : 1;
        t.bwd_r = D4 <= 8 ? 2 : 1;
        t.fwd_tile = t.bwd_tile = 8;
    } else {
        // One invocation per row, 32 rows (4 of lavapipe's 8-lane subgroups, 8 of SwiftShader's
        // 4, a warp); K and V (or Q and dO with their stats) blocks in shared memory.
        t.rows = 32;
        t.fwd_r = t.bwd_r = 1;
        uint32_t shm = d->shared_memory_bytes;
        t.fwd_tile = min32(TILE_MAX, shm / (2 * 16 * D4));
        t.bwd_tile = min32(TILE_MAX, shm / (2 * 16 * D4 + 8));
    }
    t.rows = min32(t.rows, min32(d->max_workgroup_invocations, d->max_workgroup_size[0]));
    uint32_t DU = du_of(D4);
    uint32_t fu = UNROLL_MAX / (t.fwd_r * DU), bu = UNROLL_MAX / (t.bwd_r * DU);
    t.fwd_tile = min32(t.fwd_tile, fu ? fu : 1);
    t.bwd_tile = min32(t.bwd_tile, bu ? bu : 1);
    VKT_ASSERT(t.fwd_tile >= 1 && t.bwd_tile >= 1); // D <= VKT_ATTN_MAX_D fits 16 KiB
    return t;
}

// ---------------------------------------------------------------------------------------------
// Chunks of samples

typedef struct attn_arg {
    vkt_view v;
    uint64_t per_sample; // bytes of one sample
    uint32_t *base;      // where the push constant of its first element goes (NULL: none)
    // A texel binding of argument `of`'s range (its whole range with texels, else one texel of
    // it: the kernel does not read the binding, which must still be valid); -1: a storage binding.
    int of;
} attn_arg;

static uint64_t gcd64(uint64_t a, uint64_t b) {
    while (b) {
        uint64_t r = a % b;
        a = b;
        b = r;
    }
    return a;
}

// The grid of one chunk of n samples: (x, y_per_sample * n, z) workgroups; or, with units > 0,
// one invocation per unit (units per sample, wg per workgroup), the workgroups folded into y.
typedef struct attn_grid {
    uint32_t x, y_per_sample, z;
    uint32_t units, wg;
} attn_grid;

// Records the kernel over B samples, a chunk at a time: for each chunk every argument is bound
// from the aligned offset at or before its first sample, and the push constants get the chunk's
// sample count and element bases. texel: the texel bindings get their arguments' whole ranges.
static void attn_dispatch(vkt_cmd *cmd, vkt_ops *ops, vkt_kernel *k, const attn_arg *args,
                          int nargs, bool texel, vkt_attn_push *push, uint32_t B, attn_grid g,
                          const char *label) {
    if (!k || B == 0) return; // a kernel that did not build is reported by vkt_ops_status
    const vkt_device_info *d = info_of(ops);
    const uint32_t *maxc = d->max_workgroup_count;
    uint64_t A =
        d->min_storage_buffer_offset_alignment ? d->min_storage_buffer_offset_alignment : 4;
    uint64_t At = d->min_texel_buffer_offset_alignment;
    if (At > A) A = At; // both powers of two: every binding start suits both kinds
    if (A < 16) A = 16;
    uint64_t range = d->max_storage_buffer_range, most = 0, align_samples = 1;
    if (texel && 16ull * d->max_texel_buffer_elements < range)
        range = 16ull * d->max_texel_buffer_elements;
    VKT_ASSERT(nargs <= 8);
    for (int i = 0; i < nargs; i++) {
        if (args[i].of >= 0) continue;
        VKT_ASSERT(args[i].v.size >= args[i].per_sample * B); // the view must hold the shape
        if (args[i].per_sample > most) most = args[i].per_sample;
        uint64_t gi = A / gcd64(A, args[i].per_sample);
        align_samples = align_samples / gcd64(align_samples, gi) * gi;
    }
    VKT_ASSERT(most + A <= range); // one sample of each array fits a binding
    uint64_t nb = (range - A) / most;
    if (g.units) {
        // 32-bit invocation indices, and the folded grid within the device's counts.
        uint64_t lim = UINT32_MAX / g.units, groups = (uint64_t)maxc[0] * maxc[1] * g.wg / g.units;
        if (nb > lim) nb = lim;
        if (nb > groups) nb = groups;
    } else if (nb > maxc[1] / g.y_per_sample) {
        nb = maxc[1] / g.y_per_sample;
    }
    VKT_ASSERT(nb >= 1);
    // Aligned chunks where that many samples fit; otherwise bindings start before their first
    // sample (the element bases say where it is).
    if (nb >= align_samples) nb = nb / align_samples * align_samples;
    for (uint64_t b0 = 0; b0 < B; b0 += nb) {
        uint64_t n = B - b0 < nb ? B - b0 : nb;
        vkt_view bind[8];
        for (int i = 0; i < nargs; i++) {
            if (args[i].of >= 0) continue;
            vkt_view v = args[i].v;
            uint64_t at = v.offset + b0 * args[i].per_sample, start = at / A * A;
            VKT_ASSERT(start >= v.offset || b0 == 0); // the view's own offset is aligned
            bind[i] = (vkt_view){v.buffer, start, at - start + n * args[i].per_sample};
            if (args[i].base) *args[i].base = (uint32_t)((at - start) / 4);
        }
        for (int i = 0; i < nargs; i++) {
            if (args[i].of < 0) continue;
            bind[i] = bind[args[i].of];
            if (!texel) bind[i].size = 16;
        }
        push->nb = (uint32_t)n;
        uint32_t x = g.x, y = (uint32_t)n * g.y_per_sample;
        if (g.units) {
            uint64_t groups = (n * g.units + g.wg - 1) / g.wg;
            x = (uint32_t)(groups < maxc[0] ? groups : maxc[0]);
            y = (uint32_t)((groups + x - 1) / x);
        }
        VKT_ASSERT(x <= maxc[0] && y <= maxc[1] && g.z <= maxc[2]);
        vkt_cmd_dispatch(cmd, k, bind, nargs, push, sizeof *push, x, y, g.z, label);
    }
}

static vkt_attn_push push_of(uint32_t T, uint32_t C, uint32_t heads) {
    return (vkt_attn_push){.T = T, .C = C, .heads = heads, .scale = (float)(1.0 / sqrt(C / heads))};
}

static vkt_kernel *attn_kernel(vkt_ops *ops, vkt_shader_id shader, uint32_t wg, uint32_t D,
                               uint32_t tile, bool texel, uint32_t R) {
    uint32_t spec[9] = {wg, 1, 1, D, d4_of(D), tile, texel ? 1u : 0u, R, du_of(d4_of(D))};
    return vkt_ops_kernel(ops, shader, spec, 9);
}

// ---------------------------------------------------------------------------------------------
// The ops

void vkt_op_attn_forward(vkt_cmd *cmd, vkt_ops *ops, vkt_view o, vkt_view lse, vkt_view qkv,
                         uint32_t B, uint32_t T, uint32_t C, uint32_t heads, const char *label) {
    check_dims(T, C, heads);
    uint32_t D = C / heads;
    vkt_attn_tile t = vkt_attn_tile_for(ops, T, C, heads);
    uint32_t R = t.fwd_r;
    vkt_kernel *k = attn_kernel(ops, VKT_SHADER_ATTN_FWD, t.rows, D, t.fwd_tile, t.texel, R);
    vkt_attn_push p = push_of(T, C, heads);
    attn_arg args[4] = {{qkv, 12ull * T * C, &p.qkv_base, -1},
                        {o, 4ull * T * C, &p.o_base, -1},
                        {lse, 4ull * heads * T, &p.lse_base, -1},
                        {qkv, 0, NULL, 0}};
    attn_dispatch(
        cmd, ops, k, args, 4, t.texel, &p, B,
        (attn_grid){.x = (T + t.rows * R - 1) / (t.rows * R), .y_per_sample = heads, .z = 1},
        label);
}

void vkt_op_attn_stats(vkt_cmd *cmd, vkt_ops *ops, vkt_view stats, vkt_view o, vkt_view dout,
                       vkt_view lse, uint32_t B, uint32_t T, uint32_t C, uint32_t heads,
                       const char *label) {
    check_dims(T, C, heads);
    uint32_t D = C / heads;
    vkt_kernel *k = attn_kernel(ops, VKT_SHADER_ATTN_STATS, STATS_WG, D, 1, false, 1);
    vkt_attn_push p = push_of(T, C, heads);
    attn_arg args[4] = {{o, 4ull * T * C, &p.o_base, -1},
                        {dout, 4ull * T * C, &p.do_base, -1},
                        {lse, 4ull * heads * T, &p.lse_base, -1},
                        {stats, 16ull * heads * T, &p.stats_base, -1}};
    // One invocation per (sample, head, row), the workgroups folded into y.
    attn_dispatch(cmd, ops, k, args, 4, false, &p, B,
                  (attn_grid){.z = 1, .units = heads * T, .wg = STATS_WG}, label);
}

void vkt_op_attn_backward(vkt_cmd *cmd, vkt_ops *ops, vkt_view dqkv, vkt_view qkv, vkt_view dout,
                          vkt_view stats, uint32_t B, uint32_t T, uint32_t C, uint32_t heads,
                          const char *label) {
    check_dims(T, C, heads);
    uint32_t D = C / heads;
    vkt_attn_tile t = vkt_attn_tile_for(ops, T, C, heads);
    uint32_t R = t.bwd_r;
    vkt_kernel *k = attn_kernel(ops, VKT_SHADER_ATTN_BWD, t.rows, D, t.bwd_tile, t.texel, R);
    vkt_attn_push p = push_of(T, C, heads);
    attn_arg args[7] = {{qkv, 12ull * T * C, &p.qkv_base, -1},
                        {dout, 4ull * T * C, &p.do_base, -1},
                        {stats, 16ull * heads * T, &p.stats_base, -1},
                        {dqkv, 12ull * T * C, &p.dqkv_base, -1},
                        {qkv, 0, NULL, 0},
                        {dout, 0, NULL, 1},
                        {stats, 0, NULL, 2}};
    // z = 0: the query side (dq), z = 1: the key side (dk, dv).
    attn_dispatch(
        cmd, ops, k, args, 7, t.texel, &p, B,
        (attn_grid){.x = (T + t.rows * R - 1) / (t.rows * R), .y_per_sample = heads, .z = 2},
        label);
}
