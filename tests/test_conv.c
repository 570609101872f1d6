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
    vkt_mm_shape sh[4];
    int n = l->type->matmuls(l, 6, true, sh);
    VT_CHECK(t,
             n == 3 && sh[0].form == VKT_MM_NN && sh[0].M == 5 && sh[0].N == 96 && sh[0].K == 27 &&
                 sh[1].form == VKT_MM_NT && sh[1].M == 5 && sh[1].N == 27 && sh[1].K == 96 &&
                 sh[2].form == VKT_MM_TN && sh[2].M == 27 && sh[2].N == 96 && sh[2].K == 5,
             "products at batch 6");
    VT_CHECK(t, l->type->matmuls(l, 6, false, sh) == 2, "no input-gradient product without dx");
    char buf[512];
    VT_OK(t, vkt_model_torch(&m, buf, sizeof buf));
    VT_CHECK(t,
             has(buf, "nn.Conv2d(3, 5, kernel_size=(3, 3), stride=(2, 2), padding=(1, 1), "
                      "bias=True)"),
             "torch: %s", buf);
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
    // Odd everything: a stride larger than the kernel (inputs no column reads get dx = 0).
    {.json = IMG("sparse", "[3, 7, 5]") CONV(2, "1") ", \"stride\": [3, 2]},"
                                                     "{\"type\": \"flatten\"}, {\"type\": "
                                                     "\"dense\", \"units\": 3}], \"loss\": "
                                                     "\"softmax_cross_entropy\"}",
     .B = 2,
     .input_grad = true},
};

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
};

// How many chunks conv layer 0 of json cuts batch B into under the current bound (from the
// products it reports).
static uint32_t chunks_of(vt *t, const char *json, uint32_t B) {
    vkt_model_desc m;
    VT_OK(t, vkt_model_parse(json, "chunked", &m));
    if (m.nlayers == 0) return 0;
    const vkt_layer_desc *l = &m.layers[0];
    vkt_mm_shape sh[4];
    l->type->matmuls(l, B, false, sh);
    uint32_t P = l->out.dim[1] * l->out.dim[2], per = sh[0].N / P;
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
    for (size_t i = 0; i < sizeof CHUNKED / sizeof *CHUNKED; i++)
        lc_run(t, ops, &CHUNKED[i]);
    for (int d = 0; d < t->ndev && ops[d]; d++)
        test_deterministic(t, t->dev[d], ops[d], &CHUNKED[0]);
    vkt_conv_set_chunk_bytes(0);
    n = chunks_of(t, CHUNKED[0].json, CHUNKED[0].B);
    VT_CHECK(t, n == 1, "the default bound makes %u chunks of batch 7", n);
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
