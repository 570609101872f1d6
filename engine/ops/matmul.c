// matmul.c: vkt_op_matmul, the one matrix product of training (NN forward of a plain product, NT
// for a dense layer's forward x W^T and its input gradient, TN for its weight gradient), and the
// table of kernel variants it chooses from.
//
// Two kernels (shaders/matmul_wide.glsl, with a and b read through storage buffers or, in
// matmul_wide64t, through uniform texel buffers, and shaders/matmul_scalar.glsl) come in variants:
// a tile (rows per workgroup, columns per lane, lanes per workgroup) and, for the wide kernel, a
// load width W. Which variants are candidates on a device is a rule on what the device reports
// (driver id, shaderFloat64, device type), kept as data in DEVICE_RULES. Per product, the
// candidates that fit it (a wide variant needs K, N (and M for TN), the strides and the view
// offsets to allow W-wide loads; a scalar variant takes any M, N, K >= 1; a fallback candidate
// counts only where none before it fits) are measured on scratch
// operands the first time the shape is met, and the fastest is used from then on; tune.c keeps
// the measurements on disk per device and driver build, so a later process measures nothing.
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
//    branch-free gather there) in place of storage loads, are what pays; a's tile, the same for
//    every lane, is fetched once per subgroup and shuffled to the lanes. The k step is unrolled
//    into straight code, which must stay near the instruction cache: 32 x 8 per lane. It has no
//    FMA (NIR splits each into a multiply and an add) and compiles a pipeline's machine code at
//    its first dispatch: measure() runs every candidate once untimed first.
//  - SwiftShader makes every computed-index load a per-lane gather and does not unroll a tile
//    given by specialization constants: its kernels (matmul_ss.glsl) broadcast the rows of a
//    across one subgroup of 4 lanes; shapes that are not multiples of 4 take the scalar kernel.
//
// Products larger than a binding ("Splitting" below). A product whose a, b and c (and the
// epilogue's s and z) each fit maxStorageBufferRange runs exactly as it always has: its views
// bound whole, the dense layout. One with an operand over the range is cut into blocks of c
// (rows of M, columns of N) and, only where a's or b's k rows are too long for one binding,
// K-chunks, and each block binds only the floats from its first to its last element; the
// kernels take row strides and element offsets (vkt_matmul_push: lda, ldb, ldc, a_off ..
// bias_off), so a block reads the whole product's operands in place. The plan (plan_of):
//  - K-chunks only where they are unavoidable: TN's a [K, M] and NN's and TN's b [K, N] span whole
//    rows of k whatever a block's columns, so kb <= range / M (TN) and range / N (NN, TN); NT
//    never chunks K below the range itself. GPT-2's head (V = 50257, C = 768, T = 1024 on
//    lavapipe's 128 MiB): its NT forward takes 2 x 2 blocks of c, NN's dX 2 row blocks x 2
//    K-chunks (W [V, C] is 154 MB), TN's dW 2 row blocks x 2 K-chunks (dlogits [T, V]).
//  - then columns (NT's b [N, K]: nb rows of kb; c), then rows (a, c), each the fewest equal
//    blocks, multiples of 64 floats: blocks start on 256 bytes (Vulkan's largest offset alignment)
//    in every view that does, so their offsets stay 0 and the wide kernels' alignment holds; a
//    block whose start is not aligned anyway is bound from the aligned address below it (never
//    below its view) with the difference in the push constants. The bias is bound whole (4 N
//    bytes) with bias_off = n0.
//  - each block chooses its variant like any product (fitting: the strides and offsets must
//    allow a wide variant's loads; the tuning key adds the strides where they are not the dense
//    ones, and measure() times the block's layout).
//  - results: a block of rows or columns computes each element exactly as the whole product does
//    (every kernel sums each output's k terms in order; the wide and the other kernels differ only
//    in where beta c joins, and a block on 64-float boundaries can take a wide kernel exactly where
//    the whole could), so an M/N split is bit for bit the unsplit result. K-chunks add onto c with
//    beta = 1 after the first; the bias and the epilogue go in the last chunk, which keeps the wide
//    kernels (whose sum starts from beta c) bit for bit; the scalar, SwiftShader and tiled kernels
//    sum each chunk from 0 and add it to c, within the fp32 bound of the unsplit product.
//  - epilogues: the activation forms (with and without z) and both backward forms run in the last
//    chunk of each block, on the block's s and z. The SGD epilogue on blocks of rows and columns;
//    never with K-chunks (they would add onto the parameters): vkt_matmul_sgd_fits says no there
//    (dense.c asks it first and takes the unfused path), and vkt_op_matmul_ex asserts.
//  - barriers: blocks whose bound ranges of c (or z, or the momentum buffer) overlap get one
//    between them (the synchronization validation takes a binding's whole range as accessed),
//    and so does each K-chunk after the first; row blocks are disjoint and run without.
// vkt_matmul_test_range (ops_limits.h) lowers the range the plan uses, for tests.
//
// Padded products (lavapipe and other CPU drivers with shaderFloat64): a product with a side that
// is not a multiple of 8 (a classifier's 10 outputs: its forward, input and weight gradients)
// fits neither wide kernel, and the scalar kernel runs it at 1-2 GFLOP/s. The variant
// pad-wide64t-r32c8-g8 copies the operands that need it into the ops' scratch (vkt_ops_scratch),
// zero-padded to the next multiple of 8, runs wide64t-r32c8-g8 on them and copies c back
// (record_padded): a few copy commands and up to three barriers, which cost about 13 us each in
// an untimed lavapipe step. It is a candidate only where no wide variant fits, from PAD_MIN_MACS
// multiply-adds and under PAD_MAX_BYTES of scratch; where it fits, the scalar kernel is not
// measured against it (the choice would flip between processes: fitting()). The zeros add exact
// zeros at the end of each k sum, so the results are the texel kernel's bit for bit, a block of a
// split product's too.
//
// SwiftShader pads too (pad-ss-r16c16-g4: its own 16-row kernel on the padded copies, from
// PAD_SS_MIN_MACS): there the classifier's three products ran on the scalar kernel, whose three
// pipelines took 0.6-2 s each to build in every process and device (Subzero builds one pipeline at
// a time, so building ahead on two threads does not hide it): 668 of the 1,800 s that a release
// suite on a 2-vCPU Zen 3 spent building SwiftShader pipelines (2026-12-07). The padded product
// runs on the pipelines the layers before it built, and ran as fast or faster than the scalar
// kernel at fashion_mlp's three classifier products at batch 64, 128 and 512 (docs/PERFORMANCE.md).
//
// Narrow products (the same devices): where the side that is not a multiple of 8 is at most 16
// (N in NT, M in TN, K in NN: the classifier's three products), narrow-g8 (matmul_narrow.glsl)
// runs the product in place in one dispatch, ahead of the padded variant: fashion_mlp's last layer
// went from 14 commands a step (copies, padded products, copies back) to 3, and from 600 to 400 us
// of device time (traced; docs/PERFORMANCE.md). It sums each output as the texel kernel does (from
// 0 or beta c, its k terms in order by fma, then the bias and the epilogue), so it gives the padded
// variant's results bit for bit (a 60-step fashion_mlp run saved the same parameters and momentum
// buffers with either); like it, it is taken over the scalar kernel unmeasured (fitting()).
//
// Column sums (vkt_mm_epilogue.col_sum, TN: a dense layer's bias gradient with its weight
// gradient): where the product is one block on a kernel that can (colsum_in_kernel: the narrow
// kernel, the texel kernel), its first column of workgroups adds a's column sums to col_sum after
// the k loop (a branch no lane takes costs nothing on lavapipe), in k order, as the bias-gradient
// kernel sums them: fashion_mlp's step loses three dispatches of 40-60 us (docs/PERFORMANCE.md).
// Elsewhere vkt_op_bias_grad runs after the product, as before.
//
// Not done here: no fp16. Views smaller than their shapes are bugs in the engine's layer code and
// are asserted, as ops_nn.c does.
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ops.h"
#include "ops_limits.h"
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
    MM_NARROW, // matmul_narrow.glsl: a side of at most tc (N in NT, M in TN, K in NN)
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
    // Padded: the variant named after "pad-" run on copies of the operands padded with zeros to
    // the shape it takes (N and K, and M for TN, multiples of 8), in the ops' scratch, c copied
    // back (record_padded). For the products with a side of a few floats, which the wide kernels
    // cannot take and the scalar kernel runs at a tenth of their speed (a classifier's 10 outputs).
    bool pad;
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
    // fetch is a branch-free gather there, a storage-buffer load a branchy loop over lanes. 8
    // columns per lane: LLVM unrolls the k step into straight code, which at 16 or 32 columns
    // is far past the instruction cache; 32 x 8 ran faster than both at every size measured
    // until a Zen 4 host (docs/PERFORMANCE.md). 32 x 16 is measured against it on large
    // products (LP_BIG_MACS); where the host is an AMD one with AVX-512, 16 x 8 (below) takes
    // 32 x 8's place below that size; the others are kept for comparisons.
    {"wide64t-r32c32-g8", TEXEL_FORMS, MM_WIDE, 8, 32, 32, 8, 0, true, false, false},
    {"wide64t-r32c8-g8", TEXEL_FORMS, MM_WIDE, 8, 32, 8, 8, 0, true, false, false},
    {"wide64t-r32c16-g8", TEXEL_FORMS, MM_WIDE, 8, 32, 16, 8, 0, true, false, false},
    {"wide64t-r16c16-g8", TEXEL_FORMS, MM_WIDE, 8, 16, 16, 8, 0, true, false, false},
    // 16 x 8: half the 32 x 8 tile's k step (about 20 KB of code against 40), lavapipe's tile
    // below LP_BIG_MACS on the hosts where that pays (lp_half_tile_pays).
    {"wide64t-r16c8-g8", TEXEL_FORMS, MM_WIDE, 8, 16, 8, 8, 0, true, false, false},
    // The 32 x 8 and 16 x 8 tiles on a workgroup of 16 lanes: lavapipe's at 512 bits
    // (LP_NATIVE_VECTOR_WIDTH=512, a subgroup of 16), where a workgroup of 8 leaves half of each
    // vector idle (lp_wide).
    {"wide64t-r32c8-g16", TEXEL_FORMS, MM_WIDE, 16, 32, 8, 8, 0, true, false, false},
    {"wide64t-r16c8-g16", TEXEL_FORMS, MM_WIDE, 16, 16, 8, 8, 0, true, false, false},
    // wide64t-r32c8-g8 on padded copies (mm_variant.pad).
    {"pad-wide64t-r32c8-g8", TEXEL_FORMS, MM_WIDE, 8, 32, 8, 8, 0, true, false, true},
    // A side of at most 16 (tc) in place, one subgroup of 8 lanes, 32 rows per workgroup in NN
    // (tm), texel reads of 4 floats (w): the classifier layers' products (narrow_fits).
    {"narrow-g8", ALL_FORMS(VKT_SHADER_MATMUL_NARROW), MM_NARROW, 8, 32, 16, 4, 0, false, false,
     false},
    // The same tiles through storage buffers: dvec4 pieces, one subgroup of 8 lanes per
    // workgroup; 32 rows x 16 columns per lane (LLVM compiles it in a third of 32 x 32's time).
    // lavapipe keeps 32 x 16 as a candidate (views the texel limits refuse); 32 x 32 is no one's
    // candidate any more, kept for comparisons under a fixed matmul_variant.
    {"wide64-r32c16-g8", ALL_FORMS(VKT_SHADER_MATMUL_WIDE64), MM_WIDE, 8, 32, 16, 8, 0, false,
     false, false},
    {"wide64-r32c32-g8", ALL_FORMS(VKT_SHADER_MATMUL_WIDE64), MM_WIDE, 8, 32, 32, 8, 0, false,
     false, false},
    // Measured alternatives, kept for comparisons: a smaller tile (faster to compile, slower to
    // run) and a K-split of 256 (slower here: every split reloads c).
    {"wide64-r24c16-g8", ALL_FORMS(VKT_SHADER_MATMUL_WIDE64), MM_WIDE, 8, 24, 16, 8, 0, false,
     false, false},
    {"wide64-r32c16-g8-k256", ALL_FORMS(VKT_SHADER_MATMUL_WIDE64), MM_WIDE, 8, 32, 16, 8, 256,
     false, false, false},
    // vec4 pieces: the lavapipe tile for CPU drivers without shaderFloat64, and a GPU-shaped one
    // (64 lanes, a small tile per lane) for everything else. Not measured here (no such device).
    {"wide-r32c16-g8", ALL_FORMS(VKT_SHADER_MATMUL_WIDE), MM_WIDE, 8, 32, 16, 4, 0, false, false,
     false},
    {"wide-r16c8-g64", ALL_FORMS(VKT_SHADER_MATMUL_WIDE), MM_WIDE, 64, 16, 8, 4, 0, false, false,
     false},
    // Any shape.
    {"scalar-r8c8-g8", ALL_FORMS(VKT_SHADER_MATMUL_S8X8), MM_SCALAR, 8, 8, 8, 1, 0, false, false,
     false},
    {"scalar-r8c8-g4", ALL_FORMS(VKT_SHADER_MATMUL_S8X8), MM_SCALAR, 4, 8, 8, 1, 0, false, false,
     false},
    {"scalar-r16c16-g4", ALL_FORMS(VKT_SHADER_MATMUL_S16X16), MM_SCALAR, 4, 16, 16, 1, 0, false,
     false, false},
    {"scalar-r4c4-g64", ALL_FORMS(VKT_SHADER_MATMUL_S4X4), MM_SCALAR, 64, 4, 4, 1, 0, false, false,
     false},
    // GPUs: shared-memory tiles, 16 x 16 lanes; 64 x 64 blocks of 4 x 4 per lane in slices of 16
    // k, or 128 x 128 blocks of 8 x 8 in slices of 8. Not measured on a GPU yet (none here); the
    // first use of a shape on a GPU measures them against the others.
    {"tiled-r4c4-k16", ALL_FORMS(VKT_SHADER_MATMUL_TILED), MM_TILED, 16, 4, 4, 16, 0, false, false,
     false},
    {"tiled-r8c8-k8", ALL_FORMS(VKT_SHADER_MATMUL_TILED), MM_TILED, 16, 8, 8, 8, 0, false, false,
     false},
    // SwiftShader (shaders/matmul_ss.glsl): one subgroup of 4 lanes, 16 columns per lane, the
    // rows broadcast across the subgroup, vec4 loads, one kernel per form. 32 rows for large
    // products (twice the scalar kernel's speed, but five times the 16-row tile's compile time),
    // 16 rows otherwise.
    {"ss-r32c16-g4", SS_FORMS(R32), MM_WIDE, 4, 32, 16, 4, 0, false, true, false},
    {"ss-r16c16-g4", SS_FORMS(R16), MM_WIDE, 4, 16, 16, 4, 0, false, true, false},
    // ss-r16c16-g4 on padded copies (mm_variant.pad): a classifier's products, the same pipelines
    // as the layers before it (nothing more to compile).
    {"pad-ss-r16c16-g4", SS_FORMS(R16), MM_WIDE, 4, 16, 16, 4, 0, false, true, true},
};
#define NVARIANTS ((int)(sizeof VARIANTS / sizeof VARIANTS[0]))

