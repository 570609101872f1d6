// data.c: reads IDX (MNIST layout) and NumPy .npy data sets and text corpora into host memory,
// and walks them in (optionally shuffled) batches, or in windows of text. See data.h for the
// formats accepted and the definitions of the shuffle and of the text windows.
//
// Every file goes through zlib's gzread, which reads plain and gzip-compressed files alike, so
// "train-images-idx3-ubyte" and "train-images-idx3-ubyte.gz" (or a gzipped .npy) need no separate
// code. Byte counts in messages are of the decompressed stream.
//
// Training batches of images are augmented here too (random crop and flip, data.h), on the host.
//
// Not here: memory-mapping, streaming larger-than-memory sets, big-endian hosts (.npy data is
// read as little-endian host memory), any device work.
#include "data.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "vkt_internal.h"

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
               "data.c reads little-endian .npy payloads straight into host memory");

// Class indices above this are taken as a sign of a wrong file, not of a real task.
#define MAX_CLASSES (1u << 24)
// Integer features (token ids) must be below this: every such integer is exact in a float.
#define MAX_TOKEN_ID (1u << 24)

// ---------------------------------------------------------------------------------------------
// A reader over gzread that counts bytes, so that messages can say where things went wrong.

typedef struct rd {
    gzFile f;
    const char *path;
    uint64_t pos; // decompressed bytes read so far
} rd;

static vkt_status rd_open(rd *r, const char *path) {
    r->path = path;
    r->pos = 0;
    int fd = vkt_open_input(path, "data file", "(check the path and its permissions)");
    if (fd < 0) return VKT_ERR_IO; // the message is set
    r->f = gzdopen(fd, "rb");
    if (!r->f) {
        close(fd);
        return vkt_fail(VKT_ERR_HOST_MEMORY, "out of host memory opening %s", path);
    }
    gzbuffer(r->f, 1u << 17);
    return VKT_OK;
}

static void rd_close(rd *r) {
    if (r->f) gzclose(r->f);
    r->f = NULL;
}

// Reads up to n bytes; *got receives how many were read (fewer only at the end of the data).
// A gzip stream that ends early is reported by the caller as a truncation; corrupt compressed
// data is VKT_ERR_FORMAT here.
static vkt_status rd_read(rd *r, void *dst, uint64_t n, uint64_t *got) {
    uint8_t *p = dst;
    uint64_t done = 0;
    while (done < n) {
        uint64_t want = n - done;
        if (want > (1u << 30)) want = 1u << 30; // gzread counts in int
        int k = gzread(r->f, p + done, (unsigned)want);
        if (k < 0) {
            int errnum = 0;
            const char *msg = gzerror(r->f, &errnum);
            if (errnum == Z_ERRNO)
                return vkt_fail(VKT_ERR_IO, "cannot read %s at byte %llu: %s", r->path,
                                (unsigned long long)(r->pos + done), strerror(errno));
            return vkt_fail(VKT_ERR_FORMAT,
                            "%s: corrupt gzip data after %llu decompressed bytes (%s): "
                            "re-download or re-create the file",
                            r->path, (unsigned long long)(r->pos + done), msg);
        }
        if (k == 0) break;
        done += (uint64_t)k;
    }
    r->pos += done;
    *got = done;
    return VKT_OK;
}

// Why a read came up short, for messages: a gzip stream that stops mid-way says so.
static const char *rd_short_reason(rd *r) {
    int errnum = 0;
    gzerror(r->f, &errnum);
    return errnum == Z_BUF_ERROR ? " (the gzip stream ends early)" : "";
}

// Reads exactly n bytes of `what`, or fails with VKT_ERR_FORMAT saying how many were expected
// and how many were found.
static vkt_status rd_exact(rd *r, void *dst, uint64_t n, const char *what) {
    uint64_t start = r->pos, got = 0;
    VKT_TRY(rd_read(r, dst, n, &got));
    if (got != n)
        return vkt_fail(VKT_ERR_FORMAT,
                        "%s is truncated: expected %llu bytes of %s from byte %llu, found %llu%s "
                        "(re-download or re-create the file)",
                        r->path, (unsigned long long)n, what, (unsigned long long)start,
                        (unsigned long long)got, rd_short_reason(r));
    return VKT_OK;
}

// The first allocation (bytes, or .npy values) of the arrays that rd_exact_grow and
// npy_read_data grow as data arrives.
#define FIRST_READ (1u << 20)

// Reads exactly n bytes of `what` into a malloc'd *out (the caller frees it, also on failure),
// failing as rd_exact does. The buffer grows by doubling as the bytes arrive, so that a header
// promising more data than the file holds (a few corrupt bytes saying 4 GB) is reported as a
// truncation after reading what is there, instead of allocating what it promised first.
static vkt_status rd_exact_grow(rd *r, uint64_t n, const char *what, uint8_t **out) {
    uint64_t start = r->pos, done = 0, cap = 0;
    *out = NULL;
    for (;;) {
        if (done == cap) {
            if (done == n) return VKT_OK;
            uint64_t next = cap ? cap * 2 : FIRST_READ;
            if (next > n) next = n;
            uint8_t *p = realloc(*out, next ? (size_t)next : 1);
            if (!p)
                return vkt_fail(VKT_ERR_HOST_MEMORY, "out of host memory: %llu bytes for %s of %s",
                                (unsigned long long)next, what, r->path);
            *out = p;
            cap = next;
        }
        uint64_t got = 0;
        VKT_TRY(rd_read(r, *out + done, cap - done, &got));
        done += got;
        if (done < cap)
            return vkt_fail(VKT_ERR_FORMAT,
                            "%s is truncated: expected %llu bytes of %s from byte %llu, found "
                            "%llu%s (re-download or re-create the file)",
                            r->path, (unsigned long long)n, what, (unsigned long long)start,
                            (unsigned long long)done, rd_short_reason(r));
    }
}

// Fails when anything follows the data the header declared: a wrong header or a file written
// twice is better reported than silently half-used.
static vkt_status rd_expect_end(rd *r) {
    uint64_t end = r->pos, extra = 0, got;
    uint8_t buf[4096];
    do {
        VKT_TRY(rd_read(r, buf, sizeof buf, &got));
        extra += got;
    } while (got == sizeof buf);
    if (extra)
        return vkt_fail(VKT_ERR_FORMAT,
                        "%s has %llu unexpected bytes after the %llu its header accounts for: "
                        "the header's dimensions do not match the data",
                        r->path, (unsigned long long)extra, (unsigned long long)end);
    return VKT_OK;
}

