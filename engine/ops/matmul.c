// matmul.c: vkt_op_matmul, the one matrix product of training (NN forward of a plain product, NT
// for a dense layer's forward x W^T and its input gradient, TN for its weight gradient), and the
// table of kernel variants it chooses from.
//
// Two kernels (shaders/matmul_wide.glsl, with a and b read through storage buffers or, in
// matmul_wide64t, through uniform texel buffers, and shaders/matmul_scalar.glsl) come in variants:
// a tile (rows per workgroup, columns per lane, lanes per workgroup) and, for the wide kernel, a
// load width W. Which variants are candidates on a device is a rule on what the device reports
// (driver id, shaderFloat64, device type), kept as data in DEVICE_RULES. Per product, the
// candidates that fit it (a wide variant needs K, N (and M for TN) and the view offsets to allow
// W-wide loads; a scalar variant takes any M, N, K >= 1) are measured on scratch operands the
// first time the shape is met, and the fastest is used from then on; tune.c keeps the
// measurements on disk per device and driver build, so a later process measures nothing.
// The context's matmul_variant (the CLI's VKT_MATMUL_VARIANT=name[,name]) fixes the choice (for
// benchmarks and experiments); its tune mode VKT_TUNE_OFF (VKT_TUNE=off) takes the first
// candidate that fits without measuring.
//
// vkt_op_matmul_ex adds an epilogue (shaders/mm_epilogue.glsl): in the wide, scalar and tiled
// kernels an activation, f(z) for a dense layer's forward, optionally keeping z, or z * f' for the
// activation's backward fused into the input-gradient product. The activation and mode are two
// more specialization constants (none by default), so a plain product compiles as before. A
// product with an epilogue chooses among the candidates that have it (SwiftShader's kernels do
// not). In the wide kernel only (one dispatch, no K-split: has_sgd), the optimizer epilogue
// VKT_MM_EPI_SGD: c holds the parameters, which take one SGD step from the product (their
// gradient); matmul_wide64t_sgd reads them and the momentum buffer as texels. What the fusions
// save per layer and step: docs/PERFORMANCE.md, "Fused step".
//
// Why these kernels (the measurements: docs/PERFORMANCE.md, "Why the matmul kernels look as
// they do"):
//  - lavapipe turns every storage-buffer load inside a loop into a branchy loop over its 8 lanes:
//    few, wide loads (dvec4) each reused by a 32-row tile of FMAs, and texel fetches (a
//    branch-free gather there) in place of storage loads, are what pays. It compiles a pipeline's
//    machine code at its first dispatch: measure() runs every candidate once untimed first.
//  - SwiftShader makes every computed-index load a per-lane gather and does not unroll a tile
//    given by specialization constants: its kernels (matmul_ss.glsl) broadcast the rows of a
//    across one subgroup of 4 lanes; shapes that are not multiples of 4 take the scalar kernel.
//
// Not done here: no split of a product whose operands exceed maxStorageBufferRange (asserted), no
// fp16. Views smaller than their shapes are bugs in the engine's layer code and are asserted, as
// ops_nn.c does.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops.h"
#include "trace.h"
#include "tune.h"
#include "vkt_abi.h"
#include "vkt_internal.h"
#include "vkt_shaders.h"

_Static_assert(VKT_MM_NN == VKT_MM_FORM_NN && VKT_MM_NT == VKT_MM_FORM_NT &&
                   VKT_MM_TN == VKT_MM_FORM_TN,
               "vkt_mm_form and the shaders' form codes must agree");
_Static_assert(VKT_ACT_RELU == VKT_ACT_CODE_RELU && VKT_ACT_LEAKY_RELU == VKT_ACT_CODE_LEAKY_RELU &&
                   VKT_ACT_GELU == VKT_ACT_CODE_GELU && VKT_ACT_TANH == VKT_ACT_CODE_TANH &&
                   VKT_ACT_SIGMOID == VKT_ACT_CODE_SIGMOID,
               "vkt_act and the shaders' activation codes must agree");

// ---------------------------------------------------------------------------------------------
// Variants

typedef enum mm_kind {
    MM_WIDE,   // matmul_wide.glsl: tile and width by specialization constants
    MM_SCALAR, // matmul_scalar.glsl: tile compiled into the kernel (matmul_s<tm>x<tc>)
    MM_TILED,  // matmul_tiled.comp: wg x wg lanes, shared-memory slices w deep, any shape
} mm_kind;

typedef struct mm_variant {
    const char *name;
    // The kernel per form (NN, NT, TN): the same one for all three except SwiftShader's
    // matmul_ss.glsl, which is built once per form.
    vkt_shader_id kernel[3];
    // The kernel that runs the optimizer epilogue (has_sgd): the texel-read variant's reads c and
    // s as texels too (matmul_wide64t_sgd); the others' is their own kernel.
    vkt_shader_id sgd_kernel;
    mm_kind kind;
    uint32_t wg;     // lanes per workgroup (x)
    uint32_t tm, tc; // rows per workgroup, columns per lane
    uint32_t w;      // wide: floats per load (4 = vec4, 8 = dvec4); scalar: 1
    uint32_t kc;     // k per dispatch (a multiple of w); 0 = the whole K in one dispatch
    bool texel;      // a and b bound as uniform texel buffers (matmul_wide64t)
    bool ss;         // matmul_ss.glsl: broadcasts across its wg lanes, which must be one subgroup
} mm_variant;

