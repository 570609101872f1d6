// test_norm.c: the normalisation kinds batchnorm2d and layernorm (engine/nn/layers/) and their
// kernels (engine/ops/norm_ops.c, shaders/norm_*.comp), on every device.
//  1. Parsing: defaults and keys, shapes, the tensors (batchnorm's buffers with their state and
//     int64 flags, in state_dict order), parameter counts that leave the buffers out, the torch
//     modules; bad momentum and eps values and batchnorm2d on an input that is not [C, H, W]
//     rejected with messages that name the JSON path and what was found.
//  2. The ops against numbers PyTorch (torch.nn.BatchNorm2d / LayerNorm in float64) computed once
//     for fixed inputs: batchnorm's training output, running statistics and num_batches_tracked
//     after one step, its evaluation output from them and its backward; layernorm's output and
//     backward. Then at 128 x 28 x 28 per channel (100352 values, several parts of the batch per
//     channel) on data far from zero mean, and layernorm on 4096 rows of 96 (a team of lanes per
//     row), against the double-precision formulas; the same run twice gives the same bits
//     (deterministic reductions); and the same with the storage-buffer range forced small, so
//     that every pass runs in slices. Then batchnorm on shapes of the kernels' other paths
//     (planes in several segments, odd planes whose vec4s start anywhere, planes of one float,
//     parts of many samples), whole and in slices, twice, against the formulas.
//  3. tests/layer_check.c on small models around them (the reference against finite differences,
//     the devices against the reference in training and evaluation, the running statistics after
//     a training forward): batchnorm2d on [3, 5, 5] and [5, 7, 7] at batches 1 to 6 with non-
//     default momentum and eps, after a dense layer and before relu/flatten/dense, under softmax
//     cross-entropy and MSE; layernorm on [7], on [3, 6] (rows over two dimensions), after a dense
//     layer, on rows of 40; and again with the range forced small (slices and several parts).
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "layer.h"
#include "layer_check.h"
#include "norm_ops.h"
#include "test_util.h"

static bool has(const char *msg, const char *needle) { return strstr(msg, needle) != NULL; }

// ---------------------------------------------------------------------------------------------
// 1. Parsing

static void expect_error(vt *t, const char *in, const char *layer, const char *const *needles) {
    char json[1024];
    snprintf(json, sizeof json,
             "{\"name\": \"n\", \"input\": %s, \"layers\": [{\"type\": \"dense\", \"units\": 3}, "
             "%s, {\"type\": \"flatten\"}], \"loss\": \"mse\"}",
             in, layer);
    vkt_model_desc m;
    vkt_status s = vkt_model_parse(json, "norm.json", &m);
    const char *msg = vkt_error();
    bool ok = s == VKT_ERR_FORMAT;
    for (int i = 0; ok && needles[i]; i++)
        ok = has(msg, needles[i]);
    VT_CHECK(t, ok, "%s\n    gave status %d and \"%s\"", json, s, msg);
    if (s == VKT_OK) vkt_model_free(&m);
}

