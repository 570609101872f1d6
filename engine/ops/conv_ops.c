// conv_ops.c: the convolution kernels of conv_ops.h (shaders/conv_*.comp): im2col, col2im in
// gather form, the permutes between [OC][nb*P] and NCHW, the bias gradient's row sums, the
// split weight gradient and the small-K forward. Each op records one dispatch. The geometry
// goes into the kernels as specialization constants, one pipeline per conv shape, so that their
// index arithmetic divides by constants (shaders/conv_abi.h). Not here: the products
// (matmul.c) and the chunking of a batch and the barriers between phases
// (engine/nn/layers/conv2d.c).
//
// Where the shapes and views allow, the ops take the forms that lavapipe runs fastest, where a
// storage-buffer load or store is a loop over the lanes with a branch per lane and component
// (engine/ops/matmul.c): reads through vec4 texels (a branch-free gather), and on devices with
// shaderFloat64 8 floats a store as one dvec4 (conv_fwd64, conv_permute64). Measured on lavapipe
// (2 cores), per 64 MB copied: 111 ms float by float, 52 ms as vec4s, 39 ms texels to vec4s,
// 20 ms texels to dvec4s. im2col and col2im of a stride-1 conv as wide as its input walk rows
// with a sliding texel window (conv_im2col_run, conv_col2im_run); every other shape takes the
// general kernels, and every form gives the same values.

// conv_ops.h (ops.h) before the ABI headers: vkt_abi.h #defines names that ops.h's enums use.
#include "conv_ops.h"
#include "conv_abi.h"
#include "ops_limits.h"
#include "vkt_internal.h"
#include "vkt_shaders.h"

#define CONV_CHUNK_DEFAULT (32ull << 20)
// Lanes of a conv_rowsum workgroup (a power of two: its shared-memory tree).
#define ROWSUM_WG 64u

static uint64_t chunk_bytes = CONV_CHUNK_DEFAULT;

uint64_t vkt_conv_chunk_bytes(void) { return chunk_bytes; }
void vkt_conv_set_chunk_bytes(uint64_t bytes) { chunk_bytes = bytes ? bytes : CONV_CHUNK_DEFAULT; }

uint64_t vkt_conv_k(const vkt_conv_geom *g) { return (uint64_t)g->C * g->KH * g->KW; }
uint64_t vkt_conv_p(const vkt_conv_geom *g) { return (uint64_t)g->OH * g->OW; }

static const vkt_device_info *info_of(vkt_ops *ops) {
    return vkt_device_get_info(vkt_ops_device(ops));
}

// count floats of v from float first on, bound from the aligned offset at or before it; *off is
// the element offset of float first inside the binding. The binding must fit the device's range.
static vkt_view slice(vkt_ops *ops, vkt_view v, uint64_t first, uint64_t count, uint32_t *off) {
    const vkt_device_info *d = info_of(ops);
    VKT_ASSERT(4 * (first + count) <= v.size);
    uint64_t al =
        d->min_storage_buffer_offset_alignment < 4 ? 4 : d->min_storage_buffer_offset_alignment;
    uint64_t at = v.offset + 4 * first, start = at / al * al; // v.offset is aligned: start >= it
    vkt_view s = {.buffer = v.buffer, .offset = start, .size = at + 4 * count - start};
    VKT_ASSERT(s.size <= d->max_storage_buffer_range);
    *off = (uint32_t)((at - start) / 4);
    return s;
}

// slice() for a binding that may also be a texel buffer: from an offset aligned for both.
static vkt_view slice_texel(vkt_ops *ops, vkt_view v, uint64_t first, uint64_t count,
                            uint32_t *off) {
    const vkt_device_info *d = info_of(ops);
    uint64_t al = d->min_storage_buffer_offset_alignment;
    if (d->min_texel_buffer_offset_alignment > al) al = d->min_texel_buffer_offset_alignment;
    if (al < 16) al = 16;
    VKT_ASSERT(4 * (first + count) <= v.size);
    uint64_t at = v.offset + 4 * first, start = at / al * al;
    if (start < v.offset) return slice(ops, v, first, count, off); // v.offset less aligned
    vkt_view s = {.buffer = v.buffer, .offset = start, .size = at + 4 * count - start};
    VKT_ASSERT(s.size <= d->max_storage_buffer_range);
    *off = (uint32_t)((at - start) / 4);
    return s;
}

// Whether v may be bound as a uniform texel buffer of vec4 texels on this device.
static bool texel_ok(vkt_ops *ops, vkt_view v) {
    const vkt_device_info *d = info_of(ops);
    return vkt_texel_offset_ok(d, v.offset) && v.offset % 16 == 0 && v.size % 16 == 0 &&
           v.size / 16 <= d->max_texel_buffer_elements;
}

// A texel binding a kernel declares but does not read (its TEXEL constant false): the first
// texel of v's buffer, or of alt's where v's is smaller than a texel (conv2d.c's scratch is
// never smaller).
static vkt_view texel_unused(vkt_view v, vkt_view alt) {
    vkt_buffer *b = vkt_buffer_size(v.buffer) >= 16 ? v.buffer : alt.buffer;
    VKT_ASSERT(vkt_buffer_size(b) >= 16);
    return (vkt_view){b, 0, 16};
}

