// test_mlp_grad.c: the whole backward of small MLPs, on every device, with the activations fused
// into the matmuls (vkt_context_desc.fuse on, engine/nn/network.c) and without (off). A
// double-precision C reference of the network is checked against central finite differences of
// its own loss, entry by entry, for every parameter and input; the GPU gradients are then checked
// against the reference, entry by entry. The models sweep every activation through every path
// network.c records:
//  - fused into the dense layer before it, f' from its output (relu, leaky_relu with a positive
//    slope, tanh, sigmoid) or from its kept input (gelu, leaky_relu with a negative slope);
//  - its backward fused into the next dense layer's input gradient, or run on its own: after
//    another activation, as the last layer (MSE), as the first layer (with the input gradient),
//    and across a split of the backward into two ranges at a dense layer (as replicated.c's
//    buckets cut it), where the fused forward's activation is differentiated from its output by
//    the act_*_bwdy kernels.
// Also: backward accumulates (+=); removing one barrier from the recorded backward is caught by
// synchronization validation, fused and unfused; the fused step records fewer dispatches and
// barriers than the unfused one, by the count that network.c's fusion promises; and SGD steps
// taken in the weight-gradient matmuls (vkt_net_record_backward_step) give the parameters the
// separate optimizer gives.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "layer.h"
#include "network.h"
#include "test_util.h"

#define MAXW 64 // features per layer, at most

enum { B = 6 };

typedef struct model_case {
    const char *json;
    int split;       // > 0: also record the backward as [split, L) then [0, split)
    bool input_grad; // ask for (and check) the gradient of the model's input
} model_case;

// The sweep. Widths stay small: the reference's finite differences run over every entry.
static const model_case CASES[] = {
    // The original: tanh and relu, each fused (f' from the output) and fused backward.
    {"{\"name\": \"m0\", \"input\": [7], \"layers\": ["
     "{\"type\": \"dense\", \"units\": 6}, {\"type\": \"tanh\"},"
     "{\"type\": \"dense\", \"units\": 5}, {\"type\": \"relu\"},"
     "{\"type\": \"dense\", \"units\": 3}], \"loss\": \"softmax_cross_entropy\"}",
     2, false},
    // leaky_relu (positive slope, from the output) and gelu (z kept, f' from the input).
    {"{\"name\": \"m1\", \"input\": [7], \"layers\": ["
     "{\"type\": \"dense\", \"units\": 6}, {\"type\": \"leaky_relu\", \"negative_slope\": 0.1},"
     "{\"type\": \"dense\", \"units\": 5}, {\"type\": \"gelu\", \"approximate\": \"tanh\"},"
     "{\"type\": \"dense\", \"units\": 3}], \"loss\": \"softmax_cross_entropy\"}",
     2, false},
    // sigmoid, and leaky_relu with a negative slope (z kept: y > 0 for x < 0 too).
    {"{\"name\": \"m2\", \"input\": [7], \"layers\": ["
     "{\"type\": \"dense\", \"units\": 6}, {\"type\": \"sigmoid\"},"
     "{\"type\": \"dense\", \"units\": 5}, {\"type\": \"leaky_relu\", \"negative_slope\": -0.2},"
     "{\"type\": \"dense\", \"units\": 3}], \"loss\": \"softmax_cross_entropy\"}",
     4, false},
    // An activation first (its backward fused, into the input gradient), two in a row (relu
    // fused forward, its backward on its own from the output; sigmoid unfused forward, its
    // backward fused from its input), gelu fused both ways, a layer without bias.
    {"{\"name\": \"m3\", \"input\": [5], \"layers\": ["
     "{\"type\": \"tanh\"}, {\"type\": \"dense\", \"units\": 6}, {\"type\": \"relu\"},"
     "{\"type\": \"sigmoid\"}, {\"type\": \"dense\", \"units\": 5, \"bias\": false},"
     "{\"type\": \"gelu\"}, {\"type\": \"dense\", \"units\": 4}], \"loss\": \"mse\"}",
     6, true},
    // MSE on a sigmoid output: fused forward, backward on its own from the output; and tanh's
    // from-output backward across the split.
    {"{\"name\": \"m4\", \"input\": [6], \"layers\": ["
     "{\"type\": \"dense\", \"units\": 5}, {\"type\": \"tanh\"},"
     "{\"type\": \"dense\", \"units\": 4}, {\"type\": \"sigmoid\"}], \"loss\": \"mse\"}",
     2, true},
    // Residual blocks: a product with a fused activation inside a body, a body's last layer
    // writing the block's output gradient, nested blocks, an activation first in a body (its
    // backward fused into the next product), a flatten of a [2, C] shape, dense layers over the
    // last dimension, the input gradient, and a split between blocks.
    {"{\"name\": \"m5\", \"input\": [2, 5], \"layers\": ["
     "{\"type\": \"dense\", \"units\": 6},"
     "{\"type\": \"residual\", \"layers\": [{\"type\": \"dense\", \"units\": 4},"
     " {\"type\": \"gelu\"}, {\"type\": \"dense\", \"units\": 6}]},"
     "{\"type\": \"relu\"},"
     "{\"type\": \"residual\", \"layers\": [{\"type\": \"tanh\"},"
     " {\"type\": \"residual\", \"layers\": [{\"type\": \"dense\", \"units\": 6},"
     " {\"type\": \"sigmoid\"}]}]},"
     "{\"type\": \"flatten\"}, {\"type\": \"dense\", \"units\": 3}],"
     " \"loss\": \"softmax_cross_entropy\"}",
     3, true},
    // A block first, without the input gradient (its body's first activation records nothing),
    // and MSE.
    {"{\"name\": \"m6\", \"input\": [4], \"layers\": ["
     "{\"type\": \"residual\", \"layers\": [{\"type\": \"relu\"}, {\"type\": \"dense\", "
     "\"units\": 4}]},"
     "{\"type\": \"dense\", \"units\": 3}], \"loss\": \"mse\"}",
     1, false},
};
#define NCASES ((int)(sizeof CASES / sizeof CASES[0]))

