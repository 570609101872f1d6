// trace_world.c: one trace for the whole run (vkt_trace_gather_world, world.h). Every rank but 0
// packs its trace into a blob (its clock offset to rank 0, devices with their clocks and the
// trainer's summaries, events, device counters; each name once, in a table), rank 0 gathers the
// blobs, checks each whole, then appends every rank's devices to its own trace as new processes
// named "rank R ...", every time moved from that rank's CLOCK_MONOTONIC to rank 0's.
// Not here: writing the file (engine/core/trace.c), measuring the offsets (world.c).
//
// The blob is in the host's byte order: every rank runs the same build. It carries a magic
// number that a rank of another byte order or another format version fails to match.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trace.h"
#include "vkt_internal.h"
#include "world.h"

#define BLOB_MAGIC 0x574b5456u // "VTKW" in little-endian bytes
#define BLOB_VERSION 1u
// Offsets and times beyond 2^60 ns (36 years) are no clock of this machine: a blob that has
// them is malformed, and the shift t - offset then stays inside int64.
#define MAX_NS ((int64_t)1 << 60)

// ---------------------------------------------------------------------------------------------
// Packing (ranks > 0)

typedef struct pack {
    unsigned char *buf;
    size_t len, cap;
    bool oom;
} pack;

static void put(pack *p, const void *data, size_t n) {
    if (p->oom) return;
    if (p->len + n > p->cap) {
        size_t cap = p->cap ? p->cap * 2 : 65536;
        while (cap < p->len + n)
            cap *= 2;
        unsigned char *b = realloc(p->buf, cap);
        if (!b) {
            p->oom = true;
            return;
        }
        p->buf = b;
        p->cap = cap;
    }
    memcpy(p->buf + p->len, data, n);
    p->len += n;
}

#define PUT(p, type, v)                                                                            \
    do {                                                                                           \
        type v_ = (v);                                                                             \
        put(p, &v_, sizeof v_);                                                                    \
    } while (0)

// A string: its length with the terminating NUL, then its bytes and the NUL.
static void put_str(pack *p, const char *s) {
    uint32_t n = (uint32_t)strlen(s) + 1;
    PUT(p, uint32_t, n);
    put(p, s, n);
}

// The trace's names are interned (one pointer per distinct name), so a table keyed by pointer
// holds each name once: a long run has millions of events and a few hundred names.
typedef struct name_table {
    const char **key;
    uint32_t *id;
    size_t slots, count;
    const char **names; // by id
} name_table;

static size_t slot_of(const name_table *nt, const char *s) {
    uint64_t h = (uint64_t)(uintptr_t)s * 0x9e3779b97f4a7c15ull;
    h ^= h >> 32;
    size_t j = h & (nt->slots - 1);
    while (nt->key[j] && nt->key[j] != s)
        j = (j + 1) & (nt->slots - 1);
    return j;
}

// The id of s, added when new; false when out of memory.
static bool name_id(name_table *nt, const char *s, uint32_t *out) {
    if ((nt->count + 1) * 2 > nt->slots) {
        size_t n = nt->slots ? nt->slots * 2 : 1024;
        name_table g = {calloc(n, sizeof *g.key), calloc(n, sizeof *g.id), n, nt->count,
                        realloc(nt->names, n / 2 * sizeof *nt->names)};
        if (!g.key || !g.id || !g.names) {
            free(g.key), free(g.id);
            if (g.names) nt->names = g.names;
            return false;
        }
        for (size_t i = 0; i < nt->slots; i++)
            if (nt->key[i]) {
                size_t j = slot_of(&g, nt->key[i]);
                g.key[j] = nt->key[i];
                g.id[j] = nt->id[i];
            }
        free(nt->key), free(nt->id);
        *nt = g;
    }
    size_t j = slot_of(nt, s);
    if (!nt->key[j]) {
        nt->key[j] = s;
        nt->id[j] = (uint32_t)nt->count;
        nt->names[nt->count++] = s;
    }
    *out = nt->id[j];
    return true;
}

static void name_table_free(name_table *nt) { free(nt->key), free(nt->id), free(nt->names); }

