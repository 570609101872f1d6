// ops.h: the arithmetic of training, recorded into a command stream. Each vkt_op_* records one
// or a few dispatches (no submit, no wait) and, unless it says otherwise, NO barrier: the caller
// puts vkt_cmd_barrier between ops that depend on each other (the layer code knows which do).
//
// Shapes are row-major, in elements; every view holds fp32 unless it says uint32. A view may be
// larger than the shape needs. Backward ops that produce *parameter* gradients accumulate into
// them (+=); the optimizer step's caller zeroes them (vkt_cmd_fill). Activation gradients are
// overwritten. Kernels are built per device on first use and cached in the vkt_ops.
#ifndef VKT_OPS_H
#define VKT_OPS_H

#include "vktrain.h"

typedef struct vkt_ops vkt_ops;

vkt_status vkt_ops_create(vkt_device *dev, vkt_ops **out);
void vkt_ops_destroy(vkt_ops *ops);
vkt_device *vkt_ops_device(const vkt_ops *ops);
// The kernel for (shader, spec), built on first use. Returns NULL and sets vkt_error() when the
// pipeline cannot be built. Ops record nothing when it is NULL and report it from vkt_cmd_end
// through vkt_ops_status.
vkt_kernel *vkt_ops_kernel(vkt_ops *ops, vkt_shader_id shader, const uint32_t *spec, int nspec);
// A kernel's key in the cache: its shader and specialization constants.
typedef struct vkt_kernel_key {
    vkt_shader_id shader;
    uint32_t spec[16];
    int nspec;
} vkt_kernel_key;
// Builds the kernels of keys[0..n) that are not cached yet on up to `threads` threads at once
// (the calling one included) and caches them: for callers that know which kernels they will
// record, so that their pipelines build side by side instead of one by one at first use
// (vkCreateComputePipelines may be called from several threads on one pipeline cache). Returns
// the first failure with its message, having cached every kernel that did build.
vkt_status vkt_ops_prebuild(vkt_ops *ops, const vkt_kernel_key *keys, int n, int threads);
// The first kernel-building error since the last call (VKT_OK if none), cleared by the call.
vkt_status vkt_ops_status(vkt_ops *ops);
// The pending failure vkt_ops_status would report, left pending.
vkt_status vkt_ops_peek(const vkt_ops *ops);
// Scratch memory for an op that stages its operands (matmul.c's padded products): *out, bytes
// long, and *zeros, VKT_OPS_SCRATCH_ZEROS bytes of 0.0f that nothing writes. From the view given
// to vkt_ops_set_scratch where there is one (a network's planned staging buffer, which starts
// with those zeros); else from a buffer the ops keep for callers without a network (tests,
// benchmarks), outside any memory plan like the matmul tuning's scratch, grown as asked (a
// buffer it replaces lives until the ops are destroyed, as streams recorded earlier may use it).
// Every caller gets the same memory: an op records a barrier before it writes there. False (and
// nothing pending) where it is too small or cannot be made: the op then runs another way.
#define VKT_OPS_SCRATCH_ZEROS 256
bool vkt_ops_scratch(vkt_ops *ops, uint64_t bytes, vkt_view *zeros, vkt_view *out);
// The memory vkt_ops_scratch hands out from now on (NULL: the ops' own): its first
// VKT_OPS_SCRATCH_ZEROS bytes must hold 0.0f and never be written.
void vkt_ops_set_scratch(vkt_ops *ops, const vkt_view *v);
// Makes s with message the pending failure (unless one is already pending): for recording code
// that finds it cannot record what it was asked (a batchnorm batch with one value per channel),
// records nothing, and lets the caller's vkt_ops_status / vkt_net_status report it.
void vkt_ops_fail(vkt_ops *ops, vkt_status s, const char *message);

// The activations (engine/ops/ops_nn.c runs them on their own; matmul.c fuses them into a product).
typedef enum vkt_act {
    VKT_ACT_RELU,
    VKT_ACT_LEAKY_RELU, // slope alpha for x < 0 (PyTorch default 0.01)
    VKT_ACT_GELU,       // tanh approximation, as PyTorch's approximate='tanh'
    VKT_ACT_TANH,
    VKT_ACT_SIGMOID,
    VKT_ACT_GELU_ERF, // exact: x Phi(x) = 0.5 x (1 + erf(x / sqrt 2)), PyTorch's default
} vkt_act;

