// test_model.c: model description files (engine/nn/model.c), on the host only (no device).
// The shipped models parse to the right shapes and parameter counts (fashion_mlp: 535,818;
// big_mlp: at least 40 million); every option of every layer type is read; every kind of
// malformed file is rejected with VKT_ERR_FORMAT and a message naming the source and the JSON
// path or byte offset of the problem.
#include <stdlib.h>
#include <string.h>

#include "layer.h"
#include "model.h"
#include "test_util.h"

static bool has(const char *msg, const char *needle) { return strstr(msg, needle) != NULL; }

static void load_asset(vt *t, const char *file, vkt_model_desc *m) {
    char path[1024];
    snprintf(path, sizeof path, "%s/assets/models/%s", VKT_SOURCE_DIR, file);
    vkt_status s = vkt_model_load(path, m);
    VT_CHECK(t, s == VKT_OK, "%s: %s", path, vkt_error());
}

static void test_assets(vt *t) {
    vkt_model_desc m;
    load_asset(t, "fashion_mlp.json", &m);
    VT_CHECK(t, strcmp(m.name, "fashion_mlp") == 0, "name %s", m.name);
    VT_CHECK(t, m.input_features == 784 && m.output_features == 10 && m.nlayers == 5,
             "fashion_mlp: in %u out %u layers %d", m.input_features, m.output_features, m.nlayers);
    VT_CHECK(t, m.loss == VKT_LOSS_SOFTMAX_XENT, "loss");
    VT_CHECK(t, vkt_model_param_count(&m) == 535818, "fashion_mlp has %llu parameters",
             (unsigned long long)vkt_model_param_count(&m));
    if (m.nlayers == 5) {
        static const struct {
            const char *kind;
            uint32_t in, out;
        } want[5] = {{"dense", 784, 512},
                     {"relu", 512, 512},
                     {"dense", 512, 256},
                     {"relu", 256, 256},
                     {"dense", 256, 10}};
        for (int i = 0; i < 5; i++) {
            const vkt_layer_desc *l = &m.layers[i];
            VT_CHECK(t,
                     strcmp(vkt_layer_type_name(l), want[i].kind) == 0 &&
                         l->in_features == want[i].in && l->out_features == want[i].out,
                     "layer %d: kind %s %u -> %u", i, vkt_layer_type_name(l), l->in_features,
                     l->out_features);
            if (strcmp(want[i].kind, "dense") == 0)
                VT_CHECK(t, l->bias && l->units == want[i].out, "layer %d: bias, units", i);
            else
                VT_CHECK(t, l->act == VKT_ACT_RELU, "layer %d: relu", i);
        }
    }
    vkt_model_free(&m);
    VT_CHECK(t, m.layers == NULL && m.nlayers == 0, "free zeroes");

    load_asset(t, "tiny_mlp.json", &m);
    VT_CHECK(t,
             vkt_model_param_count(&m) == 784 * 32 + 32 + 32 * 10 + 10 && m.output_features == 10,
             "tiny_mlp has %llu parameters", (unsigned long long)vkt_model_param_count(&m));
    vkt_model_free(&m);

    load_asset(t, "big_mlp.json", &m);
    uint64_t big = vkt_model_param_count(&m);
    VT_CHECK(t, big >= 40000000ull, "big_mlp has only %llu parameters", (unsigned long long)big);
    VT_CHECK(t, big == 784ull * 4096 + 4096 + 3 * (4096ull * 4096 + 4096) + 4096 * 10 + 10,
             "big_mlp has %llu parameters, its description says 53,600,266",
             (unsigned long long)big);
    VT_CHECK(t, m.input_features == 784, "big_mlp input [1, 28, 28] gives %u features",
             m.input_features);
    vkt_model_free(&m);

    // GPT-2 small's shape: its logits [1024, 50257] (51 million floats a sample) are within the
    // per-sample limit of 2^28 elements.
    load_asset(t, "gpt2_small.json", &m);
    VT_CHECK(t, vkt_model_param_count(&m) == 163037184ull,
             "gpt2_small has %llu parameters, its description says 163,037,184",
             (unsigned long long)vkt_model_param_count(&m));
    VT_CHECK(t, m.output_features == 1024u * 50257u && m.input_features == 1024,
             "gpt2_small: in %u out %u", m.input_features, m.output_features);
    vkt_model_free(&m);

    vkt_status s = vkt_model_load("/nonexistent/model.json", &m);
    VT_CHECK(t, s == VKT_ERR_IO && has(vkt_error(), "/nonexistent/model.json"), "%s", vkt_error());
}

