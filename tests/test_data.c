// test_data.c: the data readers and the batcher (engine/run/data.c), on the host only (no device).
// Writes its own small IDX files (plain and gzip) and .npy files into a temporary directory and
// reads them back exactly; checks that truncated, mislabelled and mismatched files are rejected
// with messages that say what and where; checks the batcher's partial last batch, its
// determinism per (seed, epoch) against an independent implementation of the documented shuffle,
// and that every epoch visits every sample once; checks that a set made from arrays in memory is a
// copy and that bad labels, non-finite features and empty shapes are refused; checks the random
// crop and flip of training images (each row a window of its sample, zeros outside, mirrored or
// not, the one the documented draws pick; the same for the same seed, epoch and sample whatever
// the batch size or order; another for another epoch or seed; none when not asked; bad shapes
// refused). Checks token ids and per-position labels from .npy (int32 and int64, exact, bad ids
// and labels refused by row and position); text corpora (a directory read in sorted order without
// .dat files, symbolic links or subdirectories; the last tenth held out; training windows whose
// targets are the inputs shifted by one, drawn as data.h documents (written again here), inside
// the training part, the same for the same seed whatever the batch size, in order without
// shuffling; the fixed validation windows; empty, short and missing text refused); and the run's
// refusals of data that does not fit the model (labels per sample against the model's targets
// per sample, labels not below the classes, text for a model that is not input [T] / output
// [T, 256]), which vkt_train_run gives before it opens any device. When Fashion-MNIST and
// fortunes are installed (always under CI=true) checks the real data sets.
#include <dirent.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "data.h"
#include "test_util.h"
#include "train.h"

static char g_dir[256];

static const char *tpath(const char *name) {
    static char buf[8][512];
    static int k;
    char *p = buf[k++ % 8];
    snprintf(p, 512, "%s/%s", g_dir, name);
    return p;
}

static void write_file(const char *path, const void *data, size_t n, bool gz) {
    if (gz) {
        gzFile f = gzopen(path, "wb");
        if (!f || gzwrite(f, data, (unsigned)n) != (int)n || gzclose(f) != Z_OK) {
            fprintf(stderr, "cannot write %s\n", path);
            exit(1);
        }
        return;
    }
    vt_write_file(path, data, n);
}

static bool has(const char *msg, const char *needle) { return strstr(msg, needle) != NULL; }

// A failing call must give status s and a message containing every needle.
#define EXPECT_FAIL(t, call, s, ...)                                                               \
    do {                                                                                           \
        vkt_status st_ = (call);                                                                   \
        const char *needles_[] = {__VA_ARGS__, NULL};                                              \
        VT_CHECK(t, st_ == (s), "%s gave %s (%s), expected %s", #call, vkt_status_name(st_),       \
                 vkt_error(), vkt_status_name(s));                                                 \
        for (int i_ = 0; needles_[i_]; i_++)                                                       \
            VT_CHECK(t, has(vkt_error(), needles_[i_]), "message \"%s\" lacks \"%s\"",             \
                     vkt_error(), needles_[i_]);                                                   \
    } while (0)

// ---------------------------------------------------------------------------------------------
// IDX

enum { NI = 7, ROWS = 3, COLS = 4, PIX = ROWS * COLS };

static void put_be32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

// An image file of n images (header says n_hdr) and a label file of nl labels.
static size_t make_images(uint8_t *buf, uint32_t magic, uint32_t n_hdr, uint32_t n) {
    put_be32(buf, magic);
    put_be32(buf + 4, n_hdr);
    put_be32(buf + 8, ROWS);
    put_be32(buf + 12, COLS);
    for (uint32_t i = 0; i < n * PIX; i++)
        buf[16 + i] = (uint8_t)((i * 37 + 11) % 256);
    buf[16] = 0;
    buf[17] = 255;
    return 16 + (size_t)n * PIX;
}

static size_t make_labels(uint8_t *buf, uint32_t n) {
    put_be32(buf, 0x00000801);
    put_be32(buf + 4, n);
    for (uint32_t i = 0; i < n; i++)
        buf[8 + i] = (uint8_t)(i % 5);
    return 8 + n;
}

static void check_idx_contents(vt *t, const vkt_dataset *ds, const char *what) {
    VT_CHECK(t, ds->n == NI && ds->features == PIX && ds->classes == 5,
             "%s: n %u features %u classes %u", what, ds->n, ds->features, ds->classes);
    if (ds->n != NI || ds->features != PIX) return;
    uint8_t img[16 + NI * PIX];
    make_images(img, 0x803, NI, NI);
    int bad = 0;
    for (int i = 0; i < NI * PIX; i++)
        bad += ds->x[i] != (float)img[16 + i] / 255.0f;
    for (int i = 0; i < NI; i++)
        bad += ds->y[i] != (uint32_t)(i % 5);
    VT_CHECK(t, bad == 0, "%s: %d values differ", what, bad);
    VT_CHECK(t, ds->x[0] == 0.0f && ds->x[1] == 1.0f, "%s: scaling to [0,1]", what);
}

static void test_idx(vt *t) {
    uint8_t img[64 + NI * PIX] = {0}, lab[64] = {0}; // zeroed: img_long writes past the images
    size_t ni = make_images(img, 0x803, NI, NI), nl = make_labels(lab, NI);
    write_file(tpath("img"), img, ni, false);
    write_file(tpath("lab"), lab, nl, false);
    write_file(tpath("img.gz"), img, ni, true);
    write_file(tpath("lab.gz"), lab, nl, true);

    vkt_dataset ds;
    VT_OK(t, vkt_dataset_load_idx(tpath("img"), tpath("lab"), &ds));
    check_idx_contents(t, &ds, "plain IDX");
    vkt_dataset_free(&ds);
    VT_OK(t, vkt_dataset_load_idx(tpath("img.gz"), tpath("lab.gz"), &ds));
    check_idx_contents(t, &ds, "gzip IDX");
    vkt_dataset_limit(&ds, 3);
    VT_CHECK(t, ds.n == 3 && ds.classes == 5, "limit: n %u classes %u", ds.n, ds.classes);
    vkt_dataset_limit(&ds, 100);
    VT_CHECK(t, ds.n == 3, "a larger limit keeps n");
    vkt_dataset_free(&ds);
    VT_CHECK(t, ds.x == NULL && ds.n == 0, "free zeroes");
    vkt_dataset_free(&ds); // twice is fine

    // The MNIST directory layout, .gz for the images and plain for the labels.
    char sub[300];
    snprintf(sub, sizeof sub, "%s/mnist", g_dir);
    mkdir(sub, 0700);
    write_file(tpath("mnist/train-images-idx3-ubyte.gz"), img, ni, true);
    write_file(tpath("mnist/train-labels-idx1-ubyte"), lab, nl, false);
    VT_OK(t, vkt_dataset_load_mnist_dir(sub, true, &ds));
    check_idx_contents(t, &ds, "MNIST dir");
    VT_CHECK(t, has(ds.source, "train-images-idx3-ubyte.gz"), "source %s", ds.source);
    vkt_dataset_free(&ds);
    EXPECT_FAIL(t, vkt_dataset_load_mnist_dir(sub, false, &ds), VKT_ERR_IO,
                "t10k-images-idx3-ubyte", sub);
    EXPECT_FAIL(t, vkt_dataset_load_idx(tpath("nothing"), tpath("lab"), &ds), VKT_ERR_IO,
                "nothing");

    // Truncated image data: the header says 7 images, 5 follow.
    size_t cut = make_images(img, 0x803, NI, 5);
    write_file(tpath("img_trunc"), img, cut, false);
    EXPECT_FAIL(t, vkt_dataset_load_idx(tpath("img_trunc"), tpath("lab"), &ds), VKT_ERR_FORMAT,
                "img_trunc", "truncated", "expected 84 bytes", "found 60", "from byte 16");
    VT_CHECK(t, ds.x == NULL && ds.n == 0, "a failed load leaves the data set empty");
    // Truncated inside the header.
    write_file(tpath("img_short"), img, 10, false);
    EXPECT_FAIL(t, vkt_dataset_load_idx(tpath("img_short"), tpath("lab"), &ds), VKT_ERR_FORMAT,
                "img_short", "truncated", "expected 12 bytes", "found 6");
    // A gzip stream cut in half.
    make_images(img, 0x803, NI, NI);
    {
        FILE *f = fopen(tpath("img.gz"), "rb");
        uint8_t z[1024];
        size_t zl = f ? fread(z, 1, sizeof z, f) : 0;
        if (f) fclose(f);
        write_file(tpath("img_cut.gz"), z, zl / 2, false);
        vkt_status s = vkt_dataset_load_idx(tpath("img_cut.gz"), tpath("lab"), &ds);
        VT_CHECK(t,
                 s == VKT_ERR_FORMAT && has(vkt_error(), "img_cut.gz") &&
                     (has(vkt_error(), "truncated") || has(vkt_error(), "corrupt gzip")),
                 "cut gzip: %s %s", vkt_status_name(s), vkt_error());
    }
    // Trailing bytes.
    write_file(tpath("img_long"), img, ni + 5, false);
    EXPECT_FAIL(t, vkt_dataset_load_idx(tpath("img_long"), tpath("lab"), &ds), VKT_ERR_FORMAT,
                "img_long", "5 unexpected bytes");
    // Wrong magic: images and labels swapped; another element type; not IDX at all.
    EXPECT_FAIL(t, vkt_dataset_load_idx(tpath("lab"), tpath("img"), &ds), VKT_ERR_FORMAT,
                "magic number 0x00000801", "expected 0x00000803", "swapped");
    make_images(img, 0x00000d03, NI, NI); // float32 IDX
    write_file(tpath("img_f32"), img, ni, false);
    EXPECT_FAIL(t, vkt_dataset_load_idx(tpath("img_f32"), tpath("lab"), &ds), VKT_ERR_FORMAT,
                "0x00000d03", "unsigned bytes");
    write_file(tpath("img_text"), "hello world, no IDX here", 24, false);
    EXPECT_FAIL(t, vkt_dataset_load_idx(tpath("img_text"), tpath("lab"), &ds), VKT_ERR_FORMAT,
                "not an IDX file");
    // Count mismatch.
    make_images(img, 0x803, NI, NI);
    nl = make_labels(lab, NI - 1);
    write_file(tpath("lab6"), lab, nl, false);
    EXPECT_FAIL(t, vkt_dataset_load_idx(tpath("img"), tpath("lab6"), &ds), VKT_ERR_FORMAT,
                "7 images", "6 labels");
    // Zero images.
    make_images(img, 0x803, 0, 0);
    write_file(tpath("img0"), img, 16, false);
    EXPECT_FAIL(t, vkt_dataset_load_idx(tpath("img0"), tpath("lab"), &ds), VKT_ERR_FORMAT,
                "hold no image");
    // A header promising 2^61 bytes of pixels (2^31 images of 2^15 x 2^15) in a 16-byte file,
    // plain and gzip: truncated after reading what is there, never an allocation of what the
    // header says (found by tests/fuzz/fuzz_idx: out of memory on a 40-byte input).
    uint8_t huge[16];
    put_be32(huge, 0x803);
    put_be32(huge + 4, 1u << 31);
    put_be32(huge + 8, 1u << 15);
    put_be32(huge + 12, 1u << 15);
    uint8_t lab_huge[8];
    put_be32(lab_huge, 0x801);
    put_be32(lab_huge + 4, 1u << 31);
    for (int gz = 0; gz < 2; gz++) {
        write_file(tpath("img_huge"), huge, sizeof huge, gz);
        write_file(tpath("lab_huge"), lab_huge, sizeof lab_huge, gz);
        EXPECT_FAIL(t, vkt_dataset_load_idx(tpath("img_huge"), tpath("lab_huge"), &ds),
                    VKT_ERR_FORMAT, "img_huge is truncated",
                    "expected 2305843009213693952 bytes of image pixels", "found 0");
    }
}

