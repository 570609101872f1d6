// model.c: parses and checks model description files (JSON, read with cJSON) into a
// vkt_model_desc. The format is in model.h and docs/MODEL_FORMAT.md. The top level and what
// every layer has in common (an object with a known "type", only the keys its kind accepts, the
// shape it receives) are read here; each kind reads its own keys (engine/nn/layers/, through
// the vkt_parse_* helpers below).
//
// Every rejection says where: the byte offset, line and column of invalid JSON, or the JSON path
// of the offending value ("layers[3].units"), with what was found and what would be accepted.
// Not here: anything about parameters' storage, initialization or kernels.
#include "layer.h"
#include "model.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "json_depth.h"
#include "vkt_internal.h"

// Elements of one sample's input or of one layer's output: 2^28 (1 GiB of floats), above GPT-2's
// logits ([1024, 50257], 51 million). The ops bind at most maxStorageBufferRange at a time and
// index within a binding in 32 bits; a bigger value is almost surely a typo.
#define MAX_UNITS (1u << 28)
#define MAX_MODEL_FILE (16u << 20)

const char *vkt_model_act_name(vkt_act act) {
    switch (act) {
    case VKT_ACT_RELU: return "relu";
    case VKT_ACT_LEAKY_RELU: return "leaky_relu";
    case VKT_ACT_GELU: return "gelu";
    case VKT_ACT_GELU_ERF: return "gelu";
    case VKT_ACT_TANH: return "tanh";
    case VKT_ACT_SIGMOID: return "sigmoid";
    }
    return "?";
}

const char *vkt_model_loss_name(vkt_loss loss) {
    switch (loss) {
    case VKT_LOSS_SOFTMAX_XENT: return "softmax_cross_entropy";
    case VKT_LOSS_MSE: return "mse";
    }
    return "?";
}

static void free_layers(vkt_layer_desc *ls, int n) {
    for (int i = 0; ls && i < n; i++)
        free_layers(ls[i].layers, ls[i].nlayers);
    free(ls);
}

void vkt_model_free(vkt_model_desc *m) {
    if (!m) return;
    free_layers(m->layers, m->nlayers);
    memset(m, 0, sizeof *m);
}

// ---------------------------------------------------------------------------------------------
// Messages

// "<source>: <path>: <what>" as VKT_ERR_FORMAT.
__attribute__((format(printf, 3, 4))) static vkt_status bad(const char *src, const char *path,
                                                            const char *fmt, ...) {
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return vkt_fail(VKT_ERR_FORMAT, "%s: %s: %s", src, path, msg);
}

static const char *kind_of(const cJSON *v) {
    if (!v) return "nothing";
    if (cJSON_IsString(v)) return "a string";
    if (cJSON_IsNumber(v)) return "a number";
    if (cJSON_IsBool(v)) return "a boolean";
    if (cJSON_IsNull(v)) return "null";
    if (cJSON_IsArray(v)) return "an array";
    if (cJSON_IsObject(v)) return "an object";
    return "an invalid value";
}

static bool is_comment_key(const char *k) { return strncmp(k, "comment", 7) == 0; }

static vkt_status check_keys_in(const char *src, const cJSON *obj, const char *prefix,
                                const char *const *allowed, vkt_strset *seen);

// Rejects keys of obj not in allowed (NULL-terminated) and duplicated keys. prefix is the JSON
// path of obj ("" at the top level).
static vkt_status check_keys(const char *src, const cJSON *obj, const char *prefix,
                             const char *const *allowed) {
    vkt_strset seen; // duplicates in time linear in the keys (100,000 comments took 22 s pairwise)
    if (!vkt_strset_init(&seen, (size_t)cJSON_GetArraySize(obj)))
        return vkt_fail(VKT_ERR_HOST_MEMORY, "out of host memory reading %s", src);
    vkt_status st = check_keys_in(src, obj, prefix, allowed, &seen);
    vkt_strset_free(&seen);
    return st;
}

static vkt_status check_keys_in(const char *src, const cJSON *obj, const char *prefix,
                                const char *const *allowed, vkt_strset *seen) {
    for (const cJSON *c = obj->child; c; c = c->next) {
        char path[256];
        snprintf(path, sizeof path, "%s%s%s", prefix, *prefix ? "." : "", c->string);
        int added = vkt_strset_add(seen, c->string);
        if (added < 0) return vkt_fail(VKT_ERR_HOST_MEMORY, "out of host memory reading %s", src);
        if (added == 0) return bad(src, path, "the key appears twice; keep one");
        if (is_comment_key(c->string)) continue;
        bool ok = false;
        for (int i = 0; allowed[i] && !ok; i++)
            ok = strcmp(allowed[i], c->string) == 0;
        if (ok) continue;
        char list[256] = "";
        for (int i = 0; allowed[i]; i++) {
            size_t n = strlen(list);
            snprintf(list + n, sizeof list - n, "%s%s", i ? ", " : "", allowed[i]);
        }
        return bad(src, path,
                   "unknown key (allowed here: %s; keys starting with \"comment\" are "
                   "ignored)",
                   list);
    }
    return VKT_OK;
}

