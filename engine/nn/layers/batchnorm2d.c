// batchnorm2d.c: batch normalisation over the channels of images, as torch.nn.BatchNorm2d(C,
// eps, momentum) with affine=True and track_running_stats=True. Input and output [C, H, W].
//   keys    momentum (default 0.1, in [0, 1]), eps (default 1e-5, in (0, 1])
//   tensors weight [C] (1), bias [C] (0); buffers running_mean [C] (0), running_var [C] (1),
//           num_batches_tracked (a scalar, int64 in checkpoints, a float on the device; 0)
//   records training: the batch's per-channel mean and biased variance over (B, H, W) normalise
//           it; running_mean/var move by momentum towards the mean and the unbiased variance,
//           num_batches_tracked += 1; mean and 1/sqrt(var + eps) are kept per slot (`saved`) for
//           the backward. Evaluation: the running statistics normalise, nothing is updated.
//           Backward (of a training forward only): dbeta += sum dy, dgamma += sum dy*xhat,
//           dx = gamma invstd / N (N dy - sum dy - xhat sum dy*xhat), N = B*H*W.
// PyTorch refuses a training forward with one value per channel (B*H*W == 1: "Expected more than
// 1 value per channel when training"); so does this kind (the unbiased variance divides by N-1).
// The kernels are engine/ops/norm_ops.c's. An activation after it whose derivative follows from
// its output (relu, as in fashion_cnn) runs in its passes where the network fuses (takes_act):
// the forward writes f(y) to the activation's output, the backward reads the activation's output
// gradient and output and uses dy f'(y), the same floats as the two layers apart.
#include <math.h>
#include <stdio.h>

#include "layer.h"
#include "norm_ops.h"
#include "vkt_internal.h"

static uint32_t channels(const vkt_layer_desc *l) { return l->in.dim[0]; }
static uint32_t plane(const vkt_layer_desc *l) { return l->in.dim[1] * l->in.dim[2]; }

static vkt_status bn_parse(const vkt_layer_parse *p, vkt_layer_desc *l) {
    if (l->in.ndim != 3) {
        char s[96];
        vkt_shape_format(&l->in, s, sizeof s);
        return vkt_parse_fail(p, NULL,
                              "batchnorm2d normalises images: its input must be [C, H, W] "
                              "(channels, height, width), found %s",
                              s);
    }
    l->momentum = 0.1f;
    l->eps = 1e-5f;
    VKT_TRY(vkt_parse_range(p, "momentum", 0, 1, false, false, "momentum", &l->momentum));
    VKT_TRY(vkt_parse_range(p, "eps", 0, 1, true, false, "eps", &l->eps));
    if (!(l->eps > 0)) return vkt_parse_fail(p, "eps", "too small for a float: it would be 0");
    l->out = l->in;
    return VKT_OK;
}

static int bn_params(const vkt_layer_desc *l, vkt_param_spec *out) {
    uint32_t C = channels(l);
    out[0] =
        (vkt_param_spec){.name = "weight", .ndim = 1, .shape = {C}, .init = VKT_INIT_CONST, .a = 1};
    out[1] =
        (vkt_param_spec){.name = "bias", .ndim = 1, .shape = {C}, .init = VKT_INIT_CONST, .a = 0};
    out[2] = (vkt_param_spec){.name = "running_mean",
                              .ndim = 1,
                              .shape = {C},
                              .init = VKT_INIT_CONST,
                              .a = 0,
                              .state = true};
    out[3] = (vkt_param_spec){.name = "running_var",
                              .ndim = 1,
                              .shape = {C},
                              .init = VKT_INIT_CONST,
                              .a = 1,
                              .state = true};
    out[4] = (vkt_param_spec){.name = "num_batches_tracked",
                              .ndim = 0,
                              .init = VKT_INIT_CONST,
                              .a = 0,
                              .state = true,
                              .int64 = true};
    return 5;
}

static void bn_cost(const vkt_layer_desc *l, vkt_layer_cost *c) {
    double n = l->in_features;
    // Forward: two passes of statistics (add; subtract, multiply, add) and the normalisation
    // (subtract, multiply, add); x is read three times. Backward: the sums (xhat and two
    // products) and dx (three multiply-adds); x and dy read twice, dx written.
    c->fwd_flops = 7 * n;
    c->bwd_flops = 11 * n;
    c->fwd_bytes = 16 * n;
    c->bwd_bytes = 20 * n;
    c->saved_floats = n;
}

