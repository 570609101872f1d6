// test_embedding.c: the token embedding (`embedding`, torch.nn.Embedding over float ids) and the
// learned position embedding (`position_embedding`). On every device:
//  - the ops (engine/ops/embed_ops.h) against double references: the gather, exact, with ids
//    outside [0, V) or not whole (clamped as shaders/embed_abi.h says; the op's counter counts
//    them); the weight gradient with many repeated ids, accumulating into a nonzero dW, the same
//    bits on a second run; both also with a small binding range that cuts the table, the
//    gradient and the positions into chunks; the backward's time at V = 64 and V = 50257 (it
//    must not grow with V);
//  - a network whose input is integer token ids (lc_run fills inputs with floats in [-1.5, 1.5],
//    so this test has a check of its own): embedding -> position_embedding -> flatten -> dense,
//    fused and unfused, training forward, loss, every parameter gradient against the reference,
//    the input gradient exactly 0, the reference's weight gradient against central differences,
//    the same bits from a second step; one batch with few distinct ids (the accumulation) and
//    one over GPT-2's vocabulary size V = 50257 with more positions than a sort tile;
//  - lc_run cases for position_embedding ([5, 6] -> position_embedding(8) -> flatten -> dense,
//    with the input gradient; after a dense layer at T = max_len) and for an embedding on lc_run's
//    float inputs (every id clamped or truncated: the rule, end to end);
//  - parsing: shapes, tensors and their initialisation (uniform of the documented bounds, with
//    the documented standard deviation after vkt_net_init), torch text, errors by their messages.
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "embed_ops.h"
#include "layer.h"
#include "layer_check.h"
#include "model.h"
#include "network.h"
#include "test_util.h"

static bool has(const char *msg, const char *needle) { return strstr(msg, needle) != NULL; }

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

// The row rule of shaders/embed_abi.h, written again from its words: truncated toward zero,
// clamped into [0, V - 1], NaN to row 0.
static uint32_t row_of(float id, uint32_t V) {
    if (isnan(id) || id < 0) return 0;
    if (id >= (float)(V - 1)) return V - 1;
    return (uint32_t)truncf(id);
}

static bool valid_id(float id, uint32_t V) { return id >= 0 && id < (float)V && id == floorf(id); }

// ---------------------------------------------------------------------------------------------
// The ops

typedef struct op_bufs {
    vkt_buffer *ids, *w, *y, *bad, *dy, *dw, *scratch;
    vkt_cmd *cmd;
} op_bufs;

static void free_bufs(op_bufs *b) {
    vkt_cmd_destroy(b->cmd);
    vkt_buffer_destroy(b->ids);
    vkt_buffer_destroy(b->w);
    vkt_buffer_destroy(b->y);
    vkt_buffer_destroy(b->bad);
    vkt_buffer_destroy(b->dy);
    vkt_buffer_destroy(b->dw);
    vkt_buffer_destroy(b->scratch);
}

// ids for N positions over a table of V rows: mostly a few hot ids (repeats), some spread over
// [0, V), and (with specials) ids that break the rules at fixed places.
static void make_ids(float *ids, uint32_t N, uint32_t V, uint64_t seed, bool specials) {
    uint64_t s = seed;
    for (uint32_t n = 0; n < N; n++) {
        uint64_t r = vt_rand_u64(&s);
        ids[n] = (float)(r % 3 == 0 ? r / 3 % V : (r / 3) % 5 * (V / 5));
    }
    if (!specials) return;
    static const float bad[] = {-1.0f, 2.5f, -0.0f, NAN, INFINITY, -INFINITY, 1e9f, -7.25f};
    for (size_t k = 0; k < sizeof bad / sizeof *bad && 7 * k < N; k++)
        ids[7 * k] = bad[k];
    if (N > 100) {
        ids[60] = (float)V;     // one past the end
        ids[61] = (float)V - 1; // the last row: valid
        ids[62] = (float)V - 0.5f;
    }
}

