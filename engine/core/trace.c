// trace.c: the in-memory trace (devices, complete events, counters, run metadata) behind one
// mutex, its queries (time range, busy time as a union of intervals, utilisation buckets), and
// its file form: Chrome trace event JSON, written by streaming (a long run has millions of
// events) and read back with cJSON. Not here: measuring clocks (clock.c), drawing (viewer/).
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "json_depth.h"
#include "trace.h"
#include "vkt_internal.h"

// ---------------------------------------------------------------------------------------------
// Structure

typedef struct device_rec {
    vkt_trace_device pub;
    vkt_trace_summary summary;
    bool has_summary;
} device_rec;

// Names are interned: an event is 40 bytes, not 40 bytes plus a malloc'd string.
typedef struct chunk {
    struct chunk *next;
    size_t used, size;
    char data[];
} chunk;

struct vkt_trace {
    pthread_mutex_t lock;
    device_rec *devs;
    int ndev, capdev;
    vkt_trace_event *ev;
    size_t nev, capev;
    vkt_trace_counter *ctr;
    size_t nctr, capctr;
    char strategy[64];
    char version_string[32];
    uint64_t version;
    int64_t created_ns;
    // string table
    const char **slots;
    size_t nslots, nstrings;
    chunk *chunks;
    // what vkt_trace_sync has copied into this trace so far
    size_t synced_ev, synced_ctr;
};

// Every number of the file is checked before it is converted to an integer (a double out of
// the integer's range is undefined behaviour in C). Times and durations are bounded by 2^60 ns
// (36 years) from the file's origin, so that the sums and differences the queries take (start
// + duration, t1 - t0) stay inside int64.
#define MAX_TRACE_NS 1152921504606846976.0 // 2^60
#define MAX_TRACE_US (MAX_TRACE_NS / 1000.0)
#define MAX_U64_DOUBLE 18446744073709549568.0 // the largest double below 2^64
#define MAX_INT_DOUBLE 2147483647.0

#define LOCK(t) pthread_mutex_lock((pthread_mutex_t *)&(t)->lock)
#define UNLOCK(t) pthread_mutex_unlock((pthread_mutex_t *)&(t)->lock)

static const char *CATEGORY_NAMES[VKT_CAT_COUNT] = {
    "forward", "backward", "optimizer", "communication", "wait", "other",
};

int64_t vkt_trace_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

vkt_status vkt_trace_create(vkt_trace **out) {
    *out = NULL;
    vkt_trace *t = calloc(1, sizeof *t);
    if (!t) return vkt_fail(VKT_ERR_HOST_MEMORY, "out of host memory creating a trace");
    pthread_mutex_init(&t->lock, NULL);
    snprintf(t->version_string, sizeof t->version_string, "%s", VKT_VERSION);
    t->created_ns = vkt_trace_now_ns();
    *out = t;
    return VKT_OK;
}

void vkt_trace_destroy(vkt_trace *t) {
    if (!t) return;
    for (chunk *c = t->chunks, *next; c; c = next) {
        next = c->next;
        free(c);
    }
    free(t->slots);
    free(t->devs);
    free(t->ev);
    free(t->ctr);
    pthread_mutex_destroy(&t->lock);
    free(t);
}

// ---------------------------------------------------------------------------------------------
// String table (called with the lock held)

