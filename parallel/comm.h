// comm.h: the communicator behind gradient reduction. A communicator joins `size` ranks; this
// process drives `local` of them (its devices) and hands their buffers over together. The
// in-process backend (comm.c) sums the local buffers on the host; a multi-process backend (MPI)
// would implement the same three calls by summing locally, then MPI_Allreduce across processes,
// then copying the result back to every local buffer.
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
const vkt_comm_stats *vkt_comm_get_stats(const vkt_comm *c);

#endif