// ---------------------------------------------------------------------------------------------
// .npy

// Writes a .npy file with the given header dict text (padded as numpy does) and payload.
static void write_npy_raw(const char *path, int major, const char *dict, const void *data,
                          size_t n) {
    uint8_t buf[4096];
    size_t pre = major == 1 ? 10 : 12;
    size_t hl = strlen(dict) + 1; // + '\n'
    while ((pre + hl) % 64)
        hl++;
    memcpy(buf, "\x93NUMPY", 6);
    buf[6] = (uint8_t)major;
    buf[7] = 0;
    if (major == 1) {
        buf[8] = (uint8_t)hl;
        buf[9] = (uint8_t)(hl >> 8);
    } else {
        for (int i = 0; i < 4; i++)
            buf[8 + i] = (uint8_t)(hl >> (8 * i));
    }
    memset(buf + pre, ' ', hl);
    memcpy(buf + pre, dict, strlen(dict));
    buf[pre + hl - 1] = '\n';
    if (data) memcpy(buf + pre + hl, data, n);
    write_file(path, buf, pre + hl + n, false);
}

static void write_npy(const char *path, int major, const char *descr, const char *shape,
                      const void *data, size_t n) {
    char dict[256];
    snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': %s, }", descr,
             shape);
    write_npy_raw(path, major, dict, data, n);
}

static void test_npy(vt *t) {
    enum { N = 6, F = 5 };
    float xf[N * F];
    double xd[N * F];
    uint8_t xu[N * F];
    for (int i = 0; i < N * F; i++) {
        xf[i] = (float)(i - 7) * 0.375f + 1e-3f * (float)i;
        xd[i] = xf[i];
        xu[i] = (uint8_t)(i * 9);
    }
    int64_t y8[N] = {0, 3, 1, 3, 2, 0};
    int32_t y4[N];
    uint32_t yu4[N];
    uint8_t y1[N];
    for (int i = 0; i < N; i++)
        y4[i] = (int32_t)y8[i], yu4[i] = (uint32_t)y8[i], y1[i] = (uint8_t)y8[i];

    write_npy(tpath("xf.npy"), 1, "<f4", "(6, 5)", xf, sizeof xf);
    write_npy(tpath("xf3.npy"), 1, "<f4", "(6, 1, 5)", xf, sizeof xf);
    write_npy(tpath("xd.npy"), 2, "<f8", "(6, 5)", xd, sizeof xd);
    write_npy(tpath("xu.npy"), 3, "|u1", "(6, 5)", xu, sizeof xu);
    write_npy(tpath("y8.npy"), 1, "<i8", "(6,)", y8, sizeof y8);
    write_npy(tpath("y4.npy"), 2, "<i4", "(6, 1)", y4, sizeof y4);
    write_npy(tpath("yu4.npy"), 3, "<u4", "(6,)", yu4, sizeof yu4);
    write_npy(tpath("y1.npy"), 1, "|u1", "(6,)", y1, sizeof y1);

    struct {
        const char *x, *y;
        int kind; // 0 f4, 1 f8, 2 u1
    } cases[] = {{"xf.npy", "y8.npy", 0},
                 {"xf3.npy", "y4.npy", 0},
                 {"xd.npy", "yu4.npy", 1},
                 {"xu.npy", "y1.npy", 2}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        vkt_dataset ds;
        vkt_status s = vkt_dataset_load_npy(tpath(cases[c].x), tpath(cases[c].y), &ds);
        VT_CHECK(t, s == VKT_OK, "%s + %s: %s", cases[c].x, cases[c].y, vkt_error());
        if (s != VKT_OK) continue;
        VT_CHECK(t, ds.n == N && ds.features == F && ds.classes == 4, "%s: n %u f %u classes %u",
                 cases[c].x, ds.n, ds.features, ds.classes);
        int bad = 0;
        for (int i = 0; i < N * F && ds.n == N && ds.features == F; i++) {
            float want = cases[c].kind == 2 ? (float)xu[i] / 255.0f : xf[i];
            bad += ds.x[i] != want;
        }
        for (int i = 0; i < N && ds.n == N; i++)
            bad += ds.y[i] != (uint32_t)y8[i];
        VT_CHECK(t, bad == 0, "%s + %s: %d values differ", cases[c].x, cases[c].y, bad);
        vkt_dataset_free(&ds);
    }

    vkt_dataset ds;
    // Malformed and unsupported files, each with what it should say.
    static const char zip[] = "PK\x03\x04 a zip file, not npy";
    write_file(tpath("notnpy.npy"), zip, sizeof zip - 1, false);
    EXPECT_FAIL(t, vkt_dataset_load_npy(tpath("notnpy.npy"), tpath("y8.npy"), &ds), VKT_ERR_FORMAT,
                "notnpy.npy", "not a .npy file");
    write_npy_raw(tpath("fortran.npy"), 1,
                  "{'descr': '<f4', 'fortran_order': True, 'shape': (6, 5), }", xf, sizeof xf);
    EXPECT_FAIL(t, vkt_dataset_load_npy(tpath("fortran.npy"), tpath("y8.npy"), &ds), VKT_ERR_FORMAT,
                "fortran.npy", "Fortran order", "C order");
    write_npy(tpath("be.npy"), 1, ">f4", "(6, 5)", xf, sizeof xf);
    EXPECT_FAIL(t, vkt_dataset_load_npy(tpath("be.npy"), tpath("y8.npy"), &ds), VKT_ERR_FORMAT,
                "'>f4'", "big-endian");
    write_npy(tpath("f2.npy"), 1, "<f2", "(6, 5)", xf, N * F * 2);
    EXPECT_FAIL(t, vkt_dataset_load_npy(tpath("f2.npy"), tpath("y8.npy"), &ds), VKT_ERR_FORMAT,
                "'<f2'", "not supported for features");
    EXPECT_FAIL(t, vkt_dataset_load_npy(tpath("xf.npy"), tpath("xf.npy"), &ds), VKT_ERR_FORMAT,
                "'<f4'", "not supported for labels");
    write_npy_raw(tpath("noshape.npy"), 1, "{'descr': '<f4', 'fortran_order': False, }", xf,
                  sizeof xf);
    EXPECT_FAIL(t, vkt_dataset_load_npy(tpath("noshape.npy"), tpath("y8.npy"), &ds), VKT_ERR_FORMAT,
                "noshape.npy", "no 'shape'");
    // The colon after 'descr' is missing: the message points at byte 10 + 9 of the file.
    write_npy_raw(tpath("syntax.npy"), 1,
                  "{'descr' '<f4', 'fortran_order': False, 'shape': (6, 5), }", xf, sizeof xf);
    EXPECT_FAIL(t, vkt_dataset_load_npy(tpath("syntax.npy"), tpath("y8.npy"), &ds), VKT_ERR_FORMAT,
                "syntax.npy", "at byte 19", "expected ':'");
    write_npy(tpath("trunc.npy"), 1, "<f4", "(6, 5)", xf, sizeof xf - 8);
    EXPECT_FAIL(t, vkt_dataset_load_npy(tpath("trunc.npy"), tpath("y8.npy"), &ds), VKT_ERR_FORMAT,
                "trunc.npy", "truncated", "120 bytes", "found 112");
    write_npy(tpath("long.npy"), 1, "<f4", "(5, 5)", xf, sizeof xf);
    write_npy(tpath("y5.npy"), 1, "<i8", "(5,)", y8, 5 * sizeof y8[0]);
    EXPECT_FAIL(t, vkt_dataset_load_npy(tpath("long.npy"), tpath("y5.npy"), &ds), VKT_ERR_FORMAT,
                "long.npy", "20 unexpected bytes");
    write_npy(tpath("x5.npy"), 1, "<f4", "(5, 5)", xf, 5 * F * 4);
    EXPECT_FAIL(t, vkt_dataset_load_npy(tpath("x5.npy"), tpath("y8.npy"), &ds), VKT_ERR_FORMAT,
                "5 samples", "6 labels");
    int64_t yneg[N] = {0, 1, -1, 2, 0, 1};
    write_npy(tpath("yneg.npy"), 1, "<i8", "(6,)", yneg, sizeof yneg);
    EXPECT_FAIL(t, vkt_dataset_load_npy(tpath("xf.npy"), tpath("yneg.npy"), &ds), VKT_ERR_FORMAT,
                "yneg.npy", "label -1 of sample 2", "negative");
    write_npy(tpath("y2d.npy"), 1, "<i8", "(3, 2)", y8, sizeof y8);
    EXPECT_FAIL(t, vkt_dataset_load_npy(tpath("xf.npy"), tpath("y2d.npy"), &ds), VKT_ERR_FORMAT,
                "xf.npy holds 6 samples", "y2d.npy holds 3 rows of labels");
    float xnan[N * F];
    memcpy(xnan, xf, sizeof xf);
    xnan[2 * F + 3] = NAN;
    write_npy(tpath("xnan.npy"), 1, "<f4", "(6, 5)", xnan, sizeof xnan);
    EXPECT_FAIL(t, vkt_dataset_load_npy(tpath("xnan.npy"), tpath("y8.npy"), &ds), VKT_ERR_FORMAT,
                "sample 2, feature 3 is NaN");
    write_npy(tpath("v4.npy"), 4, "<f4", "(6, 5)", xf, sizeof xf);
    EXPECT_FAIL(t, vkt_dataset_load_npy(tpath("v4.npy"), tpath("y8.npy"), &ds), VKT_ERR_FORMAT,
                "version 4.0");
    // A header promising 2^63 bytes (shape (2^32 - 1, 2^29) of '<f4') with no data: truncated
    // after reading what is there, never an allocation of what the header says (found by
    // tests/fuzz/fuzz_npy).
    write_npy(tpath("xhuge.npy"), 1, "<f4", "(4294967295, 536870912)", NULL, 0);
    write_npy(tpath("yhuge.npy"), 1, "<i8", "(4294967295,)", NULL, 0);
    EXPECT_FAIL(t, vkt_dataset_load_npy(tpath("xhuge.npy"), tpath("yhuge.npy"), &ds),
                VKT_ERR_FORMAT, "xhuge.npy is truncated", "promises 9223372034707292160 bytes",
                "found 0");
    VT_CHECK(t, ds.x == NULL && ds.y == NULL, "failed loads leave the data set empty");
}

