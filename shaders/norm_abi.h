// norm_abi.h: the push constants of the normalisation kernels (shaders/norm_*.comp), shared by
// engine/ops/norm_ops.c and the shaders, and the constants both sides size things by.
//
// batchnorm2d over x[B, C, HW] (one sample is C planes of HW floats): the batch statistics are
// reduced in parts of `spp` samples per channel (one workgroup per channel and part, partial
// mean and M2 by two passes), then combined per channel in a fixed order (Chan's formula), so
// the result does not depend on timing. layernorm over x[R, D]: one row per invocation or per
// team of lanes (rows.glsl); its weight and bias gradients are column sums over parts of
// VKT_LN_ROWS_PER_PART rows, added in a fixed order. Nothing uses float atomics.
#ifndef VKT_NORM_ABI_H
#define VKT_NORM_ABI_H

#include "vkt_abi.h"

// Per-channel coefficients in the batchnorm scratch (floats per channel): the forward's mean,
// gamma*invstd and beta; the backward's mean, invstd, mean(dy) and mean(dy*xhat).
#define VKT_BN_COEF 4
// Rows of one part of layernorm's column sums (a power of two >= 64: every slice of rows is a
// whole number of parts and starts on a 256-byte boundary, Vulkan's largest storage offset
// alignment).
#define VKT_LN_ROWS_PER_PART 64

// norm_bn_stats: partial (mean, M2) of the parts [part0, part0 + nparts) of every channel, from
// the samples of this slice (x bound from `base` words before the slice's first sample).
// norm_bn_bwd_sums: partial (sum dy, sum dy*xhat) the same way. norm_bn_finish and
// norm_bn_bwd_finish: one invocation per channel over all parts. norm_bn_apply and norm_bn_dx:
// elementwise over `n` floats starting at element e0 of a sample (e0 < C*HW).
VKT_STRUCT(vkt_bn_push) {
    VKT_U32 n;      // elementwise: floats in this dispatch; else unused (0)
    VKT_U32 C;      // channels
    VKT_U32 HW;     // floats per channel plane
    VKT_U32 B;      // samples in all (finish kernels) or in this slice (partial kernels)
    VKT_U32 spp;    // samples per part
    VKT_U32 parts;  // parts per channel in all
    VKT_U32 part0;  // partial kernels: the first part of this slice
    VKT_U32 nparts; // partial kernels: parts in this slice
    VKT_U32 base;   // partial kernels: words between the bound offset and the slice's start
    VKT_U32 e0;     // elementwise: the element of a sample this dispatch starts at
    VKT_U32 train;  // norm_bn_finish: 1 batch statistics (and the running update), 0 running
    VKT_F32 eps;
    VKT_F32 momentum;
};

// norm_ln_fwd, norm_ln_bwd: R rows of D in this dispatch (rows.glsl layout); norm_ln_bwd_cols:
// parts [part0, part0 + ceil(R / VKT_LN_ROWS_PER_PART)) of this slice; norm_ln_bwd_finish: one
// invocation per column over `parts` parts.
VKT_STRUCT(vkt_ln_push) {
    VKT_U32 R;
    VKT_U32 D;
    VKT_U32 part0;
    VKT_U32 parts;
    VKT_F32 eps;
};

#endif
