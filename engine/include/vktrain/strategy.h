// strategy.h: how one training run is laid over its devices. The trainer (engine/run/train.c) only
// sees this interface: it hands each step's whole batch to vkt_strategy_step and gets the summed
// loss back; the strategy decides where the layers live, how the batch is cut, and how
// activations and gradients move between devices.
//
//   single      one device holds the whole model.
//   replicated  data parallel: every device holds the whole model, the batch is sharded, the
//               gradients are all-reduced through a communicator (parallel/comm.h) and every
//               replica applies the same update.
//   layers      model parallel: contiguous stages of layers on different devices, the batch cut
//               into micro-batches that flow through the stages (GPipe or 1F1B schedule).
//   tensor      model parallel inside layers (Megatron): each device holds a slice of every
//               weight that can be split (a dense layer's output features followed by the next
//               dense layer's input features, attention's heads) and the whole of the rest; every
//               device runs the whole batch, and the partial sums are reduced through the
//               communicator, once forward and once backward per split pair (parallel/tensor.c).
//   layers,tensor  both: stages of layers, each stage split across a group of tensor_size
//               devices (parallel/layers.c with parallel/tensor.c's groups).
//   replicated,tensor  replicas, each split across a group of tensor_size devices; the batch
//               sharded over the replicas, each rank's gradients summed with the same rank's of
//               the other replicas (parallel/tensor.c).
#ifndef VKT_STRATEGY_H
#define VKT_STRATEGY_H

#include "model.h"
#include "network.h"
#include "trace.h"
#include "vktrain.h"
#include "world.h"

#define VKT_MAX_DEVICES 16

typedef enum vkt_strategy_kind {
    VKT_STRATEGY_SINGLE,
    VKT_STRATEGY_REPLICATED,
    VKT_STRATEGY_LAYERS,
    VKT_STRATEGY_TENSOR,
    VKT_STRATEGY_LAYERS_TENSOR, // "layers,tensor": stages, each a group of tensor_size devices
    // "replicated,tensor": replicas, each a group of tensor_size devices splitting the model
    VKT_STRATEGY_REPLICATED_TENSOR,
} vkt_strategy_kind;

typedef enum vkt_schedule { VKT_SCHEDULE_GPIPE, VKT_SCHEDULE_1F1B } vkt_schedule;

typedef struct vkt_strategy_desc {
    vkt_strategy_kind kind;
    vkt_context *ctx;
    int ndevices;
    int devices[VKT_MAX_DEVICES]; // physical device indices (repeats allowed)
    uint64_t mem_limit;           // per device; 0 = the device's heap
    const vkt_model_desc *model;
    uint32_t batch; // the largest batch a step or evaluation will be given
    vkt_optim_desc optim;
    // replicated: relative share of each device in every batch; all 0 = equal
    float balance[VKT_MAX_DEVICES];
    // layers: layer counts per stage (all 0 = automatic; across ranks every stage of the run,
    // the same list on every rank), micro-batches, schedule
    int split[VKT_MAX_DEVICES];
    int micro_batches;
    vkt_schedule schedule;
    // layers: data x pipeline parallelism, P pipelines (0 or 1: one) of G / P stages each over
    // the run's G devices (pipeline p: devices [p G/P, (p+1) G/P)); each step's batch sharded
    // over them in equal shares, stage s's gradients summed with stage s's of every pipeline
    // (in pipeline order), the same update everywhere
    int pipelines;
    // layers,tensor: devices per stage, each holding a slice of the stage's split layers (the
    // stages' groups are consecutive in devices[]: stage 0 is devices 0..tensor_size-1);
    // replicated,tensor: devices per replica, the same way
    int tensor_size;
    vkt_trace *trace; // record every step's device timeline here (may be NULL)
    // single: stage batches through host upload areas even where the net's memory is mapped
    // (as on a discrete GPU), so that the CPU drivers test that path
    bool force_upload_areas;
    // replicated: each device keeps the optimizer state of its shard of the parameters only
    // (ZeRO stage 1: the gradients reduce-scattered, the updated parameters all-gathered;
    // docs/PARALLELISM.md). Refused by the other strategies.
    bool shard_optimizer;
    // The processes of the run (world.h; NULL or a world of one: this process alone). devices[]
    // are this rank's; the strategy lays the model over every rank's devices in rank order
    // (replicated: replicas; layers: stages). Every rank creates the strategy, steps, evaluates,
    // reads and writes tensors in the same order (the calls are collective); the batch handed to
    // a step or evaluation is the whole batch on every rank.
    vkt_world *world;
    // Time every dispatch, even where timestamps hold back a submit's signal until the queue runs
    // dry (vkt_device_info.timestamps_delay_signal: lavapipe), which takes replicated's overlap of
    // the buckets' reduction with the backward away there. Off: such devices run the buckets
    // whose reduction overlaps untimed, their time counted whole (busy, not split by kernel).
    // The benchmarks turn it on for their per-kernel split. single: on, or with a trace, every
    // step is timed; off, one step in 16 (the first, then every 16th), since timestamps make each
    // of lavapipe's pipeline barriers flush its binning scene (5-10% of a small model's step):
    // vkt_strategy_stats scales the timed steps' GPU times to the whole wall time.
    bool profile_kernels;
} vkt_strategy_desc;