static uint32_t be32(const uint8_t *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static void *xmalloc(size_t n, const char *what, const char *path, vkt_status *s) {
    void *p = malloc(n ? n : 1);
    if (!p)
        *s = vkt_fail(VKT_ERR_HOST_MEMORY, "out of host memory: %zu bytes for %s of %s", n, what,
                      path);
    return p;
}

void vkt_dataset_free(vkt_dataset *ds) {
    if (!ds) return;
    free(ds->x);
    free(ds->y);
    memset(ds, 0, sizeof *ds);
}

uint32_t vkt_dataset_targets(const vkt_dataset *ds) { return ds->targets ? ds->targets : 1; }

// " at position 3" when a sample has several labels, "" otherwise, for messages.
static const char *position_text(uint32_t targets, uint64_t pos, char *buf, size_t size) {
    if (targets <= 1) return "";
    snprintf(buf, size, ", position %llu", (unsigned long long)pos);
    return buf;
}

vkt_status vkt_dataset_check(const vkt_dataset *ds, const char *who) {
    if (!ds->x || !ds->y) return vkt_fail(VKT_ERR_ARG, "%s: %s is NULL", who, !ds->x ? "x" : "y");
    if (ds->n == 0 || ds->features == 0 || ds->classes == 0)
        return vkt_fail(VKT_ERR_ARG,
                        "%s: n (%u), features (%u) and classes (%u) must all be at least 1", who,
                        ds->n, ds->features, ds->classes);
    if (ds->classes > MAX_CLASSES)
        return vkt_fail(VKT_ERR_ARG, "%s: %u classes; at most %u are supported", who, ds->classes,
                        MAX_CLASSES);
    size_t count = (size_t)ds->n * ds->features;
    if (count / ds->features != ds->n || count > SIZE_MAX / sizeof(float))
        return vkt_fail(VKT_ERR_HOST_MEMORY, "%s: %u x %u features overflow", who, ds->n,
                        ds->features);
    uint32_t tps = vkt_dataset_targets(ds);
    size_t labels = (size_t)ds->n * tps;
    if (labels / tps != ds->n || labels > SIZE_MAX / sizeof(uint32_t))
        return vkt_fail(VKT_ERR_HOST_MEMORY, "%s: %u x %u labels overflow", who, ds->n, tps);
    for (size_t i = 0; i < labels; i++)
        if (ds->y[i] >= ds->classes) {
            char pos[48];
            return vkt_fail(VKT_ERR_ARG,
                            "%s: sample %zu%s has label %u, but there are %u classes (labels must "
                            "be 0..%u)",
                            who, i / tps, position_text(tps, i % tps, pos, sizeof pos), ds->y[i],
                            ds->classes, ds->classes - 1);
        }
    for (size_t k = 0; k < count; k++)
        if (!isfinite(ds->x[k]))
            return vkt_fail(
                VKT_ERR_ARG, "%s: sample %zu, feature %zu is %s; every feature must be finite", who,
                k / ds->features, k % ds->features, isnan(ds->x[k]) ? "NaN" : "infinite");
    return VKT_OK;
}

static vkt_status from_arrays(const char *who, const float *x, const uint32_t *y, uint32_t n,
                              uint32_t features, uint32_t targets, uint32_t classes,
                              vkt_dataset *out) {
    memset(out, 0, sizeof *out);
    if (targets == 0) return vkt_fail(VKT_ERR_ARG, "%s: targets (0) must be at least 1", who);
    // The arrays as a set that borrows them, checked as any set the caller hands a run.
    vkt_dataset view = {.n = n,
                        .features = features,
                        .classes = classes,
                        .targets = targets,
                        .x = (float *)x,
                        .y = (uint32_t *)y};
    VKT_TRY(vkt_dataset_check(&view, who));
    size_t count = (size_t)n * features, labels = (size_t)n * targets;
    vkt_status s = VKT_OK;
    out->x = xmalloc(count * sizeof(float), "the features", "arrays in memory", &s);
    if (s == VKT_OK)
        out->y = xmalloc(labels * sizeof(uint32_t), "the labels", "arrays in memory", &s);
    if (s != VKT_OK) {
        vkt_dataset_free(out);
        return s;
    }
    memcpy(out->x, x, count * sizeof(float));
    memcpy(out->y, y, labels * sizeof(uint32_t));
    out->n = n;
    out->features = features;
    out->classes = classes;
    out->targets = targets;
    snprintf(out->source, sizeof out->source, "arrays in memory");
    return VKT_OK;
}

vkt_status vkt_dataset_from_arrays(const float *x, const uint32_t *y, uint32_t n, uint32_t features,
                                   uint32_t classes, vkt_dataset *out) {
    return from_arrays("vkt_dataset_from_arrays", x, y, n, features, 1, classes, out);
}

vkt_status vkt_dataset_from_sequences(const float *x, const uint32_t *y, uint32_t n,
                                      uint32_t features, uint32_t targets, uint32_t classes,
                                      vkt_dataset *out) {
    return from_arrays("vkt_dataset_from_sequences", x, y, n, features, targets, classes, out);
}

void vkt_dataset_limit(vkt_dataset *ds, uint32_t n) {
    if (n == 0 || n >= ds->n) return;
    ds->n = n; // the arrays keep their size; only the first n rows are used from now on
}

// classes = largest label + 1 (the readers have already bounded the labels by MAX_CLASSES).
static void set_classes(vkt_dataset *ds) {
    uint32_t mx = 0;
    size_t labels = (size_t)ds->n * vkt_dataset_targets(ds);
    for (size_t i = 0; i < labels; i++)
        if (ds->y[i] > mx) mx = ds->y[i];
    ds->classes = mx + 1;
}

// ---------------------------------------------------------------------------------------------
// IDX

#define IDX_IMAGES_U8 0x00000803u
#define IDX_LABELS_U8 0x00000801u

static const char *idx_magic_hint(uint32_t magic) {
    if (magic == IDX_IMAGES_U8)
        return " (this is an IDX image file: are images and labels swapped?)";
    if (magic == IDX_LABELS_U8)
        return " (this is an IDX label file: are images and labels swapped?)";
    if ((magic >> 16) == 0 && ((magic >> 8) & 0xff) != 0x08)
        return " (an IDX file of another element type: only unsigned bytes (0x08) are read)";
    return " (not an IDX file)";
}

static vkt_status idx_magic(rd *r, uint32_t expect, const char *kind) {
    uint8_t m[4];
    VKT_TRY(rd_exact(r, m, 4, "IDX magic number"));
    uint32_t magic = be32(m);
    if (magic != expect)
        return vkt_fail(VKT_ERR_FORMAT,
                        "%s: magic number 0x%08x, expected 0x%08x for an IDX %s file%s", r->path,
                        magic, expect, kind, idx_magic_hint(magic));
    return VKT_OK;
}

static vkt_status idx_load(rd *ri, rd *rl, vkt_dataset *ds) {
    vkt_status s = VKT_OK;
    uint8_t h[12];
    VKT_TRY(idx_magic(ri, IDX_IMAGES_U8, "image (unsigned byte, 3 dimensions)"));
    VKT_TRY(rd_exact(ri, h, 12, "IDX image dimensions"));
    uint32_t n = be32(h), rows = be32(h + 4), cols = be32(h + 8);
    if (n == 0 || rows == 0 || cols == 0)
        return vkt_fail(VKT_ERR_FORMAT, "%s: dimensions [%u, %u, %u] hold no image", ri->path, n,
                        rows, cols);
    uint64_t features = (uint64_t)rows * cols;
    if (features > UINT32_MAX || (uint64_t)n * features > SIZE_MAX / sizeof(float))
        return vkt_fail(VKT_ERR_FORMAT, "%s: dimensions [%u, %u, %u] are too large", ri->path, n,
                        rows, cols);

    VKT_TRY(idx_magic(rl, IDX_LABELS_U8, "label (unsigned byte, 1 dimension)"));
    VKT_TRY(rd_exact(rl, h, 4, "IDX label count"));
    uint32_t nl = be32(h);
    if (nl != n)
        return vkt_fail(VKT_ERR_FORMAT,
                        "%s holds %u images but %s holds %u labels: the two files are not a pair",
                        ri->path, n, rl->path, nl);

    // The pixels are read before anything is allocated from the header's counts: a header that
    // promises more than the file holds fails as truncated after reading what is there.
    uint64_t total = (uint64_t)n * features;
    uint8_t *raw = NULL;
    s = rd_exact_grow(ri, total, "image pixels", &raw);
    if (s == VKT_OK) s = rd_expect_end(ri);
    if (s == VKT_OK) ds->x = xmalloc(total * sizeof(float), "images", ri->path, &s);
    if (s == VKT_OK) ds->y = xmalloc((size_t)n * sizeof(uint32_t), "labels", rl->path, &s);
    if (s == VKT_OK) {
        // Divide rather than multiply by 1/255 so that every value equals torchvision's
        // ToTensor() (x / 255 in float32) bit for bit.
        for (uint64_t i = 0; i < total; i++)
            ds->x[i] = (float)raw[i] / 255.0f;
        s = rd_exact(rl, raw, n, "labels");
    }
    if (s == VKT_OK) s = rd_expect_end(rl);
    if (s == VKT_OK)
        for (uint32_t i = 0; i < n; i++)
            ds->y[i] = raw[i];
    free(raw);
    ds->n = n;
    ds->features = (uint32_t)features;
    ds->targets = 1;
    return s;
}

vkt_status vkt_dataset_load_idx(const char *images_path, const char *labels_path,
                                vkt_dataset *out) {
    memset(out, 0, sizeof *out);
    rd ri = {0}, rl = {0};
    vkt_status s = rd_open(&ri, images_path);
    if (s == VKT_OK) s = rd_open(&rl, labels_path);
    if (s == VKT_OK) s = idx_load(&ri, &rl, out);
    if (s == VKT_OK) set_classes(out);
    rd_close(&ri);
    rd_close(&rl);
    if (s != VKT_OK) {
        vkt_dataset_free(out);
        return s;
    }
    snprintf(out->source, sizeof out->source, "%s", images_path);
    return VKT_OK;
}

// Anything at the path counts (opening it is left to the reader, which refuses a FIFO or a device
// by name: opening a FIFO here would block).
static bool file_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

// Finds dir/base.gz or dir/base; fails with VKT_ERR_IO naming both.
static vkt_status find_idx(const char *dir, const char *base, char *path, size_t size) {
    snprintf(path, size, "%s/%s.gz", dir, base);
    if (file_exists(path)) return VKT_OK;
    snprintf(path, size, "%s/%s", dir, base);
    if (file_exists(path)) return VKT_OK;
    return vkt_fail(VKT_ERR_IO,
                    "no %s[.gz] in %s: point --data at a directory in the MNIST layout (e.g. "
                    "Fashion-MNIST's four files)",
                    base, dir);
}

vkt_status vkt_dataset_load_mnist_dir(const char *dir, bool train, vkt_dataset *out) {
    memset(out, 0, sizeof *out);
    if (!dir || !*dir) dir = VKT_DEFAULT_DATA_DIR;
    const char *split = train ? "train" : "t10k";
    char base[64], images[4096], labels[4096];
    snprintf(base, sizeof base, "%s-images-idx3-ubyte", split);
    VKT_TRY(find_idx(dir, base, images, sizeof images));
    snprintf(base, sizeof base, "%s-labels-idx1-ubyte", split);
    VKT_TRY(find_idx(dir, base, labels, sizeof labels));
    return vkt_dataset_load_idx(images, labels, out);
}

// ---------------------------------------------------------------------------------------------
// NumPy .npy: "\x93NUMPY", major, minor, header length (u16 in 1.0, u32 in 2.0 and 3.0), then a
// Python dict literal {'descr': '<f4', 'fortran_order': False, 'shape': (n, d), } padded with
// spaces and a newline, then the data.

typedef enum npy_type { NPY_F4, NPY_F8, NPY_U1, NPY_I8, NPY_I4, NPY_U4 } npy_type;

typedef struct npy_header {
    char descr[32];
    bool fortran;
    int ndim;
    uint64_t shape[16];
    bool has_descr, has_fortran, has_shape;
} npy_header;

typedef struct npy_parser {
    const char *text;
    size_t len, i;
    uint64_t base; // file offset of text[0], for messages
    const char *path;
} npy_parser;

static vkt_status npy_err(npy_parser *p, const char *what) {
    return vkt_fail(VKT_ERR_FORMAT,
                    "%s: malformed .npy header at byte %llu: %s (write the file with numpy.save)",
                    p->path, (unsigned long long)(p->base + p->i), what);
}

static void npy_ws(npy_parser *p) {
    while (p->i < p->len && (p->text[p->i] == ' ' || p->text[p->i] == '\t' ||
                             p->text[p->i] == '\n' || p->text[p->i] == '\r'))
        p->i++;
}

static bool npy_eat(npy_parser *p, char c) {
    npy_ws(p);
    if (p->i < p->len && p->text[p->i] == c) {
        p->i++;
        return true;
    }
    return false;
}

static vkt_status npy_string(npy_parser *p, char *out, size_t size) {
    npy_ws(p);
    if (p->i >= p->len || (p->text[p->i] != '\'' && p->text[p->i] != '"'))
        return npy_err(p, "expected a quoted string");
    char q = p->text[p->i++];
    size_t n = 0;
    while (p->i < p->len && p->text[p->i] != q) {
        if (n + 1 >= size) return npy_err(p, "string too long");
        out[n++] = p->text[p->i++];
    }
    if (p->i >= p->len) return npy_err(p, "unterminated string");
    p->i++;
    out[n] = 0;
    return VKT_OK;
}

static vkt_status npy_value(npy_parser *p, const char *key, npy_header *h) {
    if (strcmp(key, "descr") == 0) {
        h->has_descr = true;
        return npy_string(p, h->descr, sizeof h->descr);
    }
    if (strcmp(key, "fortran_order") == 0) {
        npy_ws(p);
        h->has_fortran = true;
        if (p->len - p->i >= 4 && memcmp(p->text + p->i, "True", 4) == 0) {
            h->fortran = true;
            p->i += 4;
            return VKT_OK;
        }
        if (p->len - p->i >= 5 && memcmp(p->text + p->i, "False", 5) == 0) {
            h->fortran = false;
            p->i += 5;
            return VKT_OK;
        }
        return npy_err(p, "fortran_order must be True or False");
    }
    if (strcmp(key, "shape") == 0) {
        h->has_shape = true;
        if (!npy_eat(p, '(')) return npy_err(p, "shape must be a tuple like (60000, 784)");
        h->ndim = 0;
        for (;;) {
            if (npy_eat(p, ')')) return VKT_OK;
            npy_ws(p);
            if (p->i >= p->len || p->text[p->i] < '0' || p->text[p->i] > '9')
                return npy_err(p, "expected a non-negative integer in shape");
            uint64_t v = 0;
            while (p->i < p->len && p->text[p->i] >= '0' && p->text[p->i] <= '9') {
                if (v > (UINT64_MAX - 9) / 10) return npy_err(p, "shape value too large");
                v = v * 10 + (uint64_t)(p->text[p->i++] - '0');
            }
            if (p->i < p->len && p->text[p->i] == 'L') p->i++; // Python 2 longs
            if (h->ndim == (int)(sizeof h->shape / sizeof h->shape[0]))
                return npy_err(p, "too many dimensions in shape");
            h->shape[h->ndim++] = v;
            if (!npy_eat(p, ',')) {
                if (npy_eat(p, ')')) return VKT_OK;
                return npy_err(p, "expected ',' or ')' in shape");
            }
        }
    }
    char msg[128];
    snprintf(msg, sizeof msg, "unknown key '%s' (a .npy header has descr, fortran_order, shape)",
             key);
    return npy_err(p, msg);
}

static vkt_status npy_parse_dict(npy_parser *p, npy_header *h) {
    memset(h, 0, sizeof *h);
    if (!npy_eat(p, '{')) return npy_err(p, "expected '{'");
    for (;;) {
        if (npy_eat(p, '}')) break;
        char key[64];
        VKT_TRY(npy_string(p, key, sizeof key));
        if (!npy_eat(p, ':')) return npy_err(p, "expected ':' after a key");
        VKT_TRY(npy_value(p, key, h));
        if (npy_eat(p, ',')) continue;
        if (npy_eat(p, '}')) break;
        return npy_err(p, "expected ',' or '}'");
    }
    npy_ws(p);
    if (p->i != p->len) return npy_err(p, "unexpected text after the header's '}'");
    if (!h->has_descr) return npy_err(p, "the header has no 'descr'");
    if (!h->has_fortran) return npy_err(p, "the header has no 'fortran_order'");
    if (!h->has_shape) return npy_err(p, "the header has no 'shape'");
    return VKT_OK;
}

// Reads the magic, version and header, leaving r at the first data byte.
static vkt_status npy_read_header(rd *r, npy_header *h) {
    uint8_t pre[10];
    VKT_TRY(rd_exact(r, pre, 8, ".npy magic and version"));
    if (memcmp(pre, "\x93NUMPY", 6) != 0)
        return vkt_fail(VKT_ERR_FORMAT,
                        "%s: not a .npy file (it does not start with \\x93NUMPY); write it with "
                        "numpy.save",
                        r->path);
    unsigned major = pre[6], minor = pre[7];
    uint64_t hlen;
    if (major == 1) {
        VKT_TRY(rd_exact(r, pre, 2, ".npy header length"));
        hlen = (uint64_t)pre[0] | (uint64_t)pre[1] << 8;
    } else if (major == 2 || major == 3) {
        VKT_TRY(rd_exact(r, pre, 4, ".npy header length"));
        hlen = (uint64_t)pre[0] | (uint64_t)pre[1] << 8 | (uint64_t)pre[2] << 16 |
               (uint64_t)pre[3] << 24;
    } else {
        return vkt_fail(VKT_ERR_FORMAT,
                        "%s: .npy format version %u.%u is not supported (1.0, 2.0 and 3.0 are)",
                        r->path, major, minor);
    }
    if (hlen > (1u << 20))
        return vkt_fail(VKT_ERR_FORMAT, "%s: .npy header length %llu is implausibly large", r->path,
                        (unsigned long long)hlen);
    char *text = malloc(hlen + 1);
    if (!text) return vkt_fail(VKT_ERR_HOST_MEMORY, "out of host memory reading %s", r->path);
    uint64_t base = r->pos;
    vkt_status s = rd_exact(r, text, hlen, ".npy header");
    if (s == VKT_OK) {
        text[hlen] = 0;
        npy_parser p = {.text = text, .len = hlen, .i = 0, .base = base, .path = r->path};
        s = npy_parse_dict(&p, h);
    }
    free(text);
    return s;
}

static vkt_status npy_type_of(const char *path, const char *descr, bool features, npy_type *t) {
    static const struct {
        const char *descr;
        npy_type t;
        bool x, y;
    } table[] = {
        {"<f4", NPY_F4, true, false}, {"<f8", NPY_F8, true, false}, {"|u1", NPY_U1, true, true},
        {"<u1", NPY_U1, true, true},  {"<i8", NPY_I8, true, true},  {"<i4", NPY_I4, true, true},
        {"<u4", NPY_U4, false, true},
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        if (strcmp(descr, table[i].descr) != 0) continue;
        if (features ? table[i].x : table[i].y) {
            *t = table[i].t;
            return VKT_OK;
        }
    }
    const char *hint = descr[0] == '>' ? " (it is big-endian; convert with a.astype(a.dtype."
                                         "newbyteorder('<')))"
                                       : "";
    if (features)
        return vkt_fail(VKT_ERR_FORMAT,
                        "%s: dtype '%s' is not supported for features%s; use '<f4', '<f8' or "
                        "'|u1' (x.astype(numpy.float32)), or '<i4' / '<i8' for token ids",
                        path, descr, hint);
    return vkt_fail(VKT_ERR_FORMAT,
                    "%s: dtype '%s' is not supported for labels%s; use '<i8', '<i4', '<u4' or "
                    "'|u1' (y.astype(numpy.int64))",
                    path, descr, hint);
}

static size_t npy_itemsize(npy_type t) {
    switch (t) {
    case NPY_F8:
    case NPY_I8: return 8;
    case NPY_F4:
    case NPY_I4:
    case NPY_U4: return 4;
    case NPY_U1: return 1;
    }
    return 1;
}

// Opens a .npy file and checks its header: C order, a supported dtype, n = shape[0] and
// inner = the product of the other dimensions (labels: the labels per sample).
static vkt_status npy_open(rd *r, const char *path, bool features, npy_type *t, uint64_t *n,
                           uint64_t *inner) {
    npy_header h;
    VKT_TRY(rd_open(r, path));
    VKT_TRY(npy_read_header(r, &h));
    if (h.fortran)
        return vkt_fail(VKT_ERR_FORMAT,
                        "%s: the array is in Fortran order (fortran_order: True); only C order is "
                        "read: save numpy.ascontiguousarray(a)",
                        path);
    VKT_TRY(npy_type_of(path, h.descr, features, t));
    if (h.ndim == 0)
        return vkt_fail(VKT_ERR_FORMAT,
                        "%s: the array is a scalar (shape ()); it needs a first "
                        "dimension of samples",
                        path);
    *n = h.shape[0];
    *inner = 1;
    for (int i = 1; i < h.ndim; i++) {
        if (h.shape[i] != 0 && *inner > UINT32_MAX / h.shape[i])
            return vkt_fail(VKT_ERR_FORMAT, "%s: too many features per sample", path);
        *inner *= h.shape[i];
    }
    if (*n == 0 || *inner == 0) return vkt_fail(VKT_ERR_FORMAT, "%s: the array is empty", path);
    if (*n > UINT32_MAX)
        return vkt_fail(VKT_ERR_FORMAT, "%s: %llu samples is more than this engine indexes", path,
                        (unsigned long long)*n);
    if (*n * *inner > SIZE_MAX / 8)
        return vkt_fail(VKT_ERR_FORMAT, "%s: the array is too large", path);
    return VKT_OK;
}

// Reads count elements of type t in chunks and converts them: features to float (u1 scaled by
// 1/255, non-finite values rejected; integers, token ids, exactly, those outside [0, 2^24)
// rejected) into *xf, or labels to uint32 (negative or huge values rejected) into *yu (the
// other NULL); inner: values per sample. The array is malloc'd here and grows by doubling as
// the data arrives, so that a header promising more than the file holds is a truncation, not an
// allocation of what it promised; the caller frees it, also on failure.
static vkt_status npy_read_data(rd *r, npy_type t, uint64_t count, uint64_t inner, float **xfp,
                                uint32_t **yup) {
    size_t isz = npy_itemsize(t);
    enum { CHUNK = 1 << 16 };
    _Static_assert(sizeof(float) == sizeof(uint32_t), "one growth for either array");
    uint8_t *buf = malloc(CHUNK * 8);
    if (!buf) return vkt_fail(VKT_ERR_HOST_MEMORY, "out of host memory reading %s", r->path);
    vkt_status s = VKT_OK;
    uint64_t data_start = r->pos, cap = 0;
    void **arr = xfp ? (void **)xfp : (void **)yup;
    *arr = NULL;
    for (uint64_t done = 0; done < count && s == VKT_OK;) {
        uint64_t k = count - done < CHUNK ? count - done : CHUNK;
        uint64_t got = 0;
        s = rd_read(r, buf, k * isz, &got);
        if (s != VKT_OK) break;
        if (got != k * isz) {
            s = vkt_fail(VKT_ERR_FORMAT,
                         "%s is truncated: the header promises %llu bytes of data from byte %llu, "
                         "found %llu%s (re-create the file)",
                         r->path, (unsigned long long)(count * isz), (unsigned long long)data_start,
                         (unsigned long long)(done * isz + got), rd_short_reason(r));
            break;
        }
        if (done + k > cap) {
            uint64_t next = cap ? cap * 2 : FIRST_READ;
            if (next < done + k) next = done + k;
            if (next > count) next = count;
            void *p = realloc(*arr, (size_t)next * sizeof(float));
            if (!p) {
                s = vkt_fail(VKT_ERR_HOST_MEMORY, "out of host memory: %llu values of %s",
                             (unsigned long long)next, r->path);
                break;
            }
            *arr = p;
            cap = next;
        }
        float *xf = xfp ? *xfp : NULL;
        uint32_t *yu = yup ? *yup : NULL;
        for (uint64_t j = 0; j < k; j++) {
            uint64_t e = done + j;
            const uint8_t *q = buf + j * isz;
            if (xf && (t == NPY_I4 || t == NPY_I8)) {
                int64_t id;
                int32_t i4;
                if (t == NPY_I8) {
                    memcpy(&id, q, 8);
                } else {
                    memcpy(&i4, q, 4);
                    id = i4;
                }
                if (id < 0 || id >= (int64_t)MAX_TOKEN_ID) {
                    s = vkt_fail(VKT_ERR_FORMAT,
                                 "%s: row %llu, column %llu holds token id %lld: ids must be "
                                 "0..%u (whole numbers below 2^24 are exact as float32 inputs)",
                                 r->path, (unsigned long long)(e / inner),
                                 (unsigned long long)(e % inner), (long long)id, MAX_TOKEN_ID - 1);
                    break;
                }
                xf[e] = (float)id;
            } else if (xf) {
                float v;
                double d;
                switch (t) {
                case NPY_F4: memcpy(&v, q, 4); break;
                case NPY_F8:
                    memcpy(&d, q, 8);
                    v = (float)d;
                    break;
                default: v = (float)q[0] / 255.0f; break;
                }
                if (!isfinite(v)) {
                    s = vkt_fail(VKT_ERR_FORMAT,
                                 "%s: sample %llu, feature %llu is %s (or overflows float32): "
                                 "clean the data before training",
                                 r->path, (unsigned long long)(e / inner),
                                 (unsigned long long)(e % inner), isnan(v) ? "NaN" : "infinite");
                    break;
                }
                xf[e] = v;
            } else {
                int64_t v;
                int32_t i4;
                uint32_t u4;
                switch (t) {
                case NPY_I8: memcpy(&v, q, 8); break;
                case NPY_I4:
                    memcpy(&i4, q, 4);
                    v = i4;
                    break;
                case NPY_U4:
                    memcpy(&u4, q, 4);
                    v = u4;
                    break;
                default: v = q[0]; break;
                }
                if (v < 0 || v >= (int64_t)MAX_CLASSES) {
                    char pos[48];
                    s = vkt_fail(VKT_ERR_FORMAT,
                                 "%s: label %lld of sample %llu%s is %s: labels are class indices "
                                 "0..C-1",
                                 r->path, (long long)v, (unsigned long long)(e / inner),
                                 position_text((uint32_t)inner, e % inner, pos, sizeof pos),
                                 v < 0 ? "negative" : "implausibly large");
                    break;
                }
                yu[e] = (uint32_t)v;
            }
        }
        done += k;
    }
    free(buf);
    if (s == VKT_OK) s = rd_expect_end(r);
    return s;
}

static vkt_status npy_load(rd *rx, rd *ry, const char *x_path, const char *y_path,
                           vkt_dataset *ds) {
    npy_type tx, ty;
    uint64_t n, inner, ny, per;
    VKT_TRY(npy_open(rx, x_path, true, &tx, &n, &inner));
    VKT_TRY(npy_open(ry, y_path, false, &ty, &ny, &per));
    if (ny != n)
        return vkt_fail(VKT_ERR_FORMAT,
                        "%s holds %llu samples but %s holds %llu %s: they are not a pair", x_path,
                        (unsigned long long)n, y_path, (unsigned long long)ny,
                        per == 1 ? "labels" : "rows of labels");
    ds->n = (uint32_t)n;
    ds->features = (uint32_t)inner;
    ds->targets = (uint32_t)per;
    VKT_TRY(npy_read_data(rx, tx, n * inner, inner, &ds->x, NULL));
    return npy_read_data(ry, ty, n * per, per, NULL, &ds->y);
}

vkt_status vkt_dataset_load_npy(const char *x_path, const char *y_path, vkt_dataset *out) {
    memset(out, 0, sizeof *out);
    rd rx = {0}, ry = {0};
    vkt_status s = npy_load(&rx, &ry, x_path, y_path, out);
    if (s == VKT_OK) set_classes(out);
    rd_close(&rx);
    rd_close(&ry);
    if (s != VKT_OK) {
        vkt_dataset_free(out);
        return s;
    }
    snprintf(out->source, sizeof out->source, "%s", x_path);
    return VKT_OK;
}

// ---------------------------------------------------------------------------------------------
// Text

typedef struct bytebuf {
    uint8_t *p;
    uint64_t n, cap;
} bytebuf;

// Appends the whole (decompressed) content of one file.
static vkt_status text_read_file(const char *path, bytebuf *b) {
    rd r;
    VKT_TRY(rd_open(&r, path));
    vkt_status s = VKT_OK;
    for (;;) {
        if (b->cap - b->n < (1u << 16)) {
            uint64_t cap = b->cap ? 2 * b->cap : 1u << 20;
            uint8_t *p = cap <= SIZE_MAX ? realloc(b->p, (size_t)cap) : NULL;
            if (!p) {
                s = vkt_fail(VKT_ERR_HOST_MEMORY, "out of host memory: %llu bytes of text at %s",
                             (unsigned long long)cap, path);
                break;
            }
            b->p = p;
            b->cap = cap;
        }
        uint64_t got = 0;
        s = rd_read(&r, b->p + b->n, b->cap - b->n, &got);
        if (s != VKT_OK || got == 0) break;
        b->n += got;
    }
    rd_close(&r);
    return s;
}

static int cmp_names(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static bool ends_with(const char *s, const char *tail) {
    size_t n = strlen(s), k = strlen(tail);
    return n >= k && strcmp(s + n - k, tail) == 0;
}

// Appends the regular files of a directory in sorted name order (symbolic links, subdirectories
// and fortune's .dat index files skipped); *files counts them.
static vkt_status text_read_dir(const char *dir, bytebuf *b, uint32_t *files) {
    DIR *d = opendir(dir);
    if (!d) return vkt_fail(VKT_ERR_IO, "cannot open directory %s: %s", dir, strerror(errno));
    char **names = NULL;
    size_t n = 0, cap = 0;
    vkt_status s = VKT_OK;
    char path[4096];
    for (struct dirent *e; s == VKT_OK && (e = readdir(d));) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..") || ends_with(e->d_name, ".dat"))
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        struct stat st;
        if (lstat(path, &st) != 0 || !S_ISREG(st.st_mode)) continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 64;
            char **p = realloc(names, cap * sizeof *names);
            if (!p) {
                s = vkt_fail(VKT_ERR_HOST_MEMORY, "out of host memory listing %s", dir);
                break;
            }
            names = p;
        }
        names[n] = strdup(e->d_name);
        if (!names[n])
            s = vkt_fail(VKT_ERR_HOST_MEMORY, "out of host memory listing %s", dir);
        else
            n++;
    }
    closedir(d);
    if (s == VKT_OK && n == 0)
        s = vkt_fail(VKT_ERR_ARG,
                     "directory %s holds no regular file to read (symbolic links, subdirectories "
                     "and .dat index files are skipped): name the text files or another directory",
                     dir);
    if (s == VKT_OK) qsort(names, n, sizeof *names, cmp_names);
    for (size_t i = 0; i < n && s == VKT_OK; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        s = text_read_file(path, b);
        (*files)++;
    }
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
    return s;
}

