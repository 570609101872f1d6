// pool.c: the pooling kinds, as torch.nn defines them, on one sample's [C, H, W]:
//   maxpool2d       nn.MaxPool2d(kernel_size, stride): [C, OH, OW], OH = (H - kh) / sh + 1 (the
//                   last rows and columns that fill no window are dropped); each output is its
//                   window's largest element, the first of equal ones in row-major order, NaN
//                   when the window holds one (PyTorch's CPU rule, also for the gradient's
//                   element: the first maximum, or the last NaN)
//   avgpool2d       nn.AvgPool2d(kernel_size, stride): the window's mean
//   global_avgpool  nn.AdaptiveAvgPool2d(1) then nn.Flatten(): [C], each plane's mean
//   keys    maxpool2d, avgpool2d: kernel_size (required), stride (default kernel_size), each a
//           whole number or [h, w]; no padding (0), dilation 1, ceil_mode False. global_avgpool:
//           none. No parameters.
//   records fwd: one kernel over the output (engine/ops/pool_ops.c); bwd (when dx is needed):
//           one kernel over the input. maxpool2d with stride == kernel_size (windows that do not
//           overlap): a unit of windows finds each one's maximum again from the input and
//           writes the window's whole input gradient (dy at the maximum, 0 elsewhere); otherwise
//           the gather form, each input element summing the output gradient of the windows it
//           belongs to (maxpool2d: whose maximum it is, found again from the input). Nothing is
//           kept besides the output (no saved indices): the input is in the slot anyway,
//           finding a window's maximum again costs kh*kw cached reads, and saved indices would
//           take as much memory per slot as the output (411 MB at a batch of 512 of 64 x 56 x
//           56).
#include <math.h>
#include <stdio.h>

#include "layer.h"
#include "pool_ops.h"
#include "vkt_internal.h"

// ---------------------------------------------------------------------------------------------
// Parsing and shapes

static vkt_status need_image(const vkt_layer_parse *p, const vkt_layer_desc *l, const char *kind) {
    if (l->in.ndim != 3) {
        char sh[128];
        vkt_shape_format(&l->in, sh, sizeof sh);
        return vkt_parse_fail(p, NULL, "%s needs an input [channels, height, width]; found %s",
                              kind, sh);
    }
    // A plane fits any device's storage-buffer range: the parser holds every layer's input and
    // output to 2^24 floats a sample (64 MiB; Vulkan guarantees a range of 128 MiB).
    return VKT_OK;
}

static vkt_status window_parse(const vkt_layer_parse *p, vkt_layer_desc *l, const char *kind) {
    VKT_TRY(need_image(p, l, kind));
    VKT_TRY(vkt_parse_pair(p, "kernel_size", true, 1, 1u << 16, "the window's [height, width]",
                           l->kernel));
    l->stride[0] = l->kernel[0];
    l->stride[1] = l->kernel[1];
    VKT_TRY(vkt_parse_pair(p, "stride", false, 1, 1u << 16, "the window's step [down, across]",
                           l->stride));
    l->padding[0] = l->padding[1] = 0;
    uint32_t C = l->in.dim[0], H = l->in.dim[1], W = l->in.dim[2];
    if (l->kernel[0] > H || l->kernel[1] > W)
        return vkt_parse_fail(p, "kernel_size",
                              "the window [%u, %u] is larger than the input's [height, width] "
                              "[%u, %u]",
                              l->kernel[0], l->kernel[1], H, W);
    l->out = (vkt_shape){
        .ndim = 3,
        .dim = {C, (H - l->kernel[0]) / l->stride[0] + 1, (W - l->kernel[1]) / l->stride[1] + 1}};
    return VKT_OK;
}

static vkt_status maxpool_parse(const vkt_layer_parse *p, vkt_layer_desc *l) {
    return window_parse(p, l, "maxpool2d");
}
static vkt_status avgpool_parse(const vkt_layer_parse *p, vkt_layer_desc *l) {
    return window_parse(p, l, "avgpool2d");
}

