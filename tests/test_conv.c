// test_conv.c: the conv2d layer kind (engine/nn/layers/conv2d.c) and its kernels
// (engine/ops/conv_ops.c, shaders/conv_*.comp), on every device.
//  1. Parsing: shapes, tensors and their init bounds, cost, products and the torch module of
//     valid layers; bad input ranks, kernels larger than the padded input and bad key types
//     rejected with messages that name the JSON path and what was found.
//  2. The kernels against double-precision C references: im2col and col2im (gather) over odd
//     geometries (strides, padding, non-square kernels, a 1x1 kernel with a stride larger than
//     it), chunks that start at a sample whose offset is not aligned; both permutes, with and
//     without bias; the row sums.
//  3. tests/layer_check.c on models around conv2d (the reference against finite differences,
//     the devices against the reference, fused and unfused): 7x7 images, 3x3 kernels with
//     stride 2 and padding 1, 3 -> 5 channels, 1x1 kernels, [3, 2] kernels and strides, no bias,
//     conv + relu + conv + flatten + dense under softmax cross-entropy, MSE, the input gradient
//     through a conv that is not first, and batches cut into several chunks (the chunk bound
//     forced small); two runs of that backward give bitwise the same gradients.
//  4. The fast paths (engine/ops/conv_ops.c): the split weight gradient (conv_dw + its ordered
//     reduction) against a double reference with dW and db starting nonzero, over odd column
//     counts (float loads), part counts that do not divide the columns, two row tiles, vec4
//     texels and (SwiftShader, views past its 65536 texels) vec4 storage loads; the small-K
//     forward (conv_fwd, conv_fwd64) over float, vec4 and dvec4 stores, with and without bias,
//     writing only its samples; im2col and col2im of stride-1 same-width convs take the run
//     kernels in part 2 (the 32 x 14 x 14 case), checked against the same references; the
//     products each conv reports to the tuner; and layer_check on models whose convs split
//     (with and without an input gradient) and on a batch whose chunks split but the last,
//     twice bitwise the same.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "conv_ops.h"
#include "layer.h"
#include "layer_check.h"
#include "network.h"
#include "test_util.h"

static bool has(const char *msg, const char *needle) { return strstr(msg, needle) != NULL; }

// ---------------------------------------------------------------------------------------------
// 1. Parsing

// A model of one conv2d layer (given as JSON keys) on input `in`, then a flatten.
static vkt_status parse_one(const char *in, const char *keys, vkt_model_desc *m) {
    char json[1024];
    snprintf(json, sizeof json,
             "{\"name\": \"c\", \"input\": %s, \"layers\": [{\"type\": \"conv2d\"%s%s}, "
             "{\"type\": \"flatten\"}], \"loss\": \"mse\"}",
             in, *keys ? ", " : "", keys);
    return vkt_model_parse(json, "conv.json", m);
}

static void expect_error(vt *t, const char *json, const char *const *needles) {
    vkt_model_desc m;
    vkt_status s = vkt_model_parse(json, "conv.json", &m);
    const char *msg = vkt_error();
    bool ok = s == VKT_ERR_FORMAT;
    for (int i = 0; ok && needles[i]; i++)
        ok = has(msg, needles[i]);
    VT_CHECK(t, ok, "%s\n    gave status %d and \"%s\"", json, s, msg);
    if (s == VKT_OK) vkt_model_free(&m);
}

static void expect_layer_error(vt *t, const char *in, const char *keys,
                               const char *const *needles) {
    char json[1024];
    snprintf(json, sizeof json,
             "{\"name\": \"c\", \"input\": %s, \"layers\": [{\"type\": \"conv2d\"%s%s}, "
             "{\"type\": \"flatten\"}], \"loss\": \"mse\"}",
             in, *keys ? ", " : "", keys);
    expect_error(t, json, needles);
}

