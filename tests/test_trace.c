// test_trace.c: the trace (engine/core/trace.c, engine/core/clock.c).
//  - Clock calibration on every device: a timestamp the device writes during a submit that the
//    host brackets with clock reads lands, once moved to the host clock, inside that bracket.
//  - Category rules, busy time as a union of intervals, utilisation buckets, against hand
//    computed values.
//  - Write -> load round trip (names with quotes and non-ASCII, NaN loss, metadata, summaries),
//    the file's Chrome trace form (object form, ph X/C/M, ts in us from 0, sorted), atomic write.
//  - Malformed files give VKT_ERR_IO / VKT_ERR_FORMAT with a message saying where.
//  - A thread appending while another syncs a copy loses nothing.
// With `--synthetic PATH` it writes a synthetic two-device training trace instead (no device
// needed), for tests/test_viewer.sh.
#include <cjson/cJSON.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test_util.h"
#include "trace.h"

#define MS 1000000ll

// ---------------------------------------------------------------------------------------------
// The synthetic trace: 2 devices in a 2-stage pipeline for 6 steps. Device 0 runs the forward
// of stage 0, sends activations (comm), then waits while device 1 works (a bubble) until the
// gradients come back; device 1 idles (no events: a bubble) until the activations arrive. Then
// both reduce gradients (comm) and step the optimizer. Times in ms, so each event spans several
// pixels of a 1280-pixel picture.
static vkt_status synthetic(vkt_trace *t) {
    int p0, p1;
    vkt_status s =
        vkt_trace_add_device(t, "#0 llvmpipe (synthetic)", "llvmpipe", 2048ull << 20, &p0);
    if (s == VKT_OK)
        s = vkt_trace_add_device(t, "#1 SwiftShader Device (synthetic)", "SwiftShader",
                                 1023ull << 20, &p1);
    if (s != VKT_OK) return s;
    vkt_trace_set_strategy(t, "layers");
    int64_t base = 5000 * MS, step_len = 24 * MS;
    for (int k = 0; k < 6 && s == VKT_OK; k++) {
        int64_t b = base + k * step_len;
        // device 0: forward of stage 0, send, (wait), backward of stage 0, reduce, optimizer
        s = vkt_trace_add_event(t, p0, "fwd:dense0:matmul", VKT_CAT_FORWARD, b, 3 * MS, k);
        if (!s) s = vkt_trace_add_event(t, p0, "fwd:relu0", VKT_CAT_FORWARD, b + 3 * MS, 1 * MS, k);
        if (!s)
            s = vkt_trace_add_event(t, p0, "comm:send:act", VKT_CAT_COMMUNICATION, b + 4 * MS,
                                    2 * MS, k);
        if (!s) s = vkt_trace_add_event(t, p0, "wait:grad", VKT_CAT_WAIT, b + 6 * MS, 8 * MS, k);
        if (!s)
            s = vkt_trace_add_event(t, p0, "bwd:dense0:matmul", VKT_CAT_BACKWARD, b + 14 * MS,
                                    4 * MS, k);
        if (!s)
            s = vkt_trace_add_event(t, p0, "comm:allreduce", VKT_CAT_COMMUNICATION, b + 18 * MS,
                                    2 * MS, k);
        if (!s)
            s = vkt_trace_add_event(t, p0, "opt:sgd", VKT_CAT_OPTIMIZER, b + 20 * MS, 2 * MS, k);
        // device 1: idle until the activations arrive (a pipeline bubble, no events)
        if (!s)
            s = vkt_trace_add_event(t, p1, "fwd:dense1:matmul", VKT_CAT_FORWARD, b + 6 * MS, 3 * MS,
                                    k);
        if (!s)
            s = vkt_trace_add_event(t, p1, "bwd:dense1:matmul", VKT_CAT_BACKWARD, b + 9 * MS,
                                    3 * MS, k);
        if (!s)
            s = vkt_trace_add_event(t, p1, "comm:send:grad", VKT_CAT_COMMUNICATION, b + 12 * MS,
                                    2 * MS, k);
        if (!s)
            s = vkt_trace_add_event(t, p1, "comm:allreduce", VKT_CAT_COMMUNICATION, b + 18 * MS,
                                    2 * MS, k);
        if (!s)
            s = vkt_trace_add_event(t, p1, "opt:sgd", VKT_CAT_OPTIMIZER, b + 20 * MS, 2 * MS, k);
        int64_t end = b + 22 * MS;
        if (!s) s = vkt_trace_add_counter(t, p0, "memory_bytes", b, (double)((40 + 3 * k) << 20));
        if (!s) s = vkt_trace_add_counter(t, p1, "memory_bytes", b, (double)((25 + 2 * k) << 20));
        if (!s)
            s = vkt_trace_add_counter(t, VKT_TRACE_HOST, "loss", end, 2.3 * exp(-0.35 * k) + 0.3);
        if (!s)
            s = vkt_trace_add_counter(t, VKT_TRACE_HOST, "accuracy", end,
                                      0.1 + 0.75 * (1 - exp(-0.5 * k)));
        if (!s)
            s = vkt_trace_add_counter(t, VKT_TRACE_HOST, "samples_per_sec", end,
                                      5200 + 300 * k - 40 * k * k);
    }
    return s;
}

