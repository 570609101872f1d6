// embed_ops.c: the embedding ops of embed_ops.h. The forward is a gather (shaders/embed_fwd.comp);
// the position embedding's forward a broadcast add on the ew.glsl skeleton (embed_pos.comp). The
// token embedding's weight gradient is the one op here with structure of its own:
//
// dW[v] += sum of dy[n] over the positions n with id v must not depend on the order in which the
// device runs invocations, so float atomics are out. One invocation per (v, c) scanning every
// position costs V*N*C (V = 50257 for GPT-2's vocabulary); a workgroup per row scanning the ids
// V*N. Instead the backward sorts the N keys (row, position) and sums each row's run of keys in
// position order: keys (one pass), a bitonic sort (tiles of up to 512 keys in shared memory, the
// stages across tiles one dispatch per step), and the sums (one lane per (key, channel); the
// lane of a run's first key adds its run into dW). The keys are unique, so the sorted order
// (and with it every sum's order) is the only one; the cost is N log^2 N for the sort and N*C
// for the sums, whatever V is. A counting sort would cost N + V but needs a prefix sum over V
// and a stable scatter, which integer atomics do not give without a sort of each bucket.
//
// Chunks: a table or gradient larger than maxStorageBufferRange is bound a chunk of rows at a
// time; positions are processed a chunk at a time when N*C*4 (dy) or the keys exceed it (the
// chunks' sums are added into dW one after the other, with a barrier between).
#include "embed_ops.h"

#include "embed_abi.h"
#include "vkt_internal.h"
#include "vkt_shaders.h"

// ---------------------------------------------------------------------------------------------
// Shapes from the device's limits

typedef struct embed_dev {
    uint32_t wg;    // lanes per workgroup: a power of two, 256 or the device's largest below
    uint64_t range; // bytes one binding may span
    uint64_t aw;    // slice starts are multiples of this many 4-byte words (offset alignment)
    const uint32_t *maxc;
} embed_dev;

static embed_dev embed_dev_of(vkt_ops *ops, uint64_t range) {
    const vkt_device_info *d = vkt_device_get_info(vkt_ops_device(ops));
    embed_dev e = {.wg = 256, .range = d->max_storage_buffer_range, .maxc = d->max_workgroup_count};
    while (e.wg > d->max_workgroup_invocations || e.wg > d->max_workgroup_size[0])
        e.wg /= 2;
    if (range && range < e.range) e.range = range;
    // At least 4 words: the vec4 bindings of embed_pos (ew.glsl) start on a whole vec4.
    e.aw = d->min_storage_buffer_offset_alignment / 4;
    if (e.aw < 4) e.aw = 4;
    return e;
}

static uint64_t pow2_ceil(uint64_t x) {
    uint64_t p = 1;
    while (p < x)
        p *= 2;
    return p;
}

static uint64_t pow2_floor(uint64_t x) {
    uint64_t p = 1;
    while (p * 2 <= x)
        p *= 2;
    return p;
}

// Units per chunk when one unit takes `bytes` of a binding: all n, or the most that fit the
// range, a multiple of the alignment so that every chunk's offset stays aligned.
static uint64_t chunk_units(const embed_dev *e, uint64_t n, uint64_t bytes) {
    uint64_t fit = e->range / bytes;
    if (fit >= n) return n;
    fit = fit / e->aw * e->aw;
    VKT_ASSERT(fit > 0); // one aligned run of units fits (4 KiB rows on a 128 MiB range)
    return fit;
}

static vkt_kernel *kernel(vkt_ops *ops, vkt_shader_id shader, const embed_dev *e) {
    uint32_t spec[3] = {e->wg, 1, 1};
    return vkt_ops_kernel(ops, shader, spec, 3);
}

// A dispatch of `lanes` invocations, workgroups folded into y (maxComputeWorkGroupCount[0] may
// be only 65535).
static void dispatch(vkt_cmd *cmd, vkt_kernel *k, const embed_dev *e, const vkt_view *bind,
                     int nbind, const void *push, uint32_t push_size, uint64_t groups,
                     const char *label) {
    uint64_t gx = groups < e->maxc[0] ? groups : e->maxc[0];
    uint64_t gy = (groups + gx - 1) / gx;
    VKT_ASSERT(groups > 0 && gy <= e->maxc[1]);
    vkt_cmd_dispatch(cmd, k, bind, nbind, push, push_size, (uint32_t)gx, (uint32_t)gy, 1, label);
}

static uint64_t groups_of(uint64_t lanes, uint64_t per_group) {
    return (lanes + per_group - 1) / per_group;
}

