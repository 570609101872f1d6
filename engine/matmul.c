// matmul.c: vkt_op_matmul, the one matrix product of training (NN forward of a plain product, NT
// for a dense layer's forward x W^T and its input gradient, TN for its weight gradient), and the
// table of kernel variants it chooses from.
//
// Two kernels (shaders/matmul_wide.glsl and shaders/matmul_scalar.glsl) each come in variants:
// a tile (rows per workgroup, columns per lane, lanes per workgroup) and, for the wide kernel, a
// load width W. Which variants a device uses is a rule on what the device reports (driver id,
// subgroup size, shaderFloat64, device type), kept as data in DEVICE_RULES so that a choice made by
// measurement can replace it. Per call, the wide variant runs when the shape and the view offsets
// allow W-wide loads; otherwise the scalar variant, which takes any M, N, K >= 1, does.
// VKT_MATMUL_VARIANT=name[,name] overrides the rule (for benchmarks and experiments).
//
// vkt_op_matmul_ex adds an activation epilogue (shaders/mm_epilogue.glsl, in both kernels): f(z)
// for a dense layer's forward, optionally keeping z, or z * f' for the activation's backward fused
// into the input-gradient product. The activation and mode are two more specialization constants
// (none by default), so a plain product compiles as before. What the fusion saves per layer and
// step, measured on fashion_mlp: see engine/network.c.
//
// What was measured (fp32 1024^3, this project's 2-core AVX-512 machine, lavapipe 22.3.6 and
// SwiftShader/Subzero; PLATFORM.md has the setting):
//  - lavapipe: inside a loop every storage-buffer load, workgroup-uniform or not, becomes a loop
//    over the 8 lanes with a bounds check per component (about 37 instructions per lane and
//    load), and FMAs are split into a multiply and an add. What pays is few, wide loads, each
//    reused by many FMAs: dvec4 loads (8 floats; matmul_wide64) and a 32-row x 32-column tile per
//    lane: 55-57 GFLOP/s (NT 50) against 27-30 for the vec4 8 x 16 tile that PLATFORM.md lists,
//    with peak_fma at 95-119. 32 x 16 gives 46 and compiles in 2.5 s instead of 7 on first use
//    (Mesa's shader cache keeps them); 48 or 64 rows took 18-46 s to compile for no clear gain.
//    Subgroup broadcasts of a (a loop over lanes in lavapipe 22.3), more k per iteration and
//    K-splits (each dispatch's slice of b fits in L2) were measured and were slower.
//  - SwiftShader: loads with a computed index are per-lane gathers whatever their width, a tile
//    given by specialization constants is not unrolled (0.5 GFLOP/s), and Subzero keeps every
//    value in memory (about 9 stack moves per FMA): the scalar kernel with a compiled-in 16 x 16
//    tile and 4 lanes is its fastest, about 7 GFLOP/s of CPU time (8 x 8: 4.8; the vec4 8 x 16
//    tile of PLATFORM.md: 3.5), against 46-52 for peak_fma.
// The machine is shared; figures vary by +-25% from one minute to the next.
//
// Not done here: no measurement at run time (a later issue caches a measured choice per device
// and driver), no split of a product whose operands exceed maxStorageBufferRange (asserted), no
// fp16. Views smaller than their shapes are bugs in the engine's layer code and are asserted, as
// ops_nn.c does.
#include <stdlib.h>
#include <string.h>

#include "ops.h"
#include "vkt_abi.h"
#include "vkt_internal.h"

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
    MM_SCALAR, // matmul_scalar.glsl: tile compiled into the shader (shader name carries it)
} mm_kind;

typedef struct mm_variant {
    const char *name;
    const char *shader;
    mm_kind kind;
    uint32_t wg;     // lanes per workgroup (x)
    uint32_t tm, tc; // rows per workgroup, columns per lane
    uint32_t w;      // wide: floats per load (4 = vec4, 8 = dvec4); scalar: 1
    uint32_t kc;     // k per dispatch (a multiple of w); 0 = the whole K in one dispatch
} mm_variant;

