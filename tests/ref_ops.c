// ref_ops.c: see ref_ops.h. Straight loops in double precision, written from the formulas of
// ops.h and of PyTorch's documentation, not from the shaders.
#include "ref_ops.h"

#include "layer.h"

#include <math.h>

void ref_bias_add(double *y, const double *bias, size_t R, size_t N) {
    for (size_t r = 0; r < R; r++)
        for (size_t j = 0; j < N; j++)
            y[r * N + j] += bias[j];
}

void ref_bias_grad(double *db, const double *dy, size_t R, size_t N) {
    for (size_t r = 0; r < R; r++)
        for (size_t j = 0; j < N; j++)
            db[j] += dy[r * N + j];
}

// The activations are the layer kind's own double-precision reference (engine/nn/layers/
// activation.c, which the network reference uses too), written from PyTorch's formulas.
double ref_act(vkt_act act, double alpha, double x) { return vkt_act_ref(act, alpha, x); }

double ref_act_grad(vkt_act act, double alpha, double x) { return vkt_act_ref_grad(act, alpha, x); }

double ref_act_grad_from_output(vkt_act act, double alpha, double y) {
    switch (act) {
    case VKT_ACT_RELU: return y > 0 ? 1 : 0;
    case VKT_ACT_LEAKY_RELU: return alpha >= 0 ? (y > 0 ? 1 : alpha) : NAN;
    case VKT_ACT_TANH: return 1 - y * y;
    case VKT_ACT_SIGMOID: return y * (1 - y);
    case VKT_ACT_GELU:
    case VKT_ACT_GELU_ERF: return NAN;
    }
    return NAN;
}

void ref_act_forward(vkt_act act, double alpha, double *y, const double *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        y[i] = ref_act(act, alpha, x[i]);
}

void ref_act_backward(vkt_act act, double alpha, double *dx, const double *dy, const double *x,
                      size_t n) {
    for (size_t i = 0; i < n; i++)
        dx[i] = dy[i] * ref_act_grad(act, alpha, x[i]);
}

void ref_softmax_xent(double *loss_rows, double *dlogits, const double *logits,
                      const uint32_t *labels, size_t B, size_t C, double grad_scale) {
    for (size_t b = 0; b < B; b++) {
        const double *x = logits + b * C;
        double m = x[0];
        for (size_t j = 1; j < C; j++)
            m = x[j] > m ? x[j] : m;
        double s = 0;
        for (size_t j = 0; j < C; j++)
            s += exp(x[j] - m);
        loss_rows[b] = m + log(s) - x[labels[b]];
        if (dlogits)
            for (size_t j = 0; j < C; j++)
                dlogits[b * C + j] = (exp(x[j] - m) / s - (j == labels[b] ? 1 : 0)) * grad_scale;
    }
}

void ref_mse(double *loss_rows, double *dpred, const double *pred, const double *target, size_t B,
             size_t N, double grad_scale) {
    for (size_t b = 0; b < B; b++) {
        double s = 0;
        for (size_t j = 0; j < N; j++) {
            double d = pred[b * N + j] - target[b * N + j];
            s += d * d;
            if (dpred) dpred[b * N + j] = 2 * d * grad_scale;
        }
        loss_rows[b] = s;
    }
}

uint32_t ref_accuracy(uint32_t *preds, const double *logits, const uint32_t *labels, size_t B,
                      size_t C) {
    uint32_t correct = 0;
    for (size_t b = 0; b < B; b++) {
        size_t arg = 0;
        for (size_t j = 1; j < C; j++)
            if (logits[b * C + j] > logits[b * C + arg]) arg = j;
        if (preds) preds[b] = (uint32_t)arg;
        correct += arg == labels[b];
    }
    return correct;
}

double ref_sumsq(const double *x, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++)
        s += x[i] * x[i];
    return s;
}

void ref_clip_scale(double *g, double sumsq, size_t n, double max_norm) {
    double coef = max_norm / (sqrt(sumsq) + 1e-6);
    if (coef > 1) coef = 1;
    for (size_t i = 0; i < n; i++)
        g[i] *= coef;
}

void ref_sgd(double *p, const double *g, double *buf, size_t n, double lr, double momentum,
             double weight_decay, bool nesterov) {
    for (size_t i = 0; i < n; i++) {
        double d = g[i] + weight_decay * p[i];
        if (momentum != 0) {
            buf[i] = momentum * buf[i] + d;
            d = nesterov ? d + momentum * buf[i] : buf[i];
        }
        p[i] -= lr * d;
    }
}

void ref_adamw(double *p, const double *g, double *m, double *v, size_t n, double lr, double beta1,
               double beta2, double eps, double weight_decay, uint32_t step) {
    double bc1 = 1 - pow(beta1, step), bc2 = 1 - pow(beta2, step);
    for (size_t i = 0; i < n; i++) {
        p[i] *= 1 - lr * weight_decay;
        m[i] = beta1 * m[i] + (1 - beta1) * g[i];
        v[i] = beta2 * v[i] + (1 - beta2) * g[i] * g[i];
        p[i] -= lr * (m[i] / bc1) / (sqrt(v[i] / bc2) + eps);
    }
}
