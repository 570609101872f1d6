// test_trace_world.c: one trace for a run over MPI ranks (vkt_trace_gather_world,
// parallel/trace_world.c). No Vulkan device: the traces are built by hand.
//  - Run by ctest (no mpirun around it), it checks that a NULL world changes nothing, then starts
//    itself as 3 ranks under mpirun and fails when mpirun is missing or any rank fails.
//  - Each rank builds a trace: rank r has 1 + r % 2 devices, events and memory counters at known
//    times after a common barrier (vkt_trace_now_ns), a host "loss" counter; rank 1's second
//    device has a calibrated clock, rank 2's device a trainer summary. After the gather, rank 0
//    checks its trace, then the file vkt_trace_write writes and vkt_trace_load reads back:
//    devices in rank order labelled "rank R ...", every event and counter on the right device
//    with its time moved by its rank's offset (the same for all of a rank's times; on one machine
//    within the reported uncertainty of 0 and under 1 ms), the clocks combined, other ranks' host
//    counters gone, the summary kept. The other ranks check that their traces did not change.
// `test_trace_world --keep PATH` also leaves the gathered trace at PATH (for `vktrain view`).
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test_util.h"
#include "trace.h"
#include "world.h"

#define MS 1000000ll
#define NRANKS 3
#define NSTEPS 3

typedef struct checks {
    const char *who;
    int checks, failures;
} checks;