// The kernels that include shaders/mm_epilogue.glsl (bindings 4 and 5, spec ids 7 and 8): all
// but SwiftShader's (matmul_ss.glsl says why).
static bool has_epilogue(const mm_variant *v) { return !v->ss; }
// The kernels with the optimizer epilogue (VKT_MM_EPI_SGD): the wide kernel, in one dispatch (a
// K-split's chunks would add onto the parameters).
static bool has_sgd(const mm_variant *v) {
    return v->kind == MM_WIDE && !v->ss && v->kc == 0 && !v->pad;
}

// Whether the len characters at p are word.
static bool word_is(const char *p, size_t len, const char *word) {
    return strlen(word) == len && strncmp(p, word, len) == 0;
}

// The words of a comma-separated list (the context's matmul_variant): the next one's start *w
// and length *len, *p moved past it and its comma; false at the list's end.
static bool next_word(const char **p, const char **w, size_t *len) {
    if (!**p) return false;
    *w = *p;
    *len = strcspn(*p, ",");
    *p += *len + ((*p)[*len] == ',');
    return true;
}

static const mm_variant *variant_named(const char *name, size_t len) {
    for (int i = 0; i < NVARIANTS; i++)
        if (word_is(name, len, VARIANTS[i].name)) return &VARIANTS[i];
    return NULL;
}

// ---------------------------------------------------------------------------------------------
// Which variants a device may use: the candidates of the first rule that matches, in order of
// preference. Where more than one fits a product, the fastest is chosen by measurement at first
// use (tune.c keeps the result on disk per device and driver build); without measurements
// (VKT_TUNE_OFF, or a measurement that could not run) the first that fits is used.

// The size from which the big tiles are candidates: their compile time (seconds per form on
// SwiftShader) pays only for large products (training's 128 x 512 x 784 layers stay below it).
#define BIG_MACS (1ull << 27)
// The size from which the padded texel kernel is a candidate: below it its copies and barriers
// cost more than the scalar kernel's whole product (fashion_mlp's 10-wide layer at batch 128,
// 327,680 multiply-adds each, is above; at batch 32 the three products were split between the two
// in the measurements, docs/PERFORMANCE.md).
#define PAD_MIN_MACS (1ull << 18)
// SwiftShader's padded kernel (pad-ss-r16c16-g4) from a smaller size: there it saves the scalar
// kernel's three pipeline builds, and fashion_mlp's classifier products at batch 64 (163,840
// multiply-adds) ran faster padded. Below it (a batch of one, a model a few units wide) the
// scalar kernel stays: one dispatch where the padded product records copies and up to three
// barriers (not measured against it at those sizes).
#define PAD_SS_MIN_MACS (1ull << 14)
// The size from which lavapipe measures its 32 x 16 texel tile against the 32 x 8 one (and below
// which the 16 x 8 one runs alone, where lp_half_tile_pays). Which wins
// depends on the CPU LLVM compiles for: on a Zen 4 (AVX-512) 32 x 16 ran
// 10-14% faster at 1024^3 and 2048^3 NN and TN (NT level) and level at 512^3 and at fashion_mlp's
// shapes; on the machine where 32 x 8 became the only tile (2026-12-04), it was ahead of the
// larger tiles at every size measured (docs/PERFORMANCE.md). Its compile (LLVM, about 3 s a form,
// Mesa's cache keeps it) pays only on large products; 2^28 multiply-adds leaves 512^3 and
// training's layers below it.
#define LP_BIG_MACS (1ull << 28)
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
// Whether the wide kernels write 8-float pieces as one dvec4 (VKT_SPEC_MM_STORE64,
// shaders/matmul_wide.glsl says why): on lavapipe, but where its host (the CPU it compiles for) is
// an Intel one with AVX-512. Measured on one machine of each kind (docs/PERFORMANCE.md): the
// dvec4 was faster on a Zen 2 (AVX2) and on a Zen 4 (AVX-512), two vec4s on an Intel AVX-512
// machine; on other drivers two vec4s.
static bool store64_pays(const vkt_device_info *d) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    return is_lavapipe(d) && !(__builtin_cpu_supports("avx512f") && __builtin_cpu_is("intel"));
#else
    (void)d;
    return false;
#endif
}
// Whether lavapipe's tile below LP_BIG_MACS is the 16 x 8 one (half the 32 x 8 tile's rows, so
// half its unrolled k step: about 20 KB of machine code against 40): where its host is an AMD one
// with AVX-512 (Zen 4 and later). On a Zen 4 the 32 x 8 step's straight run of code ran 1.3-2x
// slower than its first half alone, fashion_mlp's step 9-15% faster with the 16 x 8 tile and its
// cold first step half as long (4.4-4.5 s -> 2.1-2.4 s: its kernels compile in about half the
// time); on a Zen 2 and a Zen 3 the 16 x 8 tile was 3-10% slower (docs/PERFORMANCE.md,
// eighteenth and earlier passes).
// It computes the same sums in the same order as the 32 x 8 tile: the same bits.
static bool lp_half_tile_pays(const vkt_device_info *d) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    return is_lavapipe(d) && __builtin_cpu_supports("avx512f") && __builtin_cpu_is("amd");
#else
    (void)d;
    return false;
#endif
}
// Whether lavapipe runs 16 lanes a vector (512 bits: Mesa's LP_NATIVE_VECTOR_WIDTH=512, the
// user's choice: Mesa's default is at most 256).
static bool lp_wide(const vkt_device_info *d) { return is_lavapipe(d) && d->subgroup_size >= 16; }
// Whether the comma-separated list names holds token.
static bool list_has(const char *names, const char *token) {
    const char *w;
    size_t len;
    while (next_word(&names, &w, &len))
        if (word_is(w, len, token)) return true;
    return false;
}
// The tokens of a matmul_variant list that fix VKT_SPEC_MM_STORE64 on every device instead of
// store64_pays (for tests, which check both ways on any host, and for measuring a new CPU).
#define STORES_DVEC4 "stores-dvec4"
#define STORES_VEC4 "stores-vec4"
// The stores token the context's list holds (the first of the two where it holds both), or NULL.
static const char *stores_forced(const vkt_device *dev) {
    const char *names = dev->ctx->matmul_variant;
    return list_has(names, STORES_DVEC4)  ? STORES_DVEC4
           : list_has(names, STORES_VEC4) ? STORES_VEC4
                                          : NULL;
}
static bool store64(const vkt_device *dev) {
    const char *forced = stores_forced(dev);
    return forced ? strcmp(forced, STORES_DVEC4) == 0 : store64_pays(dev->info);
}
static bool any_device(const vkt_device_info *d) { return d != NULL; }

typedef struct mm_cand {
    const char *name;
    uint64_t min_macs; // a candidate only for products of at least this many multiply-adds
    // A candidate only where no candidate before it fits the product (its views, alignment and
    // limits): one that lost every measurement to an earlier one that computes the same sums,
    // kept for the products that one cannot run, so that first use does not compile and time it.
    bool fallback;
    uint64_t below_macs; // and only for products of fewer multiply-adds than this (0: no bound)
} mm_cand;

typedef struct mm_rule {
    bool (*match)(const vkt_device_info *d);
    mm_cand cand[MAX_CANDS]; // NULL-terminated
    // Then these, NULL-terminated (NULL: none): a list that rules share. The two together end
    // with a scalar variant (any shape).
    const mm_cand *tail;
} mm_rule;

// lavapipe's storage-buffer reads (wide64-r32c16-g8) are the texel kernels' sums read another
// way: slower in every measurement (1.2-2.9x at 1024^2-2048^2 and at the training
// shapes, docs/PERFORMANCE.md) and as slow to compile (LLVM, about 2.5 s a form), so they are only
// the fallback for products whose views texel buffers cannot hold. The narrow kernel and then the
// padded texel kernel are candidates where neither fits (a side that is not a multiple of 8), and
// where one fits it is taken over the scalar kernel unmeasured (fitting() says why). The scalar
// kernel is a fallback too: it lost every measurement to the texel kernel, by 1.2-10.5x at
// fashion_mlp's shapes from batch 1 to 128 (M = 1 included, where the texel kernel's 32-row tile
// computes 31 clamped rows) and at fashion_cnn's, and measuring it was most of a cold first
// step's tuning (its compiles: fashion_mlp 7.4 -> 4.4 s to the first step; docs/PERFORMANCE.md).
// lavapipe's fallbacks, after its texel tiles (the two lavapipe rules below).
static const mm_cand LP_FALLBACKS[] = {{"wide64-r32c16-g8", 0, true, 0},
                                       {"narrow-g8", 0, true, 0},
                                       {"pad-wide64t-r32c8-g8", PAD_MIN_MACS, true, 0},
                                       {"scalar-r8c8-g8", 0, true, 0},
                                       {NULL, 0, false, 0}};
