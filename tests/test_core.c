// test_core.c: the Vulkan core on every device. y = a*x + y over 10^6 floats on each device, then
// on two logical devices of the same physical device at once; compiling ahead; buffer round
// trips; GPU timestamps; memory accounting against a limit.
#include <stdlib.h>
#include <string.h>

#include "env.h"
#include "test_util.h"
#include "vkt_abi.h"
#include "vkt_shaders.h"

#define N 1000000u

typedef struct axpy_run {
    vkt_buffer *x, *y;
    vkt_kernel *k;
    vkt_cmd *cmd;
} axpy_run;

static void axpy_release(axpy_run *r) {
    vkt_cmd_destroy(r->cmd);
    vkt_kernel_destroy(r->k);
    vkt_buffer_destroy(r->y);
    vkt_buffer_destroy(r->x);
    memset(r, 0, sizeof *r);
}

// Uploads x, y and records two axpy dispatches (a1 then a2, with a barrier) and submits them.
static vkt_status axpy_submit(vkt_device *dev, axpy_run *r, const float *x, const float *y,
                              float a1, float a2) {
    memset(r, 0, sizeof *r);
    uint32_t wg = vkt_device_get_info(dev)->max_workgroup_invocations >= 256 ? 256 : 64;
    uint32_t spec[3] = {wg, 1, 1};
    vkt_status s;
    if ((s = vkt_buffer_create(dev, N * 4, "x", &r->x)) != VKT_OK) return s;
    if ((s = vkt_buffer_create(dev, N * 4, "y", &r->y)) != VKT_OK) return s;
    if ((s = vkt_buffer_write(r->x, 0, x, N * 4)) != VKT_OK) return s;
    if ((s = vkt_buffer_write(r->y, 0, y, N * 4)) != VKT_OK) return s;
    if ((s = vkt_kernel_create(dev, VKT_SHADER_AXPY, spec, 3, &r->k)) != VKT_OK) return s;
    if ((s = vkt_cmd_create(dev, &r->cmd)) != VKT_OK) return s;
    if ((s = vkt_cmd_begin(r->cmd, true)) != VKT_OK) return s;
    vkt_view b[2] = {vkt_buffer_whole(r->x), vkt_buffer_whole(r->y)};
    vkt_axpy_push p1 = {.n = N, .a = a1}, p2 = {.n = N, .a = a2};
    uint32_t groups = (N + wg - 1) / wg;
    vkt_cmd_dispatch(r->cmd, r->k, b, 2, &p1, sizeof p1, groups, 1, 1, "axpy1");
    vkt_cmd_barrier(r->cmd);
    vkt_cmd_dispatch(r->cmd, r->k, b, 2, &p2, sizeof p2, groups, 1, 1, "axpy2");
    if ((s = vkt_cmd_end(r->cmd)) != VKT_OK) return s;
    return vkt_cmd_submit(r->cmd);
}

static void axpy_check(vt *t, vkt_device *dev, axpy_run *r, const float *x, const float *y,
                       float a1, float a2) {
    VT_OK(t, vkt_cmd_wait(r->cmd, VKT_WAIT_MS));
    float *got = malloc(N * 4);
    double *ref = malloc(N * sizeof *ref);
    VT_OK(t, vkt_buffer_read(r->y, 0, got, N * 4));
    for (size_t i = 0; i < N; i++) {
        float y1 = a1 * x[i] + y[i]; // fp32, as the shader computes it
        ref[i] = (double)(a2 * x[i] + y1);
    }
    size_t bad = vt_compare("axpy", got, ref, N, 1e-6, 1e-6);
    VT_CHECK(t, bad == 0, "axpy on %s: %zu wrong elements", vkt_device_label(dev), bad);
    const vkt_timing *tm;
    int nt = vkt_cmd_timings(r->cmd, &tm);
    VT_CHECK(t, nt == 2, "expected 2 timings on %s, got %d", vkt_device_label(dev), nt);
    if (nt == 2) {
        VT_CHECK(t, strcmp(tm[0].label, "axpy1") == 0 && strcmp(tm[1].label, "axpy2") == 0,
                 "labels");
        VT_CHECK(t,
                 tm[0].end_ns > tm[0].start_ns && tm[1].start_ns >= tm[0].end_ns &&
                     tm[1].end_ns > tm[1].start_ns,
                 "timestamps out of order on %s: %llu %llu %llu %llu", vkt_device_label(dev),
                 (unsigned long long)tm[0].start_ns, (unsigned long long)tm[0].end_ns,
                 (unsigned long long)tm[1].start_ns, (unsigned long long)tm[1].end_ns);
    }
    free(got);
    free(ref);
}