static uint64_t hash_str(const char *s) {
    uint64_t h = 1469598103934665603ull; // FNV-1a
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static const char *intern(vkt_trace *t, const char *s) {
    if (!s) s = "";
    if (t->nstrings * 2 >= t->nslots) {
        size_t n = t->nslots ? t->nslots * 2 : 256;
        const char **slots = calloc(n, sizeof *slots);
        if (!slots) return NULL;
        for (size_t i = 0; i < t->nslots; i++) {
            if (!t->slots[i]) continue;
            size_t j = hash_str(t->slots[i]) & (n - 1);
            while (slots[j])
                j = (j + 1) & (n - 1);
            slots[j] = t->slots[i];
        }
        free(t->slots);
        t->slots = slots;
        t->nslots = n;
    }
    size_t j = hash_str(s) & (t->nslots - 1);
    while (t->slots[j]) {
        if (strcmp(t->slots[j], s) == 0) return t->slots[j];
        j = (j + 1) & (t->nslots - 1);
    }
    size_t len = strlen(s) + 1;
    if (!t->chunks || t->chunks->size - t->chunks->used < len) {
        size_t size = len > 65536 ? len : 65536;
        chunk *c = malloc(sizeof *c + size);
        if (!c) return NULL;
        c->next = t->chunks;
        c->used = 0;
        c->size = size;
        t->chunks = c;
    }
    char *dst = t->chunks->data + t->chunks->used;
    memcpy(dst, s, len);
    t->chunks->used += len;
    t->slots[j] = dst;
    t->nstrings++;
    return dst;
}

static bool grow(void **arr, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return true;
    size_t n = *cap ? *cap * 2 : 1024;
    while (n < need)
        n *= 2;
    void *p = realloc(*arr, n * elem);
    if (!p) return false;
    *arr = p;
    *cap = n;
    return true;
}

// ---------------------------------------------------------------------------------------------
// Building

static vkt_status add_device_locked(vkt_trace *t, const char *label, const char *driver,
                                    uint64_t memory_limit, int *pid) {
    if (t->ndev == t->capdev) {
        int n = t->capdev ? t->capdev * 2 : 8;
        device_rec *d = realloc(t->devs, (size_t)n * sizeof *d);
        if (!d) return vkt_fail(VKT_ERR_HOST_MEMORY, "out of host memory adding a trace device");
        t->devs = d;
        t->capdev = n;
    }
    device_rec *d = &t->devs[t->ndev];
    memset(d, 0, sizeof *d);
    snprintf(d->pub.label, sizeof d->pub.label, "%s", label ? label : "");
    snprintf(d->pub.driver, sizeof d->pub.driver, "%s", driver ? driver : "");
    d->pub.memory_limit = memory_limit;
    if (pid) *pid = t->ndev;
    t->ndev++;
    t->version++;
    return VKT_OK;
}

vkt_status vkt_trace_add_device(vkt_trace *t, const char *label, const char *driver,
                                uint64_t memory_limit, int *pid) {
    LOCK(t);
    vkt_status s = add_device_locked(t, label, driver, memory_limit, pid);
    UNLOCK(t);
    return s;
}

vkt_status vkt_trace_add_vk_device(vkt_trace *t, const vkt_device *dev, int *pid) {
    return vkt_trace_add_device(t, vkt_device_label(dev), vkt_device_get_info(dev)->driver,
                                vkt_device_memory_limit(dev), pid);
}

vkt_status vkt_trace_set_clock(vkt_trace *t, int pid, int64_t offset_ns, int64_t uncertainty_ns,
                               const char *method) {
    LOCK(t);
    if (pid < 0 || pid >= t->ndev) {
        int n = t->ndev;
        UNLOCK(t);
        return vkt_fail(VKT_ERR_ARG, "trace device %d does not exist (the trace has %d)", pid, n);
    }
    vkt_trace_device *d = &t->devs[pid].pub;
    d->clock_offset_ns = offset_ns;
    d->clock_uncertainty_ns = uncertainty_ns;
    d->calibrated = true;
    snprintf(d->clock_method, sizeof d->clock_method, "%s", method ? method : "manual");
    t->version++;
    UNLOCK(t);
    return VKT_OK;
}

vkt_status vkt_trace_set_device_label(vkt_trace *t, int pid, const char *label) {
    LOCK(t);
    if (pid < 0 || pid >= t->ndev) {
        int n = t->ndev;
        UNLOCK(t);
        return vkt_fail(VKT_ERR_ARG, "trace device %d does not exist (the trace has %d)", pid, n);
    }
    snprintf(t->devs[pid].pub.label, sizeof t->devs[pid].pub.label, "%s", label ? label : "");
    t->version++;
    UNLOCK(t);
    return VKT_OK;
}

vkt_status vkt_trace_calibrate(vkt_trace *t, int pid, vkt_device *dev) {
    if (pid < 0 || pid >= vkt_trace_device_count(t))
        return vkt_fail(VKT_ERR_ARG, "trace device %d does not exist (the trace has %d)", pid,
                        vkt_trace_device_count(t));
    int64_t offset, uncertainty;
    const char *method;
    // The measurement runs without the lock: it waits for the device.
    VKT_TRY(vkt_device_clock_offset(dev, &offset, &uncertainty, &method));
    return vkt_trace_set_clock(t, pid, offset, uncertainty, method);
}

vkt_trace_category vkt_trace_category_of(const char *label) {
    if (!label) return VKT_CAT_OTHER;
    const char *colon = strchr(label, ':');
    size_t n = colon ? (size_t)(colon - label) : strlen(label);
    static const struct {
        const char *prefix;
        vkt_trace_category cat;
    } map[] = {
        {"fwd", VKT_CAT_FORWARD},        {"forward", VKT_CAT_FORWARD},
        {"bwd", VKT_CAT_BACKWARD},       {"backward", VKT_CAT_BACKWARD},
        {"opt", VKT_CAT_OPTIMIZER},      {"optimizer", VKT_CAT_OPTIMIZER},
        {"comm", VKT_CAT_COMMUNICATION}, {"communication", VKT_CAT_COMMUNICATION},
        {"wait", VKT_CAT_WAIT},          {"idle", VKT_CAT_WAIT},
    };
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (strlen(map[i].prefix) == n && strncmp(map[i].prefix, label, n) == 0) return map[i].cat;
    return VKT_CAT_OTHER;
}

const char *vkt_trace_category_name(vkt_trace_category c) {
    return c >= 0 && c < VKT_CAT_COUNT ? CATEGORY_NAMES[c] : "other";
}

static vkt_trace_category category_by_name(const char *name) {
    for (int c = 0; c < VKT_CAT_COUNT; c++)
        if (strcmp(name, CATEGORY_NAMES[c]) == 0) return (vkt_trace_category)c;
    if (strcmp(name, "idle") == 0) return VKT_CAT_WAIT;
    return vkt_trace_category_of(name);
}

static vkt_status add_event_locked(vkt_trace *t, int pid, const char *name, vkt_trace_category cat,
                                   int64_t start_ns, int64_t dur_ns, int step) {
    if (pid < 0 || pid >= t->ndev)
        return vkt_fail(VKT_ERR_ARG, "trace event \"%s\" names device %d; the trace has %d",
                        name ? name : "", pid, t->ndev);
    if (dur_ns < 0)
        return vkt_fail(VKT_ERR_ARG, "trace event \"%s\" has a negative duration (%lld ns)",
                        name ? name : "", (long long)dur_ns);
    if ((int)cat < 0 || cat >= VKT_CAT_COUNT) cat = VKT_CAT_OTHER;
    if (!grow((void **)&t->ev, &t->capev, t->nev + 1, sizeof *t->ev))
        return vkt_fail(VKT_ERR_HOST_MEMORY, "out of host memory: the trace holds %zu events",
                        t->nev);
    const char *s = intern(t, name);
    if (!s) return vkt_fail(VKT_ERR_HOST_MEMORY, "out of host memory interning a trace name");
    t->ev[t->nev++] = (vkt_trace_event){
        .name = s, .pid = pid, .step = step, .cat = cat, .start_ns = start_ns, .dur_ns = dur_ns};
    t->version++;
    return VKT_OK;
}

vkt_status vkt_trace_add_event(vkt_trace *t, int pid, const char *name, vkt_trace_category cat,
                               int64_t start_ns, int64_t dur_ns, int step) {
    LOCK(t);
    vkt_status s = add_event_locked(t, pid, name, cat, start_ns, dur_ns, step);
    UNLOCK(t);
    return s;
}

vkt_status vkt_trace_add_timings(vkt_trace *t, int pid, const vkt_timing *tm, int n, int step,
                                 vkt_trace_classify_fn classify, void *user) {
    LOCK(t);
    vkt_status s = VKT_OK;
    if (pid < 0 || pid >= t->ndev) {
        s = vkt_fail(VKT_ERR_ARG, "trace device %d does not exist (the trace has %d)", pid,
                     t->ndev);
    } else if (!t->devs[pid].pub.calibrated) {
        s = vkt_fail(VKT_ERR_ARG,
                     "trace device %d (%s) has no clock offset yet: call "
                     "vkt_trace_calibrate before adding its timings",
                     pid, t->devs[pid].pub.label);
    } else {
        int64_t off = t->devs[pid].pub.clock_offset_ns;
        for (int i = 0; i < n && s == VKT_OK; i++) {
            vkt_trace_category cat =
                classify ? classify(tm[i].label, user) : vkt_trace_category_of(tm[i].label);
            int64_t start = (int64_t)tm[i].start_ns, end = (int64_t)tm[i].end_ns;
            s = add_event_locked(t, pid, tm[i].label, cat, start + off,
                                 end > start ? end - start : 0, step);
        }
    }
    UNLOCK(t);
    return s;
}

static vkt_status add_counter_locked(vkt_trace *t, int pid, const char *name, int64_t t_ns,
                                     double value) {
    if (pid != VKT_TRACE_HOST && (pid < 0 || pid >= t->ndev))
        return vkt_fail(VKT_ERR_ARG, "trace counter \"%s\" names device %d; the trace has %d",
                        name ? name : "", pid, t->ndev);
    if (!grow((void **)&t->ctr, &t->capctr, t->nctr + 1, sizeof *t->ctr))
        return vkt_fail(VKT_ERR_HOST_MEMORY, "out of host memory: the trace holds %zu counters",
                        t->nctr);
    const char *s = intern(t, name);
    if (!s) return vkt_fail(VKT_ERR_HOST_MEMORY, "out of host memory interning a trace name");
    t->ctr[t->nctr++] = (vkt_trace_counter){.name = s, .pid = pid, .t_ns = t_ns, .value = value};
    t->version++;
    return VKT_OK;
}

vkt_status vkt_trace_add_counter(vkt_trace *t, int pid, const char *name, int64_t t_ns,
                                 double value) {
    LOCK(t);
    vkt_status s = add_counter_locked(t, pid, name, t_ns, value);
    UNLOCK(t);
    return s;
}

vkt_status vkt_trace_set_strategy(vkt_trace *t, const char *strategy) {
    LOCK(t);
    snprintf(t->strategy, sizeof t->strategy, "%s", strategy ? strategy : "");
    t->version++;
    UNLOCK(t);
    return VKT_OK;
}

vkt_status vkt_trace_set_summary(vkt_trace *t, int pid, const vkt_trace_summary *s) {
    LOCK(t);
    if (pid < 0 || pid >= t->ndev) {
        int n = t->ndev;
        UNLOCK(t);
        return vkt_fail(VKT_ERR_ARG, "trace device %d does not exist (the trace has %d)", pid, n);
    }
    t->devs[pid].summary = *s;
    t->devs[pid].has_summary = true;
    t->version++;
    UNLOCK(t);
    return VKT_OK;
}

// ---------------------------------------------------------------------------------------------
// Queries (the _locked versions expect the lock held)

static bool range_locked(const vkt_trace *t, int64_t *t0, int64_t *t1) {
    int64_t lo = INT64_MAX, hi = INT64_MIN;
    for (size_t i = 0; i < t->nev; i++) {
        if (t->ev[i].start_ns < lo) lo = t->ev[i].start_ns;
        if (t->ev[i].start_ns + t->ev[i].dur_ns > hi) hi = t->ev[i].start_ns + t->ev[i].dur_ns;
    }
    for (size_t i = 0; i < t->nctr; i++) {
        if (t->ctr[i].t_ns < lo) lo = t->ctr[i].t_ns;
        if (t->ctr[i].t_ns > hi) hi = t->ctr[i].t_ns;
    }
    if (lo > hi) return false;
    *t0 = lo;
    *t1 = hi;
    return true;
}

typedef struct interval {
    int64_t a, b;
} interval;

static int cmp_interval(const void *x, const void *y) {
    const interval *p = x, *q = y;
    return (p->a > q->a) - (p->a < q->a);
}

// The union of pid's non-wait events clipped to [t0, t1), as sorted disjoint intervals. Returns
// the count, or -1 when out of memory. *out is malloc'd (free it).
static long busy_intervals_locked(const vkt_trace *t, int pid, int64_t t0, int64_t t1,
                                  interval **out) {
    *out = NULL;
    size_t n = 0;
    for (size_t i = 0; i < t->nev; i++)
        n += t->ev[i].pid == pid;
    interval *iv = malloc((n ? n : 1) * sizeof *iv);
    if (!iv) return -1;
    n = 0;
    for (size_t i = 0; i < t->nev; i++) {
        const vkt_trace_event *e = &t->ev[i];
        if (e->pid != pid || e->cat == VKT_CAT_WAIT) continue;
        int64_t a = e->start_ns > t0 ? e->start_ns : t0;
        int64_t b = e->start_ns + e->dur_ns < t1 ? e->start_ns + e->dur_ns : t1;
        if (b > a) iv[n++] = (interval){a, b};
    }
    qsort(iv, n, sizeof *iv, cmp_interval);
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        if (m && iv[i].a <= iv[m - 1].b) {
            if (iv[i].b > iv[m - 1].b) iv[m - 1].b = iv[i].b;
        } else {
            iv[m++] = iv[i];
        }
    }
    *out = iv;
    return (long)m;
}