// The first bytes of v, which must hold them and fit the device's range.
static vkt_view head(vkt_ops *ops, vkt_view v, uint64_t bytes) {
    VKT_ASSERT(v.size >= bytes && bytes <= info_of(ops)->max_storage_buffer_range);
    v.size = bytes;
    return v;
}

// A 1-D grid of n invocations, wg per workgroup, folded into y.
static void grid_1d(vkt_ops *ops, uint64_t n, uint32_t wg, uint32_t *gx, uint32_t *gy) {
    const uint32_t *maxc = info_of(ops)->max_workgroup_count;
    uint64_t groups = (n + wg - 1) / wg;
    uint64_t x = groups < maxc[0] ? groups : maxc[0];
    uint64_t y = (groups + x - 1) / x;
    VKT_ASSERT(y <= maxc[1]);
    *gx = (uint32_t)x;
    *gy = (uint32_t)y;
}

static vkt_kernel *geom_kernel(vkt_ops *ops, vkt_shader_id shader, uint32_t wg,
                               const vkt_conv_geom *g) {
    uint32_t spec[VKT_SPEC_CONV_PW + 1] = {wg, 1, 1};
    spec[VKT_SPEC_CONV_C] = g->C;
    spec[VKT_SPEC_CONV_H] = g->H;
    spec[VKT_SPEC_CONV_W] = g->W;
    spec[VKT_SPEC_CONV_KH] = g->KH;
    spec[VKT_SPEC_CONV_KW] = g->KW;
    spec[VKT_SPEC_CONV_SH] = g->SH;
    spec[VKT_SPEC_CONV_SW] = g->SW;
    spec[VKT_SPEC_CONV_PH] = g->PH;
    spec[VKT_SPEC_CONV_PW] = g->PW;
    return vkt_ops_kernel(ops, shader, spec, VKT_SPEC_CONV_PW + 1);
}

static void check_geom(const vkt_conv_geom *g) {
    VKT_ASSERT(g->C && g->H && g->W && g->OC && g->KH && g->KW && g->SH && g->SW);
    VKT_ASSERT(g->H + 2 * g->PH >= g->KH && g->W + 2 * g->PW >= g->KW);
    VKT_ASSERT(g->OH == (g->H + 2 * g->PH - g->KH) / g->SH + 1 &&
               g->OW == (g->W + 2 * g->PW - g->KW) / g->SW + 1);
}

// ---------------------------------------------------------------------------------------------
// Columns

// im2col by conv_im2col_run.comp, where the geometry and the views allow it (its header):
// false when they do not.
static bool im2col_run(vkt_cmd *cmd, vkt_ops *ops, vkt_view cols, vkt_view x,
                       const vkt_conv_geom *g, uint32_t b0, uint32_t nb, const char *label) {
    uint64_t K = vkt_conv_k(g), P = vkt_conv_p(g), n = nb * P, in = (uint64_t)g->C * g->H * g->W;
    if (g->SH != 1 || g->SW != 1 || g->OW != g->W || g->OW < 4 || P % 4) return false;
    vkt_conv_push p = {.n = (uint32_t)n, .nb = nb};
    vkt_view xv = slice_texel(ops, x, b0 * in, nb * in, &p.act_off),
             cv = head(ops, cols, 4 * K * n);
    // Whole texels: the view rounded up to 16 bytes where its buffer view holds them.
    uint64_t end = xv.offset + (xv.size + 15) / 16 * 16;
    if (end > x.offset + x.size) return false;
    xv.size = end - xv.offset;
    if (!texel_ok(ops, xv) || cv.offset % 16) return false;
    uint32_t wg = vkt_ops_wg_1d(ops), gx, gy;
    vkt_kernel *k = geom_kernel(ops, VKT_SHADER_CONV_IM2COL_RUN, wg, g);
    if (!k) return true; // reported by vkt_ops_status
    vkt_view bind[2] = {xv, cv};
    grid_1d(ops, K * nb, wg, &gx, &gy);
    vkt_cmd_dispatch(cmd, k, bind, 2, &p, sizeof p, gx, gy, 1, label);
    return true;
}

void vkt_op_conv_im2col(vkt_cmd *cmd, vkt_ops *ops, vkt_view cols, vkt_view x,
                        const vkt_conv_geom *g, uint32_t b0, uint32_t nb, const char *label) {
    check_geom(g);
    if (nb == 0) return;
    uint64_t K = vkt_conv_k(g), n = (uint64_t)nb * vkt_conv_p(g), in = (uint64_t)g->C * g->H * g->W;
    VKT_ASSERT(K * n <= UINT32_MAX);
    if (im2col_run(cmd, ops, cols, x, g, b0, nb, label)) return;
    vkt_conv_push p = {.n = (uint32_t)n, .nb = nb};
    vkt_view xv = slice(ops, x, b0 * in, nb * in, &p.act_off), cv = head(ops, cols, 4 * K * n);
    if (n % 4 == 0 && cv.offset % 16 == 0) p.flags |= VKT_CONV_VEC4;
    uint32_t wg = vkt_ops_wg_1d(ops);
    vkt_kernel *k = geom_kernel(ops, VKT_SHADER_CONV_IM2COL, wg, g);
    if (!k) return; // reported by vkt_ops_status
    vkt_view bind[3] = {xv, cv, cv};
    // x over a row's columns, 4 an invocation; y (and z) over the K rows.
    const uint32_t *maxc = info_of(ops)->max_workgroup_count;
    uint64_t gx = ((n + 3) / 4 + wg - 1) / wg, gy = K < maxc[1] ? K : maxc[1],
             gz = (K + gy - 1) / gy;
    VKT_ASSERT(gx <= maxc[0] && gz <= maxc[2]);
    vkt_cmd_dispatch(cmd, k, bind, 3, &p, sizeof p, (uint32_t)gx, (uint32_t)gy, (uint32_t)gz,
                     label);
}

