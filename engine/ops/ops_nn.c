// ops_nn.c: the training ops of ops.h other than matmul: bias add and gradient, activations,
// softmax cross-entropy, MSE, accuracy, sum of squares, gradient clipping, scaling, axpy, SGD and
// AdamW. Each op picks its workgroup shape from the device's limits, takes its kernel from the
// per-device cache (ops.c) and records one dispatch, or one per slice when a view is larger than
// the device's maxStorageBufferRange (128 MiB on lavapipe): the slices of an elementwise op are
// independent; those of an accumulating op (bias_grad, sumsq, accuracy) get a barrier between
// them. No other op records a barrier.
//
// Shapes are checked against the views with VKT_ASSERT: a view too small for its shape is a bug
// in the engine's layer code, not something a user can cause. The kernel shapes follow rules
// measured on lavapipe and SwiftShader (docs/PERFORMANCE.md, "The other kernels"); nothing
// here times kernels at run time, and no op is fused with another (matmul.c fuses activations
// into the product before them).
#include <math.h>
#include <string.h>

#include "ops.h"
#include "ops_limits.h"
#include "vkt_abi.h"
#include "vkt_internal.h"
#include "vkt_shaders.h"

// Rows of more columns than this get a team of lanes each (rows.glsl ROW_MODE 1); narrower rows
// get an invocation each, which wastes no lanes on C = 10 classes.
#define ROW_TEAM_MIN_COLS 32u
// Floats per invocation of the elementwise shaders: EW_K = 4 vec4s (shaders/ew.glsl).
#define EW_FLOATS 16u
// sumsq.comp: vec4s per lane per block (its KS), and the most workgroups.
#define SUMSQ_KS 8u
#define SUMSQ_GROUPS 256u

// ---------------------------------------------------------------------------------------------
// Workgroup shapes from the device's limits

static const vkt_device_info *info_of(vkt_ops *ops) {
    return vkt_device_get_info(vkt_ops_device(ops));
}

// Invocations of a 1-D workgroup: 256, or fewer where the device allows fewer. lavapipe allows
// 1024 but gains little from it on elementwise ops (each workgroup is one thread's batch of work
// either way), and 256 keeps bias_grad's shared-memory reduction short.
uint32_t vkt_ops_wg_1d(vkt_ops *ops) {
    const vkt_device_info *d = info_of(ops);
    uint32_t wg = 256;
    if (d->max_workgroup_invocations < wg) wg = d->max_workgroup_invocations;
    if (d->max_workgroup_size[0] < wg) wg = d->max_workgroup_size[0];
    return wg;
}

// Whether the device's compute shaders have subgroupShuffleXor (rows.glsl ROW_MODE 1,
// sumsq.comp).
bool vkt_ops_has_shuffle(vkt_ops *ops) { return info_of(ops)->subgroup_shuffle; }

static vkt_kernel *kernel_1d(vkt_ops *ops, vkt_shader_id shader, uint32_t wg, uint32_t u3,
                             uint32_t u4, int nuser) {
    uint32_t spec[5] = {wg, 1, 1, u3, u4};
    return vkt_ops_kernel(ops, shader, spec, 3 + nuser);
}

// ---------------------------------------------------------------------------------------------
// Dispatch over units (elements or rows), sliced to the device's storage-buffer range

// One buffer of an op. unit_elems > 0: the view holds `unit_elems` 4-byte words per unit and is
// sliced with the units. unit_elems == 0: the first fixed_elems words are bound whole to every
// slice (a bias, a scalar, a counter).
typedef struct nn_arg {
    vkt_view v;
    uint32_t unit_elems;
    uint32_t fixed_elems;
} nn_arg;

typedef struct nn_grid {
    uint32_t units;         // elements or rows in all
    uint32_t grid_per_unit; // grid positions per unit (N for bias_add, else 1)
    uint32_t per_group;     // grid positions per workgroup
    uint32_t fixed_groups;  // when nonzero: this many workgroups per slice (bias_grad)
    bool accumulates;       // slices add into the same output: barrier between them
} nn_grid;

#define MAX_ARGS 12

