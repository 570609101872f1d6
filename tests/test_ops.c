// test_ops.c: the elementwise, reduction and loss ops of engine/ops/ops_nn.c on every device,
// against the double-precision references of ref_ops.c; and those references' backward passes
// against central finite differences of their forward passes. Shapes 1, 7, 33, 127 and 513 along
// every dimension (rows and columns of the row ops, n of the elementwise ops; the bias ops also at
// column counts that are multiples of 4, which lavapipe's texel-read bias gradient takes), one n
// of 5e6 for an
// elementwise op and for sumsq, and n = 5e7 for sumsq and scale, which is sliced into several
// dispatches on lavapipe (200 MB > its 128 MiB storage-buffer range) and folds its workgroups
// into y on both drivers. Activation backward from the input and, where f' follows from the
// output (vkt_act_grad_from_output), from the forward's output, against the same reference. The
// optimizers are in test_optim.c; matmul in its own test.
//
// Tolerances (|got - ref| <= atol + rtol*|ref|, the reference in double on the same fp32 inputs):
//   bias_add, scale, axpy, relu, leaky_relu                     atol 1e-6  rtol 1e-6 (one rounding)
//   gelu, tanh, sigmoid forward and backward                    atol 2e-6  rtol 1e-5 (driver
//   exp/tanh) clip_scale (its factor comes from an fp32 sumsq)            atol 1e-6  rtol 1e-5
//   bias_grad (sums of up to 513 terms in [-1,1])               atol 2e-5  rtol 1e-5
//   softmax_xent loss (logsumexp of up to 513 terms)            atol 2e-5  rtol 1e-5
//   softmax_xent dlogits (scaled by 1/B)                        atol 1e-6  rtol 1e-4
//   mse loss / dpred                                            atol 2e-5  rtol 1e-5 / 1e-6, 1e-6
//   sumsq (up to 5e7 terms; measured error 2e-6 at 5e7)         rtol 1e-5
//   accuracy, argmax                                            exact
//   finite differences of the references (double, h = 1e-5)     atol 1e-7  rtol 1e-6
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ops.h"
#include "ref_ops.h"
#include "test_util.h"
#include "vkt_abi.h"
#include "vkt_shaders.h"

static const uint32_t SHAPES[] = {1, 7, 33, 127, 513};
#define NSHAPES 5
// More n for the elementwise ops, which take 4 floats at a time (shaders/ew.glsl): n % 4 == 2 and
// 0 (SHAPES have 1 and 3), with the partial vec4 in the second workgroup and past it.
static const uint32_t EW_EXTRA[] = {2, 4, 4098, 8192 + 4096 + 6};
#define NEW_EXTRA 4

typedef struct dctx {
    vt *t;
    vkt_device *dev;
    vkt_ops *ops;
    vkt_cmd *cmd;
    const char *name;
} dctx;

// ---------------------------------------------------------------------------------------------
// Helpers

static double *to_double(const float *x, size_t n) {
    double *d = malloc(n * sizeof *d);
    for (size_t i = 0; i < n; i++)
        d[i] = x[i];
    return d;
}

static float *rand_floats(size_t n, uint64_t seed, float lo, float hi) {
    float *x = malloc(n * sizeof *x);
    vt_fill_uniform(x, n, seed, lo, hi);
    return x;
}

// A buffer of `bytes`, filled from init when not NULL. NULL (and a failed check) on failure.
static vkt_buffer *buf_new(dctx *c, size_t bytes, const void *init, const char *name) {
    vkt_buffer *b = NULL;
    vkt_status s = vkt_buffer_create(c->dev, bytes, name, &b);
    VT_CHECK(c->t, s == VKT_OK, "%s on %s: %s", name, c->name, vkt_error());
    if (s != VKT_OK) return NULL;
    if (init) VT_OK(c->t, vkt_buffer_write(b, 0, init, bytes));
    return b;
}

static vkt_view whole(vkt_buffer *b) { return vkt_buffer_whole(b); }

static bool begin(dctx *c) {
    vkt_status s = vkt_cmd_begin(c->cmd, false);
    VT_CHECK(c->t, s == VKT_OK, "begin on %s: %s", c->name, vkt_error());
    return s == VKT_OK;
}

// Ends, checks that every kernel built, submits and waits.
static bool run(dctx *c, const char *what) { return vt_run(c->t, c->cmd, c->ops, what, c->name); }

