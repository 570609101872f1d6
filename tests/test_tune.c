// test_tune.c: matmul variants chosen by measurement at first use and kept on disk per device and
// driver build (engine/core/tune.c, engine/ops/matmul.c), and the pipeline cache files. On every
// device with two or more candidates for the shape (SwiftShader's rule from 2^27 multiply-adds: its
// 32- and 16-row tiles; at least one such device is required): the first product of a shape
// measures every candidate that fits it and writes them to <key>.tune.json; the variant used is the
// fastest measured one and its result matches the double reference; a new process (simulated by
// vkt_tune_forget) reads the file and measures nothing; a damaged file is ignored, measured again
// and rewritten; VKT_TUNE=force measures again. A device with one candidate (lavapipe: its texel
// kernel, the others fallbacks) measures and writes nothing in any mode and uses that candidate,
// whose result matches the reference; tuning off (VKT_TUNE=off) measures nothing and writes
// nothing; with Mesa's shader cache empty, no measured time includes compiling (lavapipe compiles
// at a pipeline's first dispatch); a pipeline cache file names its device, and a damaged one does
// not stop the device from opening; a product's kernel built ahead on two threads
// (vkt_ops_prebuild) is the one its recording uses; times measured with the stores forced
// ("stores-dvec4" in the variant list) are kept under their own name.
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "ref_matmul.h"
#include "test_util.h"
#include "tune.h"

// 2^27 multiply-adds: SwiftShader's 32-row tile is a candidate from there (BIG_MACS in matmul.c).
#define M 512u
#define N 512u
#define K 512u
static const char *OP = "matmul NT 512x512x512";

// One NT product on dev through vkt_op_matmul, checked against the reference. Returns the variant
// the engine reports for the shape afterwards. With prebuild, its kernel is built ahead
// (vkt_matmul_plain_keys + vkt_ops_prebuild on 2 threads, the key given twice): exactly one
// pipeline is built there and none by the recording.
static const char *run_product_ex(vt *t, vkt_device *dev, const char *where, bool prebuild) {
    vkt_ops *ops = NULL;
    vkt_cmd *cmd = NULL;
    vkt_buffer *ba = NULL, *bb = NULL, *bc = NULL;
    float *a = malloc(4 * M * K), *b = malloc(4 * N * K), *c = malloc(4 * M * N);
    double *ref = malloc(sizeof *ref * M * N);
    vt_fill_uniform(a, M * K, 1, -1, 1);
    vt_fill_uniform(b, N * K, 2, -1, 1);
    const char *variant = NULL;
    VT_OK(t, vkt_ops_create(dev, &ops));
    VT_OK(t, vkt_buffer_create(dev, 4 * M * K, "a", &ba));
    VT_OK(t, vkt_buffer_create(dev, 4 * N * K, "b", &bb));
    VT_OK(t, vkt_buffer_create(dev, 4 * M * N, "c", &bc));
    VT_OK(t, vkt_cmd_create(dev, &cmd));
    if (ops && ba && bb && bc && cmd) {
        VT_OK(t, vkt_buffer_write(ba, 0, a, 4 * M * K));
        VT_OK(t, vkt_buffer_write(bb, 0, b, 4 * N * K));
        vkt_startup_counters c0, c1, c2;
        vkt_startup_counters_get(&c0);
        if (prebuild) {
            vkt_mm_shape shapes[2] = {{VKT_MM_NT, M, N, K}, {VKT_MM_NT, M, N, K}};
            vkt_kernel_key keys[2];
            VT_CHECK(t, vkt_matmul_plain_keys(ops, shapes, 2, keys) == 2, "%s", where);
            VT_OK(t, vkt_ops_prebuild(ops, keys, 2, 2));
        }
        vkt_startup_counters_get(&c1);
        VT_OK(t, vkt_cmd_begin(cmd, false));
        vkt_op_matmul(cmd, ops, VKT_MM_NT, vkt_buffer_whole(bc), vkt_buffer_whole(ba),
                      vkt_buffer_whole(bb), NULL, 0.0f, M, N, K, "mm");
        vkt_startup_counters_get(&c2);
        if (prebuild)
            VT_CHECK(
                t, c1.kernels_built == c0.kernels_built + 1 && c2.kernels_built == c1.kernels_built,
                "%s: %llu pipelines built ahead (want 1), %llu by the recording (want 0)", where,
                (unsigned long long)(c1.kernels_built - c0.kernels_built),
                (unsigned long long)(c2.kernels_built - c1.kernels_built));
        if (vt_run(t, cmd, ops, "tuned matmul", where)) {
            VT_OK(t, vkt_buffer_read(bc, 0, c, 4 * M * N));
            ref_matmul(VKT_MM_NT, ref, NULL, a, b, NULL, 0.0f, M, N, K);
            // test_matmul's tolerance: atol 1e-6 (K + 1), rtol 1e-5.
            VT_CHECK(t, vt_compare(where, c, ref, M * N, 1e-6 * (K + 1), 1e-5) == 0, "%s", where);
        }
        variant = vkt_matmul_variant(ops, VKT_MM_NT, M, N, K);
    }
    vkt_cmd_destroy(cmd);
    vkt_buffer_destroy(bc);
    vkt_buffer_destroy(bb);
    vkt_buffer_destroy(ba);
    vkt_ops_destroy(ops);
    free(a);
    free(b);
    free(c);
    free(ref);
    return variant;
}