// Records the op. The first uint32 of push is the units of the dispatch; it is rewritten for
// each slice (see vkt_abi.h).
static void nn_dispatch(vkt_cmd *cmd, vkt_ops *ops, vkt_kernel *k, const nn_arg *args, int nargs,
                        void *push, uint32_t push_size, nn_grid g, const char *label) {
    if (!k || g.units == 0) return; // a kernel that did not build is reported by vkt_ops_status
    VKT_ASSERT(nargs <= MAX_ARGS && push_size >= 4);
    const vkt_device_info *d = info_of(ops);
    uint64_t range = d->max_storage_buffer_range;
    // Slices start on a multiple of 4 floats too, for the vec4 bindings of ew.glsl.
    uint64_t align_words = d->min_storage_buffer_offset_alignment / 4;
    if (align_words < 4) align_words = 4;
    // Units per slice: the largest that keeps every sliced binding within the range, a multiple
    // of the offset alignment (in words) so that every slice's offset stays aligned.
    uint64_t chunk = g.units;
    for (int i = 0; i < nargs; i++) {
        const nn_arg *a = &args[i];
        uint64_t need = 4ull * (a->unit_elems ? (uint64_t)a->unit_elems * g.units : a->fixed_elems);
        VKT_ASSERT(a->v.size >= need); // the view must hold the op's shape
        if (a->unit_elems == 0) {
            VKT_ASSERT(need <= range);
            continue;
        }
        uint64_t fit = range / (4ull * a->unit_elems);
        if (fit < chunk) chunk = fit / align_words * align_words;
    }
    VKT_ASSERT(chunk > 0);
    const uint32_t *maxc = d->max_workgroup_count;
    for (uint64_t u0 = 0; u0 < g.units; u0 += chunk) {
        uint64_t nu = g.units - u0 < chunk ? g.units - u0 : chunk;
        vkt_view bind[MAX_ARGS];
        for (int i = 0; i < nargs; i++) {
            const nn_arg *a = &args[i];
            bind[i] = a->v;
            if (a->unit_elems) {
                bind[i].offset += 4ull * a->unit_elems * u0;
                bind[i].size = 4ull * a->unit_elems * nu;
            } else {
                bind[i].size = 4ull * a->fixed_elems;
            }
        }
        uint64_t groups = g.fixed_groups ? g.fixed_groups
                                         : (nu * g.grid_per_unit + g.per_group - 1) / g.per_group;
        // Fold the workgroups into y: maxComputeWorkGroupCount[0] is only 65535 on many devices.
        uint64_t gx = groups < maxc[0] ? groups : maxc[0];
        uint64_t gy = (groups + gx - 1) / gx;
        VKT_ASSERT(gy <= maxc[1] && nu * g.grid_per_unit <= UINT32_MAX);
        uint32_t units32 = (uint32_t)nu;
        memcpy(push, &units32, 4);
        if (u0 > 0 && g.accumulates) vkt_cmd_barrier(cmd);
        vkt_cmd_dispatch(cmd, k, bind, nargs, push, push_size, (uint32_t)gx, (uint32_t)gy, 1,
                         label);
    }
}

// An elementwise op over n floats, EW_FLOATS per invocation (ew.glsl).
static nn_grid grid_elems(uint32_t n, uint32_t wg) {
    return (nn_grid){.units = n, .grid_per_unit = 1, .per_group = wg * EW_FLOATS};
}

// Whether an op reads its inputs (views v[0..nv), n floats each at most) through uniform texel
// buffers of vec4 texels: the optimizers (sgd_texel, adamw_texel: the whole vec4s) and the bias
// gradient (bias_grad_texel). On lavapipe a storage-buffer load is a loop over the 8 lanes with a
// branch per lane and component and a texel fetch a branch-free gather (engine/ops/matmul.c):
// fashion_mlp's SGD step and bias gradients take a quarter to two thirds less time through texel
// buffers (docs/PERFORMANCE.md, "Training step"). Other drivers keep the storage-buffer
// kernels: SwiftShader allows only 65536 texels per view, and on GPUs a storage load is cheap. The
// texel views must be whole texels (n % 4 == 0, so every slice nn_dispatch makes is too), aligned,
// and within maxTexelBufferElements.
static bool texel_reads(vkt_ops *ops, const vkt_view *v, int nv, uint64_t n) {
    const vkt_device_info *d = info_of(ops);
    if (d->driver_id != VK_DRIVER_ID_MESA_LLVMPIPE || n % 4) return false;
    if (n / 4 > d->max_texel_buffer_elements) return false;
    for (int i = 0; i < nv; i++)
        if (!vkt_texel_offset_ok(d, v[i].offset)) return false;
    return true;
}

// The two bindings (float[] and vec4[]) of one array of an ew.glsl shader.
#define EW_ARG(view)                                                                               \
    {(view), 1, 0}, { (view), 1, 0 }