// ---------------------------------------------------------------------------------------------
// Batches

// The shuffle as data.h documents it, written again independently.
static uint64_t ref_mix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void ref_order(uint32_t *order, uint32_t n, uint64_t seed, uint64_t epoch) {
    for (uint32_t i = 0; i < n; i++)
        order[i] = i;
    uint64_t state = ref_mix(seed ^ ref_mix(epoch + 0x632be59bd9b4e019ull));
    for (uint32_t i = n - 1; i > 0; i--) {
        uint64_t bound = (uint64_t)i + 1, limit = UINT64_MAX - UINT64_MAX % bound, r;
        do
            r = vt_rand_u64(&state); // splitmix64: state += gamma, then the finalizer
        while (r >= limit);
        uint32_t j = (uint32_t)(r % bound), tmp = order[i];
        order[i] = order[j];
        order[j] = tmp;
    }
}

// Reads a whole epoch's labels (= sample indices here) and checks the rows match them.
static void epoch_labels(vt *t, const vkt_batcher *b, uint32_t *seen) {
    uint32_t n = b->ds->n, f = b->ds->features, pos = 0;
    float *x = malloc((size_t)b->batch * f * sizeof(float));
    uint32_t *y = malloc(b->batch * sizeof(uint32_t));
    for (uint32_t i = 0; i < vkt_batcher_count(b); i++) {
        uint32_t rows = vkt_batcher_get(b, i, x, y);
        uint32_t want = i + 1 < vkt_batcher_count(b) ? b->batch : n - i * b->batch;
        VT_CHECK(t, rows == want, "batch %u has %u rows, expected %u", i, rows, want);
        for (uint32_t r = 0; r < rows && pos < n; r++) {
            VT_CHECK(t, x[r * f] == (float)y[r] && x[r * f + 1] == -0.5f * (float)y[r],
                     "row %u of batch %u does not match its label", r, i);
            seen[pos++] = y[r];
        }
    }
    VT_CHECK(t, pos == n, "an epoch gave %u samples of %u", pos, n);
    free(x);
    free(y);
}

static void test_batcher(vt *t) {
    enum { N = 10, F = 2 };
    vkt_dataset ds = {.n = N, .features = F, .classes = N};
    ds.x = malloc(N * F * sizeof(float));
    ds.y = malloc(N * sizeof(uint32_t));
    for (int i = 0; i < N; i++) {
        ds.x[i * F] = (float)i;
        ds.x[i * F + 1] = -0.5f * (float)i;
        ds.y[i] = (uint32_t)i;
    }
    vkt_batcher b, b2;
    uint32_t seen[N], again[N], ref[N];

    // File order, partial last batch: 4 + 4 + 2.
    VT_OK(t, vkt_batcher_init(&b, &ds, 4, false, 7));
    VT_CHECK(t, vkt_batcher_count(&b) == 3, "count %u", vkt_batcher_count(&b));
    epoch_labels(t, &b, seen);
    for (int i = 0; i < N; i++)
        VT_CHECK(t, seen[i] == (uint32_t)i, "no-shuffle position %d", i);
    vkt_batcher_epoch(&b, 5);
    epoch_labels(t, &b, again);
    VT_CHECK(t, memcmp(seen, again, sizeof seen) == 0, "no-shuffle order changes with the epoch");
    VT_CHECK(t, vkt_batcher_get(&b, 3, NULL, NULL) == 0, "batch out of range");
    vkt_batcher_free(&b);

    // Shuffled: the documented order, every sample once, determinism per (seed, epoch).
    VT_OK(t, vkt_batcher_init(&b, &ds, 4, true, 42));
    VT_OK(t, vkt_batcher_init(&b2, &ds, 4, true, 42));
    uint32_t e0[N];
    for (uint64_t e = 0; e < 6; e++) {
        vkt_batcher_epoch(&b, e);
        epoch_labels(t, &b, seen);
        ref_order(ref, N, 42, e);
        VT_CHECK(t, memcmp(seen, ref, sizeof seen) == 0,
                 "epoch %llu differs from the documented "
                 "shuffle",
                 (unsigned long long)e);
        int count[N] = {0};
        for (int i = 0; i < N; i++)
            count[seen[i] < N ? seen[i] : 0]++;
        for (int i = 0; i < N; i++)
            VT_CHECK(t, count[i] == 1, "epoch %llu: sample %d seen %d times", (unsigned long long)e,
                     i, count[i]);
        if (e == 0) memcpy(e0, seen, sizeof seen);
    }
    vkt_batcher_epoch(&b, 1);
    epoch_labels(t, &b, seen);
    VT_CHECK(t, memcmp(seen, e0, sizeof seen) != 0, "epochs 0 and 1 have the same order");
    vkt_batcher_epoch(&b2, 1); // b2 never saw epochs 0..5: the order depends on (seed, epoch) only
    epoch_labels(t, &b2, again);
    VT_CHECK(t, memcmp(seen, again, sizeof seen) == 0, "epoch 1 is not reproducible");
    vkt_batcher_free(&b2);
    VT_OK(t, vkt_batcher_init(&b2, &ds, 4, true, 43));
    vkt_batcher_epoch(&b2, 1);
    epoch_labels(t, &b2, again);
    VT_CHECK(t, memcmp(seen, again, sizeof seen) != 0, "seeds 42 and 43 give the same order");
    vkt_batcher_free(&b2);
    vkt_batcher_free(&b);

    // One batch larger than the data set; a limited data set.
    VT_OK(t, vkt_batcher_init(&b, &ds, 64, true, 1));
    VT_CHECK(t, vkt_batcher_count(&b) == 1 && vkt_batcher_get(&b, 0, NULL, NULL) == N,
             "a batch larger than the set");
    vkt_batcher_free(&b);
    vkt_dataset_limit(&ds, 5);
    VT_OK(t, vkt_batcher_init(&b, &ds, 4, false, 1));
    VT_CHECK(t, vkt_batcher_count(&b) == 2 && vkt_batcher_get(&b, 1, NULL, NULL) == 1,
             "limited to 5: %u batches", vkt_batcher_count(&b));
    vkt_batcher_free(&b);
    VT_CHECK(t, vkt_batcher_init(&b, &ds, 0, false, 1) == VKT_ERR_ARG, "batch 0 is refused");
    vkt_dataset_free(&ds);
}

