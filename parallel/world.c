// world.c: the processes of a run over MPI (world.h). Every wait is a loop of MPI_Test under a
// deadline, so that a rank that died or hangs shows as a timeout naming it; the collectives are
// built from point-to-point messages through rank 0 for the same reason (rank 0 knows which
// rank is missing) and so that every rank gets the same bits.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "vkt_internal.h"
#include "world.h"

#ifndef VKT_HAVE_MPI

bool vkt_world_available(void) { return false; }
vkt_status vkt_world_init(int *argc, char ***argv, double timeout_s, vkt_world **out) {
    (void)argc, (void)argv, (void)timeout_s;
    *out = NULL;
    return vkt_fail(VKT_ERR_ARG, "this vktrain was built without MPI: install libopenmpi-dev "
                                 "(scripts/setup.sh does) and build again");
}
void vkt_world_finalize(vkt_world *w) { (void)w; }
void vkt_world_abort(vkt_world *w, int code) {
    (void)w;
    exit(code);
}
int vkt_world_rank(const vkt_world *w) { return (void)w, 0; }
int vkt_world_size(const vkt_world *w) { return (void)w, 1; }
int vkt_world_local_size(const vkt_world *w) { return (void)w, 1; }
double vkt_world_timeout(const vkt_world *w) { return (void)w, 0; }
const char *vkt_world_where(const vkt_world *w) { return (void)w, ""; }
#define NO_MPI return vkt_fail(VKT_ERR_ARG, "this vktrain was built without MPI")
vkt_status vkt_world_send(vkt_world *w, int to, int tag, const void *buf, size_t bytes,
                          const char *what) {
    (void)w, (void)to, (void)tag, (void)buf, (void)bytes, (void)what;
    NO_MPI;
}
vkt_status vkt_world_recv(vkt_world *w, int from, int tag, void *buf, size_t bytes,
                          const char *what) {
    (void)w, (void)from, (void)tag, (void)buf, (void)bytes, (void)what;
    NO_MPI;
}
vkt_status vkt_world_isend(vkt_world *w, int to, int tag, const void *buf, size_t bytes,
                           const char *what, vkt_world_req *req) {
    (void)w, (void)to, (void)tag, (void)buf, (void)bytes, (void)what, (void)req;
    NO_MPI;
}
vkt_status vkt_world_waitall(vkt_world *w, vkt_world_req *reqs, int n) {
    (void)w, (void)reqs, (void)n;
    NO_MPI;
}
vkt_status vkt_world_allreduce_f32(vkt_world *w, float *buf, size_t n, const char *what) {
    (void)w, (void)buf, (void)n, (void)what;
    NO_MPI;
}
vkt_status vkt_world_allreduce_f64(vkt_world *w, double *buf, size_t n, const char *what) {
    (void)w, (void)buf, (void)n, (void)what;
    NO_MPI;
}
vkt_status vkt_world_bcast(vkt_world *w, void *buf, size_t bytes, int root, const char *what) {
    (void)w, (void)buf, (void)bytes, (void)root, (void)what;
    NO_MPI;
}
vkt_status vkt_world_group_sum_f32(vkt_world *w, const int *ranks, int n, int tag, float *buf,
                                   size_t count, const char *what) {
    (void)w, (void)ranks, (void)n, (void)tag, (void)buf, (void)count, (void)what;
    NO_MPI;
}
vkt_status vkt_world_allgather(vkt_world *w, const void *mine, size_t bytes, void *all,
                               const char *what) {
    (void)w, (void)mine, (void)bytes, (void)all, (void)what;
    NO_MPI;
}
vkt_status vkt_world_gather_blobs(vkt_world *w, const void *mine, size_t bytes, void **out,
                                  size_t *lens, const char *what) {
    (void)w, (void)mine, (void)bytes, (void)out, (void)lens, (void)what;
    NO_MPI;
}
vkt_status vkt_world_barrier(vkt_world *w, const char *what) {
    (void)w, (void)what;
    NO_MPI;
}
vkt_status vkt_world_clock_offset(vkt_world *w, int64_t *offset_ns, int64_t *uncertainty_ns) {
    (void)w, (void)offset_ns, (void)uncertainty_ns;
    NO_MPI;
}
void vkt_world_get_stats(const vkt_world *w, vkt_world_stats *out) {
    (void)w;
    memset(out, 0, sizeof *out);
}

#else

#include <mpi.h>
#include <pthread.h>

_Static_assert(sizeof(MPI_Request) <= sizeof(((vkt_world_req *)0)->mpi),
               "vkt_world_req.mpi holds an MPI_Request");