void vkt_text_free(vkt_text *t) {
    if (!t) return;
    free(t->bytes);
    memset(t, 0, sizeof *t);
}

static void text_split(vkt_text *t) { t->train_n = t->n - t->n / 10; }

vkt_status vkt_text_load(const char *const *paths, int npaths, vkt_text *out) {
    memset(out, 0, sizeof *out);
    if (!paths || npaths < 1)
        return vkt_fail(VKT_ERR_ARG, "no text to read: name at least one file or directory");
    bytebuf b = {0};
    vkt_status s = VKT_OK;
    for (int i = 0; i < npaths && s == VKT_OK; i++) {
        struct stat st;
        if (stat(paths[i], &st) != 0) {
            s = vkt_fail(VKT_ERR_IO, "cannot open %s: %s (check the path and its permissions)",
                         paths[i], strerror(errno));
        } else if (S_ISDIR(st.st_mode)) {
            s = text_read_dir(paths[i], &b, &out->files);
        } else {
            s = text_read_file(paths[i], &b);
            out->files++;
        }
    }
    if (npaths > 1)
        snprintf(out->source, sizeof out->source, "%s + %d more", paths[0], npaths - 1);
    else
        snprintf(out->source, sizeof out->source, "%s", paths[0]);
    if (s == VKT_OK && b.n == 0)
        s = vkt_fail(VKT_ERR_FORMAT,
                     "the text of %s is empty (%u file%s, 0 bytes): nothing to train on",
                     out->source, out->files, out->files == 1 ? "" : "s");
    if (s != VKT_OK) {
        free(b.p);
        vkt_text_free(out);
        return s;
    }
    out->bytes = b.p;
    out->n = b.n;
    text_split(out);
    return VKT_OK;
}