static int64_t busy_ns_locked(const vkt_trace *t, int pid, int64_t t0, int64_t t1) {
    interval *iv;
    long n = busy_intervals_locked(t, pid, t0, t1, &iv);
    int64_t sum = 0;
    for (long i = 0; i < n; i++)
        sum += iv[i].b - iv[i].a;
    free(iv);
    return n < 0 ? -1 : sum;
}

static void computed_summary_locked(const vkt_trace *t, int pid, vkt_trace_summary *s) {
    memset(s, 0, sizeof *s);
    int64_t t0, t1;
    if (range_locked(t, &t0, &t1) && t1 > t0) {
        int64_t busy = busy_ns_locked(t, pid, t0, t1);
        if (busy >= 0) {
            s->busy_fraction = (double)busy / (double)(t1 - t0);
            s->idle_fraction = 1.0 - s->busy_fraction;
        }
    }
    // A counter's value is any double (a loaded file's too): one past uint64's range counts as
    // its largest value rather than converting with undefined behaviour.
    for (size_t i = 0; i < t->nctr; i++)
        if (t->ctr[i].pid == pid && strcmp(t->ctr[i].name, "memory_bytes") == 0 &&
            t->ctr[i].value > (double)s->peak_memory_bytes)
            s->peak_memory_bytes =
                t->ctr[i].value >= MAX_U64_DOUBLE ? UINT64_MAX : (uint64_t)t->ctr[i].value;
}

int vkt_trace_device_count(const vkt_trace *t) {
    LOCK(t);
    int n = t->ndev;
    UNLOCK(t);
    return n;
}

