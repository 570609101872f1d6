// results.c: the reader of `vktrain bench suite` results that compare and advise share
// (results.h), and the JSON-file helpers under it: the file read (a regular file, at most
// 64 MiB), parsed with cJSON, its format and version checked, and every field the commands use
// checked for its type and range, so that a refusal names the file and the JSON path, what was
// found and what was expected. Not here: what the commands ask of a result.
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "results.h"
#include "vkt_internal.h"

#define MAX_JSON_FILE (64u << 20)

// ---------------------------------------------------------------------------------------------
// JSON files: every refusal names the file and the JSON path, what was found and what is expected.

const char *jf_found(const cJSON *v) {
    if (!v) return "missing";
    if (cJSON_IsNull(v)) return "null";
    if (cJSON_IsBool(v)) return "true/false";
    if (cJSON_IsNumber(v)) return "a number";
    if (cJSON_IsString(v)) return "a string";
    if (cJSON_IsArray(v)) return "an array";
    return "an object";
}

const cJSON *jf_field(const cJSON *o, const char *key) {
    return cJSON_GetObjectItemCaseSensitive(o, key);
}

vkt_status jf_bad(const jf_doc *d, const char *path, const cJSON *v, const char *expected) {
    if (!v && d->spec->missing)
        return vkt_fail(VKT_ERR_FORMAT, "%s: %s is missing (expected %s); %s", d->path, path,
                        expected, d->spec->missing);
    return vkt_fail(VKT_ERR_FORMAT, "%s: %s is %s, expected %s", d->path, path, jf_found(v),
                    expected);
}

static void join(char *out, size_t size, const char *prefix, const char *key) {
    snprintf(out, size, "%s%s%s", prefix, *prefix ? "." : "", key);
}

vkt_status jf_num(const jf_doc *d, const cJSON *o, const char *prefix, const char *key, int flags,
                  double *out) {
    char path[160];
    join(path, sizeof path, prefix, key);
    const cJSON *v = jf_field(o, key);
    *out = -1;
    if ((!v && (flags & JF_OPTIONAL)) || (cJSON_IsNull(v) && (flags & JF_NULLABLE))) return VKT_OK;
    const char *want = flags & JF_POSITIVE
                           ? (flags & JF_NULLABLE ? "a number > 0 or null" : "a number > 0")
                           : (flags & JF_NULLABLE ? "a number >= 0 or null" : "a number >= 0");
    if (!cJSON_IsNumber(v)) return jf_bad(d, path, v, want);
    double x = v->valuedouble;
    if (!isfinite(x) || x < 0 || (x == 0 && (flags & JF_POSITIVE)))
        return vkt_fail(VKT_ERR_FORMAT, "%s: %s is %g, expected %s", d->path, path, x, want);
    *out = x;
    return VKT_OK;
}

vkt_status jf_int(const jf_doc *d, const cJSON *o, const char *prefix, const char *key, int lo,
                  int hi, int *out) {
    char path[160];
    join(path, sizeof path, prefix, key);
    const cJSON *v = jf_field(o, key);
    char want[64];
    snprintf(want, sizeof want, "an integer from %d to %d", lo, hi);
    if (!cJSON_IsNumber(v)) return jf_bad(d, path, v, want);
    double x = v->valuedouble;
    if (!(x >= lo && x <= hi) || x != floor(x))
        return vkt_fail(VKT_ERR_FORMAT, "%s: %s is %g, expected %s", d->path, path, x, want);
    *out = (int)x;
    return VKT_OK;
}

vkt_status jf_str(const jf_doc *d, const cJSON *o, const char *prefix, const char *key,
                  bool required, char *out, size_t size) {
    char path[160];
    join(path, sizeof path, prefix, key);
    const cJSON *v = jf_field(o, key);
    out[0] = 0;
    if (!v && !required) return VKT_OK;
    if (!cJSON_IsString(v) || (required && !v->valuestring[0]))
        return jf_bad(d, path, v, "a non-empty string");
    snprintf(out, size, "%s", v->valuestring);
    return VKT_OK;
}

vkt_status jf_bool(const jf_doc *d, const cJSON *o, const char *prefix, const char *key,
                   bool required, bool *out) {
    char path[160];
    join(path, sizeof path, prefix, key);
    const cJSON *v = jf_field(o, key);
    *out = false;
    if (!v && !required) return VKT_OK;
    if (!cJSON_IsBool(v)) return jf_bad(d, path, v, "true or false");
    *out = cJSON_IsTrue(v);
    return VKT_OK;
}