// col2im by conv_col2im_run.comp, where the geometry and the views allow it (its header):
// false when they do not.
static bool col2im_run(vkt_cmd *cmd, vkt_ops *ops, vkt_view dx, vkt_view dcols,
                       const vkt_conv_geom *g, uint32_t b0, uint32_t nb, const char *label) {
    uint64_t K = vkt_conv_k(g), P = vkt_conv_p(g), np = nb * P, in = (uint64_t)g->C * g->H * g->W;
    if (g->SH != 1 || g->SW != 1 || g->OW != g->W || g->OW < 4 || P % 4 ||
        ((uint64_t)g->H * g->W) % 4)
        return false;
    vkt_conv_push p = {.n = (uint32_t)(nb * in), .nb = nb};
    vkt_view dv = head(ops, dcols, 4 * K * np), xv = slice(ops, dx, b0 * in, nb * in, &p.act_off);
    if (!texel_ok(ops, dv) || xv.offset % 16 || p.act_off % 4) return false;
    uint32_t wg = vkt_ops_wg_1d(ops), gx, gy;
    vkt_kernel *k = geom_kernel(ops, VKT_SHADER_CONV_COL2IM_RUN, wg, g);
    if (!k) return true; // reported by vkt_ops_status
    vkt_view bind[2] = {dv, xv};
    grid_1d(ops, (uint64_t)nb * g->C, wg, &gx, &gy);
    vkt_cmd_dispatch(cmd, k, bind, 2, &p, sizeof p, gx, gy, 1, label);
    return true;
}

void vkt_op_conv_col2im(vkt_cmd *cmd, vkt_ops *ops, vkt_view dx, vkt_view dcols,
                        const vkt_conv_geom *g, uint32_t b0, uint32_t nb, const char *label) {
    check_geom(g);
    if (nb == 0) return;
    uint64_t K = vkt_conv_k(g), np = (uint64_t)nb * vkt_conv_p(g);
    uint64_t in = (uint64_t)g->C * g->H * g->W, n = nb * in;
    VKT_ASSERT(K * np <= UINT32_MAX && n <= UINT32_MAX);
    if (col2im_run(cmd, ops, dx, dcols, g, b0, nb, label)) return;
    vkt_conv_push p = {.n = (uint32_t)n, .nb = nb};
    uint32_t wg = vkt_ops_wg_1d(ops), gx, gy;
    vkt_kernel *k = geom_kernel(ops, VKT_SHADER_CONV_COL2IM, wg, g);
    if (!k) return;
    vkt_view bind[2] = {head(ops, dcols, 4 * K * np), slice(ops, dx, b0 * in, n, &p.act_off)};
    grid_1d(ops, n, wg, &gx, &gy);
    vkt_cmd_dispatch(cmd, k, bind, 2, &p, sizeof p, gx, gy, 1, label);
}

// ---------------------------------------------------------------------------------------------
// Forward and input gradient straight from the activations (conv_direct.comp)

// conv_direct's workgroup: 8 lanes, within one subgroup (lavapipe's is 8 lanes at its default 256
// bits, 16 at 512, where these workgroups leave half of each vector idle but ran fashion_cnn as
// fast as at 256 bits, and the im2col path that took over there 20-30% slower: docs/PERFORMANCE.md,
// twentieth pass); output rows per workgroup, at most: 32 x 8 positions a lane, the matmul texel
// kernel's tile.
#define DIRECT_WG 8u
#define DIRECT_TM 32u
// The kernel unrolls every tap: bounded so that LLVM's compile stays a few seconds.
#define DIRECT_MAX_TAPS 25u

// Rows of the output: OC forward, C for the input gradient.
static uint32_t direct_rows(const vkt_conv_geom *g, bool fwd) { return fwd ? g->OC : g->C; }

// What every direct kernel needs of the geometry: stride 1, the output as large as the input,
// planes of whole vec4s, at most DIRECT_MAX_TAPS taps.
static bool direct_geom(const vkt_conv_geom *g) {
    return g->SH == 1 && g->SW == 1 && g->OH == g->H && g->OW == g->W &&
           ((uint64_t)g->H * g->W) % 4 == 0 && (uint64_t)g->KH * g->KW <= DIRECT_MAX_TAPS;
}

