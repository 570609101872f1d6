// tune.c: the disk caches described in tune.h (cache directory and key, pipeline cache files,
// measured kernel variants), and the in-memory table of measurements shared by every device of
// the process (per cache directory and device key). The directory is the device's context's.
//
// Not here: what to measure and how (engine/ops/matmul.c measures its variants), eviction (a file
// holds one line per shape and variant met; a training run meets a handful of shapes).
#include "tune.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "vkt_internal.h"

#define MAX_TUNE_FILE (16u << 20)
#define MAX_PIPELINE_FILE (512u << 20)

// The table, and the contexts' cache_dir_tried / cache_dir_ok.
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t measure_mu = PTHREAD_MUTEX_INITIALIZER; // vkt_tune_lock

vkt_tune_mode vkt_tune_mode_of(const vkt_device *dev) { return dev->ctx->tune; }

// ---------------------------------------------------------------------------------------------
// Directory and key

static const char *cache_dir_locked(vkt_context *ctx) {
    if (!ctx->cache_dir[0]) return NULL;
    if (!ctx->cache_dir_tried) {
        ctx->cache_dir_tried = true;
        ctx->cache_dir_ok = vkt_mkdirs(ctx->cache_dir) == VKT_OK;
        if (!ctx->cache_dir_ok)
            fprintf(stderr,
                    "vktrain: warning: %s; kernel measurements and compiled pipelines are not "
                    "kept (set VKT_CACHE_DIR to a writable directory, or VKT_CACHE_DIR=off)\n",
                    vkt_error());
    }
    return ctx->cache_dir_ok ? ctx->cache_dir : NULL;
}

static void cache_key(const vkt_device_info *d, char *buf, size_t size) {
    // The subgroup size too: lavapipe's is its vector width (LP_NATIVE_VECTOR_WIDTH), which
    // changes the code and the candidates (engine/ops/matmul.c) under the same device and build.
    int n = snprintf(buf, size, "%x-%x-%x-%x-", d->vendor_id, d->device_id, d->driver_version,
                     d->subgroup_size);
    for (int i = 0; i < 16 && n > 0 && (size_t)n + 2 < size; i++)
        n += snprintf(buf + n, size - (size_t)n, "%02x", d->uuid[i]);
}

// "<dir>/<key><suffix>"; false when dir is NULL or "" (no disk caches) or the path is too long.
static bool path_in(const char *dir, const char *key, const char *suffix, char *buf, size_t size) {
    return dir && *dir && snprintf(buf, size, "%s/%s%s", dir, key, suffix) < (int)size;
}

bool vkt_cache_path(vkt_context *ctx, const vkt_device_info *d, const char *suffix, char *buf,
                    size_t size) {
    char key[128];
    cache_key(d, key, sizeof key);
    pthread_mutex_lock(&mu);
    bool ok = path_in(cache_dir_locked(ctx), key, suffix, buf, size);
    pthread_mutex_unlock(&mu);
    return ok;
}

// ---------------------------------------------------------------------------------------------
// Pipeline cache files

// The header every VkPipelineCache's data starts with (Vulkan spec, "Pipeline Cache Header").
typedef struct pc_header {
    uint32_t size, version, vendor_id, device_id;
    uint8_t uuid[16];
} pc_header;
_Static_assert(sizeof(pc_header) == 32, "VkPipelineCacheHeaderVersionOne is 32 bytes");

void *vkt_pipeline_cache_load(const vkt_device *dev, size_t *size) {
    *size = 0;
    const vkt_device_info *d = dev->info;
    char path[4300];
    if (!vkt_cache_path(dev->ctx, d, ".pipelines", path, sizeof path)) return NULL;
    size_t n;
    uint8_t *data = vkt_read_file(path, MAX_PIPELINE_FILE, &n);
    if (!data) return NULL; // none yet (or unreadable: then it is rewritten)
    pc_header h;
    bool ok = n >= sizeof h;
    if (ok) {
        memcpy(&h, data, sizeof h);
        ok = h.size >= sizeof h && h.size <= n &&
             h.version == VK_PIPELINE_CACHE_HEADER_VERSION_ONE && h.vendor_id == d->vendor_id &&
             h.device_id == d->device_id && memcmp(h.uuid, d->uuid, 16) == 0;
    }
    if (!ok) {
        fprintf(stderr,
                "vktrain: warning: ignoring pipeline cache %s: its header does not name this "
                "device and driver build; it will be replaced\n",
                path);
        free(data);
        return NULL;
    }
    *size = n;
    return data;
}

void vkt_pipeline_cache_save(const vkt_device *dev, const void *data, size_t size) {
    char path[4300];
    if (!vkt_cache_path(dev->ctx, dev->info, ".pipelines", path, sizeof path)) return;
    vkt_chunk c = {data, size};
    if (vkt_write_file_atomic(path, &c, 1, "pipeline cache") != VKT_OK)
        fprintf(stderr, "vktrain: warning: %s\n", vkt_error());
}