// Where the text stops being JSON: the byte, line and column, and whether the text ends early
// (cJSON points at the last byte it read, so whitespace up to the end is the end).
static vkt_status bad_json(const jf_doc *d, const char *text, size_t len, const char *at) {
    const jf_spec *s = d->spec;
    size_t off = at && at >= text && at <= text + len ? (size_t)(at - text) : len;
    int line = 1, col = 1;
    for (size_t i = 0; i < off; i++) {
        if (text[i] == '\n')
            line++, col = 1;
        else
            col++;
    }
    size_t rest = off;
    while (rest < len && isspace((unsigned char)text[rest]))
        rest++;
    if (off >= len || rest >= len)
        return vkt_fail(VKT_ERR_FORMAT,
                        "%s: %s: the text ends early at byte %zu (line %d, column %d): the file is "
                        "cut short (an interrupted copy or run?); %s",
                        d->path, s->invalid, len, line, col, s->redo);
    char near[24];
    size_t n = 0;
    for (size_t i = off; i < len && n < 20 && text[i] != '\n'; i++)
        near[n++] = isprint((unsigned char)text[i]) ? text[i] : '?';
    near[n] = 0;
    return vkt_fail(
        VKT_ERR_FORMAT,
        "%s: %s at byte %zu (line %d, column %d), near \"%s\": not a %s, or damaged; %s", d->path,
        s->invalid, off, line, col, near, s->name, s->redo);
}

static vkt_status read_text(const jf_doc *d, char **out, size_t *len) {
    const jf_spec *s = d->spec;
    *out = NULL;
    int fd = vkt_open_input(d->path, s->what, s->hint);
    if (fd < 0) return VKT_ERR_IO;
    FILE *f = fdopen(fd, "rb");
    char *text = f ? malloc(MAX_JSON_FILE + 1) : NULL;
    if (!f || !text) {
        if (f)
            fclose(f);
        else
            close(fd);
        free(text);
        return vkt_fail(VKT_ERR_HOST_MEMORY, "out of host memory reading %s", d->path);
    }
    size_t n = fread(text, 1, MAX_JSON_FILE + 1, f);
    bool err = ferror(f);
    fclose(f);
    vkt_status st = VKT_OK;
    const char *nul = err ? NULL : memchr(text, 0, n);
    if (err)
        st = vkt_fail(VKT_ERR_IO, "cannot read the %s %s: %s", s->what, d->path, strerror(errno));
    else if (n > MAX_JSON_FILE)
        st = vkt_fail(VKT_ERR_FORMAT, "%s: over %u bytes, too large for a %s", d->path,
                      MAX_JSON_FILE, s->what);
    else if (nul)
        st = vkt_fail(VKT_ERR_FORMAT, "%s: a NUL byte at byte %zu: not a JSON %s", d->path,
                      (size_t)(nul - text), s->what);
    if (st != VKT_OK) {
        free(text);
        return st;
    }
    text[n] = 0;
    *out = text, *len = n;
    return VKT_OK;
}

// An object of the spec's "format" and "version", else the refusal: what the file holds or says.
static vkt_status check_format(const jf_doc *d, const cJSON *root) {
    const jf_spec *s = d->spec;
    if (!cJSON_IsObject(root))
        return vkt_fail(VKT_ERR_FORMAT,
                        "%s: not a %s (the file holds %s, expected an object with \"format\": "
                        "\"%s\"); %s",
                        d->path, s->name, jf_found(root), s->format, s->redo);
    const cJSON *f = jf_field(root, "format");
    if (!cJSON_IsString(f) || strcmp(f->valuestring, s->format) != 0) {
        char found[96];
        if (cJSON_IsString(f))
            snprintf(found, sizeof found, "its \"format\" is \"%.60s\"", f->valuestring);
        else
            snprintf(found, sizeof found, "its \"format\" is %s", jf_found(f));
        return vkt_fail(VKT_ERR_FORMAT, "%s: not a %s (%s, expected \"%s\"); %s", d->path, s->name,
                        found, s->format, s->redo);
    }
    const cJSON *v = jf_field(root, "version");
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble)) {
        char found[64];
        if (cJSON_IsNumber(v))
            snprintf(found, sizeof found, "%g", v->valuedouble);
        else
            snprintf(found, sizeof found, "%s", jf_found(v));
        return vkt_fail(VKT_ERR_FORMAT,
                        "%s: \"version\" is %s, expected an integer (this vktrain reads version "
                        "%d); %s",
                        d->path, found, s->version, s->redo);
    }
    if (v->valuedouble != s->version) {
        char newer[160] = "";
        if (v->valuedouble > s->version && s->newer)
            snprintf(newer, sizeof newer, " (%s)", s->newer);
        return vkt_fail(VKT_ERR_FORMAT,
                        "%s: %s format version %g, but this vktrain (%s) reads version %d: %s%s",
                        d->path, s->versioned, v->valuedouble, VKT_VERSION, s->version, s->redo,
                        newer);
    }
    return VKT_OK;
}