bool vkt_trace_get_device(const vkt_trace *t, int pid, vkt_trace_device *out) {
    LOCK(t);
    bool ok = pid >= 0 && pid < t->ndev;
    if (ok) *out = t->devs[pid].pub;
    UNLOCK(t);
    return ok;
}

void vkt_trace_get_strategy(const vkt_trace *t, char *buf, size_t size) {
    LOCK(t);
    snprintf(buf, size, "%s", t->strategy);
    UNLOCK(t);
}

bool vkt_trace_get_summary(const vkt_trace *t, int pid, vkt_trace_summary *out) {
    LOCK(t);
    bool set = false;
    memset(out, 0, sizeof *out);
    if (pid >= 0 && pid < t->ndev) {
        set = t->devs[pid].has_summary;
        if (set)
            *out = t->devs[pid].summary;
        else
            computed_summary_locked(t, pid, out);
    }
    UNLOCK(t);
    return set;
}

size_t vkt_trace_event_count(const vkt_trace *t) {
    LOCK(t);
    size_t n = t->nev;
    UNLOCK(t);
    return n;
}

size_t vkt_trace_counter_count(const vkt_trace *t) {
    LOCK(t);
    size_t n = t->nctr;
    UNLOCK(t);
    return n;
}

size_t vkt_trace_get_events(const vkt_trace *t, size_t first, vkt_trace_event *out, size_t max) {
    LOCK(t);
    size_t n = first < t->nev ? t->nev - first : 0;
    if (n > max) n = max;
    if (n) memcpy(out, t->ev + first, n * sizeof *out);
    UNLOCK(t);
    return n;
}

size_t vkt_trace_get_counters(const vkt_trace *t, size_t first, vkt_trace_counter *out,
                              size_t max) {
    LOCK(t);
    size_t n = first < t->nctr ? t->nctr - first : 0;
    if (n > max) n = max;
    if (n) memcpy(out, t->ctr + first, n * sizeof *out);
    UNLOCK(t);
    return n;
}

static int cmp_counter_time(const void *x, const void *y) {
    const vkt_trace_counter *p = x, *q = y;
    return (p->t_ns > q->t_ns) - (p->t_ns < q->t_ns);
}

size_t vkt_trace_counter_series(const vkt_trace *t, int pid, const char *name,
                                vkt_trace_counter *out, size_t max, size_t *total) {
    LOCK(t);
    size_t n = 0, all = 0;
    bool sorted = true;
    for (size_t i = 0; i < t->nctr; i++) {
        const vkt_trace_counter *c = &t->ctr[i];
        if (c->pid != pid || strcmp(c->name, name) != 0) continue;
        all++;
        if (n < max) {
            if (n && c->t_ns < out[n - 1].t_ns) sorted = false;
            out[n++] = *c;
        }
    }
    UNLOCK(t);
    if (!sorted) qsort(out, n, sizeof *out, cmp_counter_time);
    if (total) *total = all;
    return n;
}

bool vkt_trace_time_range(const vkt_trace *t, int64_t *t0, int64_t *t1) {
    LOCK(t);
    bool ok = range_locked(t, t0, t1);
    UNLOCK(t);
    return ok;
}

int64_t vkt_trace_busy_ns(const vkt_trace *t, int pid, int64_t t0, int64_t t1) {
    LOCK(t);
    int64_t b = busy_ns_locked(t, pid, t0, t1);
    UNLOCK(t);
    return b < 0 ? 0 : b;
}

vkt_status vkt_trace_utilisation(const vkt_trace *t, int pid, int64_t t0, int64_t t1, int nbuckets,
                                 float *out) {
    if (nbuckets <= 0 || t1 <= t0)
        return vkt_fail(VKT_ERR_ARG, "utilisation needs buckets and a non-empty window");
    double *acc = calloc((size_t)nbuckets, sizeof *acc);
    if (!acc) return vkt_fail(VKT_ERR_HOST_MEMORY, "out of host memory");
    LOCK(t);
    interval *iv;
    long n = busy_intervals_locked(t, pid, t0, t1, &iv);
    UNLOCK(t);
    if (n < 0) {
        free(acc);
        return vkt_fail(VKT_ERR_HOST_MEMORY, "out of host memory");
    }
    double width = (double)(t1 - t0) / nbuckets;
    for (long i = 0; i < n; i++) {
        double a = (double)(iv[i].a - t0), b = (double)(iv[i].b - t0);
        int ka = (int)(a / width), kb = (int)(b / width);
        if (kb >= nbuckets) kb = nbuckets - 1;
        for (int k = ka; k <= kb; k++) {
            double lo = k * width, hi = lo + width;
            double overlap = (b < hi ? b : hi) - (a > lo ? a : lo);
            if (overlap > 0) acc[k] += overlap;
        }
    }
    for (int k = 0; k < nbuckets; k++) {
        double f = acc[k] / width;
        out[k] = (float)(f > 1.0 ? 1.0 : f);
    }
    free(iv);
    free(acc);
    return VKT_OK;
}

uint64_t vkt_trace_version(const vkt_trace *t) {
    LOCK(t);
    uint64_t v = t->version;
    UNLOCK(t);
    return v;
}

vkt_status vkt_trace_sync(vkt_trace *dst, const vkt_trace *src) {
    // Copy under src's lock (short), then intern and append under dst's. Name pointers of src
    // stay valid after the unlock: its string table only grows.
    LOCK(src);
    int ndev = src->ndev;
    size_t nev = src->nev > dst->synced_ev ? src->nev - dst->synced_ev : 0;
    size_t nctr = src->nctr > dst->synced_ctr ? src->nctr - dst->synced_ctr : 0;
    device_rec *devs = malloc((size_t)(ndev ? ndev : 1) * sizeof *devs);
    vkt_trace_event *ev = malloc((nev ? nev : 1) * sizeof *ev);
    vkt_trace_counter *ctr = malloc((nctr ? nctr : 1) * sizeof *ctr);
    if (!devs || !ev || !ctr) {
        UNLOCK(src);
        free(devs), free(ev), free(ctr);
        return vkt_fail(VKT_ERR_HOST_MEMORY, "out of host memory copying the trace");
    }
    if (ndev) memcpy(devs, src->devs, (size_t)ndev * sizeof *devs);
    if (nev) memcpy(ev, src->ev + dst->synced_ev, nev * sizeof *ev);
    if (nctr) memcpy(ctr, src->ctr + dst->synced_ctr, nctr * sizeof *ctr);
    char strategy[sizeof src->strategy], version[sizeof src->version_string];
    memcpy(strategy, src->strategy, sizeof strategy);
    memcpy(version, src->version_string, sizeof version);
    UNLOCK(src);

    vkt_status s = VKT_OK;
    LOCK(dst);
    while (dst->ndev < ndev && s == VKT_OK)
        s = add_device_locked(dst, NULL, NULL, 0, NULL);
    for (int i = 0; i < ndev && s == VKT_OK; i++)
        dst->devs[i] = devs[i];
    memcpy(dst->strategy, strategy, sizeof strategy);
    memcpy(dst->version_string, version, sizeof version);
    for (size_t i = 0; i < nev && s == VKT_OK; i++)
        s = add_event_locked(dst, ev[i].pid, ev[i].name, ev[i].cat, ev[i].start_ns, ev[i].dur_ns,
                             ev[i].step);
    for (size_t i = 0; i < nctr && s == VKT_OK; i++)
        s = add_counter_locked(dst, ctr[i].pid, ctr[i].name, ctr[i].t_ns, ctr[i].value);
    if (s == VKT_OK) {
        dst->synced_ev += nev;
        dst->synced_ctr += nctr;
        dst->version++;
    }
    UNLOCK(dst);
    free(devs), free(ev), free(ctr);
    return s;
}