static void test_parse(vt *t) {
    vkt_model_desc m;
    VT_OK(t, vkt_model_parse("{\"name\": \"p\", \"input\": [3, 5, 4], \"layers\": ["
                             "{\"type\": \"batchnorm2d\", \"momentum\": 0.3, \"eps\": 0.001}, "
                             "{\"type\": \"batchnorm2d\"}, {\"type\": \"dense\", \"units\": 6}, "
                             "{\"type\": \"layernorm\"}, {\"type\": \"layernorm\", \"eps\": 0.01}],"
                             " \"loss\": \"mse\"}",
                             "norm.json", &m));
    if (t->failures) return;
    const vkt_layer_desc *bn = &m.layers[0], *bn0 = &m.layers[1], *ln = &m.layers[3];
    VT_CHECK(t, bn->momentum == 0.3f && bn->eps == 0.001f, "keys as parsed: %g %g",
             (double)bn->momentum, (double)bn->eps);
    VT_CHECK(t, bn0->momentum == 0.1f && bn0->eps == 1e-5f && ln->eps == 1e-5f,
             "PyTorch's defaults");
    VT_CHECK(t, m.layers[4].eps == 0.01f, "layernorm eps");
    VT_CHECK(t,
             bn->out.ndim == 3 && bn->out.dim[0] == 3 && bn->out.dim[1] == 5 &&
                 bn->out.dim[2] == 4 && ln->out.ndim == 3 && ln->out.dim[2] == 6,
             "the shapes are kept");
    // Tensors in state_dict order, buffers flagged.
    vkt_net_tensor ts[16];
    int nt = vkt_model_tensors(&m, 0, m.nlayers, ts, 16);
    static const char *const names[] = {
        "0.weight", "0.bias", "0.running_mean", "0.running_var", "0.num_batches_tracked",
        "1.weight", "1.bias", "1.running_mean", "1.running_var", "1.num_batches_tracked",
        "2.weight", "2.bias", "3.weight",       "3.bias",        "4.weight",
        "4.bias"};
    VT_CHECK(t, nt == 16, "%d tensors", nt);
    for (int i = 0; i < nt && i < 16; i++) {
        VT_CHECK(t, strcmp(ts[i].name, names[i]) == 0, "tensor %d is %s, expected %s", i,
                 ts[i].name, names[i]);
        bool buffer = i < 10 && i % 5 >= 2;
        VT_CHECK(t, ts[i].state == buffer, "%s: state %d", ts[i].name, ts[i].state);
        VT_CHECK(t, ts[i].int64 == (i == 4 || i == 9), "%s: int64 %d", ts[i].name, ts[i].int64);
        uint64_t count = i < 10 ? (i % 5 == 4 ? 1 : 3) : (i < 12 ? (i == 10 ? 24 : 6) : 6);
        VT_CHECK(t,
                 ts[i].count == count && ts[i].ndim == (i < 10 && i % 5 == 4 ? 0
                                                        : i == 10            ? 2
                                                                             : 1),
                 "%s: %llu elements, %d dims", ts[i].name, (unsigned long long)ts[i].count,
                 ts[i].ndim);
        vkt_param_spec ps = vkt_tensor_spec(&ts[i]);
        double init = (i < 10 && (i % 5 == 0 || i % 5 == 3)) || i == 12 || i == 14 ? 1.0 : 0.0;
        if (i != 10 && i != 11)
            VT_CHECK(t, ps.init == VKT_INIT_CONST && ps.a == init, "%s: initialised to %g",
                     ts[i].name, init);
    }
    // Trained parameters only: 2 x (3 + 3) + 4*6 + 6 + 2 x (6 + 6).
    VT_CHECK(t, vkt_model_param_count(&m) == 12 + 30 + 24, "%llu parameters",
             (unsigned long long)vkt_model_param_count(&m));
    char torch[1024];
    VT_OK(t, vkt_model_torch(&m, torch, sizeof torch));
    VT_CHECK(t,
             has(torch, "nn.BatchNorm2d(3, eps=0.001, momentum=0.3), "
                        "nn.BatchNorm2d(3, eps=1e-05, momentum=0.1), ") &&
                 has(torch, "nn.LayerNorm(6, eps=1e-05), nn.LayerNorm(6, eps=0.01)"),
             "torch modules: %s", torch);
    vkt_layer_cost c = vkt_model_cost(&m, 0, 1);
    VT_CHECK(t, c.fwd_flops > 0 && c.bwd_flops > 0 && c.fwd_bytes > 0 && c.saved_floats == 60,
             "batchnorm2d's cost");
    vkt_model_free(&m);

    // Errors. The layer after a dense of 3 units: its input is [..., 3].
    expect_error(t, "[4]", "{\"type\": \"batchnorm2d\"}",
                 (const char *const[]){"norm.json: layers[1]", "[C, H, W]", "found [3]", NULL});
    expect_error(t, "[2, 4]", "{\"type\": \"batchnorm2d\"}",
                 (const char *const[]){"layers[1]", "[C, H, W]", "found [2, 3]", NULL});
    expect_error(t, "[1, 2, 2, 4]", "{\"type\": \"batchnorm2d\"}",
                 (const char *const[]){"layers[1]", "found [1, 2, 2, 3]", NULL});
    expect_error(
        t, "[2, 2, 4]", "{\"type\": \"batchnorm2d\", \"momentum\": 1.5}",
        (const char *const[]){"layers[1].momentum", "1.5 is out of range", "[0, 1]", NULL});
    expect_error(t, "[2, 2, 4]", "{\"type\": \"batchnorm2d\", \"momentum\": -0.1}",
                 (const char *const[]){"layers[1].momentum", "-0.1", "[0, 1]", NULL});
    expect_error(t, "[2, 2, 4]", "{\"type\": \"batchnorm2d\", \"momentum\": \"0.1\"}",
                 (const char *const[]){"layers[1].momentum", "expected a number", NULL});
    expect_error(t, "[2, 2, 4]", "{\"type\": \"batchnorm2d\", \"eps\": 0}",
                 (const char *const[]){"layers[1].eps", "0 is out of range", "(0, 1]", NULL});
    expect_error(t, "[2, 2, 4]", "{\"type\": \"batchnorm2d\", \"eps\": -1e-5}",
                 (const char *const[]){"layers[1].eps", "out of range", NULL});
    expect_error(t, "[2, 2, 4]", "{\"type\": \"batchnorm2d\", \"eps\": 1e-60}",
                 (const char *const[]){"layers[1].eps", "too small for a float", NULL});
    expect_error(t, "[2, 2, 4]", "{\"type\": \"batchnorm2d\", \"affine\": false}",
                 (const char *const[]){"layers[1].affine", "unknown key", "momentum, eps", NULL});
    expect_error(t, "[4]", "{\"type\": \"layernorm\", \"eps\": 2}",
                 (const char *const[]){"layers[1].eps", "2 is out of range", "(0, 1]", NULL});
    expect_error(t, "[4]", "{\"type\": \"layernorm\", \"eps\": [1]}",
                 (const char *const[]){"layers[1].eps", "expected a number", NULL});
    expect_error(t, "[4]", "{\"type\": \"layernorm\", \"momentum\": 0.1}",
                 (const char *const[]){"layers[1].momentum", "unknown key", NULL});
}

// ---------------------------------------------------------------------------------------------
// 2. The ops

// Numbers from torch 1.13 in float64 (tests/test_norm.c's inputs below): BatchNorm2d(3,
// eps=1e-3, momentum=0.3) with weight [0.5, 1.5, -0.7], bias [0.1, -0.2, 0.3], running_mean
// [0.2, -0.1, 0.05], running_var [1.5, 0.8, 1.0] on x[2, 3, 2, 3] = sin(0.37 i) * 2 + (i % 5) / 10,
// in train() with backward(dy = cos(0.11 i) - 0.2), then in eval(); LayerNorm(7, eps=1e-4) with
// weight 1 + j/10, bias j/20 - 0.1 on x[5, 7] = sin(0.29 i) * 1.5 + (i % 3) / 5, dy = cos(0.13 i).
static const double BN_Y_TRAIN[36] = {
    -1.141704908,  -0.5115545756, 0.04366800759, 0.4591762127,   0.6890930961,  0.3299306075,
    2.182226427,   1.589527918,   0.8079111992,  -0.03881055102, -1.483902637,  -2.072098426,
    0.9610856357,  0.9331445978,  0.6948371827,  0.6582805333,   0.08983297075, -0.5537054417,
    -0.3487487589, 0.2044402449,  0.2341453665,  0.460365629,    0.4801133027,  0.3010757751,
    1.840392345,   0.3905131924,  -0.4561630514, -1.23290785,    -1.816567417,  -2.110121148,
    1.166330508,   0.9242667883,  0.4941755164,  -0.07630109948, -0.720520353,  -0.9714268381};