static void test_parse(vt *t) {
    vkt_model_desc m;
    // 3 x 7 x 7 -> 5 x 4 x 4 (3x3, stride 2, padding 1).
    VT_OK(t,
          parse_one("[3, 7, 7]",
                    "\"out_channels\": 5, \"kernel_size\": 3, \"stride\": 2, \"padding\": 1", &m));
    if (t->failures) return;
    const vkt_layer_desc *l = &m.layers[0];
    VT_CHECK(t, l->out.ndim == 3 && l->out.dim[0] == 5 && l->out.dim[1] == 4 && l->out.dim[2] == 4,
             "3x7x7 conv 3x3/2 pad 1 gives 5x%ux%u", l->out.dim[1], l->out.dim[2]);
    VT_CHECK(t,
             l->bias && l->units == 5 && l->kernel[0] == 3 && l->kernel[1] == 3 &&
                 l->stride[0] == 2 && l->stride[1] == 2 && l->padding[0] == 1 && l->padding[1] == 1,
             "keys as parsed");
    VT_CHECK(t, vkt_model_param_count(&m) == 5 * 3 * 9 + 5, "%llu parameters",
             (unsigned long long)vkt_model_param_count(&m));
    vkt_param_spec ps[VKT_LAYER_MAX_PARAMS];
    int np = l->type->params(l, ps);
    VT_CHECK(t,
             np == 2 && strcmp(ps[0].name, "weight") == 0 && ps[0].ndim == 4 &&
                 ps[0].shape[0] == 5 && ps[0].shape[1] == 3 && ps[0].shape[2] == 3 &&
                 ps[0].shape[3] == 3 && strcmp(ps[1].name, "bias") == 0 && ps[1].ndim == 1 &&
                 ps[1].shape[0] == 5,
             "tensors weight [5, 3, 3, 3], bias [5]");
    VT_CHECK(t,
             np == 2 && ps[0].init == VKT_INIT_UNIFORM && fabs(ps[0].a - 1 / sqrt(27.0)) < 1e-12 &&
                 ps[1].init == VKT_INIT_UNIFORM && fabs(ps[1].a - 1 / sqrt(27.0)) < 1e-12,
             "init bounds %g and %g, expected 1/sqrt(27)", ps[0].a, ps[1].a);
    vkt_layer_cost c = {0};
    l->type->cost(l, &c);
    VT_CHECK(t,
             c.fwd_flops == 2.0 * 5 * 27 * 16 && c.bwd_flops == 4.0 * 5 * 27 * 16 &&
                 c.saved_floats == 5 * 16,
             "cost %g %g %g", c.fwd_flops, c.bwd_flops, c.saved_floats);
    // K = 27: the forward is conv_fwd's, not a product; the weight gradient of 96 columns too
    // few to split.
    vkt_mm_shape sh[VKT_LAYER_MAX_MATMULS];
    int n = l->type->matmuls(l, 6, true, sh);
    VT_CHECK(t,
             n == 2 && sh[0].form == VKT_MM_NT && sh[0].M == 5 && sh[0].N == 27 && sh[0].K == 96 &&
                 sh[1].form == VKT_MM_TN && sh[1].M == 27 && sh[1].N == 96 && sh[1].K == 5,
             "products at batch 6");
    VT_CHECK(t, l->type->matmuls(l, 6, false, sh) == 1, "no input-gradient product without dx");
    char buf[512];
    VT_OK(t, vkt_model_torch(&m, buf, sizeof buf));
    VT_CHECK(t,
             has(buf, "nn.Conv2d(3, 5, kernel_size=(3, 3), stride=(2, 2), padding=(1, 1), "
                      "bias=True)"),
             "torch: %s", buf);
    vkt_model_free(&m);

    // K = 16 (a multiple of 8): all three products on the matmul.
    VT_OK(t, parse_one("[16, 5, 5]", "\"out_channels\": 3, \"kernel_size\": 1", &m));
    if (m.nlayers) {
        n = m.layers[0].type->matmuls(&m.layers[0], 4, true, sh);
        VT_CHECK(t,
                 n == 3 && sh[0].form == VKT_MM_NN && sh[0].M == 3 && sh[0].N == 100 &&
                     sh[0].K == 16 && sh[1].form == VKT_MM_NT && sh[2].form == VKT_MM_TN,
                 "K = 16: %d products", n);
    }
    vkt_model_free(&m);
    // fashion_cnn's first conv at batch 128: the forward by conv_fwd and the weight gradient
    // split (100352 columns, a 32 x 9 gradient): only the input gradient is a product.
    VT_OK(t,
          parse_one("[1, 28, 28]", "\"out_channels\": 32, \"kernel_size\": 3, \"padding\": 1", &m));
    if (m.nlayers) {
        n = m.layers[0].type->matmuls(&m.layers[0], 128, true, sh);
        VT_CHECK(t, n == 1 && sh[0].form == VKT_MM_TN && sh[0].N == 100352, "1 -> 32: %d products",
                 n);
        VT_CHECK(t, vkt_conv_dw_parts(32, 9, true, 100352) >= 2, "1 -> 32: the split");
    }
    vkt_model_free(&m);

    // Non-square everything, no bias: 2 x 9 x 6 -> 4 x 5 x 5.
    VT_OK(t, parse_one("[2, 9, 6]",
                       "\"out_channels\": 4, \"kernel_size\": [3, 2], \"stride\": [2, 1], "
                       "\"padding\": [1, 0], \"bias\": false",
                       &m));
    if (t->failures) return;
    l = &m.layers[0];
    VT_CHECK(t, l->out.dim[0] == 4 && l->out.dim[1] == 5 && l->out.dim[2] == 5 && !l->bias,
             "[2, 9, 6] conv [3, 2]/[2, 1] pad [1, 0] gives [4, %u, %u]", l->out.dim[1],
             l->out.dim[2]);
    VT_CHECK(t, vkt_model_param_count(&m) == 4 * 2 * 3 * 2, "no bias: %llu parameters",
             (unsigned long long)vkt_model_param_count(&m));
    VT_OK(t, vkt_model_torch(&m, buf, sizeof buf));
    VT_CHECK(t,
             has(buf, "nn.Conv2d(2, 4, kernel_size=(3, 2), stride=(2, 1), padding=(1, 0), "
                      "bias=False)"),
             "torch: %s", buf);
    vkt_model_free(&m);
    // A kernel exactly the padded input's size: 1 x 1 output.
    VT_OK(t, parse_one("[1, 3, 3]", "\"out_channels\": 2, \"kernel_size\": 5, \"padding\": 1", &m));
    if (m.nlayers)
        VT_CHECK(t, m.layers[0].out.dim[1] == 1 && m.layers[0].out.dim[2] == 1, "5x5 on 3x3 pad 1");
    vkt_model_free(&m);

    // Errors.
    expect_layer_error(t, "[784]", "\"out_channels\": 4, \"kernel_size\": 3",
                       (const char *[]){"conv.json", "layers[0]",
                                        "conv2d needs an input [channels, height, width]",
                                        "found [784]", NULL});
    expect_layer_error(t, "[1, 28, 28, 2]", "\"out_channels\": 4, \"kernel_size\": 3",
                       (const char *[]){"layers[0]", "found [1, 28, 28, 2]", NULL});
    expect_error(t,
                 "{\"name\": \"c\", \"input\": [1, 8, 8], \"layers\": [{\"type\": \"flatten\"}, "
                 "{\"type\": \"conv2d\", \"out_channels\": 2, \"kernel_size\": 3}], "
                 "\"loss\": \"mse\"}",
                 (const char *[]){"layers[1]", "found [64]", NULL});
    expect_layer_error(
        t, "[1, 4, 4]", "\"out_channels\": 4, \"kernel_size\": 5",
        (const char *[]){"layers[0].kernel_size", "larger than the input", "[1, 4, 4]", NULL});
    expect_layer_error(t, "[1, 4, 9]",
                       "\"out_channels\": 4, \"kernel_size\": [2, 12], "
                       "\"padding\": [0, 1]",
                       (const char *[]){"layers[0].kernel_size", "[2, 12]", "4 x 11", NULL});
    expect_layer_error(t, "[1, 8, 8]", "\"kernel_size\": 3",
                       (const char *[]){"layers[0].out_channels", "missing", NULL});
    expect_layer_error(t, "[1, 8, 8]", "\"out_channels\": 4",
                       (const char *[]){"layers[0].kernel_size", "missing", NULL});
    expect_layer_error(t, "[1, 8, 8]", "\"out_channels\": 0, \"kernel_size\": 3",
                       (const char *[]){"layers[0].out_channels", NULL});
    expect_layer_error(t, "[1, 8, 8]", "\"out_channels\": 65537, \"kernel_size\": 3",
                       (const char *[]){"layers[0].out_channels", NULL});
    expect_layer_error(t, "[1, 8, 8]", "\"out_channels\": 2.5, \"kernel_size\": 3",
                       (const char *[]){"layers[0].out_channels", NULL});
    expect_layer_error(t, "[1, 8, 8]", "\"out_channels\": 4, \"kernel_size\": \"3\"",
                       (const char *[]){"layers[0].kernel_size", "a list [h, w]", NULL});
    expect_layer_error(t, "[1, 8, 8]", "\"out_channels\": 4, \"kernel_size\": [3, 3, 3]",
                       (const char *[]){"layers[0].kernel_size", "another length", NULL});
    expect_layer_error(t, "[1, 8, 8]", "\"out_channels\": 4, \"kernel_size\": 0",
                       (const char *[]){"layers[0].kernel_size", NULL});
    expect_layer_error(t, "[1, 8, 8]", "\"out_channels\": 4, \"kernel_size\": 3, \"stride\": 0",
                       (const char *[]){"layers[0].stride", NULL});
    expect_layer_error(t, "[1, 8, 8]",
                       "\"out_channels\": 4, \"kernel_size\": 3, \"stride\": [1, \"2\"]",
                       (const char *[]){"layers[0].stride[1]", NULL});
    expect_layer_error(t, "[1, 8, 8]", "\"out_channels\": 4, \"kernel_size\": 3, \"padding\": -1",
                       (const char *[]){"layers[0].padding", NULL});
    expect_layer_error(t, "[1, 8, 8]", "\"out_channels\": 4, \"kernel_size\": 3, \"bias\": 1",
                       (const char *[]){"layers[0].bias", NULL});
    expect_layer_error(t, "[1, 8, 8]", "\"out_channels\": 4, \"kernel_size\": 3, \"dilation\": 2",
                       (const char *[]){"layers[0]", "dilation", "out_channels", NULL});
    // A weight beyond one binding.
    expect_layer_error(
        t, "[4096, 3, 3]", "\"out_channels\": 4096, \"kernel_size\": 3",
        (const char *[]){"layers[0]", "the weight [4096, 4096, 3, 3]", "128 MiB", NULL});
    // One sample's columns beyond the 128 MiB every device binds.
    expect_layer_error(t, "[64, 512, 512]", "\"out_channels\": 4, \"kernel_size\": 3",
                       (const char *[]){"layers[0]", "128 MiB", NULL});
}

// ---------------------------------------------------------------------------------------------
// 2. The kernels

typedef struct dctx {
    vt *t;
    vkt_device *dev;
    vkt_ops *ops;
    vkt_cmd *cmd;
    const char *name;
} dctx;

static vkt_conv_geom geom(uint32_t C, uint32_t H, uint32_t W, uint32_t OC, uint32_t KH, uint32_t KW,
                          uint32_t SH, uint32_t SW, uint32_t PH, uint32_t PW) {
    vkt_conv_geom g = {C, H, W, OC, 0, 0, KH, KW, SH, SW, PH, PW};
    g.OH = (H + 2 * PH - KH) / SH + 1;
    g.OW = (W + 2 * PW - KW) / SW + 1;
    return g;
}

// The x index im2col reads for column entry (k, b, q) of sample b, or -1 in the padding.
static int64_t src_index(const vkt_conv_geom *g, uint64_t k, uint64_t b, uint64_t q) {
    uint64_t c = k / (g->KH * g->KW), i = k / g->KW % g->KH, j = k % g->KW;
    int64_t ih = (int64_t)(q / g->OW) * g->SH + (int64_t)i - g->PH;
    int64_t iw = (int64_t)(q % g->OW) * g->SW + (int64_t)j - g->PW;
    if (ih < 0 || ih >= g->H || iw < 0 || iw >= g->W) return -1;
    return (int64_t)(((b * g->C + c) * g->H + (uint64_t)ih) * g->W + (uint64_t)iw);
}

