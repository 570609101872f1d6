// test_checkpoint.c: safetensors checkpoints (engine/run/checkpoint.c), on the host only.
// Round trip of tensors and metadata; the file read back by an independent reader that follows
// the safetensors spec (cJSON here, and Python's struct + json when python3 is installed);
// shape-mismatch and missing-tensor messages; corrupt and truncated files rejected with
// VKT_ERR_FORMAT; atomic replacement: a writer killed by SIGKILL midway (the
// VKT_TEST_CRASH_AFTER_BYTES hook) leaves the old checkpoint intact, and its leftover temporary
// file does not break the next write; a failed rename removes its temporary file. int64 tensors:
// an I64 round trip (a shape [] scalar included), the file's bytes, PyTorch reading it
// (nn.BatchNorm1d.load_state_dict(strict=True)), non-integral or out-of-range values refused by
// the writer, I64 values beyond 2^24 by the reader, F64 still refused by name.
#include <dirent.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "checkpoint.h"
#include "test_util.h"

static char g_dir[256];

static const char *tpath(const char *name) {
    static char buf[8][512];
    static int k;
    char *p = buf[k++ % 8];
    snprintf(p, 512, "%s/%s", g_dir, name);
    return p;
}

static bool has(const char *msg, const char *needle) { return strstr(msg, needle) != NULL; }

static uint8_t *read_all(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *p = malloc((size_t)sz + 1);
    *n = fread(p, 1, (size_t)sz, f);
    fclose(f);
    return p;
}

// Files in g_dir whose name contains ".tmp.".
static int count_temps(void) {
    DIR *d = opendir(g_dir);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL)
        n += strstr(e->d_name, ".tmp.") != NULL;
    if (d) closedir(d);
    return n;
}

// ---------------------------------------------------------------------------------------------
// The tensors of the round trip. Values follow formulas that the Python check repeats.

enum { W_R = 3, W_C = 4, B_N = 3, Q = 2 * 3 * 2 * 2 };
static float g_w[W_R * W_C], g_b[B_N], g_s[1], g_q[Q];

static void fill_values(void) {
    for (int i = 0; i < W_R * W_C; i++)
        g_w[i] = (float)i * 0.25f - 1.0f;
    for (int i = 0; i < B_N; i++)
        g_b[i] = -(float)i * 1.5f;
    g_s[0] = 3.0e-7f;
    for (int i = 0; i < Q; i++)
        g_q[i] = (float)(i * i) / 8.0f;
}

static const vkt_ckpt_tensor g_tensors[] = {
    {"0.weight", 2, {W_R, W_C}, g_w, false},   {"0.bias", 1, {B_N}, g_b, false},
    {"step scale", 0, {0}, g_s, false},        {"empty", 2, {0, 5}, NULL, false},
    {"2.weight", 4, {2, 3, 2, 2}, g_q, false},
};
#define NT (int)(sizeof g_tensors / sizeof g_tensors[0])
static const vkt_ckpt_meta g_meta[] = {
    {"format", "pt"},
    {"step", "1234"},
    {"note", "quote \" backslash \\ tab \t done"},
};
#define NM (int)(sizeof g_meta / sizeof g_meta[0])

