// test_matmul_big.c: vkt_op_matmul on products larger than one storage binding (matmul.c,
// "Splitting"), on every device:
//  - with the range the op splits at lowered (vkt_matmul_test_range) so that small products cut
//    into blocks quickly: every form (NN, NT, TN) with odd M, N, K, with and without bias, beta 0,
//    1 and 0.5, blocks in both M and N (NT), row blocks with K-chunks (NN's b and TN's a span
//    whole rows of k), block starts off the 256-byte alignment (element offsets in the push
//    constants) and on it, aligned shapes that the wide kernels take per block, and every
//    epilogue kind: f(z), f(z) keeping z, z f'(x) from the input and from the output. Each case
//    checks the plan (vkt_matmul_test_plan: at least the blocks the case is built for, and one
//    dispatch per block), c (and the kept z) against the double reference (tests/ref_matmul.c)
//    with test_matmul.c's tolerance, that nothing outside c and z was written (canaries, a, b,
//    bias and s unchanged), and c and z against the same product run unsplit (the device's own
//    range): bit for bit without K-chunks (every kernel sums each output's k terms in order) and
//    with them where both runs took the wide kernels (the bias and the epilogue go in the last
//    chunk); elsewhere K-chunks are only within the tolerance;
//  - the SGD epilogue on a product split into row blocks (lavapipe's first choice; SwiftShader's
//    own kernels have none: there the vec4 wide kernel, forced), against ref_sgd and bit for bit
//    against the unsplit step; vkt_matmul_sgd_fits says no where the split would need K-chunks;
//  - on lavapipe, one product over its real 128 MiB range: NT M = 256, N = 50257, K = 768 with
//    bias (b is 154 MB: GPT-2's head), 4096 sampled entries against double.
// Tolerance: as test_matmul.c: |got - ref| <= atol + rtol |ref| with atol = 1e-6 (K + 1) and
// rtol = 1e-5 (after an epilogue 1.2e-6 (K + 1) + 1e-5 and 3e-5). K-chunks add fp32 partial sums
// of up to K terms: the same bound.
// Time: about 15 s for both drivers with Mesa's shader cache warm, 40 s cold (2 cores).
#include <stdlib.h>
#include <string.h>

#include "ops.h"
#include "ops_limits.h"
#include "ref_matmul.h"
#include "ref_ops.h"
#include "test_util.h"

#define CANARY 0x7fc0dead // a NaN pattern no kernel computes

static bool driver_is(vkt_device *dev, uint32_t id) {
    return vkt_device_get_info(dev)->driver_id == id;
}

static const char *form_name(vkt_mm_form f) {
    return f == VKT_MM_NN ? "NN" : f == VKT_MM_NT ? "NT" : "TN";
}

typedef struct big_case {
    vkt_mm_form form;
    uint32_t M, N, K;
    bool bias;
    float beta;
    uint32_t pad;     // alignment units before each operand
    uint64_t range;   // the bytes the op may bind
    uint32_t want[3]; // at least this many blocks of rows, of columns and K-chunks
    vkt_mm_epi epi;
    vkt_act act;
    float alpha;
    bool keep_z;
} big_case;

#define NO_EPI VKT_MM_EPI_NONE, VKT_ACT_RELU, 0.0f, false

static double ref_epi(const big_case *bc, double z, float s) {
    switch (bc->epi) {
    case VKT_MM_EPI_ACT: return ref_act(bc->act, bc->alpha, z);
    case VKT_MM_EPI_GRAD_X: return z * ref_act_grad(bc->act, bc->alpha, s);
    case VKT_MM_EPI_GRAD_Y: return z * ref_act_grad_from_output(bc->act, bc->alpha, s);
    default: return z;
    }
}

// Elements of n floats that differ in their bits.
static size_t bit_diffs(const uint32_t *x, const uint32_t *y, size_t n) {
    size_t d = 0;
    for (size_t i = 0; i < n; i++)
        d += x[i] != y[i];
    return d;
}