static vkt_buffer *buf_new(dctx *c, uint64_t bytes, const float *init) {
    vkt_buffer *b = NULL;
    VT_OK(c->t, vkt_buffer_create(c->dev, bytes, "test_conv", &b));
    if (b && init) VT_OK(c->t, vkt_buffer_write(b, 0, init, bytes));
    return b;
}

static void compare(dctx *c, const char *what, const float *got, const double *ref, size_t n,
                    double atol) {
    size_t bad = vt_compare(what, got, ref, n, atol, 1e-5);
    VT_CHECK(c->t, bad == 0, "%s on %s: %zu of %zu wrong", what, c->name, bad, n);
}

// im2col and col2im of samples [b0, b0 + nb) of a batch of B.
static void test_cols(dctx *c, vkt_conv_geom g, uint32_t B, uint32_t b0, uint32_t nb,
                      uint64_t seed) {
    char what[160];
    snprintf(what, sizeof what,
             "[%u, %u, %u] k [%u, %u] s [%u, %u] p [%u, %u], samples %u..%u of %u", g.C, g.H, g.W,
             g.KH, g.KW, g.SH, g.SW, g.PH, g.PW, b0, b0 + nb - 1, B);
    uint64_t K = vkt_conv_k(&g), P = vkt_conv_p(&g), in = (uint64_t)g.C * g.H * g.W;
    uint64_t nx = B * in, ncols = K * nb * P;
    float *x = malloc(nx * 4), *cols = malloc(ncols * 4),
          *got = malloc((nx > ncols ? nx : ncols) * 4);
    double *ref = calloc(nx > ncols ? nx : ncols, sizeof(double));
    vt_fill_uniform(x, nx, seed, -1, 1);
    vt_fill_uniform(cols, ncols, seed + 1, -1, 1);
    // The outputs start poisoned: every entry must be written.
    float *poison = malloc((nx > ncols ? nx : ncols) * 4);
    for (uint64_t i = 0; i < (nx > ncols ? nx : ncols); i++)
        poison[i] = NAN;
    vkt_buffer *bx = buf_new(c, nx * 4, x), *bc = buf_new(c, ncols * 4, cols);
    vkt_buffer *bo = buf_new(c, ncols * 4, poison), *bdx = buf_new(c, nx * 4, poison);
    if (!bx || !bc || !bo || !bdx) goto out;
    VT_OK(c->t, vkt_cmd_begin(c->cmd, false));
    vkt_op_conv_im2col(c->cmd, c->ops, vkt_buffer_whole(bo), vkt_buffer_whole(bx), &g, b0, nb,
                       "im2col");
    vkt_op_conv_col2im(c->cmd, c->ops, vkt_buffer_whole(bdx), vkt_buffer_whole(bc), &g, b0, nb,
                       "col2im");
    if (!vt_run(c->t, c->cmd, c->ops, what, c->name)) goto out;
    for (uint64_t k = 0; k < K; k++)
        for (uint64_t b = 0; b < nb; b++)
            for (uint64_t q = 0; q < P; q++) {
                int64_t s = src_index(&g, k, b0 + b, q);
                ref[(k * nb + b) * P + q] = s < 0 ? 0 : x[s];
            }
    VT_OK(c->t, vkt_buffer_read(bo, 0, got, ncols * 4));
    char w2[200];
    snprintf(w2, sizeof w2, "im2col %s", what);
    compare(c, w2, got, ref, ncols, 0);
    // col2im: the samples of the chunk get the sums; the others keep the poison.
    memset(ref, 0, nx * sizeof(double));
    for (uint64_t k = 0; k < K; k++)
        for (uint64_t b = 0; b < nb; b++)
            for (uint64_t q = 0; q < P; q++) {
                int64_t s = src_index(&g, k, b0 + b, q);
                if (s >= 0) ref[s] += cols[(k * nb + b) * P + q];
            }
    VT_OK(c->t, vkt_buffer_read(bdx, 0, got, nx * 4));
    snprintf(w2, sizeof w2, "col2im %s", what);
    compare(c, w2, got + b0 * in, ref + b0 * in, nb * in, 1e-5);
    size_t outside = 0;
    for (uint64_t i = 0; i < nx; i++)
        if ((i < b0 * in || i >= (b0 + nb) * in) && !isnan(got[i])) outside++;
    VT_CHECK(c->t, outside == 0, "col2im %s on %s wrote %zu floats outside its samples", what,
             c->name, outside);
out:
    vkt_buffer_destroy(bx);
    vkt_buffer_destroy(bc);
    vkt_buffer_destroy(bo);
    vkt_buffer_destroy(bdx);
    free(x);
    free(cols);
    free(got);
    free(ref);
    free(poison);
}

// Both permutes of samples [b0, b0 + nb) of a batch of B, and the row sums of z.
static void test_permute(dctx *c, uint32_t OC, uint32_t P, uint32_t B, uint32_t b0, uint32_t nb,
                         bool bias, uint64_t seed) {
    char what[160];
    snprintf(what, sizeof what, "OC %u P %u samples %u..%u of %u%s", OC, P, b0, b0 + nb - 1, B,
             bias ? " with bias" : "");
    uint64_t ny = (uint64_t)B * OC * P, nz = (uint64_t)OC * nb * P;
    float *y = malloc(ny * 4), *z = malloc(nz * 4), *bv = malloc(OC * 4), *db0 = malloc(OC * 4);
    float *got = malloc((ny > nz ? ny : nz) * 4);
    double *ref = calloc(ny > nz ? ny : nz, sizeof(double));
    vt_fill_uniform(y, ny, seed, -1, 1);
    vt_fill_uniform(z, nz, seed + 1, -1, 1);
    vt_fill_uniform(bv, OC, seed + 2, -1, 1);
    vt_fill_uniform(db0, OC, seed + 3, -1, 1);
    vkt_buffer *by = buf_new(c, ny * 4, y), *bz = buf_new(c, nz * 4, z);
    vkt_buffer *bdz = buf_new(c, nz * 4, NULL), *bb = buf_new(c, OC * 4, bv);
    vkt_buffer *bdb = buf_new(c, OC * 4, db0);
    if (!by || !bz || !bdz || !bb || !bdb) goto out;
    vkt_view bview = vkt_buffer_whole(bb);
    VT_OK(c->t, vkt_cmd_begin(c->cmd, false));
    vkt_op_conv_from_nchw(c->cmd, c->ops, vkt_buffer_whole(bdz), vkt_buffer_whole(by), OC, P, b0,
                          nb, "from_nchw");
    vkt_op_conv_rowsum(c->cmd, c->ops, vkt_buffer_whole(bdb), vkt_buffer_whole(bz), OC, nb * P,
                       "rowsum");
    vkt_cmd_barrier(c->cmd); // to_nchw writes y, which from_nchw reads
    vkt_op_conv_to_nchw(c->cmd, c->ops, vkt_buffer_whole(by), vkt_buffer_whole(bz),
                        bias ? &bview : NULL, OC, P, b0, nb, "to_nchw");
    if (!vt_run(c->t, c->cmd, c->ops, what, c->name)) goto out;
    char w2[200];
    for (uint64_t o = 0; o < OC; o++)
        for (uint64_t b = 0; b < nb; b++)
            for (uint64_t q = 0; q < P; q++)
                ref[(o * nb + b) * P + q] = y[((b0 + b) * OC + o) * P + q];
    VT_OK(c->t, vkt_buffer_read(bdz, 0, got, nz * 4));
    snprintf(w2, sizeof w2, "from_nchw %s", what);
    compare(c, w2, got, ref, nz, 0);
    for (uint64_t i = 0; i < ny; i++)
        ref[i] = y[i];
    for (uint64_t o = 0; o < OC; o++)
        for (uint64_t b = 0; b < nb; b++)
            for (uint64_t q = 0; q < P; q++)
                ref[((b0 + b) * OC + o) * P + q] =
                    (double)z[(o * nb + b) * P + q] + (bias ? bv[o] : 0.0);
    VT_OK(c->t, vkt_buffer_read(by, 0, got, ny * 4));
    snprintf(w2, sizeof w2, "to_nchw %s", what);
    compare(c, w2, got, ref, ny, 1e-7);
    for (uint64_t o = 0; o < OC; o++) {
        ref[o] = db0[o];
        for (uint64_t i = 0; i < nb * P; i++)
            ref[o] += z[o * nb * P + i];
    }
    VT_OK(c->t, vkt_buffer_read(bdb, 0, got, OC * 4));
    snprintf(w2, sizeof w2, "rowsum %s", what);
    compare(c, w2, got, ref, OC, 1e-5);
out:
    vkt_buffer_destroy(by);
    vkt_buffer_destroy(bz);
    vkt_buffer_destroy(bdz);
    vkt_buffer_destroy(bb);
    vkt_buffer_destroy(bdb);
    free(y);
    free(z);
    free(bv);
    free(db0);
    free(got);
    free(ref);
}