static const mm_variant VARIANTS[] = {
    // lavapipe: dvec4 pieces, one subgroup of 8 lanes per workgroup; 32 rows x 16 columns per
    // lane (LLVM compiles it in about 2.5 s on first use), 32 x 32 for large products (about
    // 7 s; 20% faster at 1024^3 and 2048^3).
    {"wide64-r32c16-g8", "matmul_wide64", MM_WIDE, 8, 32, 16, 8, 0},
    {"wide64-r32c32-g8", "matmul_wide64", MM_WIDE, 8, 32, 32, 8, 0},
    // Measured alternatives, kept for VKT_MATMUL_VARIANT: a smaller tile (1.5 s to compile, 43
    // GFLOP/s) and a K-split of 256 (slower here: every split reloads c).
    {"wide64-r24c16-g8", "matmul_wide64", MM_WIDE, 8, 24, 16, 8, 0},
    {"wide64-r32c16-g8-k256", "matmul_wide64", MM_WIDE, 8, 32, 16, 8, 256},
    // vec4 pieces: the lavapipe tile for CPU drivers without shaderFloat64, and a GPU-shaped one
    // (64 lanes, a small tile per lane) for everything else. Not measured here (no such device).
    {"wide-r32c16-g8", "matmul_wide", MM_WIDE, 8, 32, 16, 4, 0},
    {"wide-r16c8-g64", "matmul_wide", MM_WIDE, 64, 16, 8, 4, 0},
    // Any shape.
    {"scalar-r8c8-g8", "matmul_s8x8", MM_SCALAR, 8, 8, 8, 1, 0},
    {"scalar-r8c8-g4", "matmul_s8x8", MM_SCALAR, 4, 8, 8, 1, 0},
    {"scalar-r16c16-g4", "matmul_s16x16", MM_SCALAR, 4, 16, 16, 1, 0},
    {"scalar-r4c4-g64", "matmul_s4x4", MM_SCALAR, 64, 4, 4, 1, 0},
};
#define NVARIANTS ((int)(sizeof VARIANTS / sizeof VARIANTS[0]))

static const mm_variant *variant_named(const char *name, size_t len) {
    for (int i = 0; i < NVARIANTS; i++)
        if (strlen(VARIANTS[i].name) == len && strncmp(VARIANTS[i].name, name, len) == 0)
            return &VARIANTS[i];
    return NULL;
}

// ---------------------------------------------------------------------------------------------
// Which variants a device uses: the first rule that matches.

typedef struct mm_plan {
    const mm_variant *wide;     // NULL: the scalar variant is as fast (SwiftShader)
    const mm_variant *wide_big; // for products of at least BIG_MACS multiply-adds
    const mm_variant *scalar;
} mm_plan;

// The size from which the big tile pays for its longer compile (training's 128 x 512 x 784 layers
// stay below it).
#define BIG_MACS (1ull << 27)

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

typedef struct mm_rule {
    bool (*match)(const vkt_device_info *d);
    const char *wide, *wide_big, *scalar; // variant names; the wide ones may be NULL
} mm_rule;

static const mm_rule DEVICE_RULES[] = {
    {is_lavapipe, "wide64-r32c16-g8", "wide64-r32c32-g8", "scalar-r8c8-g8"},
    {is_swiftshader, NULL, NULL, "scalar-r16c16-g4"},
    // Other CPU drivers: lavapipe's reasoning (each load inside a loop is a loop over lanes).
    {is_cpu_fp64, "wide64-r32c16-g8", "wide64-r32c32-g8", "scalar-r8c8-g8"},
    {is_cpu, "wide-r32c16-g8", NULL, "scalar-r8c8-g8"},
    {any_device, "wide-r16c8-g64", NULL, "scalar-r4c4-g64"},
};

static const mm_variant *named(const char *name) {
    return name ? variant_named(name, strlen(name)) : NULL;
}