// This rank's trace as a blob (*out malloc'd, *len bytes), with its clock offset to rank 0.
static vkt_status pack_trace(const vkt_trace *t, int64_t offset_ns, int64_t uncertainty_ns,
                             void **out, size_t *len) {
    *out = NULL;
    *len = 0;
    int ndev = vkt_trace_device_count(t);
    size_t nev = vkt_trace_event_count(t), nctr = vkt_trace_counter_count(t);
    vkt_trace_event *ev = malloc((nev ? nev : 1) * sizeof *ev);
    vkt_trace_counter *ctr = malloc((nctr ? nctr : 1) * sizeof *ctr);
    uint32_t *ev_name = malloc((nev ? nev : 1) * sizeof *ev_name);
    uint32_t *ctr_name = malloc((nctr ? nctr : 1) * sizeof *ctr_name);
    name_table nt = {0};
    pack p = {0};
    bool ok = ev && ctr && ev_name && ctr_name;
    if (ok) {
        nev = vkt_trace_get_events(t, 0, ev, nev);
        nctr = vkt_trace_get_counters(t, 0, ctr, nctr);
        // Host counters stay behind (rank 0's are the run's); device ones keep their order.
        size_t kept = 0;
        for (size_t i = 0; i < nctr; i++)
            if (ctr[i].pid != VKT_TRACE_HOST) ctr[kept++] = ctr[i];
        nctr = kept;
        for (size_t i = 0; i < nev && ok; i++)
            ok = name_id(&nt, ev[i].name, &ev_name[i]);
        for (size_t i = 0; i < nctr && ok; i++)
            ok = name_id(&nt, ctr[i].name, &ctr_name[i]);
    }
    if (ok) {
        PUT(&p, uint32_t, BLOB_MAGIC);
        PUT(&p, uint32_t, BLOB_VERSION);
        PUT(&p, int64_t, offset_ns);
        PUT(&p, int64_t, uncertainty_ns);
        PUT(&p, uint32_t, (uint32_t)ndev);
        PUT(&p, uint32_t, (uint32_t)nt.count);
        PUT(&p, uint64_t, nev);
        PUT(&p, uint64_t, nctr);
        for (size_t i = 0; i < nt.count; i++)
            put_str(&p, nt.names[i]);
        for (int d = 0; d < ndev; d++) {
            vkt_trace_device dev;
            vkt_trace_summary s;
            vkt_trace_get_device(t, d, &dev);
            bool has_summary = vkt_trace_get_summary(t, d, &s);
            put_str(&p, dev.label);
            put_str(&p, dev.driver);
            PUT(&p, uint64_t, dev.memory_limit);
            PUT(&p, int64_t, dev.clock_offset_ns);
            PUT(&p, int64_t, dev.clock_uncertainty_ns);
            PUT(&p, uint8_t, dev.calibrated);
            put_str(&p, dev.clock_method);
            PUT(&p, uint8_t, has_summary);
            if (has_summary) {
                PUT(&p, double, s.busy_fraction);
                PUT(&p, double, s.idle_fraction);
                PUT(&p, double, s.busy_ns);
                PUT(&p, double, s.wall_ns);
                PUT(&p, uint64_t, s.bytes_moved);
                PUT(&p, uint64_t, s.peak_memory_bytes);
            }
        }
        for (size_t i = 0; i < nev; i++) {
            PUT(&p, uint32_t, ev_name[i]);
            PUT(&p, int32_t, ev[i].pid);
            PUT(&p, int32_t, ev[i].step);
            PUT(&p, int32_t, (int32_t)ev[i].cat);
            PUT(&p, int64_t, ev[i].start_ns);
            PUT(&p, int64_t, ev[i].dur_ns);
        }
        for (size_t i = 0; i < nctr; i++) {
            PUT(&p, uint32_t, ctr_name[i]);
            PUT(&p, int32_t, ctr[i].pid);
            PUT(&p, int64_t, ctr[i].t_ns);
            PUT(&p, double, ctr[i].value);
        }
        ok = !p.oom;
    }
    free(ev), free(ctr), free(ev_name), free(ctr_name);
    name_table_free(&nt);
    if (!ok) {
        free(p.buf);
        return vkt_fail(VKT_ERR_HOST_MEMORY,
                        "out of host memory packing this rank's trace (%zu events, %zu counters) "
                        "for rank 0",
                        nev, nctr);
    }
    *out = p.buf;
    *len = p.len;
    return VKT_OK;
}

// ---------------------------------------------------------------------------------------------
// Unpacking and merging (rank 0)

typedef struct unpack {
    const unsigned char *p, *end;
    bool bad;
} unpack;

static const void *take(unpack *u, size_t n) {
    if (u->bad || (size_t)(u->end - u->p) < n) {
        u->bad = true;
        return NULL;
    }
    const void *at = u->p;
    u->p += n;
    return at;
}

#define GET(u, type, dst)                                                                          \
    do {                                                                                           \
        const void *at_ = take(u, sizeof(type));                                                   \
        type v_ = 0;                                                                               \
        if (at_) memcpy(&v_, at_, sizeof v_);                                                      \
        (dst) = v_;                                                                                \
    } while (0)

// A string of the blob: NUL-terminated where its length says, with no NUL before.
static const char *get_str(unpack *u) {
    uint32_t n;
    GET(u, uint32_t, n);
    const char *s = n ? take(u, n) : NULL;
    if (!s || memchr(s, 0, n) != s + n - 1) {
        u->bad = true;
        return "";
    }
    return s;
}

