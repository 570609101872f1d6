// vkt_abi.h: the header that C and GLSL share (with the *_abi.h of the ops beside it, which include
// it). Push-constant layouts and the specialization
// constant ids live here so that the host and the shaders can never disagree about them.
//
// GLSL sees it with VKT_GLSL defined (glslc -DVKT_GLSL=1); C sees plain structs. Every member is
// 4 bytes (no vec3, no 8-byte types), so the C layout equals the std430 layout of a push-constant
// block. Use one struct per shader:  layout(push_constant) uniform PC { vkt_axpy_push p; };
#ifndef VKT_ABI_H
#define VKT_ABI_H

#ifdef VKT_GLSL
#define VKT_U32 uint
#define VKT_I32 int
#define VKT_F32 float
#define VKT_STRUCT(name) struct name
#else
#include <stdint.h>
#define VKT_U32 uint32_t
#define VKT_I32 int32_t
#define VKT_F32 float
#define VKT_STRUCT(name) \
    typedef struct name name; \
    struct name
#endif

// Specialization constant ids: 0..2 are always the workgroup size (local_size_x_id = 0, ...);
// kernel-specific constants start at VKT_SPEC_USER.
#define VKT_SPEC_LOCAL_X 0
#define VKT_SPEC_LOCAL_Y 1
#define VKT_SPEC_LOCAL_Z 2
#define VKT_SPEC_USER 3

// The largest push-constant block any shader may use (the Vulkan minimum guarantee).
#define VKT_MAX_PUSH_BYTES 128

// y[i] = a * x[i] + y[i] for i < n. Bindings: 0 = x (n floats), 1 = y (n floats).
VKT_STRUCT(vkt_axpy_push) {
    VKT_U32 n;
    VKT_F32 a;
};

// peak_fma_c<C>u<U> (peak_fma.glsl): out[i] = sum of C chains of iters * U FMAs, for i < n.
// Binding 0 = out. Flops per invocation: 2 * C * U * iters.
VKT_STRUCT(vkt_peak_fma_push) {
    VKT_U32 n;
    VKT_U32 iters;
    VKT_F32 a;
    VKT_F32 b;
};

// ---- Training ops of engine/ops/ops_nn.c. In every struct below the first member is the number of
// units (elements or rows) that one dispatch covers: ops_nn.c splits views larger than a
// device's maxStorageBufferRange into several dispatches and rewrites only that member.

// bias_add: y[R,N] += bias[N]. bias_grad: db[N] += column sums of dy[R,N].
VKT_STRUCT(vkt_bias_push) {
    VKT_U32 R;
    VKT_U32 N;
};

// act: y = f(x) or dx = dy * f'(x) over n elements; alpha is leaky_relu's negative slope.
VKT_STRUCT(vkt_act_push) {
    VKT_U32 n;
    VKT_F32 alpha;
};

// softmax_xent (C = classes), mse (C = N columns), accuracy: B rows of C.
VKT_STRUCT(vkt_rows_push) {
    VKT_U32 B;
    VKT_U32 C;
    VKT_F32 grad_scale;
};

// sumsq: out[0] += sum x^2. scale: g *= s. clip_scale: g *= min(1, s / (sqrt(sumsq[0]) + 1e-6)).
VKT_STRUCT(vkt_scale_push) {
    VKT_U32 n;
    VKT_F32 s;
};

// sgd (torch.optim.SGD, dampening 0); mode 0 = no momentum, 1 = momentum, 2 = nesterov.
VKT_STRUCT(vkt_sgd_push) {
    VKT_U32 n;
    VKT_F32 lr;
    VKT_F32 momentum;
    VKT_F32 weight_decay;
    VKT_U32 mode;
};

// adamw (torch.optim.AdamW): decay = 1 - lr*wd, step_size = lr / (1 - beta1^t),
// bc2_sqrt = sqrt(1 - beta2^t), computed on the host in double precision.
VKT_STRUCT(vkt_adamw_push) {
    VKT_U32 n;
    VKT_F32 beta1;
    VKT_F32 beta2;
    VKT_F32 eps;
    VKT_F32 decay;
    VKT_F32 step_size;
    VKT_F32 bc2_sqrt;
};

// ---- Activation codes (shaders/act_fn.glsl), shared by the act_* kernels and the matmul
// epilogue. They equal vkt_act's values (ops.h; matmul.c asserts it); NONE is the matmul's plain
// epilogue.
#define VKT_ACT_CODE_RELU 0
#define VKT_ACT_CODE_LEAKY_RELU 1
#define VKT_ACT_CODE_GELU 2
#define VKT_ACT_CODE_TANH 3
#define VKT_ACT_CODE_SIGMOID 4
#define VKT_ACT_CODE_NONE 5

