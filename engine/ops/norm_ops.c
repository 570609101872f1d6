// norm_ops.c: the ops of norm_ops.h, batchnorm2d and layernorm forward and backward, on the
// kernels shaders/norm_*.comp (push constants in shaders/norm_abi.h).
//
// batchnorm2d's statistics are per channel over B*HW floats (100352 for a batch of 128 28x28
// images): one workgroup per channel and part of the batch computes the part's mean and M2 by
// two passes (norm_bn_stats), one invocation per channel combines the parts in a fixed order
// (norm_bn_finish), and an elementwise pass normalises (norm_bn_apply); the backward reduces
// sum dy and sum dy*xhat the same way (norm_bn_bwd_sums, norm_bn_bwd_finish) before its
// elementwise input gradient (norm_bn_dx). layernorm's statistics are per row (norm_ln_fwd,
// norm_ln_bwd: a lane or a team of lanes per row); its weight and bias gradients are column sums
// over parts of rows (norm_ln_bwd_cols) added in part order (norm_ln_bwd_finish). No float
// atomics anywhere: the same inputs give the same bits on every run.
//
// Every view is bound within the device's maxStorageBufferRange: elementwise and row passes
// slice on 256-byte boundaries (Vulkan's largest storage offset alignment, so the slices'
// written ranges never overlap); the partial sums read a window of whole samples bound from the
// aligned offset below it, with the words in between skipped by the kernel (p.base); slices that
// write parts of the same partial array get a barrier between them. Workgroup counts are folded
// into y past maxComputeWorkGroupCount[0].
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "norm_ops.h"
#include "norm_abi.h"
#include "vkt_internal.h"
#include "vkt_shaders.h"

// Floats one batchnorm partial-statistics workgroup aims to cover (its part is whole samples):
// enough to keep a workgroup's lanes busy with a few hundred floats each, and enough parts per
// channel at large batches for a GPU's many workgroups.
#define BN_PART_FLOATS 8192u
// Floats per invocation of norm_bn_apply and norm_bn_dx (their NORM_EW_K).
#define BN_EW_K 4u
// Slices start on multiples of this many bytes.
#define SLICE_ALIGN 256u

static uint64_t g_test_range; // vkt_norm_ops_test_range

void vkt_norm_ops_test_range(uint64_t bytes) { g_test_range = bytes; }

int vkt_norm_float_text(float v, char *buf, size_t size) {
    int n = 0;
    for (int prec = 1; prec <= 9; prec++) {
        n = snprintf(buf, size, "%.*g", prec, (double)v);
        if (strtof(buf, NULL) == v) break;
    }
    return n;
}

// ---------------------------------------------------------------------------------------------
// Limits, kernels and dispatch

static const vkt_device_info *info_of(vkt_ops *ops) {
    return vkt_device_get_info(vkt_ops_device(ops));
}

// The bytes a bound view may hold: the device's maxStorageBufferRange (or the test's), at most
// 2^31 so that word indices stay well within 32 bits, a multiple of SLICE_ALIGN.
static uint64_t range_of(vkt_ops *ops) {
    uint64_t r = info_of(ops)->max_storage_buffer_range;
    if (g_test_range && g_test_range < r) r = g_test_range;
    if (r > (1ull << 31)) r = 1ull << 31;
    return r / SLICE_ALIGN * SLICE_ALIGN;
}

// A 1-D workgroup: a power of two up to 256 within the device's limits (norm_reduce.glsl's tree
// halves it).
static uint32_t wg_1d(vkt_ops *ops) {
    const vkt_device_info *d = info_of(ops);
    uint32_t wg = 256;
    while (wg > d->max_workgroup_invocations || wg > d->max_workgroup_size[0])
        wg /= 2;
    return wg;
}