// Tags of the world's own messages (users' are below 2^20).
enum {
    TAG_REDUCE = 1 << 20,
    TAG_RESULT = TAG_REDUCE + 1,
    TAG_BCAST,
    TAG_GATHER,
    TAG_GATHER_LEN,
    TAG_CLOCK
};
// Messages are cut into pieces MPI's int counts can hold.
#define PIECE ((size_t)1 << 30)

struct vkt_world {
    int rank, size;
    int local_size; // the ranks on this machine (MPI_COMM_TYPE_SHARED), this one included
    double timeout_s;
    char where[300];
    pthread_mutex_t mu; // the stats
    vkt_world_stats stats;
};

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void add_stats(vkt_world *w, uint64_t sent, uint64_t received, int64_t wait) {
    pthread_mutex_lock(&w->mu);
    w->stats.bytes_sent += sent;
    w->stats.bytes_received += received;
    w->stats.wait_ns += (double)wait;
    pthread_mutex_unlock(&w->mu);
}

bool vkt_world_available(void) { return true; }

vkt_status vkt_world_init(int *argc, char ***argv, double timeout_s, vkt_world **out) {
    *out = NULL;
    if (!(timeout_s > 0)) return vkt_fail(VKT_ERR_ARG, "the rank timeout must be above 0 s");
    int provided = 0;
    if (MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS)
        return vkt_fail(VKT_ERR_ARG, "MPI_Init_thread failed: is this process started by mpirun?");
    if (provided < MPI_THREAD_MULTIPLE) {
        MPI_Finalize();
        return vkt_fail(VKT_ERR_ARG,
                        "this MPI gives no MPI_THREAD_MULTIPLE (it gave level %d): every device's "
                        "thread sends and receives; use an MPI built with thread support (Debian's "
                        "Open MPI is)",
                        provided);
    }
    vkt_world *w = calloc(1, sizeof *w);
    if (!w) return vkt_fail(VKT_ERR_HOST_MEMORY, "out of host memory");
    MPI_Comm_rank(MPI_COMM_WORLD, &w->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &w->size);
    MPI_Comm local;
    w->local_size = 1;
    if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, w->rank, MPI_INFO_NULL, &local) ==
        MPI_SUCCESS) {
        MPI_Comm_size(local, &w->local_size);
        MPI_Comm_free(&local);
    }
    // Errors come back as codes (a dead peer's), not as MPI's own abort.
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    w->timeout_s = timeout_s;
    char host[256] = "?";
    gethostname(host, sizeof host - 1);
    snprintf(w->where, sizeof w->where, "%s:%d", host, (int)getpid());
    pthread_mutex_init(&w->mu, NULL);
    *out = w;
    return VKT_OK;
}

void vkt_world_finalize(vkt_world *w) {
    if (!w) return;
    MPI_Finalize();
    pthread_mutex_destroy(&w->mu);
    free(w);
}

void vkt_world_abort(vkt_world *w, int code) {
    fflush(stdout);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, code);
    (void)w;
    exit(code);
}

int vkt_world_rank(const vkt_world *w) { return w->rank; }
int vkt_world_size(const vkt_world *w) { return w->size; }
int vkt_world_local_size(const vkt_world *w) { return w->local_size; }
double vkt_world_timeout(const vkt_world *w) { return w->timeout_s; }
const char *vkt_world_where(const vkt_world *w) { return w->where; }

void vkt_world_get_stats(const vkt_world *w, vkt_world_stats *out) {
    pthread_mutex_lock((pthread_mutex_t *)&w->mu);
    *out = w->stats;
    pthread_mutex_unlock((pthread_mutex_t *)&w->mu);
}

static vkt_status mpi_error(int rc, const char *call, int peer, const char *what) {
    char msg[MPI_MAX_ERROR_STRING] = "";
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    return vkt_fail(VKT_ERR_IO, "%s with rank %d (%s) failed: %s; the run stops", call, peer, what,
                    msg);
}

