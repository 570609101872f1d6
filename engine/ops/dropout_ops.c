// dropout_ops.c: the dropout op of dropout_ops.h. Forward and backward are the same kernel
// (shaders/dropout.comp, on the ew.glsl skeleton): out = keep ? in / (1 - p) : 0, with the mask
// recomputed from its counter-based hash (shaders/dropout_abi.h) in both. Records one dispatch
// per slice of the device's maxStorageBufferRange (the slices are independent: each is told the
// element it starts at, so its rows and mask indices are those of the whole view); no barrier.
//
// It does not decide training or evaluation: the layer kind (engine/nn/layers/dropout.c) runs it
// in training only.
#include "dropout_ops.h"

#include <math.h>

#include "dropout_abi.h"
#include "vkt_internal.h"
#include "vkt_shaders.h"

// Floats per invocation of an ew.glsl shader: EW_K = 4 vec4s.
#define EW_FLOATS 16u

// ---------------------------------------------------------------------------------------------
// The mask on the host

uint32_t vkt_dropout_threshold(float p) {
    VKT_ASSERT(p >= 0.0f && p <= 1.0f);
    return (uint32_t)llround((double)p * (double)VKT_DROPOUT_ONE);
}

double vkt_dropout_scale(float p) {
    VKT_ASSERT(p >= 0.0f && p <= 1.0f);
    return p >= 1.0f ? 0.0 : 1.0 / (1.0 - (double)p);
}

uint32_t vkt_dropout_mask_key(const vkt_dropout_mask *mask) {
    return vkt_dropout_key((uint32_t)mask->seed, (uint32_t)(mask->seed >> 32), mask->step,
                           mask->node);
}

bool vkt_dropout_kept(const vkt_dropout_mask *mask, uint32_t row, uint32_t e) {
    return vkt_dropout_keep(vkt_dropout_mask_key(mask), vkt_dropout_threshold(mask->p), row, e);
}

// ---------------------------------------------------------------------------------------------
// The op

// out[B, F] = keep ? in * scale : 0, sliced so that no binding exceeds maxStorageBufferRange.
static void dropout_apply(vkt_cmd *cmd, vkt_ops *ops, vkt_view out, vkt_view in,
                          const vkt_dropout_mask *mask, uint32_t B, uint32_t F, const char *label) {
    uint64_t n = (uint64_t)B * F;
    if (n == 0) return;
    VKT_ASSERT(n <= UINT32_MAX && (uint64_t)mask->row0 + B <= UINT32_MAX);
    VKT_ASSERT(in.size >= 4 * n && out.size >= 4 * n); // the views must hold [B, F]
    const vkt_device_info *d = vkt_device_get_info(vkt_ops_device(ops));
    // 256 invocations, or fewer where the device allows fewer (ops_nn.c's rule).
    uint32_t wg = 256;
    if (d->max_workgroup_invocations < wg) wg = d->max_workgroup_invocations;
    if (d->max_workgroup_size[0] < wg) wg = d->max_workgroup_size[0];
    uint32_t spec[3] = {wg, 1, 1};
    vkt_kernel *k = vkt_ops_kernel(ops, VKT_SHADER_DROPOUT, spec, 3);
    if (!k) return; // reported by vkt_ops_status
    // Elements per slice: within the range, and a multiple of 4 floats and of the offset
    // alignment, so that every slice's offset is aligned for the float and the vec4 bindings.
    uint64_t align = d->min_storage_buffer_offset_alignment / 4;
    if (align < 4) align = 4;
    uint64_t chunk = d->max_storage_buffer_range / 4 / align * align;
    VKT_ASSERT(chunk > 0);
    vkt_dropout_push p = {.features = F,
                          .row0 = mask->row0,
                          .key = vkt_dropout_mask_key(mask),
                          .threshold = vkt_dropout_threshold(mask->p),
                          .scale = (float)vkt_dropout_scale(mask->p)};
    const uint32_t *maxc = d->max_workgroup_count;
    for (uint64_t e0 = 0; e0 < n; e0 += chunk) {
        uint64_t ne = n - e0 < chunk ? n - e0 : chunk;
        vkt_view src = {in.buffer, in.offset + 4 * e0, 4 * ne};
        vkt_view dst = {out.buffer, out.offset + 4 * e0, 4 * ne};
        vkt_view bind[4] = {src, src, dst, dst};
        p.n = (uint32_t)ne;
        p.base = (uint32_t)e0;
        uint64_t groups = (ne + (uint64_t)wg * EW_FLOATS - 1) / ((uint64_t)wg * EW_FLOATS);
        // Workgroups folded into y (ew.glsl): maxComputeWorkGroupCount[0] may be only 65535.
        uint64_t gx = groups < maxc[0] ? groups : maxc[0];
        uint64_t gy = (groups + gx - 1) / gx;
        VKT_ASSERT(gy <= maxc[1]);
        vkt_cmd_dispatch(cmd, k, bind, 4, &p, sizeof p, (uint32_t)gx, (uint32_t)gy, 1, label);
    }
}

void vkt_op_dropout_forward(vkt_cmd *cmd, vkt_ops *ops, vkt_view y, vkt_view x,
                            const vkt_dropout_mask *mask, uint32_t B, uint32_t F,
                            const char *label) {
    dropout_apply(cmd, ops, y, x, mask, B, F, label);
}

void vkt_op_dropout_backward(vkt_cmd *cmd, vkt_ops *ops, vkt_view dx, vkt_view dy,
                             const vkt_dropout_mask *mask, uint32_t B, uint32_t F,
                             const char *label) {
    dropout_apply(cmd, ops, dx, dy, mask, B, F, label);
}