static const double BN_RUNNING_MEAN[3] = {0.6266504477, -0.09868671746, -0.2288961734};
static const double BN_RUNNING_VAR[3] = {1.189311098, 0.9748438811, 0.9626723579};
static const double BN_DX[36] = {
    0.1721039139,  0.4055573227,  0.601505152,   0.7356371818,  0.7908966905,  0.615222195,
    0.7013143059,  0.7545435741,  0.8437803938,  0.9391519176,  1.176344558,   1.190490868,
    -0.4606666491, -0.3802811232, -0.3273755835, -0.2465545376, -0.2393098515, -0.2441222778,
    -0.5983263762, -0.4645760949, -0.5240143807, -0.5037612035, -0.555282751,  -0.6749616495,
    -1.43244562,   -1.13064266,   -0.9658308086, -0.803161624,  -0.6732443988, -0.6003005059,
    0.5323152803,  0.4809878927,  0.3948137333,  0.2806460445,  0.1480457495,  0.06150132232};
static const double BN_DGAMMA[3] = {-2.961468095, 3.402912594, -1.472953111};
static const double BN_DBETA[3] = {-0.4525856673, -4.643621355, -7.892301214};
static const double BN_Y_EVAL[36] = {
    -0.187187225, 0.1900907107, 0.5225085791, 0.7712779123,   0.9089316796,  0.6938971466,
    2.520789234,  1.845013893,  0.9538402236, -0.01156406094, -1.659210518,  -2.329852006,
    1.367729437,  1.342214147,  1.124595796,  1.091212874,    0.5721160531,  -0.01555247801,
    0.2875643442, 0.6187646861, 0.6365494692, 0.7719900289,   0.7838131784,  0.6766214411,
    2.13104126,   0.4779367476, -0.487415652, -1.373034518,   -2.038503956,  -2.373204263,
    1.555155626,  1.33410708,   0.9413549132, 0.4204051946,   -0.1678850692, -0.3970086812};
static const double LN_Y[35] = {
    -2.023981538,   -0.9929547923, 0.1785135275,  0.07681989675, 1.146898429,  2.07021446,
    1.134229823,    1.189378061,   1.305419783,   0.3840746087,  0.1423376915, -0.2010657922,
    -1.702829275,   -2.139844032,  0.480565479,   -1.272190119,  -0.979223031, -0.1772760456,
    -1.099792901,   0.7894929488,  3.323247463,   -1.945209353,  -1.05062966,  0.009582689547,
    0.009673001862, 1.081150167,   2.070407289,   1.474903679,   1.101394835,  1.310184339,
    0.4149414211,   0.2223934225,  -0.1096113164, -1.713253485,  -2.239087257};
static const double LN_DX[35] = {
    -0.03716752579, 0.00305810805,   0.01283453151,   0.09893331144,  0.04277900469, -0.04925069215,
    -0.07118673775, -0.0214173583,   -0.0728893803,   0.1183860146,   0.0516731063,  -0.04095252599,
    0.07272892936,  -0.1075287857,   1.832972739,     0.4373460369,   0.1106755594,  -0.05681571049,
    -0.9894963792,  -0.823538388,    -0.5111438578,   -0.02133272971, 0.0376765341,  0.1073014254,
    -0.0714918772,  0.0006542525817, 0.06829824813,   -0.1211058533,  0.05790284917, 0.04931288634,
    -0.09101766987, -0.06327383565,  -0.003825181142, -0.0491682826,  0.1000692337};
static const double LN_DGAMMA[7] = {-0.6399502448, 0.05859270324, 0.4075188048, 0.08975929509,
                                    0.5967133474,  -0.0628219503, -1.387610828};
static const double LN_DBETA[7] = {-0.4277163812, -0.6419775478, -0.8454045649, -1.034564355,
                                   -1.206264617,  -1.357607701,  -1.486039508};

typedef struct dctx {
    vt *t;
    vkt_device *dev;
    vkt_ops *ops;
    vkt_cmd *cmd;
    const char *name;
    int nbuf;
    vkt_buffer *bufs[16];
} dctx;

// A buffer of n floats (at least one), filled from data or with zeros; freed by free_bufs.
static vkt_view buf(dctx *c, const float *data, uint64_t n) {
    vkt_buffer *b = NULL;
    uint64_t bytes = 4 * (n ? n : 1);
    VT_OK(c->t, vkt_buffer_create(c->dev, bytes, "test", &b));
    if (!b || c->nbuf == 16) {
        fprintf(stderr, "test_norm: cannot make a test buffer\n");
        exit(1);
    }
    c->bufs[c->nbuf++] = b;
    float *z = calloc(n ? n : 1, 4);
    VT_OK(c->t, vkt_buffer_write(b, 0, data ? data : z, bytes));
    free(z);
    return vkt_buffer_whole(b);
}

static void free_bufs(dctx *c) {
    while (c->nbuf > 0)
        vkt_buffer_destroy(c->bufs[--c->nbuf]);
}

static float *read_view(dctx *c, vkt_view v, uint64_t n) {
    float *out = malloc(4 * n);
    VT_OK(c->t, vkt_buffer_read(v.buffer, v.offset, out, 4 * n));
    return out;
}

static void expect(dctx *c, const char *what, vkt_view v, const double *ref, uint64_t n,
                   double atol, double rtol) {
    float *got = read_view(c, v, n);
    char w[256];
    snprintf(w, sizeof w, "%s on %s", what, c->name);
    VT_CHECK(c->t, vt_compare(w, got, ref, n, atol, rtol) == 0, "%s", w);
    free(got);
}

static bool run(dctx *c, const char *what) {
    char where[128];
    snprintf(where, sizeof where, "%s", c->name);
    return vt_run(c->t, c->cmd, c->ops, what, where);
}