static void read_back(dctx *c, vkt_buffer *b, void *dst, size_t bytes) {
    VT_OK(c->t, vkt_buffer_read(b, 0, dst, bytes));
}

static void compare(dctx *c, const char *what, const float *got, const double *ref, size_t n,
                    double atol, double rtol) {
    size_t bad = vt_compare(what, got, ref, n, atol, rtol);
    VT_CHECK(c->t, bad == 0, "%s on %s: %zu of %zu wrong", what, c->name, bad, n);
}

static const char *act_name(vkt_act a) {
    static const char *names[] = {"relu", "leaky_relu", "gelu", "tanh", "sigmoid"};
    return names[a];
}

// ---------------------------------------------------------------------------------------------
// The references' backward passes against central differences of their forward passes

#define FD_H 1e-5
#define FD_ATOL 1e-7
#define FD_RTOL 1e-6

static void fd_check(vt *t, const char *what, const double *analytic, const double *numeric,
                     size_t n) {
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        double err = fabs(analytic[i] - numeric[i]);
        if (!(err <= FD_ATOL + FD_RTOL * fabs(numeric[i]))) {
            if (!bad)
                fprintf(stderr, "  %s [%zu]: analytic %.12g, numeric %.12g\n", what, i, analytic[i],
                        numeric[i]);
            bad++;
        }
    }
    VT_CHECK(t, bad == 0, "reference backward of %s disagrees with finite differences (%zu of %zu)",
             what, bad, n);
}

static double xent_total(const double *logits, const uint32_t *labels, size_t B, size_t C,
                         double scale, double *rows) {
    ref_softmax_xent(rows, NULL, logits, labels, B, C, scale);
    double s = 0;
    for (size_t b = 0; b < B; b++)
        s += rows[b];
    return s * scale;
}

static double mse_total(const double *pred, const double *target, size_t B, size_t N, double scale,
                        double *rows) {
    ref_mse(rows, NULL, pred, target, B, N, scale);
    double s = 0;
    for (size_t b = 0; b < B; b++)
        s += rows[b];
    return s * scale;
}

static void test_reference_gradients(vt *t) {
    enum { N = 64, B = 5, C = 9 };
    uint64_t seed = 11;
    double x[N], dy[N], dx[N], fd[N];
    for (int a = VKT_ACT_RELU; a <= VKT_ACT_SIGMOID; a++) {
        for (int i = 0; i < N; i++) {
            x[i] = vt_rand_uniform(&seed, -4, 4);
            if (fabs(x[i]) < 1e-3) x[i] = 0.5; // relu's kink: no derivative there
            dy[i] = vt_rand_uniform(&seed, -1, 1);
        }
        ref_act_backward((vkt_act)a, 0.05, dx, dy, x, N);
        for (int i = 0; i < N; i++) {
            double up = ref_act((vkt_act)a, 0.05, x[i] + FD_H),
                   dn = ref_act((vkt_act)a, 0.05, x[i] - FD_H);
            fd[i] = dy[i] * (up - dn) / (2 * FD_H);
        }
        fd_check(t, act_name((vkt_act)a), dx, fd, N);
    }

    // Softmax cross-entropy: dlogits = d(grad_scale * sum of loss_rows) / dlogits.
    double logits[B * C], dl[B * C], fdl[B * C], rows[B];
    uint32_t labels[B];
    for (int i = 0; i < B * C; i++)
        logits[i] = vt_rand_uniform(&seed, -3, 3);
    for (int b = 0; b < B; b++)
        labels[b] = (uint32_t)(vt_rand_u64(&seed) % C);
    double scale = 1.0 / B;
    ref_softmax_xent(rows, dl, logits, labels, B, C, scale);
    for (int i = 0; i < B * C; i++) {
        double keep = logits[i];
        logits[i] = keep + FD_H;
        double up = xent_total(logits, labels, B, C, scale, rows);
        logits[i] = keep - FD_H;
        double dn = xent_total(logits, labels, B, C, scale, rows);
        logits[i] = keep;
        fdl[i] = (up - dn) / (2 * FD_H);
    }
    fd_check(t, "softmax_xent", dl, fdl, B * C);

    // MSE: dpred = d(grad_scale * sum of loss_rows) / dpred.
    double target[B * C];
    for (int i = 0; i < B * C; i++)
        target[i] = vt_rand_uniform(&seed, -2, 2);
    scale = 1.0 / (B * C);
    ref_mse(rows, dl, logits, target, B, C, scale);
    for (int i = 0; i < B * C; i++) {
        double keep = logits[i];
        logits[i] = keep + FD_H;
        double up = mse_total(logits, target, B, C, scale, rows);
        logits[i] = keep - FD_H;
        double dn = mse_total(logits, target, B, C, scale, rows);
        logits[i] = keep;
        fdl[i] = (up - dn) / (2 * FD_H);
    }
    fd_check(t, "mse", dl, fdl, B * C);

    // Bias: with L = sum w * bias_add(y, bias), dL/dbias = bias_grad(w).
    double y[B * C], w[B * C], bias[C], db[C], fdb[C], tmp[B * C];
    for (int i = 0; i < B * C; i++)
        y[i] = vt_rand_uniform(&seed, -1, 1), w[i] = vt_rand_uniform(&seed, -1, 1);
    for (int j = 0; j < C; j++)
        bias[j] = vt_rand_uniform(&seed, -1, 1), db[j] = 0;
    ref_bias_grad(db, w, B, C);
    for (int j = 0; j < C; j++) {
        double l[2];
        for (int s = 0; s < 2; s++) {
            double keep = bias[j];
            bias[j] = keep + (s ? -FD_H : FD_H);
            memcpy(tmp, y, sizeof tmp);
            ref_bias_add(tmp, bias, B, C);
            bias[j] = keep;
            l[s] = 0;
            for (int i = 0; i < B * C; i++)
                l[s] += w[i] * tmp[i];
        }
        fdb[j] = (l[0] - l[1]) / (2 * FD_H);
    }
    fd_check(t, "bias_add/bias_grad", db, fdb, C);
}

