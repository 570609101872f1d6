// conv2d.c: the 2-D convolution, as torch.nn.Conv2d (groups 1, dilation 1, zero padding):
//   y[b][oc][oh][ow] = bias[oc] + sum over c, i, j of
//                      W[oc][c][i][j] x[b][c][oh*sh + i - ph][ow*sw + j - pw]
//   keys    out_channels (required, 1 to 65536), kernel_size (required), stride (default 1),
//           padding (default 0): each a whole number or [h, w]; bias (default true)
//   shapes  input [C, H, W] -> output [OC, OH, OW], OH = (H + 2*ph - kh)/sh + 1 (and OW)
//   tensors weight [OC, C, kh, kw], bias [OC]: uniform in +-1/sqrt(C*kh*kw) (PyTorch's default,
//           kaiming_uniform with a = sqrt(5), and the same bound for the bias)
//   records as matrix products on the tuned matmul (im2col), a batch cut into chunks of whole
//           samples so that the scratch (below) stays under vkt_conv_chunk_bytes (32 MiB):
//     fwd, per chunk: cols = im2col(x) | Z[OC, nb*P] = W[OC, K] cols (NN) | y = permute(Z) + b
//     bwd, per chunk: cols = im2col(x), dZ = permute(dy) | dW += dZ cols^T (NT), db += row sums
//           of dZ, dcols = W^T dZ (TN) | dx = col2im(dcols) (a gather, beside the next chunk's
//           first phase); "|" is a barrier. The columns are computed again in the backward
//           rather than kept: K*P floats a sample against the OC*P of the output.
//   and two shapes the matmul serves badly (conv_ops.h; 1 -> 32 channels 3x3 on 28x28, batch
//   128, on lavapipe: dW 88 ms as one workgroup of the matmul, the forward 36 ms on its scalar
//   kernel plus 10 ms of permute):
//     a small K (vkt_conv_fwd_small: K <= 32, not a multiple of 8): y = W cols + b straight into
//           NCHW by conv_fwd, no Z and no permute;
//     a small weight gradient next to its columns (vkt_conv_dw_parts > 0): the chunk's columns
//           cut into S parts whose partial dW (and db) conv_dw computes from dy itself in one
//           dispatch (no permute unless the input gradient needs dZ), summed in order into dW
//           and db after the barrier, beside the next chunk's first phase (deterministic).
//   scratch the shared scratch holds one chunk's cols [K, nb*P], Z or dZ [OC, nb*P], dcols
//           [K, nb*P] and the split's partials (vkt_conv_dw_part_bytes: about 1 MiB at most,
//           outside the chunk bound); K = C*kh*kw, P = OH*OW.
// Does not fuse: no activation in its products' epilogues (takes_epilogue false), and its weight
// gradient accumulates over chunks, so the optimizer step is never fused into it.
#include <math.h>
#include <stdio.h>

#include "conv_ops.h"
#include "layer.h"
#include "vkt_internal.h"

// The scratch regions start on this (the largest minStorageBufferOffsetAlignment and
// minTexelBufferOffsetAlignment Vulkan allows), so the products may bind them as texel buffers.
#define REGION_ALIGN 256ull
// The storage-buffer range every Vulkan device has (maxStorageBufferRange is at least 2^27): a
// chunk's bindings stay under it whatever the device.
#define MIN_RANGE (1ull << 27)

static uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

static vkt_conv_geom geom_of(const vkt_layer_desc *l) {
    return (vkt_conv_geom){.C = l->in.dim[0],
                           .H = l->in.dim[1],
                           .W = l->in.dim[2],
                           .OC = l->units,
                           .OH = l->out.dim[1],
                           .OW = l->out.dim[2],
                           .KH = l->kernel[0],
                           .KW = l->kernel[1],
                           .SH = l->stride[0],
                           .SW = l->stride[1],
                           .PH = l->padding[0],
                           .PW = l->padding[1]};
}

// ---------------------------------------------------------------------------------------------
// Chunks of a batch

