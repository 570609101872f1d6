// norm_abi.h: the push constants of the normalisation kernels (shaders/norm_*.comp), shared by
// engine/ops/norm_ops.c and the shaders, and the constants both sides size things by.
//
// batchnorm2d over x[B, C, HW] (one sample is C planes of HW floats): the batch statistics are
// reduced in parts of `spp` samples (and a segment of their planes) per channel, one invocation
// each, then combined per channel in a fixed order (Chan's formula), so the result does not
// depend on timing. layernorm over x[R, D]: one row per invocation or per
// team of lanes (rows.glsl); its weight and bias gradients are column sums over parts of
// VKT_LN_ROWS_PER_PART rows, added in a fixed order. Nothing uses float atomics.
#ifndef VKT_NORM_ABI_H
#define VKT_NORM_ABI_H

#include "vkt_abi.h"

// Per-channel coefficients in the batchnorm scratch (floats per channel, one vec4): the
// forward's mean, gamma*invstd and beta; the backward's mean and the three factors of dx
// (norm_bn_bwd_finish).
#define VKT_BN_COEF 4
// Rows of one part of layernorm's column sums (a power of two >= 64: every slice of rows is a
// whole number of parts and starts on a 256-byte boundary, Vulkan's largest storage offset
// alignment).
#define VKT_LN_ROWS_PER_PART 64

// The batchnorm kernels, over x[B, C, HW] (plane b * C + c is sample b's channel c). Partial
// kernels (norm_bn_stats, norm_bn_bwd_sums: norm_bn_part.glsl) take the samples
// [first, first + n) of the batch, elementwise ones (norm_bn_apply, norm_bn_dx: norm_bn_ew.glsl)
// the planes [first, first + n), bound from `base` floats before the first one's first float.
// The partial sums are per part: spp samples (fewer in the last of the parts), one segment of
// seglen floats of their planes (nseg per plane, the last shorter), one channel.
// norm_bn_finish and norm_bn_bwd_finish: one invocation per channel over its parts * nseg.
VKT_STRUCT(vkt_bn_push) {
    VKT_U32 n;
    VKT_U32 first;
    VKT_U32 C;      // channels
    VKT_U32 HW;     // floats per plane
    VKT_U32 B;      // samples in all
    VKT_U32 spp;    // samples per part
    VKT_U32 parts;  // parts of the batch: ceil(B / spp)
    VKT_U32 nseg;   // segments per plane
    VKT_U32 seglen; // floats per segment
    VKT_U32 base;
    VKT_U32 chunks; // elementwise: workgroups per plane
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