// ---------------------------------------------------------------------------------------------
// Bias add and gradient

static void test_bias(dctx *c, uint32_t R, uint32_t N, uint64_t seed) {
    size_t n = (size_t)R * N;
    float *y = rand_floats(n, seed, -1, 1), *bias = rand_floats(N, seed + 1, -1, 1);
    float *db = rand_floats(N, seed + 2, -1, 1), *got = malloc(n * sizeof *got);
    vkt_buffer *by = buf_new(c, n * 4, y, "y"), *bb = buf_new(c, N * 4, bias, "bias");
    vkt_buffer *bdy = buf_new(c, n * 4, y, "dy"), *bdb = buf_new(c, N * 4, db, "db");
    char what[96];
    if (by && bb && bdy && bdb && begin(c)) {
        vkt_op_bias_add(c->cmd, c->ops, whole(by), whole(bb), R, N, "bias_add");
        vkt_op_bias_grad(c->cmd, c->ops, whole(bdb), whole(bdy), R, N, "bias_grad");
        snprintf(what, sizeof what, "bias R=%u N=%u", R, N);
        if (run(c, what)) {
            double *ry = to_double(y, n), *rb = to_double(bias, N), *rdb = to_double(db, N);
            ref_bias_add(ry, rb, R, N);
            read_back(c, by, got, n * 4);
            snprintf(what, sizeof what, "bias_add R=%u N=%u", R, N);
            compare(c, what, got, ry, n, 1e-6, 1e-6);
            double *rdy = to_double(y, n);
            ref_bias_grad(rdb, rdy, R, N);
            read_back(c, bdb, got, N * 4);
            snprintf(what, sizeof what, "bias_grad R=%u N=%u", R, N);
            compare(c, what, got, rdb, N, 2e-5, 1e-5);
            free(ry), free(rb), free(rdb), free(rdy);
        }
    }
    vkt_buffer_destroy(bdb), vkt_buffer_destroy(bdy), vkt_buffer_destroy(bb),
        vkt_buffer_destroy(by);
    free(y), free(bias), free(db), free(got);
}

// ---------------------------------------------------------------------------------------------
// Activations

static void act_tol(vkt_act a, double *atol, double *rtol) {
    bool smooth = a == VKT_ACT_GELU || a == VKT_ACT_TANH || a == VKT_ACT_SIGMOID;
    *atol = smooth ? 2e-6 : 1e-6;
    *rtol = smooth ? 1e-5 : 1e-6;
}