static void test_round_trip(vt *t) {
    const char *p = tpath("a.safetensors");
    VT_OK(t, vkt_checkpoint_write(p, g_tensors, NT, g_meta, NM));
    VT_CHECK(t, count_temps() == 0, "a temporary file was left behind");
    vkt_checkpoint *ck;
    vkt_status s = vkt_checkpoint_open(p, &ck);
    VT_CHECK(t, s == VKT_OK, "%s", vkt_error());
    if (s != VKT_OK) return;
    VT_CHECK(t, vkt_checkpoint_tensor_count(ck) == NT && vkt_checkpoint_meta_count(ck) == NM,
             "%d tensors, %d metadata", vkt_checkpoint_tensor_count(ck),
             vkt_checkpoint_meta_count(ck));
    for (int i = 0; i < NT && i < vkt_checkpoint_tensor_count(ck); i++)
        VT_CHECK(t, strcmp(vkt_checkpoint_tensor_name(ck, i), g_tensors[i].name) == 0,
                 "tensor %d is %s", i, vkt_checkpoint_tensor_name(ck, i));
    for (int i = 0; i < NM; i++) {
        const char *v = vkt_checkpoint_meta(ck, g_meta[i].key);
        VT_CHECK(t, v && strcmp(v, g_meta[i].value) == 0, "metadata %s = %s", g_meta[i].key,
                 v ? v : "(none)");
    }
    VT_CHECK(t, vkt_checkpoint_meta(ck, "absent") == NULL, "absent metadata");
    for (int i = 0; i < NT; i++) {
        const vkt_ckpt_tensor *e = &g_tensors[i];
        int nd = -1;
        uint64_t sh[VKT_CKPT_MAX_DIMS] = {0};
        VT_CHECK(t, vkt_checkpoint_find(ck, e->name, &nd, sh), "find %s", e->name);
        VT_CHECK(t, nd == e->ndim && memcmp(sh, e->shape, sizeof(uint64_t) * (size_t)nd) == 0,
                 "%s: ndim %d", e->name, nd);
        VT_OK(t, vkt_checkpoint_expect(ck, e->name, e->ndim, e->shape));
        uint64_t n = 1;
        for (int d = 0; d < e->ndim; d++)
            n *= e->shape[d];
        float got[64];
        memset(got, 0xff, sizeof got);
        VT_OK(t, vkt_checkpoint_read(ck, e->name, got, n));
        VT_CHECK(t, n == 0 || memcmp(got, e->data, n * 4) == 0, "%s: data differs", e->name);
    }
    VT_CHECK(t, !vkt_checkpoint_find(ck, "nope", NULL, NULL), "find nope");

    // The messages a trainer shows when a checkpoint belongs to another model.
    uint64_t want[2] = {2, 4};
    s = vkt_checkpoint_expect(ck, "0.weight", 2, want);
    VT_CHECK(t,
             s == VKT_ERR_FORMAT && has(vkt_error(), "a.safetensors: tensor 0.weight has shape "
                                                     "[3, 4], the model needs [2, 4]"),
             "%s", vkt_error());
    s = vkt_checkpoint_expect(ck, "0.bias", 2, want);
    VT_CHECK(t, s == VKT_ERR_FORMAT && has(vkt_error(), "shape [3], the model needs [2, 4]"), "%s",
             vkt_error());
    s = vkt_checkpoint_expect(ck, "3.weight", 2, want);
    VT_CHECK(t,
             s == VKT_ERR_FORMAT && has(vkt_error(), "has no tensor 3.weight") &&
                 has(vkt_error(), "0.weight, 0.bias"),
             "%s", vkt_error());
    float tmp[16];
    s = vkt_checkpoint_read(ck, "0.weight", tmp, 11);
    VT_CHECK(t, s == VKT_ERR_ARG && has(vkt_error(), "holds 12 floats, 11 asked"), "%s",
             vkt_error());
    s = vkt_checkpoint_read(ck, "missing", tmp, 1);
    VT_CHECK(t, s == VKT_ERR_FORMAT && has(vkt_error(), "has no tensor missing"), "%s",
             vkt_error());
    vkt_checkpoint_close(ck);

    // Writer arguments.
    vkt_ckpt_tensor dup[2] = {g_tensors[0], g_tensors[0]};
    s = vkt_checkpoint_write(tpath("dup.safetensors"), dup, 2, NULL, 0);
    VT_CHECK(t, s == VKT_ERR_ARG && has(vkt_error(), "0.weight appears twice"), "%s", vkt_error());
    vkt_ckpt_tensor five = {"x", 5, {1, 1, 1, 1}, g_w, false};
    s = vkt_checkpoint_write(tpath("five.safetensors"), &five, 1, NULL, 0);
    VT_CHECK(t, s == VKT_ERR_ARG && has(vkt_error(), "5 dimensions"), "%s", vkt_error());
    s = vkt_checkpoint_write("/nonexistent-dir/x.safetensors", g_tensors, NT, NULL, 0);
    VT_CHECK(t,
             s == VKT_ERR_IO && has(vkt_error(), "/nonexistent-dir/x.safetensors") &&
                 has(vkt_error(), "No such file"),
             "%s", vkt_error());
    s = vkt_checkpoint_open(tpath("none.safetensors"), &ck);
    VT_CHECK(t, s == VKT_ERR_IO && has(vkt_error(), "none.safetensors"), "%s", vkt_error());
}

