// norm_ops.c: the ops of norm_ops.h, batchnorm2d and layernorm forward and backward, on the
// kernels shaders/norm_*.comp (push constants in shaders/norm_abi.h).
//
// batchnorm2d's statistics are per channel over B*HW floats (100352 for a batch of 128 28x28
// images), cut into parts: spp samples' planes of one channel, or one segment of them where a
// plane has more than BN_PART_FLOATS floats. One invocation per part walks its floats in order
// (vec4s, through texel buffers on lavapipe) for the part's mean and M2 (norm_bn_stats), one
// invocation per channel combines the parts in a fixed order (norm_bn_finish, Chan's formula),
// and an elementwise pass normalises, a workgroup's lanes on a few planes, whose channels' four
// coefficients each lane reads once (norm_bn_apply); the backward reduces sum dy and sum dy*xhat
// the same way (norm_bn_bwd_sums, norm_bn_bwd_finish) before its elementwise input gradient
// (norm_bn_dx). No barrier inside a kernel (lavapipe and SwiftShader run one as a switch
// between coroutines) and no division per element. On lavapipe at a batch of 128 (GPU time):
// [32, 28, 28] forward 81 -> 5.7 ms, backward 73 -> 6.7 ms; [64, 14, 14] 42 -> 4.1, 38 -> 5.0;
// on SwiftShader 7-18x faster. layernorm's statistics are per row (norm_ln_fwd, norm_ln_bwd: a
// lane or a team of lanes per row); its weight and bias gradients are column sums over parts of
// rows (norm_ln_bwd_cols) added in part order (norm_ln_bwd_finish). No float atomics anywhere:
// the same inputs give the same bits on every run.
//
// Every view is bound within the device's maxStorageBufferRange: layernorm's row passes slice on
// 256-byte boundaries (Vulkan's largest storage offset alignment, so the slices' written ranges
// never overlap); batchnorm's passes bind windows of whole samples (partial sums) or planes
// (elementwise) from the aligned offset below them, with the floats in between skipped by the
// kernel (p.base), and put a barrier between slices (they write one partial array, or outputs
// whose windows may overlap). Workgroup counts are folded past maxComputeWorkGroupCount.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "norm_ops.h"
#include "norm_abi.h"
#include "ops_limits.h"
#include "vkt_internal.h"
#include "vkt_shaders.h"

// Floats one partial-sum invocation walks: a segment of its part's planes of one channel (planes
// of more are cut into segments; smaller ones make parts of several samples).
#define BN_PART_FLOATS 4096u
// The elementwise passes' workgroup, and the vec4s each lane aims at: lavapipe's cost per
// invocation (its set-up, the coefficients' load) showed at 4 per lane (a plane's chunk to each
// lane of a 64-lane workgroup: 9.1 ms for 128 x 32 x 28 x 28 floats) and was gone at 32 (3.4 ms).
#define BN_EW_WG 64u
#define BN_EW_VEC4 32u
// Invocations (parts) per workgroup of the partial kernels, and channels per workgroup of the
// finish kernels (small, so that a few dozen channels still spread over a CPU driver's threads).
#define BN_PART_WG 64u
#define BN_FINISH_WG 16u
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
// 256-byte boundary, two floats per channel, part and segment (bn_cut).
static uint64_t bn_part_offset(uint32_t C) {
    // VKT_TEXEL_WIDEN free bytes between the two (the layer scratch's guard: cmd.c, texel_view).
    return (4ull * VKT_BN_COEF * C + VKT_TEXEL_WIDEN + SLICE_ALIGN - 1) / SLICE_ALIGN * SLICE_ALIGN;
}

// How the partial sums cut the batch: parts of spp samples (the last fewer), each plane into
// nseg segments of seglen floats (a multiple of 4 when there are several, so that every
// segment's vec4s are whole where the plane's are; the last shorter). A partial-sum invocation
// walks one segment of its part's planes of one channel: about BN_PART_FLOATS floats.
typedef struct bn_cut {
    uint32_t spp, parts, nseg, seglen;
} bn_cut;