// Forward into a separate y, forward in place, backward with dx aliasing dy, and (where f'
// follows from the output) backward from the forward's y, against the same reference.
static void test_act(dctx *c, vkt_act a, uint32_t n, uint64_t seed) {
    const float alpha = 0.03f;
    float *x = rand_floats(n, seed, -6, 6), *dy = rand_floats(n, seed + 1, -1, 1);
    // Saturated inputs: no inf/inf anywhere.
    const float extremes[] = {-100.0f, 100.0f, -30.0f, 30.0f, 0.0f, -9.5f, 9.5f};
    for (size_t i = 0; i < n && i < sizeof extremes / sizeof *extremes; i++)
        x[i] = extremes[i];
    float *got = malloc((size_t)n * 4);
    vkt_buffer *bx = buf_new(c, n * 4ull, x, "x"), *by = buf_new(c, n * 4ull, NULL, "y");
    vkt_buffer *bin = buf_new(c, n * 4ull, x, "x in place"), *bd = buf_new(c, n * 4ull, dy, "dy");
    bool from_y = vkt_act_grad_from_output(a, alpha);
    vkt_buffer *bdy = from_y ? buf_new(c, n * 4ull, dy, "dy (from y)") : NULL;
    char what[96];
    snprintf(what, sizeof what, "%s n=%u", act_name(a), n);
    if (bx && by && bin && bd && begin(c)) {
        vkt_op_act_forward(c->cmd, c->ops, a, alpha, whole(by), whole(bx), n, "act");
        vkt_op_act_forward(c->cmd, c->ops, a, alpha, whole(bin), whole(bin), n, "act in place");
        vkt_op_act_backward(c->cmd, c->ops, a, alpha, whole(bd), whole(bd), whole(bx), n,
                            "act bwd");
        if (bdy) {
            vkt_cmd_barrier(c->cmd); // y is the forward's
            vkt_op_act_backward_from_output(c->cmd, c->ops, a, alpha, whole(bdy), whole(bdy),
                                            whole(by), n, "act bwd from y");
        }
        if (run(c, what)) {
            double atol, rtol;
            act_tol(a, &atol, &rtol);
            double *rx = to_double(x, n), *rdy = to_double(dy, n), *ref = malloc(n * sizeof *ref);
            ref_act_forward(a, alpha, ref, rx, n);
            read_back(c, by, got, n * 4ull);
            snprintf(what, sizeof what, "%s forward n=%u", act_name(a), n);
            compare(c, what, got, ref, n, atol, rtol);
            read_back(c, bin, got, n * 4ull);
            snprintf(what, sizeof what, "%s forward in place n=%u", act_name(a), n);
            compare(c, what, got, ref, n, atol, rtol);
            ref_act_backward(a, alpha, ref, rdy, rx, n);
            read_back(c, bd, got, n * 4ull);
            snprintf(what, sizeof what, "%s backward n=%u", act_name(a), n);
            compare(c, what, got, ref, n, atol, rtol);
            if (bdy) {
                read_back(c, bdy, got, n * 4ull);
                snprintf(what, sizeof what, "%s backward from the output n=%u", act_name(a), n);
                compare(c, what, got, ref, n, atol, rtol);
            }
            free(rx), free(rdy), free(ref);
        }
    }
    vkt_buffer_destroy(bdy);
    vkt_buffer_destroy(bd), vkt_buffer_destroy(bin), vkt_buffer_destroy(by), vkt_buffer_destroy(bx);
    free(x), free(dy), free(got);
}

// ---------------------------------------------------------------------------------------------
// Losses