static vkt_status global_parse(const vkt_layer_parse *p, vkt_layer_desc *l) {
    VKT_TRY(need_image(p, l, "global_avgpool"));
    l->out = (vkt_shape){.ndim = 1, .dim = {l->in.dim[0]}};
    return VKT_OK;
}

// The op's shape for B samples.
static vkt_pool2d window_of(const vkt_layer_desc *l, uint32_t B) {
    return (vkt_pool2d){.planes = B * l->in.dim[0],
                        .h = l->in.dim[1],
                        .w = l->in.dim[2],
                        .kh = l->kernel[0],
                        .kw = l->kernel[1],
                        .sh = l->stride[0],
                        .sw = l->stride[1]};
}

// ---------------------------------------------------------------------------------------------
// Costs: per sample, a compare or an add per window element.

static void window_cost(const vkt_layer_desc *l, vkt_layer_cost *c, bool max) {
    double in = l->in_features, out = l->out_features, k = (double)l->kernel[0] * l->kernel[1];
    c->fwd_flops = out * k;
    // max finds each window's maximum again: once where windows do not overlap, else in the
    // gather, once for each of its kh*kw elements; avg adds each window's gradient into its kh*kw
    // elements.
    bool overlap = l->stride[0] != l->kernel[0] || l->stride[1] != l->kernel[1];
    c->bwd_flops = max && overlap ? out * k * k : out * k;
    c->fwd_bytes = 4 * (in + out);
    c->bwd_bytes = max ? 4 * (2 * in + out) : 4 * (in + out); // (max reads x too)
    c->saved_floats = out;
}
static void maxpool_cost(const vkt_layer_desc *l, vkt_layer_cost *c) { window_cost(l, c, true); }
static void avgpool_cost(const vkt_layer_desc *l, vkt_layer_cost *c) { window_cost(l, c, false); }

static void global_cost(const vkt_layer_desc *l, vkt_layer_cost *c) {
    c->fwd_flops = l->in_features;
    c->bwd_flops = l->in_features;
    c->fwd_bytes = 4.0 * (l->in_features + l->out_features);
    c->bwd_bytes = 4.0 * (l->in_features + l->out_features);
    c->saved_floats = l->out_features;
}

// ---------------------------------------------------------------------------------------------
// Recording

static void window_forward(vkt_rec *r, int node, vkt_pool_mode mode, const char *what) {
    const vkt_layer_desc *l = vkt_rec_node(r, node)->desc;
    vkt_pool2d s = window_of(l, r->B);
    vkt_op_pool2d_forward(r->cmd, r->ops, mode, vkt_rec_out(r, node), vkt_rec_in(r, node), &s,
                          vkt_rec_label(r, node, "fwd", what));
}

static void window_backward(vkt_rec *r, int node, vkt_pool_mode mode, const char *what) {
    if (!vkt_rec_need_dx(r, node)) return;
    const vkt_layer_desc *l = vkt_rec_node(r, node)->desc;
    vkt_pool2d s = window_of(l, r->B);
    vkt_op_pool2d_backward(r->cmd, r->ops, mode, vkt_rec_dx(r, node), vkt_rec_dy(r, node),
                           vkt_rec_in(r, node), &s, vkt_rec_label(r, node, "bwd", what));
}

static void maxpool_forward(vkt_rec *r, int node) {
    window_forward(r, node, VKT_POOL_MAX, "maxpool2d");
}
static void maxpool_backward(vkt_rec *r, int node) {
    window_backward(r, node, VKT_POOL_MAX, "maxpool2d");
}
static void avgpool_forward(vkt_rec *r, int node) {
    window_forward(r, node, VKT_POOL_AVG, "avgpool2d");
}
static void avgpool_backward(vkt_rec *r, int node) {
    window_backward(r, node, VKT_POOL_AVG, "avgpool2d");
}

static void global_forward(vkt_rec *r, int node) {
    const vkt_layer_desc *l = vkt_rec_node(r, node)->desc;
    vkt_op_global_avgpool_forward(r->cmd, r->ops, vkt_rec_out(r, node), vkt_rec_in(r, node),
                                  r->B * l->in.dim[0], l->in.dim[1] * l->in.dim[2],
                                  vkt_rec_label(r, node, "fwd", "global_avgpool"));
}

