// suite.c (CLI): `vktrain bench suite`. The same fixed work on any one device, written as one
// JSON result file (docs/COMPARING.md, "Result format (version 1)") that `vktrain compare` puts
// beside other machines' and `vktrain advise` predicts from:
//   - the peak fp32 FMA rate (shaders/peak_fma.glsl, bench.c's cli_peak_open),
//   - the device-memory bandwidth: shaders/bandwidth.comp copying one buffer into another, timed
//     by GPU timestamps, the bytes read plus the bytes written over the time,
//   - matmul at the standard sizes, as bench matmul times them (cli_bench_matmul_size),
//   - training steps of fashion_mlp, fashion_cnn and char_gpt at powers-of-two batches from 1,
//     as bench train runs them (cli_bench_train_point), up to the first batch the planner
//     (vkt_plan_single, against the device's memory or --mem-limit) says does not fit, the cap,
//     or the first point whose predicted time is past the point budget (a CPU driver would spend
//     hours on char_gpt at batch 4096). Each point: samples/s, the step split, peak memory.
// --quick does less of each (two matmul sizes, batches 1, 16, 256, shorter points) and takes
// under 2 minutes on lavapipe and SwiftShader on a quiet 2-core machine (docs/COMPARING.md, "How
// long it takes").
//
// Progress goes to stderr: on a terminal one line per point, overwritten, and a summary line per
// model; otherwise only the summary lines. The JSON goes to --out, written atomically once
// everything ran (a failed or interrupted run leaves the previous file as it was).
//
// Not here: several devices at once (one device per run, so that every file describes one
// device; run it once per device), and the drawing of results (engine/cli/compare.c).
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "cli.h"
#include "plan.h"
#include "vkt_internal.h"
#include "vkt_shaders.h"

// After ops.h (through cli.h): vkt_abi.h defines macros named as ops.h's enum values.
#include "bench_abi.h"

#define SUITE_FORMAT "vktrain-bench-suite"
#define SUITE_VERSION 1
#define SATURATION 0.9 // "saturated": within 10% of the best samples/s
#define MAX_POINTS 16

static const char *const suite_models[] = {"fashion_mlp", "fashion_cnn", "char_gpt"};
#define NMODELS ((int)(sizeof suite_models / sizeof suite_models[0]))

// What a run does; the full suite and --quick.
typedef struct suite_plan {
    uint32_t sizes[4];     // matmul sizes
    int nsizes, reps;      // and timed runs of each
    uint32_t cap;          // the largest batch a sweep tries
    uint32_t stride;       // factor between its batches (a power of two)
    double min_seconds;    // each point: at least this much timed wall time,
    int min_steps;         // at least this many timed steps (after one warm-up step)
    int max_steps;         // at most this many
    double point_budget_s; // a sweep stops before a point predicted to take longer
    int bandwidth_runs;
} suite_plan;

static const suite_plan full_plan = {{256, 512, 1024, 2048}, 4, 5, 4096, 2, 2.0, 3, 1000, 60.0, 5};
// Quick: measured on lavapipe and SwiftShader (docs/COMPARING.md, "How long it takes").
static const suite_plan quick_plan = {{256, 1024}, 2, 3, 256, 16, 0.5, 3, 1000, 8.0, 3};

typedef struct suite_opts {
    const char *device_spec, *out;
    uint64_t mem_limit; // 0: the device's memory
    bool quick;
} suite_opts;

static double now_s(void) { return vkt_trace_now_ns() * 1e-9; }

static double mib(uint64_t b) { return b / 1048576.0; }

// ---------------------------------------------------------------------------------------------
// Progress on stderr

typedef struct progress {
    bool tty;
    bool open; // a point's line is on the terminal, to be overwritten
} progress;

