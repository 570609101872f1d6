// plan.h: the memory planner. Pure arithmetic over the model and the devices' limits, shared by
// `vktrain plan` and the strategies (which refuse to start what the plan says cannot fit, with
// the plan's own words: vkt_plan_refusal): for each strategy, the bytes every device needs, by
// kind, and whether they fit.
//
// The figure is every byte the strategy holds on the device for the run (the networks' buffers,
// the single strategy's upload areas, the replicas' gradient exchange), to the byte where the
// driver allocates what is asked (lavapipe, SwiftShader). One thing is outside it: a matmul
// measuring its kernel variants (engine/ops/matmul.c) borrows scratch operands for the
// measurement from the room the limit leaves, and measures nothing where there is none.
#ifndef VKT_PLAN_H
#define VKT_PLAN_H

#include "network.h"
#include "strategy.h"

typedef struct vkt_plan_input {
    const vkt_model_desc *model;
    uint32_t batch;
    vkt_optim_desc optim;
    int ndevices;
    uint64_t limit[VKT_MAX_DEVICES]; // bytes each device may hold
    uint64_t align[VKT_MAX_DEVICES]; // storage-buffer offset alignment of each device
    // The largest single allocation of each device (maxMemoryAllocationSize); 0: no bound.
    uint64_t max_alloc[VKT_MAX_DEVICES];
    // single: the device's memory is not mapped (a discrete GPU), so each batch goes through two
    // host-visible upload areas, which count against its limit as all its allocations do.
    bool upload_areas[VKT_MAX_DEVICES];
    // replicated: shares (all 0: equal); balance[0] < 0: measured when the run starts (--balance
    // auto), so that any replica may be given the whole batch.
    float balance[VKT_MAX_DEVICES];
    int split[VKT_MAX_DEVICES]; // layers: layer counts per stage (all 0: automatic)
    int micro_batches;
    vkt_schedule schedule;
    // layers: devices per stage (layers,tensor when > 1; 0 or 1: one); the stages' groups are
    // consecutive devices
    int tensor_size;
    // replicated: each device keeps the optimizer state of its shard of the parameters only
    // (--shard-optimizer, ZeRO stage 1; vkt_plan_optim_shards)
    bool shard_optimizer;
} vkt_plan_input;

typedef struct vkt_plan {
    vkt_strategy_kind kind;
    int ndevices;
    bool possible; // the strategy applies (e.g. layers needs >= 2 devices and layers)
    bool fits;     // every device fits (device_fits)
    vkt_net_memory need[VKT_MAX_DEVICES];         // .total is what the device needs
    uint64_t largest[VKT_MAX_DEVICES];            // its largest single allocation
    bool device_fits[VKT_MAX_DEVICES];            // need.total <= limit, largest <= max_alloc
    uint32_t rows[VKT_MAX_DEVICES];               // replicated: rows per device for a full batch
    uint32_t net_rows[VKT_MAX_DEVICES];           // replicated: the rows each replica is built for
    int lo[VKT_MAX_DEVICES], hi[VKT_MAX_DEVICES]; // layers: each device's stage
    double compute_share[VKT_MAX_DEVICES]; // fraction of the model's multiply-adds per device
    char note[512];                        // why it does not apply or fit
    bool shard_optimizer;                  // replicated with its optimizer state sharded
    // tensor: the reductions of one training step (forward and backward).
    int reductions;
    // tensor: the bytes each device moves for its reductions per step (its part to the host and
    // the sum back: 2 x the part's bytes each).
    // replicated: bytes each device moves to and from the host communicator per step (what
    // vkt_device_stats.bytes_moved counts), P being the packed gradients in device 0's layout
    // (its parameters' bytes) and P_d the bytes of device d's shard in that layout:
    //   all-reduce       2 P         (gradients out, their sums back)
    //   shard-optimizer  2 P + P_d   (gradients out, the shard's sums back, the shard's updated
    //                                 parameters out, every other shard's parameters back)
    // A ring over n processes would send 2 (n-1)/n P per device either way (reduce-scatter plus
    // all-gather is an all-reduce's traffic); ZeRO-1 moves parameters where plain moves sums.
    uint64_t comm_bytes[VKT_MAX_DEVICES];
} vkt_plan;