// Reads a.safetensors as the spec says, without engine code: u64 LE header length, JSON header,
// data at 8 + N + data_offsets.
static void test_spec_reader(vt *t) {
    size_t n = 0;
    uint8_t *f = read_all(tpath("a.safetensors"), &n);
    VT_CHECK(t, f && n >= 8, "read back");
    if (!f || n < 8) return;
    uint64_t hl = 0;
    for (int i = 0; i < 8; i++)
        hl |= (uint64_t)f[i] << (8 * i);
    VT_CHECK(t, 8 + hl <= n && (8 + hl) % 8 == 0, "header length %llu, file %zu",
             (unsigned long long)hl, n);
    if (8 + hl > n) {
        free(f);
        return;
    }
    VT_CHECK(t, f[8] == '{', "the header starts with {");
    cJSON *h = cJSON_ParseWithLength((const char *)f + 8, hl);
    VT_CHECK(t, h != NULL, "the header is JSON");
    uint64_t data_bytes = n - 8 - hl, total = 0;
    for (int i = 0; h && i < NT; i++) {
        const vkt_ckpt_tensor *e = &g_tensors[i];
        cJSON *o = cJSON_GetObjectItemCaseSensitive(h, e->name);
        cJSON *dt = cJSON_GetObjectItemCaseSensitive(o, "dtype");
        cJSON *sh = cJSON_GetObjectItemCaseSensitive(o, "shape");
        cJSON *off = cJSON_GetObjectItemCaseSensitive(o, "data_offsets");
        VT_CHECK(t, o && cJSON_IsString(dt) && strcmp(dt->valuestring, "F32") == 0, "%s dtype",
                 e->name);
        VT_CHECK(t, cJSON_GetArraySize(sh) == e->ndim, "%s ndim", e->name);
        uint64_t count = 1;
        for (int d = 0; d < e->ndim && d < cJSON_GetArraySize(sh); d++) {
            VT_CHECK(t, cJSON_GetArrayItem(sh, d)->valuedouble == (double)e->shape[d], "%s dim %d",
                     e->name, d);
            count *= e->shape[d];
        }
        if (cJSON_GetArraySize(off) != 2) {
            VT_CHECK(t, false, "%s data_offsets", e->name);
            continue;
        }
        uint64_t b = (uint64_t)cJSON_GetArrayItem(off, 0)->valuedouble;
        uint64_t en = (uint64_t)cJSON_GetArrayItem(off, 1)->valuedouble;
        VT_CHECK(t, en - b == count * 4 && en <= data_bytes, "%s offsets [%llu, %llu]", e->name,
                 (unsigned long long)b, (unsigned long long)en);
        if (en - b == count * 4 && en <= data_bytes && count)
            VT_CHECK(t, memcmp(f + 8 + hl + b, e->data, count * 4) == 0, "%s bytes", e->name);
        total += count * 4;
    }
    VT_CHECK(t, total == data_bytes, "data %llu bytes, tensors %llu",
             (unsigned long long)data_bytes, (unsigned long long)total);
    cJSON *m = cJSON_GetObjectItemCaseSensitive(h, "__metadata__");
    cJSON *step = cJSON_GetObjectItemCaseSensitive(m, "step");
    VT_CHECK(t, cJSON_IsString(step) && strcmp(step->valuestring, "1234") == 0, "__metadata__");
    cJSON_Delete(h);
    free(f);

    // Python's struct + json, an implementation that shares nothing with this one.
    if (system("python3 -c 'import json, struct' >/dev/null 2>&1") != 0) {
        printf("test_checkpoint: note: no python3; the Python reader check is skipped\n");
        return;
    }
    const char *script =
        "import json, struct, sys\n"
        "raw = open(sys.argv[1], 'rb').read()\n"
        "(n,) = struct.unpack('<Q', raw[:8])\n"
        "h = json.loads(raw[8:8 + n].decode('utf-8'))\n"
        "data = raw[8 + n:]\n"
        "def get(name):\n"
        "    e = h[name]\n"
        "    assert e['dtype'] == 'F32', e\n"
        "    b, en = e['data_offsets']\n"
        "    return e['shape'], list(struct.unpack('<%df' % ((en - b) // 4), data[b:en]))\n"
        "shape, w = get('0.weight')\n"
        "assert shape == [3, 4] and w == [i * 0.25 - 1.0 for i in range(12)], w\n"
        "shape, bias = get('0.bias')\n"
        "assert shape == [3] and bias == [-i * 1.5 for i in range(3)], bias\n"
        "shape, s = get('step scale')\n"
        "assert shape == [] and abs(s[0] - 3e-7) < 1e-13, s\n"
        "shape, e = get('empty')\n"
        "assert shape == [0, 5] and e == [], e\n"
        "shape, q = get('2.weight')\n"
        "assert shape == [2, 3, 2, 2] and q == [i * i / 8.0 for i in range(24)], q\n"
        "assert h['__metadata__'] == {'format': 'pt', 'step': '1234',\n"
        "    'note': 'quote \" backslash \\\\ tab \\t done'}, h['__metadata__']\n"
        "ends = sorted(e['data_offsets'] for k, e in h.items() if k != '__metadata__')\n"
        "assert ends[0][0] == 0 and ends[-1][1] == len(data)\n"
        "assert all(a[1] == b[0] for a, b in zip(ends, ends[1:]))\n"
        "assert (8 + n) % 8 == 0\n";
    vt_write_file(tpath("check.py"), script, strlen(script));
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "python3 '%s' '%s'", tpath("check.py"), tpath("a.safetensors"));
    int rc = system(cmd);
    VT_CHECK(t, rc == 0, "the Python safetensors reader rejected the file (status %d)", rc);
}

// ---------------------------------------------------------------------------------------------
// Corrupt files

// A hand-made file: the header text (not padded unless the caller pads it) and data bytes.
static const char *make_st(const char *name, const char *header, size_t data_bytes) {
    size_t hl = strlen(header);
    uint8_t *buf = calloc(1, 8 + hl + data_bytes + 1);
    for (int i = 0; i < 8; i++)
        buf[i] = (uint8_t)((uint64_t)hl >> (8 * i));
    memcpy(buf + 8, header, hl);
    for (size_t i = 0; i < data_bytes; i++)
        buf[8 + hl + i] = (uint8_t)i;
    const char *p = tpath(name);
    vt_write_file(p, buf, 8 + hl + data_bytes);
    free(buf);
    return p;
}

static void expect_bad(vt *t, const char *path, vkt_status want, const char *n1, const char *n2) {
    vkt_checkpoint *ck = (vkt_checkpoint *)1;
    vkt_status s = vkt_checkpoint_open(path, &ck);
    VT_CHECK(t, s == want, "%s: %s (%s), expected %s", path, vkt_status_name(s), vkt_error(),
             vkt_status_name(want));
    VT_CHECK(t, ck == NULL, "%s: a failed open returns NULL", path);
    VT_CHECK(t, has(vkt_error(), path), "\"%s\" does not name the file", vkt_error());
    VT_CHECK(t, has(vkt_error(), n1), "\"%s\" lacks \"%s\"", vkt_error(), n1);
    if (n2) VT_CHECK(t, has(vkt_error(), n2), "\"%s\" lacks \"%s\"", vkt_error(), n2);
    if (s == VKT_OK) vkt_checkpoint_close(ck);
}