// The most samples a chunk may hold: its scratch under the chunk bound, and every binding of it
// (columns, product, the chunk's slice of x and y) under the range every device has; at least 1
// (the parser refused a sample whose own bindings would not fit).
static uint64_t chunk_max(const vkt_layer_desc *l) {
    vkt_conv_geom g = geom_of(l);
    uint64_t K = vkt_conv_k(&g), P = vkt_conv_p(&g), in = l->in_features, out = l->out_features;
    uint64_t room = MIN_RANGE - REGION_ALIGN;
    uint64_t m = vkt_conv_chunk_bytes() / (4 * (2 * K + g.OC) * P);
    uint64_t caps[3] = {room / (4 * K * P), room / (4 * in), room / (4 * out)};
    for (int i = 0; i < 3; i++)
        if (caps[i] < m) m = caps[i];
    return m ? m : 1;
}

// Samples per chunk at batch B: the batch cut into as few chunks as the bound allows, of equal
// size but the last (so that a batch makes at most two product shapes for the tuner).
static uint32_t chunk_of(const vkt_layer_desc *l, uint32_t B) {
    uint64_t m = chunk_max(l);
    if (m >= B) return B;
    uint64_t n = (B + m - 1) / m;
    return (uint32_t)((B + n - 1) / n);
}

typedef struct conv_scratch {
    vkt_view cols, z, dcols, part, wt;
} conv_scratch;

// The regions of a chunk of nb samples (offsets for the scratch callback when whole is NULL).
static uint64_t scratch_layout(const vkt_layer_desc *l, uint64_t nb, const vkt_view *whole,
                               conv_scratch *s) {
    vkt_conv_geom g = geom_of(l);
    uint64_t cols = 4 * vkt_conv_k(&g) * vkt_conv_p(&g) * nb;
    uint64_t z = 4ull * g.OC * vkt_conv_p(&g) * nb;
    // The split weight gradient's partial sums, or the direct one's (the larger: either runs).
    uint64_t part =
        vkt_conv_dw_part_bytes(l->units, (uint32_t)vkt_conv_k(&g), l->bias, vkt_conv_p(&g) * nb);
    uint64_t dpart = vkt_conv_direct_dw_part_bytes(&g, l->bias, vkt_conv_p(&g) * nb);
    if (dpart > part) part = dpart;
    // The weight transposed to [C][OC][KH][KW] for the direct forward, where the shape takes it.
    uint64_t wt = vkt_conv_direct_shape(&g, true) ? 4 * vkt_conv_k(&g) * g.OC : 0;
    // Each region with the network's guard after it (the last one's is the buffer's own: the
    // network adds it after the scratch; engine/core/cmd.c, texel_view). The transposed weight
    // first: its place does not depend on nb (the forward writes it once for all chunks).
    const uint64_t G = VKT_NET_TENSOR_GUARD;
    uint64_t coff = wt ? align_up(wt + G, REGION_ALIGN) : 0;
    uint64_t zoff = coff + align_up(cols + G, REGION_ALIGN),
             doff = zoff + align_up(z + G, REGION_ALIGN);
    uint64_t poff = doff + align_up(cols + G, REGION_ALIGN);
    if (whole) {
        VKT_ASSERT(whole->size >= poff + part);
        s->wt = (vkt_view){whole->buffer, whole->offset, wt};
        s->cols = (vkt_view){whole->buffer, whole->offset + coff, cols};
        s->z = (vkt_view){whole->buffer, whole->offset + zoff, z};
        s->dcols = (vkt_view){whole->buffer, whole->offset + doff, cols};
        s->part = (vkt_view){whole->buffer, whole->offset + poff, part};
    }
    return poff + part;
}

// At least REGION_ALIGN bytes: the ops bind a texel of it where a kernel's texel binding goes
// unread.
static uint64_t conv_scratch_bytes(const vkt_layer_desc *l, uint32_t B) {
    uint64_t m = chunk_max(l), bytes = scratch_layout(l, m < B ? m : B, NULL, NULL);
    return bytes > REGION_ALIGN ? bytes : REGION_ALIGN;
}

