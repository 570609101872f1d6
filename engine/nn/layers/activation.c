// activation.c: the elementwise activations relu, leaky_relu, gelu, tanh and sigmoid, as
// torch.nn's ReLU, LeakyReLU(negative_slope), GELU(approximate='none' or 'tanh'), Tanh and
// Sigmoid. They keep the shape, hold no parameters, and have an epilogue form: right after a
// product (dense) they run inside it, forward and backward (network.c's fusion rule).
//   keys    leaky_relu: negative_slope (default 0.01); gelu: approximate, "none" (the default,
//           as PyTorch's: exact, 0.5 x (1 + erf(x / sqrt 2)), VKT_ACT_GELU_ERF) or "tanh"
//           (the tanh approximation, VKT_ACT_GELU)
//   records fwd: act kernel over B*features (or nothing, fused); bwd: dx = dy * f'(x), or
//           from the output y where f' follows from it and the fused forward kept only y
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "layer.h"
#include "vkt_internal.h"

static vkt_status plain_parse(const vkt_layer_parse *p, vkt_layer_desc *l, vkt_act act) {
    (void)p;
    l->act = act;
    l->out = l->in;
    return VKT_OK;
}
static vkt_status relu_parse(const vkt_layer_parse *p, vkt_layer_desc *l) {
    return plain_parse(p, l, VKT_ACT_RELU);
}
static vkt_status tanh_parse(const vkt_layer_parse *p, vkt_layer_desc *l) {
    return plain_parse(p, l, VKT_ACT_TANH);
}
static vkt_status sigmoid_parse(const vkt_layer_parse *p, vkt_layer_desc *l) {
    return plain_parse(p, l, VKT_ACT_SIGMOID);
}

static vkt_status leaky_relu_parse(const vkt_layer_parse *p, vkt_layer_desc *l) {
    l->alpha = 0.01f; // PyTorch's default
    VKT_TRY(vkt_parse_float(p, "negative_slope", &l->alpha));
    return plain_parse(p, l, VKT_ACT_LEAKY_RELU);
}

static vkt_status gelu_parse(const vkt_layer_parse *p, vkt_layer_desc *l) {
    vkt_act act = VKT_ACT_GELU_ERF; // PyTorch's default, approximate='none'
    const cJSON *ap = cJSON_GetObjectItemCaseSensitive(p->json, "approximate");
    if (ap) {
        if (!cJSON_IsString(ap))
            return vkt_parse_fail(p, "approximate", "expected \"none\" or \"tanh\" (a string)");
        if (strcmp(ap->valuestring, "tanh") == 0)
            act = VKT_ACT_GELU;
        else if (strcmp(ap->valuestring, "none") != 0)
            return vkt_parse_fail(p, "approximate",
                                  "unknown value \"%s\": expected \"none\" (exact, erf) or "
                                  "\"tanh\" (the tanh approximation), as torch.nn.GELU",
                                  ap->valuestring);
    }
    return plain_parse(p, l, act);
}

static void act_cost(const vkt_layer_desc *l, vkt_layer_cost *c) {
    c->fwd_flops = l->in_features; // one op per element (a transcendental counts as one)
    c->bwd_flops = 2.0 * l->in_features;
    c->fwd_bytes = 8.0 * l->in_features;
    c->bwd_bytes = 12.0 * l->in_features;
    c->saved_floats = l->in_features;
}

static bool act_epilogue(const vkt_layer_desc *l, vkt_act *act, float *alpha) {
    *act = l->act;
    *alpha = l->alpha;
    return true;
}

static void act_forward(vkt_rec *r, int node) {
    const vkt_layer_desc *l = vkt_rec_node(r, node)->desc;
    vkt_op_act_forward(r->cmd, r->ops, l->act, l->alpha, vkt_rec_out(r, node), vkt_rec_in(r, node),
                       r->B * l->in_features, vkt_rec_label(r, node, "fwd", "act"));
}

static void act_backward(vkt_rec *r, int node) {
    const vkt_layer_desc *l = vkt_rec_node(r, node)->desc;
    if (!vkt_rec_need_dx(r, node)) return;
    uint32_t n = r->B * l->in_features;
    const char *label = vkt_rec_label(r, node, "bwd", "act");
    if (vkt_rec_act_input_kept(r, node))
        vkt_op_act_backward(r->cmd, r->ops, l->act, l->alpha, vkt_rec_dx(r, node),
                            vkt_rec_dy(r, node), vkt_rec_in(r, node), n, label);
    else
        vkt_op_act_backward_from_output(r->cmd, r->ops, l->act, l->alpha, vkt_rec_dx(r, node),
                                        vkt_rec_dy(r, node), vkt_rec_out(r, node), n, label);
}

// ---------------------------------------------------------------------------------------------
// Reference, in double precision