static bn_cut bn_cut_of(uint32_t B, uint32_t HW, uint64_t fit) {
    bn_cut c = {.nseg = 1, .seglen = HW};
    uint32_t n = (HW + BN_PART_FLOATS - 1) / BN_PART_FLOATS;
    if (n > 1) {
        c.seglen = ((HW + n - 1) / n + 3) / 4 * 4;
        c.nseg = (HW + c.seglen - 1) / c.seglen;
    }
    c.spp = BN_PART_FLOATS / c.seglen;
    if (c.spp < 1) c.spp = 1;
    if (c.spp > B) c.spp = B;
    if (c.spp > fit) c.spp = (uint32_t)fit; // a part within one slice
    c.parts = (B + c.spp - 1) / c.spp;
    return c;
}

// (Sized for parts of one sample: slices of the storage-buffer range may make them that small.)
uint64_t vkt_op_batchnorm_scratch_bytes(uint32_t C, uint32_t B, uint32_t HW) {
    return bn_part_offset(C) + 8ull * C * (B ? B : 1) * bn_cut_of(1, HW ? HW : 1, 1).nseg;
}

// Whether the partial and elementwise passes read x and dy through uniform texel buffers: on
// lavapipe (as ops_nn.c's texel_reads: a storage-buffer load there is a loop over the lanes with
// a branch per lane, a texel fetch a branch-free gather; SwiftShader allows 65536 texels per
// view), where the views may start texel views.
static bool bn_texel(vkt_ops *ops, const vkt_view *v, int nv) {
    const vkt_device_info *d = info_of(ops);
    if (d->driver_id != VK_DRIVER_ID_MESA_LLVMPIPE) return false;
    for (int i = 0; i < nv; i++)
        if (!vkt_texel_offset_ok(d, v[i].offset)) return false;
    return true;
}

// The offset alignment of the passes' windows: what storage views and (texel) texel views may
// start at, at least 16 bytes (a power of two: a window's base then keeps its vec4s whole).
static uint64_t bn_align(vkt_ops *ops, bool texel) {
    const vkt_device_info *d = info_of(ops);
    uint64_t a = d->min_storage_buffer_offset_alignment;
    if (texel && d->min_texel_buffer_offset_alignment > a) a = d->min_texel_buffer_offset_alignment;
    return a < 16 ? 16 : a;
}

// The floats [first, first + n) of v as a view from the aligned offset at or below them; *base
// is the floats before `first` in it, the same for every view of the layout.
static vkt_view bn_window(vkt_view v, uint64_t align, uint64_t first, uint64_t n, uint32_t *base) {
    VKT_ASSERT(v.offset % align == 0 && 4 * (first + n) <= v.size);
    uint64_t skip = 4 * first % align;
    *base = (uint32_t)(skip / 4);
    return (vkt_view){v.buffer, v.offset + 4 * first - skip, skip + 4 * n};
}

// Units (planes or samples of `unit` floats) per slice: every window within the range even when
// it starts align - 4 bytes early, and within maxTexelBufferElements.
static uint64_t bn_slice_units(vkt_ops *ops, uint64_t unit, uint64_t align, bool texel) {
    uint64_t range = range_of(ops);
    const vkt_device_info *d = info_of(ops);
    if (texel && 16ull * d->max_texel_buffer_elements < range)
        range = 16ull * d->max_texel_buffer_elements;
    VKT_ASSERT(range > align + 4 * unit); // one sample larger than the storage-buffer range
    return (range - align) / (4 * unit);
}

