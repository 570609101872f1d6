// attention.c: causal self-attention, as torch.nn.MultiheadAttention(C, heads, batch_first=True)
// applied to x as query, key and value under a causal mask (position t attends to positions
// <= t; scripts/vkt_torch.py's CausalSelfAttention). Input and output [T, C] per sample.
//   keys    heads (required, divides C; head size D = C / heads at most VKT_ATTN_MAX_D), dropout
//           (default 0; only 0: dropout on the attention weights is not implemented)
//   tensors in_proj_weight [3C, C] (xavier_uniform: +-sqrt(6 / (C + 3C))), in_proj_bias [3C] (0),
//           out_proj.weight [C, C] (nn.Linear's default: +-1/sqrt(C)), out_proj.bias [C] (0), as
//           nn.MultiheadAttention._reset_parameters initialises them
//   records fwd: qkv = x W_in^T + b_in (NT over the B*T rows); the fused core (attn_ops.h:
//           online softmax, the T x T scores never in memory) -> o and the rows' logsumexp;
//           y = o W_out^T + b_out (NT)
//           bwd: dW_out += dy^T o (TN), db_out += column sums of dy, do = dy W_out (NN); the rows'
//           (lse, delta = rowsum(do * o)); dqkv from the core's backward (scores recomputed from
//           q, k and the logsumexp); dW_in += dqkv^T x (TN), db_in, dx = dqkv W_in (NN)
//   saved   qkv [B*T, 3C], o [B*T, C], lse [B, heads, T] per slot (the forward's, for the
//           backward); scratch: do [B*T, C], dqkv [B*T, 3C], stats [B, heads, T, 4] (the
//           backward's own, needed only inside it)
// The products are cut into chunks of rows where an operand would exceed maxStorageBufferRange.
// The heads count is kept in the layer description's `units` (its only integer field that no
// other key of this kind uses); a `heads` field of its own would read better (model.h).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "layer.h"
#include "vkt_internal.h"
// After ops.h (through layer.h): vkt_abi.h's epilogue codes are macros of the enum's names.
#include "attn_abi.h"
#include "attn_ops.h"

// The saved and scratch regions start on this (the largest minStorageBufferOffsetAlignment and
// minTexelBufferOffsetAlignment Vulkan allows), so every product may bind them as it likes.
#define REGION_ALIGN 256ull

static uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

// T positions of width C; H heads of size D, the ones this copy of the layer holds (all of them
// unless tensor parallelism split them: vkt_layer_desc.tp), whose width is I = H * D (C when
// whole).
typedef struct attn_dims {
    uint32_t T, C, H, D, I;
} attn_dims;

static attn_dims dims_of(const vkt_layer_desc *l) {
    attn_dims d = {l->in.dim[0], l->in.dim[1], l->units, 0, 0};
    d.D = d.C / l->units;
    if (l->tp == VKT_TP_HEADS) d.H = l->tp_hi - l->tp_lo;
    d.I = d.H * d.D;
    return d;
}

// ---------------------------------------------------------------------------------------------
// Keys and shapes

static vkt_status attn_parse(const vkt_layer_parse *p, vkt_layer_desc *l) {
    if (l->in.ndim != 2) {
        char shape[96];
        vkt_shape_format(&l->in, shape, sizeof shape);
        return vkt_parse_fail(p, NULL,
                              "causal_self_attention takes a sequence [T, C] (2 dimensions per "
                              "sample), found %s",
                              shape);
    }
    uint32_t C = l->in.dim[1];
    VKT_TRY(
        vkt_parse_uint(p, "heads", true, 1, 1u << 24, "the number of attention heads", &l->units));
    if (C % l->units != 0)
        return vkt_parse_fail(p, "heads",
                              "%u heads do not divide the embedding width C = %u (each head "
                              "takes C / heads of it)",
                              l->units, C);
    if (C / l->units > VKT_ATTN_MAX_D)
        return vkt_parse_fail(p, "heads",
                              "the head size C / heads = %u / %u = %u is over %u (use more heads)",
                              C, l->units, C / l->units, VKT_ATTN_MAX_D);
    l->p = 0.0f;
    VKT_TRY(vkt_parse_range(p, "dropout", 0.0, 1.0, false, true,
                            "the dropout probability of the attention weights", &l->p));
    if (l->p != 0.0f)
        return vkt_parse_fail(p, "dropout",
                              "%g: attention dropout is not implemented (only 0 is supported)",
                              (double)l->p);
    l->out = l->in;
    return VKT_OK;
}

