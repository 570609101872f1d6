// test_pool.c: the pooling kinds of engine/nn/layers/pool.c (maxpool2d, avgpool2d,
// global_avgpool) and their ops (engine/ops/pool_ops.c), on every device:
//  1. parsing, on the host: output shapes (odd sizes drop their last row and column), the
//     PyTorch modules, costs, and every malformed layer rejected with a message naming its JSON
//     path and what it expected;
//  2. layer_check (tests/layer_check.h) on small models around each kind: the reference against
//     finite differences, the devices against the reference (forward, loss, gradients, the input
//     gradient that is the kinds' backward), fused and unfused: overlapping windows (3x3 stride 2),
//     2x2 on even and odd planes, non-square windows and strides, strides larger than the window
//     (elements in no window), channel counts that are no multiple of 4, pools after a dense
//     layer and a ReLU, two pools in a row, global means over 1 to 400 elements (one lane or a
//     team per plane), softmax cross-entropy and MSE;
//  3. ties and NaN, by hand: which element of a window gets the gradient, on the devices and in
//     the reference, against what PyTorch 2 (CPU) computes for the same inputs (the numbers below
//     come from torch.nn.functional.max_pool2d and autograd);
//  4. windows that do not overlap (pool_nov.glsl's kernels) through the ops on shapes of each of
//     their paths (rows of 28, 14, 7, 13, 16 ... floats; the rows and columns past the last
//     window; 3x3, 2x4, 1x2, 2x1, 4x4 windows), with ties, -inf and NaN, bit for bit against
//     PyTorch's scan, every element of dx written;
//  5. views larger than a device's maxStorageBufferRange (lavapipe's 128 MiB), sliced into
//     several dispatches at planes whose offsets are not aligned (and in slices of 4 planes for
//     lavapipe's texel reads), against a float reference.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "layer.h"
#include "layer_check.h"
#include "model.h"
#include "network.h"
#include "pool_ops.h"
#include "test_util.h"

static bool has(const char *msg, const char *needle) { return strstr(msg, needle) != NULL; }

// ---------------------------------------------------------------------------------------------
// 1. Parsing

// A model around one layer: the layer, then flatten and a dense layer (a model needs parameters).
#define M(input, layers, loss)                                                                     \
    "{\"name\": \"pool\", \"input\": " input ", \"layers\": [" layers "], \"loss\": \"" loss "\"}"
#define FLAT_DENSE(units) "{\"type\": \"flatten\"}, {\"type\": \"dense\", \"units\": " units "}"
#define ONE(input, layer) M(input, layer ", " FLAT_DENSE("2"), "mse")

static const struct {
    const char *json;
    int ndim;
    uint32_t out[3];
    const char *torch;
    double fwd_flops; // per sample
} g_shapes[] = {
    {ONE("[3, 7, 7]", "{\"type\": \"maxpool2d\", \"kernel_size\": 3, \"stride\": 2}"),
     3,
     {3, 3, 3},
     "nn.MaxPool2d(kernel_size=(3, 3), stride=(2, 2))",
     27 * 9},
    {ONE("[5, 7, 7]", "{\"type\": \"maxpool2d\", \"kernel_size\": 2}"),
     3,
     {5, 3, 3},
     "nn.MaxPool2d(kernel_size=(2, 2), stride=(2, 2))",
     45 * 4},
    {ONE("[5, 7, 9]", "{\"type\": \"avgpool2d\", \"kernel_size\": [3, 2]}"),
     3,
     {5, 2, 4},
     "nn.AvgPool2d(kernel_size=(3, 2), stride=(3, 2))",
     40 * 6},
    {ONE("[2, 8, 9]", "{\"type\": \"avgpool2d\", \"kernel_size\": [2, 3], \"stride\": [1, 4]}"),
     3,
     {2, 7, 2},
     "nn.AvgPool2d(kernel_size=(2, 3), stride=(1, 4))",
     28 * 6},
    {ONE("[4, 3, 5]", "{\"type\": \"global_avgpool\"}"),
     1,
     {4},
     "nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten())",
     60},
};

