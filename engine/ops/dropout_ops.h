// dropout_ops.h: the dropout op (engine/ops/dropout_ops.c, shaders/dropout.comp) and its mask on
// the host. The mask is counter-based (shaders/dropout_abi.h): element e of the sample in row
// `row` of the whole batch is kept or dropped by a hash of (seed, step, node, row, e), so the
// device and the host draw the same mask, the backward recomputes it instead of keeping it, and
// a sample's mask is the same however the batch is cut into shards or micro-batches.
//
// Not installed: the layer kind (engine/nn/layers/dropout.c) is its only caller besides the tests.
#ifndef VKT_DROPOUT_OPS_H
#define VKT_DROPOUT_OPS_H

#include <stdbool.h>
#include <stdint.h>

#include "ops.h"

// One mask: what tells it apart from every other dropout mask of a run.
typedef struct vkt_dropout_mask {
    float p;       // the probability of zeroing an element, in [0, 1]
    uint64_t seed; // the run's seed (vkt_net_phase.seed)
    uint32_t step; // the step (vkt_net_phase.step)
    uint32_t node; // the layer's node id (vkt_rec_node_id, vkt_ref_node_id)
    uint32_t row0; // the whole batch's row of the op's row 0 (vkt_net_phase.row0)
} vkt_dropout_mask;

// y[B, F] = x[B, F] * keep / (1 - p), keep drawn per element from the mask (0 where dropped;
// p = 1 writes zeros). Records one dispatch, or one per slice of maxStorageBufferRange; no
// barrier. B * F and row0 + B must fit in 32 bits (asserted).
void vkt_op_dropout_forward(vkt_cmd *cmd, vkt_ops *ops, vkt_view y, vkt_view x,
                            const vkt_dropout_mask *mask, uint32_t B, uint32_t F,
                            const char *label);
// dx[B, F] = dy[B, F] * keep / (1 - p) with the forward's mask (the same *mask): overwrites dx
// (an activation gradient, not accumulated). As the forward otherwise.
void vkt_op_dropout_backward(vkt_cmd *cmd, vkt_ops *ops, vkt_view dx, vkt_view dy,
                             const vkt_dropout_mask *mask, uint32_t B, uint32_t F,
                             const char *label);

// The keep test's threshold for p: round(p * 2^24), 0 .. 2^24 (dropout_abi.h says why).
uint32_t vkt_dropout_threshold(float p);
// 1 / (1 - p) in double precision, 0 for p = 1 (nothing is kept, nothing to scale).
double vkt_dropout_scale(float p);
// The murmur state of the mask's shared words (the kernel's push constant `key`).
uint32_t vkt_dropout_mask_key(const vkt_dropout_mask *mask);
// Whether element e of whole-batch row `row` is kept.
bool vkt_dropout_kept(const vkt_dropout_mask *mask, uint32_t row, uint32_t e);

#endif