// ---------------------------------------------------------------------------------------------
// Bias

void vkt_op_bias_add(vkt_cmd *cmd, vkt_ops *ops, vkt_view y, vkt_view bias, uint32_t R, uint32_t N,
                     const char *label) {
    if (N == 0) return;
    uint32_t wg = vkt_ops_wg_1d(ops);
    vkt_kernel *k = kernel_1d(ops, VKT_SHADER_BIAS_ADD, wg, 0, 0, 0);
    nn_arg args[2] = {{bias, 0, N}, {y, N, 0}};
    vkt_bias_push p = {.R = R, .N = N};
    nn_dispatch(cmd, ops, k, args, 2, &p, sizeof p,
                (nn_grid){.units = R, .grid_per_unit = N, .per_group = wg}, label);
}

void vkt_op_bias_grad(vkt_cmd *cmd, vkt_ops *ops, vkt_view db, vkt_view dy, uint32_t R, uint32_t N,
                      const char *label) {
    if (N == 0) return;
    vkt_view tv[2] = {dy, db};
    if (N % 4 == 0 && db.offset % 16 == 0 && texel_reads(ops, tv, 2, (uint64_t)R * N)) {
        // A lane per 4 columns, 32 lanes per workgroup (fashion_mlp's 512 and 256 columns give
        // 4 and 2 workgroups for lavapipe's 2 threads).
        uint32_t wg = 32;
        vkt_kernel *k = kernel_1d(ops, VKT_SHADER_BIAS_GRAD_TEXEL, wg, 0, 0, 0);
        nn_arg args[2] = {{dy, N, 0}, {db, 0, N}};
        vkt_bias_push p = {.R = R, .N = N};
        nn_dispatch(
            cmd, ops, k, args, 2, &p, sizeof p,
            (nn_grid){.units = R, .fixed_groups = (N / 4 + wg - 1) / wg, .accumulates = true},
            label);
        return;
    }
    // TX columns (at least a subgroup's worth, for neighbouring reads) by TY row slices.
    uint32_t wg = vkt_ops_wg_1d(ops), tx = 8;
    while (tx < N && tx < 64 && tx < wg)
        tx *= 2;
    uint32_t ty = wg / tx;
    const vkt_device_info *d = info_of(ops);
    if (ty > d->max_workgroup_size[1]) ty = d->max_workgroup_size[1];
    uint32_t spec[3] = {tx, ty, 1};
    vkt_kernel *k = vkt_ops_kernel(ops, VKT_SHADER_BIAS_GRAD, spec, 3);
    nn_arg args[2] = {{dy, N, 0}, {db, 0, N}};
    vkt_bias_push p = {.R = R, .N = N};
    nn_dispatch(cmd, ops, k, args, 2, &p, sizeof p,
                (nn_grid){.units = R, .fixed_groups = (N + tx - 1) / tx, .accumulates = true},
                label);
}

// ---------------------------------------------------------------------------------------------
// Activations

// The act_<name>_<fwd|bwd|bwdy> kernels (act.glsl, one each: see there for why). which: 0
// forward, 1 backward from the input, 2 backward from the output (none for gelu).
static vkt_shader_id act_shader(vkt_act act, int which) {
    static const vkt_shader_id ids[][3] = {
        [VKT_ACT_RELU] = {VKT_SHADER_ACT_RELU_FWD, VKT_SHADER_ACT_RELU_BWD,
                          VKT_SHADER_ACT_RELU_BWDY},
        [VKT_ACT_LEAKY_RELU] = {VKT_SHADER_ACT_LEAKY_RELU_FWD, VKT_SHADER_ACT_LEAKY_RELU_BWD,
                                VKT_SHADER_ACT_LEAKY_RELU_BWDY},
        [VKT_ACT_GELU] = {VKT_SHADER_ACT_GELU_FWD, VKT_SHADER_ACT_GELU_BWD, VKT_SHADER_COUNT},
        [VKT_ACT_TANH] = {VKT_SHADER_ACT_TANH_FWD, VKT_SHADER_ACT_TANH_BWD,
                          VKT_SHADER_ACT_TANH_BWDY},
        [VKT_ACT_SIGMOID] = {VKT_SHADER_ACT_SIGMOID_FWD, VKT_SHADER_ACT_SIGMOID_BWD,
                             VKT_SHADER_ACT_SIGMOID_BWDY},
        [VKT_ACT_GELU_ERF] = {VKT_SHADER_ACT_GELU_ERF_FWD, VKT_SHADER_ACT_GELU_ERF_BWD,
                              VKT_SHADER_COUNT},
    };
    VKT_ASSERT((unsigned)act < sizeof ids / sizeof *ids && ids[act][which] != VKT_SHADER_COUNT);
    return ids[act][which];
}