static const double GELU_K = 0.79788456080286535588; // sqrt(2/pi)
static const double GELU_C = 0.044715;
static const double SQRT1_2 = 0.70710678118654752440;     // 1/sqrt(2)
static const double INV_SQRT2PI = 0.39894228040143267794; // 1/sqrt(2 pi)

double vkt_act_ref(vkt_act act, double alpha, double x) {
    switch (act) {
    case VKT_ACT_RELU: return x > 0 ? x : 0;
    case VKT_ACT_LEAKY_RELU: return x > 0 ? x : alpha * x;
    case VKT_ACT_GELU: return 0.5 * x * (1 + tanh(GELU_K * (x + GELU_C * x * x * x)));
    case VKT_ACT_TANH: return tanh(x);
    case VKT_ACT_SIGMOID: return 1 / (1 + exp(-x));
    // x Phi(x) with Phi(x) = (1 + erf(x/sqrt 2)) / 2 written as erfc(-x/sqrt 2) / 2: the same
    // function, without the cancellation of 1 + erf for x << 0.
    case VKT_ACT_GELU_ERF: return 0.5 * x * erfc(-x * SQRT1_2);
    }
    return NAN;
}

double vkt_act_ref_grad(vkt_act act, double alpha, double x) {
    switch (act) {
    case VKT_ACT_RELU: return x > 0 ? 1 : 0;
    case VKT_ACT_LEAKY_RELU: return x > 0 ? 1 : alpha;
    case VKT_ACT_GELU: {
        double t = tanh(GELU_K * (x + GELU_C * x * x * x));
        return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * GELU_K * (1 + 3 * GELU_C * x * x);
    }
    case VKT_ACT_TANH: {
        double t = tanh(x);
        return 1 - t * t;
    }
    case VKT_ACT_SIGMOID: {
        double s = 1 / (1 + exp(-x));
        return s * (1 - s);
    }
    case VKT_ACT_GELU_ERF: return 0.5 * erfc(-x * SQRT1_2) + x * exp(-0.5 * x * x) * INV_SQRT2PI;
    }
    return NAN;
}

static void act_ref_forward(vkt_ref *r, const vkt_layer_desc *l, double *const *p, const double *x,
                            double *y) {
    (void)p;
    uint64_t n = (uint64_t)vkt_ref_batch(r) * l->in_features;
    for (uint64_t i = 0; i < n; i++)
        y[i] = vkt_act_ref(l->act, l->alpha, x[i]);
}

static void act_ref_backward(vkt_ref *r, const vkt_layer_desc *l, double *const *p,
                             double *const *g, const double *x, const double *y, const double *dy,
                             double *dx) {
    (void)p, (void)g, (void)y;
    uint64_t n = (uint64_t)vkt_ref_batch(r) * l->in_features;
    for (uint64_t i = 0; i < n; i++)
        dx[i] += dy[i] * vkt_act_ref_grad(l->act, l->alpha, x[i]);
}

// ---------------------------------------------------------------------------------------------
// PyTorch

static int act_torch(const vkt_layer_desc *l, char *buf, size_t size) {
    switch (l->act) {
    case VKT_ACT_RELU: return snprintf(buf, size, "nn.ReLU()");
    case VKT_ACT_LEAKY_RELU:
        return snprintf(buf, size, "nn.LeakyReLU(negative_slope=%.9g)", (double)l->alpha);
    case VKT_ACT_GELU: return snprintf(buf, size, "nn.GELU(approximate='tanh')");
    case VKT_ACT_GELU_ERF: return snprintf(buf, size, "nn.GELU(approximate='none')");
    case VKT_ACT_TANH: return snprintf(buf, size, "nn.Tanh()");
    case VKT_ACT_SIGMOID: return snprintf(buf, size, "nn.Sigmoid()");
    }
    return snprintf(buf, size, "None");
}

static const char *const leaky_relu_keys[] = {"negative_slope", NULL};
static const char *const gelu_keys[] = {"approximate", NULL};

#define ACT_FIELDS                                                                                 \
    .cost = act_cost, .epilogue = act_epilogue, .forward = act_forward, .backward = act_backward,  \
    .ref_forward = act_ref_forward, .ref_backward = act_ref_backward, .torch = act_torch,          \
    .tp_role = VKT_TP_ROLE_ELEMENTWISE

VKT_LAYER_TYPE(relu, .parse = relu_parse, ACT_FIELDS);
VKT_LAYER_TYPE(leaky_relu, .keys = leaky_relu_keys, .parse = leaky_relu_parse, ACT_FIELDS);
VKT_LAYER_TYPE(gelu, .keys = gelu_keys, .parse = gelu_parse, ACT_FIELDS);
VKT_LAYER_TYPE(tanh, .parse = tanh_parse, ACT_FIELDS);
VKT_LAYER_TYPE(sigmoid, .parse = sigmoid_parse, ACT_FIELDS);