// ---- Matmul (engine/ops/matmul.c, the matmul_* kernels): c[M,N] = op(a) op(b) (+ bias[N])
// (+ beta * c) over k in [k_begin, k_end). Bindings: 0 = c, 1 = a, 2 = b, 3 = bias (any valid view
// when has_bias is 0), 4 = s[M,N] (read by the backward epilogues), 5 = z[M,N] (written by the
// forward epilogue that keeps the pre-activation); unused bindings get any valid view (the host
// binds a to 4 and c to 5, which the dispatch reads and writes anyway). Specialization constants
// from VKT_SPEC_USER: the form (VKT_MM_FORM_*), then the tile (matmul_wide.glsl, matmul_tiled.comp;
// the scalar kernel ignores ids VKT_SPEC_USER + 1..3), then the epilogue (mm_epilogue.glsl):
// the activation code (VKT_ACT_CODE_*) and the mode (VKT_MM_EPI_*). A dispatch with k_begin > 0
// continues a K-split: it adds onto c and adds no bias.
// Layout: op(a)[m,k] = a[a_off + m lda + k] (NN, NT) or a[a_off + k lda + m] (TN); op(b)[k,n] =
// b[b_off + k ldb + n] (NN, TN) or b[b_off + n ldb + k] (NT); c[m,n] = c[c_off + m ldc + n], and
// s and z the same with x_off; bias[n] = bias[bias_off + n]. All in floats from the start of each
// binding: a product bound whole has lda = K (TN: M), ldb = N (NT: K), ldc = N and offsets 0;
// engine/ops/matmul.c binds blocks of a larger product with the whole product's strides.
#define VKT_MM_FORM_NN 0
#define VKT_MM_FORM_NT 1
#define VKT_MM_FORM_TN 2
#define VKT_SPEC_MM_ACT (VKT_SPEC_USER + 4)
#define VKT_SPEC_MM_EPI (VKT_SPEC_USER + 5)
// TN, the kernels that can (matmul_wide.glsl's texel kernels, matmul_narrow.glsl): nonzero adds
// a's column sums to the binding after the kernel's others (col_sum[m] += sum over k of a[k, m],
// k in order from 0: a dense layer's bias gradient), in the first column of workgroups.
#define VKT_SPEC_MM_COLSUM (VKT_SPEC_USER + 6)
// matmul_narrow.glsl, NN and TN: nonzero reads a's floats out of vec4 texels (binding 8, a view of
// whole texels), zero as floats from binding 6 (any view).
#define VKT_SPEC_MM_A_TEXEL (VKT_SPEC_USER + 7)
// matmul_wide.glsl with 8-float pieces (MM_F64): nonzero writes each piece as one dvec4 (four
// 64-bit components), zero as two vec4s.
#define VKT_SPEC_MM_STORE64 (VKT_SPEC_USER + 8)
// matmul_wide.glsl: k steps of the piece width per iteration of the k loop (1 or 2); the host
// sets 2 only where every dispatch's k range is a multiple of twice the piece width.
#define VKT_SPEC_MM_KSTEPS (VKT_SPEC_USER + 9)
// matmul_wide.glsl's texel kernels with one 8-float piece per lane and the SGD epilogue: nonzero
// writes the parameters and the momentum by subgroup-uniform stores, one lane's piece at a time
// at an address made of push constants (vkt_matmul_push.bits), which lavapipe issues as plain
// stores instead of its loop over the lanes. The host sets it on lavapipe only, where M is a
// multiple of the tile's rows and there is a momentum buffer (matmul_wide.glsl says why).
#define VKT_SPEC_MM_USTORE (VKT_SPEC_USER + 10)
#define VKT_MM_EPI_FORWARD 0   // c = f(z)
#define VKT_MM_EPI_FORWARD_Z 1 // c = f(z), and z -> binding 5
#define VKT_MM_EPI_GRAD_X 2    // c = z * f'(x), x = s (binding 4) the activation's input
#define VKT_MM_EPI_GRAD_Y 3    // c = z * f'(x) from y = s = f(x), the activation's output
// c holds a parameter tensor P and z = its gradient: one SGD step on P (torch.optim.SGD,
// dampening 0) with lr = alpha, momentum, weight_decay and sgd_mode (0: no momentum, 1: momentum,
// 2: nesterov); the momentum buffer is read through binding 4 and written through binding 5 (the
// same view). Only the wide kernel (matmul_wide.glsl) has it; the activation stays ACT_NONE.
#define VKT_MM_EPI_SGD 4
VKT_STRUCT(vkt_matmul_push) {
    VKT_U32 m;
    VKT_U32 n;
    VKT_U32 k;
    VKT_U32 k_begin;
    VKT_U32 k_end;
    VKT_U32 has_bias;
    VKT_F32 beta;
    VKT_F32 alpha; // the epilogue's leaky_relu slope; VKT_MM_EPI_SGD: the learning rate
    VKT_F32 momentum;     // VKT_MM_EPI_SGD only
    VKT_F32 weight_decay; // VKT_MM_EPI_SGD only
    VKT_U32 sgd_mode;     // VKT_MM_EPI_SGD only: 0 plain, 1 momentum, 2 nesterov
    // The layout (above): row strides and the offsets of element (0, 0), in floats.
    VKT_U32 lda;
    VKT_U32 ldb;
    VKT_U32 ldc; // also s's and z's
    VKT_U32 a_off;
    VKT_U32 b_off;
    VKT_U32 c_off;
    VKT_U32 x_off; // s (binding 4) and z (binding 5)
    VKT_U32 bias_off;
    // matmul_wide.glsl: the grid's x walks the column groups and y the row tiles (set by the
    // host where a does not fit in the CPU's L2, engine/ops/matmul.c); 0: x the row tiles.
    VKT_U32 n_fast;
    // {0, 1}: matmul_wide.glsl (VKT_SPEC_MM_USTORE) reads a workgroup's tile index out of these bits
    // so that the compiler sees a store address made of push constants.
    VKT_U32 bits[2];
};

#endif