static const struct {
    const char *json;
    const char *needles[3];
} g_bad[] = {
    {"{\"input\": [784], \"layers\": [{\"type\": \"maxpool2d\", \"kernel_size\": 2}], "
     "\"loss\": \"mse\"}",
     {"layers[0]", "maxpool2d needs an input [channels, height, width]; found [784]"}},
    {"{\"input\": [4, 6], \"layers\": [{\"type\": \"avgpool2d\", \"kernel_size\": 2}], "
     "\"loss\": \"mse\"}",
     {"layers[0]", "avgpool2d needs an input [channels, height, width]; found [4, 6]"}},
    {"{\"input\": [1, 3, 4, 4], \"layers\": [{\"type\": \"global_avgpool\"}], \"loss\": \"mse\"}",
     {"layers[0]", "global_avgpool needs an input [channels, height, width]; found [1, 3, 4, 4]"}},
    {"{\"input\": [3, 4, 4], \"layers\": [{\"type\": \"flatten\"}, {\"type\": \"maxpool2d\", "
     "\"kernel_size\": 2}], \"loss\": \"mse\"}",
     {"layers[1]", "found [48]"}},
    {"{\"input\": [3, 7, 7], \"layers\": [{\"type\": \"maxpool2d\"}], \"loss\": \"mse\"}",
     {"layers[0].kernel_size", "missing"}},
    {"{\"input\": [3, 7, 7], \"layers\": [{\"type\": \"maxpool2d\", \"kernel_size\": 8}], "
     "\"loss\": \"mse\"}",
     {"layers[0].kernel_size", "the window [8, 8] is larger than the input's [height, width] [7, "
                               "7]"}},
    {"{\"input\": [3, 9, 4], \"layers\": [{\"type\": \"avgpool2d\", \"kernel_size\": [3, 5]}], "
     "\"loss\": \"mse\"}",
     {"layers[0].kernel_size", "the window [3, 5] is larger"}},
    {"{\"input\": [3, 7, 7], \"layers\": [{\"type\": \"maxpool2d\", \"kernel_size\": 2, "
     "\"stride\": 0}], \"loss\": \"mse\"}",
     {"layers[0].stride"}},
    {"{\"input\": [3, 7, 7], \"layers\": [{\"type\": \"maxpool2d\", \"kernel_size\": [2, 2, 2]}], "
     "\"loss\": \"mse\"}",
     {"layers[0].kernel_size", "a list of another length"}},
    {"{\"input\": [3, 7, 7], \"layers\": [{\"type\": \"avgpool2d\", \"kernel_size\": \"2\"}], "
     "\"loss\": \"mse\"}",
     {"layers[0].kernel_size", "expected a whole number or a list [h, w]"}},
    {"{\"input\": [3, 7, 7], \"layers\": [{\"type\": \"maxpool2d\", \"kernel_size\": 2, "
     "\"padding\": 1}], \"loss\": \"mse\"}",
     {"layers[0].padding", "unknown key", "kernel_size, stride"}},
    {"{\"input\": [3, 7, 7], \"layers\": [{\"type\": \"global_avgpool\", \"kernel_size\": 2}], "
     "\"loss\": \"mse\"}",
     {"layers[0].kernel_size", "unknown key"}},
};

static void test_parse(vt *t) {
    for (size_t i = 0; i < sizeof g_shapes / sizeof *g_shapes; i++) {
        vkt_model_desc m;
        vkt_status s = vkt_model_parse(g_shapes[i].json, "pool.json", &m);
        VT_CHECK(t, s == VKT_OK, "shape case %zu: %s", i, vkt_error());
        if (s != VKT_OK) continue;
        const vkt_layer_desc *l = &m.layers[0];
        bool same = l->out.ndim == g_shapes[i].ndim;
        for (int d = 0; same && d < l->out.ndim; d++)
            same = l->out.dim[d] == g_shapes[i].out[d];
        char sh[64];
        vkt_shape_format(&l->out, sh, sizeof sh);
        VT_CHECK(t, same, "shape case %zu: output %s", i, sh);
        char torch[256];
        l->type->torch(l, torch, sizeof torch);
        VT_CHECK(t, strcmp(torch, g_shapes[i].torch) == 0, "shape case %zu: torch %s", i, torch);
        VT_CHECK(t, l->type->params == NULL, "shape case %zu: parameters", i);
        vkt_layer_cost c = vkt_model_cost(&m, 0, 1);
        VT_CHECK(t,
                 c.fwd_flops == g_shapes[i].fwd_flops && c.saved_floats == l->out_features &&
                     c.fwd_bytes == 4.0 * (l->in_features + l->out_features) &&
                     c.bwd_flops >= c.fwd_flops && c.bwd_bytes >= c.fwd_bytes,
                 "shape case %zu: cost fwd %g flops, %g bytes, bwd %g, %g; saved %g", i,
                 c.fwd_flops, c.fwd_bytes, c.bwd_flops, c.bwd_bytes, c.saved_floats);
        char whole[512];
        VT_OK(t, vkt_model_torch(&m, whole, sizeof whole));
        VT_CHECK(t, has(whole, g_shapes[i].torch), "shape case %zu: model %s", i, whole);
        vkt_model_free(&m);
    }
    for (size_t i = 0; i < sizeof g_bad / sizeof *g_bad; i++) {
        vkt_model_desc m;
        vkt_status s = vkt_model_parse(g_bad[i].json, "bad.json", &m);
        VT_CHECK(t, s == VKT_ERR_FORMAT, "bad case %zu: %s (%s)", i, vkt_status_name(s),
                 vkt_error());
        if (s == VKT_OK) {
            vkt_model_free(&m);
            continue;
        }
        VT_CHECK(t, strncmp(vkt_error(), "bad.json: ", 10) == 0, "bad case %zu: %s", i,
                 vkt_error());
        for (int k = 0; k < 3 && g_bad[i].needles[k]; k++)
            VT_CHECK(t, has(vkt_error(), g_bad[i].needles[k]), "bad case %zu: \"%s\" lacks \"%s\"",
                     i, vkt_error(), g_bad[i].needles[k]);
    }
}

