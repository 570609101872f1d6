// test_dropout.c: the dropout layer kind (engine/nn/layers/dropout.c), its op
// (engine/ops/dropout_ops.c, shaders/dropout.comp) and its mask (shaders/dropout_abi.h), on every
// device.
//  1. The hash is MurmurHash3_x86_32 (its published vectors for one 4-byte word).
//  2. The mask's statistics on the host: the kept fraction of 10^6 elements within 4 sigma of
//     1 - p (p = 0.1, 0.5, and exactly all or nothing at p = 0 and 1); masks of two steps, two
//     nodes, two seeds (either word) differ in about 2p(1-p) of the elements.
//  3. The op on each device against the host mask exactly: 10^6 ones at p = 0.1 and 0.5 (the
//     kept fraction again, every kept value exactly 1/(1-p) in float), odd shapes with a first
//     row, p = 0 (the identity, bit for bit) and p = 1 (zeros, even for inf and NaN inputs); a
//     batch's rows from another first row (a shard) give the same bits; backward = forward; a
//     view larger than lavapipe's storage-buffer range, in several slices.
//  4. The layer in small models through tests/layer_check.h (reference against finite
//     differences, device against reference, training and evaluation, fused and not): dense ->
//     relu -> dropout(0.3) -> dense with softmax cross-entropy and MSE (one from row 1000),
//     dropout first in a [2, 3, 4] input, inside a residual block, p = 0 and p = 1.
//  5. Through a network: two dropout layers in a row draw different masks (a quarter kept, not
//     a half); a shard of rows [3, 8) with row0 = 3 gives rows 3..7 of the whole batch exactly;
//     the evaluation forward is the identity.
//  6. Parsing: the default p, the torch text, and the messages for bad values and keys.
#include <stdlib.h>
#include <string.h>

#include "dropout_ops.h"
#include "layer.h"
#include "layer_check.h"
#include "model.h"
#include "network.h"
#include "test_util.h"

// After ops.h: vkt_abi.h defines macros named as ops.h's enum values (VKT_MM_EPI_*).
#include "dropout_abi.h"

static bool has(const char *msg, const char *needle) { return strstr(msg, needle) != NULL; }

// ---------------------------------------------------------------------------------------------
// 1-2. The hash and the mask on the host

static uint32_t murmur_word(uint32_t seed, uint32_t w) {
    return vkt_dropout_fmix(vkt_dropout_mix(seed, w) ^ 4u);
}

static void test_hash(vt *t) {
    // MurmurHash3_x86_32's test vectors for 4-byte inputs (little-endian words).
    static const struct {
        uint32_t seed, word, hash;
    } V[] = {{0, 0x00000000u, 0x2362F9DEu},
             {0, 0xFFFFFFFFu, 0x76293B50u},
             {0, 0x87654321u, 0xF55B516Bu},
             {0x5082EDEEu, 0x87654321u, 0x2362F9DEu},
             {0x9747B28Cu, 0x61616161u, 0x5A97808Au}};
    for (size_t i = 0; i < sizeof V / sizeof *V; i++)
        VT_CHECK(t, murmur_word(V[i].seed, V[i].word) == V[i].hash,
                 "murmur3(%08x, seed %08x) = %08x, expected %08x", V[i].word, V[i].seed,
                 murmur_word(V[i].seed, V[i].word), V[i].hash);
    VT_CHECK(t,
             vkt_dropout_threshold(0.0f) == 0 && vkt_dropout_threshold(1.0f) == 1u << 24 &&
                 vkt_dropout_threshold(0.5f) == 1u << 23,
             "thresholds %u %u %u", vkt_dropout_threshold(0.0f), vkt_dropout_threshold(1.0f),
             vkt_dropout_threshold(0.5f));
    VT_CHECK(t,
             vkt_dropout_scale(1.0f) == 0.0 && vkt_dropout_scale(0.0f) == 1.0 &&
                 vkt_dropout_scale(0.5f) == 2.0,
             "scales");
}

// Elements of `rows` x `cols` kept under m (rows from m->row0).
static uint64_t count_kept(const vkt_dropout_mask *m, uint32_t rows, uint32_t cols) {
    uint64_t kept = 0;
    for (uint32_t r = 0; r < rows; r++)
        for (uint32_t e = 0; e < cols; e++)
            kept += vkt_dropout_kept(m, m->row0 + r, e);
    return kept;
}

