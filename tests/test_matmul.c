// test_matmul.c: vkt_op_matmul against the double-precision reference (tests/ref_matmul.c) on
// every device, in every form (NN, NT, TN):
//  - awkward shapes: each of 1, 7, 33, 127, 513 along each of M, N, K, in varied combinations,
//    which the scalar kernel serves;
//  - aligned shapes (the training shapes among them) through the wide kernel where the device
//    has one, then forced (VKT_MATMUL_VARIANT) onto the scalar kernel, onto the variants meant
//    for GPUs, onto the large-product tile and onto a K-split across dispatches;
//  - the shared-memory tiled kernels (GPU candidates), forced, on awkward and aligned shapes;
//  - on SwiftShader, its two kernels (matmul_ss.glsl) forced by name on shapes next to the
//    awkward ones that their vec4 loads accept: M of 1, 7, 33, 127, 513 (TN: 4, 8, 36, 132, 516),
//    N and K of 4, 8, 36, 132, 516 (edges of the 16- and 32-row, 64-column tiles, and K % 8 == 4,
//    a last k step half past k_end); the awkward shapes themselves run scalar-r16c16-g4 there;
//  - with and without bias, beta 0, 1 and 0.5 (c is read), views at non-zero aligned offsets
//    inside one buffer and larger than the shape needs, with canaries around c that must survive;
//  - one product of at least 1024 along every dimension (1024 x 1056 x 1040) per form.
// Time: about 16 s (SwiftShader compiles ss-r32c16-g4 in about 1.3 s per form, ss-r16c16-g4 in
// 0.25 s); about 47 s more when Mesa's shader cache is cold (lavapipe's LLVM then compiles the
// large tile for each form, about 7 s each).
// Tolerance: |got - ref| <= atol + rtol |ref| with atol = 1e-6 * (K + 1) and rtol = 1e-5. Inputs
// are uniform in [-1, 1]; fp32 accumulation over K terms errs by about 1e-7 sqrt(K) |sum|, well
// inside it, while a dropped term, bias or beta misses by 1e-2 or more.
#include <stdlib.h>
#include <string.h>

#include "ops.h"
#include "ref_matmul.h"
#include "test_util.h"

#define CANARY 0x7fc0dead        // a NaN pattern no kernel computes
#define DRIVER_ID_SWIFTSHADER 10 // VK_DRIVER_ID_GOOGLE_SWIFTSHADER (vktrain.h has no Vulkan types)

static bool is_swiftshader(vkt_device *dev) {
    return vkt_device_get_info(dev)->driver_id == DRIVER_ID_SWIFTSHADER;
}

typedef struct mm_case {
    vkt_mm_form form;
    uint32_t M, N, K;
    bool bias;
    float beta;
    uint32_t pad; // extra alignment units before each operand (0..3)
} mm_case;

static const char *form_name(vkt_mm_form f) {
    return f == VKT_MM_NN ? "NN" : f == VKT_MM_NT ? "NT" : "TN";
}