// ---------------------------------------------------------------------------------------------
// 2. layer_check

static const lc_case g_cases[] = {
    // Overlapping windows: inputs in up to four windows.
    {M("[3, 7, 7]",
       "{\"type\": \"maxpool2d\", \"kernel_size\": 3, \"stride\": 2}, " FLAT_DENSE("5"),
       "softmax_cross_entropy"),
     .B = 3, .input_grad = true},
    {M("[3, 7, 7]",
       "{\"type\": \"avgpool2d\", \"kernel_size\": 3, \"stride\": 2}, " FLAT_DENSE("5"),
       "softmax_cross_entropy"),
     .B = 3, .input_grad = true},
    // 2x2 on an even plane, and on an odd one (the last row and column in no window).
    {M("[5, 6, 6]", "{\"type\": \"maxpool2d\", \"kernel_size\": 2}, " FLAT_DENSE("4"),
       "softmax_cross_entropy"),
     .B = 2, .input_grad = true},
    {M("[3, 7, 7]",
       "{\"type\": \"maxpool2d\", \"kernel_size\": 2, \"stride\": 2}, " FLAT_DENSE("3"), "mse"),
     .B = 3, .input_grad = true},
    {M("[5, 7, 7]", "{\"type\": \"avgpool2d\", \"kernel_size\": [2, 2]}, " FLAT_DENSE("4"), "mse"),
     .B = 2, .input_grad = true},
    // Non-square windows and strides, and strides larger than the window.
    {M("[6, 7, 9]", "{\"type\": \"maxpool2d\", \"kernel_size\": [3, 2]}, " FLAT_DENSE("4"),
       "softmax_cross_entropy"),
     .B = 2, .input_grad = true},
    {M("[3, 8, 7]",
       "{\"type\": \"avgpool2d\", \"kernel_size\": [3, 2], \"stride\": [1, 2]}, " FLAT_DENSE("4"),
       "mse"),
     .B = 2, .input_grad = true},
    {M("[2, 8, 8]",
       "{\"type\": \"maxpool2d\", \"kernel_size\": 2, \"stride\": [3, 4]}, " FLAT_DENSE("3"),
       "mse"),
     .B = 3, .input_grad = true},
    {M("[2, 8, 8]",
       "{\"type\": \"avgpool2d\", \"kernel_size\": [2, 1], \"stride\": 3}, " FLAT_DENSE("3"),
       "mse"),
     .B = 3, .input_grad = true},
    // After a dense layer (over the last dimension) and a ReLU: the pool's dx feeds a product.
    {M("[3, 6, 5]",
       "{\"type\": \"dense\", \"units\": 6}, {\"type\": \"relu\"}, "
       "{\"type\": \"maxpool2d\", \"kernel_size\": 2}, " FLAT_DENSE("4"),
       "softmax_cross_entropy"),
     .B = 2},
    {M("[3, 5, 6]",
       "{\"type\": \"dense\", \"units\": 7}, {\"type\": \"tanh\"}, "
       "{\"type\": \"avgpool2d\", \"kernel_size\": 3, \"stride\": 2}, " FLAT_DENSE("3"),
       "mse"),
     .B = 2, .input_grad = true},
    // Two pools in a row.
    {M("[3, 9, 9]",
       "{\"type\": \"avgpool2d\", \"kernel_size\": 2, \"stride\": 1}, "
       "{\"type\": \"maxpool2d\", \"kernel_size\": 3, \"stride\": 2}, " FLAT_DENSE("3"),
       "mse"),
     .B = 2, .input_grad = true},
    // Many planes: several workgroups.
    {M("[8, 16, 16]", "{\"type\": \"maxpool2d\", \"kernel_size\": 2}, " FLAT_DENSE("3"),
       "softmax_cross_entropy"),
     .B = 4, .input_grad = true, .max_fd = 200},
    // Global means: one lane per plane (49 and 1 elements on a device without shuffles, 1 on
    // every device), a team per plane (400 elements).
    {M("[5, 7, 7]", "{\"type\": \"global_avgpool\"}, {\"type\": \"dense\", \"units\": 3}",
       "softmax_cross_entropy"),
     .B = 3, .input_grad = true},
    {M("[7, 1, 1]", "{\"type\": \"global_avgpool\"}, {\"type\": \"dense\", \"units\": 3}", "mse"),
     .B = 2, .input_grad = true},
    {M("[3, 20, 20]", "{\"type\": \"global_avgpool\"}, {\"type\": \"dense\", \"units\": 4}",
       "softmax_cross_entropy"),
     .B = 2, .input_grad = true, .max_fd = 200},
    {M("[6, 5, 7]",
       "{\"type\": \"maxpool2d\", \"kernel_size\": 2, \"stride\": 1}, "
       "{\"type\": \"global_avgpool\"}, {\"type\": \"dense\", \"units\": 3}",
       "mse"),
     .B = 3, .input_grad = true},
};