// Whether the device's compute shaders have subgroupShuffleXor (rows.glsl's teams).
static bool has_shuffle(vkt_ops *ops) {
    vkt_device *dev = vkt_ops_device(ops);
    VkPhysicalDeviceSubgroupProperties sg = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES};
    VkPhysicalDeviceProperties2 props = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2,
                                         .pNext = &sg};
    vkGetPhysicalDeviceProperties2(dev->phys->handle, &props);
    return (sg.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT) &&
           (sg.supportedOperations & VK_SUBGROUP_FEATURE_SHUFFLE_BIT);
}

static vkt_kernel *kernel_1d(vkt_ops *ops, vkt_shader_id shader, uint32_t wg) {
    uint32_t spec[3] = {wg, 1, 1};
    return vkt_ops_kernel(ops, shader, spec, 3);
}

// One dispatch of `groups` workgroups, folded into y past maxComputeWorkGroupCount[0].
static void dispatch(vkt_cmd *cmd, vkt_ops *ops, vkt_kernel *k, const vkt_view *bind, int nbind,
                     const void *push, uint32_t push_size, uint64_t groups, const char *label) {
    if (!k || groups == 0) return; // a kernel that did not build is reported by vkt_ops_status
    const uint32_t *maxc = info_of(ops)->max_workgroup_count;
    uint64_t gx = groups < maxc[0] ? groups : maxc[0];
    uint64_t gy = (groups + gx - 1) / gx;
    VKT_ASSERT(gy <= maxc[1]);
    vkt_cmd_dispatch(cmd, k, bind, nbind, push, push_size, (uint32_t)gx, (uint32_t)gy, 1, label);
}

// The words [first, first + n) of v as a view that starts on the device-aligned offset at or
// below them (v's own offset is aligned); *base is the number of words before `first` in it,
// the same for every view of one layout (it depends on `first` and the alignment only).
static vkt_view window(vkt_ops *ops, vkt_view v, uint64_t first, uint64_t n, uint32_t *base) {
    uint64_t align = info_of(ops)->min_storage_buffer_offset_alignment;
    if (align < 4) align = 4;
    VKT_ASSERT(v.offset % align == 0 && 4 * (first + n) <= v.size);
    uint64_t skip = 4 * first % align;
    *base = (uint32_t)(skip / 4);
    return (vkt_view){v.buffer, v.offset + 4 * first - skip, skip + 4 * n};
}

// The words [first, first + n) of v (first a multiple of SLICE_ALIGN / 4).
static vkt_view slice(vkt_view v, uint64_t first, uint64_t n) {
    VKT_ASSERT(4 * (first + n) <= v.size);
    return (vkt_view){v.buffer, v.offset + 4 * first, 4 * n};
}

// Units (elements or rows of `unit` words) per slice of an elementwise or row pass: the most
// that fit the range, a multiple of `multiple` units (so that every slice starts on a
// SLICE_ALIGN boundary of the view).
static uint64_t slice_units(vkt_ops *ops, uint64_t unit, uint64_t multiple) {
    uint64_t fit = range_of(ops) / (4 * unit);
    VKT_ASSERT(fit >= multiple); // a row (or 64 of them) larger than the storage-buffer range
    return fit / multiple * multiple;
}

// ---------------------------------------------------------------------------------------------
// batchnorm2d

// The scratch: the per-channel coefficients (VKT_BN_COEF floats each), then, from the next
// 256-byte boundary, two floats per channel and part (at most one part per sample).
static uint64_t bn_part_offset(uint32_t C) {
    return (4ull * VKT_BN_COEF * C + SLICE_ALIGN - 1) / SLICE_ALIGN * SLICE_ALIGN;
}

uint64_t vkt_op_batchnorm_scratch_bytes(uint32_t C, uint32_t B) {
    return bn_part_offset(C) + 8ull * C * (B ? B : 1);
}

// How the partial passes cut the batch: spp samples per part, parts in all, and slices of
// `slice_samples` samples (a whole number of parts) whose window fits the range.
typedef struct bn_cut {
    uint32_t spp, parts, slice_samples;
} bn_cut;