// ---------------------------------------------------------------------------------------------
// Matmul (engine/ops/matmul.c)

typedef enum vkt_mm_form {
    VKT_MM_NN, // C[M,N] = A[M,K] B[K,N]
    VKT_MM_NT, // C[M,N] = A[M,K] B[N,K]^T     (dense forward: x W^T)
    VKT_MM_TN, // C[M,N] = A[K,M]^T B[K,N]     (dense weight gradient: dy^T x)
} vkt_mm_form;

// One product's form and sizes (a layer's list of what it multiplies: bench train times these).
typedef struct vkt_mm_shape {
    vkt_mm_form form;
    uint32_t M, N, K;
} vkt_mm_shape;

// The kernels of these products run plain (dense operands at offset 0, no epilogue; a split
// product's first block), each shape's variant chosen as vkt_op_matmul chooses it (measured at
// the shape's first use): out[i] for shapes[i]. For vkt_ops_prebuild. Returns n.
int vkt_matmul_plain_keys(vkt_ops *ops, const vkt_mm_shape *shapes, int n, vkt_kernel_key *out);
// The staging memory (vkt_ops_scratch, its zeros included) a padded product of this shape may
// need on a device whose kernels pad it (a side not a multiple of 8: engine/ops/matmul.c,
// "Padded products"); 0 where it is never padded (aligned, or too large to stage). The same on
// every device, so that a network plans it before its device chooses kernels.
uint64_t vkt_matmul_pad_bytes(vkt_mm_form form, uint32_t M, uint32_t N, uint32_t K);

// c = op(a) op(b) (+ bias broadcast over rows when bias != NULL) (+ beta * c).
// beta is 0 (overwrite) or any float (beta = 1 accumulates, as a weight gradient does).
// bias is [N]. Any M, N, K >= 1.
void vkt_op_matmul(vkt_cmd *cmd, vkt_ops *ops, vkt_mm_form form, vkt_view c, vkt_view a, vkt_view b,
                   const vkt_view *bias, float beta, uint32_t M, uint32_t N, uint32_t K,
                   const char *label);

// The matmul's activation epilogue (shaders/mm_epilogue.glsl). With z = op(a) op(b) (+ bias)
// (+ beta c), what vkt_op_matmul would write:
typedef enum vkt_mm_epi {
    VKT_MM_EPI_NONE,   // c = z
    VKT_MM_EPI_ACT,    // c = f(z); with saved != NULL also *saved = z (for a backward that needs
                       // f's input: gelu, leaky_relu with a negative slope)
    VKT_MM_EPI_GRAD_X, // c = z * f'(x), x = *saved the activation's input: f's backward fused
                       // into the matmul that produces its output gradient (dX = dZ W, NN)
    VKT_MM_EPI_GRAD_Y, // the same from y = *saved = f(x), the activation's output; only where
                       // vkt_act_grad_from_output(act, alpha)
    VKT_MM_EPI_SGD,    // c holds parameters P and z is their gradient: P takes one SGD step
                       // (torch.optim.SGD, dampening 0: the same arithmetic as vkt_op_sgd) with
                       // lr = alpha, momentum, weight_decay, nesterov; *saved is the momentum
                       // buffer (read and written; NULL when momentum is 0). No bias, beta 0,
                       // act unused. Only where vkt_matmul_sgd_fits says so.
} vkt_mm_epi;

typedef struct vkt_mm_epilogue {
    vkt_mm_epi kind;
    vkt_act act;
    float alpha;           // leaky_relu's negative slope; VKT_MM_EPI_SGD: the learning rate
    const vkt_view *saved; // [M,N] as c, see kind; required by the GRAD kinds. May not overlap c.
    float momentum, weight_decay; // VKT_MM_EPI_SGD
    bool nesterov;                // VKT_MM_EPI_SGD
    // TN, with any kind (NONE included): also col_sum[m] += the sum over k of a[k, m], m < M (a's
    // column sums: a dense layer's bias gradient, a being its output gradient), summed in k
    // order, as vkt_op_bias_grad(col_sum, a, K, M) sums them where it reads texels (M a multiple
    // of 4; in another order otherwise). In the product's own dispatch where its kernel can
    // (lavapipe's texel and narrow kernels, a product of one block), else by that op after it,
    // labelled col_sum_label. a must be dense ([K, M]); col_sum (4 M bytes) may not overlap c.
    const vkt_view *col_sum;
    const char *col_sum_label;
} vkt_mm_epilogue;