// Waits for req under the deadline; a peer that sends or takes nothing in time is named.
static vkt_status wait_req(vkt_world *w, MPI_Request *req, int peer, bool receiving,
                           const char *what, double timeout_s) {
    int64_t t0 = now_ns(), deadline = t0 + (int64_t)(timeout_s * 1e9);
    for (long spin = 0;; spin++) {
        int done = 0;
        int rc = MPI_Test(req, &done, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) return mpi_error(rc, receiving ? "a receive" : "a send", peer, what);
        if (done) break;
        int64_t t = now_ns();
        if (t > deadline) {
            MPI_Cancel(req);
            return vkt_fail(VKT_ERR_TIMEOUT,
                            "rank %d %s nothing for %.0f s while rank %d (%s) waited for %s: rank "
                            "%d died, hangs or is far slower than the others; the run stops "
                            "(--rank-timeout sets how long a rank waits)",
                            peer, receiving ? "sent" : "took", timeout_s, w->rank, w->where, what,
                            peer);
        }
        // Spin briefly (a reply is often microseconds away), then sleep: on the CPU drivers the
        // device is the host's own cores. Not long: MPI moves a large message a fragment per
        // call here (1 ms sleeps made 200 MB take 17 s over shared memory), so the sleeps stay
        // short while a transfer may be flowing and grow only after 50 ms of waiting.
        if (spin > 64) {
            struct timespec ts = {0, t - t0 < 50000000 ? 20000 : 200000};
            nanosleep(&ts, NULL);
        }
    }
    add_stats(w, 0, 0, now_ns() - t0);
    return VKT_OK;
}

static vkt_status check_peer(const vkt_world *w, int peer, int tag) {
    if (peer < 0 || peer >= w->size || peer == w->rank)
        return vkt_fail(VKT_ERR_ARG, "rank %d cannot exchange with rank %d (the world has %d)",
                        w->rank, peer, w->size);
    if (tag < 0) return vkt_fail(VKT_ERR_ARG, "message tags are >= 0");
    return VKT_OK;
}

static vkt_status send_tagged(vkt_world *w, int to, int tag, const void *buf, size_t bytes,
                              const char *what, double timeout_s) {
    VKT_TRY(check_peer(w, to, tag));
    size_t at = 0;
    do {
        size_t len = bytes - at < PIECE ? bytes - at : PIECE;
        MPI_Request req;
        int rc =
            MPI_Isend((const char *)buf + at, (int)len, MPI_BYTE, to, tag, MPI_COMM_WORLD, &req);
        if (rc != MPI_SUCCESS) return mpi_error(rc, "a send", to, what);
        VKT_TRY(wait_req(w, &req, to, false, what, timeout_s));
        at += len;
    } while (at < bytes);
    add_stats(w, bytes, 0, 0);
    return VKT_OK;
}

static vkt_status recv_tagged(vkt_world *w, int from, int tag, void *buf, size_t bytes,
                              const char *what, double timeout_s) {
    VKT_TRY(check_peer(w, from, tag));
    size_t at = 0;
    do {
        size_t len = bytes - at < PIECE ? bytes - at : PIECE;
        MPI_Request req;
        int rc = MPI_Irecv((char *)buf + at, (int)len, MPI_BYTE, from, tag, MPI_COMM_WORLD, &req);
        if (rc != MPI_SUCCESS) return mpi_error(rc, "a receive", from, what);
        VKT_TRY(wait_req(w, &req, from, true, what, timeout_s));
        at += len;
    } while (at < bytes);
    add_stats(w, 0, bytes, 0);
    return VKT_OK;
}

vkt_status vkt_world_send(vkt_world *w, int to, int tag, const void *buf, size_t bytes,
                          const char *what) {
    if (tag >= TAG_REDUCE) return vkt_fail(VKT_ERR_ARG, "message tags are below 2^20");
    return send_tagged(w, to, tag, buf, bytes, what, w->timeout_s);
}

vkt_status vkt_world_recv(vkt_world *w, int from, int tag, void *buf, size_t bytes,
                          const char *what) {
    if (tag >= TAG_REDUCE) return vkt_fail(VKT_ERR_ARG, "message tags are below 2^20");
    return recv_tagged(w, from, tag, buf, bytes, what, w->timeout_s);
}

vkt_status vkt_world_isend(vkt_world *w, int to, int tag, const void *buf, size_t bytes,
                           const char *what, vkt_world_req *req) {
    VKT_TRY(check_peer(w, to, tag));
    if (tag >= TAG_REDUCE) return vkt_fail(VKT_ERR_ARG, "message tags are below 2^20");
    if (bytes > PIECE)
        return vkt_fail(VKT_ERR_ARG, "a message of %zu bytes is too large to send without waiting",
                        bytes);
    MPI_Request r;
    int rc = MPI_Isend(buf, (int)bytes, MPI_BYTE, to, tag, MPI_COMM_WORLD, &r);
    if (rc != MPI_SUCCESS) return mpi_error(rc, "a send", to, what);
    memset(req, 0, sizeof *req);
    memcpy(req->mpi, &r, sizeof r);
    req->peer = to;
    req->bytes = bytes;
    req->what = what;
    return VKT_OK;
}