// Runs one case on one device; ref may be given (precomputed) or NULL (computed here).
static void run_case(vt *t, vkt_device *dev, vkt_ops *ops, vkt_cmd *cmd, const mm_case *mc,
                     const double *ref_given, const float *a, const float *b, const float *bias,
                     const float *c0) {
    uint32_t M = mc->M, N = mc->N, K = mc->K;
    uint64_t align = vkt_device_align(dev, 1);
    // Layout: [pad][canary 64 floats][c][canary 64 floats] [pad][a][tail] [pad][b][tail] [bias]
    uint64_t nc = (uint64_t)M * N, na = (uint64_t)M * K, nb = (uint64_t)K * N;
    uint64_t canary = vkt_device_align(dev, 256);
    uint64_t off_c = mc->pad * align + canary;
    uint64_t off_a = vkt_device_align(dev, off_c + 4 * nc + canary) + mc->pad * align;
    uint64_t off_b = vkt_device_align(dev, off_a + 4 * na + 64) + mc->pad * align;
    uint64_t off_bias = vkt_device_align(dev, off_b + 4 * nb + 64);
    uint64_t size = off_bias + 4ull * N + 64;
    vkt_buffer *buf = NULL;
    VT_OK(t, vkt_buffer_create(dev, size, "matmul-test", &buf));
    if (!buf) return;
    uint32_t *host = malloc(size);
    for (uint64_t i = 0; i < size / 4; i++)
        host[i] = CANARY;
    memcpy((char *)host + off_c, c0, 4 * nc);
    memcpy((char *)host + off_a, a, 4 * na);
    memcpy((char *)host + off_b, b, 4 * nb);
    memcpy((char *)host + off_bias, bias, 4ull * N);
    VT_OK(t, vkt_buffer_write(buf, 0, host, size));
    // Views larger than the shape needs (up to the next operand), as the engine's packing makes.
    vkt_view vc = vkt_buffer_view(buf, off_c, 4 * nc + 64);
    vkt_view va = vkt_buffer_view(buf, off_a, off_b - off_a);
    vkt_view vb = vkt_buffer_view(buf, off_b, off_bias - off_b);
    vkt_view vbias = vkt_buffer_view(buf, off_bias, 4ull * N);
    VT_OK(t, vkt_cmd_begin(cmd, true));
    vkt_op_matmul(cmd, ops, mc->form, vc, va, vb, mc->bias ? &vbias : NULL, mc->beta, M, N, K,
                  "matmul");
    VT_OK(t, vkt_cmd_end(cmd));
    VT_OK(t, vkt_ops_status(ops));
    VT_OK(t, vkt_cmd_submit(cmd));
    VT_OK(t, vkt_cmd_wait(cmd, VKT_WAIT_MS));
    uint32_t *got = malloc(size);
    VT_OK(t, vkt_buffer_read(buf, 0, got, size));

    double *ref = (double *)ref_given;
    if (!ref) {
        ref = malloc(nc * sizeof *ref);
        ref_matmul(mc->form, ref, c0, a, b, mc->bias ? bias : NULL, mc->beta, M, N, K);
    }
    char what[160];
    snprintf(what, sizeof what, "%s %ux%ux%u bias %d beta %g pad %u on %s (%s)",
             form_name(mc->form), M, N, K, mc->bias, mc->beta, mc->pad, vkt_device_label(dev),
             vkt_matmul_variant(ops, mc->form, M, N, K));
    size_t bad =
        vt_compare(what, (const float *)((char *)got + off_c), ref, nc, 1e-6 * (K + 1), 1e-5);
    VT_CHECK(t, bad == 0, "%s: %zu wrong elements", what, bad);
    // Nothing outside c was written: the canaries before and after it, and a, b, bias unchanged.
    size_t clobbered = 0;
    for (uint64_t i = 0; i < off_c / 4; i++)
        clobbered += got[i] != host[i];
    for (uint64_t i = (off_c + 4 * nc) / 4; i < size / 4; i++)
        clobbered += got[i] != host[i];
    VT_CHECK(t, clobbered == 0, "%s: %zu words outside c changed", what, clobbered);
    if (ref != ref_given) free(ref);
    free(got);
    free(host);
    vkt_buffer_destroy(buf);
}

static void fill_inputs(uint32_t M, uint32_t N, uint32_t K, uint64_t seed, float **a, float **b,
                        float **bias, float **c0) {
    *a = malloc(4ull * M * K);
    *b = malloc(4ull * K * N);
    *bias = malloc(4ull * N);
    *c0 = malloc(4ull * M * N);
    vt_fill_uniform(*a, (size_t)M * K, seed, -1, 1);
    vt_fill_uniform(*b, (size_t)K * N, seed + 1, -1, 1);
    vt_fill_uniform(*bias, N, seed + 2, -1, 1);
    vt_fill_uniform(*c0, (size_t)M * N, seed + 3, -1, 1);
}

