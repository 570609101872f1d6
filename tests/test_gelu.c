// test_gelu.c: exact gelu (VKT_ACT_GELU_ERF, PyTorch's default approximate='none'): x Phi(x),
// Phi(x) = (1 + erf(x / sqrt 2)) / 2, and its derivative Phi(x) + x exp(-x^2/2) / sqrt(2 pi),
// which GLSL computes without an erf of its own (shaders/act_fn.glsl). On every device:
//  - the act kernels (forward, and backward from the input) over a sweep of x in [-10, 10] with
//    0, tiny values (1e-30 .. 1e-4), the ends of the Taylor range (|x| = 0.84375 sqrt 2) and a
//    tail that is not a whole vec4, against the double erfc of libm: gelu within RTOL of the
//    reference, relative, wherever it is a normal float (down to 7.6e-23 at x = -10); the
//    derivative within RTOL of the magnitudes of its two terms (it crosses 0 at x = -0.75);
//  - the same sweep through a dense layer's fused epilogue (vkt_context_set_fuse ON; identity
//    weights, so that the product passes x through exactly): the forward epilogue's gelu and the
//    backward epilogue's dy * gelu'(x) fused into the next dense layer's input gradient, and
//    unfused for comparison; the fused forward records fewer dispatches (it did fuse);
//  - lc_run (tests/layer_check.h) on dense -> gelu -> dense models, fused and unfused;
//  - parsing: no "approximate" key and "none" give the exact form, "tanh" the approximation;
//    their torch text; bad values by their messages; vkt_act_grad_from_output is false.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "layer.h"
#include "layer_check.h"
#include "model.h"
#include "network.h"
#include "test_util.h"

// Relative tolerance of the device's float gelu and gelu' against the double reference:
// shaders/act_fn.glsl's erf is within about 1.2e-7 and its erfc tail within about 5e-7, before
// the driver's exp and division.
#define RTOL 1.5e-6
// Below this a float is not normal (denormals may be flushed): compared absolutely.
#define ATOL 1.2e-38

static bool has(const char *msg, const char *needle) { return strstr(msg, needle) != NULL; }

// ---------------------------------------------------------------------------------------------
// The sweep

// x values: a fine grid over [-10, 10], zero, tiny values of both signs and the edges of the
// shader's ranges; returns how many (at most max).
static int sweep(float *x, int max) {
    int n = 0;
    for (int i = 0; i <= 4000 && n < max; i++)
        x[n++] = -10.0f + 20.0f * (float)i / 4000.0f;
    static const float special[] = {0.0f,    -0.0f,    1e-30f,  -1e-30f,      1e-20f,     -1e-20f,
                                    1e-10f,  -1e-10f,  1e-7f,   -1e-7f,       1e-4f,      -1e-4f,
                                    0.5f,    -0.5f,    1.1932f, -1.1932f,     1.19324f,   -1.19324f,
                                    1.1933f, -1.1933f, 3.3f,    -3.3f,        9.99f,      -9.99f,
                                    10.0f,   -10.0f,   5.5e-3f, -0.75179187f, -0.751792f, 2.5e-2f};
    for (size_t k = 0; k < sizeof special / sizeof *special && n < max; k++)
        x[n++] = special[k];
    // Odd count: the last vec4 of the act kernels is partial.
    if (n % 4 == 0 && n < max) x[n++] = 0.3f;
    return n;
}

typedef struct errs {
    // The largest error over its tolerance's RTOL part (1 = at tolerance) where the reference is
    // above 1e-30 (far from the floats a driver may flush to 0).
    double worst_y, worst_g;
    double worst_pos; // the same for gelu at x >= 0, where Phi = (1 + erf) / 2 >= 1/2
    float at_y, at_g;
    int bad_y, bad_g;
} errs;