static int write_synthetic(const char *path) {
    vkt_trace *t;
    vkt_status s = vkt_trace_create(&t);
    if (s == VKT_OK) s = synthetic(t);
    if (s == VKT_OK) s = vkt_trace_write(t, path);
    vkt_trace_destroy(t);
    if (s != VKT_OK) fprintf(stderr, "test_trace --synthetic: %s\n", vkt_error());
    return s == VKT_OK ? 0 : 1;
}

// ---------------------------------------------------------------------------------------------
// Calibration

static void calibration(vt *t) {
    vkt_trace *tr;
    VT_OK(t, vkt_trace_create(&tr));
    for (int d = 0; d < t->ndev; d++) {
        vkt_device *dev = t->dev[d];
        const vkt_device_info *info = vkt_device_get_info(dev);
        int pid;
        VT_OK(t, vkt_trace_add_vk_device(tr, dev, &pid));
        VT_CHECK(t, vkt_trace_add_timings(tr, pid, NULL, 0, 0, NULL, NULL) == VKT_ERR_ARG,
                 "timings accepted before calibration on %s", vkt_device_label(dev));
        VT_OK(t, vkt_trace_calibrate(tr, pid, dev));
        vkt_trace_device td;
        VT_CHECK(t, vkt_trace_get_device(tr, pid, &td) && td.calibrated, "not calibrated");
        const char *want = info->calibrated_timestamps ? "calibrated_timestamps" : "submit_bracket";
        VT_CHECK(t, strcmp(td.clock_method, want) == 0, "%s calibrated by %s, expected %s",
                 vkt_device_label(dev), td.clock_method, want);
        // Both CPU drivers' clocks are close to the host's; a real GPU's may be anything, but
        // the uncertainty must be small next to a training step.
        VT_CHECK(t, td.clock_uncertainty_ns >= 0 && td.clock_uncertainty_ns < 20 * MS,
                 "%s: clock uncertainty %lld ns", vkt_device_label(dev),
                 (long long)td.clock_uncertainty_ns);
        printf("test_trace: %s: %s offset %lld ns +- %lld ns\n", vkt_device_label(dev),
               td.clock_method, (long long)td.clock_offset_ns, (long long)td.clock_uncertainty_ns);

        vkt_buffer *a = NULL, *b = NULL;
        vkt_cmd *cmd = NULL;
        VT_OK(t, vkt_buffer_create(dev, 1 << 20, "src", &a));
        VT_OK(t, vkt_buffer_create(dev, 1 << 20, "dst", &b));
        VT_OK(t, vkt_cmd_create(dev, &cmd));
        if (!a || !b || !cmd) {
            vkt_cmd_destroy(cmd), vkt_buffer_destroy(b), vkt_buffer_destroy(a);
            continue;
        }
        for (int round = 0; round < 3; round++) {
            VT_OK(t, vkt_cmd_begin(cmd, true));
            vkt_cmd_copy(cmd, vkt_buffer_whole(a), vkt_buffer_whole(b), "comm:copy");
            vkt_cmd_barrier(cmd);
            vkt_cmd_copy(cmd, vkt_buffer_whole(b), vkt_buffer_whole(a), "fwd:copy_back");
            VT_OK(t, vkt_cmd_end(cmd));
            int64_t h0 = vkt_trace_now_ns();
            VT_OK(t, vkt_cmd_submit(cmd));
            VT_OK(t, vkt_cmd_wait(cmd, VKT_WAIT_MS));
            int64_t h1 = vkt_trace_now_ns();
            const vkt_timing *tm;
            int n = vkt_cmd_timings(cmd, &tm);
            VT_CHECK(t, n == 2, "%d timings", n);
            size_t first = vkt_trace_event_count(tr);
            VT_OK(t, vkt_trace_add_timings(tr, pid, tm, n, round, NULL, NULL));
            vkt_trace_event ev[2];
            size_t got = vkt_trace_get_events(tr, first, ev, 2);
            VT_CHECK(t, got == 2, "%zu events added", got);
            int64_t slack = td.clock_uncertainty_ns;
            for (size_t i = 0; i < got; i++) {
                int64_t s0 = ev[i].start_ns, s1 = ev[i].start_ns + ev[i].dur_ns;
                VT_CHECK(t, s0 >= h0 - slack && s1 <= h1 + slack,
                         "%s round %d: event %s at [%lld, %lld] ns is outside the host bracket "
                         "[%lld, %lld] (+- %lld)",
                         vkt_device_label(dev), round, ev[i].name, (long long)s0, (long long)s1,
                         (long long)h0, (long long)h1, (long long)slack);
                VT_CHECK(t, ev[i].pid == pid && ev[i].step == round, "pid/step");
            }
            if (got == 2) {
                VT_CHECK(t, ev[0].cat == VKT_CAT_COMMUNICATION && ev[1].cat == VKT_CAT_FORWARD,
                         "categories from labels: %d %d", ev[0].cat, ev[1].cat);
                VT_CHECK(t, ev[1].start_ns >= ev[0].start_ns + ev[0].dur_ns,
                         "timings out of order");
            }
        }
        VT_OK(t, vkt_trace_add_counter(tr, pid, "memory_bytes", vkt_trace_now_ns(),
                                       (double)vkt_device_memory_used(dev)));
        vkt_cmd_destroy(cmd);
        vkt_buffer_destroy(b);
        vkt_buffer_destroy(a);
    }
    vkt_trace_destroy(tr);
}