vkt_status vkt_world_waitall(vkt_world *w, vkt_world_req *reqs, int n) {
    for (int i = 0; i < n; i++) {
        MPI_Request r;
        memcpy(&r, reqs[i].mpi, sizeof r);
        VKT_TRY(wait_req(w, &r, reqs[i].peer, false, reqs[i].what, w->timeout_s));
        add_stats(w, reqs[i].bytes, 0, 0);
    }
    return VKT_OK;
}

// Non-root ranks wait for rank 0 longer than rank 0 waits for them, so that the rank that knows
// who is missing speaks first.
static double follower_timeout(const vkt_world *w) { return w->timeout_s * 2 + 5; }

// Sums of n elements (f32 or f64) over the ranks group[0..ng), in that order at group[0], sent
// back to the others; tags tag (the parts) and tag + 1 (the sums). This rank is in the group.
static vkt_status group_sum(vkt_world *w, const int *group, int ng, int tag, void *buf, size_t n,
                            bool f64, const char *what) {
    if (ng <= 1 || n == 0) return VKT_OK;
    size_t es = f64 ? 8 : 4, bytes = n * es;
    int root = group[0];
    if (w->rank != root) {
        VKT_TRY(send_tagged(w, root, tag, buf, bytes, what, follower_timeout(w)));
        return recv_tagged(w, root, tag + 1, buf, bytes, what, follower_timeout(w));
    }
    void *part = malloc(bytes);
    if (!part) return vkt_fail(VKT_ERR_HOST_MEMORY, "out of host memory for %s", what);
    vkt_status st = VKT_OK;
    for (int k = 1; k < ng && st == VKT_OK; k++) {
        st = recv_tagged(w, group[k], tag, part, bytes, what, w->timeout_s);
        if (st != VKT_OK) break;
        if (f64) {
            double *a = buf;
            const double *b = part;
            for (size_t i = 0; i < n; i++)
                a[i] += b[i];
        } else {
            float *a = buf;
            const float *b = part;
            for (size_t i = 0; i < n; i++)
                a[i] += b[i];
        }
    }
    free(part);
    for (int k = 1; k < ng && st == VKT_OK; k++)
        st = send_tagged(w, group[k], tag + 1, buf, bytes, what, w->timeout_s);
    return st;
}

static vkt_status allreduce(vkt_world *w, void *buf, size_t n, bool f64, const char *what) {
    int all[VKT_WORLD_MAX_RANKS];
    if (w->size > VKT_WORLD_MAX_RANKS)
        return vkt_fail(VKT_ERR_ARG, "at most %d ranks", VKT_WORLD_MAX_RANKS);
    for (int r = 0; r < w->size; r++)
        all[r] = r;
    return group_sum(w, all, w->size, TAG_REDUCE, buf, n, f64, what);
}

vkt_status vkt_world_group_sum_f32(vkt_world *w, const int *ranks, int n, int tag, float *buf,
                                   size_t count, const char *what) {
    if (tag < 0 || tag + 1 >= TAG_REDUCE)
        return vkt_fail(VKT_ERR_ARG, "group tags are from 0 to 2^20 - 2");
    bool in = false;
    for (int k = 0; k < n; k++) {
        for (int j = 0; j < k; j++)
            if (ranks[j] == ranks[k])
                return vkt_fail(VKT_ERR_ARG, "rank %d twice in a group", ranks[k]);
        if (ranks[k] < 0 || ranks[k] >= w->size)
            return vkt_fail(VKT_ERR_ARG, "no rank %d in a world of %d", ranks[k], w->size);
        in |= ranks[k] == w->rank;
    }
    if (!in) return vkt_fail(VKT_ERR_ARG, "rank %d sums with a group it is not in", w->rank);
    return group_sum(w, ranks, n, tag, buf, count, false, what);
}

vkt_status vkt_world_allreduce_f32(vkt_world *w, float *buf, size_t n, const char *what) {
    return allreduce(w, buf, n, false, what);
}

vkt_status vkt_world_allreduce_f64(vkt_world *w, double *buf, size_t n, const char *what) {
    return allreduce(w, buf, n, true, what);
}

