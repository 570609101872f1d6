// norm_bn_apply: batchnorm2d's y = (x - coef[c*4]) * coef[c*4 + 1] + coef[c*4 + 2] (norm_bn_finish)
// over p.n floats of x[B, C, HW] starting at element p.e0 of the whole tensor (the binding starts
// there), c = ((p.e0 + i) / HW) % C. Reads x[n], coef[4C]; writes y[n]. Each invocation takes
// NORM_EW_K floats W apart (neighbouring lanes read neighbouring floats); groups folded into y.
#version 450
#extension GL_EXT_control_flow_attributes : require
#include "norm_abi.h"

layout(local_size_x_id = VKT_SPEC_LOCAL_X) in;
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer K { float coef[]; };
layout(std430, binding = 2) writeonly buffer Y { float y[]; };
layout(push_constant) uniform PC { vkt_bn_push p; };

const uint NORM_EW_K = 4u; // norm_ops.c's BN_EW_K

void main() {
    uint group = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
    uint first = group * gl_WorkGroupSize.x * NORM_EW_K + gl_LocalInvocationID.x;
    [[unroll]] for (uint k = 0u; k < NORM_EW_K; k++) {
        uint i = first + k * gl_WorkGroupSize.x;
        if (i >= p.n) return;
        uint c = ((p.e0 + i) / p.HW) % p.C;
        y[i] = (x[i] - coef[c * 4u]) * coef[c * 4u + 1u] + coef[c * 4u + 2u];
    }
}
