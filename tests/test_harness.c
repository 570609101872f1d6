// test_harness.c: a test of the test harness. Deliberately broken work must be caught:
//  - two dispatches that write and read one buffer with no barrier between them: the
//    synchronization validation layer reports a hazard, so vt_finish would fail such a test;
//  - a view outside its buffer, a wrong number of buffers, a misaligned view: the engine refuses
//    to record them and vkt_cmd_end returns the error.
// This test expects validation messages, so it counts them itself instead of using vt_finish.
#include <string.h>

#include "test_util.h"
#include "vkt_abi.h"
#include "vkt_shaders.h"

int main(void) {
    int failures = 0, checks = 0;
    vkt_context *ctx;
    vkt_context_desc desc = {.validation = 1, .quiet_validation = false};
    if (vkt_context_create(&desc, &ctx) != VKT_OK) {
        fprintf(stderr, "test_harness: %s\n", vkt_error());
        return 1;
    }
#define CHECK(c, ...)                                                                              \
    do {                                                                                           \
        checks++;                                                                                  \
        if (!(c)) {                                                                                \
            failures++;                                                                            \
            fprintf(stderr, "FAIL: " __VA_ARGS__);                                                 \
            fprintf(stderr, "\n");                                                                 \
        }                                                                                          \
    } while (0)
    for (int d = 0; d < vkt_context_device_count(ctx); d++) {
        vkt_device *dev;
        if (vkt_device_create(ctx, d, NULL, &dev) != VKT_OK) {
            fprintf(stderr, "test_harness: %s\n", vkt_error());
            return 1;
        }
        uint32_t spec[3] = {64, 1, 1};
        vkt_buffer *x, *y;
        vkt_kernel *k;
        vkt_cmd *cmd;
        if (vkt_buffer_create(dev, 4096, "x", &x) || vkt_buffer_create(dev, 4096, "y", &y) ||
            vkt_kernel_create(dev, VKT_SHADER_AXPY, spec, 3, &k) || vkt_cmd_create(dev, &cmd)) {
            fprintf(stderr, "test_harness: %s\n", vkt_error());
            return 1;
        }
        vkt_axpy_push p = {.n = 1024, .a = 1};
        vkt_view xy[2] = {vkt_buffer_whole(x), vkt_buffer_whole(y)};
        vkt_view yx[2] = {vkt_buffer_whole(y), vkt_buffer_whole(x)};

        // 1. Missing barrier: dispatch 2 reads y while dispatch 1 may still write it.
        printf("test_harness: %s: a missing barrier must be reported:\n", vkt_device_label(dev));
        uint64_t before = vkt_context_validation_count(ctx);
        vkt_cmd_begin(cmd, false);
        vkt_cmd_dispatch(cmd, k, xy, 2, &p, sizeof p, 16, 1, 1, NULL);
        vkt_cmd_dispatch(cmd, k, yx, 2, &p, sizeof p, 16, 1, 1, NULL); /* no vkt_cmd_barrier */
        vkt_cmd_end(cmd);
        vkt_cmd_submit(cmd);
        vkt_cmd_wait(cmd, VKT_WAIT_MS);
        CHECK(vkt_context_validation_count(ctx) > before,
              "%s: a missing barrier was not reported by synchronization validation",
              vkt_device_label(dev));

        // 2. The same with the barrier is clean.
        before = vkt_context_validation_count(ctx);
        vkt_cmd_begin(cmd, false);
        vkt_cmd_dispatch(cmd, k, xy, 2, &p, sizeof p, 16, 1, 1, NULL);
        vkt_cmd_barrier(cmd);
        vkt_cmd_dispatch(cmd, k, yx, 2, &p, sizeof p, 16, 1, 1, NULL);
        vkt_cmd_end(cmd);
        vkt_cmd_submit(cmd);
        vkt_cmd_wait(cmd, VKT_WAIT_MS);
        CHECK(vkt_context_validation_count(ctx) == before, "%s: a correct stream was reported",
              vkt_device_label(dev));

        // 3. Bad buffers are refused at record time.
        vkt_view bad[2] = {vkt_buffer_view(x, 0, 8192), vkt_buffer_whole(y)};
        vkt_cmd_begin(cmd, false);
        vkt_cmd_dispatch(cmd, k, bad, 2, &p, sizeof p, 16, 1, 1, NULL);
        CHECK(vkt_cmd_end(cmd) == VKT_ERR_ARG && strstr(vkt_error(), "outside"),
              "a view past the end of its buffer was accepted: %s", vkt_error());
        vkt_cmd_begin(cmd, false);
        vkt_cmd_dispatch(cmd, k, xy, 1, &p, sizeof p, 16, 1, 1, NULL);
        CHECK(vkt_cmd_end(cmd) == VKT_ERR_ARG, "a missing binding was accepted");
        vkt_view odd[2] = {vkt_buffer_view(x, 4, 1024), vkt_buffer_whole(y)};
        vkt_cmd_begin(cmd, false);
        vkt_cmd_dispatch(cmd, k, odd, 2, &p, sizeof p, 16, 1, 1, NULL);
        CHECK(vkt_cmd_end(cmd) == VKT_ERR_ARG, "a misaligned view was accepted");
        CHECK(vkt_cmd_submit(cmd) == VKT_ERR_ARG, "a failed recording was submitted");

        vkt_cmd_destroy(cmd);
        vkt_kernel_destroy(k);
        vkt_buffer_destroy(y);
        vkt_buffer_destroy(x);
        vkt_device_destroy(dev);
    }
    vkt_context_destroy(ctx);
    printf("test_harness: %d checks, %d failed\n", checks, failures);
    return failures ? 1 : 0;
}
