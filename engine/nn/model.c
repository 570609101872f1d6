// model.c: parses and checks model description files (JSON, read with cJSON) into a
// vkt_model_desc. The format is in model.h and docs/MODEL_FORMAT.md.
//
// Every rejection says where: the byte offset, line and column of invalid JSON, or the JSON path
// of the offending value ("layers[3].units"), with what was found and what would be accepted.
// Not here: anything about parameters' storage, initialization or kernels.
#include "model.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "vkt_internal.h"

// Larger than any layer the engine's 32-bit element indexing is meant for; a bigger value is
// almost surely a typo.
#define MAX_UNITS (1u << 24)
#define MAX_INPUT_DIMS 8
#define MAX_MODEL_FILE (16u << 20)

const char *vkt_model_act_name(vkt_act act) {
    switch (act) {
    case VKT_ACT_RELU: return "relu";
    case VKT_ACT_LEAKY_RELU: return "leaky_relu";
    case VKT_ACT_GELU: return "gelu";
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

void vkt_model_free(vkt_model_desc *m) {
    if (!m) return;
    free(m->layers);
    memset(m, 0, sizeof *m);
}

uint64_t vkt_model_param_count(const vkt_model_desc *m) {
    uint64_t n = 0;
    for (int i = 0; i < m->nlayers; i++) {
        const vkt_layer_desc *l = &m->layers[i];
        if (l->kind != VKT_LAYER_DENSE) continue;
        n += (uint64_t)l->in_features * l->out_features + (l->bias ? l->out_features : 0);
    }
    return n;
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

// Rejects keys of obj not in allowed (NULL-terminated) and duplicated keys. prefix is the JSON
// path of obj ("" at the top level).
static vkt_status check_keys(const char *src, const cJSON *obj, const char *prefix,
                             const char *const *allowed) {
    for (const cJSON *c = obj->child; c; c = c->next) {
        char path[256];
        snprintf(path, sizeof path, "%s%s%s", prefix, *prefix ? "." : "", c->string);
        for (const cJSON *d = obj->child; d != c; d = d->next)
            if (strcmp(d->string, c->string) == 0)
                return bad(src, path, "the key appears twice; keep one");
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

typedef struct layer_type {
    const char *name;
    vkt_layer_kind kind;
    vkt_act act;
    const char *keys[4]; // allowed keys, NULL-terminated
} layer_type;

static const layer_type g_types[] = {
    {"dense", VKT_LAYER_DENSE, VKT_ACT_RELU, {"type", "units", "bias", NULL}},
    {"relu", VKT_LAYER_ACTIVATION, VKT_ACT_RELU, {"type", NULL}},
    {"leaky_relu", VKT_LAYER_ACTIVATION, VKT_ACT_LEAKY_RELU, {"type", "negative_slope", NULL}},
    {"gelu", VKT_LAYER_ACTIVATION, VKT_ACT_GELU, {"type", "approximate", NULL}},
    {"tanh", VKT_LAYER_ACTIVATION, VKT_ACT_TANH, {"type", NULL}},
    {"sigmoid", VKT_LAYER_ACTIVATION, VKT_ACT_SIGMOID, {"type", NULL}},
};
#define NTYPES (int)(sizeof g_types / sizeof g_types[0])

static vkt_status parse_layer(const char *src, const cJSON *j, int index, uint32_t in,
                              vkt_layer_desc *l) {
    char path[64], sub[96];
    snprintf(path, sizeof path, "layers[%d]", index);
    if (!cJSON_IsObject(j))
        return bad(src, path,
                   "expected an object like {\"type\": \"dense\", \"units\": 128}, "
                   "found %s",
                   kind_of(j));
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(j, "type");
    snprintf(sub, sizeof sub, "%s.type", path);
    if (!type) return bad(src, sub, "missing (every layer needs a \"type\")");
    if (!cJSON_IsString(type)) return bad(src, sub, "expected a string, found %s", kind_of(type));
    const layer_type *t = NULL;
    for (int i = 0; i < NTYPES && !t; i++)
        if (strcmp(g_types[i].name, type->valuestring) == 0) t = &g_types[i];
    if (!t)
        return bad(src, sub,
                   "unknown layer type \"%s\" (known: dense, relu, leaky_relu, gelu, tanh, "
                   "sigmoid)",
                   type->valuestring);
    VKT_TRY(check_keys(src, j, path, t->keys));

    memset(l, 0, sizeof *l);
    l->kind = t->kind;
    l->act = t->act;
    l->in_features = in;
    if (t->kind == VKT_LAYER_DENSE) {
        const cJSON *units = cJSON_GetObjectItemCaseSensitive(j, "units");
        snprintf(sub, sizeof sub, "%s.units", path);
        if (!units) return bad(src, sub, "missing (a dense layer needs its number of outputs)");
        VKT_TRY(get_uint(src, sub, units, 1, MAX_UNITS, "the number of outputs", &l->units));
        l->bias = true;
        const cJSON *bias = cJSON_GetObjectItemCaseSensitive(j, "bias");
        if (bias) {
            snprintf(sub, sizeof sub, "%s.bias", path);
            if (!cJSON_IsBool(bias))
                return bad(src, sub, "expected true or false, found %s", kind_of(bias));
            l->bias = cJSON_IsTrue(bias);
        }
        l->out_features = l->units;
        return VKT_OK;
    }
    l->out_features = in;
    if (t->act == VKT_ACT_LEAKY_RELU) {
        l->alpha = 0.01f; // PyTorch's default
        const cJSON *slope = cJSON_GetObjectItemCaseSensitive(j, "negative_slope");
        if (slope) {
            snprintf(sub, sizeof sub, "%s.negative_slope", path);
            if (!cJSON_IsNumber(slope) || !isfinite(slope->valuedouble))
                return bad(src, sub, "expected a finite number, found %s", kind_of(slope));
            l->alpha = (float)slope->valuedouble;
        }
    }
    if (t->act == VKT_ACT_GELU) {
        const cJSON *ap = cJSON_GetObjectItemCaseSensitive(j, "approximate");
        if (ap) {
            snprintf(sub, sizeof sub, "%s.approximate", path);
            if (!cJSON_IsString(ap))
                return bad(src, sub, "expected \"tanh\", found %s", kind_of(ap));
            if (strcmp(ap->valuestring, "none") == 0)
                return bad(src, sub,
                           "\"none\" (exact erf GELU) is not supported: only the tanh "
                           "approximation is; write \"approximate\": \"tanh\"");
            if (strcmp(ap->valuestring, "tanh") != 0)
                return bad(src, sub, "unknown value \"%s\": only \"tanh\" is supported",
                           ap->valuestring);
        }
    }
    return VKT_OK;
}

// ---------------------------------------------------------------------------------------------
// The whole model

// Reports invalid JSON with its byte offset, line, column and the text there.
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
    if (ndim < 1 || ndim > MAX_INPUT_DIMS)
        return bad(src, "input", "expected 1 to %d dimensions, found %d", MAX_INPUT_DIMS, ndim);
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
    }
    m->input_features = (uint32_t)features;

    const cJSON *layers = cJSON_GetObjectItemCaseSensitive(root, "layers");
    if (!layers) return bad(src, "layers", "missing (the list of layers, in order)");
    if (!cJSON_IsArray(layers))
        return bad(src, "layers", "expected an array of layers, found %s", kind_of(layers));
    int n = cJSON_GetArraySize(layers);
    if (n == 0)
        return bad(src, "layers",
                   "the model has no layers: add at least one "
                   "{\"type\": \"dense\", \"units\": N}");
    m->layers = calloc((size_t)n, sizeof *m->layers);
    if (!m->layers) return vkt_fail(VKT_ERR_HOST_MEMORY, "out of host memory parsing %s", src);
    m->nlayers = n;
    uint32_t in = m->input_features;
    bool any_dense = false;
    k = 0;
    for (const cJSON *l = layers->child; l; l = l->next, k++) {
        VKT_TRY(parse_layer(src, l, k, in, &m->layers[k]));
        in = m->layers[k].out_features;
        any_dense |= m->layers[k].kind == VKT_LAYER_DENSE;
    }
    if (!any_dense)
        return bad(src, "layers",
                   "the model has no dense layer, so it has nothing to train: add "
                   "{\"type\": \"dense\", \"units\": N}");
    m->output_features = in;

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
    } else if (strcmp(loss->valuestring, "mse") == 0) {
        m->loss = VKT_LOSS_MSE;
    } else {
        return bad(src, "loss", "unknown loss \"%s\" (known: softmax_cross_entropy, mse)",
                   loss->valuestring);
    }
    return VKT_OK;
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
    FILE *f = fopen(path, "rb");
    if (!f)
        return vkt_fail(VKT_ERR_IO,
                        "cannot open model file %s: %s (see assets/models/ for "
                        "examples)",
                        path, strerror(errno));
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
