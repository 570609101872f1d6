// checkpoint.c: safetensors files of float32 and int64 tensors. The writer replaces its target
// atomically (temporary file, fsync, rename, directory fsync); the reader checks every header field
// before any data is trusted. The format and the crash test hook are described in checkpoint.h.
//
// Not here: other dtypes than F32 and I64, big-endian hosts (the data is little-endian host
// memory), memory-mapping (tensors are copied out with pread, so a checkpoint of several GiB never
// has to be resident at once).
#include "checkpoint.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "json_depth.h"
#include "vkt_internal.h"

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
               "checkpoint.c writes and reads little-endian floats and int64s as host memory");

// The largest magnitude of an I64 value read into a float: every whole number up to it is exact.
#define MAX_EXACT_INT 16777216 // 2^24

// safetensors' own limit on the header (MAX_HEADER_SIZE in the reference implementation).
#define MAX_HEADER ((uint64_t)100000000)

// ---------------------------------------------------------------------------------------------
// A growing string, for the header

typedef struct sb {
    char *p;
    size_t len, cap;
    bool oom;
} sb;

static void sb_putn(sb *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 1024;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
}

static void sb_puts(sb *b, const char *s) { sb_putn(b, s, strlen(s)); }

__attribute__((format(printf, 2, 3))) static void sb_printf(sb *b, const char *fmt, ...) {
    char tmp[128];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n > 0) sb_putn(b, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

// A JSON string literal (bytes >= 0x80 pass through: names are UTF-8).
static void sb_json_string(sb *b, const char *s) {
    sb_puts(b, "\"");
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            char e[2] = {'\\', (char)c};
            sb_putn(b, e, 2);
        } else if (c < 0x20) {
            sb_printf(b, "\\u%04x", c);
        } else {
            sb_putn(b, (const char *)&c, 1);
        }
    }
    sb_puts(b, "\"");
}

static uint64_t elements(int ndim, const uint64_t *shape) {
    uint64_t n = 1;
    for (int i = 0; i < ndim; i++)
        n *= shape[i];
    return n;
}

static void format_shape(char *buf, size_t size, int ndim, const uint64_t *shape) {
    size_t n = (size_t)snprintf(buf, size, "[");
    for (int i = 0; i < ndim && n < size; i++)
        n += (size_t)snprintf(buf + n, size - n, "%s%llu", i ? ", " : "",
                              (unsigned long long)shape[i]);
    if (n < size) snprintf(buf + n, size - n, "]");
}

// ---------------------------------------------------------------------------------------------
// Writing