// ---------------------------------------------------------------------------------------------
// 3. Ties and NaN, against PyTorch

typedef struct tie_case {
    const char *json;
    uint32_t nin, nout;
    float x[20];
    float y[8];   // PyTorch's output (NaN where it is NaN)
    float dx[20]; // PyTorch's input gradient for dy = 1, 2, ..., nout
} tie_case;

#define NAN_ NAN
static const tie_case g_ties[] = {
    // x = [[1, 3, 3, 0, 2], [3, 2, 1, 3, 2], [0, 0, 5, 5, 5], [0, 0, 5, 5, 4]]
    {ONE("[1, 4, 5]", "{\"type\": \"maxpool2d\", \"kernel_size\": 2}"),
     20,
     4,
     {1, 3, 3, 0, 2, 3, 2, 1, 3, 2, 0, 0, 5, 5, 5, 0, 0, 5, 5, 4},
     {3, 3, 0, 5},
     {0, 1, 2, 0, 0, 0, 0, 0, 0, 0, 3, 0, 4, 0, 0, 0, 0, 0, 0, 0}},
    {ONE("[1, 4, 5]", "{\"type\": \"maxpool2d\", \"kernel_size\": 3, \"stride\": 2}"),
     20,
     2,
     {1, 3, 3, 0, 2, 3, 2, 1, 3, 2, 0, 0, 5, 5, 5, 0, 0, 5, 5, 4},
     {5, 5},
     {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0}},
    {ONE("[1, 4, 5]", "{\"type\": \"maxpool2d\", \"kernel_size\": [2, 3], \"stride\": [1, 2]}"),
     20,
     6,
     {1, 3, 3, 0, 2, 3, 2, 1, 3, 2, 0, 0, 5, 5, 5, 0, 0, 5, 5, 4},
     {3, 3, 5, 5, 5, 5},
     {0, 1, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 18, 0, 0, 0, 0, 0, 0, 0}},
    // x = [[1, nan, 2, nan], [nan, 0, 3, 4], [-inf, -inf, 1, 1], [-inf, -inf, 1, 1]]: a NaN is the
    // maximum and takes the gradient (the last NaN of the window); equal -inf and equal 1 give
    // it to the first.
    {ONE("[1, 4, 4]", "{\"type\": \"maxpool2d\", \"kernel_size\": 2}"),
     16,
     4,
     {1, NAN_, 2, NAN_, NAN_, 0, 3, 4, -INFINITY, -INFINITY, 1, 1, -INFINITY, -INFINITY, 1, 1},
     {NAN_, NAN_, -INFINITY, 1},
     {0, 0, 0, 2, 1, 0, 0, 0, 3, 0, 4, 0, 0, 0, 0, 0}},
};

static bool same_value(double got, float want) {
    return isnan(want) ? isnan(got) : got == (double)want;
}

// The pool's reference (its kind's ref_forward and ref_backward) on the case.
static void tie_reference(vt *t, const tie_case *c, const vkt_model_desc *m) {
    const vkt_layer_desc *l = &m->layers[0];
    vkt_ref *ref = vkt_ref_create(m, 1);
    double x[20], y[8], dy[8], dx[20] = {0};
    for (uint32_t i = 0; i < c->nin; i++)
        x[i] = c->x[i];
    for (uint32_t o = 0; o < c->nout; o++)
        dy[o] = o + 1;
    l->type->ref_forward(ref, l, NULL, x, y);
    l->type->ref_backward(ref, l, NULL, NULL, x, y, dy, dx);
    for (uint32_t o = 0; o < c->nout; o++)
        VT_CHECK(t, same_value(y[o], c->y[o]), "%s: reference y[%u] = %g, PyTorch %g", c->json, o,
                 y[o], (double)c->y[o]);
    for (uint32_t i = 0; i < c->nin; i++)
        VT_CHECK(t, same_value(dx[i], c->dx[i]), "%s: reference dx[%u] = %g, PyTorch %g", c->json,
                 i, dx[i], (double)c->dx[i]);
    vkt_ref_destroy(ref);
}

