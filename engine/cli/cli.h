// cli.h: what the vktrain subcommands share (engine/cli/*.c). Not part of libvktrain.
#ifndef VKT_CLI_H
#define VKT_CLI_H

#include "train.h"
#include "vktrain.h"

// Prints "vktrain: <what>" on stderr and returns 1, the exit status of a failed command.
int cli_fail(const char *what);
// Creates the context the way every command does: its fields from the VKT_* variables (env.h).
vkt_status cli_open_context(vkt_context **ctx);
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
// `vktrain bench matmul|train ...` (engine/cli/bench.c).
int cmd_bench(int argc, char **argv);
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
// c = op(a) op(b), all S x S, row-major, op a transpose where asked; call only after
// cli_blas_info_get returned true.
void cli_blas_sgemm(bool trans_a, bool trans_b, uint32_t S, const float *a, const float *b,
                    float *c);
// The threads the next cli_blas_sgemm calls use (openblas_set_num_threads).
void cli_blas_set_threads(int n);

#endif
