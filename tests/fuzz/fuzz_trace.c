// fuzz_trace.c: libFuzzer harness of the trace reader, vkt_trace_load (engine/core/trace.c):
// the input is a Chrome trace JSON file; when it loads, the trace is queried as the viewer
// queries it (devices, summaries, events, counters and their series, the time range, busy time
// and utilisation per device) and copied with vkt_trace_sync, since those read the numbers the
// file gave. Load must give VKT_OK or VKT_ERR_FORMAT with a message.
#include "fuzz_util.h"

#include "trace.h"
#include "vktrain.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char path[64];
    int fd = fz_memfd(data, size, path, sizeof path);
    vkt_trace *t = NULL;
    vkt_status s = vkt_trace_load(path, &t);
    close(fd);
    if (s != VKT_OK) {
        if ((s != VKT_ERR_FORMAT && s != VKT_ERR_HOST_MEMORY) || !*vkt_error() || t)
            fz_fail("vkt_trace_load returned another status, no message or a trace");
        return 0;
    }
    int ndev = vkt_trace_device_count(t);
    char strategy[64];
    vkt_trace_get_strategy(t, strategy, sizeof strategy);
    size_t nev = vkt_trace_event_count(t), nctr = vkt_trace_counter_count(t);
    vkt_trace_event *ev = malloc((nev ? nev : 1) * sizeof *ev);
    vkt_trace_counter *ctr = malloc((nctr ? nctr : 1) * sizeof *ctr);
    vkt_trace_counter *series = malloc((nctr ? nctr : 1) * sizeof *series);
    if (!ev || !ctr || !series) abort();
    if (vkt_trace_get_events(t, 0, ev, nev) != nev) fz_fail("vkt_trace_get_events");
    if (vkt_trace_get_counters(t, 0, ctr, nctr) != nctr) fz_fail("vkt_trace_get_counters");
    for (size_t i = 0; i < nev; i++)
        if (ev[i].pid < 0 || ev[i].pid >= ndev || ev[i].dur_ns < 0 || !ev[i].name)
            fz_fail("an event with a bad pid, a negative duration or no name");
    for (size_t i = 0; i < nctr && i < 8; i++) {
        size_t total = 0;
        size_t n = vkt_trace_counter_series(t, ctr[i].pid, ctr[i].name, series, nctr, &total);
        if (n == 0 || n != total) fz_fail("vkt_trace_counter_series of a counter the trace has");
    }
    int64_t t0 = 0, t1 = 0;
    bool any = vkt_trace_time_range(t, &t0, &t1);
    if (any != (nev + nctr > 0) || (any && t1 < t0)) fz_fail("vkt_trace_time_range");
    for (int pid = -1; pid <= ndev; pid++) {
        vkt_trace_device d;
        if (vkt_trace_get_device(t, pid, &d) != (pid >= 0 && pid < ndev))
            fz_fail("vkt_trace_get_device");
        vkt_trace_summary sum;
        (void)vkt_trace_get_summary(t, pid, &sum);
        if (!any) continue;
        int64_t busy = vkt_trace_busy_ns(t, pid, t0, t1);
        if (busy < 0 || (t1 > t0 && (uint64_t)busy > (uint64_t)(t1 - t0))) fz_fail("busy_ns");
        float u[16];
        if (t1 > t0 && vkt_trace_utilisation(t, pid, t0, t1, 16, u) != VKT_OK)
            fz_fail("vkt_trace_utilisation");
    }
    vkt_trace *copy = NULL;
    if (vkt_trace_create(&copy) != VKT_OK || vkt_trace_sync(copy, t) != VKT_OK ||
        vkt_trace_event_count(copy) != nev || vkt_trace_counter_count(copy) != nctr)
        fz_fail("vkt_trace_sync");
    vkt_trace_destroy(copy);
    free(ev);
    free(ctr);
    free(series);
    vkt_trace_destroy(t);
    return 0;
}
