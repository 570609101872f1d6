// ops.c: the per-device kernel cache behind every vkt_op_* (engine/ops/ops_nn.c,
// engine/ops/matmul.c). A kernel is keyed by shader id and specialization constants and built on
// first use, so a device only compiles the variants it runs; a caller that knows what it will
// record can have a list built ahead on several threads (vkt_ops_prebuild).
#include <pthread.h>
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
    // vkt_ops_scratch: the current buffer, and the ones it replaced (streams recorded earlier may
    // still read them), freed with the ops.
    vkt_buffer *scratch;
    vkt_buffer **retired;
    int nretired;
    vkt_view planned; // vkt_ops_set_scratch's (buffer NULL: none)
};

vkt_status vkt_ops_create(vkt_device *dev, vkt_ops **out) {
    *out = NULL;
    VKT_TRY(vkt_matmul_check_variants(dev->ctx->matmul_variant));
    *out = calloc(1, sizeof **out);
    if (!*out) return vkt_fail(VKT_ERR_HOST_MEMORY, "out of host memory");
    (*out)->dev = dev;
    return VKT_OK;
}

void vkt_ops_destroy(vkt_ops *ops) {
    if (!ops) return;
    vkt_buffer_destroy(ops->scratch);
    for (int i = 0; i < ops->nretired; i++)
        vkt_buffer_destroy(ops->retired[i]);
    free(ops->retired);
    for (int i = ops->n - 1; i >= 0; i--)
        vkt_kernel_destroy(ops->cache[i].kernel);
    free(ops->cache);
    free(ops);
}

vkt_device *vkt_ops_device(const vkt_ops *ops) { return ops->dev; }

// Whether two kernel keys (shader and specialization constants) are the same.
static bool same_key(vkt_shader_id a, const uint32_t *spec_a, int na, vkt_shader_id b,
                     const uint32_t *spec_b, int nb) {
    return a == b && na == nb && memcmp(spec_a, spec_b, (size_t)na * sizeof *spec_a) == 0;
}

static vkt_kernel *cache_find(const vkt_ops *ops, vkt_shader_id shader, const uint32_t *spec,
                              int nspec) {
    VKT_ASSERT(nspec <= MAX_SPEC);
    for (int i = 0; i < ops->n; i++) {
        const cached_kernel *c = &ops->cache[i];
        if (same_key(c->shader, c->spec, c->nspec, shader, spec, nspec)) return c->kernel;
    }
    return NULL;
}