// ---------------------------------------------------------------------------------------------
// Parsing and the table's facts

static vkt_status conv_parse(const vkt_layer_parse *p, vkt_layer_desc *l) {
    VKT_TRY(vkt_parse_uint(p, "out_channels", true, 1, 65536, "the number of output channels",
                           &l->units));
    VKT_TRY(vkt_parse_pair(p, "kernel_size", true, 1, 65535, "the kernel's height and width",
                           l->kernel));
    l->stride[0] = l->stride[1] = 1;
    VKT_TRY(vkt_parse_pair(p, "stride", false, 1, 65535, "the stride", l->stride));
    l->padding[0] = l->padding[1] = 0;
    VKT_TRY(
        vkt_parse_pair(p, "padding", false, 0, 65535, "the zero padding on each side", l->padding));
    l->bias = true;
    VKT_TRY(vkt_parse_bool(p, "bias", &l->bias));
    char shape[128];
    vkt_shape_format(&l->in, shape, sizeof shape);
    if (l->in.ndim != 3)
        return vkt_parse_fail(p, NULL,
                              "conv2d needs an input [channels, height, width]; found %s: put it "
                              "where the activations are images (before any flatten or dense "
                              "layer), with a model input such as [1, 28, 28]",
                              shape);
    uint64_t hp = (uint64_t)l->in.dim[1] + 2ull * l->padding[0];
    uint64_t wp = (uint64_t)l->in.dim[2] + 2ull * l->padding[1];
    if (l->kernel[0] > hp || l->kernel[1] > wp)
        return vkt_parse_fail(p, "kernel_size",
                              "the kernel [%u, %u] is larger than the input %s with its padding "
                              "[%u, %u] (%llu x %llu): use a smaller kernel or more padding",
                              l->kernel[0], l->kernel[1], shape, l->padding[0], l->padding[1],
                              (unsigned long long)hp, (unsigned long long)wp);
    uint64_t oh = (hp - l->kernel[0]) / l->stride[0] + 1,
             ow = (wp - l->kernel[1]) / l->stride[1] + 1;
    uint64_t K = (uint64_t)l->in.dim[0] * l->kernel[0] * l->kernel[1], P = oh * ow;
    // One sample's columns, output and input must each fit one binding on every device.
    uint64_t room = MIN_RANGE - REGION_ALIGN;
    if (4 * K * P > room || 4 * l->units * P > room || 4 * vkt_shape_elements(&l->in) > room)
        return vkt_parse_fail(p, NULL,
                              "one sample of this conv2d (input %s, output [%u, %llu, %llu], %llu "
                              "columns of %llu rows) needs more than the 128 MiB a storage "
                              "binding holds on every device: use a larger stride or fewer "
                              "channels",
                              shape, l->units, (unsigned long long)oh, (unsigned long long)ow,
                              (unsigned long long)P, (unsigned long long)K);
    if (4 * K * l->units > room)
        return vkt_parse_fail(p, NULL,
                              "the weight [%u, %u, %u, %u] takes %.0f MiB, more than the 128 MiB "
                              "a storage binding holds on every device: use fewer channels or a "
                              "smaller kernel",
                              l->units, l->in.dim[0], l->kernel[0], l->kernel[1],
                              4.0 * K * l->units / (1 << 20));
    l->out = (vkt_shape){.ndim = 3, .dim = {l->units, (uint32_t)oh, (uint32_t)ow}};
    return VKT_OK;
}

static double fan_in(const vkt_layer_desc *l) {
    return (double)l->in.dim[0] * l->kernel[0] * l->kernel[1];
}

static int conv_params(const vkt_layer_desc *l, vkt_param_spec *out) {
    double bound = 1.0 / sqrt(fan_in(l));
    out[0] = (vkt_param_spec){.name = "weight",
                              .ndim = 4,
                              .shape = {l->units, l->in.dim[0], l->kernel[0], l->kernel[1]},
                              .init = VKT_INIT_UNIFORM,
                              .a = bound};
    if (!l->bias) return 1;
    out[1] = (vkt_param_spec){
        .name = "bias", .ndim = 1, .shape = {l->units}, .init = VKT_INIT_UNIFORM, .a = bound};
    return 2;
}