static void test_options(vt *t) {
    vkt_model_desc m;
    const char *json =
        "{\"comment\": \"every option\", \"description\": \"x\", \"input\": [2, 3, 4],\n"
        " \"layers\": [\n"
        "  {\"type\": \"dense\", \"units\": 7, \"bias\": false, \"comment_why\": \"no bias\"},\n"
        "  {\"type\": \"leaky_relu\"},\n"
        "  {\"type\": \"leaky_relu\", \"negative_slope\": 0.2},\n"
        "  {\"type\": \"gelu\", \"approximate\": \"tanh\"},\n"
        "  {\"type\": \"gelu\"},\n"
        "  {\"type\": \"tanh\"},\n"
        "  {\"type\": \"dense\", \"units\": 3.0},\n"
        "  {\"type\": \"sigmoid\"}],\n"
        " \"loss\": \"mse\"}";
    vkt_status s = vkt_model_parse(json, "dir/opts.json", &m);
    VT_CHECK(t, s == VKT_OK, "%s", vkt_error());
    if (s != VKT_OK) return;
    VT_CHECK(t, strcmp(m.name, "opts") == 0, "default name from the file: %s", m.name);
    // Dense layers apply to the last dimension, as torch.nn.Linear: [2, 3, 4] -> [2, 3, 7] ->
    // ... -> [2, 3, 3].
    VT_CHECK(t,
             m.input_features == 24 && m.nlayers == 8 && m.output_features == 18 &&
                 m.output.ndim == 3 && m.output.dim[0] == 2 && m.output.dim[1] == 3 &&
                 m.output.dim[2] == 3 && m.input.ndim == 3 && m.input.dim[2] == 4 &&
                 m.loss == VKT_LOSS_MSE,
             "in %u layers %d out %u", m.input_features, m.nlayers, m.output_features);
    VT_CHECK(t, !m.layers[0].bias && m.layers[0].units == 7, "dense without bias");
    VT_CHECK(t, m.layers[1].act == VKT_ACT_LEAKY_RELU && m.layers[1].alpha == 0.01f,
             "leaky_relu default slope %g", m.layers[1].alpha);
    VT_CHECK(t, m.layers[2].alpha == 0.2f, "leaky_relu slope %g", m.layers[2].alpha);
    VT_CHECK(t, m.layers[3].act == VKT_ACT_GELU && m.layers[4].act == VKT_ACT_GELU_ERF,
             "gelu: tanh where asked, exact (erf) by default as nn.GELU()");
    VT_CHECK(t, m.layers[5].act == VKT_ACT_TANH && m.layers[7].act == VKT_ACT_SIGMOID,
             "tanh, sigmoid");
    VT_CHECK(t, m.layers[6].in.dim[2] == 7 && m.layers[6].in_features == 42 && m.layers[6].bias,
             "second dense");
    VT_CHECK(t, vkt_model_param_count(&m) == 4 * 7 + 7 * 3 + 3, "param count %llu",
             (unsigned long long)vkt_model_param_count(&m));
    VT_CHECK(t,
             strcmp(vkt_model_act_name(VKT_ACT_LEAKY_RELU), "leaky_relu") == 0 &&
                 strcmp(vkt_model_loss_name(VKT_LOSS_SOFTMAX_XENT), "softmax_cross_entropy") == 0,
             "names");
    vkt_model_free(&m);
}