vkt_status vkt_text_from_bytes(const void *bytes, uint64_t n, const char *source, vkt_text *out) {
    memset(out, 0, sizeof *out);
    snprintf(out->source, sizeof out->source, "%s", source ? source : "text in memory");
    if (!bytes || n == 0)
        return vkt_fail(VKT_ERR_FORMAT, "the text of %s is empty: nothing to train on",
                        out->source);
    vkt_status s = VKT_OK;
    out->bytes = n <= SIZE_MAX ? xmalloc((size_t)n, "the text", out->source, &s) : NULL;
    if (!out->bytes) {
        if (s == VKT_OK) s = vkt_fail(VKT_ERR_HOST_MEMORY, "%s: too many bytes", out->source);
        vkt_text_free(out);
        return s;
    }
    memcpy(out->bytes, bytes, (size_t)n);
    out->n = n;
    out->files = 0;
    text_split(out);
    return VKT_OK;
}

vkt_status vkt_text_check(const vkt_text *t, uint32_t T) {
    if (T == 0)
        return vkt_fail(VKT_ERR_FORMAT, "a window of text needs an input of at least 1 byte");
    uint64_t need = (uint64_t)T + 1, val = t->n - t->train_n;
    if (t->train_n < need || val < need)
        return vkt_fail(VKT_ERR_FORMAT,
                        "%s is too short: its %llu bytes split into %llu for training and %llu "
                        "for validation (the last tenth), and a window of a model with input [%u] "
                        "takes %llu bytes (%u inputs and the next byte) from each: give at least "
                        "%llu bytes of text, or a model with a shorter input",
                        t->source, (unsigned long long)t->n, (unsigned long long)t->train_n,
                        (unsigned long long)val, T, (unsigned long long)need, T,
                        (unsigned long long)(10 * need));
    return VKT_OK;
}