// A whole number in [lo, hi].
static vkt_status get_uint(const char *src, const char *path, const cJSON *v, uint32_t lo,
                           uint32_t hi, const char *meaning, uint32_t *out) {
    if (!cJSON_IsNumber(v))
        return bad(src, path, "expected a whole number (%s), found %s", meaning, kind_of(v));
    double d = v->valuedouble;
    if (d != floor(d) || !isfinite(d))
        return bad(src, path, "expected a whole number (%s), found %g", meaning, d);
    if (d < lo || d > hi)
        return bad(src, path, "%.0f is out of range: %s must be between %u and %u", d, meaning, lo,
                   hi);
    *out = (uint32_t)d;
    return VKT_OK;
}

// ---------------------------------------------------------------------------------------------
// Layers

// The path of key in the layer ("layers[2].units"; key NULL: the layer's own path).
static void key_path(const vkt_layer_parse *p, const char *key, char *buf, size_t size) {
    snprintf(buf, size, "%s%s%s", p->path, key ? "." : "", key ? key : "");
}

vkt_status vkt_parse_fail(const vkt_layer_parse *p, const char *key, const char *fmt, ...) {
    char msg[768], path[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    key_path(p, key, path, sizeof path);
    return vkt_fail(VKT_ERR_FORMAT, "%s: %s: %s", p->src, path, msg);
}

vkt_status vkt_parse_uint(const vkt_layer_parse *p, const char *key, bool required, uint32_t lo,
                          uint32_t hi, const char *meaning, uint32_t *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(p->json, key);
    char path[256];
    key_path(p, key, path, sizeof path);
    if (!v) {
        if (required) return bad(p->src, path, "missing (%s is required)", meaning);
        return VKT_OK;
    }
    return get_uint(p->src, path, v, lo, hi, meaning, out);
}

vkt_status vkt_parse_bool(const vkt_layer_parse *p, const char *key, bool *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(p->json, key);
    if (!v) return VKT_OK;
    if (!cJSON_IsBool(v))
        return vkt_parse_fail(p, key, "expected true or false, found %s", kind_of(v));
    *out = cJSON_IsTrue(v);
    return VKT_OK;
}

vkt_status vkt_parse_float(const vkt_layer_parse *p, const char *key, float *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(p->json, key);
    if (!v) return VKT_OK;
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble))
        return vkt_parse_fail(p, key, "expected a finite number, found %s", kind_of(v));
    *out = (float)v->valuedouble;
    return VKT_OK;
}

vkt_status vkt_parse_range(const vkt_layer_parse *p, const char *key, double lo, double hi,
                           bool lo_open, bool hi_open, const char *meaning, float *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(p->json, key);
    if (!v) return VKT_OK;
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble))
        return vkt_parse_fail(p, key, "expected a number (%s), found %s", meaning, kind_of(v));
    double d = v->valuedouble;
    if (d < lo || d > hi || (lo_open && d == lo) || (hi_open && d == hi))
        return vkt_parse_fail(p, key, "%g is out of range: %s must be in %c%g, %g%c", d, meaning,
                              lo_open ? '(' : '[', lo, hi, hi_open ? ')' : ']');
    *out = (float)d;
    return VKT_OK;
}

vkt_status vkt_parse_pair(const vkt_layer_parse *p, const char *key, bool required, uint32_t lo,
                          uint32_t hi, const char *meaning, uint32_t out[2]) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(p->json, key);
    char path[256];
    key_path(p, key, path, sizeof path);
    if (!v) {
        if (required) return bad(p->src, path, "missing (%s is required)", meaning);
        return VKT_OK;
    }
    if (cJSON_IsNumber(v)) {
        uint32_t x;
        VKT_TRY(get_uint(p->src, path, v, lo, hi, meaning, &x));
        out[0] = out[1] = x;
        return VKT_OK;
    }
    if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) != 2)
        return bad(p->src, path, "expected a whole number or a list [h, w] of two (%s), found %s",
                   meaning, cJSON_IsArray(v) ? "a list of another length" : kind_of(v));
    uint32_t hw[2];
    for (int i = 0; i < 2; i++) {
        char sub[300];
        snprintf(sub, sizeof sub, "%s[%d]", path, i);
        VKT_TRY(get_uint(p->src, sub, cJSON_GetArrayItem(v, i), lo, hi, meaning, &hw[i]));
    }
    out[0] = hw[0];
    out[1] = hw[1];
    return VKT_OK;
}