vkt_status jf_load(const jf_doc *d, cJSON **root) {
    *root = NULL;
    char *text;
    size_t len = 0;
    VKT_TRY(read_text(d, &text, &len));
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithLengthOpts(text, len + 1, &end, 1);
    vkt_status s = j ? check_format(d, j) : bad_json(d, text, len, end ? end : cJSON_GetErrorPtr());
    free(text);
    if (s != VKT_OK) {
        cJSON_Delete(j);
        return s;
    }
    *root = j;
    return VKT_OK;
}

// ---------------------------------------------------------------------------------------------
// bench suite results

// compare's and advise's readers grew apart and worded three refusals differently; both sets of
// words are kept, everything else is one.
#define RESULTS_SPEC(WHAT, INVALID, VERSIONED)                                                     \
    {                                                                                              \
        .what = WHAT, .hint = "(write one with `vktrain bench suite --out FILE.json`)",            \
        .invalid = INVALID, .format = "vktrain-bench-suite", .version = 1,                         \
        .name = "vktrain bench suite result", .versioned = VERSIONED,                              \
        .redo = "rerun `vktrain bench suite --out FILE.json` with this vktrain to write one",      \
        .newer = "or read this one with the newer vktrain that wrote it",                          \
        .missing = "a complete result of `vktrain bench suite` has it: rerun the suite, or fix "   \
                   "the file",                                                                     \
    }
const jf_spec results_for_compare = RESULTS_SPEC("result file", "invalid JSON", "result");
const jf_spec results_for_advise =
    RESULTS_SPEC("results file", "not JSON", "vktrain bench suite result");

void results_free(results_file *r) {
    free(r->mm);
    free(r->tr);
    free(r->sat);
}

static vkt_status get_obj(const jf_doc *d, const cJSON *o, const char *key, const cJSON **out) {
    *out = jf_field(o, key);
    if (!cJSON_IsObject(*out)) return jf_bad(d, key, *out, "an object");
    return VKT_OK;
}

static vkt_status parse_device(const jf_doc *d, const cJSON *root, results_file *r) {
    const cJSON *o;
    VKT_TRY(get_obj(d, root, "device", &o));
    VKT_TRY(jf_str(d, o, "device", "label", true, r->label, sizeof r->label));
    VKT_TRY(jf_str(d, o, "device", "name", false, r->name, sizeof r->name));
    VKT_TRY(jf_str(d, o, "device", "driver", false, r->driver, sizeof r->driver));
    VKT_TRY(jf_str(d, o, "device", "type", false, r->type, sizeof r->type));
    VKT_TRY(jf_num(d, o, "device", "memory_bytes", JF_POSITIVE, &r->memory_bytes));
    VKT_TRY(jf_num(d, o, "device", "mem_limit_bytes", JF_POSITIVE | JF_NULLABLE, &r->mem_limit));
    VKT_TRY(get_obj(d, root, "peak", &o));
    VKT_TRY(jf_num(d, o, "peak", "fma_gflops", JF_POSITIVE, &r->fma));
    VKT_TRY(jf_num(d, o, "peak", "bandwidth_gbs", JF_POSITIVE, &r->bw));
    return VKT_OK;
}

// The arrays: each item an object, read by an item reader into entry i of items (the array's
// n + 1 zeroed entries); p is its JSON path ("train[3]").
typedef vkt_status (*item_reader)(const jf_doc *d, const cJSON *e, const char *p, void *items,
                                  int i);

// root.key, an array of objects, each read by read into *items (calloc'd; the caller frees it,
// also after a failure); *count: how many, once all are read.
static vkt_status parse_items(const jf_doc *d, const cJSON *root, const char *key, size_t size,
                              item_reader read, void **items, int *count) {
    const cJSON *a = jf_field(root, key);
    if (!cJSON_IsArray(a)) return jf_bad(d, key, a, "an array");
    int n = cJSON_GetArraySize(a);
    *items = calloc((size_t)n + 1, size);
    if (!*items) return vkt_fail(VKT_ERR_HOST_MEMORY, "out of host memory reading %s", d->path);
    for (int i = 0; i < n; i++) {
        const cJSON *e = cJSON_GetArrayItem(a, i);
        char p[64];
        snprintf(p, sizeof p, "%s[%d]", key, i);
        if (!cJSON_IsObject(e)) return jf_bad(d, p, e, "an object");
        VKT_TRY(read(d, e, p, *items, i));
    }
    *count = n;
    return VKT_OK;
}

