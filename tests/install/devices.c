// devices.c: a program outside the vktrain tree, built against an installed libvktrain by
// tests/test_install.sh (through pkg-config and through CMake's vktrain::vktrain_static). Creates
// a context with the validation layer on, lists the devices, opens the one named by its argument
// (default "llvmpipe") and sends a buffer there and back, parses a model and checks its parameter
// count, and checks that bad input comes back as a status with a message. Exits non-zero, saying
// what it saw, on any failure.
#include <stdio.h>
#include <string.h>

#include <vktrain/model.h>
#include <vktrain/vktrain.h>

static int fails;
static void check(int ok, const char *what) {
    printf("%s %s%s%s\n", ok ? "ok  " : "FAIL", what, ok ? "" : ": ", ok ? "" : vkt_error());
    fails += !ok;
}

int main(int argc, char **argv) {
    const char *device = argc > 1 ? argv[1] : "llvmpipe";
    vkt_context *ctx;
    check(vkt_context_create(&(vkt_context_desc){.validation = 1}, &ctx) == VKT_OK, "context");
    if (fails) return 1;
    int n = vkt_context_device_count(ctx);
    for (int i = 0; i < n; i++) {
        const vkt_device_info *d = vkt_context_device_info(ctx, i);
        printf("device %d: %s (%s, %s)\n", d->index, d->name, vkt_device_type_name(d->type),
               d->driver);
    }
    check(n >= 1, "at least one device");
    int idx[4], count = 0;
    check(vkt_context_select(ctx, device, idx, 4, &count) == VKT_OK && count == 1, device);
    vkt_device *dev = NULL;
    if (count == 1) check(vkt_device_create(ctx, idx[0], NULL, &dev) == VKT_OK, "device opens");
    if (dev) {
        float src[256], dst[256];
        for (int i = 0; i < 256; i++)
            src[i] = (float)i * 0.25f - 3.0f;
        vkt_buffer *buf = NULL;
        check(vkt_buffer_create(dev, sizeof src, "roundtrip", &buf) == VKT_OK, "buffer");
        if (buf) {
            memset(dst, 0, sizeof dst);
            check(vkt_buffer_write(buf, 0, src, sizeof src) == VKT_OK &&
                      vkt_buffer_read(buf, 0, dst, sizeof dst) == VKT_OK &&
                      memcmp(src, dst, sizeof src) == 0,
                  "buffer round trip");
        }
        vkt_buffer_destroy(buf);
        vkt_device_destroy(dev);
    }
    vkt_model_desc m;
    const char *json =
        "{\"input\": [4], \"layers\": [{\"type\": \"dense\", \"units\": 5},"
        " {\"type\": \"tanh\"}, {\"type\": \"dense\", \"units\": 2, \"bias\": false}],"
        " \"loss\": \"mse\"}";
    check(vkt_model_parse(json, "devices.c", &m) == VKT_OK, "model parses");
    // 4*5 weights + 5 biases + 5*2 weights, no second bias.
    check(vkt_model_param_count(&m) == 35 && m.output_features == 2, "35 parameters, 2 outputs");
    vkt_model_free(&m);
    vkt_status s =
        vkt_model_parse("{\"input\": [4], \"layers\": [{\"type\": \"dense\", \"unit\": 5}],"
                        " \"loss\": \"mse\"}",
                        "typo.json", &m);
    int named = s == VKT_ERR_FORMAT && strstr(vkt_error(), "typo.json") != NULL;
    printf("%s a misspelt key is VKT_ERR_FORMAT with the source named (%s: %s)\n",
           named ? "ok  " : "FAIL", vkt_status_name(s), vkt_error());
    fails += !named;
    vkt_model_free(&m);
    uint64_t nval = vkt_context_validation_count(ctx);
    printf("%s validation on, %llu messages\n",
           vkt_context_validation_enabled(ctx) && nval == 0 ? "ok  " : "FAIL",
           (unsigned long long)nval);
    fails += !(vkt_context_validation_enabled(ctx) && nval == 0);
    vkt_context_destroy(ctx);
    return fails ? 1 : 0;
}