static bn_cut bn_cut_of(vkt_ops *ops, uint32_t B, uint32_t C, uint32_t HW) {
    uint64_t sample = 4ull * C * HW;
    // A window of s samples is at most s * sample + 252 bytes (window(): alignment <= 256).
    uint64_t fit = (range_of(ops) - SLICE_ALIGN) / sample;
    VKT_ASSERT(fit >= 1); // one sample larger than the storage-buffer range
    uint64_t spp = (BN_PART_FLOATS + HW - 1) / HW;
    if (spp > B) spp = B;
    if (spp > fit) spp = fit;
    bn_cut c = {.spp = (uint32_t)spp, .parts = (uint32_t)((B + spp - 1) / spp)};
    uint64_t ss = fit / spp * spp;
    c.slice_samples = (uint32_t)(ss < B ? ss : B);
    return c;
}

// Runs a partial kernel (norm_bn_stats or norm_bn_bwd_sums) over every slice: bindings are the
// windows of the sliced views (x, and dy) followed by the fixed ones.
static void bn_partials(vkt_cmd *cmd, vkt_ops *ops, vkt_shader_id shader, const vkt_view *sliced,
                        int nsliced, const vkt_view *fixed, int nfixed, vkt_bn_push p, bn_cut cut,
                        const char *label) {
    uint32_t wg = wg_1d(ops);
    vkt_kernel *k = kernel_1d(ops, shader, wg);
    uint32_t B = p.B;
    uint64_t sample = (uint64_t)p.C * p.HW;
    for (uint32_t s0 = 0; s0 < B; s0 += cut.slice_samples) {
        uint32_t ns = B - s0 < cut.slice_samples ? B - s0 : cut.slice_samples;
        vkt_view bind[4];
        uint32_t base = 0;
        for (int i = 0; i < nsliced; i++) {
            uint32_t b;
            bind[i] = window(ops, sliced[i], s0 * sample, ns * sample, &b);
            VKT_ASSERT(i == 0 || b == base); // the sliced views' offsets are all aligned
            base = b;
        }
        for (int i = 0; i < nfixed; i++)
            bind[nsliced + i] = fixed[i];
        p.B = ns;
        p.base = base;
        p.part0 = s0 / cut.spp;
        p.nparts = (ns + cut.spp - 1) / cut.spp;
        // The slices write disjoint parts of one partial array, each binding it whole: a barrier
        // keeps that legal for synchronization validation, which tracks bound ranges.
        if (s0 > 0) vkt_cmd_barrier(cmd);
        dispatch(cmd, ops, k, bind, nsliced + nfixed, &p, sizeof p, (uint64_t)p.C * p.nparts,
                 label);
    }
}

// An elementwise pass (norm_bn_apply, norm_bn_dx) over B*C*HW floats: bindings are the slices of
// the sliced views followed by the fixed ones, then the sliced output.
static void bn_elementwise(vkt_cmd *cmd, vkt_ops *ops, vkt_shader_id shader, const vkt_view *in,
                           int nin, vkt_view coef, vkt_view out, vkt_bn_push p, uint64_t total,
                           const char *label) {
    uint32_t wg = wg_1d(ops);
    vkt_kernel *k = kernel_1d(ops, shader, wg);
    uint64_t chunk = slice_units(ops, 1, SLICE_ALIGN / 4);
    for (uint64_t e0 = 0; e0 < total; e0 += chunk) {
        uint64_t n = total - e0 < chunk ? total - e0 : chunk;
        vkt_view bind[4];
        for (int i = 0; i < nin; i++)
            bind[i] = slice(in[i], e0, n);
        bind[nin] = coef;
        bind[nin + 1] = slice(out, e0, n);
        p.n = (uint32_t)n;
        p.e0 = (uint32_t)e0;
        uint64_t per = (uint64_t)wg * BN_EW_K;
        dispatch(cmd, ops, k, bind, nin + 2, &p, sizeof p, (n + per - 1) / per, label);
    }
}