// Compiling ahead (engine/core/ahead.c): on lavapipe the first recorded dispatch of a kernel
// goes to the compile thread, which builds it on a second logical device (not counted among the
// opened ones) and runs one workgroup there; the device's own results are unchanged. Elsewhere
// nothing is queued. With another CPU device open in the context (others_open) the job is queued
// and dropped. The dispatches are recorded, the thread waited for, and only then submitted, so
// that the job cannot be dropped as late; then a recording with a new kernel is submitted at
// once, and its kernel must be built when the submit returns. Opens physical device index of
// ctx.
static void ahead_case(vt *t, vkt_context *ctx, int index, const float *x, const float *y,
                       bool others_open) {
    vkt_device *dev = NULL;
    VT_OK(t, vkt_device_create(ctx, index, NULL, &dev));
    if (!dev) return;
    const vkt_device_info *info = vkt_device_get_info(dev);
    bool lavapipe = info->driver_id == VT_DRIVER_ID_LLVMPIPE;
    uint32_t want_queued = lavapipe ? 1 : 0, want_done = others_open ? 0 : want_queued;
    axpy_run r = {0};
    uint32_t wg = info->max_workgroup_invocations >= 256 ? 256 : 64, spec3[3] = {wg, 1, 1};
    VT_OK(t, vkt_buffer_create(dev, N * 4, "x", &r.x));
    VT_OK(t, vkt_buffer_create(dev, N * 4, "y", &r.y));
    VT_OK(t, vkt_kernel_create(dev, VKT_SHADER_AXPY, spec3, 3, &r.k));
    VT_OK(t, vkt_cmd_create(dev, &r.cmd));
    if (r.x && r.y && r.k && r.cmd) {
        VT_OK(t, vkt_buffer_write(r.x, 0, x, N * 4));
        VT_OK(t, vkt_buffer_write(r.y, 0, y, N * 4));
        VT_OK(t, vkt_cmd_begin(r.cmd, true));
        vkt_view b[2] = {vkt_buffer_whole(r.x), vkt_buffer_whole(r.y)};
        vkt_axpy_push p1 = {.n = N, .a = 2.0f}, p2 = {.n = N, .a = -0.5f};
        vkt_cmd_dispatch(r.cmd, r.k, b, 2, &p1, sizeof p1, (N + wg - 1) / wg, 1, 1, "axpy1");
        vkt_cmd_barrier(r.cmd);
        vkt_cmd_dispatch(r.cmd, r.k, b, 2, &p2, sizeof p2, (N + wg - 1) / wg, 1, 1, "axpy2");
        VT_OK(t, vkt_cmd_end(r.cmd));
        vkt_device_ahead_wait(dev);
        uint32_t queued, done;
        vkt_device_ahead_counts(dev, &queued, &done);
        VT_CHECK(t, queued == want_queued && done == want_done,
                 "compiling ahead on %s%s: %u kernels queued, %u built (expected %u, %u)",
                 vkt_device_label(dev), others_open ? " beside other CPU devices" : "", queued,
                 done, want_queued, want_done);
        // The second device is opened only to build a kernel: beside other CPU devices, never.
        bool opened = vkt_device_ahead_opened(dev);
        VT_CHECK(t, opened == (want_done > 0),
                 "compiling ahead on %s%s: second device %s (expected %s)", vkt_device_label(dev),
                 others_open ? " beside other CPU devices" : "", opened ? "opened" : "not opened",
                 want_done > 0 ? "opened" : "not opened");
        // The second device is not one of the opened ones: the next open is "(2)" in a context
        // of its own, "(3)" in the harness's (its device, this one, the new one).
        vkt_device *next = NULL;
        VT_OK(t, vkt_device_create(ctx, index, NULL, &next));
        const char *want = others_open ? "(3)" : "(2)";
        if (next)
            VT_CHECK(t, strstr(vkt_device_label(next), want) != NULL,
                     "a further open of %s is labelled %s (expected %s)", info->name,
                     vkt_device_label(next), want);
        vkt_device_destroy(next);
        VT_OK(t, vkt_cmd_submit(r.cmd));
        axpy_check(t, dev, &r, x, y, 2.0f, -0.5f);
        // A recording submitted at once (as a training step is): its new kernel (another
        // workgroup size) is built before vkt_cmd_submit returns, on the submitting thread's
        // device or the thread's, so the device's queue thread finds it built and never compiles
        // it beside them. y then holds 1.5 x + y0 + 3 x.
        vkt_kernel *k2 = NULL;
        vkt_cmd *c2 = NULL;
        uint32_t spec2[3] = {wg / 2, 1, 1};
        VT_OK(t, vkt_kernel_create(dev, VKT_SHADER_AXPY, spec2, 3, &k2));
        VT_OK(t, vkt_cmd_create(dev, &c2));
        if (k2 && c2 && vkt_cmd_begin(c2, false) == VKT_OK) {
            vkt_axpy_push p3 = {.n = N, .a = 3.0f};
            vkt_cmd_dispatch(c2, k2, b, 2, &p3, sizeof p3, (N + wg / 2 - 1) / (wg / 2), 1, 1,
                             "axpy3");
            VT_OK(t, vkt_cmd_end(c2));
            VT_OK(t, vkt_cmd_submit(c2));
            vkt_device_ahead_counts(dev, &queued, &done);
            uint32_t want_queued2 = 2 * want_queued, want_done2 = 2 * want_done;
            VT_CHECK(t, queued == want_queued2 && done == want_done2,
                     "compiling ahead on %s%s, a recording submitted at once: %u kernels "
                     "queued, %u built when the submit returned (expected %u, %u)",
                     vkt_device_label(dev), others_open ? " beside other CPU devices" : "", queued,
                     done, want_queued2, want_done2);
            VT_OK(t, vkt_cmd_wait(c2, VKT_WAIT_MS));
            float *got = malloc(N * 4);
            double *ref = malloc(N * sizeof *ref);
            VT_OK(t, vkt_buffer_read(r.y, 0, got, N * 4));
            for (size_t i = 0; got && ref && i < N; i++) {
                float y1 = 2.0f * x[i] + y[i];
                float y2 = -0.5f * x[i] + y1;
                ref[i] = (double)(3.0f * x[i] + y2);
            }
            if (got && ref)
                VT_CHECK(t, vt_compare("axpy3", got, ref, N, 1e-6, 1e-6) == 0,
                         "axpy3 on %s: wrong elements", vkt_device_label(dev));
            free(got);
            free(ref);
        }
        vkt_cmd_destroy(c2);
        vkt_kernel_destroy(k2);
    }
    axpy_release(&r);
    vkt_device_destroy(dev);
}