// The split weight gradient of samples [b0, b0 + nb) of a batch of B, read from dy [B][M][P]
// with the columns cols [N][nb*P]; dw [M, N] and db [M] start nonzero (the ops accumulate).
// Sums of many terms: the tolerance is relative to the sum of their magnitudes.
static void test_dw(dctx *c, uint32_t M, uint32_t N, uint32_t P, uint32_t B, uint32_t b0,
                    uint32_t nb, bool bias, uint64_t seed) {
    char what[160];
    uint64_t n = (uint64_t)nb * P, ny = (uint64_t)B * M * P, nc = N * n, nw = (uint64_t)M * N;
    uint32_t S = vkt_conv_dw_parts(M, N, bias, n);
    snprintf(what, sizeof what, "split dW M %u N %u P %u samples %u..%u of %u%s (%u parts)", M, N,
             P, b0, b0 + nb - 1, B, bias ? " with db" : "", S);
    VT_CHECK(c->t, S >= 2, "%s: expected a split", what);
    if (S < 2) return;
    uint64_t npart = vkt_conv_dw_part_bytes(M, N, bias, n) / 4;
    float *dy = malloc(ny * 4), *cols = malloc(nc * 4), *w0 = malloc(nw * 4), *b0v = malloc(M * 4);
    float *got = malloc(nw * 4);
    double *ref = calloc(nw + M, sizeof(double)), *mag = calloc(nw + M, sizeof(double));
    vt_fill_uniform(dy, ny, seed, -1, 1);
    vt_fill_uniform(cols, nc, seed + 1, -1, 1);
    vt_fill_uniform(w0, nw, seed + 2, -1, 1);
    vt_fill_uniform(b0v, M, seed + 3, -1, 1);
    vkt_buffer *bdy = buf_new(c, ny * 4, dy), *bc = buf_new(c, nc * 4, cols);
    vkt_buffer *bw = buf_new(c, nw * 4, w0), *bb = buf_new(c, M * 4ull, b0v);
    vkt_buffer *bp = buf_new(c, npart * 4, NULL);
    if (!bdy || !bc || !bw || !bb || !bp) goto out;
    vkt_view db = vkt_buffer_whole(bb);
    VT_OK(c->t, vkt_cmd_begin(c->cmd, false));
    vkt_op_conv_dw_parts(c->cmd, c->ops, vkt_buffer_whole(bp), vkt_buffer_whole(bdy),
                         vkt_buffer_whole(bc), M, N, P, b0, nb, bias, "dw parts");
    vkt_cmd_barrier(c->cmd);
    vkt_op_conv_dw_reduce(c->cmd, c->ops, vkt_buffer_whole(bw), bias ? &db : NULL,
                          vkt_buffer_whole(bp), M, N, n, "dw reduce");
    if (!vt_run(c->t, c->cmd, c->ops, what, c->name)) goto out;
    for (uint64_t m = 0; m < M; m++) {
        for (uint64_t k = 0; k < N; k++) {
            double s = w0[m * N + k], a = fabs(s);
            for (uint64_t b = 0; b < nb; b++)
                for (uint64_t q = 0; q < P; q++) {
                    double v = (double)dy[((b0 + b) * M + m) * P + q] * cols[k * n + b * P + q];
                    s += v, a += fabs(v);
                }
            ref[m * N + k] = s, mag[m * N + k] = a;
        }
        double s = b0v[m], a = fabs(s);
        for (uint64_t b = 0; b < nb; b++)
            for (uint64_t q = 0; q < P; q++) {
                double v = dy[((b0 + b) * M + m) * P + q];
                s += v, a += fabs(v);
            }
        ref[nw + m] = bias ? s : b0v[m], mag[nw + m] = a;
    }
    size_t bad = 0;
    VT_OK(c->t, vkt_buffer_read(bw, 0, got, nw * 4));
    for (uint64_t i = 0; i < nw; i++)
        bad += !(fabs(got[i] - ref[i]) <= 1e-6 * mag[i]);
    VT_OK(c->t, vkt_buffer_read(bb, 0, got, M * 4ull));
    for (uint64_t m = 0; m < M; m++)
        bad += !(fabs(got[m] - ref[nw + m]) <= 1e-6 * mag[nw + m]);
    VT_CHECK(c->t, bad == 0, "%s on %s: %zu of %llu wrong", what, c->name, bad,
             (unsigned long long)(nw + M));
out:
    vkt_buffer_destroy(bdy);
    vkt_buffer_destroy(bc);
    vkt_buffer_destroy(bw);
    vkt_buffer_destroy(bb);
    vkt_buffer_destroy(bp);
    free(dy);
    free(cols);
    free(w0);
    free(b0v);
    free(got);
    free(ref);
    free(mag);
}

// The small-K forward of samples [b0, b0 + nb) of a batch of B: y [B][M][P] from cols [K][nb*P],
// w [M, K] and the bias; the other samples of y keep their poison.
static void test_fwd(dctx *c, uint32_t M, uint32_t K, uint32_t P, uint32_t B, uint32_t b0,
                     uint32_t nb, bool bias, uint64_t seed) {
    char what[160];
    snprintf(what, sizeof what, "conv_fwd M %u K %u P %u samples %u..%u of %u%s", M, K, P, b0,
             b0 + nb - 1, B, bias ? " with bias" : "");
    VT_CHECK(c->t, vkt_conv_fwd_small(M, K), "%s: expected the small-K kernel", what);
    uint64_t n = (uint64_t)nb * P, ny = (uint64_t)B * M * P, nc = (uint64_t)K * n;
    float *cols = malloc(nc * 4), *w = malloc(M * K * 4), *bv = malloc(M * 4), *y = malloc(ny * 4);
    double *ref = calloc(ny, sizeof(double));
    vt_fill_uniform(cols, nc, seed, -1, 1);
    vt_fill_uniform(w, (size_t)M * K, seed + 1, -1, 1);
    vt_fill_uniform(bv, M, seed + 2, -1, 1);
    for (uint64_t i = 0; i < ny; i++)
        y[i] = NAN;
    vkt_buffer *bc = buf_new(c, nc * 4, cols), *bw = buf_new(c, M * K * 4ull, w);
    vkt_buffer *bb = buf_new(c, M * 4ull, bv), *by = buf_new(c, ny * 4, y);
    if (!bc || !bw || !bb || !by) goto out;
    vkt_view bias_v = vkt_buffer_whole(bb);
    VT_OK(c->t, vkt_cmd_begin(c->cmd, false));
    vkt_op_conv_forward_small(c->cmd, c->ops, vkt_buffer_whole(by), vkt_buffer_whole(bc),
                              vkt_buffer_whole(bw), bias ? &bias_v : NULL, M, K, P, b0, nb,
                              "conv_fwd");
    if (!vt_run(c->t, c->cmd, c->ops, what, c->name)) goto out;
    for (uint64_t b = 0; b < nb; b++)
        for (uint64_t m = 0; m < M; m++)
            for (uint64_t q = 0; q < P; q++) {
                double s = bias ? bv[m] : 0;
                for (uint64_t k = 0; k < K; k++)
                    s += (double)w[m * K + k] * cols[k * n + b * P + q];
                ref[((b0 + b) * M + m) * P + q] = s;
            }
    VT_OK(c->t, vkt_buffer_read(by, 0, y, ny * 4));
    uint64_t first = (uint64_t)b0 * M * P, count = n * M;
    compare(c, what, y + first, ref + first, count, 1e-5);
    size_t outside = 0;
    for (uint64_t i = 0; i < ny; i++)
        if ((i < first || i >= first + count) && !isnan(y[i])) outside++;
    VT_CHECK(c->t, outside == 0, "%s on %s wrote %zu floats outside its samples", what, c->name,
             outside);
out:
    vkt_buffer_destroy(bc);
    vkt_buffer_destroy(bw);
    vkt_buffer_destroy(bb);
    vkt_buffer_destroy(by);
    free(cols);
    free(w);
    free(bv);
    free(y);
    free(ref);
}