static const mm_rule DEVICE_RULES[] = {
    // lavapipe at 512 bits (a subgroup of 16 lanes): the texel tiles on workgroups of 16; the 32 x
    // 8 one alone below LP_BIG_MACS (one tile to compile for a cold first step: it was ahead at
    // fashion_mlp's five shapes and fashion_cnn's six in tuning runs on a Zen 4), from there both,
    // measured (docs/PERFORMANCE.md, twentieth pass).
    {lp_wide,
     {{"wide64t-r32c8-g16", 0, false, 0}, {"wide64t-r16c8-g16", LP_BIG_MACS, false, 0}},
     LP_FALLBACKS},
    // lavapipe on a host where the 16 x 8 tile pays (lp_half_tile_pays): that tile alone below
    // LP_BIG_MACS; from there the 32 x 8 and 32 x 16 ones, measured, as below (at 1024^3 on a Zen 4
    // the 16 x 8 tile ran 7% behind the 32 x 8 one, whose two k steps an iteration it does not
    // gain from: 66.7-67.1 against 71.9-72.2 GFLOP/s).
    {lp_half_tile_pays,
     {{"wide64t-r16c8-g8", 0, false, LP_BIG_MACS},
      {"wide64t-r32c8-g8", LP_BIG_MACS, false, 0},
      {"wide64t-r32c16-g8", LP_BIG_MACS, false, 0}},
     LP_FALLBACKS},
    {is_lavapipe,
     {{"wide64t-r32c8-g8", 0, false, 0}, {"wide64t-r32c16-g8", LP_BIG_MACS, false, 0}},
     LP_FALLBACKS},
    // SwiftShader: its own kernels (matmul_ss.glsl); the 32-row tile only for big products
    // (several times the 16-row tile's compile time); where neither fits, the 16-row tile on
    // padded copies, taken over the scalar kernel unmeasured (fitting()), as on lavapipe. The
    // scalar kernel is a fallback: measured quietly, it lost to or tied with the 16-row tile at
    // each shape where a tuning cache filled during a suite run had it ahead (TN 256x256x32 2.0-2.7
    // against 1.6-1.9 ms, NT 128x192x128 2.0-2.7 against 1.5, NT 10x256x256 0.55-1.0 against
    // 0.62-0.65, TN 256x512x8 2.2-2.8 against 2.4-2.5), and building it to time it was most of a
    // cold first step's tuning (docs/PERFORMANCE.md).
    {is_swiftshader,
     {{"ss-r32c16-g4", BIG_MACS, false, 0},
      {"ss-r16c16-g4", 0, false, 0},
      {"pad-ss-r16c16-g4", PAD_SS_MIN_MACS, true, 0},
      {"scalar-r16c16-g4", 0, true, 0}},
     NULL},
    // Other CPU drivers: lavapipe's reasoning (each load inside a loop is a loop over lanes).
    {is_cpu_fp64,
     {{"wide64t-r32c8-g8", 0, false, 0},
      {"wide64-r32c16-g8", 0, true, 0},
      {"narrow-g8", 0, true, 0},
      {"pad-wide64t-r32c8-g8", PAD_MIN_MACS, true, 0},
      {"scalar-r8c8-g8", 0, false, 0}},
     NULL},
    {is_cpu, {{"wide-r32c16-g8", 0, false, 0}, {"scalar-r8c8-g8", 0, false, 0}}, NULL},
    // GPUs and anything else: shared-memory tiles first; measurement settles it per shape.
    {any_device,
     {{"tiled-r8c8-k8", BIG_MACS / 8, false, 0},
      {"tiled-r4c4-k16", 0, false, 0},
      {"wide-r16c8-g64", 0, false, 0},
      {"scalar-r4c4-g64", 0, false, 0}},
     NULL},
};

vkt_status vkt_matmul_check_variants(const char *names) {
    const char *list = names ? names : "", *p;
    size_t len;
    while (next_word(&list, &p, &len)) {
        bool token = word_is(p, len, "none") || word_is(p, len, STORES_DVEC4) ||
                     word_is(p, len, STORES_VEC4);
        if (len && !variant_named(p, len) && !token) {
            char known[768];
            size_t used = 0;
            for (int i = 0; i < NVARIANTS && used < sizeof known; i++)
                used +=
                    (size_t)snprintf(known + used, sizeof known - used, "%s, ", VARIANTS[i].name);
            return vkt_fail(VKT_ERR_ARG,
                            "the matmul variant list \"%s\" (the CLI's VKT_MATMUL_VARIANT) names "
                            "\"%.*s\", which is no variant: "
                            "give names from %snone, " STORES_DVEC4 ", " STORES_VEC4
                            " (commas between), or leave the list empty",
                            names, (int)len, p, known);
        }
    }
    return VKT_OK;
}

static const mm_variant *named(const char *name) {
    return name ? variant_named(name, strlen(name)) : NULL;
}

static bool runs_on(const vkt_device_info *d, const mm_variant *v) {
    if (!v) return false;
    if (v->kind == MM_TILED)
        return v->wg * v->wg <= d->max_workgroup_invocations &&
               4ull * v->w * v->wg * (v->tm + v->tc) <= d->shared_memory_bytes;
    // ss, texel and narrow kernels broadcast across the workgroup, which must be one subgroup;
    // the texel and narrow kernels by subgroupShuffle.
    if (v->kind == MM_NARROW)
        return v->wg <= d->max_workgroup_invocations && d->subgroup_size >= v->wg &&
               d->subgroup_shuffle && v->wg <= v->tc && v->tc <= 2 * v->wg;
    return v->wg <= d->max_workgroup_invocations && (v->w != 8 || d->shader_float64) &&
           (!(v->ss || v->texel) || d->subgroup_size >= v->wg) &&
           (!v->texel || (d->subgroup_shuffle && v->tm * v->w % (4 * v->wg) == 0));
}

// The device's candidates for a product of macs multiply-adds. The context's matmul_variant
// ("name[,name]", the CLI's VKT_MATMUL_VARIANT) fixes the choice instead (for benchmarks and
// experiments): a wide name replaces the wide candidates, a scalar name the scalar ones, "none"
// drops the wide ones; *fixed is then set and nothing is measured.
static int candidates(const vkt_device *dev, uint64_t macs, const mm_variant **out, bool *fallback,
                      bool *fixed) {
    const vkt_device_info *d = dev->info;
    const mm_rule *rule = NULL;
    for (size_t i = 0; i < sizeof DEVICE_RULES / sizeof DEVICE_RULES[0] && !rule; i++)
        if (DEVICE_RULES[i].match(d)) rule = &DEVICE_RULES[i];
    const mm_variant *fix_wide = NULL, *fix_scalar = NULL;
    bool no_wide = false;
    *fixed = false;
    const char *names = dev->ctx->matmul_variant, *w;
    size_t len;
    while (next_word(&names, &w, &len)) {
        const mm_variant *v = variant_named(w, len);
        if (v && v->kind != MM_SCALAR) fix_wide = v;
        if (v && v->kind == MM_SCALAR) fix_scalar = v;
        if (word_is(w, len, "none")) no_wide = true;
        *fixed = *fixed || v || word_is(w, len, "none");
    }
    int n = 0;
    if (fix_wide && !no_wide && runs_on(d, fix_wide)) fallback[n] = false, out[n++] = fix_wide;
    if (fix_scalar && runs_on(d, fix_scalar)) fallback[n] = false, out[n++] = fix_scalar;
    // The rule's list, then its tail.
    const mm_cand *list[2 * MAX_CANDS];
    int nlist = 0;
    for (int i = 0; rule && i < MAX_CANDS && rule->cand[i].name; i++)
        list[nlist++] = &rule->cand[i];
    for (int i = 0; rule && rule->tail && rule->tail[i].name && nlist < 2 * MAX_CANDS; i++)
        list[nlist++] = &rule->tail[i];
    // (One slot of out, MAX_CANDS long, is kept for the scalar kernel appended below.)
    for (int i = 0; i < nlist && n < MAX_CANDS - 1; i++) {
        const mm_cand *c = list[i];
        const mm_variant *v = named(c->name);
        if (!runs_on(d, v) || macs < c->min_macs) continue;
        if (c->below_macs && macs >= c->below_macs) continue;
        if (v->kind != MM_SCALAR && (fix_wide || no_wide)) continue;
        if (v->kind == MM_SCALAR && fix_scalar) continue;
        fallback[n] = c->fallback;
        out[n++] = v;
    }
    // Always something that runs any shape on any device.
    if (n == 0 || out[n - 1]->kind == MM_WIDE)
        fallback[n] = false, out[n++] = named("scalar-r8c8-g4");
    VKT_ASSERT(out[n - 1]);
    return n;
}

// A product's layout inside its bindings (vkt_matmul_push): row strides and the offsets of
// element (0, 0), in floats. A product bound whole has the dense strides and offsets 0; a block of
// a larger one (below, "Splitting") has the whole product's strides.
typedef struct mm_geom {
    uint32_t lda, ldb, ldc;
    uint32_t a_off, b_off, c_off, x_off, bias_off;
} mm_geom;

static mm_geom dense_geom(vkt_mm_form form, uint32_t M, uint32_t N, uint32_t K) {
    return (mm_geom){form == VKT_MM_TN ? M : K, form == VKT_MM_NT ? K : N, N, 0, 0, 0, 0, 0};
}

static bool geom_is_dense(const mm_geom *g, vkt_mm_form form, uint32_t M, uint32_t N, uint32_t K) {
    mm_geom d = dense_geom(form, M, N, K);
    return g->lda == d.lda && g->ldb == d.ldb && g->ldc == d.ldc;
}

// Whether view v can be bound as a texel buffer of vec4 texels: the device's offset alignment,
// whole texels, and within maxTexelBufferElements (SwiftShader allows only 65536 texels, 1 MiB).
static bool texel_view_ok(const vkt_device_info *d, const vkt_view *v) {
    return vkt_texel_offset_ok(d, v->offset) && v->size % 16 == 0 &&
           v->size <= 16ull * d->max_texel_buffer_elements;
}

// Whether the wide variant v can run this product: every W-wide piece it reads or writes must
// start on a multiple of W inside its view (the strides and offsets too), and the views must
// start where W-wide access is aligned.
static bool wide_fits(const vkt_device_info *d, const mm_variant *v, vkt_mm_form form,
                      const vkt_view *c, const vkt_view *a, const vkt_view *b, const mm_geom *g,
                      uint32_t M, uint32_t N, uint32_t K) {
    uint32_t w = v->w;
    if (K % w || N % w) return false;
    if (form == VKT_MM_TN && M % w) return false;
    if (g->lda % w || g->ldb % w || g->ldc % w || g->a_off % w || g->b_off % w || g->c_off % w)
        return false;
    // vec4 pieces need 16-byte aligned views; dvec4 pieces 32, except on a CPU, where 16 is
    // enough (and is lavapipe's storage alignment, which the engine's packing follows).
    uint64_t align = 4ull * w;
    if (align > 16 && d->type == VKT_DEVICE_CPU) align = 16;
    if (c->offset % align || a->offset % align || b->offset % align) return false;
    if (!v->texel) return true;
    return texel_view_ok(d, a) && texel_view_ok(d, b);
}

