// dense.c: the dense layer, as torch.nn.Linear: y[..., units] = x[..., in] W[units, in]^T + b,
// over the last dimension of its input (a [B, T, C] input multiplies B*T rows).
//   keys    units (required, 1 to 2^24), bias (default true)
//   tensors weight [units, in], bias [units]: uniform in +-1/sqrt(in) (PyTorch's default,
//           kaiming_uniform with a = sqrt(5), and the same bound for the bias)
//   records fwd: one NT product (with the next activation in its epilogue where fused);
//           bwd: dW += dy^T x (TN; or the SGD step in its epilogue), db += column sums of dy,
//           dx = dy W (NN; with the previous activation's backward in its epilogue)
#include <math.h>
#include <stdio.h>

#include "layer.h"
#include "vkt_internal.h"

static uint32_t last_dim(const vkt_shape *s) { return s->dim[s->ndim - 1]; }

static vkt_status dense_parse(const vkt_layer_parse *p, vkt_layer_desc *l) {
    VKT_TRY(vkt_parse_uint(p, "units", true, 1, 1u << 24, "the number of outputs", &l->units));
    l->bias = true;
    VKT_TRY(vkt_parse_bool(p, "bias", &l->bias));
    l->out = l->in;
    l->out.dim[l->out.ndim - 1] = l->units;
    return VKT_OK;
}

// The input features of the whole layer (a row split's copy holds some of them).
static uint32_t fan_in(const vkt_layer_desc *l) {
    return l->tp == VKT_TP_ROW ? l->tp_full : last_dim(&l->in);
}

static int dense_params(const vkt_layer_desc *l, vkt_param_spec *out) {
    double bound = 1.0 / sqrt((double)fan_in(l));
    out[0] = (vkt_param_spec){.name = "weight",
                              .ndim = 2,
                              .shape = {l->units, last_dim(&l->in)},
                              .init = VKT_INIT_UNIFORM,
                              .a = bound};
    if (!l->bias) return 1;
    out[1] = (vkt_param_spec){
        .name = "bias", .ndim = 1, .shape = {l->units}, .init = VKT_INIT_UNIFORM, .a = bound};
    return 2;
}

static void dense_cost(const vkt_layer_desc *l, vkt_layer_cost *c) {
    double rows = (double)l->in_features / last_dim(&l->in), in = last_dim(&l->in), out = l->units;
    c->fwd_flops = 2 * rows * in * out;
    c->bwd_flops = 4 * rows * in * out; // weight and input gradients
    c->fwd_bytes = 4 * (rows * (in + out)) + 4 * (in * out + (l->bias ? out : 0));
    c->bwd_bytes = 4 * (rows * (2 * out + 2 * in)) + 8 * in * out;
    c->saved_floats = rows * out;
}

static int dense_matmuls(const vkt_layer_desc *l, uint32_t B, bool need_dx, vkt_mm_shape *out) {
    uint32_t rows = B * (l->in_features / last_dim(&l->in)), in = last_dim(&l->in);
    int n = 0;
    out[n++] = (vkt_mm_shape){VKT_MM_NT, rows, l->units, in};
    out[n++] = (vkt_mm_shape){VKT_MM_TN, l->units, in, rows};
    if (need_dx) out[n++] = (vkt_mm_shape){VKT_MM_NN, rows, in, l->units};
    return n;
}

static void dense_forward(vkt_rec *r, int node) {
    const vkt_layer_desc *l = vkt_rec_node(r, node)->desc;
    vkt_view out = vkt_rec_out(r, node), saved, bias;
    vkt_mm_epilogue epi;
    vkt_rec_fwd_epilogue(r, node, &epi, &out, &saved);
    // A row split's devices each compute a partial sum of the output, which the reduction after
    // the product completes: the bias is added once, by the first.
    bool row = l->tp == VKT_TP_ROW, with_bias = l->bias && (!row || l->tp_rank == 0);
    if (with_bias) bias = vkt_rec_param(r, node, 1, VKT_STORE_PARAM);
    uint32_t rows = vkt_rec_rows(r, node);
    // (The label stays "dense" with a fused activation: it is a product.)
    vkt_op_matmul_ex(r->cmd, r->ops, VKT_MM_NT, out, vkt_rec_in(r, node),
                     vkt_rec_param(r, node, 0, VKT_STORE_PARAM), with_bias ? &bias : NULL, 0.0f,
                     rows, l->units, last_dim(&l->in), &epi,
                     vkt_rec_label(r, node, "fwd", "dense"));
    if (row) vkt_rec_allreduce(r, (vkt_view){out.buffer, out.offset, 4ull * rows * l->units});
}

