// compare_read.c: `vktrain compare`'s reader of bench suite results (compare.h): the file read
// (a regular file, at most 64 MiB), parsed with cJSON, and every field the tables and pictures
// use checked for its type and range, so that a refusal names the file and the JSON path, what
// was found and what was expected; then the questions the tables and pictures ask of a result.
// Fields compare does not use (host, split, command, ...) are not checked. Not here: output.
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "compare.h"
#include "vkt_internal.h"

#define SUITE_FORMAT "vktrain-bench-suite"
#define SUITE_VERSION 1
#define MAX_RESULT_FILE (64u << 20)
#define RERUN "rerun `vktrain bench suite --out FILE.json` to write one"

void cmp_result_free(cmp_result *r) {
    free(r->mm);
    free(r->tr);
    free(r->sat);
}

// ---------------------------------------------------------------------------------------------
// Reading: every refusal names the file and the JSON path, what was found and what is expected.

static const char *kind_of(const cJSON *v) {
    if (!v) return "missing";
    if (cJSON_IsNull(v)) return "null";
    if (cJSON_IsBool(v)) return "true/false";
    if (cJSON_IsNumber(v)) return "a number";
    if (cJSON_IsString(v)) return "a string";
    if (cJSON_IsArray(v)) return "an array";
    return "an object";
}

static vkt_status bad_field(const char *file, const char *path, const cJSON *v,
                            const char *expected) {
    if (!v)
        return vkt_fail(VKT_ERR_FORMAT,
                        "%s: %s is missing (expected %s); a complete result of `vktrain bench "
                        "suite` has it: rerun the suite, or fix the file",
                        file, path, expected);
    return vkt_fail(VKT_ERR_FORMAT, "%s: %s is %s, expected %s", file, path, kind_of(v), expected);
}

static const cJSON *field(const cJSON *o, const char *key) {
    return cJSON_GetObjectItemCaseSensitive(o, key);
}

static void join(char *out, size_t size, const char *prefix, const char *key) {
    snprintf(out, size, "%s%s%s", prefix, *prefix ? "." : "", key);
}

enum { OPTIONAL = 1, NULLABLE = 2, POSITIVE = 4 };

// A finite number >= 0 (> 0 with POSITIVE). Absent (OPTIONAL) or null (NULLABLE): *out = -1.
static vkt_status get_num(const char *file, const cJSON *o, const char *prefix, const char *key,
                          int flags, double *out) {
    char path[160];
    join(path, sizeof path, prefix, key);
    const cJSON *v = field(o, key);
    *out = -1;
    if ((!v && (flags & OPTIONAL)) || (cJSON_IsNull(v) && (flags & NULLABLE))) return VKT_OK;
    const char *want = flags & POSITIVE
                           ? (flags & NULLABLE ? "a number > 0 or null" : "a number > 0")
                           : (flags & NULLABLE ? "a number >= 0 or null" : "a number >= 0");
    if (!cJSON_IsNumber(v)) return bad_field(file, path, v, want);
    double d = v->valuedouble;
    if (!isfinite(d) || d < 0 || (d == 0 && (flags & POSITIVE)))
        return vkt_fail(VKT_ERR_FORMAT, "%s: %s is %g, expected %s", file, path, d, want);
    *out = d;
    return VKT_OK;
}

static vkt_status get_int(const char *file, const cJSON *o, const char *prefix, const char *key,
                          int lo, int hi, int *out) {
    char path[160];
    join(path, sizeof path, prefix, key);
    const cJSON *v = field(o, key);
    char want[64];
    snprintf(want, sizeof want, "an integer from %d to %d", lo, hi);
    if (!cJSON_IsNumber(v)) return bad_field(file, path, v, want);
    double d = v->valuedouble;
    if (!(d >= lo && d <= hi) || d != floor(d))
        return vkt_fail(VKT_ERR_FORMAT, "%s: %s is %g, expected %s", file, path, d, want);
    *out = (int)d;
    return VKT_OK;
}

static vkt_status get_str(const char *file, const cJSON *o, const char *prefix, const char *key,
                          bool required, char *out, size_t size) {
    char path[160];
    join(path, sizeof path, prefix, key);
    const cJSON *v = field(o, key);
    out[0] = 0;
    if (!v && !required) return VKT_OK;
    if (!cJSON_IsString(v) || (required && !v->valuestring[0]))
        return bad_field(file, path, v, "a non-empty string");
    snprintf(out, size, "%s", v->valuestring);
    return VKT_OK;
}

