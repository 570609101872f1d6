// cli.h: what the vktrain subcommands share (engine/cli/*.c). Not part of libvktrain.
#ifndef VKT_CLI_H
#define VKT_CLI_H

#include "ops.h"
#include "strategy.h"
#include "train.h"
#include "vktrain.h"

// Prints "vktrain: <what>" on stderr and returns 1, the exit status of a failed command.
int cli_fail(const char *what);
// Creates the context the way every command does: its fields from the VKT_* variables (env.h);
// for an MPI rank (world, else NULL) that shares its machine with other ranks, no compiling ahead.
vkt_status cli_open_context(const vkt_world *world, vkt_context **ctx);
// `vktrain view FILE.json` (engine/cli/view.c).
int cmd_view(int argc, char **argv);

// Options of the commands that run a model (train, eval, bench train, plan).
typedef struct cli_run_options {
    vkt_train_opts o;
    const char *device_spec;
    const char *trace_path;
    const char *balance, *split;
    const char *view_device; // the viewer's own device (--view-device)
    double exit_after;       // --exit-after: the window closes by itself
    bool json, quiet, view, nesterov, strategy_given;
    // Under mpirun: the job (NULL otherwise), --device-per-rank's list, --rank-timeout.
    vkt_world *world;
    const char *device_per_rank;
    double rank_timeout;
} cli_run_options;

// Parses the run options; returns 0, or the exit status (2) after printing why.
int cli_parse_run_options(int argc, char **argv, cli_run_options *c);
// Parses the run options and opens the context (cli_resolve_devices); on failure prints why,
// leaves nothing open and returns the exit status.
int cli_open(int argc, char **argv, cli_run_options *c, vkt_context **ctx);

// The time to the first step (engine/cli/train.c; train and bench train print it): one line
// after indent, with context_s (the CLI's start to the run's) added to the run's, later_name
// naming the steps of later_step_seconds; and the same in JSON, first_step_seconds and the object
// first_step with its parts and counts.
struct cJSON;
void cli_print_first_step(const vkt_first_step *f, double context_s, const char *indent,
                          const char *later_name);
void cli_add_first_step(struct cJSON *o, const vkt_first_step *f, double context_s);
// Opens the context and resolves --device, --balance and --split into c->o.strategy. Returns 0
// or an exit status (the message printed). The caller destroys *ctx.
int cli_resolve_devices(cli_run_options *c, vkt_context **ctx);
// "512M", "2G" -> bytes; false (message printed) when malformed.
bool cli_parse_size(const char *flag, const char *v, uint64_t *out);
// `train --view`: the training runs on a worker thread while the viewer draws on this one.
vkt_status cli_train_with_viewer(cli_run_options *c, vkt_train_result *r);

int cmd_train(int argc, char **argv);
int cmd_eval(int argc, char **argv);
int cmd_plan(int argc, char **argv);
// `vktrain model FILE [--json | --torch]` (engine/cli/model.c).
int cmd_model(int argc, char **argv);
// `vktrain generate --init CKPT ...` (engine/cli/generate.c): text from a language model.
int cmd_generate(int argc, char **argv);
// `vktrain compare A.json B.json ...` (engine/cli/compare.c): bench suite results side by side.
int cmd_compare(int argc, char **argv);
// `vktrain bench train ...` (engine/cli/bench_train.c), reached through cmd_bench.
int cli_bench_train(int argc, char **argv);

// ---- Timed training steps, as bench train and bench suite run them (engine/cli/bench_train.c).

// T when m is a language model (token ids [T] into an embedding first), else 0.
uint32_t cli_bench_lm_tokens(const vkt_model_desc *m);
// A flag's whole-number value v in [min, max] into *out; else a message naming the flag on stderr
// and false (train.c).
bool cli_parse_u64(const char *flag, const char *v, uint64_t min, uint64_t max, uint64_t *out);
// A rate as text in buf: whole numbers from 100 up, three significant digits below (GPT-2 small
// trains at 0.02 samples/s here). Returns buf.
const char *cli_rate(double v, char buf[32]);
// The batch every machine trains on: inputs x[B, in] and targets from a fixed seed (random
// values in [0, 1), or token ids in [0, V) for a language model; a class per target position,
// or one-hot rows for mse), so that no data set is needed. Both malloc'd, the caller frees them;
// VKT_ERR_HOST_MEMORY (both NULL) when out of memory.
vkt_status cli_bench_batch(const vkt_model_desc *m, uint32_t B, float **x, void **y);
// How many steps to run and time, and what they measured.
typedef struct cli_bench_steps {
    int warmup;         // untimed steps first (the first builds the kernels and tunes)
    int min_steps;      // then at least this many timed steps,
    double min_seconds; // and more until their wall time reaches this (0: min_steps),
    int max_steps;      // but never more than this many
    // Results.
    int steps;                            // timed steps run
    double wall_ns;                       // their host wall time
    double loss0;                         // the first step's mean loss per target
    int64_t first_begin_ns, first_end_ns; // the first step, on vkt_trace_now_ns's clock
    vkt_startup_counters at_first_begin, at_first_end;
} cli_bench_steps;
// Runs r's steps of s on batch (x, y) of B rows of model m, steps numbered from 1, the stats of s
// reset when the timed steps begin. Returns the first failure (message in vkt_error()).
vkt_status cli_bench_run_steps(vkt_strategy *s, const vkt_model_desc *m, const float *x,
                               const void *y, uint32_t B, cli_bench_steps *r);
