// comm.h: the communicator behind gradient reduction. A communicator joins `size` ranks; this
// process drives `local` of them (its devices) and hands their buffers over together. The
// in-process backend (comm.c) sums the local buffers on the host; a multi-process backend (MPI)
// would implement the same calls by summing locally, then MPI_Allreduce (MPI_Reduce_scatter,
// MPI_Allgatherv) across processes, then copying the result back to every local buffer.
#ifndef VKT_COMM_H
#define VKT_COMM_H

#include "vktrain.h"

typedef struct vkt_comm vkt_comm;

typedef struct vkt_comm_stats {
    double reduce_ns; // host time spent reducing
    uint64_t bytes;   // bytes read and written by the reductions
} vkt_comm_stats;

// An in-process communicator over nlocal ranks (one per device of this process).
vkt_status vkt_comm_create_local(int nlocal, vkt_comm **out);
void vkt_comm_destroy(vkt_comm *c);
int vkt_comm_local_ranks(const vkt_comm *c);
// Sums n floats over every rank, in place: afterwards bufs[r][0..n) holds the same sum for every
// local rank r. The order of summation is fixed (rank 0, 1, ...), so every run and every rank
// gets bit-identical results. Blocking.
vkt_status vkt_comm_allreduce_sum(vkt_comm *c, float *const *bufs, size_t n);
// The same sums, each delivered to one rank only (the first half of a sharded optimizer's step):
// afterwards bufs[r][bounds[r]..bounds[r+1]) holds the sum over every rank of those elements,
// bit-identical to vkt_comm_allreduce_sum's; the rest of each buffer is left as it was. bounds
// has local ranks + 1 entries, non-decreasing from 0 to n. sumsq (may be NULL): the sum of the
// squares of all the sums is added to it (in double), so that a global gradient norm needs no
// second pass. Blocking.
vkt_status vkt_comm_reduce_scatter_sum(vkt_comm *c, float *const *bufs, size_t n,
                                       const size_t *bounds, double *sumsq);
// Each rank's part to every rank (the second half): afterwards every bufs[q] holds
// bufs[r][bounds[r]..bounds[r+1]) there, for every r. Blocking.
vkt_status vkt_comm_allgather(vkt_comm *c, float *const *bufs, size_t n, const size_t *bounds);
const vkt_comm_stats *vkt_comm_get_stats(const vkt_comm *c);

#endif