// The direct kernel (conv_direct.comp), forward (with or without bias, on the weight transposed
// by vkt_op_conv_to_nchw as conv2d.c does) and input gradient, for samples [b0, b0 + nb) of a
// batch of B against the direct convolution in double precision; the outputs start as NaN, so
// every entry of the chunk must be written and nothing outside it. On a device that does not
// take it (vkt_conv_direct false: SwiftShader, GPUs) nothing runs; where it does, the op must
// accept these views (the layer would fall back to the columns otherwise, unseen).
static void test_direct(dctx *c, vkt_conv_geom g, bool fwd, bool bias, uint32_t B, uint32_t b0,
                        uint32_t nb, uint64_t seed) {
    char what[200];
    snprintf(what, sizeof what,
             "conv_direct %s [%u, %u, %u] -> %u, k [%u, %u] p [%u, %u]%s, samples %u..%u of %u",
             fwd ? "forward" : "input gradient", g.C, g.H, g.W, g.OC, g.KH, g.KW, g.PH, g.PW,
             bias ? " with bias" : "", b0, b0 + nb - 1, B);
    VT_CHECK(c->t, vkt_conv_direct_shape(&g, fwd), "%s: the shape should take the kernel", what);
    // lavapipe takes it at either vector width (8 or 16 lanes a subgroup: test_conv_lp512).
    VT_CHECK(c->t,
             vkt_device_get_info(c->dev)->driver_id != VT_DRIVER_ID_LLVMPIPE ||
                 vkt_conv_direct(c->ops, &g, fwd),
             "%s: lavapipe (%u-lane subgroups) does not take the kernel", what,
             vkt_device_get_info(c->dev)->subgroup_size);
    if (!vkt_conv_direct(c->ops, &g, fwd)) return;
    uint64_t P = vkt_conv_p(&g), K = vkt_conv_k(&g);
    uint64_t R = fwd ? g.OC : g.C, I = fwd ? g.C : g.OC, nin = B * I * P, nout = B * R * P;
    float *in = malloc(nin * 4), *w = malloc(K * g.OC * 4), *bv = malloc(g.OC * 4),
          *out = malloc(nout * 4);
    double *ref = calloc(nout, sizeof(double));
    vt_fill_uniform(in, nin, seed, -1, 1);
    vt_fill_uniform(w, K * g.OC, seed + 1, -1, 1);
    vt_fill_uniform(bv, g.OC, seed + 2, -1, 1);
    for (uint64_t i = 0; i < nout; i++)
        out[i] = NAN;
    vkt_buffer *bi = buf_new(c, nin * 4, in), *bw = buf_new(c, K * g.OC * 4, w);
    vkt_buffer *bb = buf_new(c, g.OC * 4ull, bv), *bo = buf_new(c, nout * 4, out);
    vkt_buffer *bt = buf_new(c, K * g.OC * 4, w); // the transposed weight (overwritten)
    if (!bi || !bw || !bb || !bo || !bt) goto out;
    vkt_view bias_v = vkt_buffer_whole(bb), a = vkt_buffer_whole(bw);
    VT_OK(c->t, vkt_cmd_begin(c->cmd, false));
    if (fwd) {
        a = vkt_buffer_whole(bt);
        vkt_op_conv_to_nchw(c->cmd, c->ops, a, vkt_buffer_whole(bw), NULL, g.OC, g.KH * g.KW, 0,
                            g.C, "wtrans");
        vkt_cmd_barrier(c->cmd);
    }
    bool took = vkt_op_conv_direct(c->cmd, c->ops, vkt_buffer_whole(bo), vkt_buffer_whole(bi), a,
                                   bias ? &bias_v : NULL, &g, fwd, b0, nb, "conv_direct");
    VT_CHECK(c->t, took, "%s on %s: the op refused the views", what, c->name);
    if (!vt_run(c->t, c->cmd, c->ops, what, c->name)) goto out;
    // out[b][m][y][x] = (bias) + sum over c, i, j of W x (forward) or W^T dy (backward), 0 outside.
    for (uint64_t b = b0; b < b0 + nb; b++)
        for (uint64_t m = 0; m < R; m++)
            for (uint64_t q = 0; q < P; q++) {
                int64_t y = (int64_t)(q / g.W), x = (int64_t)(q % g.W);
                double sum = fwd && bias ? bv[m] : 0;
                for (uint64_t ic = 0; ic < I; ic++)
                    for (int64_t i = 0; i < g.KH; i++)
                        for (int64_t j = 0; j < g.KW; j++) {
                            int64_t yy = fwd ? y + i - g.PH : y + g.PH - i;
                            int64_t xx = fwd ? x + j - g.PW : x + g.PW - j;
                            if (yy < 0 || yy >= g.H || xx < 0 || xx >= g.W) continue;
                            uint64_t oc = fwd ? m : ic, cc = fwd ? ic : m;
                            double wv = w[((oc * g.C + cc) * g.KH + i) * g.KW + j];
                            sum += wv * in[(b * I + ic) * P + yy * g.W + xx];
                        }
                ref[(b * R + m) * P + q] = sum;
            }
    VT_OK(c->t, vkt_buffer_read(bo, 0, out, nout * 4));
    uint64_t first = (uint64_t)b0 * R * P, count = (uint64_t)nb * R * P;
    compare(c, what, out + first, ref + first, count, 1e-5 * (double)(I * g.KH * g.KW));
    size_t outside = 0;
    for (uint64_t i = 0; i < nout; i++)
        if ((i < first || i >= first + count) && !isnan(out[i])) outside++;
    VT_CHECK(c->t, outside == 0, "%s on %s wrote %zu floats outside its samples", what, c->name,
             outside);
out:
    vkt_buffer_destroy(bi);
    vkt_buffer_destroy(bw);
    vkt_buffer_destroy(bb);
    vkt_buffer_destroy(bo);
    vkt_buffer_destroy(bt);
    free(in);
    free(w);
    free(bv);
    free(out);
    free(ref);
}