// Residual blocks: shapes, nesting, parameter names as PyTorch's Residual(nn.Sequential) gives
// them, counts, and the PyTorch expression; the shipped residual_mlp; flatten.
static void test_residual(vt *t) {
    vkt_model_desc m;
    const char *json =
        "{\"input\": [2, 6], \"layers\": [\n"
        "  {\"type\": \"dense\", \"units\": 8},\n"
        "  {\"type\": \"residual\", \"layers\": [{\"type\": \"dense\", \"units\": 5},\n"
        "     {\"type\": \"relu\"}, {\"type\": \"dense\", \"units\": 8}]},\n"
        "  {\"type\": \"residual\", \"layers\": [{\"type\": \"tanh\"},\n"
        "     {\"type\": \"residual\", \"layers\": [{\"type\": \"dense\", \"units\": 8, "
        "\"bias\": false}]}]},\n"
        "  {\"type\": \"flatten\"}, {\"type\": \"dense\", \"units\": 3}],\n"
        " \"loss\": \"softmax_cross_entropy\"}";
    VT_OK(t, vkt_model_parse(json, "res.json", &m));
    if (t->failures) return;
    VT_CHECK(t,
             m.nlayers == 5 && m.layers[1].nlayers == 3 && m.layers[2].nlayers == 2 &&
                 m.layers[2].layers[1].nlayers == 1,
             "the tree: %d top-level layers", m.nlayers);
    VT_CHECK(t,
             m.layers[1].out.ndim == 2 && m.layers[1].out.dim[1] == 8 &&
                 m.layers[3].out.ndim == 1 && m.layers[3].out.dim[0] == 16 &&
                 m.output_features == 3,
             "shapes through the blocks and the flatten");
    uint64_t want = (6 * 8 + 8) + (8 * 5 + 5 + 5 * 8 + 8) + 8 * 8 + (16 * 3 + 3);
    VT_CHECK(t, vkt_model_param_count(&m) == want, "param count %llu, want %llu",
             (unsigned long long)vkt_model_param_count(&m), (unsigned long long)want);
    vkt_net_tensor ts[16];
    int n = vkt_model_tensors(&m, 0, m.nlayers, ts, 16);
    static const char *names[] = {"0.weight",     "0.bias",     "1.0.weight",
                                  "1.0.bias",     "1.2.weight", "1.2.bias",
                                  "2.1.0.weight", "4.weight",   "4.bias"};
    VT_CHECK(t, n == 9, "%d tensors, want 9", n);
    for (int i = 0; i < n && i < 9; i++)
        VT_CHECK(t, strcmp(ts[i].name, names[i]) == 0, "tensor %d is %s, want %s", i, ts[i].name,
                 names[i]);
    VT_CHECK(t, ts[2].layer == 1 && ts[6].layer == 2 && ts[6].shape[0] == 8 && ts[6].shape[1] == 8,
             "nested tensors belong to their top-level block");
    char py[1024];
    VT_OK(t, vkt_model_torch(&m, py, sizeof py));
    const char *want_py =
        "nn.Sequential(nn.Linear(6, 8, bias=True), Residual(nn.Linear(8, 5, bias=True), "
        "nn.ReLU(), nn.Linear(5, 8, bias=True)), Residual(nn.Tanh(), Residual(nn.Linear(8, 8, "
        "bias=False))), nn.Flatten(), nn.Linear(16, 3, bias=True))";
    VT_CHECK(t, strcmp(py, want_py) == 0, "PyTorch expression:\n  %s\nwant\n  %s", py, want_py);
    VT_CHECK(t, vkt_model_torch(&m, py, 20) == VKT_ERR_ARG, "a short buffer is refused");
    // Products of a step at B = 4: rows are B * 2 for the [2, C] layers.
    vkt_mm_shape mm[32];
    int k = vkt_model_matmuls(&m, 4, mm, 32);
    VT_CHECK(t, k == 2 + 3 + 3 + 3 + 3, "%d products in a step, want 14", k);
    VT_CHECK(t, k > 1 && mm[0].form == VKT_MM_NT && mm[0].M == 8 && mm[0].N == 8 && mm[0].K == 6,
             "the first product is [8, 6] x [8, 6]^T");
    vkt_model_free(&m);

    load_asset(t, "residual_mlp.json", &m);
    int blocks = 0;
    for (int i = 0; i < m.nlayers; i++)
        blocks += strcmp(vkt_layer_type_name(&m.layers[i]), "residual") == 0;
    VT_CHECK(t, blocks >= 2 && m.output_features == 10 && m.input_features == 784,
             "residual_mlp: %d residual blocks, %u -> %u", blocks, m.input_features,
             m.output_features);
    vkt_model_free(&m);
}

// A model that differs from a valid one in one place.
#define GOOD_LAYERS "[{\"type\": \"dense\", \"units\": 4}, {\"type\": \"relu\"}]"