// Forward and backward of the op on one device with one binding range; checks against the
// double reference and returns the backward's dW (for the caller's comparisons) in dw_out.
static void run_ops(vt *t, vkt_device *dev, vkt_ops *ops, uint32_t N, uint32_t V, uint32_t C,
                    uint64_t range, float *dw_out) {
    char where[160];
    snprintf(where, sizeof where, "N %u V %u C %u range %llu on %s", N, V, C,
             (unsigned long long)range, vkt_device_label(dev));
    uint64_t nw = (uint64_t)V * C, ny = (uint64_t)N * C;
    float *ids = malloc(4ull * N), *w = malloc(4 * nw), *y = malloc(4 * ny), *dy = malloc(4 * ny);
    float *dw0 = malloc(4 * nw);
    double *ref = malloc(8 * (nw > ny ? nw : ny));
    make_ids(ids, N, V, 5 + N + V, true);
    vt_fill_uniform(w, nw, 17, -2.0f, 2.0f);
    vt_fill_uniform(dy, ny, 19, -1.0f, 1.0f);
    vt_fill_uniform(dw0, nw, 23, -0.5f, 0.5f); // the gradient accumulates onto this
    op_bufs b = {0};
    VT_OK(t, vkt_buffer_create(dev, 4ull * N, "ids", &b.ids));
    VT_OK(t, vkt_buffer_create(dev, 4 * nw, "w", &b.w));
    VT_OK(t, vkt_buffer_create(dev, 4 * ny, "y", &b.y));
    VT_OK(t, vkt_buffer_create(dev, 16, "bad", &b.bad));
    VT_OK(t, vkt_buffer_create(dev, 4 * ny, "dy", &b.dy));
    VT_OK(t, vkt_buffer_create(dev, 4 * nw, "dw", &b.dw));
    VT_OK(t, vkt_buffer_create(dev, vkt_embedding_backward_scratch(N), "keys", &b.scratch));
    VT_OK(t, vkt_cmd_create(dev, &b.cmd));
    if (!b.ids || !b.w || !b.y || !b.bad || !b.dy || !b.dw || !b.scratch || !b.cmd) goto out;
    uint32_t bad0 = 5;
    VT_OK(t, vkt_buffer_write(b.ids, 0, ids, 4ull * N));
    VT_OK(t, vkt_buffer_write(b.w, 0, w, 4 * nw));
    VT_OK(t, vkt_buffer_write(b.dy, 0, dy, 4 * ny));
    VT_OK(t, vkt_buffer_write(b.bad, 0, &bad0, 4));

    // Forward: exact rows, and the count of bad ids added to 5.
    VT_OK(t, vkt_cmd_begin(b.cmd, false));
    vkt_cmd_fill(b.cmd, vkt_buffer_whole(b.y), 0x7fc00000u); // NaN: every element is written
    vkt_cmd_barrier(b.cmd);
    vkt_view bad = vkt_buffer_view(b.bad, 0, 4);
    vkt_op_embedding_forward(b.cmd, ops, vkt_buffer_whole(b.y), vkt_buffer_whole(b.ids),
                             vkt_buffer_whole(b.w), &bad, N, V, C, range, "embedding fwd");
    if (vt_run(t, b.cmd, ops, "embedding forward", where)) {
        uint32_t got_bad = 0, want_bad = bad0;
        VT_OK(t, vkt_buffer_read(b.y, 0, y, 4 * ny));
        VT_OK(t, vkt_buffer_read(b.bad, 0, &got_bad, 4));
        uint64_t wrong = 0;
        for (uint32_t n = 0; n < N; n++) {
            want_bad += !valid_id(ids[n], V);
            uint32_t r = row_of(ids[n], V);
            for (uint32_t c = 0; c < C; c++)
                if (memcmp(&y[(uint64_t)n * C + c], &w[(uint64_t)r * C + c], 4) != 0 && wrong++ < 3)
                    fprintf(stderr, "  y[%u, %u] = %g, id %g: row %u holds %g\n", n, c,
                            (double)y[(uint64_t)n * C + c], (double)ids[n], r,
                            (double)w[(uint64_t)r * C + c]);
        }
        VT_CHECK(t, wrong == 0, "%s: %llu outputs are not their row's", where,
                 (unsigned long long)wrong);
        VT_CHECK(t, got_bad == want_bad, "%s: bad-id counter %u, expected %u", where, got_bad,
                 want_bad);
    }

    // Backward twice from the same dW: against the reference, and the same bits both times.
    float *first = malloc(4 * nw);
    for (int rep = 0; rep < 2; rep++) {
        VT_OK(t, vkt_buffer_write(b.dw, 0, dw0, 4 * nw));
        VT_OK(t, vkt_cmd_begin(b.cmd, false));
        vkt_cmd_fill(b.cmd, vkt_buffer_whole(b.scratch), 0x12345678u); // stale keys
        vkt_cmd_barrier(b.cmd);
        vkt_op_embedding_backward(b.cmd, ops, vkt_buffer_whole(b.dw), vkt_buffer_whole(b.dy),
                                  vkt_buffer_whole(b.ids), vkt_buffer_whole(b.scratch), N, V, C,
                                  range, "embedding bwd");
        if (!vt_run(t, b.cmd, ops, "embedding backward", where)) break;
        VT_OK(t, vkt_buffer_read(b.dw, 0, rep ? dw_out : first, 4 * nw));
    }
    for (uint64_t i = 0; i < nw; i++)
        ref[i] = dw0[i];
    for (uint32_t n = 0; n < N; n++) {
        uint32_t r = row_of(ids[n], V);
        for (uint32_t c = 0; c < C; c++)
            ref[(uint64_t)r * C + c] += dy[(uint64_t)n * C + c];
    }
    char what[200];
    snprintf(what, sizeof what, "%s: dW", where);
    VT_CHECK(t, vt_compare(what, dw_out, ref, nw, 1e-5, 1e-5) == 0, "%s", what);
    VT_CHECK(t, memcmp(first, dw_out, 4 * nw) == 0, "%s: a second backward gives other bits",
             where);
    free(first);
out:
    free_bufs(&b);
    free(ids);
    free(w);
    free(y);
    free(dy);
    free(dw0);
    free(ref);
}

