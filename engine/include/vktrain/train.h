// train.h: a whole training run — data, model, strategy, epochs, evaluation, metrics,
// checkpoints — driven by one options struct. The CLI (engine/cli/train.c) parses flags into it
// and prints what the progress callback reports; everything else happens here.
//
// Checkpoints (safetensors): FILE holds the parameters and buffers under torch.nn.Sequential's
// names ("0.weight" [out, in], "0.bias", "1.running_mean", "1.num_batches_tracked" (I64, shape
// []), ...) so that
//   model.load_state_dict(safetensors.torch.load_file(FILE))
// works as is, with the run's position and hyper-parameters (the optimizer's and the learning-rate
// schedule's: a resumed run must ask for the same schedule) in its __metadata__. The optimizer
// state of the parameters (PyTorch's names: "<param>.momentum_buffer" / "<param>.exp_avg" /
// "<param>.exp_avg_sq"; buffers have none) goes to a sibling FILE-stem.optim-s<step>.safetensors
// that FILE's metadata names, written before FILE, so a run killed at any moment leaves a
// consistent pair: the old one or the new.
#ifndef VKT_TRAIN_H
#define VKT_TRAIN_H

#include "data.h"
#include "model.h"
#include "network.h"
#include "strategy.h"
#include "trace.h"
#include "vktrain.h"

// ---------------------------------------------------------------------------------------------
// Learning-rate schedules. The schedule steps once per optimizer step: the rate of step t
// (counted from 1) is vkt_lr_at(s, lr, t), set with vkt_strategy_set_lr before that step, and
// equals the rate torch's optimizer holds at its t-th opt.step() when the loop is
//   for batch in ...: loss.backward(); opt.step(); sched.step()
// with sched, for a warmup of W steps (W = 0: the second schedule alone, for constant none):
//   warm = LinearLR(opt, start_factor=1/(W+1), end_factor=1.0, total_iters=W)
//   constant  warm alone (W = 0: no scheduler)
//   cosine    SequentialLR(opt, [warm, CosineAnnealingLR(opt, T_max=T-W, eta_min=min_lr)],
//                          milestones=[W])
//   step      SequentialLR(opt, [warm, StepLR(opt, step_size=S, gamma=gamma)], milestones=[W])
// that is, rate(t) = lr t/(W+1) for t <= W, then with k = t-1-W: lr (constant),
// min_lr + (lr - min_lr)(1 + cos(pi k/(T-W)))/2 (cosine), lr gamma^floor(k/S) (step); T is
// the steps the cosine spans (the run's total steps unless total_steps says otherwise), so the
// last step's rate is just above min_lr. The rates are the same for SGD and AdamW (AdamW's
// decoupled weight decay is scaled by the same rate, as torch's is).

typedef enum vkt_lr_kind { VKT_LR_CONSTANT, VKT_LR_COSINE, VKT_LR_STEP } vkt_lr_kind;

typedef struct vkt_lr_schedule {
    vkt_lr_kind kind;     // zeroed: constant, no warmup (the rate of vkt_optim_desc.lr throughout)
    uint64_t warmup;      // steps of linear warmup (W)
    uint64_t step_size;   // step: steps between decays (S, at least 1)
    double gamma;         // step: the decay factor (> 0; torch's StepLR default is 0.1)
    double min_lr;        // cosine: eta_min (0 to lr)
    uint64_t total_steps; // cosine: T, the steps it spans (0: the run's total steps)
} vkt_lr_schedule;

// "constant", "cosine", "step"; NULL when kind is out of range.
const char *vkt_lr_kind_name(vkt_lr_kind kind);
// Checks a schedule for a run of run_steps steps at base rate lr, with total_steps resolved (0:
// run_steps). Fails with VKT_ERR_ARG, naming the CLI flag, when the kind is unknown, step has no
// step size or a gamma <= 0, cosine's min_lr is outside [0, lr], its total_steps is below
// run_steps (the rate would rise again) or the warmup leaves it no step.
vkt_status vkt_lr_check(const vkt_lr_schedule *s, double lr, uint64_t run_steps);
// The rate of step t (from 1) for base rate lr, s checked by vkt_lr_check and its total_steps
// resolved (not 0 for cosine).
double vkt_lr_at(const vkt_lr_schedule *s, double lr, uint64_t t);

// ---------------------------------------------------------------------------------------------
// The run

typedef struct vkt_progress {
    bool epoch_end;                  // false: a step report; true: the end of an epoch (eval done)
    int epoch, epochs;               // epoch counts from 1
    uint32_t batch, batches;         // batch in epoch (from 1) and batches per epoch
    uint64_t step;                   // global step (from 1)
    double lr;                       // the learning rate of this step (step reports)
    double loss;                     // mean loss of this step / of the epoch
    double samples_per_sec;          // training throughput so far in this run
    double eta_sec;                  // to the end of the run
    double test_loss, test_accuracy; // epoch_end only (accuracy < 0: no test set)
} vkt_progress;