static void test_xent(dctx *c, uint32_t B, uint32_t C, float lo, float hi, uint64_t seed) {
    size_t n = (size_t)B * C;
    float *logits = rand_floats(n, seed, lo, hi);
    uint32_t *labels = malloc(B * 4);
    uint64_t s = seed + 7;
    for (uint32_t b = 0; b < B; b++)
        labels[b] = (uint32_t)(vt_rand_u64(&s) % C);
    if (hi - lo > 100) { // large logits: saturate whole rows at +-80 too
        for (uint32_t j = 0; j < C; j++)
            logits[j] = 80.0f;
        if (B > 1)
            for (uint32_t j = 0; j < C; j++)
                logits[C + j] = j % 2 ? -80.0f : 80.0f;
    }
    float *loss = malloc(B * 4), *dl = malloc(n * 4);
    vkt_buffer *bl = buf_new(c, n * 4, logits, "logits"), *by = buf_new(c, B * 4, labels, "labels");
    vkt_buffer *br = buf_new(c, B * 4, NULL, "loss_rows"), *bd = buf_new(c, n * 4, NULL, "dlogits");
    char what[96];
    snprintf(what, sizeof what, "softmax_xent B=%u C=%u logits in [%g,%g]", B, C, lo, hi);
    float scale = 1.0f / (float)B;
    if (bl && by && br && bd && begin(c)) {
        vkt_op_softmax_xent(c->cmd, c->ops, whole(br), whole(bd), whole(bl), whole(by), B, C, scale,
                            "xent");
        if (run(c, what)) {
            double *rl = to_double(logits, n), *rrow = malloc(B * 8), *rd = malloc(n * 8);
            ref_softmax_xent(rrow, rd, rl, labels, B, C, scale);
            read_back(c, br, loss, B * 4);
            read_back(c, bd, dl, n * 4);
            bool finite = true;
            for (uint32_t b = 0; b < B; b++)
                finite &= isfinite(loss[b]);
            for (size_t i = 0; i < n; i++)
                finite &= isfinite(dl[i]);
            VT_CHECK(c->t, finite, "%s on %s: not finite", what, c->name);
            char w2[128];
            snprintf(w2, sizeof w2, "%s loss", what);
            compare(c, w2, loss, rrow, B, 2e-5, 1e-5);
            snprintf(w2, sizeof w2, "%s dlogits", what);
            compare(c, w2, dl, rd, n, 1e-6, 1e-4);
            free(rl), free(rrow), free(rd);
        }
    }
    vkt_buffer_destroy(bd), vkt_buffer_destroy(br), vkt_buffer_destroy(by), vkt_buffer_destroy(bl);
    free(logits), free(labels), free(loss), free(dl);
}

static void test_mse(dctx *c, uint32_t B, uint32_t N, uint64_t seed) {
    size_t n = (size_t)B * N;
    float *pred = rand_floats(n, seed, -2, 2), *target = rand_floats(n, seed + 1, -2, 2);
    float *loss = malloc(B * 4), *dp = malloc(n * 4);
    vkt_buffer *bp = buf_new(c, n * 4, pred, "pred"), *bt = buf_new(c, n * 4, target, "target");
    vkt_buffer *br = buf_new(c, B * 4, NULL, "loss_rows"), *bd = buf_new(c, n * 4, NULL, "dpred");
    char what[96];
    snprintf(what, sizeof what, "mse B=%u N=%u", B, N);
    float scale = 1.0f / (float)n;
    if (bp && bt && br && bd && begin(c)) {
        vkt_op_mse(c->cmd, c->ops, whole(br), whole(bd), whole(bp), whole(bt), B, N, scale, "mse");
        if (run(c, what)) {
            double *rp = to_double(pred, n), *rt = to_double(target, n);
            double *rrow = malloc(B * 8), *rd = malloc(n * 8);
            ref_mse(rrow, rd, rp, rt, B, N, scale);
            read_back(c, br, loss, B * 4);
            read_back(c, bd, dp, n * 4);
            char w2[128];
            snprintf(w2, sizeof w2, "%s loss", what);
            compare(c, w2, loss, rrow, B, 2e-5, 1e-5);
            snprintf(w2, sizeof w2, "%s dpred", what);
            compare(c, w2, dp, rd, n, 1e-6, 1e-6);
            free(rp), free(rt), free(rrow), free(rd);
        }
    }
    vkt_buffer_destroy(bd), vkt_buffer_destroy(br), vkt_buffer_destroy(bt), vkt_buffer_destroy(bp);
    free(pred), free(target), free(loss), free(dp);
}