// ---------------------------------------------------------------------------------------------
// Arrays in memory

static void test_arrays(vt *t) {
    enum { N = 5, F = 3, C = 4 };
    float x[N * F];
    uint32_t y[N] = {0, 3, 1, 2, 3};
    for (int i = 0; i < N * F; i++)
        x[i] = (float)i * 0.5f - 2.0f;
    vkt_dataset ds;
    VT_OK(t, vkt_dataset_from_arrays(x, y, N, F, C, &ds));
    VT_CHECK(t, ds.n == N && ds.features == F && ds.classes == C, "n %u features %u classes %u",
             ds.n, ds.features, ds.classes);
    VT_CHECK(t, ds.x && ds.x != x && ds.y && ds.y != y, "the arrays are not copies");
    if (ds.x && ds.y) {
        VT_CHECK(t, memcmp(ds.x, x, sizeof x) == 0 && memcmp(ds.y, y, sizeof y) == 0,
                 "the copies differ from the arrays");
        x[0] = 99; // the set owns its copy: changing the caller's array leaves it alone
        VT_CHECK(t, ds.x[0] == -2.0f, "x[0] followed the caller's array: %g", ds.x[0]);
        x[0] = -2.0f;
    }
    VT_CHECK(t, has(ds.source, "memory"), "source \"%s\"", ds.source);
    // classes is the task's, not the largest label + 1: a set without the last class keeps it.
    vkt_dataset d2;
    VT_OK(t, vkt_dataset_from_arrays(x, y, 1, F, C, &d2));
    VT_CHECK(t, d2.classes == C, "one sample of class 0: classes %u, expected %u", d2.classes, C);
    vkt_dataset_free(&d2);
    // The batcher walks it like a loaded set.
    vkt_batcher b;
    VT_OK(t, vkt_batcher_init(&b, &ds, 2, false, 0));
    float bx[2 * F];
    uint32_t by[2];
    VT_CHECK(t, vkt_batcher_count(&b) == 3, "batches %u", vkt_batcher_count(&b));
    uint32_t rows = vkt_batcher_get(&b, 2, bx, by);
    VT_CHECK(t, rows == 1 && by[0] == 3 && bx[0] == x[4 * F], "last batch: rows %u y %u x %g", rows,
             by[0], bx[0]);
    vkt_batcher_free(&b);
    vkt_dataset_free(&ds);

    // Every refusal leaves *out empty, so that freeing it is safe.
    uint32_t bad_y[N] = {0, 1, 4, 2, 0};
    EXPECT_FAIL(t, vkt_dataset_from_arrays(x, bad_y, N, F, C, &ds), VKT_ERR_ARG, "sample 2",
                "label 4", "4 classes");
    VT_CHECK(t, ds.x == NULL && ds.y == NULL && ds.n == 0, "a refused set is not empty");
    vkt_dataset_free(&ds);
    x[2 * F + 1] = NAN;
    EXPECT_FAIL(t, vkt_dataset_from_arrays(x, y, N, F, C, &ds), VKT_ERR_ARG, "sample 2",
                "feature 1", "NaN");
    x[2 * F + 1] = -INFINITY;
    EXPECT_FAIL(t, vkt_dataset_from_arrays(x, y, N, F, C, &ds), VKT_ERR_ARG, "sample 2",
                "feature 1", "infinite");
    x[2 * F + 1] = 0;
    EXPECT_FAIL(t, vkt_dataset_from_arrays(NULL, y, N, F, C, &ds), VKT_ERR_ARG, "x is NULL");
    EXPECT_FAIL(t, vkt_dataset_from_arrays(x, NULL, N, F, C, &ds), VKT_ERR_ARG, "y is NULL");
    EXPECT_FAIL(t, vkt_dataset_from_arrays(x, y, 0, F, C, &ds), VKT_ERR_ARG, "n (0)");
    EXPECT_FAIL(t, vkt_dataset_from_arrays(x, y, N, 0, C, &ds), VKT_ERR_ARG, "features (0)");
    EXPECT_FAIL(t, vkt_dataset_from_arrays(x, y, N, F, 0, &ds), VKT_ERR_ARG, "classes (0)");
    VT_CHECK(t, ds.x == NULL && ds.y == NULL && ds.n == 0, "a refused set is not empty");
    vkt_dataset_free(&ds);
}

// ---------------------------------------------------------------------------------------------
// The real data set

static void test_fashion_mnist(vt *t) {
    struct stat st;
    const char *ci = getenv("CI");
    if (stat(VKT_DEFAULT_DATA_DIR, &st) != 0) {
        bool in_ci = ci && strcmp(ci, "true") == 0;
        VT_CHECK(t, !in_ci, "CI=true but %s is missing (scripts/setup.sh installs it)",
                 VKT_DEFAULT_DATA_DIR);
        printf("test_data: note: %s is missing; the real-data check is skipped\n",
               VKT_DEFAULT_DATA_DIR);
        return;
    }
    vkt_dataset ds;
    vkt_status s = vkt_dataset_load_mnist_dir(NULL, true, &ds);
    VT_CHECK(t, s == VKT_OK, "Fashion-MNIST train: %s", vkt_error());
    if (s == VKT_OK) {
        VT_CHECK(t, ds.n == 60000 && ds.features == 784 && ds.classes == 10,
                 "train: n %u features %u classes %u", ds.n, ds.features, ds.classes);
        // Fashion-MNIST's training set is balanced: 6000 images per class.
        uint32_t hist[10] = {0};
        float lo = 1, hi = 0;
        for (uint32_t i = 0; i < ds.n; i++)
            hist[ds.y[i] < 10 ? ds.y[i] : 0]++;
        for (size_t i = 0; i < (size_t)ds.n * ds.features; i++) {
            lo = ds.x[i] < lo ? ds.x[i] : lo;
            hi = ds.x[i] > hi ? ds.x[i] : hi;
        }
        for (int c = 0; c < 10; c++)
            VT_CHECK(t, hist[c] == 6000, "class %d: %u", c, hist[c]);
        VT_CHECK(t, lo == 0.0f && hi == 1.0f, "pixel range [%g, %g]", lo, hi);
        vkt_dataset_free(&ds);
    }
    s = vkt_dataset_load_mnist_dir(VKT_DEFAULT_DATA_DIR, false, &ds);
    VT_CHECK(t, s == VKT_OK && ds.n == 10000 && ds.features == 784 && ds.classes == 10,
             "Fashion-MNIST test: %s n %u", vkt_error(), ds.n);
    vkt_dataset_free(&ds);
}

// ---------------------------------------------------------------------------------------------
// Augmentation: every augmented row is checked to be a shifted window of its sample (zeros
// outside), mirrored or not, and to be the one the draws data.h documents pick (written again
// here); the same (seed, epoch, sample) gives the same row whatever the batch size or shuffle.

enum { AC = 2, AH = 5, AW = 7, AF = AC * AH * AW, AN = 48 };

// Sample k's value at (c, y, x): exact in a float, non-zero, different everywhere.
static float aug_value(uint32_t k, uint32_t c, uint32_t y, uint32_t x) {
    return (float)(1 + x + 8 * y + 64 * c + 256 * k);
}

// Whether out is src's window at offset (dy, dx) (zeros outside the sample), mirrored along W
// when flip.
static bool is_window(const float *src, const float *out, int dy, int dx, bool flip) {
    for (int c = 0; c < AC; c++)
        for (int y = 0; y < AH; y++)
            for (int x = 0; x < AW; x++) {
                int sy = y + dy, sx = (flip ? AW - 1 - x : x) + dx;
                float want =
                    sy >= 0 && sy < AH && sx >= 0 && sx < AW ? src[(c * AH + sy) * AW + sx] : 0.0f;
                if (out[(c * AH + y) * AW + x] != want) return false;
            }
    return true;
}

