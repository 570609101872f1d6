// fuzz_model.c: libFuzzer harness of the model file parser. The input is the text of a model
// file: vkt_model_parse (cJSON, the top level, every layer kind's parse function through the
// vkt_parse_* helpers, nested blocks), then, when it parses, what `vktrain model` and the planner
// ask of a parsed model (parameter count, costs, the matrix products of a step, the PyTorch
// module text), which read the parsed numbers. Any input must give VKT_OK or VKT_ERR_FORMAT
// with a message; anything else (a crash, a sanitizer report, another status) is a finding.
#include "fuzz_util.h"

#include "model.h"
#include "vktrain.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = malloc(size + 1);
    if (!text) abort();
    memcpy(text, data, size);
    text[size] = 0; // vkt_model_load refuses a NUL inside; the parser reads up to the first
    vkt_model_desc m;
    vkt_status s = vkt_model_parse(text, "fuzz.json", &m);
    if (s != VKT_OK && s != VKT_ERR_FORMAT && s != VKT_ERR_HOST_MEMORY) {
        fprintf(stderr, "vkt_model_parse returned %s: %s\n", vkt_status_name(s), vkt_error());
        abort();
    }
    if (s != VKT_OK && !*vkt_error()) {
        fprintf(stderr, "vkt_model_parse failed without a message\n");
        abort();
    }
    if (s == VKT_OK) {
        volatile uint64_t sink = vkt_model_param_count(&m);
        sink += vkt_model_classes(&m) + vkt_model_targets_per_sample(&m);
        vkt_layer_cost c = vkt_model_cost(&m, 0, m.nlayers);
        sink += (uint64_t)(c.fwd_flops > 0) + (uint64_t)(c.saved_floats > 0);
        vkt_mm_shape mm[64];
        sink += (uint64_t)vkt_model_matmuls(&m, 1, mm, 64);
        static char torch[1 << 16];
        (void)vkt_model_torch(&m, torch, sizeof torch);
        char shape[96];
        vkt_shape_format(&m.output, shape, sizeof shape);
        (void)sink;
    }
    vkt_model_free(&m);
    free(text);
    return 0;
}