// What a run measured per device (accumulated over steps since the last reset).
typedef struct vkt_device_stats {
    char label[300];
    double busy_ns;        // GPU time in labelled work, plus host transfers and reductions the
                           // device was not computing through (its trace row is occupied)
    double matmul_ns;      // the part of busy_ns in matmuls (dense forward, weight and input grads)
    double attention_ns;   // the part of busy_ns in the fused attention kernels (the dispatches
                           // labelled ...:attention and ...:attention_stats; the projections
                           // around them are matmuls, in matmul_ns)
    double wall_ns;        // host wall time of the steps
    double comm_ns;        // time in transfers and reductions (GPU copies and host work)
    double gpu_comm_ns;    // the GPU-copy part of comm_ns (also inside busy_ns)
    double comm_hidden_ns; // the part of comm_ns that overlapped computation
    double wait_ns;        // time waiting for other devices
    uint64_t bytes_moved;
    uint64_t peak_memory;
    uint64_t memory_limit;
    // Steps whose command stream was submitted again as recorded for an earlier step, instead of
    // being recorded (the single strategy's untimed steps, where vkt_net_step_reusable holds).
    uint64_t steps_resubmitted;
} vkt_device_stats;

typedef struct vkt_strategy vkt_strategy;

// Opens the devices and lays the model over them. Fails with VKT_ERR_DEVICE_MEMORY naming the
// device, the bytes needed and available, when the model does not fit.
vkt_status vkt_strategy_create(const vkt_strategy_desc *desc, vkt_strategy **out);
void vkt_strategy_destroy(vkt_strategy *s);
const char *vkt_strategy_name(vkt_strategy_kind kind);
// "llvmpipe" or "llvmpipe,SwiftShader Device": the devices, for reports.
const char *vkt_strategy_devices(const vkt_strategy *s);
// The name the device at position k of a run goes by wherever vktrain shows it (train's and
// plan's device lines, errors, trace rows, the viewer; docs/PARALLELISM.md, "Naming devices"):
// "#k NAME", k being its position in the run (0..n-1, the order of --device), followed by
// " (device I)", I its index in `vktrain devices`, on every device of a run in which some device
// is not at its index (one given out of order or more than once). devices: the run's device
// indices, n of them, each valid in ctx; 0 <= k < n. Writes at most size bytes, always ended.
void vkt_strategy_device_label(const vkt_context *ctx, const int *devices, int n, int k, char *buf,
                               size_t size);

