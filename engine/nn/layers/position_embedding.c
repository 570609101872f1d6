// position_embedding.c: a learned position embedding, y[t] = x[t] + weight[t] for the T positions
// of a sequence [T, C] (T <= max_len), as scripts/vkt_torch.py's PositionEmbedding(max_len, C)
// (x + weight[:T]). The shape is kept.
//   keys    max_len (required, 1 to 2^24): the rows of the table, at least the input's T
//   tensors weight [max_len, C]: uniform in +-0.02 sqrt(3), standard deviation 0.02 as GPT-2
//           initialises its position embedding with normal(0, 0.02) (the engine's initialisers
//           are uniform or constant; tests/torch_equiv.py loads the initial parameters from
//           PyTorch, so the equivalence does not depend on it)
//   records fwd: y = x + weight[:T] (engine/ops/embed_ops.h); bwd: dweight[:T] += the sum of dy
//           over the batch (the bias gradient's column sums over B rows of T*C: deterministic),
//           and dx = dy (a copy) where the input gradient is asked for
// max_len is kept in the layer description's `units` (the rows of the weight, as dense's units).
#include <math.h>
#include <stdio.h>

#include "embed_ops.h"
#include "layer.h"
#include "vkt_internal.h"

static vkt_status pos_parse(const vkt_layer_parse *p, vkt_layer_desc *l) {
    char shape[96];
    vkt_shape_format(&l->in, shape, sizeof shape);
    if (l->in.ndim != 2)
        return vkt_parse_fail(p, NULL,
                              "position_embedding takes a sequence [T, C] (2 dimensions per "
                              "sample), found %s: put it after an embedding",
                              shape);
    VKT_TRY(vkt_parse_uint(p, "max_len", true, 1, 1u << 24, "the number of positions of the table",
                           &l->units));
    if (l->in.dim[0] > l->units)
        return vkt_parse_fail(p, "max_len",
                              "%u is less than the input's T = %u (input %s): the table "
                              "needs a row for every position",
                              l->units, l->in.dim[0], shape);
    l->out = l->in;
    return VKT_OK;
}

static int pos_params(const vkt_layer_desc *l, vkt_param_spec *out) {
    out[0] = (vkt_param_spec){.name = "weight",
                              .ndim = 2,
                              .shape = {l->units, l->in.dim[1]},
                              .init = VKT_INIT_UNIFORM,
                              .a = 0.02 * sqrt(3.0)};
    return 1;
}

static void pos_cost(const vkt_layer_desc *l, vkt_layer_cost *c) {
    double n = l->in_features; // T * C
    c->fwd_flops = n;
    c->bwd_flops = n;
    c->fwd_bytes = 12 * n; // x and the table's rows read, y written
    c->bwd_bytes = 16 * n; // dy read twice, dweight read and written, dx written
    c->saved_floats = n;   // its output, which the slot holds
}

static void pos_forward(vkt_rec *r, int node) {
    const vkt_layer_desc *l = vkt_rec_node(r, node)->desc;
    vkt_op_pos_embedding_forward(r->cmd, r->ops, vkt_rec_out(r, node), vkt_rec_in(r, node),
                                 vkt_rec_param(r, node, 0, VKT_STORE_PARAM), r->B, l->in_features,
                                 vkt_rec_label(r, node, "fwd", "position_embedding"));
}

static void pos_backward(vkt_rec *r, int node) {
    const vkt_layer_desc *l = vkt_rec_node(r, node)->desc;
    vkt_view dy = vkt_rec_dy(r, node);
    // dweight[:T] (the first T*C floats of the table) += column sums of dy[B, T*C].
    vkt_op_bias_grad(r->cmd, r->ops, vkt_rec_param(r, node, 0, VKT_STORE_GRAD), dy, r->B,
                     l->in_features, vkt_rec_label(r, node, "bwd", "dweight"));
    if (vkt_rec_need_dx(r, node)) {
        dy.size = 4ull * r->B * l->in_features;
        vkt_view dx = vkt_rec_dx(r, node);
        dx.size = dy.size;
        vkt_cmd_copy(r->cmd, dy, dx, vkt_rec_label(r, node, "bwd", "dinput"));
    }
}

// ---------------------------------------------------------------------------------------------
// Reference, in double precision

static void pos_ref_forward(vkt_ref *r, const vkt_layer_desc *l, double *const *p, const double *x,
                            double *y) {
    uint32_t B = vkt_ref_batch(r), n = l->in_features;
    for (uint32_t b = 0; b < B; b++)
        for (uint32_t i = 0; i < n; i++)
            y[(uint64_t)b * n + i] = x[(uint64_t)b * n + i] + p[0][i];
}

static void pos_ref_backward(vkt_ref *r, const vkt_layer_desc *l, double *const *p,
                             double *const *g, const double *x, const double *y, const double *dy,
                             double *dx) {
    (void)p, (void)x, (void)y;
    uint32_t B = vkt_ref_batch(r), n = l->in_features;
    for (uint32_t b = 0; b < B; b++)
        for (uint32_t i = 0; i < n; i++) {
            g[0][i] += dy[(uint64_t)b * n + i];
            dx[(uint64_t)b * n + i] += dy[(uint64_t)b * n + i];
        }
}

static int pos_torch(const vkt_layer_desc *l, char *buf, size_t size) {
    return snprintf(buf, size, "PositionEmbedding(%u, %u)", l->units, l->in.dim[1]);
}

static const char *const pos_keys[] = {"max_len", NULL};

VKT_LAYER_TYPE(position_embedding, .keys = pos_keys, .parse = pos_parse, .params = pos_params,
               .cost = pos_cost, .forward = pos_forward, .backward = pos_backward,
               .ref_forward = pos_ref_forward, .ref_backward = pos_ref_backward,
               .torch = pos_torch);