// ---------------------------------------------------------------------------------------------
// Writing

static void put_json_string(FILE *f, const char *s) {
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(f, "\\%c", *p);
        else if (*p == '\n')
            fputs("\\n", f);
        else if (*p == '\t')
            fputs("\\t", f);
        else if (*p < 0x20)
            fprintf(f, "\\u%04x", *p);
        else
            fputc(*p, f);
    }
    fputc('"', f);
}

// JSON has no NaN or infinity; such values (a diverged loss) are written as null.
static void put_number(FILE *f, double v) {
    if (isfinite(v))
        fprintf(f, "%.17g", v);
    else
        fputs("null", f);
}

static int cmp_event_ptr(const void *x, const void *y) {
    const vkt_trace_event *p = *(const vkt_trace_event *const *)x,
                          *q = *(const vkt_trace_event *const *)y;
    if (p->start_ns != q->start_ns) return p->start_ns < q->start_ns ? -1 : 1;
    if (p->pid != q->pid) return p->pid < q->pid ? -1 : 1;
    return (p > q) - (p < q); // keeps the order of addition among equals
}

static int cmp_counter_ptr(const void *x, const void *y) {
    const vkt_trace_counter *p = *(const vkt_trace_counter *const *)x,
                            *q = *(const vkt_trace_counter *const *)y;
    if (p->t_ns != q->t_ns) return p->t_ns < q->t_ns ? -1 : 1;
    return (p > q) - (p < q);
}

// Every element of traceEvents but the first is preceded by ",\n" (JSON allows no trailing
// comma). Metadata events come first, so that a reader knows the processes before their events.
static void put_metadata(FILE *f, const char *what, int pid, const char *key, const char *str,
                         int num) {
    fprintf(f, "%s{\"name\":\"%s\",\"ph\":\"M\",\"ts\":0,\"pid\":%d,\"tid\":0,\"args\":{\"%s\":",
            pid == 0 && strcmp(what, "process_name") == 0 ? "" : ",\n", what, pid, key);
    if (str)
        put_json_string(f, str);
    else
        fprintf(f, "%d", num);
    fputs("}}", f);
}

static void write_locked(const vkt_trace *t, FILE *f, const vkt_trace_event **ev,
                         const vkt_trace_counter **ctr) {
    int64_t origin, end;
    if (!range_locked(t, &origin, &end)) origin = t->created_ns;
    int host = t->ndev;
    fputs("{\"traceEvents\":[\n", f);
    for (int p = 0; p < t->ndev; p++) {
        put_metadata(f, "process_name", p, "name", t->devs[p].pub.label, 0);
        put_metadata(f, "process_sort_index", p, "sort_index", NULL, p);
        put_metadata(f, "thread_name", p, "name", "queue", 0);
    }
    put_metadata(f, "process_name", host, "name", "host", 0);
    put_metadata(f, "process_sort_index", host, "sort_index", NULL, host);
    put_metadata(f, "thread_name", host, "name", "trainer", 0);
    for (size_t i = 0; i < t->nev; i++) {
        const vkt_trace_event *e = ev[i];
        fputs(",\n{\"name\":", f);
        put_json_string(f, e->name);
        fprintf(f,
                ",\"cat\":\"%s\",\"ph\":\"X\",\"ts\":%.3f,\"dur\":%.3f,\"pid\":%d,\"tid\":0,"
                "\"args\":{\"step\":%d}}",
                vkt_trace_category_name(e->cat), (double)(e->start_ns - origin) / 1000.0,
                (double)e->dur_ns / 1000.0, e->pid, e->step);
    }
    for (size_t i = 0; i < t->nctr; i++) {
        const vkt_trace_counter *c = ctr[i];
        fputs(",\n{\"name\":", f);
        put_json_string(f, c->name);
        fprintf(f, ",\"ph\":\"C\",\"ts\":%.3f,\"pid\":%d,\"tid\":0,\"args\":{\"value\":",
                (double)(c->t_ns - origin) / 1000.0, c->pid == VKT_TRACE_HOST ? host : c->pid);
        put_number(f, c->value);
        fputs("}}", f);
    }
    fputs("\n],\n", f);
    fputs("\"displayTimeUnit\":\"ms\",\n\"otherData\":{\"vktrain_version\":", f);
    put_json_string(f, t->version_string);
    fputs(",\"strategy\":", f);
    put_json_string(f, t->strategy);
    fprintf(f, ",\"clock\":\"CLOCK_MONOTONIC\",\"origin_ns\":%lld,\"devices\":[",
            (long long)origin);
    for (int p = 0; p < t->ndev; p++) {
        const vkt_trace_device *d = &t->devs[p].pub;
        fprintf(f, "%s{\"pid\":%d,\"name\":", p ? "," : "", p);
        put_json_string(f, d->label);
        fputs(",\"driver\":", f);
        put_json_string(f, d->driver);
        fprintf(f, ",\"memory_limit_bytes\":%llu,\"clock_method\":",
                (unsigned long long)d->memory_limit);
        put_json_string(f, d->clock_method);
        fprintf(f, ",\"clock_offset_ns\":%lld,\"clock_uncertainty_ns\":%lld}",
                (long long)d->clock_offset_ns, (long long)d->clock_uncertainty_ns);
    }
    fputs("],\"summary\":[", f);
    for (int p = 0; p < t->ndev; p++) {
        vkt_trace_summary s;
        bool set = t->devs[p].has_summary;
        if (set)
            s = t->devs[p].summary;
        else
            computed_summary_locked(t, p, &s);
        fprintf(f, "%s{\"pid\":%d,\"source\":\"%s\",\"busy_fraction\":", p ? "," : "", p,
                set ? "trainer" : "trace");
        put_number(f, s.busy_fraction);
        fputs(",\"idle_fraction\":", f);
        put_number(f, s.idle_fraction);
        if (set)
            fprintf(f, ",\"busy_ns\":%.0f,\"wall_ns\":%.0f,\"bytes_moved\":%llu", s.busy_ns,
                    s.wall_ns, (unsigned long long)s.bytes_moved);
        else
            fputs(",\"bytes_moved\":null", f);
        fprintf(f, ",\"peak_memory_bytes\":%llu}", (unsigned long long)s.peak_memory_bytes);
    }
    fputs("]}}\n", f);
}

