// embed_ops.h: the ops of the embedding layer kinds (engine/ops/embed_ops.c, shaders/embed_*.comp):
// a token embedding's gather and its deterministic weight gradient, and a position embedding's
// broadcast add. The row rule for ids that are not whole numbers in [0, V) (clamped, never read
// out of bounds) and the backward's sort are in shaders/embed_abi.h.
//
// Every op takes views that may be larger than its shape, and binds no view larger than the
// device's maxStorageBufferRange (a table, an output or a gradient larger than that is split into
// chunks of rows or positions). `range` > 0 binds at most that many bytes instead (at most the
// device's; for tests of the chunking on small shapes); 0 means the device's range.
//
// Not installed: the layer kinds (engine/nn/layers/embedding.c, position_embedding.c) are their
// only callers besides the tests.
#ifndef VKT_EMBED_OPS_H
#define VKT_EMBED_OPS_H

#include <stdint.h>

#include "ops.h"

// y[N, C] = w[row(ids[n]), :] for each of the N positions: ids[N] floats, w[V, C] the table.
// bad != NULL: bad[0] (uint32) += the number of ids that are not whole numbers in [0, V)
// (accumulates). Records one dispatch per chunk, with a barrier between chunks of table rows
// (each writes its rows' positions of y; there is one chunk unless V*C*4 exceeds the range).
void vkt_op_embedding_forward(vkt_cmd *cmd, vkt_ops *ops, vkt_view y, vkt_view ids, vkt_view w,
                              const vkt_view *bad, uint32_t N, uint32_t V, uint32_t C,
                              uint64_t range, const char *label);

// Bytes of scratch vkt_op_embedding_backward needs for N positions (its sort keys).
uint64_t vkt_embedding_backward_scratch(uint32_t N);

// dw[V, C] += sum over the positions n with row(ids[n]) = v of dy[n, :], in position order
// (accumulates; deterministic: the same bits on every run). ids[N] floats, dy[N, C]; scratch holds
// at least vkt_embedding_backward_scratch(N) bytes and is overwritten. Per chunk of positions
// (one unless N*C*4 or the keys exceed the range): a key pass, a bitonic sort of the keys
// (1 + s(s+3)/2 dispatches for 2^s tiles of keys) and the sums, with barriers between them and
// between chunks; no barrier after the last.
void vkt_op_embedding_backward(vkt_cmd *cmd, vkt_ops *ops, vkt_view dw, vkt_view dy, vkt_view ids,
                               vkt_view scratch, uint32_t N, uint32_t V, uint32_t C, uint64_t range,
                               const char *label);

// y[B, TC] = x[B, TC] + w[TC] for each sample: a position embedding's first T rows (TC = T * C
// floats of the table) added to every sample. One dispatch per chunk of samples; no barrier.
void vkt_op_pos_embedding_forward(vkt_cmd *cmd, vkt_ops *ops, vkt_view y, vkt_view x, vkt_view w,
                                  uint32_t B, uint32_t TC, const char *label);

#endif