static vkt_status get_bool(const char *file, const cJSON *o, const char *prefix, const char *key,
                           bool required, bool *out) {
    char path[160];
    join(path, sizeof path, prefix, key);
    const cJSON *v = field(o, key);
    *out = false;
    if (!v && !required) return VKT_OK;
    if (!cJSON_IsBool(v)) return bad_field(file, path, v, "true or false");
    *out = cJSON_IsTrue(v);
    return VKT_OK;
}

static vkt_status get_obj(const char *file, const cJSON *o, const char *key, const cJSON **out) {
    *out = field(o, key);
    if (!cJSON_IsObject(*out)) return bad_field(file, key, *out, "an object");
    return VKT_OK;
}

static vkt_status get_arr(const char *file, const cJSON *o, const char *key, const cJSON **out,
                          int *n) {
    *out = field(o, key);
    if (!cJSON_IsArray(*out)) return bad_field(file, key, *out, "an array");
    *n = cJSON_GetArraySize(*out);
    return VKT_OK;
}

static vkt_status bad_json(const char *file, const char *text, size_t len, const char *at) {
    size_t off = at && at >= text && at <= text + len ? (size_t)(at - text) : len;
    int line = 1, col = 1;
    for (size_t i = 0; i < off; i++) {
        if (text[i] == '\n')
            line++, col = 1;
        else
            col++;
    }
    // Whitespace up to the end is the end: cJSON points at the last byte it read.
    size_t rest = off;
    while (rest < len && isspace((unsigned char)text[rest]))
        rest++;
    if (off >= len || rest >= len)
        return vkt_fail(VKT_ERR_FORMAT,
                        "%s: invalid JSON: the text ends early at byte %zu (line %d, column %d): "
                        "the file is cut short (an interrupted copy or run?); %s",
                        file, len, line, col, RERUN);
    char near[24];
    size_t n = 0;
    for (size_t i = off; i < len && n < 20 && text[i] != '\n'; i++)
        near[n++] = isprint((unsigned char)text[i]) ? text[i] : '?';
    near[n] = 0;
    return vkt_fail(VKT_ERR_FORMAT,
                    "%s: invalid JSON at byte %zu (line %d, column %d), near \"%s\": not a result "
                    "of `vktrain bench suite`, or damaged; %s",
                    file, off, line, col, near, RERUN);
}

static vkt_status read_text(const char *path, char **out, size_t *len) {
    *out = NULL;
    int fd = vkt_open_input(path, "result file",
                            "(write one with `vktrain bench suite --out "
                            "FILE.json`)");
    if (fd < 0) return VKT_ERR_IO;
    FILE *f = fdopen(fd, "rb");
    char *text = f ? malloc(MAX_RESULT_FILE + 1) : NULL;
    if (!f || !text) {
        if (f)
            fclose(f);
        else
            close(fd);
        free(text);
        return vkt_fail(VKT_ERR_HOST_MEMORY, "out of host memory reading %s", path);
    }
    size_t n = fread(text, 1, MAX_RESULT_FILE + 1, f);
    bool err = ferror(f);
    fclose(f);
    vkt_status s = VKT_OK;
    if (err)
        s = vkt_fail(VKT_ERR_IO, "cannot read the result file %s: %s", path, strerror(errno));
    else if (n > MAX_RESULT_FILE)
        s = vkt_fail(VKT_ERR_FORMAT, "%s: over %u bytes, too large for a bench suite result", path,
                     MAX_RESULT_FILE);
    else if (memchr(text, 0, n))
        s = vkt_fail(VKT_ERR_FORMAT, "%s: a NUL byte at byte %zu: not a JSON result file", path,
                     (size_t)((char *)memchr(text, 0, n) - text));
    if (s != VKT_OK) {
        free(text);
        return s;
    }
    text[n] = 0;
    *out = text, *len = n;
    return VKT_OK;
}