static vkt_status check_inputs(const char *path, const vkt_ckpt_tensor *t, int nt,
                               const vkt_ckpt_meta *meta, int nmeta) {
    if (!path || !*path) return vkt_fail(VKT_ERR_ARG, "checkpoint path is empty");
    if (nt < 0 || nmeta < 0 || (nt && !t) || (nmeta && !meta))
        return vkt_fail(VKT_ERR_ARG, "checkpoint %s: bad tensor or metadata list", path);
    for (int i = 0; i < nt; i++) {
        if (!t[i].name || !*t[i].name || strcmp(t[i].name, "__metadata__") == 0)
            return vkt_fail(VKT_ERR_ARG, "checkpoint %s: tensor %d has an empty or reserved name",
                            path, i);
        if (t[i].ndim < 0 || t[i].ndim > VKT_CKPT_MAX_DIMS)
            return vkt_fail(VKT_ERR_ARG, "checkpoint %s: tensor %s has %d dimensions (0 to %d)",
                            path, t[i].name, t[i].ndim, VKT_CKPT_MAX_DIMS);
        uint64_t n = 1;
        for (int d = 0; d < t[i].ndim; d++) {
            if (t[i].shape[d] && n > (UINT64_MAX / 8) / t[i].shape[d])
                return vkt_fail(VKT_ERR_ARG, "checkpoint %s: tensor %s is too large", path,
                                t[i].name);
            n *= t[i].shape[d];
        }
        if (n && !t[i].data)
            return vkt_fail(VKT_ERR_ARG, "checkpoint %s: tensor %s has no data", path, t[i].name);
        // int64: whole numbers in [-2^63, 2^63), so that the conversion is exact.
        for (uint64_t k = 0; t[i].int64 && k < n; k++) {
            float v = t[i].data[k];
            if (!(v == floorf(v) && v >= -9223372036854775808.0f && v < 9223372036854775808.0f))
                return vkt_fail(VKT_ERR_ARG,
                                "checkpoint %s: tensor %s is written as int64, but element %llu is "
                                "%.9g, %s",
                                path, t[i].name, (unsigned long long)k, (double)v,
                                isfinite(v) && v == floorf(v) ? "outside int64's range"
                                                              : "not a whole number");
        }
    }
    // Each name once: tensor names among themselves, metadata keys among themselves (a set:
    // linear in their number).
    vkt_strset tn = {0}, mk = {0};
    vkt_status st = vkt_strset_init(&tn, (size_t)nt) && vkt_strset_init(&mk, (size_t)nmeta)
                        ? VKT_OK
                        : vkt_fail(VKT_ERR_HOST_MEMORY, "out of host memory writing %s", path);
    for (int i = 0; i < nt && st == VKT_OK; i++) {
        int added = vkt_strset_add(&tn, t[i].name);
        if (added == 0)
            st = vkt_fail(VKT_ERR_ARG, "checkpoint %s: tensor name %s appears twice", path,
                          t[i].name);
        else if (added < 0)
            st = vkt_fail(VKT_ERR_HOST_MEMORY, "out of host memory writing %s", path);
    }
    for (int i = 0; i < nmeta && st == VKT_OK; i++) {
        int added = -2;
        if (!meta[i].key || !*meta[i].key || !meta[i].value)
            st = vkt_fail(VKT_ERR_ARG, "checkpoint %s: metadata entry %d has no key or value", path,
                          i);
        else
            added = vkt_strset_add(&mk, meta[i].key);
        if (added == 0)
            st = vkt_fail(VKT_ERR_ARG, "checkpoint %s: metadata key %s appears twice", path,
                          meta[i].key);
        else if (added == -1)
            st = vkt_fail(VKT_ERR_HOST_MEMORY, "out of host memory writing %s", path);
    }
    vkt_strset_free(&tn);
    vkt_strset_free(&mk);
    return st;
}

// The JSON header, padded with spaces so that 8 + its length is a multiple of 8 (the data then
// starts 8-byte aligned, as the safetensors writer does).
static vkt_status build_header(const char *path, const vkt_ckpt_tensor *t, int nt,
                               const vkt_ckpt_meta *meta, int nmeta, sb *h) {
    sb_puts(h, "{");
    bool first = true;
    if (nmeta) {
        sb_puts(h, "\"__metadata__\":{");
        for (int i = 0; i < nmeta; i++) {
            if (i) sb_puts(h, ",");
            sb_json_string(h, meta[i].key);
            sb_puts(h, ":");
            sb_json_string(h, meta[i].value);
        }
        sb_puts(h, "}");
        first = false;
    }
    uint64_t off = 0;
    for (int i = 0; i < nt; i++) {
        if (!first) sb_puts(h, ",");
        first = false;
        sb_json_string(h, t[i].name);
        sb_puts(h,
                t[i].int64 ? ":{\"dtype\":\"I64\",\"shape\":[" : ":{\"dtype\":\"F32\",\"shape\":[");
        for (int d = 0; d < t[i].ndim; d++)
            sb_printf(h, "%s%llu", d ? "," : "", (unsigned long long)t[i].shape[d]);
        uint64_t bytes = elements(t[i].ndim, t[i].shape) * (t[i].int64 ? 8 : 4);
        sb_printf(h, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)off,
                  (unsigned long long)(off + bytes));
        off += bytes;
    }
    sb_puts(h, "}");
    while (h->len % 8)
        sb_puts(h, " ");
    if (h->oom)
        return vkt_fail(VKT_ERR_HOST_MEMORY, "out of host memory building the header of %s", path);
    return VKT_OK;
}