// Adds k to the cache, which owns it from then on (destroyed, and false, when out of memory).
static bool cache_put(vkt_ops *ops, vkt_shader_id shader, const uint32_t *spec, int nspec,
                      vkt_kernel *k) {
    if (ops->n == ops->cap) {
        int cap = ops->cap ? 2 * ops->cap : 32;
        cached_kernel *c = realloc(ops->cache, (size_t)cap * sizeof *c);
        if (!c) {
            vkt_kernel_destroy(k);
            return false;
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
    return true;
}

vkt_kernel *vkt_ops_kernel(vkt_ops *ops, vkt_shader_id shader, const uint32_t *spec, int nspec) {
    vkt_kernel *k = cache_find(ops, shader, spec, nspec);
    if (k) return k;
    vkt_status s = vkt_kernel_create(ops->dev, shader, spec, nspec, &k);
    if (s != VKT_OK) {
        if (ops->err == VKT_OK) {
            ops->err = s;
            strncpy(ops->err_msg, vkt_error(), sizeof ops->err_msg - 1);
        }
        return NULL;
    }
    if (!cache_put(ops, shader, spec, nspec, k)) {
        ops->err = vkt_fail(VKT_ERR_HOST_MEMORY, "out of host memory");
        return NULL;
    }
    return k;
}

// ---------------------------------------------------------------------------------------------
// Building ahead, on several threads

typedef struct prebuild_job {
    const vkt_kernel_key *key;
    vkt_kernel *kernel;
    vkt_status status;
    char msg[512];
} prebuild_job;

typedef struct prebuild_pool {
    vkt_device *dev;
    prebuild_job *jobs;
    int n, next;
    pthread_mutex_t mu;
} prebuild_pool;

static void *prebuild_worker(void *arg) {
    prebuild_pool *p = arg;
    for (;;) {
        pthread_mutex_lock(&p->mu);
        int i = p->next < p->n ? p->next++ : -1;
        pthread_mutex_unlock(&p->mu);
        if (i < 0) return NULL;
        prebuild_job *j = &p->jobs[i];
        j->status =
            vkt_kernel_create(p->dev, j->key->shader, j->key->spec, j->key->nspec, &j->kernel);
        // vkt_error() is this thread's: keep the message for the caller's thread.
        if (j->status != VKT_OK) snprintf(j->msg, sizeof j->msg, "%s", vkt_error());
    }
}

vkt_status vkt_ops_prebuild(vkt_ops *ops, const vkt_kernel_key *keys, int n, int threads) {
    prebuild_job *jobs = calloc(n > 0 ? (size_t)n : 1, sizeof *jobs);
    if (!jobs) return vkt_fail(VKT_ERR_HOST_MEMORY, "out of host memory");
    int todo = 0;
    for (int i = 0; i < n; i++) {
        VKT_ASSERT(keys[i].nspec <= MAX_SPEC);
        bool seen = cache_find(ops, keys[i].shader, keys[i].spec, keys[i].nspec) != NULL;
        for (int j = 0; j < todo && !seen; j++)
            seen = same_key(jobs[j].key->shader, jobs[j].key->spec, jobs[j].key->nspec,
                            keys[i].shader, keys[i].spec, keys[i].nspec);
        if (!seen) jobs[todo++].key = &keys[i];
    }
    prebuild_pool pool = {.dev = ops->dev, .jobs = jobs, .n = todo};
    pthread_mutex_init(&pool.mu, NULL);
    pthread_t tid[16];
    int nt = 0;
    if (threads > 16) threads = 16;
    // The calling thread is one of the builders; the others only where there are jobs for them.
    for (int t = 1; t < threads && t < todo; t++)
        if (pthread_create(&tid[nt], NULL, prebuild_worker, &pool) == 0) nt++;
    prebuild_worker(&pool);
    for (int t = 0; t < nt; t++)
        pthread_join(tid[t], NULL);
    pthread_mutex_destroy(&pool.mu);
    vkt_status st = VKT_OK;
    for (int i = 0; i < todo; i++) {
        prebuild_job *j = &jobs[i];
        if (j->status != VKT_OK) {
            if (st == VKT_OK) st = vkt_fail(j->status, "%s", j->msg);
            continue;
        }
        if (!cache_put(ops, j->key->shader, j->key->spec, j->key->nspec, j->kernel) && st == VKT_OK)
            st = vkt_fail(VKT_ERR_HOST_MEMORY, "out of host memory");
    }
    free(jobs);
    return st;
}

vkt_status vkt_ops_peek(const vkt_ops *ops) { return ops->err; }

void vkt_ops_set_scratch(vkt_ops *ops, const vkt_view *v) { ops->planned = v ? *v : (vkt_view){0}; }

bool vkt_ops_scratch(vkt_ops *ops, uint64_t bytes, vkt_view *zeros, vkt_view *out) {
    const uint64_t z = VKT_OPS_SCRATCH_ZEROS;
    if (ops->planned.buffer) {
        if (ops->planned.size < z + bytes) return false;
        *zeros = vkt_view_sub(ops->planned, 0, z);
        *out = vkt_view_sub(ops->planned, z, bytes);
        return true;
    }
    if (!ops->scratch || ops->scratch->size < z + bytes) {
        uint64_t size = z + bytes, old = ops->scratch ? ops->scratch->size : 0;
        if (size < 2 * old) size = 2 * old;
        vkt_buffer **r = realloc(ops->retired, (size_t)(ops->nretired + 1) * sizeof *r);
        if (!r) return false;
        ops->retired = r;
        vkt_buffer *b = NULL;
        static const float zero[VKT_OPS_SCRATCH_ZEROS / 4];
        // Refused (a device memory limit, say): no scratch; the op runs another way.
        if (vkt_buffer_create(ops->dev, size, "ops scratch", &b) != VKT_OK ||
            vkt_buffer_write(b, 0, zero, z) != VKT_OK) {
            vkt_buffer_destroy(b);
            return false;
        }
        if (ops->scratch) ops->retired[ops->nretired++] = ops->scratch;
        ops->scratch = b;
    }
    *zeros = vkt_buffer_view(ops->scratch, 0, z);
    *out = vkt_buffer_view(ops->scratch, z, bytes);
    return true;
}

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