bool vkt_act_grad_from_output(vkt_act act, float alpha) {
    switch (act) {
    case VKT_ACT_RELU:
    case VKT_ACT_TANH:
    case VKT_ACT_SIGMOID: return true;
    case VKT_ACT_LEAKY_RELU: return alpha >= 0.0f;
    case VKT_ACT_GELU:
    case VKT_ACT_GELU_ERF: return false;
    }
    return false;
}

void vkt_op_act_forward(vkt_cmd *cmd, vkt_ops *ops, vkt_act act, float alpha, vkt_view y,
                        vkt_view x, uint32_t n, const char *label) {
    uint32_t wg = vkt_ops_wg_1d(ops);
    vkt_kernel *k = kernel_1d(ops, act_shader(act, 0), wg, 0, 0, 0);
    nn_arg args[6] = {EW_ARG(x), EW_ARG(x), EW_ARG(y)}; // dy (bindings 2-3) is unused forward
    vkt_act_push p = {.n = n, .alpha = alpha};
    nn_dispatch(cmd, ops, k, args, 6, &p, sizeof p, grid_elems(n, wg), label);
}

void vkt_op_act_backward(vkt_cmd *cmd, vkt_ops *ops, vkt_act act, float alpha, vkt_view dx,
                         vkt_view dy, vkt_view x, uint32_t n, const char *label) {
    uint32_t wg = vkt_ops_wg_1d(ops);
    vkt_kernel *k = kernel_1d(ops, act_shader(act, 1), wg, 0, 0, 0);
    nn_arg args[6] = {EW_ARG(x), EW_ARG(dy), EW_ARG(dx)};
    vkt_act_push p = {.n = n, .alpha = alpha};
    nn_dispatch(cmd, ops, k, args, 6, &p, sizeof p, grid_elems(n, wg), label);
}

void vkt_op_act_backward_from_output(vkt_cmd *cmd, vkt_ops *ops, vkt_act act, float alpha,
                                     vkt_view dx, vkt_view dy, vkt_view y, uint32_t n,
                                     const char *label) {
    VKT_ASSERT(vkt_act_grad_from_output(act, alpha));
    uint32_t wg = vkt_ops_wg_1d(ops);
    vkt_kernel *k = kernel_1d(ops, act_shader(act, 2), wg, 0, 0, 0);
    nn_arg args[6] = {EW_ARG(y), EW_ARG(dy), EW_ARG(dx)};
    vkt_act_push p = {.n = n, .alpha = alpha};
    nn_dispatch(cmd, ops, k, args, 6, &p, sizeof p, grid_elems(n, wg), label);
}

// ---------------------------------------------------------------------------------------------
// Losses and accuracy: row ops (rows.glsl)

// The kernel and grid of a row op over B rows of C columns. write_preds is accuracy's constant
// 5 (-1 for the other row ops, which have none).
static vkt_kernel *row_kernel(vkt_ops *ops, vkt_shader_id shader, uint32_t B, uint32_t C,
                              int write_preds, nn_grid *g) {
    uint32_t wg = vkt_ops_wg_1d(ops), team = 1;
    if (C > ROW_TEAM_MIN_COLS && vkt_ops_has_shuffle(ops)) {
        // A power of two that divides the subgroup (so that a team never straddles two) and the
        // workgroup, with about 4 or more columns per lane.
        uint32_t sg = info_of(ops)->subgroup_size, cap = sg < 32 ? sg : 32;
        while (team < cap && team < wg && team * 8 <= C)
            team *= 2;
    }
    uint32_t spec[6] = {wg, 1, 1, team > 1 ? 1 : 0, team, write_preds > 0 ? 1 : 0};
    *g = (nn_grid){.units = B, .grid_per_unit = team, .per_group = wg};
    return vkt_ops_kernel(ops, shader, spec, write_preds < 0 ? 5 : 6);
}

void vkt_op_softmax_xent(vkt_cmd *cmd, vkt_ops *ops, vkt_view loss_rows, vkt_view dlogits,
                         vkt_view logits, vkt_view labels, uint32_t B, uint32_t C, float grad_scale,
                         const char *label) {
    VKT_ASSERT(C > 0);
    nn_grid g;
    vkt_kernel *k = row_kernel(ops, VKT_SHADER_SOFTMAX_XENT, B, C, -1, &g);
    nn_arg args[4] = {{logits, C, 0}, {labels, 1, 0}, {loss_rows, 1, 0}, {dlogits, C, 0}};
    vkt_rows_push p = {.B = B, .C = C, .grad_scale = grad_scale};
    nn_dispatch(cmd, ops, k, args, 4, &p, sizeof p, g, label);
}