static const struct bad_case {
    const char *json;
    const char *needles[3];
} g_bad[] = {
    // Invalid JSON: the byte offset and line of the problem (missing comma on line 3).
    {"{\"input\": [4],\n \"layers\": [\n  {\"type\": \"dense\" \"units\": 4}],\n \"loss\": "
     "\"mse\"}",
     {"invalid JSON at byte 47", "line 3, column 20", "\"units\""}},
    {"{\"input\": [4], \"layers\": [", {"invalid JSON", "ends early", "byte 26"}},
    {"", {"invalid JSON", "byte 0"}},
    {"{\"input\": [4], \"layers\": " GOOD_LAYERS ", \"loss\": \"mse\"} trailing",
     {"invalid JSON at byte", "near \"trailing\""}},
    {"[1, 2]", {"(top level)", "expected an object", "found an array"}},
    {"{\"layers\": " GOOD_LAYERS ", \"loss\": \"mse\"}", {"input: missing"}},
    {"{\"input\": 784, \"layers\": " GOOD_LAYERS ", \"loss\": \"mse\"}",
     {"input: expected an array", "found a number"}},
    {"{\"input\": [28, 0], \"layers\": " GOOD_LAYERS ", \"loss\": \"mse\"}",
     {"input[1]: 0 is out of range"}},
    {"{\"input\": [], \"layers\": " GOOD_LAYERS ", \"loss\": \"mse\"}",
     {"input: expected 1 to 8 dimensions, found 0"}},
    {"{\"input\": [4], \"loss\": \"mse\"}", {"layers: missing"}},
    {"{\"input\": [4], \"layers\": {}, \"loss\": \"mse\"}",
     {"layers: expected an array", "found an object"}},
    {"{\"input\": [4], \"layers\": [], \"loss\": \"mse\"}", {"layers: the model has no layers"}},
    {"{\"input\": [4], \"layers\": [{\"type\": \"relu\"}], \"loss\": \"mse\"}",
     {"layers: the model has no dense layer"}},
    {"{\"input\": [4], \"layers\": [{\"type\": \"dense\", \"units\": 4}, {\"type\": \"relu\"}, "
     "{\"type\": \"dense\", \"units\": 4}, {\"type\": \"dense\"}], \"loss\": \"mse\"}",
     {"layers[3].units: missing"}},
    {"{\"input\": [4], \"layers\": [{\"type\": \"dense\", \"units\": -5}], \"loss\": \"mse\"}",
     {"layers[0].units: -5 is out of range", "between 1 and"}},
    {"{\"input\": [4], \"layers\": [{\"type\": \"dense\", \"units\": 0}], \"loss\": \"mse\"}",
     {"layers[0].units: 0 is out of range"}},
    {"{\"input\": [4], \"layers\": [{\"type\": \"dense\", \"units\": 2.5}], \"loss\": \"mse\"}",
     {"layers[0].units: expected a whole number", "2.5"}},
    {"{\"input\": [4], \"layers\": [{\"type\": \"dense\", \"units\": \"512\"}], \"loss\": "
     "\"mse\"}",
     {"layers[0].units: expected a whole number", "found a string"}},
    {"{\"input\": [4], \"layers\": [{\"type\": \"dense\", \"units\": 4, \"bias\": \"yes\"}], "
     "\"loss\": \"mse\"}",
     {"layers[0].bias: expected true or false", "found a string"}},
    {"{\"input\": [4], \"layers\": [{\"type\": \"dense\", \"unit\": 4}], \"loss\": \"mse\"}",
     {"layers[0].unit: unknown key", "units"}},
    {"{\"input\": [4], \"layers\": [{\"type\": \"dense\", \"units\": 4}, {\"type\": "
     "\"conv3d\"}], \"loss\": \"mse\"}",
     {"layers[1].type: unknown layer type \"conv3d\"", "known: ", "conv2d, dense, "}},
    {"{\"input\": [4], \"layers\": [{\"units\": 4}], \"loss\": \"mse\"}",
     {"layers[0].type: missing"}},
    {"{\"input\": [4], \"layers\": [{\"type\": 3}], \"loss\": \"mse\"}",
     {"layers[0].type: expected a string", "found a number"}},
    {"{\"input\": [4], \"layers\": [{\"type\": \"dense\", \"units\": 4}, 7], \"loss\": \"mse\"}",
     {"layers[1]: expected an object", "found a number"}},
    {"{\"input\": [4], \"layers\": [{\"type\": \"dense\", \"units\": 4}, {\"type\": \"gelu\", "
     "\"approximate\": \"erf\"}], \"loss\": \"mse\"}",
     {"layers[1].approximate", "unknown value \"erf\"", "\"none\""}},
    {"{\"input\": [4], \"layers\": [{\"type\": \"dense\", \"units\": 4}, {\"type\": "
     "\"leaky_relu\", \"negative_slope\": \"small\"}], \"loss\": \"mse\"}",
     {"layers[1].negative_slope: expected a finite number"}},
    {"{\"input\": [4], \"layers\": [{\"type\": \"dense\", \"units\": 4}, {\"type\": \"relu\", "
     "\"units\": 3}], \"loss\": \"mse\"}",
     {"layers[1].units: unknown key", "allowed here: type"}},
    {"{\"input\": [4], \"layers\": [{\"type\": \"residual\", \"layers\": [{\"type\": "
     "\"dense\", \"units\": 3}]}], \"loss\": \"mse\"}",
     {"layers[0].layers: the body turns the block's input [4] into [3]", "same shape"}},
    {"{\"input\": [4], \"layers\": [{\"type\": \"residual\"}], \"loss\": \"mse\"}",
     {"layers[0].layers: missing"}},
    {"{\"input\": [4], \"layers\": [{\"type\": \"residual\", \"layers\": [{\"type\": "
     "\"dense\", \"units\": 4}, {\"type\": \"dense\", \"unit\": 4}]}], \"loss\": \"mse\"}",
     {"layers[0].layers[1].unit: unknown key"}},
    {"{\"input\": [4], \"layers\": [{\"type\": \"residual\", \"layers\": [{\"type\": "
     "\"dense\", \"units\": 4}, {\"type\": \"flatten\"}]}], \"loss\": \"mse\"}",
     {"layers[0].layers: the body may not end in a flatten"}},
    {"{\"input\": [3, 4], \"layers\": [{\"type\": \"dense\", \"units\": 1}], \"loss\": "
     "\"softmax_cross_entropy\"}",
     {"loss: softmax_cross_entropy scores classes along the output's last dimension", "[3, 1]"}},
    {"{\"input\": [4], \"layers\": " GOOD_LAYERS "}", {"loss: missing"}},
    {"{\"input\": [4], \"layers\": " GOOD_LAYERS ", \"loss\": \"hinge\"}",
     {"loss: unknown loss \"hinge\"", "softmax_cross_entropy, mse"}},
    {"{\"input\": [4], \"layers\": " GOOD_LAYERS ", \"loss\": 1}",
     {"loss: expected", "found a number"}},
    {"{\"input\": [4], \"layers\": [{\"type\": \"dense\", \"units\": 1}], \"loss\": "
     "\"softmax_cross_entropy\"}",
     {"loss: softmax_cross_entropy needs at least 2 outputs", "has 1"}},
    {"{\"input\": [4], \"layers\": " GOOD_LAYERS ", \"loss\": \"mse\", \"optimizer\": \"sgd\"}",
     {"optimizer: unknown key", "allowed here: name, description"}},
    {"{\"input\": [4], \"input\": [5], \"layers\": " GOOD_LAYERS ", \"loss\": \"mse\"}",
     {"input: the key appears twice"}},
    {"{\"name\": \"a_name_that_is_far_too_long_for_the_sixty_four_byte_field_of_the_desc\", "
     "\"input\": [4], \"layers\": " GOOD_LAYERS ", \"loss\": \"mse\"}",
     {"name: must be 1 to 63 bytes long, found 69"}},
    {"{\"name\": 5, \"input\": [4], \"layers\": " GOOD_LAYERS ", \"loss\": \"mse\"}",
     {"name: expected a string"}},
    // One layer's output over 2^28 elements a sample: 16385 x 16384.
    {"{\"input\": [16385, 4], \"layers\": [{\"type\": \"dense\", \"units\": 16384}], "
     "\"loss\": \"mse\"}",
     {"layers[0]", "268451840 elements per sample, over 268435456"}},
};