vkt_status vkt_trace_write(const vkt_trace *t, const char *path) {
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid()) >= (int)sizeof tmp)
        return vkt_fail(VKT_ERR_IO, "trace path is too long: %s", path);
    LOCK(t);
    const vkt_trace_event **ev = malloc((t->nev ? t->nev : 1) * sizeof *ev);
    const vkt_trace_counter **ctr = malloc((t->nctr ? t->nctr : 1) * sizeof *ctr);
    if (!ev || !ctr) {
        UNLOCK(t);
        free(ev), free(ctr);
        return vkt_fail(VKT_ERR_HOST_MEMORY, "out of host memory writing the trace");
    }
    // Sorted by time: viewers accept any order, but people read these files too.
    for (size_t i = 0; i < t->nev; i++)
        ev[i] = &t->ev[i];
    for (size_t i = 0; i < t->nctr; i++)
        ctr[i] = &t->ctr[i];
    qsort(ev, t->nev, sizeof *ev, cmp_event_ptr);
    qsort(ctr, t->nctr, sizeof *ctr, cmp_counter_ptr);
    FILE *f = fopen(tmp, "w");
    if (!f) {
        int e = errno;
        UNLOCK(t);
        free(ev), free(ctr);
        return vkt_fail(VKT_ERR_IO,
                        "cannot write the trace: cannot create %s: %s (is the directory "
                        "there and writable?)",
                        tmp, strerror(e));
    }
    write_locked(t, f, ev, ctr);
    UNLOCK(t);
    free(ev), free(ctr);
    int bad = ferror(f) || fflush(f) != 0 || fsync(fileno(f)) != 0;
    int e = errno;
    bad |= fclose(f) != 0;
    if (bad) {
        unlink(tmp);
        return vkt_fail(VKT_ERR_IO, "cannot write the trace %s: %s (is the disk full?)", path,
                        strerror(e));
    }
    if (rename(tmp, path) != 0) {
        e = errno;
        unlink(tmp);
        return vkt_fail(VKT_ERR_IO, "cannot write the trace: renaming %s to %s failed: %s", tmp,
                        path, strerror(e));
    }
    return VKT_OK;
}

// ---------------------------------------------------------------------------------------------
// Loading

static void line_col(const char *text, size_t off, int *line, int *col) {
    *line = 1, *col = 1;
    for (size_t i = 0; i < off && text[i]; i++) {
        if (text[i] == '\n')
            (*line)++, *col = 1;
        else
            (*col)++;
    }
}

static const char *str_field(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static bool num_field(const cJSON *o, const char *key, double *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble)) return false;
    *out = v->valuedouble;
    return true;
}

typedef struct pid_map {
    int file_pid, dev; // dev: device index, or VKT_TRACE_HOST
} pid_map;

typedef struct loader {
    vkt_trace *t;
    const char *path;
    pid_map map[256];
    int nmap;
} loader;

// v, the field `key` of the JSON value at `where` ("traceEvents[3]"), must be a number in
// [lo, hi] (a whole one when whole); the message says what it is and what `expect`s.
static vkt_status check_number(const loader *L, const char *where, const char *key, double v,
                               double lo, double hi, bool whole, const char *expect) {
    if (v >= lo && v <= hi && (!whole || v == floor(v))) return VKT_OK;
    return vkt_fail(VKT_ERR_FORMAT, "trace file %s: %s.%s is %.17g; expected %s", L->path, where,
                    key, v, expect);
}

// A pid: a whole number in int's range.
static vkt_status check_pid(const loader *L, const char *where, double pid) {
    return check_number(L, where, "pid", pid, -MAX_INT_DOUBLE - 1, MAX_INT_DOUBLE, true,
                        "a whole number from -2147483648 to 2147483647 (a process id)");
}

static int map_find(const loader *L, int file_pid) {
    for (int i = 0; i < L->nmap; i++)
        if (L->map[i].file_pid == file_pid) return i;
    return -1;
}