// A net of the pool alone (the first stage of the model, whose output and output gradient are
// the pool's), forward, then backward from dy = 1, 2, ...
static void tie_device(vt *t, const tie_case *c, const vkt_model_desc *m, vkt_device *dev,
                       vkt_ops *ops) {
    vkt_net_desc nd = {.model = m,
                       .first_layer = 0,
                       .last_layer = 1,
                       .max_batch = 1,
                       .slots = 1,
                       .optim = vkt_optim_default(VKT_OPTIM_SGD)};
    vkt_net *net = NULL;
    vkt_cmd *cmd = NULL;
    VT_OK(t, vkt_net_create(dev, ops, &nd, &net));
    if (net) VT_OK(t, vkt_cmd_create(dev, &cmd));
    if (!net || !cmd) goto out;
    const vkt_net_phase ph = {.train = true, .seed = 1};
    char where[300];
    snprintf(where, sizeof where, "%s on %s", c->json, vkt_device_label(dev));
    vkt_view in = vkt_net_input(net, 0), o = vkt_net_output(net, 0);
    vkt_view gy = vkt_net_output_grad(net, 0), gx = vkt_net_input_grad(net, 0);
    VT_OK(t, vkt_buffer_write(in.buffer, in.offset, c->x, 4ull * c->nin));
    VT_OK(t, vkt_cmd_begin(cmd, false));
    vkt_net_set_phase(net, &ph);
    vkt_net_record_forward(net, cmd, 0, 1);
    if (!vt_run(t, cmd, ops, "forward", where)) goto out;
    float y[8], dy[8], dx[20];
    VT_OK(t, vkt_buffer_read(o.buffer, o.offset, y, 4ull * c->nout));
    for (uint32_t k = 0; k < c->nout; k++) {
        VT_CHECK(t, same_value(y[k], c->y[k]), "%s: y[%u] = %g, PyTorch %g", where, k, (double)y[k],
                 (double)c->y[k]);
        dy[k] = (float)(k + 1);
    }
    VT_OK(t, vkt_buffer_write(gy.buffer, gy.offset, dy, 4ull * c->nout));
    VT_OK(t, vkt_cmd_begin(cmd, false));
    vkt_net_record_backward(net, cmd, 0, 1, true);
    if (!vt_run(t, cmd, ops, "backward", where)) goto out;
    VT_OK(t, vkt_buffer_read(gx.buffer, gx.offset, dx, 4ull * c->nin));
    for (uint32_t k = 0; k < c->nin; k++)
        VT_CHECK(t, dx[k] == c->dx[k], "%s: dx[%u] = %g, PyTorch %g", where, k, (double)dx[k],
                 (double)c->dx[k]);
out:
    vkt_cmd_destroy(cmd);
    vkt_net_destroy(net);
}

static void test_ties(vt *t, vkt_ops *const *ops) {
    for (size_t i = 0; i < sizeof g_ties / sizeof *g_ties; i++) {
        const tie_case *c = &g_ties[i];
        vkt_model_desc m;
        vkt_status st = vkt_model_parse(c->json, "ties", &m);
        VT_CHECK(t, st == VKT_OK, "%s", vkt_error());
        if (st != VKT_OK) continue;
        VT_CHECK(t, m.input_features == c->nin && m.layers[0].out_features == c->nout, "%s: shapes",
                 c->json);
        tie_reference(t, c, &m);
        for (int d = 0; d < t->ndev && ops[d]; d++)
            tie_device(t, c, &m, t->dev[d], ops[d]);
        vkt_model_free(&m);
    }
}

// ---------------------------------------------------------------------------------------------
// 4. Windows that do not overlap, through the ops

// Shapes of pool_nov.glsl's paths (engine/ops/pool_ops.c): on lavapipe the texel reads with rows
// of x on multiples of 4, 2 and 1 floats and rows of y on multiples of 4, 2 and 1 (28 x 28 is
// fashion_cnn's first pool, 14 x 14 its second), the rows and columns past the last window
// (odd sizes), windows of 3 x 3, 2 x 4, 1 x 2, 2 x 1 and 4 x 4, and shapes whose views are not
// whole texels (storage-buffer reads, as on every other device).
static const vkt_pool2d g_nov[] = {
    {.planes = 8, .h = 28, .w = 28, .kh = 2, .kw = 2},
    {.planes = 12, .h = 14, .w = 14, .kh = 2, .kw = 2},
    {.planes = 4, .h = 7, .w = 7, .kh = 2, .kw = 2},
    {.planes = 5, .h = 7, .w = 7, .kh = 2, .kw = 2},
    {.planes = 4, .h = 9, .w = 13, .kh = 3, .kw = 3},
    {.planes = 8, .h = 8, .w = 16, .kh = 2, .kw = 4},
    {.planes = 4, .h = 6, .w = 10, .kh = 1, .kw = 2},
    {.planes = 4, .h = 5, .w = 8, .kh = 2, .kw = 1},
    {.planes = 3, .h = 6, .w = 6, .kh = 3, .kw = 2},
    {.planes = 16, .h = 4, .w = 4, .kh = 4, .kw = 4},
    {.planes = 2, .h = 3, .w = 3, .kh = 3, .kw = 3},
    {.planes = 6, .h = 11, .w = 30, .kh = 2, .kw = 2},
};