// Logits drawn from {0, 1, 2, 3} so that most rows have tied maxima; even rows are labelled
// with the lowest tied index (correct), odd rows at random (often a later tied index: wrong).
static void test_accuracy(dctx *c, uint32_t B, uint32_t C, bool with_preds, uint64_t seed) {
    size_t n = (size_t)B * C;
    float *logits = malloc(n * 4);
    uint64_t s = seed;
    for (size_t i = 0; i < n; i++)
        logits[i] = (float)(vt_rand_u64(&s) % 4);
    double *rl = to_double(logits, n);
    uint32_t *labels = malloc(B * 4), *rpred = malloc(B * 4), *pred = malloc(B * 4);
    ref_accuracy(rpred, rl, labels, B, C); // labels unused for the argmax
    for (uint32_t b = 0; b < B; b++)
        labels[b] = b % 2 ? (uint32_t)(vt_rand_u64(&s) % C) : rpred[b];
    uint32_t want = ref_accuracy(rpred, rl, labels, B, C);
    const uint32_t start = 5; // correct[0] accumulates
    vkt_buffer *bl = buf_new(c, n * 4, logits, "logits"), *by = buf_new(c, B * 4, labels, "labels");
    vkt_buffer *bc = buf_new(c, 4, &start, "correct"), *bp = buf_new(c, B * 4, NULL, "preds");
    char what[96];
    snprintf(what, sizeof what, "accuracy B=%u C=%u%s", B, C, with_preds ? " with preds" : "");
    if (bl && by && bc && bp && begin(c)) {
        vkt_view vp = whole(bp);
        vkt_op_accuracy(c->cmd, c->ops, whole(bc), with_preds ? &vp : NULL, whole(bl), whole(by), B,
                        C, "accuracy");
        if (run(c, what)) {
            uint32_t got = 0;
            read_back(c, bc, &got, 4);
            VT_CHECK(c->t, got == start + want, "%s on %s: correct %u, want %u", what, c->name,
                     got - start, want);
            if (with_preds) {
                read_back(c, bp, pred, B * 4);
                uint32_t bad = 0;
                for (uint32_t b = 0; b < B; b++)
                    bad += pred[b] != rpred[b];
                VT_CHECK(c->t, bad == 0, "%s on %s: %u wrong argmax", what, c->name, bad);
            }
        }
    }
    vkt_buffer_destroy(bp), vkt_buffer_destroy(bc), vkt_buffer_destroy(by), vkt_buffer_destroy(bl);
    free(logits), free(rl), free(labels), free(rpred), free(pred);
}

// ---------------------------------------------------------------------------------------------
// Reductions, clipping, scaling, axpy

// out = 0.5 + sumsq(x); x *= 0.5 (scale); out2 = 0 + sumsq(x), each op behind a barrier. For the
// largest n this also checks that views beyond the storage-buffer range are sliced into several
// dispatches.
static void test_sumsq_scale(dctx *c, uint32_t n, uint64_t seed) {
    float *x = rand_floats(n, seed, -1, 1);
    const float init = 0.5f, zero = 0.0f;
    vkt_buffer *bx = buf_new(c, n * 4ull, x, "x"), *bo = buf_new(c, 4, &init, "out");
    vkt_buffer *bo2 = buf_new(c, 4, &zero, "out after scale");
    char what[96];
    snprintf(what, sizeof what, "sumsq/scale n=%u", n);
    if (bx && bo && bo2 && begin(c)) {
        vkt_op_sumsq(c->cmd, c->ops, whole(bo), whole(bx), n, "sumsq");
        vkt_cmd_barrier(c->cmd);
        vkt_op_scale(c->cmd, c->ops, whole(bx), 0.5f, n, "scale");
        vkt_cmd_barrier(c->cmd);
        vkt_op_sumsq(c->cmd, c->ops, whole(bo2), whole(bx), n, "sumsq after scale");
        if (run(c, what)) {
            double *rx = to_double(x, n);
            double ref[2] = {0.5 + ref_sumsq(rx, n), 0.25 * ref_sumsq(rx, n)};
            float got[2];
            read_back(c, bo, &got[0], 4);
            read_back(c, bo2, &got[1], 4);
            char w2[128];
            snprintf(w2, sizeof w2, "%s sumsq", what);
            compare(c, w2, got, ref, 2, 0, 1e-5);
            uint64_t range = vkt_device_get_info(c->dev)->max_storage_buffer_range;
            if (n * 4ull > range)
                VT_CHECK(c->t, vkt_cmd_dispatch_count(c->cmd) >= 6,
                         "%s on %s: %llu bytes over a %llu-byte range were not sliced", what,
                         c->name, (unsigned long long)n * 4, (unsigned long long)range);
            // x * 0.5 is exact in fp32.
            float *got_x = malloc(n * 4ull);
            read_back(c, bx, got_x, n * 4ull);
            size_t bad = 0;
            for (size_t i = 0; i < n; i++)
                bad += got_x[i] != 0.5f * x[i];
            VT_CHECK(c->t, bad == 0, "%s on %s: scale: %zu of %u wrong", what, c->name, bad, n);
            free(got_x);
            free(rx);
        }
    }
    vkt_buffer_destroy(bo2), vkt_buffer_destroy(bo), vkt_buffer_destroy(bx);
    free(x);
}