static bool time_ok(int64_t t) { return t > -MAX_NS && t < MAX_NS; }

// Walks rank r's blob: with apply false it only checks it (every length, index, pid and time),
// so that a malformed one changes nothing; with apply true it appends to t (rank r's devices
// after every device t has so far).
static vkt_status merge_rank(vkt_trace *t, int r, const void *blob, size_t len, bool apply) {
    if (len == 0)
        return vkt_fail(VKT_ERR_FORMAT,
                        "rank %d sent no trace: it failed to pack its trace (its own error says "
                        "why), so the run's trace would miss its devices",
                        r);
    unpack u = {blob, (const unsigned char *)blob + len, false};
    uint32_t magic, version, ndev, nnames;
    int64_t offset, uncertainty;
    uint64_t nev, nctr;
    GET(&u, uint32_t, magic);
    GET(&u, uint32_t, version);
    GET(&u, int64_t, offset);
    GET(&u, int64_t, uncertainty);
    GET(&u, uint32_t, ndev);
    GET(&u, uint32_t, nnames);
    GET(&u, uint64_t, nev);
    GET(&u, uint64_t, nctr);
    if (u.bad || magic != BLOB_MAGIC || version != BLOB_VERSION)
        return vkt_fail(VKT_ERR_FORMAT,
                        "rank %d's trace (%zu bytes) is not a trace of this build (magic %08x, "
                        "format %u; expected %08x, format %u): run every rank with the same "
                        "vktrain on machines of one byte order",
                        r, len, u.bad ? 0u : magic, u.bad ? 0u : version, BLOB_MAGIC, BLOB_VERSION);
    if (!time_ok(offset) || uncertainty < 0 || uncertainty >= MAX_NS)
        return vkt_fail(VKT_ERR_FORMAT,
                        "rank %d's clock offset to rank 0 (%lld ns, +- %lld ns) is beyond 2^60 ns",
                        r, (long long)offset, (long long)uncertainty);
    // Every table entry takes bytes of the blob: counts beyond them are malformed, and cannot
    // make the allocations below large.
    size_t rest = (size_t)(u.end - u.p);
    if (nnames > rest / 5 || ndev > rest / 40 || nev > rest / 32 || nctr > rest / 24)
        return vkt_fail(VKT_ERR_FORMAT,
                        "rank %d's trace claims %u names, %u devices, %llu events and %llu "
                        "counters in %zu bytes: it is malformed",
                        r, nnames, ndev, (unsigned long long)nev, (unsigned long long)nctr, len);
    const char **names = malloc((nnames ? nnames : 1) * sizeof *names);
    int *pid = malloc((ndev ? ndev : 1) * sizeof *pid);
    if (!names || !pid) {
        free(names), free(pid);
        return vkt_fail(VKT_ERR_HOST_MEMORY, "out of host memory merging rank %d's trace", r);
    }
    vkt_status s = VKT_OK;
    const char *what = "";
    for (uint32_t i = 0; i < nnames; i++)
        names[i] = get_str(&u);
    if (u.bad) what = "its name table";

    for (uint32_t d = 0; d < ndev && !u.bad && s == VKT_OK; d++) {
        const char *label = get_str(&u), *driver = get_str(&u);
        uint64_t memory_limit;
        int64_t off, unc;
        uint8_t calibrated, has_summary;
        GET(&u, uint64_t, memory_limit);
        GET(&u, int64_t, off);
        GET(&u, int64_t, unc);
        GET(&u, uint8_t, calibrated);
        const char *method = get_str(&u);
        GET(&u, uint8_t, has_summary);
        vkt_trace_summary sum = {0};
        if (has_summary) {
            GET(&u, double, sum.busy_fraction);
            GET(&u, double, sum.idle_fraction);
            GET(&u, double, sum.busy_ns);
            GET(&u, double, sum.wall_ns);
            GET(&u, uint64_t, sum.bytes_moved);
            GET(&u, uint64_t, sum.peak_memory_bytes);
        }
        if (!u.bad && calibrated && (!time_ok(off) || unc < 0 || unc >= MAX_NS)) u.bad = true;
        if (u.bad) {
            what = "a device";
            break;
        }
        if (!apply) continue;
        char full[sizeof((vkt_trace_device *)0)->label];
        snprintf(full, sizeof full, "rank %d %s", r, label);
        s = vkt_trace_add_device(t, full, driver, memory_limit, &pid[d]);
        // The device's clock now maps to rank 0's: host_0 = device + off - offset.
        if (s == VKT_OK && calibrated)
            s = vkt_trace_set_clock(t, pid[d], off - offset, unc + uncertainty, method);
        else if (s == VKT_OK)
            s = vkt_trace_set_clock(t, pid[d], -offset, uncertainty, "mpi_ping_pong");
        if (s == VKT_OK && has_summary) s = vkt_trace_set_summary(t, pid[d], &sum);
    }

    for (uint64_t i = 0; i < nev && !u.bad && s == VKT_OK; i++) {
        uint32_t name;
        int32_t p, step, cat;
        int64_t start, dur;
        GET(&u, uint32_t, name);
        GET(&u, int32_t, p);
        GET(&u, int32_t, step);
        GET(&u, int32_t, cat);
        GET(&u, int64_t, start);
        GET(&u, int64_t, dur);
        if (u.bad || name >= nnames || p < 0 || (uint32_t)p >= ndev || cat < 0 ||
            cat >= VKT_CAT_COUNT || !time_ok(start) || dur < 0 || dur >= MAX_NS) {
            u.bad = true;
            what = "an event";
            break;
        }
        if (apply)
            s = vkt_trace_add_event(t, pid[p], names[name], (vkt_trace_category)cat, start - offset,
                                    dur, step);
    }

    for (uint64_t i = 0; i < nctr && !u.bad && s == VKT_OK; i++) {
        uint32_t name;
        int32_t p;
        int64_t ts;
        double value;
        GET(&u, uint32_t, name);
        GET(&u, int32_t, p);
        GET(&u, int64_t, ts);
        GET(&u, double, value);
        if (u.bad || name >= nnames || p < 0 || (uint32_t)p >= ndev || !time_ok(ts)) {
            u.bad = true;
            what = "a counter";
            break;
        }
        if (apply) s = vkt_trace_add_counter(t, pid[p], names[name], ts - offset, value);
    }
    if (s == VKT_OK && !u.bad && u.p != u.end) {
        u.bad = true;
        what = "its end (bytes beyond the last counter)";
    }
    free(names), free(pid);
    if (s != VKT_OK) return s;
    if (u.bad)
        return vkt_fail(VKT_ERR_FORMAT,
                        "rank %d's trace (%zu bytes) is malformed at %s (byte %zu): run every rank "
                        "with the same vktrain",
                        r, len, what, (size_t)(u.p - (const unsigned char *)blob));
    return VKT_OK;
}