static mm_plan device_plan(const vkt_device_info *d) {
    mm_plan plan = {NULL, NULL, NULL};
    for (size_t i = 0; i < sizeof DEVICE_RULES / sizeof DEVICE_RULES[0]; i++) {
        const mm_rule *r = &DEVICE_RULES[i];
        if (!r->match(d)) continue;
        plan.wide = named(r->wide);
        plan.wide_big = named(r->wide_big);
        plan.scalar = named(r->scalar);
        break;
    }
    // VKT_MATMUL_VARIANT=name[,name]: a wide name replaces both wide variants, a scalar name the
    // scalar one, and "none" turns the wide kernel off.
    const char *env = getenv("VKT_MATMUL_VARIANT");
    while (env && *env) {
        size_t len = strcspn(env, ",");
        const mm_variant *v = variant_named(env, len);
        if (v && v->kind == MM_WIDE) plan.wide = plan.wide_big = v;
        if (v && v->kind == MM_SCALAR) plan.scalar = v;
        if (len == 4 && strncmp(env, "none", 4) == 0) plan.wide = plan.wide_big = NULL;
        env += len + (env[len] == ',');
    }
    // A variant the device cannot run falls back to one it can.
    const mm_variant **wides[2] = {&plan.wide, &plan.wide_big};
    for (int i = 0; i < 2; i++) {
        const mm_variant *v = *wides[i];
        if (v && (v->wg > d->max_workgroup_invocations || (v->w == 8 && !d->shader_float64)))
            *wides[i] = NULL;
    }
    if (!plan.wide_big) plan.wide_big = plan.wide;
    if (!plan.scalar || plan.scalar->wg > d->max_workgroup_invocations)
        plan.scalar = named("scalar-r8c8-g4");
    VKT_ASSERT(plan.scalar);
    return plan;
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
    return c->offset % align == 0 && a->offset % align == 0 && b->offset % align == 0;
}

static const mm_variant *choose(vkt_ops *ops, vkt_mm_form form, const vkt_view *c,
                                const vkt_view *a, const vkt_view *b, uint32_t M, uint32_t N,
                                uint32_t K) {
    const vkt_device_info *d = vkt_device_get_info(vkt_ops_device(ops));
    mm_plan plan = device_plan(d);
    const mm_variant *wide = (uint64_t)M * N * K >= BIG_MACS ? plan.wide_big : plan.wide;
    if (wide && wide_fits(d, wide, form, c, a, b, M, N, K)) return wide;
    return plan.scalar;
}

const char *vkt_matmul_variant(vkt_ops *ops, vkt_mm_form form, uint32_t M, uint32_t N, uint32_t K) {
    // Views at offset 0 (the engine's usual packing): the same choice vkt_op_matmul makes.
    vkt_view z = {0};
    return choose(ops, form, &z, &z, &z, M, N, K)->name;
}

bool vkt_matmul_epilogue_pays(vkt_ops *ops) {
    // Measured (GPU time, this machine; shaders/mm_epilogue.glsl): on lavapipe, which folds the
    // epilogue's specialization constants, the fused forms took 2-11% less than the product plus
    // the act kernel at the training shapes (wide kernel), and about the same on the scalar
    // kernel (K = 10). SwiftShader runs every activation's code in a fused kernel: 1.3x the
    // product at K = 256, where the separate kernel adds 3%. GPU drivers fold specialization
    // constants as lavapipe does.
    return !is_swiftshader(vkt_device_get_info(vkt_ops_device(ops)));
}

// ---------------------------------------------------------------------------------------------
// Recording