// ---------------------------------------------------------------------------------------------
// The reference network, in double precision: the layers' own references (vkt_ref, layer.h)
// with the loss written here from PyTorch's formulas.

typedef struct run_ctx {
    vt *t;
    vkt_device *dev;
    vkt_ops *ops; // one per device for the whole test: its kernel cache spares rebuilding
    const vkt_model_desc *m;
    const model_case *mc;
    bool fuse;
    // The reference, filled by the first run of a model (the parameters are the GPU's init,
    // which is the same on every device for a seed).
    vkt_ref *ref;
    double gx[B * MAXW];
    double x[B * MAXW], ymse[B * MAXW];
    float xf[B * MAXW], ymsef[B * MAXW];
    uint32_t ycls[B];
    bool have_ref;
} run_ctx;

// Loss of the batch (mean over rows, as the engine's grad_scale 1/B makes it); with grads also
// its gradients w.r.t. the parameters (vkt_ref_grad) and the input (gx).
static double ref_loss(run_ctx *c, const double *x, bool grads) {
    const vkt_model_desc *m = c->m;
    uint32_t C = m->output_features;
    double z[B * MAXW], loss = 0, d[B * MAXW];
    vkt_ref_forward(c->ref, x, z);
    for (int s = 0; s < B; s++) {
        if (m->loss == VKT_LOSS_MSE) {
            for (uint32_t o = 0; o < C; o++) {
                double e = z[s * C + o] - c->ymse[s * C + o];
                loss += e * e;
                d[s * C + o] = 2 * e / B;
            }
        } else {
            double mx = -INFINITY, se = 0;
            for (uint32_t o = 0; o < C; o++)
                mx = fmax(mx, z[s * C + o]);
            for (uint32_t o = 0; o < C; o++)
                se += exp(z[s * C + o] - mx);
            double lse = mx + log(se);
            loss += lse - z[s * C + c->ycls[s]];
            for (uint32_t o = 0; o < C; o++)
                d[s * C + o] = (exp(z[s * C + o] - lse) - (o == c->ycls[s])) / B;
        }
    }
    if (grads) vkt_ref_backward(c->ref, d, c->gx);
    return loss / B;
}