static void test_errors(vt *t) {
    for (size_t i = 0; i < sizeof g_bad / sizeof g_bad[0]; i++) {
        vkt_model_desc m;
        memset(&m, 0x5a, sizeof m);
        vkt_status s = vkt_model_parse(g_bad[i].json, "bad.json", &m);
        VT_CHECK(t, s == VKT_ERR_FORMAT, "case %zu: %s, expected VKT_ERR_FORMAT (%s)", i,
                 vkt_status_name(s), vkt_error());
        VT_CHECK(t, strncmp(vkt_error(), "bad.json: ", 10) == 0,
                 "case %zu: the message does not start with the source: %s", i, vkt_error());
        for (int k = 0; k < 3 && g_bad[i].needles[k]; k++)
            VT_CHECK(t, has(vkt_error(), g_bad[i].needles[k]), "case %zu: \"%s\" lacks \"%s\"", i,
                     vkt_error(), g_bad[i].needles[k]);
        VT_CHECK(t, m.layers == NULL && m.nlayers == 0, "case %zu: a failed parse is not empty", i);
        vkt_model_free(&m);
    }
    // The same JSON, valid apart from the one thing each case breaks, parses.
    vkt_model_desc m;
    VT_OK(t, vkt_model_parse("{\"input\": [4], \"layers\": " GOOD_LAYERS ", \"loss\": \"mse\"}",
                             "good.json", &m));
    vkt_model_free(&m);
}