// The index in the plane of window (oh, ow)'s maximum by PyTorch's scan (larger or NaN replaces).
static uint32_t nov_argmax(const vkt_pool2d *s, const float *plane, uint32_t oh, uint32_t ow) {
    uint32_t at = oh * s->kh * s->w + ow * s->kw;
    float m = -INFINITY;
    for (uint32_t a = 0; a < s->kh; a++)
        for (uint32_t b = 0; b < s->kw; b++) {
            uint32_t j = (oh * s->kh + a) * s->w + ow * s->kw + b;
            if (plane[j] > m || isnan(plane[j])) m = plane[j], at = j;
        }
    return at;
}

static vkt_buffer *nov_buffer(vt *t, vkt_device *dev, const float *data, uint64_t n) {
    vkt_buffer *b = NULL;
    VT_OK(t, vkt_buffer_create(dev, 4 * n, "nov", &b));
    if (b && data) VT_OK(t, vkt_buffer_write(b, 0, data, 4 * n));
    return b;
}

// Each shape with ties (values of four levels), -inf and NaN: maxpool2d forward and backward
// bit for bit against the scan above (dx filled with 7s first: every element is written), and
// avgpool2d forward against double means.
static void test_nov(vt *t, vkt_device *dev, vkt_ops *ops) {
    for (size_t i = 0; i < sizeof g_nov / sizeof *g_nov; i++) {
        vkt_pool2d s = g_nov[i];
        s.sh = s.kh, s.sw = s.kw;
        uint32_t oh = s.h / s.kh, ow = s.w / s.kw, hw = s.h * s.w;
        uint64_t nin = (uint64_t)s.planes * hw, nout = (uint64_t)s.planes * oh * ow;
        float *x = malloc(4 * nin), *dy = malloc(4 * nout), *got = malloc(4 * nin);
        float *sevens = malloc(4 * nin);
        uint64_t st = 11 + i;
        for (uint64_t j = 0; j < nin; j++) {
            uint64_t r = vt_rand_u64(&st);
            x[j] = (float)(r % 4) - 1.0f;
            if (r % 97 == 0) x[j] = NAN;
            if (r % 89 == 0) x[j] = -INFINITY;
            sevens[j] = 7.0f;
        }
        for (uint64_t j = 0; j < nout; j++)
            dy[j] = (float)(j % 13) + 0.5f;
        vkt_buffer *bx = nov_buffer(t, dev, x, nin), *bdx = nov_buffer(t, dev, sevens, nin);
        vkt_buffer *by = nov_buffer(t, dev, NULL, nout), *bya = nov_buffer(t, dev, NULL, nout);
        vkt_buffer *bdy = nov_buffer(t, dev, dy, nout);
        vkt_cmd *cmd = NULL;
        VT_OK(t, vkt_cmd_create(dev, &cmd));
        char where[200];
        snprintf(where, sizeof where, "%u planes of %u x %u, %u x %u windows, on %s", s.planes, s.h,
                 s.w, s.kh, s.kw, vkt_device_label(dev));
        if (bx && bdx && by && bya && bdy && cmd) {
            VT_OK(t, vkt_cmd_begin(cmd, false));
            vkt_op_pool2d_forward(cmd, ops, VKT_POOL_MAX, vkt_buffer_whole(by),
                                  vkt_buffer_whole(bx), &s, "max fwd");
            vkt_op_pool2d_forward(cmd, ops, VKT_POOL_AVG, vkt_buffer_whole(bya),
                                  vkt_buffer_whole(bx), &s, "avg fwd");
            vkt_op_pool2d_backward(cmd, ops, VKT_POOL_MAX, vkt_buffer_whole(bdx),
                                   vkt_buffer_whole(bdy), vkt_buffer_whole(bx), &s, "max bwd");
            if (vt_run(t, cmd, ops, "non-overlapping pools", where)) {
                size_t bad_y = 0, bad_a = 0, bad_dx = 0;
                float *want = malloc(4 * nin);
                VT_OK(t, vkt_buffer_read(by, 0, got, 4 * nout));
                for (uint32_t pl = 0; pl < s.planes; pl++)
                    for (uint32_t o = 0; o < oh * ow; o++) {
                        float w = x[(uint64_t)pl * hw +
                                    nov_argmax(&s, x + (uint64_t)pl * hw, o / ow, o % ow)];
                        float g = got[(uint64_t)pl * oh * ow + o];
                        bad_y += isnan(w) ? !isnan(g) : g != w;
                    }
                VT_OK(t, vkt_buffer_read(bya, 0, got, 4 * nout));
                for (uint32_t pl = 0; pl < s.planes; pl++)
                    for (uint32_t o = 0; o < oh * ow; o++) {
                        double m = 0;
                        for (uint32_t a = 0; a < s.kh; a++)
                            for (uint32_t b = 0; b < s.kw; b++)
                                m += x[(uint64_t)pl * hw + (o / ow * s.kh + a) * s.w +
                                       o % ow * s.kw + b];
                        m /= s.kh * s.kw;
                        float g = got[(uint64_t)pl * oh * ow + o];
                        bad_a += isnan(m) ? !isnan(g) : !(g == m || fabs(g - m) <= 1e-6);
                    }
                VT_OK(t, vkt_buffer_read(bdx, 0, got, 4 * nin));
                memset(want, 0, 4 * nin);
                for (uint32_t pl = 0; pl < s.planes; pl++)
                    for (uint32_t o = 0; o < oh * ow; o++)
                        want[(uint64_t)pl * hw +
                             nov_argmax(&s, x + (uint64_t)pl * hw, o / ow, o % ow)] =
                            dy[(uint64_t)pl * oh * ow + o];
                for (uint64_t j = 0; j < nin; j++)
                    bad_dx += got[j] != want[j];
                VT_CHECK(t, bad_y == 0 && bad_a == 0 && bad_dx == 0,
                         "%s: maxpool2d y %zu wrong, avgpool2d y %zu, maxpool2d dx %zu", where,
                         bad_y, bad_a, bad_dx);
                free(want);
            }
        }
        vkt_cmd_destroy(cmd);
        vkt_buffer_destroy(bdy), vkt_buffer_destroy(bya), vkt_buffer_destroy(by);
        vkt_buffer_destroy(bdx), vkt_buffer_destroy(bx);
        free(x), free(dy), free(got), free(sevens);
    }
}

