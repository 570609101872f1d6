// pool_abi.h: the push constants of the pooling kernels (engine/ops/pool_ops.c,
// shaders/pool_*.comp), shared by C and GLSL as vkt_abi.h's are. As there, the first member is
// the number of units that one dispatch covers, here planes (one (sample, channel) image each):
// pool_ops.c slices views larger than a device's maxStorageBufferRange by whole planes. A slice's
// first plane need not start on the device's storage-buffer offset alignment (a plane of 7 x 7
// floats is 196 bytes), so each binding is bound from the aligned offset at or below it, and offK
// says how many floats into binding K the slice starts; pool_ops.c rewrites planes and the offK
// for each slice.
#ifndef VKT_POOL_ABI_H
#define VKT_POOL_ABI_H

#include "vkt_abi.h"

// pool_window (maxpool2d and avgpool2d forward), pool_max_bwd, pool_avg_bwd: planes of
// x[h, w] and y[oh, ow], windows kh x kw at strides sh, sw (no padding, no dilation), with
// oh = (h - kh) / sh + 1 and ow = (w - kw) / sw + 1.
VKT_STRUCT(vkt_pool_push) {
    VKT_U32 planes;
    VKT_U32 h;
    VKT_U32 w;
    VKT_U32 oh;
    VKT_U32 ow;
    VKT_U32 kh;
    VKT_U32 kw;
    VKT_U32 sh;
    VKT_U32 sw;
    VKT_U32 off0; // binding 0's first float: x (forward, max backward) or dy (avg backward)
    VKT_U32 off1; // binding 1's: y (forward), dy (max backward) or dx (avg backward)
    VKT_U32 off2; // binding 2's: dx (max backward)
};

// pool_nov_fwd_texel, pool_nov_bwd, pool_nov_bwd_texel (pool_nov.glsl): non-overlapping windows
// (stride == kernel; KH, KW in specialization constants), one invocation per unit of 4 windows of
// an output row: planes * upp units, upp = rows * groups units per plane, groups = ceil(ow / 4)
// units per output row, rows = oh (forward), or oh + 1 where the backward also zeroes the rows
// below the last window (h % KH != 0). inv_* are 1 / float(upp), 1 / float(groups), for the
// kernels' divisions. off0: x's first float; off1: y's (forward) or dy's; off2: dx's.
VKT_STRUCT(vkt_pool_nov_push) {
    VKT_U32 planes;
    VKT_U32 h;
    VKT_U32 w;
    VKT_U32 oh;
    VKT_U32 ow;
    VKT_U32 groups;
    VKT_U32 upp;
    VKT_F32 inv_groups;
    VKT_F32 inv_upp;
    VKT_U32 off0;
    VKT_U32 off1;
    VKT_U32 off2;
};

#define VKT_POOL_NOV_UNIT 4 // windows per unit

// pool_window's specialization constant VKT_SPEC_USER: what a window gives.
#define VKT_POOL_MODE_MAX 0 // its largest element (PyTorch's rule for ties and NaN)
#define VKT_POOL_MODE_AVG 1 // the mean of its elements

// pool_global (global_avgpool forward): y[planes] = the mean of each plane of hw elements.
VKT_STRUCT(vkt_pool_rows_push) {
    VKT_U32 planes;
    VKT_U32 hw;
    VKT_U32 off0; // x's first float
    VKT_U32 off1; // y's
};

#endif