// Devices come from otherData.devices when the file has it (pid i is device i, the host is pid
// n); otherwise every process that is not named "host" is a device, in order of pid.
static vkt_status load_devices(loader *L, const cJSON *events, const cJSON *other) {
    const cJSON *devs = other ? cJSON_GetObjectItemCaseSensitive(other, "devices") : NULL;
    if (devs) {
        if (!cJSON_IsArray(devs))
            return vkt_fail(VKT_ERR_FORMAT, "trace file %s: otherData.devices is not an array",
                            L->path);
        int i = 0;
        const cJSON *d;
        cJSON_ArrayForEach(d, devs) {
            double pid, limit = 0;
            const char *name = str_field(d, "name");
            if (!cJSON_IsObject(d) || !num_field(d, "pid", &pid) || pid != (double)i || !name)
                return vkt_fail(VKT_ERR_FORMAT,
                                "trace file %s: otherData.devices[%d] needs \"pid\": "
                                "%d and a \"name\"",
                                L->path, i, i);
            char where[64];
            snprintf(where, sizeof where, "otherData.devices[%d]", i);
            if (num_field(d, "memory_limit_bytes", &limit))
                VKT_TRY(check_number(L, where, "memory_limit_bytes", limit, 0, MAX_U64_DOUBLE,
                                     false, "a byte count from 0 to 2^64"));
            const char *driver = str_field(d, "driver");
            VKT_TRY(vkt_trace_add_device(L->t, name, driver, (uint64_t)limit, NULL));
            const char *method = str_field(d, "clock_method");
            double off = 0, unc = 0;
            if (method && *method && num_field(d, "clock_offset_ns", &off)) {
                VKT_TRY(check_number(L, where, "clock_offset_ns", off, -MAX_TRACE_NS, MAX_TRACE_NS,
                                     false, "ns within +-2^60 (36 years)"));
                if (num_field(d, "clock_uncertainty_ns", &unc))
                    VKT_TRY(check_number(L, where, "clock_uncertainty_ns", unc, 0, MAX_TRACE_NS,
                                         false, "ns from 0 to 2^60 (36 years)"));
                VKT_TRY(vkt_trace_set_clock(L->t, i, (int64_t)off, (int64_t)unc, method));
            }
            if (L->nmap == 256)
                return vkt_fail(VKT_ERR_FORMAT, "trace file %s has more than 255 devices", L->path);
            L->map[L->nmap++] = (pid_map){i, i};
            i++;
        }
        if (L->nmap < 256) L->map[L->nmap++] = (pid_map){i, VKT_TRACE_HOST};
        return VKT_OK;
    }
    // No otherData: find the processes, their names, and which one is the host.
    int pids[256], npids = 0, host = INT32_MIN;
    const char *names[256] = {0};
    const cJSON *e;
    int i = -1;
    cJSON_ArrayForEach(e, events) {
        i++;
        double pid;
        if (!num_field(e, "pid", &pid)) continue;
        char where[48];
        snprintf(where, sizeof where, "traceEvents[%d]", i);
        VKT_TRY(check_pid(L, where, pid));
        const char *ph = str_field(e, "ph");
        int p = (int)pid, k;
        for (k = 0; k < npids && pids[k] != p; k++) {
        }
        if (k == npids) {
            if (npids == 256)
                return vkt_fail(VKT_ERR_FORMAT, "trace file %s has more than 256 processes",
                                L->path);
            pids[npids++] = p;
        }
        const char *what = str_field(e, "name");
        if (ph && strcmp(ph, "M") == 0 && what && strcmp(what, "process_name") == 0) {
            const cJSON *args = cJSON_GetObjectItemCaseSensitive(e, "args");
            const char *n = args ? str_field(args, "name") : NULL;
            if (n) names[k] = n;
            if (n && strcmp(n, "host") == 0) host = p;
        }
    }
    for (int a = 0; a < npids; a++) // sort by pid, names along
        for (int b = a + 1; b < npids; b++)
            if (pids[b] < pids[a]) {
                int tp = pids[a];
                pids[a] = pids[b], pids[b] = tp;
                const char *tn = names[a];
                names[a] = names[b], names[b] = tn;
            }
    for (int k = 0; k < npids; k++) {
        if (pids[k] == host) {
            L->map[L->nmap++] = (pid_map){host, VKT_TRACE_HOST};
            continue;
        }
        char label[64];
        snprintf(label, sizeof label, "process %d", pids[k]);
        int dev;
        VKT_TRY(vkt_trace_add_device(L->t, names[k] ? names[k] : label, "", 0, &dev));
        L->map[L->nmap++] = (pid_map){pids[k], dev};
    }
    return VKT_OK;
}

static vkt_status load_events(loader *L, const cJSON *events, int64_t origin) {
    int i = -1;
    const cJSON *e;
    cJSON_ArrayForEach(e, events) {
        i++;
        if (!cJSON_IsObject(e))
            return vkt_fail(VKT_ERR_FORMAT, "trace file %s: traceEvents[%d] is not an object",
                            L->path, i);
        const char *ph = str_field(e, "ph");
        if (!ph)
            return vkt_fail(VKT_ERR_FORMAT,
                            "trace file %s: traceEvents[%d] has no \"ph\" (phase) "
                            "string",
                            L->path, i);
        bool x = strcmp(ph, "X") == 0, c = strcmp(ph, "C") == 0;
        if (!x && !c) continue; // metadata, instants, flows: nothing the trace keeps
        const char *name = str_field(e, "name");
        double ts, pid, dur = 0;
        if (!name || !num_field(e, "ts", &ts) || !num_field(e, "pid", &pid))
            return vkt_fail(VKT_ERR_FORMAT,
                            "trace file %s: traceEvents[%d] (ph \"%s\") needs a "
                            "\"name\" string and numbers \"ts\" and \"pid\"",
                            L->path, i, ph);
        char where[48];
        snprintf(where, sizeof where, "traceEvents[%d]", i);
        VKT_TRY(check_pid(L, where, pid));
        VKT_TRY(check_number(L, where, "ts", ts, -MAX_TRACE_US, MAX_TRACE_US, false,
                             "us within +-2^60 ns (36 years) of the trace's origin"));
        int m = map_find(L, (int)pid);
        if (m < 0)
            return vkt_fail(VKT_ERR_FORMAT,
                            "trace file %s: traceEvents[%d] names pid %d, which is "
                            "no device in otherData.devices",
                            L->path, i, (int)pid);
        int dev = L->map[m].dev;
        int64_t start = origin + llround(ts * 1000.0);
        const cJSON *args = cJSON_GetObjectItemCaseSensitive(e, "args");
        if (x) {
            if (!num_field(e, "dur", &dur) || dur < 0)
                return vkt_fail(VKT_ERR_FORMAT,
                                "trace file %s: traceEvents[%d] (\"%s\") is a "
                                "complete event without a \"dur\" >= 0",
                                L->path, i, name);
            VKT_TRY(check_number(L, where, "dur", dur, 0, MAX_TRACE_US, false,
                                 "us from 0 to 2^60 ns (36 years)"));
            if (dev == VKT_TRACE_HOST) continue; // host-side spans are not device work
            const char *cat = str_field(e, "cat");
            double step = -1;
            if (args && num_field(args, "step", &step)) {
                char at[64];
                snprintf(at, sizeof at, "%s.args", where);
                VKT_TRY(check_number(L, at, "step", step, -1, MAX_INT_DOUBLE, true,
                                     "a whole number from -1 (none) to 2147483647"));
            }
            VKT_TRY(vkt_trace_add_event(L->t, dev, name,
                                        cat ? category_by_name(cat) : vkt_trace_category_of(name),
                                        start, llround(dur * 1000.0), (int)step));
        } else {
            if (!cJSON_IsObject(args))
                return vkt_fail(VKT_ERR_FORMAT,
                                "trace file %s: traceEvents[%d] (counter \"%s\") "
                                "has no \"args\" object",
                                L->path, i, name);
            const cJSON *a;
            cJSON_ArrayForEach(a, args) {
                double v;
                if (cJSON_IsNull(a))
                    v = NAN;
                else if (cJSON_IsNumber(a))
                    v = a->valuedouble;
                else
                    continue;
                char full[256];
                if (strcmp(a->string, "value") == 0)
                    snprintf(full, sizeof full, "%s", name);
                else
                    snprintf(full, sizeof full, "%s.%s", name, a->string);
                VKT_TRY(vkt_trace_add_counter(L->t, dev, full, start, v));
            }
        }
    }
    return VKT_OK;
}