// One case on one device: returns nothing, records checks.
static void run_big(vt *t, vkt_device *dev, vkt_ops *ops, vkt_cmd *cmd, const big_case *bc,
                    uint64_t seed) {
    uint32_t M = bc->M, N = bc->N, K = bc->K;
    uint64_t nc = (uint64_t)M * N, na = (uint64_t)M * K, nb = (uint64_t)K * N;
    float *a = malloc(4 * na), *b = malloc(4 * nb), *bias = malloc(4ull * N), *c0 = malloc(4 * nc);
    float *s = malloc(4 * nc);
    vt_fill_uniform(a, na, seed, -1, 1);
    vt_fill_uniform(b, nb, seed + 1, -1, 1);
    vt_fill_uniform(bias, N, seed + 2, -1, 1);
    vt_fill_uniform(c0, nc, seed + 3, -1, 1);
    vt_fill_uniform(s, nc, seed + 4, -3, 3);
    if (bc->epi == VKT_MM_EPI_GRAD_Y)
        for (size_t i = 0; i < nc; i++)
            s[i] = (float)ref_act(bc->act, bc->alpha, s[i]);
    double *zref = malloc(sizeof(double) * nc);
    ref_matmul(bc->form, zref, c0, a, b, bc->bias ? bias : NULL, bc->beta, M, N, K);
    double *ref = malloc(sizeof(double) * nc);
    for (size_t i = 0; i < nc; i++)
        ref[i] = ref_epi(bc, zref[i], s[i]);

    // Layout: [pad][canary][c][canary] [pad][a][canary] [pad][b][canary] [bias][canary]
    // [pad][s or z][canary], every start aligned.
    uint64_t al = vkt_device_align(dev, 1), canary = vkt_device_align(dev, 256);
    uint64_t off_c = bc->pad * al + canary;
    uint64_t off_a = vkt_device_align(dev, off_c + 4 * nc + canary) + bc->pad * al;
    uint64_t off_b = vkt_device_align(dev, off_a + 4 * na + canary) + bc->pad * al;
    uint64_t off_bias = vkt_device_align(dev, off_b + 4 * nb + canary);
    uint64_t off_s = vkt_device_align(dev, off_bias + 4ull * N + canary) + bc->pad * al;
    uint64_t size = off_s + 4 * nc + canary;
    uint32_t *host = malloc(size), *got[2] = {malloc(size), malloc(size)};
    for (uint64_t i = 0; i < size / 4; i++)
        host[i] = CANARY;
    bool grad = bc->epi == VKT_MM_EPI_GRAD_X || bc->epi == VKT_MM_EPI_GRAD_Y;
    bool keep_z = bc->epi == VKT_MM_EPI_ACT && bc->keep_z;
    memcpy((char *)host + off_c, c0, 4 * nc);
    memcpy((char *)host + off_a, a, 4 * na);
    memcpy((char *)host + off_b, b, 4 * nb);
    memcpy((char *)host + off_bias, bias, 4ull * N);
    if (grad) memcpy((char *)host + off_s, s, 4 * nc);
    vkt_buffer *buf = NULL;
    VT_OK(t, vkt_buffer_create(dev, size, "matmul-big-test", &buf));
    vkt_view vc = vkt_buffer_view(buf, off_c, 4 * nc), va = vkt_buffer_view(buf, off_a, 4 * na);
    vkt_view vb = vkt_buffer_view(buf, off_b, 4 * nb),
             vbias = vkt_buffer_view(buf, off_bias, 4ull * N);
    vkt_view vs = vkt_buffer_view(buf, off_s, 4 * nc);

    char what[240], epi[64] = "";
    static const char *kinds[] = {"", "act", "grad_x", "grad_y"};
    if (bc->epi != VKT_MM_EPI_NONE)
        snprintf(epi, sizeof epi, " %s act %d (%g)%s", kinds[bc->epi], (int)bc->act, bc->alpha,
                 keep_z ? " keep z" : "");
    // Run 0 with the lowered range (split), run 1 with the device's own (whole).
    uint32_t blocks[3] = {0, 0, 0};
    const char *variant[2] = {NULL, NULL};
    for (int run = 0; run < 2 && buf; run++) {
        vkt_matmul_test_range(run == 0 ? bc->range : 0);
        uint32_t bl[3];
        vkt_matmul_test_plan(ops, bc->form, M, N, K, bl);
        if (run == 0) memcpy(blocks, bl, sizeof bl);
        variant[run] = vkt_matmul_variant(ops, bc->form, M, N, K);
        VT_OK(t, vkt_buffer_write(buf, 0, host, size));
        VT_OK(t, vkt_cmd_begin(cmd, false));
        vkt_mm_epilogue e = {.kind = bc->epi,
                             .act = bc->act,
                             .alpha = bc->alpha,
                             .saved = grad || keep_z ? &vs : NULL};
        vkt_op_matmul_ex(cmd, ops, bc->form, vc, va, vb, bc->bias ? &vbias : NULL, bc->beta, M, N,
                         K, &e, "matmul");
        int dispatches = vkt_cmd_dispatch_count(cmd);
        if (run == 0) {
            snprintf(what, sizeof what,
                     "%s %ux%ux%u bias %d beta %g pad %u%s range %llu (%ux%ux%u blocks, %s) on %s",
                     form_name(bc->form), M, N, K, bc->bias, bc->beta, bc->pad, epi,
                     (unsigned long long)bc->range, bl[0], bl[1], bl[2], variant[0],
                     vkt_device_label(dev));
            VT_CHECK(t, bl[0] >= bc->want[0] && bl[1] >= bc->want[1] && bl[2] >= bc->want[2],
                     "%s: fewer blocks than the case is built for (%u, %u, %u)", what, bc->want[0],
                     bc->want[1], bc->want[2]);
        }
        VT_CHECK(t, dispatches == (int)(bl[0] * bl[1] * bl[2]),
                 "%s: run %d recorded %d dispatches for %ux%ux%u blocks", what, run, dispatches,
                 bl[0], bl[1], bl[2]);
        VT_CHECK(t, vt_run(t, cmd, ops, what, "run"), "%s: did not run", what);
        VT_OK(t, vkt_buffer_read(buf, 0, got[run], size));
    }
    vkt_matmul_test_range(0);
    VT_CHECK(t, blocks[0] * blocks[1] * blocks[2] > 1, "%s: not split", what);

    double atol = 1e-6 * (K + 1), rtol = 1e-5;
    if (bc->epi != VKT_MM_EPI_NONE) atol = 1.2 * atol + 1e-5, rtol = 3e-5;
    const float *gc = (const float *)((char *)got[0] + off_c);
    size_t bad = vt_compare(what, gc, ref, nc, atol, rtol);
    VT_CHECK(t, bad == 0, "%s: %zu wrong elements", what, bad);
    if (keep_z) {
        bad = vt_compare(what, (const float *)((char *)got[0] + off_s), zref, nc, 1e-6 * (K + 1),
                         1e-5);
        VT_CHECK(t, bad == 0, "%s: z: %zu wrong elements", what, bad);
    }
    size_t clobbered = 0;
    for (uint64_t i = 0; i < size / 4; i++) {
        bool in_c = i >= off_c / 4 && i < (off_c + 4 * nc) / 4;
        bool in_z = keep_z && i >= off_s / 4 && i < (off_s + 4 * nc) / 4;
        if (!in_c && !in_z) clobbered += got[0][i] != host[i];
    }
    VT_CHECK(t, clobbered == 0, "%s: %zu words outside c and z changed", what, clobbered);
    // The split against the whole, bit for bit where the split allows it.
    size_t diff = bit_diffs(got[0], got[1], size / 4);
    bool wide = variant[0] && variant[1] && strncmp(variant[0], "wide", 4) == 0 &&
                strncmp(variant[1], "wide", 4) == 0;
    bool exact = blocks[2] == 1 || (wide && bc->epi == VKT_MM_EPI_NONE);
    if (exact)
        VT_CHECK(t, diff == 0, "%s: %zu words differ from the unsplit product (%s)", what, diff,
                 variant[1]);
    printf("test_matmul_big: %s: %s, %zu words differ from unsplit (%s)\n", what,
           bad == 0 && clobbered == 0 ? "ok" : "FAILED", diff, variant[1]);
    vkt_buffer_destroy(buf);
    free(host), free(got[0]), free(got[1]), free(ref), free(zref);
    free(a), free(b), free(bias), free(c0), free(s);
}