// ---------------------------------------------------------------------------------------------
// Rules and queries

static void queries(vt *t) {
    VT_CHECK(t, vkt_trace_category_of("fwd:dense0:matmul") == VKT_CAT_FORWARD, "fwd");
    VT_CHECK(t, vkt_trace_category_of("bwd:x") == VKT_CAT_BACKWARD, "bwd");
    VT_CHECK(t, vkt_trace_category_of("opt:adamw") == VKT_CAT_OPTIMIZER, "opt");
    VT_CHECK(t, vkt_trace_category_of("comm:allreduce") == VKT_CAT_COMMUNICATION, "comm");
    VT_CHECK(t, vkt_trace_category_of("wait:peer") == VKT_CAT_WAIT, "wait");
    VT_CHECK(t, vkt_trace_category_of("idle") == VKT_CAT_WAIT, "idle");
    VT_CHECK(t, vkt_trace_category_of("fwdx:y") == VKT_CAT_OTHER, "prefix must match whole");
    VT_CHECK(t, vkt_trace_category_of("matmul") == VKT_CAT_OTHER, "no prefix");
    VT_CHECK(t, vkt_trace_category_of(NULL) == VKT_CAT_OTHER, "NULL");

    vkt_trace *tr;
    VT_OK(t, vkt_trace_create(&tr));
    int p;
    VT_OK(t, vkt_trace_add_device(tr, "d", "drv", 100, &p));
    int64_t b = 1000;
    // [0,10) and [5,15) overlap -> 15; [20,30) -> 10; the wait [30,50) is not busy.
    VT_OK(t, vkt_trace_add_event(tr, p, "fwd:a", VKT_CAT_FORWARD, b + 0, 10, 0));
    VT_OK(t, vkt_trace_add_event(tr, p, "comm:b", VKT_CAT_COMMUNICATION, b + 5, 10, 0));
    VT_OK(t, vkt_trace_add_event(tr, p, "opt:c", VKT_CAT_OPTIMIZER, b + 20, 10, 1));
    VT_OK(t, vkt_trace_add_event(tr, p, "wait:d", VKT_CAT_WAIT, b + 30, 20, 1));
    VT_CHECK(t, vkt_trace_add_event(tr, 7, "x", VKT_CAT_OTHER, 0, 1, 0) == VKT_ERR_ARG,
             "bad pid accepted");
    VT_CHECK(t, vkt_trace_add_event(tr, p, "x", VKT_CAT_OTHER, 0, -1, 0) == VKT_ERR_ARG,
             "negative duration accepted");
    VT_CHECK(t, vkt_trace_add_counter(tr, 3, "memory_bytes", 0, 1) == VKT_ERR_ARG,
             "bad counter pid accepted");
    int64_t t0, t1;
    VT_CHECK(t, vkt_trace_time_range(tr, &t0, &t1) && t0 == b && t1 == b + 50, "range %lld..%lld",
             (long long)t0, (long long)t1);
    VT_CHECK(t, vkt_trace_busy_ns(tr, p, b, b + 50) == 25, "busy %lld",
             (long long)vkt_trace_busy_ns(tr, p, b, b + 50));
    VT_CHECK(t, vkt_trace_busy_ns(tr, p, b + 8, b + 22) == 9, "windowed busy %lld",
             (long long)vkt_trace_busy_ns(tr, p, b + 8, b + 22));
    float u[5];
    VT_OK(t, vkt_trace_utilisation(tr, p, b, b + 50, 5, u));
    const float want[5] = {1.0f, 0.5f, 1.0f, 0.0f, 0.0f};
    for (int k = 0; k < 5; k++)
        VT_CHECK(t, fabsf(u[k] - want[k]) < 1e-6f, "bucket %d: %g want %g", k, u[k], want[k]);
    vkt_trace_summary sum;
    VT_CHECK(t, !vkt_trace_get_summary(tr, p, &sum), "summary reported as the trainer's");
    VT_CHECK(t, fabs(sum.busy_fraction - 0.5) < 1e-12 && fabs(sum.idle_fraction - 0.5) < 1e-12,
             "computed busy %g idle %g", sum.busy_fraction, sum.idle_fraction);
    VT_OK(t, vkt_trace_add_counter(tr, p, "memory_bytes", b + 1, 300));
    VT_OK(t, vkt_trace_add_counter(tr, p, "memory_bytes", b, 200));
    vkt_trace_counter c[4];
    size_t total;
    size_t n = vkt_trace_counter_series(tr, p, "memory_bytes", c, 4, &total);
    VT_CHECK(t, n == 2 && total == 2 && c[0].t_ns == b && c[0].value == 200 && c[1].value == 300,
             "counter series not in time order");
    vkt_trace_get_summary(tr, p, &sum);
    VT_CHECK(t, sum.peak_memory_bytes == 300, "computed peak %llu",
             (unsigned long long)sum.peak_memory_bytes);
    vkt_trace_destroy(tr);
}

