// strategy_internal.h: what the strategies (single/replicated in parallel/strategy.c and
// parallel/replicated.c, layers in parallel/layers.c) share. Not part of the public API.
#ifndef VKT_STRATEGY_INTERNAL_H
#define VKT_STRATEGY_INTERNAL_H

#include "plan.h"
#include "strategy.h"

#define MAX_TENSORS 1024
// single: one step in this many has its dispatches timed (struct vkt_strategy.since_timed).
#define VKT_SINGLE_TIMED_EVERY 16

typedef struct strategy_vtbl {
    // A whole step, synchronously; or (step NULL) a step in two halves: submit returns once the
    // devices run it, finish waits for it; prefetch copies the next batch to where the next
    // submit reads it, while the current step runs.
    vkt_status (*step)(vkt_strategy *s, const float *x, const void *targets, uint32_t B,
                       uint32_t step, double *loss_sum);
    vkt_status (*submit)(vkt_strategy *s, const float *x, const void *targets, uint32_t B,
                         uint32_t step);
    vkt_status (*prefetch)(vkt_strategy *s, const float *x, const void *targets, uint32_t B);
    vkt_status (*finish)(vkt_strategy *s, double *loss_sum);
    vkt_status (*eval)(vkt_strategy *s, const float *x, const void *targets, uint32_t B,
                       double *loss_sum, uint64_t *correct);
    void (*destroy)(vkt_strategy *s); // frees impl (devices and nets are freed by the caller)
    // A strategy whose devices hold slices of tensors (tensor): create fills s->tensors with the
    // whole model's, and these gather and scatter them, initialise them and run inference.
    // NULL: the shared code (tensor i is local[i] of net owner[i]).
    vkt_status (*read)(vkt_strategy *s, vkt_net_store store, int i, float *dst);
    vkt_status (*write)(vkt_strategy *s, vkt_net_store store, int i, const float *src);
    vkt_status (*init)(vkt_strategy *s, uint64_t seed); // after every net's vkt_net_init
    vkt_status (*predict)(vkt_strategy *s, const float *x, uint32_t B, float *out);
} strategy_vtbl;

// A recorded step kept to be submitted again (the single strategy's untimed steps): ok while
// cmd holds one, recorded for batch size B with the optimizer settings optim.
typedef struct strategy_stream {
    vkt_cmd *cmd;
    bool ok;
    uint32_t B;
    vkt_optim_desc optim;
} strategy_stream;

struct vkt_strategy {
    vkt_strategy_desc desc;
    const strategy_vtbl *vt;
    int ndev;
    vkt_device *dev[VKT_MAX_DEVICES];
    vkt_ops *ops[VKT_MAX_DEVICES];
    vkt_cmd *cmd[VKT_MAX_DEVICES];
    vkt_net *net[VKT_MAX_DEVICES]; // one per device: a replica or a stage
    // The model's parameters as one list: tensor i lives in net[owner[i]] at local[i];
    // replicated writes go to every replica.
    int ntensors;
    vkt_net_tensor tensors[MAX_TENSORS];
    int owner[MAX_TENSORS], local[MAX_TENSORS];
    bool replicated;
    vkt_device_stats stats[VKT_MAX_DEVICES];
    int trace_pid[VKT_MAX_DEVICES];
    char devices_str[1024];
    void *impl;
    // vkt_strategy_step_begin/_end: a step is running; the loss of a synchronous one.
    bool in_step;
    double step_loss;
    // single: two host-visible upload areas (input rows, then targets) used in turn; the step
    // copies its batch from one into the net while the host fills the other.
    vkt_buffer *ring[2];
    uint64_t ring_targets_off;
    int ring_next;   // the area the next batch is written to
    bool prefetched; // the next step's batch is already in ring[pf_slot]
    int pf_slot;
    const void *pf_x, *pf_t; // what was prefetched (the next submit must name the same)
    uint32_t pf_B;
    uint32_t run_B, run_step; // the running step
    int64_t run_t0;
    // single: its steps' dispatches are timed one step in VKT_SINGLE_TIMED_EVERY (the first after
    // creation or vkt_strategy_reset_stats, then every VKT_SINGLE_TIMED_EVERY-th), or every step
    // with desc.profile_kernels or a trace. since_timed: steps since the last timed one;
    // timed_wall_ns: the host wall time of the timed steps, which stats[0]'s GPU times cover
    // (vkt_strategy_stats scales them to the whole wall time).
    int since_timed;
    double timed_wall_ns;
    // single: the untimed training step's command stream per upload area (area 0 alone where the
    // net's memory is mapped), recorded once and submitted again while the batch size and the
    // optimizer settings are those it was recorded with and the net says nothing else in it
    // changes from step to step (vkt_net_step_reusable); run_cmd: the running step's stream.
    strategy_stream reuse[2];
    vkt_cmd *run_cmd;
    uint64_t seed; // vkt_strategy_init's: dropout masks are drawn from it
    // Across ranks (desc.world of more than one rank): this rank, the ranks, and the run's devices
    // in rank order: rank r's devices are the global devices [rank_first[r], rank_first[r + 1]),
    // this rank's device d is global device gfirst + d, gdev in all. Alone: 0, 1, 0, ndev.
    vkt_world *world; // NULL alone
    int rank, nranks, gfirst, gdev;
    int rank_first[VKT_MAX_DEVICES + 1];
};