// Reads the GPU's initial parameters into a fresh reference and checks the reference's gradient
// against finite differences of its loss, every parameter and input entry.
static void build_reference(run_ctx *c, vkt_net *net) {
    vt *t = c->t;
    const vkt_model_desc *m = c->m;
    c->ref = vkt_ref_create(m, B);
    VT_CHECK(t, c->ref && vkt_ref_tensor_count(c->ref) == vkt_net_tensor_count(net),
             "%s: the reference has the network's tensors", m->name);
    if (t->failures) return;
    float buf[MAXW * MAXW];
    for (int i = 0; i < vkt_net_tensor_count(net); i++) {
        const vkt_net_tensor *nt = vkt_net_get_tensor(net, i);
        VT_OK(t, vkt_net_read_tensor(net, VKT_STORE_PARAM, i, buf));
        // PyTorch's Linear default: uniform within 1/sqrt(fan_in).
        double bound = vkt_tensor_spec(nt).a;
        VT_CHECK(t, vkt_ref_tensor_size(c->ref, i) == nt->count, "%s: size", nt->name);
        for (uint64_t k = 0; k < nt->count; k++) {
            vkt_ref_param(c->ref, i)[k] = buf[k];
            VT_CHECK(t, fabs(buf[k]) <= bound, "init of %s[%llu] = %g outside +-%g", nt->name,
                     (unsigned long long)k, buf[k], bound);
        }
    }
    ref_loss(c, c->x, true);

    // The reference against central finite differences of its own loss, every entry.
    int bad = 0, n = 0, nt_count = vkt_net_tensor_count(net);
    double h = 1e-6;
    for (int i = 0; i <= nt_count; i++) {
        bool is_x = i == nt_count;
        const vkt_net_tensor *nt = is_x ? NULL : vkt_net_get_tensor(net, i);
        double *v = is_x ? c->x : vkt_ref_param(c->ref, i);
        const double *g = is_x ? c->gx : vkt_ref_grad(c->ref, i);
        uint64_t count = is_x ? (uint64_t)B * m->input_features : nt->count;
        for (uint64_t k = 0; k < count; k++) {
            double keep = v[k];
            v[k] = keep + h;
            double lp = ref_loss(c, c->x, false);
            v[k] = keep - h;
            double lm = ref_loss(c, c->x, false);
            v[k] = keep;
            double fd = (lp - lm) / (2 * h);
            n++;
            if (fabs(fd - g[k]) > 1e-8 + 1e-5 * fabs(g[k]) && bad++ < 5)
                fprintf(stderr, "  FD %s %s[%llu]: analytic %.10g, finite difference %.10g\n",
                        m->name, is_x ? "input" : nt->name, (unsigned long long)k, g[k], fd);
        }
    }
    VT_CHECK(t, bad == 0,
             "%s: %d of %d reference gradient entries disagree with finite differences", m->name,
             bad, n);
    // Put the reference's gradients back at the unperturbed point.
    ref_loss(c, c->x, true);
    c->have_ref = true;
}

// Records forward, loss and backward (in one range, or split at mc->split).
static void record_step(run_ctx *c, vkt_net *net, vkt_cmd *cmd, bool split) {
    vkt_net_record_forward(net, cmd, 0, B);
    vkt_net_record_loss(net, cmd, 0, B, 1.0f / B);
    int L = c->m->nlayers;
    if (split) {
        vkt_net_record_backward_layers(net, cmd, 0, B, c->mc->split, L, c->mc->input_grad);
        vkt_net_record_backward_layers(net, cmd, 0, B, 0, c->mc->split, c->mc->input_grad);
    } else {
        vkt_net_record_backward(net, cmd, 0, B, c->mc->input_grad);
    }
}

