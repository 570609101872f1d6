// test_matmul.c: vkt_op_matmul against the double-precision reference (tests/ref_matmul.c) on
// every device, in every form (NN, NT, TN):
//  - awkward shapes: each of 1, 7, 33, 127, 513 along each of M, N, K, in varied combinations,
//    which the scalar kernel serves;
//  - aligned shapes (the training shapes among them) through the wide kernel where the device
//    has one (on lavapipe: a and b read as texel buffers), then forced (VKT_MATMUL_VARIANT) onto
//    the scalar kernel, onto the variants meant for GPUs, onto the large-product tile, onto a
//    K-split across dispatches and onto the storage-buffer tile;
//  - the shared-memory tiled kernels (GPU candidates), forced, on awkward and aligned shapes;
//  - on SwiftShader, its two kernels (matmul_ss.glsl) forced by name on shapes next to the
//    awkward ones that their vec4 loads accept: M of 1, 7, 33, 127, 513 (TN: 4, 8, 36, 132, 516),
//    N and K of 4, 8, 36, 132, 516 (edges of the 16- and 32-row, 64-column tiles, and K % 8 == 4,
//    a last k step half past k_end); the awkward shapes themselves run scalar-r16c16-g4 there;
//  - with and without bias, beta 0, 1 and 0.5 (c is read), views at non-zero aligned offsets
//    inside one buffer and larger than the shape needs, with canaries around c that must survive;
//  - one product of at least 1024 along every dimension (1024 x 1056 x 1040) per form (on a
//    CPU driver the wide kernel's grid then walks the column groups first: a is past the L2, and
//    on lavapipe the texel kernel takes two k steps per iteration of its k loop in NN and NT);
//  - the narrow kernel (a side of at most 16: N in NT, M in TN, K in NN), forced, with every
//    epilogue mode, on the classifier layer's shapes and on the bounds of its side and tiles;
//  - the activation epilogue (vkt_op_matmul_ex) for every activation (leaky_relu with a positive
//    and a negative slope) in every mode: f(z), f(z) keeping z, z * f'(x) from the input and
//    z * f'(x) from the output; every form carries forward and backward modes, on the awkward
//    shapes (1, 7, 33, 127 on each dimension: the scalar kernel), on an aligned shape through the
//    wide kernel where the device has one, through the variants meant for GPUs (vec4 wide,
//    shared-memory tiled), forced onto SwiftShader's own kernels (which have none: it must run on
//    one that has), and through a K-split (the epilogue must run in the last chunk only).
//    Canaries around the kept z must survive, and s (the backward's input) must be left as it
//    was.
// Time: about 40 s in CI with Mesa's shader cache warm (67 s under ASan+UBSan); up to about 190 s
// with it cold (lavapipe's LLVM compiles each 32 x 32 tile for 5-7 s per form and each epilogue's
// 32 x 16 tile for 2-3 s on first use; SwiftShader its 32-row kernel in about 1.3 s per form).
// Tolerance: |got - ref| <= atol + rtol |ref| with atol = 1e-6 * (K + 1) and rtol = 1e-5. Inputs
// are uniform in [-1, 1]; fp32 accumulation over K terms errs by about 1e-7 sqrt(K) |sum|, well
// inside it, while a dropped term, bias or beta misses by 1e-2 or more. After an epilogue:
// atol = 1.2e-6 (K + 1) + 1e-5 and rtol = 3e-5: the activations' slopes are at most 1.13 (gelu),
// so the product's error grows by at most that; the rest is the fp32 activation itself (its exp
// and tanh err by about 1e-6 relative) times |z| (under 10 here). A wrong activation or slope
// misses by 1e-2 |z| or more.
#include <stdlib.h>
#include <string.h>

#include "ops.h"
#include "ref_matmul.h"
#include "ref_ops.h"
#include "test_util.h"
#include "vkt_abi.h"

#define CANARY 0x7fc0dead // a NaN pattern no kernel computes

static bool is_swiftshader(vkt_device *dev) {
    return vkt_device_get_info(dev)->driver_id == VT_DRIVER_ID_SWIFTSHADER;
}

typedef struct mm_case {
    vkt_mm_form form;
    uint32_t M, N, K;
    bool bias;
    float beta;
    uint32_t pad; // extra alignment units before each operand (0..3)
    // The epilogue: none, or act with kind (VKT_MM_EPI_*) and keep_z for VKT_MM_EPI_ACT.
    vkt_mm_epi epi;
    vkt_act act;
    float alpha;
    bool keep_z;
    bool col_sum; // TN: also a's column sums into a db that starts non-zero (vkt_mm_epilogue)
} mm_case;

#define NO_EPI VKT_MM_EPI_NONE, VKT_ACT_RELU, 0.0f, false, false

static const char *act_name(vkt_act a) {
    static const char *n[] = {"relu", "leaky_relu", "gelu", "tanh", "sigmoid"};
    return n[a];
}

// The expected c of a case from the product's reference z = op(a) op(b) + bias + beta c0, in
// place: ref holds z on entry, c on return. s is the epilogue's input (GRAD kinds).
static void ref_epilogue(const mm_case *mc, double *ref, const float *s, size_t n) {
    for (size_t i = 0; i < n; i++) {
        double z = ref[i];
        switch (mc->epi) {
        case VKT_MM_EPI_NONE: break;
        case VKT_MM_EPI_ACT: ref[i] = ref_act(mc->act, mc->alpha, z); break;
        case VKT_MM_EPI_GRAD_X: ref[i] = z * ref_act_grad(mc->act, mc->alpha, s[i]); break;
        case VKT_MM_EPI_GRAD_Y:
            ref[i] = z * ref_act_grad_from_output(mc->act, mc->alpha, s[i]);
            break;
        case VKT_MM_EPI_SGD: break; // not run through here: test_sgd_epilogue checks it
        }
    }
}

// Tolerances of c (see the header comment).
static double atol_of(const mm_case *mc) {
    double a = 1e-6 * (mc->K + 1);
    return mc->epi == VKT_MM_EPI_NONE ? a : 1.2 * a + 1e-5;
}
static double rtol_of(const mm_case *mc) { return mc->epi == VKT_MM_EPI_NONE ? 1e-5 : 3e-5; }

static const char *form_name(vkt_mm_form f) {
    return f == VKT_MM_NN ? "NN" : f == VKT_MM_NT ? "NT" : "TN";
}