int main(void) {
    vt tv, *t = &tv;
    if (vt_init(t, "test_core")) return 1;
    float *x = malloc(N * 4), *y = malloc(N * 4);
    vt_fill_uniform(x, N, 1, -1, 1);
    vt_fill_uniform(y, N, 2, -1, 1);

    // Every device on its own.
    for (int d = 0; d < t->ndev; d++) {
        axpy_run r;
        vkt_status s = axpy_submit(t->dev[d], &r, x, y, 0.5f, -2.0f);
        VT_CHECK(t, s == VKT_OK, "axpy on %s: %s", vkt_device_label(t->dev[d]), vkt_error());
        if (s == VKT_OK) axpy_check(t, t->dev[d], &r, x, y, 0.5f, -2.0f);
        axpy_release(&r);
        VT_CHECK(t, vkt_device_memory_used(t->dev[d]) == 0, "memory not returned on %s",
                 vkt_device_label(t->dev[d]));
        VT_CHECK(t, vkt_device_memory_peak(t->dev[d]) >= 2 * N * 4, "peak memory not counted");
    }

    // Two logical devices of the same physical device, both in flight at once.
    vkt_device *twin[2] = {NULL, NULL};
    int phys = vkt_context_best_device(t->ctx);
    VT_OK(t, vkt_device_create(t->ctx, phys, NULL, &twin[0]));
    VT_OK(t, vkt_device_create(t->ctx, phys, NULL, &twin[1]));
    if (twin[0] && twin[1]) {
        axpy_run r[2];
        vkt_status s0 = axpy_submit(twin[0], &r[0], x, y, 3.0f, 1.0f);
        vkt_status s1 = axpy_submit(twin[1], &r[1], y, x, -1.0f, 0.25f);
        VT_CHECK(t, s0 == VKT_OK && s1 == VKT_OK, "twin submit: %s", vkt_error());
        if (s0 == VKT_OK) axpy_check(t, twin[0], &r[0], x, y, 3.0f, 1.0f);
        if (s1 == VKT_OK) axpy_check(t, twin[1], &r[1], y, x, -1.0f, 0.25f);
        axpy_release(&r[0]);
        axpy_release(&r[1]);
    }
    vkt_device_destroy(twin[1]);
    vkt_device_destroy(twin[0]);

    // The staged path of discrete GPUs (device memory not mapped), on the CPU drivers too.
    for (int d = 0; d < t->ndev; d++) {
        vkt_device *staged = NULL;
        vkt_device_desc sdesc = {.staged = true};
        VT_OK(t, vkt_device_create(t->ctx, vkt_device_get_info(t->dev[d])->index, &sdesc, &staged));
        if (!staged) continue;
        axpy_run r;
        vkt_status s = axpy_submit(staged, &r, x, y, 1.5f, 0.5f);
        VT_CHECK(t, s == VKT_OK, "staged axpy on %s: %s", vkt_device_label(staged), vkt_error());
        if (s == VKT_OK) {
            VT_CHECK(t, vkt_buffer_mapped(r.y) == NULL, "a staged device mapped its buffer");
            axpy_check(t, staged, &r, x, y, 1.5f, 0.5f);
        }
        axpy_release(&r);
        vkt_device_destroy(staged);
    }

    // Compiling ahead (engine/core/ahead.c), in a context of its own where each device is the
    // one open CPU device, then in the harness's, where the other CPU devices are open.
    cli_env env;
    VT_OK(t, cli_env_read(&env));
    env.context.validation = 1;
    vkt_context *solo = NULL;
    VT_OK(t, vkt_context_create(&env.context, &solo));
    for (int d = 0; solo && d < vkt_context_device_count(solo); d++)
        ahead_case(t, solo, d, x, y, false);
    if (solo)
        VT_CHECK(t, vkt_context_validation_count(solo) == 0,
                 "%llu validation message(s) in the second context",
                 (unsigned long long)vkt_context_validation_count(solo));
    vkt_context_destroy(solo);
    int lvp = vt_find_device(t, "llvmpipe");
    if (lvp >= 0) ahead_case(t, t->ctx, vkt_device_get_info(t->dev[lvp])->index, x, y, true);

    // A memory limit is enforced with a message that names the device and the sizes.
    vkt_device *small = NULL;
    vkt_device_desc desc = {.mem_limit = 1 << 20};
    VT_OK(t, vkt_device_create(t->ctx, phys, &desc, &small));
    if (small) {
        vkt_buffer *b = NULL;
        vkt_status s = vkt_buffer_create(small, 2 << 20, "too-big", &b);
        VT_CHECK(t, s == VKT_ERR_DEVICE_MEMORY, "a 2 MiB buffer under a 1 MiB limit gave %s",
                 vkt_status_name(s));
        VT_CHECK(t, strstr(vkt_error(), "too-big") && strstr(vkt_error(), "2097152"),
                 "message does not name the buffer and size: %s", vkt_error());
        vkt_buffer_destroy(b);
        VT_OK(t, vkt_buffer_create(small, 4096, "fits", &b));
        float in[4] = {1, 2, 3, 4}, out[4] = {0};
        VT_OK(t, vkt_buffer_write(b, 16, in, sizeof in));
        VT_OK(t, vkt_buffer_read(b, 16, out, sizeof out));
        VT_CHECK(t, memcmp(in, out, sizeof in) == 0, "buffer round trip");
        VT_CHECK(t, vkt_buffer_read(b, 4090, out, 16) == VKT_ERR_ARG, "out-of-range read accepted");
        vkt_buffer_destroy(b);
    }
    vkt_device_destroy(small);

    // A shader id that names no embedded shader is an error, not a crash; every generated id
    // names the shader of its table entry.
    vkt_kernel *k = NULL;
    uint32_t spec[3] = {64, 1, 1};
    VT_CHECK(t, vkt_kernel_create(t->dev[0], VKT_SHADER_COUNT, spec, 3, &k) == VKT_ERR_ARG,
             "bad shader");
    VT_CHECK(t, vkt_shader_name(VKT_SHADER_COUNT) == NULL, "a name for a shader id past the table");
    const char *an = vkt_shader_name(VKT_SHADER_AXPY),
               *rn = vkt_shader_name(VKT_SHADER_ACT_RELU_FWD);
    VT_CHECK(t, an && rn && !strcmp(an, "axpy") && !strcmp(rn, "act_relu_fwd"),
             "VKT_SHADER_AXPY is \"%s\", VKT_SHADER_ACT_RELU_FWD \"%s\"", an ? an : "(none)",
             rn ? rn : "(none)");
    uint32_t huge[3] = {4096, 1, 1};
    VT_CHECK(t, vkt_kernel_create(t->dev[0], VKT_SHADER_AXPY, huge, 3, &k) == VKT_ERR_ARG,
             "oversized workgroup");
    free(x);
    free(y);
    return vt_finish(t);
}