// The whole model on dev with a command stream, fused (VKT_FUSE_ON) or not, SGD with the given
// momentum.
static void open_net(vt *t, vkt_device *dev, vkt_ops *ops, const vkt_model_desc *m, bool fuse,
                     float momentum, vkt_net **net, vkt_cmd **cmd) {
    vkt_context_set_fuse(t->ctx, fuse ? VKT_FUSE_ON : VKT_FUSE_OFF);
    vkt_net_desc d = {.model = m,
                      .first_layer = 0,
                      .last_layer = m->nlayers,
                      .max_batch = B,
                      .slots = 1,
                      .optim = vkt_optim_default(VKT_OPTIM_SGD)};
    d.optim.momentum = momentum;
    VT_OK(t, vkt_net_create(dev, ops, &d, net));
    VT_OK(t, vkt_cmd_create(dev, cmd));
    vkt_context_set_fuse(t->ctx, VKT_FUSE_AUTO);
}

static void run_model(run_ctx *c) {
    vt *t = c->t;
    const vkt_model_desc *m = c->m;
    char where[200];
    snprintf(where, sizeof where, "%s %s on %s", m->name, c->fuse ? "fused" : "unfused",
             vkt_device_label(c->dev));
    vkt_ops *ops = c->ops;
    vkt_net *net = NULL;
    vkt_cmd *cmd = NULL;
    open_net(t, c->dev, ops, m, c->fuse, 0.0f, &net, &cmd);
    if (!net || !cmd) goto out;
    VT_OK(t, vkt_net_init(net, 42));
    if (!c->have_ref) build_reference(c, net);

    vkt_view in = vkt_net_input(net, 0), tg = vkt_net_targets(net, 0);
    VT_OK(t, vkt_buffer_write(in.buffer, in.offset, c->xf, 4ull * B * m->input_features));
    if (m->loss == VKT_LOSS_MSE)
        VT_OK(t, vkt_buffer_write(tg.buffer, tg.offset, c->ymsef, 4ull * B * m->output_features));
    else
        VT_OK(t, vkt_buffer_write(tg.buffer, tg.offset, c->ycls, sizeof c->ycls));
    if (!c->have_ref) goto out;
    double want = ref_loss(c, c->x, false);
    // pass 0: one backward after zeroing; 1: two, which must accumulate to 2x; 2: one, split.
    for (int pass = 0; pass < 3; pass++) {
        VT_OK(t, vkt_cmd_begin(cmd, false));
        vkt_net_record_zero_grads(net, cmd);
        for (int rep = 0; rep <= (pass == 1); rep++)
            record_step(c, net, cmd, pass == 2);
        if (!vt_run(t, cmd, ops, "backward", where)) goto out;
        double loss_sum = 0;
        float rows[B];
        vkt_view lr = vkt_net_loss_rows(net, 0);
        VT_OK(t, vkt_buffer_read(lr.buffer, lr.offset, rows, sizeof rows));
        for (int b = 0; b < B; b++)
            loss_sum += rows[b];
        VT_CHECK(t, fabs(loss_sum / B - want) < 1e-5, "%s: loss %g, reference %g", where,
                 loss_sum / B, want);
        // Every entry within atol 2e-6 + rtol 1e-3 (fp32 through three layers).
        float buf[MAXW * MAXW];
        double ref[MAXW * MAXW];
        const char *how = pass == 0 ? "once" : pass == 1 ? "accumulated twice" : "split";
        for (int i = 0; i < vkt_net_tensor_count(net); i++) {
            const vkt_net_tensor *nt = vkt_net_get_tensor(net, i);
            const double *g = vkt_ref_grad(c->ref, i);
            VT_OK(t, vkt_net_read_tensor(net, VKT_STORE_GRAD, i, buf));
            for (uint64_t k = 0; k < nt->count; k++)
                ref[k] = (pass == 1 ? 2 : 1) * g[k];
            char what[300];
            snprintf(what, sizeof what, "%s d%s (%s)", where, nt->name, how);
            VT_CHECK(t, vt_compare(what, buf, ref, nt->count, 2e-6, 1e-3) == 0, "%s", what);
        }
        if (c->mc->input_grad) {
            vkt_view gi = vkt_net_input_grad(net, 0);
            uint32_t nin = B * m->input_features;
            VT_OK(t, vkt_buffer_read(gi.buffer, gi.offset, buf, 4ull * nin));
            char what[300];
            snprintf(what, sizeof what, "%s d input (%s)", where, how);
            VT_CHECK(t, vt_compare(what, buf, c->gx, nin, 2e-6, 1e-3) == 0, "%s", what);
        }
    }

    // Leaving out one barrier of the backward must be reported by synchronization validation.
    if (c->mc == &CASES[0]) {
        uint64_t before = vkt_context_validation_count(t->ctx);
        vkt_net_test_skip_barrier(net, 1);
        VT_OK(t, vkt_cmd_begin(cmd, false));
        vkt_net_record_zero_grads(net, cmd);
        record_step(c, net, cmd, false);
        vt_run(t, cmd, ops, "backward without a barrier", where);
        vkt_net_test_skip_barrier(net, -1);
        uint64_t caught = vkt_context_validation_count(t->ctx) - before;
        VT_CHECK(t, caught > 0, "%s: a backward without one of its barriers was not reported",
                 where);
        printf("test_mlp_grad: %s: the missing barrier gave %llu validation message(s), as it "
               "must\n",
               where, (unsigned long long)caught);
        t->expected_validation += caught;
    }
out:
    vkt_cmd_destroy(cmd);
    vkt_net_destroy(net);
}