// A point's line: on a terminal only, over the previous one.
static void progress_point(progress *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void progress_point(progress *p, const char *fmt, ...) {
    if (!p->tty) return;
    va_list ap;
    va_start(ap, fmt);
    fputs("\r\033[K", stderr);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fflush(stderr);
    p->open = true;
}

// A summary line, kept (it replaces a point's line on a terminal).
static void progress_line(progress *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void progress_line(progress *p, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    if (p->open) fputs("\r\033[K", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    fflush(stderr);
    p->open = false;
}

// ---------------------------------------------------------------------------------------------
// Host and device facts

static double load_average(void) {
    double l = -1;
    FILE *f = fopen("/proc/loadavg", "r");
    if (f && fscanf(f, "%lf", &l) != 1) l = -1;
    if (f) fclose(f);
    return l;
}

// The device's short name for legends: its name up to " (" (the driver's details), without a
// trailing " Device": "llvmpipe", "SwiftShader", "NVIDIA H200", "AMD Radeon RX 7900 XTX".
static void device_label(const char *name, char *out, size_t size) {
    const char *paren = strstr(name, " (");
    size_t n = paren ? (size_t)(paren - name) : strlen(name);
    if (n > 7 && strncmp(name + n - 7, " Device", 7) == 0) n -= 7;
    if (n + 1 > size) n = size - 1;
    memcpy(out, name, n);
    out[n] = '\0';
}

static cJSON *device_json(const vkt_device_info *d, uint64_t mem_limit) {
    cJSON *o = cJSON_CreateObject();
    char label[256], api[32];
    device_label(d->name, label, sizeof label);
    vkt_api_version_string(d->api_version, api, sizeof api);
    cJSON_AddStringToObject(o, "label", label);
    cJSON_AddStringToObject(o, "name", d->name);
    cJSON_AddStringToObject(o, "driver", d->driver);
    cJSON_AddStringToObject(o, "api_version", api);
    cJSON_AddNumberToObject(o, "vendor_id", d->vendor_id);
    cJSON_AddNumberToObject(o, "device_id", d->device_id);
    cJSON_AddNumberToObject(o, "driver_version", d->driver_version);
    cJSON_AddStringToObject(o, "type", vkt_device_type_name(d->type));
    cJSON_AddNumberToObject(o, "memory_bytes", (double)d->memory_bytes);
    if (mem_limit)
        cJSON_AddNumberToObject(o, "mem_limit_bytes", (double)mem_limit);
    else
        cJSON_AddNullToObject(o, "mem_limit_bytes");
    cJSON_AddNumberToObject(o, "index", d->index);
    cJSON_AddNumberToObject(o, "subgroup_size", d->subgroup_size);
    cJSON_AddNumberToObject(o, "max_allocation_bytes", (double)d->max_allocation_bytes);
    return o;
}

// ---------------------------------------------------------------------------------------------
// Device-memory bandwidth

// Copies a buffer of 256 MiB (less where the device has under 2 GiB or allocates less at once)
// into another, in dispatches of at most 128 MiB (maxStorageBufferRange is 128 MiB on lavapipe),
// with 1 and with 4 vec4s per invocation (shaders/bandwidth.comp), one warm-up run of each and
// then `runs` timed runs of each, alternating; the best run's bytes read and written over its
// GPU time (first dispatch's start to the last one's end), in GB/s (1e9 bytes/s), and its K.
// 256 MiB is past the last-level cache of any CPU or GPU of today (an H200's L2 is 60 MiB), so
// the copy runs from memory.
static vkt_status bandwidth_run(vkt_device *dev, int runs, double *gbs, uint64_t *bytes_out,
                                uint32_t *k_out) {
    static const uint32_t layouts[2] = {1, 4}; // vec4s per invocation
    const vkt_device_info *d = vkt_device_get_info(dev);
    uint32_t wg = d->max_workgroup_invocations >= 64 ? 64 : d->max_workgroup_invocations;
    uint64_t unit = 16ull * wg * 4; // what a workgroup copies at K = 4 (a multiple of K = 1's)
    uint64_t bytes = 256ull << 20;
    if (d->memory_bytes / 8 < bytes) bytes = d->memory_bytes / 8;
    if (d->max_allocation_bytes && d->max_allocation_bytes < bytes) bytes = d->max_allocation_bytes;
    uint64_t chunk = 128ull << 20;
    if (d->max_storage_buffer_range < chunk) chunk = d->max_storage_buffer_range;
    chunk -= chunk % unit;
    bytes -= chunk ? bytes % chunk : bytes;
    if (bytes == 0)
        return vkt_set_error(VKT_ERR_DEVICE_MEMORY,
                             "bench suite: the device has too little memory for the bandwidth "
                             "copy");
    vkt_kernel *k[2] = {NULL, NULL};
    vkt_buffer *src = NULL, *dst = NULL;
    vkt_cmd *cmd = NULL;
    vkt_status s = VKT_OK;
    for (int i = 0; i < 2 && s == VKT_OK; i++) {
        uint32_t spec[4] = {wg, 1, 1, layouts[i]};
        s = vkt_kernel_create(dev, VKT_SHADER_BANDWIDTH, spec, 4, &k[i]);
    }
    if (s == VKT_OK) s = vkt_buffer_create(dev, bytes, "bandwidth src", &src);
    if (s == VKT_OK) s = vkt_buffer_create(dev, bytes, "bandwidth dst", &dst);
    if (s == VKT_OK) s = vkt_cmd_create(dev, &cmd);
    double best = 0;
    uint32_t best_k = 0;
    for (int run = 0; s == VKT_OK && run < 2 * (runs + 1); run++) {
        int li = run % 2; // alternating: the machine's speed drifts for seconds at a time
        uint32_t K = layouts[li];
        if ((s = vkt_cmd_begin(cmd, true)) != VKT_OK) break;
        if (run == 0) { // the source's contents, once (any value copies as fast)
            vkt_cmd_fill(cmd, vkt_buffer_whole(src), 0x3f800000);
            vkt_cmd_barrier(cmd);
        }
        for (uint64_t off = 0; off < bytes; off += chunk) {
            vkt_view v[2] = {vkt_buffer_view(src, off, chunk), vkt_buffer_view(dst, off, chunk)};
            vkt_bandwidth_push p = {.n4 = (uint32_t)(chunk / 16)};
            // Past 65535 workgroups they fold into y; the ones past the end copy nothing.
            uint32_t groups = (uint32_t)(chunk / (16ull * wg * K));
            uint32_t gy = (groups + 65534) / 65535, gx = (groups + gy - 1) / gy;
            vkt_cmd_dispatch(cmd, k[li], v, 2, &p, sizeof p, gx, gy, 1, "bandwidth");
        }
        vkt_cmd_barrier(cmd); // the next run writes dst again
        if ((s = vkt_cmd_end(cmd)) != VKT_OK || (s = vkt_cmd_submit(cmd)) != VKT_OK ||
            (s = vkt_cmd_wait(cmd, VKT_WAIT_MS)) != VKT_OK)
            break;
        const vkt_timing *t;
        int n = vkt_cmd_timings(cmd, &t);
        double ns = n > 0 ? (double)(t[n - 1].end_ns - t[0].start_ns) : 0;
        if (run >= 2 && ns > 0 && 2.0 * bytes / ns > best) best = 2.0 * bytes / ns, best_k = K;
    }
    vkt_cmd_destroy(cmd);
    vkt_buffer_destroy(dst);
    vkt_buffer_destroy(src);
    vkt_kernel_destroy(k[1]);
    vkt_kernel_destroy(k[0]);
    if (s == VKT_OK && !(best > 0))
        s = vkt_set_error(VKT_ERR_VULKAN, "bench suite: the bandwidth copy returned no GPU "
                                          "timing: the device's timestamps do not work");
    *gbs = best;
    *bytes_out = bytes;
    *k_out = best_k;
    return s;
}

// ---------------------------------------------------------------------------------------------
// Training sweeps

typedef struct point {
    uint32_t batch;
    double sps;
} point;

// The wall time of a point at batch B (its warm-up step and timed steps, not its kernel builds),
// predicted from a measured point as if the per-sample cost no longer fell with the batch.
static double predict_s(const suite_plan *sp, const point *last, uint32_t B) {
    if (!(last->sps > 0)) return 0;
    double step_s = B / last->sps;
    int nsteps = sp->min_steps;
    if (step_s * nsteps < sp->min_seconds) nsteps = (int)ceil(sp->min_seconds / step_s);
    return step_s * (1 + nsteps);
}

// The planner's figure for model m at batch B on the device, as the single strategy checks it.
static void plan_batch(const vkt_model_desc *m, uint32_t B, const vkt_optim_desc *optim,
                       const vkt_device_info *info, uint64_t mem_limit, vkt_plan_input *in,
                       vkt_plan *p) {
    memset(in, 0, sizeof *in);
    in->model = m;
    in->batch = B;
    in->optim = *optim;
    in->ndevices = 1;
    in->micro_batches = 1;
    vkt_plan_input_device(in, 0, info, mem_limit);
    vkt_plan_single(in, p);
}

// Why a plan does not fit, in its numbers.
static void plan_reason(const vkt_plan *p, const vkt_plan_input *in, char *buf, size_t size) {
    const vkt_net_memory *n = &p->need[0];
    if (n->total > in->limit[0])
        snprintf(buf, size,
                 "needs %.1f MiB (parameters %.1f, gradients %.1f, optimizer %.1f, activations "
                 "%.1f, buffers %.1f), the device has %.1f MiB",
                 mib(n->total), mib(n->params), mib(n->grads), mib(n->optim), mib(n->activations),
                 mib(n->io), mib(in->limit[0]));
    else
        snprintf(buf, size,
                 "its largest buffer needs %.1f MiB, the device allocates at most %.1f MiB at "
                 "once",
                 mib(p->largest[0]), mib(in->max_alloc[0]));
}

// The matmul shapes of a step of m at batch B, measured (tuned) on ops' device before the point
// runs: the measurements are shared by the process's devices of the same driver build
// (engine/core/tune.h), so the point's own device finds them stored, and neither its time nor
// its memory (the measurement's scratch operands, which the plan leaves out) holds them.
static vkt_status pretune(vkt_ops *ops, const vkt_model_desc *m, uint32_t B) {
    vkt_mm_shape sh[3 * 256];
    int n = vkt_model_matmuls(m, B, sh, 3 * 256);
    if (n > 3 * 256) n = 3 * 256;
    for (int i = 0; i < n; i++)
        (void)vkt_matmul_variant(ops, sh[i].form, sh[i].M, sh[i].N, sh[i].K);
    return vkt_ops_status(ops);
}

typedef struct sweep_ctx {
    vkt_context *ctx;
    int device;
    const vkt_device_info *info;
    vkt_ops *ops; // the suite's own device, for pretune
    const suite_plan *plan;
    const suite_opts *opts;
    vkt_optim_desc optim;
    uint64_t seed;
    progress *pr;
    cJSON *train, *saturation, *sweeps;
} sweep_ctx;

static int sweep_model(sweep_ctx *sc, const char *name) {
    char path[4200];
    snprintf(path, sizeof path, "%s/models/%s.json", VKT_ASSET_DIR, name);
    vkt_model_desc m;
    if (vkt_model_load(path, &m) != VKT_OK) return cli_fail(vkt_error());
    vkt_layer_cost cost = vkt_model_cost(&m, 0, m.nlayers);
    double flops = cost.fwd_flops + cost.bwd_flops;
    double params = (double)vkt_model_param_count(&m);
    uint32_t tokens = cli_bench_lm_tokens(&m);
    const suite_plan *sp = sc->plan;
    uint64_t limit = sc->opts->mem_limit;

    // The largest power of two up to the cap that the planner fits (whatever the sweep measures).
    uint32_t largest = 0;
    for (uint32_t B = 1; B <= full_plan.cap; B *= 2) {
        vkt_plan_input in;
        vkt_plan p;
        plan_batch(&m, B, &sc->optim, sc->info, limit, &in, &p);
        if (!p.fits) break;
        largest = B;
    }

    point pts[MAX_POINTS];
    int npts = 0, rc = 0;
    char end[512] = "";
    const char *end_kind = "cap";
    double t_model = now_s();
    for (uint32_t B = 1;; B *= sp->stride) {
        if (B > sp->cap) {
            snprintf(end, sizeof end, "the sweep's cap, batch %u", sp->cap);
            break;
        }
        // A point predicted to take longer than the budget is not run, but every sweep measures
        // two batches: when the next one is past the budget, the second is the largest power of
        // two under it within the budget (at least batch 2).
        if (npts >= 1 && predict_s(sp, &pts[npts - 1], B) > sp->point_budget_s) {
            if (npts >= 2) {
                snprintf(end, sizeof end,
                         "batch %u would take about %.0f s (%.3g s a step), over the %.0f s "
                         "budget of a point",
                         B, predict_s(sp, &pts[npts - 1], B), B / pts[npts - 1].sps,
                         sp->point_budget_s);
                end_kind = "time";
                break;
            }
            uint32_t b2 = 2 * pts[0].batch;
            for (uint32_t c = 2 * b2; c < B; c *= 2)
                if (predict_s(sp, &pts[0], c) <= sp->point_budget_s) b2 = c;
            B = b2;
        }
        vkt_plan_input in;
        vkt_plan p;
        plan_batch(&m, B, &sc->optim, sc->info, limit, &in, &p);
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "model", name);
        cJSON_AddNumberToObject(e, "parameters", params);
        cJSON_AddNumberToObject(e, "flops_per_sample", flops);
        cJSON_AddNumberToObject(e, "batch", B);
        if (!p.fits) {
            char why[400];
            plan_reason(&p, &in, why, sizeof why);
            cJSON_AddBoolToObject(e, "fits", false);
            cJSON_AddNumberToObject(e, "planned_bytes", (double)p.need[0].total);
            cJSON_AddStringToObject(e, "reason", why);
            cJSON_AddItemToArray(sc->train, e);
            snprintf(end, sizeof end, "batch %u does not fit: %s", B, why);
            end_kind = "does not fit";
            break;
        }
        progress_point(sc->pr, "bench suite: %s batch %u: running ...", name, B);
        double t0 = now_s();
        vkt_status st = pretune(sc->ops, &m, B);
        double tune_s = now_s() - t0;
        vkt_strategy_desc sd = {.kind = VKT_STRATEGY_SINGLE,
                                .ctx = sc->ctx,
                                .ndevices = 1,
                                .devices = {sc->device},
                                .mem_limit = limit,
                                .model = &m,
                                .batch = B,
                                .optim = sc->optim,
                                .micro_batches = 1};
        cli_bench_steps run = {.warmup = 1,
                               .min_steps = sp->min_steps,
                               .min_seconds = sp->min_seconds,
                               .max_steps = sp->max_steps};
        cli_train_point tp;
        if (st == VKT_OK) st = cli_bench_train_point(&sd, sc->seed, &run, &tp);
        if (st == VKT_ERR_DEVICE_MEMORY) {
            // The plan fits but the driver (or the limit, by what the plan leaves out) refused.
            cJSON_AddBoolToObject(e, "fits", false);
            cJSON_AddNumberToObject(e, "planned_bytes", (double)p.need[0].total);
            cJSON_AddStringToObject(e, "reason", vkt_error());
            cJSON_AddItemToArray(sc->train, e);
            snprintf(end, sizeof end, "batch %u did not fit when run: %s", B, vkt_error());
            end_kind = "does not fit";
            break;
        }
        if (st != VKT_OK) {
            cJSON_Delete(e);
            char msg[1200];
            snprintf(msg, sizeof msg, "bench suite: %s at batch %u: %s", name, B, vkt_error());
            rc = cli_fail(msg);
            break;
        }
        cJSON_AddBoolToObject(e, "fits", true);
        cJSON_AddNumberToObject(e, "planned_bytes", (double)p.need[0].total);
        cJSON_AddNumberToObject(e, "steps", tp.steps);
        cJSON_AddNumberToObject(e, "samples_per_sec", tp.samples_per_sec);
        if (tokens) {
            cJSON_AddNumberToObject(e, "tokens_per_sample", tokens);
            cJSON_AddNumberToObject(e, "tokens_per_sec", tp.samples_per_sec * tokens);
        }
        cJSON_AddNumberToObject(e, "step_ms", tp.step_ms);
        cJSON_AddNumberToObject(e, "step_gflops", flops * tp.samples_per_sec * 1e-9);
        cJSON *split = cJSON_AddObjectToObject(e, "split");
        cJSON_AddNumberToObject(split, "matmul", tp.split.matmul);
        cJSON_AddNumberToObject(split, "attention", tp.split.attention);
        cJSON_AddNumberToObject(split, "other_kernels", tp.split.other_kernels);
        cJSON_AddNumberToObject(split, "communication", tp.split.communication);
        cJSON_AddNumberToObject(split, "host_and_idle", tp.split.host_and_idle);
        cJSON_AddNumberToObject(e, "peak_memory_bytes", (double)tp.peak_memory);
        cJSON_AddNumberToObject(e, "initial_loss", tp.loss0);
        cJSON_AddNumberToObject(e, "tuning_seconds", tune_s);
        cJSON_AddNumberToObject(e, "setup_seconds", tp.setup_seconds);
        cJSON_AddNumberToObject(e, "first_step_seconds", tp.first_step_seconds);
        cJSON_AddNumberToObject(e, "kernels_built", (double)tp.kernels_built);
        cJSON_AddNumberToObject(e, "shapes_measured_in_point", (double)tp.shapes_measured);
        cJSON_AddItemToArray(sc->train, e);
        pts[npts++] = (point){B, tp.samples_per_sec};
        char rb[32];
        progress_point(sc->pr, "bench suite: %s batch %u: %s samples/s, %.1f ms/step, %.1f MiB",
                       name, B, cli_rate(tp.samples_per_sec, rb), tp.step_ms, mib(tp.peak_memory));
        if (npts == MAX_POINTS) {
            snprintf(end, sizeof end, "the sweep's cap, batch %u", B);
            break;
        }
    }
    // A model that does not fit at batch 1 has no points and no saturation: the file says so
    // (its batch 1 with fits false, its sweep with 0 points), and the other models still run.
    cJSON *w = cJSON_CreateObject();
    cJSON_AddStringToObject(w, "model", name);
    cJSON_AddNumberToObject(w, "points", npts);
    cJSON_AddNumberToObject(w, "largest_measured_batch", npts ? pts[npts - 1].batch : 0);
    cJSON_AddNumberToObject(w, "largest_fitting_batch", largest);
    cJSON_AddNumberToObject(w, "cap", sp->cap);
    cJSON_AddNumberToObject(w, "stride", sp->stride);
    cJSON_AddStringToObject(w, "end", end_kind);
    cJSON_AddStringToObject(w, "why", end);
    cJSON_AddNumberToObject(w, "seconds", now_s() - t_model);
    cJSON_AddItemToArray(sc->sweeps, w);
    if (rc == 0 && npts == 0) progress_line(sc->pr, "bench suite: %s: not measured: %s", name, end);
    if (rc == 0 && npts > 0) {
        int best = 0, sat = 0;
        for (int i = 1; i < npts; i++)
            if (pts[i].sps > pts[best].sps) best = i;
        while (pts[sat].sps < SATURATION * pts[best].sps)
            sat++;
        cJSON *s = cJSON_CreateObject();
        cJSON_AddStringToObject(s, "model", name);
        cJSON_AddNumberToObject(s, "batch", pts[sat].batch);
        cJSON_AddNumberToObject(s, "samples_per_sec", pts[sat].sps);
        cJSON_AddNumberToObject(s, "best_batch", pts[best].batch);
        cJSON_AddNumberToObject(s, "best_samples_per_sec", pts[best].sps);
        cJSON_AddStringToObject(s, "rule", "smallest batch within 10% of the best samples/s");
        cJSON_AddItemToArray(sc->saturation, s);
        char rb[32], rs[32];
        cli_rate(pts[best].sps, rb);
        cli_rate(pts[sat].sps, rs);
        char span[64];
        if (npts == 1)
            snprintf(span, sizeof span, "batch 1 (1 point");
        else
            snprintf(span, sizeof span, "batches 1-%u (%d points", pts[npts - 1].batch, npts);
        progress_line(sc->pr,
                      "bench suite: %s: %s, %.0f s): best %s samples/s at batch %u, within 10%% "
                      "of it from batch %u (%s); the planner fits up to %u; ended: %s",
                      name, span, now_s() - t_model, rb, pts[best].batch, pts[sat].batch, rs,
                      largest, end);
    }
    vkt_model_free(&m);
    return rc;
}

// ---------------------------------------------------------------------------------------------
// vktrain bench suite

static int usage_error(const char *what) {
    fprintf(stderr,
            "vktrain bench suite: %s (usage: vktrain bench suite [--device SPEC] [--quick] "
            "[--mem-limit SIZE] --out RESULTS.json)\n",
            what);
    return 2;
}

// Refuses an --out that cannot be written before an hour of measuring: a directory (or other
// non-file) at the path, or a missing directory above it.
static int check_out(const char *out) {
    struct stat st;
    char msg[4400];
    if (lstat(out, &st) == 0 && !S_ISREG(st.st_mode)) {
        snprintf(msg, sizeof msg, "--out %s exists and is not a regular file", out);
        return usage_error(msg);
    }
    char dir[4096];
    const char *slash = strrchr(out, '/');
    snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - out) : 1, slash ? out : ".");
    if (slash == out) snprintf(dir, sizeof dir, "/");
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        snprintf(msg, sizeof msg, "--out %s: the directory %s does not exist", out, dir);
        return usage_error(msg);
    }
    return 0;
}