// Runs one case on every device, or only on SwiftShader when swiftshader_only (its own kernels:
// lavapipe's LLVM takes 10 s and 50 s to compile them).
static void run_on_all(vt *t, vkt_ops **ops, vkt_cmd **cmd, const mm_case *mc, uint64_t seed,
                       bool swiftshader_only) {
    float *a, *b, *bias, *c0;
    fill_inputs(mc->M, mc->N, mc->K, seed, &a, &b, &bias, &c0);
    double *ref = malloc(sizeof(double) * mc->M * mc->N);
    ref_matmul(mc->form, ref, c0, a, b, mc->bias ? bias : NULL, mc->beta, mc->M, mc->N, mc->K);
    for (int d = 0; d < t->ndev; d++) {
        if (ops[d] && cmd[d] && (!swiftshader_only || is_swiftshader(t->dev[d])))
            run_case(t, t->dev[d], ops[d], cmd[d], mc, ref, a, b, bias, c0);
    }
    free(ref);
    free(a);
    free(b);
    free(bias);
    free(c0);
}

int main(void) {
    // The variants are chosen here by the device's rule (or forced), never by measurement, so
    // that each run checks the same kernels; test_tune checks the measured choice.
    setenv("VKT_TUNE", "off", 1);
    vt tv, *t = &tv;
    if (vt_init(t, "test_matmul")) return 1;
    vkt_ops *ops[VT_MAX_DEVICES] = {0};
    vkt_cmd *cmd[VT_MAX_DEVICES] = {0};
    for (int d = 0; d < t->ndev; d++) {
        VT_OK(t, vkt_ops_create(t->dev[d], &ops[d]));
        VT_OK(t, vkt_cmd_create(t->dev[d], &cmd[d]));
    }
    const vkt_mm_form forms[3] = {VKT_MM_NN, VKT_MM_NT, VKT_MM_TN};
    const float betas[3] = {0.0f, 1.0f, 0.5f};
    uint64_t seed = 100;

    // Awkward shapes: 1, 7, 33, 127, 513 each on each dimension, twice, in two rotations.
    const uint32_t v[5] = {1, 7, 33, 127, 513};
    int ncase = 0;
    for (int f = 0; f < 3; f++) {
        for (int i = 0; i < 5; i++) {
            for (int rot = 1; rot <= 2; rot++) {
                mm_case mc = {forms[f],
                              v[i],
                              v[(i + rot) % 5],
                              v[(i + 2 * rot) % 5],
                              (ncase % 2) == 0,
                              betas[ncase % 3],
                              (uint32_t)(ncase % 4)};
                run_on_all(t, ops, cmd, &mc, seed++, false);
                ncase++;
            }
        }
    }

    // The shared-memory tiled kernels meant for GPUs, forced, on awkward shapes (partial blocks
    // and partial k slices on every edge) and on aligned ones.
    const char *tiled[2] = {"tiled-r4c4-k16", "tiled-r8c8-k8"};
    const uint32_t tshape[][3] = {{1, 7, 33}, {33, 127, 7}, {127, 33, 513}, {128, 512, 784},
                                  {130, 66, 17}};
    for (int tv_i = 0; tv_i < 2; tv_i++) {
        setenv("VKT_MATMUL_VARIANT", tiled[tv_i], 1);
        for (int f = 0; f < 3; f++) {
            for (size_t i = 0; i < sizeof tshape / sizeof tshape[0]; i++) {
                mm_case mc = {forms[f],         tshape[i][0],     tshape[i][1],        tshape[i][2],
                              (ncase % 2) == 0, betas[ncase % 3], (uint32_t)(ncase % 4)};
                run_on_all(t, ops, cmd, &mc, seed++, false);
                ncase++;
            }
        }
        for (int d = 0; d < t->ndev; d++) {
            const char *got = ops[d] ? vkt_matmul_variant(ops[d], VKT_MM_NN, 33, 127, 7) : NULL;
            VT_CHECK(t, got && !strcmp(got, tiled[tv_i]), "forced %s, ran %s", tiled[tv_i],
                     got ? got : "(none)");
        }
        unsetenv("VKT_MATMUL_VARIANT");
    }

    // Aligned shapes: the wide kernel where the device has one, then the same forced onto the
    // scalar kernel. The training shapes of a 784-512-256-10 MLP at batch 128 are among them.
    const uint32_t aligned[][3] = {{128, 512, 784}, {512, 784, 128}, {128, 10, 256},
                                   {64, 64, 64},    {72, 136, 40},   {8, 8, 8}};
    // Pass 2 runs the variants meant for GPUs (the vec4 wide kernel, 64-lane workgroups), pass 3
    // the large-product tile, pass 4 a K-split into dispatches of 256 (K = 784 gives four, the
    // last of 16) and pass 5 the scalar tile SwiftShader measures against its first choice, so
    // that every kernel and path the engine can choose is checked here.
    const char *passes[6] = {NULL,
                             "none",
                             "wide-r16c8-g64,scalar-r4c4-g64",
                             "wide64-r32c32-g8",
                             "wide64-r32c16-g8-k256",
                             "none,scalar-r8c8-g4"};
    for (int pass = 0; pass < 6; pass++) {
        if (passes[pass]) setenv("VKT_MATMUL_VARIANT", passes[pass], 1);
        for (int f = 0; f < 3; f++) {
            for (size_t i = 0; i < sizeof aligned / sizeof aligned[0]; i++) {
                mm_case mc = {
                    forms[f],         aligned[i][0],    aligned[i][1],        aligned[i][2],
                    (ncase % 2) == 1, betas[ncase % 3], (uint32_t)(ncase % 3)};
                run_on_all(t, ops, cmd, &mc, seed++, false);
                ncase++;
            }
        }
        unsetenv("VKT_MATMUL_VARIANT");
    }

    // SwiftShader's kernels forced by name; each case checks that the forced kernel is the one
    // that runs (an unaligned shape would silently take the scalar kernel).
    const uint32_t v4[5] = {4, 8, 36, 132, 516};
    const char *ss_variants[2] = {"ss-r16c16-g4", "ss-r32c16-g4"};
    for (int s = 0; s < 2; s++) {
        setenv("VKT_MATMUL_VARIANT", ss_variants[s], 1);
        for (int f = 0; f < 3; f++) {
            for (int i = 0; i < 5; i++) {
                for (int rot = 1; rot <= 2; rot++) {
                    mm_case mc = {forms[f],
                                  forms[f] == VKT_MM_TN ? v4[i] : v[i],
                                  v4[(i + rot) % 5],
                                  v4[(i + 2 * rot) % 5],
                                  (ncase % 2) == 0,
                                  betas[ncase % 3],
                                  (uint32_t)(ncase % 4)};
                    for (int d = 0; d < t->ndev; d++) {
                        if (!ops[d] || !is_swiftshader(t->dev[d])) continue;
                        const char *got = vkt_matmul_variant(ops[d], mc.form, mc.M, mc.N, mc.K);
                        VT_CHECK(t, strcmp(got, ss_variants[s]) == 0,
                                 "%s %ux%ux%u forced onto %s runs %s", form_name(mc.form), mc.M,
                                 mc.N, mc.K, ss_variants[s], got);
                    }
                    run_on_all(t, ops, cmd, &mc, seed++, true);
                    ncase++;
                }
            }
        }
        unsetenv("VKT_MATMUL_VARIANT");
    }

    // The variant names are reported and differ between an aligned and an awkward shape on a
    // device that has a wide kernel.
    for (int d = 0; d < t->ndev; d++) {
        if (!ops[d]) continue;
        const char *wide = vkt_matmul_variant(ops[d], VKT_MM_NN, 1024, 1024, 1024);
        const char *odd = vkt_matmul_variant(ops[d], VKT_MM_NN, 7, 33, 127);
        VT_CHECK(t, wide && odd && *wide && strstr(odd, "scalar"), "variant names %s / %s", wide,
                 odd);
        printf("test_matmul: %s: 1024^3 NN uses %s, 7x33x127 uses %s\n",
               vkt_device_label(t->dev[d]), wide, odd);
    }

    // One product of at least 1024 along every dimension per form.
    for (int f = 0; f < 3; f++) {
        mm_case mc = {forms[f], 1024, 1056, 1040, f != 1, betas[f], 1};
        run_on_all(t, ops, cmd, &mc, seed++, false);
    }

    for (int d = 0; d < t->ndev; d++) {
        vkt_cmd_destroy(cmd[d]);
        vkt_ops_destroy(ops[d]);
    }
    return vt_finish(t);
}