// ---------------------------------------------------------------------------------------------
// Dispatches and barriers of one training step, fused and not

// Records one whole step (zero, forward, loss, backward, SGD) of m and counts what it recorded.
static void count_step(vt *t, vkt_device *dev, vkt_ops *ops, const vkt_model_desc *m, bool fuse,
                       int *nd, int *nb) {
    vkt_net *net = NULL;
    vkt_cmd *cmd = NULL;
    open_net(t, dev, ops, m, fuse, 0.9f, &net, &cmd);
    *nd = *nb = -1;
    if (net && cmd && vkt_cmd_begin(cmd, false) == VKT_OK) {
        vkt_net_record_zero_grads(net, cmd);
        vkt_net_record_forward(net, cmd, 0, B);
        vkt_net_record_loss(net, cmd, 0, B, 1.0f / B);
        vkt_net_record_backward(net, cmd, 0, B, false);
        vkt_net_record_step(net, cmd, 1);
        *nd = vkt_cmd_dispatch_count(cmd);
        *nb = vkt_cmd_barrier_count(cmd);
        VT_OK(t, vkt_cmd_end(cmd));
        VT_OK(t, vkt_net_status(net));
    }
    vkt_cmd_destroy(cmd);
    vkt_net_destroy(net);
}

static void check_counts(vt *t, vkt_device *dev, vkt_ops *ops) {
    // fashion_mlp's layers (assets/models/fashion_mlp.json) at a small width: the counts do not
    // depend on the widths.
    vkt_model_desc m;
    VT_OK(t, vkt_model_parse("{\"input\": [12], \"layers\": [{\"type\": \"dense\", \"units\": 8},"
                             "{\"type\": \"relu\"}, {\"type\": \"dense\", \"units\": 8},"
                             "{\"type\": \"relu\"}, {\"type\": \"dense\", \"units\": 4}],"
                             "\"loss\": \"softmax_cross_entropy\"}",
                             "fashion_mlp_small", &m));
    int d0, b0, d1, b1;
    count_step(t, dev, ops, &m, false, &d0, &b0);
    count_step(t, dev, ops, &m, true, &d1, &b1);
    printf("test_mlp_grad: %s: one fashion_mlp-shaped SGD step records %d dispatches and %d "
           "barriers unfused, %d and %d fused\n",
           vkt_device_label(dev), d0, b0, d1, b1);
    // Unfused: forward 3 matmuls + 2 acts, loss 1, backward 3 TN + 3 bias_grad + 2 NN + 2 acts,
    // SGD 1 = 17; barriers: begin, zeroing, 5 forward, loss, 5 backward, SGD = 14. Fusing the
    // two relus takes out their 4 dispatches and the 4 barriers after them. A bias gradient that
    // its weight gradient's product sums in its own dispatch (lavapipe's texel and narrow kernels:
    // vkt_matmul_sums_columns) takes out its dispatch, fused or not.
    const uint32_t tn[3][2] = {{8, 12}, {8, 8}, {4, 8}}; // the weight gradients' M, N (K = B)
    int in_kernel = 0;
    for (int i = 0; i < 3; i++)
        in_kernel += vkt_matmul_sums_columns(ops, tn[i][0], tn[i][1], B);
    VT_CHECK(t, d0 == 17 - in_kernel && b0 == 14,
             "unfused step: %d dispatches, %d barriers (want %d, 14)", d0, b0, 17 - in_kernel);
    VT_CHECK(t, d1 == 13 - in_kernel && b1 == 10,
             "fused step: %d dispatches, %d barriers (want %d, 10)", d1, b1, 13 - in_kernel);
    // lavapipe sums all three in their products (the narrow kernel's: K = 6 is not a multiple of
    // the texel kernel's 8).
    if (strstr(vkt_device_label(dev), "llvmpipe"))
        VT_CHECK(t, in_kernel == 3, "%s: %d of 3 bias gradients in their products",
                 vkt_device_label(dev), in_kernel);
    vkt_model_free(&m);
}

