// test_attention.c: the causal_self_attention layer kind (engine/nn/layers/attention.c) and its
// fused core (engine/ops/attn_ops.c, shaders/attn_*.comp), on every device.
//  1. The core's ops against a double reference with explicit T x T scores: o and the rows'
//     logsumexp (forward), delta = rowsum(do * o), and dqkv (backward) from random qkv and do, at
//     T = 128 with D = 5 (4 heads), T = 257 with D = 7 (several key tiles, the last one
//     partial; the tile the device uses is printed), and C = 768 with 12 heads (D = 64, GPT-2
//     small's head) at T = 64; the backward twice gives the same bits (no atomics).
//  2. The layer in small models through tests/layer_check.h (the double reference against
//     central finite differences, the device's training and evaluation forwards, loss, parameter
//     and input gradients against the reference, fused and not): [T, C] -> attention -> flatten
//     -> dense -> softmax cross-entropy, and attention -> MSE, at T = 1, 7, 33 and 128, heads 1
//     and 3, head sizes 5 and 7 (not multiples of 4), 4 and 3.
//  3. Parsing: the tensors (names, shapes, PyTorch's initial bounds, zero biases after
//     vkt_net_init), the torch text, the products and costs, and the messages for heads that do
//     not divide C, an input that is not [T, C], dropout other than 0, a missing heads key.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "attn_ops.h"
#include "layer.h"
#include "layer_check.h"
#include "model.h"
#include "network.h"
#include "test_util.h"

static bool has(const char *msg, const char *needle) { return strstr(msg, needle) != NULL; }

// ---------------------------------------------------------------------------------------------
// 1. The core against a double reference

typedef struct core_case {
    uint32_t B, T, C, H;
} core_case;

// Forward and backward of the core on double qkv[B*T, 3C] and do[B*T, C]: o[B*T, C],
// lse[B, H, T], delta[B, H, T], dqkv[B*T, 3C] (explicit scores, softmax and its backward).
static void ref_core(const core_case *c, const double *qkv, const double *dout, double *o,
                     double *lse, double *delta, double *dqkv) {
    uint32_t T = c->T, C = c->C, H = c->H, D = C / H;
    uint64_t C3 = 3ull * C;
    double scale = 1.0 / sqrt((double)D), *P = malloc(sizeof(double) * T),
           *dP = malloc(sizeof(double) * T);
    memset(dqkv, 0, sizeof(double) * c->B * T * C3);
    for (uint32_t b = 0; b < c->B; b++)
        for (uint32_t h = 0; h < H; h++)
            for (uint32_t i = 0; i < T; i++) {
                const double *q = qkv + ((uint64_t)b * T + i) * C3 + h * D;
                double m = -INFINITY, sum = 0;
                for (uint32_t j = 0; j <= i; j++) {
                    const double *k = qkv + ((uint64_t)b * T + j) * C3 + C + h * D;
                    double s = 0;
                    for (uint32_t e = 0; e < D; e++)
                        s += q[e] * k[e];
                    P[j] = s * scale;
                    m = fmax(m, P[j]);
                }
                for (uint32_t j = 0; j <= i; j++)
                    sum += exp(P[j] - m);
                uint64_t bht = ((uint64_t)b * H + h) * T + i;
                lse[bht] = m + log(sum);
                double *oi = o + ((uint64_t)b * T + i) * C + h * D;
                const double *gi = dout + ((uint64_t)b * T + i) * C + h * D;
                for (uint32_t e = 0; e < D; e++)
                    oi[e] = 0;
                for (uint32_t j = 0; j <= i; j++) {
                    P[j] = exp(P[j] - lse[bht]);
                    const double *v = qkv + ((uint64_t)b * T + j) * C3 + 2 * C + h * D;
                    for (uint32_t e = 0; e < D; e++)
                        oi[e] += P[j] * v[e];
                }
                double dl = 0;
                for (uint32_t e = 0; e < D; e++)
                    dl += oi[e] * gi[e];
                delta[bht] = dl;
                double *dq = dqkv + ((uint64_t)b * T + i) * C3 + h * D;
                for (uint32_t j = 0; j <= i; j++) {
                    const double *k = qkv + ((uint64_t)b * T + j) * C3 + C + h * D;
                    const double *v = k + C;
                    double *dk = dqkv + ((uint64_t)b * T + j) * C3 + C + h * D, *dv = dk + C;
                    dP[j] = 0;
                    for (uint32_t e = 0; e < D; e++) {
                        dP[j] += gi[e] * v[e];
                        dv[e] += P[j] * gi[e];
                    }
                    double ds = P[j] * (dP[j] - dl) * scale;
                    for (uint32_t e = 0; e < D; e++) {
                        dq[e] += ds * k[e];
                        dk[e] += ds * q[e];
                    }
                }
            }
    free(P);
    free(dP);
}

