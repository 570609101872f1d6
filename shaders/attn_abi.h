// attn_abi.h: what the causal self-attention kernels (shaders/attn_*.comp) and their host side
// (engine/ops/attn_ops.c) share: the push constants and the specialization constant ids.
//
// Layouts, for the nb samples of one dispatch (b < nb, head h < heads, D = C / heads):
//   qkv  [nb*T, 3C]   row b*T + t: q (columns h*D + d), k (C + h*D + d), v (2C + h*D + d),
//                     as nn.MultiheadAttention's in_proj gives them
//   o    [nb*T, C]    the heads' outputs before out_proj, head h in columns h*D + d
//   do   [nb*T, C]    its gradient
//   lse  [nb, heads, T]  per query row: the logsumexp of its scaled, masked scores
//   stats [nb, heads, T, 4]  per query row: (lse, delta, 0, 0), delta = rowsum(do * o) over the
//                     head's D columns (FlashAttention-2's D_i)
//   dqkv [nb*T, 3C]   the gradient of qkv
// Each array is bound from an aligned offset at or before its first element; *_base is that
// element's index in the binding (a dispatch over samples b0 .. b0+nb-1 of a larger batch starts
// wherever sample b0 starts, which need not be aligned).
#ifndef VKT_ATTN_ABI_H
#define VKT_ATTN_ABI_H

#include "vkt_abi.h"

// Specialization constants after the workgroup size (local_size_x = the rows of a block: query
// rows in attn_fwd, query or key rows in attn_bwd, rows of (sample, head, t) in attn_stats).
// D, the head size; D4 = (D + 3) / 4, the vec4s a D-row is held in; TILE, the rows of the
// shared tile (keys in attn_fwd and the query side of attn_bwd, queries in its key side); TEXEL,
// 1 where the streamed rows are read as texels (attn_ops.c says when); R, the rows each
// invocation holds (lane l of a block of local_size_x * R rows holds rows l, l + local_size_x,
// ...), so that each streamed row read is used R times.
#define VKT_ATTN_SPEC_D (VKT_SPEC_USER + 0)
#define VKT_ATTN_SPEC_D4 (VKT_SPEC_USER + 1)
#define VKT_ATTN_SPEC_TILE (VKT_SPEC_USER + 2)
#define VKT_ATTN_SPEC_TEXEL (VKT_SPEC_USER + 3)
#define VKT_ATTN_SPEC_R (VKT_SPEC_USER + 4) // rows per invocation (a block is local_size_x * R)
#define VKT_ATTN_SPEC_DU (VKT_SPEC_USER + 5) // vec4s per unrolled step of a row: divides D4

// The most floats of D: the kernels hold a few D-vectors per invocation (q and o in the forward,
// k, v, dk and dv in the key-side backward) and a tile of at least one row of K and V in shared
// memory. The layer refuses larger head sizes at parse time.
#define VKT_ATTN_MAX_D 1024

VKT_STRUCT(vkt_attn_push) {
    VKT_U32 T;     // sequence length
    VKT_U32 C;     // embedding width (heads * D)
    VKT_U32 heads; // heads
    VKT_U32 nb;    // samples in this dispatch
    VKT_F32 scale; // 1 / sqrt(D)
    VKT_U32 qkv_base;
    VKT_U32 o_base;     // o (fwd: written; stats: read)
    VKT_U32 do_base;    // do (stats, bwd)
    VKT_U32 lse_base;   // lse (fwd: written; stats: read)
    VKT_U32 stats_base; // stats (stats: written; bwd: read)
    VKT_U32 dqkv_base;
};

#endif