// ---------------------------------------------------------------------------------------------
// The optimizer step fused into the weight-gradient matmuls (vkt_net_record_backward_step)

// Three SGD steps (momentum, nesterov, weight decay) of a fashion_mlp-shaped model at widths the
// wide kernel takes (its weight gradients are TN products with M, N and K multiples of 8; the
// last layer's 4 outputs are not, so that layer takes the separate SGD), once with
// vkt_net_record_backward + vkt_net_record_step and once with vkt_net_record_backward_step, from
// the same initial parameters and data: every parameter agrees within 2e-6 + 2e-6 |p| (the
// fused arithmetic is the same in fp32, the rounding may differ), and where the device fuses
// (lavapipe) two weight tensors did.
static void check_fused_sgd(vt *t, vkt_device *dev, vkt_ops *ops) {
    enum { FB = 16, STEPS = 3 };
    vkt_model_desc m;
    VT_OK(t, vkt_model_parse("{\"input\": [24], \"layers\": [{\"type\": \"dense\", \"units\": 16},"
                             "{\"type\": \"relu\"}, {\"type\": \"dense\", \"units\": 16},"
                             "{\"type\": \"relu\"}, {\"type\": \"dense\", \"units\": 4}],"
                             "\"loss\": \"softmax_cross_entropy\"}",
                             "fused_sgd", &m));
    float x[FB * 24];
    uint32_t y[FB];
    vt_fill_uniform(x, FB * 24, 5, -1, 1);
    for (int b = 0; b < FB; b++)
        y[b] = (uint32_t)(b * 3) % 4;
    vkt_net *net[2] = {NULL, NULL};
    vkt_cmd *cmd[2] = {NULL, NULL};
    int nfused = -1;
    for (int k = 0; k < 2; k++) {
        vkt_context_set_fuse(t->ctx, VKT_FUSE_ON);
        vkt_net_desc d = {.model = &m,
                          .first_layer = 0,
                          .last_layer = m.nlayers,
                          .max_batch = FB,
                          .slots = 1,
                          .optim = vkt_optim_default(VKT_OPTIM_SGD)};
        d.optim.lr = 0.1f;
        d.optim.momentum = 0.9f;
        d.optim.nesterov = true;
        d.optim.weight_decay = 1e-2f;
        VT_OK(t, vkt_net_create(dev, ops, &d, &net[k]));
        vkt_context_set_fuse(t->ctx, VKT_FUSE_AUTO);
        VT_OK(t, vkt_cmd_create(dev, &cmd[k]));
        if (!net[k] || !cmd[k]) goto out;
        VT_OK(t, vkt_net_init(net[k], 11));
        vkt_view in = vkt_net_input(net[k], 0), tg = vkt_net_targets(net[k], 0);
        VT_OK(t, vkt_buffer_write(in.buffer, in.offset, x, sizeof x));
        VT_OK(t, vkt_buffer_write(tg.buffer, tg.offset, y, sizeof y));
        for (uint32_t s = 1; s <= STEPS; s++) {
            VT_OK(t, vkt_cmd_begin(cmd[k], false));
            vkt_net_record_zero_grads(net[k], cmd[k]);
            vkt_net_record_forward(net[k], cmd[k], 0, FB);
            vkt_net_record_loss(net[k], cmd[k], 0, FB, 1.0f / FB);
            if (k == 0) {
                vkt_net_record_backward(net[k], cmd[k], 0, FB, false);
                vkt_net_record_step(net[k], cmd[k], s);
            } else {
                int n = vkt_net_record_backward_step(net[k], cmd[k], 0, FB, s);
                if (s == 1) nfused = n;
            }
            VT_OK(t, vkt_cmd_end(cmd[k]));
            VT_OK(t, vkt_net_status(net[k]));
            VT_OK(t, vkt_cmd_submit(cmd[k]));
            VT_OK(t, vkt_cmd_wait(cmd[k], VKT_WAIT_MS));
        }
    }
    // Every driver but SwiftShader (it has no optimizer epilogue).
    bool fuses = vkt_device_get_info(dev)->driver_id != VT_DRIVER_ID_SWIFTSHADER;
    VT_CHECK(t, nfused == (fuses ? 2 : 0),
             "%s: %d weight tensors took their step in the matmul "
             "(want %d)",
             vkt_device_label(dev), nfused, fuses ? 2 : 0);
    size_t bad = 0, total = 0;
    for (int i = 0; i < vkt_net_tensor_count(net[0]); i++) {
        const vkt_net_tensor *te = vkt_net_get_tensor(net[0], i);
        float *p0 = malloc(te->count * 4), *p1 = malloc(te->count * 4);
        VT_OK(t, vkt_net_read_tensor(net[0], VKT_STORE_PARAM, i, p0));
        VT_OK(t, vkt_net_read_tensor(net[1], VKT_STORE_PARAM, i, p1));
        for (uint64_t j = 0; j < te->count; j++, total++)
            bad += !(fabsf(p0[j] - p1[j]) <= 2e-6f + 2e-6f * fabsf(p0[j]));
        free(p0);
        free(p1);
    }
    VT_CHECK(t, bad == 0, "%s: %zu of %zu parameters differ after %d fused and unfused SGD steps",
             vkt_device_label(dev), bad, total, STEPS);
out:
    for (int k = 0; k < 2; k++) {
        vkt_cmd_destroy(cmd[k]);
        vkt_net_destroy(net[k]);
    }
    vkt_model_free(&m);
}

