// plan.h: the memory planner. Pure arithmetic over the model and the devices' limits, shared by
// `vktrain plan` and the strategies (which refuse to start what the plan says cannot fit): for
// each strategy, the bytes every device needs, by kind, and whether they fit.
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
    float balance[VKT_MAX_DEVICES];  // replicated: shares (all <= 0: equal)
    int split[VKT_MAX_DEVICES];      // layers: layer counts (all 0: automatic)
    int micro_batches;
    vkt_schedule schedule;
} vkt_plan_input;

typedef struct vkt_plan {
    vkt_strategy_kind kind;
    int ndevices;
    bool possible; // the strategy applies (e.g. layers needs >= 2 devices and layers)
    bool fits;     // every device's need <= its limit
    vkt_net_memory need[VKT_MAX_DEVICES];         // .total is what the device needs
    uint32_t rows[VKT_MAX_DEVICES];               // replicated: rows per device for a full batch
    int lo[VKT_MAX_DEVICES], hi[VKT_MAX_DEVICES]; // layers: each device's stage
    double compute_share[VKT_MAX_DEVICES]; // fraction of the model's multiply-adds per device
    char note[512];                        // why it does not apply or fit
} vkt_plan;

// Rows of each device for a batch of B under the given shares (all <= 0: equal): proportional,
// remainders to the largest fractions, ties to the lower index (deterministic).
void vkt_plan_shard_rows(const float *share, int n, uint32_t B, uint32_t *rows);
void vkt_plan_single(const vkt_plan_input *in, vkt_plan *out);
void vkt_plan_replicated(const vkt_plan_input *in, vkt_plan *out);
// Manual split when in->split is given, otherwise the contiguous cut that minimises the largest
// stage's compute with every stage fitting its device.
void vkt_plan_layers(const vkt_plan_input *in, vkt_plan *out);
// Activation slots a stage keeps: GPipe holds all M micro-batches, 1F1B at most S - s.
int vkt_plan_stage_slots(int S, int s, int M, vkt_schedule schedule);

#endif