// The bindings of one slice [u0, u0 + nu) of units of `unit` floats: each sliced view as its
// vec4 view (texels, or storage) and its float view, then the fixed views, then (out not NULL)
// the output's vec4 and float views. Returns the binding count; *base as bn_window's; *texel is
// cleared when a window holds no whole texel (the storage kernel then reads it: same bindings).
static int bn_bind(vkt_view *bind, const vkt_view *sliced, int nsliced, const vkt_view *fixed,
                   int nfixed, const vkt_view *out, uint64_t align, uint64_t u0, uint64_t nu,
                   uint64_t unit, uint32_t *base, bool *texel) {
    int nb = 0;
    for (int i = 0; i < nsliced + (out ? 1 : 0); i++) {
        uint32_t b;
        vkt_view w = bn_window(i < nsliced ? sliced[i] : *out, align, u0 * unit, nu * unit, &b);
        VKT_ASSERT(i == 0 || b == *base); // the views' offsets are all aligned
        *base = b;
        vkt_view v4 = w;
        if (*texel && i < nsliced) v4.size = w.size / 16 * 16;
        if (v4.size == 0) *texel = false;
        bind[nb++] = v4;
        bind[nb++] = w;
        if (i + 1 == nsliced)
            for (int k = 0; k < nfixed; k++)
                bind[nb++] = fixed[k];
    }
    if (!*texel)
        for (int i = 0; i < nsliced; i++)
            bind[2 * i] = bind[2 * i + 1];
    return nb;
}

// The spec of a batchnorm pass: its workgroup, whether every plane is whole vec4s (HW % 4 == 0:
// then so is every window's start), and (elementwise) the lanes per plane.
// With a fused activation (fa not NULL) its code and slope too (norm_bn_ew.glsl's ACT, ALPHA).
static vkt_kernel *bn_kernel(vkt_ops *ops, vkt_shader_id shader, uint32_t wg, uint32_t HW,
                             uint32_t lpp, const vkt_bn_act *fa) {
    uint32_t spec[7] = {wg, 1, 1, HW % 4 == 0, lpp};
    if (fa) {
        // The activations whose derivative follows from their output have their vkt_act value
        // as their shader code (vkt_abi.h's VKT_ACT_CODE_*).
        VKT_ASSERT(vkt_act_grad_from_output(fa->act, fa->alpha) && fa->act != VKT_ACT_GELU_ERF);
        spec[5] = (uint32_t)fa->act;
        memcpy(&spec[6], &fa->alpha, 4);
        return vkt_ops_kernel(ops, shader, spec, 7);
    }
    return vkt_ops_kernel(ops, shader, spec, lpp ? 5 : 4);
}

// A partial pass (norm_bn_stats, norm_bn_bwd_sums) over the batch in slices of whole parts:
// bindings are the sliced views (x, and dy) as bn_bind makes them, then the fixed ones.
static void bn_partials(vkt_cmd *cmd, vkt_ops *ops, vkt_shader_id storage, vkt_shader_id texel,
                        const vkt_view *sliced, int nsliced, const vkt_view *fixed, int nfixed,
                        vkt_bn_push p, const vkt_bn_act *fa, const char *label) {
    bool tex = bn_texel(ops, sliced, nsliced);
    uint64_t align = bn_align(ops, tex), sample = (uint64_t)p.C * p.HW;
    uint64_t fit = bn_slice_units(ops, sample, align, tex);
    VKT_ASSERT(fit >= p.spp); // bn_cut_of's parts fit
    uint64_t chunk = fit / p.spp * p.spp;
    uint32_t wg = BN_PART_WG;
    if (wg > info_of(ops)->max_workgroup_invocations) wg = info_of(ops)->max_workgroup_invocations;
    for (uint64_t s0 = 0; s0 < p.B; s0 += chunk) {
        uint64_t ns = p.B - s0 < chunk ? p.B - s0 : chunk;
        vkt_view bind[10];
        bool use_texel = tex;
        int nb = bn_bind(bind, sliced, nsliced, fixed, nfixed, NULL, align, s0, ns, sample, &p.base,
                         &use_texel);
        p.n = (uint32_t)ns;
        p.first = (uint32_t)s0;
        vkt_kernel *k = bn_kernel(ops, use_texel ? texel : storage, wg, p.HW, 0, fa);
        // The slices write disjoint parts of one partial array, each binding it whole: a barrier
        // keeps that legal for synchronization validation, which tracks bound ranges.
        if (s0 > 0) vkt_cmd_barrier(cmd);
        uint64_t inv = (ns + p.spp - 1) / p.spp * p.C * p.nseg;
        VKT_ASSERT(inv <= UINT32_MAX);
        dispatch(cmd, ops, k, bind, nb, &p, sizeof p, (inv + wg - 1) / wg, label);
    }
}