static void global_backward(vkt_rec *r, int node) {
    if (!vkt_rec_need_dx(r, node)) return;
    const vkt_layer_desc *l = vkt_rec_node(r, node)->desc;
    vkt_op_global_avgpool_backward(r->cmd, r->ops, vkt_rec_dx(r, node), vkt_rec_dy(r, node),
                                   r->B * l->in.dim[0], l->in.dim[1] * l->in.dim[2],
                                   vkt_rec_label(r, node, "bwd", "global_avgpool"));
}

// ---------------------------------------------------------------------------------------------
// Reference, in double precision: a scatter where the kernels gather.

// The index in the plane of the maximum of the window at (oh, ow): PyTorch's CPU scan (an
// element replaces the current one when it is larger or NaN).
static uint64_t ref_argmax(const vkt_layer_desc *l, const double *plane, uint32_t oh, uint32_t ow) {
    uint32_t W = l->in.dim[2];
    uint64_t at = (uint64_t)oh * l->stride[0] * W + (uint64_t)ow * l->stride[1];
    double m = -INFINITY;
    for (uint32_t a = 0; a < l->kernel[0]; a++)
        for (uint32_t b = 0; b < l->kernel[1]; b++) {
            uint64_t j = ((uint64_t)oh * l->stride[0] + a) * W + (uint64_t)ow * l->stride[1] + b;
            if (plane[j] > m || isnan(plane[j])) {
                m = plane[j];
                at = j;
            }
        }
    return at;
}

static void window_ref_forward(vkt_ref *r, const vkt_layer_desc *l, const double *x, double *y,
                               bool max) {
    uint64_t planes = (uint64_t)vkt_ref_batch(r) * l->in.dim[0];
    uint32_t W = l->in.dim[2], OH = l->out.dim[1], OW = l->out.dim[2];
    uint64_t in = (uint64_t)l->in.dim[1] * W, out = (uint64_t)OH * OW;
    for (uint64_t pl = 0; pl < planes; pl++) {
        const double *xp = x + pl * in;
        for (uint32_t oh = 0; oh < OH; oh++)
            for (uint32_t ow = 0; ow < OW; ow++) {
                double v = 0;
                if (max) {
                    v = xp[ref_argmax(l, xp, oh, ow)];
                } else {
                    for (uint32_t a = 0; a < l->kernel[0]; a++)
                        for (uint32_t b = 0; b < l->kernel[1]; b++)
                            v += xp[((uint64_t)oh * l->stride[0] + a) * W +
                                    (uint64_t)ow * l->stride[1] + b];
                    v /= (double)l->kernel[0] * l->kernel[1];
                }
                y[pl * out + (uint64_t)oh * OW + ow] = v;
            }
    }
}

static void window_ref_backward(vkt_ref *r, const vkt_layer_desc *l, const double *x,
                                const double *dy, double *dx, bool max) {
    uint64_t planes = (uint64_t)vkt_ref_batch(r) * l->in.dim[0];
    uint32_t W = l->in.dim[2], OH = l->out.dim[1], OW = l->out.dim[2];
    uint64_t in = (uint64_t)l->in.dim[1] * W, out = (uint64_t)OH * OW;
    double k = (double)l->kernel[0] * l->kernel[1];
    for (uint64_t pl = 0; pl < planes; pl++)
        for (uint32_t oh = 0; oh < OH; oh++)
            for (uint32_t ow = 0; ow < OW; ow++) {
                double d = dy[pl * out + (uint64_t)oh * OW + ow];
                if (max) {
                    dx[pl * in + ref_argmax(l, x + pl * in, oh, ow)] += d;
                    continue;
                }
                for (uint32_t a = 0; a < l->kernel[0]; a++)
                    for (uint32_t b = 0; b < l->kernel[1]; b++)
                        dx[pl * in + ((uint64_t)oh * l->stride[0] + a) * W +
                           (uint64_t)ow * l->stride[1] + b] += d / k;
            }
}

