// comm.c: the in-process communicator: gradient buffers of the local devices summed on the host.
// The buffers are the devices' mapped exchange areas, so on CPU drivers and unified-memory GPUs
// no copy is made besides the sum itself.
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm.h"
#include "vkt_internal.h"

struct vkt_comm {
    int nlocal;
    vkt_comm_stats stats;
};

static double now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

vkt_status vkt_comm_create_local(int nlocal, vkt_comm **out) {
    *out = NULL;
    if (nlocal < 1) return vkt_fail(VKT_ERR_ARG, "a communicator needs at least one rank");
    vkt_comm *c = calloc(1, sizeof *c);
    if (!c) return vkt_fail(VKT_ERR_HOST_MEMORY, "out of host memory");
    c->nlocal = nlocal;
    *out = c;
    return VKT_OK;
}

void vkt_comm_destroy(vkt_comm *c) { free(c); }
int vkt_comm_local_ranks(const vkt_comm *c) { return c->nlocal; }
const vkt_comm_stats *vkt_comm_get_stats(const vkt_comm *c) { return &c->stats; }

vkt_status vkt_comm_allreduce_sum(vkt_comm *c, float *const *bufs, size_t n) {
    double t0 = now_ns();
    if (c->nlocal > 1) {
        float *acc = bufs[0];
        // Blocked so that the sum of a block stays in cache while it is written back.
        const size_t block = 4096;
        for (size_t b = 0; b < n; b += block) {
            size_t e = b + block < n ? b + block : n;
            for (int r = 1; r < c->nlocal; r++) {
                const float *src = bufs[r];
                for (size_t i = b; i < e; i++)
                    acc[i] += src[i];
            }
            for (int r = 1; r < c->nlocal; r++)
                for (size_t i = b; i < e; i++)
                    bufs[r][i] = acc[i];
        }
    }
    c->stats.reduce_ns += now_ns() - t0;
    c->stats.bytes += (uint64_t)n * 4 * (uint64_t)(2 * c->nlocal - 1);
    return VKT_OK;
}

vkt_status vkt_comm_reduce_scatter_sum(vkt_comm *c, float *const *bufs, size_t n,
                                       const size_t *bounds, double *sumsq) {
    double t0 = now_ns();
    if (bounds[0] != 0 || bounds[c->nlocal] != n)
        return vkt_fail(VKT_ERR_ARG, "reduce-scatter bounds [%zu, %zu] do not cover %zu elements",
                        bounds[0], bounds[c->nlocal], n);
    double sq = 0;
    for (int o = 0; o < c->nlocal; o++) {
        if (bounds[o + 1] < bounds[o])
            return vkt_fail(VKT_ERR_ARG, "reduce-scatter bounds decrease at rank %d", o);
        float *dst = bufs[o];
        // The sum in the all-reduce's order (rank 0, 1, ...), into the owner's buffer.
        for (size_t i = bounds[o]; i < bounds[o + 1]; i++) {
            float acc = bufs[0][i];
            for (int r = 1; r < c->nlocal; r++)
                acc += bufs[r][i];
            dst[i] = acc;
            sq += (double)acc * acc;
        }
    }
    if (sumsq) *sumsq += sq;
    c->stats.reduce_ns += now_ns() - t0;
    c->stats.bytes += (uint64_t)n * 4 * (uint64_t)(c->nlocal + 1);
    return VKT_OK;
}

vkt_status vkt_comm_allgather(vkt_comm *c, float *const *bufs, size_t n, const size_t *bounds) {
    double t0 = now_ns();
    if (bounds[0] != 0 || bounds[c->nlocal] != n)
        return vkt_fail(VKT_ERR_ARG, "all-gather bounds [%zu, %zu] do not cover %zu elements",
                        bounds[0], bounds[c->nlocal], n);
    for (int o = 0; o < c->nlocal; o++) {
        if (bounds[o + 1] < bounds[o])
            return vkt_fail(VKT_ERR_ARG, "all-gather bounds decrease at rank %d", o);
        size_t len = bounds[o + 1] - bounds[o];
        for (int q = 0; q < c->nlocal && len; q++)
            if (q != o) memcpy(bufs[q] + bounds[o], bufs[o] + bounds[o], len * 4);
    }
    c->stats.reduce_ns += now_ns() - t0;
    c->stats.bytes += (uint64_t)n * 4 * (uint64_t)c->nlocal;
    return VKT_OK;
}