// What every direct kernel needs of the device and context: a CPU driver whose subgroups hold a
// DIRECT_WG-lane workgroup (8 or 16 lanes on lavapipe) and shuffle, and the context's conv mode
// VKT_CONV_AUTO.
static bool direct_device(vkt_ops *ops) {
    const vkt_device_info *d = info_of(ops);
    return vkt_device_conv_mode(vkt_ops_device(ops)) == VKT_CONV_AUTO &&
           d->type == VKT_DEVICE_CPU && d->subgroup_size >= DIRECT_WG && d->subgroup_shuffle &&
           DIRECT_WG <= d->max_workgroup_invocations;
}

bool vkt_conv_direct_shape(const vkt_conv_geom *g, bool fwd) {
    return direct_geom(g) && direct_rows(g, fwd) * g->KH * g->KW % 4 == 0;
}

bool vkt_conv_direct(vkt_ops *ops, const vkt_conv_geom *g, bool fwd) {
    return direct_device(ops) && vkt_conv_direct_shape(g, fwd);
}

// The pipeline of conv_direct or conv_direct_dw for g: rows R (conv_direct's output channels,
// conv_direct_dw's input channels in VKT_SPEC_CONV_C), tm rows a workgroup, the direction and
// whether a bias is added (or summed).
static vkt_kernel *direct_kernel(vkt_ops *ops, vkt_shader_id shader, const vkt_conv_geom *g,
                                 uint32_t R, uint32_t tm, bool fwd, bool bias) {
    uint32_t spec[VKT_SPEC_CONV_DIRECT_BIAS + 1] = {DIRECT_WG, 1, 1};
    spec[VKT_SPEC_CONV_C] = R;
    spec[VKT_SPEC_CONV_H] = g->H;
    spec[VKT_SPEC_CONV_W] = g->W;
    spec[VKT_SPEC_CONV_KH] = g->KH;
    spec[VKT_SPEC_CONV_KW] = g->KW;
    spec[VKT_SPEC_CONV_SH] = 1;
    spec[VKT_SPEC_CONV_SW] = 1;
    spec[VKT_SPEC_CONV_PH] = g->PH;
    spec[VKT_SPEC_CONV_PW] = g->PW;
    spec[VKT_SPEC_CONV_DIRECT_TM] = tm;
    spec[VKT_SPEC_CONV_DIRECT_FWD] = fwd;
    spec[VKT_SPEC_CONV_DIRECT_BIAS] = bias;
    return vkt_ops_kernel(ops, shader, spec, VKT_SPEC_CONV_DIRECT_BIAS + 1);
}

bool vkt_op_conv_direct(vkt_cmd *cmd, vkt_ops *ops, vkt_view out, vkt_view in, vkt_view a,
                        const vkt_view *bias, const vkt_conv_geom *g, bool fwd, uint32_t b0,
                        uint32_t nb, const char *label) {
    check_geom(g);
    VKT_ASSERT(vkt_conv_direct(ops, g, fwd) && (fwd || !bias));
    if (nb == 0) return true;
    uint64_t P = vkt_conv_p(g), n = (uint64_t)nb * P, R = direct_rows(g, fwd);
    uint64_t I = fwd ? g->C : g->OC, K = vkt_conv_k(g);
    VKT_ASSERT(nb * R * P <= UINT32_MAX && nb * I * P <= UINT32_MAX);
    vkt_conv_direct_push p = {.I = (uint32_t)I, .n = (uint32_t)n};
    vkt_view iv = slice_texel(ops, in, b0 * I * P, nb * I * P, &p.in_off);
    vkt_view ov = slice(ops, out, b0 * R * P, nb * R * P, &p.out_off);
    vkt_view av = head(ops, a, 4 * K * g->OC);
    // Whole texels (sizes are multiples of 16 here: P % 4 == 0, R*KH*KW % 4 == 0), vec4 stores.
    if (!texel_ok(ops, iv) || !texel_ok(ops, av) || p.in_off % 4 || p.out_off % 4 || ov.offset % 16)
        return false;
    p.ntex_in = (uint32_t)(iv.size / 16);
    p.ntex_a = (uint32_t)(av.size / 16);
    uint32_t tm = R < DIRECT_TM ? (uint32_t)(R + 3) / 4 * 4 : DIRECT_TM;
    vkt_kernel *k =
        direct_kernel(ops, VKT_SHADER_CONV_DIRECT, g, (uint32_t)R, tm, fwd, bias != NULL);
    if (!k) return true; // reported by vkt_ops_status
    const uint32_t *maxc = info_of(ops)->max_workgroup_count;
    uint64_t gx = (R + tm - 1) / tm, gy = (n + 8 * DIRECT_WG - 1) / (8 * DIRECT_WG);
    VKT_ASSERT(gx <= maxc[0] && gy <= maxc[1]);
    vkt_view bind[4] = {iv, av, ov, bias ? head(ops, *bias, 4 * R) : av};
    vkt_cmd_dispatch(cmd, k, bind, 4, &p, sizeof p, (uint32_t)gx, (uint32_t)gy, 1, label);
    return true;
}

// ---------------------------------------------------------------------------------------------
// Permutes and the bias gradient