// Checks y = gelu(x) and g = gelu'(x) * dy (dy per element, or all 1 when NULL).
static void check_values(errs *e, const float *x, const float *y, const float *g, const float *dy,
                         int n) {
    for (int i = 0; i < n; i++) {
        double xv = x[i];
        if (y) {
            double ref = vkt_act_ref(VKT_ACT_GELU_ERF, 0, xv);
            double err = fabs(y[i] - ref), tol = RTOL * fabs(ref) + ATOL;
            if (err > tol) e->bad_y++;
            if (xv >= 0 && fabs(ref) > 1e-30 && err / fabs(ref) > e->worst_pos)
                e->worst_pos = err / fabs(ref);
            if (fabs(ref) > 1e-30 && err / (RTOL * fabs(ref)) > e->worst_y) {
                e->worst_y = err / (RTOL * fabs(ref));
                e->at_y = x[i];
            }
        }
        if (g) {
            double d = dy ? dy[i] : 1.0;
            double phi = 0.5 * erfc(-xv / sqrt(2.0)),
                   dens = exp(-0.5 * xv * xv) * 0.39894228040143267794;
            double ref = d * vkt_act_ref_grad(VKT_ACT_GELU_ERF, 0, xv);
            double scale = fabs(d) * (phi + fabs(xv) * dens); // the terms' magnitudes
            double err = fabs(g[i] - ref), tol = RTOL * scale + ATOL;
            if (err > tol) e->bad_g++;
            if (scale > 1e-30 && err / (RTOL * scale) > e->worst_g) {
                e->worst_g = err / (RTOL * scale);
                e->at_g = x[i];
            }
        }
    }
}

static void report(vt *t, const errs *e, const char *where, bool fwd, bool bwd) {
    if (fwd)
        VT_CHECK(t, e->bad_y == 0,
                 "%s: %d gelu values beyond %.1e relative (worst %.2f x RTOL at x = %.9g)", where,
                 e->bad_y, RTOL, e->worst_y, (double)e->at_y);
    if (bwd)
        VT_CHECK(t, e->bad_g == 0,
                 "%s: %d gelu' values beyond %.1e relative (worst %.2f x RTOL at x = %.9g)", where,
                 e->bad_g, RTOL, e->worst_g, (double)e->at_g);
    if (fwd)
        printf("  %s: gelu within %.3g (x = %.9g), %.3g at x >= 0\n", where, e->worst_y * RTOL,
               (double)e->at_y, e->worst_pos);
    if (bwd)
        printf("  %s: gelu' within %.3g (x = %.9g)\n", where, e->worst_g * RTOL, (double)e->at_g);
}

// The act kernels: y = gelu(x), dx = dy * gelu'(x) with dy = 1 and with dy random.
static void test_kernels(vt *t, vkt_device *dev, vkt_ops *ops) {
    float x[4200], y[4200], g[4200], dy[4200];
    int n = sweep(x, 4200);
    vt_fill_uniform(dy, (size_t)n, 11, -2.0f, 2.0f);
    uint64_t bytes = 4ull * (uint64_t)n;
    vkt_buffer *bx = NULL, *by = NULL, *bd = NULL, *bg = NULL;
    vkt_cmd *cmd = NULL;
    VT_OK(t, vkt_buffer_create(dev, bytes, "x", &bx));
    VT_OK(t, vkt_buffer_create(dev, bytes, "y", &by));
    VT_OK(t, vkt_buffer_create(dev, bytes, "dy", &bd));
    VT_OK(t, vkt_buffer_create(dev, bytes, "dx", &bg));
    VT_OK(t, vkt_cmd_create(dev, &cmd));
    if (!bx || !by || !bd || !bg || !cmd) goto out;
    for (int pass = 0; pass < 2; pass++) {
        float ones[4200];
        for (int i = 0; i < n; i++)
            ones[i] = 1.0f;
        const float *d = pass ? dy : ones;
        VT_OK(t, vkt_buffer_write(bx, 0, x, bytes));
        VT_OK(t, vkt_buffer_write(bd, 0, d, bytes));
        VT_OK(t, vkt_cmd_begin(cmd, false));
        vkt_cmd_fill(cmd, vkt_buffer_whole(by), 0x7fc00000u); // NaN: every element is written
        vkt_cmd_fill(cmd, vkt_buffer_whole(bg), 0x7fc00000u);
        vkt_cmd_barrier(cmd);
        vkt_op_act_forward(cmd, ops, VKT_ACT_GELU_ERF, 0.0f, vkt_buffer_whole(by),
                           vkt_buffer_whole(bx), (uint32_t)n, "gelu fwd");
        vkt_op_act_backward(cmd, ops, VKT_ACT_GELU_ERF, 0.0f, vkt_buffer_whole(bg),
                            vkt_buffer_whole(bd), vkt_buffer_whole(bx), (uint32_t)n, "gelu bwd");
        if (!vt_run(t, cmd, ops, "gelu kernels", vkt_device_label(dev))) goto out;
        VT_OK(t, vkt_buffer_read(by, 0, y, bytes));
        VT_OK(t, vkt_buffer_read(bg, 0, g, bytes));
        errs e = {0};
        check_values(&e, x, pass ? NULL : y, g, pass ? dy : NULL, n);
        char where[160];
        snprintf(where, sizeof where, "act kernels%s on %s", pass ? " (dy random)" : "",
                 vkt_device_label(dev));
        report(t, &e, where, pass == 0, true);
    }
out:
    vkt_cmd_destroy(cmd);
    vkt_buffer_destroy(bx);
    vkt_buffer_destroy(by);
    vkt_buffer_destroy(bd);
    vkt_buffer_destroy(bg);
}