// A device's step as fractions of its wall time (ds->wall_ns, else wall_ns): matmuls, the fused
// attention kernels, other kernels, communication, and the rest (host work and idle), which sum
// to 1 (host_and_idle clamped at 0 where the GPU parts overlap).
typedef struct cli_step_split {
    double matmul, attention, other_kernels, communication, host_and_idle;
} cli_step_split;
cli_step_split cli_bench_split(const vkt_device_stats *ds, double wall_ns);
// One measured point: model sd->model at batch sd->batch under strategy sd (its first device's
// figures), trained from seed on cli_bench_batch's batch with run's steps.
typedef struct cli_train_point {
    double samples_per_sec, step_ms;
    int steps;
    cli_step_split split;
    uint64_t peak_memory;      // the first device's high-water mark since the strategy opened it
    double loss0;              // the first step's mean loss per target
    double setup_seconds;      // the strategy's creation and initialisation
    double first_step_seconds; // the first warm-up step (kernels built, shapes tuned)
    uint64_t kernels_built, shapes_measured; // vkt_startup_counters over the point
} cli_train_point;
// Creates the strategy, runs the steps, destroys it. Returns VKT_OK or the failure (message in
// vkt_error(); VKT_ERR_DEVICE_MEMORY when the strategy does not fit its devices).
vkt_status cli_bench_train_point(const vkt_strategy_desc *sd, uint64_t seed, cli_bench_steps *run,
                                 cli_train_point *out);
// `vktrain bench matmul|train|suite ...` (engine/cli/bench.c).
int cmd_bench(int argc, char **argv);
// `vktrain bench suite ...` (engine/cli/suite.c), reached through cmd_bench: the fixed work of
// docs/COMPARING.md on one device, written as one JSON result file.
int cli_bench_suite(int argc, char **argv);

// ---- What bench matmul (bench.c) and bench suite share.

// peak_fma (shaders/peak_fma.glsl), ready to run: the fastest of its kernels on this device, its
// output and stream, and iters chosen so that one run takes at least 50 ms.
typedef struct cli_peak_bench {
    vkt_kernel *k;
    vkt_buffer *out;
    vkt_cmd *cmd;
    uint32_t wg, groups, iters;
    uint32_t flops;    // per invocation and iteration: 2 x chains x unroll of kernel k
    const char *shape; // kernel k's chains x unroll ("32x8")
} cli_peak_bench;
// Builds each peak_fma kernel on dev, grows its work until one run takes at least 50 ms, keeps
// the best of three runs of each, and keeps the fastest kernel for cli_peak_run: the device's
// peak fp32 FMA rate in *gflops. On failure (VKT_ERR_VULKAN also when
// the device's timestamps return nothing) the message is vkt_error()'s; close *pb either way.
vkt_status cli_peak_open(vkt_device *dev, cli_peak_bench *pb, double *gflops);
// One run of peak_fma: GFLOP/s in *gflops, and its GPU time in *ns.
vkt_status cli_peak_run(cli_peak_bench *pb, double *gflops, double *ns);
void cli_peak_close(cli_peak_bench *pb); // accepts a zeroed or half-opened *pb