static const char *run_product(vt *t, vkt_device *dev, const char *where) {
    return run_product_ex(t, dev, where, false);
}

// The entries of the tuning file for op: their number, the variant with the least time, and
// (worst, when not NULL) the greatest time.
static int file_entries_op(vt *t, const vkt_device_info *d, const char *op_name, char *fastest,
                           size_t size, double *worst) {
    char path[4400];
    if (!vkt_cache_path(t->ctx, d, ".tune.json", path, sizeof path)) return -1;
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    static char text[1 << 16];
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = '\0';
    cJSON *root = cJSON_Parse(text);
    if (!root) return -2;
    int count = 0;
    double best = 1e300;
    const cJSON *e;
    cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(root, "entries")) {
        const cJSON *op = cJSON_GetObjectItemCaseSensitive(e, "op");
        const cJSON *var = cJSON_GetObjectItemCaseSensitive(e, "variant");
        const cJSON *ms = cJSON_GetObjectItemCaseSensitive(e, "ms");
        if (!cJSON_IsString(op) || strcmp(op->valuestring, op_name) || !cJSON_IsString(var) ||
            !cJSON_IsNumber(ms))
            continue;
        count++;
        if (worst && ms->valuedouble > *worst) *worst = ms->valuedouble;
        if (ms->valuedouble < best) {
            best = ms->valuedouble;
            snprintf(fastest, size, "%s", var->valuestring);
        }
    }
    cJSON_Delete(root);
    return count;
}

static int file_entries_worst(vt *t, const vkt_device_info *d, char *fastest, size_t size,
                              double *worst) {
    return file_entries_op(t, d, OP, fastest, size, worst);
}

static int file_entries(vt *t, const vkt_device_info *d, char *fastest, size_t size) {
    return file_entries_worst(t, d, fastest, size, NULL);
}

static void check_pipeline_file(vt *t, const vkt_device_info *d) {
    char path[4400];
    VT_CHECK(t, vkt_cache_path(t->ctx, d, ".pipelines", path, sizeof path), "%s", d->name);
    FILE *f = fopen(path, "rb");
    uint32_t h[8] = {0};
    size_t n = f ? fread(h, 1, sizeof h, f) : 0;
    if (f) fclose(f);
    VT_CHECK(t,
             n == sizeof h && h[1] == 1 && h[2] == d->vendor_id && h[3] == d->device_id &&
                 memcmp(&h[4], d->uuid, 16) == 0,
             "%s: %s does not hold this device's pipeline cache header", d->name, path);
}