// The backward's device time at two vocabulary sizes (wall clock of submit and wait, best of 3).
static double time_backward(vt *t, vkt_device *dev, vkt_ops *ops, uint32_t N, uint32_t V,
                            uint32_t C) {
    op_bufs b = {0};
    double best = -1;
    float *ids = malloc(4ull * N);
    make_ids(ids, N, V, 3, false);
    VT_OK(t, vkt_buffer_create(dev, 4ull * N, "ids", &b.ids));
    VT_OK(t, vkt_buffer_create(dev, 4ull * N * C, "dy", &b.dy));
    VT_OK(t, vkt_buffer_create(dev, 4ull * V * C, "dw", &b.dw));
    VT_OK(t, vkt_buffer_create(dev, vkt_embedding_backward_scratch(N), "keys", &b.scratch));
    VT_OK(t, vkt_cmd_create(dev, &b.cmd));
    if (!b.ids || !b.dy || !b.dw || !b.scratch || !b.cmd) goto out;
    VT_OK(t, vkt_buffer_write(b.ids, 0, ids, 4ull * N));
    VT_OK(t, vkt_cmd_begin(b.cmd, false));
    vkt_cmd_fill(b.cmd, vkt_buffer_whole(b.dy), 0);
    vkt_cmd_fill(b.cmd, vkt_buffer_whole(b.dw), 0);
    if (!vt_run(t, b.cmd, ops, "embedding timing set-up", vkt_device_label(dev))) goto out;
    VT_OK(t, vkt_cmd_begin(b.cmd, false));
    vkt_op_embedding_backward(b.cmd, ops, vkt_buffer_whole(b.dw), vkt_buffer_whole(b.dy),
                              vkt_buffer_whole(b.ids), vkt_buffer_whole(b.scratch), N, V, C, 0,
                              "embedding bwd");
    VT_OK(t, vkt_cmd_end(b.cmd));
    for (int rep = 0; rep < 3; rep++) {
        double t0 = now_ms();
        VT_OK(t, vkt_cmd_submit(b.cmd));
        VT_OK(t, vkt_cmd_wait(b.cmd, VKT_WAIT_MS));
        double ms = now_ms() - t0;
        if (best < 0 || ms < best) best = ms;
    }
out:
    free(ids);
    free_bufs(&b);
    return best;
}