// "dense, flatten, gelu, ..." in alphabetical order.
static void known_types(char *buf, size_t size) {
    const char *names[64];
    int n = 0;
    for (int i = 0; vkt_layer_types[i] && n < 64; i++)
        names[n++] = vkt_layer_types[i]->name;
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && strcmp(names[j - 1], names[j]) > 0; j--) {
            const char *t = names[j];
            names[j] = names[j - 1];
            names[j - 1] = t;
        }
    buf[0] = 0;
    for (int i = 0; i < n; i++) {
        size_t k = strlen(buf);
        snprintf(buf + k, size - k, "%s%s", i ? ", " : "", names[i]);
    }
}

static vkt_status parse_layer(const char *src, const char *path, const cJSON *j, vkt_shape in,
                              vkt_layer_desc *l) {
    char sub[256];
    memset(l, 0, sizeof *l);
    if (!cJSON_IsObject(j))
        return bad(src, path,
                   "expected an object like {\"type\": \"dense\", \"units\": 128}, "
                   "found %s",
                   kind_of(j));
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(j, "type");
    snprintf(sub, sizeof sub, "%s.type", path);
    if (!type) return bad(src, sub, "missing (every layer needs a \"type\")");
    if (!cJSON_IsString(type)) return bad(src, sub, "expected a string, found %s", kind_of(type));
    const vkt_layer_type *t = vkt_layer_type_find(type->valuestring);
    if (!t) {
        char known[512];
        known_types(known, sizeof known);
        return bad(src, sub, "unknown layer type \"%s\" (known: %s)", type->valuestring, known);
    }
    const char *keys[16] = {"type"};
    int nk = 1;
    for (int i = 0; t->keys && t->keys[i]; i++) {
        VKT_ASSERT(nk < 15); // a kind's key list fits the table
        keys[nk++] = t->keys[i];
    }
    keys[nk] = NULL;
    VKT_TRY(check_keys(src, j, path, keys));
    vkt_layer_parse p = {.src = src, .json = j};
    snprintf(p.path, sizeof p.path, "%s", path);
    l->type = t;
    l->in = in;
    l->in_features = (uint32_t)vkt_shape_elements(&in);
    VKT_TRY(t->parse(&p, l));
    uint64_t out = vkt_shape_elements(&l->out);
    if (out > MAX_UNITS)
        return bad(src, path, "its output %s has %llu elements per sample, over %u", "shape",
                   (unsigned long long)out, MAX_UNITS);
    l->out_features = (uint32_t)out;
    return VKT_OK;
}

// The layers of the array `arr` at `path` ("layers", "layers[2].layers"), from shape in.
static vkt_status parse_list(const char *src, const char *path, const cJSON *arr, vkt_shape in,
                             vkt_layer_desc **out, int *count, vkt_shape *last) {
    *out = NULL;
    *count = 0;
    if (!cJSON_IsArray(arr))
        return bad(src, path, "expected an array of layers, found %s", kind_of(arr));
    int n = cJSON_GetArraySize(arr);
    if (n == 0)
        return bad(src, path,
                   "the model has no layers: add at least one "
                   "{\"type\": \"dense\", \"units\": N}");
    vkt_layer_desc *ls = calloc((size_t)n, sizeof *ls);
    if (!ls) return vkt_fail(VKT_ERR_HOST_MEMORY, "out of host memory parsing %s", src);
    *out = ls;
    int k = 0;
    for (const cJSON *j = arr->child; j; j = j->next, k++) {
        char sub[224];
        snprintf(sub, sizeof sub, "%s[%d]", path, k);
        vkt_status s = parse_layer(src, sub, j, in, &ls[k]);
        *count = k + 1; // what was filled, for freeing
        VKT_TRY(s);
        in = ls[k].out;
    }
    *last = in;
    return VKT_OK;
}

vkt_status vkt_parse_body(const vkt_layer_parse *p, const char *key, vkt_layer_desc *l) {
    const cJSON *arr = cJSON_GetObjectItemCaseSensitive(p->json, key);
    char path[256];
    key_path(p, key, path, sizeof path);
    if (!arr) return bad(p->src, path, "missing (the list of layers of the block)");
    return parse_list(p->src, path, arr, l->in, &l->layers, &l->nlayers, &l->out);
}