static void bn_check(vkt_ops *ops, vkt_view x, vkt_view gamma, vkt_view beta, vkt_view scratch,
                     uint32_t B, uint32_t C, uint32_t HW) {
    VKT_ASSERT(B > 0 && C > 0 && HW > 0);
    uint64_t total = (uint64_t)B * C * HW;
    VKT_ASSERT(total <= UINT32_MAX && x.size >= 4 * total);
    VKT_ASSERT(gamma.size >= 4ull * C && beta.size >= 4ull * C);
    VKT_ASSERT(scratch.size >= vkt_op_batchnorm_scratch_bytes(C, B));
    VKT_ASSERT(bn_part_offset(C) + 8ull * C * B <= info_of(ops)->max_storage_buffer_range);
}

void vkt_op_batchnorm_forward(vkt_cmd *cmd, vkt_ops *ops, vkt_view y, vkt_view saved,
                              vkt_view running_mean, vkt_view running_var, vkt_view num_batches,
                              vkt_view scratch, vkt_view x, vkt_view gamma, vkt_view beta,
                              uint32_t B, uint32_t C, uint32_t HW, float eps, float momentum,
                              bool train, const char *label) {
    bn_check(ops, x, gamma, beta, scratch, B, C, HW);
    uint64_t total = (uint64_t)B * C * HW;
    VKT_ASSERT(y.size >= 4 * total && saved.size >= 8ull * C && num_batches.size >= 4);
    VKT_ASSERT(running_mean.size >= 4ull * C && running_var.size >= 4ull * C);
    VKT_ASSERT(!train || (uint64_t)B * HW >= 2); // the unbiased variance divides by N - 1
    bn_cut cut = bn_cut_of(ops, B, C, HW);
    vkt_view coef = vkt_buffer_view(scratch.buffer, scratch.offset, 4ull * VKT_BN_COEF * C);
    vkt_view part =
        vkt_buffer_view(scratch.buffer, scratch.offset + bn_part_offset(C), 8ull * C * cut.parts);
    vkt_bn_push p = {.C = C,
                     .HW = HW,
                     .B = B,
                     .spp = cut.spp,
                     .parts = cut.parts,
                     .train = train ? 1u : 0u,
                     .eps = eps,
                     .momentum = momentum};
    if (train) {
        bn_partials(cmd, ops, VKT_SHADER_NORM_BN_STATS, &x, 1, &part, 1, p, cut, label);
        vkt_cmd_barrier(cmd);
    }
    uint32_t wg = wg_1d(ops);
    vkt_view fin[8] = {part, saved, coef, running_mean, running_var, num_batches, gamma, beta};
    dispatch(cmd, ops, kernel_1d(ops, VKT_SHADER_NORM_BN_FINISH, wg), fin, 8, &p, sizeof p,
             (C + wg - 1) / wg, label);
    vkt_cmd_barrier(cmd);
    bn_elementwise(cmd, ops, VKT_SHADER_NORM_BN_APPLY, &x, 1, coef, y, p, total, label);
}