// sumsq.comp's path for devices without subgroup shuffles (SUBGROUP = 0: every lane adds its
// own sum into out[0]), which vkt_op_sumsq takes on no device here: the kernel run directly, on
// an arbitrary grid (its workgroups stride over x, so any grid covers it).
static void test_sumsq_no_shuffle(dctx *c, uint32_t n, uint32_t groups, uint64_t seed) {
    float *x = rand_floats(n, seed, -1, 1);
    const float zero = 0;
    const vkt_device_info *info = vkt_device_get_info(c->dev);
    uint32_t wg = info->max_workgroup_invocations < 256 ? info->max_workgroup_invocations : 256;
    uint32_t spec[4] = {wg, 1, 1, 0};
    vkt_kernel *k = NULL;
    VT_OK(c->t, vkt_kernel_create(c->dev, VKT_SHADER_SUMSQ, spec, 4, &k));
    vkt_buffer *bx = buf_new(c, n * 4ull, x, "x"), *bo = buf_new(c, 4, &zero, "out");
    char what[96];
    snprintf(what, sizeof what, "sumsq without shuffles n=%u, %u workgroups", n, groups);
    if (k && bx && bo && begin(c)) {
        vkt_view b[3] = {whole(bx), whole(bx), whole(bo)};
        vkt_scale_push p = {.n = n};
        vkt_cmd_dispatch(c->cmd, k, b, 3, &p, sizeof p, groups, 1, 1, "sumsq");
        if (run(c, what)) {
            double *rx = to_double(x, n), ref = ref_sumsq(rx, n);
            float got;
            read_back(c, bo, &got, 4);
            compare(c, what, &got, &ref, 1, 0, 1e-5);
            free(rx);
        }
    }
    vkt_buffer_destroy(bo), vkt_buffer_destroy(bx), vkt_kernel_destroy(k);
    free(x);
}

// sumsq then clip_scale of the same gradient, one command stream, max_norm below and above the
// gradient's norm; and add (z = x + 1.5 g, a residual block's sum) then axpy.
static void test_clip_axpy(dctx *c, uint32_t n, uint64_t seed) {
    float *g = rand_floats(n, seed, -1, 1), *x = rand_floats(n, seed + 1, -1, 1);
    double *rg = to_double(g, n), *rx = to_double(x, n);
    double norm = sqrt(ref_sumsq(rg, n));
    const float zero = 0;
    float *got = malloc(n * 4ull);
    for (int k = 0; k < 2; k++) {
        float max_norm = (float)(k == 0 ? 0.3 * norm : 2.0 * norm);
        vkt_buffer *bg = buf_new(c, n * 4ull, g, "g"), *bs = buf_new(c, 4, &zero, "sumsq");
        vkt_buffer *bx = buf_new(c, n * 4ull, x, "x"), *bz = buf_new(c, n * 4ull, NULL, "z");
        char what[96];
        snprintf(what, sizeof what, "clip_scale n=%u max_norm=%.3g*norm", n, max_norm / norm);
        if (bg && bs && bx && bz && begin(c)) {
            vkt_op_add(c->cmd, c->ops, whole(bz), whole(bx), whole(bg), 1.5f, n, "add");
            vkt_cmd_barrier(c->cmd); // axpy then writes x
            vkt_op_sumsq(c->cmd, c->ops, whole(bs), whole(bg), n, "sumsq");
            vkt_op_axpy(c->cmd, c->ops, whole(bx), whole(bg), -0.75f, n, "axpy");
            vkt_cmd_barrier(c->cmd);
            vkt_op_clip_scale(c->cmd, c->ops, whole(bg), whole(bs), n, max_norm, "clip");
            if (run(c, what)) {
                double *ref = malloc(n * sizeof *ref);
                memcpy(ref, rg, n * sizeof *ref);
                ref_clip_scale(ref, norm * norm, n, max_norm);
                read_back(c, bg, got, n * 4ull);
                // The factor comes from a fp32 sum: allow its relative error on top.
                compare(c, what, got, ref, n, 1e-6, 1e-5);
                for (size_t i = 0; i < n; i++)
                    ref[i] = rx[i] - 0.75 * (double)g[i];
                read_back(c, bx, got, n * 4ull);
                snprintf(what, sizeof what, "axpy n=%u", n);
                compare(c, what, got, ref, n, 1e-6, 1e-6);
                for (size_t i = 0; i < n; i++)
                    ref[i] = rx[i] + 1.5 * (double)g[i];
                read_back(c, bz, got, n * 4ull);
                snprintf(what, sizeof what, "add n=%u", n);
                compare(c, what, got, ref, n, 1e-6, 1e-6);
                free(ref);
            }
        }
        vkt_buffer_destroy(bz), vkt_buffer_destroy(bx), vkt_buffer_destroy(bs),
            vkt_buffer_destroy(bg);
    }
    free(g), free(x), free(rg), free(rx), free(got);
}