static void maxpool_ref_forward(vkt_ref *r, const vkt_layer_desc *l, double *const *p,
                                const double *x, double *y) {
    (void)p;
    window_ref_forward(r, l, x, y, true);
}
static void avgpool_ref_forward(vkt_ref *r, const vkt_layer_desc *l, double *const *p,
                                const double *x, double *y) {
    (void)p;
    window_ref_forward(r, l, x, y, false);
}
static void maxpool_ref_backward(vkt_ref *r, const vkt_layer_desc *l, double *const *p,
                                 double *const *g, const double *x, const double *y,
                                 const double *dy, double *dx) {
    (void)p, (void)g, (void)y;
    window_ref_backward(r, l, x, dy, dx, true);
}
static void avgpool_ref_backward(vkt_ref *r, const vkt_layer_desc *l, double *const *p,
                                 double *const *g, const double *x, const double *y,
                                 const double *dy, double *dx) {
    (void)p, (void)g, (void)y;
    window_ref_backward(r, l, x, dy, dx, false);
}

static void global_ref_forward(vkt_ref *r, const vkt_layer_desc *l, double *const *p,
                               const double *x, double *y) {
    (void)p;
    uint64_t planes = (uint64_t)vkt_ref_batch(r) * l->in.dim[0];
    uint64_t hw = (uint64_t)l->in.dim[1] * l->in.dim[2];
    for (uint64_t pl = 0; pl < planes; pl++) {
        double s = 0;
        for (uint64_t j = 0; j < hw; j++)
            s += x[pl * hw + j];
        y[pl] = s / (double)hw;
    }
}

static void global_ref_backward(vkt_ref *r, const vkt_layer_desc *l, double *const *p,
                                double *const *g, const double *x, const double *y,
                                const double *dy, double *dx) {
    (void)p, (void)g, (void)x, (void)y;
    uint64_t planes = (uint64_t)vkt_ref_batch(r) * l->in.dim[0];
    uint64_t hw = (uint64_t)l->in.dim[1] * l->in.dim[2];
    for (uint64_t pl = 0; pl < planes; pl++)
        for (uint64_t j = 0; j < hw; j++)
            dx[pl * hw + j] += dy[pl] / (double)hw;
}

// ---------------------------------------------------------------------------------------------
// PyTorch

static int maxpool_torch(const vkt_layer_desc *l, char *buf, size_t size) {
    return snprintf(buf, size, "nn.MaxPool2d(kernel_size=(%u, %u), stride=(%u, %u))", l->kernel[0],
                    l->kernel[1], l->stride[0], l->stride[1]);
}
static int avgpool_torch(const vkt_layer_desc *l, char *buf, size_t size) {
    return snprintf(buf, size, "nn.AvgPool2d(kernel_size=(%u, %u), stride=(%u, %u))", l->kernel[0],
                    l->kernel[1], l->stride[0], l->stride[1]);
}
// A Sequential without parameters: the state_dict's names are unaffected.
static int global_torch(const vkt_layer_desc *l, char *buf, size_t size) {
    (void)l;
    return snprintf(buf, size, "nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten())");
}

static const char *const window_keys[] = {"kernel_size", "stride", NULL};

VKT_LAYER_TYPE(maxpool2d, .keys = window_keys, .parse = maxpool_parse, .cost = maxpool_cost,
               .forward = maxpool_forward, .backward = maxpool_backward,
               .ref_forward = maxpool_ref_forward, .ref_backward = maxpool_ref_backward,
               .torch = maxpool_torch);
VKT_LAYER_TYPE(avgpool2d, .keys = window_keys, .parse = avgpool_parse, .cost = avgpool_cost,
               .forward = avgpool_forward, .backward = avgpool_backward,
               .ref_forward = avgpool_ref_forward, .ref_backward = avgpool_ref_backward,
               .torch = avgpool_torch);
VKT_LAYER_TYPE(global_avgpool, .parse = global_parse, .cost = global_cost,
               .forward = global_forward, .backward = global_backward,
               .ref_forward = global_ref_forward, .ref_backward = global_ref_backward,
               .torch = global_torch);