// The draws of sample k in epoch e, as data.h defines them.
static void ref_draws(uint64_t seed, uint64_t e, uint32_t k, const vkt_augment *a, int *dy, int *dx,
                      bool *flip) {
    uint64_t state =
        ref_mix(seed ^ ref_mix(e + 0x4cf5ad432745937full) ^ ref_mix(k + 0x2545f4914f6cdd1dull));
    *dy = *dx = 0;
    if (a->crop) {
        int *d[2] = {dy, dx};
        for (int i = 0; i < 2; i++) {
            uint64_t bound = 2 * (uint64_t)a->pad + 1, limit = UINT64_MAX - UINT64_MAX % bound, r;
            do
                r = vt_rand_u64(&state);
            while (r >= limit);
            *d[i] = (int)(r % bound) - (int)a->pad;
        }
    }
    *flip = a->flip && (vt_rand_u64(&state) >> 63);
}

// Walks an epoch of b and checks each row; counts the flips and the distinct shifts seen.
static void check_epoch(vt *t, const vkt_batcher *b, const vkt_augment *a, const char *what,
                        int *flips, int *shifts) {
    static bool seen[64][64];
    memset(seen, 0, sizeof seen);
    float x[16 * AF];
    uint32_t y[16];
    *flips = *shifts = 0;
    for (uint32_t i = 0; i < vkt_batcher_count(b); i++) {
        uint32_t rows = vkt_batcher_get(b, i, x, y);
        for (uint32_t r = 0; r < rows; r++) {
            uint32_t k = b->order[i * b->batch + r];
            const float *src = b->ds->x + (size_t)k * AF, *out = x + (size_t)r * AF;
            VT_CHECK(t, y[r] == b->ds->y[k], "%s: the label of sample %u", what, k);
            int dy, dx;
            bool flip;
            ref_draws(b->seed, b->epoch, k, a, &dy, &dx, &flip);
            VT_CHECK(t, is_window(src, out, dy, dx, flip),
                     "%s: epoch %llu sample %u is not its window at (%d, %d)%s", what,
                     (unsigned long long)b->epoch, k, dy, dx, flip ? " mirrored" : "");
            // Whatever the draws: a window of the sample, mirrored or not, and nothing else.
            int found = 0;
            for (int fy = -(int)a->pad; fy <= (int)a->pad; fy++)
                for (int fx = -(int)a->pad; fx <= (int)a->pad; fx++)
                    for (int f = 0; f < (a->flip ? 2 : 1); f++)
                        found += is_window(src, out, fy, fx, f);
            VT_CHECK(t, found == 1, "%s: sample %u matches %d windows", what, k, found);
            float direct[AF];
            vkt_augment_sample(b, k, src, direct);
            VT_CHECK(t, memcmp(direct, out, sizeof direct) == 0,
                     "%s: vkt_augment_sample differs from the batch", what);
            *flips += flip;
            if (!seen[dy + 32][dx + 32]) (*shifts)++;
            seen[dy + 32][dx + 32] = true;
        }
    }
}

static void test_augment(vt *t) {
    float *x = malloc(AN * AF * sizeof(float));
    uint32_t y[AN];
    for (uint32_t k = 0; k < AN; k++) {
        y[k] = k % 10;
        for (uint32_t c = 0; c < AC; c++)
            for (uint32_t r = 0; r < AH; r++)
                for (uint32_t q = 0; q < AW; q++)
                    x[((k * AC + c) * AH + r) * AW + q] = aug_value(k, c, r, q);
    }
    vkt_dataset ds = {.n = AN, .features = AF, .classes = 10, .x = x, .y = y};
    vkt_shape chw = {3, {AC, AH, AW}};
    vkt_batcher b;
    int flips, shifts;

    // Not asked: the rows are the samples.
    VT_OK(t, vkt_batcher_init(&b, &ds, 10, true, 3));
    vkt_augment none = {0};
    VT_OK(t, vkt_batcher_augment(&b, &none, &chw));
    check_epoch(t, &b, &none, "no augmentation", &flips, &shifts);
    VT_CHECK(t, flips == 0 && shifts == 1, "no augmentation: %d flips, %d shifts", flips, shifts);

    // Flip alone: each sample exactly itself or its mirror, both occurring.
    vkt_augment flip = {.flip = true};
    VT_OK(t, vkt_batcher_augment(&b, &flip, &chw));
    for (uint64_t e = 0; e < 3; e++) {
        vkt_batcher_epoch(&b, e);
        check_epoch(t, &b, &flip, "flip", &flips, &shifts);
        VT_CHECK(t, flips > 5 && flips < AN - 5 && shifts == 1,
                 "flip, epoch %llu: %d of %d mirrored, %d shifts", (unsigned long long)e, flips, AN,
                 shifts);
    }
    vkt_batcher_free(&b);

    // Crop alone (no shuffle, batch 7), and crop with flip (shuffled, batch 10).
    vkt_augment crop = {.crop = true, .pad = 2};
    VT_OK(t, vkt_batcher_init(&b, &ds, 7, false, 3));
    VT_OK(t, vkt_batcher_augment(&b, &crop, &chw));
    check_epoch(t, &b, &crop, "crop", &flips, &shifts);
    VT_CHECK(t, flips == 0 && shifts >= 15, "crop: %d flips, %d of 25 shifts", flips, shifts);
    vkt_batcher_free(&b);
    vkt_augment both = {.crop = true, .flip = true, .pad = 3};
    VT_OK(t, vkt_batcher_init(&b, &ds, 10, true, 3));
    VT_OK(t, vkt_batcher_augment(&b, &both, &chw));
    vkt_batcher_epoch(&b, 4);
    check_epoch(t, &b, &both, "crop,flip", &flips, &shifts);
    VT_CHECK(t, flips > 5 && flips < AN - 5 && shifts >= 20, "crop,flip: %d flips, %d shifts",
             flips, shifts);

    // The same seed and epoch: the same batch, from a batcher of another batch size and order
    // too (sample by sample); another epoch or seed: other batches.
    vkt_batcher b2;
    VT_OK(t, vkt_batcher_init(&b2, &ds, 10, true, 3));
    VT_OK(t, vkt_batcher_augment(&b2, &both, &chw));
    vkt_batcher_epoch(&b2, 4);
    float x1[10 * AF], x2[10 * AF];
    uint32_t n1 = vkt_batcher_get(&b, 1, x1, NULL), n2 = vkt_batcher_get(&b2, 1, x2, NULL);
    VT_CHECK(t, n1 == 10 && n2 == 10 && memcmp(x1, x2, sizeof x1) == 0,
             "the same seed and epoch gave different batches");
    vkt_batcher other;
    VT_OK(t, vkt_batcher_init(&other, &ds, 3, false, 3));
    VT_OK(t, vkt_batcher_augment(&other, &both, &chw));
    vkt_batcher_epoch(&other, 4);
    for (uint32_t r = 0; r < 10; r++) {
        uint32_t k = b.order[10 + r];
        float row[3 * AF];
        vkt_batcher_get(&other, k / 3, row, NULL);
        VT_CHECK(t, memcmp(row + (k % 3) * AF, x1 + r * AF, AF * sizeof(float)) == 0,
                 "sample %u: batch size 3 unshuffled gives another augmentation than batch 10 "
                 "shuffled",
                 k);
    }
    vkt_batcher_free(&other);
    // Another epoch, the same order: the same samples, other windows.
    vkt_batcher_epoch(&b2, 5);
    memcpy(b2.order, b.order, AN * sizeof(uint32_t));
    vkt_batcher_get(&b2, 1, x2, NULL);
    VT_CHECK(t, memcmp(x1, x2, sizeof x1) != 0, "epochs 4 and 5 augmented alike");
    vkt_batcher_free(&b2);
    VT_OK(t, vkt_batcher_init(&b2, &ds, 10, true, 4));
    VT_OK(t, vkt_batcher_augment(&b2, &both, &chw));
    vkt_batcher_epoch(&b2, 4);
    memcpy(b2.order, b.order, AN * sizeof(uint32_t));
    vkt_batcher_get(&b2, 1, x2, NULL);
    VT_CHECK(t, memcmp(x1, x2, sizeof x1) != 0, "seeds 3 and 4 augmented alike");
    vkt_batcher_free(&b2);

    // Refused: samples not [C, H, W], a shape that is not the data's, a crop without padding;
    // the batcher keeps what it had.
    vkt_shape flat = {2, {AC, AH * AW}}, wrong = {3, {3, AH, AW}};
    EXPECT_FAIL(t, vkt_batcher_augment(&b, &flip, &flat), VKT_ERR_ARG, "[C, H, W]", "[2, 35]");
    EXPECT_FAIL(t, vkt_batcher_augment(&b, &both, &wrong), VKT_ERR_ARG, "[3, 5, 7] hold 105",
                "the data 70");
    vkt_augment nopad = {.crop = true};
    EXPECT_FAIL(t, vkt_batcher_augment(&b, &nopad, &chw), VKT_ERR_ARG, "--augment-pad 0");
    check_epoch(t, &b, &both, "crop,flip after refusals", &flips, &shifts);
    vkt_batcher_free(&b);
    free(x);
}

// ---------------------------------------------------------------------------------------------
// Token ids and labels per position from .npy

