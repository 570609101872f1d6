// norm_bn_stats: the partial batch statistics of batchnorm2d (norm_abi.h). Reads x[B, C, HW],
// this slice's p.B samples starting p.base words into the binding; writes, for each part q of
// the slice and channel c, part[(q * C + c) * 2 + {0, 1}] = the mean and M2 (sum of squared
// deviations from that mean) of the part's p.spp samples (fewer in the last) of channel c.
// One workgroup per (c, part): c = group % C, q = p.part0 + group / C; groups folded into y.
// Two passes over the part's floats, the mean first and then the deviations from it, each
// summed per lane and then across the workgroup (norm_reduce.glsl).
#version 450
#include "norm_abi.h"
#include "norm_reduce.glsl"

layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) writeonly buffer P { float part[]; };
layout(push_constant) uniform PC { vkt_bn_push p; };

void main() {
    uint group = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
    if (group >= p.C * p.nparts) return; // the whole workgroup: no lane waits at a barrier
    uint c = group % p.C, q = group / p.C;
    uint s0 = q * p.spp, ns = min(p.spp, p.B - s0), n = ns * p.HW;
    uint stride = p.C * p.HW, first = p.base + s0 * stride + c * p.HW;
    uint l = gl_LocalInvocationID.x, W = gl_WorkGroupSize.x;
    float s = 0.0;
    for (uint k = l; k < n; k += W) {
        uint b = k / p.HW;
        s += x[first + b * stride + (k - b * p.HW)];
    }
    float mean = norm_wg_sum(vec2(s, 0.0)).x / float(n);
    float m2 = 0.0;
    for (uint k = l; k < n; k += W) {
        uint b = k / p.HW;
        float d = x[first + b * stride + (k - b * p.HW)] - mean;
        m2 += d * d;
    }
    m2 = norm_wg_sum(vec2(m2, 0.0)).x;
    if (l == 0u) {
        uint o = ((p.part0 + q) * p.C + c) * 2u;
        part[o] = mean;
        part[o + 1u] = m2;
    }
}