// vkt_op_matmul with an activation epilogue (epi == NULL or kind NONE: exactly vkt_op_matmul).
// One dispatch (or one per K-split chunk, the epilogue in the last): the activation costs one
// pass over c in registers instead of a kernel of its own and a barrier. A product with an
// operand over maxStorageBufferRange runs as blocks of c (and K-chunks where a block's rows of a
// or b cannot be cut otherwise), one dispatch each, with a barrier between blocks whose writes
// overlap (engine/ops/matmul.c); the SGD epilogue never takes K-chunks (vkt_matmul_sgd_fits).
void vkt_op_matmul_ex(vkt_cmd *cmd, vkt_ops *ops, vkt_mm_form form, vkt_view c, vkt_view a,
                      vkt_view b, const vkt_view *bias, float beta, uint32_t M, uint32_t N,
                      uint32_t K, const vkt_mm_epilogue *epi, const char *label);
// Whether the activation epilogue runs faster on this device than the product followed by the
// separate act kernel, so that a network should fuse (engine/nn/network.c). False on SwiftShader,
// which computes every activation in every fused kernel (shaders/mm_epilogue.glsl says why).
bool vkt_matmul_epilogue_pays(vkt_ops *ops);
// Whether a product with the VKT_MM_EPI_SGD epilogue can run on these views and shape (one of the
// device's candidates implements it and fits them; buf: the momentum buffer, or NULL).
bool vkt_matmul_sgd_fits(vkt_ops *ops, vkt_mm_form form, const vkt_view *c, const vkt_view *a,
                         const vkt_view *b, const vkt_view *buf, uint32_t M, uint32_t N,
                         uint32_t K);
// VKT_OK when every comma-separated name in names (a context's matmul_variant) is a matmul
// variant, "none", "stores-dvec4" or "stores-vec4" (vkt_context_desc.matmul_variant); else
// VKT_ERR_ARG with a message naming the first that is not and listing the variants.
// vkt_ops_create checks its context's list with it.
vkt_status vkt_matmul_check_variants(const char *names);
// The variant vkt_op_matmul uses on this device for that shape (for benchmarks and logs).
const char *vkt_matmul_variant(vkt_ops *ops, vkt_mm_form form, uint32_t M, uint32_t N, uint32_t K);
// Whether a TN product of this shape (dense views, col_sum 16-byte aligned) adds
// vkt_mm_epilogue.col_sum in its own dispatch rather than by a vkt_op_bias_grad after it.
bool vkt_matmul_sums_columns(vkt_ops *ops, uint32_t M, uint32_t N, uint32_t K);
// The candidates for that shape on this device (views at offset 0) with their measured time in
// ms (0 where not measured: a single candidate, VKT_TUNE_OFF, or a matmul_variant fixed by the
// context), at most max of them; returns their number.
int vkt_matmul_candidates(vkt_ops *ops, vkt_mm_form form, uint32_t M, uint32_t N, uint32_t K,
                          const char **names, double *ms, int max);

// ---------------------------------------------------------------------------------------------
// Elementwise, reductions, losses, optimizers (engine/ops/ops_nn.c)

// y[R,N] += bias[N] for every row. y is read and written.
void vkt_op_bias_add(vkt_cmd *cmd, vkt_ops *ops, vkt_view y, vkt_view bias, uint32_t R, uint32_t N,
                     const char *label);
// db[N] += sum over rows of dy[R,N]  (accumulates).
void vkt_op_bias_grad(vkt_cmd *cmd, vkt_ops *ops, vkt_view db, vkt_view dy, uint32_t R, uint32_t N,
                      const char *label);
// y[n] = f(x[n]). y and x may be the same view.
void vkt_op_act_forward(vkt_cmd *cmd, vkt_ops *ops, vkt_act act, float alpha, vkt_view y,
                        vkt_view x, uint32_t n, const char *label);
// dx[n] = dy[n] * f'(x[n]), x the forward's input (overwrites dx; dx may alias dy).
void vkt_op_act_backward(vkt_cmd *cmd, vkt_ops *ops, vkt_act act, float alpha, vkt_view dx,
                         vkt_view dy, vkt_view x, uint32_t n, const char *label);
