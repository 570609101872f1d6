// peak_fma.glsl: the device's peak fp32 FMA rate, for `vktrain bench` to put matmul figures in
// context, built as the kernels peak_fma_c<CHAINS>u<UNROLL> (shaders/variants.cmake); bench.c runs
// each and keeps the fastest.
// Reads nothing; writes out[n] (one float per invocation, so that the FMAs are not dead code).
// Each invocation runs CHAINS independent FMA chains (on a CPU driver one invocation is one SIMD
// lane, and the chains hide the FMA latency), p.iters times an unrolled body of UNROLL steps:
// 2 * CHAINS * UNROLL * p.iters flops per invocation. The multiplier and addend come from push
// constants so that the compiler cannot fold the chains.
// Why several shapes: which one reaches the peak depends on the compiler and the registers. On an
// AVX2 CPU (16 vector registers) lavapipe's LLVM runs each of 32 chains' 8 steps in a row, and
// that code waits on the multiply-then-add latency: 61-64 GFLOP/s where 16 or 24 chains of 4
// steps run 84-88 on the same machine (docs/PERFORMANCE.md).
// CHAINS and UNROLL are compile-time constants, not specialization constants: SwiftShader does
// not unroll loops whose bounds are specialization constants and then keeps the chains in memory
// (docs/PERFORMANCE.md, "Why the matmul kernels look as they do").
#version 450
#extension GL_EXT_control_flow_attributes : require
#include "vkt_abi.h"

layout(local_size_x_id = VKT_SPEC_LOCAL_X) in;
layout(std430, binding = 0) writeonly buffer Out { float outv[]; };
layout(push_constant) uniform PC { vkt_peak_fma_push p; };

const uint CHAINS = PEAK_CHAINS;
const uint UNROLL = PEAK_UNROLL;

void main() {
    uint i = gl_GlobalInvocationID.x;
    float acc[CHAINS];
    [[unroll]] for (uint c = 0; c < CHAINS; c++) acc[c] = float(i + c) * 1e-3;
    float a = p.a, b = p.b;
    uint iters = p.iters;
    for (uint it = 0; it < iters; it++) {
        [[unroll]] for (uint u = 0; u < UNROLL; u++) {
            [[unroll]] for (uint c = 0; c < CHAINS; c++) acc[c] = fma(acc[c], a, b);
        }
    }
    float s = 0.0;
    [[unroll]] for (uint c = 0; c < CHAINS; c++) s += acc[c];
    if (i < p.n) outv[i] = s;
}
