// trace.h: the training trace. Every labelled dispatch and copy a device ran (from
// vkt_cmd_timings, on the device's own clock), host-side waits, and per-step counters (memory per
// device, loss, accuracy, throughput) are gathered into one timeline on the host clock
// (CLOCK_MONOTONIC), written as a Chrome trace event file (Perfetto and chrome://tracing open it)
// and read back for the viewer (viewer/).
//
// Thread safety: every function locks the trace, so a trainer thread may keep appending while
// another thread reads. Readers that do heavy work (the viewer) copy what is new with
// vkt_trace_sync into a private trace and query that, so the appending thread only ever waits
// for a short copy.
//
// Not here: recording the timestamps (engine/core/cmd.c), deciding what the trainer measures.
#ifndef VKT_TRACE_H
#define VKT_TRACE_H

#include "vktrain.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct vkt_trace vkt_trace;

// What a device was doing. Labels name their category by the prefix before the first ':'
// ("fwd:dense0:matmul", "bwd:...", "opt:...", "comm:...", "wait:..."); see vkt_trace_category_of.
typedef enum vkt_trace_category {
    VKT_CAT_FORWARD = 0,
    VKT_CAT_BACKWARD,
    VKT_CAT_OPTIMIZER,
    VKT_CAT_COMMUNICATION, // transfers between devices and gradient reductions
    VKT_CAT_WAIT,          // idle: waiting for another device or for the host
    VKT_CAT_OTHER,
    VKT_CAT_COUNT
} vkt_trace_category;

// A complete event on the host timeline. name points into the trace's string table and lives as
// long as the trace.
typedef struct vkt_trace_event {
    const char *name;
    int pid;  // device index in the trace
    int step; // training step (-1: none)
    vkt_trace_category cat;
    int64_t start_ns; // CLOCK_MONOTONIC ns
    int64_t dur_ns;
} vkt_trace_event;

// A sample of a counter: pid is a device, or VKT_TRACE_HOST for run-wide values (loss,
// accuracy, samples_per_sec).
#define VKT_TRACE_HOST (-1)
typedef struct vkt_trace_counter {
    const char *name;
    int pid;
    int64_t t_ns; // CLOCK_MONOTONIC ns
    double value;
} vkt_trace_counter;

typedef struct vkt_trace_device {
    char label[300]; // "#0 llvmpipe (LLVM 15.0.6, 256 bits)"
    char driver[256];
    uint64_t memory_limit; // bytes
    // Device clock -> host clock: host_ns = device_ns + clock_offset_ns, known to within
    // +- clock_uncertainty_ns. Set by vkt_trace_calibrate.
    int64_t clock_offset_ns;
    int64_t clock_uncertainty_ns;
    bool calibrated;
    char clock_method[32]; // "calibrated_timestamps", "submit_bracket", or "" before calibration
} vkt_trace_device;

// What the trainer measured about one device over the run (written in otherData.summary).
typedef struct vkt_trace_summary {
    double busy_fraction, idle_fraction;
    double busy_ns, wall_ns; // what the fractions are of (0 when computed from the trace)
    uint64_t bytes_moved;
    uint64_t peak_memory_bytes;
} vkt_trace_summary;

// ---------------------------------------------------------------------------------------------
// Building a trace

// An empty trace. Fails only with VKT_ERR_HOST_MEMORY.
vkt_status vkt_trace_create(vkt_trace **out);
void vkt_trace_destroy(vkt_trace *t);
// CLOCK_MONOTONIC now, in ns: the host clock of every trace time.
int64_t vkt_trace_now_ns(void);
// Adds a device; *pid receives its index (0, 1, ...). label/driver are copied (NULL = "").
vkt_status vkt_trace_add_device(vkt_trace *t, const char *label, const char *driver,
                                uint64_t memory_limit, int *pid);
// Adds an opened engine device (its label, driver and memory limit).
vkt_status vkt_trace_add_vk_device(vkt_trace *t, const vkt_device *dev, int *pid);
// Measures the offset from dev's timestamp clock to the host clock and stores it for pid: with
// VK_EXT_calibrated_timestamps when the device has it, otherwise by bracketing a submitted
// timestamp with host clock reads (several tries, the narrowest kept). Submits to dev's queue and
// waits: call it from the thread that drives dev, between steps. Fails with VKT_ERR_ARG for a bad
// pid or a device without timestamps, or with the Vulkan error.
vkt_status vkt_trace_calibrate(vkt_trace *t, int pid, vkt_device *dev);
// Sets the clock offset directly (for devices calibrated elsewhere, and tests).
vkt_status vkt_trace_set_clock(vkt_trace *t, int pid, int64_t offset_ns, int64_t uncertainty_ns,
                               const char *method);
// Renames device pid (label copied; cut to the label's size). Fails with VKT_ERR_ARG for a bad
// pid. (vkt_trace_gather_world names each device by its rank this way.)
vkt_status vkt_trace_set_device_label(vkt_trace *t, int pid, const char *label);
// The measurement behind vkt_trace_calibrate (engine/core/clock.c): host_ns = device_ns +
// *offset_ns, within +- *uncertainty_ns; *method is a static string naming how it was measured.
vkt_status vkt_device_clock_offset(vkt_device *dev, int64_t *offset_ns, int64_t *uncertainty_ns,
                                   const char **method);