static vkt_buffer *buf_new(vt *t, vkt_device *dev, uint64_t bytes, const float *init,
                           const char *name) {
    vkt_buffer *b = NULL;
    VT_OK(t, vkt_buffer_create(dev, bytes, name, &b));
    if (b && init) VT_OK(t, vkt_buffer_write(b, 0, init, bytes));
    return b;
}

static void compare_buf(vt *t, vkt_buffer *b, const double *ref, uint64_t n, double atol,
                        double rtol, const char *what) {
    float *got = malloc(n * 4);
    VT_OK(t, vkt_buffer_read(b, 0, got, n * 4));
    VT_CHECK(t, vt_compare(what, got, ref, n, atol, rtol) == 0, "%s", what);
    free(got);
}

// Returns whether the case ran with texel reads.
static bool test_core_case(vt *t, vkt_device *dev, vkt_ops *ops, const core_case *c) {
    uint32_t T = c->T, C = c->C, H = c->H;
    uint64_t nqkv = 3ull * c->B * T * C, nrow = (uint64_t)c->B * T * C,
             nbht = (uint64_t)c->B * H * T;
    float *qkv = malloc(nqkv * 4), *dout = malloc(nrow * 4);
    // Scores of a few units: softmaxes that are neither flat nor one-hot.
    vt_fill_uniform(qkv, nqkv, 11 + T, -1.5f, 1.5f);
    vt_fill_uniform(dout, nrow, 12 + T, -1.0f, 1.0f);
    double *dq = malloc(nqkv * 8), *dd = malloc(nrow * 8), *o = malloc(nrow * 8),
           *lse = malloc(nbht * 8), *delta = malloc(nbht * 8), *dqkv = malloc(nqkv * 8);
    for (uint64_t k = 0; k < nqkv; k++)
        dq[k] = qkv[k];
    for (uint64_t k = 0; k < nrow; k++)
        dd[k] = dout[k];
    ref_core(c, dq, dd, o, lse, delta, dqkv);

    char where[200], what[300];
    vkt_attn_tile tile = vkt_attn_tile_for(ops, T, C, H);
    snprintf(where, sizeof where,
             "core B %u T %u C %u heads %u (D %u; %s, %u rows per workgroup, %u/%u per invocation, "
             "blocks of %u/%u) on %s",
             c->B, T, C, H, C / H, tile.texel ? "texels" : "shared memory", tile.rows, tile.fwd_r,
             tile.bwd_r, tile.fwd_tile, tile.bwd_tile, vkt_device_label(dev));
    printf("  %s\n", where);
    vkt_buffer *bq = buf_new(t, dev, nqkv * 4, qkv, "qkv"),
               *bo = buf_new(t, dev, nrow * 4, NULL, "o"),
               *bl = buf_new(t, dev, nbht * 4, NULL, "lse"),
               *bg = buf_new(t, dev, nrow * 4, dout, "do"),
               *bd = buf_new(t, dev, nbht * 16, NULL, "stats"),
               *bdq = buf_new(t, dev, nqkv * 4, NULL, "dqkv"),
               *bdq2 = buf_new(t, dev, nqkv * 4, NULL, "dqkv again");
    vkt_cmd *cmd = NULL;
    VT_OK(t, vkt_cmd_create(dev, &cmd));
    if (!bq || !bo || !bl || !bg || !bd || !bdq || !bdq2 || !cmd) goto out;
    VT_OK(t, vkt_cmd_begin(cmd, false));
    vkt_op_attn_forward(cmd, ops, vkt_buffer_whole(bo), vkt_buffer_whole(bl), vkt_buffer_whole(bq),
                        c->B, T, C, H, "attn fwd");
    vkt_cmd_barrier(cmd);
    vkt_op_attn_stats(cmd, ops, vkt_buffer_whole(bd), vkt_buffer_whole(bo), vkt_buffer_whole(bg),
                      vkt_buffer_whole(bl), c->B, T, C, H, "attn stats");
    vkt_cmd_barrier(cmd);
    for (int k = 0; k < 2; k++)
        vkt_op_attn_backward(cmd, ops, vkt_buffer_whole(k ? bdq2 : bdq), vkt_buffer_whole(bq),
                             vkt_buffer_whole(bg), vkt_buffer_whole(bd), c->B, T, C, H, "attn bwd");
    if (!vt_run(t, cmd, ops, "attention core", where)) goto out;
    // fp32 sums over up to T keys of terms of a few units.
    snprintf(what, sizeof what, "%s: o", where);
    compare_buf(t, bo, o, nrow, 2e-5, 1e-4, what);
    snprintf(what, sizeof what, "%s: lse", where);
    compare_buf(t, bl, lse, nbht, 2e-5, 1e-5, what);
    // The stats rows: (lse, delta, 0, 0).
    double *stats = calloc(nbht * 4, sizeof(double));
    for (uint64_t k = 0; k < nbht; k++) {
        stats[4 * k] = lse[k];
        stats[4 * k + 1] = delta[k];
    }
    snprintf(what, sizeof what, "%s: stats (lse, delta)", where);
    compare_buf(t, bd, stats, nbht * 4, 2e-5, 1e-4, what);
    free(stats);
    snprintf(what, sizeof what, "%s: dqkv", where);
    compare_buf(t, bdq, dqkv, nqkv, 5e-5, 2e-4, what);
    float *g1 = malloc(nqkv * 4), *g2 = malloc(nqkv * 4);
    VT_OK(t, vkt_buffer_read(bdq, 0, g1, nqkv * 4));
    VT_OK(t, vkt_buffer_read(bdq2, 0, g2, nqkv * 4));
    VT_CHECK(t, memcmp(g1, g2, nqkv * 4) == 0, "%s: two backward passes differ", where);
    free(g1);
    free(g2);
out:
    vkt_cmd_destroy(cmd);
    vkt_buffer_destroy(bdq2);
    vkt_buffer_destroy(bdq);
    vkt_buffer_destroy(bd);
    vkt_buffer_destroy(bg);
    vkt_buffer_destroy(bl);
    vkt_buffer_destroy(bo);
    vkt_buffer_destroy(bq);
    free(qkv);
    free(dout);
    free(dq);
    free(dd);
    free(o);
    free(lse);
    free(delta);
    free(dqkv);
    return tile.texel;
}