// ---------------------------------------------------------------------------------------------

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

int main(void) {
    vt tv, *t = &tv;
    if (vt_init(t, "test_ops")) return 1;
    test_reference_gradients(t);
    for (int d = 0; d < t->ndev; d++) {
        double t0 = now_s();
        dctx c = {.t = t, .dev = t->dev[d], .name = vkt_device_label(t->dev[d])};
        VT_OK(t, vkt_ops_create(c.dev, &c.ops));
        VT_OK(t, vkt_cmd_create(c.dev, &c.cmd));
        if (!c.ops || !c.cmd) continue;
        uint64_t seed = 100;
        for (int i = 0; i < NSHAPES; i++)
            for (int j = 0; j < NSHAPES; j++) {
                uint32_t R = SHAPES[i], N = SHAPES[j];
                test_bias(&c, R, N, seed++);
                test_xent(&c, R, N, -5, 5, seed++);
                test_mse(&c, R, N, seed++);
                test_accuracy(&c, R, N, (i + j) % 2 == 0, seed++);
            }
        // Columns a multiple of 4: on lavapipe the bias gradient reads dy through a texel
        // buffer (bias_grad_texel), 32 lanes of 4 columns per workgroup (132 columns: a second,
        // partial workgroup).
        const uint32_t bias4[][2] = {{1, 4}, {33, 8}, {127, 512}, {513, 132}};
        for (size_t i = 0; i < sizeof bias4 / sizeof bias4[0]; i++)
            test_bias(&c, bias4[i][0], bias4[i][1], seed++);
        test_xent(&c, 7, 33, -80, 80, seed++);
        test_xent(&c, 7, 513, -80, 80, seed++);
        test_xent(&c, 127, 10, -80, 80, seed++);
        for (int a = VKT_ACT_RELU; a <= VKT_ACT_SIGMOID; a++) {
            for (int i = 0; i < NSHAPES; i++)
                test_act(&c, (vkt_act)a, SHAPES[i], seed++);
            for (int i = 0; i < NEW_EXTRA; i++)
                test_act(&c, (vkt_act)a, EW_EXTRA[i], seed++);
        }
        test_act(&c, VKT_ACT_GELU, 5000000, seed++);
        for (int i = 0; i < NSHAPES; i++)
            test_sumsq_scale(&c, SHAPES[i], seed++);
        for (int i = 0; i < NEW_EXTRA; i++)
            test_sumsq_scale(&c, EW_EXTRA[i], seed++);
        test_sumsq_scale(&c, 5000000, seed++);
        test_sumsq_scale(&c, 50000000, seed++);
        test_sumsq_no_shuffle(&c, 7, 1, seed++);
        test_sumsq_no_shuffle(&c, 1000003, 7, seed++);
        for (int i = 0; i < NSHAPES; i++)
            test_clip_axpy(&c, SHAPES[i], seed++);
        for (int i = 0; i < NEW_EXTRA; i++)
            test_clip_axpy(&c, EW_EXTRA[i], seed++);
        test_clip_axpy(&c, 1000000, seed++);
        vkt_cmd_destroy(c.cmd);
        vkt_ops_destroy(c.ops);
        VT_CHECK(t, vkt_device_memory_used(c.dev) == 0, "memory not returned on %s", c.name);
        printf("test_ops: %s: %.2f s\n", c.name, now_s() - t0);
    }
    return vt_finish(t);
}
