// tune.h: what the engine measures about a device once and keeps on disk: the Vulkan pipeline
// cache and the measured speed of kernel variants (engine/ops/matmul.c chooses its variant per
// shape by these measurements). Both are keyed by device and driver build, so a driver update or
// another GPU starts afresh.
//
// Where: the directory of the device's context (vkt_context_desc.cache_dir; the CLI's
// VKT_CACHE_DIR, else $XDG_CACHE_HOME/vktrain, else $HOME/.cache/vktrain). Without one
// (VKT_CACHE_DIR=off) everything is kept in memory (measurements are then repeated by each
// process). Files:
//   <key>.tune.json   measured variants: {"op": "matmul NT 128x512x784", "variant": ..., "ms": ...}
//   <key>.pipelines   vkGetPipelineCacheData of the last process that built new pipelines
// with key = "<vendorID>-<deviceID>-<driverVersion>-<pipelineCacheUUID>" in hex. Both are written
// atomically; a damaged or foreign file is ignored (with one line on stderr) and replaced.
//
// The context's vkt_tune_mode (VKT_TUNE=off: never measure, each op takes its first candidate;
// VKT_TUNE=force: ignore stored measurements and measure again what this process meets, the file
// is then updated).
//
// The measurements held in memory are shared by every device of the process with the same key
// and cache directory, so that contexts with different directories never mix their files.
#ifndef VKT_TUNE_H
#define VKT_TUNE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "vktrain.h"

// The device's context's tune mode (vkt_context_desc.tune, vkt_context_set_tune).
vkt_tune_mode vkt_tune_mode_of(const vkt_device *dev);

// "<dir>/<key><suffix>" for device d of ctx into buf; false when ctx has no disk caches.
bool vkt_cache_path(vkt_context *ctx, const vkt_device_info *d, const char *suffix, char *buf,
                    size_t size);

// Pipeline cache data from disk whose header names this device and driver build (malloc'd), or
// NULL. Used by vkt_device_create; vkt_device_destroy saves what the device built.
void *vkt_pipeline_cache_load(const vkt_device *dev, size_t *size);
void vkt_pipeline_cache_save(const vkt_device *dev, const void *data, size_t size);

// Measurements. op names the operation and its shape ("matmul NN 1024x1024x1024"); variant names
// the kernel variant. Callers hold the tune lock around get-measure-put-save, so that two threads
// (or two logical devices on one physical device) never measure at once.
void vkt_tune_lock(void);
void vkt_tune_unlock(void);
bool vkt_tune_get(const vkt_device *dev, const char *op, const char *variant, double *ms);
void vkt_tune_put(const vkt_device *dev, const char *op, const char *variant, double ms);
void vkt_tune_save(const vkt_device *dev); // writes the device's file (on error: one line)

typedef struct vkt_tune_stats {
    uint64_t measured; // variant timings measured by this process
    uint64_t loaded;   // entries read from disk
    uint64_t saved;    // files written
} vkt_tune_stats;
vkt_tune_stats vkt_tune_get_stats(void);

// Start-up accounting (vkt_startup_counters, vktrain.h): brackets around one piece of work of a
// kind, on any thread; they nest (a tuning that builds its candidates' pipelines is tuning).
// end adds count to the kind's count (BUILD: kernels_built; TUNE: nothing).
typedef enum vkt_busy { VKT_BUSY_BUILD, VKT_BUSY_TUNE } vkt_busy;
void vkt_busy_begin(vkt_busy kind);
void vkt_busy_end(vkt_busy kind, uint64_t count);
// Leaves the calling thread's work out of that accounting while on (ahead.c's compile thread, and
// a submitting thread while it builds ahead.c's jobs: builds on a second device, counted as
// compiled ahead, not as the run's kernel builds). Returns the setting before.
bool vkt_busy_ignore_thread(bool on);
// One kernel compiled ahead (ahead.c): vkt_startup_counters.kernels_ahead.
void vkt_startup_count_ahead(void);
// A device's compile-ahead stopped: the driver's shader cache keeps nothing (ahead.c):
// vkt_startup_counters.ahead_stopped.
void vkt_startup_count_ahead_stopped(void);
// One matmul shape's choice by measurement: variants timings were measured now (0: every
// candidate's time was stored).
void vkt_tune_count_shape(int variants);
// Tests: forget everything held in memory, as a new process would start.
void vkt_tune_forget(void);

#endif
