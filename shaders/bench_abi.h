// bench_abi.h: what the benchmark kernels of `vktrain bench suite` (engine/cli/suite.c) share
// with the host: the push constants of shaders/bandwidth.comp.
#ifndef VKT_BENCH_ABI_H
#define VKT_BENCH_ABI_H

#include "vkt_abi.h"

// bandwidth: dst4[q] = src4[q] for the n4 vec4s of one dispatch, K of them per invocation
// (specialization constant VKT_SPEC_USER; slots group * W * K + k * W + lane, so that
// neighbouring invocations touch neighbouring vec4s, as shaders/ew.glsl reads), workgroups folded
// into y (group = y * numX + x). n4 is a multiple of W * K (the host sizes the buffers so).
// Bindings: 0 = src, 1 = dst.
VKT_STRUCT(vkt_bandwidth_push) {
    VKT_U32 n4;
};

#endif
