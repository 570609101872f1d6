// test_model.c: model description files (engine/nn/model.c), on the host only (no device).
// The shipped models parse to the right shapes and parameter counts (fashion_mlp: 535,818;
// big_mlp: at least 40 million); every option of every layer type is read; every kind of
// malformed file is rejected with VKT_ERR_FORMAT and a message naming the source and the JSON
// path or byte offset of the problem.
#include <stdlib.h>
#include <string.h>

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
            vkt_layer_kind kind;
            uint32_t in, out;
        } want[5] = {{VKT_LAYER_DENSE, 784, 512},
                     {VKT_LAYER_ACTIVATION, 512, 512},
                     {VKT_LAYER_DENSE, 512, 256},
                     {VKT_LAYER_ACTIVATION, 256, 256},
                     {VKT_LAYER_DENSE, 256, 10}};
        for (int i = 0; i < 5; i++) {
            const vkt_layer_desc *l = &m.layers[i];
            VT_CHECK(t,
                     l->kind == want[i].kind && l->in_features == want[i].in &&
                         l->out_features == want[i].out,
                     "layer %d: kind %d %u -> %u", i, l->kind, l->in_features, l->out_features);
            if (l->kind == VKT_LAYER_DENSE)
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
    VT_CHECK(t,
             m.input_features == 24 && m.nlayers == 8 && m.output_features == 3 &&
                 m.loss == VKT_LOSS_MSE,
             "in %u layers %d out %u", m.input_features, m.nlayers, m.output_features);
    VT_CHECK(t, !m.layers[0].bias && m.layers[0].units == 7, "dense without bias");
    VT_CHECK(t, m.layers[1].act == VKT_ACT_LEAKY_RELU && m.layers[1].alpha == 0.01f,
             "leaky_relu default slope %g", m.layers[1].alpha);
    VT_CHECK(t, m.layers[2].alpha == 0.2f, "leaky_relu slope %g", m.layers[2].alpha);
    VT_CHECK(t, m.layers[3].act == VKT_ACT_GELU && m.layers[4].act == VKT_ACT_GELU, "gelu");
    VT_CHECK(t, m.layers[5].act == VKT_ACT_TANH && m.layers[7].act == VKT_ACT_SIGMOID,
             "tanh, sigmoid");
    VT_CHECK(t, m.layers[6].in_features == 7 && m.layers[6].bias, "second dense");
    VT_CHECK(t, vkt_model_param_count(&m) == 24 * 7 + 7 * 3 + 3, "param count %llu",
             (unsigned long long)vkt_model_param_count(&m));
    VT_CHECK(t,
             strcmp(vkt_model_act_name(VKT_ACT_LEAKY_RELU), "leaky_relu") == 0 &&
                 strcmp(vkt_model_loss_name(VKT_LOSS_SOFTMAX_XENT), "softmax_cross_entropy") == 0,
             "names");
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
     "\"conv2d\"}], \"loss\": \"mse\"}",
     {"layers[1].type: unknown layer type \"conv2d\"", "known: dense"}},
    {"{\"input\": [4], \"layers\": [{\"units\": 4}], \"loss\": \"mse\"}",
     {"layers[0].type: missing"}},
    {"{\"input\": [4], \"layers\": [{\"type\": 3}], \"loss\": \"mse\"}",
     {"layers[0].type: expected a string", "found a number"}},
    {"{\"input\": [4], \"layers\": [{\"type\": \"dense\", \"units\": 4}, 7], \"loss\": \"mse\"}",
     {"layers[1]: expected an object", "found a number"}},
    {"{\"input\": [4], \"layers\": [{\"type\": \"dense\", \"units\": 4}, {\"type\": \"gelu\", "
     "\"approximate\": \"none\"}], \"loss\": \"mse\"}",
     {"layers[1].approximate", "only the tanh approximation"}},
    {"{\"input\": [4], \"layers\": [{\"type\": \"dense\", \"units\": 4}, {\"type\": \"gelu\", "
     "\"approximate\": \"erf\"}], \"loss\": \"mse\"}",
     {"layers[1].approximate", "only \"tanh\""}},
    {"{\"input\": [4], \"layers\": [{\"type\": \"dense\", \"units\": 4}, {\"type\": "
     "\"leaky_relu\", \"negative_slope\": \"small\"}], \"loss\": \"mse\"}",
     {"layers[1].negative_slope: expected a finite number"}},
    {"{\"input\": [4], \"layers\": [{\"type\": \"dense\", \"units\": 4}, {\"type\": \"relu\", "
     "\"units\": 3}], \"loss\": \"mse\"}",
     {"layers[1].units: unknown key", "allowed here: type"}},
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

int main(void) {
    vt t = {.name = "test_model"};
    test_assets(&t);
    test_options(&t);
    test_errors(&t);
    return vt_finish(&t);
}
