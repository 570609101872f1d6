// embedding.c: a token embedding, as torch.nn.Embedding(V, C) over token ids that arrive as floats
// (vktrain's inputs are fp32; scripts/vkt_torch.py's TokenEmbedding casts them with x.long()):
// input [T] ids per sample, output [T, C], y[t] = weight[id[t]].
//   keys    num_embeddings (V, required, 1 to 2^24), embedding_dim (C, required)
//   tensors weight [V, C]: uniform in +-sqrt(3), the variance 1 of PyTorch's normal(0, 1) (the
//           engine's initialisers are uniform or constant; tests/torch_equiv.py loads the initial
//           parameters from PyTorch, so the equivalence does not depend on it)
//   records fwd: a gather of rows (engine/ops/embed_ops.h); bwd: dW[v] += the sum of dy over the
//           positions with id v, deterministic (a sort of (id, position) keys, then each id's
//           run summed in position order: shaders/embed_abi.h); no input gradient (ids are not
//           differentiable): dx is zeroed where one is asked for
//   scratch the backward's sort keys, 8 bytes per position of the batch (rounded up to a power of
//           two of at least 512)
// An id that is not a whole number in [0, V) reads (and trains) the row it truncates and clamps
// to (embed_abi.h), never out of bounds; PyTorch raises an error instead. The data must hold
// valid ids; the forward op can count bad ones (vkt_op_embedding_forward's `bad`), which this
// layer does not ask for: nothing would read the count.
// V is kept in the layer description's `units` (the rows of the weight, as dense's units are); C
// is the output's last dimension.
#include <math.h>
#include <stdio.h>

#include "embed_ops.h"
#include "layer.h"
#include "vkt_internal.h"

static uint32_t dim_of(const vkt_layer_desc *l) { return l->out.dim[1]; }

static vkt_status embedding_parse(const vkt_layer_parse *p, vkt_layer_desc *l) {
    if (l->in.ndim != 1) {
        char shape[96];
        vkt_shape_format(&l->in, shape, sizeof shape);
        return vkt_parse_fail(p, NULL,
                              "embedding takes token ids [T] (one dimension per sample), found "
                              "%s: put it first, with a model input such as [64]",
                              shape);
    }
    uint32_t C = 0;
    VKT_TRY(
        vkt_parse_uint(p, "num_embeddings", true, 1, 1u << 24, "the vocabulary size V", &l->units));
    VKT_TRY(vkt_parse_uint(p, "embedding_dim", true, 1, 1u << 24, "the embedding width C", &C));
    l->out = (vkt_shape){.ndim = 2, .dim = {l->in.dim[0], C}};
    return VKT_OK;
}

static int embedding_params(const vkt_layer_desc *l, vkt_param_spec *out) {
    out[0] = (vkt_param_spec){.name = "weight",
                              .ndim = 2,
                              .shape = {l->units, dim_of(l)},
                              .init = VKT_INIT_UNIFORM,
                              .a = sqrt(3.0)};
    return 1;
}

static void embedding_cost(const vkt_layer_desc *l, vkt_layer_cost *c) {
    double T = l->in_features, C = dim_of(l);
    c->fwd_flops = 0;     // a gather
    c->bwd_flops = T * C; // one add per element of dy (the sort is integer work)
    c->fwd_bytes = 4 * T + 8 * T * C;
    c->bwd_bytes = 4 * T + 16 * T + 12 * T * C; // ids, keys, dy and dW rows read and written
    c->saved_floats = T * C;                    // its output, which the slot holds
}

static uint64_t embedding_scratch(const vkt_layer_desc *l, uint32_t B) {
    return vkt_embedding_backward_scratch(B * l->in_features);
}

static void embedding_forward(vkt_rec *r, int node) {
    const vkt_layer_desc *l = vkt_rec_node(r, node)->desc;
    vkt_op_embedding_forward(r->cmd, r->ops, vkt_rec_out(r, node), vkt_rec_in(r, node),
                             vkt_rec_param(r, node, 0, VKT_STORE_PARAM), NULL,
                             r->B * l->in_features, l->units, dim_of(l), 0,
                             vkt_rec_label(r, node, "fwd", "embedding"));
}

static void embedding_backward(vkt_rec *r, int node) {
    const vkt_layer_desc *l = vkt_rec_node(r, node)->desc;
    uint32_t N = r->B * l->in_features;
    vkt_op_embedding_backward(r->cmd, r->ops, vkt_rec_param(r, node, 0, VKT_STORE_GRAD),
                              vkt_rec_dy(r, node), vkt_rec_in(r, node), vkt_rec_scratch(r), N,
                              l->units, dim_of(l), 0, vkt_rec_label(r, node, "bwd", "dweight"));
    if (vkt_rec_need_dx(r, node)) {
        vkt_view dx = vkt_rec_dx(r, node);
        dx.size = 4ull * N;
        vkt_cmd_fill(r->cmd, dx, 0);
    }
}

// ---------------------------------------------------------------------------------------------
// Reference, in double precision

// The row an id reads: truncated toward zero and clamped into [0, V - 1], NaN to 0 (embed_abi.h).
static uint32_t row_of(double id, uint32_t V) {
    if (!(id >= 1)) return 0;
    return id >= V - 1 ? V - 1 : (uint32_t)id;
}

static void embedding_ref_forward(vkt_ref *r, const vkt_layer_desc *l, double *const *p,
                                  const double *x, double *y) {
    uint64_t N = (uint64_t)vkt_ref_batch(r) * l->in_features;
    uint32_t C = dim_of(l);
    for (uint64_t n = 0; n < N; n++) {
        const double *w = p[0] + (uint64_t)row_of(x[n], l->units) * C;
        for (uint32_t c = 0; c < C; c++)
            y[n * C + c] = w[c];
    }
}

static void embedding_ref_backward(vkt_ref *r, const vkt_layer_desc *l, double *const *p,
                                   double *const *g, const double *x, const double *y,
                                   const double *dy, double *dx) {
    (void)p, (void)y, (void)dx; // dx += 0: the ids get no gradient
    uint64_t N = (uint64_t)vkt_ref_batch(r) * l->in_features;
    uint32_t C = dim_of(l);
    for (uint64_t n = 0; n < N; n++) {
        double *gw = g[0] + (uint64_t)row_of(x[n], l->units) * C;
        for (uint32_t c = 0; c < C; c++)
            gw[c] += dy[n * C + c];
    }
}

static int embedding_torch(const vkt_layer_desc *l, char *buf, size_t size) {
    return snprintf(buf, size, "TokenEmbedding(%u, %u)", l->units, dim_of(l));
}

static const char *const embedding_keys[] = {"num_embeddings", "embedding_dim", NULL};

VKT_LAYER_TYPE(embedding, .keys = embedding_keys, .parse = embedding_parse,
               .params = embedding_params, .cost = embedding_cost, .scratch = embedding_scratch,
               .forward = embedding_forward, .backward = embedding_backward,
               .ref_forward = embedding_ref_forward, .ref_backward = embedding_ref_backward,
               .torch = embedding_torch);