// Whether a view read or written like c (the epilogue's s and z) allows the wide variant v: the
// alignment that wide_fits asks of c.
static bool wide_view_ok(const vkt_device_info *d, const mm_variant *v, const vkt_view *x) {
    uint64_t align = 4ull * v->w;
    if (align > 16 && d->type == VKT_DEVICE_CPU) align = 16;
    return x->offset % align == 0;
}

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
    uint32_t act_code = VKT_ACT_CODE_NONE, mode = VKT_MM_EPI_FORWARD;
    float alpha = 0.0f;
    vkt_view sv = a, zv = c;
    if (kind != VKT_MM_EPI_NONE) {
        VKT_ASSERT((unsigned)epi->act <= VKT_ACT_SIGMOID);
        act_code = (uint32_t)epi->act;
        alpha = epi->alpha;
        const vkt_view *x = epi->saved;
        if (x) {
            VKT_ASSERT(x->size >= need_c);
            // s and z are the same shape as c and may not overlap it.
            VKT_ASSERT(x->buffer != c.buffer || x->offset >= c.offset + need_c ||
                       c.offset >= x->offset + need_c);
        }
        if (kind == VKT_MM_EPI_ACT) {
            mode = x ? VKT_MM_EPI_FORWARD_Z : VKT_MM_EPI_FORWARD;
            if (x) {
                zv = *x;
                zv.size = need_c;
            }
        } else {
            VKT_ASSERT(x && (kind == VKT_MM_EPI_GRAD_X || kind == VKT_MM_EPI_GRAD_Y));
            VKT_ASSERT(kind == VKT_MM_EPI_GRAD_X || vkt_act_grad_from_output(epi->act, alpha));
            mode = kind == VKT_MM_EPI_GRAD_X ? VKT_MM_EPI_GRAD_X : VKT_MM_EPI_GRAD_Y;
            sv = *x;
            sv.size = need_c;
        }
    }

    const mm_variant *v = choose(ops, form, &c, &a, &b, M, N, K);
    // s and z are read and written in the same W-wide pieces as c.
    if (v->kind == MM_WIDE && (!wide_view_ok(d, v, &sv) || !wide_view_ok(d, v, &zv)))
        v = device_plan(d).scalar;
    uint32_t spec[9] = {v->wg, 1, 1, (uint32_t)form, v->tm, v->tc, v->w, act_code, mode};
    uint32_t plain[9] = {
        v->wg, 1, 1, (uint32_t)form, v->tm, v->tc, v->w, VKT_ACT_CODE_NONE, VKT_MM_EPI_FORWARD};
    // The scalar kernel ignores the tile constants (ids VKT_SPEC_USER + 1..3): its tile is compiled
    // in (the shader's name), and leaving them out keeps one cache entry per kernel.
    if (v->kind != MM_WIDE) spec[4] = spec[5] = spec[6] = plain[4] = plain[5] = plain[6] = 0;
    vkt_kernel *k = vkt_ops_kernel(ops, v->shader, spec, 9);
    if (!k) return; // reported by vkt_ops_status

    uint32_t gx = (M + v->tm - 1) / v->tm;
    uint32_t gy =
        (uint32_t)(((uint64_t)N + (uint64_t)v->wg * v->tc - 1) / ((uint64_t)v->wg * v->tc));
    vkt_view bind[6] = {c, a, b, bv, sv, zv};
    vkt_view bind_plain[6] = {c, a, b, bv, a, c};
    // A K-split runs its chunks in order, each adding onto c: a barrier between them. The epilogue
    // belongs to the last chunk; the others run the plain kernel.
    uint32_t kc = v->kc && v->kc < K ? v->kc : K;
    for (uint32_t k0 = 0; k0 < K; k0 += kc) {
        uint32_t k1 = K - k0 > kc ? k0 + kc : K;
        bool last = k1 == K;
        vkt_kernel *kk = last ? k : vkt_ops_kernel(ops, v->shader, plain, 9);
        if (!kk) return;
        vkt_matmul_push push = {
            .m = M,
            .n = N,
            .k = K,
            .k_begin = k0,
            .k_end = k1,
            .has_bias = bias != NULL,
            .beta = beta,
            .alpha = alpha,
        };
        if (k0 > 0) vkt_cmd_barrier(cmd);
        vkt_cmd_dispatch(cmd, kk, last ? bind : bind_plain, 6, &push, sizeof push, gx, gy, 1,
                         label);
    }
}

void vkt_op_matmul(vkt_cmd *cmd, vkt_ops *ops, vkt_mm_form form, vkt_view c, vkt_view a, vkt_view b,
                   const vkt_view *bias, float beta, uint32_t M, uint32_t N, uint32_t K,
                   const char *label) {
    vkt_op_matmul_ex(cmd, ops, form, c, a, b, bias, beta, M, N, K, NULL, label);
}