static int attn_params(const vkt_layer_desc *l, vkt_param_spec *out) {
    attn_dims d = dims_of(l);
    uint32_t C = d.C, I = d.I;
    out[0] = (vkt_param_spec){.name = "in_proj_weight",
                              .ndim = 2,
                              .shape = {3 * I, C},
                              .init = VKT_INIT_UNIFORM,
                              .a = sqrt(6.0 / (C + 3.0 * C))};
    out[1] = (vkt_param_spec){
        .name = "in_proj_bias", .ndim = 1, .shape = {3 * I}, .init = VKT_INIT_CONST, .a = 0.0};
    out[2] = (vkt_param_spec){.name = "out_proj.weight",
                              .ndim = 2,
                              .shape = {C, I},
                              .init = VKT_INIT_UNIFORM,
                              .a = 1.0 / sqrt((double)C)};
    out[3] = (vkt_param_spec){
        .name = "out_proj.bias", .ndim = 1, .shape = {C}, .init = VKT_INIT_CONST, .a = 0.0};
    return 4;
}

static void attn_cost(const vkt_layer_desc *l, vkt_layer_cost *c) {
    attn_dims d = dims_of(l);
    double T = d.T, C = d.C, H = d.H, I = d.I;
    // The core: q k^T and P v over the causal half, 2 * T*T*I / 2 each; its backward recomputes
    // the scores and makes dP, dv, dq and dk: about 2.5 times the forward.
    double core = 2.0 * T * T * I;
    c->fwd_flops = 2 * T * C * 3 * I + 2 * T * I * C + core;
    c->bwd_flops = 4 * T * C * 3 * I + 4 * T * I * C + 2.5 * core;
    double weights = 4 * (3 * I * C + 3 * I + C * I + C);
    // x; qkv written and read; o written and read; y; lse.
    c->fwd_bytes = 4 * (T * C + 2 * 3 * T * I + 2 * T * I + T * C + H * T) + weights;
    // dy (three readers), o, do written and read twice, qkv, lse and delta, dqkv written and read
    // twice, x, dx; the weights read and their gradients read and written.
    c->bwd_bytes = 4 * (3 * T * C + T * I + 3 * T * I + 3 * T * I + 2 * H * T + 3 * 3 * T * I +
                        T * C + T * C) +
                   3 * weights;
    c->saved_floats = T * C + 4 * T * I + H * T; // its output, qkv and o, the logsumexp
}

static int attn_matmuls(const vkt_layer_desc *l, uint32_t B, bool need_dx, vkt_mm_shape *out) {
    attn_dims d = dims_of(l);
    uint32_t rows = B * d.T, C = d.C, I = d.I;
    int n = 0;
    // All six as attn_forward / attn_backward record them (the input gradient only with dx): the
    // in-projection's forward, weight and input gradients (3C x C each), the out-projection's
    // forward, weight and input gradients (C x C), so that every product is tuned before the
    // first step, none inside it.
    out[n++] = (vkt_mm_shape){VKT_MM_NT, rows, 3 * I, C};
    out[n++] = (vkt_mm_shape){VKT_MM_NT, rows, C, I};
    out[n++] = (vkt_mm_shape){VKT_MM_TN, 3 * I, C, rows};
    out[n++] = (vkt_mm_shape){VKT_MM_TN, C, I, rows};
    out[n++] = (vkt_mm_shape){VKT_MM_NN, rows, I, C};
    if (need_dx) out[n++] = (vkt_mm_shape){VKT_MM_NN, rows, C, 3 * I};
    return n;
}

// ---------------------------------------------------------------------------------------------
// Per-slot storage and scratch

typedef struct attn_saved {
    vkt_view qkv, o, lse;
} attn_saved;

typedef struct attn_scratch {
    vkt_view dout, dqkv, stats;
} attn_scratch;