// Parameters as one list, in model order, whatever the placement (checkpoints use it).
int vkt_strategy_tensor_count(const vkt_strategy *s);
const vkt_net_tensor *vkt_strategy_tensor(const vkt_strategy *s, int i);
// Across ranks both are collective (every rank calls them for the same i): read fills dst on
// rank 0 only (layers: the owning rank sends it there); write takes the same src on every rank.
vkt_status vkt_strategy_read(vkt_strategy *s, vkt_net_store store, int i, float *dst);
vkt_status vkt_strategy_write(vkt_strategy *s, vkt_net_store store, int i, const float *src);
const vkt_optim_desc *vkt_strategy_optim(const vkt_strategy *s);
bool vkt_strategy_has_store(const vkt_strategy *s, vkt_net_store store);
// Initialises every device's parameters from seed (the same on every device) and keeps seed for
// the dropout masks of every later step.
vkt_status vkt_strategy_init(vkt_strategy *s, uint64_t seed);
// The learning rate of the next steps (a schedule sets it before each step).
void vkt_strategy_set_lr(vkt_strategy *s, float lr);

// Builds the pipelines the training steps will use ahead of the first step, each device's on
// as many threads as the machine has cores (vkt_net_prebuild: where a net records its products
// plain). For a trainer, after vkt_strategy_init; a strategy that only predicts need not call it.
// Returns the first failure.
vkt_status vkt_strategy_prebuild(vkt_strategy *s);

// One training step on x[B, in] with targets (uint32 labels [B], or floats [B, out] for MSE):
// forward, loss, backward, gradient exchange, update. *loss_sum receives the sum of the
// per-sample losses (divide by B for the mean). step counts from 1.
vkt_status vkt_strategy_step(vkt_strategy *s, const float *x, const void *targets, uint32_t B,
                             uint32_t step, double *loss_sum);
// The same step in two halves, so that the host prepares the next batch while the devices run
// this one: begin submits it (x and targets may be reused as soon as it returns), then
// vkt_strategy_prefetch may hand over the next batch (copied where the next step reads it; the
// next begin must name the same x, targets and B), and end waits and gives the loss. Strategies
// that cannot split a step run it whole in begin (prefetch then does nothing).
vkt_status vkt_strategy_step_begin(vkt_strategy *s, const float *x, const void *targets, uint32_t B,
                                   uint32_t step);
vkt_status vkt_strategy_prefetch(vkt_strategy *s, const float *x, const void *targets, uint32_t B);
vkt_status vkt_strategy_step_end(vkt_strategy *s, double *loss_sum);
// Whether host work done between begin and end runs beside the devices' work. Not on a CPU
// driver: its "device" is the host's own cores, so the host's work would only take them from it
// (measured on lavapipe, 2 cores: one epoch of fashion_mlp took 6% longer with the next batch
// gathered during the step than before it).
bool vkt_strategy_host_overlaps(const vkt_strategy *s);
// Forward only: *loss_sum and *correct (rows whose argmax is the label).
vkt_status vkt_strategy_eval(vkt_strategy *s, const float *x, const void *targets, uint32_t B,
                             double *loss_sum, uint64_t *correct);

// Inference: the model's output out[B, output_features] for x[B, in], in the evaluation phase
// (running statistics, no dropout), through every stage in turn.
vkt_status vkt_strategy_predict(vkt_strategy *s, const float *x, uint32_t B, float *out);

int vkt_strategy_device_count(const vkt_strategy *s);
// Across ranks (desc.world): this process's rank and the ranks of the run; alone 0 and 1. Rank 0
// writes what the run writes (checkpoints, metrics); every rank's device calls are collective.
int vkt_strategy_rank(const vkt_strategy *s);
int vkt_strategy_ranks(const vkt_strategy *s);
// The layers [*lo, *hi) that device d holds under --strategy layers; false otherwise.
bool vkt_strategy_stage(const vkt_strategy *s, int d, int *lo, int *hi);
void vkt_strategy_stats(const vkt_strategy *s, int i, vkt_device_stats *out);
void vkt_strategy_reset_stats(vkt_strategy *s);
// Waits until every device's compile thread (vkt_context_desc.ahead) has taken what it was
// given: a benchmark calls it before its timed steps, so that a compile of a kernel the device
// has already compiled itself, still running on the other core, does not share their time.
void vkt_strategy_ahead_wait(vkt_strategy *s);
// The trace process of device i (when desc.trace was set).
int vkt_strategy_trace_pid(const vkt_strategy *s, int i);

#endif
