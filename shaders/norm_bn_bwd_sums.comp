// norm_bn_bwd_sums: the partial sums of batchnorm2d's backward. Reads x[B, C, HW] and dy[B, C, HW]
// (this slice's p.B samples, p.base words into both bindings) and saved[2C] (the forward's mean
// at [c], invstd at [C + c]); writes part[(q * C + c) * 2 + {0, 1}] = sum dy and sum dy * xhat
// (xhat = (x - mean) * invstd) over part q's samples of channel c. One workgroup per (c, part),
// as norm_bn_stats; one pass, both sums reduced together (norm_reduce.glsl).
#version 450
#include "norm_abi.h"
#include "norm_reduce.glsl"

layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer DY { float dy[]; };
layout(std430, binding = 2) readonly buffer S { float saved[]; };
layout(std430, binding = 3) writeonly buffer P { float part[]; };
layout(push_constant) uniform PC { vkt_bn_push p; };

void main() {
    uint group = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
    if (group >= p.C * p.nparts) return; // the whole workgroup
    uint c = group % p.C, q = group / p.C;
    uint s0 = q * p.spp, ns = min(p.spp, p.B - s0), n = ns * p.HW;
    uint stride = p.C * p.HW, first = p.base + s0 * stride + c * p.HW;
    float mean = saved[c], invstd = saved[p.C + c];
    vec2 s = vec2(0.0);
    for (uint k = gl_LocalInvocationID.x; k < n; k += gl_WorkGroupSize.x) {
        uint b = k / p.HW, i = first + b * stride + (k - b * p.HW);
        float d = dy[i];
        s += vec2(d, d * ((x[i] - mean) * invstd));
    }
    s = norm_wg_sum(s);
    if (gl_LocalInvocationID.x == 0u) {
        uint o = ((p.part0 + q) * p.C + c) * 2u;
        part[o] = s.x;
        part[o + 1u] = s.y;
    }
}