// ---------------------------------------------------------------------------------------------
// Measurements

typedef struct tune_entry {
    char op[96], variant[64];
    double ms;
    bool from_disk; // read from the file, not measured by this process: not used under force
} tune_entry;

typedef struct tune_device {
    char dir[4096]; // the cache directory its file is in; "" = none
    char key[128];
    tune_entry *e;
    int n, cap;
} tune_device;

static tune_device *devs;
static int ndevs;
static vkt_tune_stats stats;

// Reads t's file. Its entries are marked from_disk: a device whose context tunes with
// VKT_TUNE_FORCE does not use them (they stay in the file until measured again), whenever that
// mode is set and whichever context first loaded the table.
static void load_file(tune_device *t) {
    char path[4400];
    if (!path_in(t->dir, t->key, ".tune.json", path, sizeof path)) return;
    size_t n;
    char *text = vkt_read_file(path, MAX_TUNE_FILE, &n);
    if (!text) return;
    cJSON *root = cJSON_ParseWithLength(text, n);
    free(text);
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(root, "format");
    const cJSON *entries = cJSON_GetObjectItemCaseSensitive(root, "entries");
    bool ok = cJSON_IsString(fmt) && !strcmp(fmt->valuestring, "vktrain-tune-1") &&
              cJSON_IsArray(entries);
    const cJSON *it;
    const cJSON *list = ok ? entries : NULL;
    cJSON_ArrayForEach(it, list) {
        const cJSON *op = cJSON_GetObjectItemCaseSensitive(it, "op");
        const cJSON *var = cJSON_GetObjectItemCaseSensitive(it, "variant");
        const cJSON *ms = cJSON_GetObjectItemCaseSensitive(it, "ms");
        if (!cJSON_IsString(op) || !cJSON_IsString(var) || !cJSON_IsNumber(ms) ||
            !(ms->valuedouble > 0) || strlen(op->valuestring) >= sizeof t->e->op ||
            strlen(var->valuestring) >= sizeof t->e->variant) {
            ok = false;
            break;
        }
        if (t->n == t->cap) {
            int cap = t->cap ? 2 * t->cap : 32;
            tune_entry *ne = realloc(t->e, (size_t)cap * sizeof *ne);
            if (!ne) break;
            t->e = ne;
            t->cap = cap;
        }
        tune_entry *e = &t->e[t->n++];
        snprintf(e->op, sizeof e->op, "%s", op->valuestring);
        snprintf(e->variant, sizeof e->variant, "%s", var->valuestring);
        e->ms = ms->valuedouble;
        e->from_disk = true;
        stats.loaded++;
    }
    cJSON_Delete(root);
    if (!ok) {
        fprintf(stderr,
                "vktrain: warning: ignoring the damaged kernel measurement cache %s; it will be "
                "measured again and rewritten\n",
                path);
        t->n = 0;
    }
}

static tune_device *device_locked(const vkt_device *dev) {
    char key[128];
    cache_key(dev->info, key, sizeof key);
    const char *dir = cache_dir_locked(dev->ctx);
    if (!dir) dir = "";
    for (int i = 0; i < ndevs; i++)
        if (!strcmp(devs[i].key, key) && !strcmp(devs[i].dir, dir)) return &devs[i];
    tune_device *nd = realloc(devs, (size_t)(ndevs + 1) * sizeof *nd);
    if (!nd) return NULL;
    devs = nd;
    tune_device *t = &devs[ndevs++];
    memset(t, 0, sizeof *t);
    snprintf(t->dir, sizeof t->dir, "%s", dir);
    snprintf(t->key, sizeof t->key, "%s", key);
    load_file(t);
    return t;
}

static tune_entry *find(tune_device *t, const char *op, const char *variant) {
    for (int i = 0; t && i < t->n; i++)
        if (!strcmp(t->e[i].op, op) && !strcmp(t->e[i].variant, variant)) return &t->e[i];
    return NULL;
}

void vkt_tune_lock(void) { pthread_mutex_lock(&measure_mu); }
void vkt_tune_unlock(void) { pthread_mutex_unlock(&measure_mu); }

bool vkt_tune_get(const vkt_device *dev, const char *op, const char *variant, double *ms) {
    pthread_mutex_lock(&mu);
    tune_entry *e = find(device_locked(dev), op, variant);
    bool ok = e && !(e->from_disk && vkt_tune_mode_of(dev) == VKT_TUNE_FORCE);
    if (ok) *ms = e->ms;
    pthread_mutex_unlock(&mu);
    return ok;
}

void vkt_tune_put(const vkt_device *dev, const char *op, const char *variant, double ms) {
    pthread_mutex_lock(&mu);
    stats.measured++;
    tune_device *t = device_locked(dev);
    tune_entry *e = find(t, op, variant);
    if (!e && t && t->n == t->cap) {
        int cap = t->cap ? 2 * t->cap : 32;
        tune_entry *ne = realloc(t->e, (size_t)cap * sizeof *ne);
        if (ne) {
            t->e = ne;
            t->cap = cap;
        }
    }
    if (!e && t && t->n < t->cap) {
        e = &t->e[t->n++];
        snprintf(e->op, sizeof e->op, "%s", op);
        snprintf(e->variant, sizeof e->variant, "%s", variant);
    }
    if (e) {
        e->ms = ms;
        e->from_disk = false;
    }
    pthread_mutex_unlock(&mu);
}