static void test_torch_numbers(dctx *c) {
    enum { B = 2, C = 3, HW = 6, N = B * C * HW, R = 5, D = 7 };
    float x[N], dy[N], lx[R * D], ldy[R * D], lg[D], lb[D];
    for (int i = 0; i < N; i++) {
        x[i] = (float)(sin(0.37 * i) * 2 + (i % 5) * 0.1);
        dy[i] = (float)(cos(0.11 * i) - 0.2);
    }
    const float g[C] = {0.5f, 1.5f, -0.7f}, b[C] = {0.1f, -0.2f, 0.3f};
    const float rm0[C] = {0.2f, -0.1f, 0.05f}, rv0[C] = {1.5f, 0.8f, 1.0f};
    vkt_view vx = buf(c, x, N), vdy = buf(c, dy, N), vy = buf(c, NULL, N), vdx = buf(c, NULL, N);
    vkt_view vg = buf(c, g, C), vb = buf(c, b, C), rm = buf(c, rm0, C), rv = buf(c, rv0, C);
    vkt_view nb = buf(c, NULL, 1), saved = buf(c, NULL, 2 * C);
    vkt_view dg = buf(c, NULL, C), db = buf(c, NULL, C);
    vkt_view scratch = buf(c, NULL, vkt_op_batchnorm_scratch_bytes(C, B, HW) / 4);
    double tol = 2e-5, rtol = 1e-4;
    VT_OK(c->t, vkt_cmd_begin(c->cmd, false));
    vkt_op_batchnorm_forward(c->cmd, c->ops, vy, saved, rm, rv, nb, scratch, vx, vg, vb, B, C, HW,
                             1e-3f, 0.3f, true, "bn");
    if (run(c, "batchnorm2d training forward")) {
        expect(c, "batchnorm2d training output (PyTorch)", vy, BN_Y_TRAIN, N, tol, rtol);
        expect(c, "running_mean after a step (PyTorch)", rm, BN_RUNNING_MEAN, C, tol, rtol);
        expect(c, "running_var after a step (PyTorch)", rv, BN_RUNNING_VAR, C, tol, rtol);
        expect(c, "num_batches_tracked after a step", nb, (const double[]){1}, 1, 0, 0);
    }
    VT_OK(c->t, vkt_cmd_begin(c->cmd, false));
    vkt_op_batchnorm_forward(c->cmd, c->ops, vy, saved, rm, rv, nb, scratch, vx, vg, vb, B, C, HW,
                             1e-3f, 0.3f, false, "bn");
    if (run(c, "batchnorm2d evaluation forward")) {
        expect(c, "batchnorm2d evaluation output (PyTorch)", vy, BN_Y_EVAL, N, tol, rtol);
        expect(c, "running_mean after evaluation (unchanged)", rm, BN_RUNNING_MEAN, C, tol, rtol);
        expect(c, "num_batches_tracked after evaluation (unchanged)", nb, (const double[]){1}, 1, 0,
               0);
    }
    // The backward from the training forward's saved statistics (evaluation left them alone).
    VT_OK(c->t, vkt_cmd_begin(c->cmd, false));
    vkt_op_batchnorm_backward(c->cmd, c->ops, &vdx, dg, db, scratch, vdy, vx, saved, vg, B, C, HW,
                              "bn");
    if (run(c, "batchnorm2d backward")) {
        expect(c, "batchnorm2d dx (PyTorch)", vdx, BN_DX, N, tol, rtol);
        expect(c, "batchnorm2d dweight (PyTorch)", dg, BN_DGAMMA, C, tol, rtol);
        expect(c, "batchnorm2d dbias (PyTorch)", db, BN_DBETA, C, tol, rtol);
    }
    // Gradients accumulate: a second backward without dx doubles them.
    VT_OK(c->t, vkt_cmd_begin(c->cmd, false));
    vkt_op_batchnorm_backward(c->cmd, c->ops, NULL, dg, db, scratch, vdy, vx, saved, vg, B, C, HW,
                              "bn");
    if (run(c, "batchnorm2d backward without dx")) {
        double g2[C], b2[C];
        for (int i = 0; i < C; i++)
            g2[i] = 2 * BN_DGAMMA[i], b2[i] = 2 * BN_DBETA[i];
        expect(c, "batchnorm2d dweight accumulated", dg, g2, C, tol, rtol);
        expect(c, "batchnorm2d dbias accumulated", db, b2, C, tol, rtol);
    }
    free_bufs(c);

    for (int i = 0; i < R * D; i++) {
        lx[i] = (float)(sin(0.29 * i) * 1.5 + 0.2 * (i % 3));
        ldy[i] = (float)cos(0.13 * i);
    }
    for (int j = 0; j < D; j++)
        lg[j] = (float)(1 + 0.1 * j), lb[j] = (float)(0.05 * j - 0.1);
    vx = buf(c, lx, R * D), vdy = buf(c, ldy, R * D), vy = buf(c, NULL, R * D);
    vdx = buf(c, NULL, R * D), vg = buf(c, lg, D), vb = buf(c, lb, D);
    vkt_view stats = buf(c, NULL, 2 * R);
    dg = buf(c, NULL, D), db = buf(c, NULL, D);
    scratch = buf(c, NULL, vkt_op_layernorm_scratch_bytes(R, D) / 4);
    VT_OK(c->t, vkt_cmd_begin(c->cmd, false));
    vkt_op_layernorm_forward(c->cmd, c->ops, vy, stats, vx, vg, vb, R, D, 1e-4f, "ln");
    vkt_cmd_barrier(c->cmd);
    vkt_op_layernorm_backward(c->cmd, c->ops, &vdx, dg, db, scratch, vdy, vx, stats, vg, R, D,
                              "ln");
    if (run(c, "layernorm forward and backward")) {
        expect(c, "layernorm output (PyTorch)", vy, LN_Y, R * D, tol, rtol);
        expect(c, "layernorm dx (PyTorch)", vdx, LN_DX, R * D, tol, rtol);
        expect(c, "layernorm dweight (PyTorch)", dg, LN_DGAMMA, D, tol, rtol);
        expect(c, "layernorm dbias (PyTorch)", db, LN_DBETA, D, tol, rtol);
    }
    free_bufs(c);
}