// One M x N x K fp32 matmul timed by bench matmul (c[M,N] = op(a)[M,K] op(b)[K,N]).
typedef struct cli_matmul_result {
    uint32_t m, n, k;
    const char *variant;
    int ncand; // the candidates the engine measured for this shape at first use (0: none)
    const char *cand[8];
    double cand_ms[8];
    double median_ms, best_ms, gflops;
    // Each timed run's GFLOP/s over that of a peak_fma run right after it: the median (0 for the
    // CPU BLAS, which has none), and the median of those peak runs.
    double frac_peak, peak_adjacent;
    double max_err; // largest |got - ref| / (atol + rtol |ref|) of the spot check (<= 1 passes)
    bool ok;
    // The CPU BLAS only: the thread count kept (the faster), and each count's GFLOP/s.
    int threads, ntried, tried_threads[2];
    double tried_gflops[2];
} cli_matmul_result;
// Times one shape of vkt_op_matmul in form, reps runs after a warm-up (which builds the kernel and
// lets the engine choose its variant), each run followed by a peak_fma run of pb, so that the
// fraction of peak compares two runs a few milliseconds apart: this machine's speed changes by
// up to 1.5x for seconds at a time, and against the peak measured once at the start the same
// kernel read 46% and 61% of peak in two runs a minute apart. The product of the last run is
// spot-checked against double-precision dot products (r->ok, r->max_err: the caller decides what
// a wrong product means). Returns VKT_OK, or the failure (message in vkt_error()).
vkt_status cli_bench_matmul_size(vkt_device *dev, vkt_ops *ops, vkt_cmd *cmd, cli_peak_bench *pb,
                                 vkt_mm_form form, int reps, uint32_t M, uint32_t N, uint32_t K,
                                 cli_matmul_result *r);
// `vktrain advise --model FILE --batch N [--results ...] [--device-profile ...]`
// (engine/cli/advise.c): which device and strategy, from measured results and device profiles.
int cmd_advise(int argc, char **argv);

// The CPU BLAS of `bench matmul --baseline` (engine/cli/bench_blas.c).
typedef struct cli_blas_info {
    const char *library;      // "OpenBLAS"
    char version[32];         // of the library that runs ("0.3.21"), from its config string
    const char *config;       // openblas_get_config(): version, build options, kernel
    const char *corename;     // openblas_get_corename(): the core kernel it chose
    const char *coretype_env; // OPENBLAS_CORETYPE from the environment (it forces the kernel)
    int threads;              // openblas_get_num_threads(): all cores unless the environment says
    bool threads_env;         // OPENBLAS_NUM_THREADS (or OMP_NUM_THREADS) set: only that count
    int int_bits;             // width of its integer arguments (64: Debian's ILP64 build)
} cli_blas_info;
// Fills *info; false, with a one-line message in msg saying what to do, when this build has no
// BLAS or its header and library disagree. The strings belong to the library.
bool cli_blas_info_get(cli_blas_info *info, char *msg, size_t msg_size);
// c[M,N] = op(a)[M,K] op(b)[K,N], row-major and packed (a is [K,M] when trans_a, b is [N,K] when
// trans_b), op a transpose where asked; call only after cli_blas_info_get returned true.
void cli_blas_sgemm(bool trans_a, bool trans_b, uint32_t M, uint32_t N, uint32_t K, const float *a,
                    const float *b, float *c);
// The threads the next cli_blas_sgemm calls use (openblas_set_num_threads).
void cli_blas_set_threads(int n);

// The machine a benchmark ran on (engine/cli/host.c): /proc/cpuinfo, the caches as the matmul's
// grid order reads them (vkt_host_cache_bytes: sysfs, else sysconf), sysconf, uname.
typedef struct cli_host {
    char os[128], cpu[128], vendor[32], hostname[128];
    char uarch[16]; // AMD's Zen generation by family and model, else ""
    char isa[16];   // the widest x86 vector ISA the flags name: AVX-512, AVX2, AVX, SSE; else ""
    bool fma;
    int family, model, stepping; // x86 family, model, stepping; -1 where cpuinfo has none
    int cpus;                    // logical CPUs online
    long l2_bytes;               // L2 a core (0: unknown)
    long l3_bytes;               // L3 as cpu0 sees it (0: unknown)
    double mhz;                  // cpuinfo's "cpu MHz" (0: unknown)
    double memory_bytes;
} cli_host;
void cli_host_get(cli_host *h);
// One line: "AMD EPYC (Zen 3, x86 family 25 model 1), 2 logical CPUs, AVX2 + FMA, L2 512 KiB a
// core, L3 32 MiB, 2445 MHz"; returns buf.
const char *cli_host_text(const cli_host *h, char *buf, size_t size);
// The same as a JSON object (os, cpu, cpu_vendor, cpu_family, cpu_model, cpu_stepping,
// cpu_uarch, isa, fma, cpu_mhz, cores (logical CPUs), l2_bytes, l3_bytes, memory_bytes,
// hostname).
struct cJSON *cli_host_json(const cli_host *h);
// The value of the first "key<spaces>: value" line of a /proc file, or "" when none.
void cli_proc_field(const char *path, const char *key, char *out, size_t size);

#endif