int cli_bench_suite(int argc, char **argv) {
    double t_start = now_s();
    suite_opts o = {0};
    char command[2048] = "vktrain bench suite";
    for (int i = 0; i < argc; i++) {
        strncat(command, " ", sizeof command - strlen(command) - 1);
        strncat(command, argv[i], sizeof command - strlen(command) - 1);
    }
    for (int i = 0; i < argc; i++) {
        const char *f = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(f, "--quick")) {
            o.quick = true;
        } else if (!strcmp(f, "--device") && v) {
            o.device_spec = v, i++;
        } else if (!strcmp(f, "--out") && v) {
            o.out = v, i++;
        } else if (!strcmp(f, "--mem-limit") && v) {
            if (!cli_parse_size("--mem-limit", v, &o.mem_limit)) return 2;
            i++;
        } else {
            char msg[300];
            snprintf(msg, sizeof msg, "%s %s", f,
                     !strcmp(f, "--device") || !strcmp(f, "--out") || !strcmp(f, "--mem-limit")
                         ? "needs a value"
                         : "is not an option of bench suite");
            return usage_error(msg);
        }
    }
    if (!o.out) return usage_error("--out RESULTS.json is required: the results go to a file");
    int rc = check_out(o.out);
    if (rc) return rc;
    const suite_plan *sp = o.quick ? &quick_plan : &full_plan;
    // The optimizer and seed of `vktrain train` with no options (SGD, lr 0.05, momentum 0.9).
    cli_run_options defaults;
    if (cli_parse_run_options(0, NULL, &defaults)) return 2;

    vkt_context *ctx;
    if (cli_open_context(NULL, &ctx) != VKT_OK) return cli_fail(vkt_error());
    int sel[VKT_MAX_DEVICES], nsel = 0;
    if (vkt_context_select(ctx, o.device_spec, sel, VKT_MAX_DEVICES, &nsel) != VKT_OK) {
        rc = cli_fail(vkt_error());
        vkt_context_destroy(ctx);
        return rc;
    }
    if (nsel != 1) {
        char msg[1024];
        int n = snprintf(msg, sizeof msg,
                         "bench suite measures one device per run, and --device %s selects %d:",
                         o.device_spec, nsel);
        for (int i = 0; i < nsel && n > 0 && (size_t)n < sizeof msg; i++)
            n += snprintf(msg + n, sizeof msg - (size_t)n, "%s %d (%s)", i ? "," : "", sel[i],
                          vkt_context_device_info(ctx, sel[i])->name);
        if (n > 0 && (size_t)n < sizeof msg)
            snprintf(msg + n, sizeof msg - (size_t)n,
                     "; name one (an index of `vktrain devices`) and run once per device");
        vkt_context_destroy(ctx);
        return usage_error(msg);
    }
    const vkt_device_info *info = vkt_context_device_info(ctx, sel[0]);
    char label[256];
    device_label(info->name, label, sizeof label);
    progress pr = {.tty = isatty(STDERR_FILENO)};
    double load0 = load_average();

    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "format", SUITE_FORMAT);
    cJSON_AddNumberToObject(root, "version", SUITE_VERSION);
    char created[32];
    time_t now = time(NULL);
    struct tm tm;
    strftime(created, sizeof created, "%Y-%m-%dT%H:%M:%SZ", gmtime_r(&now, &tm));
    cJSON_AddStringToObject(root, "created", created);
    cJSON_AddStringToObject(root, "command", command);
    cJSON_AddBoolToObject(root, "quick", o.quick);
    cJSON_AddStringToObject(root, "vktrain_version", VKT_VERSION);
    cJSON_AddBoolToObject(root, "validation", vkt_context_validation_enabled(ctx));
    cli_host hinfo;
    cli_host_get(&hinfo);
    cJSON *host = cli_host_json(&hinfo);
    cJSON_AddItemToObject(root, "host", host);
    cJSON_AddItemToObject(root, "device", device_json(info, o.mem_limit));

    // The device of the fixed measurements (and of the matmul tuning before each point).
    vkt_device *dev = NULL;
    vkt_ops *ops = NULL;
    vkt_cmd *cmd = NULL;
    cli_peak_bench pb;
    memset(&pb, 0, sizeof pb);
    double peak = 0, bw = 0;
    uint64_t bw_bytes = 0;
    uint32_t bw_k = 0;
    progress_point(&pr, "bench suite: %s: peak FMA rate and memory bandwidth ...", label);
    vkt_status s = vkt_device_create(ctx, sel[0], NULL, &dev);
    if (s == VKT_OK) s = vkt_ops_create(dev, &ops);
    if (s == VKT_OK) s = vkt_cmd_create(dev, &cmd);
    if (s == VKT_OK) s = cli_peak_open(dev, &pb, &peak);
    if (s == VKT_OK) s = bandwidth_run(dev, sp->bandwidth_runs, &bw, &bw_bytes, &bw_k);
    cJSON *jp = cJSON_AddObjectToObject(root, "peak");
    cJSON_AddNumberToObject(jp, "fma_gflops", peak);
    if (pb.shape) cJSON_AddStringToObject(jp, "fma_kernel", pb.shape);
    cJSON_AddNumberToObject(jp, "bandwidth_gbs", bw);
    cJSON_AddNumberToObject(jp, "bandwidth_buffer_bytes", (double)bw_bytes);
    cJSON_AddNumberToObject(jp, "bandwidth_vec4s_per_invocation", bw_k);

    cJSON *jm = cJSON_AddArrayToObject(root, "matmul");
    char mm_line[512] = "";
    for (int i = 0; i < sp->nsizes && s == VKT_OK; i++) {
        uint32_t S = sp->sizes[i];
        progress_point(&pr, "bench suite: %s: matmul %u ...", label, S);
        cli_matmul_result r;
        s = cli_bench_matmul_size(dev, ops, cmd, &pb, VKT_MM_NN, sp->reps, S, S, S, &r);
        if (s != VKT_OK) break;
        if (!r.ok) {
            char msg[300];
            snprintf(msg, sizeof msg,
                     "bench suite: matmul %ux%ux%u (%s) on %s gives wrong results (spot check "
                     "off by %.3g times the tolerance)",
                     S, S, S, r.variant, info->name, r.max_err);
            s = vkt_set_error(VKT_ERR_NUMERIC, msg);
            break;
        }
        cJSON *j = cJSON_CreateObject();
        cJSON_AddNumberToObject(j, "size", S);
        cJSON_AddStringToObject(j, "form", "NN");
        cJSON_AddStringToObject(j, "variant", r.variant);
        cJSON_AddNumberToObject(j, "reps", sp->reps);
        cJSON_AddNumberToObject(j, "median_ms", r.median_ms);
        cJSON_AddNumberToObject(j, "best_ms", r.best_ms);
        cJSON_AddNumberToObject(j, "gflops", r.gflops);
        cJSON_AddNumberToObject(j, "fraction_of_peak", r.frac_peak);
        cJSON_AddNumberToObject(j, "peak_gflops_adjacent", r.peak_adjacent);
        cJSON_AddNumberToObject(j, "check_max_err", r.max_err);
        cJSON_AddItemToArray(jm, j);
        size_t n = strlen(mm_line);
        snprintf(mm_line + n, sizeof mm_line - n, "%s%u: %.1f", i ? ", " : "", S, r.gflops);
    }
    if (s != VKT_OK) {
        rc = cli_fail(vkt_error());
    } else {
        progress_line(&pr,
                      "bench suite: %s: peak FMA %.1f GFLOP/s, memory bandwidth %.1f GB/s, "
                      "matmul GFLOP/s by size {%s}",
                      label, peak, bw, mm_line);
    }
    cli_peak_close(&pb);
    vkt_cmd_destroy(cmd);

    cJSON *train = cJSON_AddArrayToObject(root, "train");
    cJSON *saturation = cJSON_AddArrayToObject(root, "saturation");
    cJSON *sweeps = cJSON_AddArrayToObject(root, "sweeps");
    sweep_ctx sc = {.ctx = ctx,
                    .device = sel[0],
                    .info = info,
                    .ops = ops,
                    .plan = sp,
                    .opts = &o,
                    .optim = defaults.o.optim,
                    .seed = defaults.o.seed,
                    .pr = &pr,
                    .train = train,
                    .saturation = saturation,
                    .sweeps = sweeps};
    for (int i = 0; i < NMODELS && rc == 0; i++)
        rc = sweep_model(&sc, suite_models[i]);
    vkt_ops_destroy(ops);
    vkt_device_destroy(dev);

    if (rc == 0) {
        double elapsed = now_s() - t_start;
        cJSON_AddNumberToObject(root, "elapsed_seconds", elapsed);
        cJSON_AddNumberToObject(host, "load_average_start", load0);
        cJSON_AddNumberToObject(host, "load_average_end", load_average());
        if (vkt_context_validation_enabled(ctx))
            cJSON_AddNumberToObject(root, "validation_messages",
                                    (double)vkt_context_validation_count(ctx));
        char *txt = cJSON_Print(root);
        if (!txt) {
            rc = cli_fail("out of host memory for the results");
        } else {
            vkt_chunk c[2] = {{txt, strlen(txt)}, {"\n", 1}};
            if (vkt_write_file_atomic(o.out, c, 2, "bench suite result") != VKT_OK)
                rc = cli_fail(vkt_error());
            else
                printf("bench suite: %s%s: %.0f s, results in %s\n", label,
                       o.quick ? " (quick)" : "", elapsed, o.out);
            cJSON_free(txt);
        }
    }
    cJSON_Delete(root);
    vkt_context_destroy(ctx);
    return rc;
}
