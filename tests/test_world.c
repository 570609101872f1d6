// test_world: the processes of a run (world.h, parallel/world.c) over 3 ranks on loopback. Run
// by ctest (no mpirun around it), it starts itself under mpirun -np 3 and fails when mpirun is
// missing, the library was built without MPI, or any rank fails. Every rank checks:
//   - the all-reduce's sums are rank 0 + rank 1 + rank 2 in that order in float (values chosen so
//     that another order gives other bits), the same bits on every rank; in double too;
//   - two groups summing at once from two threads of rank 1 ({0, 1} and {1, 2}, their own tags)
//     each get their own sums;
//   - broadcast from rank 2, all-gather, gathers of blobs of different lengths (one empty);
//   - sends that return at once, received in another order than sent (tags), waited for;
//   - a rank that sends nothing for longer than the timeout: the receive fails with
//     VKT_ERR_TIMEOUT and a message naming it, and the late message is still delivered after;
//   - refusals: a send to itself, a tag of the world's own, a group it is not in, a rank twice.
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "test_util.h"
#include "world.h"

#define NRANKS 3
#define TIMEOUT_S 2.0

typedef struct checks {
    int rank, checks, failures;
} checks;

#define CHECK(c, cond, ...)                                                                        \
    do {                                                                                           \
        (c)->checks++;                                                                             \
        if (!(cond)) {                                                                             \
            (c)->failures++;                                                                       \
            fprintf(stderr, "FAIL rank %d %s:%d: %s: ", (c)->rank, __FILE__, __LINE__, #cond);     \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fprintf(stderr, "\n");                                                                 \
        }                                                                                          \
    } while (0)

// Rank r's value i: magnitudes far apart, so that the order of the sum shows in the bits.
static float value(int r, size_t i) {
    float big = (i % 3 == 0) ? 1e8f : 1.0f;
    return r == 0 ? big * (float)(i % 7 + 1) : r == 1 ? 0.75f + (float)i * 1e-3f : -big * 0.5f;
}

typedef struct group_arg {
    vkt_world *w;
    int ranks[2], tag;
    float buf[257];
    vkt_status st;
} group_arg;

static void *group_thread(void *p) {
    group_arg *g = p;
    g->st = vkt_world_group_sum_f32(g->w, g->ranks, 2, g->tag, g->buf, 257, "a group's sum");
    return NULL;
}

static void sleep_s(double s) {
    struct timespec ts = {(time_t)s, (long)((s - (time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

static int child(void) {
    vkt_world *w = NULL;
    checks c = {0};
    if (vkt_world_init(NULL, NULL, TIMEOUT_S, &w) != VKT_OK) {
        fprintf(stderr, "FAIL test_world: %s\n", vkt_error());
        return 1;
    }
    int rank = c.rank = vkt_world_rank(w), size = vkt_world_size(w);
    CHECK(&c, size == NRANKS, "%d ranks", size);
    CHECK(&c, vkt_world_timeout(w) == TIMEOUT_S, "timeout %g", vkt_world_timeout(w));

    // The all-reduce, in rank order.
    enum { N = 10007 };
    float *v = malloc(N * 4), *all = malloc(N * 4 * NRANKS);
    for (size_t i = 0; i < N; i++)
        v[i] = value(rank, i);
    CHECK(&c, vkt_world_allreduce_f32(w, v, N, "the test's sums") == VKT_OK, "%s", vkt_error());
    size_t wrong = 0, reorder_differs = 0;
    for (size_t i = 0; i < N; i++) {
        float want = value(0, i);
        want += value(1, i);
        want += value(2, i);
        float other = value(2, i);
        other += value(1, i);
        other += value(0, i);
        if (memcmp(&want, &v[i], 4) != 0) wrong++;
        if (memcmp(&want, &other, 4) != 0) reorder_differs++;
    }
    CHECK(&c, wrong == 0, "%zu of %d sums are not rank 0 + rank 1 + rank 2", wrong, N);
    CHECK(&c, reorder_differs > 100, "the values do not tell the orders apart (%zu)",
          reorder_differs);
    CHECK(&c, vkt_world_allgather(w, v, N * 4, all, "every rank's sums") == VKT_OK, "%s",
          vkt_error());
    CHECK(&c, memcmp(all, all + N, N * 4) == 0 && memcmp(all, all + 2 * N, N * 4) == 0,
          "the ranks' sums differ");
    double d[2] = {rank + 0.5, 1};
    CHECK(&c, vkt_world_allreduce_f64(w, d, 2, "doubles") == VKT_OK, "%s", vkt_error());
    CHECK(&c, d[0] == 4.5 && d[1] == 3, "double sums %g %g", d[0], d[1]);

    // Two groups at once: rank 1 is in both, one thread each.
    group_arg g[2] = {{w, {0, 1}, 10, {0}, VKT_OK}, {w, {2, 1}, 20, {0}, VKT_OK}};
    pthread_t th[2];
    int mine[2], nmine = 0;
    for (int k = 0; k < 2; k++) {
        if (g[k].ranks[0] != rank && g[k].ranks[1] != rank) continue;
        for (int i = 0; i < 257; i++)
            g[k].buf[i] = (float)(rank * 1000 + k * 100 + i);
        mine[nmine++] = k;
    }
    for (int j = 0; j < nmine; j++)
        pthread_create(&th[j], NULL, group_thread, &g[mine[j]]);
    for (int j = 0; j < nmine; j++)
        pthread_join(th[j], NULL);
    for (int j = 0; j < nmine; j++) {
        group_arg *a = &g[mine[j]];
        int k = mine[j];
        bool ok = a->st == VKT_OK;
        for (int i = 0; i < 257 && ok; i++)
            ok = a->buf[i] == (float)(a->ranks[0] * 1000 + a->ranks[1] * 1000 + 2 * (k * 100 + i));
        CHECK(&c, ok, "group {%d, %d}: %s", a->ranks[0], a->ranks[1],
              a->st == VKT_OK ? "wrong sums" : vkt_error());
    }

    // Broadcast from rank 2; blobs of three lengths to rank 0.
    enum { B = 3 << 20 };
    unsigned char *b = malloc(B);
    for (size_t i = 0; i < B; i++)
        b[i] = rank == 2 ? (unsigned char)(i * 7 + 3) : 0;
    CHECK(&c, vkt_world_bcast(w, b, B, 2, "a broadcast") == VKT_OK, "%s", vkt_error());
    size_t bad = 0;
    for (size_t i = 0; i < B; i++)
        bad += b[i] != (unsigned char)(i * 7 + 3);
    CHECK(&c, bad == 0, "%zu bytes of the broadcast differ", bad);
    char blob[64];
    size_t blen = rank == 1 ? 0 : (size_t)(10 + rank);
    memset(blob, 'a' + rank, sizeof blob);
    void *got = NULL;
    size_t lens[NRANKS] = {0};
    CHECK(&c, vkt_world_gather_blobs(w, blob, blen, &got, lens, "blobs") == VKT_OK, "%s",
          vkt_error());
    if (rank == 0) {
        CHECK(&c, got && lens[0] == 10 && lens[1] == 0 && lens[2] == 12, "lengths %zu %zu %zu",
              lens[0], lens[1], lens[2]);
        CHECK(&c, got && memcmp(got, "aaaaaaaaaacccccccccccc", 22) == 0, "the blobs' bytes");
    } else {
        CHECK(&c, got == NULL, "a rank other than 0 got the blobs");
    }
    free(got);

    // Sends that return at once, to the next rank; received in reverse order of their tags.
    enum { M = 6 };
    static float out[M][4096], in[M][4096];
    vkt_world_req reqs[M];
    int next = (rank + 1) % NRANKS, prev = (rank + NRANKS - 1) % NRANKS;
    for (int k = 0; k < M; k++) {
        for (int i = 0; i < 4096; i++)
            out[k][i] = (float)(rank * 100000 + k * 4096 + i);
        CHECK(&c,
              vkt_world_isend(w, next, k, out[k], (size_t)(k + 1) * 600 * 4, "a test message",
                              &reqs[k]) == VKT_OK,
              "%s", vkt_error());
    }
    for (int k = M - 1; k >= 0; k--)
        CHECK(&c,
              vkt_world_recv(w, prev, k, in[k], (size_t)(k + 1) * 600 * 4, "a test message") ==
                  VKT_OK,
              "%s", vkt_error());
    CHECK(&c, vkt_world_waitall(w, reqs, M) == VKT_OK, "%s", vkt_error());
    bool same = true;
    for (int k = 0; k < M && same; k++)
        for (int i = 0; i < (k + 1) * 600 && same; i++)
            same = in[k][i] == (float)(prev * 100000 + k * 4096 + i);
    CHECK(&c, same, "messages arrived wrong or under the wrong tag");

    // A silent rank: rank 2 sends to rank 0 only after 1.5 times the timeout.
    CHECK(&c, vkt_world_barrier(w, "the test's barrier") == VKT_OK, "%s", vkt_error());
    int token = 42;
    if (rank == 2) {
        sleep_s(TIMEOUT_S * 1.5);
        CHECK(&c, vkt_world_send(w, 0, 77, &token, 4, "the late token") == VKT_OK, "%s",
              vkt_error());
    } else if (rank == 0) {
        int t = 0;
        vkt_status st = vkt_world_recv(w, 2, 77, &t, 4, "the late token");
        CHECK(&c,
              st == VKT_ERR_TIMEOUT && strstr(vkt_error(), "rank 2 sent nothing for 2 s") &&
                  strstr(vkt_error(), "the late token"),
              "%s: %s", vkt_status_name(st), vkt_error());
        st = vkt_world_recv(w, 2, 77, &t, 4, "the late token, again");
        CHECK(&c, st == VKT_OK && t == 42, "the late message after the timeout: %s (%d)",
              vkt_error(), t);
    }

    // Refusals.
    CHECK(&c, vkt_world_send(w, rank, 1, &token, 4, "x") == VKT_ERR_ARG, "a send to itself");
    CHECK(&c, vkt_world_send(w, next, 1 << 20, &token, 4, "x") == VKT_ERR_ARG,
          "a tag of the world's own");
    int others[2] = {(rank + 1) % NRANKS, (rank + 2) % NRANKS}, twice[2] = {rank, rank};
    CHECK(&c, vkt_world_group_sum_f32(w, others, 2, 5, v, 1, "x") == VKT_ERR_ARG,
          "a group without this rank");
    CHECK(&c, vkt_world_group_sum_f32(w, twice, 2, 5, v, 1, "x") == VKT_ERR_ARG,
          "a rank twice in a group");

    double fails = c.failures;
    vkt_status st = vkt_world_allreduce_f64(w, &fails, 1, "the failures");
    printf("test_world rank %d: %d checks, %d failed%s\n", rank, c.checks, c.failures,
           st == VKT_OK && rank == 0 && fails > 0 ? " (some rank failed)" : "");
    free(v);
    free(all);
    free(b);
    vkt_world_finalize(w);
    return c.failures || st != VKT_OK || fails > 0 ? 1 : 0;
}

int main(void) {
    if (vt_under_mpirun()) return child();
    int failures = 0;
    if (!vkt_world_available()) {
        fprintf(stderr, "FAIL test_world: this vktrain was built without MPI (libopenmpi-dev "
                        "missing, or -DVKT_MPI=OFF)\n");
        failures++;
    } else {
        int rc = vt_mpirun_self("test_world", NRANKS, "child", 120);
        if (rc != 0) {
            fprintf(stderr, "FAIL test_world: mpirun -np %d exited with %d\n", NRANKS, rc);
            failures++;
        }
    }
    printf("test_world: %s\n", failures ? "FAILED" : "every rank passed");
    return failures ? 1 : 0;
}
