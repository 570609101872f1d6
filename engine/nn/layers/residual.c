// residual.c: a residual block, y = x + body(x), as a PyTorch module
//   class Residual(nn.Sequential):
//       def forward(self, x): return x + super().forward(x)
// so that the body's parameters are named "<block>.<j>.weight". Blocks nest.
//   keys    layers (required: the body, a non-empty list of layers whose output shape is the
//           block's input shape)
//   records fwd: the body, then z = x + body(x) (one kernel); bwd: the body from dy (its last
//           layer's output gradient is the block's), then dx += dy
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "layer.h"
#include "vkt_internal.h"

static bool same_shape(const vkt_shape *a, const vkt_shape *b) {
    if (a->ndim != b->ndim) return false;
    for (int i = 0; i < a->ndim; i++)
        if (a->dim[i] != b->dim[i]) return false;
    return true;
}

static vkt_status residual_parse(const vkt_layer_parse *p, vkt_layer_desc *l) {
    VKT_TRY(vkt_parse_body(p, "layers", l));
    if (!same_shape(&l->in, &l->out)) {
        char a[96], b[96];
        vkt_shape_format(&l->in, a, sizeof a);
        vkt_shape_format(&l->out, b, sizeof b);
        return vkt_parse_fail(p, "layers",
                              "the body turns the block's input %s into %s: y = x + body(x) "
                              "needs the same shape out as in",
                              a, b);
    }
    // The body's last layer writes its output gradient where the block's is; a reshape has
    // none of its own to write.
    if (l->layers[l->nlayers - 1].type->aliases_input)
        return vkt_parse_fail(p, "layers",
                              "the body may not end in a %s (it would be the block's input)",
                              l->layers[l->nlayers - 1].type->name);
    return VKT_OK;
}

static void residual_cost(const vkt_layer_desc *l, vkt_layer_cost *c) {
    c->fwd_flops = l->in_features; // the sum
    c->bwd_flops = l->in_features;
    c->fwd_bytes = 12.0 * l->in_features;
    c->bwd_bytes = 12.0 * l->in_features;
}

static void residual_forward(vkt_rec *r, int node) {
    const vkt_layer_desc *l = vkt_rec_node(r, node)->desc;
    vkt_rec_forward_body(r, node);
    vkt_op_add(r->cmd, r->ops, vkt_rec_out(r, node), vkt_rec_in(r, node),
               vkt_rec_body_out(r, node), 1.0f, r->B * l->in_features,
               vkt_rec_label(r, node, "fwd", "add"));
}

static void residual_backward(vkt_rec *r, int node) {
    const vkt_layer_desc *l = vkt_rec_node(r, node)->desc;
    vkt_rec_backward_body(r, node); // writes the body's dx into the block's
    if (!vkt_rec_need_dx(r, node)) return;
    vkt_rec_flush_late(r);
    vkt_op_axpy(r->cmd, r->ops, vkt_rec_dx(r, node), vkt_rec_dy(r, node), 1.0f,
                r->B * l->in_features, vkt_rec_label(r, node, "bwd", "add"));
}

static void residual_ref_forward(vkt_ref *r, const vkt_layer_desc *l, double *const *p,
                                 const double *x, double *y) {
    (void)p;
    uint64_t n = (uint64_t)vkt_ref_batch(r) * l->in_features;
    vkt_ref_forward_body(r, l, x, y);
    for (uint64_t i = 0; i < n; i++)
        y[i] += x[i];
}

static void residual_ref_backward(vkt_ref *r, const vkt_layer_desc *l, double *const *p,
                                  double *const *g, const double *x, const double *y,
                                  const double *dy, double *dx) {
    (void)p, (void)g, (void)x, (void)y;
    uint64_t n = (uint64_t)vkt_ref_batch(r) * l->in_features;
    double *body = calloc(n, sizeof *body);
    VKT_ASSERT(body);
    vkt_ref_backward_body(r, l, dy, body);
    for (uint64_t i = 0; i < n; i++)
        dx[i] += dy[i] + body[i];
    free(body);
}

static int residual_torch(const vkt_layer_desc *l, char *buf, size_t size) {
    return vkt_layers_torch("Residual", l->layers, l->nlayers, buf, size);
}

static const char *const residual_keys[] = {"layers", NULL};

VKT_LAYER_TYPE(residual, .keys = residual_keys, .parse = residual_parse, .cost = residual_cost,
               .forward = residual_forward, .backward = residual_backward,
               .ref_forward = residual_ref_forward, .ref_backward = residual_ref_backward,
               .torch = residual_torch);