// Elements where a and b disagree, over rows x cols.
static uint64_t count_differ(const vkt_dropout_mask *a, const vkt_dropout_mask *b, uint32_t rows,
                             uint32_t cols) {
    uint64_t d = 0;
    for (uint32_t r = 0; r < rows; r++)
        for (uint32_t e = 0; e < cols; e++)
            d += vkt_dropout_kept(a, a->row0 + r, e) != vkt_dropout_kept(b, b->row0 + r, e);
    return d;
}

// |count - n q| within 4 sigma of a binomial(n, q).
static bool binomial_ok(uint64_t count, uint64_t n, double q) {
    double sigma = sqrt((double)n * q * (1 - q));
    return fabs((double)count - (double)n * q) <= 4 * sigma;
}

static void test_mask_stats(vt *t) {
    const uint32_t R = 1000, C = 1000; // 10^6 elements
    const float ps[] = {0.1f, 0.5f};
    for (int i = 0; i < 2; i++) {
        vkt_dropout_mask m = {.p = ps[i], .seed = 42, .step = 3, .node = 2, .row0 = 17};
        uint64_t kept = count_kept(&m, R, C);
        VT_CHECK(t, binomial_ok(kept, (uint64_t)R * C, 1 - ps[i]),
                 "p %g: %llu of %u kept, expected %.0f +- 4 sigma", (double)ps[i],
                 (unsigned long long)kept, R * C, (1 - ps[i]) * R * C);
        // Each column and each row on its own is unbiased too (no structure by position).
        uint64_t col = 0, row = 0;
        for (uint32_t r = 0; r < R; r++)
            col += vkt_dropout_kept(&m, m.row0 + r, 5);
        for (uint32_t e = 0; e < C; e++)
            row += vkt_dropout_kept(&m, m.row0 + 7, e);
        VT_CHECK(t, binomial_ok(col, R, 1 - ps[i]) && binomial_ok(row, C, 1 - ps[i]),
                 "p %g: column 5 keeps %llu of %u, row 7 %llu of %u", (double)ps[i],
                 (unsigned long long)col, R, (unsigned long long)row, C);
        // Two masks that differ in one input: independent, so they disagree in 2p(1-p).
        double q = 2 * ps[i] * (1 - ps[i]);
        const struct {
            const char *what;
            vkt_dropout_mask other;
        } others[] = {
            {"the next step", {.p = ps[i], .seed = 42, .step = 4, .node = 2, .row0 = 17}},
            {"another node", {.p = ps[i], .seed = 42, .step = 3, .node = 3, .row0 = 17}},
            {"another seed", {.p = ps[i], .seed = 43, .step = 3, .node = 2, .row0 = 17}},
            {"the seed's high word",
             {.p = ps[i], .seed = 42 + (1ull << 32), .step = 3, .node = 2, .row0 = 17}},
            {"the next rows", {.p = ps[i], .seed = 42, .step = 3, .node = 2, .row0 = 18}},
        };
        for (size_t k = 0; k < sizeof others / sizeof *others; k++) {
            uint64_t d = count_differ(&m, &others[k].other, 300, 333);
            VT_CHECK(t, binomial_ok(d, 300 * 333, q),
                     "p %g: the mask of %s differs in %llu of %u elements, expected %.0f",
                     (double)ps[i], others[k].what, (unsigned long long)d, 300 * 333,
                     q * 300 * 333);
        }
    }
    vkt_dropout_mask all = {.p = 0.0f, .seed = 7, .step = 1}, none = {.p = 1.0f, .seed = 7};
    VT_CHECK(t, count_kept(&all, 300, 301) == 300 * 301, "p = 0 keeps everything");
    VT_CHECK(t, count_kept(&none, 300, 301) == 0, "p = 1 keeps nothing");
}

// ---------------------------------------------------------------------------------------------
// 3. The op on each device

typedef struct dev_bufs {
    vkt_buffer *in, *out;
    vkt_cmd *cmd;
} dev_bufs;

