// norm_ops.h: the normalisation ops of batchnorm2d and layernorm (engine/ops/norm_ops.c,
// shaders/norm_*.comp). Unlike the ops of ops.h, each records several dispatches with the
// barriers between them (statistics, then their use); the caller puts a barrier after the op.
// Shapes are row-major in floats; every view holds fp32. Parameter gradients accumulate (+=),
// as ops.h's do; the step's caller zeroes them. Reductions are deterministic (fixed orders, no
// atomics) and sliced to the device's maxStorageBufferRange; `scratch` is temporary storage
// that the op uses between its own barriers only (at least the *_scratch_bytes below).
#ifndef VKT_NORM_OPS_H
#define VKT_NORM_OPS_H

#include <stdbool.h>

#include "ops.h"

// ---------------------------------------------------------------------------------------------
// batchnorm2d, as torch.nn.BatchNorm2d(C, eps, momentum) with affine and running statistics

// Bytes of scratch the batchnorm ops need for C channels of HW floats and at most B samples.
uint64_t vkt_op_batchnorm_scratch_bytes(uint32_t C, uint32_t B, uint32_t HW);

// y[B, C, HW] = (x - mean[c]) / sqrt(var[c] + eps) * gamma[c] + beta[c]; gamma, beta,
// running_mean, running_var are [C], num_batches one float.
// train: mean and var are the batch's (biased variance over the B*HW floats of each channel,
//   B*HW >= 2); saved[2C] receives mean[c] at [c] and 1/sqrt(var + eps) at [C + c] for the
//   backward; running_mean = (1 - momentum) running_mean + momentum mean, running_var likewise
//   with the unbiased variance (B*HW / (B*HW - 1) var), num_batches += 1.
// !train: mean and var are running_mean and running_var; nothing but y is written (saved,
//   num_batches and scratch must still be valid views).
void vkt_op_batchnorm_forward(vkt_cmd *cmd, vkt_ops *ops, vkt_view y, vkt_view saved,
                              vkt_view running_mean, vkt_view running_var, vkt_view num_batches,
                              vkt_view scratch, vkt_view x, vkt_view gamma, vkt_view beta,
                              uint32_t B, uint32_t C, uint32_t HW, float eps, float momentum,
                              bool train, const char *label);

// The backward of a training forward (batch statistics) from its saved[2C] and input x[B, C, HW]:
// dbeta[c] += sum dy, dgamma[c] += sum dy * xhat over the channel's B*HW floats, and (dx not
// NULL) dx = gamma invstd / N (N dy - sum dy - xhat sum dy*xhat), N = B*HW (overwrites).
void vkt_op_batchnorm_backward(vkt_cmd *cmd, vkt_ops *ops, const vkt_view *dx, vkt_view dgamma,
                               vkt_view dbeta, vkt_view scratch, vkt_view dy, vkt_view x,
                               vkt_view saved, vkt_view gamma, uint32_t B, uint32_t C, uint32_t HW,
                               const char *label);

// The next layer's activation fused into batchnorm (engine/nn/layers/batchnorm2d.c): one whose
// derivative follows from its output (vkt_act_grad_from_output), its slope, and for the backward
// its output y[B, C, HW].
typedef struct vkt_bn_act {
    vkt_act act;
    float alpha;
    vkt_view y;
} vkt_bn_act;
// The forward with fa (NULL: as vkt_op_batchnorm_forward) writes y = f(batchnorm(x)); the
// backward with fa reads dy as that activation's output gradient and uses dy f'(fa->y) in its
// place, the floats the activation's own backward would have written (the same sums and dx,
// bit for bit).
void vkt_op_batchnorm_forward_act(vkt_cmd *cmd, vkt_ops *ops, vkt_view y, vkt_view saved,
                                  vkt_view running_mean, vkt_view running_var, vkt_view num_batches,
                                  vkt_view scratch, vkt_view x, vkt_view gamma, vkt_view beta,
                                  uint32_t B, uint32_t C, uint32_t HW, float eps, float momentum,
                                  bool train, const vkt_bn_act *fa, const char *label);
void vkt_op_batchnorm_backward_act(vkt_cmd *cmd, vkt_ops *ops, const vkt_view *dx, vkt_view dgamma,
                                   vkt_view dbeta, vkt_view scratch, vkt_view dy, vkt_view x,
                                   vkt_view saved, vkt_view gamma, uint32_t B, uint32_t C,
                                   uint32_t HW, const vkt_bn_act *fa, const char *label);

// ---------------------------------------------------------------------------------------------
// layernorm, as torch.nn.LayerNorm(D, eps) over the last dimension: R rows of D

// Bytes of scratch the layernorm backward needs for at most R rows of D.
uint64_t vkt_op_layernorm_scratch_bytes(uint32_t R, uint32_t D);

// y[R, D] = (x - mean) / sqrt(var + eps) * gamma[D] + beta[D] per row (biased variance);
// stats[2R] receives each row's mean at [2r] and 1/sqrt(var + eps) at [2r + 1].
void vkt_op_layernorm_forward(vkt_cmd *cmd, vkt_ops *ops, vkt_view y, vkt_view stats, vkt_view x,
                              vkt_view gamma, vkt_view beta, uint32_t R, uint32_t D, float eps,
                              const char *label);

// From the forward's x[R, D] and stats[2R]: dgamma[d] += sum over rows of dy * xhat,
// dbeta[d] += sum of dy, and (dx not NULL) dx = rstd (g - mean(g) - xhat mean(g xhat)) per row
// with g = dy * gamma (overwrites).
void vkt_op_layernorm_backward(vkt_cmd *cmd, vkt_ops *ops, const vkt_view *dx, vkt_view dgamma,
                               vkt_view dbeta, vkt_view scratch, vkt_view dy, vkt_view x,
                               vkt_view stats, vkt_view gamma, uint32_t R, uint32_t D,
                               const char *label);

// A float as PyTorch module text: the shortest of %.1g .. %.9g that reads back as the same
// float ("1e-05" and "0.1" for the floats nearest 1e-5 and 0.1, as torch prints them; any float
// exactly). Returns the length as snprintf does.
int vkt_norm_float_text(float v, char *buf, size_t size);

// Test hook: the ops slice as if maxStorageBufferRange were at most `bytes` (0: the device's
// own), so that a test can run the sliced paths on small tensors. Process-wide; not for use
// while another thread records these ops.
void vkt_norm_ops_test_range(uint64_t bytes);

#endif