// Whether a view read or written like c (the epilogue's s and z, at element offset x_off) allows
// the wide variant v: the alignment that wide_fits asks of c.
static bool wide_view_ok(const vkt_device_info *d, const mm_variant *v, const vkt_view *x,
                         uint32_t x_off) {
    uint64_t align = 4ull * v->w;
    if (align > 16 && d->type == VKT_DEVICE_CPU) align = 16;
    return x->offset % align == 0 && x_off % v->w == 0;
}

// A padded product (mm_variant.pad): its shape, which operands are staged, where they lie in the
// scratch (byte offsets), and the layout the kernel sees.
typedef struct mm_pad {
    uint32_t M, N, K;   // the padded shape: N, K and (TN) M rounded up to 8
    bool a, b, c, bias; // staged (copied, dense and padded); the others are used in place
    uint64_t a_at, b_at, c_at, bias_at, bytes;
    mm_geom g; // the staged operands' dense strides, the others' own strides and offsets
} mm_pad;

// The most scratch a padded product may use: it is for small products (a side of a few floats).
#define PAD_MAX_BYTES (8ull << 20)

static uint32_t up8(uint32_t x) { return (x + 7u) / 8u * 8u; }

// Whether an operand can be read in place as the padded variant's kernel reads a and b: strides
// and offset in whole 8-float pieces, and a texel view the device allows (the texel kernel) or a
// view on 16 bytes (SwiftShader's, which reads vec4s from storage buffers).
static bool ab_in_place(const vkt_device_info *d, const mm_variant *v, const vkt_view *x,
                        uint32_t ld, uint32_t off) {
    if (ld % 8 || off % 8) return false;
    return v->texel ? texel_view_ok(d, x) : x->offset % 16 == 0;
}

// Whether c (or the epilogue's s and z, at element offset off) can be written in place: 8-float
// pieces, views aligned as wide_fits asks.
static bool c_in_place(const vkt_device_info *d, const vkt_view *v, uint32_t ld, uint32_t off) {
    uint64_t align = d->type == VKT_DEVICE_CPU ? 16 : 32;
    return ld % 8 == 0 && off % 8 == 0 && v->offset % align == 0;
}

// Takes floats floats from *at, on 256 bytes: where they start.
static uint64_t take(uint64_t *at, uint64_t floats) {
    uint64_t start = *at;
    *at += (4 * floats + 255) / 256 * 256;
    return start;
}

// The plan of a padded product: a and b are staged where K (or TN's M, or N) needs padding or
// their layout does not suit the padded variant's kernel (ab_in_place); c where N (or TN's M) needs
// padding or its layout does not suit; the bias where c's N is padded.
static mm_pad pad_plan(const vkt_device_info *d, const mm_variant *v, vkt_mm_form form,
                       const vkt_view *c, const vkt_view *a, const vkt_view *b, const mm_geom *g,
                       bool has_bias, uint32_t M, uint32_t N, uint32_t K) {
    mm_pad p;
    memset(&p, 0, sizeof p);
    p.M = form == VKT_MM_TN ? up8(M) : M;
    p.N = up8(N);
    p.K = up8(K);
    p.a = p.K != K || p.M != M || !ab_in_place(d, v, a, g->lda, g->a_off);
    p.b = p.K != K || p.N != N || !ab_in_place(d, v, b, g->ldb, g->b_off);
    p.c = p.N != N || p.M != M || !c_in_place(d, c, g->ldc, g->c_off);
    p.bias = has_bias && p.N != N; // the kernel reads the bias at every padded column
    mm_geom dense = dense_geom(form, p.M, p.N, p.K);
    p.g = *g;
    // Each staged operand on 256 bytes (Vulkan's largest offset alignment).
    if (p.a) p.a_at = take(&p.bytes, (uint64_t)p.M * p.K), p.g.lda = dense.lda, p.g.a_off = 0;
    if (p.b) p.b_at = take(&p.bytes, (uint64_t)p.K * p.N), p.g.ldb = dense.ldb, p.g.b_off = 0;
    if (p.c) p.c_at = take(&p.bytes, (uint64_t)p.M * p.N), p.g.ldc = dense.ldc, p.g.c_off = 0;
    if (p.bias) p.bias_at = take(&p.bytes, p.N), p.g.bias_off = 0;
    return p;
}

uint64_t vkt_matmul_pad_bytes(vkt_mm_form form, uint32_t M, uint32_t N, uint32_t K) {
    uint32_t Mp = form == VKT_MM_TN ? up8(M) : M, Np = up8(N), Kp = up8(K);
    if (Mp == M && Np == N && Kp == K) return 0;
    // The operands the shape makes pad_plan stage; one that it stages only for its layout (a
    // view the texel kernel cannot read in place) may not find room, and the product then runs
    // on the scalar kernel.
    uint64_t at = 0;
    if (Kp != K || Mp != M) take(&at, (uint64_t)Mp * Kp);
    if (Kp != K || Np != N) take(&at, (uint64_t)Kp * Np);
    if (Np != N || Mp != M) take(&at, (uint64_t)Mp * Np);
    if (Np != N) take(&at, Np);
    return at <= PAD_MAX_BYTES ? VKT_OPS_SCRATCH_ZEROS + at : 0;
}

// Whether the padded variant v can run this product (views c, a, b laid out as g says; sv and
// zv, set whenever there is an epilogue, its s and z): a side to pad, within PAD_MAX_BYTES of
// scratch, no optimizer epilogue, and with an epilogue c, s and z in place (padding them too is
// not done).
static bool pad_fits(const vkt_device_info *d, const mm_variant *v, vkt_mm_form form,
                     const vkt_view *c, const vkt_view *a, const vkt_view *b, const vkt_view *sv,
                     const vkt_view *zv, bool sgd, const mm_geom *g, uint32_t M, uint32_t N,
                     uint32_t K) {
    if (sgd || vkt_matmul_pad_bytes(form, M, N, K) == 0) return false;
    mm_pad p = pad_plan(d, v, form, c, a, b, g, true, M, N, K);
    if (sv && (p.c || !wide_view_ok(d, v, sv, g->x_off) || !wide_view_ok(d, v, zv, g->x_off)))
        return false;
    if (!v->texel) return p.bytes <= PAD_MAX_BYTES;
    uint64_t tmax = 16ull * d->max_texel_buffer_elements;
    return p.bytes <= PAD_MAX_BYTES && 4ull * p.M * p.K <= tmax && 4ull * p.K * p.N <= tmax;
}

// Whether variant v adds a's column sums (VKT_SPEC_MM_COLSUM) into col_sum cs in its own
// dispatch: TN on the narrow kernel, or on a texel wide kernel (four rows per lane, one
// 16-byte-aligned vec4 a lane).
static bool colsum_in_kernel(const mm_variant *v, vkt_mm_form form, const vkt_view *cs) {
    if (form != VKT_MM_TN) return false;
    if (v->kind == MM_NARROW) return true;
    return v->kind == MM_WIDE && v->texel && !v->pad && v->kc == 0 && v->tm % 4 == 0 &&
           cs->offset % 16 == 0;
}

// Whether the narrow variant v (matmul_narrow.glsl) can run this product: the narrow side (NT: N,
// TN: M, NN: K) at most v->tc; b, and in NT a, read in place as vec4 texels (their strides and
// offsets in whole texels, views the device allows); in NN and TN c (and the epilogue's s and z)
// written as vec4s: N, its stride and offsets multiples of 4 and the views 16-byte aligned, and
// in NN s read as texels (a view the device allows). a in NN and TN is read as floats: any
// layout (out of texels where its view is whole texels, record_variant).
static bool narrow_fits(const vkt_device_info *d, const mm_variant *v, vkt_mm_form form,
                        const vkt_view *c, const vkt_view *a, const vkt_view *b, const vkt_view *sv,
                        const vkt_view *zv, const mm_geom *g, uint32_t M, uint32_t N, uint32_t K) {
    if (g->ldb % 4 || g->b_off % 4 || !texel_view_ok(d, b)) return false;
    if (form == VKT_MM_NT)
        return N <= v->tc && K % 4 == 0 && g->lda % 4 == 0 && g->a_off % 4 == 0 &&
               texel_view_ok(d, a);
    if ((form == VKT_MM_TN ? M : K) > v->tc) return false;
    if (N % 4 || g->ldc % 4 || g->c_off % 4 || c->offset % 16) return false;
    if (sv && form == VKT_MM_NN && !texel_view_ok(d, sv)) return false; // s read as texels
    return !sv || (g->x_off % 4 == 0 && sv->offset % 16 == 0 && zv->offset % 16 == 0);
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
                           float beta, const mm_geom *g, uint32_t M, uint32_t N, uint32_t K,
                           const mm_epi_args *e, const vkt_view *cs, const char *label);

// The floats a binding of an operand spans: rows rows of cols floats, ld apart.
static uint64_t span_of(uint32_t rows, uint32_t cols, uint32_t ld) {
    return (uint64_t)(rows - 1) * ld + cols;
}

