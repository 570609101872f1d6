// attn_ops.h: the fused core of causal self-attention (engine/ops/attn_ops.c, shaders/attn_*.comp):
// per sample and head, softmax(q k^T / sqrt(D) under a causal mask) v, and its backward, without
// the T x T scores ever in memory (FlashAttention-2's online softmax forward; the backward
// recomputes the scores from q, k and the forward's logsumexp). The products around it (the in
// and out projections) are the engine's matmuls, recorded by the layer kind
// (engine/nn/layers/attention.c).
//
// Layouts (D = C / heads; shaders/attn_abi.h):
//   qkv, dqkv [B*T, 3C]  q, k and v of head h in columns h*D, C + h*D, 2C + h*D (PyTorch's
//                        in_proj order)
//   o, do     [B*T, C]   head h's output (its gradient) in columns h*D .. h*D + D - 1
//   lse       [B, heads, T]  the logsumexp of each query row's scores
//   stats     [B, heads, T, 4]  (lse, delta, 0, 0) per row, for the backward
// Each op records one dispatch, or one per chunk of samples where a view is larger than the
// device's maxStorageBufferRange; no barrier. Views smaller than their shapes are asserted.
//
// Not installed: the layer kind is its only caller besides the tests.
#ifndef VKT_ATTN_OPS_H
#define VKT_ATTN_OPS_H

#include <stdbool.h>
#include <stdint.h>

#include "ops.h"

// o[B*T, C] = the heads' attention outputs and lse[B, heads, T] = the logsumexp of each query
// row's scaled, masked scores, from qkv[B*T, 3C]. Overwrites o and lse. Needs C % heads == 0 and
// C / heads <= VKT_ATTN_MAX_D (shaders/attn_abi.h).
void vkt_op_attn_forward(vkt_cmd *cmd, vkt_ops *ops, vkt_view o, vkt_view lse, vkt_view qkv,
                         uint32_t B, uint32_t T, uint32_t C, uint32_t heads, const char *label);
// stats[B, heads, T, 4] = (lse, delta, 0, 0) per row, delta = the sum over head h's D columns of
// do * o (FlashAttention-2's D_i): the backward's first step (a barrier goes between it and
// vkt_op_attn_backward). Overwrites stats.
void vkt_op_attn_stats(vkt_cmd *cmd, vkt_ops *ops, vkt_view stats, vkt_view o, vkt_view dout,
                       vkt_view lse, uint32_t B, uint32_t T, uint32_t C, uint32_t heads,
                       const char *label);
// dqkv[B*T, 3C] = the gradient of the core's input given do[B*T, C], from qkv and the rows'
// stats (vkt_op_attn_stats). Overwrites dqkv (an activation gradient, not accumulated).
void vkt_op_attn_backward(vkt_cmd *cmd, vkt_ops *ops, vkt_view dqkv, vkt_view qkv, vkt_view dout,
                          vkt_view stats, uint32_t B, uint32_t T, uint32_t C, uint32_t heads,
                          const char *label);

// How the kernels run a shape on this device: whether they read the streamed rows as texels
// (lavapipe, C and D multiples of 4) or through shared memory; rows per workgroup (queries in the
// forward, queries or keys in the backward); rows per invocation in the forward and the backward;
// rows of the streamed block (keys, or queries) in the forward and the backward. For logs and
// the tests.
typedef struct vkt_attn_tile {
    bool texel;
    uint32_t rows, fwd_r, bwd_r, fwd_tile, bwd_tile;
} vkt_attn_tile;
vkt_attn_tile vkt_attn_tile_for(vkt_ops *ops, uint32_t T, uint32_t C, uint32_t heads);

#endif