// ---------------------------------------------------------------------------------------------
// Files

static bool same_event(const vkt_trace_event *a, const vkt_trace_event *b) {
    return strcmp(a->name, b->name) == 0 && a->pid == b->pid && a->step == b->step &&
           a->cat == b->cat && a->start_ns == b->start_ns && a->dur_ns == b->dur_ns;
}

static int cmp_ev(const void *x, const void *y) {
    const vkt_trace_event *a = x, *b = y;
    if (a->pid != b->pid) return a->pid - b->pid;
    if (a->start_ns != b->start_ns) return a->start_ns < b->start_ns ? -1 : 1;
    return strcmp(a->name, b->name);
}

static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    if (s && fread(s, 1, (size_t)n, f) != (size_t)n) n = 0;
    if (s) s[n] = 0;
    fclose(f);
    return s;
}

static void spit(const char *path, const char *text, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return;
    fwrite(text, 1, n, f);
    fclose(f);
}

// The file is a Chrome trace in object form, with what Perfetto needs.
static void check_format(vt *t, const char *path, size_t nev, size_t nctr, int ndev) {
    char *text = slurp(path);
    cJSON *root = text ? cJSON_Parse(text) : NULL;
    VT_CHECK(t, root && cJSON_IsObject(root), "written trace is not a JSON object");
    if (!root) {
        free(text);
        return;
    }
    cJSON *evs = cJSON_GetObjectItem(root, "traceEvents"),
          *unit = cJSON_GetObjectItem(root, "displayTimeUnit");
    cJSON *other = cJSON_GetObjectItem(root, "otherData");
    VT_CHECK(t, cJSON_IsArray(evs), "no traceEvents array");
    VT_CHECK(t, cJSON_IsString(unit) && strcmp(unit->valuestring, "ms") == 0, "displayTimeUnit");
    VT_CHECK(t,
             cJSON_IsObject(other) &&
                 cJSON_IsString(cJSON_GetObjectItem(other, "vktrain_version")) &&
                 cJSON_IsString(cJSON_GetObjectItem(other, "strategy")) &&
                 cJSON_GetArraySize(cJSON_GetObjectItem(other, "devices")) == ndev &&
                 cJSON_GetArraySize(cJSON_GetObjectItem(other, "summary")) == ndev,
             "otherData lacks vktrain_version/strategy/devices/summary");
    cJSON *s0 = cJSON_GetArrayItem(cJSON_GetObjectItem(other, "summary"), 0);
    VT_CHECK(t,
             s0 && cJSON_GetObjectItem(s0, "busy_fraction") &&
                 cJSON_GetObjectItem(s0, "idle_fraction") &&
                 cJSON_GetObjectItem(s0, "bytes_moved") &&
                 cJSON_GetObjectItem(s0, "peak_memory_bytes"),
             "summary fields");
    size_t nx = 0, nc = 0, nnames = 0;
    double last_ts = -1, min_ts = 1e300;
    bool sorted = true, fields = true;
    cJSON *e;
    cJSON_ArrayForEach(e, evs) {
        const char *ph = cJSON_GetStringValue(cJSON_GetObjectItem(e, "ph"));
        cJSON *ts = cJSON_GetObjectItem(e, "ts");
        fields &= ph && cJSON_IsNumber(cJSON_GetObjectItem(e, "pid")) &&
                  cJSON_IsNumber(cJSON_GetObjectItem(e, "tid"));
        if (ph && strcmp(ph, "X") == 0) {
            nx++;
            fields &= cJSON_IsNumber(ts) && cJSON_IsNumber(cJSON_GetObjectItem(e, "dur")) &&
                      cJSON_IsString(cJSON_GetObjectItem(e, "cat")) &&
                      cJSON_IsNumber(cJSON_GetObjectItem(cJSON_GetObjectItem(e, "args"), "step"));
            if (cJSON_IsNumber(ts)) {
                sorted &= ts->valuedouble >= last_ts;
                last_ts = ts->valuedouble;
                if (ts->valuedouble < min_ts) min_ts = ts->valuedouble;
            }
        } else if (ph && strcmp(ph, "C") == 0) {
            nc++;
            fields &= cJSON_IsNumber(ts) && cJSON_IsObject(cJSON_GetObjectItem(e, "args"));
            if (cJSON_IsNumber(ts) && ts->valuedouble < min_ts) min_ts = ts->valuedouble;
        } else if (ph && strcmp(ph, "M") == 0) {
            const char *what = cJSON_GetStringValue(cJSON_GetObjectItem(e, "name"));
            nnames += what && strcmp(what, "process_name") == 0;
        }
    }
    VT_CHECK(t, fields, "an event lacks ph/pid/tid/ts/dur/cat/args.step");
    VT_CHECK(t, nx == nev && nc == nctr, "file has %zu X and %zu C events, want %zu and %zu", nx,
             nc, nev, nctr);
    VT_CHECK(t, nnames == (size_t)ndev + 1, "%zu process_name events for %d devices + host", nnames,
             ndev);
    VT_CHECK(t, sorted, "complete events are not in time order in the file");
    VT_CHECK(t, min_ts == 0, "times do not start at 0 (min ts %g)", min_ts);
    cJSON_Delete(root);
    free(text);
}