static uint64_t bn_saved(const vkt_layer_desc *l, uint32_t B) {
    (void)B;
    return 8ull * channels(l); // mean, invstd
}

static uint64_t bn_scratch(const vkt_layer_desc *l, uint32_t B) {
    return vkt_op_batchnorm_scratch_bytes(channels(l), B, plane(l));
}

// A training batch with one value per channel: the device path reports it through the ops'
// pending failure (the step fails with this message, nothing recorded); the reference, which
// only tests call, stops.
static void refuse_single_value(const vkt_layer_desc *l, uint32_t B, vkt_ops *ops) {
    char msg[256];
    snprintf(msg, sizeof msg,
             "batchnorm2d on [%u, %u, %u] in training at a batch of %u: one value per channel "
             "(PyTorch refuses it too: 'Expected more than 1 value per channel when training'); "
             "use a batch of 2 or more per device",
             l->in.dim[0], l->in.dim[1], l->in.dim[2], B);
    if (ops)
        vkt_ops_fail(ops, VKT_ERR_ARG, msg);
    else
        vkt_abort(msg, __FILE__, __LINE__);
}

static void bn_forward(vkt_rec *r, int node) {
    const vkt_layer_desc *l = vkt_rec_node(r, node)->desc;
    bool train = vkt_rec_training(r);
    if (train && (uint64_t)r->B * plane(l) < 2) {
        refuse_single_value(l, r->B, r->ops);
        return;
    }
    // The next activation into the output pass (its output written instead of this node's).
    vkt_mm_epilogue epi;
    vkt_view out = vkt_rec_out(r, node), pre;
    bool fused = vkt_rec_fwd_epilogue(r, node, &epi, &out, &pre);
    VKT_ASSERT(!fused || !epi.saved); // takes_act: only activations differentiable from f(x)
    vkt_bn_act fa = {.act = epi.act, .alpha = epi.alpha};
    vkt_op_batchnorm_forward_act(
        r->cmd, r->ops, out, vkt_rec_saved(r, node), vkt_rec_param(r, node, 2, VKT_STORE_PARAM),
        vkt_rec_param(r, node, 3, VKT_STORE_PARAM), vkt_rec_param(r, node, 4, VKT_STORE_PARAM),
        vkt_rec_scratch(r), vkt_rec_in(r, node), vkt_rec_param(r, node, 0, VKT_STORE_PARAM),
        vkt_rec_param(r, node, 1, VKT_STORE_PARAM), r->B, channels(l), plane(l), l->eps,
        l->momentum, train, fused ? &fa : NULL,
        vkt_rec_label(r, node, "fwd", train ? "batchnorm2d" : "batchnorm2d_eval"));
}

static void bn_backward(vkt_rec *r, int node) {
    const vkt_layer_desc *l = vkt_rec_node(r, node)->desc;
    // The backward reads the batch statistics a training forward saved; the engine only
    // backpropagates training forwards.
    if (!vkt_rec_training(r)) {
        vkt_ops_fail(r->ops, VKT_ERR_ARG,
                     "batchnorm2d: a backward recorded in the evaluation phase (it needs the "
                     "batch statistics of a training forward)");
        return;
    }
    vkt_view dx = vkt_rec_dx(r, node), dy = vkt_rec_dy(r, node);
    // The next activation's backward first, where it ran in this node's forward.
    vkt_bn_act fa;
    bool fused = vkt_rec_bwd_act_after(r, node, &fa.act, &fa.alpha, &dy, &fa.y);
    vkt_op_batchnorm_backward_act(
        r->cmd, r->ops, vkt_rec_need_dx(r, node) ? &dx : NULL,
        vkt_rec_param(r, node, 0, VKT_STORE_GRAD), vkt_rec_param(r, node, 1, VKT_STORE_GRAD),
        vkt_rec_scratch(r), dy, vkt_rec_in(r, node), vkt_rec_saved(r, node),
        vkt_rec_param(r, node, 0, VKT_STORE_PARAM), r->B, channels(l), plane(l), fused ? &fa : NULL,
        vkt_rec_label(r, node, "bwd", "batchnorm2d"));
}

