// pool_ops.h: the pooling ops (engine/ops/pool_ops.c, shaders/pool_*.comp) behind the maxpool2d,
// avgpool2d and global_avgpool layer kinds (engine/nn/layers/pool.c). Each records its dispatches
// only (no barrier): one, or one per slice of whole planes when a view is larger than the
// device's maxStorageBufferRange (the slices are independent, but for a barrier between two
// whose bindings overlap). A plane is one (sample, channel)
// image, row-major; B samples of C channels are B * C planes. Shapes are checked against the views
// with VKT_ASSERT. Not here: padding, dilation and ceil_mode (the kinds take none).
#ifndef VKT_POOL_OPS_H
#define VKT_POOL_OPS_H

#include "ops.h"

typedef enum vkt_pool_mode {
    VKT_POOL_MAX, // nn.MaxPool2d: the largest element; ties to the first in row-major order, NaN
                  // propagates (its gradient goes to the window's last NaN), as PyTorch's CPU
                  // kernel
    VKT_POOL_AVG, // nn.AvgPool2d: the mean of the window
} vkt_pool_mode;

// Planes of h x w pooled by kh x kw windows at strides sh, sw into oh x ow,
// oh = (h - kh) / sh + 1, ow = (w - kw) / sw + 1 (the last rows and columns that fill no window
// are dropped).
typedef struct vkt_pool2d {
    uint32_t planes, h, w;
    uint32_t kh, kw, sh, sw;
} vkt_pool2d;

// The output size of one plane, oh * ow.
uint32_t vkt_pool2d_out_plane(const vkt_pool2d *s);

// y[planes, oh, ow] = max or mean of each window of x[planes, h, w].
void vkt_op_pool2d_forward(vkt_cmd *cmd, vkt_ops *ops, vkt_pool_mode mode, vkt_view y, vkt_view x,
                           const vkt_pool2d *s, const char *label);
// dx[planes, h, w] = the sum over the windows holding each element of dy[planes, oh, ow] (max:
// over the windows whose maximum it is, found again from x, the forward's input; avg: divided by
// kh * kw; x unused). Overwrites dx, every element (0 outside every window). Max over windows
// that do not overlap (stride == kernel) finds each window's maximum once and writes its whole
// window; otherwise each element gathers from the windows that hold it.
void vkt_op_pool2d_backward(vkt_cmd *cmd, vkt_ops *ops, vkt_pool_mode mode, vkt_view dx,
                            vkt_view dy, vkt_view x, const vkt_pool2d *s, const char *label);
// y[planes] = the mean of each plane of x[planes, hw] (a team of lanes per plane where hw is
// large and the device has subgroup shuffles).
void vkt_op_global_avgpool_forward(vkt_cmd *cmd, vkt_ops *ops, vkt_view y, vkt_view x,
                                   uint32_t planes, uint32_t hw, const char *label);
// dx[planes, hw] = dy[planes] / hw, every element (overwrites dx).
void vkt_op_global_avgpool_backward(vkt_cmd *cmd, vkt_ops *ops, vkt_view dx, vkt_view dy,
                                    uint32_t planes, uint32_t hw, const char *label);

#endif