// ---------------------------------------------------------------------------------------------
// The whole model

// Reports invalid JSON, or JSON nested past the reader's limit, with its byte offset, line, column
// and the text there.
static vkt_status bad_json(const char *src, const char *text, size_t len, const char *at) {
    size_t off = at && at >= text && at <= text + len ? (size_t)(at - text) : len;
    int line = 1, col = 1;
    for (size_t i = 0; i < off; i++) {
        if (text[i] == '\n') {
            line++;
            col = 1;
        } else {
            col++;
        }
    }
    char near[24];
    size_t n = 0;
    for (size_t i = off; i < len && n < 20 && text[i] != '\n'; i++)
        near[n++] = isprint((unsigned char)text[i]) ? text[i] : '?';
    near[n] = 0;
    if (vkt_json_too_deep(text, len, off))
        return vkt_fail(VKT_ERR_FORMAT,
                        "%s: arrays and objects nested deeper than %d levels at byte %zu (line %d, "
                        "column %d): the JSON reader stops there; a model file nests a few levels",
                        src, vkt_json_nesting_limit(), off, line, col);
    if (off >= len)
        return vkt_fail(VKT_ERR_FORMAT,
                        "%s: invalid JSON: the text ends early at byte %zu (line %d, column %d): "
                        "check for a missing '}', ']' or '\"'",
                        src, off, line, col);
    return vkt_fail(VKT_ERR_FORMAT,
                    "%s: invalid JSON at byte %zu (line %d, column %d), near \"%s\": check for a "
                    "missing comma, quote or bracket",
                    src, off, line, col, near);
}

// The default name: the file name without directories and ".json".
static void default_name(const char *src, char *name, size_t size) {
    const char *b = strrchr(src, '/');
    b = b ? b + 1 : src;
    snprintf(name, size, "%s", b);
    size_t n = strlen(name);
    if (n > 5 && strcmp(name + n - 5, ".json") == 0) name[n - 5] = 0;
    if (!*name) snprintf(name, size, "model");
}

static vkt_status parse_root(const char *src, const cJSON *root, vkt_model_desc *m) {
    static const char *const top_keys[] = {"name", "description", "input", "layers", "loss", NULL};
    if (!cJSON_IsObject(root))
        return bad(src, "(top level)",
                   "expected an object {\"input\": ..., \"layers\": ..., "
                   "\"loss\": ...}, found %s",
                   kind_of(root));
    VKT_TRY(check_keys(src, root, "", top_keys));

    const cJSON *name = cJSON_GetObjectItemCaseSensitive(root, "name");
    if (name) {
        if (!cJSON_IsString(name))
            return bad(src, "name", "expected a string, found %s", kind_of(name));
        size_t n = strlen(name->valuestring);
        if (n == 0 || n >= sizeof m->name)
            return bad(src, "name", "must be 1 to %zu bytes long, found %zu", sizeof m->name - 1,
                       n);
        memcpy(m->name, name->valuestring, n + 1);
    } else {
        default_name(src, m->name, sizeof m->name);
    }
    const cJSON *desc = cJSON_GetObjectItemCaseSensitive(root, "description");
    if (desc && !cJSON_IsString(desc))
        return bad(src, "description", "expected a string, found %s", kind_of(desc));

    const cJSON *input = cJSON_GetObjectItemCaseSensitive(root, "input");
    if (!input) return bad(src, "input", "missing (the shape of one sample, e.g. [784])");
    if (!cJSON_IsArray(input))
        return bad(src, "input",
                   "expected an array of dimensions like [784] or [1, 28, 28], "
                   "found %s",
                   kind_of(input));
    int ndim = cJSON_GetArraySize(input);
    if (ndim < 1 || ndim > VKT_MAX_DIMS)
        return bad(src, "input", "expected 1 to %d dimensions, found %d", VKT_MAX_DIMS, ndim);
    uint64_t features = 1;
    int k = 0;
    for (const cJSON *d = input->child; d; d = d->next, k++) {
        char path[32];
        snprintf(path, sizeof path, "input[%d]", k);
        uint32_t v;
        VKT_TRY(get_uint(src, path, d, 1, MAX_UNITS, "a dimension of the input", &v));
        features *= v;
        if (features > MAX_UNITS)
            return bad(src, "input", "the product of the dimensions is over %u features",
                       MAX_UNITS);
        m->input.dim[k] = v;
    }
    m->input.ndim = ndim;
    m->input_features = (uint32_t)features;

    const cJSON *layers = cJSON_GetObjectItemCaseSensitive(root, "layers");
    if (!layers) return bad(src, "layers", "missing (the list of layers, in order)");
    VKT_TRY(parse_list(src, "layers", layers, m->input, &m->layers, &m->nlayers, &m->output));
    if (vkt_model_param_count(m) == 0)
        return bad(src, "layers",
                   "the model has no dense layer or other layer with parameters, so it has "
                   "nothing to train: add {\"type\": \"dense\", \"units\": N}");
    m->output_features = (uint32_t)vkt_shape_elements(&m->output);

    const cJSON *loss = cJSON_GetObjectItemCaseSensitive(root, "loss");
    if (!loss) return bad(src, "loss", "missing (\"softmax_cross_entropy\" or \"mse\")");
    if (!cJSON_IsString(loss))
        return bad(src, "loss", "expected \"softmax_cross_entropy\" or \"mse\", found %s",
                   kind_of(loss));
    if (strcmp(loss->valuestring, "softmax_cross_entropy") == 0) {
        m->loss = VKT_LOSS_SOFTMAX_XENT;
        if (m->output_features < 2)
            return bad(src, "loss",
                       "softmax_cross_entropy needs at least 2 outputs (one per class), the last "
                       "layer has %u",
                       m->output_features);
        uint32_t classes = m->output.dim[m->output.ndim - 1];
        if (classes < 2) {
            char sh[96];
            vkt_shape_format(&m->output, sh, sizeof sh);
            return bad(src, "loss",
                       "softmax_cross_entropy scores classes along the output's last dimension, "
                       "which must be at least 2; the output is %s",
                       sh);
        }
    } else if (strcmp(loss->valuestring, "mse") == 0) {
        m->loss = VKT_LOSS_MSE;
    } else {
        return bad(src, "loss", "unknown loss \"%s\" (known: softmax_cross_entropy, mse)",
                   loss->valuestring);
    }
    return VKT_OK;
}