vkt_status vkt_checkpoint_write(const char *path, const vkt_ckpt_tensor *tensors, int ntensors,
                                const vkt_ckpt_meta *meta, int nmeta) {
    VKT_TRY(check_inputs(path, tensors, ntensors, meta, nmeta));
    sb h = {0};
    vkt_status s = build_header(path, tensors, ntensors, meta, nmeta, &h);
    if (s != VKT_OK) {
        free(h.p);
        return s;
    }

    uint8_t len8[8];
    for (int i = 0; i < 8; i++)
        len8[i] = (uint8_t)((uint64_t)h.len >> (8 * i));
    vkt_chunk *chunks = malloc((size_t)(ntensors + 2) * sizeof *chunks);
    if (!chunks) {
        free(h.p);
        return vkt_fail(VKT_ERR_HOST_MEMORY, "out of host memory writing checkpoint %s", path);
    }
    // int64 tensors are converted into buffers of their own (check_inputs proved them exact).
    int64_t **i64 = calloc((size_t)ntensors + 1, sizeof *i64);
    if (!i64) s = vkt_fail(VKT_ERR_HOST_MEMORY, "out of host memory writing checkpoint %s", path);
    chunks[0] = (vkt_chunk){len8, 8};
    chunks[1] = (vkt_chunk){h.p, h.len};
    for (int i = 0; i < ntensors && s == VKT_OK; i++) {
        uint64_t n = elements(tensors[i].ndim, tensors[i].shape);
        chunks[i + 2] = (vkt_chunk){tensors[i].data, n * 4};
        if (!tensors[i].int64) continue;
        i64[i] = malloc(n ? n * 8 : 1);
        if (!i64[i]) {
            s = vkt_fail(VKT_ERR_HOST_MEMORY, "out of host memory writing checkpoint %s", path);
            break;
        }
        for (uint64_t k = 0; k < n; k++)
            i64[i][k] = (int64_t)tensors[i].data[k];
        chunks[i + 2] = (vkt_chunk){i64[i], n * 8};
    }
    if (s == VKT_OK) s = vkt_write_file_atomic(path, chunks, ntensors + 2, "checkpoint");
    for (int i = 0; i64 && i < ntensors; i++)
        free(i64[i]);
    free(i64);
    free(chunks);
    free(h.p);
    return s;
}

// ---------------------------------------------------------------------------------------------
// Reading

typedef struct ck_entry {
    char *name;
    bool int64; // I64 (8 bytes an element), else F32
    int ndim;
    uint64_t shape[VKT_CKPT_MAX_DIMS];
    uint64_t begin, end; // relative to the data start
} ck_entry;

struct vkt_checkpoint {
    char *path;
    int fd;
    uint64_t data_start;
    int nt;
    ck_entry *t;
    int nm;
    char **keys, **values;
};