static void permute(vkt_cmd *cmd, vkt_ops *ops, uint32_t dir, vkt_view nchw, vkt_view z,
                    const vkt_view *bias, uint32_t OC, uint32_t P, uint32_t b0, uint32_t nb,
                    const char *label) {
    VKT_ASSERT(OC && P);
    if (nb == 0) return;
    uint64_t per = (uint64_t)OC * P, n = nb * per;
    VKT_ASSERT(n <= UINT32_MAX);
    vkt_conv_push p = {.n = (uint32_t)n, .nb = nb, .flags = bias ? VKT_CONV_BIAS : 0};
    vkt_view a = slice_texel(ops, nchw, b0 * per, n, &p.act_off), zv = head(ops, z, 4 * n);
    // A vec4 each where every vec4 lies inside one (b, oc) and both sides are aligned to it;
    // on devices with shaderFloat64, 8 floats each where the destination is aligned to them and
    // the source binds as texels.
    uint32_t v =
        P % 4 == 0 && p.act_off % 4 == 0 && a.offset % 16 == 0 && zv.offset % 16 == 0 ? 4 : 1;
    vkt_view src = dir == VKT_CONV_TO_NCHW ? zv : a, dst = dir == VKT_CONV_TO_NCHW ? a : zv;
    uint32_t dst_off = dir == VKT_CONV_TO_NCHW ? p.act_off : 0;
    bool f64 = info_of(ops)->shader_float64;
    if (f64 && v == 4 && n % 8 == 0 && dst_off % 8 == 0 && dst.offset % 32 == 0 &&
        texel_ok(ops, src))
        v = 8;
    uint32_t wg = vkt_ops_wg_1d(ops), gx, gy;
    uint32_t spec[VKT_SPEC_CONV_PERM_V + 1] = {wg, 1, 1};
    spec[VKT_SPEC_CONV_PERM_OC] = OC;
    spec[VKT_SPEC_CONV_PERM_P] = P;
    spec[VKT_SPEC_CONV_PERM_DIR] = dir;
    spec[VKT_SPEC_CONV_PERM_V] = v;
    vkt_kernel *k = vkt_ops_kernel(ops, f64 ? VKT_SHADER_CONV_PERMUTE64 : VKT_SHADER_CONV_PERMUTE,
                                   spec, VKT_SPEC_CONV_PERM_V + 1);
    if (!k) return;
    // Without a bias the source stands in for it (a binding read anyway).
    // (conv_permute64 also has the source as texels: binding 5.)
    vkt_view bind[6] = {src,
                        src,
                        dst,
                        dst,
                        bias ? head(ops, *bias, 4ull * OC) : src,
                        v == 8 ? src : texel_unused(src, dst)};
    grid_1d(ops, n / v, wg, &gx, &gy);
    vkt_cmd_dispatch(cmd, k, bind, f64 ? 6 : 5, &p, sizeof p, gx, gy, 1, label);
}

void vkt_op_conv_to_nchw(vkt_cmd *cmd, vkt_ops *ops, vkt_view y, vkt_view z, const vkt_view *bias,
                         uint32_t OC, uint32_t P, uint32_t b0, uint32_t nb, const char *label) {
    permute(cmd, ops, VKT_CONV_TO_NCHW, y, z, bias, OC, P, b0, nb, label);
}

void vkt_op_conv_from_nchw(vkt_cmd *cmd, vkt_ops *ops, vkt_view dz, vkt_view dy, uint32_t OC,
                           uint32_t P, uint32_t b0, uint32_t nb, const char *label) {
    permute(cmd, ops, VKT_CONV_FROM_NCHW, dy, dz, NULL, OC, P, b0, nb, label);
}

void vkt_op_conv_rowsum(vkt_cmd *cmd, vkt_ops *ops, vkt_view db, vkt_view dz, uint32_t R,
                        uint32_t N, const char *label) {
    if (R == 0 || N == 0) return;
    VKT_ASSERT((uint64_t)R * N <= UINT32_MAX);
    uint32_t wg = ROWSUM_WG, gx, gy;
    const vkt_device_info *d = info_of(ops);
    while (wg > d->max_workgroup_invocations || wg > d->max_workgroup_size[0])
        wg /= 2;
    uint32_t spec[3] = {wg, 1, 1};
    vkt_kernel *k = vkt_ops_kernel(ops, VKT_SHADER_CONV_ROWSUM, spec, 3);
    if (!k) return;
    vkt_conv_rowsum_push p = {.R = R, .N = N};
    vkt_view bind[2] = {head(ops, dz, 4ull * R * N), head(ops, db, 4ull * R)};
    grid_1d(ops, (uint64_t)R * wg, wg, &gx, &gy); // one workgroup per row
    vkt_cmd_dispatch(cmd, k, bind, 2, &p, sizeof p, gx, gy, 1, label);
}

// ---------------------------------------------------------------------------------------------
// The split-K weight gradient

// Lanes of a conv_dw workgroup (each writes its own partial) and the output tile a lane holds.
#define DW_WG 8u
#define DW_TM 32u
#define DW_TN 16u
// At least this many columns per lane and part, and about this many workgroups in all.
#define DW_MIN_COLS 64u
#define DW_TARGET_GROUPS 64u
// The gradients the split path takes: at most this many floats (with the bias column). Beyond
// it the matmul has workgroups enough: fashion_cnn's 64 x 288 dW (12544 columns) took 18-19 ms
// split and 14-20 ms on the matmul on lavapipe. It bounds the partials to about 1 MiB.
#define DW_MAX_OUT 4096u