static void conv_cost(const vkt_layer_desc *l, vkt_layer_cost *c) {
    double K = fan_in(l), P = (double)l->out.dim[1] * l->out.dim[2], oc = l->units;
    double w = oc * K + (l->bias ? oc : 0), in = l->in_features, out = l->out_features;
    c->fwd_flops = 2 * oc * K * P;
    c->bwd_flops = 4 * oc * K * P; // weight and input gradients
    c->fwd_bytes = 4 * (in + out) + 4 * w;
    c->bwd_bytes = 4 * (2 * out + 2 * in) + 8 * w;
    c->saved_floats = out;
}

// The products as one chunk records them (a batch of several chunks repeats them).
static int conv_matmuls(const vkt_layer_desc *l, uint32_t B, bool need_dx, vkt_mm_shape *out) {
    vkt_conv_geom g = geom_of(l);
    uint32_t K = (uint32_t)vkt_conv_k(&g), N = chunk_of(l, B) * (uint32_t)vkt_conv_p(&g);
    int n = 0;
    if (!vkt_conv_fwd_small(l->units, K)) out[n++] = (vkt_mm_shape){VKT_MM_NN, l->units, N, K};
    if (!vkt_conv_dw_parts(l->units, K, l->bias, N))
        out[n++] = (vkt_mm_shape){VKT_MM_NT, l->units, K, N};
    if (need_dx) out[n++] = (vkt_mm_shape){VKT_MM_TN, K, N, l->units};
    return n;
}

// ---------------------------------------------------------------------------------------------
// Recording

static void conv_forward(vkt_rec *r, int node) {
    const vkt_layer_desc *l = vkt_rec_node(r, node)->desc;
    vkt_conv_geom g = geom_of(l);
    uint32_t K = (uint32_t)vkt_conv_k(&g), P = (uint32_t)vkt_conv_p(&g), bc = chunk_of(l, r->B);
    vkt_view x = vkt_rec_in(r, node), y = vkt_rec_out(r, node), ws = vkt_rec_scratch(r);
    vkt_view w = vkt_rec_param(r, node, 0, VKT_STORE_PARAM), bias = {0};
    if (l->bias) bias = vkt_rec_param(r, node, 1, VKT_STORE_PARAM);
    const char *lc = vkt_rec_label(r, node, "fwd", "im2col");
    const char *lm = vkt_rec_label(r, node, "fwd", "conv");
    const char *lp = vkt_rec_label(r, node, "fwd", "permute");
    bool small = vkt_conv_fwd_small(l->units, K);
    // The direct kernel where the device and geometry take it (conv_ops.h), on the weight
    // transposed to [C][OC][KH][KW] in the scratch (written here, every step: W changes).
    bool direct = vkt_conv_direct(r->ops, &g, true);
    if (direct) {
        conv_scratch s;
        scratch_layout(l, bc, &ws, &s);
        vkt_op_conv_to_nchw(r->cmd, r->ops, s.wt, w, NULL, l->units, g.KH * g.KW, 0, g.C,
                            vkt_rec_label(r, node, "fwd", "wtrans"));
        vkt_cmd_barrier(r->cmd);
    }
    for (uint32_t b0 = 0; b0 < r->B; b0 += bc) {
        uint32_t nb = r->B - b0 < bc ? r->B - b0 : bc;
        conv_scratch s;
        scratch_layout(l, nb, &ws, &s);
        // (Reads x and the transposed weight, writes the chunk's y: nothing else of this layer.)
        if (direct && vkt_op_conv_direct(r->cmd, r->ops, y, x, s.wt, l->bias ? &bias : NULL, &g,
                                         true, b0, nb, lm))
            continue;
        if (small) {
            // y = W cols (+ b) in one kernel, written in NCHW; the previous chunk's reads the
            // columns this im2col writes.
            if (b0 > 0) vkt_cmd_barrier(r->cmd);
            vkt_op_conv_im2col(r->cmd, r->ops, s.cols, x, &g, b0, nb, lc);
            vkt_cmd_barrier(r->cmd);
            vkt_op_conv_forward_small(r->cmd, r->ops, y, s.cols, w, l->bias ? &bias : NULL,
                                      l->units, K, P, b0, nb, lm);
            continue;
        }
        // (The previous chunk's permute reads Z beside this im2col: different regions.)
        vkt_op_conv_im2col(r->cmd, r->ops, s.cols, x, &g, b0, nb, lc);
        vkt_cmd_barrier(r->cmd);
        // Z[OC, nb*P] = W[OC, K] cols[K, nb*P]
        vkt_op_matmul(r->cmd, r->ops, VKT_MM_NN, s.z, w, s.cols, NULL, 0.0f, l->units, nb * P, K,
                      lm);
        vkt_cmd_barrier(r->cmd);
        vkt_op_conv_to_nchw(r->cmd, r->ops, y, s.z, l->bias ? &bias : NULL, l->units, P, b0, nb,
                            lp);
    }
}