static void test_npy_tokens(vt *t) {
    enum { N = 4, T = 6 };
    int32_t x4[N * T], y4[N * T];
    int64_t x8[N * T], y8[N * T];
    for (int i = 0; i < N * T; i++) {
        x4[i] = (int32_t)((i * 7919) % 50000);
        y4[i] = (i * 5 + 3) % 11;
    }
    x4[5] = 16777215; // 2^24 - 1: the largest id, exact as a float
    x4[6] = 0;
    x4[7] = 16777213; // odd and above 2^23: a float32 keeps it only because it is below 2^24
    y4[9] = 12;       // classes = 13
    for (int i = 0; i < N * T; i++)
        x8[i] = x4[i], y8[i] = y4[i];
    write_npy(tpath("tx4.npy"), 1, "<i4", "(4, 6)", x4, sizeof x4);
    write_npy(tpath("tx8.npy"), 1, "<i8", "(4, 6)", x8, sizeof x8);
    write_npy(tpath("ty4.npy"), 1, "<i4", "(4, 6)", y4, sizeof y4);
    write_npy(tpath("ty8.npy"), 2, "<i8", "(4, 6)", y8, sizeof y8);
    write_npy(tpath("ty81.npy"), 1, "<i8", "(4, 6, 1)", y8, sizeof y8);
    const char *xs[] = {"tx4.npy", "tx8.npy", "tx8.npy"},
               *ys[] = {"ty8.npy", "ty4.npy", "ty81.npy"};
    for (int c = 0; c < 3; c++) {
        vkt_dataset ds;
        vkt_status s = vkt_dataset_load_npy(tpath(xs[c]), tpath(ys[c]), &ds);
        VT_CHECK(t, s == VKT_OK, "%s + %s: %s", xs[c], ys[c], vkt_error());
        if (s != VKT_OK) continue;
        VT_CHECK(t,
                 ds.n == N && ds.features == T && vkt_dataset_targets(&ds) == T && ds.classes == 13,
                 "%s + %s: n %u features %u targets %u classes %u", xs[c], ys[c], ds.n, ds.features,
                 ds.targets, ds.classes);
        int bad = 0;
        for (int i = 0; i < N * T && ds.n == N && ds.features == T; i++)
            bad += ds.x[i] != (float)x4[i] || (double)ds.x[i] != (double)x4[i];
        for (int i = 0; i < N * T && ds.targets == T; i++)
            bad += ds.y[i] != (uint32_t)y4[i];
        VT_CHECK(t, bad == 0, "%s + %s: %d values differ", xs[c], ys[c], bad);
        VT_CHECK(t, ds.x[5] == 16777215.0f && ds.x[7] == 16777213.0f, "ids near 2^24: %.1f %.1f",
                 ds.x[5], ds.x[7]);
        // The batcher gives each row its T labels.
        if (c == 0 && ds.targets == T) {
            vkt_batcher b;
            VT_OK(t, vkt_batcher_init(&b, &ds, 3, false, 0));
            float bx[N * T];
            uint32_t by[N * T]; // the second batcher below gives batches of 4 = N rows
            uint32_t rows = vkt_batcher_get(&b, 1, bx, by);
            VT_CHECK(t, rows == 1 && memcmp(by, ds.y + 3 * T, T * 4) == 0 && bx[0] == ds.x[3 * T],
                     "the last batch's row: %u rows, labels or ids differ", rows);
            vkt_batcher_free(&b);
            VT_OK(t, vkt_batcher_init(&b, &ds, 4, true, 5));
            rows = vkt_batcher_get(&b, 0, NULL, by);
            int wrong = 0;
            for (uint32_t r = 0; r < rows; r++)
                wrong += memcmp(by + r * T, ds.y + (size_t)b.order[r] * T, T * 4) != 0;
            VT_CHECK(t, rows == N && wrong == 0, "shuffled: %d rows with another sample's labels",
                     wrong);
            vkt_batcher_free(&b);
        }
        vkt_dataset_free(&ds);
    }

    vkt_dataset ds;
    int32_t xb[N * T];
    memcpy(xb, x4, sizeof xb);
    xb[2 * T + 3] = -1;
    write_npy(tpath("txneg.npy"), 1, "<i4", "(4, 6)", xb, sizeof xb);
    EXPECT_FAIL(t, vkt_dataset_load_npy(tpath("txneg.npy"), tpath("ty8.npy"), &ds), VKT_ERR_FORMAT,
                "txneg.npy", "row 2, column 3", "token id -1", "0..16777215");
    int64_t xb8[N * T];
    memcpy(xb8, x8, sizeof xb8);
    xb8[1 * T + 0] = 16777216;
    write_npy(tpath("txbig.npy"), 1, "<i8", "(4, 6)", xb8, sizeof xb8);
    EXPECT_FAIL(t, vkt_dataset_load_npy(tpath("txbig.npy"), tpath("ty8.npy"), &ds), VKT_ERR_FORMAT,
                "txbig.npy", "row 1, column 0", "token id 16777216");
    int64_t yb[N * T];
    memcpy(yb, y8, sizeof yb);
    yb[1 * T + 4] = -3;
    write_npy(tpath("tyneg.npy"), 1, "<i8", "(4, 6)", yb, sizeof yb);
    EXPECT_FAIL(t, vkt_dataset_load_npy(tpath("tx4.npy"), tpath("tyneg.npy"), &ds), VKT_ERR_FORMAT,
                "tyneg.npy", "label -3 of sample 1, position 4", "negative");
    write_npy(tpath("ty3.npy"), 1, "<i8", "(3, 6)", y8, 3 * T * 8);
    EXPECT_FAIL(t, vkt_dataset_load_npy(tpath("tx4.npy"), tpath("ty3.npy"), &ds), VKT_ERR_FORMAT,
                "4 samples", "3 rows of labels");
    VT_CHECK(t, ds.x == NULL && ds.y == NULL, "failed loads leave the data set empty");

    // In memory: a label too large is named by sample and position.
    float fx[N * T];
    uint32_t uy[N * T];
    for (int i = 0; i < N * T; i++)
        fx[i] = (float)x4[i], uy[i] = (uint32_t)y4[i];
    VT_OK(t, vkt_dataset_from_sequences(fx, uy, N, T, T, 13, &ds));
    VT_CHECK(t, ds.targets == T && memcmp(ds.y, uy, sizeof uy) == 0 && ds.y != uy,
             "from_sequences: targets %u, labels not copied", ds.targets);
    vkt_dataset_free(&ds);
    uy[2 * T + 5] = 13;
    EXPECT_FAIL(t, vkt_dataset_from_sequences(fx, uy, N, T, T, 13, &ds), VKT_ERR_ARG,
                "sample 2, position 5", "label 13", "13 classes");
    EXPECT_FAIL(t, vkt_dataset_from_sequences(fx, uy, N, T, 0, 13, &ds), VKT_ERR_ARG,
                "targets (0)");
}

// ---------------------------------------------------------------------------------------------
// Text

// Bytes that make every window of 8 recognisable: a splitmix64 stream.
static void text_bytes(uint8_t *p, size_t n, uint64_t seed) {
    uint64_t st = seed;
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)(vt_rand_u64(&st) >> 56);
}

// Window j's start as data.h documents it, written again.
static uint64_t ref_window(uint64_t seed, uint64_t e, uint32_t j, uint64_t train_n, uint32_t T,
                           bool shuffle) {
    if (!shuffle) return (uint64_t)j * T;
    uint64_t state =
        ref_mix(seed ^ ref_mix(e + 0x6a09e667f3bcc909ull) ^ ref_mix(j + 0xbb67ae8584caa73bull));
    uint64_t bound = train_n - T, limit = UINT64_MAX - UINT64_MAX % bound, r;
    do
        r = vt_rand_u64(&state);
    while (r >= limit);
    return r % bound;
}

// Walks epoch e of b: every row the documented window, targets the inputs shifted by one, inside
// the training part. Returns the smallest and largest start seen.
static void check_windows(vt *t, vkt_batcher *b, uint64_t e, const char *what, uint64_t *lo,
                          uint64_t *hi) {
    const vkt_text *tx = b->text;
    uint32_t T = b->T;
    vkt_batcher_epoch(b, e);
    float *x = malloc((size_t)b->batch * T * sizeof(float));
    uint32_t *y = malloc((size_t)b->batch * T * sizeof(uint32_t));
    uint32_t j = 0, nb = vkt_batcher_count(b);
    int bad = 0, outside = 0, shift = 0;
    *lo = UINT64_MAX, *hi = 0;
    for (uint32_t i = 0; i < nb; i++) {
        uint32_t rows = vkt_batcher_get(b, i, x, y);
        uint32_t want = i + 1 < nb ? b->batch : b->windows - i * b->batch;
        VT_CHECK(t, rows == want, "%s: batch %u has %u rows, expected %u", what, i, rows, want);
        for (uint32_t r = 0; r < rows; r++, j++) {
            uint64_t s = ref_window(b->seed, e, j, tx->train_n, T, b->shuffle);
            bad += s != vkt_batcher_window(b, j);
            outside += s + T >= tx->train_n; // the last target must be a training byte
            for (uint32_t k = 0; k < T && s + T < tx->n; k++) {
                bad +=
                    x[r * T + k] != (float)tx->bytes[s + k] || y[r * T + k] != tx->bytes[s + k + 1];
                if (k + 1 < T) shift += (float)y[r * T + k] != x[r * T + k + 1];
            }
            *lo = s < *lo ? s : *lo;
            *hi = s > *hi ? s : *hi;
        }
    }
    VT_CHECK(t, j == b->windows, "%s: an epoch gave %u windows of %u", what, j, b->windows);
    VT_CHECK(t, bad == 0, "%s: %d values or starts differ from the documented windows", what, bad);
    VT_CHECK(t, shift == 0, "%s: %d targets are not the next input", what, shift);
    VT_CHECK(t, outside == 0, "%s: %d windows reach into the validation part", what, outside);
    free(x);
    free(y);
}