// batchnorm2d at 128 samples of [2, 28, 28] (100352 values per channel) and layernorm on 4096
// rows of 96, with means far from zero, against the double-precision formulas; twice (the same
// bits) and with the range forced small (slices).
static void test_large(dctx *c, uint64_t range) {
    enum { B = 128, C = 2, HW = 28 * 28, N = B * C * HW, R = 4096, D = 96, M = R * D };
    vt *t = c->t;
    vkt_norm_ops_test_range(range);
    char what[160];
    _Static_assert(M >= N, "the arrays serve both");
    float *x = malloc(4 * (size_t)M), *dy = malloc(4 * (size_t)M);
    double *ref = malloc(8 * (size_t)M), *rdx = malloc(8 * (size_t)M);
    vt_fill_uniform(x, M, 5, -1.0f, 1.0f);
    vt_fill_uniform(dy, M, 6, -1.0f, 1.0f);
    for (int i = 0; i < N; i++)
        x[i] = x[i] * (1 + (i / HW) % C) + (((i / HW) % C) ? -30.0f : 50.0f);
    const float g[C] = {1.25f, -0.5f}, b[C] = {0.5f, 2.0f}, rm0[C] = {1, 2}, rv0[C] = {3, 4};
    float m = 0.2f, eps = 1e-5f;
    double rm[C], rv[C], dg[C], db[C], mean[C], invstd[C];
    for (int ch = 0; ch < C; ch++) {
        double s = 0, q = 0, sd = 0, sx = 0;
        for (int k = 0; k < B; k++)
            for (int j = 0; j < HW; j++)
                s += x[(k * C + ch) * HW + j];
        mean[ch] = s / (B * HW);
        for (int k = 0; k < B; k++)
            for (int j = 0; j < HW; j++)
                q += pow(x[(k * C + ch) * HW + j] - mean[ch], 2);
        double var = q / (B * HW);
        invstd[ch] = 1 / sqrt(var + eps);
        rm[ch] = (1 - m) * rm0[ch] + m * mean[ch];
        rv[ch] = (1 - m) * rv0[ch] + m * q / (B * HW - 1);
        for (int k = 0; k < B; k++)
            for (int j = 0; j < HW; j++) {
                int i = (k * C + ch) * HW + j;
                double xh = (x[i] - mean[ch]) * invstd[ch];
                ref[i] = xh * g[ch] + b[ch];
                sd += dy[i];
                sx += dy[i] * xh;
            }
        dg[ch] = sx;
        db[ch] = sd;
        for (int k = 0; k < B; k++)
            for (int j = 0; j < HW; j++) {
                int i = (k * C + ch) * HW + j;
                double xh = (x[i] - mean[ch]) * invstd[ch];
                rdx[i] = g[ch] * invstd[ch] / (B * HW) * ((double)B * HW * dy[i] - sd - xh * sx);
            }
    }
    double saved_ref[2 * C] = {mean[0], mean[1], invstd[0], invstd[1]};
    vkt_view vx = buf(c, x, N), vdy = buf(c, dy, N), vy = buf(c, NULL, N), vdx = buf(c, NULL, N);
    vkt_view vg = buf(c, g, C), vb = buf(c, b, C), vrm = buf(c, rm0, C), vrv = buf(c, rv0, C);
    vkt_view nb = buf(c, NULL, 1), saved = buf(c, NULL, 2 * C);
    vkt_view vdg = buf(c, NULL, C), vdb = buf(c, NULL, C);
    vkt_view scratch = buf(c, NULL, vkt_op_batchnorm_scratch_bytes(C, B, HW) / 4);
    float *first[2] = {NULL, NULL};
    for (int rep = 0; rep < 2; rep++) {
        VT_OK(t, vkt_buffer_write(vrm.buffer, 0, rm0, sizeof rm0));
        VT_OK(t, vkt_buffer_write(vrv.buffer, 0, rv0, sizeof rv0));
        VT_OK(t, vkt_cmd_begin(c->cmd, false));
        vkt_cmd_fill(c->cmd, vdg, 0);
        vkt_cmd_fill(c->cmd, vdb, 0);
        vkt_cmd_barrier(c->cmd);
        vkt_op_batchnorm_forward(c->cmd, c->ops, vy, saved, vrm, vrv, nb, scratch, vx, vg, vb, B, C,
                                 HW, eps, m, true, "bn");
        vkt_cmd_barrier(c->cmd);
        vkt_op_batchnorm_backward(c->cmd, c->ops, &vdx, vdg, vdb, scratch, vdy, vx, saved, vg, B, C,
                                  HW, "bn");
        if (!run(c, "large batchnorm2d")) break;
        snprintf(what, sizeof what,
                 "batchnorm2d 128x[2, 28, 28], range %llu:", (unsigned long long)range);
        char w[224];
#define EXPECT(name, v, r, n, atol, rtol)                                                          \
    snprintf(w, sizeof w, "%s %s", what, name);                                                    \
    expect(c, w, v, r, n, atol, rtol)
        EXPECT("output", vy, ref, N, 1e-4, 1e-4);
        EXPECT("saved statistics", saved, saved_ref, 2 * C, 1e-5, 1e-5);
        EXPECT("running_mean", vrm, rm, C, 1e-5, 1e-5);
        EXPECT("running_var", vrv, rv, C, 1e-5, 1e-5);
        EXPECT("dx", vdx, rdx, N, 1e-7, 1e-3);
        EXPECT("dweight", vdg, dg, C, 1e-3, 1e-4);
        EXPECT("dbias", vdb, db, C, 1e-3, 1e-4);
        float *got[2] = {read_view(c, vy, N), read_view(c, vdx, N)};
        for (int k = 0; k < 2; k++) {
            if (rep == 0) {
                first[k] = got[k];
            } else {
                VT_CHECK(t, memcmp(first[k], got[k], 4ull * N) == 0,
                         "%s %s: the second run gives other bits on %s", what, k ? "dx" : "y",
                         c->name);
                free(got[k]);
            }
        }
    }
    free(first[0]);
    free(first[1]);
    free_bufs(c);

    // layernorm
    float *lg = malloc(4 * D), *lb = malloc(4 * D);
    vt_fill_uniform(x, M, 7, -1.0f, 1.0f);
    for (int i = 0; i < M; i++)
        x[i] = x[i] * 0.5f + 20.0f;
    vt_fill_uniform(lg, D, 8, 0.5f, 1.5f);
    vt_fill_uniform(lb, D, 9, -0.5f, 0.5f);
    double *ldg = calloc(D, 8), *ldb = calloc(D, 8), *lstats = malloc(16 * R);
    for (int r = 0; r < R; r++) {
        const float *xr = x + (size_t)r * D, *dyr = dy + (size_t)r * D;
        double s = 0, q = 0, a = 0, bb = 0;
        for (int j = 0; j < D; j++)
            s += xr[j];
        double mu = s / D;
        for (int j = 0; j < D; j++)
            q += pow(xr[j] - mu, 2);
        double rs = 1 / sqrt(q / D + eps);
        lstats[2 * r] = mu, lstats[2 * r + 1] = rs;
        for (int j = 0; j < D; j++) {
            double xh = (xr[j] - mu) * rs, gj = dyr[j] * lg[j];
            ref[r * D + j] = xh * lg[j] + lb[j];
            ldg[j] += dyr[j] * xh;
            ldb[j] += dyr[j];
            a += gj;
            bb += gj * xh;
        }
        for (int j = 0; j < D; j++) {
            double xh = (xr[j] - mu) * rs;
            rdx[r * D + j] = rs * (dyr[j] * lg[j] - a / D - xh * bb / D);
        }
    }
    vx = buf(c, x, R * D), vdy = buf(c, dy, R * D), vy = buf(c, NULL, R * D);
    vdx = buf(c, NULL, R * D), vg = buf(c, lg, D), vb = buf(c, lb, D);
    vkt_view stats = buf(c, NULL, 2 * R);
    vdg = buf(c, NULL, D), vdb = buf(c, NULL, D);
    scratch = buf(c, NULL, vkt_op_layernorm_scratch_bytes(R, D) / 4);
    VT_OK(t, vkt_cmd_begin(c->cmd, false));
    vkt_op_layernorm_forward(c->cmd, c->ops, vy, stats, vx, vg, vb, R, D, eps, "ln");
    vkt_cmd_barrier(c->cmd);
    vkt_op_layernorm_backward(c->cmd, c->ops, &vdx, vdg, vdb, scratch, vdy, vx, stats, vg, R, D,
                              "ln");
    if (run(c, "large layernorm")) {
        char w[224];
        snprintf(what, sizeof what, "layernorm 4096x96, range %llu:", (unsigned long long)range);
        EXPECT("output", vy, ref, (uint64_t)R * D, 1e-4, 1e-4);
        EXPECT("statistics", stats, lstats, 2 * R, 1e-5, 1e-4);
        EXPECT("dx", vdx, rdx, (uint64_t)R * D, 1e-5, 1e-3);
        EXPECT("dweight", vdg, ldg, D, 1e-3, 1e-4);
        EXPECT("dbias", vdb, ldb, D, 1e-3, 1e-4);
#undef EXPECT
    }
    free_bufs(c);
    vkt_norm_ops_test_range(0);
    free(x);
    free(dy);
    free(ref);
    free(rdx);
    free(lg);
    free(lb);
    free(ldg);
    free(ldb);
    free(lstats);
}