// out = dropout(in) of [B, F] on the device (backward: the backward op); false when it did not
// run (a failed check says why).
static bool run_op(vt *t, vkt_device *dev, vkt_ops *ops, const vkt_dropout_mask *m, uint32_t B,
                   uint32_t F, const float *in, float *out, bool backward, int *dispatches) {
    uint64_t bytes = 4ull * B * F;
    dev_bufs b = {0};
    bool ran = false;
    VT_OK(t, vkt_buffer_create(dev, bytes, "dropout in", &b.in));
    VT_OK(t, vkt_buffer_create(dev, bytes, "dropout out", &b.out));
    VT_OK(t, vkt_cmd_create(dev, &b.cmd));
    if (!b.in || !b.out || !b.cmd) goto out;
    VT_OK(t, vkt_buffer_write(b.in, 0, in, bytes));
    VT_OK(t, vkt_cmd_begin(b.cmd, false));
    vkt_cmd_fill(b.cmd, vkt_buffer_whole(b.out), 0x7fc00000u); // NaN: every element is written
    vkt_cmd_barrier(b.cmd);
    if (backward)
        vkt_op_dropout_backward(b.cmd, ops, vkt_buffer_whole(b.out), vkt_buffer_whole(b.in), m, B,
                                F, "dropout bwd");
    else
        vkt_op_dropout_forward(b.cmd, ops, vkt_buffer_whole(b.out), vkt_buffer_whole(b.in), m, B, F,
                               "dropout fwd");
    if (dispatches) *dispatches = vkt_cmd_dispatch_count(b.cmd);
    ran = vt_run(t, b.cmd, ops, "dropout", vkt_device_label(dev));
    if (ran) VT_OK(t, vkt_buffer_read(b.out, 0, out, bytes));
out:
    vkt_cmd_destroy(b.cmd);
    vkt_buffer_destroy(b.in);
    vkt_buffer_destroy(b.out);
    return ran;
}

// The device's y against the host mask exactly: kept elements are float(x * scale), the others 0.
// Returns the number kept; *bad the number wrong.
static uint64_t check_exact(const vkt_dropout_mask *m, uint32_t B, uint32_t F, const float *x,
                            const float *y, uint64_t *bad) {
    float scale = (float)vkt_dropout_scale(m->p);
    uint64_t kept = 0;
    *bad = 0;
    for (uint32_t b = 0; b < B; b++)
        for (uint32_t e = 0; e < F; e++) {
            uint64_t i = (uint64_t)b * F + e;
            bool k = vkt_dropout_kept(m, m->row0 + b, e);
            float want = k ? x[i] * scale : 0.0f;
            kept += k;
            if (memcmp(&want, &y[i], 4) != 0 && (*bad)++ < 3)
                fprintf(stderr, "  [%u, %u]: device %.9g, expected %.9g (x %.9g, kept %d)\n", b, e,
                        (double)y[i], (double)want, (double)x[i], k);
        }
    return kept;
}