// a's column sums (TN: a is [K, M]) added to db0, as the product left them in db: within the fp32
// bound of a K-term sum of the reference; recorded in the product's own dispatch exactly where
// vkt_matmul_sums_columns says so (ndispatch: the command's dispatches, one product's or one more);
// and where the product summed them and M is a multiple of 4, the same bits as vkt_op_bias_grad
// gives on the same inputs (run here on a buffer of its own).
static void check_col_sum(vt *t, vkt_device *dev, vkt_ops *ops, const mm_case *mc, const char *what,
                          const float *a, const float *db0, const float *db, int ndispatch) {
    uint32_t M = mc->M, K = mc->K;
    double *ref = malloc(sizeof(double) * M);
    for (uint32_t m = 0; m < M; m++) {
        double sum = db0[m];
        for (uint32_t k = 0; k < K; k++)
            sum += a[(size_t)k * M + m];
        ref[m] = sum;
    }
    char cwhat[240];
    snprintf(cwhat, sizeof cwhat, "%s: column sums", what);
    size_t bad = vt_compare(cwhat, db, ref, M, 1e-6 * (K + 1), 1e-5);
    VT_CHECK(t, bad == 0, "%s: %zu wrong", cwhat, bad);
    bool in_kernel = vkt_matmul_sums_columns(ops, M, mc->N, K);
    VT_CHECK(t, ndispatch == (in_kernel ? 1 : 2), "%s: %d dispatches (the sums %s)", cwhat,
             ndispatch, in_kernel ? "in the product's" : "in one of their own");
    free(ref);
    if (!in_kernel || M % 4) return;
    // The same inputs through vkt_op_bias_grad.
    uint64_t align = vkt_device_align(dev, 1), off_db = vkt_device_align(dev, 4ull * K * M);
    vkt_buffer *buf = NULL;
    VT_OK(t, vkt_buffer_create(dev, off_db + 4ull * M + align, "colsum-test", &buf));
    vkt_cmd *cmd = NULL;
    VT_OK(t, vkt_cmd_create(dev, &cmd));
    float *sep = malloc(4ull * M);
    if (buf && cmd && sep) {
        VT_OK(t, vkt_buffer_write(buf, 0, a, 4ull * K * M));
        VT_OK(t, vkt_buffer_write(buf, off_db, db0, 4ull * M));
        VT_OK(t, vkt_cmd_begin(cmd, false));
        vkt_op_bias_grad(cmd, ops, vkt_buffer_view(buf, off_db, 4ull * M),
                         vkt_buffer_view(buf, 0, 4ull * K * M), K, M, "bias_grad");
        VT_OK(t, vkt_cmd_end(cmd));
        VT_OK(t, vkt_ops_status(ops));
        VT_OK(t, vkt_cmd_submit(cmd));
        VT_OK(t, vkt_cmd_wait(cmd, VKT_WAIT_MS));
        VT_OK(t, vkt_buffer_read(buf, off_db, sep, 4ull * M));
        VT_CHECK(t, memcmp(sep, db, 4ull * M) == 0,
                 "%s: not the bits vkt_op_bias_grad gives on the same inputs", cwhat);
    }
    free(sep);
    vkt_cmd_destroy(cmd);
    vkt_buffer_destroy(buf);
}

// Runs one case on one device: ref is the expected c, zref the product before the epilogue
// (the kept z), s the epilogue's input.
static void run_case(vt *t, vkt_device *dev, vkt_ops *ops, vkt_cmd *cmd, const mm_case *mc,
                     const double *ref, const double *zref, const float *a, const float *b,
                     const float *bias, const float *c0, const float *s) {
    uint32_t M = mc->M, N = mc->N, K = mc->K;
    uint64_t align = vkt_device_align(dev, 1);
    // Layout: [pad][canary 64 floats][c][canary 64 floats] [pad][a][tail] [pad][b][tail] [bias]
    // [canary][pad][s or z][canary]
    uint64_t nc = (uint64_t)M * N, na = (uint64_t)M * K, nb = (uint64_t)K * N;
    uint64_t canary = vkt_device_align(dev, 256);
    uint64_t off_c = mc->pad * align + canary;
    uint64_t off_a = vkt_device_align(dev, off_c + 4 * nc + canary) + mc->pad * align;
    uint64_t off_b = vkt_device_align(dev, off_a + 4 * na + 64) + mc->pad * align;
    uint64_t off_bias = vkt_device_align(dev, off_b + 4 * nb + 64);
    uint64_t off_s = vkt_device_align(dev, off_bias + 4ull * N + canary) + mc->pad * align;
    uint64_t off_db = vkt_device_align(dev, off_s + 4 * nc + canary);
    uint64_t size = off_db + 4ull * M + canary;
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
    bool grad = mc->epi == VKT_MM_EPI_GRAD_X || mc->epi == VKT_MM_EPI_GRAD_Y;
    if (grad) memcpy((char *)host + off_s, s, 4 * nc);
    float *db0 = malloc(4ull * M);
    vt_fill_uniform(db0, M, 77, -1, 1);
    if (mc->col_sum) memcpy((char *)host + off_db, db0, 4ull * M);
    VT_OK(t, vkt_buffer_write(buf, 0, host, size));
    // Views larger than the shape needs (up to the next operand), as the engine's packing makes.
    vkt_view vc = vkt_buffer_view(buf, off_c, 4 * nc + 64);
    vkt_view va = vkt_buffer_view(buf, off_a, off_b - off_a);
    vkt_view vb = vkt_buffer_view(buf, off_b, off_bias - off_b);
    vkt_view vbias = vkt_buffer_view(buf, off_bias, 4ull * N);
    vkt_view vs = vkt_buffer_view(buf, off_s, 4 * nc);
    vkt_view vdb = vkt_buffer_view(buf, off_db, 4ull * M);
    VT_OK(t, vkt_cmd_begin(cmd, true));
    if (mc->col_sum) {
        bool grad_s = mc->epi == VKT_MM_EPI_GRAD_X || mc->epi == VKT_MM_EPI_GRAD_Y;
        vkt_mm_epilogue e = {.kind = mc->epi,
                             .act = mc->act,
                             .alpha = mc->alpha,
                             .saved = grad_s || mc->keep_z ? &vs : NULL,
                             .col_sum = &vdb,
                             .col_sum_label = "matmul:colsum"};
        vkt_op_matmul_ex(cmd, ops, mc->form, vc, va, vb, mc->bias ? &vbias : NULL, mc->beta, M, N,
                         K, &e, "matmul");
    } else if (mc->epi == VKT_MM_EPI_NONE) {
        vkt_op_matmul(cmd, ops, mc->form, vc, va, vb, mc->bias ? &vbias : NULL, mc->beta, M, N, K,
                      "matmul");
    } else {
        vkt_mm_epilogue e = {.kind = mc->epi,
                             .act = mc->act,
                             .alpha = mc->alpha,
                             .saved = grad || mc->keep_z ? &vs : NULL};
        vkt_op_matmul_ex(cmd, ops, mc->form, vc, va, vb, mc->bias ? &vbias : NULL, mc->beta, M, N,
                         K, &e, "matmul");
    }
    int ndispatch = vkt_cmd_dispatch_count(cmd);
    VT_OK(t, vkt_cmd_end(cmd));
    VT_OK(t, vkt_ops_status(ops));
    VT_OK(t, vkt_cmd_submit(cmd));
    VT_OK(t, vkt_cmd_wait(cmd, VKT_WAIT_MS));
    uint32_t *got = malloc(size);
    VT_OK(t, vkt_buffer_read(buf, 0, got, size));

    char what[200], epi[64] = "";
    static const char *kinds[] = {"", "act", "grad_x", "grad_y"};
    if (mc->epi != VKT_MM_EPI_NONE)
        snprintf(epi, sizeof epi, " %s %s(%g)%s", kinds[mc->epi], act_name(mc->act), mc->alpha,
                 mc->keep_z ? " keep z" : "");
    snprintf(what, sizeof what, "%s %ux%ux%u bias %d beta %g pad %u%s on %s (%s)",
             form_name(mc->form), M, N, K, mc->bias, mc->beta, mc->pad, epi, vkt_device_label(dev),
             vkt_matmul_variant(ops, mc->form, M, N, K));
    size_t bad =
        vt_compare(what, (const float *)((char *)got + off_c), ref, nc, atol_of(mc), rtol_of(mc));
    VT_CHECK(t, bad == 0, "%s: %zu wrong elements", what, bad);
    // The kept z, within the product's tolerance.
    bool keep_z = mc->epi == VKT_MM_EPI_ACT && mc->keep_z;
    if (keep_z) {
        char zwhat[220];
        snprintf(zwhat, sizeof zwhat, "%s: z", what);
        bad =
            vt_compare(zwhat, (const float *)((char *)got + off_s), zref, nc, 1e-6 * (K + 1), 1e-5);
        VT_CHECK(t, bad == 0, "%s: %zu wrong elements", zwhat, bad);
    }
    // Nothing outside c (and the kept z) was written: the canaries around them, and a, b, bias
    // and s unchanged.
    size_t clobbered = 0;
    for (uint64_t i = 0; i < size / 4; i++) {
        bool in_c = i >= off_c / 4 && i < (off_c + 4 * nc) / 4;
        bool in_z = keep_z && i >= off_s / 4 && i < (off_s + 4 * nc) / 4;
        bool in_db = mc->col_sum && i >= off_db / 4 && i < (off_db + 4ull * M) / 4;
        if (!in_c && !in_z && !in_db) clobbered += got[i] != host[i];
    }
    VT_CHECK(t, clobbered == 0, "%s: %zu words outside c changed", what, clobbered);
    if (mc->col_sum)
        check_col_sum(t, dev, ops, mc, what, a, db0, (float *)((char *)got + off_db), ndispatch);
    free(got);
    free(host);
    free(db0);
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
    size_t nc = (size_t)mc->M * mc->N;
    double *zref = malloc(sizeof(double) * nc), *ref = malloc(sizeof(double) * nc);
    ref_matmul(mc->form, zref, c0, a, b, mc->bias ? bias : NULL, mc->beta, mc->M, mc->N, mc->K);
    // The backward's s: an activation's input x uniform in [-3, 3] (GRAD_X), or its output f(x)
    // rounded to fp32 (GRAD_Y), from the same x.
    float *s = malloc(4 * nc);
    vt_fill_uniform(s, nc, seed + 4, -3, 3);
    if (mc->epi == VKT_MM_EPI_GRAD_Y) {
        size_t off = 0;
        for (size_t i = 0; i < nc; i++) {
            double x = s[i];
            s[i] = (float)ref_act(mc->act, mc->alpha, x);
            // f' from the output is f' from the input (up to the rounding of y to fp32).
            double g = ref_act_grad(mc->act, mc->alpha, x),
                   gy = ref_act_grad_from_output(mc->act, mc->alpha, s[i]);
            off += !(fabs(g - gy) < 1e-6);
        }
        VT_CHECK(t, off == 0, "%s: f' from the output differs from f' from the input at %zu of %zu",
                 act_name(mc->act), off, nc);
    }
    memcpy(ref, zref, sizeof(double) * nc);
    ref_epilogue(mc, ref, s, nc);
    for (int d = 0; d < t->ndev; d++) {
        if (ops[d] && cmd[d] && (!swiftshader_only || is_swiftshader(t->dev[d])))
            run_case(t, t->dev[d], ops[d], cmd[d], mc, ref, zref, a, b, bias, c0, s);
    }
    free(s);
    free(zref);
    free(ref);
    free(a);
    free(b);
    free(bias);
    free(c0);
}