static void test_text(vt *t) {
    enum { NA = 600, NB = 403, T = 8 };
    uint8_t a[NA], bb[NB], all[NA + NB];
    text_bytes(a, NA, 1);
    text_bytes(bb, NB, 2);
    memcpy(all, a, NA);
    memcpy(all + NA, bb, NB);
    char dir[300], sub[320];
    snprintf(dir, sizeof dir, "%s/text", g_dir);
    snprintf(sub, sizeof sub, "%s/text/sub", g_dir);
    mkdir(dir, 0700);
    mkdir(sub, 0700);
    // Written out of order; a .dat index, a symbolic link and a subdirectory that must be skipped.
    write_file(tpath("text/b"), bb, NB, false);
    write_file(tpath("text/a"), a, NA, false);
    write_file(tpath("text/a.dat"), "index", 5, false);
    write_file(tpath("text/sub/c"), "nested", 6, false);
    VT_CHECK(t, symlink("a", tpath("text/a.u8")) == 0, "cannot make a symbolic link");
    write_file(tpath("a.gz"), a, NA, true);

    vkt_text tx;
    const char *d1[] = {dir};
    VT_OK(t, vkt_text_load(d1, 1, &tx));
    VT_CHECK(t, tx.n == NA + NB && tx.files == 2 && tx.bytes && memcmp(tx.bytes, all, NA + NB) == 0,
             "directory: %llu bytes from %u files, expected a then b (%d bytes from 2)",
             (unsigned long long)tx.n, tx.files, NA + NB);
    VT_CHECK(t, tx.train_n == NA + NB - (NA + NB) / 10 && tx.train_n == 903,
             "split: training part %llu bytes", (unsigned long long)tx.train_n);
    VT_CHECK(t, has(tx.source, "text"), "source %s", tx.source);
    vkt_text t2;
    const char *d2[] = {tpath("text/b"), tpath("a.gz")};
    VT_OK(t, vkt_text_load(d2, 2, &t2));
    VT_CHECK(t,
             t2.n == NA + NB && memcmp(t2.bytes, bb, NB) == 0 && memcmp(t2.bytes + NB, a, NA) == 0,
             "files in the order given, gzip decompressed");
    VT_CHECK(t, has(t2.source, "+ 1 more"), "source %s", t2.source);
    vkt_text_free(&t2);
    VT_CHECK(t, t2.bytes == NULL && t2.n == 0, "free zeroes");
    vkt_text_free(&t2);

    // Training windows, shuffled: the documented draws over several epochs reach both ends of
    // the training part and never beyond; the same seed again gives the same batches.
    vkt_batcher b, b2;
    VT_OK(t, vkt_batcher_init_text(&b, &tx, T, 5, true, 9, 0));
    VT_CHECK(t,
             b.windows == (903 - 1) / T && vkt_batcher_count(&b) == 23 &&
                 vkt_batcher_samples(&b) == 112,
             "windows %u, batches %u", b.windows, vkt_batcher_count(&b));
    uint64_t lo = UINT64_MAX, hi = 0, l, h;
    for (uint64_t e = 0; e < 12; e++) {
        check_windows(t, &b, e, "shuffled", &l, &h);
        lo = l < lo ? l : lo;
        hi = h > hi ? h : hi;
    }
    VT_CHECK(t, lo < 10 && hi > 903 - T - 1 - 10 && hi <= 903 - T - 1,
             "starts from %llu to %llu over 12 epochs (0 to %d possible)", (unsigned long long)lo,
             (unsigned long long)hi, 903 - T - 1);
    float x1[5 * T], x2[5 * T];
    uint32_t y1[5 * T], y2[5 * T];
    VT_OK(t, vkt_batcher_init_text(&b2, &tx, T, 5, true, 9, 0));
    vkt_batcher_epoch(&b, 3);
    vkt_batcher_epoch(&b2, 3);
    vkt_batcher_get(&b, 4, x1, y1);
    vkt_batcher_get(&b2, 4, x2, y2);
    VT_CHECK(t, memcmp(x1, x2, sizeof x1) == 0 && memcmp(y1, y2, sizeof y1) == 0,
             "the same seed and epoch gave other windows");
    vkt_batcher_epoch(&b2, 4);
    vkt_batcher_get(&b2, 4, x2, y2);
    VT_CHECK(t, memcmp(x1, x2, sizeof x1) != 0, "epochs 3 and 4 gave the same windows");
    vkt_batcher_free(&b2);
    VT_OK(t, vkt_batcher_init_text(&b2, &tx, T, 5, true, 10, 0));
    vkt_batcher_epoch(&b2, 3);
    vkt_batcher_get(&b2, 4, x2, y2);
    VT_CHECK(t, memcmp(x1, x2, sizeof x1) != 0, "seeds 9 and 10 gave the same windows");
    vkt_batcher_free(&b2);
    // Another batch size: window j is the same window (batch 4 of 5 = windows 20..24).
    VT_OK(t, vkt_batcher_init_text(&b2, &tx, T, 3, true, 9, 0));
    vkt_batcher_epoch(&b2, 3);
    float x3[3 * T];
    int moved = 0;
    for (uint32_t j = 20; j < 25; j++) {
        vkt_batcher_get(&b2, j / 3, x3, NULL);
        moved += memcmp(x3 + (j % 3) * T, x1 + (j - 20) * T, T * sizeof(float)) != 0;
    }
    VT_CHECK(t, moved == 0, "%d windows change with the batch size", moved);
    vkt_batcher_free(&b2);
    vkt_batcher_free(&b);

    // Unshuffled: consecutive windows from the first byte, the same every epoch; a limit.
    VT_OK(t, vkt_batcher_init_text(&b, &tx, T, 7, false, 9, 0));
    check_windows(t, &b, 0, "in order", &l, &h);
    VT_CHECK(t, l == 0 && h == 111 * T, "in order: starts %llu to %llu", (unsigned long long)l,
             (unsigned long long)h);
    check_windows(t, &b, 5, "in order, epoch 5", &l, &h);
    vkt_batcher_free(&b);
    VT_OK(t, vkt_batcher_init_text(&b, &tx, T, 5, true, 9, 7));
    VT_CHECK(t, b.windows == 7 && vkt_batcher_count(&b) == 2, "limit 7: %u windows", b.windows);
    check_windows(t, &b, 2, "limit 7", &l, &h);
    vkt_batcher_free(&b);
    VT_OK(t, vkt_batcher_init_text(&b, &tx, T, 5, true, 9, 100000));
    VT_CHECK(t, b.windows == 112, "a limit above W keeps W: %u", b.windows);
    vkt_augment flip = {.flip = true};
    vkt_shape s1 = {1, {T}};
    EXPECT_FAIL(t, vkt_batcher_augment(&b, &flip, &s1), VKT_ERR_ARG, "text");
    vkt_batcher_free(&b);
    EXPECT_FAIL(t, vkt_batcher_init_text(&b, &tx, T, 0, true, 9, 0), VKT_ERR_ARG, "batch size");

    // Validation: consecutive windows of the last tenth, from its first byte.
    vkt_dataset v;
    VT_OK(t, vkt_text_validation(&tx, T, 0, &v));
    VT_CHECK(t, v.n == (100 - 1) / T && v.features == T && v.targets == T && v.classes == 256,
             "validation: n %u features %u targets %u classes %u", v.n, v.features, v.targets,
             v.classes);
    int bad = 0;
    for (uint32_t k = 0; k < v.n; k++)
        for (uint32_t i = 0; i < T; i++)
            bad += v.x[k * T + i] != (float)all[903 + k * T + i] ||
                   v.y[k * T + i] != all[903 + k * T + i + 1];
    VT_CHECK(t, bad == 0, "validation: %d values differ", bad);
    VT_OK(t, vkt_dataset_check(&v, "validation"));
    vkt_dataset_free(&v);
    VT_OK(t, vkt_text_validation(&tx, T, 5, &v));
    VT_CHECK(t, v.n == 5 && v.x[4 * T] == (float)all[903 + 4 * T], "validation limit 5: n %u", v.n);
    vkt_dataset_free(&v);

    // Windows that do not fit: each part must hold T + 1 bytes (here validation 100, T = 99).
    VT_OK(t, vkt_text_check(&tx, 99));
    EXPECT_FAIL(t, vkt_text_check(&tx, 100), VKT_ERR_FORMAT, "too short", "1003 bytes",
                "903 for training and 100 for validation", "input [100]", "at least 1010 bytes");
    EXPECT_FAIL(t, vkt_text_validation(&tx, 100, 0, &v), VKT_ERR_FORMAT, "too short");
    EXPECT_FAIL(t, vkt_batcher_init_text(&b, &tx, 100, 4, true, 1, 0), VKT_ERR_FORMAT, "too short");
    vkt_text_free(&tx);

    // In memory; empty, missing and unreadable text.
    VT_OK(t, vkt_text_from_bytes(all, 30, "thirty bytes", &tx));
    VT_CHECK(t, tx.n == 30 && tx.train_n == 27, "from bytes: %llu, %llu", (unsigned long long)tx.n,
             (unsigned long long)tx.train_n);
    EXPECT_FAIL(t, vkt_text_check(&tx, 8), VKT_ERR_FORMAT, "thirty bytes", "too short");
    vkt_text_free(&tx);
    EXPECT_FAIL(t, vkt_text_from_bytes(all, 0, "nothing", &tx), VKT_ERR_FORMAT, "empty");
    write_file(tpath("empty.txt"), "", 0, false);
    const char *e1[] = {tpath("empty.txt")};
    EXPECT_FAIL(t, vkt_text_load(e1, 1, &tx), VKT_ERR_FORMAT, "empty.txt", "empty");
    const char *e2[] = {tpath("text/a"), tpath("missing.txt")};
    EXPECT_FAIL(t, vkt_text_load(e2, 2, &tx), VKT_ERR_IO, "missing.txt");
    VT_CHECK(t, tx.bytes == NULL && tx.n == 0, "a failed load leaves the corpus empty");
    char dats[320];
    snprintf(dats, sizeof dats, "%s/dats", g_dir);
    mkdir(dats, 0700);
    write_file(tpath("dats/x.dat"), "index", 5, false);
    const char *e3[] = {dats};
    EXPECT_FAIL(t, vkt_text_load(e3, 1, &tx), VKT_ERR_ARG, "dats", "no regular file");
    EXPECT_FAIL(t, vkt_text_load(e3, 0, &tx), VKT_ERR_ARG, "no text");
}