// ---------------------------------------------------------------------------------------------
// Token embedding

void vkt_op_embedding_forward(vkt_cmd *cmd, vkt_ops *ops, vkt_view y, vkt_view ids, vkt_view w,
                              const vkt_view *bad, uint32_t N, uint32_t V, uint32_t C,
                              uint64_t range, const char *label) {
    if (N == 0) return;
    VKT_ASSERT(V >= 1 && C >= 1);
    VKT_ASSERT(y.size >= 4ull * N * C && ids.size >= 4ull * N && w.size >= 4ull * V * C);
    VKT_ASSERT(!bad || bad->size >= 4);
    embed_dev e = embed_dev_of(ops, range);
    vkt_kernel *k = kernel(ops, VKT_SHADER_EMBED_FWD, &e);
    if (!k) return; // reported by vkt_ops_status
    uint64_t P = chunk_units(&e, N, 4ull * C), R = chunk_units(&e, V, 4ull * C);
    bool first = true;
    for (uint64_t r0 = 0; r0 < V; r0 += R) {
        uint64_t nr = V - r0 < R ? V - r0 : R;
        for (uint64_t p0 = 0; p0 < N; p0 += P) {
            uint64_t np = N - p0 < P ? N - p0 : P;
            // Chunks of rows write the same positions of y, and counting dispatches add into
            // the same counter: a barrier between them.
            if (!first && (p0 == 0 || (bad && r0 == 0))) vkt_cmd_barrier(cmd);
            first = false;
            vkt_view ys = vkt_view_sub(y, 4 * p0 * C, 4 * np * C);
            bool count = bad && r0 == 0;
            vkt_view bind[4] = {vkt_view_sub(ids, 4 * p0, 4 * np),
                                vkt_view_sub(w, 4 * r0 * C, 4 * nr * C), ys,
                                count ? vkt_view_sub(*bad, 0, 4) : ys};
            vkt_embed_push p = {.n = (uint32_t)np,
                                .C = C,
                                .V = V,
                                .r0 = (uint32_t)r0,
                                .nr = (uint32_t)nr,
                                .count = count ? 1u : 0u};
            dispatch(cmd, k, &e, bind, 4, &p, sizeof p, groups_of(np * C, e.wg), label);
        }
    }
}

uint64_t vkt_embedding_backward_scratch(uint32_t N) {
    uint64_t n2 = pow2_ceil(N);
    return 8 * (n2 > VKT_EMBED_TILE_MAX ? n2 : VKT_EMBED_TILE_MAX);
}

// The bitonic sort of keys[n2] (a power of two, at least the tile): the tiles first, then each
// merge stage k: its steps across tiles one dispatch each, its steps within tiles one dispatch.
static void sort_keys(vkt_cmd *cmd, vkt_kernel *local, vkt_kernel *step, const embed_dev *e,
                      vkt_view keys, uint64_t n2, const char *label) {
    uint64_t tile = 2ull * e->wg;
    vkt_embed_sort_push p = {.n2 = (uint32_t)n2, .k = 0, .j = 0};
    dispatch(cmd, local, e, &keys, 1, &p, sizeof p, n2 / tile, label);
    vkt_cmd_barrier(cmd);
    for (uint64_t k = 2 * tile; k <= n2; k *= 2) {
        p.k = (uint32_t)k;
        for (uint64_t j = k / 2; j >= tile; j /= 2) {
            p.j = (uint32_t)j;
            dispatch(cmd, step, e, &keys, 1, &p, sizeof p, groups_of(n2 / 2, e->wg), label);
            vkt_cmd_barrier(cmd);
        }
        p.j = 0;
        dispatch(cmd, local, e, &keys, 1, &p, sizeof p, n2 / tile, label);
        vkt_cmd_barrier(cmd);
    }
}