typedef void (*vkt_progress_fn)(const vkt_progress *p, void *user);

// The model and the data come from files named here, or from memory. model_path wins over model;
// train_set wins over npy_x/npy_y and data_dir. The in-memory model and data sets are borrowed:
// the caller keeps them alive during the call, the run neither changes nor frees them.
//
// Text (text_paths, or no data named and a byte-level language model: input [T], output
// [T, 256] under softmax_cross_entropy, which reads VKT_DEFAULT_TEXT_DIR): training windows are
// drawn from the first nine tenths, the evaluation is on the fixed windows of the last tenth
// (data.h, "Text"); an epoch is W windows (data.h), limit_train caps W, limit_test the
// validation windows; --no-shuffle takes the training part in order. Text excludes the other
// sources. With several positions per sample (an output [T, V]) the losses are means over every
// position and the accuracy is correct positions / (samples x positions).
typedef struct vkt_train_opts {
    const char *model_path;
    const vkt_model_desc *model;      // used when model_path is NULL (vkt_model_parse makes one)
    const char *data_dir;             // MNIST layout; NULL = Fashion-MNIST from Debian
    const char *npy_x, *npy_y;        // training data from .npy instead (test set: none)
    const vkt_dataset *train_set;     // training data in memory (vkt_dataset_from_arrays)
    const vkt_dataset *test_set;      // with train_set: evaluated after every epoch; NULL = none
    const char *const *text_paths;    // text files or directories (data.h, "Text"); NULL = none
    int ntext;                        // entries of text_paths
    uint32_t limit_train, limit_test; // 0 = all (text: windows per epoch, validation windows)
    int epochs;
    uint32_t batch;
    uint64_t max_steps; // stop after this many steps of the run (0 = no limit)
    vkt_optim_desc optim;
    vkt_lr_schedule lr; // zeroed: optim.lr at every step
    uint64_t seed;
    bool shuffle;
    vkt_augment augment;        // training batches only (data.h); zeroed: none
    vkt_strategy_desc strategy; // kind, ctx, devices, mem_limit, balance, split, ...
    const char *metrics_path;   // JSON lines, NULL = none
    const char *init_path;      // start from these parameters
    const char *resume_path;    // continue this run
    // Checkpoint after every epoch and at the end, and after every save_every steps (0: at epoch
    // ends only). Every "{step}" in the name is replaced by the checkpoint's step, so that each
    // checkpoint is kept ("run-{step}.safetensors": run-500.safetensors, run-1000...); without
    // one, each replaces the last.
    const char *save_path;
    uint64_t save_every;
    vkt_trace *trace; // record the device timeline (may be NULL)
    bool skip_eval;
    vkt_progress_fn progress;
    void *progress_user;
    // Asked before every step (NULL: never): true ends the run after the step in flight, as
    // --max-steps would there (a checkpoint at the position reached when save_path is set, the
    // metrics flushed) with VKT_OK and vkt_train_result.interrupted set. The CLI sets it from
    // SIGINT and SIGTERM.
    bool (*should_stop)(void *user);
    void *should_stop_user;
} vkt_train_opts;

// The time from the start of a run to the end of its first step, in exclusive parts that add up
// to first_step_seconds (kernel builds and tuning from vkt_startup_counters, wherever they fell:
// while the strategy was made or during the step). All zero when no step ran.
typedef struct vkt_first_step {
    double first_step_seconds;   // the run's start to the end of its first step
    double data_seconds;         // reading the model and the data
    double setup_seconds;        // the strategy (devices, buffers, networks), initialization
    double kernel_build_seconds; // creating pipelines, outside tuning
    double tuning_seconds;       // measuring matmul variants (their pipelines included)
    double step_seconds;         // the rest of the first step: recording, the dispatches (and
                                 // what a driver compiles at a pipeline's first dispatch)
    double later_step_seconds;   // mean wall time of the steps after it (0: none)
    uint64_t kernels_built;      // during setup and the first step
    uint64_t kernels_ahead;      // of those, compiled ahead (vkt_startup_counters)
    uint64_t ahead_stopped;      // devices whose compiling ahead stopped (vkt_startup_counters)
    uint64_t shapes_measured;    // matmul shapes whose variants were measured (0: a warm cache)
    uint64_t variants_measured;
    uint64_t choices_cached; // matmul choices from stored measurements alone
    int64_t start_ns;        // vkt_trace_now_ns() at the start (a caller adds what came before)
} vkt_first_step;