void vkt_op_mse(vkt_cmd *cmd, vkt_ops *ops, vkt_view loss_rows, vkt_view dpred, vkt_view pred,
                vkt_view target, uint32_t B, uint32_t N, float grad_scale, const char *label) {
    VKT_ASSERT(N > 0);
    nn_grid g;
    vkt_kernel *k = row_kernel(ops, VKT_SHADER_MSE, B, N, -1, &g);
    nn_arg args[4] = {{pred, N, 0}, {target, N, 0}, {loss_rows, 1, 0}, {dpred, N, 0}};
    vkt_rows_push p = {.B = B, .C = N, .grad_scale = grad_scale};
    nn_dispatch(cmd, ops, k, args, 4, &p, sizeof p, g, label);
}

void vkt_op_accuracy(vkt_cmd *cmd, vkt_ops *ops, vkt_view correct, const vkt_view *preds,
                     vkt_view logits, vkt_view labels, uint32_t B, uint32_t C, const char *label) {
    VKT_ASSERT(C > 0);
    nn_grid g;
    vkt_kernel *k = row_kernel(ops, VKT_SHADER_ACCURACY, B, C, preds ? 1 : 0, &g);
    g.accumulates = true; // every slice adds into correct[0]
    // Without preds, binding 3 is never written: bind the counter, which the op writes anyway,
    // so that no other buffer looks written to the synchronization validation.
    nn_arg args[4] = {{logits, C, 0},
                      {labels, 1, 0},
                      {correct, 0, 1},
                      preds ? (nn_arg){*preds, 1, 0} : (nn_arg){correct, 0, 1}};
    vkt_rows_push p = {.B = B, .C = C};
    nn_dispatch(cmd, ops, k, args, 4, &p, sizeof p, g, label);
}

// ---------------------------------------------------------------------------------------------
// Reductions and scaling

void vkt_op_sumsq(vkt_cmd *cmd, vkt_ops *ops, vkt_view out, vkt_view x, uint32_t n,
                  const char *label) {
    uint32_t wg = vkt_ops_wg_1d(ops);
    vkt_kernel *k = kernel_1d(ops, VKT_SHADER_SUMSQ, wg, vkt_ops_has_shuffle(ops) ? 1 : 0, 0, 1);
    nn_arg args[3] = {EW_ARG(x), {out, 0, 1}};
    vkt_scale_push p = {.n = n};
    // One workgroup per block of x, up to SUMSQ_GROUPS (sumsq.comp), so that few partial sums
    // are added into out[0].
    uint64_t block = 4ull * SUMSQ_KS * wg;
    uint64_t groups = ((uint64_t)n + block - 1) / block;
    if (groups > SUMSQ_GROUPS) groups = SUMSQ_GROUPS;
    nn_grid g = {.units = n, .fixed_groups = (uint32_t)groups, .accumulates = true};
    nn_dispatch(cmd, ops, k, args, 3, &p, sizeof p, g, label);
}

void vkt_op_clip_scale(vkt_cmd *cmd, vkt_ops *ops, vkt_view g, vkt_view sumsq, uint32_t n,
                       float max_norm, const char *label) {
    uint32_t wg = vkt_ops_wg_1d(ops);
    vkt_kernel *k = kernel_1d(ops, VKT_SHADER_CLIP_SCALE, wg, 0, 0, 0);
    nn_arg args[3] = {{sumsq, 0, 1}, EW_ARG(g)};
    vkt_scale_push p = {.n = n, .s = max_norm};
    nn_dispatch(cmd, ops, k, args, 3, &p, sizeof p, grid_elems(n, wg), label);
}

void vkt_op_scale(vkt_cmd *cmd, vkt_ops *ops, vkt_view g, float s, uint32_t n, const char *label) {
    uint32_t wg = vkt_ops_wg_1d(ops);
    vkt_kernel *k = kernel_1d(ops, VKT_SHADER_SCALE, wg, 0, 0, 0);
    nn_arg args[2] = {EW_ARG(g)};
    vkt_scale_push p = {.n = n, .s = s};
    nn_dispatch(cmd, ops, k, args, 2, &p, sizeof p, grid_elems(n, wg), label);
}