// ---------------------------------------------------------------------------------------------
// What vkt_train_run refuses before it opens a device: data that does not fit the model.

static vkt_status run_with(const char *model_json, const vkt_dataset *train,
                           const char *const *text, int ntext) {
    vkt_model_desc m;
    vkt_status s = vkt_model_parse(model_json, "model", &m);
    if (s != VKT_OK) return s;
    vkt_train_opts o = {.model = &m,
                        .train_set = train,
                        .text_paths = text,
                        .ntext = ntext,
                        .epochs = 1,
                        .batch = 4,
                        .optim = vkt_optim_default(VKT_OPTIM_SGD)};
    o.optim.lr = 0.1f;
    vkt_train_result r;
    s = vkt_train_run(&o, &r);
    vkt_model_free(&m);
    return s;
}

static void test_fits(vt *t) {
    enum { N = 4, T = 6 };
    // Output [6, 16]: six labels per sample, 16 classes. Output [16]: one.
    const char *seq = "{\"name\": \"seq\", \"input\": [6, 1], \"layers\": [{\"type\": \"dense\", "
                      "\"units\": 16}], \"loss\": \"softmax_cross_entropy\"}";
    const char *one = "{\"name\": \"one\", \"input\": [6], \"layers\": [{\"type\": \"dense\", "
                      "\"units\": 16}], \"loss\": \"softmax_cross_entropy\"}";
    const char *mse = "{\"name\": \"reg\", \"input\": [6], \"layers\": [{\"type\": \"dense\", "
                      "\"units\": 16}], \"loss\": \"mse\"}";
    float x[N * T] = {0};
    uint32_t y[N * T] = {0};
    for (int i = 0; i < N * T; i++)
        y[i] = (uint32_t)(i % 16);
    vkt_dataset per_pos, per_sample, big;
    VT_OK(t, vkt_dataset_from_sequences(x, y, N, T, T, 16, &per_pos));
    VT_OK(t, vkt_dataset_from_arrays(x, y, N, T, 16, &per_sample));
    y[1 * T + 2] = 17;
    VT_OK(t, vkt_dataset_from_sequences(x, y, N, T, T, 20, &big));
    EXPECT_FAIL(t, run_with(seq, &per_sample, NULL, 0), VKT_ERR_FORMAT, "model seq",
                "expects 6 labels per sample", "has 1 per sample");
    EXPECT_FAIL(t, run_with(one, &per_pos, NULL, 0), VKT_ERR_FORMAT, "model one",
                "expects one label per sample", "has 6 per sample");
    EXPECT_FAIL(t, run_with(seq, &big, NULL, 0), VKT_ERR_FORMAT, "label 17 at sample 1, position 2",
                "16 classes", "[6, 16]");
    EXPECT_FAIL(t, run_with(mse, &per_pos, NULL, 0), VKT_ERR_FORMAT, "mse", "6 labels per sample");

    // Text needs input [T] and output [T, 256] under softmax_cross_entropy.
    const char *txt[] = {tpath("text/a")};
    const char *seq256 = "{\"name\": \"seq256\", \"input\": [6, 1], \"layers\": [{\"type\": "
                         "\"dense\", \"units\": 256}], \"loss\": \"softmax_cross_entropy\"}";
    EXPECT_FAIL(t, run_with(seq256, NULL, txt, 1), VKT_ERR_ARG, "input [T]", "output [T, 256]",
                "model seq256 has input [6, 1], output [6, 256]");
    EXPECT_FAIL(t, run_with(one, NULL, txt, 1), VKT_ERR_ARG, "input [6], output [16]");
    EXPECT_FAIL(t, run_with(one, &per_sample, txt, 1), VKT_ERR_ARG, "one source of data");
    const char *empty[] = {tpath("empty.txt")};
    EXPECT_FAIL(t, run_with(one, NULL, empty, 1), VKT_ERR_FORMAT, "empty");
    vkt_dataset_free(&per_pos);
    vkt_dataset_free(&per_sample);
    vkt_dataset_free(&big);
}

// fortunes, the default text: every regular file but the .dat indexes (not the .u8 links).
static void test_fortunes(vt *t) {
    struct stat st;
    const char *ci = getenv("CI");
    if (stat(VKT_DEFAULT_TEXT_DIR, &st) != 0) {
        VT_CHECK(t, !(ci && strcmp(ci, "true") == 0),
                 "CI=true but %s is missing (scripts/setup.sh installs fortunes)",
                 VKT_DEFAULT_TEXT_DIR);
        printf("test_data: note: %s is missing; the fortunes check is skipped\n",
               VKT_DEFAULT_TEXT_DIR);
        return;
    }
    uint64_t bytes = 0;
    uint32_t files = 0;
    DIR *d = opendir(VKT_DEFAULT_TEXT_DIR);
    for (struct dirent *e; d && (e = readdir(d));) {
        char p[1024];
        size_t n = strlen(e->d_name);
        snprintf(p, sizeof p, "%s/%s", VKT_DEFAULT_TEXT_DIR, e->d_name);
        if (lstat(p, &st) == 0 && S_ISREG(st.st_mode) &&
            !(n > 4 && strcmp(e->d_name + n - 4, ".dat") == 0)) {
            bytes += (uint64_t)st.st_size;
            files++;
        }
    }
    if (d) closedir(d);
    vkt_text tx;
    const char *p[] = {VKT_DEFAULT_TEXT_DIR};
    VT_OK(t, vkt_text_load(p, 1, &tx));
    VT_CHECK(t, tx.n == bytes && tx.files == files && files >= 10 && bytes > 1000000,
             "fortunes: %llu bytes from %u files, expected %llu from %u", (unsigned long long)tx.n,
             tx.files, (unsigned long long)bytes, files);
    VT_OK(t, vkt_text_check(&tx, 256));
    vkt_text_free(&tx);
}

// vt_finish must fail a run with a failed check even without devices (this test uses none).
static void test_harness(vt *t) {
    vt bad = {.name = "test_data (harness self-check)"};
    fprintf(stderr, "test_data: the FAIL below is expected (harness self-check):\n");
    VT_CHECK(&bad, 1 == 2, "deliberate");
    VT_CHECK(t, vt_finish(&bad) != 0, "vt_finish passed a run with a failed check");
    vt good = {.name = "test_data (harness self-check)"};
    VT_CHECK(&good, 1 == 1, "trivial");
    VT_CHECK(t, vt_finish(&good) == 0, "vt_finish failed a run whose checks passed");
}

int main(void) {
    vt t = {.name = "test_data"};
    const char *tmp = getenv("TMPDIR");
    snprintf(g_dir, sizeof g_dir, "%s/vkt_test_data.XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(g_dir)) {
        perror("mkdtemp");
        return 1;
    }
    test_harness(&t);
    test_idx(&t);
    test_npy(&t);
    test_batcher(&t);
    test_arrays(&t);
    test_augment(&t);
    test_npy_tokens(&t);
    test_text(&t);
    test_fits(&t);
    test_fashion_mnist(&t);
    test_fortunes(&t);
    vt_remove_dir(g_dir);
    return vt_finish(&t);
}