// Accumulates dW and db (+=); writes dx when the network needs it.
static void conv_backward(vkt_rec *r, int node) {
    const vkt_layer_desc *l = vkt_rec_node(r, node)->desc;
    vkt_conv_geom g = geom_of(l);
    uint32_t K = (uint32_t)vkt_conv_k(&g), P = (uint32_t)vkt_conv_p(&g), bc = chunk_of(l, r->B);
    vkt_view x = vkt_rec_in(r, node), dy = vkt_rec_dy(r, node), ws = vkt_rec_scratch(r);
    vkt_view w = vkt_rec_param(r, node, 0, VKT_STORE_PARAM);
    vkt_view dw = vkt_rec_param(r, node, 0, VKT_STORE_GRAD), db = {0}, dx = {0};
    if (l->bias) db = vkt_rec_param(r, node, 1, VKT_STORE_GRAD);
    bool need_dx = vkt_rec_need_dx(r, node);
    if (need_dx) dx = vkt_rec_dx(r, node);
    // dx straight from dy where the device and geometry take it (conv_ops.h), else from the
    // columns' gradient (the TN product and col2im).
    bool direct = need_dx && vkt_conv_direct(r->ops, &g, false);
    const char *lc = vkt_rec_label(r, node, "bwd", "im2col");
    const char *lp = vkt_rec_label(r, node, "bwd", "permute");
    const char *lw = vkt_rec_label(r, node, "bwd", "dweight");
    const char *lb = vkt_rec_label(r, node, "bwd", "dbias");
    const char *ld = vkt_rec_label(r, node, "bwd", "dinput");
    const char *li = vkt_rec_label(r, node, "bwd", "col2im");
    const char *lr = vkt_rec_label(r, node, "bwd", "dwreduce");
    const vkt_view *dbp = l->bias ? &db : NULL;
    // The previous chunk's work after the barrier: its input gradient from its dcols (prev_dx)
    // and the sums of its split or direct weight gradient's parts (prev_reduce).
    enum { NO_REDUCE, SPLIT_REDUCE, DIRECT_REDUCE };
    conv_scratch prev = {0};
    uint32_t prev_b0 = 0, prev_nb = 0;
    bool prev_dx = false;
    int prev_reduce = NO_REDUCE;
    for (uint32_t b0 = 0; b0 < r->B; b0 += bc) {
        uint32_t nb = r->B - b0 < bc ? r->B - b0 : bc, n = nb * P;
        // The weight gradient straight from x and dy (no columns), where the device takes it.
        bool ddw = vkt_conv_direct_dw_fits(r->ops, dy, x, &g, b0, nb);
        bool split = !ddw && vkt_conv_dw_parts(l->units, K, l->bias, n) > 0;
        conv_scratch s;
        scratch_layout(l, nb, &ws, &s);
        if (b0 > 0) vkt_rec_barrier(r); // the previous chunk's products read cols and dZ
        if (!ddw) vkt_op_conv_im2col(r->cmd, r->ops, s.cols, x, &g, b0, nb, lc);
        // dx straight from dy (no dependence on this chunk's other work), or later from dcols.
        bool chunk_dx = need_dx && !(direct && vkt_op_conv_direct(r->cmd, r->ops, dx, dy, w, NULL,
                                                                  &g, false, b0, nb, ld));
        // dZ in the products' layout, for the products that read it (the split and the direct
        // weight gradient read dy).
        if ((!split && !ddw) || chunk_dx)
            vkt_op_conv_from_nchw(r->cmd, r->ops, s.z, dy, l->units, P, b0, nb, lp);
        // (Nothing here writes the previous chunk's dcols or partials.)
        if (prev_dx) vkt_op_conv_col2im(r->cmd, r->ops, dx, prev.dcols, &g, prev_b0, prev_nb, li);
        if (prev_reduce == SPLIT_REDUCE)
            vkt_op_conv_dw_reduce(r->cmd, r->ops, dw, dbp, prev.part, l->units, K,
                                  (uint64_t)prev_nb * P, lr);
        if (prev_reduce == DIRECT_REDUCE)
            vkt_op_conv_direct_dw_reduce(r->cmd, r->ops, dw, dbp, prev.part, &g,
                                         (uint64_t)prev_nb * P, lr);
        vkt_rec_barrier(r);
        if (ddw) {
            // Partial sums of dW (and db) over parts of the positions, added into dW and db
            // after the next barrier.
            vkt_op_conv_direct_dw(r->cmd, r->ops, s.part, dy, x, &g, l->bias, b0, nb, lw);
        } else if (split) {
            // Partial sums of dW[OC, K] += dZ[OC, n] cols[K, n]^T and db[OC] += row sums of dZ
            // over parts of the columns, added into dW and db after the next barrier.
            vkt_op_conv_dw_parts(r->cmd, r->ops, s.part, dy, s.cols, l->units, K, P, b0, nb,
                                 l->bias, lw);
        } else {
            // dW[OC, K] += dZ[OC, n] cols[K, n]^T; db[OC] += row sums of dZ
            vkt_op_matmul(r->cmd, r->ops, VKT_MM_NT, dw, s.z, s.cols, NULL, 1.0f, l->units, K, n,
                          lw);
            if (l->bias) vkt_op_conv_rowsum(r->cmd, r->ops, db, s.z, l->units, n, lb);
        }
        // dcols[K, n] = W[OC, K]^T dZ[OC, n]
        if (chunk_dx)
            vkt_op_matmul(r->cmd, r->ops, VKT_MM_TN, s.dcols, w, s.z, NULL, 0.0f, K, n, l->units,
                          ld);
        prev = s, prev_b0 = b0, prev_nb = nb, prev_dx = chunk_dx;
        prev_reduce = ddw ? DIRECT_REDUCE : split ? SPLIT_REDUCE : NO_REDUCE;
    }
    if (prev_dx || prev_reduce != NO_REDUCE) {
        vkt_rec_barrier(r);
        if (prev_dx) vkt_op_conv_col2im(r->cmd, r->ops, dx, prev.dcols, &g, prev_b0, prev_nb, li);
        if (prev_reduce == SPLIT_REDUCE)
            vkt_op_conv_dw_reduce(r->cmd, r->ops, dw, dbp, prev.part, l->units, K,
                                  (uint64_t)prev_nb * P, lr);
        if (prev_reduce == DIRECT_REDUCE)
            vkt_op_conv_direct_dw_reduce(r->cmd, r->ops, dw, dbp, prev.part, &g,
                                         (uint64_t)prev_nb * P, lr);
    }
}