// What the tuner did for one product on a device (run_counted).
typedef struct counted {
    const char *variant;         // the variant the product ran (run_product)
    unsigned long long measured; // variants measured
    unsigned long long saved;    // tuning files written
} counted;

// Runs the product on dev and counts what the tuner did. Where the device has one candidate for
// OP (only: its name; "" where it has several), checks that nothing was measured or saved and
// that the candidate ran, and returns false; else true.
static bool run_counted(vt *t, vkt_device *dev, const char *only, counted *c) {
    const vkt_device_info *d = vkt_device_get_info(dev);
    vkt_tune_stats s0 = vkt_tune_get_stats();
    c->variant = run_product(t, dev, d->name);
    vkt_tune_stats s1 = vkt_tune_get_stats();
    c->measured = s1.measured - s0.measured;
    c->saved = s1.saved - s0.saved;
    if (!only[0]) return true;
    VT_CHECK(t, c->measured == 0 && c->saved == 0 && c->variant && !strcmp(c->variant, only),
             "%s: one candidate (%s): %llu measured, %llu saved, %s used", d->name, only,
             c->measured, c->saved, c->variant ? c->variant : "(none)");
    return false;
}

int main(void) {
    char dir[] = "/tmp/vkt_test_tune_XXXXXX";
    if (!mkdtemp(dir)) return 1;
    setenv("VKT_CACHE_DIR", dir, 1); // vt_init maps it as the CLI does
    // Mesa's shader cache, empty: lavapipe then compiles each kernel's machine code at its first
    // dispatch (0.5-7 s), which the measurement must leave out.
    char mesa[sizeof dir + 8];
    snprintf(mesa, sizeof mesa, "%s/mesa", dir);
    setenv("MESA_SHADER_CACHE_DIR", mesa, 1);
    unsetenv("VKT_TUNE");
    unsetenv("VKT_MATMUL_VARIANT");
    vkt_tune_forget();

    vt t;
    if (vt_init(&t, "test_tune")) return 1;
    char chosen[VT_MAX_DEVICES][64] = {{0}};
    // Whether the device has two or more candidates for OP (then they are measured), and the
    // only one where it has one.
    bool multi[VT_MAX_DEVICES] = {false}, any_multi = false;
    char only[VT_MAX_DEVICES][64] = {{0}};
    for (int i = 0; i < t.ndev; i++) {
        vkt_ops *ops = NULL;
        const char *names[8];
        double ms[8];
        VT_OK(&t, vkt_ops_create(t.dev[i], &ops));
        int n = ops ? vkt_matmul_candidates(ops, VKT_MM_NT, M, N, K, names, ms, 8) : 0;
        VT_CHECK(&t, n >= 1, "%s: no candidate for %s", vkt_device_get_info(t.dev[i])->name, OP);
        multi[i] = n >= 2;
        any_multi = any_multi || multi[i];
        if (n == 1) snprintf(only[i], sizeof only[i], "%s", names[0]);
        vkt_ops_destroy(ops);
    }
    VT_CHECK(&t, any_multi, "no device measures candidates for %s: the measuring is not tested",
             OP);

    // (A device with one candidate: nothing measured or saved, that candidate used, in every
    // block below: run_counted.)
    // First use: measured, written, the fastest used.
    for (int i = 0; i < t.ndev; i++) {
        const vkt_device_info *d = vkt_device_get_info(t.dev[i]);
        counted c;
        bool measures = run_counted(&t, t.dev[i], only[i], &c);
        const char *v = c.variant;
        if (v) snprintf(chosen[i], sizeof chosen[i], "%s", v);
        if (!measures) continue;
        VT_CHECK(&t, c.measured >= 2, "%s: %llu variants measured, want >= 2", d->name, c.measured);
        VT_CHECK(&t, c.saved > 0, "%s: nothing saved", d->name);
        char fastest[64] = "";
        double worst = 0;
        int n = file_entries_worst(&t, d, fastest, sizeof fastest, &worst);
        VT_CHECK(&t, n >= 2, "%s: %d entries for %s in the file", d->name, n, OP);
        // 0.8 MFLOP takes under 10 ms on the slowest candidate of either CPU driver; a
        // compile inside the timed run takes 0.5 s or more (a cold first use measured 6-8 s for
        // one kernel and chose the scalar kernel for a 512^3 product, before the warm-up).
        VT_CHECK(&t, worst < 250.0,
                 "%s: a candidate measured %.0f ms for %s: the measurement includes compiling",
                 d->name, worst, OP);
        VT_CHECK(&t, v && !strcmp(v, fastest), "%s: uses %s, the file's fastest is %s", d->name,
                 v ? v : "(none)", fastest);
    }

    // A new process: the file answers, nothing is measured.
    vkt_tune_forget();
    for (int i = 0; i < t.ndev; i++) {
        const vkt_device_info *d = vkt_device_get_info(t.dev[i]);
        vkt_tune_stats s0 = vkt_tune_get_stats();
        const char *v = run_product(&t, t.dev[i], d->name);
        vkt_tune_stats s1 = vkt_tune_get_stats();
        VT_CHECK(&t, s1.measured == s0.measured, "%s: measured again despite the file", d->name);
        VT_CHECK(&t, !multi[i] || s1.loaded > s0.loaded, "%s: nothing loaded from the file",
                 d->name);
        VT_CHECK(&t, v && !strcmp(v, chosen[i]), "%s: %s after reload, %s before", d->name,
                 v ? v : "(none)", chosen[i]);
    }

    // Built ahead (the choice from the file): one pipeline for the key given twice, and the
    // product records with it, building nothing, and matches the reference.
    for (int i = 0; i < t.ndev; i++) {
        const vkt_device_info *d = vkt_device_get_info(t.dev[i]);
        const char *v = run_product_ex(&t, t.dev[i], d->name, true);
        VT_CHECK(&t, v && !strcmp(v, chosen[i]), "%s: %s built ahead, %s chosen", d->name,
                 v ? v : "(none)", chosen[i]);
    }

    // Forced after the table came from the file (VKT_TUNE=force set on a live context): the
    // entries read from disk are not used, the candidates are measured again; once measured in
    // this process, they answer.
    vkt_context_set_tune(t.ctx, VKT_TUNE_FORCE);
    for (int i = 0; i < t.ndev; i++) {
        const vkt_device_info *d = vkt_device_get_info(t.dev[i]);
        counted c, again;
        if (!run_counted(&t, t.dev[i], only[i], &c)) continue;
        VT_CHECK(&t, c.measured >= 2,
                 "%s: force set after the file was loaded measured %llu variants, want >= 2",
                 d->name, c.measured);
        run_counted(&t, t.dev[i], only[i], &again);
        VT_CHECK(&t, again.measured == 0, "%s: forced, measured twice in one process", d->name);
    }
    vkt_context_set_tune(t.ctx, VKT_TUNE_ON);

    // The stores forced by a token of the variant list ("stores-dvec4": other kernels under the
    // same variant names on lavapipe): measured again and kept under their own name, the
    // measurements without the token left as they were.
    VT_OK(&t, vkt_context_set_matmul_variant(t.ctx, "stores-dvec4"));
    for (int i = 0; i < t.ndev; i++) {
        const vkt_device_info *d = vkt_device_get_info(t.dev[i]);
        char fastest[64] = "", plain_before[64] = "", plain_after[64] = "";
        int n0 = file_entries(&t, d, plain_before, sizeof plain_before);
        counted c;
        if (!run_counted(&t, t.dev[i], only[i], &c)) continue;
        const char *v = c.variant;
        VT_CHECK(&t, c.measured >= 2,
                 "%s: stores-dvec4 measured %llu variants beside the stored ones, want >= 2",
                 d->name, c.measured);
        char op[128];
        snprintf(op, sizeof op, "%s stores-dvec4", OP);
        int nf = file_entries_op(&t, d, op, fastest, sizeof fastest, NULL);
        VT_CHECK(&t, nf >= 2 && v && !strcmp(v, fastest),
                 "%s: %d entries for \"%s\" in the file (want >= 2), %s used, %s fastest", d->name,
                 nf, op, v ? v : "(none)", fastest);
        int n1 = file_entries(&t, d, plain_after, sizeof plain_after);
        VT_CHECK(&t, n1 == n0 && !strcmp(plain_before, plain_after),
                 "%s: the entries for %s changed under stores-dvec4 (%d, %s -> %d, %s)", d->name,
                 OP, n0, plain_before, n1, plain_after);
    }
    VT_OK(&t, vkt_context_set_matmul_variant(t.ctx, NULL));

    // A damaged file: ignored, measured again, rewritten whole.
    vkt_tune_forget();
    for (int i = 0; i < t.ndev; i++) {
        const vkt_device_info *d = vkt_device_get_info(t.dev[i]);
        char path[4400], fastest[64] = "";
        VT_CHECK(&t, vkt_cache_path(t.ctx, d, ".tune.json", path, sizeof path), "%s", d->name);
        vt_write_file(path, "{\"format\": \"vktrain-tune-1\", \"entries\": [{\"op\": 3", 47);
        counted c;
        if (!run_counted(&t, t.dev[i], only[i], &c)) {
            unlink(path);
            continue;
        }
        VT_CHECK(&t, c.measured >= 2, "%s: damaged file not measured again", d->name);
        VT_CHECK(&t, file_entries(&t, d, fastest, sizeof fastest) >= 2, "%s: file not rewritten",
                 d->name);
    }

    // Tuning off (VKT_TUNE=off): nothing measured, nothing written.
    vkt_tune_forget();
    vkt_context_set_tune(t.ctx, VKT_TUNE_OFF);
    for (int i = 0; i < t.ndev; i++) {
        const vkt_device_info *d = vkt_device_get_info(t.dev[i]);
        char path[4400];
        VT_CHECK(&t, vkt_cache_path(t.ctx, d, ".tune.json", path, sizeof path), "%s", d->name);
        unlink(path);
        vkt_tune_stats s0 = vkt_tune_get_stats();
        run_product(&t, t.dev[i], d->name);
        vkt_tune_stats s1 = vkt_tune_get_stats();
        struct stat st;
        VT_CHECK(&t, s1.measured == s0.measured && stat(path, &st) != 0,
                 "%s: VKT_TUNE=off measured or wrote", d->name);
    }
    vkt_context_set_tune(t.ctx, VKT_TUNE_ON);

    // Pipeline caches: each device saves one that names it when it closes; a damaged one is
    // refused (a warning) and the device still opens and replaces it.
    for (int i = 0; i < t.ndev; i++) {
        const vkt_device_info *d = vkt_device_get_info(t.dev[i]);
        int index = d->index;
        vkt_device_destroy(t.dev[i]);
        t.dev[i] = NULL;
        check_pipeline_file(&t, d);
        char path[4400];
        vkt_cache_path(t.ctx, d, ".pipelines", path, sizeof path);
        uint32_t junk[16] = {32, 1, 0xdead, 0xbeef};
        vt_write_file(path, junk, sizeof junk);
        VT_OK(&t, vkt_device_create(t.ctx, index, NULL, &t.dev[i]));
        if (t.dev[i]) run_product(&t, t.dev[i], d->name);
        vkt_device_destroy(t.dev[i]);
        t.dev[i] = NULL;
        check_pipeline_file(&t, d);
        VT_OK(&t, vkt_device_create(t.ctx, index, NULL, &t.dev[i]));
    }
    int rc = vt_finish(&t); // closes the devices, which save their pipeline caches into dir
    vt_remove_dir(dir);
    return rc;
}