// The direct weight gradient (conv_direct_dw.comp, its parts then the ordered reduction) for
// samples [b0, b0 + nb) of a batch of B, added to a dW (and db) that start nonzero, against the
// double-precision sums.
static void test_direct_dw(dctx *c, vkt_conv_geom g, bool bias, uint32_t B, uint32_t b0,
                           uint32_t nb, uint64_t seed) {
    char what[200];
    snprintf(what, sizeof what,
             "conv_direct_dw [%u, %u, %u] -> %u, k [%u, %u] p [%u, %u]%s, samples %u..%u of %u",
             g.C, g.H, g.W, g.OC, g.KH, g.KW, g.PH, g.PW, bias ? " with bias" : "", b0, b0 + nb - 1,
             B);
    VT_CHECK(c->t, vkt_conv_direct_dw_shape(&g), "%s: the shape should take the kernel", what);
    if (!vkt_conv_direct_dw(c->ops, &g)) return;
    uint64_t P = vkt_conv_p(&g), K = vkt_conv_k(&g), n = (uint64_t)nb * P;
    uint64_t nx = B * g.C * P, ny = B * g.OC * P, nw = K * g.OC;
    uint64_t pbytes = vkt_conv_direct_dw_part_bytes(&g, bias, n);
    float *x = malloc(nx * 4), *dy = malloc(ny * 4), *dw = malloc(nw * 4), *db = malloc(g.OC * 4);
    double *rw = calloc(nw, sizeof(double)), *rb = calloc(g.OC, sizeof(double));
    vt_fill_uniform(x, nx, seed, -1, 1);
    vt_fill_uniform(dy, ny, seed + 1, -1, 1);
    vt_fill_uniform(dw, nw, seed + 2, -1, 1);
    vt_fill_uniform(db, g.OC, seed + 3, -1, 1);
    vkt_buffer *bx = buf_new(c, nx * 4, x), *by = buf_new(c, ny * 4, dy);
    vkt_buffer *bw = buf_new(c, nw * 4, dw), *bb = buf_new(c, g.OC * 4ull, db);
    vkt_buffer *bp = NULL;
    VT_OK(c->t, vkt_buffer_create(c->dev, pbytes, "parts", &bp));
    if (!bx || !by || !bw || !bb || !bp) goto out;
    VT_CHECK(
        c->t,
        vkt_conv_direct_dw_fits(c->ops, vkt_buffer_whole(by), vkt_buffer_whole(bx), &g, b0, nb),
        "%s on %s: the views should fit", what, c->name);
    vkt_view dbv = vkt_buffer_whole(bb);
    VT_OK(c->t, vkt_cmd_begin(c->cmd, false));
    vkt_op_conv_direct_dw(c->cmd, c->ops, vkt_buffer_whole(bp), vkt_buffer_whole(by),
                          vkt_buffer_whole(bx), &g, bias, b0, nb, "dw parts");
    vkt_cmd_barrier(c->cmd);
    vkt_op_conv_direct_dw_reduce(c->cmd, c->ops, vkt_buffer_whole(bw), bias ? &dbv : NULL,
                                 vkt_buffer_whole(bp), &g, n, "dw reduce");
    if (!vt_run(c->t, c->cmd, c->ops, what, c->name)) goto out;
    for (uint64_t i = 0; i < nw; i++)
        rw[i] = dw[i];
    for (uint64_t m = 0; m < g.OC; m++)
        rb[m] = db[m];
    for (uint64_t b = b0; b < b0 + nb; b++)
        for (uint64_t oc = 0; oc < g.OC; oc++)
            for (uint64_t q = 0; q < P; q++) {
                double d = dy[(b * g.OC + oc) * P + q];
                int64_t y = (int64_t)(q / g.W), xx = (int64_t)(q % g.W);
                if (bias) rb[oc] += d;
                for (uint64_t cc = 0; cc < g.C; cc++)
                    for (int64_t i = 0; i < g.KH; i++)
                        for (int64_t j = 0; j < g.KW; j++) {
                            int64_t yi = y + i - g.PH, xj = xx + j - g.PW;
                            if (yi < 0 || yi >= g.H || xj < 0 || xj >= g.W) continue;
                            rw[((oc * g.C + cc) * g.KH + i) * g.KW + j] +=
                                d * x[(b * g.C + cc) * P + yi * g.W + xj];
                        }
            }
    VT_OK(c->t, vkt_buffer_read(bw, 0, dw, nw * 4));
    VT_OK(c->t, vkt_buffer_read(bb, 0, db, g.OC * 4ull));
    compare(c, what, dw, rw, nw, 1e-5 * (double)n);
    if (bias) {
        char wb[240];
        snprintf(wb, sizeof wb, "%s: db", what);
        compare(c, wb, db, rb, g.OC, 1e-5 * (double)n);
    }
out:
    vkt_buffer_destroy(bx);
    vkt_buffer_destroy(by);
    vkt_buffer_destroy(bw);
    vkt_buffer_destroy(bb);
    vkt_buffer_destroy(bp);
    free(x);
    free(dy);
    free(dw);
    free(db);
    free(rw);
    free(rb);
}

static void test_kernels(dctx *c) {
    uint64_t seed = 1000;
    // (geometry, batch, first sample, samples)
    test_cols(c, geom(3, 7, 7, 5, 3, 3, 2, 2, 1, 1), 4, 0, 4, seed++);
    test_cols(c, geom(3, 7, 7, 5, 3, 3, 2, 2, 1, 1), 5, 3, 2, seed++); // offset 441 floats
    test_cols(c, geom(2, 9, 6, 4, 3, 2, 2, 1, 1, 0), 3, 1, 1, seed++);
    test_cols(c, geom(5, 6, 5, 3, 1, 1, 1, 1, 0, 0), 3, 0, 3, seed++);
    test_cols(c, geom(3, 7, 5, 2, 1, 1, 3, 2, 0, 0), 3, 1, 2, seed++); // stride beyond the kernel
    test_cols(c, geom(1, 5, 5, 2, 4, 3, 1, 3, 2, 1), 2, 0, 2, seed++); // padding near the kernel
    test_cols(c, geom(32, 14, 14, 64, 3, 3, 1, 1, 1, 1), 3, 1, 2, seed++);
    test_permute(c, 5, 16, 4, 0, 4, true, seed++);
    test_permute(c, 5, 16, 5, 3, 2, false, seed++);
    test_permute(c, 3, 7, 3, 1, 1, true, seed++);
    test_permute(c, 64, 196, 3, 1, 2, true, seed++);
    // (M, N, P, batch, first sample, samples, bias). Odd columns (floats, not vec4s), a part
    // count that does not divide them, and db: 1127 = 23 * 49 columns in 2 parts.
    test_dw(c, 5, 27, 49, 25, 1, 23, true, seed++);
    // vec4 pieces (as texels where the device binds them): 2624 columns in 5 parts of 132
    // pieces but the last (128); two tiles of rows (40 > 32) with the last clamped.
    test_dw(c, 32, 9, 64, 44, 3, 41, false, seed++);
    test_dw(c, 40, 12, 36, 42, 1, 40, true, seed++);
    // Views beyond SwiftShader's 65536 texels (vec4s from storage buffers there): 20000 columns.
    test_dw(c, 16, 20, 400, 51, 1, 50, true, seed++);
    // An odd P (floats); P % 8 == 4 (vec4s); P % 8 == 0 at an 8-aligned first sample (dvec4
    // stores where the device has them) and two tiles of rows; K of 1, 9 and 27.
    test_fwd(c, 5, 27, 49, 4, 1, 3, true, seed++);
    test_fwd(c, 3, 9, 36, 4, 1, 2, false, seed++);
    test_fwd(c, 40, 9, 64, 5, 1, 4, true, seed++);
    test_fwd(c, 7, 1, 16, 3, 0, 3, true, seed++);
    // Columns beyond SwiftShader's 65536 texels (read as vec4s from a storage buffer there).
    test_fwd(c, 4, 9, 300, 101, 1, 100, false, seed++);
    // The direct kernel: fashion_cnn's second conv (32 -> 64, 3x3 on 14x14; 14 % 4 != 0, so
    // pieces of 4 positions wrap rows) both ways; a single input channel (fashion_cnn's first
    // conv); 36 rows (two row tiles, the second 4 of 32) with a bias; a 5x5 kernel; a [3, 5]
    // kernel with padding [1, 2]; a 1x1 kernel; chunks that start at sample 1 or 2 and end
    // inside a 64-position lane group.
    // (geometry, forward, bias, batch, first sample, samples)
    test_direct(c, geom(32, 14, 14, 64, 3, 3, 1, 1, 1, 1), true, false, 3, 1, 2, seed++);
    test_direct(c, geom(32, 14, 14, 64, 3, 3, 1, 1, 1, 1), false, false, 3, 1, 2, seed++);
    test_direct(c, geom(1, 28, 28, 32, 3, 3, 1, 1, 1, 1), true, false, 2, 0, 2, seed++);
    test_direct(c, geom(8, 4, 4, 36, 3, 3, 1, 1, 1, 1), true, true, 3, 2, 1, seed++);
    test_direct(c, geom(36, 4, 4, 8, 3, 3, 1, 1, 1, 1), false, false, 3, 0, 3, seed++);
    test_direct(c, geom(4, 6, 6, 8, 5, 5, 1, 1, 2, 2), true, true, 3, 1, 2, seed++);
    test_direct(c, geom(4, 6, 6, 8, 5, 5, 1, 1, 2, 2), false, false, 3, 1, 2, seed++);
    test_direct(c, geom(4, 5, 8, 4, 3, 5, 1, 1, 1, 2), true, true, 2, 1, 1, seed++);
    test_direct(c, geom(4, 5, 8, 4, 3, 5, 1, 1, 1, 2), false, false, 2, 0, 2, seed++);
    test_direct(c, geom(12, 3, 4, 4, 1, 1, 1, 1, 0, 0), true, true, 5, 1, 3, seed++);
    test_direct(c, geom(12, 3, 4, 4, 1, 1, 1, 1, 0, 0), false, false, 5, 1, 3, seed++);
    // The direct weight gradient: fashion_cnn's second conv (2 samples: 392 pieces of 4
    // positions, 3 full parts of 128 and one of 8); 12 input channels (the second group of 8
    // lanes half clamped) and 36 output channels (two row tiles) with a bias; a 5x5 and a [3, 5]
    // kernel; 3 x 4 planes over 5 samples from sample 1 (an odd count of pieces: a step's second
    // piece past the end).
    // (geometry, bias, batch, first sample, samples)
    test_direct_dw(c, geom(32, 14, 14, 64, 3, 3, 1, 1, 1, 1), false, 3, 1, 2, seed++);
    test_direct_dw(c, geom(12, 6, 6, 36, 3, 3, 1, 1, 1, 1), true, 3, 0, 3, seed++);
    test_direct_dw(c, geom(8, 6, 6, 8, 5, 5, 1, 1, 2, 2), true, 3, 1, 2, seed++);
    test_direct_dw(c, geom(8, 5, 8, 4, 3, 5, 1, 1, 1, 2), false, 2, 1, 1, seed++);
    test_direct_dw(c, geom(16, 3, 4, 8, 3, 3, 1, 1, 1, 1), true, 7, 1, 5, seed++);
}