static void test_ops(vt *t, vkt_device *dev, vkt_ops *ops) {
    uint32_t V = 1000, C = 5, N = 1003;
    float *whole = malloc(4ull * V * C), *cut = malloc(4ull * V * C);
    run_ops(t, dev, ops, N, V, C, 0, whole);
    // 8 KiB bindings: chunks of table rows and positions in the forward, of positions (sorted
    // apart) and gradient rows in the backward.
    run_ops(t, dev, ops, N, V, C, 8192, cut);
    free(whole);
    free(cut);
    // Few positions, and one: a single partial tile of keys.
    float dw[64 * 3];
    run_ops(t, dev, ops, 37, 64, 3, 0, dw);
    run_ops(t, dev, ops, 1, 64, 3, 0, dw);
    // 4096 positions (8 tiles: global merge steps) over a large table.
    float *big = malloc(4ull * 50257 * 4);
    run_ops(t, dev, ops, 4096, 50257, 4, 0, big);
    free(big);
    double small = time_backward(t, dev, ops, 4096, 64, 8);
    double large = time_backward(t, dev, ops, 4096, 50257, 8);
    printf("  %s: embedding backward of 4096 positions, C = 8: %.2f ms at V = 64, %.2f ms at V = "
           "50257\n",
           vkt_device_label(dev), small, large);
}

// ---------------------------------------------------------------------------------------------
// A network on integer token ids

typedef struct net_case {
    const char *json;
    uint32_t B;
    uint32_t V; // the embedding's rows, for the ids
    uint64_t seed;
} net_case;

// Central differences of the reference's MSE loss for a sample of the embedding weight's
// entries (rows that the batch uses, and one it does not).
static int check_fd(vkt_ref *ref, const vkt_model_desc *m, const double *x, const double *tg,
                    uint32_t B, const float *ids, uint32_t C, int *n_out) {
    uint32_t out = m->output_features;
    double *z = malloc(8ull * B * out);
    double *w = vkt_ref_param(ref, 0), *g = vkt_ref_grad(ref, 0);
    int bad = 0, n = 0;
    uint32_t T = m->input_features;
    uint32_t V = m->layers[0].units;
    for (uint32_t k = 0; k <= 40; k++) { // 40 positions' rows, then the last row
        uint32_t row = k < 40 ? row_of(ids[(k * 37) % (B * T)], V) : V - 1;
        for (uint32_t c = 0; c < C; c += 1 + C / 3) {
            uint64_t i = (uint64_t)row * C + c;
            double keep = w[i], loss[2];
            for (int s = 0; s < 2; s++) {
                w[i] = keep + (s ? -1e-6 : 1e-6);
                vkt_ref_forward(ref, x, z);
                double l = 0;
                for (uint64_t j = 0; j < (uint64_t)B * out; j++)
                    l += (z[j] - tg[j]) * (z[j] - tg[j]);
                loss[s] = l / B;
            }
            w[i] = keep;
            double fd = (loss[0] - loss[1]) / 2e-6;
            n++;
            if (fabs(fd - g[i]) > 1e-7 + 1e-5 * fabs(g[i]) && bad++ < 5)
                fprintf(stderr, "  FD %s weight[%u, %u]: analytic %.10g, finite difference %.10g\n",
                        m->name, row, c, g[i], fd);
        }
    }
    free(z);
    *n_out = n;
    return bad;
}