// 100,000 comment keys (1.9 MB, under the 16 MiB a model file may have): the file parses, and a
// key repeated after all of them is found (the duplicate check is a hash set: pairwise it took
// 22 s).
static void test_many_keys(vt *t) {
    enum { N = 100000 };
    size_t cap = (size_t)N * 24 + 256, n = 0;
    char *json = malloc(cap);
    n += (size_t)snprintf(json + n, cap - n, "{\"input\": [4], ");
    for (int i = 0; i < N; i++)
        n += (size_t)snprintf(json + n, cap - n, "\"comment%d\": 1, ", i);
    size_t body = n;
    n += (size_t)snprintf(json + n, cap - n,
                          "\"layers\": [{\"type\": \"dense\", \"units\": 4}], \"loss\": \"mse\"}");
    vkt_model_desc m;
    VT_OK(t, vkt_model_parse(json, "many.json", &m));
    vkt_model_free(&m);
    snprintf(json + body, cap - body,
             "\"comment77777\": 2, \"layers\": [{\"type\": \"dense\", \"units\": 4}], "
             "\"loss\": \"mse\"}");
    vkt_status s = vkt_model_parse(json, "many.json", &m);
    VT_CHECK(t, s == VKT_ERR_FORMAT && has(vkt_error(), "comment77777: the key appears twice"),
             "a repeated key among 100,000: %s", vkt_error());
    vkt_model_free(&m);
    free(json);
}

// JSON nested past cJSON's limit (1000 levels) is reported as such, with where, not as a missing
// comma; 1000 levels (the top-level object and 999 arrays in a comment) still parse. A string
// full of brackets before the nesting does not count.
static void test_nesting(vt *t) {
    for (int k = 999; k <= 1001; k++) {
        size_t cap = (size_t)k * 2 + 512, n = 0;
        char *json = malloc(cap);
        n += (size_t)snprintf(json + n, cap - n, "{\"input\": [4], \"comment0\": \"[[{{\\\"[\", ");
        n += (size_t)snprintf(json + n, cap - n, "\"comment\": ");
        size_t deep = n;
        for (int i = 0; i < k; i++)
            json[n++] = '[';
        for (int i = 0; i < k; i++)
            json[n++] = ']';
        snprintf(json + n, cap - n,
                 ", \"layers\": [{\"type\": \"dense\", \"units\": 4}], \"loss\": \"mse\"}");
        vkt_model_desc m;
        vkt_status s = vkt_model_parse(json, "deep.json", &m);
        if (k == 999) {
            VT_CHECK(t, s == VKT_OK, "1000 levels: %s", vkt_error());
        } else {
            char at[64];
            snprintf(at, sizeof at, "at byte %zu (line 1, column %zu)", deep + 999, deep + 1000);
            VT_CHECK(t,
                     s == VKT_ERR_FORMAT && has(vkt_error(), "deep.json: ") &&
                         has(vkt_error(), "nested deeper than 1000 levels") &&
                         has(vkt_error(), at) && !has(vkt_error(), "comma"),
                     "%d + 1 levels: %s (expected the nesting %s)", k, vkt_error(), at);
        }
        vkt_model_free(&m);
        free(json);
    }
    // A syntax error deep inside (but within the limit) is still a syntax error.
    vkt_model_desc m;
    vkt_status s = vkt_model_parse("{\"comment\": [[[[1 2]]]]}", "comma.json", &m);
    VT_CHECK(
        t, s == VKT_ERR_FORMAT && has(vkt_error(), "missing comma") && !has(vkt_error(), "nested"),
        "syntax error: %s", vkt_error());
    vkt_model_free(&m);
}

int main(void) {
    vt t = {.name = "test_model"};
    test_assets(&t);
    test_options(&t);
    test_residual(&t);
    test_errors(&t);
    test_many_keys(&t);
    test_nesting(&t);
    return vt_finish(&t);
}