static vkt_status parse_device(const char *file, const cJSON *root, cmp_result *r) {
    const cJSON *d;
    VKT_TRY(get_obj(file, root, "device", &d));
    VKT_TRY(get_str(file, d, "device", "label", true, r->label, sizeof r->label));
    VKT_TRY(get_str(file, d, "device", "name", false, r->name, sizeof r->name));
    VKT_TRY(get_str(file, d, "device", "driver", false, r->driver, sizeof r->driver));
    VKT_TRY(get_str(file, d, "device", "type", false, r->type, sizeof r->type));
    VKT_TRY(get_num(file, d, "device", "memory_bytes", POSITIVE, &r->memory_bytes));
    if (!field(d, "mem_limit_bytes"))
        return bad_field(file, "device.mem_limit_bytes", NULL, "a number > 0 or null");
    VKT_TRY(get_num(file, d, "device", "mem_limit_bytes", POSITIVE | NULLABLE, &r->mem_limit));
    const cJSON *p;
    VKT_TRY(get_obj(file, root, "peak", &p));
    VKT_TRY(get_num(file, p, "peak", "fma_gflops", POSITIVE, &r->fma));
    VKT_TRY(get_num(file, p, "peak", "bandwidth_gbs", POSITIVE, &r->bw));
    return VKT_OK;
}

static vkt_status parse_matmul(const char *file, const cJSON *root, cmp_result *r) {
    const cJSON *a;
    int n = 0;
    VKT_TRY(get_arr(file, root, "matmul", &a, &n));
    r->mm = calloc((size_t)n + 1, sizeof *r->mm);
    if (!r->mm) return vkt_fail(VKT_ERR_HOST_MEMORY, "out of host memory reading %s", file);
    for (int i = 0; i < n; i++) {
        const cJSON *e = cJSON_GetArrayItem(a, i);
        char p[64];
        snprintf(p, sizeof p, "matmul[%d]", i);
        if (!cJSON_IsObject(e)) return bad_field(file, p, e, "an object");
        cmp_matmul *m = &r->mm[i];
        VKT_TRY(get_int(file, e, p, "size", 1, 1 << 20, &m->size));
        VKT_TRY(get_str(file, e, p, "form", false, m->form, sizeof m->form));
        if (!m->form[0]) snprintf(m->form, sizeof m->form, "NN");
        VKT_TRY(get_num(file, e, p, "gflops", 0, &m->gflops));
        VKT_TRY(get_num(file, e, p, "fraction_of_peak", 0, &m->fraction));
        for (int j = 0; j < i; j++)
            if (r->mm[j].size == m->size && !strcmp(r->mm[j].form, m->form))
                return vkt_fail(VKT_ERR_FORMAT, "%s: %s: size %d form %s again (matmul[%d])", file,
                                p, m->size, m->form, j);
    }
    r->nmm = n;
    return VKT_OK;
}

static vkt_status parse_train(const char *file, const cJSON *root, cmp_result *r) {
    const cJSON *a;
    int n = 0;
    VKT_TRY(get_arr(file, root, "train", &a, &n));
    r->tr = calloc((size_t)n + 1, sizeof *r->tr);
    if (!r->tr) return vkt_fail(VKT_ERR_HOST_MEMORY, "out of host memory reading %s", file);
    for (int i = 0; i < n; i++) {
        const cJSON *e = cJSON_GetArrayItem(a, i);
        char p[64];
        snprintf(p, sizeof p, "train[%d]", i);
        if (!cJSON_IsObject(e)) return bad_field(file, p, e, "an object");
        cmp_train *t = &r->tr[i];
        VKT_TRY(get_str(file, e, p, "model", true, t->model, sizeof t->model));
        VKT_TRY(get_int(file, e, p, "batch", 1, 1 << 30, &t->batch));
        VKT_TRY(get_bool(file, e, p, "fits", true, &t->fits));
        VKT_TRY(get_num(file, e, p, "planned_bytes", 0, &t->planned_bytes));
        t->sps = t->peak_memory = t->tokens_per_s = -1;
        if (t->fits) {
            VKT_TRY(get_num(file, e, p, "samples_per_sec", POSITIVE, &t->sps));
            // Absent, null or 0: not measured (a driver with no memory budget to read).
            VKT_TRY(get_num(file, e, p, "peak_memory_bytes", OPTIONAL | NULLABLE, &t->peak_memory));
            if (t->peak_memory == 0) t->peak_memory = -1;
            VKT_TRY(get_num(file, e, p, "tokens_per_sec", OPTIONAL | POSITIVE, &t->tokens_per_s));
        }
        for (int j = 0; j < i; j++)
            if (r->tr[j].batch == t->batch && !strcmp(r->tr[j].model, t->model))
                return vkt_fail(VKT_ERR_FORMAT, "%s: %s: %s at batch %d again (train[%d])", file, p,
                                t->model, t->batch, j);
    }
    r->ntr = n;
    return VKT_OK;
}