vkt_status vkt_text_validation(const vkt_text *t, uint32_t T, uint32_t limit, vkt_dataset *out) {
    memset(out, 0, sizeof *out);
    VKT_TRY(vkt_text_check(t, T));
    uint64_t val = t->n - t->train_n, count = (val - 1) / T;
    if (count > UINT32_MAX) count = UINT32_MAX;
    if (limit && limit < count) count = limit;
    vkt_status s = VKT_OK;
    size_t cells = (size_t)count * T;
    if (cells / T != count || cells > SIZE_MAX / sizeof(float))
        return vkt_fail(VKT_ERR_HOST_MEMORY, "%s: %llu validation windows of %u bytes are too many",
                        t->source, (unsigned long long)count, T);
    out->x = xmalloc(cells * sizeof(float), "the validation windows", t->source, &s);
    if (s == VKT_OK)
        out->y = xmalloc(cells * sizeof(uint32_t), "the validation targets", t->source, &s);
    if (s != VKT_OK) {
        vkt_dataset_free(out);
        return s;
    }
    const uint8_t *v = t->bytes + t->train_n;
    for (uint64_t k = 0; k < count; k++)
        for (uint32_t i = 0; i < T; i++) {
            out->x[k * T + i] = (float)v[k * T + i];
            out->y[k * T + i] = v[k * T + i + 1];
        }
    out->n = (uint32_t)count;
    out->features = T;
    out->targets = T;
    out->classes = 256;
    snprintf(out->source, sizeof out->source, "%s (validation part)", t->source);
    return VKT_OK;
}

