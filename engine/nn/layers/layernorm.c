// layernorm.c: layer normalisation over the last dimension, as torch.nn.LayerNorm(D, eps) with
// elementwise_affine=True, on an input of any shape [..., D] (rows = B times the product of the
// other dimensions). The output has the input's shape; training and evaluation are the same.
//   keys    eps (default 1e-5, in (0, 1])
//   tensors weight [D] (1), bias [D] (0)
//   records fwd: per row mean and biased variance, y = (x - mean) rstd weight + bias, the rows'
//           mean and rstd = 1/sqrt(var + eps) kept per slot (`saved`); bwd: dweight += column
//           sums of dy*xhat, dbias += column sums of dy (deterministic: parts of rows added in
//           order), dx = rstd (g - mean(g) - xhat mean(g xhat)) per row, g = dy weight.
// The kernels are engine/ops/norm_ops.c's.
#include <math.h>
#include <stdio.h>

#include "layer.h"
#include "norm_ops.h"
#include "vkt_internal.h"

static uint32_t last_dim(const vkt_layer_desc *l) { return l->in.dim[l->in.ndim - 1]; }
static uint64_t rows_of(const vkt_layer_desc *l, uint32_t B) {
    return (uint64_t)B * (l->in_features / last_dim(l));
}

static vkt_status ln_parse(const vkt_layer_parse *p, vkt_layer_desc *l) {
    l->eps = 1e-5f;
    VKT_TRY(vkt_parse_range(p, "eps", 0, 1, true, false, "eps", &l->eps));
    if (!(l->eps > 0)) return vkt_parse_fail(p, "eps", "too small for a float: it would be 0");
    l->out = l->in;
    return VKT_OK;
}

static int ln_params(const vkt_layer_desc *l, vkt_param_spec *out) {
    uint32_t D = last_dim(l);
    out[0] =
        (vkt_param_spec){.name = "weight", .ndim = 1, .shape = {D}, .init = VKT_INIT_CONST, .a = 1};
    out[1] =
        (vkt_param_spec){.name = "bias", .ndim = 1, .shape = {D}, .init = VKT_INIT_CONST, .a = 0};
    return 2;
}

static void ln_cost(const vkt_layer_desc *l, vkt_layer_cost *c) {
    double n = l->in_features, rows = (double)l->in_features / last_dim(l);
    // Forward: two passes of statistics and the normalisation (x read three times); backward:
    // the row sums and dx, and the column sums (x and dy read twice each).
    c->fwd_flops = 8 * n;
    c->bwd_flops = 14 * n;
    c->fwd_bytes = 16 * n;
    c->bwd_bytes = 20 * n;
    c->saved_floats = n + 2 * rows;
}

static uint64_t ln_saved(const vkt_layer_desc *l, uint32_t B) {
    return 8 * rows_of(l, B); // mean, rstd per row
}

static uint64_t ln_scratch(const vkt_layer_desc *l, uint32_t B) {
    return vkt_op_layernorm_scratch_bytes((uint32_t)rows_of(l, B), last_dim(l));
}

static void ln_forward(vkt_rec *r, int node) {
    const vkt_layer_desc *l = vkt_rec_node(r, node)->desc;
    vkt_op_layernorm_forward(r->cmd, r->ops, vkt_rec_out(r, node), vkt_rec_saved(r, node),
                             vkt_rec_in(r, node), vkt_rec_param(r, node, 0, VKT_STORE_PARAM),
                             vkt_rec_param(r, node, 1, VKT_STORE_PARAM), vkt_rec_rows(r, node),
                             last_dim(l), l->eps, vkt_rec_label(r, node, "fwd", "layernorm"));
}

static void ln_backward(vkt_rec *r, int node) {
    const vkt_layer_desc *l = vkt_rec_node(r, node)->desc;
    vkt_view dx = vkt_rec_dx(r, node);
    vkt_op_layernorm_backward(r->cmd, r->ops, vkt_rec_need_dx(r, node) ? &dx : NULL,
                              vkt_rec_param(r, node, 0, VKT_STORE_GRAD),
                              vkt_rec_param(r, node, 1, VKT_STORE_GRAD), vkt_rec_scratch(r),
                              vkt_rec_dy(r, node), vkt_rec_in(r, node), vkt_rec_saved(r, node),
                              vkt_rec_param(r, node, 0, VKT_STORE_PARAM), vkt_rec_rows(r, node),
                              last_dim(l), vkt_rec_label(r, node, "bwd", "layernorm"));
}

// ---------------------------------------------------------------------------------------------
// Reference, in double precision

// The mean and 1/sqrt(biased var + eps) of row x[D] (two passes).
static void row_stats(const double *x, uint32_t D, double eps, double *mean, double *rstd) {
    double s = 0, q = 0;
    for (uint32_t j = 0; j < D; j++)
        s += x[j];
    *mean = s / D;
    for (uint32_t j = 0; j < D; j++)
        q += (x[j] - *mean) * (x[j] - *mean);
    *rstd = 1 / sqrt(q / D + eps);
}

static void ln_ref_forward(vkt_ref *r, const vkt_layer_desc *l, double *const *p, const double *x,
                           double *y) {
    uint64_t R = rows_of(l, vkt_ref_batch(r));
    uint32_t D = last_dim(l);
    for (uint64_t i = 0; i < R; i++) {
        const double *xr = x + i * D;
        double mean, rstd;
        row_stats(xr, D, l->eps, &mean, &rstd);
        for (uint32_t j = 0; j < D; j++)
            y[i * D + j] = (xr[j] - mean) * rstd * p[0][j] + p[1][j];
    }
}

static void ln_ref_backward(vkt_ref *r, const vkt_layer_desc *l, double *const *p, double *const *g,
                            const double *x, const double *y, const double *dy, double *dx) {
    (void)y;
    uint64_t R = rows_of(l, vkt_ref_batch(r));
    uint32_t D = last_dim(l);
    for (uint64_t i = 0; i < R; i++) {
        const double *xr = x + i * D, *dyr = dy + i * D;
        double mean, rstd, a = 0, b = 0;
        row_stats(xr, D, l->eps, &mean, &rstd);
        for (uint32_t j = 0; j < D; j++) {
            double xh = (xr[j] - mean) * rstd, gj = dyr[j] * p[0][j];
            g[0][j] += dyr[j] * xh;
            g[1][j] += dyr[j];
            a += gj;
            b += gj * xh;
        }
        a /= D;
        b /= D;
        for (uint32_t j = 0; j < D; j++) {
            double xh = (xr[j] - mean) * rstd;
            dx[i * D + j] += rstd * (dyr[j] * p[0][j] - a - xh * b);
        }
    }
}

static int ln_torch(const vkt_layer_desc *l, char *buf, size_t size) {
    char eps[32];
    vkt_norm_float_text(l->eps, eps, sizeof eps);
    return snprintf(buf, size, "nn.LayerNorm(%u, eps=%s)", last_dim(l), eps);
}

static const char *const ln_keys[] = {"eps", NULL};

VKT_LAYER_TYPE(layernorm, .keys = ln_keys, .parse = ln_parse, .params = ln_params, .cost = ln_cost,
               .saved = ln_saved, .scratch = ln_scratch, .forward = ln_forward,
               .backward = ln_backward, .ref_forward = ln_ref_forward,
               .ref_backward = ln_ref_backward, .torch = ln_torch);