static vkt_status parse_saturation(const char *file, const cJSON *root, cmp_result *r) {
    const cJSON *a;
    int n = 0;
    VKT_TRY(get_arr(file, root, "saturation", &a, &n));
    r->sat = calloc((size_t)n + 1, sizeof *r->sat);
    if (!r->sat) return vkt_fail(VKT_ERR_HOST_MEMORY, "out of host memory reading %s", file);
    for (int i = 0; i < n; i++) {
        const cJSON *e = cJSON_GetArrayItem(a, i);
        char p[64];
        snprintf(p, sizeof p, "saturation[%d]", i);
        if (!cJSON_IsObject(e)) return bad_field(file, p, e, "an object");
        cmp_sat *s = &r->sat[i];
        VKT_TRY(get_str(file, e, p, "model", true, s->model, sizeof s->model));
        VKT_TRY(get_int(file, e, p, "batch", 1, 1 << 30, &s->batch));
        VKT_TRY(get_num(file, e, p, "samples_per_sec", POSITIVE, &s->sps));
    }
    r->nsat = n;
    return VKT_OK;
}

static vkt_status parse_result(const char *file, const cJSON *root, cmp_result *r) {
    if (!cJSON_IsObject(root))
        return vkt_fail(VKT_ERR_FORMAT,
                        "%s: not a vktrain bench suite result (the file holds %s, a result is an "
                        "object with \"format\": \"%s\"); %s",
                        file, kind_of(root), SUITE_FORMAT, RERUN);
    const cJSON *f = field(root, "format");
    if (!cJSON_IsString(f) || strcmp(f->valuestring, SUITE_FORMAT) != 0) {
        char found[96];
        if (cJSON_IsString(f))
            snprintf(found, sizeof found, "its \"format\" is \"%.60s\"", f->valuestring);
        else
            snprintf(found, sizeof found, "its \"format\" is %s", kind_of(f));
        return vkt_fail(VKT_ERR_FORMAT,
                        "%s: not a vktrain bench suite result (%s, expected \"%s\"); %s", file,
                        found, SUITE_FORMAT, RERUN);
    }
    const cJSON *v = field(root, "version");
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble))
        return vkt_fail(VKT_ERR_FORMAT,
                        "%s: \"version\" is %s, expected an integer (this vktrain reads version "
                        "%d); rerun `vktrain bench suite` with this vktrain",
                        file, kind_of(v), SUITE_VERSION);
    if (v->valuedouble != SUITE_VERSION)
        return vkt_fail(VKT_ERR_FORMAT,
                        "%s: result format version %g, but this vktrain (%s) reads version %d: "
                        "rerun `vktrain bench suite` with this vktrain to write a version %d "
                        "result%s",
                        file, v->valuedouble, VKT_VERSION, SUITE_VERSION, SUITE_VERSION,
                        v->valuedouble > SUITE_VERSION
                            ? " (or compare it with the newer vktrain that wrote it)"
                            : "");
    VKT_TRY(get_str(file, root, "", "created", false, r->created, sizeof r->created));
    VKT_TRY(get_bool(file, root, "", "quick", false, &r->quick));
    VKT_TRY(parse_device(file, root, r));
    VKT_TRY(parse_matmul(file, root, r));
    VKT_TRY(parse_train(file, root, r));
    VKT_TRY(parse_saturation(file, root, r));
    return VKT_OK;
}

vkt_status cmp_result_load(const char *path, cmp_result *r) {
    memset(r, 0, sizeof *r);
    r->path = path;
    char *text;
    size_t len = 0;
    VKT_TRY(read_text(path, &text, &len));
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, len + 1, &end, 1);
    vkt_status s = root ? parse_result(path, root, r)
                        : bad_json(path, text, len, end ? end : cJSON_GetErrorPtr());
    cJSON_Delete(root);
    free(text);
    return s;
}

// ---------------------------------------------------------------------------------------------
// What the tables and pictures read

const cmp_train *cmp_train_at(const cmp_result *r, const char *model, int batch) {
    for (int i = 0; i < r->ntr; i++)
        if (r->tr[i].batch == batch && !strcmp(r->tr[i].model, model)) return &r->tr[i];
    return NULL;
}

bool cmp_has_model(const cmp_result *r, const char *model) {
    for (int i = 0; i < r->ntr; i++)
        if (!strcmp(r->tr[i].model, model)) return true;
    return false;
}