static void run_net(vt *t, vkt_device *dev, vkt_ops *ops, const net_case *nc, bool fuse) {
    vkt_model_desc m;
    vkt_status st = vkt_model_parse(nc->json, "embed_net", &m);
    VT_CHECK(t, st == VKT_OK, "%s", vkt_error());
    if (st != VKT_OK) return;
    char where[200];
    snprintf(where, sizeof where, "%s (B %u) %s on %s", m.name, nc->B, fuse ? "fused" : "unfused",
             vkt_device_label(dev));
    uint32_t B = nc->B, T = m.input_features, out = m.output_features;
    uint32_t C = m.layers[0].out.dim[1];
    uint64_t nin = (uint64_t)B * T, nout = (uint64_t)B * out;
    float *ids = malloc(4 * nin), *tgf = malloc(4 * nout), *nan = malloc(4 * nin);
    double *x = malloc(8 * nin), *tg = malloc(8 * nout), *z = malloc(8 * nout),
           *d = malloc(8 * nout);
    make_ids(ids, (uint32_t)nin, nc->V, nc->seed, false);
    vt_fill_uniform(tgf, nout, nc->seed + 1, -1.0f, 1.0f);
    for (uint64_t i = 0; i < nin; i++) {
        x[i] = ids[i];
        nan[i] = NAN;
    }
    for (uint64_t i = 0; i < nout; i++)
        tg[i] = tgf[i];
    vkt_context_set_fuse(t->ctx, fuse ? VKT_FUSE_ON : VKT_FUSE_OFF);
    vkt_net_desc nd = {.model = &m,
                       .first_layer = 0,
                       .last_layer = m.nlayers,
                       .max_batch = B,
                       .slots = 1,
                       .optim = vkt_optim_default(VKT_OPTIM_SGD)};
    vkt_net *net = NULL;
    vkt_cmd *cmd = NULL;
    vkt_ref *ref = NULL;
    float *buf = NULL, *first = NULL;
    VT_OK(t, vkt_net_create(dev, ops, &nd, &net));
    vkt_context_set_fuse(t->ctx, VKT_FUSE_AUTO);
    if (net) VT_OK(t, vkt_cmd_create(dev, &cmd));
    if (!net || !cmd) goto out;
    VT_OK(t, vkt_net_init(net, 7));
    ref = vkt_ref_create(&m, B);
    int nt = vkt_net_tensor_count(net);
    VT_CHECK(t, ref && vkt_ref_tensor_count(ref) == nt, "%s: reference tensors", where);
    if (!ref || vkt_ref_tensor_count(ref) != nt) goto out;
    uint64_t most = nin > nout ? nin : nout;
    for (int i = 0; i < nt; i++)
        if (vkt_net_get_tensor(net, i)->count > most) most = vkt_net_get_tensor(net, i)->count;
    buf = malloc(4 * most);
    for (int i = 0; i < nt; i++) {
        VT_OK(t, vkt_net_read_tensor(net, VKT_STORE_PARAM, i, buf));
        for (uint64_t k = 0; k < vkt_net_get_tensor(net, i)->count; k++)
            vkt_ref_param(ref, i)[k] = buf[k];
    }
    // The reference: MSE to the targets, a mean over the batch.
    vkt_ref_forward(ref, x, z);
    double loss = 0;
    for (uint64_t j = 0; j < nout; j++) {
        loss += (z[j] - tg[j]) * (z[j] - tg[j]);
        d[j] = 2 * (z[j] - tg[j]) / B;
    }
    loss /= B;
    double *gx = calloc(nin, sizeof(double));
    vkt_ref_backward(ref, d, gx);
    free(gx);

    vkt_view in = vkt_net_input(net, 0), tv = vkt_net_targets(net, 0),
             gi = vkt_net_input_grad(net, 0), o = vkt_net_output(net, 0),
             lr = vkt_net_loss_rows(net, 0);
    VT_OK(t, vkt_buffer_write(in.buffer, in.offset, ids, 4 * nin));
    VT_OK(t, vkt_buffer_write(tv.buffer, tv.offset, tgf, 4 * nout));
    first = malloc(4 * vkt_net_get_tensor(net, 0)->count);
    for (int rep = 0; rep < 2; rep++) {
        VT_OK(t, vkt_buffer_write(gi.buffer, gi.offset, nan, 4 * nin)); // must become 0
        VT_OK(t, vkt_cmd_begin(cmd, false));
        vkt_net_record_zero_grads(net, cmd);
        vkt_net_record_forward(net, cmd, 0, B);
        vkt_net_record_loss(net, cmd, 0, B, 1.0f / (float)B);
        vkt_net_record_backward(net, cmd, 0, B, true);
        if (!vt_run(t, cmd, ops, "training forward and backward", where)) goto out;
        if (rep == 1) {
            VT_OK(t, vkt_net_read_tensor(net, VKT_STORE_GRAD, 0, buf));
            VT_CHECK(t, memcmp(buf, first, 4 * vkt_net_get_tensor(net, 0)->count) == 0,
                     "%s: a second step gives other bits of d%s", where,
                     vkt_net_get_tensor(net, 0)->name);
            break;
        }
        VT_OK(t, vkt_net_read_tensor(net, VKT_STORE_GRAD, 0, first));
        char what[300];
        VT_OK(t, vkt_buffer_read(o.buffer, o.offset, buf, 4 * nout));
        snprintf(what, sizeof what, "%s: output", where);
        VT_CHECK(t, vt_compare(what, buf, z, nout, 1e-5, 1e-4) == 0, "%s", what);
        VT_OK(t, vkt_buffer_read(lr.buffer, lr.offset, buf, 4ull * B));
        double dl = 0;
        for (uint32_t b = 0; b < B; b++)
            dl += buf[b];
        dl /= B;
        VT_CHECK(t, fabs(dl - loss) <= 1e-5 + 1e-4 * loss, "%s: loss %.8g, reference %.8g", where,
                 dl, loss);
        for (int i = 0; i < nt; i++) {
            const vkt_net_tensor *te = vkt_net_get_tensor(net, i);
            VT_OK(t, vkt_net_read_tensor(net, VKT_STORE_GRAD, i, buf));
            snprintf(what, sizeof what, "%s: d%s", where, te->name);
            VT_CHECK(t, vt_compare(what, buf, vkt_ref_grad(ref, i), te->count, 1e-5, 1e-4) == 0,
                     "%s", what);
        }
        VT_OK(t, vkt_buffer_read(gi.buffer, gi.offset, buf, 4 * nin));
        uint64_t nonzero = 0;
        for (uint64_t i = 0; i < nin; i++)
            nonzero += buf[i] != 0.0f;
        VT_CHECK(t, nonzero == 0, "%s: %llu of the ids' gradients are not 0", where,
                 (unsigned long long)nonzero);
    }
    if (!fuse) { // (the reference does not depend on fusion)
        int nfd = 0, bad = check_fd(ref, &m, x, tg, B, ids, C, &nfd);
        VT_CHECK(t, bad == 0,
                 "%s: %d of %d reference weight gradients disagree with finite differences", where,
                 bad, nfd);
    }
out:
    free(buf);
    free(first);
    vkt_ref_destroy(ref);
    vkt_cmd_destroy(cmd);
    vkt_net_destroy(net);
    vkt_model_free(&m);
    free(ids);
    free(tgf);
    free(nan);
    free(x);
    free(tg);
    free(z);
    free(d);
}