void vkt_op_embedding_backward(vkt_cmd *cmd, vkt_ops *ops, vkt_view dw, vkt_view dy, vkt_view ids,
                               vkt_view scratch, uint32_t N, uint32_t V, uint32_t C, uint64_t range,
                               const char *label) {
    if (N == 0) return;
    VKT_ASSERT(V >= 1 && C >= 1);
    VKT_ASSERT(dw.size >= 4ull * V * C && dy.size >= 4ull * N * C && ids.size >= 4ull * N);
    embed_dev e = embed_dev_of(ops, range);
    uint64_t tile = 2ull * e.wg;
    VKT_ASSERT(tile <= VKT_EMBED_TILE_MAX && 8 * tile <= e.range);
    vkt_kernel *kk = kernel(ops, VKT_SHADER_EMBED_KEYS, &e);
    vkt_kernel *kl = kernel(ops, VKT_SHADER_EMBED_SORT_LOCAL, &e);
    vkt_kernel *ks = kernel(ops, VKT_SHADER_EMBED_SORT_STEP, &e);
    vkt_kernel *kd = kernel(ops, VKT_SHADER_EMBED_DW, &e);
    if (!kk || !kl || !ks || !kd) return; // reported by vkt_ops_status
    // Positions per chunk: all, or a power of two whose dy rows and keys fit the range.
    uint64_t fit = e.range / (4ull * C) < e.range / 8 ? e.range / (4ull * C) : e.range / 8;
    uint64_t P = pow2_floor(fit);
    if (P >= N)
        P = N;
    else
        VKT_ASSERT(P % e.aw == 0); // chunk offsets stay aligned
    uint64_t most_keys = pow2_ceil(P) > tile ? pow2_ceil(P) : tile;
    VKT_ASSERT(scratch.size >= 8 * most_keys && 8 * most_keys <= e.range);
    uint64_t R = chunk_units(&e, V, 4ull * C);
    for (uint64_t p0 = 0; p0 < N; p0 += P) {
        // The previous chunk's sums read the keys and add into dW.
        if (p0) vkt_cmd_barrier(cmd);
        uint64_t np = N - p0 < P ? N - p0 : P;
        uint64_t n2 = pow2_ceil(np) > tile ? pow2_ceil(np) : tile;
        vkt_view keys = vkt_view_sub(scratch, 0, 8 * n2), ids_c = vkt_view_sub(ids, 4 * p0, 4 * np);
        vkt_view bk[2] = {ids_c, keys};
        vkt_embed_keys_push pk = {.n2 = (uint32_t)n2, .n = (uint32_t)np, .V = V};
        dispatch(cmd, kk, &e, bk, 2, &pk, sizeof pk, groups_of(n2, e.wg), label);
        vkt_cmd_barrier(cmd);
        sort_keys(cmd, kl, ks, &e, keys, n2, label);
        // The sums, a chunk of dW's rows at a time (chunks write disjoint rows: no barrier).
        for (uint64_t r0 = 0; r0 < V; r0 += R) {
            uint64_t nr = V - r0 < R ? V - r0 : R;
            vkt_view bd[3] = {vkt_view_sub(keys, 0, 8 * np),
                              vkt_view_sub(dy, 4 * p0 * C, 4 * np * C),
                              vkt_view_sub(dw, 4 * r0 * C, 4 * nr * C)};
            vkt_embed_dw_push pd = {
                .n = (uint32_t)np, .C = C, .r0 = (uint32_t)r0, .nr = (uint32_t)nr};
            dispatch(cmd, kd, &e, bd, 3, &pd, sizeof pd, groups_of(np * C, e.wg), label);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Position embedding

// Floats per invocation of an ew.glsl shader: EW_K = 4 vec4s.
#define EW_FLOATS 16u

void vkt_op_pos_embedding_forward(vkt_cmd *cmd, vkt_ops *ops, vkt_view y, vkt_view x, vkt_view w,
                                  uint32_t B, uint32_t TC, const char *label) {
    if (B == 0 || TC == 0) return;
    VKT_ASSERT(y.size >= 4ull * B * TC && x.size >= 4ull * B * TC && w.size >= 4ull * TC);
    embed_dev e = embed_dev_of(ops, 0);
    VKT_ASSERT(4ull * TC <= e.range); // one sample's table rows are bound whole
    vkt_kernel *k = kernel(ops, VKT_SHADER_EMBED_POS, &e);
    if (!k) return; // reported by vkt_ops_status
    uint64_t S = chunk_units(&e, B, 4ull * TC);
    vkt_view wv = vkt_view_sub(w, 0, 4ull * TC);
    for (uint64_t b0 = 0; b0 < B; b0 += S) {
        uint64_t nb = B - b0 < S ? B - b0 : S;
        vkt_view xs = vkt_view_sub(x, 4 * b0 * TC, 4 * nb * TC),
                 ys = vkt_view_sub(y, 4 * b0 * TC, 4 * nb * TC);
        vkt_view bind[5] = {xs, xs, wv, ys, ys};
        vkt_embed_pos_push p = {.n = (uint32_t)(nb * TC), .TC = TC};
        dispatch(cmd, k, &e, bind, 5, &p, sizeof p, groups_of(nb * TC, (uint64_t)e.wg * EW_FLOATS),
                 label);
    }
}