// A header of 100,000 empty tensors (5 MB) whose last name repeats one of the first: refused as
// a repeat, in time linear in the entries (pairwise it took 72 s); the same header with the
// metadata naming a key twice too.
static void test_many_names(vt *t) {
    enum { N = 100000 };
    size_t cap = (size_t)N * 96 + 256, n = 0;
    char *h = malloc(cap);
    n += (size_t)snprintf(h + n, cap - n, "{");
    for (int i = 0; i < N; i++)
        n += (size_t)snprintf(h + n, cap - n,
                              "\"t%d\": {\"dtype\": \"F32\", \"shape\": [0], \"data_offsets\": "
                              "[0, 0]}, ",
                              i == N - 1 ? 12345 : i);
    size_t body = n;
    snprintf(h + n, cap - n, "\"__metadata__\": {\"a\": \"1\"}}");
    expect_bad(t, make_st("many.safetensors", h, 0), VKT_ERR_FORMAT, "names \"t12345\" twice",
               "corrupt header");
    // The last tensor renamed: no repeat among the tensors, one among the metadata keys.
    n = body - (size_t)snprintf(NULL, 0,
                                "\"t12345\": {\"dtype\": \"F32\", \"shape\": [0], "
                                "\"data_offsets\": [0, 0]}, ");
    snprintf(h + n, cap - n,
             "\"last\": {\"dtype\": \"F32\", \"shape\": [0], \"data_offsets\": [0, 0]}, "
             "\"__metadata__\": {\"a\": \"1\", \"a\": \"2\"}}");
    expect_bad(t, make_st("manymeta.safetensors", h, 0), VKT_ERR_FORMAT,
               "the metadata names \"a\" twice", NULL);
    free(h);
}