void vkt_op_batchnorm_backward(vkt_cmd *cmd, vkt_ops *ops, const vkt_view *dx, vkt_view dgamma,
                               vkt_view dbeta, vkt_view scratch, vkt_view dy, vkt_view x,
                               vkt_view saved, vkt_view gamma, uint32_t B, uint32_t C, uint32_t HW,
                               const char *label) {
    bn_check(ops, x, gamma, gamma, scratch, B, C, HW);
    uint64_t total = (uint64_t)B * C * HW;
    VKT_ASSERT(dy.size >= 4 * total && saved.size >= 8ull * C);
    VKT_ASSERT(dgamma.size >= 4ull * C && dbeta.size >= 4ull * C);
    VKT_ASSERT(!dx || dx->size >= 4 * total);
    bn_cut cut = bn_cut_of(ops, B, C, HW);
    vkt_view coef = vkt_buffer_view(scratch.buffer, scratch.offset, 4ull * VKT_BN_COEF * C);
    vkt_view part =
        vkt_buffer_view(scratch.buffer, scratch.offset + bn_part_offset(C), 8ull * C * cut.parts);
    vkt_bn_push p = {.C = C, .HW = HW, .B = B, .spp = cut.spp, .parts = cut.parts};
    vkt_view sliced[2] = {x, dy}, fixed[2] = {saved, part};
    bn_partials(cmd, ops, VKT_SHADER_NORM_BN_BWD_SUMS, sliced, 2, fixed, 2, p, cut, label);
    vkt_cmd_barrier(cmd);
    uint32_t wg = wg_1d(ops);
    vkt_view fin[6] = {part, saved, gamma, coef, dgamma, dbeta};
    dispatch(cmd, ops, kernel_1d(ops, VKT_SHADER_NORM_BN_BWD_FINISH, wg), fin, 6, &p, sizeof p,
             (C + wg - 1) / wg, label);
    if (!dx) return;
    vkt_cmd_barrier(cmd);
    bn_elementwise(cmd, ops, VKT_SHADER_NORM_BN_DX, sliced, 2, coef, *dx, p, total, label);
}

// ---------------------------------------------------------------------------------------------
// layernorm

static uint32_t ln_parts(uint32_t R) {
    return (R + VKT_LN_ROWS_PER_PART - 1) / VKT_LN_ROWS_PER_PART;
}

uint64_t vkt_op_layernorm_scratch_bytes(uint32_t R, uint32_t D) {
    return 8ull * D * (R ? ln_parts(R) : 1);
}

// The kernel of a row pass (rows.glsl): an invocation per row, or a team of lanes per row for
// rows of more than 32 floats where the device has subgroup shuffles; *per_group rows per
// workgroup.
static vkt_kernel *ln_row_kernel(vkt_ops *ops, vkt_shader_id shader, uint32_t D,
                                 uint32_t *per_group) {
    uint32_t wg = wg_1d(ops), team = 1;
    if (D > 32 && has_shuffle(ops)) {
        // A power of two that divides the subgroup (a team never straddles two) and the
        // workgroup, with about 8 or more floats per lane.
        uint32_t sg = info_of(ops)->subgroup_size, cap = sg < 32 ? sg : 32;
        while (team < cap && team < wg && team * 8 <= D)
            team *= 2;
    }
    uint32_t spec[5] = {wg, 1, 1, team > 1 ? 1u : 0u, team};
    *per_group = wg / team;
    return vkt_ops_kernel(ops, shader, spec, 5);
}

static void ln_check(vkt_ops *ops, vkt_view x, vkt_view stats, vkt_view gamma, uint32_t R,
                     uint32_t D) {
    VKT_ASSERT(R > 0 && D > 0);
    VKT_ASSERT((uint64_t)R * D <= UINT32_MAX && x.size >= 4ull * R * D);
    VKT_ASSERT(stats.size >= 8ull * R && gamma.size >= 4ull * D);
    VKT_ASSERT(8ull * D * ln_parts(R) <= info_of(ops)->max_storage_buffer_range);
}

void vkt_op_layernorm_forward(vkt_cmd *cmd, vkt_ops *ops, vkt_view y, vkt_view stats, vkt_view x,
                              vkt_view gamma, vkt_view beta, uint32_t R, uint32_t D, float eps,
                              const char *label) {
    ln_check(ops, x, stats, gamma, R, D);
    VKT_ASSERT(y.size >= 4ull * R * D && beta.size >= 4ull * D);
    uint32_t per;
    vkt_kernel *k = ln_row_kernel(ops, VKT_SHADER_NORM_LN_FWD, D, &per);
    uint64_t chunk = slice_units(ops, D, VKT_LN_ROWS_PER_PART);
    for (uint64_t r0 = 0; r0 < R; r0 += chunk) {
        uint32_t n = (uint32_t)(R - r0 < chunk ? R - r0 : chunk);
        vkt_view bind[5] = {slice(x, r0 * D, (uint64_t)n * D), gamma, beta,
                            slice(y, r0 * D, (uint64_t)n * D), slice(stats, 2 * r0, 2ull * n)};
        vkt_ln_push p = {.R = n, .D = D, .eps = eps};
        dispatch(cmd, ops, k, bind, 5, &p, sizeof p, (n + per - 1) / per, label);
    }
}