// The SGD epilogue on TN (the weight gradient) split into row blocks: p and the momentum buffer
// against ref_sgd, and bit for bit against the unsplit step.
static void sgd_big(vt *t, vkt_device *dev, vkt_ops *ops, vkt_cmd *cmd, uint32_t M, uint32_t N,
                    uint32_t K, uint64_t range, uint64_t seed) {
    float lr = 0.05f, momentum = 0.9f, wd = 1e-2f;
    size_t nc = (size_t)M * N, na = (size_t)K * M, nb = (size_t)K * N;
    float *a = malloc(4 * na), *b = malloc(4 * nb), *p0 = malloc(4 * nc), *m0 = malloc(4 * nc);
    vt_fill_uniform(a, na, seed, -1, 1);
    vt_fill_uniform(b, nb, seed + 1, -1, 1);
    vt_fill_uniform(p0, nc, seed + 2, -1, 1);
    vt_fill_uniform(m0, nc, seed + 3, -1, 1);
    double *g = malloc(sizeof(double) * nc), *rp = malloc(sizeof(double) * nc),
           *rb = malloc(sizeof(double) * nc);
    ref_matmul(VKT_MM_TN, g, NULL, a, b, NULL, 0.0f, M, N, K);
    for (size_t i = 0; i < nc; i++)
        rp[i] = p0[i], rb[i] = m0[i];
    ref_sgd(rp, g, rb, nc, lr, momentum, wd, false);
    uint64_t canary = vkt_device_align(dev, 256);
    uint64_t off_a = vkt_device_align(dev, 4 * nc + canary);
    uint64_t off_b = vkt_device_align(dev, off_a + 4 * na);
    uint64_t off_m = vkt_device_align(dev, off_b + 4 * nb + canary);
    uint64_t size = off_m + 4 * nc + canary;
    uint32_t *host = malloc(size), *got[2] = {malloc(size), malloc(size)};
    for (uint64_t i = 0; i < size / 4; i++)
        host[i] = CANARY;
    memcpy(host, p0, 4 * nc);
    memcpy((char *)host + off_a, a, 4 * na);
    memcpy((char *)host + off_b, b, 4 * nb);
    memcpy((char *)host + off_m, m0, 4 * nc);
    vkt_buffer *buf = NULL;
    VT_OK(t, vkt_buffer_create(dev, size, "matmul-big-sgd", &buf));
    vkt_view vp = vkt_buffer_view(buf, 0, 4 * nc), va = vkt_buffer_view(buf, off_a, 4 * na);
    vkt_view vb = vkt_buffer_view(buf, off_b, 4 * nb), vm = vkt_buffer_view(buf, off_m, 4 * nc);
    char what[200];
    uint32_t bl[3] = {0, 0, 0};
    vkt_matmul_test_range(range);
    vkt_matmul_test_plan(ops, VKT_MM_TN, M, N, K, bl);
    snprintf(what, sizeof what, "SGD epilogue TN %ux%ux%u range %llu (%ux%ux%u blocks) on %s", M, N,
             K, (unsigned long long)range, bl[0], bl[1], bl[2], vkt_device_label(dev));
    VT_CHECK(t, bl[0] > 1 && bl[2] == 1, "%s: not split into row blocks alone", what);
    for (int run = 0; run < 2 && buf; run++) {
        vkt_matmul_test_range(run == 0 ? range : 0);
        bool fits = vkt_matmul_sgd_fits(ops, VKT_MM_TN, &vp, &va, &vb, &vm, M, N, K);
        VT_CHECK(t, fits, "%s: run %d: no kernel takes it", what, run);
        if (!fits) break;
        VT_OK(t, vkt_buffer_write(buf, 0, host, size));
        VT_OK(t, vkt_cmd_begin(cmd, false));
        vkt_mm_epilogue e = {.kind = VKT_MM_EPI_SGD,
                             .alpha = lr,
                             .saved = &vm,
                             .momentum = momentum,
                             .weight_decay = wd};
        vkt_op_matmul_ex(cmd, ops, VKT_MM_TN, vp, va, vb, NULL, 0.0f, M, N, K, &e, "sgd");
        VT_CHECK(t, vt_run(t, cmd, ops, what, "run"), "%s: did not run", what);
        VT_OK(t, vkt_buffer_read(buf, 0, got[run], size));
    }
    vkt_matmul_test_range(0);
    double atol = 1e-6 * (K + 1), rtol = 1e-5;
    size_t bad = vt_compare(what, (const float *)got[0], rp, nc, atol, rtol);
    VT_CHECK(t, bad == 0, "%s: p: %zu wrong elements", what, bad);
    bad = vt_compare(what, (const float *)((char *)got[0] + off_m), rb, nc, atol, rtol);
    VT_CHECK(t, bad == 0, "%s: momentum buffer: %zu wrong elements", what, bad);
    size_t clobbered = 0;
    for (uint64_t i = nc; i < size / 4; i++)
        if (i < off_m / 4 || i >= off_m / 4 + nc) clobbered += got[0][i] != host[i];
    VT_CHECK(t, clobbered == 0, "%s: %zu words outside p and the buffer changed", what, clobbered);
    size_t diff = bit_diffs(got[0], got[1], size / 4);
    VT_CHECK(t, diff == 0, "%s: %zu words differ from the unsplit step", what, diff);
    printf("test_matmul_big: %s: %zu words differ from unsplit\n", what, diff);
    // A split that needs K-chunks cannot carry the step: sgd_fits says so (dense.c then takes
    // the unfused path). TN's a [K, M] of 4 K M bytes over the range: chunks of K.
    vkt_matmul_test_range(4ull * K * M / 2);
    vkt_matmul_test_plan(ops, VKT_MM_TN, M, N, K, bl);
    VT_CHECK(t, bl[2] > 1, "%s: a over half its size does not chunk K", what);
    VT_CHECK(t, !vkt_matmul_sgd_fits(ops, VKT_MM_TN, &vp, &va, &vb, &vm, M, N, K),
             "%s: sgd_fits claims a product that needs K-chunks", what);
    vkt_matmul_test_range(0);
    vkt_buffer_destroy(buf);
    free(host), free(got[0]), free(got[1]), free(g), free(rp), free(rb);
    free(a), free(b), free(p0), free(m0);
}