// ---------------------------------------------------------------------------------------------
// 5. Views beyond the storage-buffer range

// Planes of 7 x 9 (252 bytes: lavapipe's slices of 532610 planes start 8 bytes past its 16-byte
// offset alignment, so the kernels' offsets into their bindings are used): maxpool2d 2x2
// forward and backward and global_avgpool forward, then global_avgpool backward; at 600001
// planes (x not whole texels: storage-buffer reads everywhere) and at 600000 (lavapipe's texel
// reads, in slices of a multiple of 4 planes).
#define BIG_H 7u
#define BIG_W 9u
#define BIG_HW (BIG_H * BIG_W)
#define BIG_OW ((BIG_W - 2) / 2 + 1)
#define BIG_OUT (((BIG_H - 2) / 2 + 1) * BIG_OW)

static vkt_buffer *big_buffer(vt *t, vkt_device *dev, uint64_t floats, const char *name) {
    vkt_buffer *b = NULL;
    VT_OK(t, vkt_buffer_create(dev, floats * 4, name, &b));
    return b;
}

// The index in the plane of the first maximum of output o's 2x2 window.
static uint32_t big_argmax(const float *plane, uint32_t o) {
    uint32_t first = (o / BIG_OW) * 2 * BIG_W + (o % BIG_OW) * 2, at = first;
    for (uint32_t k = 1; k < 4; k++) {
        uint32_t j = first + (k / 2) * BIG_W + k % 2;
        if (plane[j] > plane[at]) at = j;
    }
    return at;
}

