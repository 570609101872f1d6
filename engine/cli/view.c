// view.c: `vktrain view FILE.json`: shows a trace written by training (Chrome trace JSON) in a
// window, or renders it to a PNG with --png (no display needed). --replay plays the file back
// as a live run (a thread appends its events in time order while the window draws), which is
// how `train --view` feeds the viewer. Thin: parses flags, loads the trace, calls viewer/.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "env.h"
#include "trace.h"
#include "viewer.h"

static int usage_error(const char *msg, const char *arg) {
    fprintf(
        stderr,
        "vktrain view: %s%s%s\n"
        "usage: vktrain view FILE.json [--device SPEC] [--exit-after SECONDS] "
        "[--panel overview|timeline|devices|training] [--replay SECONDS]\n"
        "       vktrain view FILE.json --png OUT.png [--size WxH] [--device SPEC] [--panel ...]\n",
        msg, arg ? " " : "", arg ? arg : "");
    return 2;
}

// ---------------------------------------------------------------------------------------------
// --replay: the file's events appended to a live trace at the pace they happened, scaled to
// last `seconds`.

typedef struct replay {
    const vkt_trace *file;
    vkt_trace *live;
    double seconds;
    int stop; // set by the main thread when the window closes
    vkt_status status;
    char error[512];
} replay;

static int cmp_event(const void *a, const void *b) {
    const vkt_trace_event *p = a, *q = b;
    return (p->start_ns > q->start_ns) - (p->start_ns < q->start_ns);
}

static int cmp_counter(const void *a, const void *b) {
    const vkt_trace_counter *p = a, *q = b;
    return (p->t_ns > q->t_ns) - (p->t_ns < q->t_ns);
}

static vkt_status replay_run(replay *r) {
    const vkt_trace *f = r->file;
    char strategy[64];
    vkt_trace_get_strategy(f, strategy, sizeof strategy);
    vkt_status s = vkt_trace_set_strategy(r->live, strategy);
    for (int d = 0; d < vkt_trace_device_count(f) && s == VKT_OK; d++) {
        vkt_trace_device dev;
        vkt_trace_summary sum;
        vkt_trace_get_device(f, d, &dev);
        s = vkt_trace_add_device(r->live, dev.label, dev.driver, dev.memory_limit, NULL);
        if (s == VKT_OK && vkt_trace_get_summary(f, d, &sum))
            s = vkt_trace_set_summary(r->live, d, &sum);
    }
    size_t ne = vkt_trace_event_count(f), nc = vkt_trace_counter_count(f);
    vkt_trace_event *ev = malloc((ne ? ne : 1) * sizeof *ev);
    vkt_trace_counter *ct = malloc((nc ? nc : 1) * sizeof *ct);
    int64_t t0 = 0, t1 = 0;
    if (!ev || !ct) {
        free(ev);
        free(ct);
        snprintf(r->error, sizeof r->error, "out of host memory replaying %zu events", ne);
        return VKT_ERR_HOST_MEMORY;
    }
    if (s != VKT_OK) snprintf(r->error, sizeof r->error, "%s", vkt_error());
    if (s == VKT_OK && vkt_trace_time_range(f, &t0, &t1)) {
        ne = vkt_trace_get_events(f, 0, ev, ne);
        nc = vkt_trace_get_counters(f, 0, ct, nc);
        qsort(ev, ne, sizeof *ev, cmp_event);
        qsort(ct, nc, sizeof *ct, cmp_counter);
        struct timespec start, now;
        clock_gettime(CLOCK_MONOTONIC, &start);
        size_t ie = 0, ic = 0;
        while (s == VKT_OK && (ie < ne || ic < nc) &&
               !__atomic_load_n(&r->stop, __ATOMIC_RELAXED)) {
            clock_gettime(CLOCK_MONOTONIC, &now);
            double f_done =
                ((double)(now.tv_sec - start.tv_sec) + (now.tv_nsec - start.tv_nsec) * 1e-9) /
                r->seconds;
            int64_t upto = f_done >= 1 ? INT64_MAX : t0 + (int64_t)(f_done * (double)(t1 - t0));
            for (; ie < ne && ev[ie].start_ns + ev[ie].dur_ns <= upto && s == VKT_OK; ie++)
                s = vkt_trace_add_event(r->live, ev[ie].pid, ev[ie].name, ev[ie].cat,
                                        ev[ie].start_ns, ev[ie].dur_ns, ev[ie].step);
            for (; ic < nc && ct[ic].t_ns <= upto && s == VKT_OK; ic++)
                s = vkt_trace_add_counter(r->live, ct[ic].pid, ct[ic].name, ct[ic].t_ns,
                                          ct[ic].value);
            if (s != VKT_OK) snprintf(r->error, sizeof r->error, "%s", vkt_error());
            nanosleep(&(struct timespec){0, 20 * 1000000}, NULL);
        }
    }
    free(ev);
    free(ct);
    return s;
}