// One product over lavapipe's real range: NT 256 x 50257 x 768 with bias (b: 154 MB), sampled.
static void real_big(vt *t, vkt_device *dev, vkt_ops *ops, vkt_cmd *cmd, uint64_t seed) {
    const uint32_t M = 256, N = 50257, K = 768;
    uint64_t na = (uint64_t)M * K, nb = (uint64_t)N * K, nc = (uint64_t)M * N;
    uint64_t range = vkt_device_get_info(dev)->max_storage_buffer_range;
    VT_CHECK(t, 4 * nb > range, "b (%llu bytes) fits %s's range", (unsigned long long)(4 * nb),
             vkt_device_label(dev));
    float *a = malloc(4 * na), *b = malloc(4 * nb), *bias = malloc(4ull * N);
    float *c = malloc(4 * nc + 64);
    vt_fill_uniform(a, na, seed, -1, 1);
    vt_fill_uniform(b, nb, seed + 1, -1, 1);
    vt_fill_uniform(bias, N, seed + 2, -1, 1);
    uint64_t off_a = vkt_device_align(dev, 4 * nc + 64),
             off_b = vkt_device_align(dev, off_a + 4 * na);
    uint64_t off_bias = vkt_device_align(dev, off_b + 4 * nb);
    vkt_buffer *buf = NULL;
    VT_OK(t, vkt_buffer_create(dev, off_bias + 4ull * N, "matmul-big-real", &buf));
    if (!buf) goto done;
    for (int i = 0; i < 16; i++)
        ((uint32_t *)c)[nc + i] = CANARY;
    VT_OK(t, vkt_buffer_write(buf, 4 * nc, (char *)c + 4 * nc, 64));
    VT_OK(t, vkt_buffer_write(buf, off_a, a, 4 * na));
    VT_OK(t, vkt_buffer_write(buf, off_b, b, 4 * nb));
    VT_OK(t, vkt_buffer_write(buf, off_bias, bias, 4ull * N));
    vkt_view vc = vkt_buffer_view(buf, 0, 4 * nc), va = vkt_buffer_view(buf, off_a, 4 * na);
    vkt_view vb = vkt_buffer_view(buf, off_b, 4 * nb),
             vbias = vkt_buffer_view(buf, off_bias, 4ull * N);
    uint32_t bl[3];
    vkt_matmul_test_plan(ops, VKT_MM_NT, M, N, K, bl);
    char what[160];
    snprintf(what, sizeof what,
             "NT %ux%ux%u with bias over the real range (%ux%ux%u blocks, %s) on %s", M, N, K,
             bl[0], bl[1], bl[2], vkt_matmul_variant(ops, VKT_MM_NT, M, N, K),
             vkt_device_label(dev));
    VT_CHECK(t, bl[1] > 1 && bl[2] == 1, "%s: not split in columns alone", what);
    VT_OK(t, vkt_cmd_begin(cmd, false));
    vkt_op_matmul(cmd, ops, VKT_MM_NT, vc, va, vb, &vbias, 0.0f, M, N, K, "matmul-real");
    VT_CHECK(t, vt_run(t, cmd, ops, what, "run"), "%s: did not run", what);
    VT_OK(t, vkt_buffer_read(buf, 0, c, 4 * nc + 64));
    // 4096 sampled entries (all four corners of the column split among them) against double.
    uint64_t state = seed + 3;
    size_t bad = 0;
    double worst = 0;
    for (int i = 0; i < 4096; i++) {
        uint32_t m = i < 2 ? (i ? M - 1 : 0) : (uint32_t)(vt_rand_u64(&state) % M);
        uint32_t n = i < 2 ? (i ? N - 1 : 0) : (uint32_t)(vt_rand_u64(&state) % N);
        double ref = ref_matmul_dot(VKT_MM_NT, a, b, M, N, K, m, n) + bias[n];
        double err = fabs(c[(size_t)m * N + n] - ref), tol = 1e-6 * (K + 1) + 1e-5 * fabs(ref);
        if (!(err <= tol)) bad++;
        if (err > worst) worst = err;
    }
    VT_CHECK(t, bad == 0, "%s: %zu of 4096 sampled entries wrong (worst %g)", what, bad, worst);
    size_t clobbered = 0;
    for (int i = 0; i < 16; i++)
        clobbered += ((uint32_t *)c)[nc + i] != CANARY;
    VT_CHECK(t, clobbered == 0, "%s: %zu words after c changed", what, clobbered);
    printf("test_matmul_big: %s: %s (worst error %.3g)\n", what, bad ? "FAILED" : "ok", worst);
done:
    vkt_buffer_destroy(buf);
    free(a), free(b), free(bias), free(c);
}