// Measures each variant v[i] on this shape and layout (scratch operands with g's strides, nothing
// of the caller's touched): an untimed warm-up (below), one timed run each, then two more rounds
// for those within 2x of the fastest, interleaved, the fastest run kept. GPU timestamps where the
// queue has them, else the host clock around a submit per run. False (and nothing measured) when
// the scratch memory or a submit fails.
static bool measure(vkt_ops *ops, vkt_mm_form form, const mm_geom *g, uint32_t M, uint32_t N,
                    uint32_t K, const mm_variant **v, int n, double *ms) {
    static const char *labels[MAX_CANDS] = {"tune:0", "tune:1", "tune:2", "tune:3",
                                            "tune:4", "tune:5", "tune:6", "tune:7"};
    vkt_device *dev = vkt_ops_device(ops);
    if (vkt_ops_peek(ops) != VKT_OK) return false; // the caller's failure, for the caller to see
    bool stamps = vkt_device_get_info(dev)->timestamp_valid_bits > 0;
    mm_geom mg = {g->lda, g->ldb, g->ldc, 0, 0, 0, 0, 0};
    uint64_t na = form == VKT_MM_TN ? span_of(K, M, g->lda) : span_of(M, K, g->lda);
    uint64_t nb = form == VKT_MM_NT ? span_of(N, K, g->ldb) : span_of(K, N, g->ldb);
    uint64_t nc = span_of(M, N, g->ldc);
    vkt_buffer *ba = NULL, *bb = NULL, *bc = NULL;
    vkt_cmd *cmd = NULL;
    // Each operand in a buffer of its own with VKT_TEXEL_WIDEN bytes after it, so that on
    // lavapipe its texel views are widened as the network's are (cmd.c, texel_view) and the
    // step reuses the variant that tuning compiled.
    const uint64_t G = VKT_TEXEL_WIDEN;
    bool ok = vkt_buffer_create_guarded(dev, 4 * na, G, "matmul tuning a", &ba) == VKT_OK &&
              vkt_buffer_create_guarded(dev, 4 * nb, G, "matmul tuning b", &bb) == VKT_OK &&
              vkt_buffer_create_guarded(dev, 4 * nc, G, "matmul tuning c", &bc) == VKT_OK &&
              vkt_cmd_create(dev, &cmd) == VKT_OK;
    bool active[MAX_CANDS];
    for (int i = 0; i < n; i++) {
        ms[i] = INFINITY;
        active[i] = true;
    }
    // The scratch counts against the device's limit (the plan leaves it out: vktrain/plan.h);
    // where the limit leaves no room for it, nothing is measured.
    if (!ok) goto out;
    vkt_view a = vkt_buffer_view(ba, 0, 4 * na), b = vkt_buffer_view(bb, 0, 4 * nb),
             c = vkt_buffer_view(bc, 0, 4 * nc);
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
            record_variant(cmd, ops, v[j], form, c, a, b, a, false, 0.0f, &mg, rows < M ? rows : M,
                           cols < N ? cols : N, K, NULL, NULL, NULL);
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
                record_variant(cmd, ops, v[j], form, c, a, b, a, false, 0.0f, &mg, M, N, K, NULL,
                               NULL, labels[j]);
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
            // A K-split records several dispatches, a padded product its copies too: the sum of
            // their times, without the gaps at the barriers between them (with timestamps on,
            // lavapipe's barriers cost 10 times what they do in an untimed step: strategy.c).
            for (int j = 0; j < n && nt > 0; j++) {
                uint64_t sum = 0;
                for (int e = 0; e < nt; e++)
                    if (t[e].label == labels[j] && t[e].end_ns > t[e].start_ns)
                        sum += t[e].end_ns - t[e].start_ns;
                if (sum > 0) ms[j] = fmin(ms[j], (double)sum / 1e6);
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
out:
    vkt_cmd_destroy(cmd);
    vkt_buffer_destroy(bc);
    vkt_buffer_destroy(bb);
    vkt_buffer_destroy(ba);
    return ok;
}

// epi: the product has an epilogue whose s and z views are sv and zv (NULL: none).
// The device's candidates that can run this product (views c, a, b laid out as g says; with an
// epilogue, its views sv and zv too), in order of preference, into fit; returns their number (at
// least one, except with sgd: the epilogue is VKT_MM_EPI_SGD, which only has_sgd variants run,
// and no fallback is added). *fixed: the context's matmul_variant chose them. macs: the whole
// product's multiply-adds (M N K is a block's, where the product is split), which the size
// rules (mm_cand.min_macs) go by, so that a block chooses among what the whole product would.
static int fitting(const vkt_device *dev, vkt_mm_form form, const vkt_view *c, const vkt_view *a,
                   const vkt_view *b, const vkt_view *sv, const vkt_view *zv, bool sgd,
                   const mm_geom *g, uint32_t M, uint32_t N, uint32_t K, uint64_t macs,
                   const mm_variant **fit, bool *fixed) {
    const vkt_device_info *d = dev->info;
    const mm_variant *cand[MAX_CANDS];
    bool fallback[MAX_CANDS];
    int nc = candidates(dev, macs, cand, fallback, fixed), nf = 0;
    for (int i = 0; i < nc; i++) {
        const mm_variant *v = cand[i];
        if (fallback[i] && nf > 0) continue;
        if (sv && !has_epilogue(v)) continue;
        if (sgd && !has_sgd(v)) continue;
        // With the SGD epilogue a texel kernel reads c and the momentum buffer as texels too.
        if (sgd && v->texel && (!texel_view_ok(d, c) || (sv && !texel_view_ok(d, sv)))) continue;
        // ... and s in an activation epilogue too.
        if (v->kind == MM_WIDE && v->texel && sv && !texel_view_ok(d, sv)) continue;
        if (v->pad) {
            if (!pad_fits(d, v, form, c, a, b, sv, zv, sgd, g, M, N, K)) continue;
        } else if (v->kind == MM_NARROW) {
            if (!narrow_fits(d, v, form, c, a, b, sv, zv, g, M, N, K)) continue;
        } else if (v->kind == MM_WIDE && (!wide_fits(d, v, form, c, a, b, g, M, N, K) ||
                                          (sv && (!wide_view_ok(d, v, sv, g->x_off) ||
                                                  !wide_view_ok(d, v, zv, g->x_off)))))
            continue;
        fit[nf++] = v;
    }
    // A padded or narrow variant that fits (the padded one from PAD_MIN_MACS) is taken over the
    // scalar kernels without measuring: the two round differently (the wide kernel starts its sum
    // from beta c), their times can be within noise of each other, and a measured choice flipped
    // between processes (test_mpi_layers' two ranks against one process lost their identical
    // bits). The choice between them is the size rule, the same in every process.
    bool padded = false;
    for (int i = 0; i < nf; i++)
        padded = padded || fit[i]->pad || fit[i]->kind == MM_NARROW;
    if (padded && !*fixed) {
        int kept = 0;
        for (int i = 0; i < nf; i++)
            if (fit[i]->kind != MM_SCALAR) fit[kept++] = fit[i];
        nf = kept;
    }
    if (nf == 0 && !sgd) fit[nf++] = named("scalar-r8c8-g4"); // has the epilogue; any shape
    return nf;
}

// The name a product's measurements are kept under (tune.c): its form and shape, and its
// strides where they are not the dense ones (a block of a split product: the strides change the
// memory access, so they are measured apart). The offsets only decide which variants fit (the
// fitting ones are chosen among by these measurements), not their speed. Times measured with the
// stores forced (a token of the context's variant list) are kept apart, named with the token:
// they time other kernels than a run without it builds under the same variant names.
static void op_key(const vkt_device *dev, char *buf, size_t size, vkt_mm_form form,
                   const mm_geom *g, uint32_t M, uint32_t N, uint32_t K) {
    const char *forced = stores_forced(dev);
    int n = snprintf(buf, size, "matmul %s %ux%ux%u", form_name(form), M, N, K);
    if (!geom_is_dense(g, form, M, N, K) && n > 0 && (size_t)n < size)
        n += snprintf(buf + n, size - (size_t)n, " ld %u,%u,%u", g->lda, g->ldb, g->ldc);
    if (forced && n > 0 && (size_t)n < size) snprintf(buf + n, size - (size_t)n, " %s", forced);
}

static const mm_variant *choose(vkt_ops *ops, vkt_mm_form form, const vkt_view *c,
                                const vkt_view *a, const vkt_view *b, const vkt_view *sv,
                                const vkt_view *zv, bool sgd, const mm_geom *g, uint32_t M,
                                uint32_t N, uint32_t K, uint64_t macs) {
    const vkt_device *dev = vkt_ops_device(ops);
    const mm_variant *fit[MAX_CANDS];
    bool fixed;
    int nf = fitting(dev, form, c, a, b, sv, zv, sgd, g, M, N, K, macs, fit, &fixed);
    if (nf == 0) return NULL; // sgd only: the caller asked vkt_matmul_sgd_fits first
    if (nf == 1 || fixed || vkt_tune_mode_of(dev) == VKT_TUNE_OFF) return fit[0];

    char op[128];
    op_key(dev, op, sizeof op, form, g, M, N, K);
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
    if (ntodo > 0) vkt_busy_begin(VKT_BUSY_TUNE);
    if (ntodo > 0 && measure(ops, form, g, M, N, K, todo, ntodo, got)) {
        for (int i = 0; i < ntodo; i++) {
            vkt_tune_put(dev, op, todo[i]->name, got[i]);
            ms[todo_at[i]] = got[i];
        }
        vkt_tune_save(dev);
    }
    if (ntodo > 0) vkt_busy_end(VKT_BUSY_TUNE, 0);
    vkt_tune_count_shape(ntodo);
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

// ---------------------------------------------------------------------------------------------
// Splitting: a product with an operand (or the epilogue's s or z) larger than the storage range
// runs as blocks of c (rows m0.., columns n0..) and, where a's or b's k rows are too long for
// one binding, K-chunks, each block binding only the floats from its first to its last element.
// See the file's header comment for the plan and what it does to the results.

static uint64_t g_test_range; // vkt_matmul_test_range

void vkt_matmul_test_range(uint64_t bytes) { g_test_range = bytes; }

static uint64_t range_of(const vkt_device_info *d) {
    uint64_t r = d->max_storage_buffer_range;
    return g_test_range && g_test_range < r ? g_test_range : r;
}

// The alignment a block's binding starts on: both offset alignments (a block's bindings may be
// read as texels).
static uint64_t bind_align(const vkt_device_info *d) {
    uint64_t a = d->min_storage_buffer_offset_alignment, t = d->min_texel_buffer_offset_alignment;
    if (t > a) a = t;
    return a < 16 ? 16 : a;
}

// A product's block sizes: mb rows, nb columns, kb of K per chunk (the whole sizes when it fits).
typedef struct mm_plan {
    uint32_t mb, nb, kb;
} mm_plan;

// The size of the blocks that cut n into the fewest of at most most each, equal but for the last,
// a multiple of 64 (or of 8, 4 where most is smaller): blocks starting on multiples of 64 floats
// start on 256 bytes, Vulkan's largest offset alignment, in every operand whose view does, so that
// they need no element offsets and keep the wide kernels' alignment.
static uint32_t block_of(uint32_t n, uint64_t most) {
    if (most >= n) return n;
    uint64_t q = most >= 64 ? 64 : most >= 8 ? 8 : most >= 4 ? 4 : 1;
    for (uint64_t parts = (n + most - 1) / most;; parts++) {
        uint64_t b = (n + parts - 1) / parts;
        b = (b + q - 1) / q * q;
        if (b <= most) return (uint32_t)b;
    }
}

static mm_plan plan_of(const vkt_device_info *d, vkt_mm_form form, uint32_t M, uint32_t N,
                       uint32_t K) {
    uint64_t range = range_of(d);
    uint64_t na = 4ull * M * K, nb = 4ull * K * N, nc = 4ull * M * N;
    // (The epilogue's s and z are c's size.)
    if (na <= range && nb <= range && nc <= range) return (mm_plan){M, N, K};
    // L: the floats one binding may span, less the aligned start below a block's first element.
    uint64_t align = bind_align(d);
    VKT_ASSERT(range > align);
    uint64_t L = (range - align) / 4, m64 = M, n64 = N, k64 = K;
    // K per chunk: TN's a is [K, M] and NN's and TN's b [K, N], so a block of them spans kb whole
    // rows whatever its columns; NN/NT's a and NT's b need kb <= L for one row of a block.
    uint64_t kmax = k64 < L ? k64 : L;
    if (form == VKT_MM_TN && L / m64 < kmax) kmax = L / m64;
    if (form != VKT_MM_NT && L / n64 < kmax) kmax = L / n64;
    VKT_ASSERT(kmax >= 1); // a row of M or N floats longer than the whole storage range
    uint32_t kb = block_of(K, kmax);
    // Columns: NT's b is [N, K], nb rows of kb; NN's and TN's b spans (kb - 1) N + nb; c at
    // least one row of nb.
    uint64_t nmax = form == VKT_MM_NT ? (L - kb) / k64 + 1 : L - (kb - 1) * n64;
    if (nmax > L) nmax = L;
    uint32_t nbk = block_of(N, nmax);
    // Rows: NN/NT's a is [M, K], mb rows of kb; TN's spans (kb - 1) M + mb; c (mb - 1) N + nb.
    uint64_t mmax = form == VKT_MM_TN ? L - (kb - 1) * m64 : (L - kb) / k64 + 1;
    uint64_t mc = (L - nbk) / n64 + 1;
    if (mc < mmax) mmax = mc;
    return (mm_plan){block_of(M, mmax), nbk, kb};
}

static uint32_t nblocks(uint32_t n, uint32_t b) { return (n + b - 1) / b; }

// Whether a product runs as one block: no K-chunks, no row or column blocks (its column sums can
// then be added by its one dispatch).
static bool one_block(const mm_plan *plan, uint32_t M, uint32_t N, uint32_t K) {
    return nblocks(K, plan->kb) == 1 && plan->mb >= M && plan->nb >= N;
}

void vkt_matmul_test_plan(vkt_ops *ops, vkt_mm_form form, uint32_t M, uint32_t N, uint32_t K,
                          uint32_t blocks[3]) {
    mm_plan p = plan_of(vkt_device_get_info(vkt_ops_device(ops)), form, M, N, K);
    blocks[0] = nblocks(M, p.mb);
    blocks[1] = nblocks(N, p.nb);
    blocks[2] = nblocks(K, p.kb);
}

// A whole product: its shape and views (bias: size 0 when none), and the epilogue.
typedef struct mm_prod {
    vkt_mm_form form;
    uint32_t M, N, K;
    vkt_view c, a, b, bias;
    bool has_bias;
    float beta;
    bool with_epi;
    mm_epi_args e;       // s and z: the whole views ([M, N]), or a and c where unused
    bool uses_s, uses_z; // the epilogue reads s / writes z
} mm_prod;

// One block of a product: its sizes, its bindings and its layout inside them.
typedef struct mm_block {
    uint32_t M, N, K;
    vkt_view c, a, b, bias, s, z;
    mm_geom g;
} mm_block;

// The part of v from float first to float end (exclusive), bound from the aligned address at or
// below it (never below v's own start); *off: first's offset inside it, in floats.
static vkt_view sub_view(vkt_view v, uint64_t first, uint64_t end, uint64_t align, uint32_t *off) {
    uint64_t start = v.offset + 4 * first, down = start - start % align;
    if (down < v.offset) down = v.offset;
    *off = (uint32_t)((start - down) / 4);
    vkt_view s = v;
    s.offset = down;
    s.size = v.offset + 4 * end - down;
    return s;
}

// The block of p at rows m0.., columns n0.., k0.. of K, sized by plan (smaller at the ends).
static mm_block block_at(const vkt_device_info *d, const mm_prod *p, const mm_plan *plan,
                         uint32_t m0, uint32_t n0, uint32_t k0) {
    uint64_t align = bind_align(d), M = p->M, N = p->N, K = p->K;
    mm_block bl;
    bl.M = p->M - m0 < plan->mb ? p->M - m0 : plan->mb;
    bl.N = p->N - n0 < plan->nb ? p->N - n0 : plan->nb;
    bl.K = p->K - k0 < plan->kb ? p->K - k0 : plan->kb;
    bl.g = dense_geom(p->form, p->M, p->N, p->K);
    uint64_t first, end;
    if (p->form == VKT_MM_TN)
        first = k0 * M + m0, end = (k0 + bl.K - 1) * M + m0 + bl.M;
    else
        first = m0 * K + k0, end = (m0 + bl.M - 1) * K + k0 + bl.K;
    bl.a = sub_view(p->a, first, end, align, &bl.g.a_off);
    if (p->form == VKT_MM_NT)
        first = n0 * K + k0, end = (n0 + bl.N - 1) * K + k0 + bl.K;
    else
        first = k0 * N + n0, end = (k0 + bl.K - 1) * N + n0 + bl.N;
    bl.b = sub_view(p->b, first, end, align, &bl.g.b_off);
    first = m0 * N + n0, end = (m0 + bl.M - 1) * N + n0 + bl.N;
    bl.c = sub_view(p->c, first, end, align, &bl.g.c_off);
    uint32_t s_off = 0, z_off = 0;
    bl.s = p->uses_s ? sub_view(p->e.s, first, end, align, &s_off) : bl.a;
    bl.z = p->uses_z ? sub_view(p->e.z, first, end, align, &z_off) : bl.c;
    // s and z are one view where both are used (the SGD epilogue's momentum buffer).
    bl.g.x_off = p->uses_s ? s_off : z_off;
    // The bias is bound whole (4 N bytes), from n0 on.
    bl.bias = p->has_bias ? p->bias : bl.a;
    bl.g.bias_off = p->has_bias ? n0 : 0;
    return bl;
}

// The variant that runs block bl of p: with the epilogue when epi (else the plain product).
static const mm_variant *block_variant(vkt_ops *ops, const mm_prod *p, const mm_block *bl,
                                       bool epi) {
    bool sgd = epi && p->e.mode == VKT_MM_EPI_SGD;
    return choose(ops, p->form, &bl->c, &bl->a, &bl->b, epi ? &bl->s : NULL, epi ? &bl->z : NULL,
                  sgd, &bl->g, bl->M, bl->N, bl->K, (uint64_t)p->M * p->N * p->K);
}

// A product with views of exactly its size at offset 0 and no epilogue (the choice that
// vkt_matmul_variant and vkt_matmul_candidates report: its first block's).
static mm_prod plain_prod(vkt_mm_form form, uint32_t M, uint32_t N, uint32_t K) {
    mm_prod p;
    memset(&p, 0, sizeof p);
    p.form = form;
    p.M = M, p.N = N, p.K = K;
    p.a.size = 4ull * M * K, p.b.size = 4ull * K * N, p.c.size = 4ull * M * N;
    p.e.s = p.a;
    p.e.z = p.c;
    return p;
}

// The bindings of a dispatch that the op writes (c, and z: the kept pre-activation or the
// momentum buffer): blocks whose ranges of these overlap need a barrier between them (the
// synchronization validation sees a binding's whole range as accessed).
typedef struct mm_range {
    const vkt_buffer *buf;
    uint64_t lo, hi;
} mm_range;

#define MAX_RANGES 48

typedef struct mm_hazards {
    mm_range r[MAX_RANGES];
    int n;
} mm_hazards;

static bool overlaps(const mm_hazards *h, const vkt_view *v) {
    for (int i = 0; i < h->n; i++)
        if (h->r[i].buf == v->buffer && v->offset < h->r[i].hi && h->r[i].lo < v->offset + v->size)
            return true;
    return false;
}

// Puts a barrier before block bl where it touches what an earlier dispatch since the last one
// wrote, and notes its ranges.
static void hazard_barrier(vkt_cmd *cmd, mm_hazards *h, const mm_prod *p, const mm_block *bl) {
    // (s is only read, except as the SGD epilogue's momentum buffer, which is z too.)
    const vkt_view *mine[2] = {&bl->c, p->uses_z ? &bl->z : NULL};
    bool hit = h->n + 2 > MAX_RANGES;
    for (int i = 0; i < 2 && !hit; i++)
        hit = mine[i] && overlaps(h, mine[i]);
    if (hit) {
        vkt_cmd_barrier(cmd);
        h->n = 0;
    }
    for (int i = 0; i < 2; i++)
        if (mine[i])
            h->r[h->n++] =
                (mm_range){mine[i]->buffer, mine[i]->offset, mine[i]->offset + mine[i]->size};
}

// ---------------------------------------------------------------------------------------------
// Queries

// The variant of a plain product: views at offset 0 (the engine's usual packing), the same choice
// vkt_op_matmul makes (for a split product, its first block's).
static const mm_variant *plain_variant(vkt_ops *ops, vkt_mm_form form, uint32_t M, uint32_t N,
                                       uint32_t K) {
    const vkt_device_info *d = vkt_device_get_info(vkt_ops_device(ops));
    mm_prod p = plain_prod(form, M, N, K);
    mm_plan plan = plan_of(d, form, M, N, K);
    mm_block bl = block_at(d, &p, &plan, 0, 0, 0);
    return block_variant(ops, &p, &bl, false);
}

const char *vkt_matmul_variant(vkt_ops *ops, vkt_mm_form form, uint32_t M, uint32_t N, uint32_t K) {
    return plain_variant(ops, form, M, N, K)->name;
}

bool vkt_matmul_sums_columns(vkt_ops *ops, uint32_t M, uint32_t N, uint32_t K) {
    const vkt_device_info *d = vkt_device_get_info(vkt_ops_device(ops));
    mm_plan plan = plan_of(d, VKT_MM_TN, M, N, K);
    vkt_view cs = {0};
    return one_block(&plan, M, N, K) &&
           colsum_in_kernel(plain_variant(ops, VKT_MM_TN, M, N, K), VKT_MM_TN, &cs);
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
    // Every block must have a variant with the epilogue; a K-split cannot carry it (its chunks
    // would add onto the parameters).
    const vkt_device_info *d = vkt_device_get_info(vkt_ops_device(ops));
    mm_plan plan = plan_of(d, form, M, N, K);
    if (plan.kb < K) return false;
    mm_prod p;
    memset(&p, 0, sizeof p);
    p.form = form;
    p.M = M, p.N = N, p.K = K;
    p.c = *c, p.a = *a, p.b = *b;
    p.with_epi = true;
    p.e.mode = VKT_MM_EPI_SGD;
    p.uses_s = p.uses_z = buf != NULL;
    // Without a momentum buffer the kernel binds a and c there (fitting checks them as s and z).
    p.e.s = buf ? *buf : *a;
    p.e.z = buf ? *buf : *c;
    for (uint32_t n0 = 0; n0 < N; n0 += plan.nb)
        for (uint32_t m0 = 0; m0 < M; m0 += plan.mb) {
            mm_block bl = block_at(d, &p, &plan, m0, n0, 0);
            const mm_variant *fit[MAX_CANDS];
            bool fixed;
            if (fitting(vkt_ops_device(ops), form, &bl.c, &bl.a, &bl.b, &bl.s, &bl.z, true, &bl.g,
                        bl.M, bl.N, bl.K, (uint64_t)M * N * K, fit, &fixed) == 0)
                return false;
        }
    return true;
}

int vkt_matmul_candidates(vkt_ops *ops, vkt_mm_form form, uint32_t M, uint32_t N, uint32_t K,
                          const char **names, double *ms, int max) {
    const vkt_device *dev = vkt_ops_device(ops);
    const vkt_device_info *d = dev->info;
    mm_prod p = plain_prod(form, M, N, K);
    mm_plan plan = plan_of(d, form, M, N, K);
    mm_block bl = block_at(d, &p, &plan, 0, 0, 0);
    const mm_variant *fit[MAX_CANDS];
    bool fixed;
    int nf = fitting(dev, form, &bl.c, &bl.a, &bl.b, NULL, NULL, false, &bl.g, bl.M, bl.N, bl.K,
                     (uint64_t)M * N * K, fit, &fixed),
        n = 0;
    char op[128];
    op_key(dev, op, sizeof op, form, &bl.g, bl.M, bl.N, bl.K);
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
    uint64_t need_c = 4ull * M * N, need_a = 4ull * M * K, need_b = 4ull * K * N;
    VKT_ASSERT(c.size >= need_c && a.size >= need_a && b.size >= need_b);
    VKT_ASSERT(!bias || bias->size >= 4ull * N);
    VKT_ASSERT(4ull * N <= d->max_storage_buffer_range); // the bias is bound whole
    mm_prod p;
    memset(&p, 0, sizeof p);
    p.form = form;
    p.M = M, p.N = N, p.K = K;
    p.c = c, p.a = a, p.b = b;
    p.has_bias = bias != NULL;
    if (bias) {
        p.bias = *bias;
        p.bias.size = 4ull * N;
    }
    p.beta = beta;

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
            p.uses_s = p.uses_z = true;
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
                p.uses_z = true;
            }
        } else {
            VKT_ASSERT(x && (kind == VKT_MM_EPI_GRAD_X || kind == VKT_MM_EPI_GRAD_Y));
            VKT_ASSERT(kind == VKT_MM_EPI_GRAD_X || vkt_act_grad_from_output(epi->act, e.alpha));
            e.mode = kind == VKT_MM_EPI_GRAD_X ? VKT_MM_EPI_GRAD_X : VKT_MM_EPI_GRAD_Y;
            e.s = *x;
            p.uses_s = true;
        }
    }
    p.with_epi = kind != VKT_MM_EPI_NONE;
    p.e = e;
    // a's column sums (vkt_mm_epilogue.col_sum): in the kernel where one block runs the product
    // on a kernel that can, else vkt_op_bias_grad after it.
    const vkt_view *cs = epi ? epi->col_sum : NULL;
    VKT_ASSERT(!cs || (form == VKT_MM_TN && cs->size >= 4ull * M));
    VKT_ASSERT(!cs || cs->buffer != c.buffer || cs->offset >= c.offset + need_c ||
               c.offset >= cs->offset + 4ull * M);
    bool cs_done = false;

    // Bind exactly what each block uses: a view may be larger than needed, and one larger than
    // maxStorageBufferRange could not be bound at all. A product that fits is one block: its
    // views from their own offsets, the dense layout (the path and results of before the split).
    mm_plan plan = plan_of(d, form, M, N, K);
    uint32_t nk = nblocks(K, plan.kb);
    VKT_ASSERT(kind != VKT_MM_EPI_SGD || nk == 1); // only where vkt_matmul_sgd_fits
    mm_hazards hz = {.n = 0};
    bool single = one_block(&plan, M, N, K);
    // K-chunks in order, each adding onto c (beta 1 after the first); the bias and the epilogue
    // in the last, so that the wide kernels' sums come out bit for bit as unsplit.
    for (uint32_t kc = 0; kc < nk; kc++) {
        bool last = kc == nk - 1;
        for (uint32_t n0 = 0; n0 < N; n0 += plan.nb) {
            for (uint32_t m0 = 0; m0 < M; m0 += plan.mb) {
                mm_block bl = block_at(d, &p, &plan, m0, n0, kc * plan.kb);
                bool epi_here = p.with_epi && last;
                const mm_variant *v = block_variant(ops, &p, &bl, epi_here);
                VKT_ASSERT(v); // an SGD epilogue only where vkt_matmul_sgd_fits
                mm_epi_args be = p.e;
                be.s = bl.s;
                be.z = bl.z;
                if (nk > 1 || plan.mb < M || plan.nb < N) hazard_barrier(cmd, &hz, &p, &bl);
                const vkt_view *bcs = cs && single && colsum_in_kernel(v, form, cs) ? cs : NULL;
                cs_done = cs_done || bcs;
                record_variant(cmd, ops, v, form, bl.c, bl.a, bl.b, bl.bias, p.has_bias && last,
                               kc == 0 ? beta : 1.0f, &bl.g, bl.M, bl.N, bl.K,
                               epi_here ? &be : NULL, bcs, label);
            }
        }
    }
    if (cs && !cs_done)
        vkt_op_bias_grad(cmd, ops, *cs, a, K, M, epi->col_sum_label ? epi->col_sum_label : label);
}