// ---------------------------------------------------------------------------------------------
// Through a dense layer's epilogue

// input [W] -> dense(W, identity, no bias) -> gelu -> dense(W, identity, no bias), MSE to 0: the
// first product's output is x exactly (one 1 and zeros per row), so the output is the epilogue's
// gelu(x) and the input gradient gelu'(x) * d loss / d output, from the second product's
// epilogue when fused. Returns the forward's dispatch count (0 when it did not run).
enum { EW = 61 };

static int run_epilogue(vt *t, vkt_device *dev, vkt_ops *ops, bool fuse, const float *x, uint32_t B,
                        float *y, float *gx, float *gy) {
    const char *json =
        "{\"name\": \"gelu_epi\", \"input\": [61], \"layers\": ["
        "{\"type\": \"dense\", \"units\": 61, \"bias\": false}, {\"type\": \"gelu\"},"
        "{\"type\": \"dense\", \"units\": 61, \"bias\": false}], \"loss\": \"mse\"}";
    vkt_model_desc m;
    vkt_status s = vkt_model_parse(json, "gelu_epi", &m);
    VT_CHECK(t, s == VKT_OK, "%s", vkt_error());
    if (s != VKT_OK) return 0;
    int dispatches = 0;
    vkt_context_set_fuse(t->ctx, fuse ? VKT_FUSE_ON : VKT_FUSE_OFF);
    vkt_net_desc nd = {.model = &m,
                       .first_layer = 0,
                       .last_layer = m.nlayers,
                       .max_batch = B,
                       .slots = 1,
                       .optim = vkt_optim_default(VKT_OPTIM_SGD)};
    vkt_net *net = NULL;
    vkt_cmd *cmd = NULL;
    VT_OK(t, vkt_net_create(dev, ops, &nd, &net));
    vkt_context_set_fuse(t->ctx, VKT_FUSE_AUTO);
    if (net) VT_OK(t, vkt_cmd_create(dev, &cmd));
    if (!net || !cmd) goto out;
    float *eye = calloc(EW * EW, sizeof(float)), *zero = calloc((size_t)B * EW, sizeof(float));
    for (int i = 0; i < EW; i++)
        eye[i * EW + i] = 1.0f;
    VT_OK(t, vkt_net_write_tensor(net, VKT_STORE_PARAM, 0, eye));
    VT_OK(t, vkt_net_write_tensor(net, VKT_STORE_PARAM, 1, eye));
    vkt_view in = vkt_net_input(net, 0), tg = vkt_net_targets(net, 0);
    VT_OK(t, vkt_buffer_write(in.buffer, in.offset, x, 4ull * B * EW));
    VT_OK(t, vkt_buffer_write(tg.buffer, tg.offset, zero, 4ull * B * EW));
    free(eye);
    free(zero);
    VT_OK(t, vkt_cmd_begin(cmd, false));
    vkt_net_record_zero_grads(net, cmd);
    int before = vkt_cmd_dispatch_count(cmd);
    vkt_net_record_forward(net, cmd, 0, B);
    dispatches = vkt_cmd_dispatch_count(cmd) - before;
    vkt_net_record_loss(net, cmd, 0, B, 1.0f / (float)B);
    vkt_net_record_backward(net, cmd, 0, B, true);
    char where[128];
    snprintf(where, sizeof where, "%s on %s", fuse ? "fused" : "unfused", vkt_device_label(dev));
    if (!vt_run(t, cmd, ops, "gelu epilogue model", where)) {
        dispatches = 0;
        goto out;
    }
    vkt_view o = vkt_net_output(net, 0), gi = vkt_net_input_grad(net, 0),
             go = vkt_net_output_grad(net, 0);
    VT_OK(t, vkt_buffer_read(o.buffer, o.offset, y, 4ull * B * EW));
    VT_OK(t, vkt_buffer_read(gi.buffer, gi.offset, gx, 4ull * B * EW));
    VT_OK(t, vkt_buffer_read(go.buffer, go.offset, gy, 4ull * B * EW));
out:
    vkt_cmd_destroy(cmd);
    vkt_net_destroy(net);
    vkt_model_free(&m);
    return dispatches;
}

