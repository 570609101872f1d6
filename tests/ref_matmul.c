// ref_matmul.c: see ref_matmul.h. Straight loops in double precision; no blocking, no tricks.
#include "ref_matmul.h"

#include <math.h>
#include <stddef.h>

static double op_a(vkt_mm_form form, const float *a, uint32_t M, uint32_t K, uint32_t m,
                   uint32_t k) {
    return form == VKT_MM_TN ? a[(size_t)k * M + m] : a[(size_t)m * K + k];
}

static double op_b(vkt_mm_form form, const float *b, uint32_t N, uint32_t K, uint32_t k,
                   uint32_t n) {
    return form == VKT_MM_NT ? b[(size_t)n * K + k] : b[(size_t)k * N + n];
}

double ref_matmul_dot(vkt_mm_form form, const float *a, const float *b, uint32_t M, uint32_t N,
                      uint32_t K, uint32_t m, uint32_t n) {
    double s = 0;
    for (uint32_t k = 0; k < K; k++)
        s += op_a(form, a, M, K, m, k) * op_b(form, b, N, K, k, n);
    return s;
}

double ref_matmul_absdot(vkt_mm_form form, const float *a, const float *b, uint32_t M, uint32_t N,
                         uint32_t K, uint32_t m, uint32_t n) {
    double s = 0;
    for (uint32_t k = 0; k < K; k++)
        s += fabs(op_a(form, a, M, K, m, k) * op_b(form, b, N, K, k, n));
    return s;
}

void ref_matmul(vkt_mm_form form, double *out, const float *c0, const float *a, const float *b,
                const float *bias, float beta, uint32_t M, uint32_t N, uint32_t K) {
    // Loop orders that read memory in order (a 1024^3 reference takes about a second).
    for (uint32_t m = 0; m < M; m++) {
        double *row = out + (size_t)m * N;
        if (form == VKT_MM_NT) {
            for (uint32_t n = 0; n < N; n++)
                row[n] = ref_matmul_dot(form, a, b, M, N, K, m, n);
        } else {
            for (uint32_t n = 0; n < N; n++)
                row[n] = 0;
            for (uint32_t k = 0; k < K; k++) {
                double av = op_a(form, a, M, K, m, k);
                const float *brow = b + (size_t)k * N;
                for (uint32_t n = 0; n < N; n++)
                    row[n] += av * brow[n];
            }
        }
        for (uint32_t n = 0; n < N; n++) {
            if (bias) row[n] += bias[n];
            if (beta != 0.0f) row[n] += (double)beta * c0[(size_t)m * N + n];
        }
    }
}