static void test_big(vt *t, vkt_device *dev, vkt_ops *ops, uint32_t planes) {
    uint64_t range = vkt_device_get_info(dev)->max_storage_buffer_range;
    uint64_t nin = (uint64_t)planes * BIG_HW, nout = (uint64_t)planes * BIG_OUT;
    if (nin * 4 <= range) {
        printf("  %s: its storage-buffer range (%llu bytes) holds %llu bytes: no slicing to test\n",
               vkt_device_label(dev), (unsigned long long)range, (unsigned long long)nin * 4);
        return;
    }
    char where[160];
    snprintf(where, sizeof where, "%s, %u planes", vkt_device_label(dev), planes);
    float *x = malloc(nin * 4), *got = malloc(nin * 4), *dy = malloc(nout * 4);
    float *g = malloc(planes * 4ull);
    vkt_buffer *bx = big_buffer(t, dev, nin, "x"), *bdx = big_buffer(t, dev, nin, "dx");
    vkt_buffer *by = big_buffer(t, dev, nout, "y"), *bdy = big_buffer(t, dev, nout, "dy");
    vkt_buffer *bg = big_buffer(t, dev, planes, "means");
    vkt_cmd *cmd = NULL;
    VT_OK(t, vkt_cmd_create(dev, &cmd));
    if (!x || !got || !dy || !g || !bx || !bdx || !by || !bdy || !bg || !cmd) goto out;
    vt_fill_uniform(x, nin, 5, -2.0f, 2.0f);
    vt_fill_uniform(dy, nout, 6, -1.0f, 1.0f);
    VT_OK(t, vkt_buffer_write(bx, 0, x, nin * 4));
    VT_OK(t, vkt_buffer_write(bdy, 0, dy, nout * 4));
    vkt_pool2d s = {.planes = planes, .h = BIG_H, .w = BIG_W, .kh = 2, .kw = 2, .sh = 2, .sw = 2};
    VT_OK(t, vkt_cmd_begin(cmd, false));
    vkt_op_pool2d_forward(cmd, ops, VKT_POOL_MAX, vkt_buffer_whole(by), vkt_buffer_whole(bx), &s,
                          "maxpool fwd");
    vkt_op_pool2d_backward(cmd, ops, VKT_POOL_MAX, vkt_buffer_whole(bdx), vkt_buffer_whole(bdy),
                           vkt_buffer_whole(bx), &s, "maxpool bwd");
    vkt_op_global_avgpool_forward(cmd, ops, vkt_buffer_whole(bg), vkt_buffer_whole(bx), planes,
                                  BIG_HW, "global fwd");
    int n = vkt_cmd_dispatch_count(cmd);
    VT_CHECK(t, n >= 6, "%s: %llu bytes over a %llu-byte range in %d dispatches (3 ops)", where,
             (unsigned long long)nin * 4, (unsigned long long)range, n);
    if (!vt_run(t, cmd, ops, "sliced pooling", where)) goto out;
    // maxpool2d: the first maximum of each window and its gradient (the windows do not overlap:
    // every value is exact); the last row and column are in no window.
    size_t bad_y = 0, bad_dx = 0, bad_g = 0;
    VT_OK(t, vkt_buffer_read(by, 0, got, nout * 4));
    for (uint64_t pl = 0; pl < planes; pl++)
        for (uint32_t o = 0; o < BIG_OUT; o++)
            bad_y += got[pl * BIG_OUT + o] != x[pl * BIG_HW + big_argmax(x + pl * BIG_HW, o)];
    VT_OK(t, vkt_buffer_read(bdx, 0, got, nin * 4));
    for (uint64_t pl = 0; pl < planes; pl++) {
        float want[BIG_HW] = {0};
        for (uint32_t o = 0; o < BIG_OUT; o++)
            want[big_argmax(x + pl * BIG_HW, o)] = dy[pl * BIG_OUT + o];
        for (uint32_t j = 0; j < BIG_HW; j++)
            bad_dx += got[pl * BIG_HW + j] != want[j];
    }
    VT_OK(t, vkt_buffer_read(bg, 0, g, planes * 4ull));
    for (uint64_t pl = 0; pl < planes; pl++) {
        double sum = 0;
        for (uint32_t j = 0; j < BIG_HW; j++)
            sum += x[pl * BIG_HW + j];
        bad_g += !(fabs(g[pl] - sum / BIG_HW) <= 1e-6 + 1e-5 * fabs(sum / BIG_HW));
    }
    VT_CHECK(t, bad_y == 0 && bad_dx == 0 && bad_g == 0,
             "%s: sliced maxpool2d y: %zu wrong, dx: %zu; global_avgpool: %zu", where, bad_y,
             bad_dx, bad_g);
    // global_avgpool backward from the means as its output gradient.
    VT_OK(t, vkt_cmd_begin(cmd, false));
    vkt_op_global_avgpool_backward(cmd, ops, vkt_buffer_whole(bdx), vkt_buffer_whole(bg), planes,
                                   BIG_HW, "global bwd");
    VT_CHECK(t, vkt_cmd_dispatch_count(cmd) >= 2, "%s: global_avgpool backward not sliced", where);
    if (!vt_run(t, cmd, ops, "sliced global_avgpool backward", where)) goto out;
    VT_OK(t, vkt_buffer_read(bdx, 0, got, nin * 4));
    size_t bad = 0;
    for (uint64_t i = 0; i < nin; i++)
        bad += got[i] != g[i / BIG_HW] / (float)BIG_HW;
    VT_CHECK(t, bad == 0, "%s: sliced global_avgpool backward: %zu of %llu wrong", where, bad,
             (unsigned long long)nin);
out:
    vkt_cmd_destroy(cmd);
    vkt_buffer_destroy(bg), vkt_buffer_destroy(bdy), vkt_buffer_destroy(by);
    vkt_buffer_destroy(bdx), vkt_buffer_destroy(bx);
    free(x), free(got), free(dy), free(g);
}

int main(void) {
    vt tv, *t = &tv;
    if (vt_init(t, "test_pool")) return 1;
    test_parse(t);
    vkt_ops *ops[VT_MAX_DEVICES] = {0};
    for (int d = 0; d < t->ndev; d++)
        VT_OK(t, vkt_ops_create(t->dev[d], &ops[d]));
    for (size_t i = 0; i < sizeof g_cases / sizeof *g_cases; i++)
        lc_run(t, ops, &g_cases[i]);
    test_ties(t, ops);
    for (int d = 0; d < t->ndev && ops[d]; d++) {
        test_nov(t, t->dev[d], ops[d]);
        test_big(t, t->dev[d], ops[d], 600001);
        test_big(t, t->dev[d], ops[d], 600000);
    }
    for (int d = 0; d < t->ndev; d++)
        vkt_ops_destroy(ops[d]);
    return vt_finish(t);
}
