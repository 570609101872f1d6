// world.h: the processes of one run (MPI ranks). A run started by `mpirun -np N vktrain ...`
// joins its N processes into a world; each process drives its own devices (--device, or its
// entry of --device-per-rank) and the strategies lay the model over every rank's devices in rank
// order: rank 0's first, then rank 1's, ... (docs/PARALLELISM.md, "Across processes").
//
// Every call that waits for another rank waits at most the world's timeout: a rank that died or
// hangs makes the call fail with VKT_ERR_TIMEOUT and a message naming the rank, never a silent
// hang. The caller then ends the whole job with vkt_world_abort (the other ranks may be waiting
// on this one).
//
// The reductions here are the host's, in rank order, at rank 0, whose result is sent back: every
// rank gets the same bits, and a run whose ranks each hold one device sums as the in-process
// communicator does (parallel/comm.h). Built without MPI (VKT_HAVE_MPI undefined),
// vkt_world_init fails with a message saying how to build with it.
#ifndef VKT_WORLD_H
#define VKT_WORLD_H

#include "vktrain.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct vkt_world vkt_world;

// Whether this library was built with MPI.
bool vkt_world_available(void);
// Joins the MPI job (MPI_Init_thread, MPI_THREAD_MULTIPLE: every device's thread may send and
// receive). timeout_s: the longest a call waits for another rank (> 0). Call once per process.
vkt_status vkt_world_init(int *argc, char ***argv, double timeout_s, vkt_world **out);
// Leaves the job (MPI_Finalize) and frees w. NULL is allowed.
void vkt_world_finalize(vkt_world *w);
// Ends every rank of the job now (MPI_Abort), after a failure the others cannot see.
void vkt_world_abort(vkt_world *w, int code);
int vkt_world_rank(const vkt_world *w);
int vkt_world_size(const vkt_world *w);
// The ranks on this process's machine, this one included (they share its cores).
int vkt_world_local_size(const vkt_world *w);
double vkt_world_timeout(const vkt_world *w);
// "host:pid" of this process, for messages.
const char *vkt_world_where(const vkt_world *w);

// Point to point. tag tells messages between the same two ranks apart (0 <= tag < 2^20; tags
// from 2^20 up are the world's own). what names the message in a timeout's message ("the
// activation of micro-batch 3").
vkt_status vkt_world_send(vkt_world *w, int to, int tag, const void *buf, size_t bytes,
                          const char *what);
vkt_status vkt_world_recv(vkt_world *w, int from, int tag, void *buf, size_t bytes,
                          const char *what);
// A send that returns at once; buf stays untouched until the request is waited for
// (vkt_world_waitall). The caller owns the request.
typedef struct vkt_world_req {
    unsigned char mpi[16]; // the MPI_Request
    int peer;
    size_t bytes;
    const char *what;
} vkt_world_req;
vkt_status vkt_world_isend(vkt_world *w, int to, int tag, const void *buf, size_t bytes,
                           const char *what, vkt_world_req *req);
vkt_status vkt_world_waitall(vkt_world *w, vkt_world_req *reqs, int n);

// Collectives (every rank calls them in the same order). Sums in double or float, in rank order
// at rank 0; every rank gets rank 0's result.
vkt_status vkt_world_allreduce_f32(vkt_world *w, float *buf, size_t n, const char *what);
vkt_status vkt_world_allreduce_f64(vkt_world *w, double *buf, size_t n, const char *what);
// The same sums over the ranks ranks[0..n) only (this rank among them), in that order at
// ranks[0]; messages tagged tag and tag + 1 (0 <= tag < 2^20 - 1), so that groups summing at the
// same time from different threads keep apart. Every rank of the group calls it.
#define VKT_WORLD_MAX_RANKS 1024
vkt_status vkt_world_group_sum_f32(vkt_world *w, const int *ranks, int n, int tag, float *buf,
                                   size_t count, const char *what);
// root's bytes to every rank.
vkt_status vkt_world_bcast(vkt_world *w, void *buf, size_t bytes, int root, const char *what);
// Every rank's `bytes` bytes, in rank order, to every rank: all[r * bytes ...].
vkt_status vkt_world_allgather(vkt_world *w, const void *mine, size_t bytes, void *all,
                               const char *what);
// Every rank's blob of its own length to rank 0: *out (malloc'd, rank 0 only; NULL elsewhere) is
// the blobs one after another, lens[r] their lengths (rank 0: size entries).
vkt_status vkt_world_gather_blobs(vkt_world *w, const void *mine, size_t bytes, void **out,
                                  size_t *lens, const char *what);
vkt_status vkt_world_barrier(vkt_world *w, const char *what);
// This rank's CLOCK_MONOTONIC minus rank 0's, in ns, measured by ping-pong (the exchange of least
// round trip of several): rank r's time t is rank 0's t - offset. *uncertainty_ns: half that
// round trip. Collective; rank 0 gets 0.
vkt_status vkt_world_clock_offset(vkt_world *w, int64_t *offset_ns, int64_t *uncertainty_ns);

// What this process's world moved and waited for (since init).
typedef struct vkt_world_stats {
    uint64_t bytes_sent, bytes_received;
    double wait_ns; // time spent in sends, receives and collectives
} vkt_world_stats;
void vkt_world_get_stats(const vkt_world *w, vkt_world_stats *out);

// ---------------------------------------------------------------------------------------------
// One trace for the run (parallel/trace_world.c)

typedef struct vkt_trace vkt_trace; // trace.h
// Gathers every rank's trace into rank 0's t, so that rank 0's vkt_trace_write writes one
// timeline of the whole run. Collective: every rank calls it once, at the end of the run, with
// no thread still appending to t, before rank 0 writes the trace.
// Each rank r > 0 sends its devices (label, driver, memory limit, clock, the trainer's summary),
// their events and their counters; its host counters (VKT_TRACE_HOST: loss, accuracy, ...) are
// not sent, rank 0's are the run's. Rank 0 appends rank r's devices, in rank order, as new
// devices labelled "rank R <label>" ("rank 1 #0 llvmpipe ..."), its events and counters moved to
// them and to rank 0's clock by vkt_world_clock_offset: rank r's time t becomes t - offset. A
// device's clock then maps its own clock to rank 0's: a calibrated one keeps its method, with
// offset - (rank offset) and its uncertainty plus the rank's; an uncalibrated one (its times were
// rank r's host clock) gets method "mpi_ping_pong", offset -(rank offset) and the rank's
// uncertainty. Rank 0's own devices are relabelled "rank 0 <label>"; nothing else of them changes.
// A NULL world or a world of one rank: nothing happens. Other ranks' traces are left as they were.
// Fails with the world's error (a rank that died or hangs: VKT_ERR_TIMEOUT naming it),
// VKT_ERR_HOST_MEMORY, or, at rank 0, VKT_ERR_FORMAT when a rank's trace arrives malformed or
// empty (that rank failed to pack it; its own error says why). Rank 0 checks every rank's trace
// before it changes t; only running out of host memory can leave part of them appended.
vkt_status vkt_trace_gather_world(vkt_trace *t, vkt_world *w);

#ifdef __cplusplus
}
#endif

#endif