// The SGD epilogue that applies the step to W from the gradient the product computes, and W's
// momentum buffer (when the optimizer keeps one) in *buf.
static vkt_mm_epilogue sgd_epilogue(const vkt_rec *r, int node, vkt_view *buf) {
    const vkt_optim_desc *o = vkt_rec_optim(r);
    bool momentum = o->momentum != 0.0f;
    if (momentum) *buf = vkt_rec_param(r, node, 0, VKT_STORE_OPT1);
    return (vkt_mm_epilogue){.kind = VKT_MM_EPI_SGD,
                             .alpha = o->lr,
                             .saved = momentum ? buf : NULL,
                             .momentum = momentum ? o->momentum : 0.0f,
                             .weight_decay = o->weight_decay,
                             .nesterov = o->nesterov};
}

// db[out] += column sums of dy, which the weight gradient's product adds in its own dispatch where
// its kernel can (vkt_mm_epilogue.col_sum).
static void bias_grad_in(vkt_rec *r, int node, vkt_mm_epilogue *e, vkt_view *db) {
    if (!vkt_rec_node(r, node)->desc->bias) return;
    *db = vkt_rec_param(r, node, 1, VKT_STORE_GRAD);
    e->col_sum = db;
    e->col_sum_label = vkt_rec_label(r, node, "bwd", "dbias");
}

// dW = dy^T x with the SGD step applied to W in the epilogue (the gradient is not stored), and db.
static void dense_fused_dweight(vkt_rec *r, int node) {
    const vkt_layer_desc *l = vkt_rec_node(r, node)->desc;
    vkt_view buf, db;
    vkt_mm_epilogue e = sgd_epilogue(r, node, &buf);
    bias_grad_in(r, node, &e, &db);
    vkt_op_matmul_ex(r->cmd, r->ops, VKT_MM_TN, vkt_rec_param(r, node, 0, VKT_STORE_PARAM),
                     vkt_rec_dy(r, node), vkt_rec_in(r, node), NULL, 0.0f, l->units,
                     last_dim(&l->in), vkt_rec_rows(r, node), &e,
                     vkt_rec_label(r, node, "bwd", "dweight"));
}

// Whether the weight gradient's product can take the SGD step (vkt_matmul_sgd_fits): the
// backward then applies it there when the optimizer is fused (r->fused_sgd).
static bool dense_fuses_sgd(vkt_rec *r, int node) {
    const vkt_layer_desc *l = vkt_rec_node(r, node)->desc;
    vkt_view dy = vkt_rec_dy(r, node), x = vkt_rec_in(r, node), buf;
    vkt_view w = vkt_rec_param(r, node, 0, VKT_STORE_PARAM);
    vkt_mm_epilogue e = sgd_epilogue(r, node, &buf);
    return vkt_matmul_sgd_fits(r->ops, VKT_MM_TN, &w, &dy, &x, e.saved, l->units, last_dim(&l->in),
                               vkt_rec_rows(r, node));
}

static void dense_backward(vkt_rec *r, int node) {
    const vkt_layer_desc *l = vkt_rec_node(r, node)->desc;
    uint32_t rows = vkt_rec_rows(r, node), in = last_dim(&l->in);
    vkt_view dy = vkt_rec_dy(r, node), x = vkt_rec_in(r, node);
    vkt_view w = vkt_rec_param(r, node, 0, VKT_STORE_PARAM);
    bool need_dx = vkt_rec_need_dx(r, node);
    bool fused = r->fused_sgd && dense_fuses_sgd(r, node);
    if (fused) {
        r->fused_sgd[vkt_rec_tensor(r, node, 0)] = true;
        r->nfused++;
        // The product writes W, which this layer's input-gradient product reads: it goes into
        // the next level (after the barrier), beside the next layer's work.
        if (need_dx)
            r->late = node;
        else
            dense_fused_dweight(r, node);
    } else {
        // dW[out,in] += dy[rows,out]^T x[rows,in], and db
        vkt_mm_epilogue e = {.kind = VKT_MM_EPI_NONE};
        vkt_view db;
        bias_grad_in(r, node, &e, &db);
        vkt_op_matmul_ex(r->cmd, r->ops, VKT_MM_TN, vkt_rec_param(r, node, 0, VKT_STORE_GRAD), dy,
                         x, NULL, 1.0f, l->units, in, rows, &e,
                         vkt_rec_label(r, node, "bwd", "dweight"));
    }
    if (!need_dx) return;
    // dx[rows,in] = dy[rows,out] W[out,in], and on through a fused activation before it.
    vkt_view dx = vkt_rec_dx(r, node), saved;
    vkt_mm_epilogue epi;
    vkt_rec_bwd_epilogue(r, node, &epi, &dx, &saved);
    vkt_op_matmul_ex(r->cmd, r->ops, VKT_MM_NN, dx, dy, w, NULL, 0.0f, rows, in, l->units, &epi,
                     vkt_rec_label(r, node, "bwd", "dinput"));
    // A column split's devices each hold part of the outputs: their input gradients are partial
    // sums (the network fuses no activation into this product then).
    if (l->tp == VKT_TP_COLUMN)
        vkt_rec_allreduce(r, (vkt_view){dx.buffer, dx.offset, 4ull * rows * in});
}