// ---------------------------------------------------------------------------------------------
// 3. Through a network

#define IMG(name, in) "{\"name\": \"" name "\", \"input\": " in ", \"layers\": ["
#define CONV(oc, k) "{\"type\": \"conv2d\", \"out_channels\": " #oc ", \"kernel_size\": " k
static const lc_case CASES[] = {
    // 7x7 images, 3 -> 5 channels, 3x3 stride 2 padding 1, and the input gradient.
    {.json = IMG("c7", "[3, 7, 7]") CONV(5, "3") ", \"stride\": 2, \"padding\": 1},"
                                                 "{\"type\": \"flatten\"}], \"loss\": \"mse\"}",
     .B = 3,
     .input_grad = true},
    // A 1x1 kernel; then a [3, 2] kernel with stride [2, 1] and padding [1, 0], no bias.
    {.json = IMG("c1x1", "[5, 6, 5]") CONV(3, "1") "}," CONV(
         4, "[3, 2]") ", \"stride\": [2, 1], \"padding\": [1, 0], \"bias\": false},"
                      "{\"type\": \"flatten\"}, {\"type\": \"dense\", \"units\": 4}],"
                      "\"loss\": \"softmax_cross_entropy\"}",
     .B = 4,
     .input_grad = true},
    // conv + relu + conv + flatten + dense head under softmax cross-entropy; channel counts that
    // are multiples of 8 (the wide matmul kernels where the shapes allow them).
    {.json = IMG("cnn", "[2, 8, 8]") CONV(8, "3") ", \"padding\": 1}, {\"type\": \"relu\"}," CONV(
         8, "3") ", \"stride\": 2},"
                 "{\"type\": \"flatten\"},"
                 "{\"type\": \"dense\", \"units\": "
                 "5}], \"loss\": "
                 "\"softmax_cross_entropy\"}",
     .B = 4},
    // The input gradient through a conv that is not the first layer (a relu before it), MSE.
    {.json = IMG("relu_conv", "[2, 5, 6]") "{\"type\": \"relu\"}," CONV(
         3, "[2, 3]") ", \"stride\": [1, 2], \"padding\": 1}, {\"type\": \"tanh\"}, {\"type\": "
                      "\"flatten\"}],"
                      "\"loss\": \"mse\"}",
     .B = 3,
     .input_grad = true},
    // The direct kernels where the device takes them (lavapipe; the columns elsewhere): a conv
    // after a relu (4 -> 8, 3x3 padding 1 on 6x6, bias) and a [3, 5] kernel with padding [1, 2]
    // (8 -> 4, no bias), both ways, and the input gradient through both.
    {.json = IMG("direct", "[4, 6, 6]") "{\"type\": \"relu\"}," CONV(
         8, "3") ", \"padding\": 1},"
                 "{\"type\": \"relu\"}," CONV(
                     4, "[3, 5]") ", \"padding\": [1, 2], \"bias\": false},"
                                  "{\"type\": \"flatten\"}, {\"type\": \"dense\", \"units\": 3}],"
                                  "\"loss\": \"softmax_cross_entropy\"}",
     .B = 3,
     .input_grad = true,
     .max_fd = 60},
    // Odd everything: a stride larger than the kernel (inputs no column reads get dx = 0).
    {.json = IMG("sparse", "[3, 7, 5]") CONV(2, "1") ", \"stride\": [3, 2]},"
                                                     "{\"type\": \"flatten\"}, {\"type\": "
                                                     "\"dense\", \"units\": 3}], \"loss\": "
                                                     "\"softmax_cross_entropy\"}",
     .B = 2,
     .input_grad = true},
};

// The split weight gradient and the small-K forward in a network: 1 -> 6 channels, 3x3 padding
// 1 on 12x12 at batch 8 (1152 columns: 2 parts; K = 9), then a relu and a conv whose input
// gradient is needed (6 -> 4, K = 54: the matmul's products, stride 1 so the run-form im2col
// and col2im); and the split with the input gradient through it (a conv after a relu: the
// permute, the input-gradient product and col2im beside the split).
static const lc_case SPLIT[] = {
    {.json =
         IMG("split", "[1, 12, 12]") CONV(6, "3") ", \"padding\": 1}, {\"type\": \"relu\"}," CONV(
             4, "3") ", \"padding\": 1},"
                     "{\"type\": \"flatten\"}, {\"type\": "
                     "\"dense\", \"units\": 3}], \"loss\": "
                     "\"softmax_cross_entropy\"}",
     .B = 8,
     .max_fd = 60},
    {.json = IMG("split_dx", "[2, 12, 12]") "{\"type\": \"relu\"}," CONV(
         3, "3") ", \"padding\": 1}, {\"type\": \"flatten\"}], \"loss\": \"mse\"}",
     .B = 8,
     .input_grad = true,
     .max_fd = 60},
};

// Chunks that split and one that does not: 1 -> 4 channels, 3x3 padding 1 on 16x16 (P = 256,
// 4 * (2*9 + 4) * 256 = 22528 bytes a sample), batch 11 under a bound of 5 samples: chunks of
// 4, 4 and 3 samples, the first two (1024 columns) split in 2 parts, the last (768) on the
// matmul.
static const lc_case SPLIT_CHUNKED = {.json = IMG("split_chunked", "[1, 16, 16]")
                                          CONV(4, "3") ", \"padding\": 1},"
                                                       "{\"type\": \"relu\"}, {\"type\": "
                                                       "\"flatten\"}, {\"type\": \"dense\", "
                                                       "\"units\": 3}], \"loss\": "
                                                       "\"softmax_cross_entropy\"}",
                                      .B = 11,
                                      .max_fd = 40};

// The multi-chunk cases: run with the chunk bound forced to a few samples' scratch.
static const lc_case CHUNKED[] = {
    {.json = IMG("chunked", "[3, 7, 7]")
         CONV(5, "3") ", \"stride\": 2, \"padding\": 1},"
                      "{\"type\": \"relu\"}," CONV(
                          4, "[3, 2]") ", \"padding\": [1, 0]}, {\"type\": \"flatten\"}, "
                                       "{\"type\": \"dense\", \"units\": 3}],"
                                       "\"loss\": \"softmax_cross_entropy\"}",
     .B = 7,
     .input_grad = true,
     .max_fd = 60},
    // The direct kernels over chunks of 4 and 3 samples (8 -> 4, 3x3 padding 1 on 2x2: K = 72,
    // P = 4, 2368 bytes a sample): the forward's transposed weight is written once for chunks of
    // two sizes; the direct weight gradient's parts reduced beside the next chunk.
    {.json = IMG("chunked_direct", "[8, 2, 2]") CONV(
         4,
         "3") ", \"padding\": 1},"
              "{\"type\": \"relu\"}, {\"type\": \"flatten\"}, {\"type\": \"dense\", \"units\": 3}],"
              "\"loss\": \"softmax_cross_entropy\"}",
     .B = 7,
     .input_grad = true,
     .max_fd = 60},
};