// ---------------------------------------------------------------------------------------------
// Batches

static uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t splitmix64(uint64_t *state) { return mix64(*state += 0x9e3779b97f4a7c15ull); }

// Uniform in [0, bound) without modulo bias: reject the top sliver of the 64-bit range.
static uint64_t below(uint64_t *state, uint64_t bound) {
    uint64_t limit = UINT64_MAX - UINT64_MAX % bound;
    uint64_t r;
    do
        r = splitmix64(state);
    while (r >= limit);
    return r % bound;
}

vkt_status vkt_batcher_init(vkt_batcher *b, const vkt_dataset *ds, uint32_t batch, bool shuffle,
                            uint64_t seed) {
    memset(b, 0, sizeof *b);
    if (batch == 0) return vkt_fail(VKT_ERR_ARG, "batch size must be at least 1");
    if (!ds || ds->n == 0) return vkt_fail(VKT_ERR_ARG, "the data set is empty: nothing to batch");
    b->order = malloc((size_t)ds->n * sizeof(uint32_t));
    if (!b->order)
        return vkt_fail(VKT_ERR_HOST_MEMORY, "out of host memory for the order of %u samples",
                        ds->n);
    b->ds = ds;
    b->batch = batch;
    b->shuffle = shuffle;
    b->seed = seed;
    for (uint32_t i = 0; i < ds->n; i++)
        b->order[i] = i;
    vkt_batcher_epoch(b, 0);
    return VKT_OK;
}