static void *replay_thread(void *arg) {
    replay *r = arg;
    r->status = replay_run(r); // error messages are per thread: replay_run keeps its own
    return NULL;
}

// Returns the exit status; prints what failed.
static int view_replay(const vkt_trace *file, vkt_viewer_opts *o, double seconds) {
    replay r = {.file = file, .seconds = seconds};
    if (vkt_trace_create(&r.live) != VKT_OK) return cli_fail(vkt_error());
    pthread_t th;
    if (pthread_create(&th, NULL, replay_thread, &r) != 0) {
        vkt_trace_destroy(r.live);
        return cli_fail("cannot start the replay thread");
    }
    o->live = true;
    vkt_status s =
        vkt_viewer_run(r.live, o); // the main thread draws; the replay never waits for it
    int rc = s == VKT_OK ? 0 : cli_fail(vkt_error());
    __atomic_store_n(&r.stop, 1, __ATOMIC_RELAXED);
    pthread_join(th, NULL);
    vkt_trace_destroy(r.live);
    if (rc == 0 && r.status != VKT_OK) rc = cli_fail(r.error);
    return rc;
}

int cmd_view(int argc, char **argv) {
    const char *file = NULL, *png = NULL;
    double replay_s = 0;
    cli_env env;
    if (cli_env_read(&env) != VKT_OK) return cli_fail(vkt_error());
    vkt_viewer_opts o = {.validation = env.context.validation, .font_path = env.font};
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        bool has_value = i + 1 < argc;
        if (strcmp(a, "--device") == 0 && has_value) {
            o.device_spec = argv[++i];
        } else if (strcmp(a, "--png") == 0 && has_value) {
            png = argv[++i];
        } else if (strcmp(a, "--panel") == 0 && has_value) {
            o.panel = argv[++i];
        } else if (strcmp(a, "--layout") == 0 && has_value) {
            o.layout_path = argv[++i]; // where the timeline was drawn, as JSON (for tests)
        } else if (strcmp(a, "--size") == 0 && has_value) {
            const char *v = argv[++i];
            char *end;
            long w = strtol(v, &end, 10), h = 0;
            if (*end == 'x' || *end == 'X') h = strtol(end + 1, &end, 10);
            if (*end || w <= 0 || h <= 0 || w > 16384 || h > 16384)
                return usage_error("--size wants WIDTHxHEIGHT, each 1 to 16384, not", v);
            o.width = (int)w, o.height = (int)h;
        } else if (strcmp(a, "--replay") == 0 && has_value) {
            char *end;
            replay_s = strtod(argv[++i], &end);
            if (*end || !(replay_s > 0))
                return usage_error("--replay wants seconds > 0, not", argv[i]);
        } else if (strcmp(a, "--exit-after") == 0 && has_value) {
            char *end;
            o.exit_after_s = strtod(argv[++i], &end);
            if (*end || !(o.exit_after_s > 0))
                return usage_error("--exit-after wants seconds > 0, not", argv[i]);
        } else if (a[0] == '-' && a[1]) {
            return usage_error(
                has_value || strncmp(a, "--", 2) ? "unknown option" : "missing value for", a);
        } else if (!file) {
            file = a;
        } else {
            return usage_error("one trace file at a time; extra argument", a);
        }
    }
    if (!file)
        return usage_error("which trace? give FILE.json (written by vktrain train --trace)", NULL);
    o.source = file;
    vkt_trace *t;
    if (vkt_trace_load(file, &t) != VKT_OK) return cli_fail(vkt_error());
    if (png && replay_s > 0) {
        vkt_trace_destroy(t);
        return usage_error("--replay plays the trace in a window; it does not go with", "--png");
    }
    if (replay_s > 0) {
        int rc = view_replay(t, &o, replay_s);
        vkt_trace_destroy(t);
        return rc;
    }
    vkt_status s = png ? vkt_viewer_render_png(t, &o, png) : vkt_viewer_run(t, &o);
    vkt_trace_destroy(t);
    if (s != VKT_OK) return cli_fail(vkt_error());
    if (png) printf("wrote %s\n", png);
    return 0;
}