static vkt_status load_other(loader *L, const cJSON *other) {
    if (!other) return VKT_OK;
    const char *v = str_field(other, "vktrain_version");
    if (v) snprintf(L->t->version_string, sizeof L->t->version_string, "%s", v);
    const char *strategy = str_field(other, "strategy");
    if (strategy) VKT_TRY(vkt_trace_set_strategy(L->t, strategy));
    const cJSON *summary = cJSON_GetObjectItemCaseSensitive(other, "summary");
    const cJSON *s;
    int i = -1;
    if (cJSON_IsArray(summary)) cJSON_ArrayForEach(s, summary) {
            i++;
            double pid;
            const char *src = str_field(s, "source");
            if (!num_field(s, "pid", &pid) || !src || strcmp(src, "trainer") != 0) continue;
            vkt_trace_summary sum = {0};
            double bytes = 0, peak = 0;
            char where[64];
            snprintf(where, sizeof where, "otherData.summary[%d]", i);
            num_field(s, "busy_fraction", &sum.busy_fraction);
            num_field(s, "idle_fraction", &sum.idle_fraction);
            num_field(s, "busy_ns", &sum.busy_ns);
            num_field(s, "wall_ns", &sum.wall_ns);
            if (num_field(s, "bytes_moved", &bytes))
                VKT_TRY(check_number(L, where, "bytes_moved", bytes, 0, MAX_U64_DOUBLE, false,
                                     "a byte count from 0 to 2^64"));
            if (num_field(s, "peak_memory_bytes", &peak))
                VKT_TRY(check_number(L, where, "peak_memory_bytes", peak, 0, MAX_U64_DOUBLE, false,
                                     "a byte count from 0 to 2^64"));
            sum.bytes_moved = (uint64_t)bytes;
            sum.peak_memory_bytes = (uint64_t)peak;
            // A summary of a process that is no device (another tool's) is not the trainer's.
            if (pid == floor(pid) && pid >= 0 && pid < vkt_trace_device_count(L->t))
                VKT_TRY(vkt_trace_set_summary(L->t, (int)pid, &sum));
        }
    return VKT_OK;
}

vkt_status vkt_trace_load(const char *path, vkt_trace **out) {
    *out = NULL;
    int fd = vkt_open_input(path, "the trace file", NULL);
    if (fd < 0) return VKT_ERR_IO; // the message is set
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        close(fd);
        return vkt_fail(VKT_ERR_HOST_MEMORY, "out of host memory opening %s", path);
    }
    char *text = NULL;
    long size = -1;
    if (fseek(f, 0, SEEK_END) == 0) size = ftell(f);
    if (size >= 0 && fseek(f, 0, SEEK_SET) == 0) text = malloc((size_t)size + 1);
    if (!text || fread(text, 1, (size_t)size, f) != (size_t)size) {
        int e = errno;
        fclose(f);
        free(text);
        return vkt_fail(VKT_ERR_IO, "cannot read the trace file %s: %s", path,
                        size < 0 ? strerror(e) : "short read");
    }
    fclose(f);
    text[size] = 0;
    if (size == 0) {
        free(text);
        return vkt_fail(VKT_ERR_FORMAT,
                        "trace file %s is empty (was the run interrupted before it "
                        "wrote the trace?)",
                        path);
    }
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, (size_t)size, &end, false);
    if (!root) {
        int line, col;
        size_t off = end && end >= text ? (size_t)(end - text) : 0;
        if (!end && cJSON_GetErrorPtr()) off = (size_t)(cJSON_GetErrorPtr() - text);
        line_col(text, off, &line, &col);
        vkt_status s =
            vkt_json_too_deep(text, (size_t)size, off)
                ? vkt_fail(VKT_ERR_FORMAT,
                           "trace file %s: arrays and objects nested deeper than %d levels (at "
                           "line %d, column %d), where the JSON reader stops: not a trace (a "
                           "Chrome trace nests four levels)",
                           path, vkt_json_nesting_limit(), line, col)
                : vkt_fail(VKT_ERR_FORMAT,
                           "trace file %s is not valid JSON (error at line %d, "
                           "column %d): it may be truncated or not a trace; write it again "
                           "with vktrain train --trace",
                           path, line, col);
        free(text);
        return s;
    }
    free(text);
    const cJSON *events =
        cJSON_IsArray(root) ? root : cJSON_GetObjectItemCaseSensitive(root, "traceEvents");
    const cJSON *other =
        cJSON_IsObject(root) ? cJSON_GetObjectItemCaseSensitive(root, "otherData") : NULL;
    if (other && !cJSON_IsObject(other)) other = NULL;
    if (!cJSON_IsArray(events)) {
        cJSON_Delete(root);
        return vkt_fail(VKT_ERR_FORMAT,
                        "trace file %s is JSON but not a Chrome trace: it has no "
                        "\"traceEvents\" array",
                        path);
    }
    loader L = {.path = path};
    vkt_status s = vkt_trace_create(&L.t);
    if (s == VKT_OK) s = load_devices(&L, events, other);
    double origin = 0;
    if (s == VKT_OK && other && num_field(other, "origin_ns", &origin))
        s = check_number(&L, "otherData", "origin_ns", origin, -MAX_TRACE_NS, MAX_TRACE_NS, false,
                         "ns within +-2^60 (36 years)");
    if (s == VKT_OK) s = load_events(&L, events, (int64_t)origin);
    if (s == VKT_OK) s = load_other(&L, other);
    cJSON_Delete(root);
    if (s != VKT_OK) {
        vkt_trace_destroy(L.t);
        return s;
    }
    *out = L.t;
    return VKT_OK;
}