static uint32_t dw_tiles(uint32_t M, uint32_t NB) {
    uint32_t tm = M < DW_TM ? M : DW_TM, tn = NB < DW_TN ? NB : DW_TN;
    return ((M + tm - 1) / tm) * ((NB + tn - 1) / tn);
}

uint32_t vkt_conv_dw_parts(uint32_t M, uint32_t N, bool bias, uint64_t n) {
    uint64_t NB = (uint64_t)N + (bias ? 1 : 0);
    if (M == 0 || N == 0 || (uint64_t)M * NB > DW_MAX_OUT) return 0;
    uint64_t tiles = dw_tiles(M, (uint32_t)NB), s = (DW_TARGET_GROUPS + tiles - 1) / tiles;
    uint64_t most = n / ((uint64_t)DW_WG * DW_MIN_COLS);
    if (s > most) s = most;
    return s >= 2 ? (uint32_t)s : 0;
}

uint64_t vkt_conv_dw_part_bytes(uint32_t M, uint32_t N, bool bias, uint64_t n) {
    return 4ull * vkt_conv_dw_parts(M, N, bias, n) * DW_WG * M * (N + (bias ? 1 : 0));
}

void vkt_op_conv_dw_parts(vkt_cmd *cmd, vkt_ops *ops, vkt_view part, vkt_view dy, vkt_view cols,
                          uint32_t M, uint32_t N, uint32_t P, uint32_t b0, uint32_t nb, bool bias,
                          const char *label) {
    VKT_ASSERT(M && N && P);
    if (nb == 0) return;
    uint64_t n = (uint64_t)nb * P, NB = N + (bias ? 1u : 0u);
    uint32_t S = vkt_conv_dw_parts(M, N, bias, n);
    VKT_ASSERT(S && (uint64_t)M * n <= UINT32_MAX && (uint64_t)N * n <= UINT32_MAX);
    vkt_conv_dw_push p = {.M = M, .N = N, .n = (uint32_t)n};
    vkt_view a = slice_texel(ops, dy, (uint64_t)b0 * M * P, M * n, &p.a_off);
    vkt_view b = head(ops, cols, 4 * N * n);
    vkt_view pv = head(ops, part, 4ull * S * DW_WG * M * NB);
    // vec4 pieces where each lies inside one sample and every piece is 16-byte aligned; texels
    // where the device takes both views as texel buffers.
    uint32_t v = P % 4 == 0 && p.a_off % 4 == 0 && a.offset % 16 == 0 && b.offset % 16 == 0 ? 4 : 1;
    bool texel = v == 4 && texel_ok(ops, a) && texel_ok(ops, b);
    uint32_t tm = M < DW_TM ? M : DW_TM, tn = NB < DW_TN ? (uint32_t)NB : DW_TN;
    p.tiles_n = (uint32_t)((NB + tn - 1) / tn);
    uint64_t Q = n / v;
    p.pieces = (uint32_t)((Q + S - 1) / S);
    uint32_t spec[VKT_SPEC_CONV_DW_BIAS + 1] = {DW_WG, 1, 1};
    spec[VKT_SPEC_CONV_DW_TM] = tm;
    spec[VKT_SPEC_CONV_DW_TN] = tn;
    spec[VKT_SPEC_CONV_DW_V] = v;
    spec[VKT_SPEC_CONV_DW_TEXEL] = texel;
    spec[VKT_SPEC_CONV_DW_P] = P;
    spec[VKT_SPEC_CONV_DW_BIAS] = bias;
    vkt_kernel *k = vkt_ops_kernel(ops, VKT_SHADER_CONV_DW, spec, VKT_SPEC_CONV_DW_BIAS + 1);
    if (!k) return;
    vkt_view bind[7] = {
        texel ? a : texel_unused(a, b), texel ? b : texel_unused(b, a), a, b, a, b, pv};
    uint32_t tiles = dw_tiles(M, (uint32_t)NB);
    vkt_cmd_dispatch(cmd, k, bind, 7, &p, sizeof p, tiles, S, 1, label);
}

// dw[M, N] (and db[M]) += the sum over j < parts of part[j][M][NB], in order.
static void dw_reduce(vkt_cmd *cmd, vkt_ops *ops, vkt_view dw, const vkt_view *db, vkt_view part,
                      uint32_t M, uint32_t N, uint32_t parts, const char *label) {
    VKT_ASSERT(parts);
    uint32_t NB = N + (db ? 1u : 0u), wg = vkt_ops_wg_1d(ops), gx, gy;
    vkt_conv_reduce_push p = {.M = M, .N = N, .NB = NB, .parts = parts};
    uint32_t spec[3] = {wg, 1, 1};
    vkt_kernel *k = vkt_ops_kernel(ops, VKT_SHADER_CONV_DW_REDUCE, spec, 3);
    if (!k) return;
    vkt_view dwv = head(ops, dw, 4ull * M * N);
    vkt_view bind[3] = {head(ops, part, 4ull * p.parts * M * NB), dwv,
                        db ? head(ops, *db, 4ull * M) : dwv};
    grid_1d(ops, (uint64_t)M * NB, wg, &gx, &gy);
    vkt_cmd_dispatch(cmd, k, bind, 3, &p, sizeof p, gx, gy, 1, label);
}