// batchnorm2d on the shapes of the kernels' other paths (engine/ops/norm_ops.c): planes cut into
// 2 and 3 segments (70 x 70, 9000 floats), planes of odd sizes whose vec4s start anywhere (65 x
// 65, 13, 25), planes of one float, parts of many samples and a shorter last part; each whole and
// in slices of two samples (the range forced small; tiny samples stay whole), twice (the same
// bits), against the double-precision formulas.
static void test_bn_shapes(dctx *c) {
    static const struct {
        uint32_t B, C, HW;
    } shapes[] = {{3, 2, 4900}, {2, 3, 4225}, {5, 3, 1},   {7, 5, 13},
                  {4, 2, 9000}, {33, 4, 49},  {200, 3, 25}};
    vt *t = c->t;
    for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++) {
        uint32_t B = shapes[si].B, C = shapes[si].C, HW = shapes[si].HW;
        uint64_t N = (uint64_t)B * C * HW, sample = 4ull * C * HW;
        float *x = malloc(4 * N), *dy = malloc(4 * N), *g = malloc(4 * C), *b = malloc(4 * C);
        double *ref = malloc(8 * N), *rdx = malloc(8 * N), *dg = calloc(C, 8), *db = calloc(C, 8);
        vt_fill_uniform(x, N, 20 + si, -1.0f, 1.0f);
        vt_fill_uniform(dy, N, 30 + si, -1.0f, 1.0f);
        for (uint64_t i = 0; i < N; i++) {
            uint32_t ch = (uint32_t)(i / HW % C);
            x[i] = x[i] * (1 + ch % 3) + (ch % 2 ? -30.0f : 50.0f);
        }
        for (uint32_t ch = 0; ch < C; ch++)
            g[ch] = 0.5f + 0.25f * ch, b[ch] = 0.1f * ch - 0.2f;
        double n = (double)B * HW;
        for (uint32_t ch = 0; ch < C; ch++) {
            double sum = 0, q = 0, sd = 0, sx = 0;
            for (uint32_t k = 0; k < B; k++)
                for (uint32_t j = 0; j < HW; j++)
                    sum += x[((uint64_t)k * C + ch) * HW + j];
            double mean = sum / n;
            for (uint32_t k = 0; k < B; k++)
                for (uint32_t j = 0; j < HW; j++)
                    q += pow(x[((uint64_t)k * C + ch) * HW + j] - mean, 2);
            double invstd = 1 / sqrt(q / n + 1e-5);
            for (uint32_t k = 0; k < B; k++)
                for (uint32_t j = 0; j < HW; j++) {
                    uint64_t i = ((uint64_t)k * C + ch) * HW + j;
                    double xh = (x[i] - mean) * invstd;
                    ref[i] = xh * g[ch] + b[ch];
                    sd += dy[i];
                    sx += dy[i] * xh;
                }
            dg[ch] = sx, db[ch] = sd;
            for (uint32_t k = 0; k < B; k++)
                for (uint32_t j = 0; j < HW; j++) {
                    uint64_t i = ((uint64_t)k * C + ch) * HW + j;
                    double xh = (x[i] - mean) * invstd;
                    rdx[i] = g[ch] * invstd / n * (n * dy[i] - sd - xh * sx);
                }
        }
        vkt_view vx = buf(c, x, N), vdy = buf(c, dy, N), vy = buf(c, NULL, N);
        vkt_view vdx = buf(c, NULL, N), vg = buf(c, g, C), vb = buf(c, b, C);
        vkt_view rm = buf(c, NULL, C), rv = buf(c, NULL, C), nb = buf(c, NULL, 1);
        vkt_view saved = buf(c, NULL, 2 * C), vdg = buf(c, NULL, C), vdb = buf(c, NULL, C);
        vkt_view scratch = buf(c, NULL, vkt_op_batchnorm_scratch_bytes(C, B, HW) / 4);
        float *first[2] = {NULL, NULL};
        for (int run_i = 0; run_i < 4; run_i++) {
            uint64_t range = run_i < 2 ? 0 : 2 * sample + 512;
            vkt_norm_ops_test_range(range);
            VT_OK(t, vkt_cmd_begin(c->cmd, false));
            vkt_cmd_fill(c->cmd, vdg, 0);
            vkt_cmd_fill(c->cmd, vdb, 0);
            vkt_cmd_barrier(c->cmd);
            vkt_op_batchnorm_forward(c->cmd, c->ops, vy, saved, rm, rv, nb, scratch, vx, vg, vb, B,
                                     C, HW, 1e-5f, 0.1f, true, "bn");
            vkt_cmd_barrier(c->cmd);
            vkt_op_batchnorm_backward(c->cmd, c->ops, &vdx, vdg, vdb, scratch, vdy, vx, saved, vg,
                                      B, C, HW, "bn");
            if (!run(c, "batchnorm2d shapes")) break;
            char w[200], what[260];
            snprintf(w, sizeof w, "batchnorm2d %u x [%u, %u], range %llu:", B, C, HW,
                     (unsigned long long)range);
            snprintf(what, sizeof what, "%s output", w);
            expect(c, what, vy, ref, N, 1e-4, 1e-4);
            snprintf(what, sizeof what, "%s dx", w);
            expect(c, what, vdx, rdx, N, 1e-6, 1e-3);
            snprintf(what, sizeof what, "%s dweight", w);
            expect(c, what, vdg, dg, C, 1e-3, 1e-4);
            snprintf(what, sizeof what, "%s dbias", w);
            expect(c, what, vdb, db, C, 1e-3, 1e-4);
            float *got[2] = {read_view(c, vy, N), read_view(c, vdx, N)};
            for (int k = 0; k < 2; k++) {
                if (run_i % 2 == 0) {
                    free(first[k]);
                    first[k] = got[k];
                } else {
                    VT_CHECK(t, memcmp(first[k], got[k], 4 * N) == 0,
                             "%s %s: the second run gives other bits on %s", w, k ? "dx" : "y",
                             c->name);
                    free(got[k]);
                }
            }
        }
        vkt_norm_ops_test_range(0);
        free(first[0]), free(first[1]);
        free_bufs(c);
        free(x), free(dy), free(g), free(b), free(ref), free(rdx), free(dg), free(db);
    }
}