// Bytes of three regions of a, b and c bytes, each aligned with VKT_NET_TENSOR_GUARD free bytes
// after it (the network's guard: engine/core/cmd.c, texel_view), and their views in whole (when
// not NULL), each v[i] cut to the `used` bytes of the recorded batch.
static uint64_t regions(const uint64_t size[3], const uint64_t used[3], const vkt_view *whole,
                        vkt_view v[3]) {
    uint64_t off = 0;
    for (int i = 0; i < 3; i++) {
        if (whole) v[i] = (vkt_view){whole->buffer, whole->offset + off, used[i]};
        off = align_up(off + size[i] + (i < 2 ? VKT_NET_TENSOR_GUARD : 0), REGION_ALIGN);
    }
    if (whole) VKT_ASSERT(whole->size >= off);
    return off;
}

static uint64_t attn_saved_bytes(const vkt_layer_desc *l, uint32_t B) {
    attn_dims d = dims_of(l);
    uint64_t rows = (uint64_t)B * d.T;
    uint64_t size[3] = {4 * rows * 3 * d.I, 4 * rows * d.I, 4ull * B * d.H * d.T};
    return regions(size, size, NULL, NULL);
}

static uint64_t attn_scratch_bytes(const vkt_layer_desc *l, uint32_t B) {
    attn_dims d = dims_of(l);
    uint64_t rows = (uint64_t)B * d.T;
    uint64_t size[3] = {4 * rows * d.I, 4 * rows * 3 * d.I, 16ull * B * d.H * d.T};
    return regions(size, size, NULL, NULL);
}

// The regions laid out at the net's batch (the one the callbacks were asked at, which the node's
// input view holds), cut to the recorded batch r->B.
static uint32_t net_batch(const vkt_rec *r, int node) {
    const vkt_layer_desc *l = vkt_rec_node(r, node)->desc;
    return (uint32_t)(vkt_rec_in(r, node).size / (4ull * l->in_features));
}

static attn_saved saved_of(const vkt_rec *r, int node) {
    attn_dims d = dims_of(vkt_rec_node(r, node)->desc);
    uint64_t rows = (uint64_t)net_batch(r, node) * d.T, used_rows = (uint64_t)r->B * d.T;
    uint64_t size[3] = {4 * rows * 3 * d.I, 4 * rows * d.I, 4 * rows * d.H};
    uint64_t used[3] = {4 * used_rows * 3 * d.I, 4 * used_rows * d.I, 4 * used_rows * d.H};
    vkt_view whole = vkt_rec_saved(r, node), v[3];
    regions(size, used, &whole, v);
    return (attn_saved){v[0], v[1], v[2]};
}

static attn_scratch scratch_of(const vkt_rec *r, int node) {
    attn_dims d = dims_of(vkt_rec_node(r, node)->desc);
    uint64_t rows = (uint64_t)net_batch(r, node) * d.T, used_rows = (uint64_t)r->B * d.T;
    uint64_t size[3] = {4 * rows * d.I, 4 * rows * 3 * d.I, 16 * rows * d.H};
    uint64_t used[3] = {4 * used_rows * d.I, 4 * used_rows * 3 * d.I, 16 * used_rows * d.H};
    vkt_view whole = vkt_rec_scratch(r), v[3];
    regions(size, used, &whole, v);
    return (attn_scratch){v[0], v[1], v[2]};
}

// ---------------------------------------------------------------------------------------------
// Products over rows, in chunks that keep every operand within maxStorageBufferRange