static void test_op(vt *t, vkt_device *dev, vkt_ops *ops) {
    const char *where = vkt_device_label(dev);
    // 10^6 ones: the kept fraction on the device, every value exact.
    {
        const uint32_t B = 1000, F = 1000;
        float *x = malloc(4ull * B * F), *y = malloc(4ull * B * F);
        for (uint64_t i = 0; i < (uint64_t)B * F; i++)
            x[i] = 1.0f;
        const float ps[] = {0.1f, 0.5f};
        for (int i = 0; i < 2; i++) {
            vkt_dropout_mask m = {.p = ps[i], .seed = 1234567, .step = 9, .node = 4, .row0 = 0};
            if (!run_op(t, dev, ops, &m, B, F, x, y, false, NULL)) continue;
            uint64_t bad, kept = check_exact(&m, B, F, x, y, &bad), nonzero = 0;
            for (uint64_t k = 0; k < (uint64_t)B * F; k++)
                nonzero += y[k] != 0.0f;
            VT_CHECK(t, bad == 0, "%s: p %g on 10^6 ones: %llu elements differ from the host mask",
                     where, (double)ps[i], (unsigned long long)bad);
            VT_CHECK(t, nonzero == kept && binomial_ok(nonzero, (uint64_t)B * F, 1 - ps[i]),
                     "%s: p %g: %llu of 10^6 kept, expected %.0f +- 4 sigma", where, (double)ps[i],
                     (unsigned long long)nonzero, (1 - ps[i]) * B * F);
        }
        free(x);
        free(y);
    }
    // Odd shapes, a first row, several p; the backward is the same map.
    static const struct {
        uint32_t B, F, row0;
        float p;
    } S[] = {{1, 1, 0, 0.5f},    {7, 13, 5, 0.3f},     {3, 4099, 1000, 0.7f},
             {33, 127, 0, 0.1f}, {5, 1, 123456, 0.5f}, {513, 7, 3, 0.25f}};
    for (size_t s = 0; s < sizeof S / sizeof *S; s++) {
        uint32_t B = S[s].B, F = S[s].F;
        uint64_t n = (uint64_t)B * F;
        float *x = malloc(4 * n), *y = malloc(4 * n), *dx = malloc(4 * n);
        vt_fill_uniform(x, n, 100 + s, -2.0f, 2.0f);
        vkt_dropout_mask m = {
            .p = S[s].p, .seed = 0xABCDEF0123ull, .step = 2, .node = 1, .row0 = S[s].row0};
        if (run_op(t, dev, ops, &m, B, F, x, y, false, NULL) &&
            run_op(t, dev, ops, &m, B, F, x, dx, true, NULL)) {
            uint64_t bad;
            check_exact(&m, B, F, x, y, &bad);
            VT_CHECK(t, bad == 0, "%s: [%u, %u] from row %u, p %g: %llu elements wrong", where, B,
                     F, S[s].row0, (double)S[s].p, (unsigned long long)bad);
            VT_CHECK(t, memcmp(y, dx, 4 * n) == 0, "%s: [%u, %u]: the backward differs", where, B,
                     F);
        }
        // The rows [k, B) on their own from row0 + k: the same bits (a shard's view).
        uint32_t k = B / 2;
        if (k > 0) {
            vkt_dropout_mask sh = m;
            sh.row0 = m.row0 + k;
            float *ys = malloc(4 * n);
            if (run_op(t, dev, ops, &sh, B - k, F, x + (uint64_t)k * F, ys, false, NULL))
                VT_CHECK(t, memcmp(ys, y + (uint64_t)k * F, 4ull * (B - k) * F) == 0,
                         "%s: [%u, %u]: rows %u.. from row0 %u differ from the whole batch's",
                         where, B, F, k, sh.row0);
            free(ys);
        }
        free(x);
        free(y);
        free(dx);
    }
    // More than the storage-buffer range (lavapipe's 128 MiB; not SwiftShader's 1 GiB, too slow
    // here): several slices, rows across their edges, each slice's mask that of its rows.
    uint64_t range = vkt_device_get_info(dev)->max_storage_buffer_range;
    if (range <= (256u << 20)) {
        const uint32_t F = 4097;
        uint32_t B = (uint32_t)((range / 4 + 3 * F) / F);
        uint64_t n = (uint64_t)B * F;
        float *x = malloc(4 * n), *y = malloc(4 * n);
        for (uint64_t i = 0; i < n; i++)
            x[i] = (float)(1 + i % 7);
        vkt_dropout_mask m = {.p = 0.5f, .seed = 77, .step = 1, .node = 3, .row0 = 9};
        int nd = 0;
        if (x && y && run_op(t, dev, ops, &m, B, F, x, y, false, &nd)) {
            uint64_t bad;
            check_exact(&m, B, F, x, y, &bad);
            VT_CHECK(t, bad == 0 && nd >= 2,
                     "%s: [%u, %u] (%llu bytes over a %llu-byte range) in %d dispatches: %llu "
                     "elements wrong",
                     where, B, F, (unsigned long long)(4 * n), (unsigned long long)range, nd,
                     (unsigned long long)bad);
        }
        free(x);
        free(y);
    }
    // p = 0: the identity, bit for bit; p = 1: zeros, whatever the input.
    {
        const uint32_t B = 9, F = 37;
        float x[9 * 37], y[9 * 37];
        vt_fill_uniform(x, B * F, 5, -3.0f, 3.0f);
        x[3] = INFINITY, x[10] = -INFINITY, x[20] = NAN;
        vkt_dropout_mask m0 = {.p = 0.0f, .seed = 1, .step = 1, .node = 0, .row0 = 2};
        if (run_op(t, dev, ops, &m0, B, F, x, y, false, NULL))
            VT_CHECK(t, memcmp(x, y, sizeof x) == 0, "%s: p = 0 is not the identity", where);
        vkt_dropout_mask m1 = {.p = 1.0f, .seed = 1, .step = 1, .node = 0, .row0 = 2};
        if (run_op(t, dev, ops, &m1, B, F, x, y, false, NULL)) {
            int nz = 0;
            for (uint32_t i = 0; i < B * F; i++)
                nz += y[i] != 0.0f || signbit(y[i]);
            VT_CHECK(t, nz == 0, "%s: p = 1 left %d elements that are not +0", where, nz);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// 4. The layer through tests/layer_check.h

static void test_layer_check(vt *t, vkt_ops *const *ops) {
    static const lc_case cases[] = {
        {.json = "{\"name\": \"dropout_mlp_xent\", \"input\": [7], \"layers\": ["
                 "{\"type\": \"dense\", \"units\": 12}, {\"type\": \"relu\"},"
                 "{\"type\": \"dropout\", \"p\": 0.3}, {\"type\": \"dense\", \"units\": 5}],"
                 "\"loss\": \"softmax_cross_entropy\"}",
         .B = 9,
         .input_grad = true},
        {.json = "{\"name\": \"dropout_mlp_mse\", \"input\": [7], \"layers\": ["
                 "{\"type\": \"dense\", \"units\": 12}, {\"type\": \"relu\"},"
                 "{\"type\": \"dropout\", \"p\": 0.3}, {\"type\": \"dense\", \"units\": 5}],"
                 "\"loss\": \"mse\"}",
         .B = 9,
         .input_grad = true,
         .row0 = 1000},
        // First, over a [2, 3, 4] sample (its input gradient is the model's), default p.
        {.json = "{\"name\": \"dropout_first\", \"input\": [2, 3, 4], \"layers\": ["
                 "{\"type\": \"dropout\"}, {\"type\": \"flatten\"},"
                 "{\"type\": \"dense\", \"units\": 3}], \"loss\": \"mse\"}",
         .B = 5,
         .input_grad = true,
         .row0 = 3},
        // Inside a residual block (a nested node id), and a second dropout after it.
        {.json = "{\"name\": \"dropout_residual\", \"input\": [6], \"layers\": ["
                 "{\"type\": \"residual\", \"layers\": [{\"type\": \"dense\", \"units\": 6},"
                 "{\"type\": \"tanh\"}, {\"type\": \"dropout\", \"p\": 0.4}]},"
                 "{\"type\": \"dropout\", \"p\": 0.2}, {\"type\": \"dense\", \"units\": 4}],"
                 "\"loss\": \"softmax_cross_entropy\"}",
         .B = 7,
         .input_grad = true,
         .row0 = 11},
        {.json = "{\"name\": \"dropout_p0\", \"input\": [7], \"layers\": ["
                 "{\"type\": \"dense\", \"units\": 12}, {\"type\": \"relu\"},"
                 "{\"type\": \"dropout\", \"p\": 0}, {\"type\": \"dense\", \"units\": 5}],"
                 "\"loss\": \"softmax_cross_entropy\"}",
         .B = 6,
         .input_grad = true},
        {.json = "{\"name\": \"dropout_p1\", \"input\": [7], \"layers\": ["
                 "{\"type\": \"dense\", \"units\": 12}, {\"type\": \"relu\"},"
                 "{\"type\": \"dropout\", \"p\": 1}, {\"type\": \"dense\", \"units\": 5}],"
                 "\"loss\": \"mse\"}",
         .B = 6,
         .input_grad = true},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        lc_run(t, ops, &cases[i]);
}

// ---------------------------------------------------------------------------------------------
// 5. Through a network

// The output [B, out] of one forward of the model's first `layers` layers (a stage: a model
// needs a layer with parameters, which these checks leave out) on x in the phase; false when it
// did not run.
static bool net_forward(vt *t, vkt_device *dev, vkt_ops *ops, const vkt_model_desc *m, int layers,
                        uint32_t B, const vkt_net_phase *ph, const float *x, float *y) {
    vkt_net_desc nd = {.model = m,
                       .first_layer = 0,
                       .last_layer = layers,
                       .max_batch = B,
                       .slots = 1,
                       .optim = vkt_optim_default(VKT_OPTIM_SGD)};
    vkt_net *net = NULL;
    vkt_cmd *cmd = NULL;
    bool ran = false;
    VT_OK(t, vkt_net_create(dev, ops, &nd, &net));
    if (net) VT_OK(t, vkt_cmd_create(dev, &cmd));
    if (!net || !cmd) goto out;
    VT_OK(t, vkt_net_init(net, 1));
    vkt_view in = vkt_net_input(net, 0), o = vkt_net_output(net, 0);
    VT_OK(t, vkt_buffer_write(in.buffer, in.offset, x, 4ull * B * m->input_features));
    VT_OK(t, vkt_cmd_begin(cmd, false));
    vkt_net_set_phase(net, ph);
    vkt_net_record_forward(net, cmd, 0, B);
    ran = vt_run(t, cmd, ops, "forward", vkt_device_label(dev));
    if (ran) VT_OK(t, vkt_buffer_read(o.buffer, o.offset, y, 4ull * B * vkt_net_out_features(net)));
out:
    vkt_cmd_destroy(cmd);
    vkt_net_destroy(net);
    return ran;
}

static void test_network(vt *t, vkt_device *dev, vkt_ops *ops) {
    const char *where = vkt_device_label(dev);
    vkt_model_desc m;
    // Two dropout layers in a row keep a quarter of the elements, not a half: their masks differ.
    VT_OK(t, vkt_model_parse("{\"name\": \"two\", \"input\": [1000], \"layers\": ["
                             "{\"type\": \"dropout\"}, {\"type\": \"dropout\"},"
                             "{\"type\": \"dense\", \"units\": 2}], \"loss\": \"mse\"}",
                             "two", &m));
    if (t->failures) return;
    {
        const uint32_t B = 100;
        float *x = malloc(4ull * B * 1000), *y = malloc(4ull * B * 1000);
        for (uint32_t i = 0; i < B * 1000; i++)
            x[i] = 1.0f;
        vkt_net_phase ph = {.train = true, .seed = 99, .step = 5, .row0 = 0};
        if (net_forward(t, dev, ops, &m, 2, B, &ph, x, y)) {
            uint64_t kept = 0, bad = 0;
            for (uint32_t i = 0; i < B * 1000; i++) {
                kept += y[i] != 0.0f;
                bad += y[i] != 0.0f && y[i] != 4.0f;
            }
            VT_CHECK(t, binomial_ok(kept, B * 1000ull, 0.25) && bad == 0,
                     "%s: two dropout(0.5) layers kept %llu of %u (%llu not 4), expected a "
                     "quarter",
                     where, (unsigned long long)kept, B * 1000, (unsigned long long)bad);
        }
        ph.train = false;
        if (net_forward(t, dev, ops, &m, 2, B, &ph, x, y))
            VT_CHECK(t, memcmp(x, y, 4ull * B * 1000) == 0, "%s: evaluation is not the identity",
                     where);
        free(x);
        free(y);
    }
    vkt_model_free(&m);
    // A shard: rows [3, 8) of a batch of 8, run as a batch of 5 from row0 = 3.
    VT_OK(t, vkt_model_parse("{\"name\": \"shard\", \"input\": [3, 7], \"layers\": ["
                             "{\"type\": \"dropout\", \"p\": 0.4}, {\"type\": \"relu\"},"
                             "{\"type\": \"dense\", \"units\": 2}],"
                             "\"loss\": \"mse\"}",
                             "shard", &m));
    if (t->failures) return;
    {
        const uint32_t B = 8, F = 21, k = 3;
        float x[8 * 21], y[8 * 21], ys[8 * 21];
        vt_fill_uniform(x, B * F, 11, 0.1f, 2.0f); // positive: relu keeps what dropout keeps
        vkt_net_phase whole = {.train = true, .seed = 5, .step = 2, .row0 = 0};
        vkt_net_phase shard = whole;
        shard.row0 = k;
        if (net_forward(t, dev, ops, &m, 2, B, &whole, x, y) &&
            net_forward(t, dev, ops, &m, 2, B - k, &shard, x + k * F, ys)) {
            VT_CHECK(t, memcmp(ys, y + k * F, 4ull * (B - k) * F) == 0,
                     "%s: a shard's rows differ from the same rows of the whole batch", where);
            int zeros = 0;
            for (uint32_t i = 0; i < B * F; i++)
                zeros += y[i] == 0.0f;
            VT_CHECK(t, zeros > 0 && zeros < (int)(B * F), "%s: %d of %u dropped", where, zeros,
                     B * F);
        }
    }
    vkt_model_free(&m);
}

// ---------------------------------------------------------------------------------------------
// 6. Parsing

static void expect_error(vt *t, const char *layer, const char *needle1, const char *needle2) {
    char json[512];
    snprintf(json, sizeof json,
             "{\"name\": \"bad\", \"input\": [4], \"layers\": [%s, {\"type\": \"dense\", "
             "\"units\": 2}], \"loss\": \"mse\"}",
             layer);
    vkt_model_desc m;
    vkt_status s = vkt_model_parse(json, "bad.json", &m);
    const char *msg = vkt_error();
    VT_CHECK(t,
             s == VKT_ERR_FORMAT && has(msg, "bad.json") && has(msg, needle1) && has(msg, needle2),
             "%s: got status %d, message \"%s\"", layer, (int)s, msg);
    if (s == VKT_OK) vkt_model_free(&m);
}

static void test_parse(vt *t) {
    vkt_model_desc m;
    VT_OK(t,
          vkt_model_parse("{\"name\": \"ok\", \"input\": [2, 5], \"layers\": ["
                          "{\"type\": \"dropout\"}, {\"type\": \"dropout\", \"p\": 0.3},"
                          "{\"type\": \"dropout\", \"p\": 1}, {\"type\": \"dense\", \"units\": 2}],"
                          "\"loss\": \"mse\"}",
                          "ok.json", &m));
    if (t->failures) return;
    char buf[128];
    const vkt_layer_desc *l = m.layers;
    VT_CHECK(t, l[0].p == 0.5f && l[1].p == 0.3f && l[2].p == 1.0f, "p %g %g %g", (double)l[0].p,
             (double)l[1].p, (double)l[2].p);
    VT_CHECK(t,
             l[0].out.ndim == 2 && l[0].out.dim[0] == 2 && l[0].out.dim[1] == 5 &&
                 l[2].out_features == 10 && l[0].type->params == NULL,
             "shape");
    l[0].type->torch(&l[0], buf, sizeof buf);
    VT_CHECK(t, strcmp(buf, "nn.Dropout(p=0.5)") == 0, "torch: %s", buf);
    l[1].type->torch(&l[1], buf, sizeof buf);
    VT_CHECK(t, strcmp(buf, "nn.Dropout(p=0.300000012)") == 0, "torch: %s", buf);
    vkt_layer_cost c = vkt_model_cost(&m, 0, 1);
    VT_CHECK(t, c.fwd_flops == 10 && c.fwd_bytes == 80 && c.bwd_bytes == 80, "cost %g %g %g",
             c.fwd_flops, c.fwd_bytes, c.bwd_bytes);
    vkt_model_free(&m);

    expect_error(t, "{\"type\": \"dropout\", \"p\": 1.5}", "layers[0].p",
                 "1.5 is out of range: the probability of zeroing an element must be in [0, 1]");
    expect_error(t, "{\"type\": \"dropout\", \"p\": -0.1}", "layers[0].p", "-0.1 is out of range");
    expect_error(t, "{\"type\": \"dropout\", \"p\": \"half\"}", "layers[0].p",
                 "expected a number (the probability of zeroing an element), found a string");
    expect_error(t, "{\"type\": \"dropout\", \"p\": null}", "layers[0].p", "found null");
    expect_error(t, "{\"type\": \"dropout\", \"rate\": 0.5}", "layers[0].rate",
                 "unknown key (allowed here: type, p;");
}

int main(void) {
    vt tv, *t = &tv;
    if (vt_init(t, "test_dropout")) return 1;
    test_hash(t);
    test_mask_stats(t);
    test_parse(t);
    vkt_ops *ops[VT_MAX_DEVICES] = {0};
    for (int d = 0; d < t->ndev; d++)
        VT_OK(t, vkt_ops_create(t->dev[d], &ops[d]));
    for (int d = 0; d < t->ndev && ops[d]; d++) {
        test_op(t, t->dev[d], ops[d]);
        test_network(t, t->dev[d], ops[d]);
    }
    test_layer_check(t, ops);
    for (int d = 0; d < t->ndev; d++)
        vkt_ops_destroy(ops[d]);
    return vt_finish(t);
}