vkt_status vkt_batcher_init_text(vkt_batcher *b, const vkt_text *t, uint32_t T, uint32_t batch,
                                 bool shuffle, uint64_t seed, uint32_t limit) {
    memset(b, 0, sizeof *b);
    if (batch == 0) return vkt_fail(VKT_ERR_ARG, "batch size must be at least 1");
    VKT_TRY(vkt_text_check(t, T));
    uint64_t w = (t->train_n - 1) / T;
    if (w > UINT32_MAX) w = UINT32_MAX;
    if (limit && limit < w) w = limit;
    b->text = t;
    b->T = T;
    b->windows = (uint32_t)w;
    b->batch = batch;
    b->shuffle = shuffle;
    b->seed = seed;
    return VKT_OK;
}

uint64_t vkt_batcher_window(const vkt_batcher *b, uint32_t j) {
    if (!b->shuffle) return (uint64_t)j * b->T;
    uint64_t state = mix64(b->seed ^ mix64(b->epoch + 0x6a09e667f3bcc909ull) ^
                           mix64((uint64_t)j + 0xbb67ae8584caa73bull));
    return below(&state, b->text->train_n - b->T);
}

uint32_t vkt_batcher_samples(const vkt_batcher *b) { return b->text ? b->windows : b->ds->n; }

