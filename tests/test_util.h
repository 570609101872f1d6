// test_util.h: the harness every test binary uses. vt_init opens every Vulkan device the loader
// sees with the Khronos validation layer (and synchronization validation) on, and the other
// fields of the context from the CLI's VKT_* variables (engine/cli/env.h), as the CLI would; a
// test changes them on t->ctx (vkt_context_set_tune, ..._matmul_variant, ..._fuse). vt_finish
// fails the test on any failed check or any validation message. Under CI=true a missing lavapipe
// or SwiftShader is a failure, never a silent skip.
#ifndef VKT_TEST_UTIL_H
#define VKT_TEST_UTIL_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>

#include "ops.h"
#include "vktrain.h"

#define VT_MAX_DEVICES 8
// vkt_device_info.driver_id of the two CPU drivers (VK_DRIVER_ID_MESA_LLVMPIPE,
// VK_DRIVER_ID_GOOGLE_SWIFTSHADER: vktrain.h has no Vulkan types).
#define VT_DRIVER_ID_LLVMPIPE 13
#define VT_DRIVER_ID_SWIFTSHADER 10

typedef struct vt {
    const char *name;
    vkt_context *ctx;
    int ndev;
    vkt_device *dev[VT_MAX_DEVICES];
    int checks, failures;
    // Validation messages a test provoked on purpose (and checked for); vt_finish fails on any
    // message beyond these.
    uint64_t expected_validation;
} vt;

// Opens the context and every device. Returns 0 on success; on failure prints why and returns 1.
int vt_init(vt *t, const char *name);
// Closes everything; returns the process exit status (0 only if every check passed and the
// validation layer said nothing).
int vt_finish(vt *t);

#define VT_CHECK(t, cond, ...)                                                                     \
    do {                                                                                           \
        (t)->checks++;                                                                             \
        if (!(cond)) {                                                                             \
            (t)->failures++;                                                                       \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);                        \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fprintf(stderr, "\n");                                                                 \
        }                                                                                          \
    } while (0)

// A vkt call that must succeed; on failure records the error and continues.
#define VT_OK(t, expr) VT_CHECK(t, (expr) == VKT_OK, "%s", vkt_error())

// Deterministic random numbers (splitmix64) for test inputs.
uint64_t vt_rand_u64(uint64_t *state);
float vt_rand_uniform(uint64_t *state, float lo, float hi);
void vt_fill_uniform(float *x, size_t n, uint64_t seed, float lo, float hi);

// |got - ref| <= atol + rtol * |ref| for every element; prints the worst miss. Returns the
// number of elements out of tolerance.
size_t vt_compare(const char *what, const float *got, const double *ref, size_t n, double atol,
                  double rtol);

// Ends a recording, checks that it recorded and that every kernel built (ops may be NULL),
// submits it and waits; each failure is a failed check naming what and where. True when it ran.
bool vt_run(vt *t, vkt_cmd *cmd, vkt_ops *ops, const char *what, const char *where);

// Writes n bytes to path, or exits the test with a message (test set-up, not a check).
void vt_write_file(const char *path, const void *data, size_t n);
// Removes a directory and everything below it.
void vt_remove_dir(const char *dir);

// Index of the first device whose name or driver contains needle (case-insensitive), or -1.
int vt_find_device(vt *t, const char *needle);
// Text for the language-model tests: 64 KiB of English-like words (drawn from a short list with a
// fixed generator) as *text, and its first `windows` held-out windows of 128 bytes (in order) as
// *ds (vkt_text_validation). Free both (vkt_text_free, vkt_dataset_free).
struct vkt_text;
struct vkt_dataset;
// Tests of runs over several processes: whether this process is a rank of an mpirun job, and
// `mpirun -np np SELF arg` (this test's own binary, on loopback, as root where it runs as root,
// more ranks than cores), in a process group of its own that is ended whole past deadline_s.
// Returns mpirun's exit status, or -1 when it could not start, died of a signal or ran past the
// deadline (each said on stderr, with name).
bool vt_under_mpirun(void);
int vt_mpirun_self(const char *name, int np, const char *arg, double deadline_s);

vkt_status vt_words_text(uint32_t windows, struct vkt_text *text, struct vkt_dataset *ds);

#endif