void vkt_op_matmul(vkt_cmd *cmd, vkt_ops *ops, vkt_mm_form form, vkt_view c, vkt_view a, vkt_view b,
                   const vkt_view *bias, float beta, uint32_t M, uint32_t N, uint32_t K,
                   const char *label) {
    vkt_op_matmul_ex(cmd, ops, form, c, a, b, bias, beta, M, N, K, NULL, label);
}

// The k range of each dispatch of variant v in a product of depth K (the last one's may be
// shorter): its K-split chunk, or the whole K.
static uint32_t k_per_dispatch(const mm_variant *v, uint32_t K) {
    return v->kc && v->kc < K ? v->kc : K;
}

// Whether variant v takes two k steps per iteration of its k loop (VKT_SPEC_MM_KSTEPS) for an
// M x N x K product in form: the texel kernels on lavapipe in NN and NT where K is at least 512,
// the product is big (BIG_MACS, as for the big tiles) and every dispatch's k range is a multiple of
// 2 w (v->kc, a K-split's chunk, is). Each iteration ends with a masked write of every
// accumulator; halving those made the Zen 2 machine's products 2-7% faster in NN and NT (1024^3,
// 128 x 512 x 784, 512 x 512 x 784; K = 256: nothing) and 1-10% slower in TN (1024^3, 512 x 784 x
// 512), and cost fashion_mlp's cold first step 0.25 s (3.0 -> 3.25 s) for about 1% of its step at
// batch 128, hence BIG_MACS (docs/PERFORMANCE.md, twelfth pass). Not the 16-row tile, whose point
// is a k step of half the code (lp_half_tile_pays): two a loop make it as long as the 32-row
// tile's one, and NT 512 x 512 x 784 (batch 512's first layer) ran 15-25% faster with one on a Zen
// 4 (docs/PERFORMANCE.md, eighteenth pass).
static uint32_t ksteps(const vkt_device_info *d, const mm_variant *v, vkt_mm_form form, uint32_t M,
                       uint32_t N, uint32_t K) {
    uint32_t kc = k_per_dispatch(v, K);
    bool two = v->kind == MM_WIDE && v->texel && v->tm >= 32 && is_lavapipe(d) &&
               form != VKT_MM_TN && kc >= 512 && (uint64_t)M * N * K >= BIG_MACS &&
               K % (2 * v->w) == 0 && kc % (2 * v->w) == 0;
    return two ? 2 : 1;
}

