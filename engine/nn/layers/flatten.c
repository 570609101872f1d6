// flatten.c: flatten, as torch.nn.Flatten(): one sample's dimensions become one, [C, H, W] ->
// [C*H*W]. The output is the input itself (row-major already): no memory, no kernel, no
// barrier; the network gives it its input's buffers.
//   keys    none
#include <stdio.h>
#include <string.h>

#include "layer.h"

static vkt_status flatten_parse(const vkt_layer_parse *p, vkt_layer_desc *l) {
    (void)p;
    l->out = (vkt_shape){.ndim = 1, .dim = {(uint32_t)vkt_shape_elements(&l->in)}};
    return VKT_OK;
}

static void flatten_ref(vkt_ref *r, const vkt_layer_desc *l, double *const *p, const double *x,
                        double *y) {
    (void)p;
    memcpy(y, x, sizeof(double) * vkt_ref_batch(r) * l->in_features);
}

static void flatten_ref_backward(vkt_ref *r, const vkt_layer_desc *l, double *const *p,
                                 double *const *g, const double *x, const double *y,
                                 const double *dy, double *dx) {
    (void)p, (void)g, (void)x, (void)y;
    uint64_t n = (uint64_t)vkt_ref_batch(r) * l->in_features;
    for (uint64_t i = 0; i < n; i++)
        dx[i] += dy[i];
}

static int flatten_torch(const vkt_layer_desc *l, char *buf, size_t size) {
    (void)l;
    return snprintf(buf, size, "nn.Flatten()");
}

VKT_LAYER_TYPE(flatten, .parse = flatten_parse, .aliases_input = true, .ref_forward = flatten_ref,
               .ref_backward = flatten_ref_backward, .torch = flatten_torch);
