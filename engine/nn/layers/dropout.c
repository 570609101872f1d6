// dropout.c: dropout, as torch.nn.Dropout(p): in training each element is zeroed with
// probability p and the others scaled by 1 / (1 - p); in evaluation it is the identity. Any
// input shape, the same output shape, no parameters.
//   keys    p (default 0.5, PyTorch's), in [0, 1]; p = 1 zeroes everything, as PyTorch does
//   records train fwd: y = x * mask / (1 - p); bwd: dx = dy * mask / (1 - p), one dropout
//           kernel each (engine/ops/dropout_ops.c); eval: a copy each way
// The mask is drawn per element from a counter-based hash of (seed, step, node id, the sample's
// row in the whole batch = phase.row0 + local row, the element's index in the sample)
// (shaders/dropout_abi.h), so a sample's mask is the same whatever shard or micro-batch it is in
// and on whichever device. The backward recomputes it from the same hash (the phase is the one
// of the forward when the backward is recorded): no saved memory, and one kernel a pass either
// way, where a stored mask would cost B * F bytes a slot and as much traffic as the recompute
// saves. It does not fuse with a neighbouring product: it has no epilogue form.
#include <stdio.h>

#include "dropout_ops.h"
#include "layer.h"
#include "vkt_internal.h"

static vkt_status dropout_parse(const vkt_layer_parse *p, vkt_layer_desc *l) {
    l->p = 0.5f; // PyTorch's default
    VKT_TRY(vkt_parse_range(p, "p", 0.0, 1.0, false, false, "the probability of zeroing an element",
                            &l->p));
    l->out = l->in;
    return VKT_OK;
}

static void dropout_cost(const vkt_layer_desc *l, vkt_layer_cost *c) {
    c->fwd_flops = l->in_features; // one multiply per element (the hash is integer work)
    c->bwd_flops = l->in_features;
    c->fwd_bytes = 8.0 * l->in_features; // x in, y out
    c->bwd_bytes = 8.0 * l->in_features; // dy in, dx out (the mask is recomputed, not read)
    c->saved_floats = l->in_features;    // its output, which the slot holds
}

static vkt_dropout_mask mask_of(const vkt_layer_desc *l, const vkt_net_phase *ph, uint32_t node) {
    return (vkt_dropout_mask){
        .p = l->p, .seed = ph->seed, .step = ph->step, .node = node, .row0 = ph->row0};
}

// The first B rows of a node's view (the net's views hold max_batch rows).
static vkt_view rows_of(vkt_view v, uint32_t B, uint32_t F) {
    v.size = 4ull * B * F;
    return v;
}

static void dropout_forward(vkt_rec *r, int node) {
    const vkt_layer_desc *l = vkt_rec_node(r, node)->desc;
    uint32_t F = l->in_features;
    vkt_view y = vkt_rec_out(r, node), x = vkt_rec_in(r, node);
    const char *label = vkt_rec_label(r, node, "fwd", "dropout");
    if (!vkt_rec_training(r)) {
        vkt_cmd_copy(r->cmd, rows_of(x, r->B, F), rows_of(y, r->B, F), label);
        return;
    }
    vkt_dropout_mask m = mask_of(l, vkt_rec_phase(r), vkt_rec_node_id(r, node));
    vkt_op_dropout_forward(r->cmd, r->ops, y, x, &m, r->B, F, label);
}

static void dropout_backward(vkt_rec *r, int node) {
    const vkt_layer_desc *l = vkt_rec_node(r, node)->desc;
    if (!vkt_rec_need_dx(r, node)) return;
    uint32_t F = l->in_features;
    vkt_view dx = vkt_rec_dx(r, node), dy = vkt_rec_dy(r, node);
    const char *label = vkt_rec_label(r, node, "bwd", "dropout");
    if (!vkt_rec_training(r)) {
        vkt_cmd_copy(r->cmd, rows_of(dy, r->B, F), rows_of(dx, r->B, F), label);
        return;
    }
    vkt_dropout_mask m = mask_of(l, vkt_rec_phase(r), vkt_rec_node_id(r, node));
    vkt_op_dropout_backward(r->cmd, r->ops, dx, dy, &m, r->B, F, label);
}

// ---------------------------------------------------------------------------------------------
// Reference, in double precision, from the same hash

// y = x * factor (forward) or dx += dy * factor (backward), factor = keep / (1 - p).
static void ref_apply(vkt_ref *r, const vkt_layer_desc *l, const double *in, double *out,
                      bool accumulate) {
    const vkt_net_phase *ph = vkt_ref_phase(r);
    uint32_t B = vkt_ref_batch(r), F = l->in_features;
    vkt_dropout_mask m = mask_of(l, ph, vkt_ref_node_id(r, l));
    double scale = vkt_dropout_scale(l->p);
    for (uint32_t b = 0; b < B; b++)
        for (uint32_t e = 0; e < F; e++) {
            uint64_t i = (uint64_t)b * F + e;
            double v = !ph->train                              ? in[i]
                       : vkt_dropout_kept(&m, ph->row0 + b, e) ? in[i] * scale
                                                               : 0.0;
            out[i] = accumulate ? out[i] + v : v;
        }
}

static void dropout_ref_forward(vkt_ref *r, const vkt_layer_desc *l, double *const *p,
                                const double *x, double *y) {
    (void)p;
    ref_apply(r, l, x, y, false);
}

static void dropout_ref_backward(vkt_ref *r, const vkt_layer_desc *l, double *const *p,
                                 double *const *g, const double *x, const double *y,
                                 const double *dy, double *dx) {
    (void)p, (void)g, (void)x, (void)y;
    ref_apply(r, l, dy, dx, true);
}

// ---------------------------------------------------------------------------------------------
// PyTorch

static int dropout_torch(const vkt_layer_desc *l, char *buf, size_t size) {
    return snprintf(buf, size, "nn.Dropout(p=%.9g)", (double)l->p);
}

static const char *const dropout_keys[] = {"p", NULL};

VKT_LAYER_TYPE(dropout, .keys = dropout_keys, .parse = dropout_parse, .cost = dropout_cost,
               .forward = dropout_forward, .backward = dropout_backward,
               .ref_forward = dropout_ref_forward, .ref_backward = dropout_ref_backward,
               .torch = dropout_torch);