// Splits [start, end] into f's parts: the clock (vkt_trace_now_ns) and the counters at the start,
// when the first step began and when it ended; data_ns of the time before the begin went to
// reading the model and the data. later_step_seconds is left as it was.
void vkt_first_step_split(vkt_first_step *f, int64_t start_ns, int64_t data_ns,
                          const vkt_startup_counters *at_start, int64_t begin_ns,
                          const vkt_startup_counters *at_begin, int64_t end_ns,
                          const vkt_startup_counters *at_end);

typedef struct vkt_train_result {
    double train_loss;               // mean loss of the last epoch's steps (per target)
    double test_loss, test_accuracy; // after the last epoch (accuracy -1: no test set; of
                                     // positions when samples have several)
    double samples_per_sec; // training samples over training wall time (evaluation excluded)
    int epochs;             // epochs completed in total (including resumed ones)
    uint64_t steps;         // steps in total
    double train_seconds;
    char device[1024];
    char strategy[32];
    int ndevices; // this process's devices (devices[] are theirs)
    int ranks;    // the processes of the run (1 without mpirun)
    vkt_device_stats devices[VKT_MAX_DEVICES];
    vkt_first_step first_step; // of this call's first step (a resumed run: its first here)
    bool interrupted;          // should_stop ended the run early
    char checkpoint[4096];     // the last checkpoint this call wrote ("" none)
} vkt_train_result;

// Runs the training. Fails with the status of what went wrong (bad data or model file, no model
// given, data whose features or labels do not fit the model: features, labels per sample against
// vkt_model_targets_per_sample, a label not below the classes (naming the sample and the
// position), text for a model that is not input [T] / output [T, 256]; device errors;
// VKT_ERR_NUMERIC when the run diverges: a loss or test loss that is not finite, a loss over
// VKT_DIVERGENCE_FACTOR times the run's first (and above 1), parameters that are not finite at the
// end (or at a checkpoint): the message gives the step (and the tensor) and what to change, and
// the last checkpoint written is left as it was).
//
// With resume_path and metrics_path, the metrics file is made the file the uninterrupted run
// would have at the checkpoint: its lines past the checkpoint's step (a run killed after its
// last checkpoint wrote them; the last may be torn) are cut off (ftruncate) before the run
// appends. A file that is not vktrain's metrics (a line that is not one of its JSON objects) is
// refused, VKT_ERR_FORMAT, and left as it is.
vkt_status vkt_train_run(const vkt_train_opts *o, vkt_train_result *r);

// The loss of a step over this many times the loss of the run's first step (and over 1) stops
// the run as diverged. A run that learns ends below where it began; for softmax cross-entropy,
// which starts near ln(classes), 1000x the start is a probability of e^-690 or less on the right
// class. Measured (tiny_mlp, 6000 Fashion-MNIST samples, 3 epochs): runs that learn never rose
// above their first loss; SGD at lr 1, 3 and 10 peaked at 2x, 6.8x and 320x and learned nothing
// (test accuracy 0.10), AdamW at lr 0.1 and 1 at 8.7x (accuracy 0.34) and 815x (0.10); SGD at
// lr 1e6 reaches 6e10x at its second step (and 5e31 later) with finite numbers throughout. The
// factor is far from what a useful run does, so it stops only runs that went nowhere.
#define VKT_DIVERGENCE_FACTOR 1000.0

// Evaluates a checkpoint's parameters on the test split (or on npy data when given; text: on the
// validation windows; in memory, on test_set, or on train_set when there is no test_set).
vkt_status vkt_eval_run(const vkt_train_opts *o, vkt_train_result *r);

// Writes / reads a checkpoint of the strategy's parameters and buffers (and the parameters'
// optimizer state when with_optim). Exposed for tests.
//
// A checkpoint holds the run's position and the running figures a resumed run carries on with,
// so that its metrics and its divergence check are those of the uninterrupted run.
typedef struct vkt_run_position {
    uint64_t step;  // steps done
    int epoch;      // epoch in progress (0-based)
    uint32_t batch; // next batch in that epoch
    double
        epoch_loss_sum;  // the loss summed over the targets of that epoch's steps done (batch > 0)
    uint64_t epoch_rows; // the samples of those steps
    double first_loss;   // the loss of the run's first step (0: not known, an older checkpoint)
} vkt_run_position;
vkt_status vkt_checkpoint_save(vkt_strategy *s, const char *path, const vkt_run_position *pos,
                               const vkt_train_opts *o);
vkt_status vkt_checkpoint_load(vkt_strategy *s, const char *path, bool with_optim,
                               vkt_run_position *pos);

#endif