// Whether the texel kernel's SGD epilogue writes the parameters and the momentum by
// subgroup-uniform stores (VKT_SPEC_MM_USTORE, shaders/matmul_wide.glsl): on lavapipe, with one
// 8-float piece per lane, where every row tile is whole and there is a momentum buffer. Those
// stores, in place of lavapipe's per-lane store loop, took fashion_mlp's weight gradients 10-16%
// faster (traced; less on a Zen 3); they also cost the pipeline 2-3 s more of LLVM compile time
// where it is built alone (its 2,048 uniform stores a tile), which the plain products (3-10%
// each) were not given. With Mesa's cache empty but enabled, the compile-ahead thread builds it on
// the other core and the first step was not measurably later (docs/PERFORMANCE.md, thirteenth
// and fourteenth passes). Workgroups of 8 lanes only: on 16 (lavapipe at 512 bits) twice the
// stores a row took fashion_mlp's first weight gradient from 3.5 to 5.2 ms (traced on a Zen 4,
// docs/PERFORMANCE.md, twentieth pass).
static bool ustore(const vkt_device_info *d, const mm_variant *v, uint32_t mode, uint32_t sgd_mode,
                   uint32_t M) {
    return v->kind == MM_WIDE && v->texel && v->w == 8 && v->tc == v->w && is_lavapipe(d) &&
           mode == VKT_MM_EPI_SGD && M % v->tm == 0 && sgd_mode != 0 && v->wg == 8;
}

// The kernel that variant v runs for form with the epilogue (act, mode): its shader (SwiftShader's
// kernels are one shader per form: it does not fold the form's branches; the optimizer epilogue
// has its own) and specialization constants: workgroup, form, tile (wide and tiled kernels), and
// for the kernels with the epilogue its activation and mode. The scalar kernel's tile is compiled
// in (the shader's name): its tile constants stay 0, one cache entry per kernel.
static void variant_key(const vkt_device *dev, const mm_variant *v, vkt_mm_form form, uint32_t act,
                        uint32_t mode, uint32_t sgd_mode, uint32_t M, uint32_t N, uint32_t K,
                        vkt_kernel_key *key) {
    const vkt_device_info *d = dev->info;
    memset(key, 0, sizeof *key);
    uint32_t spec[9] = {
        v->wg, v->kind == MM_TILED ? v->wg : 1, 1, (uint32_t)form, v->tm, v->tc, v->w, act, mode};
    if (v->kind == MM_SCALAR) spec[4] = spec[5] = spec[6] = 0;
    memcpy(key->spec, spec, sizeof spec);
    key->nspec = has_epilogue(v) ? 9 : 7;
    // The narrow kernel reads a as texels (VKT_SPEC_MM_A_TEXEL) unless record_variant finds its
    // view cannot be: the key the engine builds ahead (vkt_matmul_plain_keys) is the usual one.
    // (The spec[] index of each constant is its id: VKT_SPEC_MM_COLSUM, _A_TEXEL, _STORE64.)
    if (v->kind == MM_NARROW) key->spec[VKT_SPEC_MM_A_TEXEL] = 1, key->nspec = 11;
    if (v->kind == MM_WIDE && v->w == 8 && store64(dev))
        key->spec[VKT_SPEC_MM_STORE64] = 1, key->nspec = 12;
    // Each constant's value is in spec[] whether or not nspec reaches it (only the first nspec are
    // the key), so that a later constant that extends the key carries the right ones before it.
    uint32_t ks = ksteps(d, v, form, M, N, K);
    key->spec[VKT_SPEC_MM_KSTEPS] = ks;
    if (ks > 1) key->nspec = 13;
    if (ustore(d, v, mode, sgd_mode, M)) key->spec[VKT_SPEC_MM_USTORE] = 1, key->nspec = 14;
    key->shader = mode == VKT_MM_EPI_SGD ? v->sgd_kernel : v->kernel[form];
}

int vkt_matmul_plain_keys(vkt_ops *ops, const vkt_mm_shape *shapes, int n, vkt_kernel_key *out) {
    for (int i = 0; i < n; i++) {
        const vkt_mm_shape *sh = &shapes[i];
        variant_key(vkt_ops_device(ops), plain_variant(ops, sh->form, sh->M, sh->N, sh->K),
                    sh->form, VKT_ACT_CODE_NONE, VKT_MM_EPI_FORWARD, 0, sh->M, sh->N, sh->K,
                    &out[i]);
    }
    return n;
}

// Copies rows x cols floats of src (row r at element off + r ld) into the dense [prows, pcols]
// at byte at of the scratch s, top left, and zeros the rest of it (from zeros,
// VKT_OPS_SCRATCH_ZEROS bytes of 0.0f): the data, the padding columns and the padding rows are
// three commands on disjoint bytes. Returns the staged view.
static vkt_view stage(vkt_cmd *cmd, vkt_view zeros, vkt_view src, uint32_t ld, uint32_t off,
                      uint32_t rows, uint32_t cols, vkt_view s, uint64_t at, uint32_t prows,
                      uint32_t pcols, const char *label) {
    uint64_t rb = 4ull * cols, prb = 4ull * pcols;
    vkt_view dst = vkt_view_sub(s, at, prb * prows);
    vkt_view from = vkt_view_sub(src, 4ull * off, 4ull * ((uint64_t)(rows - 1) * ld + cols));
    if (cols == pcols && ld == cols)
        vkt_cmd_copy_rows(cmd, from, 0, dst, 0, 1, rb * rows, label);
    else
        vkt_cmd_copy_rows(cmd, from, 4ull * ld, dst, prb, rows, rb, label);
    if (pcols > cols) {
        VKT_ASSERT(prb - rb <= zeros.size);
        vkt_cmd_copy_rows(cmd, zeros, 0, vkt_view_sub(dst, rb, (rows - 1) * prb + (prb - rb)), prb,
                          rows, prb - rb, label);
    }
    if (prows > rows) vkt_cmd_fill(cmd, vkt_view_sub(dst, rows * prb, (prows - rows) * prb), 0);
    return dst;
}

static void record_variant(vkt_cmd *cmd, vkt_ops *ops, const mm_variant *v, vkt_mm_form form,
                           vkt_view c, vkt_view a, vkt_view b, vkt_view bv, bool has_bias,
                           float beta, const mm_geom *g, uint32_t M, uint32_t N, uint32_t K,
                           const mm_epi_args *e, const vkt_view *cs, const char *label);