// The range forced small cuts the passes into the slices the layer_check cases below rely on:
// batchnorm on 6 samples of [3, 5, 5] (300 bytes each) at 1024 bytes takes windows of 3 samples
// on lavapipe (2 of them on SwiftShader, whose 256-byte alignment the windows leave room for), so
// its statistics and its normalisation run in two slices or more each; layernorm's 90 rows of 6
// at 2048 bytes two slices of 64 rows.
static void test_slice_counts(dctx *c) {
    enum { B = 6, C = 3, HW = 25, R = 90, D = 6 }; // B * C * HW <= R * D
    vkt_view x = buf(c, NULL, R * D), y = buf(c, NULL, R * D), g = buf(c, NULL, D);
    vkt_view b = buf(c, NULL, D);
    vkt_view rm = buf(c, NULL, C), rv = buf(c, NULL, C), nb = buf(c, NULL, 1);
    vkt_view saved = buf(c, NULL, 2 * C), stats = buf(c, NULL, 2 * R);
    vkt_view scratch = buf(c, NULL, vkt_op_batchnorm_scratch_bytes(C, B, HW) / 4);
    int counts[2][2];
    for (int k = 0; k < 2; k++) {
        vkt_norm_ops_test_range(k ? 1024 : 0);
        VT_OK(c->t, vkt_cmd_begin(c->cmd, false));
        vkt_op_batchnorm_forward(c->cmd, c->ops, y, saved, rm, rv, nb, scratch, x, g, b, B, C, HW,
                                 1e-5f, 0.1f, true, "bn");
        counts[k][0] = vkt_cmd_dispatch_count(c->cmd);
        vkt_cmd_barrier(c->cmd);
        vkt_norm_ops_test_range(k ? 2048 : 0);
        vkt_op_layernorm_forward(c->cmd, c->ops, y, stats, x, g, b, R, D, 1e-5f, "ln");
        counts[k][1] = vkt_cmd_dispatch_count(c->cmd) - counts[k][0];
        run(c, "sliced recordings");
    }
    vkt_norm_ops_test_range(0);
    VT_CHECK(c->t, counts[0][0] == 3 && counts[1][0] >= 5,
             "batchnorm2d forward: %d dispatches whole, %d in slices (3 and 5 or more expected) "
             "on %s",
             counts[0][0], counts[1][0], c->name);
    VT_CHECK(c->t, counts[0][1] == 1 && counts[1][1] == 2,
             "layernorm forward: %d dispatches whole, %d in slices (1 and 2 expected) on %s",
             counts[0][1], counts[1][1], c->name);
    free_bufs(c);
}

// ---------------------------------------------------------------------------------------------
// 3. Networks

#define BN_A                                                                                       \
    "{\"name\": \"bn_relu_dense\", \"input\": [3, 5, 5], \"layers\": ["                            \
    "{\"type\": \"batchnorm2d\", \"momentum\": 0.3, \"eps\": 0.001}, {\"type\": \"relu\"}, "       \
    "{\"type\": \"flatten\"}, {\"type\": \"dense\", \"units\": 4}], "                              \
    "\"loss\": \"softmax_cross_entropy\"}"
#define BN_B                                                                                       \
    "{\"name\": \"bn_mse\", \"input\": [5, 7, 7], \"layers\": ["                                   \
    "{\"type\": \"batchnorm2d\", \"momentum\": 0.05, \"eps\": 0.0001}, {\"type\": \"flatten\"}, "  \
    "{\"type\": \"dense\", \"units\": 3}], \"loss\": \"mse\"}"