static void test_epilogue(vt *t, vkt_device *dev, vkt_ops *ops) {
    float sw[4200];
    int n = sweep(sw, 4200);
    uint32_t B = (uint32_t)((n + EW - 1) / EW);
    uint64_t total = (uint64_t)B * EW;
    float *x = calloc(total, sizeof(float)), *y = malloc(total * 4), *gx = malloc(total * 4),
          *gy = malloc(total * 4);
    memcpy(x, sw, 4ull * (uint64_t)n);
    for (uint64_t i = (uint64_t)n; i < total; i++) // the rest of the last row
        x[i] = -3.0f + (float)(i - (uint64_t)n) * 0.37f;
    int fused_dispatches = 0, plain_dispatches = 0;
    for (int f = 1; f >= 0; f--) {
        int d = run_epilogue(t, dev, ops, f == 1, x, B, y, gx, gy);
        if (!d) continue;
        *(f ? &fused_dispatches : &plain_dispatches) = d;
        errs e = {0};
        check_values(&e, x, y, gx, gy, (int)total);
        char where[160];
        snprintf(where, sizeof where, "dense epilogue %s on %s", f ? "fused" : "unfused",
                 vkt_device_label(dev));
        report(t, &e, where, true, true);
    }
    VT_CHECK(t, fused_dispatches > 0 && fused_dispatches < plain_dispatches,
             "%s: the fused forward records %d dispatches, the unfused one %d (it did not fuse)",
             vkt_device_label(dev), fused_dispatches, plain_dispatches);
    free(x);
    free(y);
    free(gx);
    free(gy);
}

// ---------------------------------------------------------------------------------------------
// Models, parsing