// An elementwise pass (norm_bn_apply, norm_bn_dx) over the B * C planes in slices of whole
// planes: bindings as bn_bind makes them, the coefficients the one fixed view.
static void bn_elementwise(vkt_cmd *cmd, vkt_ops *ops, vkt_shader_id storage, vkt_shader_id texel,
                           const vkt_view *sliced, int nsliced, vkt_view coef, vkt_view out,
                           vkt_bn_push p, const vkt_bn_act *fa, const char *label) {
    bool tex = bn_texel(ops, sliced, nsliced);
    uint64_t align = bn_align(ops, tex), planes = (uint64_t)p.B * p.C;
    uint64_t chunk = bn_slice_units(ops, p.HW, align, tex);
    const vkt_device_info *d = info_of(ops);
    uint32_t wg = BN_EW_WG;
    while (wg > d->max_workgroup_invocations || wg > d->max_workgroup_size[0])
        wg /= 2;
    // Lanes per plane for about BN_EW_VEC4 vec4s each (a power of two from 8, lavapipe's
    // vector, to the workgroup), and chunks of larger planes.
    uint32_t lpp = 8 < wg ? 8 : wg;
    while (lpp < wg && (uint64_t)BN_EW_VEC4 * lpp < p.HW / 4)
        lpp *= 2;
    uint32_t ppw = wg / lpp;
    uint64_t per_chunk = (uint64_t)wg * BN_EW_VEC4;
    p.chunks = lpp < wg ? 1 : (uint32_t)((p.HW / 4 + per_chunk - 1) / per_chunk);
    if (p.chunks == 0) p.chunks = 1;
    VKT_ASSERT(p.chunks <= d->max_workgroup_count[0]);
    for (uint64_t p0 = 0; p0 < planes; p0 += chunk) {
        uint64_t np = planes - p0 < chunk ? planes - p0 : chunk;
        vkt_view bind[10];
        bool use_texel = tex;
        int nb = bn_bind(bind, sliced, nsliced, &coef, 1, &out, align, p0, np, p.HW, &p.base,
                         &use_texel);
        p.n = (uint32_t)np;
        p.first = (uint32_t)p0;
        vkt_kernel *k = bn_kernel(ops, use_texel ? texel : storage, wg, p.HW, lpp, fa);
        // An output window may start before its first plane, inside the previous slice's.
        if (p0 > 0) vkt_cmd_barrier(cmd);
        if (!k) continue; // reported by vkt_ops_status
        uint64_t groups = (np + ppw - 1) / ppw;
        const uint32_t *maxc = d->max_workgroup_count;
        uint64_t gy = groups < maxc[1] ? groups : maxc[1], gz = (groups + gy - 1) / gy;
        VKT_ASSERT(gz <= maxc[2]);
        vkt_cmd_dispatch(cmd, k, bind, nb, &p, sizeof p, p.chunks, (uint32_t)gy, (uint32_t)gz,
                         label);
    }
}

// The cut of a batch: parts within the slices of either kind of read (texel views' alignment
// and range are the tighter).
static bn_cut bn_cut_for(vkt_ops *ops, uint32_t B, uint32_t C, uint32_t HW) {
    return bn_cut_of(B, HW, bn_slice_units(ops, (uint64_t)C * HW, bn_align(ops, true), true));
}