static vkt_status read_matmul(const jf_doc *d, const cJSON *e, const char *p, void *items, int i) {
    results_matmul *mm = items, *m = &mm[i];
    VKT_TRY(jf_int(d, e, p, "size", 1, 1 << 20, &m->size));
    VKT_TRY(jf_str(d, e, p, "form", false, m->form, sizeof m->form));
    if (!m->form[0]) snprintf(m->form, sizeof m->form, "NN");
    VKT_TRY(jf_num(d, e, p, "gflops", 0, &m->gflops));
    VKT_TRY(jf_num(d, e, p, "fraction_of_peak", 0, &m->fraction));
    for (int j = 0; j < i; j++)
        if (mm[j].size == m->size && !strcmp(mm[j].form, m->form))
            return vkt_fail(VKT_ERR_FORMAT, "%s: %s: size %d form %s again (matmul[%d])", d->path,
                            p, m->size, m->form, j);
    return VKT_OK;
}

static vkt_status read_train(const jf_doc *d, const cJSON *e, const char *p, void *items, int i) {
    results_train *tr = items, *t = &tr[i];
    VKT_TRY(jf_str(d, e, p, "model", true, t->model, sizeof t->model));
    VKT_TRY(jf_int(d, e, p, "batch", 1, 1 << 30, &t->batch));
    VKT_TRY(jf_bool(d, e, p, "fits", true, &t->fits));
    VKT_TRY(jf_num(d, e, p, "planned_bytes", 0, &t->planned_bytes));
    // What tells the model from another of its name (advise: an edited model's points are not
    // the model's); absent or null: not given.
    VKT_TRY(jf_num(d, e, p, "parameters", JF_OPTIONAL | JF_NULLABLE, &t->parameters));
    VKT_TRY(jf_num(d, e, p, "flops_per_sample", JF_OPTIONAL | JF_NULLABLE, &t->flops_per_sample));
    t->sps = t->peak_memory = t->tokens_per_s = -1;
    if (t->fits) {
        VKT_TRY(jf_num(d, e, p, "samples_per_sec", JF_POSITIVE, &t->sps));
        // Absent, null or 0: not measured (a driver with no memory budget to read).
        VKT_TRY(jf_num(d, e, p, "peak_memory_bytes", JF_OPTIONAL | JF_NULLABLE, &t->peak_memory));
        if (t->peak_memory == 0) t->peak_memory = -1;
        VKT_TRY(jf_num(d, e, p, "tokens_per_sec", JF_OPTIONAL | JF_POSITIVE, &t->tokens_per_s));
    }
    for (int j = 0; j < i; j++)
        if (tr[j].batch == t->batch && !strcmp(tr[j].model, t->model))
            return vkt_fail(VKT_ERR_FORMAT, "%s: %s: %s at batch %d again (train[%d])", d->path, p,
                            t->model, t->batch, j);
    return VKT_OK;
}

static vkt_status read_sat(const jf_doc *d, const cJSON *e, const char *p, void *items, int i) {
    results_sat *s = &((results_sat *)items)[i];
    VKT_TRY(jf_str(d, e, p, "model", true, s->model, sizeof s->model));
    VKT_TRY(jf_int(d, e, p, "batch", 1, 1 << 30, &s->batch));
    VKT_TRY(jf_num(d, e, p, "samples_per_sec", JF_POSITIVE, &s->sps));
    return VKT_OK;
}

vkt_status results_load(const char *path, const jf_spec *spec, results_file *r) {
    memset(r, 0, sizeof *r);
    r->path = path;
    jf_doc d = {path, spec};
    cJSON *root;
    VKT_TRY(jf_load(&d, &root));
    void *mm = NULL, *tr = NULL, *sat = NULL;
    vkt_status s = jf_str(&d, root, "", "created", false, r->created, sizeof r->created);
    if (s == VKT_OK) s = jf_bool(&d, root, "", "quick", false, &r->quick);
    if (s == VKT_OK) s = parse_device(&d, root, r);
    if (s == VKT_OK) s = parse_items(&d, root, "matmul", sizeof *r->mm, read_matmul, &mm, &r->nmm);
    if (s == VKT_OK) s = parse_items(&d, root, "train", sizeof *r->tr, read_train, &tr, &r->ntr);
    if (s == VKT_OK)
        s = parse_items(&d, root, "saturation", sizeof *r->sat, read_sat, &sat, &r->nsat);
    r->mm = mm, r->tr = tr, r->sat = sat;
    cJSON_Delete(root);
    return s;
}