// The largest batch measured that fits (0: none); *capped: no batch was refused, so the sweep
// stopped at its cap rather than at the memory.
int cmp_largest_fit(const cmp_result *r, const char *model, bool *capped) {
    int best = 0;
    *capped = true;
    for (int i = 0; i < r->ntr; i++) {
        if (strcmp(r->tr[i].model, model)) continue;
        if (r->tr[i].fits && r->tr[i].batch > best) best = r->tr[i].batch;
        if (!r->tr[i].fits) *capped = false;
    }
    return best;
}

// Whether model is known not to fit at batch: the file refused this batch or a smaller one.
bool cmp_known_no_fit(const cmp_result *r, const char *model, int batch) {
    for (int i = 0; i < r->ntr; i++)
        if (!strcmp(r->tr[i].model, model) && !r->tr[i].fits && r->tr[i].batch <= batch)
            return true;
    return false;
}

const cmp_sat *cmp_saturation_of(const cmp_result *r, const char *model) {
    for (int i = 0; i < r->nsat; i++)
        if (!strcmp(r->sat[i].model, model)) return &r->sat[i];
    return NULL;
}

bool cmp_is_lm(const cmp_result *rs, int n, const char *model) {
    for (int k = 0; k < n; k++)
        for (int i = 0; i < rs[k].ntr; i++)
            if (!strcmp(rs[k].tr[i].model, model) && rs[k].tr[i].tokens_per_s > 0) return true;
    return false;
}

double cmp_capacity(const cmp_result *r) {
    return r->mem_limit > 0 ? r->mem_limit : r->memory_bytes;
}

static int cmp_int(const void *a, const void *b) {
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

// The batches any result has for model, sorted, distinct; returns the count.
int cmp_batches_of(const cmp_result *rs, int n, const char *model, int **out) {
    int cap = 0;
    for (int k = 0; k < n; k++)
        cap += rs[k].ntr;
    int *b = malloc(((size_t)cap + 1) * sizeof *b), nb = 0;
    if (!b) return -1;
    for (int k = 0; k < n; k++)
        for (int i = 0; i < rs[k].ntr; i++)
            if (!strcmp(rs[k].tr[i].model, model)) b[nb++] = rs[k].tr[i].batch;
    qsort(b, (size_t)nb, sizeof *b, cmp_int);
    int m = 0;
    for (int i = 0; i < nb; i++)
        if (!m || b[m - 1] != b[i]) b[m++] = b[i];
    *out = b;
    return m;
}

void cmp_human_bytes(char *out, size_t size, double b) {
    static const char *unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int k = 0;
    while (k < 4 && b >= 1024)
        b /= 1024, k++;
    snprintf(out, size, k ? "%.1f %s" : "%.0f %s", b, unit[k]);
}

// Rates and GFLOP/s as the tables print them: whole numbers from 1000, one decimal from 10,
// three significant digits below.
void cmp_fmt_rate(char *out, size_t size, double v) {
    if (v >= 1000)
        snprintf(out, size, "%.0f", v);
    else if (v >= 10)
        snprintf(out, size, "%.1f", v);
    else
        snprintf(out, size, "%.3g", v);
}

static int mm_key_order(const void *a, const void *b) {
    const cmp_mm_key *x = a, *y = b;
    if (x->size != y->size) return (x->size > y->size) - (x->size < y->size);
    return strcmp(x->form, y->form);
}

const cmp_matmul *cmp_mm_at(const cmp_result *r, int size, const char *form) {
    for (int i = 0; i < r->nmm; i++)
        if (r->mm[i].size == size && !strcmp(r->mm[i].form, form)) return &r->mm[i];
    return NULL;
}

// The (size, form) pairs any result measured, sorted; returns the count (-1: out of memory).
int cmp_mm_keys(const cmp_result *rs, int n, cmp_mm_key **out) {
    int cap = 0;
    for (int k = 0; k < n; k++)
        cap += rs[k].nmm;
    cmp_mm_key *keys = malloc(((size_t)cap + 1) * sizeof *keys);
    if (!keys) return -1;
    int m = 0;
    for (int k = 0; k < n; k++)
        for (int i = 0; i < rs[k].nmm; i++) {
            bool seen = false;
            for (int j = 0; j < m && !seen; j++)
                seen = keys[j].size == rs[k].mm[i].size && !strcmp(keys[j].form, rs[k].mm[i].form);
            if (!seen) {
                keys[m].size = rs[k].mm[i].size;
                snprintf(keys[m].form, sizeof keys[m].form, "%s", rs[k].mm[i].form);
                m++;
            }
        }
    qsort(keys, (size_t)m, sizeof *keys, mm_key_order);
    *out = keys;
    return m;
}