// ---------------------------------------------------------------------------------------------
// Reference: the direct convolution, in double precision

// Runs body for every product x[xi] W[wi] that adds into y[yi] of sample b.
#define CONV_LOOP(l, b, body)                                                                      \
    do {                                                                                           \
        uint32_t C_ = (l)->in.dim[0], H_ = (l)->in.dim[1], W_ = (l)->in.dim[2];                    \
        uint32_t OH_ = (l)->out.dim[1], OW_ = (l)->out.dim[2], KH_ = (l)->kernel[0],               \
                 KW_ = (l)->kernel[1];                                                             \
        for (uint32_t oc = 0; oc < (l)->units; oc++)                                               \
            for (uint32_t oh = 0; oh < OH_; oh++)                                                  \
                for (uint32_t ow = 0; ow < OW_; ow++) {                                            \
                    uint64_t yi = (((uint64_t)(b) * (l)->units + oc) * OH_ + oh) * OW_ + ow;       \
                    for (uint32_t c = 0; c < C_; c++)                                              \
                        for (uint32_t i = 0; i < KH_; i++) {                                       \
                            int64_t ih = (int64_t)oh * (l)->stride[0] + i - (l)->padding[0];       \
                            if (ih < 0 || ih >= H_) continue;                                      \
                            for (uint32_t j = 0; j < KW_; j++) {                                   \
                                int64_t iw = (int64_t)ow * (l)->stride[1] + j - (l)->padding[1];   \
                                if (iw < 0 || iw >= W_) continue;                                  \
                                uint64_t xi = (((uint64_t)(b)*C_ + c) * H_ + ih) * W_ + iw;        \
                                uint64_t wi = (((uint64_t)oc * C_ + c) * KH_ + i) * KW_ + j;       \
                                body;                                                              \
                            }                                                                      \
                        }                                                                          \
                }                                                                                  \
    } while (0)