uint32_t vkt_model_classes(const vkt_model_desc *m) {
    return m->loss == VKT_LOSS_SOFTMAX_XENT ? m->output.dim[m->output.ndim - 1] : 0;
}

uint32_t vkt_model_targets_per_sample(const vkt_model_desc *m) {
    return m->loss == VKT_LOSS_MSE ? m->output_features : m->output_features / vkt_model_classes(m);
}

vkt_status vkt_model_parse(const char *json_text, const char *source_name, vkt_model_desc *out) {
    memset(out, 0, sizeof *out);
    const char *src = source_name && *source_name ? source_name : "model";
    size_t len = strlen(json_text);
    const char *end = NULL;
    // The length includes the terminating NUL: with require_null_terminated, cJSON 1.7 insists
    // on finding it inside the buffer, and it is what rejects text after the JSON value.
    cJSON *root = cJSON_ParseWithLengthOpts(json_text, len + 1, &end, 1);
    if (!root) return bad_json(src, json_text, len, end ? end : cJSON_GetErrorPtr());
    vkt_status s = parse_root(src, root, out);
    cJSON_Delete(root);
    if (s != VKT_OK) vkt_model_free(out);
    return s;
}

vkt_status vkt_model_load(const char *path, vkt_model_desc *out) {
    memset(out, 0, sizeof *out);
    int fd = vkt_open_input(path, "model file", "(see assets/models/ for examples)");
    FILE *f = fd >= 0 ? fdopen(fd, "rb") : NULL;
    if (!f) {
        if (fd < 0) return VKT_ERR_IO; // the message is set
        close(fd);
        return vkt_fail(VKT_ERR_HOST_MEMORY, "out of host memory opening %s", path);
    }
    char *text = malloc(MAX_MODEL_FILE + 1);
    if (!text) {
        fclose(f);
        return vkt_fail(VKT_ERR_HOST_MEMORY, "out of host memory reading %s", path);
    }
    size_t n = fread(text, 1, MAX_MODEL_FILE + 1, f);
    bool err = ferror(f);
    fclose(f);
    vkt_status s = VKT_OK;
    if (err)
        s = vkt_fail(VKT_ERR_IO, "cannot read model file %s", path);
    else if (n > MAX_MODEL_FILE)
        s = vkt_fail(VKT_ERR_FORMAT,
                     "%s: over %u bytes, too large for a model file: is it the "
                     "right file?",
                     path, MAX_MODEL_FILE);
    else if (memchr(text, 0, n))
        s = vkt_fail(VKT_ERR_FORMAT, "%s: invalid JSON: a NUL byte at byte %zu (binary file?)",
                     path, (size_t)((char *)memchr(text, 0, n) - text));
    if (s == VKT_OK) {
        text[n] = 0;
        s = vkt_model_parse(text, path, out);
    }
    free(text);
    return s;
}