int main(void) {
    vt tv, *t = &tv;
    if (vt_init(t, "test_matmul_big")) return 1;
    // The device's rule chooses, never a measurement: each run checks the same kernels.
    vkt_context_set_tune(t->ctx, VKT_TUNE_OFF);
    vkt_ops *ops[VT_MAX_DEVICES] = {0};
    vkt_cmd *cmd[VT_MAX_DEVICES] = {0};
    for (int d = 0; d < t->ndev; d++) {
        VT_OK(t, vkt_ops_create(t->dev[d], &ops[d]));
        VT_OK(t, vkt_cmd_create(t->dev[d], &cmd[d]));
    }
    // The ranges put the blocks where each comment says, with either alignment (lavapipe's 16
    // bytes, SwiftShader's 256).
    const big_case cases[] = {
        // NT: 7 row blocks x 6 column blocks, rows starting off the alignment.
        {VKT_MM_NT, 200, 333, 97, true, 0.0f, 1, 48000, {4, 4, 1}, NO_EPI},
        {VKT_MM_NT, 200, 333, 97, false, 0.5f, 0, 48000, {4, 4, 1}, NO_EPI},
        // NN: row blocks x 2 K-chunks (b [K, N] spans whole rows).
        {VKT_MM_NN, 157, 61, 403, true, 0.5f, 2, 64000, {3, 1, 2}, NO_EPI},
        // TN: 2 row blocks x 3 K-chunks (a [K, M] spans whole rows), accumulating.
        {VKT_MM_TN, 301, 77, 190, false, 1.0f, 1, 80000, {2, 1, 3}, NO_EPI},
        // Aligned: the wide kernels per block (texel reads on lavapipe), 6 x 2 blocks.
        {VKT_MM_NT, 136, 264, 40, true, 0.0f, 0, 32000, {4, 2, 1}, NO_EPI},
        // Aligned TN with 4 K-chunks of 56: the wide kernels' chunks come out bit for bit.
        {VKT_MM_TN, 136, 72, 200, true, 0.0f, 0, 32000, {3, 1, 4}, NO_EPI},
        {VKT_MM_TN, 136, 72, 200, false, 0.5f, 1, 32000, {3, 1, 4}, NO_EPI},
        // 13 row blocks of 8 rows x 4 K-chunks: odd blocks start 32 floats off 256 bytes
        // (SwiftShader's vec4 kernel with element offsets; the last chunk of 20 is scalar).
        {VKT_MM_NN, 100, 36, 404, true, 1.0f, 0, 24000, {8, 1, 4}, NO_EPI},
        // Epilogues: f(z) keeping z (gelu) and leaky_relu (negative slope) on NT's 2-D blocks;
        // tanh without z; z f'(x) from the input (gelu) through NN's K-chunks; from the output
        // (sigmoid) through TN's; relu from the output on the aligned NT blocks.
        {VKT_MM_NT,
         200,
         333,
         97,
         true,
         0.0f,
         0,
         48000,
         {4, 4, 1},
         VKT_MM_EPI_ACT,
         VKT_ACT_GELU,
         0.0f,
         true},
        {VKT_MM_NT,
         200,
         333,
         97,
         false,
         1.0f,
         1,
         48000,
         {4, 4, 1},
         VKT_MM_EPI_ACT,
         VKT_ACT_LEAKY_RELU,
         -0.2f,
         true},
        {VKT_MM_NT,
         136,
         264,
         40,
         true,
         0.0f,
         0,
         32000,
         {4, 2, 1},
         VKT_MM_EPI_ACT,
         VKT_ACT_TANH,
         0.0f,
         false},
        {VKT_MM_NN,
         157,
         61,
         403,
         false,
         0.0f,
         1,
         64000,
         {3, 1, 2},
         VKT_MM_EPI_GRAD_X,
         VKT_ACT_GELU,
         0.0f,
         false},
        {VKT_MM_TN,
         301,
         77,
         190,
         true,
         0.5f,
         0,
         80000,
         {2, 1, 3},
         VKT_MM_EPI_GRAD_Y,
         VKT_ACT_SIGMOID,
         0.0f,
         false},
        {VKT_MM_NT,
         136,
         264,
         40,
         false,
         0.0f,
         2,
         32000,
         {4, 2, 1},
         VKT_MM_EPI_GRAD_Y,
         VKT_ACT_RELU,
         0.0f,
         false},
        {VKT_MM_TN,
         136,
         72,
         200,
         false,
         0.0f,
         0,
         32000,
         {3, 1, 4},
         VKT_MM_EPI_GRAD_X,
         VKT_ACT_LEAKY_RELU,
         0.1f,
         false},
    };
    uint64_t seed = 500;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++, seed += 8)
        for (int d = 0; d < t->ndev; d++)
            if (ops[d] && cmd[d]) run_big(t, t->dev[d], ops[d], cmd[d], &cases[i], seed);

    // The SGD epilogue on 5 row blocks of 64 (the last of 40): lavapipe's first choice, and on
    // SwiftShader the vec4 wide kernel (its own have no epilogue).
    for (int d = 0; d < t->ndev; d++) {
        if (!ops[d] || !cmd[d]) continue;
        bool ss = driver_is(t->dev[d], VT_DRIVER_ID_SWIFTSHADER);
        if (ss) VT_OK(t, vkt_context_set_matmul_variant(t->ctx, "wide-r16c8-g64"));
        sgd_big(t, t->dev[d], ops[d], cmd[d], 296, 136, 40, 64000, seed++);
        vkt_context_set_matmul_variant(t->ctx, NULL);
    }

    for (int d = 0; d < t->ndev; d++)
        if (ops[d] && cmd[d] && driver_is(t->dev[d], VT_DRIVER_ID_LLVMPIPE))
            real_big(t, t->dev[d], ops[d], cmd[d], seed++);

    for (int d = 0; d < t->ndev; d++) {
        vkt_cmd_destroy(cmd[d]);
        vkt_ops_destroy(ops[d]);
    }
    return vt_finish(t);
}