static uint64_t gcd64(uint64_t a, uint64_t b) {
    while (b) {
        uint64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

// NT, NN: c[rows, N] = a[rows, K] op(b) (+ bias) (+ beta c), cut over the rows of a and c.
// TN: c[K, N] (+)= a[rows, K]^T b[rows, N], cut over the rows of a and b, every chunk after the
// first accumulating into c after a barrier (counted as the backward's: vkt_rec_barrier).
static void mm_rows(vkt_rec *r, vkt_mm_form form, vkt_view c, vkt_view a, vkt_view b,
                    const vkt_view *bias, float beta, uint32_t rows, uint32_t N, uint32_t K,
                    const char *label) {
    const vkt_device_info *d = vkt_device_get_info(vkt_ops_device(r->ops));
    uint64_t A =
        d->min_storage_buffer_offset_alignment ? d->min_storage_buffer_offset_alignment : 4;
    // Bytes per row of the two operands cut by rows, and the rows that keep their offsets aligned.
    uint64_t ra = 4ull * K, rc = 4ull * N; // a and (c or b)
    uint64_t ga = A / gcd64(A, ra), gc = A / gcd64(A, rc), g = ga / gcd64(ga, gc) * gc;
    uint64_t chunk = d->max_storage_buffer_range / (ra > rc ? ra : rc);
    if (chunk >= rows)
        chunk = rows;
    else
        chunk = chunk / g * g;
    VKT_ASSERT(chunk >= 1); // one row of each operand (and the alignment's rows) fits a binding
    for (uint64_t r0 = 0; r0 < rows; r0 += chunk) {
        uint32_t n = (uint32_t)(rows - r0 < chunk ? rows - r0 : chunk);
        vkt_view ac = {a.buffer, a.offset + r0 * ra, (uint64_t)n * ra};
        if (form == VKT_MM_TN) {
            vkt_view bc = {b.buffer, b.offset + r0 * rc, (uint64_t)n * rc};
            if (r0 > 0) vkt_rec_barrier(r);
            vkt_op_matmul(r->cmd, r->ops, form, c, ac, bc, NULL, r0 > 0 ? 1.0f : beta, K, N, n,
                          label);
        } else {
            vkt_view cc = {c.buffer, c.offset + r0 * rc, (uint64_t)n * rc};
            vkt_op_matmul(r->cmd, r->ops, form, cc, ac, b, bias, beta, n, N, K, label);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Recording

// A copy holding some of the heads (tensor parallelism) computes its heads' share of the output,
// a partial sum that the devices' reduction completes; the out-projection's bias is added once,
// by the first device.
static bool split_heads(const vkt_layer_desc *l) { return l->tp == VKT_TP_HEADS; }

static void attn_forward(vkt_rec *r, int node) {
    const vkt_layer_desc *l = vkt_rec_node(r, node)->desc;
    attn_dims d = dims_of(l);
    uint32_t rows = vkt_rec_rows(r, node);
    attn_saved s = saved_of(r, node);
    vkt_view b_in = vkt_rec_param(r, node, 1, VKT_STORE_PARAM);
    vkt_view b_out = vkt_rec_param(r, node, 3, VKT_STORE_PARAM);
    vkt_view out = vkt_rec_out(r, node);
    // qkv[rows, 3I] = x[rows, C] W_in[3I, C]^T + b_in
    mm_rows(r, VKT_MM_NT, s.qkv, vkt_rec_in(r, node), vkt_rec_param(r, node, 0, VKT_STORE_PARAM),
            &b_in, 0.0f, rows, 3 * d.I, d.C, vkt_rec_label(r, node, "fwd", "in_proj"));
    vkt_cmd_barrier(r->cmd);
    vkt_op_attn_forward(r->cmd, r->ops, s.o, s.lse, s.qkv, r->B, d.T, d.I, d.H,
                        vkt_rec_label(r, node, "fwd", "attention"));
    vkt_cmd_barrier(r->cmd);
    // y[rows, C] = o[rows, I] W_out[C, I]^T + b_out
    bool bias = !split_heads(l) || l->tp_rank == 0;
    mm_rows(r, VKT_MM_NT, out, s.o, vkt_rec_param(r, node, 2, VKT_STORE_PARAM),
            bias ? &b_out : NULL, 0.0f, rows, d.C, d.I, vkt_rec_label(r, node, "fwd", "out_proj"));
    if (split_heads(l)) vkt_rec_allreduce(r, (vkt_view){out.buffer, out.offset, 4ull * rows * d.C});
}

static void attn_backward(vkt_rec *r, int node) {
    const vkt_layer_desc *l = vkt_rec_node(r, node)->desc;
    attn_dims d = dims_of(l);
    uint32_t rows = vkt_rec_rows(r, node);
    attn_saved s = saved_of(r, node);
    attn_scratch w = scratch_of(r, node);
    vkt_view dy = vkt_rec_dy(r, node), x = vkt_rec_in(r, node);
    // dW_out[C, I] += dy[rows, C]^T o[rows, I]; db_out += column sums of dy;
    // do[rows, I] = dy[rows, C] W_out[C, I]
    mm_rows(r, VKT_MM_TN, vkt_rec_param(r, node, 2, VKT_STORE_GRAD), dy, s.o, NULL, 1.0f, rows, d.I,
            d.C, vkt_rec_label(r, node, "bwd", "dout_proj_weight"));
    vkt_op_bias_grad(r->cmd, r->ops, vkt_rec_param(r, node, 3, VKT_STORE_GRAD), dy, rows, d.C,
                     vkt_rec_label(r, node, "bwd", "dout_proj_bias"));
    mm_rows(r, VKT_MM_NN, w.dout, dy, vkt_rec_param(r, node, 2, VKT_STORE_PARAM), NULL, 0.0f, rows,
            d.I, d.C, vkt_rec_label(r, node, "bwd", "dout_proj_input"));
    vkt_rec_barrier(r);
    vkt_op_attn_stats(r->cmd, r->ops, w.stats, s.o, w.dout, s.lse, r->B, d.T, d.I, d.H,
                      vkt_rec_label(r, node, "bwd", "attention_stats"));
    vkt_rec_barrier(r);
    vkt_op_attn_backward(r->cmd, r->ops, w.dqkv, s.qkv, w.dout, w.stats, r->B, d.T, d.I, d.H,
                         vkt_rec_label(r, node, "bwd", "attention"));
    vkt_rec_barrier(r);
    // dW_in[3I, C] += dqkv[rows, 3I]^T x[rows, C]; db_in += column sums of dqkv;
    // dx[rows, C] = dqkv[rows, 3I] W_in[3I, C] (a partial sum over the heads when they are split)
    mm_rows(r, VKT_MM_TN, vkt_rec_param(r, node, 0, VKT_STORE_GRAD), w.dqkv, x, NULL, 1.0f, rows,
            d.C, 3 * d.I, vkt_rec_label(r, node, "bwd", "din_proj_weight"));
    vkt_op_bias_grad(r->cmd, r->ops, vkt_rec_param(r, node, 1, VKT_STORE_GRAD), w.dqkv, rows,
                     3 * d.I, vkt_rec_label(r, node, "bwd", "din_proj_bias"));
    if (vkt_rec_need_dx(r, node)) {
        vkt_view dx = vkt_rec_dx(r, node);
        mm_rows(r, VKT_MM_NN, dx, w.dqkv, vkt_rec_param(r, node, 0, VKT_STORE_PARAM), NULL, 0.0f,
                rows, d.C, 3 * d.I, vkt_rec_label(r, node, "bwd", "dinput"));
        if (split_heads(l))
            vkt_rec_allreduce(r, (vkt_view){dx.buffer, dx.offset, 4ull * rows * d.C});
    }
}

// ---------------------------------------------------------------------------------------------
// Reference, in double precision: explicit scores and softmax

// y[rows, N] = x[rows, K] W[N, K]^T + b
static void ref_linear(const double *x, const double *w, const double *b, double *y, uint64_t rows,
                       uint32_t N, uint32_t K) {
    for (uint64_t s = 0; s < rows; s++)
        for (uint32_t o = 0; o < N; o++) {
            double v = b[o];
            for (uint32_t i = 0; i < K; i++)
                v += w[(uint64_t)o * K + i] * x[s * K + i];
            y[s * N + o] = v;
        }
}

// dW[N, K] += dy^T x, db[N] += column sums of dy, dx[rows, K] += dy W (dx may be NULL).
static void ref_linear_backward(const double *x, const double *w, const double *dy, double *dw,
                                double *db, double *dx, uint64_t rows, uint32_t N, uint32_t K) {
    for (uint64_t s = 0; s < rows; s++)
        for (uint32_t o = 0; o < N; o++) {
            double g = dy[s * N + o];
            db[o] += g;
            for (uint32_t i = 0; i < K; i++) {
                dw[(uint64_t)o * K + i] += g * x[s * K + i];
                if (dx) dx[s * K + i] += g * w[(uint64_t)o * K + i];
            }
        }
}

// The core of one sample: o[T, C] from qkv[T, 3C], and (when P is not NULL) the softmax
// weights P[heads, T, T] (zero above the diagonal).
static void ref_core(attn_dims d, const double *qkv, double *o, double *P) {
    double scale = 1.0 / sqrt((double)d.D), *s = malloc(sizeof(double) * d.T);
    VKT_ASSERT(s);
    uint64_t C3 = 3ull * d.C;
    for (uint32_t h = 0; h < d.H; h++)
        for (uint32_t i = 0; i < d.T; i++) {
            const double *q = qkv + i * C3 + h * d.D;
            double m = -INFINITY, sum = 0;
            for (uint32_t j = 0; j <= i; j++) {
                const double *k = qkv + j * C3 + d.C + h * d.D;
                double v = 0;
                for (uint32_t e = 0; e < d.D; e++)
                    v += q[e] * k[e];
                s[j] = v * scale;
                m = fmax(m, s[j]);
            }
            for (uint32_t j = 0; j <= i; j++)
                sum += (s[j] = exp(s[j] - m));
            double *oi = o + (uint64_t)i * d.C + h * d.D;
            for (uint32_t e = 0; e < d.D; e++)
                oi[e] = 0;
            for (uint32_t j = 0; j < d.T; j++) {
                double pj = j <= i ? s[j] / sum : 0.0;
                if (P) P[((uint64_t)h * d.T + i) * d.T + j] = pj;
                const double *v = qkv + j * C3 + 2 * d.C + h * d.D;
                for (uint32_t e = 0; e < d.D && j <= i; e++)
                    oi[e] += pj * v[e];
            }
        }
    free(s);
}

static void attn_ref_forward(vkt_ref *r, const vkt_layer_desc *l, double *const *p, const double *x,
                             double *y) {
    VKT_ASSERT(l->tp == VKT_TP_NONE); // the reference runs whole models
    attn_dims d = dims_of(l);
    uint32_t B = vkt_ref_batch(r);
    uint64_t TC = (uint64_t)d.T * d.C;
    double *qkv = malloc(sizeof(double) * 3 * TC), *o = malloc(sizeof(double) * TC);
    VKT_ASSERT(qkv && o);
    for (uint32_t b = 0; b < B; b++) {
        ref_linear(x + b * TC, p[0], p[1], qkv, d.T, 3 * d.C, d.C);
        ref_core(d, qkv, o, NULL);
        ref_linear(o, p[2], p[3], y + b * TC, d.T, d.C, d.C);
    }
    free(qkv);
    free(o);
}

static void attn_ref_backward(vkt_ref *r, const vkt_layer_desc *l, double *const *p,
                              double *const *g, const double *x, const double *y, const double *dy,
                              double *dx) {
    (void)y;
    VKT_ASSERT(l->tp == VKT_TP_NONE);
    attn_dims d = dims_of(l);
    uint32_t B = vkt_ref_batch(r);
    uint64_t TC = (uint64_t)d.T * d.C, C3 = 3ull * d.C, TT = (uint64_t)d.T * d.T;
    double *qkv = malloc(sizeof(double) * 3 * TC), *o = malloc(sizeof(double) * TC);
    double *P = malloc(sizeof(double) * d.H * TT), *dP = malloc(sizeof(double) * d.T);
    double *dout = calloc(TC, sizeof(double)), *dqkv = calloc(3 * TC, sizeof(double));
    VKT_ASSERT(qkv && o && P && dP && dout && dqkv);
    double scale = 1.0 / sqrt((double)d.D);
    for (uint32_t b = 0; b < B; b++) {
        const double *xb = x + b * TC, *dyb = dy + b * TC;
        ref_linear(xb, p[0], p[1], qkv, d.T, 3 * d.C, d.C);
        ref_core(d, qkv, o, P);
        for (uint64_t k = 0; k < TC; k++)
            dout[k] = 0;
        for (uint64_t k = 0; k < 3 * TC; k++)
            dqkv[k] = 0;
        ref_linear_backward(o, p[2], dyb, g[2], g[3], dout, d.T, d.C, d.C);
        // Softmax backward per row: dS_ij = P_ij (dP_ij - sum_k P_ik dP_ik), dP_ij = do_i . v_j.
        for (uint32_t h = 0; h < d.H; h++)
            for (uint32_t i = 0; i < d.T; i++) {
                const double *Pi = P + ((uint64_t)h * d.T + i) * d.T;
                const double *gi = dout + (uint64_t)i * d.C + h * d.D;
                double rowsum = 0;
                for (uint32_t j = 0; j <= i; j++) {
                    const double *v = qkv + j * C3 + 2 * d.C + h * d.D;
                    double *dv = dqkv + j * C3 + 2 * d.C + h * d.D;
                    dP[j] = 0;
                    for (uint32_t e = 0; e < d.D; e++) {
                        dP[j] += gi[e] * v[e];
                        dv[e] += Pi[j] * gi[e];
                    }
                    rowsum += Pi[j] * dP[j];
                }
                const double *q = qkv + i * C3 + h * d.D;
                double *dq = dqkv + i * C3 + h * d.D;
                for (uint32_t j = 0; j <= i; j++) {
                    double ds = Pi[j] * (dP[j] - rowsum) * scale;
                    const double *k = qkv + j * C3 + d.C + h * d.D;
                    double *dk = dqkv + j * C3 + d.C + h * d.D;
                    for (uint32_t e = 0; e < d.D; e++) {
                        dq[e] += ds * k[e];
                        dk[e] += ds * q[e];
                    }
                }
            }
        ref_linear_backward(xb, p[0], dqkv, g[0], g[1], dx + b * TC, d.T, 3 * d.C, d.C);
    }
    free(qkv);
    free(o);
    free(P);
    free(dP);
    free(dout);
    free(dqkv);
}

// ---------------------------------------------------------------------------------------------
// PyTorch

static int attn_torch(const vkt_layer_desc *l, char *buf, size_t size) {
    attn_dims d = dims_of(l);
    return snprintf(buf, size, "CausalSelfAttention(%u, %u, dropout=0.0, batch_first=True)", d.C,
                    d.H);
}

// Tensor parallelism: the heads [lo, hi) are the rows of q, k and v that they compute (three row
// ranges of in_proj_weight and in_proj_bias) and the columns of out_proj.weight they feed; the
// out-projection's bias is whole on every device.
static int attn_tp_pieces(const vkt_layer_desc *l, int param, vkt_tp_piece *out) {
    if (l->tp != VKT_TP_HEADS || param == 3) return 0;
    attn_dims d = dims_of(l);
    uint64_t lo = (uint64_t)l->tp_lo * d.D;
    if (param == 2) {
        out[0] = (vkt_tp_piece){.row0 = 0, .nrows = d.C, .col0 = lo, .ncols = d.I};
        return 1;
    }
    for (int j = 0; j < 3; j++)
        out[j] = (vkt_tp_piece){.row0 = (uint64_t)j * d.C + lo,
                                .nrows = d.I,
                                .col0 = 0,
                                .ncols = param == 0 ? d.C : 1,
                                .local_row0 = (uint64_t)j * d.I};
    return 3;
}

static const char *const attn_keys[] = {"heads", "dropout", NULL};
static const char *const attn_matmul_labels[] = {
    "in_proj", "out_proj", "dout_proj_weight", "dout_proj_input", "din_proj_weight",
    "dinput",  NULL};

VKT_LAYER_TYPE(causal_self_attention, .keys = attn_keys, .parse = attn_parse, .params = attn_params,
               .cost = attn_cost, .matmuls = attn_matmuls, .matmul_labels = attn_matmul_labels,
               .saved = attn_saved_bytes, .scratch = attn_scratch_bytes, .forward = attn_forward,
               .backward = attn_backward, .ref_forward = attn_ref_forward,
               .ref_backward = attn_ref_backward, .torch = attn_torch, .tp_role = VKT_TP_ROLE_HEADS,
               .tp_pieces = attn_tp_pieces);