void vkt_op_conv_dw_reduce(vkt_cmd *cmd, vkt_ops *ops, vkt_view dw, const vkt_view *db,
                           vkt_view part, uint32_t M, uint32_t N, uint64_t n, const char *label) {
    uint32_t S = vkt_conv_dw_parts(M, N, db != NULL, n);
    VKT_ASSERT(S);
    dw_reduce(cmd, ops, dw, db, part, M, N, S * DW_WG, label);
}

// ---------------------------------------------------------------------------------------------
// The weight gradient straight from the activations (conv_direct_dw.comp)

// Pieces of 4 positions a part of conv_direct_dw takes, about: 512 positions, for fashion_cnn's
// second conv 25 parts of a 64-sample chunk, 200 workgroups. Fewer, longer parts where the parts'
// sums would pass DIRECT_DW_PART_BYTES (a large weight: its workgroups are many anyway), down to
// one.
#define DIRECT_DW_PIECES 128u
#define DIRECT_DW_PART_BYTES (8ull << 20)

static uint32_t direct_dw_tm(uint32_t OC) { return OC < DIRECT_TM ? (OC + 7) / 8 * 8 : DIRECT_TM; }

bool vkt_conv_direct_dw_shape(const vkt_conv_geom *g) {
    return g->C >= DIRECT_WG && direct_geom(g);
}

bool vkt_conv_direct_dw(vkt_ops *ops, const vkt_conv_geom *g) {
    return direct_device(ops) && vkt_conv_direct_dw_shape(g);
}

// The parts of n positions (n / 4 >= 1 pieces of 4), and in *pieces the pieces of each but the
// last: about DIRECT_DW_PIECES each, fewer parts where their sums would pass DIRECT_DW_PART_BYTES.
static uint32_t direct_dw_parts(const vkt_conv_geom *g, bool bias, uint64_t n, uint32_t *pieces) {
    uint64_t npieces = n / 4, one = 4ull * g->OC * (vkt_conv_k(g) + (bias ? 1 : 0));
    uint64_t parts = (npieces + DIRECT_DW_PIECES - 1) / DIRECT_DW_PIECES;
    if (parts > DIRECT_DW_PART_BYTES / one) parts = DIRECT_DW_PART_BYTES / one;
    if (parts < 1) parts = 1;
    uint64_t per = (npieces + parts - 1) / parts; // >= 1
    if (pieces) *pieces = (uint32_t)per;
    return (uint32_t)((npieces + per - 1) / per);
}

uint64_t vkt_conv_direct_dw_part_bytes(const vkt_conv_geom *g, bool bias, uint64_t n) {
    if (!vkt_conv_direct_dw_shape(g)) return 0;
    return 4ull * direct_dw_parts(g, bias, n, NULL) * g->OC * (vkt_conv_k(g) + (bias ? 1 : 0));
}

// The bindings of dy and x for the chunk (and their offsets in p): false where the device cannot
// bind them as its texels.
static bool direct_dw_views(vkt_ops *ops, vkt_view dy, vkt_view x, const vkt_conv_geom *g,
                            uint32_t b0, uint32_t nb, vkt_conv_direct_dw_push *p, vkt_view *yv,
                            vkt_view *xv) {
    uint64_t P = vkt_conv_p(g), in = (uint64_t)g->C * P, out = (uint64_t)g->OC * P;
    VKT_ASSERT(nb * in <= UINT32_MAX && nb * out <= UINT32_MAX);
    *yv = slice_texel(ops, dy, b0 * out, nb * out, &p->dy_off);
    *xv = slice_texel(ops, x, b0 * in, nb * in, &p->x_off);
    return texel_ok(ops, *yv) && texel_ok(ops, *xv) && p->dy_off % 4 == 0 && p->x_off % 4 == 0;
}

bool vkt_conv_direct_dw_fits(vkt_ops *ops, vkt_view dy, vkt_view x, const vkt_conv_geom *g,
                             uint32_t b0, uint32_t nb) {
    vkt_conv_direct_dw_push p;
    vkt_view yv, xv;
    return vkt_conv_direct_dw(ops, g) && direct_dw_views(ops, dy, x, g, b0, nb, &p, &yv, &xv);
}