void vkt_op_layernorm_backward(vkt_cmd *cmd, vkt_ops *ops, const vkt_view *dx, vkt_view dgamma,
                               vkt_view dbeta, vkt_view scratch, vkt_view dy, vkt_view x,
                               vkt_view stats, vkt_view gamma, uint32_t R, uint32_t D,
                               const char *label) {
    ln_check(ops, x, stats, gamma, R, D);
    VKT_ASSERT(dy.size >= 4ull * R * D && dgamma.size >= 4ull * D && dbeta.size >= 4ull * D);
    VKT_ASSERT(!dx || dx->size >= 4ull * R * D);
    VKT_ASSERT(scratch.size >= vkt_op_layernorm_scratch_bytes(R, D));
    uint32_t parts = ln_parts(R);
    vkt_view part = vkt_buffer_view(scratch.buffer, scratch.offset, 8ull * D * parts);
    uint32_t per;
    vkt_kernel *krow = dx ? ln_row_kernel(ops, VKT_SHADER_NORM_LN_BWD, D, &per) : NULL;
    // Column sums: TX columns (at least 8, for neighbouring reads) by TY row lanes.
    uint32_t wg = wg_1d(ops), tx = 8;
    while (tx < D && tx < 64 && tx < wg)
        tx *= 2;
    uint32_t ty = wg / tx;
    const vkt_device_info *d = info_of(ops);
    if (ty > d->max_workgroup_size[1]) ty = d->max_workgroup_size[1];
    if (ty > VKT_LN_ROWS_PER_PART) ty = VKT_LN_ROWS_PER_PART;
    uint32_t spec[3] = {tx, ty, 1};
    vkt_kernel *kcol = vkt_ops_kernel(ops, VKT_SHADER_NORM_LN_BWD_COLS, spec, 3);
    uint64_t chunk = slice_units(ops, D, VKT_LN_ROWS_PER_PART);
    for (uint64_t r0 = 0; r0 < R; r0 += chunk) {
        uint32_t n = (uint32_t)(R - r0 < chunk ? R - r0 : chunk);
        vkt_view xs = slice(x, r0 * D, (uint64_t)n * D), dys = slice(dy, r0 * D, (uint64_t)n * D);
        vkt_view ss = slice(stats, 2 * r0, 2ull * n);
        vkt_ln_push p = {.R = n, .D = D, .part0 = (uint32_t)(r0 / VKT_LN_ROWS_PER_PART)};
        if (r0 > 0) vkt_cmd_barrier(cmd); // disjoint parts of one partial array (bn_partials)
        if (dx) {
            vkt_view bind[5] = {xs, dys, ss, gamma, slice(*dx, r0 * D, (uint64_t)n * D)};
            dispatch(cmd, ops, krow, bind, 5, &p, sizeof p, (n + per - 1) / per, label);
        }
        vkt_view bind[4] = {xs, dys, ss, part};
        dispatch(cmd, ops, kcol, bind, 4, &p, sizeof p, (uint64_t)((D + tx - 1) / tx) * ln_parts(n),
                 label);
    }
    vkt_cmd_barrier(cmd);
    vkt_ln_push p = {.R = R, .D = D, .parts = parts};
    vkt_view bind[3] = {part, dgamma, dbeta};
    dispatch(cmd, ops, kernel_1d(ops, VKT_SHADER_NORM_LN_BWD_FINISH, wg), bind, 3, &p, sizeof p,
             (D + wg - 1) / wg, label);
}