// Whether f'(x) is a function of y = f(x) alone: relu, tanh, sigmoid, and leaky_relu with
// alpha >= 0 (a negative slope maps x < 0 to y > 0); not gelu. Where it is, a layer fused into
// the matmul before it need not keep its input.
bool vkt_act_grad_from_output(vkt_act act, float alpha);
// The same as vkt_op_act_backward from the forward's output y = f(x) instead of its input
// (vkt_act_grad_from_output(act, alpha) must hold; the same floats as from x).
void vkt_op_act_backward_from_output(vkt_cmd *cmd, vkt_ops *ops, vkt_act act, float alpha,
                                     vkt_view dx, vkt_view dy, vkt_view y, uint32_t n,
                                     const char *label);

// Softmax cross-entropy over logits[B,C] with labels[B] (uint32 class indices, < C):
// loss_rows[b] = logsumexp(logits[b,:]) - logits[b, label[b]]  (numerically stable), and
// dlogits[B,C] = (softmax(logits) - onehot(label)) * grad_scale  (overwrites; grad_scale is
// 1/B for PyTorch's mean reduction over a whole batch of B; a shard of a larger batch uses
// 1/B_total). dlogits may not alias logits.
void vkt_op_softmax_xent(vkt_cmd *cmd, vkt_ops *ops, vkt_view loss_rows, vkt_view dlogits,
                         vkt_view logits, vkt_view labels, uint32_t B, uint32_t C, float grad_scale,
                         const char *label);
// Mean squared error of pred[B,N] against target[B,N]:
// loss_rows[b] = sum_n (pred - target)^2, dpred = 2 (pred - target) * grad_scale (overwrites;
// grad_scale = 1/(B*N) for PyTorch's mean).
void vkt_op_mse(vkt_cmd *cmd, vkt_ops *ops, vkt_view loss_rows, vkt_view dpred, vkt_view pred,
                vkt_view target, uint32_t B, uint32_t N, float grad_scale, const char *label);
// correct[0] += number of rows b with argmax(logits[b,:]) == labels[b]  (uint32, accumulates;
// ties go to the lowest index, as torch.argmax). preds[B] (uint32) receives the argmax when
// preds != NULL.
void vkt_op_accuracy(vkt_cmd *cmd, vkt_ops *ops, vkt_view correct, const vkt_view *preds,
                     vkt_view logits, vkt_view labels, uint32_t B, uint32_t C, const char *label);

// out[0] += sum x[n]^2 over n elements (a reduction; out is one float, accumulates).
void vkt_op_sumsq(vkt_cmd *cmd, vkt_ops *ops, vkt_view out, vkt_view x, uint32_t n,
                  const char *label);
// Gradient clipping as torch.nn.utils.clip_grad_norm_: with total = sqrt(sumsq[0]),
// g[n] *= min(1, max_norm / (total + 1e-6)). Reads sumsq on the device (no host round trip).
void vkt_op_clip_scale(vkt_cmd *cmd, vkt_ops *ops, vkt_view g, vkt_view sumsq, uint32_t n,
                       float max_norm, const char *label);
// g[n] *= s.
void vkt_op_scale(vkt_cmd *cmd, vkt_ops *ops, vkt_view g, float s, uint32_t n, const char *label);
// y[n] += a * x[n].
void vkt_op_axpy(vkt_cmd *cmd, vkt_ops *ops, vkt_view y, vkt_view x, float a, uint32_t n,
                 const char *label);
// z[n] = x[n] + a * y[n] (z may not alias x or y): a residual block's sum.
void vkt_op_add(vkt_cmd *cmd, vkt_ops *ops, vkt_view z, vkt_view x, vkt_view y, float a, uint32_t n,
                const char *label);

// SGD as torch.optim.SGD (dampening 0): d = g + wd*p; buf = momentum*buf + d (buf starts at 0,
// so the first step gives buf = d as PyTorch does); d = nesterov ? d + momentum*buf : buf;
// p -= lr*d. With momentum == 0, buf is not touched (may be any view).
void vkt_op_sgd(vkt_cmd *cmd, vkt_ops *ops, vkt_view p, vkt_view g, vkt_view buf, uint32_t n,
                float lr, float momentum, float weight_decay, bool nesterov, const char *label);
// AdamW as torch.optim.AdamW: p *= 1 - lr*wd; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
// p -= lr * (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps). step is t, counted from 1.
void vkt_op_adamw(vkt_cmd *cmd, vkt_ops *ops, vkt_view p, vkt_view g, vkt_view m, vkt_view v,
                  uint32_t n, float lr, float beta1, float beta2, float eps, float weight_decay,
                  uint32_t step, const char *label);

#endif