void vkt_batcher_epoch(vkt_batcher *b, uint64_t epoch) {
    b->epoch = epoch;
    if (!b->shuffle || b->text) return;
    uint32_t n = b->ds->n;
    // Start from the identity every epoch: the order depends on (seed, epoch) alone.
    for (uint32_t i = 0; i < n; i++)
        b->order[i] = i;
    uint64_t state = mix64(b->seed ^ mix64(epoch + 0x632be59bd9b4e019ull));
    for (uint32_t i = n - 1; i > 0; i--) {
        uint32_t j = (uint32_t)below(&state, (uint64_t)i + 1);
        uint32_t t = b->order[i];
        b->order[i] = b->order[j];
        b->order[j] = t;
    }
}

uint32_t vkt_batcher_count(const vkt_batcher *b) {
    return (uint32_t)(((uint64_t)vkt_batcher_samples(b) + b->batch - 1) / b->batch);
}

// Batch i of a text batcher: window j = i batch + r in row r.
static uint32_t text_get(const vkt_batcher *b, uint32_t i, float *x, uint32_t *y) {
    uint64_t start = (uint64_t)i * b->batch;
    if (start >= b->windows) return 0;
    uint32_t rows =
        b->windows - (uint32_t)start < b->batch ? b->windows - (uint32_t)start : b->batch;
    size_t T = b->T;
    for (uint32_t r = 0; r < rows; r++) {
        const uint8_t *w = b->text->bytes + vkt_batcher_window(b, (uint32_t)start + r);
        for (size_t k = 0; k < T; k++) {
            if (x) x[r * T + k] = (float)w[k];
            if (y) y[r * T + k] = w[k + 1];
        }
    }
    return rows;
}

uint32_t vkt_batcher_get(const vkt_batcher *b, uint32_t i, float *x, uint32_t *y) {
    if (b->text) return text_get(b, i, x, y);
    uint64_t start = (uint64_t)i * b->batch;
    if (start >= b->ds->n) return 0;
    uint32_t rows = b->ds->n - (uint32_t)start < b->batch ? b->ds->n - (uint32_t)start : b->batch;
    size_t f = b->ds->features, tps = vkt_dataset_targets(b->ds);
    bool aug = b->aug.crop || b->aug.flip;
    for (uint32_t r = 0; r < rows; r++) {
        uint32_t k = b->order[start + r];
        const float *src = b->ds->x + (size_t)k * f;
        if (x && aug)
            vkt_augment_sample(b, k, src, x + (size_t)r * f);
        else if (x)
            memcpy(x + (size_t)r * f, src, f * sizeof(float));
        if (y) memcpy(y + r * tps, b->ds->y + (size_t)k * tps, tps * sizeof(uint32_t));
    }
    return rows;
}

// ---------------------------------------------------------------------------------------------
// Augmentation

vkt_status vkt_batcher_augment(vkt_batcher *b, const vkt_augment *a, const vkt_shape *shape) {
    if (!a->crop && !a->flip) {
        b->aug = (vkt_augment){0};
        return VKT_OK;
    }
    char sh[96];
    vkt_shape_format(shape, sh, sizeof sh);
    if (b->text)
        return vkt_fail(VKT_ERR_ARG, "--augment crops and flips images; it does not apply to text "
                                     "windows (drop --augment)");
    if (shape->ndim != 3)
        return vkt_fail(VKT_ERR_ARG,
                        "--augment crops and flips images: it needs samples shaped [C, H, W] "
                        "(the model's \"input\"), not %s",
                        sh);
    if (vkt_shape_elements(shape) != b->ds->features)
        return vkt_fail(VKT_ERR_ARG, "--augment: samples shaped %s hold %llu floats, the data %u",
                        sh, (unsigned long long)vkt_shape_elements(shape), b->ds->features);
    if (a->crop && (a->pad < 1 || a->pad > 65535))
        return vkt_fail(VKT_ERR_ARG,
                        "--augment-pad %u: a crop pads each side with 1 to 65535 zeros "
                        "(0 would leave every sample as it is; torchvision's usual is 4)",
                        a->pad);
    b->aug = *a;
    b->c = shape->dim[0];
    b->h = shape->dim[1];
    b->w = shape->dim[2];
    return VKT_OK;
}

void vkt_augment_sample(const vkt_batcher *b, uint32_t k, const float *src, float *dst) {
    if (!b->aug.crop && !b->aug.flip) {
        memcpy(dst, src, (size_t)b->ds->features * sizeof(float));
        return;
    }
    uint64_t state = mix64(b->seed ^ mix64(b->epoch + 0x4cf5ad432745937full) ^
                           mix64((uint64_t)k + 0x2545f4914f6cdd1dull));
    // The window's corner in the padded sample, as an offset into the sample itself.
    int64_t top = 0, left = 0;
    if (b->aug.crop) {
        uint64_t span = 2 * (uint64_t)b->aug.pad + 1;
        top = (int64_t)below(&state, span) - b->aug.pad;
        left = (int64_t)below(&state, span) - b->aug.pad;
    }
    bool flip = b->aug.flip && (splitmix64(&state) >> 63);
    int64_t H = b->h, W = b->w;
    for (uint32_t c = 0; c < b->c; c++) {
        const float *plane = src + (size_t)c * H * W;
        float *out = dst + (size_t)c * H * W;
        for (int64_t y = 0; y < H; y++) {
            int64_t sy = y + top;
            float *row = out + y * W;
            if (sy < 0 || sy >= H) {
                memset(row, 0, (size_t)W * sizeof(float));
                continue;
            }
            const float *in = plane + sy * W;
            for (int64_t x = 0; x < W; x++) {
                int64_t sx = (flip ? W - 1 - x : x) + left; // the flip mirrors the window
                row[x] = sx >= 0 && sx < W ? in[sx] : 0.0f;
            }
        }
    }
}

void vkt_batcher_free(vkt_batcher *b) {
    if (!b) return;
    free(b->order);
    memset(b, 0, sizeof *b);
}