static void conv_ref_forward(vkt_ref *r, const vkt_layer_desc *l, double *const *p, const double *x,
                             double *y) {
    uint32_t B = vkt_ref_batch(r), P = l->out.dim[1] * l->out.dim[2];
    for (uint32_t b = 0; b < B; b++) {
        for (uint32_t oc = 0; oc < l->units; oc++)
            for (uint32_t q = 0; q < P; q++)
                y[((uint64_t)b * l->units + oc) * P + q] = l->bias ? p[1][oc] : 0;
        CONV_LOOP(l, b, y[yi] += p[0][wi] * x[xi]);
    }
}

static void conv_ref_backward(vkt_ref *r, const vkt_layer_desc *l, double *const *p,
                              double *const *g, const double *x, const double *y, const double *dy,
                              double *dx) {
    (void)y;
    uint32_t B = vkt_ref_batch(r), P = l->out.dim[1] * l->out.dim[2];
    for (uint32_t b = 0; b < B; b++) {
        if (l->bias)
            for (uint32_t oc = 0; oc < l->units; oc++)
                for (uint32_t q = 0; q < P; q++)
                    g[1][oc] += dy[((uint64_t)b * l->units + oc) * P + q];
        CONV_LOOP(l, b, {
            g[0][wi] += dy[yi] * x[xi];
            dx[xi] += dy[yi] * p[0][wi];
        });
    }
}

static int conv_torch(const vkt_layer_desc *l, char *buf, size_t size) {
    return snprintf(buf, size,
                    "nn.Conv2d(%u, %u, kernel_size=(%u, %u), stride=(%u, %u), padding=(%u, %u), "
                    "bias=%s)",
                    l->in.dim[0], l->units, l->kernel[0], l->kernel[1], l->stride[0], l->stride[1],
                    l->padding[0], l->padding[1], l->bias ? "True" : "False");
}

static const char *const conv_keys[] = {"out_channels", "kernel_size", "stride",
                                        "padding",      "bias",        NULL};
static const char *const conv_matmul_labels[] = {"conv", "dweight", "dinput", NULL};

VKT_LAYER_TYPE(conv2d, .keys = conv_keys, .parse = conv_parse, .params = conv_params,
               .cost = conv_cost, .matmuls = conv_matmuls, .matmul_labels = conv_matmul_labels,
               .scratch = conv_scratch_bytes, .forward = conv_forward, .backward = conv_backward,
               .ref_forward = conv_ref_forward, .ref_backward = conv_ref_backward,
               .torch = conv_torch);