// The kernels of a variant (kernel[3], sgd_kernel): one for every form; the texel-read one, whose
// optimizer epilogue has a kernel of its own; SwiftShader's, one per form.
#define ALL_FORMS(k) {k, k, k}, k
#define TEXEL_FORMS                                                                                \
    {VKT_SHADER_MATMUL_WIDE64T, VKT_SHADER_MATMUL_WIDE64T, VKT_SHADER_MATMUL_WIDE64T},             \
        VKT_SHADER_MATMUL_WIDE64T_SGD
#define SS_FORMS(r)                                                                                \
    {VKT_SHADER_MATMUL_SS_##r##_NN, VKT_SHADER_MATMUL_SS_##r##_NT, VKT_SHADER_MATMUL_SS_##r##_TN}, \
        VKT_SHADER_MATMUL_SS_##r##_NN

static const mm_variant VARIANTS[] = {
    // lavapipe: the wide64 tiles with a and b read as texel buffers (matmul_wide64t): a texel
    // fetch is a branch-free gather there, a storage-buffer load a branchy loop over lanes.
    {"wide64t-r32c32-g8", TEXEL_FORMS, MM_WIDE, 8, 32, 32, 8, 0, true, false},
    {"wide64t-r32c16-g8", TEXEL_FORMS, MM_WIDE, 8, 32, 16, 8, 0, true, false},
    // The same tiles through storage buffers: dvec4 pieces, one subgroup of 8 lanes per
    // workgroup; 32 rows x 16 columns per lane (LLVM compiles it in a third of 32 x 32's time).
    // lavapipe keeps 32 x 16 as a candidate (views the texel limits refuse); 32 x 32 is no one's
    // candidate any more, kept for comparisons under a fixed matmul_variant.
    {"wide64-r32c16-g8", ALL_FORMS(VKT_SHADER_MATMUL_WIDE64), MM_WIDE, 8, 32, 16, 8, 0, false,
     false},
    {"wide64-r32c32-g8", ALL_FORMS(VKT_SHADER_MATMUL_WIDE64), MM_WIDE, 8, 32, 32, 8, 0, false,
     false},
    // Measured alternatives, kept for comparisons: a smaller tile (faster to compile, slower to
    // run) and a K-split of 256 (slower here: every split reloads c).
    {"wide64-r24c16-g8", ALL_FORMS(VKT_SHADER_MATMUL_WIDE64), MM_WIDE, 8, 24, 16, 8, 0, false,
     false},
    {"wide64-r32c16-g8-k256", ALL_FORMS(VKT_SHADER_MATMUL_WIDE64), MM_WIDE, 8, 32, 16, 8, 256,
     false, false},
    // vec4 pieces: the lavapipe tile for CPU drivers without shaderFloat64, and a GPU-shaped one
    // (64 lanes, a small tile per lane) for everything else. Not measured here (no such device).
    {"wide-r32c16-g8", ALL_FORMS(VKT_SHADER_MATMUL_WIDE), MM_WIDE, 8, 32, 16, 4, 0, false, false},
    {"wide-r16c8-g64", ALL_FORMS(VKT_SHADER_MATMUL_WIDE), MM_WIDE, 64, 16, 8, 4, 0, false, false},
    // Any shape.
    {"scalar-r8c8-g8", ALL_FORMS(VKT_SHADER_MATMUL_S8X8), MM_SCALAR, 8, 8, 8, 1, 0, false, false},
    {"scalar-r8c8-g4", ALL_FORMS(VKT_SHADER_MATMUL_S8X8), MM_SCALAR, 4, 8, 8, 1, 0, false, false},
    {"scalar-r16c16-g4", ALL_FORMS(VKT_SHADER_MATMUL_S16X16), MM_SCALAR, 4, 16, 16, 1, 0, false,
     false},
    {"scalar-r4c4-g64", ALL_FORMS(VKT_SHADER_MATMUL_S4X4), MM_SCALAR, 64, 4, 4, 1, 0, false, false},
    // GPUs: shared-memory tiles, 16 x 16 lanes; 64 x 64 blocks of 4 x 4 per lane in slices of 16
    // k, or 128 x 128 blocks of 8 x 8 in slices of 8. Not measured on a GPU yet (none here); the
    // first use of a shape on a GPU measures them against the others.
    {"tiled-r4c4-k16", ALL_FORMS(VKT_SHADER_MATMUL_TILED), MM_TILED, 16, 4, 4, 16, 0, false, false},
    {"tiled-r8c8-k8", ALL_FORMS(VKT_SHADER_MATMUL_TILED), MM_TILED, 16, 8, 8, 8, 0, false, false},
    // SwiftShader (shaders/matmul_ss.glsl): one subgroup of 4 lanes, 16 columns per lane, the
    // rows broadcast across the subgroup, vec4 loads, one kernel per form. 32 rows for large
    // products (twice the scalar kernel's speed, but five times the 16-row tile's compile time),
    // 16 rows otherwise.
    {"ss-r32c16-g4", SS_FORMS(R32), MM_WIDE, 4, 32, 16, 4, 0, false, true},
    {"ss-r16c16-g4", SS_FORMS(R16), MM_WIDE, 4, 16, 16, 4, 0, false, true},
};
#define NVARIANTS ((int)(sizeof VARIANTS / sizeof VARIANTS[0]))

// The kernels that include shaders/mm_epilogue.glsl (bindings 4 and 5, spec ids 7 and 8): all
// but SwiftShader's (matmul_ss.glsl says why).
static bool has_epilogue(const mm_variant *v) { return !v->ss; }
// The kernels with the optimizer epilogue (VKT_MM_EPI_SGD): the wide kernel, in one dispatch (a
// K-split's chunks would add onto the parameters).
static bool has_sgd(const mm_variant *v) { return v->kind == MM_WIDE && !v->ss && v->kc == 0; }

static const mm_variant *variant_named(const char *name, size_t len) {
    for (int i = 0; i < NVARIANTS; i++)
        if (strlen(VARIANTS[i].name) == len && strncmp(VARIANTS[i].name, name, len) == 0)
            return &VARIANTS[i];
    return NULL;
}

// ---------------------------------------------------------------------------------------------
// Which variants a device may use: the candidates of the first rule that matches, in order of
// preference. Where more than one fits a product, the fastest is chosen by measurement at first
// use (tune.c keeps the result on disk per device and driver build); without measurements
// (VKT_TUNE_OFF, or a measurement that could not run) the first that fits is used.

// The size from which the big tiles are candidates: their compile time (seconds per form on
// lavapipe) pays only for large products (training's 128 x 512 x 784 layers stay below it).
#define BIG_MACS (1ull << 27)
#define MAX_CANDS 8

static bool is_lavapipe(const vkt_device_info *d) {
    return d->driver_id == VK_DRIVER_ID_MESA_LLVMPIPE;
}
static bool is_swiftshader(const vkt_device_info *d) {
    return d->driver_id == VK_DRIVER_ID_GOOGLE_SWIFTSHADER;
}
static bool is_cpu_fp64(const vkt_device_info *d) {
    return d->type == VKT_DEVICE_CPU && d->shader_float64;
}
static bool is_cpu(const vkt_device_info *d) { return d->type == VKT_DEVICE_CPU; }
static bool any_device(const vkt_device_info *d) { return d != NULL; }

typedef struct mm_cand {
    const char *name;
    uint64_t min_macs; // a candidate only for products of at least this many multiply-adds
} mm_cand;

typedef struct mm_rule {
    bool (*match)(const vkt_device_info *d);
    mm_cand cand[MAX_CANDS]; // NULL-terminated; the list ends with a scalar variant (any shape)
} mm_rule;

static const mm_rule DEVICE_RULES[] = {
    {is_lavapipe,
     {{"wide64t-r32c32-g8", BIG_MACS},
      {"wide64t-r32c16-g8", 0},
      {"wide64-r32c16-g8", 0},
      {"scalar-r8c8-g8", 0}}},
    // SwiftShader: its own kernels (matmul_ss.glsl); the 32-row tile only for big products
    // (several times the 16-row tile's compile time).
    {is_swiftshader, {{"ss-r32c16-g4", BIG_MACS}, {"ss-r16c16-g4", 0}, {"scalar-r16c16-g4", 0}}},
    // Other CPU drivers: lavapipe's reasoning (each load inside a loop is a loop over lanes).
    {is_cpu_fp64,
     {{"wide64t-r32c32-g8", BIG_MACS},
      {"wide64t-r32c16-g8", 0},
      {"wide64-r32c16-g8", 0},
      {"scalar-r8c8-g8", 0}}},
    {is_cpu, {{"wide-r32c16-g8", 0}, {"scalar-r8c8-g8", 0}}},
    // GPUs and anything else: shared-memory tiles first; measurement settles it per shape.
    {any_device,
     {{"tiled-r8c8-k8", BIG_MACS / 8},
      {"tiled-r4c4-k16", 0},
      {"wide-r16c8-g64", 0},
      {"scalar-r4c4-g64", 0}}},
};

static const mm_variant *named(const char *name) {
    return name ? variant_named(name, strlen(name)) : NULL;
}

static bool runs_on(const vkt_device_info *d, const mm_variant *v) {
    if (!v) return false;
    if (v->kind == MM_TILED)
        return v->wg * v->wg <= d->max_workgroup_invocations &&
               4ull * v->w * v->wg * (v->tm + v->tc) <= d->shared_memory_bytes;
    return v->wg <= d->max_workgroup_invocations && (v->w != 8 || d->shader_float64) &&
           (!v->ss || d->subgroup_size >= v->wg); // ss: one workgroup is one subgroup
}

// The device's candidates for a product of macs multiply-adds. The context's matmul_variant
// ("name[,name]", the CLI's VKT_MATMUL_VARIANT) fixes the choice instead (for benchmarks and
// experiments): a wide name replaces the wide candidates, a scalar name the scalar ones, "none"
// drops the wide ones; *fixed is then set and nothing is measured.
static int candidates(const vkt_device *dev, uint64_t macs, const mm_variant **out, bool *fixed) {
    const vkt_device_info *d = dev->info;
    const mm_rule *rule = NULL;
    for (size_t i = 0; i < sizeof DEVICE_RULES / sizeof DEVICE_RULES[0] && !rule; i++)
        if (DEVICE_RULES[i].match(d)) rule = &DEVICE_RULES[i];
    const mm_variant *fix_wide = NULL, *fix_scalar = NULL;
    bool no_wide = false;
    *fixed = false;
    for (const char *names = dev->ctx->matmul_variant; *names;) {
        size_t len = strcspn(names, ",");
        const mm_variant *v = variant_named(names, len);
        if (v && v->kind != MM_SCALAR) fix_wide = v;
        if (v && v->kind == MM_SCALAR) fix_scalar = v;
        if (len == 4 && strncmp(names, "none", 4) == 0) no_wide = true;
        *fixed = *fixed || v || (len == 4 && strncmp(names, "none", 4) == 0);
        names += len + (names[len] == ',');
    }
    int n = 0;
    if (fix_wide && !no_wide && runs_on(d, fix_wide)) out[n++] = fix_wide;
    if (fix_scalar && runs_on(d, fix_scalar)) out[n++] = fix_scalar;
    for (int i = 0; rule && i < MAX_CANDS && rule->cand[i].name && n < MAX_CANDS; i++) {
        const mm_variant *v = named(rule->cand[i].name);
        if (!runs_on(d, v) || macs < rule->cand[i].min_macs) continue;
        if (v->kind != MM_SCALAR && (fix_wide || no_wide)) continue;
        if (v->kind == MM_SCALAR && fix_scalar) continue;
        out[n++] = v;
    }
    // Always something that runs any shape on any device.
    if (n == 0 || out[n - 1]->kind == MM_WIDE) out[n++] = named("scalar-r8c8-g4");
    VKT_ASSERT(out[n - 1]);
    return n;
}

// Whether the wide variant v can run this product: every W-wide piece it reads or writes must
// start on a multiple of W inside its view, and the views must start where W-wide access is
// aligned.
static bool wide_fits(const vkt_device_info *d, const mm_variant *v, vkt_mm_form form,
                      const vkt_view *c, const vkt_view *a, const vkt_view *b, uint32_t M,
                      uint32_t N, uint32_t K) {
    uint32_t w = v->w;
    if (K % w || N % w) return false;
    if (form == VKT_MM_TN && M % w) return false;
    // vec4 pieces need 16-byte aligned views; dvec4 pieces 32, except on a CPU, where 16 is
    // enough (and is lavapipe's storage alignment, which the engine's packing follows).
    uint64_t align = 4ull * w;
    if (align > 16 && d->type == VKT_DEVICE_CPU) align = 16;
    if (c->offset % align || a->offset % align || b->offset % align) return false;
    if (!v->texel) return true;
    // Texel views: the device's offset alignment, and a and b within maxTexelBufferElements
    // (SwiftShader allows only 65536 texels, 1 MiB).
    uint64_t max = 16ull * d->max_texel_buffer_elements;
    return vkt_texel_offset_ok(d, a->offset) && vkt_texel_offset_ok(d, b->offset) &&
           4ull * M * K <= max && 4ull * K * N <= max;
}

static const char *form_name(vkt_mm_form f) {
    return f == VKT_MM_NN ? "NN" : f == VKT_MM_NT ? "NT" : "TN";
}

typedef struct mm_epi_args {
    uint32_t act_code, mode; // spec constants of shaders/mm_epilogue.glsl
    float alpha;
    vkt_view s, z;                // bindings 4 (read) and 5 (written)
    float momentum, weight_decay; // VKT_MM_EPI_SGD
    uint32_t sgd_mode;            // VKT_MM_EPI_SGD: 0 plain, 1 momentum, 2 nesterov
} mm_epi_args;

static void record_variant(vkt_cmd *cmd, vkt_ops *ops, const mm_variant *v, vkt_mm_form form,
                           vkt_view c, vkt_view a, vkt_view b, vkt_view bv, bool has_bias,
                           float beta, uint32_t M, uint32_t N, uint32_t K, const mm_epi_args *e,
                           const char *label);

// Measures each variant v[i] on this shape (scratch operands, nothing of the caller's touched):
// an untimed warm-up (below), one timed run each, then two more rounds for those within 2x of
// the fastest, interleaved, the
// fastest run kept. GPU timestamps where the queue has them, else the host clock around a submit
// per run. False (and nothing measured) when the scratch memory or a submit fails.
static bool measure(vkt_ops *ops, vkt_mm_form form, uint32_t M, uint32_t N, uint32_t K,
                    const mm_variant **v, int n, double *ms) {
    static const char *labels[MAX_CANDS] = {"tune:0", "tune:1", "tune:2", "tune:3",
                                            "tune:4", "tune:5", "tune:6", "tune:7"};
    vkt_device *dev = vkt_ops_device(ops);
    if (vkt_ops_peek(ops) != VKT_OK) return false; // the caller's failure, for the caller to see
    bool stamps = vkt_device_get_info(dev)->timestamp_valid_bits > 0;
    vkt_buffer *ba = NULL, *bb = NULL, *bc = NULL;
    vkt_cmd *cmd = NULL;
    bool ok = vkt_buffer_create(dev, 4ull * M * K, "matmul tuning a", &ba) == VKT_OK &&
              vkt_buffer_create(dev, 4ull * K * N, "matmul tuning b", &bb) == VKT_OK &&
              vkt_buffer_create(dev, 4ull * M * N, "matmul tuning c", &bc) == VKT_OK &&
              vkt_cmd_create(dev, &cmd) == VKT_OK;
    bool active[MAX_CANDS];
    for (int i = 0; i < n; i++) {
        ms[i] = INFINITY;
        active[i] = true;
    }
    vkt_view a = vkt_buffer_whole(ba), b = vkt_buffer_whole(bb), c = vkt_buffer_whole(bc);
    // Warm-up, untimed: each candidate once on one workgroup's share of the product (its own
    // rows and columns, the whole K). lavapipe compiles a pipeline's machine code at its first
    // dispatch, not when it is created: with Mesa's shader cache cold, a first timed run held
    // seconds of compiling and every candidate lost to the scalar kernel.
    if (ok) ok = vkt_cmd_begin(cmd, false) == VKT_OK;
    if (ok) {
        vkt_cmd_fill(cmd, a, 0x3c23d70a); // 0.01f: any finite values do (CPU drivers are not
        vkt_cmd_fill(cmd, b, 0x3c23d70a); // data-bound)
        vkt_cmd_barrier(cmd);
        for (int j = 0; j < n; j++) {
            uint32_t rows = v[j]->kind == MM_TILED ? v[j]->wg * v[j]->tm : v[j]->tm;
            uint32_t cols = v[j]->wg * v[j]->tc;
            record_variant(cmd, ops, v[j], form, c, a, b, a, false, 0.0f, rows < M ? rows : M,
                           cols < N ? cols : N, K, NULL, NULL);
            vkt_cmd_barrier(cmd); // every variant writes c
        }
        ok = vkt_ops_status(ops) == VKT_OK && vkt_cmd_end(cmd) == VKT_OK &&
             vkt_cmd_submit(cmd) == VKT_OK && vkt_cmd_wait(cmd, 600000) == VKT_OK;
    }
    for (int round = 0; ok && round < 3; round++) {
        // With timestamps one submit per round times every variant; without, one submit per run.
        for (int i = 0; ok && i < n; i++) {
            if (!active[i] || (stamps && i > 0)) continue;
            ok = vkt_cmd_begin(cmd, stamps) == VKT_OK;
            for (int j = i; ok && j < n && (stamps || j == i); j++) {
                if (!active[j]) continue;
                record_variant(cmd, ops, v[j], form, c, a, b, a, false, 0.0f, M, N, K, NULL,
                               labels[j]);
                vkt_cmd_barrier(cmd); // every variant writes c
            }
            if (vkt_ops_status(ops) != VKT_OK) ok = false; // a candidate that cannot be built
            int64_t t0 = vkt_trace_now_ns();
            ok = ok && vkt_cmd_end(cmd) == VKT_OK && vkt_cmd_submit(cmd) == VKT_OK &&
                 vkt_cmd_wait(cmd, 600000) == VKT_OK;
            int64_t t1 = vkt_trace_now_ns();
            if (ok && !stamps) ms[i] = fmin(ms[i], (double)(t1 - t0) / 1e6);
            const vkt_timing *t;
            int nt = ok && stamps ? vkt_cmd_timings(cmd, &t) : 0;
            for (int j = 0; j < n && nt > 0; j++) {
                uint64_t lo = UINT64_MAX, hi = 0; // a K-split records several dispatches
                for (int e = 0; e < nt; e++)
                    if (t[e].label == labels[j]) {
                        lo = t[e].start_ns < lo ? t[e].start_ns : lo;
                        hi = t[e].end_ns > hi ? t[e].end_ns : hi;
                    }
                if (hi > lo) ms[j] = fmin(ms[j], (double)(hi - lo) / 1e6);
            }
        }
        double best = INFINITY;
        for (int i = 0; i < n; i++)
            best = fmin(best, ms[i]);
        for (int i = 0; i < n; i++)
            active[i] = active[i] && ms[i] <= 2.0 * best;
        if (best > 1000.0) break; // a second per run: one round tells enough
    }
    for (int i = 0; ok && i < n; i++)
        ok = isfinite(ms[i]) || !active[i];
    vkt_cmd_destroy(cmd);
    vkt_buffer_destroy(bc);
    vkt_buffer_destroy(bb);
    vkt_buffer_destroy(ba);
    return ok;
}

// Whether a view read or written like c (the epilogue's s and z) allows the wide variant v: the
// alignment that wide_fits asks of c.
static bool wide_view_ok(const vkt_device_info *d, const mm_variant *v, const vkt_view *x) {
    uint64_t align = 4ull * v->w;
    if (align > 16 && d->type == VKT_DEVICE_CPU) align = 16;
    return x->offset % align == 0;
}

// epi: the product has an epilogue whose s and z views are sv and zv (NULL: none).
// The device's candidates that can run this product (views c, a, b; with an epilogue, its views
// sv and zv too), in order of preference, into fit; returns their number (at least one, except
// with sgd: the epilogue is VKT_MM_EPI_SGD, which only has_sgd variants run, and no fallback is
// added). *fixed: the context's matmul_variant chose them.
static int fitting(const vkt_device *dev, vkt_mm_form form, const vkt_view *c, const vkt_view *a,
                   const vkt_view *b, const vkt_view *sv, const vkt_view *zv, bool sgd, uint32_t M,
                   uint32_t N, uint32_t K, const mm_variant **fit, bool *fixed) {
    const vkt_device_info *d = dev->info;
    const mm_variant *cand[MAX_CANDS];
    int nc = candidates(dev, (uint64_t)M * N * K, cand, fixed), nf = 0;
    for (int i = 0; i < nc; i++) {
        const mm_variant *v = cand[i];
        if (sv && !has_epilogue(v)) continue;
        if (sgd && !has_sgd(v)) continue;
        // With the SGD epilogue a texel kernel reads c and the momentum buffer as texels too.
        if (sgd && v->texel &&
            (!vkt_texel_offset_ok(d, c->offset) || (sv && !vkt_texel_offset_ok(d, sv->offset))))
            continue;
        if (v->kind == MM_WIDE && (!wide_fits(d, v, form, c, a, b, M, N, K) ||
                                   (sv && (!wide_view_ok(d, v, sv) || !wide_view_ok(d, v, zv)))))
            continue;
        fit[nf++] = v;
    }
    if (nf == 0 && !sgd) fit[nf++] = named("scalar-r8c8-g4"); // has the epilogue; any shape
    return nf;
}

// The name a product's measurements are kept under (tune.c).
static void op_key(char *buf, size_t size, vkt_mm_form form, uint32_t M, uint32_t N, uint32_t K) {
    snprintf(buf, size, "matmul %s %ux%ux%u", form_name(form), M, N, K);
}

static const mm_variant *choose(vkt_ops *ops, vkt_mm_form form, const vkt_view *c,
                                const vkt_view *a, const vkt_view *b, const vkt_view *sv,
                                const vkt_view *zv, bool sgd, uint32_t M, uint32_t N, uint32_t K) {
    const vkt_device *dev = vkt_ops_device(ops);
    const mm_variant *fit[MAX_CANDS];
    bool fixed;
    int nf = fitting(dev, form, c, a, b, sv, zv, sgd, M, N, K, fit, &fixed);
    if (nf == 0) return NULL; // sgd only: the caller asked vkt_matmul_sgd_fits first
    if (nf == 1 || fixed || vkt_tune_mode_of(dev) == VKT_TUNE_OFF) return fit[0];

    char op[96];
    op_key(op, sizeof op, form, M, N, K);
    vkt_tune_lock();
    // Stored times, and the candidates without one (measured now; INFINITY if that fails).
    double ms[MAX_CANDS], got[MAX_CANDS];
    const mm_variant *todo[MAX_CANDS];
    int todo_at[MAX_CANDS], ntodo = 0;
    for (int i = 0; i < nf; i++) {
        if (vkt_tune_get(dev, op, fit[i]->name, &ms[i])) continue;
        ms[i] = INFINITY;
        todo_at[ntodo] = i;
        todo[ntodo++] = fit[i];
    }
    if (ntodo > 0 && measure(ops, form, M, N, K, todo, ntodo, got)) {
        for (int i = 0; i < ntodo; i++) {
            vkt_tune_put(dev, op, todo[i]->name, got[i]);
            ms[todo_at[i]] = got[i];
        }
        vkt_tune_save(dev);
    }
    vkt_tune_unlock();
    const mm_variant *best = fit[0];
    double best_ms = INFINITY;
    for (int i = 0; i < nf; i++)
        if (ms[i] < best_ms) {
            best_ms = ms[i];
            best = fit[i];
        }
    return best;
}

const char *vkt_matmul_variant(vkt_ops *ops, vkt_mm_form form, uint32_t M, uint32_t N, uint32_t K) {
    // Views at offset 0 (the engine's usual packing): the same choice vkt_op_matmul makes.
    vkt_view z = {0};
    return choose(ops, form, &z, &z, &z, NULL, NULL, false, M, N, K)->name;
}

bool vkt_matmul_epilogue_pays(vkt_ops *ops) {
    // Fusing pays where the driver folds the epilogue's specialization constants (lavapipe, GPU
    // drivers); SwiftShader runs every activation's code in a fused kernel, which makes it slower
    // than the separate act kernel (docs/PERFORMANCE.md, "Fused step").
    return !is_swiftshader(vkt_device_get_info(vkt_ops_device(ops)));
}

bool vkt_matmul_sgd_fits(vkt_ops *ops, vkt_mm_form form, const vkt_view *c, const vkt_view *a,
                         const vkt_view *b, const vkt_view *buf, uint32_t M, uint32_t N,
                         uint32_t K) {
    const mm_variant *fit[MAX_CANDS];
    bool fixed;
    const vkt_view *bv = buf ? buf : a, *zv = buf ? buf : c;
    return fitting(vkt_ops_device(ops), form, c, a, b, bv, zv, true, M, N, K, fit, &fixed) > 0;
}

int vkt_matmul_candidates(vkt_ops *ops, vkt_mm_form form, uint32_t M, uint32_t N, uint32_t K,
                          const char **names, double *ms, int max) {
    const vkt_device *dev = vkt_ops_device(ops);
    const mm_variant *fit[MAX_CANDS];
    bool fixed;
    vkt_view z = {0};
    int nf = fitting(dev, form, &z, &z, &z, NULL, NULL, false, M, N, K, fit, &fixed), n = 0;
    char op[96];
    op_key(op, sizeof op, form, M, N, K);
    for (; n < nf && n < max; n++) {
        names[n] = fit[n]->name;
        if (!vkt_tune_get(dev, op, fit[n]->name, &ms[n])) ms[n] = 0;
    }
    return n;
}

// ---------------------------------------------------------------------------------------------
// Recording

void vkt_op_matmul_ex(vkt_cmd *cmd, vkt_ops *ops, vkt_mm_form form, vkt_view c, vkt_view a,
                      vkt_view b, const vkt_view *bias, float beta, uint32_t M, uint32_t N,
                      uint32_t K, const vkt_mm_epilogue *epi, const char *label) {
    VKT_ASSERT(form == VKT_MM_NN || form == VKT_MM_NT || form == VKT_MM_TN);
    VKT_ASSERT(M >= 1 && N >= 1 && K >= 1);
    const vkt_device_info *d = vkt_device_get_info(vkt_ops_device(ops));
    // Bind exactly what the shape uses: a view may be larger than needed, and one larger than
    // maxStorageBufferRange could not be bound at all.
    uint64_t need_c = 4ull * M * N, need_a = 4ull * M * K, need_b = 4ull * K * N;
    VKT_ASSERT(c.size >= need_c && a.size >= need_a && b.size >= need_b);
    VKT_ASSERT(!bias || bias->size >= 4ull * N);
    uint64_t range = d->max_storage_buffer_range;
    VKT_ASSERT(need_c <= range && need_a <= range && need_b <= range);
    c.size = need_c;
    a.size = need_a;
    b.size = need_b;
    vkt_view bv = a; // an unused binding still needs a valid view
    if (bias) {
        bv = *bias;
        bv.size = 4ull * N;
    }

    // The epilogue: spec constants (activation code, mode) and bindings 4 (s, read) and 5 (z,
    // written). Unused ones get a, which the dispatch reads anyway, and c, which it writes anyway,
    // so that the synchronization validation sees no access the kernel does not make.
    vkt_mm_epi kind = epi ? epi->kind : VKT_MM_EPI_NONE;
    mm_epi_args e = {VKT_ACT_CODE_NONE, VKT_MM_EPI_FORWARD, 0.0f, a, c, 0.0f, 0.0f, 0};
    if (kind == VKT_MM_EPI_SGD) {
        // c is the parameter tensor; the momentum buffer (if any) is read as s and written as z.
        VKT_ASSERT(!bias && beta == 0.0f);
        e.mode = VKT_MM_EPI_SGD;
        e.alpha = epi->alpha;
        e.momentum = epi->momentum;
        e.weight_decay = epi->weight_decay;
        e.sgd_mode = epi->momentum == 0.0f ? 0u : epi->nesterov ? 2u : 1u;
        if (e.sgd_mode) {
            const vkt_view *x = epi->saved;
            VKT_ASSERT(x && x->size >= need_c);
            VKT_ASSERT(x->buffer != c.buffer || x->offset >= c.offset + need_c ||
                       c.offset >= x->offset + need_c);
            e.s = e.z = *x;
            e.s.size = e.z.size = need_c;
        }
    } else if (kind != VKT_MM_EPI_NONE) {
        VKT_ASSERT((unsigned)epi->act <= VKT_ACT_GELU_ERF);
        // Exact gelu's enum value is VKT_ACT_CODE_NONE: its code is the next (act_fn.glsl).
        e.act_code = epi->act == VKT_ACT_GELU_ERF ? VKT_ACT_CODE_NONE + 1 : (uint32_t)epi->act;
        e.alpha = epi->alpha;
        const vkt_view *x = epi->saved;
        if (x) {
            VKT_ASSERT(x->size >= need_c);
            // s and z are the same shape as c and may not overlap it.
            VKT_ASSERT(x->buffer != c.buffer || x->offset >= c.offset + need_c ||
                       c.offset >= x->offset + need_c);
        }
        if (kind == VKT_MM_EPI_ACT) {
            e.mode = x ? VKT_MM_EPI_FORWARD_Z : VKT_MM_EPI_FORWARD;
            if (x) {
                e.z = *x;
                e.z.size = need_c;
            }
        } else {
            VKT_ASSERT(x && (kind == VKT_MM_EPI_GRAD_X || kind == VKT_MM_EPI_GRAD_Y));
            VKT_ASSERT(kind == VKT_MM_EPI_GRAD_X || vkt_act_grad_from_output(epi->act, e.alpha));
            e.mode = kind == VKT_MM_EPI_GRAD_X ? VKT_MM_EPI_GRAD_X : VKT_MM_EPI_GRAD_Y;
            e.s = *x;
            e.s.size = need_c;
        }
    }
    bool with_epi = kind != VKT_MM_EPI_NONE;
    const mm_variant *v = choose(ops, form, &c, &a, &b, with_epi ? &e.s : NULL,
                                 with_epi ? &e.z : NULL, kind == VKT_MM_EPI_SGD, M, N, K);
    VKT_ASSERT(v); // an SGD epilogue only where vkt_matmul_sgd_fits
    record_variant(cmd, ops, v, form, c, a, b, bv, bias != NULL, beta, M, N, K,
                   with_epi ? &e : NULL, label);
}

void vkt_op_matmul(vkt_cmd *cmd, vkt_ops *ops, vkt_mm_form form, vkt_view c, vkt_view a, vkt_view b,
                   const vkt_view *bias, float beta, uint32_t M, uint32_t N, uint32_t K,
                   const char *label) {
    vkt_op_matmul_ex(cmd, ops, form, c, a, b, bias, beta, M, N, K, NULL, label);
}

// Records variant v (already chosen: it fits the shape, the views and, with e, has the epilogue).
static void record_variant(vkt_cmd *cmd, vkt_ops *ops, const mm_variant *v, vkt_mm_form form,
                           vkt_view c, vkt_view a, vkt_view b, vkt_view bv, bool has_bias,
                           float beta, uint32_t M, uint32_t N, uint32_t K, const mm_epi_args *e,
                           const char *label) {
    VKT_ASSERT(!e || has_epilogue(v));
    VKT_ASSERT(!e || e->mode != VKT_MM_EPI_SGD || has_sgd(v));
    mm_epi_args none = {VKT_ACT_CODE_NONE, VKT_MM_EPI_FORWARD, 0.0f, a, c, 0.0f, 0.0f, 0};
    if (!e) e = &none;
    // Specialization constants: workgroup, form, tile (wide and tiled kernels), and for the
    // kernels with the epilogue its activation and mode. The scalar kernel's tile is compiled in
    // (the shader's name): its tile constants stay 0, one cache entry per kernel.
    uint32_t spec[9] = {
        v->wg,  v->kind == MM_TILED ? v->wg : 1, 1, (uint32_t)form, v->tm, v->tc, v->w, e->act_code,
        e->mode};
    if (v->kind == MM_SCALAR) spec[4] = spec[5] = spec[6] = 0;
    uint32_t plain[9];
    memcpy(plain, spec, sizeof plain);
    plain[7] = VKT_ACT_CODE_NONE;
    plain[8] = VKT_MM_EPI_FORWARD;
    int nspec = has_epilogue(v) ? 9 : 7, nbind = has_epilogue(v) ? 6 : 4;
    // The SwiftShader kernels are one shader per form (it does not fold the form's branches);
    // the texel-read kernel with the optimizer epilogue reads c and s as texels too (bindings 6
    // and 7).
    bool sgd = e->mode == VKT_MM_EPI_SGD;
    vkt_shader_id shader = sgd ? v->sgd_kernel : v->kernel[form];
    if (sgd && v->texel) nbind = 8;
    vkt_kernel *k = vkt_ops_kernel(ops, shader, spec, nspec);
    if (!k) return; // reported by vkt_ops_status

    uint32_t rows = v->kind == MM_TILED ? v->wg * v->tm : v->tm; // per workgroup
    uint32_t gx = (M + rows - 1) / rows;
    uint32_t gy =
        (uint32_t)(((uint64_t)N + (uint64_t)v->wg * v->tc - 1) / ((uint64_t)v->wg * v->tc));
    vkt_view bind[8] = {c, a, b, bv, e->s, e->z, c, e->sgd_mode ? e->s : c};
    vkt_view bind_plain[8] = {c, a, b, bv, a, c, c, c};
    // A K-split runs its chunks in order, each adding onto c: a barrier between them. The epilogue
    // belongs to the last chunk; the others run the plain kernel.
    uint32_t kc = v->kc && v->kc < K ? v->kc : K;
    for (uint32_t k0 = 0; k0 < K; k0 += kc) {
        uint32_t k1 = K - k0 > kc ? k0 + kc : K;
        bool last = k1 == K;
        vkt_kernel *kk = last ? k : vkt_ops_kernel(ops, shader, plain, nspec);
        if (!kk) return;
        vkt_matmul_push push = {
            .m = M,
            .n = N,
            .k = K,
            .k_begin = k0,
            .k_end = k1,
            .has_bias = has_bias,
            .beta = beta,
            .alpha = e->alpha,
            .momentum = e->momentum,
            .weight_decay = e->weight_decay,
            .sgd_mode = e->sgd_mode,
        };
        if (k0 > 0) vkt_cmd_barrier(cmd);
        vkt_cmd_dispatch(cmd, kk, last ? bind : bind_plain, nbind, &push, sizeof push, gx, gy, 1,
                         label);
    }
}