// ---------------------------------------------------------------------------------------------
// Reference, in double precision

// The batch mean and biased variance of channel c of x[B, C, HW] (two passes).
static void batch_stats(const double *x, uint32_t B, uint32_t C, uint32_t HW, uint32_t c,
                        double *mean, double *var) {
    double s = 0, q = 0, N = (double)B * HW;
    for (uint32_t b = 0; b < B; b++)
        for (uint32_t j = 0; j < HW; j++)
            s += x[((uint64_t)b * C + c) * HW + j];
    *mean = s / N;
    for (uint32_t b = 0; b < B; b++)
        for (uint32_t j = 0; j < HW; j++) {
            double d = x[((uint64_t)b * C + c) * HW + j] - *mean;
            q += d * d;
        }
    *var = q / N;
}

static void bn_ref_forward(vkt_ref *r, const vkt_layer_desc *l, double *const *p, const double *x,
                           double *y) {
    uint32_t B = vkt_ref_batch(r), C = channels(l), HW = plane(l);
    bool train = vkt_ref_phase(r)->train;
    if (train && (uint64_t)B * HW < 2) refuse_single_value(l, B, NULL);
    double N = (double)B * HW, m = l->momentum;
    for (uint32_t c = 0; c < C; c++) {
        double mean, var;
        if (train) {
            batch_stats(x, B, C, HW, c, &mean, &var);
            p[2][c] = (1 - m) * p[2][c] + m * mean;
            p[3][c] = (1 - m) * p[3][c] + m * var * N / (N - 1);
        } else {
            mean = p[2][c];
            var = p[3][c];
        }
        double k = p[0][c] / sqrt(var + (double)l->eps);
        for (uint32_t b = 0; b < B; b++)
            for (uint32_t j = 0; j < HW; j++) {
                uint64_t i = ((uint64_t)b * C + c) * HW + j;
                y[i] = (x[i] - mean) * k + p[1][c];
            }
    }
    if (train) p[4][0] += 1;
}

static void bn_ref_backward(vkt_ref *r, const vkt_layer_desc *l, double *const *p, double *const *g,
                            const double *x, const double *y, const double *dy, double *dx) {
    (void)y;
    VKT_ASSERT(vkt_ref_phase(r)->train); // as bn_backward
    uint32_t B = vkt_ref_batch(r), C = channels(l), HW = plane(l);
    double N = (double)B * HW;
    for (uint32_t c = 0; c < C; c++) {
        double mean, var;
        batch_stats(x, B, C, HW, c, &mean, &var);
        double invstd = 1 / sqrt(var + (double)l->eps), sdy = 0, sdx = 0;
        for (uint32_t b = 0; b < B; b++)
            for (uint32_t j = 0; j < HW; j++) {
                uint64_t i = ((uint64_t)b * C + c) * HW + j;
                sdy += dy[i];
                sdx += dy[i] * (x[i] - mean) * invstd;
            }
        g[1][c] += sdy;
        g[0][c] += sdx;
        double k = p[0][c] * invstd / N;
        for (uint32_t b = 0; b < B; b++)
            for (uint32_t j = 0; j < HW; j++) {
                uint64_t i = ((uint64_t)b * C + c) * HW + j;
                dx[i] += k * (N * dy[i] - sdy - (x[i] - mean) * invstd * sdx);
            }
    }
}

static int bn_torch(const vkt_layer_desc *l, char *buf, size_t size) {
    char eps[32], mom[32];
    vkt_norm_float_text(l->eps, eps, sizeof eps);
    vkt_norm_float_text(l->momentum, mom, sizeof mom);
    return snprintf(buf, size, "nn.BatchNorm2d(%u, eps=%s, momentum=%s)", channels(l), eps, mom);
}

static const char *const bn_keys[] = {"momentum", "eps", NULL};

VKT_LAYER_TYPE(batchnorm2d, .keys = bn_keys, .parse = bn_parse, .params = bn_params,
               .cost = bn_cost, .saved = bn_saved, .scratch = bn_scratch, .takes_act = true,
               .forward = bn_forward, .backward = bn_backward, .ref_forward = bn_ref_forward,
               .ref_backward = bn_ref_backward, .torch = bn_torch);
