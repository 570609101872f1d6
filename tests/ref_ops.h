// ref_ops.h: plain C references in double precision for the training ops of engine/ops/ops_nn.c
// (ops.h, "Elementwise, reductions, losses, optimizers"), forward and backward, and for the
// optimizers' update rules as PyTorch defines them. The GPU kernels are checked against these;
// the backward references are themselves checked against central finite differences of the
// forward references (tests/test_ops.c). Shapes and semantics are those of ops.h. Not fast, not
// used by the engine.
#ifndef VKT_REF_OPS_H
#define VKT_REF_OPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ops.h"

// y[R,N] += bias[N] for every row.
void ref_bias_add(double *y, const double *bias, size_t R, size_t N);
// db[N] += sum over rows of dy[R,N].
void ref_bias_grad(double *db, const double *dy, size_t R, size_t N);
// f(x) and f'(x) of one activation (f'(0) as PyTorch: 0 for relu, alpha for leaky_relu).
double ref_act(vkt_act act, double alpha, double x);
double ref_act_grad(vkt_act act, double alpha, double x);
// f'(x) from y = f(x) alone, for what vkt_act_grad_from_output allows (relu, tanh, sigmoid,
// leaky_relu with alpha >= 0): y > 0 ? 1 : 0 (alpha), 1 - y^2, y (1 - y). NAN otherwise.
double ref_act_grad_from_output(vkt_act act, double alpha, double y);
// y[n] = f(x[n]);  dx[n] = dy[n] * f'(x[n]).
void ref_act_forward(vkt_act act, double alpha, double *y, const double *x, size_t n);
void ref_act_backward(vkt_act act, double alpha, double *dx, const double *dy, const double *x,
                      size_t n);
// loss_rows[B] = logsumexp(row) - row[label]; dlogits[B,C] = (softmax - onehot) * grad_scale.
// dlogits may be NULL.
void ref_softmax_xent(double *loss_rows, double *dlogits, const double *logits,
                      const uint32_t *labels, size_t B, size_t C, double grad_scale);
// loss_rows[B] = sum_n (pred - target)^2; dpred[B,N] = 2 (pred - target) * grad_scale (may be
// NULL).
void ref_mse(double *loss_rows, double *dpred, const double *pred, const double *target, size_t B,
             size_t N, double grad_scale);
// Number of rows whose argmax (lowest index on ties) equals the label; preds[B] gets the argmax
// when not NULL.
uint32_t ref_accuracy(uint32_t *preds, const double *logits, const uint32_t *labels, size_t B,
                      size_t C);
// sum of x[n]^2.
double ref_sumsq(const double *x, size_t n);
// g[n] *= min(1, max_norm / (sqrt(sumsq) + 1e-6)), as torch.nn.utils.clip_grad_norm_.
void ref_clip_scale(double *g, double sumsq, size_t n, double max_norm);
// One step of torch.optim.SGD (dampening 0) with the momentum buffer buf (zero before the first
// step; untouched when momentum == 0).
void ref_sgd(double *p, const double *g, double *buf, size_t n, double lr, double momentum,
             double weight_decay, bool nesterov);
// One step (t = step, from 1) of torch.optim.AdamW.
void ref_adamw(double *p, const double *g, double *m, double *v, size_t n, double lr, double beta1,
               double beta2, double eps, double weight_decay, uint32_t step);

#endif
