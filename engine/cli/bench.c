// bench.c (CLI): `vktrain bench matmul`, and the `vktrain bench` dispatch (`bench train` lives in
// bench_train.c, `bench suite` in suite.c, which also runs this file's peak and matmul timings).
//
// bench matmul: for each selected device, the peak fp32 FMA rate measured by shaders/peak_fma.glsl
// (independent FMA chains, the fastest of three shapes, enough workgroups to fill the device), then
// for each shape the GFLOP/s of one fp32 vkt_op_matmul (--sizes: a size S is S x S x S; MxNxK is
// c[M,N] = op(a)[M,K] op(b)[K,N], e.g. a model's layer at its batch size): the median of --reps
// runs timed by GPU timestamps after a warm-up run (which also builds the kernel), the variant the
// engine chose (with the GFLOP/s of every candidate it measured for that shape at first use,
// engine/core/tune.c), and the figure as a fraction of the peak: each timed run against a peak_fma
// run right after it, the median of those ratios (cli_bench_matmul_size says why). The product of
// the last run is spot-checked against a double-precision dot product on random entries: a
// benchmark of a broken kernel fails (exit 1). It prints the command line that reproduces it;
// --json prints one JSON object instead.
//
// --baseline also runs a CPU BLAS sgemm (OpenBLAS, bench_blas.c) on the same shapes, form and
// data: a warm-up call, then the median of --reps calls timed by the wall clock, at 1 thread and
// at all cores, its product spot-checked like the GPU's. It reports the library, its config
// string, the kernel it chose and its thread count, and each size's ratio vkt/BLAS. The two sides
// alternate in --rounds rounds per size (default 3): each round times the device's --reps runs
// and then the BLAS's, and the ratio reported is the median of the rounds' ratios (the figures
// beside it are that round's). Why: the team's shared 2-core machines change speed by up to 1.3x
// over minutes (OpenBLAS read 149 and 194 GFLOP/s at 1024 in runs minutes apart), and a ratio of
// two blocks timed one after the other followed the machine; a round's two sides run seconds
// apart. Before each device block the command waits 0.25 s: OpenBLAS's pthread workers busy-wait
// up to 2^28 cycles (~0.1 s) after a call before they sleep, and would take a core from lavapipe.
// The GPU figures come from GPU timestamps around the dispatches and leave out the ~0.2 ms submit
// (docs/DRIVERS.md), which flatters the GPU at small sizes.
//
// A device's figure is measured alone (running several devices at once does not add throughput
// on a 2-core machine, docs/DRIVERS.md).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "cli.h"
#include "ops.h"
#include "vkt_abi.h"
#include "vkt_shaders.h"

#define MAX_SIZES 16
#define MAX_DEVICES 16
#define SPOT_CHECKS 24
#define MAX_ROUNDS 99 // --rounds

typedef struct bench_opts {
    uint32_t shape[MAX_SIZES][3]; // M, N, K
    int nsizes;
    int reps;
    vkt_mm_form form;
    bool json, baseline;
    int rounds; // --baseline: rounds per size, each the device's runs then the BLAS's
    const char *device_spec;
} bench_opts;

// --baseline: each device's paired BLAS figures per size (the median round's) and every round's.
typedef struct paired {
    cli_matmul_result blas;
    int nrounds;
    double vk_gflops[MAX_ROUNDS], blas_gflops[MAX_ROUNDS], ratio[MAX_ROUNDS];
} paired;

// A failure this file finds itself, reported through vkt_error() as libvktrain's own are.
static vkt_status bench_fail(vkt_status s, const char *what) { return vkt_set_error(s, what); }