// Rows of each device for a batch of B under the given shares (all <= 0: equal): proportional,
// remainders to the largest fractions, ties to the lower index (deterministic).
void vkt_plan_shard_rows(const float *share, int n, uint32_t B, uint32_t *rows);
void vkt_plan_single(const vkt_plan_input *in, vkt_plan *out);
void vkt_plan_replicated(const vkt_plan_input *in, vkt_plan *out);
// Manual split when in->split is given, otherwise the contiguous cut that minimises the largest
// stage's compute with every stage fitting its device. With in->tensor_size T > 1
// (layers,tensor): ndevices / T stages, stage s on devices [sT, sT + T), device sT + k holding
// rank k's copy (vkt_tensor_model) of the stage's layers and the staging of its reductions; a
// stage fits when all its devices do. Per-device figures are the device's.
void vkt_plan_layers(const vkt_plan_input *in, vkt_plan *out);
// Every device holds a slice of each weight that can be split and the whole of the rest
// (vkt_tensor_model); each runs the whole batch.
void vkt_plan_tensor(const vkt_plan_input *in, vkt_plan *out);
// Device `rank`'s copy of model m under --strategy tensor over n devices (parallel/tensor.c): in
// every sequence of layers (the model's, a residual body), a dense layer followed by another past
// elementwise layers only becomes a column split (output features [lo, hi) of the n near-equal
// parts) and a row split, with the elementwise layers between sliced; an attention layer's heads
// are split (when there are at least n); everything else stays whole. Free with vkt_model_free.
vkt_status vkt_tensor_model(const vkt_model_desc *m, int rank, int n, vkt_model_desc *out);
// For such a copy at batch B: the layers it splits, the reductions of a training step, the bytes
// of this device's part of them in all, and the largest one (the staging the strategy holds).
typedef struct vkt_tensor_comm {
    int split_layers, reductions;
    uint64_t bytes, largest;
} vkt_tensor_comm;
vkt_tensor_comm vkt_tensor_comm_of(const vkt_model_desc *split, uint32_t B);
// The same for the top-level layers [lo, hi) (a stage), whose first layer computes its input
// gradient when input_grad (the stage is not the first).
vkt_tensor_comm vkt_tensor_comm_range(const vkt_model_desc *split, int lo, int hi, bool input_grad,
                                      uint32_t B);
// The shards of a sharded optimizer (--shard-optimizer) over n devices: device d keeps the state
// of the model's parameter elements [bounds[d], bounds[d+1]) (counted over its trained tensors
// in model order; bounds has n + 1 entries, bounds[0] = 0, bounds[n] = the parameter count).
// Equal shares, each bound moved down to a multiple of align bytes into its tensor (align: the
// largest offset alignment of the devices), so that every piece of a tensor starts where a view
// may be bound on each device.
void vkt_plan_optim_shards(const vkt_model_desc *m, int n, uint64_t align, uint64_t *bounds);
// Activation slots a stage keeps: GPipe holds all M micro-batches, 1F1B at most S - s.
int vkt_plan_stage_slots(int S, int s, int M, vkt_schedule schedule);

// Sets device d's limit (mem_limit, or the device's heap when 0), alignment, largest allocation
// and upload areas in *in from what the device reports, as the strategies find them once it is
// open (for `vktrain plan`, which opens no device).
void vkt_plan_input_device(vkt_plan_input *in, int d, const vkt_device_info *info,
                           uint64_t mem_limit);
// Bytes of the single strategy's two upload areas (what upload_areas adds) for a batch.
uint64_t vkt_plan_upload_bytes(const vkt_model_desc *m, uint32_t batch, uint64_t align);
// One line saying why p does not fit, with the numbers the plan has (the first device that does
// not fit: what it needs, in bytes and MiB, by kind, and what it has) and what to do; the
// strategies fail with it and `vktrain plan` prints it. labels[d] names device d of the run
// (vkt_strategy_device_label). An empty string when p fits; p->note when it does not apply.
void vkt_plan_refusal(const vkt_plan *p, const vkt_plan_input *in, const char *const *labels,
                      char *buf, size_t size);

#endif