static void bn_check(vkt_ops *ops, vkt_view x, vkt_view gamma, vkt_view beta, vkt_view scratch,
                     uint32_t B, uint32_t C, uint32_t HW) {
    VKT_ASSERT(B > 0 && C > 0 && HW > 0);
    uint64_t total = (uint64_t)B * C * HW;
    VKT_ASSERT(total <= UINT32_MAX && x.size >= 4 * total);
    VKT_ASSERT(gamma.size >= 4ull * C && beta.size >= 4ull * C);
    VKT_ASSERT(scratch.size >= vkt_op_batchnorm_scratch_bytes(C, B, HW));
    bn_cut c = bn_cut_for(ops, B, C, HW);
    VKT_ASSERT(8ull * C * c.parts * c.nseg <= info_of(ops)->max_storage_buffer_range);
}

// The scratch's coefficients and partial sums.
// The scratch's coefficients and partial sums, and the push constants of the passes.
static vkt_bn_push bn_push(vkt_ops *ops, vkt_view scratch, uint32_t B, uint32_t C, uint32_t HW,
                           vkt_view *coef, vkt_view *part) {
    bn_cut c = bn_cut_for(ops, B, C, HW);
    *coef = vkt_buffer_view(scratch.buffer, scratch.offset, 4ull * VKT_BN_COEF * C);
    *part = vkt_buffer_view(scratch.buffer, scratch.offset + bn_part_offset(C),
                            8ull * C * c.parts * c.nseg);
    return (vkt_bn_push){.C = C,
                         .HW = HW,
                         .B = B,
                         .spp = c.spp,
                         .parts = c.parts,
                         .nseg = c.nseg,
                         .seglen = c.seglen};
}

void vkt_op_batchnorm_forward(vkt_cmd *cmd, vkt_ops *ops, vkt_view y, vkt_view saved,
                              vkt_view running_mean, vkt_view running_var, vkt_view num_batches,
                              vkt_view scratch, vkt_view x, vkt_view gamma, vkt_view beta,
                              uint32_t B, uint32_t C, uint32_t HW, float eps, float momentum,
                              bool train, const char *label) {
    vkt_op_batchnorm_forward_act(cmd, ops, y, saved, running_mean, running_var, num_batches,
                                 scratch, x, gamma, beta, B, C, HW, eps, momentum, train, NULL,
                                 label);
}

void vkt_op_batchnorm_forward_act(vkt_cmd *cmd, vkt_ops *ops, vkt_view y, vkt_view saved,
                                  vkt_view running_mean, vkt_view running_var, vkt_view num_batches,
                                  vkt_view scratch, vkt_view x, vkt_view gamma, vkt_view beta,
                                  uint32_t B, uint32_t C, uint32_t HW, float eps, float momentum,
                                  bool train, const vkt_bn_act *fa, const char *label) {
    bn_check(ops, x, gamma, beta, scratch, B, C, HW);
    uint64_t total = (uint64_t)B * C * HW;
    VKT_ASSERT(y.size >= 4 * total && saved.size >= 8ull * C && num_batches.size >= 4);
    VKT_ASSERT(running_mean.size >= 4ull * C && running_var.size >= 4ull * C);
    VKT_ASSERT(!train || (uint64_t)B * HW >= 2); // the unbiased variance divides by N - 1
    vkt_view coef, part;
    vkt_bn_push p = bn_push(ops, scratch, B, C, HW, &coef, &part);
    p.train = train ? 1u : 0u;
    p.eps = eps;
    p.momentum = momentum;
    if (train) {
        bn_partials(cmd, ops, VKT_SHADER_NORM_BN_STATS, VKT_SHADER_NORM_BN_STATS_TEXEL, &x, 1,
                    &part, 1, p, NULL, label);
        vkt_cmd_barrier(cmd);
    }
    vkt_view fin[8] = {part, saved, coef, running_mean, running_var, num_batches, gamma, beta};
    dispatch(cmd, ops, kernel_1d(ops, VKT_SHADER_NORM_BN_FINISH, BN_FINISH_WG), fin, 8, &p,
             sizeof p, (C + BN_FINISH_WG - 1) / BN_FINISH_WG, label);
    vkt_cmd_barrier(cmd);
    bn_elementwise(cmd, ops, fa ? VKT_SHADER_NORM_BN_APPLY_ACT : VKT_SHADER_NORM_BN_APPLY,
                   fa ? VKT_SHADER_NORM_BN_APPLY_ACT_TEXEL : VKT_SHADER_NORM_BN_APPLY_TEXEL, &x, 1,
                   coef, y, p, fa, label);
}