static void test_networks(vt *t, vkt_device *dev, vkt_ops *ops) {
    static const net_case cases[] = {
        // 4 x 37 positions, most of them on 5 ids: the accumulation.
        {"{\"name\": \"tok\", \"input\": [37], \"layers\": ["
         "{\"type\": \"embedding\", \"num_embeddings\": 23, \"embedding_dim\": 6},"
         "{\"type\": \"position_embedding\", \"max_len\": 40}, {\"type\": \"flatten\"},"
         "{\"type\": \"dense\", \"units\": 3}], \"loss\": \"mse\"}",
         4, 23, 11},
        // GPT-2's vocabulary, 1200 positions (three sort tiles and more), a dense over [T, C].
        {"{\"name\": \"vocab\", \"input\": [100], \"layers\": ["
         "{\"type\": \"embedding\", \"num_embeddings\": 50257, \"embedding_dim\": 4},"
         "{\"type\": \"position_embedding\", \"max_len\": 1024}, {\"type\": \"dense\", "
         "\"units\": 3}, {\"type\": \"gelu\"}, {\"type\": \"flatten\"},"
         "{\"type\": \"dense\", \"units\": 2}], \"loss\": \"mse\"}",
         12, 50257, 12},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        for (int f = 0; f < 2; f++)
            run_net(t, dev, ops, &cases[i], f == 1);
}

static void test_layer_check(vt *t, vkt_ops *const *ops) {
    static const lc_case cases[] = {
        {"{\"name\": \"pos\", \"input\": [5, 6], \"layers\": ["
         "{\"type\": \"position_embedding\", \"max_len\": 8}, {\"type\": \"flatten\"},"
         "{\"type\": \"dense\", \"units\": 3}], \"loss\": \"softmax_cross_entropy\"}",
         3, true, 0, 0, 0, 0},
        // After a dense layer (its input gradient goes on), T = max_len, odd sizes.
        {"{\"name\": \"pos_mid\", \"input\": [4, 3], \"layers\": ["
         "{\"type\": \"dense\", \"units\": 5}, {\"type\": \"position_embedding\", \"max_len\": 4},"
         "{\"type\": \"tanh\"}, {\"type\": \"flatten\"}, {\"type\": \"dense\", \"units\": 2}],"
         "\"loss\": \"mse\"}",
         3, true, 0, 0, 0, 0},
        // lc_run's inputs are floats in [-1.5, 1.5]: every id is truncated (0.7 -> row 0, 1.2 ->
        // row 1) or clamped (-0.4 -> row 0): the device and the reference apply the same rule.
        {"{\"name\": \"tok_float\", \"input\": [7], \"layers\": ["
         "{\"type\": \"embedding\", \"num_embeddings\": 3, \"embedding_dim\": 4},"
         "{\"type\": \"position_embedding\", \"max_len\": 7}, {\"type\": \"flatten\"},"
         "{\"type\": \"dense\", \"units\": 5}], \"loss\": \"softmax_cross_entropy\"}",
         4, false, 0, 0, 0, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        lc_run(t, ops, &cases[i]);
}

// ---------------------------------------------------------------------------------------------
// Parsing and initialisation

static void expect_error(vt *t, const char *input, const char *layers, const char *where,
                         const char *what) {
    char json[768];
    snprintf(json, sizeof json,
             "{\"input\": %s, \"layers\": [%s, {\"type\": \"flatten\"}, {\"type\": \"dense\", "
             "\"units\": 2}], \"loss\": \"mse\"}",
             input, layers);
    vkt_model_desc m;
    vkt_status s = vkt_model_parse(json, "bad.json", &m);
    VT_CHECK(t, s == VKT_ERR_FORMAT && has(vkt_error(), where) && has(vkt_error(), what),
             "%s: got \"%s\", expected %s: ... %s", layers, s == VKT_OK ? "OK" : vkt_error(), where,
             what);
    if (s == VKT_OK) vkt_model_free(&m);
}

static void test_parse(vt *t, vkt_device *dev, vkt_ops *ops) {
    vkt_model_desc m;
    vkt_status s = vkt_model_parse("{\"name\": \"ok\", \"input\": [5], \"layers\": ["
                                   "{\"type\": \"embedding\", \"num_embeddings\": 50257, "
                                   "\"embedding_dim\": 6},"
                                   "{\"type\": \"position_embedding\", \"max_len\": 8},"
                                   "{\"type\": \"flatten\"}, {\"type\": \"dense\", \"units\": 3}],"
                                   "\"loss\": \"softmax_cross_entropy\"}",
                                   "ok.json", &m);
    VT_CHECK(t, s == VKT_OK, "%s", vkt_error());
    if (s != VKT_OK) return;
    const vkt_layer_desc *l = m.layers;
    VT_CHECK(t,
             l[0].out.ndim == 2 && l[0].out.dim[0] == 5 && l[0].out.dim[1] == 6 &&
                 l[1].out.ndim == 2 && l[1].out_features == 30 && m.output_features == 3,
             "shapes");
    VT_CHECK(t, vkt_model_param_count(&m) == 50257ull * 6 + 8 * 6 + 30 * 3 + 3, "param count %llu",
             (unsigned long long)vkt_model_param_count(&m));
    char buf[512];
    VT_OK(t, vkt_model_torch(&m, buf, sizeof buf));
    VT_CHECK(t, has(buf, "nn.Sequential(TokenEmbedding(50257, 6), PositionEmbedding(8, 6), "),
             "torch: %s", buf);
    vkt_net_tensor te[4];
    int n = vkt_model_tensors(&m, 0, m.nlayers, te, 4);
    VT_CHECK(t, n == 4, "%d tensors", n);
    if (n == 4) {
        vkt_param_spec a = vkt_tensor_spec(&te[0]), b = vkt_tensor_spec(&te[1]);
        VT_CHECK(t,
                 strcmp(te[0].name, "0.weight") == 0 && te[0].shape[0] == 50257 &&
                     te[0].shape[1] == 6 && a.init == VKT_INIT_UNIFORM &&
                     fabs(a.a - sqrt(3.0)) < 1e-12,
                 "embedding weight %s [%u, %u] bound %g", te[0].name, te[0].shape[0],
                 te[0].shape[1], a.a);
        VT_CHECK(t,
                 strcmp(te[1].name, "1.weight") == 0 && te[1].shape[0] == 8 &&
                     te[1].shape[1] == 6 && b.init == VKT_INIT_UNIFORM &&
                     fabs(b.a - 0.02 * sqrt(3.0)) < 1e-12,
                 "position weight %s [%u, %u] bound %g", te[1].name, te[1].shape[0], te[1].shape[1],
                 b.a);
    }
    // After vkt_net_init: within the bounds, with PyTorch's variance (1 for nn.Embedding's
    // normal(0, 1); 0.02^2 for the position table).
    vkt_net_desc nd = {.model = &m,
                       .first_layer = 0,
                       .last_layer = m.nlayers,
                       .max_batch = 2,
                       .slots = 1,
                       .optim = vkt_optim_default(VKT_OPTIM_SGD)};
    vkt_net *net = NULL;
    VT_OK(t, vkt_net_create(dev, ops, &nd, &net));
    if (net) {
        VT_OK(t, vkt_net_init(net, 3));
        for (int i = 0; i < 2; i++) {
            const vkt_net_tensor *tt = vkt_net_get_tensor(net, i);
            float *w = malloc(4 * tt->count);
            VT_OK(t, vkt_net_read_tensor(net, VKT_STORE_PARAM, i, w));
            double sd = i == 0 ? 1.0 : 0.02, bound = sd * sqrt(3.0), ss = 0, mx = 0;
            for (uint64_t k = 0; k < tt->count; k++) {
                ss += (double)w[k] * w[k];
                mx = fmax(mx, fabs(w[k]));
            }
            double got = sqrt(ss / tt->count);
            // 5 sigma of the estimate of a standard deviation from count draws.
            double slack = 5 * sd * sqrt(0.8 / tt->count) + 0.2 * sd * (tt->count < 100);
            VT_CHECK(t, mx <= bound * (1 + 1e-6) && fabs(got - sd) <= slack,
                     "%s: largest |w| %g (bound %g), standard deviation %g (expected %g)", tt->name,
                     mx, bound, got, sd);
            free(w);
        }
        vkt_net_destroy(net);
    }
    vkt_model_free(&m);

    expect_error(
        t, "[2, 3]", "{\"type\": \"embedding\", \"num_embeddings\": 4, \"embedding_dim\": 2}",
        "layers[0]", "embedding takes token ids [T] (one dimension per sample), found [2, 3]");
    expect_error(t, "[5]", "{\"type\": \"embedding\", \"embedding_dim\": 2}",
                 "layers[0].num_embeddings", "missing (the vocabulary size V is required)");
    expect_error(t, "[5]", "{\"type\": \"embedding\", \"num_embeddings\": 0, \"embedding_dim\": 2}",
                 "layers[0].num_embeddings",
                 "0 is out of range: the vocabulary size V must be between 1 and 16777216");
    expect_error(t, "[5]",
                 "{\"type\": \"embedding\", \"num_embeddings\": 16777217, \"embedding_dim\": 2}",
                 "layers[0].num_embeddings", "16777217 is out of range");
    expect_error(t, "[5]", "{\"type\": \"embedding\", \"num_embeddings\": 4}",
                 "layers[0].embedding_dim", "missing (the embedding width C is required)");
    expect_error(t, "[5]",
                 "{\"type\": \"embedding\", \"num_embeddings\": 4, \"embedding_dim\": 2.5}",
                 "layers[0].embedding_dim", "expected a whole number (the embedding width C)");
    expect_error(t, "[5]",
                 "{\"type\": \"embedding\", \"num_embeddings\": 4, \"embedding_dim\": 2, "
                 "\"padding_idx\": 0}",
                 "layers[0].padding_idx", "unknown key");
    expect_error(t, "[6]", "{\"type\": \"position_embedding\", \"max_len\": 8}", "layers[0]",
                 "position_embedding takes a sequence [T, C] (2 dimensions per sample), found [6]");
    expect_error(t, "[5, 3]", "{\"type\": \"position_embedding\", \"max_len\": 4}",
                 "layers[0].max_len",
                 "4 is less than the input's T = 5 (input [5, 3]): the table needs a row for "
                 "every position");
    expect_error(t, "[5, 3]", "{\"type\": \"position_embedding\"}", "layers[0].max_len",
                 "missing (the number of positions of the table is required)");
}

int main(void) {
    vt tv, *t = &tv;
    if (vt_init(t, "test_embedding")) return 1;
    vkt_ops *ops[VT_MAX_DEVICES] = {0};
    for (int d = 0; d < t->ndev; d++)
        VT_OK(t, vkt_ops_create(t->dev[d], &ops[d]));
    if (t->ndev && ops[0]) test_parse(t, t->dev[0], ops[0]);
    for (int d = 0; d < t->ndev && ops[d]; d++) {
        test_ops(t, t->dev[d], ops[d]);
        test_networks(t, t->dev[d], ops[d]);
    }
    test_layer_check(t, ops);
    for (int d = 0; d < t->ndev; d++)
        vkt_ops_destroy(ops[d]);
    return vt_finish(t);
}