int main(void) {
    vt tv, *t = &tv;
    if (vt_init(t, "test_mlp_grad")) return 1;
    vkt_ops *ops[VT_MAX_DEVICES] = {0};
    for (int d = 0; d < t->ndev; d++)
        VT_OK(t, vkt_ops_create(t->dev[d], &ops[d]));
    for (int i = 0; i < NCASES; i++) {
        vkt_model_desc m;
        VT_OK(t, vkt_model_parse(CASES[i].json, "grad_mlp", &m));
        if (t->failures) break;
        static run_ctx c;
        memset(&c, 0, sizeof c);
        c.t = t;
        c.m = &m;
        c.mc = &CASES[i];
        uint32_t nin = B * m.input_features, nout = B * m.output_features;
        vt_fill_uniform(c.xf, nin, 7 + (uint64_t)i, -1.5f, 1.5f);
        vt_fill_uniform(c.ymsef, nout, 70 + (uint64_t)i, -1.0f, 1.0f);
        for (uint32_t k = 0; k < nin; k++)
            c.x[k] = c.xf[k];
        for (uint32_t k = 0; k < nout; k++)
            c.ymse[k] = c.ymsef[k];
        for (int b = 0; b < B; b++)
            c.ycls[b] = (uint32_t)(b * 7 + i) % m.output_features;
        for (int d = 0; d < t->ndev && ops[d]; d++) {
            for (int f = 0; f < 2; f++) {
                c.dev = t->dev[d];
                c.ops = ops[d];
                c.fuse = f == 1;
                run_model(&c);
            }
        }
        vkt_ref_destroy(c.ref);
        vkt_model_free(&m);
    }
    for (int d = 0; d < t->ndev; d++) {
        check_counts(t, t->dev[d], ops[d]);
        check_fused_sgd(t, t->dev[d], ops[d]);
        vkt_ops_destroy(ops[d]);
    }
    return vt_finish(t);
}
