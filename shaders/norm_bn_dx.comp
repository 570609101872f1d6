// norm_bn_dx: batchnorm2d's input gradient dx = coef1 dy + (x - coef0) coef2 + coef3 with
// coef = coef[c * 4 ..] (norm_bn_bwd_finish), over p.n floats of x[B, C, HW] and dy starting at
// element p.e0 of the whole tensor (the bindings start there), c = ((p.e0 + i) / HW) % C.
// Reads x[n], dy[n], coef[4C]; writes dx[n]. NORM_EW_K floats per invocation, as norm_bn_apply.
#version 450
#extension GL_EXT_control_flow_attributes : require
#include "norm_abi.h"

layout(local_size_x_id = VKT_SPEC_LOCAL_X) in;
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer DY { float dy[]; };
layout(std430, binding = 2) readonly buffer K { float coef[]; };
layout(std430, binding = 3) writeonly buffer DX { float dx[]; };
layout(push_constant) uniform PC { vkt_bn_push p; };

const uint NORM_EW_K = 4u; // norm_ops.c's BN_EW_K

void main() {
    uint group = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
    uint first = group * gl_WorkGroupSize.x * NORM_EW_K + gl_LocalInvocationID.x;
    [[unroll]] for (uint k = 0u; k < NORM_EW_K; k++) {
        uint i = first + k * gl_WorkGroupSize.x;
        if (i >= p.n) return;
        uint c = ((p.e0 + i) / p.HW) % p.C;
        dx[i] = coef[c * 4u + 1u] * dy[i] + (x[i] - coef[c * 4u]) * coef[c * 4u + 2u] +
                coef[c * 4u + 3u];
    }
}