// How many chunks conv layer 0 of json cuts batch B into under the current bound (from the
// columns of the first product it reports: N of NN and TN, K of NT).
static uint32_t chunks_of(vt *t, const char *json, uint32_t B) {
    vkt_model_desc m;
    VT_OK(t, vkt_model_parse(json, "chunked", &m));
    if (m.nlayers == 0) return 0;
    const vkt_layer_desc *l = &m.layers[0];
    vkt_mm_shape sh[VKT_LAYER_MAX_MATMULS];
    if (l->type->matmuls(l, B, true, sh) == 0) return 0;
    uint32_t P = l->out.dim[1] * l->out.dim[2];
    uint32_t per = (sh[0].form == VKT_MM_NT ? sh[0].K : sh[0].N) / P;
    vkt_model_free(&m);
    return (B + per - 1) / per;
}

// Two runs of one training step give bitwise the same gradients (every reduction has a fixed
// order: the products, the row sums, col2im's gather, the chunks in turn).
static void test_deterministic(vt *t, vkt_device *dev, vkt_ops *ops, const lc_case *c) {
    vkt_model_desc m;
    VT_OK(t, vkt_model_parse(c->json, "deterministic", &m));
    if (m.nlayers == 0) return;
    vkt_net_desc nd = {.model = &m,
                       .first_layer = 0,
                       .last_layer = m.nlayers,
                       .max_batch = c->B,
                       .slots = 1,
                       .optim = vkt_optim_default(VKT_OPTIM_SGD)};
    vkt_net *net = NULL;
    vkt_cmd *cmd = NULL;
    VT_OK(t, vkt_net_create(dev, ops, &nd, &net));
    if (net) VT_OK(t, vkt_cmd_create(dev, &cmd));
    uint64_t nin = (uint64_t)c->B * m.input_features, total = 0;
    for (int i = 0; net && i < vkt_net_tensor_count(net); i++)
        total += vkt_net_get_tensor(net, i)->count;
    float *x = malloc(nin * 4), *g[2] = {malloc((total + nin) * 4), malloc((total + nin) * 4)};
    uint32_t *labels = malloc(c->B * 4);
    vt_fill_uniform(x, nin, 99, -1, 1);
    for (uint32_t b = 0; b < c->B; b++)
        labels[b] = b % m.output_features;
    if (!net || !cmd) goto out;
    VT_OK(t, vkt_net_init(net, 5));
    vkt_view in = vkt_net_input(net, 0), tg = vkt_net_targets(net, 0),
             gi = vkt_net_input_grad(net, 0);
    VT_OK(t, vkt_buffer_write(in.buffer, in.offset, x, nin * 4));
    VT_OK(t, vkt_buffer_write(tg.buffer, tg.offset, labels, c->B * 4ull));
    for (int run = 0; run < 2; run++) {
        VT_OK(t, vkt_cmd_begin(cmd, false));
        vkt_net_record_zero_grads(net, cmd);
        vkt_net_record_forward(net, cmd, 0, c->B);
        vkt_net_record_loss(net, cmd, 0, c->B, 1.0f / (float)c->B);
        vkt_net_record_backward(net, cmd, 0, c->B, true);
        if (!vt_run(t, cmd, ops, "a training step", vkt_device_label(dev))) goto out;
        uint64_t at = 0;
        for (int i = 0; i < vkt_net_tensor_count(net); i++) {
            VT_OK(t, vkt_net_read_tensor(net, VKT_STORE_GRAD, i, g[run] + at));
            at += vkt_net_get_tensor(net, i)->count;
        }
        VT_OK(t, vkt_buffer_read(gi.buffer, gi.offset, g[run] + at, nin * 4));
    }
    VT_CHECK(t, memcmp(g[0], g[1], (total + nin) * 4) == 0,
             "%s on %s: two runs of the backward differ", m.name, vkt_device_label(dev));
out:
    free(x);
    free(g[0]);
    free(g[1]);
    free(labels);
    vkt_cmd_destroy(cmd);
    vkt_net_destroy(net);
    vkt_model_free(&m);
}

static void test_networks(vt *t, vkt_ops *const *ops) {
    for (size_t i = 0; i < sizeof CASES / sizeof *CASES; i++)
        lc_run(t, ops, &CASES[i]);
    // A bound of 2.5 samples' scratch for the first conv (3 -> 5, 3x3 on 7x7 with stride 2:
    // K = 27, P = 16, 4 * (2K + OC) * P = 3776 bytes a sample): chunks of 2, 2, 2, 1; the second
    // (5 -> 4, [3, 2] on 4x4 with padding [1, 0]: K = 30, P = 12, 3072 bytes a sample) takes
    // 3, 3, 1.
    vkt_conv_set_chunk_bytes(9500);
    uint32_t n = chunks_of(t, CHUNKED[0].json, CHUNKED[0].B);
    VT_CHECK(t, n == 4, "the forced bound cuts batch 7 into %u chunks, expected 4", n);
    n = chunks_of(t, CHUNKED[1].json, CHUNKED[1].B);
    VT_CHECK(t, n == 2,
             "the forced bound cuts batch 7 of chunked_direct into %u chunks, expected 2", n);
    for (size_t i = 0; i < sizeof CHUNKED / sizeof *CHUNKED; i++)
        lc_run(t, ops, &CHUNKED[i]);
    for (int d = 0; d < t->ndev && ops[d]; d++) {
        test_deterministic(t, t->dev[d], ops[d], &CHUNKED[0]);
        test_deterministic(t, t->dev[d], ops[d], &CHUNKED[1]);
    }
    vkt_conv_set_chunk_bytes(0);
    n = chunks_of(t, CHUNKED[0].json, CHUNKED[0].B);
    VT_CHECK(t, n == 1, "the default bound makes %u chunks of batch 7", n);
    for (size_t i = 0; i < sizeof SPLIT / sizeof *SPLIT; i++)
        lc_run(t, ops, &SPLIT[i]);
    VT_CHECK(t,
             vkt_conv_dw_parts(6, 9, true, 8 * 144) == 2 &&
                 vkt_conv_dw_parts(3, 18, true, 8 * 144) == 2,
             "the split cases split");
    vkt_conv_set_chunk_bytes(5 * 22528 + 100);
    n = chunks_of(t, SPLIT_CHUNKED.json, SPLIT_CHUNKED.B);
    VT_CHECK(t, n == 3, "the forced bound cuts batch 11 into %u chunks, expected 3", n);
    VT_CHECK(t, vkt_conv_dw_parts(4, 9, true, 1024) == 2 && vkt_conv_dw_parts(4, 9, true, 768) == 0,
             "chunks of 4 samples split, of 3 do not");
    lc_run(t, ops, &SPLIT_CHUNKED);
    for (int d = 0; d < t->ndev && ops[d]; d++)
        test_deterministic(t, t->dev[d], ops[d], &SPLIT_CHUNKED);
    vkt_conv_set_chunk_bytes(0);
}

int main(void) {
    vt tv, *t = &tv;
    if (vt_init(t, "test_conv")) return 1;
    test_parse(t);
    vkt_ops *ops[VT_MAX_DEVICES] = {0};
    for (int d = 0; d < t->ndev; d++) {
        dctx c = {.t = t, .dev = t->dev[d], .name = vkt_device_label(t->dev[d])};
        VT_OK(t, vkt_ops_create(c.dev, &c.ops));
        VT_OK(t, vkt_cmd_create(c.dev, &c.cmd));
        if (c.ops && c.cmd) test_kernels(&c);
        vkt_cmd_destroy(c.cmd);
        ops[d] = c.ops;
    }
    test_networks(t, ops);
    for (int d = 0; d < t->ndev; d++)
        vkt_ops_destroy(ops[d]);
    return vt_finish(t);
}