static vkt_status ck_bad(const char *path, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static vkt_status ck_bad(const char *path, const char *fmt, ...) {
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return vkt_fail(VKT_ERR_FORMAT, "checkpoint %s: %s", path, msg);
}

static bool read_at(int fd, void *dst, uint64_t n, uint64_t off) {
    uint8_t *p = dst;
    while (n) {
        size_t k = n > (1u << 30) ? (1u << 30) : (size_t)n;
        ssize_t r = pread(fd, p, k, (off_t)off);
        if (r < 0 && errno == EINTR) continue;
        if (r == 0) errno = 0; // end of file: no system error to report
        if (r <= 0) return false;
        p += r;
        n -= (uint64_t)r;
        off += (uint64_t)r;
    }
    return true;
}

// A JSON number that is a whole number in [0, 2^53] (exact in a double).
static bool json_u64(const cJSON *v, uint64_t *out) {
    if (!cJSON_IsNumber(v)) return false;
    double d = v->valuedouble;
    if (!(d >= 0 && d <= 9007199254740992.0) || d != floor(d)) return false;
    *out = (uint64_t)d;
    return true;
}

static vkt_status parse_entry(const char *path, const cJSON *e, ck_entry *t) {
    const char *name = e->string;
    if (!cJSON_IsObject(e))
        return ck_bad(path, "header entry \"%s\" is not an object (corrupt header)", name);
    const cJSON *dtype = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(e, "shape");
    const cJSON *offs = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    if (!cJSON_IsString(dtype) || !cJSON_IsArray(shape) || !cJSON_IsArray(offs))
        return ck_bad(path,
                      "tensor %s lacks a string dtype, an array shape or an array "
                      "data_offsets (corrupt header)",
                      name);
    t->int64 = strcmp(dtype->valuestring, "I64") == 0;
    if (!t->int64 && strcmp(dtype->valuestring, "F32") != 0)
        return ck_bad(path,
                      "tensor %s has dtype %s; vktrain reads only F32 and I64 (convert it, e.g. "
                      "tensor.float() before saving)",
                      name, dtype->valuestring);
    uint64_t esize = t->int64 ? 8 : 4;
    int ndim = cJSON_GetArraySize(shape);
    if (ndim > VKT_CKPT_MAX_DIMS)
        return ck_bad(path, "tensor %s has %d dimensions; at most %d are read", name, ndim,
                      VKT_CKPT_MAX_DIMS);
    t->ndim = ndim;
    int k = 0;
    uint64_t count = 1;
    bool overflow = false;
    for (const cJSON *d = shape->child; d; d = d->next, k++) {
        if (!json_u64(d, &t->shape[k]))
            return ck_bad(path, "tensor %s: shape[%d] is not a non-negative integer", name, k);
        if (t->shape[k] && count > (UINT64_MAX / 8) / t->shape[k]) overflow = true;
        count *= t->shape[k];
    }
    if (cJSON_GetArraySize(offs) != 2 || !json_u64(offs->child, &t->begin) ||
        !json_u64(offs->child->next, &t->end) || t->end < t->begin)
        return ck_bad(path,
                      "tensor %s: data_offsets must be [begin, end] with begin <= end "
                      "(corrupt header)",
                      name);
    if (overflow || count * esize != t->end - t->begin) {
        char sh[160], need[32];
        format_shape(sh, sizeof sh, t->ndim, t->shape);
        if (overflow) // count wrapped: say so rather than print what it wrapped to
            snprintf(need, sizeof need, "over 2^61");
        else
            snprintf(need, sizeof need, "%llu", (unsigned long long)(count * esize));
        return ck_bad(path,
                      "tensor %s: shape %s needs %s bytes of %s but data_offsets "
                      "[%llu, %llu] hold %llu (corrupt header)",
                      name, sh, need, t->int64 ? "I64" : "F32", (unsigned long long)t->begin,
                      (unsigned long long)t->end, (unsigned long long)(t->end - t->begin));
    }
    t->name = strdup(name);
    if (!t->name) return vkt_fail(VKT_ERR_HOST_MEMORY, "out of host memory reading %s", path);
    return VKT_OK;
}

typedef struct span {
    uint64_t begin, end;
    int index;
} span;

static int by_offset(const void *a, const void *b) {
    const span *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return 0;
}

// The byte ranges must tile [0, data_bytes) exactly, as the safetensors reader demands.
static vkt_status check_layout(vkt_checkpoint *ck, uint64_t data_bytes) {
    uint64_t need = 0;
    if (ck->nt) {
        span *sp = malloc((size_t)ck->nt * sizeof *sp);
        if (!sp) return vkt_fail(VKT_ERR_HOST_MEMORY, "out of host memory reading %s", ck->path);
        for (int i = 0; i < ck->nt; i++)
            sp[i] = (span){ck->t[i].begin, ck->t[i].end, i};
        qsort(sp, (size_t)ck->nt, sizeof *sp, by_offset);
        for (int i = 0; i < ck->nt; i++) {
            const ck_entry *e = &ck->t[sp[i].index];
            if (e->begin != need) {
                free(sp);
                return ck_bad(ck->path,
                              "tensor %s's data starts at byte %llu of the data, but the tensors "
                              "before it end at %llu: the data_offsets overlap or leave a gap "
                              "(corrupt header)",
                              e->name, (unsigned long long)e->begin, (unsigned long long)need);
            }
            need = e->end;
        }
        free(sp);
    }
    if (data_bytes < need)
        return ck_bad(ck->path,
                      "the file is truncated: its header describes %llu bytes of tensor data, "
                      "the file holds %llu (a write was interrupted? use an earlier checkpoint)",
                      (unsigned long long)need, (unsigned long long)data_bytes);
    if (data_bytes > need)
        return ck_bad(ck->path,
                      "%llu unexpected bytes follow the last tensor (the header describes %llu "
                      "bytes of data, the file holds %llu)",
                      (unsigned long long)(data_bytes - need), (unsigned long long)need,
                      (unsigned long long)data_bytes);
    return VKT_OK;
}

static vkt_status parse_header(vkt_checkpoint *ck, const char *text, uint64_t n,
                               uint64_t data_bytes) {
    const char *end = NULL;
    // n + 1: the buffer's NUL terminator is part of it (see model.c on cJSON's length check).
    cJSON *root = cJSON_ParseWithLengthOpts(text, (size_t)n + 1, &end, 1);
    if (!root) {
        uint64_t at = end && end >= text ? (uint64_t)(end - text) : n;
        if (vkt_json_too_deep(text, (size_t)n, (size_t)at))
            return ck_bad(ck->path,
                          "the header nests arrays and objects deeper than %d levels (at byte "
                          "%llu of the file), where the JSON reader stops: a safetensors header "
                          "nests three (corrupt header)",
                          vkt_json_nesting_limit(), (unsigned long long)(8 + at));
        return ck_bad(ck->path, "the header is not valid JSON (at byte %llu of the file)",
                      (unsigned long long)(8 + at));
    }
    vkt_status s = VKT_OK;
    if (!cJSON_IsObject(root)) s = ck_bad(ck->path, "the header is not a JSON object");
    int total = s == VKT_OK ? cJSON_GetArraySize(root) : 0;
    if (s == VKT_OK) {
        ck->t = calloc((size_t)total + 1, sizeof *ck->t);
        // Metadata pairs live in their own arrays, sized by the metadata object, not the header.
        const cJSON *md = cJSON_GetObjectItemCaseSensitive(root, "__metadata__");
        int nmeta = cJSON_IsObject(md) ? cJSON_GetArraySize(md) : 0;
        ck->keys = calloc((size_t)nmeta + 1, sizeof *ck->keys);
        ck->values = calloc((size_t)nmeta + 1, sizeof *ck->values);
        if (!ck->t || !ck->keys || !ck->values)
            s = vkt_fail(VKT_ERR_HOST_MEMORY, "out of host memory reading %s", ck->path);
    }
    vkt_strset seen = {0}, seen_meta = {0};
    if (s == VKT_OK && (!vkt_strset_init(&seen, (size_t)total) || !vkt_strset_init(&seen_meta, 16)))
        s = vkt_fail(VKT_ERR_HOST_MEMORY, "out of host memory reading %s", ck->path);
    for (const cJSON *e = s == VKT_OK ? root->child : NULL; e && s == VKT_OK; e = e->next) {
        int added = vkt_strset_add(&seen, e->string);
        if (added == 0)
            s = ck_bad(ck->path, "the header names \"%s\" twice (corrupt header)", e->string);
        else if (added < 0)
            s = vkt_fail(VKT_ERR_HOST_MEMORY, "out of host memory reading %s", ck->path);
        if (s != VKT_OK) break;
        if (strcmp(e->string, "__metadata__") == 0) {
            if (cJSON_IsNull(e)) continue;
            if (!cJSON_IsObject(e)) {
                s = ck_bad(ck->path, "__metadata__ is not an object of strings");
                break;
            }
            for (const cJSON *m = e->child; m && s == VKT_OK; m = m->next) {
                if (!cJSON_IsString(m)) {
                    s = ck_bad(ck->path, "metadata value of \"%s\" is not a string", m->string);
                    break;
                }
                int madded = vkt_strset_add(&seen_meta, m->string);
                if (madded <= 0) {
                    s = madded == 0 ? ck_bad(ck->path,
                                             "the metadata names \"%s\" twice (corrupt "
                                             "header)",
                                             m->string)
                                    : vkt_fail(VKT_ERR_HOST_MEMORY, "out of host memory reading %s",
                                               ck->path);
                    break;
                }
                ck->keys[ck->nm] = strdup(m->string);
                ck->values[ck->nm] = strdup(m->valuestring);
                ck->nm++;
                if (!ck->keys[ck->nm - 1] || !ck->values[ck->nm - 1])
                    s = vkt_fail(VKT_ERR_HOST_MEMORY, "out of host memory reading %s", ck->path);
            }
            continue;
        }
        // A tensor needs a name to be found by (vkt_checkpoint_find refuses an empty one).
        if (!*e->string) {
            s = ck_bad(ck->path, "a tensor has an empty name (corrupt header)");
            break;
        }
        s = parse_entry(ck->path, e, &ck->t[ck->nt]);
        if (s == VKT_OK) ck->nt++;
    }
    vkt_strset_free(&seen);
    vkt_strset_free(&seen_meta);
    cJSON_Delete(root);
    if (s == VKT_OK) s = check_layout(ck, data_bytes);
    return s;
}

void vkt_checkpoint_close(vkt_checkpoint *ck) {
    if (!ck) return;
    if (ck->fd >= 0) close(ck->fd);
    for (int i = 0; ck->t && i < ck->nt; i++)
        free(ck->t[i].name);
    for (int i = 0; i < ck->nm; i++) {
        free(ck->keys[i]);
        free(ck->values[i]);
    }
    free(ck->t);
    free(ck->keys);
    free(ck->values);
    free(ck->path);
    free(ck);
}

vkt_status vkt_checkpoint_open(const char *path, vkt_checkpoint **out) {
    *out = NULL;
    vkt_checkpoint *ck = calloc(1, sizeof *ck);
    if (!ck || !(ck->path = strdup(path))) {
        free(ck);
        return vkt_fail(VKT_ERR_HOST_MEMORY, "out of host memory opening %s", path);
    }
    ck->fd = vkt_open_input(path, "checkpoint", "(check the path)");
    if (ck->fd < 0) {
        vkt_checkpoint_close(ck);
        return VKT_ERR_IO; // the message is set
    }
    struct stat st;
    vkt_status s = VKT_OK;
    uint8_t len8[8];
    uint64_t size = 0, n = 0;
    if (fstat(ck->fd, &st) != 0)
        s = vkt_fail(VKT_ERR_IO, "cannot stat checkpoint %s: %s", path, strerror(errno));
    else if ((size = (uint64_t)st.st_size) < 8)
        s = ck_bad(path,
                   "the file is truncated: %llu bytes, a safetensors file starts with an "
                   "8-byte header length",
                   (unsigned long long)size);
    else if (!read_at(ck->fd, len8, 8, 0))
        s = vkt_fail(VKT_ERR_IO, "cannot read checkpoint %s: %s", path, strerror(errno));
    if (s == VKT_OK) {
        for (int i = 0; i < 8; i++)
            n |= (uint64_t)len8[i] << (8 * i);
        if (n < 2 || n > MAX_HEADER)
            s = ck_bad(path,
                       "header length %llu (the first 8 bytes) is not plausible: not a "
                       "safetensors file, or a corrupt one",
                       (unsigned long long)n);
        else if (n > size - 8)
            s = ck_bad(path,
                       "the file is truncated: the header alone needs %llu bytes after "
                       "the length, the file has %llu",
                       (unsigned long long)n, (unsigned long long)(size - 8));
    }
    char *text = NULL;
    if (s == VKT_OK) {
        text = malloc((size_t)n + 1);
        if (!text)
            s = vkt_fail(VKT_ERR_HOST_MEMORY, "out of host memory reading %s", path);
        else if (!read_at(ck->fd, text, n, 8))
            s = vkt_fail(VKT_ERR_IO, "cannot read checkpoint %s: %s", path, strerror(errno));
    }
    if (s == VKT_OK) {
        text[n] = 0;
        if (text[0] != '{')
            s = ck_bad(path, "the header does not start with '{'");
        else if (memchr(text, 0, n))
            s = ck_bad(path, "the header holds a NUL byte at byte %llu of the file",
                       (unsigned long long)(8 + (uint64_t)((char *)memchr(text, 0, n) - text)));
    }
    if (s == VKT_OK) {
        ck->data_start = 8 + n;
        s = parse_header(ck, text, n, size - 8 - n);
    }
    free(text);
    if (s != VKT_OK) {
        vkt_checkpoint_close(ck);
        return s;
    }
    *out = ck;
    return VKT_OK;
}

const char *vkt_checkpoint_path(const vkt_checkpoint *ck) { return ck->path; }

const char *vkt_checkpoint_meta(const vkt_checkpoint *ck, const char *key) {
    for (int i = 0; i < ck->nm; i++)
        if (strcmp(ck->keys[i], key) == 0) return ck->values[i];
    return NULL;
}

int vkt_checkpoint_meta_count(const vkt_checkpoint *ck) { return ck->nm; }

void vkt_checkpoint_meta_at(const vkt_checkpoint *ck, int i, const char **key, const char **value) {
    bool ok = i >= 0 && i < ck->nm;
    if (key) *key = ok ? ck->keys[i] : NULL;
    if (value) *value = ok ? ck->values[i] : NULL;
}

int vkt_checkpoint_tensor_count(const vkt_checkpoint *ck) { return ck->nt; }

const char *vkt_checkpoint_tensor_name(const vkt_checkpoint *ck, int i) {
    return i >= 0 && i < ck->nt ? ck->t[i].name : NULL;
}

static const ck_entry *find(const vkt_checkpoint *ck, const char *name) {
    for (int i = 0; i < ck->nt; i++)
        if (strcmp(ck->t[i].name, name) == 0) return &ck->t[i];
    return NULL;
}

bool vkt_checkpoint_find(const vkt_checkpoint *ck, const char *name, int *ndim,
                         uint64_t shape[VKT_CKPT_MAX_DIMS]) {
    const ck_entry *e = find(ck, name);
    if (!e) return false;
    if (ndim) *ndim = e->ndim;
    if (shape) memcpy(shape, e->shape, sizeof e->shape);
    return true;
}

const char *vkt_checkpoint_dtype(const vkt_checkpoint *ck, const char *name) {
    const ck_entry *e = find(ck, name);
    return e ? (e->int64 ? "I64" : "F32") : NULL;
}

static vkt_status missing(const vkt_checkpoint *ck, const char *name) {
    char list[512] = "";
    size_t n = 0;
    for (int i = 0; i < ck->nt && n < sizeof list; i++) {
        if (i == 8) {
            snprintf(list + n, sizeof list - n, ", and %d more", ck->nt - 8);
            break;
        }
        n += (size_t)snprintf(list + n, sizeof list - n, "%s%s", i ? ", " : "", ck->t[i].name);
    }
    return vkt_fail(VKT_ERR_FORMAT,
                    "checkpoint %s has no tensor %s (it holds: %s): was it written for another "
                    "model?",
                    ck->path, name, ck->nt ? list : "nothing");
}

vkt_status vkt_checkpoint_expect(const vkt_checkpoint *ck, const char *name, int ndim,
                                 const uint64_t *shape) {
    const ck_entry *e = find(ck, name);
    if (!e) return missing(ck, name);
    bool same = e->ndim == ndim;
    for (int i = 0; same && i < ndim; i++)
        same = e->shape[i] == shape[i];
    if (same) return VKT_OK;
    char have[160], want[160];
    format_shape(have, sizeof have, e->ndim, e->shape);
    format_shape(want, sizeof want, ndim, shape);
    return vkt_fail(VKT_ERR_FORMAT,
                    "checkpoint %s: tensor %s has shape %s, the model needs %s (was it written "
                    "for another model?)",
                    ck->path, name, have, want);
}

static vkt_status read_failed(const vkt_checkpoint *ck, const char *name, uint64_t off) {
    return vkt_fail(VKT_ERR_IO,
                    "cannot read tensor %s from checkpoint %s at byte %llu: %s (was the file "
                    "changed while open?)",
                    name, ck->path, (unsigned long long)(ck->data_start + off),
                    errno ? strerror(errno) : "unexpected end of file");
}

vkt_status vkt_checkpoint_read(const vkt_checkpoint *ck, const char *name, float *dst,
                               uint64_t count) {
    const ck_entry *e = find(ck, name);
    if (!e) return missing(ck, name);
    uint64_t have = (e->end - e->begin) / (e->int64 ? 8 : 4);
    if (count != have)
        return vkt_fail(VKT_ERR_ARG, "checkpoint %s: tensor %s holds %llu %s, %llu asked", ck->path,
                        name, (unsigned long long)have, e->int64 ? "int64 values" : "floats",
                        (unsigned long long)count);
    if (!e->int64) {
        if (!read_at(ck->fd, dst, e->end - e->begin, ck->data_start + e->begin))
            return read_failed(ck, name, e->begin);
        return VKT_OK;
    }
    // I64: through a bounce buffer, each value converted where a float holds it exactly.
    enum { CHUNK = 4096 };
    int64_t buf[CHUNK];
    for (uint64_t done = 0; done < count;) {
        uint64_t k = count - done < CHUNK ? count - done : CHUNK, off = e->begin + done * 8;
        if (!read_at(ck->fd, buf, k * 8, ck->data_start + off)) return read_failed(ck, name, off);
        for (uint64_t j = 0; j < k; j++) {
            if (buf[j] > MAX_EXACT_INT || buf[j] < -MAX_EXACT_INT)
                return vkt_fail(VKT_ERR_FORMAT,
                                "checkpoint %s: tensor %s (I64) holds %lld at element %llu, beyond "
                                "2^24 = 16777216: vktrain keeps the tensor as floats, which hold "
                                "whole numbers exactly only up to 2^24",
                                ck->path, name, (long long)buf[j], (unsigned long long)(done + j));
            dst[done + j] = (float)buf[j];
        }
        done += k;
    }
    return VKT_OK;
}