static void test_core(vt *t, vkt_ops *const *ops) {
    static const core_case CASES[] = {
        {2, 128, 20, 4},  // D = 5: shared memory everywhere
        {1, 257, 14, 2},  // D = 7, several blocks of keys, the last partial
        {2, 128, 16, 4},  // D = 4: texels on lavapipe
        {1, 257, 24, 3},  // D = 8, texels, the last block partial
        {2, 64, 768, 12}, // D = 64: GPT-2 small's heads
        {3, 1, 6, 3},     // one position
    };
    for (int d = 0; d < t->ndev && ops[d]; d++) {
        int texel = 0;
        for (size_t i = 0; i < sizeof CASES / sizeof *CASES; i++)
            texel += test_core_case(t, t->dev[d], ops[d], &CASES[i]);
        // Both ways of reading the streamed rows are checked on lavapipe.
        if (vkt_device_get_info(t->dev[d])->driver_id == VT_DRIVER_ID_LLVMPIPE)
            VT_CHECK(t, texel > 0 && texel < (int)(sizeof CASES / sizeof *CASES),
                     "%s: %d of the core cases read texels", vkt_device_label(t->dev[d]), texel);
    }
}

// ---------------------------------------------------------------------------------------------
// 2. The layer in models

#define SEQ(T, C) "{\"input\": [" #T ", " #C "], \"layers\": ["
#define ATTN(h) "{\"type\": \"causal_self_attention\", \"heads\": " #h "}"
#define HEAD(n) ", {\"type\": \"flatten\"}, {\"type\": \"dense\", \"units\": " #n "}]"
#define XENT ", \"loss\": \"softmax_cross_entropy\"}"
#define MSE ", \"loss\": \"mse\"}"

static void test_models(vt *t, vkt_ops *const *ops) {
    static const lc_case CASES[] = {
        // D = 5, 3 heads, into a classifier.
        {.json = SEQ(7, 15) ATTN(3) HEAD(4) XENT, .B = 3, .input_grad = true},
        // One position: the softmax is 1 and o = v.
        {.json = SEQ(1, 7) ATTN(1) HEAD(3) MSE, .B = 2, .input_grad = true},
        // D = 7 with one head, MSE on the attention's own output.
        {.json = SEQ(33, 7) ATTN(1) "]" MSE, .B = 2, .input_grad = true, .max_fd = 120},
        // D = 4, 3 heads, T = 33 into a classifier, two attention layers in a row.
        {.json = SEQ(33, 12) ATTN(3) ", " ATTN(3) HEAD(5) XENT,
         .B = 2,
         .input_grad = true,
         .max_fd = 80},
        // T = 128 (several blocks of keys on every device), D = 4 (texels on lavapipe).
        {.json = SEQ(128, 8) ATTN(2) HEAD(3) XENT, .B = 2, .input_grad = true, .max_fd = 40},
    };
    for (size_t i = 0; i < sizeof CASES / sizeof *CASES; i++)
        lc_run(t, ops, &CASES[i]);
}