static void round_trip(vt *t, const char *dir) {
    char path[512];
    snprintf(path, sizeof path, "%s/trace.json", dir);
    vkt_trace *a, *b = NULL;
    VT_OK(t, vkt_trace_create(&a));
    VT_OK(t, synthetic(a));
    // Hard names, a NaN loss, a clock, a trainer summary for device 0 only.
    VT_OK(t, vkt_trace_add_event(a, 1, "other: \"quoted\" \\ back\tslash \xc2\xb5s", VKT_CAT_OTHER,
                                 5000 * MS + 3, 7, 9));
    VT_OK(t, vkt_trace_add_counter(a, VKT_TRACE_HOST, "loss", 5200 * MS, NAN));
    VT_OK(t, vkt_trace_set_clock(a, 0, -123456789, 4321, "calibrated_timestamps"));
    vkt_trace_summary s0 = {.busy_fraction = 0.75,
                            .idle_fraction = 0.25,
                            .bytes_moved = 123456789012ull,
                            .peak_memory_bytes = 987654321};
    VT_OK(t, vkt_trace_set_summary(a, 0, &s0));
    VT_OK(t, vkt_trace_write(a, path));
    VT_CHECK(t, access(path, F_OK) == 0, "no file written");
    char tmp[600];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    VT_CHECK(t, access(tmp, F_OK) != 0, "the temporary file was left behind");
    size_t nev = vkt_trace_event_count(a), nctr = vkt_trace_counter_count(a);
    check_format(t, path, nev, nctr, 2);

    VT_OK(t, vkt_trace_load(path, &b));
    if (!b) {
        vkt_trace_destroy(a);
        return;
    }
    VT_CHECK(t, vkt_trace_device_count(b) == 2, "devices %d", vkt_trace_device_count(b));
    for (int p = 0; p < 2; p++) {
        vkt_trace_device da, db;
        vkt_trace_get_device(a, p, &da);
        vkt_trace_get_device(b, p, &db);
        VT_CHECK(t,
                 strcmp(da.label, db.label) == 0 && strcmp(da.driver, db.driver) == 0 &&
                     da.memory_limit == db.memory_limit && da.calibrated == db.calibrated &&
                     da.clock_offset_ns == db.clock_offset_ns &&
                     da.clock_uncertainty_ns == db.clock_uncertainty_ns,
                 "device %d differs after the round trip", p);
    }
    char strategy[64];
    vkt_trace_get_strategy(b, strategy, sizeof strategy);
    VT_CHECK(t, strcmp(strategy, "layers") == 0, "strategy \"%s\"", strategy);
    vkt_trace_summary sb;
    VT_CHECK(t,
             vkt_trace_get_summary(b, 0, &sb) && sb.busy_fraction == 0.75 &&
                 sb.idle_fraction == 0.25 && sb.bytes_moved == 123456789012ull &&
                 sb.peak_memory_bytes == 987654321,
             "trainer summary lost");
    VT_CHECK(t, !vkt_trace_get_summary(b, 1, &sb), "device 1 gained a trainer summary");
    VT_CHECK(t, vkt_trace_event_count(b) == nev && vkt_trace_counter_count(b) == nctr,
             "loaded %zu events / %zu counters, wrote %zu / %zu", vkt_trace_event_count(b),
             vkt_trace_counter_count(b), nev, nctr);
    vkt_trace_event *ea = calloc(nev, sizeof *ea), *eb = calloc(nev, sizeof *eb);
    size_t na = vkt_trace_get_events(a, 0, ea, nev), nb = vkt_trace_get_events(b, 0, eb, nev);
    qsort(ea, na, sizeof *ea, cmp_ev);
    qsort(eb, nb, sizeof *eb, cmp_ev);
    size_t diff = 0;
    for (size_t i = 0; i < na && i < nb; i++)
        diff += !same_event(&ea[i], &eb[i]);
    VT_CHECK(t, na == nb && diff == 0, "%zu of %zu events differ after the round trip", diff, na);
    // Loaded events come back in time order (the file is sorted).
    bool ordered = true;
    vkt_trace_get_events(b, 0, eb, nev);
    for (size_t i = 1; i < nb; i++)
        ordered &= eb[i].start_ns >= eb[i - 1].start_ns;
    VT_CHECK(t, ordered, "loaded events are not in time order");
    free(ea);
    free(eb);
    vkt_trace_counter la[16], lb[16];
    size_t nla = vkt_trace_counter_series(a, VKT_TRACE_HOST, "loss", la, 16, NULL);
    size_t nlb = vkt_trace_counter_series(b, VKT_TRACE_HOST, "loss", lb, 16, NULL);
    bool same = nla == nlb;
    for (size_t i = 0; same && i < nla; i++)
        same = la[i].t_ns == lb[i].t_ns &&
               (la[i].value == lb[i].value || (isnan(la[i].value) && isnan(lb[i].value)));
    VT_CHECK(t, same && nla == 7, "loss series differs (%zu vs %zu samples)", nla, nlb);
    int64_t ra0, ra1, rb0, rb1;
    vkt_trace_time_range(a, &ra0, &ra1);
    vkt_trace_time_range(b, &rb0, &rb1);
    VT_CHECK(t, ra0 == rb0 && ra1 == rb1, "time range moved");
    // Writing the loaded trace again gives the same file.
    char path2[600];
    snprintf(path2, sizeof path2, "%s/trace2.json", dir);
    VT_OK(t, vkt_trace_write(b, path2));
    char *x = slurp(path), *y = slurp(path2);
    VT_CHECK(t, x && y && strcmp(x, y) == 0, "write(load(f)) != f");
    free(x), free(y);

    // Writing where it cannot: a clear error, no stray file.
    VT_CHECK(t,
             vkt_trace_write(a, "/nonexistent-dir/t.json") == VKT_ERR_IO &&
                 strstr(vkt_error(), "/nonexistent-dir"),
             "unwritable path: %s", vkt_error());
    vkt_trace_destroy(b);
    vkt_trace_destroy(a);
}

