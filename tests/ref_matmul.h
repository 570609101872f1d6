// ref_matmul.h: the plain C reference of vkt_op_matmul, in double precision, that test_matmul.c
// and the matmul benchmark's spot check compare the GPU kernels against.
#ifndef VKT_REF_MATMUL_H
#define VKT_REF_MATMUL_H

#include <stdint.h>

#include "ops.h"

// One element of op(a) op(b): sum over k of op(a)[m,k] op(b)[k,n], with a and b laid out as the
// form says (NN: a[M,K], b[K,N]; NT: a[M,K], b[N,K]; TN: a[K,M], b[K,N]).
double ref_matmul_dot(vkt_mm_form form, const float *a, const float *b, uint32_t M, uint32_t N,
                      uint32_t K, uint32_t m, uint32_t n);

// out[M,N] = op(a) op(b) (+ bias[n] when bias != NULL) (+ beta * c0[m,n] when beta != 0),
// the semantics of vkt_op_matmul; c0 is the c that the op reads (may be NULL when beta == 0).
void ref_matmul(vkt_mm_form form, double *out, const float *c0, const float *a, const float *b,
                const float *bias, float beta, uint32_t M, uint32_t N, uint32_t K);

// sum over k of |op(a)[m,k] op(b)[k,n]|: the scale that fp32 rounding error grows with.
double ref_matmul_absdot(vkt_mm_form form, const float *a, const float *b, uint32_t M, uint32_t N,
                         uint32_t K, uint32_t m, uint32_t n);

#endif