// After a dense layer on the last dimension ([3, 5, 4] -> [3, 5, 5]): batchnorm's dx flows on.
#define BN_C                                                                                       \
    "{\"name\": \"dense_bn\", \"input\": [3, 5, 4], \"layers\": ["                                 \
    "{\"type\": \"dense\", \"units\": 5}, {\"type\": \"batchnorm2d\", \"momentum\": 0.7}, "        \
    "{\"type\": \"relu\"}, {\"type\": \"flatten\"}, {\"type\": \"dense\", \"units\": 3}], "        \
    "\"loss\": \"softmax_cross_entropy\"}"
// Each activation after a batchnorm: tanh, sigmoid and leaky_relu run in its passes where the
// network fuses (their derivatives follow from their outputs), gelu (it does not) apart; a 3x3
// plane (9 floats: the passes' float tails) and a negative slope of -0.5 (not fused either).
#define BN_D                                                                                       \
    "{\"name\": \"bn_acts\", \"input\": [4, 3, 3], \"layers\": ["                                  \
    "{\"type\": \"batchnorm2d\"}, {\"type\": \"tanh\"}, {\"type\": \"batchnorm2d\"}, "             \
    "{\"type\": \"sigmoid\"}, {\"type\": \"batchnorm2d\"}, "                                       \
    "{\"type\": \"leaky_relu\", \"negative_slope\": 0.1}, {\"type\": \"batchnorm2d\"}, "           \
    "{\"type\": \"gelu\"}, {\"type\": \"batchnorm2d\"}, "                                          \
    "{\"type\": \"leaky_relu\", \"negative_slope\": -0.5}, {\"type\": \"flatten\"}, "              \
    "{\"type\": \"dense\", \"units\": 3}], \"loss\": \"softmax_cross_entropy\"}"
#define LN_A                                                                                       \
    "{\"name\": \"ln_mlp\", \"input\": [7], \"layers\": ["                                         \
    "{\"type\": \"layernorm\", \"eps\": 0.0001}, {\"type\": \"dense\", \"units\": 5}, "            \
    "{\"type\": \"tanh\"}, {\"type\": \"dense\", \"units\": 3}], "                                 \
    "\"loss\": \"softmax_cross_entropy\"}"
#define LN_B                                                                                       \
    "{\"name\": \"ln_rows\", \"input\": [3, 6], \"layers\": ["                                     \
    "{\"type\": \"layernorm\"}, {\"type\": \"dense\", \"units\": 4}, {\"type\": \"relu\"}, "       \
    "{\"type\": \"layernorm\", \"eps\": 0.01}, {\"type\": \"flatten\"}, "                          \
    "{\"type\": \"dense\", \"units\": 3}], \"loss\": \"mse\"}"
#define LN_C                                                                                       \
    "{\"name\": \"dense_ln\", \"input\": [6], \"layers\": ["                                       \
    "{\"type\": \"dense\", \"units\": 9}, {\"type\": \"layernorm\"}, {\"type\": \"gelu\"}, "       \
    "{\"type\": \"dense\", \"units\": 3}], \"loss\": \"softmax_cross_entropy\"}"
#define LN_D                                                                                       \
    "{\"name\": \"ln_wide\", \"input\": [40], \"layers\": [{\"type\": \"layernorm\"}, "            \
    "{\"type\": \"dense\", \"units\": 3}], \"loss\": \"mse\"}"

static void test_networks(vt *t, vkt_ops *const *ops) {
    for (uint32_t B = 1; B <= 6; B++)
        lc_run(t, ops, &(lc_case){.json = BN_A, .B = B, .input_grad = true, .row0 = B});
    lc_run(t, ops, &(lc_case){.json = BN_B, .B = 2, .input_grad = true});
    lc_run(t, ops, &(lc_case){.json = BN_B, .B = 5, .input_grad = true});
    lc_run(t, ops, &(lc_case){.json = BN_C, .B = 4, .input_grad = true});
    lc_run(t, ops, &(lc_case){.json = BN_D, .B = 5, .input_grad = true});
    lc_run(t, ops, &(lc_case){.json = LN_A, .B = 3, .input_grad = true});
    lc_run(t, ops, &(lc_case){.json = LN_B, .B = 4, .input_grad = true});
    lc_run(t, ops, &(lc_case){.json = LN_C, .B = 5, .input_grad = true});
    lc_run(t, ops, &(lc_case){.json = LN_D, .B = 3, .input_grad = true});
    // Slices and several parts: batchnorm on [3, 5, 5] with 2 or 3 samples to a window (at 1024
    // bytes: test_slice_counts), on [5, 7, 7] with 1 or 2 (at 2048); layernorm's 90 rows of 6 in
    // two slices and parts of 64 rows.
    vkt_norm_ops_test_range(1024);
    lc_run(t, ops, &(lc_case){.json = BN_A, .B = 6, .input_grad = true});
    vkt_norm_ops_test_range(2048);
    lc_run(t, ops, &(lc_case){.json = BN_B, .B = 3, .input_grad = true});
    lc_run(t, ops, &(lc_case){.json = LN_B, .B = 30, .input_grad = true});
    vkt_norm_ops_test_range(0);
}

int main(void) {
    vt tv, *t = &tv;
    if (vt_init(t, "test_norm")) return 1;
    test_parse(t);
    vkt_ops *ops[VT_MAX_DEVICES] = {0};
    for (int d = 0; d < t->ndev; d++) {
        dctx c = {.t = t, .dev = t->dev[d], .name = vkt_device_label(t->dev[d])};
        VT_OK(t, vkt_ops_create(c.dev, &c.ops));
        VT_OK(t, vkt_cmd_create(c.dev, &c.cmd));
        if (c.ops && c.cmd) {
            test_torch_numbers(&c);
            test_large(&c, 0);
            test_large(&c, 64 * 1024);
            test_bn_shapes(&c);
            test_slice_counts(&c);
        }
        vkt_cmd_destroy(c.cmd);
        ops[d] = c.ops;
    }
    test_networks(t, ops);
    for (int d = 0; d < t->ndev; d++)
        vkt_ops_destroy(ops[d]);
    return vt_finish(t);
}