// The optimizer epilogue (VKT_MM_EPI_SGD): c holds parameters p0, the product is their gradient
// g, buf0 the momentum buffer: p and buf after the step against ref_sgd on the double product,
// and nothing else written. Tolerance: the product's (1e-6 (K + 1) + 1e-5 relative), times at
// most 1 + momentum in buf and lr (1 + 2 momentum) in p, both under that bound here.
static void sgd_case(vt *t, vkt_device *dev, vkt_ops *ops, vkt_cmd *cmd, vkt_mm_form form,
                     uint32_t M, uint32_t N, uint32_t K, float lr, float momentum, float wd,
                     bool nesterov, uint64_t seed, const char *want_variant) {
    float *a, *b, *bias, *p0;
    fill_inputs(M, N, K, seed, &a, &b, &bias, &p0);
    size_t nc = (size_t)M * N;
    float *buf0 = malloc(4 * nc);
    vt_fill_uniform(buf0, nc, seed + 5, -1, 1);
    double *g = malloc(sizeof(double) * nc), *rp = malloc(sizeof(double) * nc);
    double *rb = malloc(sizeof(double) * nc);
    ref_matmul(form, g, p0, a, b, NULL, 0.0f, M, N, K);
    for (size_t i = 0; i < nc; i++)
        rp[i] = p0[i], rb[i] = buf0[i];
    ref_sgd(rp, g, rb, nc, lr, momentum, wd, nesterov);
    // Layout: [p][canary][a][b][canary][buf][canary], each start aligned.
    uint64_t canary = vkt_device_align(dev, 256);
    uint64_t off_a = vkt_device_align(dev, 4 * nc + canary);
    uint64_t off_b = vkt_device_align(dev, off_a + 4ull * M * K);
    uint64_t off_buf = vkt_device_align(dev, off_b + 4ull * K * N + canary);
    uint64_t size = off_buf + 4 * nc + canary;
    vkt_buffer *vb = NULL;
    VT_OK(t, vkt_buffer_create(dev, size, "matmul-sgd-test", &vb));
    uint32_t *host = malloc(size), *got = malloc(size);
    for (uint64_t i = 0; i < size / 4; i++)
        host[i] = CANARY;
    memcpy(host, p0, 4 * nc);
    memcpy((char *)host + off_a, a, 4ull * M * K);
    memcpy((char *)host + off_b, b, 4ull * K * N);
    memcpy((char *)host + off_buf, buf0, 4 * nc);
    vkt_view vp = vkt_buffer_view(vb, 0, 4 * nc), va = vkt_buffer_view(vb, off_a, 4ull * M * K);
    vkt_view vbb = vkt_buffer_view(vb, off_b, 4ull * K * N),
             vm = vkt_buffer_view(vb, off_buf, 4 * nc);
    const vkt_view *mbuf = momentum != 0.0f ? &vm : NULL;
    char what[200];
    snprintf(what, sizeof what, "SGD epilogue %s %ux%ux%u lr %g momentum %g wd %g%s on %s (%s)",
             form_name(form), M, N, K, lr, momentum, wd, nesterov ? " nesterov" : "",
             vkt_device_label(dev), want_variant ? want_variant : "the device's first choice");
    bool fits = vb && vkt_matmul_sgd_fits(ops, form, &vp, &va, &vbb, mbuf, M, N, K);
    VT_CHECK(t, fits, "%s: no kernel takes it", what);
    if (fits) {
        VT_OK(t, vkt_buffer_write(vb, 0, host, size));
        vkt_mm_epilogue e = {.kind = VKT_MM_EPI_SGD,
                             .alpha = lr,
                             .saved = mbuf,
                             .momentum = momentum,
                             .weight_decay = wd,
                             .nesterov = nesterov};
        VT_OK(t, vkt_cmd_begin(cmd, true));
        vkt_op_matmul_ex(cmd, ops, form, vp, va, vbb, NULL, 0.0f, M, N, K, &e, "matmul-sgd");
        VT_OK(t, vkt_cmd_end(cmd));
        VT_OK(t, vkt_ops_status(ops));
        VT_OK(t, vkt_cmd_submit(cmd));
        VT_OK(t, vkt_cmd_wait(cmd, VKT_WAIT_MS));
        VT_OK(t, vkt_buffer_read(vb, 0, got, size));
        double atol = 1e-6 * (K + 1), rtol = 1e-5;
        size_t bad = vt_compare(what, (const float *)got, rp, nc, atol, rtol);
        VT_CHECK(t, bad == 0, "%s: p: %zu wrong elements", what, bad);
        if (momentum != 0.0f) {
            bad = vt_compare(what, (const float *)((char *)got + off_buf), rb, nc, atol, rtol);
            VT_CHECK(t, bad == 0, "%s: momentum buffer: %zu wrong elements", what, bad);
        }
        size_t clobbered = 0;
        for (uint64_t i = nc; i < size / 4; i++) {
            bool in_buf = momentum != 0.0f && i >= off_buf / 4 && i < off_buf / 4 + nc;
            if (!in_buf) clobbered += got[i] != host[i];
        }
        VT_CHECK(t, clobbered == 0, "%s: %zu words outside p and the buffer changed", what,
                 clobbered);
    }
    vkt_buffer_destroy(vb);
    free(host), free(got), free(g), free(rp), free(rb), free(buf0);
    free(a), free(b), free(bias), free(p0);
}