static void dense_ref_forward(vkt_ref *r, const vkt_layer_desc *l, double *const *p,
                              const double *x, double *y) {
    uint64_t rows = (uint64_t)vkt_ref_batch(r) * (l->in_features / last_dim(&l->in));
    uint32_t in = last_dim(&l->in), out = l->units;
    for (uint64_t s = 0; s < rows; s++)
        for (uint32_t o = 0; o < out; o++) {
            double v = l->bias ? p[1][o] : 0;
            for (uint32_t i = 0; i < in; i++)
                v += p[0][(uint64_t)o * in + i] * x[s * in + i];
            y[s * out + o] = v;
        }
}

static void dense_ref_backward(vkt_ref *r, const vkt_layer_desc *l, double *const *p,
                               double *const *g, const double *x, const double *y, const double *dy,
                               double *dx) {
    (void)y;
    uint64_t rows = (uint64_t)vkt_ref_batch(r) * (l->in_features / last_dim(&l->in));
    uint32_t in = last_dim(&l->in), out = l->units;
    for (uint64_t s = 0; s < rows; s++)
        for (uint32_t o = 0; o < out; o++) {
            double d = dy[s * out + o];
            if (l->bias) g[1][o] += d;
            for (uint32_t i = 0; i < in; i++) {
                g[0][(uint64_t)o * in + i] += d * x[s * in + i];
                dx[s * in + i] += d * p[0][(uint64_t)o * in + i];
            }
        }
}

static int dense_torch(const vkt_layer_desc *l, char *buf, size_t size) {
    return snprintf(buf, size, "nn.Linear(%u, %u, bias=%s)", last_dim(&l->in), l->units,
                    l->bias ? "True" : "False");
}

// Tensor parallelism: a column split's copy holds the weight's rows [lo, hi) and the bias's; a row
// split's the weight's columns [lo, hi) and the whole bias.
static int dense_tp_pieces(const vkt_layer_desc *l, int param, vkt_tp_piece *out) {
    uint64_t n = l->tp_hi - l->tp_lo;
    if (l->tp == VKT_TP_COLUMN) {
        out[0] = (vkt_tp_piece){
            .row0 = l->tp_lo, .nrows = n, .col0 = 0, .ncols = param == 0 ? last_dim(&l->in) : 1};
        return 1;
    }
    if (l->tp == VKT_TP_ROW && param == 0) {
        out[0] = (vkt_tp_piece){.row0 = 0, .nrows = l->units, .col0 = l->tp_lo, .ncols = n};
        return 1;
    }
    return 0;
}

static const char *const dense_keys[] = {"units", "bias", NULL};
static const char *const dense_matmul_labels[] = {"dense", "dweight", "dinput", NULL};

VKT_LAYER_TYPE(dense, .keys = dense_keys, .parse = dense_parse, .params = dense_params,
               .cost = dense_cost, .matmuls = dense_matmuls, .matmul_labels = dense_matmul_labels,
               .takes_epilogue = true, .forward = dense_forward, .backward = dense_backward,
               .backward_late = dense_fused_dweight, .fuses_sgd = dense_fuses_sgd,
               .ref_forward = dense_ref_forward, .ref_backward = dense_ref_backward,
               .torch = dense_torch, .tp_role = VKT_TP_ROLE_LINEAR, .tp_pieces = dense_tp_pieces);