// ---------------------------------------------------------------------------------------------
// The collective

vkt_status vkt_trace_gather_world(vkt_trace *t, vkt_world *w) {
    if (!w || vkt_world_size(w) == 1) return VKT_OK;
    int rank = vkt_world_rank(w), size = vkt_world_size(w);
    int64_t offset = 0, uncertainty = 0;
    VKT_TRY(vkt_world_clock_offset(w, &offset, &uncertainty));

    // A rank that cannot pack its trace still takes part (an empty blob), so that rank 0 names
    // it instead of waiting for it until the timeout.
    void *mine = NULL;
    size_t mine_len = 0;
    vkt_status packed = VKT_OK;
    if (rank != 0) packed = pack_trace(t, offset, uncertainty, &mine, &mine_len);
    char pack_error[512] = "";
    if (packed != VKT_OK) snprintf(pack_error, sizeof pack_error, "%s", vkt_error());

    size_t *lens = rank == 0 ? calloc((size_t)size, sizeof *lens) : NULL;
    if (rank == 0 && !lens)
        return vkt_fail(VKT_ERR_HOST_MEMORY, "out of host memory gathering %d ranks' traces", size);
    void *all = NULL;
    // Rank 0 sends nothing, but from a real address: gather_blobs copies its bytes with memcpy,
    // whose source must not be NULL even for 0 bytes.
    static const char nothing = 0;
    vkt_status s = vkt_world_gather_blobs(w, mine ? mine : &nothing, mine_len, &all, lens,
                                          "the ranks' traces");
    free(mine);
    if (packed != VKT_OK) {
        free(lens), free(all);
        return vkt_fail(packed, "%s", pack_error);
    }
    if (s != VKT_OK || rank != 0) {
        free(lens), free(all);
        return s;
    }

    // Every blob is checked before t changes; then rank 0's devices take their rank's name and
    // every other rank's are appended after them, in rank order.
    const char *at = (const char *)all + lens[0];
    for (int r = 1; r < size && s == VKT_OK; r++) {
        s = merge_rank(t, r, at, lens[r], false);
        at += lens[r];
    }
    int ndev0 = vkt_trace_device_count(t);
    for (int p = 0; p < ndev0 && s == VKT_OK; p++) {
        vkt_trace_device d;
        vkt_trace_get_device(t, p, &d);
        char full[sizeof d.label];
        snprintf(full, sizeof full, "rank 0 %s", d.label);
        s = vkt_trace_set_device_label(t, p, full);
    }
    at = (const char *)all + lens[0];
    for (int r = 1; r < size && s == VKT_OK; r++) {
        s = merge_rank(t, r, at, lens[r], true);
        at += lens[r];
    }
    free(lens), free(all);
    return s;
}