// Records the padded variant v (pad_fits holds): the operands that need it staged in the ops'
// scratch, zero-padded to the shape its kernel takes, the kernel on them, and c's M x N copied
// back out of the padded result. The zeros past K add exact zeros to every sum, which the kernel
// takes in k order as unpadded: the result is the texel kernel's, bit for bit, whether the
// product is whole or a block of a split one; the padding rows and columns of c are computed and
// dropped. Where the scratch cannot be made, the scalar kernel runs the product instead.
static void record_padded(vkt_cmd *cmd, vkt_ops *ops, const mm_variant *v, vkt_mm_form form,
                          vkt_view c, vkt_view a, vkt_view b, vkt_view bv, bool has_bias,
                          float beta, const mm_geom *g, uint32_t M, uint32_t N, uint32_t K,
                          const mm_epi_args *e, const char *label) {
    const vkt_device_info *d = vkt_device_get_info(vkt_ops_device(ops));
    const mm_variant *base = named(v->name + 4); // after "pad-"
    mm_pad p = pad_plan(d, v, form, &c, &a, &b, g, has_bias, M, N, K);
    vkt_view zeros, s;
    VKT_ASSERT(base && !base->pad && (!e || !p.c || e->mode == VKT_MM_EPI_FORWARD));
    if (!vkt_ops_scratch(ops, p.bytes, &zeros, &s)) {
        record_variant(cmd, ops, named("scalar-r8c8-g4"), form, c, a, b, bv, has_bias, beta, g, M,
                       N, K, e, NULL, label);
        return;
    }
    vkt_cmd_barrier(cmd); // the scratch's last user (this or another padded product) is done
    // Each staged operand as the rows x cols it is stored as (TN's a and NT's b hold k across).
    bool ta = form == VKT_MM_TN, tb = form == VKT_MM_NT;
    vkt_view ap = a, bp = b, cp = c, biasp = bv;
    if (p.a)
        ap = stage(cmd, zeros, a, g->lda, g->a_off, ta ? K : M, ta ? M : K, s, p.a_at,
                   ta ? p.K : p.M, ta ? p.M : p.K, label);
    if (p.b)
        bp = stage(cmd, zeros, b, g->ldb, g->b_off, tb ? N : K, tb ? K : N, s, p.b_at,
                   tb ? p.N : p.K, tb ? p.K : p.N, label);
    if (p.c && beta != 0.0f)
        stage(cmd, zeros, c, g->ldc, g->c_off, M, N, s, p.c_at, p.M, p.N, label);
    if (p.c) cp = vkt_view_sub(s, p.c_at, 4ull * p.M * p.N);
    if (p.bias) biasp = stage(cmd, zeros, bv, N, g->bias_off, 1, N, s, p.bias_at, 1, p.N, label);
    vkt_cmd_barrier(cmd);
    record_variant(cmd, ops, base, form, cp, ap, bp, biasp, has_bias, beta, &p.g, p.M, p.N, p.K, e,
                   NULL, label);
    if (!p.c) return;
    vkt_cmd_barrier(cmd);
    vkt_cmd_copy_rows(cmd, cp, 4ull * p.N,
                      vkt_view_sub(c, 4ull * g->c_off, 4ull * ((uint64_t)(M - 1) * g->ldc + N)),
                      4ull * g->ldc, M, 4ull * N, label);
}

// The host's L2 and L3 (0: not given; vkt_host_cache_bytes: sysfs, else sysconf), read once.
static pthread_once_t g_caches_once = PTHREAD_ONCE_INIT;
static uint64_t g_l2, g_l3;
static void read_caches(void) {
    g_l2 = vkt_host_cache_bytes(2);
    g_l3 = vkt_host_cache_bytes(3);
}

// Whether matmul_wide.glsl's grid walks the column groups fastest (vkt_matmul_push.n_fast). The
// workgroups run in grid order, x fastest: with x the row tiles (0), consecutive workgroups share
// b's columns (a panel of K x WG TC floats) and a sweep of x reads all of a (M x K), once per
// column group; with x the column groups, they share a's TM rows and a sweep reads all of b. On a
// CPU driver that re-read comes from the L2 only when the operand fits in it: the rows first where
// a does (fashion_mlp's products, a at most 401 KB: measured 5% slower the other way at its first
// layer's forward), the columns first where it does not (the square products from 1024, where b
// does not fit either and the 32-row panel of a is the smaller one to keep), except:
// - under the optimizer epilogue, whose reads and writes of the parameters and momentum went 3%
//   slower with the columns first (fashion_mlp's first weight gradient at batch 512, traced three
//   times);
// - in NN, where a and b together are more than half the L3, b is more than the L2 and b's panel
//   fits in three quarters of it: there the columns-first sweep reads b from memory, k-strided (a
//   few cache lines per row of b, a row apart: nothing a prefetcher follows), where the rows-first
//   one reads a's rows in k order, fewer bytes a workgroup (a's TM rows against b's WG TC
//   columns). (Where b fits in the L2, the columns first read a once and b from the L2:
//   char_gpt's NN 16384 x 128 x 256 at batch 128.) On a Zen 4 (L2 1 MiB, L3 32 MiB) with the
//   32 x 8 tile, rows first ran NN 1536^3, 2048^3 and 3072^3 10-25% faster (faster in 12 of 13
//   alternating pairs) and 1024^3 (8 MiB of operands) 11% slower; NT and TN, whose reads the
//   other way are no better, level or slower. On a Zen 2 (L2 512 KiB) 2048^3 ran 5% slower rows
//   first: b's panel, 512 KiB, was the whole L2 (docs/PERFORMANCE.md, tenth and nineteenth
//   passes).
// GPUs keep the rows first: not measured. A cache size the host does not give counts as 512 KiB
// (L2) and 32 MiB (L3).
static uint32_t n_fast(const vkt_device_info *d, const mm_variant *v, const mm_epi_args *e,
                       vkt_mm_form form, uint32_t M, uint32_t N, uint32_t K) {
    if (!is_cpu(d) || v->kind != MM_WIDE || v->ss || e->mode == VKT_MM_EPI_SGD) return 0;
    pthread_once(&g_caches_once, read_caches);
    uint64_t l2 = g_l2 ? g_l2 : 512 * 1024, l3 = g_l3 ? g_l3 : 32ull << 20;
    if (4ull * M * K <= l2) return 0;
    uint64_t b = 4ull * K * N, b_panel = 4ull * K * v->wg * v->tc;
    return !(form == VKT_MM_NN && 4ull * M * K + b > l3 / 2 && b > l2 && 4 * b_panel <= 3 * l2);
}

// Records variant v (already chosen: it fits the shape, the views, the layout g and, with e, has
// the epilogue).
static void record_variant(vkt_cmd *cmd, vkt_ops *ops, const mm_variant *v, vkt_mm_form form,
                           vkt_view c, vkt_view a, vkt_view b, vkt_view bv, bool has_bias,
                           float beta, const mm_geom *g, uint32_t M, uint32_t N, uint32_t K,
                           const mm_epi_args *e, const vkt_view *cs, const char *label) {
    if (v->pad) {
        record_padded(cmd, ops, v, form, c, a, b, bv, has_bias, beta, g, M, N, K, e, label);
        return;
    }
    VKT_ASSERT(!e || has_epilogue(v));
    VKT_ASSERT(!e || e->mode != VKT_MM_EPI_SGD || has_sgd(v));
    mm_epi_args none = {VKT_ACT_CODE_NONE, VKT_MM_EPI_FORWARD, 0.0f, a, c, 0.0f, 0.0f, 0};
    if (!e) e = &none;
    VKT_ASSERT(!cs || colsum_in_kernel(v, form, cs));
    vkt_kernel_key key, plain;
    const vkt_device_info *dinfo = vkt_device_get_info(vkt_ops_device(ops));
    variant_key(vkt_ops_device(ops), v, form, e->act_code, e->mode, e->sgd_mode, M, N, K, &key);
    if (cs) key.spec[VKT_SPEC_MM_COLSUM] = 1, key.nspec = key.nspec > 10 ? key.nspec : 10;
    if (v->kind == MM_NARROW && !texel_view_ok(dinfo, &a))
        key.spec[VKT_SPEC_MM_A_TEXEL] = 0; // a as floats
    plain = key; // a K-split's chunks before the last: the same shader, no epilogue
    plain.spec[7] = VKT_ACT_CODE_NONE;
    plain.spec[8] = VKT_MM_EPI_FORWARD;
    int nbind = has_epilogue(v) ? 6 : 4;
    // The texel-read kernels read s as texels (binding 7), the one with the optimizer epilogue c
    // too (binding 6); they add a's column sums to binding 8 (unused: c).
    if (v->texel) nbind = 9;
    vkt_kernel *k = vkt_ops_kernel(ops, key.shader, key.spec, key.nspec);
    if (!k) return; // reported by vkt_ops_status

    uint32_t rows = v->kind == MM_TILED ? v->wg * v->tm : v->tm; // per workgroup
    uint32_t gx = (M + rows - 1) / rows;
    uint32_t gy =
        (uint32_t)(((uint64_t)N + (uint64_t)v->wg * v->tc - 1) / ((uint64_t)v->wg * v->tc));
    // Binding 7: s as texels in the texel kernels (the momentum buffer, or the s an activation
    // epilogue reads), else b's texel view, unread (bound to c elsewhere, unread).
    bool reads_s = e->mode == VKT_MM_EPI_GRAD_X || e->mode == VKT_MM_EPI_GRAD_Y;
    vkt_view unread7 = v->texel ? b : c;
    vkt_view bind[9] = {
        c, a, b, bv, e->s, e->z, c, e->sgd_mode || reads_s ? e->s : unread7, cs ? *cs : c};
    vkt_view bind_plain[9] = {c, a, b, bv, a, c, c, unread7, c};
    if (v->kind == MM_NARROW) {
        // matmul_narrow.glsl: NT one row per lane; TN and NN four columns per lane, NN tm rows
        // per workgroup. a as texels (binding 1) in NT only; in NN and TN a is read as floats,
        // out of its texel view at binding 8 where it is whole texels (VKT_SPEC_MM_A_TEXEL), else
        // from binding 6 (binding 8 then holds b's texel view, unread), and binding 1 holds b's
        // texel view, unread, or in NN the s that an epilogue reads.
        uint32_t cols = 4 * v->wg;
        gx = form == VKT_MM_NT ? (M + v->wg - 1) / v->wg : form == VKT_MM_TN ? 1 : gx;
        gy = form == VKT_MM_NT ? 1 : (N + cols - 1) / cols;
        if (form != VKT_MM_NT) bind[1] = bind_plain[1] = b;
        // NN reads the epilogue's s as texels at binding 1 (narrow_fits checked the view).
        if (form == VKT_MM_NN && reads_s) bind[1] = e->s;
        bind[6] = bind_plain[6] = a;
        bind[7] = cs ? *cs : c; // a's column sums (TN)
        bind_plain[7] = c;
        bind[8] = bind_plain[8] = form != VKT_MM_NT && key.spec[VKT_SPEC_MM_A_TEXEL] ? a : b;
        nbind = 9;
    }
    // A K-split runs its chunks in order, each adding onto c: a barrier between them. The epilogue
    // belongs to the last chunk; the others run the plain kernel.
    uint32_t kc = k_per_dispatch(v, K);
    for (uint32_t k0 = 0; k0 < K; k0 += kc) {
        uint32_t k1 = K - k0 > kc ? k0 + kc : K;
        bool last = k1 == K;
        vkt_kernel *kk = last ? k : vkt_ops_kernel(ops, plain.shader, plain.spec, plain.nspec);
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
            .lda = g->lda,
            .ldb = g->ldb,
            .ldc = g->ldc,
            .a_off = g->a_off,
            .b_off = g->b_off,
            .c_off = g->c_off,
            .x_off = g->x_off,
            .bias_off = g->bias_off,
            .n_fast = n_fast(dinfo, v, e, form, M, N, k1 - k0),
            .bits = {0, 1},
        };
        if (k0 > 0) vkt_cmd_barrier(cmd);
        vkt_cmd_dispatch(cmd, kk, last ? bind : bind_plain, nbind, &push, sizeof push,
                         push.n_fast ? gy : gx, push.n_fast ? gx : gy, 1, label);
    }
}