static void malformed(vt *t, const char *dir) {
    char good[512], path[512];
    snprintf(good, sizeof good, "%s/trace.json", dir);
    snprintf(path, sizeof path, "%s/bad.json", dir);
    vkt_trace *tr = NULL;
    VT_CHECK(t,
             vkt_trace_load("/nonexistent/x.json", &tr) == VKT_ERR_IO &&
                 strstr(vkt_error(), "/nonexistent/x.json"),
             "missing file: %s", vkt_error());
    spit(path, "", 0);
    VT_CHECK(t, vkt_trace_load(path, &tr) == VKT_ERR_FORMAT && strstr(vkt_error(), "empty"),
             "empty: %s", vkt_error());
    char *text = slurp(good);
    if (text) {
        spit(path, text,
             strlen(text) / 2); // a run killed while writing (without the atomic rename)
        VT_CHECK(t,
                 vkt_trace_load(path, &tr) == VKT_ERR_FORMAT &&
                     strstr(vkt_error(), "not valid JSON") && strstr(vkt_error(), "line"),
                 "truncated: %s", vkt_error());
        free(text);
    }
    const char *bad_json = "{\"traceEvents\": [1, 2,, 3]}";
    spit(path, bad_json, strlen(bad_json));
    VT_CHECK(t, vkt_trace_load(path, &tr) == VKT_ERR_FORMAT && strstr(vkt_error(), "line 1"),
             "syntax: %s", vkt_error());
    const char *not_trace = "{\"hello\": 1}";
    spit(path, not_trace, strlen(not_trace));
    VT_CHECK(t, vkt_trace_load(path, &tr) == VKT_ERR_FORMAT && strstr(vkt_error(), "traceEvents"),
             "not a trace: %s", vkt_error());
    const char *no_dur =
        "{\"traceEvents\":[{\"name\":\"fwd:a\",\"ph\":\"X\",\"ts\":1,\"pid\":0,\"tid\":0}]}";
    spit(path, no_dur, strlen(no_dur));
    VT_CHECK(t,
             vkt_trace_load(path, &tr) == VKT_ERR_FORMAT && strstr(vkt_error(), "traceEvents[0]") &&
                 strstr(vkt_error(), "dur"),
             "X without dur: %s", vkt_error());
    const char *no_ph = "{\"traceEvents\":[{\"name\":\"a\",\"ts\":1,\"pid\":0}]}";
    spit(path, no_ph, strlen(no_ph));
    VT_CHECK(t, vkt_trace_load(path, &tr) == VKT_ERR_FORMAT && strstr(vkt_error(), "ph"),
             "no ph: %s", vkt_error());
    const char *bad_pid =
        "{\"traceEvents\":[{\"name\":\"a\",\"ph\":\"X\",\"ts\":1,\"dur\":2,\"pid\":5,\"tid\":0}],"
        "\"otherData\":{\"devices\":[{\"pid\":0,\"name\":\"d\"}]}}";
    spit(path, bad_pid, strlen(bad_pid));
    VT_CHECK(t, vkt_trace_load(path, &tr) == VKT_ERR_FORMAT && strstr(vkt_error(), "pid 5"),
             "bad pid: %s", vkt_error());
    VT_CHECK(t, tr == NULL, "a failed load returned a trace");
    // A plain Chrome trace without otherData (from another tool) still loads: processes become
    // devices, the one named "host" holds the run-wide counters.
    const char *foreign =
        "[{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":7,\"args\":{\"name\":\"gpu\"}},"
        "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":9,\"args\":{\"name\":\"host\"}},"
        "{\"name\":\"bwd:k\",\"ph\":\"X\",\"ts\":10,\"dur\":5,\"pid\":7,\"tid\":1},"
        "{\"name\":\"loss\",\"ph\":\"C\",\"ts\":12,\"pid\":9,\"args\":{\"value\":0.5}}]";
    spit(path, foreign, strlen(foreign));
    VT_OK(t, vkt_trace_load(path, &tr));
    if (tr) {
        vkt_trace_event e;
        vkt_trace_counter c;
        VT_CHECK(t,
                 vkt_trace_device_count(tr) == 1 && vkt_trace_get_events(tr, 0, &e, 1) == 1 &&
                     e.cat == VKT_CAT_BACKWARD && e.start_ns == 10000 && e.dur_ns == 5000 &&
                     e.step == -1,
                 "foreign trace events");
        VT_CHECK(t,
                 vkt_trace_counter_series(tr, VKT_TRACE_HOST, "loss", &c, 1, NULL) == 1 &&
                     c.value == 0.5,
                 "foreign trace host counter");
        vkt_trace_destroy(tr);
    }
}