void vkt_op_axpy(vkt_cmd *cmd, vkt_ops *ops, vkt_view y, vkt_view x, float a, uint32_t n,
                 const char *label) {
    uint32_t wg = vkt_ops_wg_1d(ops);
    vkt_kernel *k = kernel_1d(ops, VKT_SHADER_AXPY, wg, 0, 0, 0);
    nn_arg args[2] = {{x, 1, 0}, {y, 1, 0}};
    vkt_axpy_push p = {.n = n, .a = a};
    // shaders/axpy.comp (the core's test kernel) takes one float per invocation.
    nn_dispatch(cmd, ops, k, args, 2, &p, sizeof p,
                (nn_grid){.units = n, .grid_per_unit = 1, .per_group = wg}, label);
}

void vkt_op_add(vkt_cmd *cmd, vkt_ops *ops, vkt_view z, vkt_view x, vkt_view y, float a, uint32_t n,
                const char *label) {
    uint32_t wg = vkt_ops_wg_1d(ops);
    vkt_kernel *k = kernel_1d(ops, VKT_SHADER_ADD, wg, 0, 0, 0);
    nn_arg args[6] = {EW_ARG(x), EW_ARG(y), EW_ARG(z)};
    vkt_axpy_push p = {.n = n, .a = a};
    nn_dispatch(cmd, ops, k, args, 6, &p, sizeof p, grid_elems(n, wg), label);
}

// ---------------------------------------------------------------------------------------------
// Optimizers

void vkt_op_sgd(vkt_cmd *cmd, vkt_ops *ops, vkt_view p, vkt_view g, vkt_view buf, uint32_t n,
                float lr, float momentum, float weight_decay, bool nesterov, const char *label) {
    uint32_t wg = vkt_ops_wg_1d(ops);
    // Without momentum the buffer is never touched: bind p in its place, so that buf may be
    // any view (even none) and no other buffer looks written.
    vkt_view b = momentum != 0.0f ? buf : p;
    vkt_view reads[3] = {g, p, b};
    bool tex = texel_reads(ops, reads, 3, n);
    vkt_kernel *k = kernel_1d(ops, tex ? VKT_SHADER_SGD_TEXEL : VKT_SHADER_SGD, wg, 0, 0, 0);
    nn_arg args[9] = {EW_ARG(g), EW_ARG(p), EW_ARG(b), {g, 1, 0}, {p, 1, 0}, {b, 1, 0}};
    vkt_sgd_push push = {.n = n,
                         .lr = lr,
                         .momentum = momentum,
                         .weight_decay = weight_decay,
                         .mode = momentum == 0.0f ? 0u
                                 : nesterov       ? 2u
                                                  : 1u};
    nn_dispatch(cmd, ops, k, args, tex ? 9 : 6, &push, sizeof push, grid_elems(n, wg), label);
}

void vkt_op_adamw(vkt_cmd *cmd, vkt_ops *ops, vkt_view p, vkt_view g, vkt_view m, vkt_view v,
                  uint32_t n, float lr, float beta1, float beta2, float eps, float weight_decay,
                  uint32_t step, const char *label) {
    VKT_ASSERT(step >= 1);
    uint32_t wg = vkt_ops_wg_1d(ops);
    vkt_view reads[4] = {g, p, m, v};
    bool tex = texel_reads(ops, reads, 4, n);
    vkt_kernel *k = kernel_1d(ops, tex ? VKT_SHADER_ADAMW_TEXEL : VKT_SHADER_ADAMW, wg, 0, 0, 0);
    nn_arg args[12] = {EW_ARG(g), EW_ARG(p), EW_ARG(m), EW_ARG(v),
                       {g, 1, 0}, {p, 1, 0}, {m, 1, 0}, {v, 1, 0}};
    // The bias corrections as PyTorch computes them (in double, on the host), then rounded.
    double bc1 = 1.0 - pow((double)beta1, (double)step);
    double bc2 = 1.0 - pow((double)beta2, (double)step);
    vkt_adamw_push push = {
        .n = n,
        .beta1 = beta1,
        .beta2 = beta2,
        .eps = eps,
        .decay = (float)(1.0 - (double)lr * (double)weight_decay),
        .step_size = (float)((double)lr / bc1),
        .bc2_sqrt = (float)sqrt(bc2),
    };
    nn_dispatch(cmd, ops, k, args, tex ? 12 : 8, &push, sizeof push, grid_elems(n, wg), label);
}