static const char *form_name(vkt_mm_form f) {
    return f == VKT_MM_NN ? "NN" : f == VKT_MM_NT ? "NT" : "TN";
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

// GPU time of the labelled operations of the last submit: first start to last end (a K-split
// matmul records several dispatches under one label).
static double span_ns(const vkt_cmd *cmd) {
    const vkt_timing *t;
    int n = vkt_cmd_timings(cmd, &t);
    if (n <= 0) return 0;
    return (double)(t[n - 1].end_ns - t[0].start_ns);
}

// ---------------------------------------------------------------------------------------------
// Peak FMA rate

// One run of peak_fma: GFLOP/s in *gflops, and its GPU time in *ns.
vkt_status cli_peak_run(cli_peak_bench *pb, double *gflops, double *ns) {
    vkt_peak_fma_push p = {.n = pb->wg * pb->groups, .iters = pb->iters, .a = 0.999f, .b = 0.001f};
    vkt_view v = vkt_buffer_whole(pb->out);
    vkt_status s = vkt_cmd_begin(pb->cmd, true);
    if (s != VKT_OK) return s;
    vkt_cmd_dispatch(pb->cmd, pb->k, &v, 1, &p, sizeof p, pb->groups, 1, 1, "peak_fma");
    if ((s = vkt_cmd_end(pb->cmd)) != VKT_OK || (s = vkt_cmd_submit(pb->cmd)) != VKT_OK ||
        (s = vkt_cmd_wait(pb->cmd, VKT_WAIT_MS)) != VKT_OK)
        return s;
    *ns = span_ns(pb->cmd);
    double flops = (double)pb->flops * pb->iters * pb->wg * pb->groups;
    *gflops = *ns > 0 ? flops / *ns : 0;
    return VKT_OK;
}

void cli_peak_close(cli_peak_bench *pb) {
    vkt_cmd_destroy(pb->cmd);
    vkt_buffer_destroy(pb->out);
    vkt_kernel_destroy(pb->k);
}

// The peak_fma kernels (shaders/variants.cmake) and their flops per invocation and iteration.
static const struct {
    vkt_shader_id shader;
    const char *name; // chains x steps per iteration
    uint32_t flops;
} PEAK_KERNELS[] = {
    {VKT_SHADER_PEAK_FMA_C32U8, "32x8", 2 * 32 * 8},
    {VKT_SHADER_PEAK_FMA_C24U4, "24x4", 2 * 24 * 4},
    {VKT_SHADER_PEAK_FMA_C16U4, "16x4", 2 * 16 * 4},
};

// Grows pb's work until one run takes at least 50 ms, then keeps the best of three runs.
static vkt_status peak_best(cli_peak_bench *pb, double *gflops) {
    vkt_status s = VKT_OK;
    double best = 0;
    int timed = 0;
    for (int run = 0; run < 12 && timed < 3; run++) {
        double g, ns;
        if ((s = cli_peak_run(pb, &g, &ns)) != VKT_OK) break;
        if (ns < 50e6) {
            // Too short to time well: scale the work up (and do not count this run).
            double grow = ns > 0 ? 60e6 / ns : 16;
            pb->iters = (uint32_t)fmin(pb->iters * fmax(grow, 2.0), 1u << 24);
            continue;
        }
        if (g > best) best = g;
        timed++;
    }
    *gflops = best;
    return s;
}

// Times every peak_fma kernel (peak_best) and keeps the fastest in pb: the device's peak.
vkt_status cli_peak_open(vkt_device *dev, cli_peak_bench *pb, double *gflops) {
    const vkt_device_info *d = vkt_device_get_info(dev);
    memset(pb, 0, sizeof *pb);
    pb->wg = d->max_workgroup_invocations >= 64 ? 64 : d->max_workgroup_invocations;
    pb->groups = 1024; // 64k invocations: every CPU lane and most GPUs' cores
    uint32_t spec[3] = {pb->wg, 1, 1};
    vkt_status s = vkt_buffer_create(dev, 4ull * pb->wg * pb->groups, "peak out", &pb->out);
    if (s == VKT_OK) s = vkt_cmd_create(dev, &pb->cmd);
    double best = 0;
    uint32_t best_iters = 0;
    int bi = -1; // PEAK_KERNELS index of best_k
    vkt_kernel *best_k = NULL;
    for (size_t i = 0; s == VKT_OK && i < sizeof PEAK_KERNELS / sizeof PEAK_KERNELS[0]; i++) {
        double g = 0;
        pb->iters = 4;
        pb->flops = PEAK_KERNELS[i].flops;
        if ((s = vkt_kernel_create(dev, PEAK_KERNELS[i].shader, spec, 3, &pb->k)) == VKT_OK)
            s = peak_best(pb, &g);
        if (s == VKT_OK && g > best) {
            vkt_kernel_destroy(best_k);
            best = g, best_k = pb->k, best_iters = pb->iters, bi = (int)i, pb->k = NULL;
        }
        vkt_kernel_destroy(pb->k);
        pb->k = NULL;
    }
    pb->k = best_k, pb->iters = best_iters;
    pb->flops = bi >= 0 ? PEAK_KERNELS[bi].flops : 0;
    pb->shape = bi >= 0 ? PEAK_KERNELS[bi].name : NULL;
    *gflops = best;
    if (s == VKT_OK && best <= 0)
        return bench_fail(VKT_ERR_VULKAN, "peak_fma returned no GPU timing: the device's "
                                          "timestamps do not work");
    return s;
}

// ---------------------------------------------------------------------------------------------
// One matmul size

// op(a)[m,k] and op(b)[k,n] of packed row-major operands: a is [M,K] ([K,M] in TN), b [K,N]
// ([N,K] in NT).
static double op_a(vkt_mm_form f, const float *a, uint32_t M, uint32_t K, uint32_t m, uint32_t k) {
    return f == VKT_MM_TN ? a[(size_t)k * M + m] : a[(size_t)m * K + k];
}
static double op_b(vkt_mm_form f, const float *b, uint32_t N, uint32_t K, uint32_t k, uint32_t n) {
    return f == VKT_MM_NT ? b[(size_t)n * K + k] : b[(size_t)k * N + n];
}

static uint64_t lcg(uint64_t *state) {
    return *state = *state * 6364136223846793005ull + 1442695040888963407ull;
}

// Uniform in [-1, 1] from a fixed seed: every run of the benchmark (and the BLAS baseline)
// multiplies the same data. Returns the generator's state, which picks the spot-checked entries.
static uint64_t fill_inputs(uint32_t M, uint32_t N, uint32_t K, float *a, float *b) {
    uint64_t state = 0x9e3779b97f4a7c15ull ^ M ^ (uint64_t)N << 21 ^ (uint64_t)K << 42;
    for (size_t i = 0; i < (size_t)M * K; i++)
        a[i] = (float)((lcg(&state) >> 40) * (1.0 / 8388608.0) * 2.0 - 1.0);
    for (size_t i = 0; i < (size_t)K * N; i++)
        b[i] = (float)((lcg(&state) >> 40) * (1.0 / 8388608.0) * 2.0 - 1.0);
    return state;
}

// Spot check of c = op(a) op(b) on SPOT_CHECKS random entries against a double-precision dot
// product: fp32 accumulation over K terms of [-1, 1] products errs by about 1e-7 sqrt(K) |sum|;
// the tolerance is 1e-6 K + 1e-5 |ref|. Sets r->ok and r->max_err.
static void spot_check(vkt_mm_form f, uint32_t M, uint32_t N, uint32_t K, const float *a,
                       const float *b, const float *c, uint64_t state, cli_matmul_result *r) {
    r->ok = true;
    r->max_err = 0;
    for (int i = 0; i < SPOT_CHECKS; i++) {
        lcg(&state);
        uint32_t m = (uint32_t)((state >> 33) % M), n = (uint32_t)((state >> 13) % N);
        double ref = 0;
        for (uint32_t k = 0; k < K; k++)
            ref += op_a(f, a, M, K, m, k) * op_b(f, b, N, K, k, n);
        double err = fabs(c[(size_t)m * N + n] - ref) / (1e-6 * K + 1e-5 * fabs(ref));
        if (!(err <= 1.0)) r->ok = false; // NaN fails too
        if (!(err <= r->max_err)) r->max_err = err;
    }
}

static double shape_flop(uint32_t M, uint32_t N, uint32_t K) { return 2.0 * M * N * (double)K; }

// Sorts the reps times (ns) and sets the median, best and GFLOP/s of r's shape.
static void summarize(double *ns, int reps, cli_matmul_result *r) {
    qsort(ns, (size_t)reps, sizeof *ns, cmp_double);
    double med = reps % 2 ? ns[reps / 2] : 0.5 * (ns[reps / 2 - 1] + ns[reps / 2]);
    r->median_ms = med * 1e-6;
    r->best_ms = ns[0] * 1e-6;
    r->gflops = med > 0 ? shape_flop(r->m, r->n, r->k) / med : 0;
}

vkt_status cli_bench_matmul_size(vkt_device *dev, vkt_ops *ops, vkt_cmd *cmd, cli_peak_bench *pb,
                                 vkt_mm_form form, int reps, uint32_t M, uint32_t N, uint32_t K,
                                 cli_matmul_result *r) {
    memset(r, 0, sizeof *r);
    r->m = M, r->n = N, r->k = K;
    // c, a and b, each with the guard after it that the network leaves after its tensors: on
    // lavapipe the product then runs the compiled variant that tuning's operands gave it.
    uint64_t bc = 4ull * M * N, ba = 4ull * M * K, bb = 4ull * K * N, G = VKT_NET_TENSOR_GUARD;
    uint64_t off_a = vkt_device_align(dev, bc + G), off_b = off_a + vkt_device_align(dev, ba + G);
    vkt_buffer *buf = NULL;
    float *a = malloc(ba), *b = malloc(bb), *c = malloc(bc);
    vkt_status s = (a && b && c) ? VKT_OK : bench_fail(VKT_ERR_HOST_MEMORY, "out of host memory");
    if (s == VKT_OK) s = vkt_buffer_create(dev, off_b + bb + G, "bench matmul", &buf);
    if (s != VKT_OK) goto done;
    vkt_buffer_set_guard(buf, G);
    uint64_t state = fill_inputs(M, N, K, a, b);
    if ((s = vkt_buffer_write(buf, off_a, a, ba)) != VKT_OK) goto done;
    if ((s = vkt_buffer_write(buf, off_b, b, bb)) != VKT_OK) goto done;
    vkt_view vc = vkt_buffer_view(buf, 0, bc), va = vkt_buffer_view(buf, off_a, ba),
             vb = vkt_buffer_view(buf, off_b, bb);
    r->variant = vkt_matmul_variant(ops, form, M, N, K);
    r->ncand = vkt_matmul_candidates(ops, form, M, N, K, r->cand, r->cand_ms, 8);
    double *ns = calloc((size_t)reps, sizeof *ns);
    double *frac = calloc((size_t)reps, sizeof *frac), *pk = calloc((size_t)reps, sizeof *pk);
    if (!ns || !frac || !pk) {
        free(ns), free(frac), free(pk);
        s = bench_fail(VKT_ERR_HOST_MEMORY, "out of host memory");
        goto done;
    }
    // Run 0 is the warm-up: it builds the kernel (lavapipe compiles on first dispatch).
    for (int run = 0; run <= reps; run++) {
        if ((s = vkt_cmd_begin(cmd, true)) != VKT_OK) break;
        vkt_op_matmul(cmd, ops, form, vc, va, vb, NULL, 0.0f, M, N, K, "matmul");
        if ((s = vkt_cmd_end(cmd)) != VKT_OK || (s = vkt_ops_status(ops)) != VKT_OK ||
            (s = vkt_cmd_submit(cmd)) != VKT_OK || (s = vkt_cmd_wait(cmd, VKT_WAIT_MS)) != VKT_OK)
            break;
        if (run == 0) continue;
        ns[run - 1] = span_ns(cmd);
        double g, pns;
        if ((s = cli_peak_run(pb, &g, &pns)) != VKT_OK) break;
        pk[run - 1] = g;
        frac[run - 1] = g > 0 && ns[run - 1] > 0 ? shape_flop(M, N, K) / ns[run - 1] / g : 0;
    }
    if (s == VKT_OK) {
        summarize(ns, reps, r);
        qsort(frac, (size_t)reps, sizeof *frac, cmp_double);
        qsort(pk, (size_t)reps, sizeof *pk, cmp_double);
        r->frac_peak = frac[reps / 2];
        r->peak_adjacent = pk[reps / 2];
        s = vkt_buffer_read(buf, 0, c, bc);
    }
    free(ns), free(frac), free(pk);
    if (s == VKT_OK) spot_check(form, M, N, K, a, b, c, state, r);
done:
    vkt_buffer_destroy(buf);
    free(a);
    free(b);
    free(c);
    return s;
}

// ---------------------------------------------------------------------------------------------
// The CPU BLAS baseline of one shape

static double now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

// The same data, form and repetitions as cli_bench_matmul_size, on the CPU BLAS, at 1 thread and at
// all cores (or only the count the environment fixes): per count a warm-up call (it starts
// OpenBLAS's threads and fills the caches), then reps calls each timed by the wall clock, each
// count's results spot-checked; the faster count's figures are kept.
static vkt_status bench_blas_size(const bench_opts *o, const cli_blas_info *blas,
                                  const uint32_t *shape, cli_matmul_result *r) {
    memset(r, 0, sizeof *r);
    uint32_t M = shape[0], N = shape[1], K = shape[2];
    r->m = M, r->n = N, r->k = K;
    float *a = malloc(4ull * M * K), *b = malloc(4ull * K * N), *c = malloc(4ull * M * N);
    double *ns = calloc((size_t)o->reps, sizeof *ns);
    vkt_status s =
        (a && b && c && ns) ? VKT_OK : bench_fail(VKT_ERR_HOST_MEMORY, "out of host memory");
    int counts[2] = {blas->threads, 0}, ncounts = 1;
    if (!blas->threads_env && blas->threads > 1)
        counts[0] = 1, counts[1] = blas->threads, ncounts = 2;
    bool all_ok = true;
    double worst = 0;
    for (int k = 0; k < ncounts && s == VKT_OK; k++) {
        cli_blas_set_threads(counts[k]);
        cli_matmul_result t = {.m = M, .n = N, .k = K};
        uint64_t state = fill_inputs(M, N, K, a, b);
        for (int run = 0; run <= o->reps; run++) {
            double t0 = now_ns();
            cli_blas_sgemm(o->form == VKT_MM_TN, o->form == VKT_MM_NT, M, N, K, a, b, c);
            if (run > 0) ns[run - 1] = now_ns() - t0;
        }
        summarize(ns, o->reps, &t);
        spot_check(o->form, M, N, K, a, b, c, state, &t);
        all_ok = all_ok && t.ok;
        worst = t.max_err > worst ? t.max_err : worst;
        r->tried_threads[k] = counts[k];
        r->tried_gflops[k] = t.gflops;
        if (k == 0 || t.gflops > r->gflops) {
            int nt = r->ntried;
            int tt[2] = {r->tried_threads[0], r->tried_threads[1]};
            double tg[2] = {r->tried_gflops[0], r->tried_gflops[1]};
            *r = t;
            r->threads = counts[k];
            r->ntried = nt;
            memcpy(r->tried_threads, tt, sizeof tt);
            memcpy(r->tried_gflops, tg, sizeof tg);
        }
        r->ntried = k + 1;
    }
    r->ok = all_ok;
    r->max_err = worst;
    cli_blas_set_threads(blas->threads);
    free(ns);
    free(a);
    free(b);
    free(c);
    return s;
}

// --baseline: o->rounds rounds of one shape, each the device's o->reps runs
// (cli_bench_matmul_size) and then the BLAS's (bench_blas_size), a 0.25 s pause before each
// device block that follows BLAS calls (*blas_ran). *r and p->blas are the round whose ratio is
// the median (the lower middle of an even count), p keeps every round's figures, and p->blas.ok
// says whether every round's BLAS product passed its spot check. A wrong device product ends the
// rounds with *r that round's (the caller reports it).
static vkt_status bench_rounds(const bench_opts *o, const cli_blas_info *blas, vkt_device *dev,
                               vkt_ops *ops, vkt_cmd *cmd, cli_peak_bench *pb, const uint32_t *sh,
                               bool *blas_ran, cli_matmul_result *r, paired *p) {
    cli_matmul_result *vr = calloc((size_t)o->rounds * 2, sizeof *vr), *br = vr + o->rounds;
    if (!vr) return bench_fail(VKT_ERR_HOST_MEMORY, "out of host memory");
    vkt_status s = VKT_OK;
    bool blas_ok = true;
    int n = 0;
    for (; n < o->rounds && s == VKT_OK; n++) {
        if (*blas_ran) nanosleep(&(struct timespec){.tv_nsec = 250000000}, NULL);
        s = cli_bench_matmul_size(dev, ops, cmd, pb, o->form, o->reps, sh[0], sh[1], sh[2], &vr[n]);
        if (s != VKT_OK) break;
        if (!vr[n].ok) {
            *r = vr[n];
            free(vr);
            return VKT_OK;
        }
        s = bench_blas_size(o, blas, sh, &br[n]);
        *blas_ran = true;
        if (s != VKT_OK) break;
        blas_ok = blas_ok && br[n].ok;
        p->vk_gflops[n] = vr[n].gflops;
        p->blas_gflops[n] = br[n].gflops;
        p->ratio[n] = br[n].gflops > 0 ? vr[n].gflops / br[n].gflops : 0;
    }
    if (s == VKT_OK) {
        p->nrounds = n;
        double sorted[MAX_ROUNDS];
        memcpy(sorted, p->ratio, sizeof(double) * (size_t)n);
        qsort(sorted, (size_t)n, sizeof *sorted, cmp_double);
        int mid = 0;
        while (mid < n - 1 && p->ratio[mid] != sorted[(n - 1) / 2])
            mid++;
        *r = vr[mid];
        p->blas = br[mid];
        p->blas.ok = blas_ok;
    }
    free(vr);
    return s;
}

// ---------------------------------------------------------------------------------------------
// vktrain bench matmul

// --sizes: comma-separated entries, each a size S (S x S x S) or a shape MxNxK, every dimension
// from 1 to 16384 and every operand at most 16384^2 floats (1 GiB).
static int parse_sizes(const char *arg, bench_opts *o) {
    o->nsizes = 0;
    const char *v = arg;
    bool ok = *v != 0;
    while (ok && *v) {
        unsigned long d[3];
        int nd = 0;
        char *end = (char *)v;
        for (;;) {
            if (*end < '0' || *end > '9') break; // strtoul would take a sign or spaces
            d[nd] = strtoul(end, &end, 10);
            if (d[nd] < 1 || d[nd] > 16384) break;
            nd++;
            if (nd == 3 || *end != 'x' || end[1] < '0' || end[1] > '9') break;
            end++;
        }
        ok = (nd == 1 || nd == 3) && (*end == 0 || *end == ',') && o->nsizes < MAX_SIZES;
        if (!ok) break;
        uint32_t *sh = o->shape[o->nsizes++];
        sh[0] = (uint32_t)d[0], sh[1] = (uint32_t)d[nd == 3], sh[2] = (uint32_t)d[nd == 3 ? 2 : 0];
        const uint64_t most = 16384ull * 16384ull;
        ok = (uint64_t)sh[0] * sh[2] <= most && (uint64_t)sh[2] * sh[1] <= most &&
             (uint64_t)sh[0] * sh[1] <= most;
        v = *end ? end + 1 : end;
        ok = ok && !(*end == ',' && *v == 0); // a trailing comma
    }
    if (!ok) {
        fprintf(stderr,
                "vktrain bench matmul: --sizes takes up to %d comma-separated sizes S (S x S x S) "
                "or shapes MxNxK (c[M,N] = op(a)[M,K] op(b)[K,N]), each number from 1 to 16384 "
                "and each matrix at most 16384^2 floats (e.g. 256,1024,128x512x784), not \"%s\"\n",
                MAX_SIZES, arg);
        return 2;
    }
    return 0;
}

// A shape as --sizes spells it: "1024" for 1024 x 1024 x 1024, else "128x512x784".
static void shape_name(uint32_t M, uint32_t N, uint32_t K, char *out, size_t n) {
    if (M == N && N == K)
        snprintf(out, n, "%u", M);
    else
        snprintf(out, n, "%ux%ux%u", M, N, K);
}

// The shape's keys of a result object: M, N, K, and "size" where the shape is a size's cube.
static void json_shape(cJSON *j, const cli_matmul_result *r) {
    if (r->m == r->n && r->n == r->k) cJSON_AddNumberToObject(j, "size", r->m);
    cJSON_AddNumberToObject(j, "M", r->m);
    cJSON_AddNumberToObject(j, "N", r->n);
    cJSON_AddNumberToObject(j, "K", r->k);
}

// Short name of a device for a column title: its first word ("llvmpipe", "SwiftShader").
static void short_name(const char *name, char *out, size_t n) {
    size_t k = 0;
    while (name[k] && name[k] != ' ' && k + 1 < n)
        k++;
    memcpy(out, name, k);
    out[k] = 0;
}

// The BLAS baseline, after every device ran: its own table (and JSON object "baseline": the
// figures of the first device's rounds), and in each device's results the BLAS GFLOP/s of its own
// rounds, the ratio vkt/BLAS (the median round's) and every round's figures. Returns the exit
// status.
static int run_baseline(const bench_opts *o, const cli_blas_info *blas, const paired *pair,
                        cJSON *root, cJSON *jdevs) {
    int ndev = cJSON_GetArraySize(jdevs);
    cJSON *jb = cJSON_AddObjectToObject(root, "baseline");
    cJSON_AddStringToObject(jb, "library", blas->library);
    cJSON_AddStringToObject(jb, "version", blas->version);
    cJSON_AddStringToObject(jb, "config", blas->config ? blas->config : "");
    cJSON_AddStringToObject(jb, "corename", blas->corename ? blas->corename : "");
    if (blas->coretype_env)
        cJSON_AddStringToObject(jb, "coretype_env", blas->coretype_env);
    else
        cJSON_AddNullToObject(jb, "coretype_env");
    cJSON_AddNumberToObject(jb, "threads", blas->threads);
    cJSON_AddNumberToObject(jb, "integer_bits", blas->int_bits);
    cJSON_AddStringToObject(jb, "timing", "wall clock");
    cJSON_AddNumberToObject(jb, "rounds", o->rounds);
    cJSON *jr = cJSON_AddArrayToObject(jb, "results");
    if (!o->json) {
        printf("CPU BLAS baseline: %s %s, kernel %s, %s, %d-bit integers (timed by the wall "
               "clock)\n",
               blas->library, blas->version, blas->corename,
               blas->threads_env || blas->threads == 1
                   ? "the thread count the environment sets"
                   : "the faster of 1 thread and all cores per size",
               blas->int_bits);
        printf("  config: %s\n", blas->config);
        if (blas->coretype_env)
            printf("  OPENBLAS_CORETYPE=%s is set in the environment and forces this kernel; "
                   "unset it to let OpenBLAS pick one for this CPU\n",
                   blas->coretype_env);
        printf("  %14s %-4s %10s %10s %7s  %-34s", "size (MxNxK)", "form", "median ms", "GFLOP/s",
               "threads", "spot check");
        for (int d = 0; d < ndev; d++) {
            char nm[24], title[40];
            cJSON *jd = cJSON_GetArrayItem(jdevs, d);
            short_name(cJSON_GetObjectItem(jd, "name")->valuestring, nm, sizeof nm);
            snprintf(title, sizeof title, "%s/BLAS", nm);
            printf(" %16s", title);
        }
        printf("\n");
    }
    for (int si = 0; si < o->nsizes; si++) {
        cli_matmul_result r = pair[si].blas; // the first device's rounds
        char name[48];
        shape_name(r.m, r.n, r.k, name, sizeof name);
        cJSON *j = cJSON_CreateObject();
        json_shape(j, &r);
        cJSON_AddStringToObject(j, "form", form_name(o->form));
        cJSON_AddNumberToObject(j, "reps", o->reps);
        cJSON_AddNumberToObject(j, "median_ms", r.median_ms);
        cJSON_AddNumberToObject(j, "best_ms", r.best_ms);
        cJSON_AddNumberToObject(j, "gflops", r.gflops);
        cJSON_AddNumberToObject(j, "threads", r.threads);
        cJSON *jt = cJSON_AddObjectToObject(j, "threads_tried");
        for (int k = 0; k < r.ntried; k++) {
            char key[16];
            snprintf(key, sizeof key, "%d", r.tried_threads[k]);
            cJSON_AddNumberToObject(jt, key, r.tried_gflops[k]);
        }
        cJSON_AddBoolToObject(j, "check_ok", r.ok);
        cJSON_AddNumberToObject(j, "check_max_err", r.max_err);
        cJSON_AddItemToArray(jr, j);
        if (!o->json) {
            char chk[64];
            snprintf(chk, sizeof chk, "%s (worst %.2f of tolerance)", r.ok ? "ok" : "WRONG",
                     r.max_err);
            printf("  %14s %-4s %10.3f %10.2f %7d  %-34s", name, form_name(o->form), r.median_ms,
                   r.gflops, r.threads, chk);
        }
        // Each device's result for this size: the BLAS figure of its own median round beside it,
        // the ratio, and every round's.
        for (int d = 0; d < ndev; d++) {
            const paired *p = &pair[d * MAX_SIZES + si];
            cJSON *jd = cJSON_GetArrayItem(jdevs, d);
            cJSON *res = cJSON_GetArrayItem(cJSON_GetObjectItem(jd, "results"), si);
            double g = cJSON_GetObjectItem(res, "gflops")->valuedouble;
            double ratio = p->blas.gflops > 0 ? g / p->blas.gflops : 0;
            cJSON_AddNumberToObject(res, "blas_gflops", p->blas.gflops);
            cJSON_AddNumberToObject(res, "blas_threads", p->blas.threads);
            cJSON_AddNumberToObject(res, "vs_blas", ratio);
            cJSON *jrr = cJSON_AddArrayToObject(res, "rounds");
            for (int k = 0; k < p->nrounds; k++) {
                cJSON *e = cJSON_CreateObject();
                cJSON_AddNumberToObject(e, "gflops", p->vk_gflops[k]);
                cJSON_AddNumberToObject(e, "blas_gflops", p->blas_gflops[k]);
                cJSON_AddNumberToObject(e, "vs_blas", p->ratio[k]);
                cJSON_AddItemToArray(jrr, e);
            }
            if (!o->json) printf(" %16.3f", ratio);
            r.ok = r.ok && p->blas.ok;
        }
        if (!o->json) printf("\n");
        if (!r.ok) {
            char msg[256];
            snprintf(msg, sizeof msg,
                     "%s sgemm %ux%ux%u gives wrong results (spot check off by %.3g times the "
                     "tolerance): the baseline is broken, not vktrain",
                     blas->library, r.m, r.n, r.k, r.max_err);
            return cli_fail(msg);
        }
    }
    if (!o->json) {
        printf("  each ratio is the median of %d round%s, each the device's %d run%s then the "
               "BLAS's at each thread count, back to back (a round's sides see the same "
               "machine; the figures above are each size's median round); the rounds' ratios:",
               o->rounds, o->rounds == 1 ? "" : "s", o->reps, o->reps == 1 ? "" : "s");
        for (int d = 0; d < ndev; d++)
            for (int si = 0; si < o->nsizes; si++) {
                const paired *p = &pair[d * MAX_SIZES + si];
                char name[48];
                shape_name(o->shape[si][0], o->shape[si][1], o->shape[si][2], name, sizeof name);
                printf("%s %s", d || si ? ";" : "", name);
                if (ndev > 1) printf(" (device %d)", d);
                for (int k = 0; k < p->nrounds; k++)
                    printf("%s%.3f", k ? " / " : " ", p->ratio[k]);
            }
        printf("\n");
        if (ndev > 1)
            printf("  each device's ratio is over the BLAS figure of its own median round (the "
                   "rows above show device 0's)\n");
    }
    return 0;
}

static int bench_matmul(int argc, char **argv) {
    bench_opts o = {
        .shape = {{256, 256, 256}, {512, 512, 512}, {1024, 1024, 1024}, {2048, 2048, 2048}},
        .nsizes = 4,
        .reps = 5,
        .rounds = 3,
        .form = VKT_MM_NN};
    const char *sizes_arg = "256,512,1024,2048", *rounds_arg = NULL;
    for (int i = 0; i < argc; i++) {
        const char *f = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(f, "--json") == 0) {
            o.json = true;
        } else if (strcmp(f, "--baseline") == 0) {
            o.baseline = true;
        } else if (strcmp(f, "--rounds") == 0 && v) {
            uint64_t n;
            if (!cli_parse_u64("--rounds", v, 1, MAX_ROUNDS, &n)) return 2;
            o.rounds = (int)n;
            rounds_arg = v;
            i++;
        } else if (strcmp(f, "--sizes") == 0 && v) {
            if (parse_sizes(v, &o)) return 2;
            sizes_arg = v;
            i++;
        } else if (strcmp(f, "--reps") == 0 && v) {
            char *end;
            long reps = strtol(v, &end, 10);
            o.reps = end != v && !*end && reps >= 1 && reps <= 1000 ? (int)reps : 0;
            if (o.reps < 1) {
                fprintf(stderr, "vktrain bench matmul: --reps takes 1 to 1000, not \"%s\"\n", v);
                return 2;
            }
            i++;
        } else if (strcmp(f, "--device") == 0 && v) {
            o.device_spec = v;
            i++;
        } else if (strcmp(f, "--form") == 0 && v) {
            if (strcmp(v, "NN") == 0 || strcmp(v, "nn") == 0)
                o.form = VKT_MM_NN;
            else if (strcmp(v, "NT") == 0 || strcmp(v, "nt") == 0)
                o.form = VKT_MM_NT;
            else if (strcmp(v, "TN") == 0 || strcmp(v, "tn") == 0)
                o.form = VKT_MM_TN;
            else {
                fprintf(stderr, "vktrain bench matmul: --form takes NN, NT or TN, not \"%s\"\n", v);
                return 2;
            }
            i++;
        } else {
            fprintf(
                stderr,
                "vktrain bench matmul: unknown option %s (usage: vktrain bench matmul "
                "[--sizes 256,512,1024,2048 | MxNxK,...] [--device SPEC] [--reps N] [--form NN] "
                "[--baseline [--rounds 3]] [--json])\n",
                f);
            return 2;
        }
    }
    if (rounds_arg && !o.baseline) {
        fprintf(stderr, "vktrain bench matmul: --rounds counts the rounds of --baseline; add "
                        "--baseline\n");
        return 2;
    }
    // Before any device opens: a build without OpenBLAS says so at once.
    cli_blas_info blas = {0};
    char blas_msg[512];
    if (o.baseline && !cli_blas_info_get(&blas, blas_msg, sizeof blas_msg)) {
        fprintf(stderr, "vktrain bench matmul: %s\n", blas_msg);
        return 2;
    }
    vkt_context *ctx;
    if (cli_open_context(NULL, &ctx) != VKT_OK) return cli_fail(vkt_error());
    int sel[MAX_DEVICES], ndev = 0;
    if (vkt_context_select(ctx, o.device_spec, sel, MAX_DEVICES, &ndev) != VKT_OK) {
        int rc = cli_fail(vkt_error());
        vkt_context_destroy(ctx);
        return rc;
    }
    char command[512];
    snprintf(command, sizeof command,
             "vktrain bench matmul --sizes %s --reps %d --form %s%s%s%s%s%s%s", sizes_arg, o.reps,
             form_name(o.form), o.device_spec ? " --device " : "",
             o.device_spec ? o.device_spec : "", o.baseline ? " --baseline" : "",
             o.baseline && rounds_arg ? " --rounds " : "",
             o.baseline && rounds_arg ? rounds_arg : "", o.json ? " --json" : "");
    paired *pair = o.baseline ? calloc((size_t)MAX_DEVICES * MAX_SIZES, sizeof *pair) : NULL;
    if (o.baseline && !pair) {
        vkt_context_destroy(ctx);
        return cli_fail("out of host memory");
    }
    bool blas_ran = false;

    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "benchmark", "matmul");
    cJSON_AddStringToObject(root, "command", command);
    cli_host host;
    char host_line[512];
    cli_host_get(&host);
    cJSON_AddItemToObject(root, "host", cli_host_json(&host));
    if (!o.json) printf("host: %s\n", cli_host_text(&host, host_line, sizeof host_line));
    cJSON *jdevs = cJSON_AddArrayToObject(root, "devices");
    int rc = 0;
    for (int di = 0; di < ndev && rc == 0; di++) {
        const vkt_device_info *info = vkt_context_device_info(ctx, sel[di]);
        char api[32];
        vkt_api_version_string(info->api_version, api, sizeof api);
        vkt_device *dev = NULL;
        vkt_ops *ops = NULL;
        vkt_cmd *cmd = NULL;
        vkt_status s = vkt_device_create(ctx, sel[di], NULL, &dev);
        if (s == VKT_OK) s = vkt_ops_create(dev, &ops);
        if (s == VKT_OK) s = vkt_cmd_create(dev, &cmd);
        double peak = 0;
        cli_peak_bench pb;
        memset(&pb, 0, sizeof pb);
        if (s == VKT_OK) s = cli_peak_open(dev, &pb, &peak);
        cJSON *jd = cJSON_CreateObject();
        cJSON_AddNumberToObject(jd, "index", info->index);
        cJSON_AddStringToObject(jd, "name", info->name);
        cJSON_AddStringToObject(jd, "driver", info->driver);
        cJSON_AddStringToObject(jd, "api_version", api);
        cJSON_AddNumberToObject(jd, "vendor_id", info->vendor_id);
        cJSON_AddNumberToObject(jd, "device_id", info->device_id);
        cJSON_AddNumberToObject(jd, "peak_gflops", peak);
        if (pb.shape) cJSON_AddStringToObject(jd, "peak_kernel", pb.shape);
        cJSON *jr = cJSON_AddArrayToObject(jd, "results");
        cJSON_AddItemToArray(jdevs, jd);
        if (s == VKT_OK && !o.json) {
            printf("%s (%s, Vulkan %s, vendor 0x%04x)\n", info->name, info->driver, api,
                   info->vendor_id);
            printf("  peak fp32 FMA rate (peak_fma): %.1f GFLOP/s (%s chains x steps, the fastest "
                   "of %d shapes, best of three runs; \"of peak\" below is each run against a "
                   "peak_fma run right after it, median)\n",
                   peak, pb.shape, (int)(sizeof PEAK_KERNELS / sizeof PEAK_KERNELS[0]));
            printf("  %14s %-4s %-22s %10s %10s %8s  %s\n", "size (MxNxK)", "form", "variant",
                   "median ms", "GFLOP/s", "of peak", "spot check");
        }
        for (int si = 0; si < o.nsizes && s == VKT_OK; si++) {
            // A large size runs for minutes on a CPU driver (first-use tuning of each variant,
            // o.reps timed runs, a peak_fma run after each): say so before it starts, on stderr,
            // so that a silent terminal is not taken for a hang.
            const uint32_t *sh = o.shape[si];
            char name[48];
            shape_name(sh[0], sh[1], sh[2], name, sizeof name);
            double gflop = 1e-9 * shape_flop(sh[0], sh[1], sh[2]);
            // (--baseline: each further round another warm-up and o.reps runs.)
            int timed = o.reps * (o.baseline ? o.rounds : 1);
            double est_s =
                peak > 0 ? gflop * (timed + 3 + (o.baseline ? o.rounds - 1 : 0)) / peak : 0;
            if (est_s > 5)
                fprintf(stderr,
                        "vktrain bench matmul: size %s on %s: at least %.0f s (%d timed runs and "
                        "the tuning of %.3g GFLOP products at this device's peak of %.1f "
                        "GFLOP/s)\n",
                        name, info->name, est_s, timed, gflop, peak);
            cli_matmul_result r;
            if (o.baseline)
                s = bench_rounds(&o, &blas, dev, ops, cmd, &pb, sh, &blas_ran, &r,
                                 &pair[di * MAX_SIZES + si]);
            else
                s = cli_bench_matmul_size(dev, ops, cmd, &pb, o.form, o.reps, sh[0], sh[1], sh[2],
                                          &r);
            if (s != VKT_OK) break;
            double frac = r.frac_peak;
            cJSON *j = cJSON_CreateObject();
            json_shape(j, &r);
            cJSON_AddStringToObject(j, "form", form_name(o.form));
            cJSON_AddStringToObject(j, "variant", r.variant);
            cJSON_AddNumberToObject(j, "reps", o.reps);
            cJSON_AddNumberToObject(j, "median_ms", r.median_ms);
            cJSON_AddNumberToObject(j, "best_ms", r.best_ms);
            cJSON_AddNumberToObject(j, "gflops", r.gflops);
            cJSON_AddNumberToObject(j, "fraction_of_peak", frac);
            cJSON_AddNumberToObject(j, "peak_gflops_adjacent", r.peak_adjacent);
            cJSON_AddBoolToObject(j, "check_ok", r.ok);
            cJSON_AddNumberToObject(j, "check_max_err", r.max_err);
            // What the engine measured when it chose the variant (tune.c's cache).
            cJSON *jc = cJSON_AddArrayToObject(j, "candidates");
            double flop = shape_flop(r.m, r.n, r.k);
            for (int c = 0; c < r.ncand; c++) {
                cJSON *e = cJSON_CreateObject();
                cJSON_AddStringToObject(e, "variant", r.cand[c]);
                cJSON_AddNumberToObject(e, "measured_ms", r.cand_ms[c]);
                cJSON_AddNumberToObject(e, "gflops",
                                        r.cand_ms[c] > 0 ? flop / (r.cand_ms[c] * 1e6) : 0);
                cJSON_AddItemToArray(jc, e);
            }
            cJSON_AddItemToArray(jr, j);
            if (!o.json)
                printf("  %14s %-4s %-22s %10.3f %10.2f %7.1f%%  %s (worst %.2f of tolerance)\n",
                       name, form_name(o.form), r.variant, r.median_ms, r.gflops, 100 * frac,
                       r.ok ? "ok" : "WRONG", r.max_err);
            if (!o.json && r.ncand > 1 && r.cand_ms[0] > 0) {
                printf("  %14s chosen at first use from:", "");
                for (int c = 0; c < r.ncand; c++)
                    printf("%s %s %.1f", c ? "," : "", r.cand[c],
                           r.cand_ms[c] > 0 ? flop / (r.cand_ms[c] * 1e6) : 0.0);
                printf(" GFLOP/s\n");
            }
            fflush(stdout); // each size as it comes, also into a pipe
            if (!r.ok) {
                char msg[256];
                snprintf(msg, sizeof msg,
                         "matmul %ux%ux%u (%s) on %s gives wrong results "
                         "(spot check off by %.3g times the tolerance)",
                         r.m, r.n, r.k, r.variant, info->name, r.max_err);
                rc = cli_fail(msg);
                break;
            }
        }
        if (s != VKT_OK) rc = cli_fail(vkt_error());
        cli_peak_close(&pb);
        vkt_cmd_destroy(cmd);
        vkt_ops_destroy(ops);
        vkt_device_destroy(dev);
    }
    if (rc == 0 && o.baseline) rc = run_baseline(&o, &blas, pair, root, jdevs);
    free(pair);
    if (rc == 0) {
        if (o.json) {
            char *txt = cJSON_PrintUnformatted(root);
            printf("%s\n", txt);
            cJSON_free(txt);
        } else {
            // The BLAS kernel is the environment's choice when OPENBLAS_CORETYPE is set.
            bool env = o.baseline && blas.coretype_env;
            printf("reproduce: %s%s%s%s\n", env ? "OPENBLAS_CORETYPE=" : "",
                   env ? blas.coretype_env : "", env ? " " : "", command);
        }
    }
    cJSON_Delete(root);
    vkt_context_destroy(ctx);
    return rc;
}

// ---------------------------------------------------------------------------------------------

int cmd_bench(int argc, char **argv) {
    if (argc >= 1 && strcmp(argv[0], "matmul") == 0) return bench_matmul(argc - 1, argv + 1);
    if (argc >= 1 && strcmp(argv[0], "train") == 0) return cli_bench_train(argc - 1, argv + 1);
    if (argc >= 1 && strcmp(argv[0], "suite") == 0) return cli_bench_suite(argc - 1, argv + 1);
    fprintf(stderr, "vktrain bench: say what to benchmark: `vktrain bench matmul [--sizes ...]`, "
                    "`vktrain bench train [options]` or `vktrain bench suite --out FILE` "
                    "(vktrain --help)\n");
    return 2;
}