// Numbers of the file that are converted to integers are checked first, each refusal naming
// the field (a double out of an integer's range is undefined behaviour; tests/fuzz/fuzz_trace
// found ts = -1e300 giving a start of INT64_MIN and an overflowing time range); times within
// 2^60 ns still load. JSON nested past cJSON's 1000 levels says so.
static void out_of_range(vt *t, const char *dir) {
    char path[512];
    snprintf(path, sizeof path, "%s/range.json", dir);
#define EV(fields) "{\"traceEvents\":[{\"name\":\"fwd:a\",\"ph\":\"X\",\"tid\":0," fields "}]"
#define DEV(fields) ",\"otherData\":{\"devices\":[{\"pid\":0,\"name\":\"d\"" fields "}]}}"
    static const struct {
        const char *json, *needle;
    } bad[] = {
        {EV("\"ts\":1e30,\"dur\":1,\"pid\":0") "}", "traceEvents[0].ts is 1e+30"},
        {EV("\"ts\":-1e300,\"dur\":1,\"pid\":0") "}",
         "traceEvents[0].ts is -1.0000000000000001e+300"},
        {EV("\"ts\":1,\"dur\":2e15,\"pid\":0") "}", "traceEvents[0].dur is 2000000000000000"},
        {EV("\"ts\":1,\"dur\":1,\"pid\":3e9") "}", "traceEvents[0].pid is 3000000000"},
        {EV("\"ts\":1,\"dur\":1,\"pid\":0.5") "}", "traceEvents[0].pid is 0.5"},
        {EV("\"ts\":1,\"dur\":1,\"pid\":0,\"args\":{\"step\":1e20}") "}",
         "traceEvents[0].args.step is 1e+20"},
        {EV("\"ts\":1,\"dur\":1,\"pid\":0") ",\"otherData\":{\"origin_ns\":1e300}}",
         "otherData.origin_ns is 1.0000000000000001e+300"},
        {EV("\"ts\":1,\"dur\":1,\"pid\":0") DEV(",\"memory_limit_bytes\":-1"),
         "otherData.devices[0].memory_limit_bytes is -1"},
        {EV("\"ts\":1,\"dur\":1,\"pid\":0") DEV(",\"memory_limit_bytes\":2e19"),
         "otherData.devices[0].memory_limit_bytes is 2e+19"},
        {EV("\"ts\":1,\"dur\":1,\"pid\":0")
             DEV(",\"clock_method\":\"m\",\"clock_offset_ns\":-1e19"),
         "otherData.devices[0].clock_offset_ns is -1e+19"},
        {EV("\"ts\":1,\"dur\":1,\"pid\":0")
             DEV(",\"clock_method\":\"m\",\"clock_offset_ns\":0,\"clock_uncertainty_ns\":-3"),
         "otherData.devices[0].clock_uncertainty_ns is -3"},
        {EV("\"ts\":1,\"dur\":1,\"pid\":0") ",\"otherData\":{\"devices\":[{\"pid\":0,\"name\":"
                                            "\"d\"}],"
                                            "\"summary\":[{\"pid\":0,\"source\":\"trainer\","
                                            "\"bytes_moved\":1e30}]}}",
         "otherData.summary[0].bytes_moved is 1e+30"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        spit(path, bad[i].json, strlen(bad[i].json));
        vkt_trace *tr = NULL;
        vkt_status s = vkt_trace_load(path, &tr);
        VT_CHECK(t, s == VKT_ERR_FORMAT && strstr(vkt_error(), bad[i].needle) && !tr,
                 "case %zu: %s: \"%s\" lacks \"%s\"", i, vkt_status_name(s), vkt_error(),
                 bad[i].needle);
        vkt_trace_destroy(tr);
    }
    // The extremes that fit load, and their queries stay in range; a memory_bytes counter past
    // uint64 is the computed summary's largest peak.
    const char *edge =
        "{\"traceEvents\":["
        "{\"name\":\"fwd:a\",\"ph\":\"X\",\"ts\":-1.1e15,\"dur\":1.1e15,\"pid\":0},"
        "{\"name\":\"fwd:b\",\"ph\":\"X\",\"ts\":1.1e15,\"dur\":1.1e15,\"pid\":0},"
        "{\"name\":\"memory_bytes\",\"ph\":\"C\",\"ts\":0,\"pid\":0,"
        "\"args\":{\"value\":1e300}}],"
        "\"otherData\":{\"origin_ns\":-1.1e18,\"devices\":[{\"pid\":0,\"name\":\"d\","
        "\"memory_limit_bytes\":1.8e19}]}}";
    spit(path, edge, strlen(edge));
    vkt_trace *tr = NULL;
    VT_OK(t, vkt_trace_load(path, &tr));
    if (tr) {
        int64_t t0 = 0, t1 = 0;
        vkt_trace_summary sum;
        VT_CHECK(t,
                 vkt_trace_time_range(tr, &t0, &t1) && t0 == -2200000000000000000ll &&
                     t1 == 1100000000000000000ll,
                 "edge range %lld..%lld", (long long)t0, (long long)t1);
        VT_CHECK(t, vkt_trace_busy_ns(tr, 0, t0, t1) == 2200000000000000000ll, "edge busy %lld",
                 (long long)vkt_trace_busy_ns(tr, 0, t0, t1));
        VT_CHECK(t, !vkt_trace_get_summary(tr, 0, &sum) && sum.peak_memory_bytes == UINT64_MAX,
                 "edge peak %llu", (unsigned long long)sum.peak_memory_bytes);
        vkt_trace_destroy(tr);
    }
#undef EV
#undef DEV

    // 1000 levels (the object, traceEvents and 998 arrays) is JSON the reader takes (and refuses
    // as a trace: an event is no array); 1001 is refused as too deep, saying where.
    for (int k = 998; k <= 999; k++) {
        size_t cap = (size_t)k * 2 + 64, n = 0;
        char *text = malloc(cap);
        n += (size_t)snprintf(text, cap, "{\"traceEvents\": [");
        for (int i = 0; i < k; i++)
            text[n++] = '[';
        for (int i = 0; i < k; i++)
            text[n++] = ']';
        n += (size_t)snprintf(text + n, cap - n, "]}");
        spit(path, text, n);
        vkt_status s = vkt_trace_load(path, &tr);
        char at[48];
        snprintf(at, sizeof at, "line 1, column %d", 17 + k);
        if (k == 998)
            VT_CHECK(t,
                     s == VKT_ERR_FORMAT && strstr(vkt_error(), "traceEvents[0] is not an object"),
                     "1000 levels: %s", vkt_error());
        else
            VT_CHECK(t,
                     s == VKT_ERR_FORMAT && strstr(vkt_error(), "nested deeper than 1000 levels") &&
                         strstr(vkt_error(), at),
                     "1001 levels: %s (expected %s)", vkt_error(), at);
        free(text);
    }
}

// ---------------------------------------------------------------------------------------------
// Concurrency: a trainer thread appends; the viewer side syncs a private copy meanwhile.

#define APPENDS 20000

static void *appender(void *arg) {
    vkt_trace *tr = arg;
    for (int i = 0; i < APPENDS; i++) {
        if (vkt_trace_add_event(tr, 0, i % 2 ? "fwd:a" : "bwd:b",
                                i % 2 ? VKT_CAT_FORWARD : VKT_CAT_BACKWARD, (int64_t)i * 10, 5,
                                i / 100) != VKT_OK)
            return (void *)1;
        if (i % 100 == 0 && vkt_trace_add_counter(tr, VKT_TRACE_HOST, "loss", (int64_t)i * 10,
                                                  1.0 / (i + 1)) != VKT_OK)
            return (void *)1;
    }
    return NULL;
}

static void concurrency(vt *t) {
    vkt_trace *src, *copy;
    VT_OK(t, vkt_trace_create(&src));
    VT_OK(t, vkt_trace_create(&copy));
    VT_OK(t, vkt_trace_add_device(src, "d0", "", 0, NULL));
    pthread_t th;
    pthread_create(&th, NULL, appender, src);
    int syncs = 0;
    while (vkt_trace_event_count(src) < APPENDS && syncs < 1000000) {
        VT_OK(t, vkt_trace_sync(copy, src));
        syncs++;
    }
    void *ret;
    pthread_join(th, &ret);
    VT_CHECK(t, ret == NULL, "appender failed: %s", vkt_error());
    VT_OK(t, vkt_trace_sync(copy, src));
    VT_CHECK(
        t, vkt_trace_event_count(copy) == APPENDS && vkt_trace_counter_count(copy) == APPENDS / 100,
        "copy has %zu events / %zu counters after %d syncs", vkt_trace_event_count(copy),
        vkt_trace_counter_count(copy), syncs);
    VT_CHECK(t, vkt_trace_busy_ns(copy, 0, 0, APPENDS * 10) == APPENDS * 5, "busy in the copy");
    vkt_trace_event e;
    VT_CHECK(t,
             vkt_trace_get_events(copy, APPENDS - 1, &e, 1) == 1 && strcmp(e.name, "fwd:a") == 0 &&
                 e.start_ns == (APPENDS - 1) * 10ll,
             "last event in the copy");
    printf("test_trace: %d syncs while %d events were appended\n", syncs, APPENDS);
    vkt_trace_destroy(copy);
    vkt_trace_destroy(src);
}

int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "--synthetic") == 0) return write_synthetic(argv[2]);
    vt tv, *t = &tv;
    if (vt_init(t, "test_trace")) return 1;
    char dir[] = "/tmp/vkt_test_trace_XXXXXX";
    VT_CHECK(t, mkdtemp(dir) != NULL, "mkdtemp");
    calibration(t);
    queries(t);
    round_trip(t, dir);
    malformed(t, dir);
    out_of_range(t, dir);
    concurrency(t);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "test_trace: could not remove %s\n", dir);
    return vt_finish(t);
}