// ---------------------------------------------------------------------------------------------
// 3. Parsing, tensors, products

static void expect_error(vt *t, const char *json, const char *needle1, const char *needle2) {
    vkt_model_desc m;
    vkt_status s = vkt_model_parse(json, "bad.json", &m);
    const char *msg = vkt_error();
    VT_CHECK(t,
             s == VKT_ERR_FORMAT && has(msg, "bad.json") && has(msg, needle1) && has(msg, needle2),
             "%s: expected an error with \"%s\" and \"%s\", got %s: %s", json, needle1, needle2,
             vkt_status_name(s), msg);
    if (s == VKT_OK) vkt_model_free(&m);
}

static void test_parse(vt *t) {
    vkt_model_desc m;
    VT_OK(t, vkt_model_parse(SEQ(9, 15) ATTN(3) HEAD(2) XENT, "ok.json", &m));
    if (t->failures) return;
    char torch[512];
    VT_OK(t, vkt_model_torch(&m, torch, sizeof torch));
    VT_CHECK(t, has(torch, "CausalSelfAttention(15, 3, dropout=0.0, batch_first=True)"),
             "torch text: %s", torch);
    VT_CHECK(
        t, m.layers[0].out.ndim == 2 && m.layers[0].out.dim[0] == 9 && m.layers[0].out.dim[1] == 15,
        "output shape [T, C]");
    vkt_net_tensor ts[8];
    int n = vkt_model_tensors(&m, 0, 1, ts, 8);
    static const char *const names[] = {"0.in_proj_weight", "0.in_proj_bias", "0.out_proj.weight",
                                        "0.out_proj.bias"};
    static const uint64_t counts[] = {45 * 15, 45, 15 * 15, 15};
    VT_CHECK(t, n == 4, "4 tensors, found %d", n);
    for (int i = 0; i < n && i < 4; i++)
        VT_CHECK(t, strcmp(ts[i].name, names[i]) == 0 && ts[i].count == counts[i],
                 "tensor %d: %s [%llu], expected %s [%llu]", i, ts[i].name,
                 (unsigned long long)ts[i].count, names[i], (unsigned long long)counts[i]);
    VT_CHECK(t,
             ts[0].ndim == 2 && ts[0].shape[0] == 45 && ts[0].shape[1] == 15 && ts[2].ndim == 2 &&
                 ts[2].shape[0] == 15 && ts[2].shape[1] == 15,
             "weight shapes");
    // PyTorch's initialisation: xavier_uniform on [3C, C] (bound sqrt(6 / 4C)), nn.Linear's bound
    // 1/sqrt(C) on out_proj.weight, zero biases.
    double bound[4] = {sqrt(6.0 / 60.0), 0.0, 1.0 / sqrt(15.0), 0.0};
    for (int i = 0; i < 4; i++) {
        vkt_param_spec ps = vkt_tensor_spec(&ts[i]);
        VT_CHECK(t,
                 fabs(ps.a - bound[i]) < 1e-12 &&
                     ps.init == (bound[i] > 0 ? VKT_INIT_UNIFORM : VKT_INIT_CONST),
                 "%s: init %d bound %g, expected %g", ts[i].name, (int)ps.init, ps.a, bound[i]);
    }
    if (t->ndev > 0) {
        vkt_net_desc nd = {.model = &m,
                           .first_layer = 0,
                           .last_layer = m.nlayers,
                           .max_batch = 2,
                           .slots = 1,
                           .optim = vkt_optim_default(VKT_OPTIM_SGD)};
        vkt_ops *ops = NULL;
        vkt_net *net = NULL;
        VT_OK(t, vkt_ops_create(t->dev[0], &ops));
        if (ops) VT_OK(t, vkt_net_create(t->dev[0], ops, &nd, &net));
        if (net) {
            VT_OK(t, vkt_net_init(net, 7));
            for (int i = 0; i < 4; i++) {
                const vkt_net_tensor *te = vkt_net_get_tensor(net, i);
                float *v = malloc(te->count * 4);
                VT_OK(t, vkt_net_read_tensor(net, VKT_STORE_PARAM, i, v));
                double most = 0;
                for (uint64_t k = 0; k < te->count; k++)
                    most = fmax(most, fabs(v[k]));
                // The largest of hundreds of uniform draws is near the bound; biases are 0.
                VT_CHECK(t, bound[i] > 0 ? most <= bound[i] && most > 0.9 * bound[i] : most == 0,
                         "%s after vkt_net_init: max |v| %g, bound %g", te->name, most, bound[i]);
                free(v);
            }
        }
        vkt_net_destroy(net);
        vkt_ops_destroy(ops);
    }
    // Products and costs at B = 4 (rows 36): all six the layer records (forward NT in and out,
    // the weight gradients TN, the input gradients NN), five without dx.
    vkt_mm_shape mm[VKT_LAYER_MAX_MATMULS];
    int k = m.layers[0].type->matmuls(&m.layers[0], 4, true, mm);
    VT_CHECK(t,
             k == 6 && mm[0].form == VKT_MM_NT && mm[0].M == 36 && mm[0].N == 45 && mm[0].K == 15 &&
                 mm[1].form == VKT_MM_NT && mm[1].M == 36 && mm[1].N == 15 && mm[1].K == 15 &&
                 mm[2].form == VKT_MM_TN && mm[2].M == 45 && mm[2].N == 15 && mm[2].K == 36 &&
                 mm[3].form == VKT_MM_TN && mm[3].M == 15 && mm[3].N == 15 && mm[3].K == 36 &&
                 mm[4].form == VKT_MM_NN && mm[4].M == 36 && mm[4].N == 15 && mm[4].K == 15 &&
                 mm[5].form == VKT_MM_NN && mm[5].M == 36 && mm[5].N == 15 && mm[5].K == 45,
             "the layer's products");
    VT_CHECK(t, m.layers[0].type->matmuls(&m.layers[0], 4, false, mm) == 5,
             "no input-gradient product without dx");
    vkt_layer_cost cost = {0};
    m.layers[0].type->cost(&m.layers[0], &cost);
    double T = 9, C = 15;
    VT_CHECK(t, fabs(cost.fwd_flops - (8 * T * C * C + 2 * T * T * C)) < 1e-6, "forward FLOPs %g",
             cost.fwd_flops);
    VT_CHECK(t, cost.bwd_flops > 2 * cost.fwd_flops - 1e-6 && cost.saved_floats >= 5 * T * C,
             "backward FLOPs %g, saved %g", cost.bwd_flops, cost.saved_floats);
    vkt_model_free(&m);

    expect_error(t, SEQ(9, 15) ATTN(4) HEAD(2) XENT, "layers[0].heads",
                 "4 heads do not divide the embedding width C = 15");
    expect_error(t, "{\"input\": [135], \"layers\": [" ATTN(3) "]" MSE, "layers[0]",
                 "takes a sequence [T, C] (2 dimensions per sample), found [135]");
    expect_error(t, "{\"input\": [2, 9, 15], \"layers\": [" ATTN(3) "]" MSE, "layers[0]",
                 "found [2, 9, 15]");
    expect_error(t,
                 SEQ(9, 15) "{\"type\": \"causal_self_attention\", \"heads\": 3, \"dropout\": "
                            "0.1}" HEAD(2) XENT,
                 "layers[0].dropout", "attention dropout is not implemented");
    expect_error(t, SEQ(9, 15) "{\"type\": \"causal_self_attention\"}" HEAD(2) XENT,
                 "layers[0].heads", "missing");
    expect_error(t, SEQ(9, 15) ATTN(0) HEAD(2) XENT, "layers[0].heads", "heads");
    expect_error(t, SEQ(2, 2048) ATTN(1) HEAD(2) XENT, "layers[0].heads",
                 "the head size C / heads = 2048 / 1 = 2048 is over 1024");
    expect_error(
        t,
        SEQ(9, 15) "{\"type\": \"causal_self_attention\", \"heads\": 3, \"head\": 3}" HEAD(2) XENT,
        "layers[0]", "head");
    // dropout 0 is accepted.
    VT_OK(t, vkt_model_parse(SEQ(9, 15) "{\"type\": \"causal_self_attention\", \"heads\": 3, "
                                        "\"dropout\": 0}" HEAD(2) XENT,
                             "ok.json", &m));
    if (!t->failures) vkt_model_free(&m);
}

int main(void) {
    vt tv, *t = &tv;
    if (vt_init(t, "test_attention")) return 1;
    vkt_ops *ops[VT_MAX_DEVICES] = {0};
    for (int d = 0; d < t->ndev; d++)
        VT_OK(t, vkt_ops_create(t->dev[d], &ops[d]));
    test_parse(t);
    test_core(t, ops);
    test_models(t, ops);
    for (int d = 0; d < t->ndev; d++)
        vkt_ops_destroy(ops[d]);
    return vt_finish(t);
}