// The rank holding global device g.
int strategy_rank_of(const vkt_strategy *s, int g);

// Sets net's phase for the next recording: training at step (rows from row0 of the whole batch)
// or evaluation (train false).
void strategy_set_phase(const vkt_strategy *s, vkt_net *net, bool train, uint32_t step,
                        uint32_t row0);
// Copies device 0's buffers (running statistics) to every other replica, as DDP's
// broadcast_buffers does before each forward.
vkt_status strategy_broadcast_state(vkt_strategy *s);

// Opens desc->devices (each with the memory limit) with ops and a command stream each.
vkt_status strategy_open_devices(vkt_strategy *s);
// Registers the trace devices and calibrates their clocks (when desc->trace is set).
vkt_status strategy_trace_begin(vkt_strategy *s);
// After device d's stream finished: adds its timings to the trace and to the busy time.
vkt_status strategy_account(vkt_strategy *s, int d, int step);
vkt_status strategy_account_cmd(vkt_strategy *s, int d, vkt_cmd *cmd, int step);
// Uploads rows into a net slot's input and targets.
vkt_status strategy_upload_input(vkt_net *net, int slot, const float *x, uint32_t B);
vkt_status strategy_upload_targets(vkt_net *net, int slot, const void *targets, uint32_t B);
// Sums the losses of a slot's B samples (every position's, vkt_net_loss_rows_per_sample), read
// back from the device, in double precision.
vkt_status strategy_read_loss(vkt_net *net, int slot, uint32_t B, double *sum);

// Forward, loss and accuracy of one batch on net d (slot 0).
vkt_status strategy_eval_on(vkt_strategy *s, int d, const float *x, const void *targets, uint32_t B,
                            double *loss_sum, uint64_t *correct);

// The planner's view of the opened devices (limits, alignments) and of the desc.
void strategy_plan_input(const vkt_strategy *s, vkt_plan_input *in);

// Fails with the plan's refusal (vkt_plan_refusal, the devices named by their run labels):
// VKT_ERR_DEVICE_MEMORY, or VKT_ERR_ARG when the strategy does not apply.
vkt_status strategy_refuse(const vkt_strategy *s, const vkt_plan *p, const vkt_plan_input *in);

vkt_status strategy_replicated_create(vkt_strategy *s);
// Tensor parallelism (parallel/tensor.c), for --strategy tensor and layers with --tensor-size.
// A group: n devices [first, first + n) whose nets hold the n slices of the same layers, and the
// reductions between them (vkt_rec_allreduce), each device's thread taking part in its own.
typedef struct tp_group tp_group;
// staging_bytes: the largest reduction (tp_staging_bytes).
vkt_status tp_group_create(vkt_strategy *s, int first, int n, uint64_t staging_bytes,
                           tp_group **out);
void tp_group_destroy(tp_group *g);
// Gives rank k's net (s->net[first + k]) the group's reduction.
void tp_group_attach(tp_group *g, int k);
// Before a pass: no failure, the step the trace names.
void tp_group_reset(tp_group *g, uint32_t step);
// A rank failed: the others waiting in a reduction give up; tp_group_failed says so.
void tp_group_fail(tp_group *g, vkt_status st);
bool tp_group_failed(const tp_group *g, vkt_status *err, const char **msg);
// The largest reduction of model m split n ways at batch B, in bytes.
uint64_t tp_staging_bytes(const vkt_model_desc *m, int n, uint32_t B);
// The whole model's tensors over groups of n consecutive devices (the nets all made): fills
// s->tensors, s->owner (the first device of the group holding each) and s->local (its index in
// those nets); gathers and scatters whole tensors from and to the slices, initialises the
// slices from the whole model's values, and copies each whole tensor from a group's first device
// to the others after a step where the group mixes drivers (tp_map_sync_whole).
typedef struct tp_map tp_map;
vkt_status tp_map_create(vkt_strategy *s, int n, tp_map **out);
void tp_map_destroy(tp_map *m);
vkt_status tp_map_read(vkt_strategy *s, const tp_map *m, vkt_net_store store, int i, float *dst);
vkt_status tp_map_write(vkt_strategy *s, const tp_map *m, vkt_net_store store, int i,
                        const float *src);
vkt_status tp_map_init(vkt_strategy *s, const tp_map *m, uint64_t seed);
vkt_status tp_map_sync_whole(vkt_strategy *s, tp_map *m, uint32_t step);

vkt_status strategy_layers_create(vkt_strategy *s);
vkt_status strategy_tensor_create(vkt_strategy *s);

#endif