static void test_layer_check(vt *t, vkt_ops *const *ops) {
    static const lc_case cases[] = {
        // dense -> gelu -> dense, the gelu fused into both products where fusing.
        {"{\"name\": \"gelu_mlp\", \"input\": [7], \"layers\": ["
         "{\"type\": \"dense\", \"units\": 9}, {\"type\": \"gelu\"},"
         "{\"type\": \"dense\", \"units\": 4}], \"loss\": \"softmax_cross_entropy\"}",
         5, true, 0, 0, 0, 0},
        // Explicit "none", first layer (backward into the input gradient), two in a row, MSE.
        {"{\"name\": \"gelu_first\", \"input\": [6], \"layers\": ["
         "{\"type\": \"gelu\", \"approximate\": \"none\"}, {\"type\": \"dense\", \"units\": 5},"
         "{\"type\": \"gelu\"}, {\"type\": \"gelu\", \"approximate\": \"tanh\"},"
         "{\"type\": \"dense\", \"units\": 3}, {\"type\": \"gelu\"}], \"loss\": \"mse\"}",
         3, true, 0, 0, 0, 0},
        // Over a sequence [T, C]: the product runs over B*T rows.
        {"{\"name\": \"gelu_seq\", \"input\": [3, 5], \"layers\": ["
         "{\"type\": \"dense\", \"units\": 6}, {\"type\": \"gelu\"},"
         "{\"type\": \"dense\", \"units\": 5}, {\"type\": \"flatten\"},"
         "{\"type\": \"dense\", \"units\": 3}], \"loss\": \"softmax_cross_entropy\"}",
         4, false, 0, 0, 0, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        lc_run(t, ops, &cases[i]);
}

static void expect_error(vt *t, const char *layer, const char *where, const char *what) {
    char json[512];
    snprintf(json, sizeof json,
             "{\"input\": [4], \"layers\": [{\"type\": \"dense\", \"units\": 4}, %s], "
             "\"loss\": \"mse\"}",
             layer);
    vkt_model_desc m;
    vkt_status s = vkt_model_parse(json, "bad.json", &m);
    VT_CHECK(t, s == VKT_ERR_FORMAT && has(vkt_error(), where) && has(vkt_error(), what),
             "%s: got \"%s\", expected %s: ... %s", layer, s == VKT_OK ? "OK" : vkt_error(), where,
             what);
    if (s == VKT_OK) vkt_model_free(&m);
}

static void test_parse(vt *t) {
    vkt_model_desc m;
    VT_OK(t,
          vkt_model_parse("{\"name\": \"g\", \"input\": [4], \"layers\": ["
                          "{\"type\": \"gelu\"}, {\"type\": \"gelu\", \"approximate\": \"none\"},"
                          "{\"type\": \"gelu\", \"approximate\": \"tanh\"},"
                          "{\"type\": \"dense\", \"units\": 2}], \"loss\": \"mse\"}",
                          "g.json", &m));
    if (m.nlayers != 4) return;
    const vkt_layer_desc *l = m.layers;
    VT_CHECK(
        t, l[0].act == VKT_ACT_GELU_ERF && l[1].act == VKT_ACT_GELU_ERF && l[2].act == VKT_ACT_GELU,
        "no key and \"none\" are exact gelu, \"tanh\" the approximation: %d %d %d", l[0].act,
        l[1].act, l[2].act);
    char buf[512];
    VT_OK(t, vkt_model_torch(&m, buf, sizeof buf));
    VT_CHECK(t,
             has(buf, "nn.GELU(approximate='none'), nn.GELU(approximate='none'), "
                      "nn.GELU(approximate='tanh')"),
             "torch: %s", buf);
    VT_CHECK(t, strcmp(vkt_model_act_name(VKT_ACT_GELU_ERF), "gelu") == 0, "name %s",
             vkt_model_act_name(VKT_ACT_GELU_ERF));
    vkt_model_free(&m);
    VT_CHECK(t, !vkt_act_grad_from_output(VKT_ACT_GELU_ERF, 0.0f),
             "exact gelu's derivative does not follow from its output");
    expect_error(t, "{\"type\": \"gelu\", \"approximate\": \"erf\"}", "layers[1].approximate",
                 "unknown value \"erf\": expected \"none\" (exact, erf) or \"tanh\"");
    expect_error(t, "{\"type\": \"gelu\", \"approximate\": true}", "layers[1].approximate",
                 "expected \"none\" or \"tanh\"");
    expect_error(t, "{\"type\": \"gelu\", \"approximation\": \"tanh\"}", "layers[1].approximation",
                 "unknown key");
}

// The double reference against central differences of itself, and against values of PyTorch's
// float64 gelu (torch.nn.functional.gelu on float64, approximate='none').
static void test_reference(vt *t) {
    static const double xs[] = {-10, -4.5, -1.19324, -0.75, -1e-3, 0, 1e-6, 0.3, 1.19324, 2, 7};
    int bad = 0;
    for (size_t i = 0; i < sizeof xs / sizeof *xs; i++) {
        double h = 1e-5, x = xs[i];
        double fd =
            (vkt_act_ref(VKT_ACT_GELU_ERF, 0, x + h) - vkt_act_ref(VKT_ACT_GELU_ERF, 0, x - h)) /
            (2 * h);
        double g = vkt_act_ref_grad(VKT_ACT_GELU_ERF, 0, x);
        if (fabs(fd - g) > 1e-9 + 1e-7 * fabs(g)) {
            bad++;
            fprintf(stderr, "  gelu'(%g) = %.12g, central difference %.12g\n", x, g, fd);
        }
    }
    VT_CHECK(t, bad == 0, "%d reference derivatives disagree with central differences", bad);
    static const struct {
        double x, y;
    } torch_vals[] = {{-3.0, -0.00404969409489031},
                      {-1.0, -0.15865525393145702},
                      {0.5, 0.34573123063700656},
                      {2.0, 1.9544997361036416}};
    for (size_t i = 0; i < sizeof torch_vals / sizeof *torch_vals; i++) {
        double y = vkt_act_ref(VKT_ACT_GELU_ERF, 0, torch_vals[i].x);
        VT_CHECK(t, fabs(y - torch_vals[i].y) <= 1e-15 * (1 + fabs(y)),
                 "gelu(%g) = %.17g, PyTorch float64 %.17g", torch_vals[i].x, y, torch_vals[i].y);
    }
}

int main(void) {
    vt tv, *t = &tv;
    if (vt_init(t, "test_gelu")) return 1;
    test_parse(t);
    test_reference(t);
    vkt_ops *ops[VT_MAX_DEVICES] = {0};
    for (int d = 0; d < t->ndev; d++)
        VT_OK(t, vkt_ops_create(t->dev[d], &ops[d]));
    for (int d = 0; d < t->ndev && ops[d]; d++) {
        test_kernels(t, t->dev[d], ops[d]);
        test_epilogue(t, t->dev[d], ops[d]);
    }
    test_layer_check(t, ops);
    for (int d = 0; d < t->ndev; d++)
        vkt_ops_destroy(ops[d]);
    return vt_finish(t);
}