// The SGD epilogue on every device whose kernels have it: the wide kernels (on lavapipe its
// first choice, the texel-read tiles; the storage-buffer dvec4 tile; and the vec4 64-lane tile,
// which SwiftShader runs too), each optimizer mode, the weight-gradient form (TN) and the others,
// partial tiles (72 x 136). SwiftShader's own kernels have no epilogue: there sgd_fits must say
// no for its first choice, and the network does not fuse.
static void test_sgd_epilogue(vt *t, vkt_ops **ops, vkt_cmd **cmd, uint64_t *seed) {
    const struct {
        vkt_mm_form form;
        float lr, momentum, wd;
        bool nesterov;
        const char *variant; // NULL: the device's first choice
    } cases[] = {
        {VKT_MM_TN, 0.05f, 0.9f, 0.0f, false, NULL},
        {VKT_MM_TN, 0.1f, 0.0f, 0.0f, false, NULL},
        {VKT_MM_NT, 0.05f, 0.9f, 1e-2f, true, NULL},
        {VKT_MM_NN, 0.02f, 0.5f, 1e-3f, false, NULL},
        {VKT_MM_TN, 0.05f, 0.9f, 1e-2f, true, "wide64-r32c16-g8"},
        {VKT_MM_TN, 0.05f, 0.9f, 1e-2f, false, "wide64t-r32c16-g8"},
        {VKT_MM_NN, 0.02f, 0.5f, 1e-3f, true, "wide64t-r32c16-g8"},
        // The 8-float pieces written both ways on any host (store64_pays picks one per CPU).
        {VKT_MM_TN, 0.05f, 0.9f, 1e-2f, false, "wide64t-r32c8-g8,stores-vec4"},
        {VKT_MM_NT, 0.05f, 0.9f, 0.0f, true, "wide64t-r32c8-g8,stores-dvec4"},
        {VKT_MM_TN, 0.05f, 0.9f, 0.0f, false, "wide-r16c8-g64"},
        {VKT_MM_NN, 0.1f, 0.0f, 1e-2f, false, "wide-r16c8-g64"},
        // lavapipe's two small-product tiles on any host (lp_half_tile_pays picks one per CPU).
        {VKT_MM_TN, 0.05f, 0.9f, 1e-2f, true, "wide64t-r16c8-g8"},
        {VKT_MM_NN, 0.02f, 0.5f, 0.0f, false, "wide64t-r32c8-g8"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        if (cases[i].variant) VT_OK(t, vkt_context_set_matmul_variant(t->ctx, cases[i].variant));
        for (int d = 0; d < t->ndev; d++) {
            if (!ops[d] || !cmd[d]) continue;
            bool ss = is_swiftshader(t->dev[d]);
            if (ss && !cases[i].variant) {
                // SwiftShader's first choice (matmul_ss.glsl) has no epilogue.
                vkt_view z = {0};
                VT_CHECK(t,
                         !vkt_matmul_sgd_fits(ops[d], cases[i].form, &z, &z, &z, NULL, 72, 136, 40),
                         "SwiftShader: its own kernels claim the SGD epilogue");
                continue;
            }
            if (ss && strcmp(cases[i].variant, "wide-r16c8-g64") != 0) continue; // needs fp64
            sgd_case(t, t->dev[d], ops[d], cmd[d], cases[i].form, 72, 136, 40, cases[i].lr,
                     cases[i].momentum, cases[i].wd, cases[i].nesterov, (*seed)++,
                     cases[i].variant);
        }
        vkt_context_set_matmul_variant(t->ctx, NULL);
    }
    // Whole row tiles (M a multiple of 32) and a partial column group (N = 136, 200, 72): on
    // lavapipe the texel kernel writes the parameters and the momentum by subgroup-uniform stores
    // there (VKT_SPEC_MM_USTORE), the last piece repeated in the lanes past N; without momentum
    // it keeps the per-lane stores (z is c then).
    // (The tile's rows, M a multiple of them: 48 takes the uniform stores with the 16-row tile,
    // not with the 32-row one; both tiles forced once besides the device's first choice.)
    const struct {
        vkt_mm_form form;
        uint32_t M, N, K;
        float momentum;
        bool nesterov;
        const char *variant;
    } whole[] = {{VKT_MM_TN, 64, 136, 40, 0.9f, false, NULL},
                 {VKT_MM_NT, 96, 200, 48, 0.9f, true, NULL},
                 {VKT_MM_NN, 32, 72, 40, 0.5f, false, NULL},
                 {VKT_MM_TN, 64, 136, 40, 0.0f, false, NULL},
                 {VKT_MM_TN, 48, 136, 40, 0.9f, false, "wide64t-r16c8-g8"},
                 {VKT_MM_NT, 64, 200, 48, 0.9f, true, "wide64t-r32c8-g8"}};
    for (size_t i = 0; i < sizeof whole / sizeof whole[0]; i++) {
        if (whole[i].variant) VT_OK(t, vkt_context_set_matmul_variant(t->ctx, whole[i].variant));
        for (int d = 0; d < t->ndev; d++)
            if (ops[d] && cmd[d] && !is_swiftshader(t->dev[d]))
                sgd_case(t, t->dev[d], ops[d], cmd[d], whole[i].form, whole[i].M, whole[i].N,
                         whole[i].K, 0.05f, whole[i].momentum, 1e-3f, whole[i].nesterov, (*seed)++,
                         whole[i].variant);
        vkt_context_set_matmul_variant(t->ctx, NULL);
    }
    // An SGD-epilogue product of 2^27 multiply-adds with K = 512 in NT: on lavapipe the 32-row
    // texel tile takes two k steps per iteration of its k loop there (VKT_SPEC_MM_KSTEPS), forced
    // because some hosts' first choice there is the 16-row tile, which takes one.
    VT_OK(t, vkt_context_set_matmul_variant(t->ctx, "wide64t-r32c8-g8"));
    for (int d = 0; d < t->ndev; d++)
        if (ops[d] && cmd[d] && !is_swiftshader(t->dev[d]))
            sgd_case(t, t->dev[d], ops[d], cmd[d], VKT_MM_NT, 512, 512, 512, 0.05f, 0.9f, 1e-3f,
                     false, (*seed)++, "wide64t-r32c8-g8");
    vkt_context_set_matmul_variant(t->ctx, NULL);
}

// lavapipe at 512 bits (test_matmul --lavapipe-512, CTest's test_matmul_lp512, which sets
// LP_NATIVE_VECTOR_WIDTH=512 and VKT_TEST_DRIVERS=llvmpipe: the vector width is the driver's,
// read once per process): a subgroup of 16 lanes, the
// rule's texel tiles on workgroups of 16 (lp_wide in engine/ops/matmul.c), first choice and
// forced, on aligned shapes with partial tiles in every form, the activation epilogue and the
// SGD epilogue (whole and partial row tiles, with and without momentum).
static int test_lavapipe_512(vt *t) {
    int li = vt_find_device(t, "llvmpipe");
    vkt_device *dev = li >= 0 ? t->dev[li] : NULL;
    VT_CHECK(t, dev != NULL, "no lavapipe device");
    VT_CHECK(t, !dev || vkt_device_get_info(dev)->subgroup_size == 16,
             "lavapipe's subgroup is %u lanes, not 16: run with LP_NATIVE_VECTOR_WIDTH=512 "
             "(CTest's test_matmul_lp512 does)",
             dev ? vkt_device_get_info(dev)->subgroup_size : 0);
    if (!dev || vkt_device_get_info(dev)->subgroup_size != 16) return vt_finish(t);
    vkt_ops *ops = NULL;
    vkt_cmd *cmd = NULL;
    VT_OK(t, vkt_ops_create(dev, &ops));
    VT_OK(t, vkt_cmd_create(dev, &cmd));
    const vkt_mm_form forms[3] = {VKT_MM_NN, VKT_MM_NT, VKT_MM_TN};
    const char *passes[2] = {NULL, "wide64t-r16c8-g16"};
    const char *want[2] = {"wide64t-r32c8-g16", "wide64t-r16c8-g16"};
    const uint32_t aligned[][3] = {{128, 512, 784}, {72, 136, 40}, {8, 8, 8}};
    uint64_t seed = 900;
    int ncase = 0;
    for (int pass = 0; pass < 2 && ops && cmd; pass++) {
        if (passes[pass]) VT_OK(t, vkt_context_set_matmul_variant(t->ctx, passes[pass]));
        for (int f = 0; f < 3; f++) {
            for (size_t i = 0; i < sizeof aligned / sizeof aligned[0]; i++) {
                mm_case mc = {
                    forms[f],         aligned[i][0],           aligned[i][1],         aligned[i][2],
                    (ncase % 2) == 1, ncase % 3 ? 0.5f : 0.0f, (uint32_t)(ncase % 3), NO_EPI};
                run_on_all(t, &ops, &cmd, &mc, seed++, false);
                mm_case me = mc;
                me.epi = f == 0 ? VKT_MM_EPI_ACT : VKT_MM_EPI_GRAD_X;
                me.act = VKT_ACT_GELU;
                me.keep_z = f == 0;
                run_on_all(t, &ops, &cmd, &me, seed++, false);
                ncase++;
            }
            const char *got = vkt_matmul_variant(ops, forms[f], 128, 512, 784);
            VT_CHECK(t, got && !strcmp(got, want[pass]), "lavapipe at 512 bits: %s ran %s, not %s",
                     form_name(forms[f]), got ? got : "(none)", want[pass]);
        }
        // The SGD epilogue: whole row tiles (M = 64) and partial ones (M = 72), with and without
        // momentum, Nesterov once.
        sgd_case(t, dev, ops, cmd, VKT_MM_TN, 64, 136, 40, 0.05f, 0.9f, 1e-3f, false, seed++,
                 want[pass]);
        sgd_case(t, dev, ops, cmd, VKT_MM_TN, 72, 136, 40, 0.05f, 0.0f, 1e-2f, false, seed++,
                 want[pass]);
        sgd_case(t, dev, ops, cmd, VKT_MM_NT, 64, 200, 48, 0.05f, 0.9f, 0.0f, true, seed++,
                 want[pass]);
        vkt_context_set_matmul_variant(t->ctx, NULL);
    }
    vkt_cmd_destroy(cmd);
    vkt_ops_destroy(ops);
    return vt_finish(t);
}

int main(int argc, char **argv) {
    // The variants are chosen here by the device's rule (or forced), never by measurement, so
    // that each run checks the same kernels; test_tune checks the measured choice.
    vt tv, *t = &tv;
    if (vt_init(t, "test_matmul")) return 1;
    vkt_context_set_tune(t->ctx, VKT_TUNE_OFF);
    if (argc > 1 && strcmp(argv[1], "--lavapipe-512") == 0) return test_lavapipe_512(t);
    // A variant list naming something that is no variant is refused (by vkt_ops_create too), with
    // the name in the message; real names, "none", the stores tokens and an empty list are not.
    VT_CHECK(
        t,
        vkt_matmul_check_variants("wide64t-r32c8-g8,none,stores-vec4,stores-dvec4") == VKT_OK &&
            vkt_matmul_check_variants("") == VKT_OK && vkt_matmul_check_variants(NULL) == VKT_OK,
        "a list of real variant names refused: %s", vkt_error());
    VT_CHECK(t,
             vkt_matmul_check_variants("none,wide64t-r32c8") == VKT_ERR_ARG &&
                 strstr(vkt_error(), "\"wide64t-r32c8\"") && strstr(vkt_error(), "ss-r16c16-g4"),
             "a misspelt variant name: %s", vkt_error());
    {
        vkt_ops *bad = NULL;
        VT_OK(t, vkt_context_set_matmul_variant(t->ctx, "scalar-r8c8"));
        VT_CHECK(t, t->ndev > 0 && vkt_ops_create(t->dev[0], &bad) == VKT_ERR_ARG && !bad,
                 "vkt_ops_create accepted a variant list naming no variant");
        vkt_ops_destroy(bad);
        vkt_context_set_matmul_variant(t->ctx, NULL);
    }
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
                              (uint32_t)(ncase % 4),
                              NO_EPI};
                run_on_all(t, ops, cmd, &mc, seed++, false);
                ncase++;
            }
        }
    }
    // On SwiftShader those from PAD_SS_MIN_MACS (2^14) multiply-adds run on its own kernel over
    // padded copies (pad-ss-r16c16-g4), so the same shapes again forced onto its scalar kernel
    // ("none": no wide kernel), whose bounds guards the larger ones no longer reach by default.
    for (int d = 0; d < t->ndev; d++) {
        if (!ops[d] || !is_swiftshader(t->dev[d])) continue;
        for (int f = 0; f < 3; f++) {
            const char *got = vkt_matmul_variant(ops[d], forms[f], 7, 33, 127);
            VT_CHECK(t, got && strcmp(got, "pad-ss-r16c16-g4") == 0,
                     "%s 7x33x127 on SwiftShader runs %s, not pad-ss-r16c16-g4",
                     form_name(forms[f]), got ? got : "(none)");
        }
    }
    VT_OK(t, vkt_context_set_matmul_variant(t->ctx, "none"));
    for (int f = 0; f < 3; f++) {
        for (int i = 0; i < 5; i++) {
            mm_case mc = {forms[f],
                          v[i],
                          v[(i + 1) % 5],
                          v[(i + 2) % 5],
                          (ncase % 2) == 1,
                          betas[ncase % 3],
                          (uint32_t)(ncase % 4),
                          NO_EPI};
            run_on_all(t, ops, cmd, &mc, seed++, false);
            ncase++;
        }
    }
    vkt_context_set_matmul_variant(t->ctx, NULL);

    // The shared-memory tiled kernels meant for GPUs, forced, on awkward shapes (partial blocks
    // and partial k slices on every edge) and on aligned ones.
    const char *tiled[2] = {"tiled-r4c4-k16", "tiled-r8c8-k8"};
    const uint32_t tshape[][3] = {
        {1, 7, 33}, {33, 127, 7}, {127, 33, 513}, {128, 512, 784}, {130, 66, 17}};
    for (int tv_i = 0; tv_i < 2; tv_i++) {
        VT_OK(t, vkt_context_set_matmul_variant(t->ctx, tiled[tv_i]));
        for (int f = 0; f < 3; f++) {
            for (size_t i = 0; i < sizeof tshape / sizeof tshape[0]; i++) {
                mm_case mc = {
                    forms[f],         tshape[i][0],     tshape[i][1],          tshape[i][2],
                    (ncase % 2) == 0, betas[ncase % 3], (uint32_t)(ncase % 4), NO_EPI};
                run_on_all(t, ops, cmd, &mc, seed++, false);
                ncase++;
            }
        }
        for (int d = 0; d < t->ndev; d++) {
            const char *got = ops[d] ? vkt_matmul_variant(ops[d], VKT_MM_NN, 33, 127, 7) : NULL;
            VT_CHECK(t, got && !strcmp(got, tiled[tv_i]), "forced %s, ran %s", tiled[tv_i],
                     got ? got : "(none)");
        }
        vkt_context_set_matmul_variant(t->ctx, NULL);
    }

    // Aligned shapes: the wide kernel where the device has one, then the same forced onto the
    // scalar kernel. The training shapes of a 784-512-256-10 MLP at batch 128 are among them.
    const uint32_t aligned[][3] = {{128, 512, 784}, {512, 784, 128}, {128, 10, 256},
                                   {64, 64, 64},    {72, 136, 40},   {8, 8, 8}};
    // Pass 2 runs the variants meant for GPUs (the vec4 wide kernel, 64-lane workgroups), pass 3
    // lavapipe's tile (texel-buffer reads of a and b, a's tile shuffled across the subgroup;
    // forced, because measurement may choose the scalar one for some of these shapes), pass 4 a
    // K-split into dispatches of 256 (K = 784 gives four, the last of 16), pass 5 the
    // storage-buffer tile lavapipe falls back to where texel buffers cannot hold the views (its
    // larger tiles, no one's candidates, are the same code: not run, to save their compiling),
    // pass 6 the scalar tile SwiftShader measures against its first choice, pass 7 the 32 x 16
    // texel tile lavapipe measures against its 32 x 8 one on large products (tuning is off here,
    // so the rule's first choice runs otherwise), passes 8 and 9 the texel tile's 8-float
    // pieces written as two vec4s and as one dvec4 (the host's CPU picks one of them) and pass 10
    // the 16 x 8 texel tile (lavapipe's first choice on some hosts, pass 3's tile on the others),
    // so that every kernel and path the engine can choose is checked here.
    const char *passes[11] = {NULL,
                              "none",
                              "wide-r16c8-g64,scalar-r4c4-g64",
                              "wide64t-r32c8-g8",
                              "wide64-r32c16-g8-k256",
                              "wide64-r32c16-g8",
                              "none,scalar-r8c8-g4",
                              "wide64t-r32c16-g8",
                              "wide64t-r32c8-g8,stores-vec4",
                              "wide64t-r32c8-g8,stores-dvec4",
                              "wide64t-r16c8-g8"};
    for (int pass = 0; pass < 11; pass++) {
        if (passes[pass]) VT_OK(t, vkt_context_set_matmul_variant(t->ctx, passes[pass]));
        for (int f = 0; f < 3; f++) {
            for (size_t i = 0; i < sizeof aligned / sizeof aligned[0]; i++) {
                mm_case mc = {
                    forms[f],         aligned[i][0],    aligned[i][1],         aligned[i][2],
                    (ncase % 2) == 1, betas[ncase % 3], (uint32_t)(ncase % 3), NO_EPI};
                run_on_all(t, ops, cmd, &mc, seed++, false);
                ncase++;
            }
            // lavapipe runs a forced texel tile (and not a fallback) at the training shape.
            for (int d = 0; d < t->ndev && passes[pass] && !strncmp(passes[pass], "wide64t", 7);
                 d++) {
                if (!ops[d] || vkt_device_get_info(t->dev[d])->driver_id != VT_DRIVER_ID_LLVMPIPE)
                    continue;
                const char *got = vkt_matmul_variant(ops[d], forms[f], 128, 512, 784);
                size_t len = strcspn(passes[pass], ",");
                VT_CHECK(t, got && strlen(got) == len && !strncmp(got, passes[pass], len),
                         "lavapipe: forced %s, ran %s", passes[pass], got ? got : "(none)");
                // and the stores the list asks for (VKT_SPEC_MM_STORE64 in its kernel's key)
                const char *stores = strstr(passes[pass], ",stores-");
                vkt_mm_shape sh = {forms[f], 128, 512, 784};
                vkt_kernel_key key;
                vkt_matmul_plain_keys(ops[d], &sh, 1, &key);
                VT_CHECK(t,
                         !stores || key.spec[VKT_SPEC_MM_STORE64] ==
                                        (strcmp(stores, ",stores-dvec4") == 0 ? 1u : 0u),
                         "lavapipe: %s: STORE64 is %u", passes[pass],
                         key.spec[VKT_SPEC_MM_STORE64]);
            }
        }
        vkt_context_set_matmul_variant(t->ctx, NULL);
    }

    // SwiftShader's kernels forced by name; each case checks that the forced kernel is the one
    // that runs (an unaligned shape would silently take the scalar kernel).
    const uint32_t v4[5] = {4, 8, 36, 132, 516};
    const char *ss_variants[2] = {"ss-r16c16-g4", "ss-r32c16-g4"};
    for (int s = 0; s < 2; s++) {
        VT_OK(t, vkt_context_set_matmul_variant(t->ctx, ss_variants[s]));
        for (int f = 0; f < 3; f++) {
            for (int i = 0; i < 5; i++) {
                for (int rot = 1; rot <= 2; rot++) {
                    mm_case mc = {forms[f],
                                  forms[f] == VKT_MM_TN ? v4[i] : v[i],
                                  v4[(i + rot) % 5],
                                  v4[(i + 2 * rot) % 5],
                                  (ncase % 2) == 0,
                                  betas[ncase % 3],
                                  (uint32_t)(ncase % 4),
                                  NO_EPI};
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
        vkt_context_set_matmul_variant(t->ctx, NULL);
    }

    // The variant names are reported and differ between an aligned and an awkward shape on a
    // device that has a wide kernel.
    for (int d = 0; d < t->ndev; d++) {
        if (!ops[d]) continue;
        const char *wide = vkt_matmul_variant(ops[d], VKT_MM_NN, 1024, 1024, 1024);
        const char *odd = vkt_matmul_variant(ops[d], VKT_MM_NN, 7, 33, 127);
        VT_CHECK(t,
                 wide && odd && *wide && strcmp(wide, odd) != 0 &&
                     (strstr(odd, "scalar") || strstr(odd, "pad-")),
                 "variant names %s / %s", wide, odd);
        printf("test_matmul: %s: 1024^3 NN uses %s, 7x33x127 uses %s\n",
               vkt_device_label(t->dev[d]), wide, odd);
    }

    // The activation epilogue: every activation (leaky_relu with a negative slope as a sixth) in
    // every mode it has, the forms rotating so that each carries forward and backward modes.
    // Modes: 0 f(z), 1 f(z) keeping z, 2 z f'(x) from the input, 3 from the output.
    const struct {
        vkt_act act;
        float alpha;
    } acts[6] = {{VKT_ACT_RELU, 0.0f}, {VKT_ACT_LEAKY_RELU, 0.1f}, {VKT_ACT_GELU, 0.0f},
                 {VKT_ACT_TANH, 0.0f}, {VKT_ACT_SIGMOID, 0.0f},    {VKT_ACT_LEAKY_RELU, -0.2f}};
    const vkt_mm_epi mode_kind[4] = {VKT_MM_EPI_ACT, VKT_MM_EPI_ACT, VKT_MM_EPI_GRAD_X,
                                     VKT_MM_EPI_GRAD_Y};
    const uint32_t odd[4] = {1, 7, 33, 127};
    int nepi = 0;
    for (int i = 0; i < 6; i++) {
        for (int mode = 0; mode < 4; mode++) {
            if (mode == 3 && !vkt_act_grad_from_output(acts[i].act, acts[i].alpha)) continue;
            mm_case mc = {forms[(i + mode) % 3],
                          odd[nepi % 4],
                          odd[(nepi + 1 + nepi / 4) % 4],
                          odd[(nepi + 2 + nepi / 8) % 4],
                          (nepi % 2) == 0,
                          betas[nepi % 3],
                          (uint32_t)(nepi % 4),
                          mode_kind[mode],
                          acts[i].act,
                          acts[i].alpha,
                          mode == 1,
                          false};
            run_on_all(t, ops, cmd, &mc, seed++, false);
            nepi++;
        }
    }
    // An aligned shape (partial row tiles) through the wide kernel where the device has one: each
    // activation forward and backward; then the variants meant for GPUs (vec4 wide, shared-memory
    // tiled), and a K-split (the epilogue in the last of four chunks, bias and beta in the first).
    const struct {
        int act, mode;
        vkt_mm_form form;
        const char *variant;
        uint32_t K;
    } wide_cases[] = {
        {0, 0, VKT_MM_NT, NULL, 40},
        {1, 0, VKT_MM_NN, NULL, 40},
        {2, 1, VKT_MM_TN, NULL, 40},
        {3, 0, VKT_MM_TN, NULL, 40},
        {4, 1, VKT_MM_NT, NULL, 40},
        {5, 1, VKT_MM_NN, NULL, 40},
        {0, 3, VKT_MM_NN, NULL, 40},
        {1, 3, VKT_MM_TN, NULL, 40},
        {2, 2, VKT_MM_NN, NULL, 40},
        {3, 3, VKT_MM_NT, NULL, 40},
        {4, 2, VKT_MM_NN, NULL, 40},
        {5, 2, VKT_MM_NT, NULL, 40},
        {4, 3, VKT_MM_TN, NULL, 40},
        {0, 3, VKT_MM_NN, "wide-r16c8-g64", 40},
        {2, 1, VKT_MM_NT, "wide-r16c8-g64", 40},
        {1, 3, VKT_MM_NN, "tiled-r4c4-k16", 40},
        {2, 1, VKT_MM_TN, "tiled-r8c8-k8", 40},
        {3, 2, VKT_MM_NT, "tiled-r4c4-k16", 40},
        {4, 1, VKT_MM_NT, "wide64-r32c16-g8-k256", 784},
        // lavapipe's padded texel kernel with the epilogue, where only a and b are padded (K):
        // c, s and z are the product's own.
        {0, 2, VKT_MM_NN, "pad-wide64t-r32c8-g8", 13},
        {1, 1, VKT_MM_NT, "pad-wide64t-r32c8-g8", 13},
        {3, 3, VKT_MM_TN, "pad-wide64t-r32c8-g8", 13},
    };
    for (size_t i = 0; i < sizeof wide_cases / sizeof wide_cases[0]; i++) {
        int a = wide_cases[i].act, mode = wide_cases[i].mode;
        bool split = wide_cases[i].K > 256;
        if (wide_cases[i].variant)
            VT_OK(t, vkt_context_set_matmul_variant(t->ctx, wide_cases[i].variant));
        mm_case mc = {wide_cases[i].form,
                      72,
                      136,
                      wide_cases[i].K,
                      split || (i % 2) == 0,
                      split ? 0.5f : betas[i % 3],
                      (uint32_t)(i % 3),
                      mode_kind[mode],
                      acts[a].act,
                      acts[a].alpha,
                      mode == 1,
                      false};
        run_on_all(t, ops, cmd, &mc, seed++, false);
        vkt_context_set_matmul_variant(t->ctx, NULL);
    }

    // SwiftShader's own kernels have no epilogue: forced, a product with one runs on a kernel
    // that has (on SwiftShader only, as above), forward keeping z and backward.
    const struct {
        int act, mode;
        vkt_mm_form form;
        const char *variant;
    } ss_cases[] = {
        {2, 1, VKT_MM_NN, "ss-r16c16-g4"},
        {3, 3, VKT_MM_TN, "ss-r32c16-g4"},
    };
    for (size_t i = 0; i < sizeof ss_cases / sizeof ss_cases[0]; i++) {
        int a = ss_cases[i].act, mode = ss_cases[i].mode;
        VT_OK(t, vkt_context_set_matmul_variant(t->ctx, ss_cases[i].variant));
        mm_case mc = {ss_cases[i].form,
                      36,
                      132,
                      44,
                      (i % 2) == 0,
                      betas[i % 3],
                      (uint32_t)(i % 3),
                      mode_kind[mode],
                      acts[a].act,
                      acts[a].alpha,
                      mode == 1,
                      false};
        for (int d = 0; d < t->ndev; d++) {
            if (!ops[d] || !is_swiftshader(t->dev[d])) continue;
            const char *got = vkt_matmul_variant(ops[d], mc.form, mc.M, mc.N, mc.K);
            VT_CHECK(t, strcmp(got, ss_cases[i].variant) == 0,
                     "forced %s: the plain product would run %s", ss_cases[i].variant, got);
        }
        run_on_all(t, ops, cmd, &mc, seed++, true);
        vkt_context_set_matmul_variant(t->ctx, NULL);
    }

    // The narrow kernel (matmul_narrow.glsl: NT with N <= 16, TN with M <= 16, NN with K <= 16)
    // forced, on every device but SwiftShader (whose subgroups of 4 it cannot use: the rule's
    // kernels run there): the classifier layer's shapes (128 x 10 x 256 and its two gradients),
    // the bounds (16 and 1 along the narrow side), rows and columns past a workgroup's, every
    // epilogue mode, bias, beta and offset views.
    const struct {
        int act, mode;
        vkt_mm_form form;
        uint32_t M, N, K;
    } narrow_cases[] = {
        {0, 0, VKT_MM_NT, 128, 10, 256}, {1, 2, VKT_MM_NN, 128, 256, 10},
        {2, 0, VKT_MM_TN, 10, 256, 128}, {3, 1, VKT_MM_NT, 37, 16, 36},
        {4, 3, VKT_MM_NT, 9, 1, 4},      {5, 2, VKT_MM_NN, 37, 36, 16},
        {0, 3, VKT_MM_NN, 1, 4, 1},      {1, 1, VKT_MM_NN, 70, 132, 7},
        {4, 3, VKT_MM_TN, 16, 36, 13},   {3, 2, VKT_MM_TN, 1, 4, 1},
        {4, 1, VKT_MM_TN, 7, 132, 40},   {5, 2, VKT_MM_NT, 66, 7, 44},
    };
    for (size_t i = 0; i < sizeof narrow_cases / sizeof narrow_cases[0]; i++) {
        int a = narrow_cases[i].act, mode = narrow_cases[i].mode;
        VT_OK(t, vkt_context_set_matmul_variant(t->ctx, "narrow-g8"));
        mm_case mc = {narrow_cases[i].form,
                      narrow_cases[i].M,
                      narrow_cases[i].N,
                      narrow_cases[i].K,
                      (i % 2) == 0,
                      betas[i % 3],
                      (uint32_t)(i % 4),
                      i < 2 ? VKT_MM_EPI_NONE : mode_kind[mode],
                      acts[a].act,
                      acts[a].alpha,
                      mode == 1,
                      false};
        for (int d = 0; d < t->ndev; d++) {
            if (!ops[d] || is_swiftshader(t->dev[d])) continue;
            const char *got = vkt_matmul_variant(ops[d], mc.form, mc.M, mc.N, mc.K);
            VT_CHECK(t, strcmp(got, "narrow-g8") == 0,
                     "forced narrow-g8: %s %ux%ux%u would run %s on %s", form_name(mc.form), mc.M,
                     mc.N, mc.K, got, vkt_device_label(t->dev[d]));
        }
        run_on_all(t, ops, cmd, &mc, seed++, false);
        vkt_context_set_matmul_variant(t->ctx, NULL);
    }

    // a's column sums with the product (vkt_mm_epilogue.col_sum, TN: a dense layer's bias
    // gradient): on the device's choice (lavapipe: the texel kernel; at 1024 x 72 x 1040 a is 4.3
    // MB, past any CPU's L2, so its grid walks the column groups first: vkt_matmul_push.n_fast),
    // on the narrow kernel (M of 10, 16 and 7, with and without an epilogue), and forced onto the
    // scalar kernel (every device: the sums by a dispatch of their own).
    const struct {
        uint32_t M, N, K;
        const char *variant;
        int act, mode; // mode -1: no epilogue
    } col_cases[] = {
        {72, 136, 40, NULL, 0, -1},         {64, 512, 128, NULL, 0, -1},
        {10, 256, 128, "narrow-g8", 0, -1}, {16, 36, 13, "narrow-g8", 1, 2},
        {7, 132, 40, "narrow-g8", 0, -1},   {72, 136, 40, "scalar-r8c8-g8", 2, 1},
        {1024, 72, 1040, NULL, 0, -1},
    };
    for (size_t i = 0; i < sizeof col_cases / sizeof col_cases[0]; i++) {
        if (col_cases[i].variant)
            VT_OK(t, vkt_context_set_matmul_variant(t->ctx, col_cases[i].variant));
        int a = col_cases[i].act, mode = col_cases[i].mode;
        mm_case mc = {VKT_MM_TN,         col_cases[i].M,
                      col_cases[i].N,    col_cases[i].K,
                      (i % 2) == 1,      betas[i % 3],
                      (uint32_t)(i % 4), mode < 0 ? VKT_MM_EPI_NONE : mode_kind[mode],
                      acts[a].act,       acts[a].alpha,
                      mode == 1,         true};
        run_on_all(t, ops, cmd, &mc, seed++, false);
        vkt_context_set_matmul_variant(t->ctx, NULL);
    }

    test_sgd_epilogue(t, ops, cmd, &seed);

    // One product of at least 1024 along every dimension per form (K = 1040: on lavapipe NN and
    // NT take two k steps per iteration of the texel kernel's k loop, VKT_SPEC_MM_KSTEPS).
    for (int f = 0; f < 3; f++) {
        mm_case mc = {forms[f], 1024, 1056, 1040, f != 1, betas[f], 1, NO_EPI};
        run_on_all(t, ops, cmd, &mc, seed++, false);
    }

    for (int d = 0; d < t->ndev; d++) {
        vkt_cmd_destroy(cmd[d]);
        vkt_ops_destroy(ops[d]);
    }
    return vt_finish(t);
}
