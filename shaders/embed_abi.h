// embed_abi.h: what the embedding kernels (shaders/embed_*.comp) and their host side
// (engine/ops/embed_ops.c) share: push constants and the sort's constants.
//
// Token ids arrive as floats (vktrain's inputs are fp32; ids are exact integers below 2^24). The
// row an id reads is the id truncated toward zero, as torch's x.long() does, and clamped into
// [0, V - 1]: a negative id or NaN reads row 0, an id >= V row V - 1, so that no id reads out of
// bounds (PyTorch raises an error instead; the forward op can count such ids, embed_ops.h). The
// double reference (engine/nn/layers/embedding.c) applies the same rule.
//
// The weight gradient dW[v] += sum of dy[p] over the positions p with id v is deterministic: the
// backward sorts the keys (row, position) of a chunk of positions by a bitonic sort (the keys are
// unique, so any sorting network gives the one sorted order), and then the first position of
// each row's run of keys sums that run's dy rows in position order, per channel.
#ifndef VKT_EMBED_ABI_H
#define VKT_EMBED_ABI_H

#include "vkt_abi.h"

// The most keys one workgroup sorts in shared memory: two per lane of at most 256 lanes. The
// host's tile is 2 * its workgroup size (a power of two, at most this).
#define VKT_EMBED_TILE_MAX 512u
// The row of a padding key (the sort works on a power of two of keys): after every real row.
#define VKT_EMBED_NO_ROW 0xffffffffu

// embed_fwd: y[p, c] = w[row(ids[p]) - r0, c] for positions p < n and channels c < C, where the
// bound w holds rows [r0, r0 + nr) of the [V, C] table (a table larger than the device's
// maxStorageBufferRange is bound a chunk of rows at a time; positions whose row is in another
// chunk are left alone). count = 1: bad[0] += the number of positions whose id is not a whole
// number in [0, V) (uint atomics). Bindings: 0 = ids[n], 1 = w[nr, C], 2 = y[n, C], 3 = bad
// (uint; any written view when count = 0: the host binds y).
VKT_STRUCT(vkt_embed_push) {
    VKT_U32 n; // positions of this dispatch
    VKT_U32 C;
    VKT_U32 V;
    VKT_U32 r0;
    VKT_U32 nr;
    VKT_U32 count;
};

// embed_keys: keys[i] = (row(ids[i]), i) for i < n and (VKT_EMBED_NO_ROW, i) for n <= i < n2.
// Bindings: 0 = ids[n], 1 = keys[n2] (uvec2).
VKT_STRUCT(vkt_embed_keys_push) {
    VKT_U32 n2; // keys: a power of two, at least the tile
    VKT_U32 n;  // positions
    VKT_U32 V;
};

// The bitonic sort of keys[n2] by (row, position), ascending. embed_sort_step: one
// compare-exchange step (k, j) over the whole array, j >= the tile (one lane per pair).
// embed_sort_local: each workgroup sorts its tile of 2 * local_size_x keys in shared memory: k = 0
// runs every stage up to the tile (a tile sorted in the direction its index gives), k > 0 the
// steps j < tile of the merge stage k. Binding: 0 = keys[n2] (uvec2, read and written).
VKT_STRUCT(vkt_embed_sort_push) {
    VKT_U32 n2;
    VKT_U32 k;
    VKT_U32 j;
};

// embed_dw: for each run of equal rows in the sorted keys[n] (of n positions) whose row is in
// [r0, r0 + nr): dw[row - r0, c] += sum over the run, in position order, of dy[position, c].
// Bindings: 0 = keys (uvec2), 1 = dy[n, C], 2 = dw[nr, C] (read and written).
VKT_STRUCT(vkt_embed_dw_push) {
    VKT_U32 n;
    VKT_U32 C;
    VKT_U32 r0;
    VKT_U32 nr;
};

// embed_pos: y[i] = x[i] + w[i % TC] for i < n: a position embedding w[T, C] (TC = T * C floats,
// the first T rows of the table) added to every sample of x[B, T, C]; the dispatch starts on a
// sample. Bindings: 0, 1 = x (float[], vec4[]); 2 = w (float[]); 3, 4 = y (float[], vec4[]).
VKT_STRUCT(vkt_embed_pos_push) {
    VKT_U32 n;
    VKT_U32 TC;
};

#endif