void vkt_op_batchnorm_backward(vkt_cmd *cmd, vkt_ops *ops, const vkt_view *dx, vkt_view dgamma,
                               vkt_view dbeta, vkt_view scratch, vkt_view dy, vkt_view x,
                               vkt_view saved, vkt_view gamma, uint32_t B, uint32_t C, uint32_t HW,
                               const char *label) {
    vkt_op_batchnorm_backward_act(cmd, ops, dx, dgamma, dbeta, scratch, dy, x, saved, gamma, B, C,
                                  HW, NULL, label);
}

void vkt_op_batchnorm_backward_act(vkt_cmd *cmd, vkt_ops *ops, const vkt_view *dx, vkt_view dgamma,
                                   vkt_view dbeta, vkt_view scratch, vkt_view dy, vkt_view x,
                                   vkt_view saved, vkt_view gamma, uint32_t B, uint32_t C,
                                   uint32_t HW, const vkt_bn_act *fa, const char *label) {
    bn_check(ops, x, gamma, gamma, scratch, B, C, HW);
    uint64_t total = (uint64_t)B * C * HW;
    VKT_ASSERT(dy.size >= 4 * total && saved.size >= 8ull * C);
    VKT_ASSERT(dgamma.size >= 4ull * C && dbeta.size >= 4ull * C);
    VKT_ASSERT(!dx || dx->size >= 4 * total);
    vkt_view coef, part;
    vkt_bn_push p = bn_push(ops, scratch, B, C, HW, &coef, &part);
    VKT_ASSERT(!fa || fa->y.size >= 4 * total);
    // With a fused activation its output joins x and dy (dy being the activation's output
    // gradient), in the act kernels' bindings 4 and 5.
    vkt_view sliced[3] = {x, dy, fa ? fa->y : dy}, fixed[2] = {saved, part};
    int ns = fa ? 3 : 2;
    bn_partials(cmd, ops, fa ? VKT_SHADER_NORM_BN_BWD_SUMS_ACT : VKT_SHADER_NORM_BN_BWD_SUMS,
                fa ? VKT_SHADER_NORM_BN_BWD_SUMS_ACT_TEXEL : VKT_SHADER_NORM_BN_BWD_SUMS_TEXEL,
                sliced, ns, fixed, 2, p, fa, label);
    vkt_cmd_barrier(cmd);
    vkt_view fin[6] = {part, saved, gamma, coef, dgamma, dbeta};
    dispatch(cmd, ops, kernel_1d(ops, VKT_SHADER_NORM_BN_BWD_FINISH, BN_FINISH_WG), fin, 6, &p,
             sizeof p, (C + BN_FINISH_WG - 1) / BN_FINISH_WG, label);
    if (!dx) return;
    vkt_cmd_barrier(cmd);
    bn_elementwise(cmd, ops, fa ? VKT_SHADER_NORM_BN_DX_ACT : VKT_SHADER_NORM_BN_DX,
                   fa ? VKT_SHADER_NORM_BN_DX_ACT_TEXEL : VKT_SHADER_NORM_BN_DX_TEXEL, sliced, ns,
                   coef, *dx, p, fa, label);
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
    if (D > 32 && vkt_ops_has_shuffle(ops)) {
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
