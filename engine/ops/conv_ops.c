// conv_ops.c: the convolution kernels of conv_ops.h (shaders/conv_*.comp): im2col, col2im in
// gather form, the permutes between [OC][nb*P] and NCHW, and the bias gradient's row sums. Each
// op records one dispatch. The geometry goes into the kernels as specialization constants, one
// pipeline per conv shape, so that their index arithmetic divides by constants
// (shaders/conv_abi.h). Not here: the products (matmul.c) and the chunking of a batch and the
// barriers between phases (engine/nn/layers/conv2d.c).

// conv_ops.h (ops.h) before the ABI headers: vkt_abi.h #defines names that ops.h's enums use.
#include "conv_ops.h"
#include "conv_abi.h"
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

// 256 invocations, or fewer where the device allows fewer (ops_nn.c's rule).
static uint32_t wg_1d(vkt_ops *ops) {
    const vkt_device_info *d = info_of(ops);
    uint32_t wg = 256;
    if (d->max_workgroup_invocations < wg) wg = d->max_workgroup_invocations;
    if (d->max_workgroup_size[0] < wg) wg = d->max_workgroup_size[0];
    return wg;
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

void vkt_op_conv_im2col(vkt_cmd *cmd, vkt_ops *ops, vkt_view cols, vkt_view x,
                        const vkt_conv_geom *g, uint32_t b0, uint32_t nb, const char *label) {
    check_geom(g);
    if (nb == 0) return;
    uint64_t K = vkt_conv_k(g), n = (uint64_t)nb * vkt_conv_p(g), in = (uint64_t)g->C * g->H * g->W;
    VKT_ASSERT(K * n <= UINT32_MAX);
    vkt_conv_push p = {.n = (uint32_t)n, .nb = nb};
    vkt_view xv = slice(ops, x, b0 * in, nb * in, &p.act_off), cv = head(ops, cols, 4 * K * n);
    if (n % 4 == 0 && cv.offset % 16 == 0) p.flags |= VKT_CONV_VEC4;
    uint32_t wg = wg_1d(ops);
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

void vkt_op_conv_col2im(vkt_cmd *cmd, vkt_ops *ops, vkt_view dx, vkt_view dcols,
                        const vkt_conv_geom *g, uint32_t b0, uint32_t nb, const char *label) {
    check_geom(g);
    if (nb == 0) return;
    uint64_t K = vkt_conv_k(g), np = (uint64_t)nb * vkt_conv_p(g);
    uint64_t in = (uint64_t)g->C * g->H * g->W, n = nb * in;
    VKT_ASSERT(K * np <= UINT32_MAX && n <= UINT32_MAX);
    vkt_conv_push p = {.n = (uint32_t)n, .nb = nb};
    uint32_t wg = wg_1d(ops), gx, gy;
    vkt_kernel *k = geom_kernel(ops, VKT_SHADER_CONV_COL2IM, wg, g);
    if (!k) return;
    vkt_view bind[2] = {head(ops, dcols, 4 * K * np), slice(ops, dx, b0 * in, n, &p.act_off)};
    grid_1d(ops, n, wg, &gx, &gy);
    vkt_cmd_dispatch(cmd, k, bind, 2, &p, sizeof p, gx, gy, 1, label);
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
    vkt_view a = slice(ops, nchw, b0 * per, n, &p.act_off), zv = head(ops, z, 4 * n);
    // A vec4 each where every vec4 lies inside one (b, oc) and both sides are aligned to it.
    uint32_t v =
        P % 4 == 0 && p.act_off % 4 == 0 && a.offset % 16 == 0 && zv.offset % 16 == 0 ? 4 : 1;
    uint32_t wg = wg_1d(ops), gx, gy;
    uint32_t spec[VKT_SPEC_CONV_PERM_V + 1] = {wg, 1, 1};
    spec[VKT_SPEC_CONV_PERM_OC] = OC;
    spec[VKT_SPEC_CONV_PERM_P] = P;
    spec[VKT_SPEC_CONV_PERM_DIR] = dir;
    spec[VKT_SPEC_CONV_PERM_V] = v;
    vkt_kernel *k = vkt_ops_kernel(ops, VKT_SHADER_CONV_PERMUTE, spec, VKT_SPEC_CONV_PERM_V + 1);
    if (!k) return;
    vkt_view src = dir == VKT_CONV_TO_NCHW ? zv : a, dst = dir == VKT_CONV_TO_NCHW ? a : zv;
    // Without a bias the source stands in for it (a binding read anyway).
    vkt_view bind[5] = {src, src, dst, dst, bias ? head(ops, *bias, 4ull * OC) : src};
    grid_1d(ops, n / v, wg, &gx, &gy);
    vkt_cmd_dispatch(cmd, k, bind, 5, &p, sizeof p, gx, gy, 1, label);
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