// The category a label names by its prefix: fwd/forward, bwd/backward, opt/optimizer,
// comm/communication, wait/idle; anything else is VKT_CAT_OTHER.
vkt_trace_category vkt_trace_category_of(const char *label);
const char *vkt_trace_category_name(vkt_trace_category c); // "forward", ..., "wait", "other"
// Maps a label to a category, for labels that do not follow the prefix rule.
typedef vkt_trace_category (*vkt_trace_classify_fn)(const char *label, void *user);

// Appends one complete event (host ns). Fails with VKT_ERR_ARG for a bad pid or a negative
// duration.
vkt_status vkt_trace_add_event(vkt_trace *t, int pid, const char *name, vkt_trace_category cat,
                               int64_t start_ns, int64_t dur_ns, int step);
// Appends the timings of one submit of pid's device (vkt_cmd_timings: device ns), moved to the
// host clock by pid's calibrated offset. classify may be NULL (the prefix rule). Fails with
// VKT_ERR_ARG when pid has not been calibrated.
vkt_status vkt_trace_add_timings(vkt_trace *t, int pid, const vkt_timing *tm, int n, int step,
                                 vkt_trace_classify_fn classify, void *user);
// Appends one counter sample ("memory_bytes" per device; "loss", "accuracy", "samples_per_sec"
// with pid VKT_TRACE_HOST).
vkt_status vkt_trace_add_counter(vkt_trace *t, int pid, const char *name, int64_t t_ns,
                                 double value);
// Run metadata for otherData: the parallel strategy ("single", "data", "layers", ...) and what
// the trainer measured per device. A device without a summary gets one computed from the trace
// (busy/idle from its events, peak from its memory_bytes counter; bytes_moved written as null).
vkt_status vkt_trace_set_strategy(vkt_trace *t, const char *strategy);
vkt_status vkt_trace_set_summary(vkt_trace *t, int pid, const vkt_trace_summary *s);

// ---------------------------------------------------------------------------------------------
// Files

// Writes the trace as Chrome trace event JSON (object form: traceEvents, displayTimeUnit,
// otherData), times in us relative to the earliest time in the trace. Atomic: a temporary file
// is written, fsynced and renamed over path. Fails with VKT_ERR_IO naming the path.
vkt_status vkt_trace_write(const vkt_trace *t, const char *path);
// Reads a file written by vkt_trace_write (or any Chrome trace in object form with X and C
// events). Fails with VKT_ERR_IO (cannot read) or VKT_ERR_FORMAT (says what is wrong and where).
// The caller destroys *out.
vkt_status vkt_trace_load(const char *path, vkt_trace **out);

// ---------------------------------------------------------------------------------------------
// Reading (each call takes the lock; results are copies)

int vkt_trace_device_count(const vkt_trace *t);
// Copies device pid into *out; false when there is no such device.
bool vkt_trace_get_device(const vkt_trace *t, int pid, vkt_trace_device *out);
// The strategy string, copied into buf ("" if unset).
void vkt_trace_get_strategy(const vkt_trace *t, char *buf, size_t size);
// The summary of pid: the trainer's if it set one (returns true), otherwise computed (false).
bool vkt_trace_get_summary(const vkt_trace *t, int pid, vkt_trace_summary *out);
size_t vkt_trace_event_count(const vkt_trace *t);
size_t vkt_trace_counter_count(const vkt_trace *t);
// Copies events [first, first+max) in the order they were added; returns how many.
size_t vkt_trace_get_events(const vkt_trace *t, size_t first, vkt_trace_event *out, size_t max);
size_t vkt_trace_get_counters(const vkt_trace *t, size_t first, vkt_trace_counter *out, size_t max);
// Samples of one counter (pid and name), in time order; returns how many were written (at most
// max); *total (may be NULL) receives how many there are.
size_t vkt_trace_counter_series(const vkt_trace *t, int pid, const char *name,
                                vkt_trace_counter *out, size_t max, size_t *total);
// Earliest start and latest end over all events and counters; false when the trace is empty.
bool vkt_trace_time_range(const vkt_trace *t, int64_t *t0, int64_t *t1);
// ns within [t0, t1) in which pid ran something other than a wait (the union of its events, so
// overlapping events count once).
int64_t vkt_trace_busy_ns(const vkt_trace *t, int pid, int64_t t0, int64_t t1);
// Busy fraction of pid in each of nbuckets equal buckets of [t0, t1).
vkt_status vkt_trace_utilisation(const vkt_trace *t, int pid, int64_t t0, int64_t t1, int nbuckets,
                                 float *out);
// Counts that grow with every change: a reader compares them to know whether to look again.
uint64_t vkt_trace_version(const vkt_trace *t);
// Copies into dst what src gained since the last sync of dst from src (devices, events,
// counters, metadata). dst must be a trace only ever synced from src. Holds src's lock only for
// the copy.
vkt_status vkt_trace_sync(vkt_trace *dst, const vkt_trace *src);

#ifdef __cplusplus
}
#endif
#endif