vkt_status vkt_world_bcast(vkt_world *w, void *buf, size_t bytes, int root, const char *what) {
    if (root < 0 || root >= w->size)
        return vkt_fail(VKT_ERR_ARG, "broadcast from rank %d of %d", root, w->size);
    if (w->size == 1) return VKT_OK;
    if (w->rank != root)
        return recv_tagged(w, root, TAG_BCAST, buf, bytes, what, follower_timeout(w));
    for (int r = 0; r < w->size; r++)
        if (r != root) VKT_TRY(send_tagged(w, r, TAG_BCAST, buf, bytes, what, w->timeout_s));
    return VKT_OK;
}

vkt_status vkt_world_allgather(vkt_world *w, const void *mine, size_t bytes, void *all,
                               const char *what) {
    char *a = all;
    memmove(a + (size_t)w->rank * bytes, mine, bytes);
    if (w->size == 1) return VKT_OK;
    if (w->rank != 0) {
        VKT_TRY(send_tagged(w, 0, TAG_GATHER, mine, bytes, what, follower_timeout(w)));
    } else {
        for (int r = 1; r < w->size; r++)
            VKT_TRY(
                recv_tagged(w, r, TAG_GATHER, a + (size_t)r * bytes, bytes, what, w->timeout_s));
    }
    return vkt_world_bcast(w, all, (size_t)w->size * bytes, 0, what);
}

vkt_status vkt_world_gather_blobs(vkt_world *w, const void *mine, size_t bytes, void **out,
                                  size_t *lens, const char *what) {
    *out = NULL;
    uint64_t len = bytes;
    if (w->rank != 0) {
        VKT_TRY(send_tagged(w, 0, TAG_GATHER_LEN, &len, 8, what, follower_timeout(w)));
        return send_tagged(w, 0, TAG_GATHER, mine, bytes, what, follower_timeout(w));
    }
    uint64_t total = bytes;
    lens[0] = bytes;
    for (int r = 1; r < w->size; r++) {
        VKT_TRY(recv_tagged(w, r, TAG_GATHER_LEN, &len, 8, what, w->timeout_s));
        lens[r] = (size_t)len;
        total += len;
    }
    char *buf = malloc(total ? total : 1);
    if (!buf) return vkt_fail(VKT_ERR_HOST_MEMORY, "out of host memory for %s", what);
    if (bytes) memcpy(buf, mine, bytes);
    size_t at = bytes;
    for (int r = 1; r < w->size; r++) {
        vkt_status st = recv_tagged(w, r, TAG_GATHER, buf + at, lens[r], what, w->timeout_s);
        if (st != VKT_OK) {
            free(buf);
            return st;
        }
        at += lens[r];
    }
    *out = buf;
    return VKT_OK;
}

vkt_status vkt_world_barrier(vkt_world *w, const char *what) {
    double one = 1;
    return vkt_world_allreduce_f64(w, &one, 1, what);
}

vkt_status vkt_world_clock_offset(vkt_world *w, int64_t *offset_ns, int64_t *uncertainty_ns) {
    *offset_ns = 0;
    *uncertainty_ns = 0;
    enum { ROUNDS = 8 };
    for (int r = 1; r < w->size; r++) {
        for (int k = 0; k < ROUNDS; k++) {
            if (w->rank == 0) {
                int64_t t0 = now_ns(), t1 = 0;
                VKT_TRY(send_tagged(w, r, TAG_CLOCK, &t0, 8, "a clock ping", w->timeout_s));
                VKT_TRY(recv_tagged(w, r, TAG_CLOCK, &t1, 8, "a clock reply", w->timeout_s));
                int64_t t2 = now_ns();
                int64_t m[2] = {t0, t2}; // the bracket around rank r's reading t1
                VKT_TRY(send_tagged(w, r, TAG_CLOCK, m, 16, "a clock bracket", w->timeout_s));
            } else if (w->rank == r) {
                int64_t t0, m[2];
                VKT_TRY(recv_tagged(w, 0, TAG_CLOCK, &t0, 8, "a clock ping", follower_timeout(w)));
                int64_t t1 = now_ns();
                VKT_TRY(send_tagged(w, 0, TAG_CLOCK, &t1, 8, "a clock reply", follower_timeout(w)));
                VKT_TRY(
                    recv_tagged(w, 0, TAG_CLOCK, m, 16, "a clock bracket", follower_timeout(w)));
                int64_t rtt = m[1] - m[0], off = t1 - (m[0] + rtt / 2);
                if (k == 0 || rtt / 2 < *uncertainty_ns) {
                    *uncertainty_ns = rtt / 2;
                    *offset_ns = off;
                }
            }
        }
    }
    return VKT_OK;
}

#endif
