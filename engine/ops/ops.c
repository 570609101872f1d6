// ops.c: the per-device kernel cache behind every vkt_op_* (engine/ops/ops_nn.c,
// engine/ops/matmul.c). A kernel is keyed by shader id and specialization constants and built on
// first use, so a device only compiles the variants it runs.
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "ops.h"
#include "vkt_internal.h"

#define MAX_SPEC 16

typedef struct cached_kernel {
    vkt_shader_id shader;
    uint32_t spec[MAX_SPEC];
    int nspec;
    vkt_kernel *kernel;
} cached_kernel;

struct vkt_ops {
    vkt_device *dev;
    cached_kernel *cache;
    int n, cap;
    vkt_status err;
    char err_msg[512];
};

vkt_status vkt_ops_create(vkt_device *dev, vkt_ops **out) {
    *out = calloc(1, sizeof **out);
    if (!*out) return vkt_fail(VKT_ERR_HOST_MEMORY, "out of host memory");
    (*out)->dev = dev;
    return VKT_OK;
}

void vkt_ops_destroy(vkt_ops *ops) {
    if (!ops) return;
    for (int i = ops->n - 1; i >= 0; i--)
        vkt_kernel_destroy(ops->cache[i].kernel);
    free(ops->cache);
    free(ops);
}

vkt_device *vkt_ops_device(const vkt_ops *ops) { return ops->dev; }

vkt_kernel *vkt_ops_kernel(vkt_ops *ops, vkt_shader_id shader, const uint32_t *spec, int nspec) {
    VKT_ASSERT(nspec <= MAX_SPEC);
    for (int i = 0; i < ops->n; i++) {
        cached_kernel *c = &ops->cache[i];
        if (c->nspec == nspec && c->shader == shader &&
            memcmp(c->spec, spec, (size_t)nspec * sizeof *spec) == 0)
            return c->kernel;
    }
    vkt_kernel *k = NULL;
    vkt_status s = vkt_kernel_create(ops->dev, shader, spec, nspec, &k);
    if (s != VKT_OK) {
        if (ops->err == VKT_OK) {
            ops->err = s;
            strncpy(ops->err_msg, vkt_error(), sizeof ops->err_msg - 1);
        }
        return NULL;
    }
    if (ops->n == ops->cap) {
        int cap = ops->cap ? 2 * ops->cap : 32;
        cached_kernel *c = realloc(ops->cache, (size_t)cap * sizeof *c);
        if (!c) {
            vkt_kernel_destroy(k);
            ops->err = vkt_fail(VKT_ERR_HOST_MEMORY, "out of host memory");
            return NULL;
        }
        ops->cache = c;
        ops->cap = cap;
    }
    cached_kernel *c = &ops->cache[ops->n++];
    c->shader = shader;
    memset(c->spec, 0, sizeof c->spec);
    memcpy(c->spec, spec, (size_t)nspec * sizeof *spec);
    c->nspec = nspec;
    c->kernel = k;
    return k;
}

vkt_status vkt_ops_peek(const vkt_ops *ops) { return ops->err; }

void vkt_ops_fail(vkt_ops *ops, vkt_status s, const char *message) {
    if (ops->err != VKT_OK) return; // the first failure is the one reported
    ops->err = s;
    snprintf(ops->err_msg, sizeof ops->err_msg, "%s", message);
}

vkt_status vkt_ops_status(vkt_ops *ops) {
    vkt_status s = ops->err;
    if (s != VKT_OK) vkt_fail(s, "%s", ops->err_msg);
    ops->err = VKT_OK;
    return s;
}