void vkt_op_conv_direct_dw(vkt_cmd *cmd, vkt_ops *ops, vkt_view part, vkt_view dy, vkt_view x,
                           const vkt_conv_geom *g, bool bias, uint32_t b0, uint32_t nb,
                           const char *label) {
    check_geom(g);
    VKT_ASSERT(vkt_conv_direct_dw(ops, g));
    if (nb == 0) return;
    uint64_t n = (uint64_t)nb * vkt_conv_p(g);
    vkt_conv_direct_dw_push p = {.OC = g->OC, .n = (uint32_t)n};
    uint32_t parts = direct_dw_parts(g, bias, n, &p.pieces);
    vkt_view yv, xv, pv = head(ops, part, vkt_conv_direct_dw_part_bytes(g, bias, n));
    VKT_ASSERT(direct_dw_views(ops, dy, x, g, b0, nb, &p, &yv, &xv));
    p.ntex_dy = (uint32_t)(yv.size / 16);
    p.ntex_x = (uint32_t)(xv.size / 16);
    uint32_t tm = direct_dw_tm(g->OC);
    vkt_kernel *k = direct_kernel(ops, VKT_SHADER_CONV_DIRECT_DW, g, g->C, tm, false, bias);
    if (!k) return; // reported by vkt_ops_status
    const uint32_t *maxc = info_of(ops)->max_workgroup_count;
    uint64_t gx = (g->OC + tm - 1) / tm, gy = (g->C + DIRECT_WG - 1) / DIRECT_WG, gz = parts;
    VKT_ASSERT(gx <= maxc[0] && gy <= maxc[1] && gz <= maxc[2]);
    vkt_view bind[3] = {yv, xv, pv};
    vkt_cmd_dispatch(cmd, k, bind, 3, &p, sizeof p, (uint32_t)gx, (uint32_t)gy, (uint32_t)gz,
                     label);
}

void vkt_op_conv_direct_dw_reduce(vkt_cmd *cmd, vkt_ops *ops, vkt_view dw, const vkt_view *db,
                                  vkt_view part, const vkt_conv_geom *g, uint64_t n,
                                  const char *label) {
    dw_reduce(cmd, ops, dw, db, part, g->OC, (uint32_t)vkt_conv_k(g),
              direct_dw_parts(g, db != NULL, n, NULL), label);
}

// ---------------------------------------------------------------------------------------------
// The small-K forward product

// Lanes of a conv_fwd workgroup, output channels per tile, column pieces per lane (at least).
#define FWD_WG 8u
#define FWD_TM 32u
#define FWD_MIN_PIECES 16u
// The inner sizes the kernel takes (each lane keeps TM*K weights).
#define FWD_MAX_K 32u

bool vkt_conv_fwd_small(uint32_t M, uint32_t K) { return M && K && K <= FWD_MAX_K && K % 8; }

void vkt_op_conv_forward_small(vkt_cmd *cmd, vkt_ops *ops, vkt_view y, vkt_view cols, vkt_view w,
                               const vkt_view *bias, uint32_t M, uint32_t K, uint32_t P,
                               uint32_t b0, uint32_t nb, const char *label) {
    VKT_ASSERT(vkt_conv_fwd_small(M, K) && P);
    if (nb == 0) return;
    uint64_t n = (uint64_t)nb * P;
    VKT_ASSERT((uint64_t)K * n <= UINT32_MAX && (uint64_t)M * n <= UINT32_MAX);
    vkt_conv_fwd_push p = {.M = M, .n = (uint32_t)n};
    vkt_view yv = slice(ops, y, (uint64_t)b0 * M * P, M * n, &p.y_off);
    vkt_view cv = head(ops, cols, 4 * K * n);
    uint32_t v =
        P % 4 == 0 && p.y_off % 4 == 0 && yv.offset % 16 == 0 && cv.offset % 16 == 0 ? 4 : 1;
    bool texel = v == 4 && texel_ok(ops, cv);
    // dvec4 stores where the device has them and each 8 columns lie inside one sample.
    bool f64 = info_of(ops)->shader_float64;
    if (f64 && texel && P % 8 == 0 && p.y_off % 8 == 0 && yv.offset % 32 == 0) v = 8;
    uint32_t tm = M < FWD_TM ? M : FWD_TM;
    uint64_t Q = n / v, groups = (Q + FWD_WG * FWD_MIN_PIECES - 1) / (FWD_WG * FWD_MIN_PIECES);
    const uint32_t *maxc = info_of(ops)->max_workgroup_count;
    if (groups > maxc[1]) groups = maxc[1];
    p.pieces = (uint32_t)((Q + groups - 1) / groups);
    groups = (Q + p.pieces - 1) / p.pieces;
    uint32_t spec[VKT_SPEC_CONV_FWD_BIAS + 1] = {FWD_WG, 1, 1};
    spec[VKT_SPEC_CONV_FWD_TM] = tm;
    spec[VKT_SPEC_CONV_FWD_K] = K;
    spec[VKT_SPEC_CONV_FWD_V] = v;
    spec[VKT_SPEC_CONV_FWD_TEXEL] = texel;
    spec[VKT_SPEC_CONV_FWD_P] = P;
    spec[VKT_SPEC_CONV_FWD_BIAS] = bias != NULL;
    vkt_kernel *k = vkt_ops_kernel(ops, f64 ? VKT_SHADER_CONV_FWD64 : VKT_SHADER_CONV_FWD, spec,
                                   VKT_SPEC_CONV_FWD_BIAS + 1);
    if (!k) return;
    vkt_view wv = head(ops, w, 4ull * M * K);
    vkt_view bind[7] = {texel ? cv : texel_unused(cv, yv),      cv, cv, wv,
                        bias ? head(ops, *bias, 4ull * M) : wv, yv, yv};
    vkt_cmd_dispatch(cmd, k, bind, 7, &p, sizeof p, (M + tm - 1) / tm, (uint32_t)groups, 1, label);
}