void vkt_tune_save(const vkt_device *dev) {
    const vkt_device_info *d = dev->info;
    pthread_mutex_lock(&mu);
    char path[4400];
    tune_device *t = device_locked(dev);
    cJSON *root = NULL;
    char *text = NULL;
    if (t && path_in(t->dir, t->key, ".tune.json", path, sizeof path)) {
        char ver[32];
        snprintf(ver, sizeof ver, "0x%x", d->driver_version);
        root = cJSON_CreateObject();
        cJSON_AddStringToObject(root, "format", "vktrain-tune-1");
        cJSON_AddStringToObject(root, "device", d->name);
        cJSON_AddStringToObject(root, "driver", d->driver);
        cJSON_AddStringToObject(root, "driver_version", ver);
        cJSON *arr = cJSON_AddArrayToObject(root, "entries");
        for (int i = 0; arr && i < t->n; i++) {
            cJSON *e = cJSON_CreateObject();
            cJSON_AddStringToObject(e, "op", t->e[i].op);
            cJSON_AddStringToObject(e, "variant", t->e[i].variant);
            cJSON_AddNumberToObject(e, "ms", t->e[i].ms);
            cJSON_AddItemToArray(arr, e);
        }
        text = cJSON_Print(root);
    }
    if (text) {
        vkt_chunk c = {text, strlen(text)};
        if (vkt_write_file_atomic(path, &c, 1, "kernel measurement cache") == VKT_OK)
            stats.saved++;
        else
            fprintf(stderr, "vktrain: warning: %s\n", vkt_error());
    }
    free(text);
    cJSON_Delete(root);
    pthread_mutex_unlock(&mu);
}

vkt_tune_stats vkt_tune_get_stats(void) {
    pthread_mutex_lock(&mu);
    vkt_tune_stats s = stats;
    pthread_mutex_unlock(&mu);
    return s;
}

// ---------------------------------------------------------------------------------------------
// Start-up accounting: the time since the last transition goes to tuning when some thread is
// in it, else to building when some thread is in that, so the two stay exclusive wall time.

static pthread_mutex_t busy_mu = PTHREAD_MUTEX_INITIALIZER;
static int busy_depth[2];
static int64_t busy_since;
static vkt_startup_counters startup;

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void busy_account_locked(void) {
    int64_t now = now_ns();
    if (busy_depth[VKT_BUSY_TUNE] > 0)
        startup.tuning_ns += (double)(now - busy_since);
    else if (busy_depth[VKT_BUSY_BUILD] > 0)
        startup.kernel_build_ns += (double)(now - busy_since);
    busy_since = now;
}

static _Thread_local bool busy_ignored;

void vkt_startup_count_ahead(void) {
    pthread_mutex_lock(&busy_mu);
    startup.kernels_ahead++;
    pthread_mutex_unlock(&busy_mu);
}

void vkt_startup_count_ahead_stopped(void) {
    pthread_mutex_lock(&busy_mu);
    startup.ahead_stopped++;
    pthread_mutex_unlock(&busy_mu);
}

bool vkt_busy_ignore_thread(bool on) {
    bool was = busy_ignored;
    busy_ignored = on;
    return was;
}

void vkt_busy_begin(vkt_busy kind) {
    if (busy_ignored) return;
    pthread_mutex_lock(&busy_mu);
    busy_account_locked();
    busy_depth[kind]++;
    pthread_mutex_unlock(&busy_mu);
}

void vkt_busy_end(vkt_busy kind, uint64_t count) {
    if (busy_ignored) return;
    pthread_mutex_lock(&busy_mu);
    busy_account_locked();
    busy_depth[kind]--;
    if (kind == VKT_BUSY_BUILD) startup.kernels_built += count;
    pthread_mutex_unlock(&busy_mu);
}

void vkt_tune_count_shape(int variants) {
    pthread_mutex_lock(&busy_mu);
    if (variants > 0) {
        startup.shapes_measured++;
        startup.variants_measured += (uint64_t)variants;
    } else {
        startup.choices_cached++;
    }
    pthread_mutex_unlock(&busy_mu);
}

void vkt_startup_counters_get(vkt_startup_counters *out) {
    pthread_mutex_lock(&busy_mu);
    busy_account_locked();
    *out = startup;
    pthread_mutex_unlock(&busy_mu);
}

void vkt_tune_forget(void) {
    pthread_mutex_lock(&mu);
    for (int i = 0; i < ndevs; i++)
        free(devs[i].e);
    free(devs);
    devs = NULL;
    ndevs = 0;
    pthread_mutex_unlock(&mu);
}