static void test_corrupt(vt *t) {
    size_t n = 0;
    uint8_t *good = read_all(tpath("a.safetensors"), &n);
    if (!good) {
        VT_CHECK(t, false, "no a.safetensors");
        return;
    }
    uint64_t hl = 0;
    for (int i = 0; i < 8; i++)
        hl |= (uint64_t)good[i] << (8 * i);

    vt_write_file(tpath("cut.safetensors"), good, n - 4);
    expect_bad(t, tpath("cut.safetensors"), VKT_ERR_FORMAT, "truncated",
               "holds 156"); // 160 bytes of data, 4 cut
    vt_write_file(tpath("cuthdr.safetensors"), good, 20);
    expect_bad(t, tpath("cuthdr.safetensors"), VKT_ERR_FORMAT, "truncated", "header alone");
    vt_write_file(tpath("tiny.safetensors"), good, 5);
    expect_bad(t, tpath("tiny.safetensors"), VKT_ERR_FORMAT, "truncated", "5 bytes");
    vt_write_file(tpath("empty.safetensors"), good, 0);
    expect_bad(t, tpath("empty.safetensors"), VKT_ERR_FORMAT, "truncated", NULL);

    uint8_t *bad = malloc(n + 16);
    memcpy(bad, good, n);
    memcpy(bad + n, "trailing", 8);
    vt_write_file(tpath("long.safetensors"), bad, n + 8);
    expect_bad(t, tpath("long.safetensors"), VKT_ERR_FORMAT, "8 unexpected bytes", NULL);

    memcpy(bad, good, n);
    bad[5] = 1; // header length 2^40
    vt_write_file(tpath("hlen.safetensors"), bad, n);
    expect_bad(t, tpath("hlen.safetensors"), VKT_ERR_FORMAT, "header length 10995116",
               "not plausible");
    memcpy(bad, good, n);
    char *q = memchr(bad + 8 + 10, '"', hl - 10); // break a string in the JSON
    if (q) *q = '#';
    vt_write_file(tpath("json.safetensors"), bad, n);
    expect_bad(t, tpath("json.safetensors"), VKT_ERR_FORMAT, "not valid JSON", "at byte");
    free(bad);
    free(good);

    expect_bad(t,
               make_st("f16.safetensors",
                       "{\"w\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[0,4]}}", 4),
               VKT_ERR_FORMAT, "tensor w has dtype F16", "only F32");
    expect_bad(t,
               make_st("bf16.safetensors",
                       "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                       "\"w\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[4,8]}}",
                       8),
               VKT_ERR_FORMAT, "tensor w has dtype BF16", NULL);
    expect_bad(t,
               make_st("size.safetensors",
                       "{\"w\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8),
               VKT_ERR_FORMAT, "tensor w: shape [3] needs 12 bytes", "hold 8");
    expect_bad(t,
               make_st("gap.safetensors",
                       "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                       "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}",
                       12),
               VKT_ERR_FORMAT, "tensor b's data starts at byte 8", "gap");
    expect_bad(t,
               make_st("overlap.safetensors",
                       "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                       "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
                       8),
               VKT_ERR_FORMAT, "overlap", NULL);
    expect_bad(t,
               make_st("past.safetensors",
                       "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 8),
               VKT_ERR_FORMAT, "truncated", "describes 16 bytes");
    // Found by fuzz_checkpoint: a tensor named "" was accepted, and then found under "".
    expect_bad(t,
               make_st("noname.safetensors",
                       "{\"\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4),
               VKT_ERR_FORMAT, "a tensor has an empty name", "corrupt header");
    expect_bad(t,
               make_st("meta.safetensors",
                       "{\"__metadata__\":{\"step\":5},"
                       "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
                       4),
               VKT_ERR_FORMAT, "metadata value of \"step\" is not a string", NULL);
    expect_bad(
        t, make_st("noshape.safetensors", "{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", 4),
        VKT_ERR_FORMAT, "tensor a lacks", NULL);
    expect_bad(t,
               make_st("neg.safetensors",
                       "{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4),
               VKT_ERR_FORMAT, "shape[0] is not a non-negative integer", NULL);
    expect_bad(t, make_st("array.safetensors", "[1, 2, 3]", 0), VKT_ERR_FORMAT,
               "does not start with '{'", NULL);
    expect_bad(t,
               make_st("twice.safetensors",
                       "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                       "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
                       8),
               VKT_ERR_FORMAT, "names \"a\" twice", NULL);

    // A shape whose element count overflows says so instead of printing what it wrapped to.
    expect_bad(t,
               make_st("wrap.safetensors",
                       "{\"w\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,16],"
                       "\"data_offsets\":[0,0]}}",
                       0),
               VKT_ERR_FORMAT, "needs over 2^61 bytes", NULL);
    // A header nested past the JSON reader's 1000 levels is reported as that, with where (the
    // object and 1000 arrays: the '[' opening level 1001 is byte 8 + 6 + 999 of the file).
    {
        char deep[2100];
        size_t k = 0;
        k += (size_t)snprintf(deep, sizeof deep, "{\"a\": ");
        for (int i = 0; i < 1000; i++)
            deep[k++] = '[';
        for (int i = 0; i < 1000; i++)
            deep[k++] = ']';
        snprintf(deep + k, sizeof deep - k, "}");
        expect_bad(t, make_st("deep.safetensors", deep, 0), VKT_ERR_FORMAT,
                   "deeper than 1000 levels", "at byte 1013 of the file");
    }

    // Spec-valid files other writers make: an unpadded header, tensors not in offset order,
    // trailing spaces, a null __metadata__.
    vkt_checkpoint *ck;
    const char *p = make_st("other.safetensors",
                            "{\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]},"
                            "\"__metadata__\":null,"
                            "\"a\":{\"dtype\":\"F32\",\"shape\":[1,1],\"data_offsets\":[0,4]}}   ",
                            8);
    vkt_status s = vkt_checkpoint_open(p, &ck);
    VT_CHECK(t, s == VKT_OK, "a spec-valid file: %s", vkt_error());
    if (s == VKT_OK) {
        float a = 0, b = 0;
        VT_OK(t, vkt_checkpoint_read(ck, "a", &a, 1));
        VT_OK(t, vkt_checkpoint_read(ck, "b", &b, 1));
        uint8_t ab[4] = {0, 1, 2, 3}, bb[4] = {4, 5, 6, 7};
        VT_CHECK(t, memcmp(&a, ab, 4) == 0 && memcmp(&b, bb, 4) == 0, "offsets honoured");
        VT_CHECK(t, vkt_checkpoint_meta_count(ck) == 0, "no metadata");
        vkt_checkpoint_close(ck);
    }
}

// ---------------------------------------------------------------------------------------------
// Atomic replacement

static void test_atomic(vt *t) {
    const char *p = tpath("run.safetensors");
    float old_v[8], new_v[8];
    for (int i = 0; i < 8; i++)
        old_v[i] = (float)i + 0.5f, new_v[i] = -(float)i;
    vkt_ckpt_tensor old_t = {"w", 1, {8}, old_v, false};
    vkt_ckpt_meta old_m = {"version", "old"};
    VT_OK(t, vkt_checkpoint_write(p, &old_t, 1, &old_m, 1));

    // A 16 MiB checkpoint over it, killed after 1,000,000 bytes.
    enum { BIG = 4 << 20 };
    float *big = malloc(BIG * sizeof(float));
    for (int i = 0; i < BIG; i++)
        big[i] = (float)i;
    vkt_ckpt_tensor big_t[2] = {{"w", 1, {8}, new_v, false},
                                {"big", 2, {BIG / 1024, 1024}, big, false}};
    vkt_ckpt_meta new_m = {"version", "new"};
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        setenv("VKT_TEST_CRASH_AFTER_BYTES", "1000000", 1);
        vkt_status s = vkt_checkpoint_write(p, big_t, 2, &new_m, 1);
        fprintf(stderr, "test_checkpoint: child: the write returned %s instead of dying\n",
                vkt_status_name(s));
        _exit(3);
    }
    int status = 0;
    VT_CHECK(t, pid > 0 && waitpid(pid, &status, 0) == pid, "fork/wait");
    VT_CHECK(t, WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL,
             "the writer was not killed by SIGKILL (status 0x%x)", status);
    char tmp[600];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", p, (long)pid);
    struct stat st;
    VT_CHECK(t, stat(tmp, &st) == 0 && st.st_size == 1000000,
             "the killed writer's temporary file %s should hold exactly 1000000 bytes", tmp);

    // The old checkpoint is intact.
    vkt_checkpoint *ck;
    vkt_status s = vkt_checkpoint_open(p, &ck);
    VT_CHECK(t, s == VKT_OK, "the old checkpoint no longer opens: %s", vkt_error());
    if (s == VKT_OK) {
        float got[8];
        VT_OK(t, vkt_checkpoint_read(ck, "w", got, 8));
        const char *v = vkt_checkpoint_meta(ck, "version");
        VT_CHECK(t, memcmp(got, old_v, sizeof got) == 0 && v && strcmp(v, "old") == 0,
                 "the old checkpoint changed");
        VT_CHECK(t, !vkt_checkpoint_find(ck, "big", NULL, NULL), "the new tensor leaked in");
        vkt_checkpoint_close(ck);
    }

    // The next write succeeds and removes the dead writer's leftover.
    VT_OK(t, vkt_checkpoint_write(p, big_t, 2, &new_m, 1));
    VT_CHECK(t, stat(tmp, &st) != 0, "the stale temporary file %s survived the next write", tmp);
    VT_CHECK(t, count_temps() == 0, "temporary files left: %d", count_temps());
    s = vkt_checkpoint_open(p, &ck);
    VT_CHECK(t, s == VKT_OK, "%s", vkt_error());
    if (s == VKT_OK) {
        float got[8];
        VT_OK(t, vkt_checkpoint_read(ck, "w", got, 8));
        float *back = malloc(BIG * sizeof(float));
        VT_OK(t, vkt_checkpoint_read(ck, "big", back, BIG));
        const char *v = vkt_checkpoint_meta(ck, "version");
        VT_CHECK(t,
                 memcmp(got, new_v, sizeof got) == 0 &&
                     memcmp(back, big, BIG * sizeof(float)) == 0 && v && strcmp(v, "new") == 0,
                 "the new checkpoint reads back wrong");
        free(back);
        vkt_checkpoint_close(ck);
    }

    // A target that is not a regular file (here a directory; a symbolic link, a FIFO and a device
    // alike, test_cli_train) is refused before anything is written: no temporary file, the
    // directory still there.
    char dir_target[600];
    snprintf(dir_target, sizeof dir_target, "%s/isdir.safetensors", g_dir);
    mkdir(dir_target, 0700);
    s = vkt_checkpoint_write(dir_target, &old_t, 1, NULL, 0);
    VT_CHECK(t,
             s == VKT_ERR_IO && has(vkt_error(), "isdir.safetensors") &&
                 has(vkt_error(), "not a regular file (a directory)"),
             "%s: %s", vkt_status_name(s), vkt_error());
    struct stat dst;
    VT_CHECK(t, stat(dir_target, &dst) == 0 && S_ISDIR(dst.st_mode), "the directory is gone");
    VT_CHECK(t, count_temps() == 0, "a refused write left %d temporary file(s)", count_temps());
    free(big);
}

// More metadata pairs than tensors (a training checkpoint has ~15 keys and may hold 2 tensors):
// every pair reads back.
static void test_many_metadata(vt *t) {
    enum { NMETA = 40 };
    char keys[NMETA][16], values[NMETA][16];
    vkt_ckpt_meta meta[NMETA];
    for (int i = 0; i < NMETA; i++) {
        snprintf(keys[i], sizeof keys[i], "key%d", i);
        snprintf(values[i], sizeof values[i], "value%d", i * 7);
        meta[i] = (vkt_ckpt_meta){keys[i], values[i]};
    }
    float one = 3.5f;
    vkt_ckpt_tensor tensor = {.name = "w", .ndim = 1, .shape = {1}, .data = &one};
    const char *p = tpath("meta.safetensors");
    VT_OK(t, vkt_checkpoint_write(p, &tensor, 1, meta, NMETA));
    vkt_checkpoint *ck = NULL;
    VT_OK(t, vkt_checkpoint_open(p, &ck));
    if (!ck) return;
    VT_CHECK(t, vkt_checkpoint_meta_count(ck) == NMETA, "%d metadata pairs read back, want %d",
             vkt_checkpoint_meta_count(ck), NMETA);
    for (int i = 0; i < NMETA; i++) {
        const char *v = vkt_checkpoint_meta(ck, keys[i]);
        VT_CHECK(t, v && strcmp(v, values[i]) == 0, "metadata %s = %s, want %s", keys[i],
                 v ? v : "(missing)", values[i]);
    }
    vkt_checkpoint_close(ck);
}

// ---------------------------------------------------------------------------------------------
// int64 tensors (batchnorm's num_batches_tracked): I64 in the file, floats in the engine.

static float g_bn_w[2] = {1.0f, 0.5f}, g_bn_b[2] = {0.0f, -0.25f}, g_bn_mean[2] = {0.125f, -3.0f},
             g_bn_var[2] = {1.5f, 0.75f}, g_bn_nbt[1] = {12345.0f},
             g_counts[6] = {0.0f, -7.0f, 1.0f, 16777216.0f, -16777216.0f, 3.0f};
// torch.nn.BatchNorm1d(2)'s state_dict, and a [2, 3] int64 tensor at the edges of what reads back.
static const vkt_ckpt_tensor g_i64[] = {
    {"weight", 1, {2}, g_bn_w, false},
    {"bias", 1, {2}, g_bn_b, false},
    {"running_mean", 1, {2}, g_bn_mean, false},
    {"running_var", 1, {2}, g_bn_var, false},
    {"num_batches_tracked", 0, {0}, g_bn_nbt, true},
    {"counts", 2, {2, 3}, g_counts, true},
};
#define NI64 (int)(sizeof g_i64 / sizeof g_i64[0])

static void test_int64(vt *t) {
    const char *p = tpath("i64.safetensors");
    VT_OK(t, vkt_checkpoint_write(p, g_i64, NI64, g_meta, NM));
    vkt_checkpoint *ck;
    vkt_status s = vkt_checkpoint_open(p, &ck);
    VT_CHECK(t, s == VKT_OK, "%s", vkt_error());
    if (s != VKT_OK) return;
    for (int i = 0; i < NI64; i++) {
        const vkt_ckpt_tensor *e = &g_i64[i];
        const char *dt = vkt_checkpoint_dtype(ck, e->name);
        VT_CHECK(t, dt && strcmp(dt, e->int64 ? "I64" : "F32") == 0, "%s: dtype %s", e->name,
                 dt ? dt : "(none)");
        VT_OK(t, vkt_checkpoint_expect(ck, e->name, e->ndim, e->shape));
        uint64_t n = 1;
        for (int d = 0; d < e->ndim; d++)
            n *= e->shape[d];
        float got[8];
        memset(got, 0xff, sizeof got);
        VT_OK(t, vkt_checkpoint_read(ck, e->name, got, n));
        VT_CHECK(t, memcmp(got, e->data, n * 4) == 0, "%s reads back other values", e->name);
    }
    int nd = -1;
    VT_CHECK(t, vkt_checkpoint_find(ck, "num_batches_tracked", &nd, NULL) && nd == 0,
             "num_batches_tracked: ndim %d, want 0 (shape [])", nd);
    VT_CHECK(t, vkt_checkpoint_dtype(ck, "absent") == NULL, "dtype of an absent tensor");
    float tmp[8];
    s = vkt_checkpoint_read(ck, "counts", tmp, 5);
    VT_CHECK(t, s == VKT_ERR_ARG && has(vkt_error(), "holds 6 int64 values, 5 asked"), "%s",
             vkt_error());
    vkt_checkpoint_close(ck);

    // The file as the spec says: I64 entries of 8 bytes an element, little-endian int64s.
    size_t n = 0;
    uint8_t *f = read_all(p, &n);
    uint64_t hl = 0;
    for (int i = 0; f && n >= 8 && i < 8; i++)
        hl |= (uint64_t)f[i] << (8 * i);
    cJSON *h = f && 8 + hl <= n ? cJSON_ParseWithLength((const char *)f + 8, hl) : NULL;
    VT_CHECK(t, h != NULL, "the header of i64.safetensors is not JSON");
    for (int i = 0; h && i < NI64; i++) {
        cJSON *o = cJSON_GetObjectItemCaseSensitive(h, g_i64[i].name);
        cJSON *dt = cJSON_GetObjectItemCaseSensitive(o, "dtype");
        cJSON *sh = cJSON_GetObjectItemCaseSensitive(o, "shape");
        cJSON *off = cJSON_GetObjectItemCaseSensitive(o, "data_offsets");
        VT_CHECK(t,
                 cJSON_IsString(dt) &&
                     strcmp(dt->valuestring, g_i64[i].int64 ? "I64" : "F32") == 0 &&
                     cJSON_IsArray(sh) && cJSON_GetArraySize(sh) == g_i64[i].ndim &&
                     cJSON_GetArraySize(off) == 2,
                 "%s: header entry", g_i64[i].name);
        if (!g_i64[i].int64 || cJSON_GetArraySize(off) != 2) continue;
        uint64_t b = (uint64_t)cJSON_GetArrayItem(off, 0)->valuedouble;
        uint64_t en = (uint64_t)cJSON_GetArrayItem(off, 1)->valuedouble;
        uint64_t count = g_i64[i].ndim ? g_i64[i].shape[0] * g_i64[i].shape[1] : 1;
        VT_CHECK(t, en - b == count * 8 && 8 + hl + en <= n, "%s: %llu bytes", g_i64[i].name,
                 (unsigned long long)(en - b));
        for (uint64_t k = 0; en - b == count * 8 && 8 + hl + en <= n && k < count; k++) {
            int64_t v;
            memcpy(&v, f + 8 + hl + b + k * 8, 8);
            VT_CHECK(t, v == (int64_t)g_i64[i].data[k], "%s[%llu] = %lld in the file",
                     g_i64[i].name, (unsigned long long)k, (long long)v);
        }
    }
    cJSON_Delete(h);
    free(f);

    // PyTorch: the file's I64 tensor is torch.int64 of shape [], and nn.BatchNorm1d(2) loads the
    // state_dict with strict=True (safetensors.torch.load_file when python3-safetensors is there,
    // a reader of the spec otherwise).
    if (system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") != 0) {
        printf("test_checkpoint: note: no python3-torch; the PyTorch check of I64 is skipped\n");
    } else {
        const char *script =
            "import json, struct, sys, torch\n"
            "path = sys.argv[1]\n"
            "try:\n"
            "    from safetensors.torch import load_file\n"
            "    sd, how = load_file(path), 'safetensors.torch.load_file'\n"
            "except ImportError:\n"
            "    raw = open(path, 'rb').read(); (n,) = struct.unpack('<Q', raw[:8])\n"
            "    h = json.loads(raw[8:8 + n]); data = raw[8 + n:]; sd = {}\n"
            "    for k, e in h.items():\n"
            "        if k == '__metadata__': continue\n"
            "        dt = {'F32': torch.float32, 'I64': torch.int64}[e['dtype']]\n"
            "        b, en = e['data_offsets']\n"
            "        sd[k] = torch.frombuffer(bytearray(data[b:en]), "
            "dtype=dt).reshape(e['shape'])\n"
            "    how = 'the spec (no python3-safetensors)'\n"
            "nbt = sd['num_batches_tracked']\n"
            "assert nbt.dtype == torch.int64 and nbt.shape == torch.Size([]) and int(nbt) == "
            "12345, nbt\n"
            "c = sd['counts']\n"
            "assert c.dtype == torch.int64 and c.tolist() == [[0, -7, 1], [16777216, -16777216, "
            "3]], c\n"
            "bn = torch.nn.BatchNorm1d(2)\n"
            "bn.load_state_dict({k: v for k, v in sd.items() if k != 'counts'}, strict=True)\n"
            "assert int(bn.num_batches_tracked) == 12345 and bn.running_var.tolist() == [1.5, "
            "0.75]\n"
            "print('test_checkpoint: PyTorch reads the I64 checkpoint through ' + how)\n";
        vt_write_file(tpath("i64.py"), script, strlen(script));
        char cmd[1200];
        snprintf(cmd, sizeof cmd, "/usr/bin/python3 '%s' '%s'", tpath("i64.py"), p);
        int rc = system(cmd);
        VT_CHECK(t, rc == 0, "PyTorch rejected the I64 checkpoint (status %d)", rc);
    }

    // The writer refuses what int64 cannot hold exactly, and writes nothing then.
    float half[2] = {2.0f, 1.5f}, nan1[1] = {NAN}, huge[1] = {1e19f};
    vkt_ckpt_tensor bad[] = {
        {"n", 1, {2}, half, true}, {"n", 0, {0}, nan1, true}, {"n", 0, {0}, huge, true}};
    const char *why[] = {"element 1 is 1.5, not a whole number", "element 0 is nan",
                         "outside int64's range"};
    for (int i = 0; i < 3; i++) {
        s = vkt_checkpoint_write(tpath("badi64.safetensors"), &bad[i], 1, NULL, 0);
        VT_CHECK(t,
                 s == VKT_ERR_ARG && has(vkt_error(), "tensor n is written as int64") &&
                     has(vkt_error(), why[i]),
                 "%s: %s", vkt_status_name(s), vkt_error());
    }
    struct stat st;
    VT_CHECK(t, stat(tpath("badi64.safetensors"), &st) != 0 && count_temps() == 0,
             "a refused int64 write left a file");

    // The reader refuses I64 values a float would not hold exactly (beyond +-2^24).
    float big[2] = {3.0f, -33554432.0f}; // -2^25: a float, but not every integer near it is
    vkt_ckpt_tensor bt = {"1.num_batches_tracked", 1, {2}, big, true};
    VT_OK(t, vkt_checkpoint_write(tpath("big.safetensors"), &bt, 1, NULL, 0));
    s = vkt_checkpoint_open(tpath("big.safetensors"), &ck);
    VT_CHECK(t, s == VKT_OK, "%s", vkt_error());
    if (s == VKT_OK) {
        s = vkt_checkpoint_read(ck, "1.num_batches_tracked", tmp, 2);
        VT_CHECK(t,
                 s == VKT_ERR_FORMAT && has(vkt_error(), "big.safetensors") &&
                     has(vkt_error(), "tensor 1.num_batches_tracked (I64) holds -33554432 at "
                                      "element 1, beyond 2^24"),
                 "%s: %s", vkt_status_name(s), vkt_error());
        vkt_checkpoint_close(ck);
    }
    // Another writer's I64 (bytes 0..7: 0x0706050403020100), and F64 and wrong I64 sizes.
    p = make_st("raw64.safetensors",
                "{\"c\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[0,8]}}", 8);
    s = vkt_checkpoint_open(p, &ck);
    VT_CHECK(t, s == VKT_OK, "%s", vkt_error());
    if (s == VKT_OK) {
        s = vkt_checkpoint_read(ck, "c", tmp, 1);
        VT_CHECK(t, s == VKT_ERR_FORMAT && has(vkt_error(), "holds 506097522914230528"), "%s",
                 vkt_error());
        vkt_checkpoint_close(ck);
    }
    expect_bad(t,
               make_st("f64.safetensors",
                       "{\"w\":{\"dtype\":\"F64\",\"shape\":[2],\"data_offsets\":[0,16]}}", 16),
               VKT_ERR_FORMAT, "tensor w has dtype F64", "only F32 and I64");
    expect_bad(t,
               make_st("i64size.safetensors",
                       "{\"w\":{\"dtype\":\"I64\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8),
               VKT_ERR_FORMAT, "shape [2] needs 16 bytes of I64", "hold 8");
}

int main(void) {
    vt t = {.name = "test_checkpoint"};
    const char *tmpdir = getenv("TMPDIR");
    snprintf(g_dir, sizeof g_dir, "%s/vkt_test_ckpt.XXXXXX", tmpdir && *tmpdir ? tmpdir : "/tmp");
    if (!mkdtemp(g_dir)) {
        perror("mkdtemp");
        return 1;
    }
    fill_values();
    test_round_trip(&t);
    test_spec_reader(&t);
    test_corrupt(&t);
    test_atomic(&t);
    test_many_metadata(&t);
    test_int64(&t);
    test_many_names(&t);
    vt_remove_dir(g_dir);
    return vt_finish(&t);
}