#define CHECK(c, cond, ...)                                                                        \
    do {                                                                                           \
        (c)->checks++;                                                                             \
        if (!(cond)) {                                                                             \
            (c)->failures++;                                                                       \
            fprintf(stderr, "FAIL %s:%d (%s): %s: ", __FILE__, __LINE__, (c)->who, #cond);         \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fprintf(stderr, "\n");                                                                 \
        }                                                                                          \
    } while (0)
#define CHECK_OK(c, expr) CHECK(c, (expr) == VKT_OK, "%s", vkt_error())

static int rank_devices(int r) { return 1 + r % 2; }
static int64_t event_start(int64_t base, int r, int d, int k) {
    return base + k * MS + d * 100000 + r * 10;
}
static bool calibrated_device(int r, int d) { return r == 1 && d == 1; }
static const vkt_trace_summary SUMMARY = {0.25, 0.75, 1e6, 4e6, 777, 888};

// ---------------------------------------------------------------------------------------------
// Each rank's own trace

static vkt_status build(vkt_trace *t, int r, int64_t base) {
    vkt_status s = VKT_OK;
    for (int d = 0; d < rank_devices(r) && s == VKT_OK; d++) {
        char label[64], name[64];
        snprintf(label, sizeof label, "#%d llvmpipe (rank %d test)", d, r);
        int pid;
        s = vkt_trace_add_device(t, label, "llvmpipe", ((uint64_t)(r + 1) << 30) + (uint64_t)d,
                                 &pid);
        if (s == VKT_OK && calibrated_device(r, d))
            s = vkt_trace_set_clock(t, pid, 12345, 100, "submit_bracket");
        if (s == VKT_OK && r == 2) s = vkt_trace_set_summary(t, pid, &SUMMARY);
        for (int k = 0; k < NSTEPS && s == VKT_OK; k++) {
            snprintf(name, sizeof name, "fwd:r%d:d%d:k%d", r, d, k);
            s = vkt_trace_add_event(t, pid, name, VKT_CAT_FORWARD, event_start(base, r, d, k),
                                    MS / 2, k);
            if (s == VKT_OK)
                s = vkt_trace_add_counter(t, pid, "memory_bytes", base + k * MS,
                                          1000.0 * r + 10 * d + k);
        }
        // A name every rank shares: one name in rank 0's table for all of them.
        if (s == VKT_OK)
            s = vkt_trace_add_event(t, pid, "opt:sgd", VKT_CAT_OPTIMIZER, base + 5 * MS, MS, 2);
    }
    for (int k = 0; k < 2 && s == VKT_OK; k++)
        s = vkt_trace_add_counter(t, VKT_TRACE_HOST, "loss", base + k * MS, 1.0 + r);
    return s;
}

// ---------------------------------------------------------------------------------------------
// What rank 0's gathered trace must hold (in memory, and read back from its file)

static void check_gathered(checks *c, const vkt_trace *t, const int64_t *base, int size) {
    int first[NRANKS + 1] = {0}; // the pid of each rank's first device
    for (int r = 0; r < size; r++)
        first[r + 1] = first[r] + rank_devices(r);
    int ndev = first[size];
    CHECK(c, vkt_trace_device_count(t) == ndev, "%d devices, expected %d",
          vkt_trace_device_count(t), ndev);
    if (vkt_trace_device_count(t) != ndev) return;

    // Devices: labels, memory, clocks. shift[r]: what rank r's times moved by (-offset).
    int64_t shift[NRANKS] = {0}, uncertainty[NRANKS] = {0};
    for (int r = 0; r < size; r++)
        for (int d = 0; d < rank_devices(r); d++) {
            int pid = first[r] + d;
            vkt_trace_device dev;
            vkt_trace_get_device(t, pid, &dev);
            char label[64];
            snprintf(label, sizeof label, "rank %d #%d llvmpipe (rank %d test)", r, d, r);
            CHECK(c, strcmp(dev.label, label) == 0, "device %d is \"%s\", expected \"%s\"", pid,
                  dev.label, label);
            CHECK(c, strcmp(dev.driver, "llvmpipe") == 0, "device %d's driver is \"%s\"", pid,
                  dev.driver);
            CHECK(c, dev.memory_limit == ((uint64_t)(r + 1) << 30) + (uint64_t)d,
                  "device %d's memory limit is %llu", pid, (unsigned long long)dev.memory_limit);
            if (r == 0) {
                CHECK(c, !dev.calibrated && dev.clock_offset_ns == 0,
                      "rank 0's device %d got a clock (%lld ns, \"%s\")", pid,
                      (long long)dev.clock_offset_ns, dev.clock_method);
                continue;
            }
            if (!calibrated_device(r, d)) {
                CHECK(c, dev.calibrated && strcmp(dev.clock_method, "mpi_ping_pong") == 0,
                      "rank %d's device %d has clock method \"%s\"", r, pid, dev.clock_method);
                shift[r] = dev.clock_offset_ns;
                uncertainty[r] = dev.clock_uncertainty_ns;
                // One machine, one CLOCK_MONOTONIC: the true offset is 0, and a ping-pong that
                // brackets its reading must say so within its uncertainty.
                CHECK(c, uncertainty[r] > 0 && uncertainty[r] < MS,
                      "rank %d's clock uncertainty is %lld ns", r, (long long)uncertainty[r]);
                CHECK(c, llabs(shift[r]) <= uncertainty[r] && llabs(shift[r]) < MS,
                      "rank %d's clock is %lld ns off rank 0's (+- %lld ns) on one machine", r,
                      (long long)-shift[r], (long long)uncertainty[r]);
            }
        }
    // The calibrated device (after its rank's uncalibrated one): its clock to rank 0's.
    vkt_trace_device cal;
    vkt_trace_get_device(t, first[1] + 1, &cal);
    CHECK(c, cal.calibrated && strcmp(cal.clock_method, "submit_bracket") == 0,
          "the calibrated device's clock method is \"%s\"", cal.clock_method);
    CHECK(c, cal.clock_offset_ns == 12345 + shift[1], "its offset is %lld, expected %lld",
          (long long)cal.clock_offset_ns, (long long)(12345 + shift[1]));
    CHECK(c, cal.clock_uncertainty_ns == 100 + uncertainty[1],
          "its uncertainty is %lld, expected 100 + %lld", (long long)cal.clock_uncertainty_ns,
          (long long)uncertainty[1]);

    // Summaries: rank 2's trainer summary, nobody else's.
    for (int p = 0; p < ndev; p++) {
        vkt_trace_summary s;
        bool set = vkt_trace_get_summary(t, p, &s);
        bool want = p >= first[2] && p < first[3];
        CHECK(c, set == want, "device %d %s a trainer summary", p, set ? "has" : "lacks");
        if (set && want)
            CHECK(c,
                  s.busy_fraction == SUMMARY.busy_fraction && s.wall_ns == SUMMARY.wall_ns &&
                      s.bytes_moved == SUMMARY.bytes_moved &&
                      s.peak_memory_bytes == SUMMARY.peak_memory_bytes,
                  "device %d's summary changed: busy %g wall %g bytes %llu peak %llu", p,
                  s.busy_fraction, s.wall_ns, (unsigned long long)s.bytes_moved,
                  (unsigned long long)s.peak_memory_bytes);
    }

    // Events: each exactly once, on its device, at its time moved by its rank's shift.
    size_t nev = vkt_trace_event_count(t), want_ev = (size_t)ndev * (NSTEPS + 1);
    CHECK(c, nev == want_ev, "%zu events, expected %zu", nev, want_ev);
    vkt_trace_event *ev = calloc(nev ? nev : 1, sizeof *ev);
    nev = vkt_trace_get_events(t, 0, ev, nev);
    int seen[16][NSTEPS + 1] = {{0}};
    for (size_t i = 0; i < nev; i++) {
        const vkt_trace_event *e = &ev[i];
        int r, d, k;
        int rr = -1;
        for (int q = 0; q < size; q++)
            if (e->pid >= first[q] && e->pid < first[q + 1]) rr = q;
        if (rr < 0) {
            CHECK(c, false, "event \"%s\" is on pid %d, no device", e->name, e->pid);
            continue;
        }
        if (strcmp(e->name, "opt:sgd") == 0) {
            r = rr, d = e->pid - first[rr], k = NSTEPS;
            CHECK(c, e->start_ns == base[r] + 5 * MS + shift[r] && e->dur_ns == MS,
                  "opt:sgd of pid %d at %lld (+%lld), expected %lld", e->pid,
                  (long long)e->start_ns, (long long)e->dur_ns,
                  (long long)(base[r] + 5 * MS + shift[r]));
            CHECK(c, e->cat == VKT_CAT_OPTIMIZER, "opt:sgd has category %d", (int)e->cat);
        } else if (sscanf(e->name, "fwd:r%d:d%d:k%d", &r, &d, &k) == 3 && r >= 0 && r < size &&
                   d >= 0 && d < rank_devices(r) && k >= 0 && k < NSTEPS) {
            CHECK(c, e->pid == first[r] + d, "%s is on pid %d, expected %d", e->name, e->pid,
                  first[r] + d);
            int64_t want = event_start(base[r], r, d, k) + shift[r];
            CHECK(c, e->start_ns == want, "%s starts at %lld, expected %lld (shift %lld)", e->name,
                  (long long)e->start_ns, (long long)want, (long long)shift[r]);
            CHECK(c, e->dur_ns == MS / 2 && e->step == k && e->cat == VKT_CAT_FORWARD,
                  "%s: dur %lld step %d cat %d", e->name, (long long)e->dur_ns, e->step,
                  (int)e->cat);
        } else {
            CHECK(c, false, "unexpected event \"%s\" on pid %d", e->name, e->pid);
            continue;
        }
        seen[first[r] + d][k]++;
    }
    for (int p = 0; p < ndev; p++)
        for (int k = 0; k <= NSTEPS; k++)
            CHECK(c, seen[p][k] == 1, "device %d's event %d was seen %d times", p, k, seen[p][k]);
    free(ev);

    // Counters: rank 0's loss only; every device's memory samples, moved like its events.
    size_t nctr = vkt_trace_counter_count(t), want_ctr = 2 + (size_t)ndev * NSTEPS;
    CHECK(c, nctr == want_ctr, "%zu counters, expected %zu (other ranks' host counters dropped)",
          nctr, want_ctr);
    vkt_trace_counter *ctr = calloc(nctr ? nctr : 1, sizeof *ctr);
    nctr = vkt_trace_get_counters(t, 0, ctr, nctr);
    int host = 0;
    for (size_t i = 0; i < nctr; i++) {
        const vkt_trace_counter *k = &ctr[i];
        if (k->pid == VKT_TRACE_HOST) {
            host++;
            CHECK(c, strcmp(k->name, "loss") == 0 && k->value == 1.0,
                  "host counter %s = %g is not rank 0's loss", k->name, k->value);
            continue;
        }
        int r = -1;
        for (int q = 0; q < size; q++)
            if (k->pid >= first[q] && k->pid < first[q + 1]) r = q;
        CHECK(c, r >= 0 && strcmp(k->name, "memory_bytes") == 0, "counter %s on pid %d", k->name,
              k->pid);
        if (r < 0) continue;
        int d = k->pid - first[r], step = (int)(k->value - 1000.0 * r - 10 * d);
        CHECK(c, step >= 0 && step < NSTEPS && k->value == 1000.0 * r + 10 * d + step,
              "pid %d's memory_bytes is %g", k->pid, k->value);
        CHECK(c, k->t_ns == base[r] + step * MS + shift[r], "pid %d's sample %d at %lld, not %lld",
              k->pid, step, (long long)k->t_ns, (long long)(base[r] + step * MS + shift[r]));
    }
    CHECK(c, host == 2, "%d host samples, expected rank 0's 2", host);
    free(ctr);
}

// ---------------------------------------------------------------------------------------------
// One rank of the mpirun job

static int child(int argc, char **argv, const char *keep) {
    vkt_world *w = NULL;
    if (vkt_world_init(&argc, &argv, 60, &w) != VKT_OK) {
        fprintf(stderr, "test_trace_world: %s\n", vkt_error());
        return 1;
    }
    int rank = vkt_world_rank(w), size = vkt_world_size(w);
    char who[32];
    snprintf(who, sizeof who, "rank %d", rank);
    checks c = {who, 0, 0};
    CHECK(&c, size == NRANKS, "the world has %d ranks, expected %d", size, NRANKS);
    if (size != NRANKS) {
        vkt_world_finalize(w);
        return 1;
    }
    vkt_trace *t = NULL;
    CHECK_OK(&c, vkt_trace_create(&t));
    if (!t) vkt_world_abort(w, 1);
    // Every rank's events start from a base taken right after one barrier, and every rank
    // learns every base: rank 0 knows what each rank's times were before the gather.
    CHECK_OK(&c, vkt_world_barrier(w, "the start"));
    int64_t mine = vkt_trace_now_ns(), base[NRANKS];
    CHECK_OK(&c, vkt_world_allgather(w, &mine, sizeof mine, base, "the bases"));
    CHECK_OK(&c, build(t, rank, mine));
    size_t nev = vkt_trace_event_count(t), nctr = vkt_trace_counter_count(t);

    CHECK_OK(&c, vkt_trace_gather_world(t, w));

    if (rank != 0) {
        vkt_trace_device d;
        CHECK(&c,
              vkt_trace_device_count(t) == rank_devices(rank) && vkt_trace_get_device(t, 0, &d) &&
                  strncmp(d.label, "#0 ", 3) == 0,
              "rank %d's own trace changed (%d devices, first \"%s\")", rank,
              vkt_trace_device_count(t), d.label);
        CHECK(&c, vkt_trace_event_count(t) == nev && vkt_trace_counter_count(t) == nctr,
              "rank %d's own trace changed", rank);
    } else {
        check_gathered(&c, t, base, size);
        char dir[] = "/tmp/vkt_trace_world_XXXXXX", path[64];
        CHECK(&c, mkdtemp(dir) != NULL, "mkdtemp: %s", strerror(errno));
        snprintf(path, sizeof path, "%s/trace.json", dir);
        CHECK_OK(&c, vkt_trace_write(t, keep ? keep : path));
        vkt_trace *back = NULL;
        CHECK_OK(&c, vkt_trace_load(keep ? keep : path, &back));
        if (back) {
            c.who = "rank 0, read back";
            check_gathered(&c, back, base, size);
            c.who = who;
        }
        vkt_trace_destroy(back);
        unlink(path);
        rmdir(dir);
    }
    vkt_trace_destroy(t);
    // Every rank's verdict: the job fails when any rank failed.
    double failed = c.failures;
    if (vkt_world_allreduce_f64(w, &failed, 1, "the verdicts") != VKT_OK) failed = 1;
    printf("test_trace_world rank %d: %d checks, %d failed%s\n", rank, c.checks, c.failures,
           rank == 0 && failed > 0 ? " (some rank failed)" : "");
    vkt_world_finalize(w);
    return failed > 0 || c.checks == 0 ? 1 : 0;
}

// ---------------------------------------------------------------------------------------------
// ctest's process: start the ranks

int main(int argc, char **argv) {
    if (vt_under_mpirun())
        return child(argc, argv, argc > 1 && strcmp(argv[1], "child") != 0 ? argv[1] : NULL);
    setvbuf(stdout, NULL, _IONBF, 0);
    checks c = {"test_trace_world", 0, 0};
    const char *keep = argc > 2 && strcmp(argv[1], "--keep") == 0 ? argv[2] : NULL;

    // Without a world (or a world of one) nothing changes.
    vkt_trace *t = NULL;
    CHECK_OK(&c, vkt_trace_create(&t));
    if (t) {
        CHECK_OK(&c, build(t, 0, vkt_trace_now_ns()));
        CHECK_OK(&c, vkt_trace_gather_world(t, NULL));
        vkt_trace_device d;
        CHECK(&c,
              vkt_trace_device_count(t) == 1 && vkt_trace_get_device(t, 0, &d) &&
                  strcmp(d.label, "#0 llvmpipe (rank 0 test)") == 0,
              "a NULL world changed the trace");
        CHECK(&c, vkt_trace_event_count(t) == NSTEPS + 1 && vkt_trace_counter_count(t) == 5,
              "a NULL world changed the trace's events or counters");
        vkt_trace_destroy(t);
    }
    CHECK(&c, vkt_world_available(),
          "this vktrain was built without MPI (libopenmpi-dev missing, or -DVKT_MPI=OFF): the "
          "ranks' trace cannot be tested");

    if (vkt_world_available()) {
        int rc = vt_mpirun_self("test_trace_world", NRANKS, keep ? keep : "child", 120);
        CHECK(&c, rc == 0, "mpirun -np %d (this test) child: exit %d: see the ranks' output above",
              NRANKS, rc);
    }
    printf("test_trace_world: %d checks, %d failed\n", c.checks, c.failures);
    return c.failures ? 1 : 0;
}
