// norm_bn_bwd_finish: batchnorm2d's parameter gradients and the coefficients of its input
// gradient, one invocation per channel c < C (groups folded into y). Adds the parts * nseg
// partial sums of norm_bn_bwd_sums (norm_bn_part.glsl) in order: sdy = sum dy, sdx = sum
// dy * xhat; dbeta[c] += sdy, dgamma[c] += sdx; with k = gamma*invstd and N = B*HW,
// dx = k (dy - sdy/N - xhat sdx/N) = k dy + (x - mean) u + v, and coef[c * 4 + {0..3}] =
// mean, k, u = -k invstd sdx/N, v = -k sdy/N (norm_bn_dx). Reads part, saved[2C], gamma[C].
#version 450
#include "norm_abi.h"

layout(local_size_x_id = VKT_SPEC_LOCAL_X) in;
layout(std430, binding = 0) readonly buffer P { float part[]; };
layout(std430, binding = 1) readonly buffer S { float saved[]; };
layout(std430, binding = 2) readonly buffer G { float gamma[]; };
layout(std430, binding = 3) writeonly buffer K { float coef[]; };
layout(std430, binding = 4) buffer DG { float dgamma[]; };
layout(std430, binding = 5) buffer DB { float dbeta[]; };
layout(push_constant) uniform PC { vkt_bn_push p; };

void main() {
    uint c = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * gl_WorkGroupSize.x +
             gl_LocalInvocationID.x;
    if (c >= p.C) return;
    float sdy = 0.0, sdx = 0.0;
    uint o = c * p.parts * p.nseg * 2u;
    for (uint q = 0u; q < p.parts * p.nseg; q++, o += 2u) {
        sdy += part[o];
        sdx += part[o + 1u];
    }
    dbeta[c] += sdy;
    dgamma[c] += sdx;
    float N = float(p.B) * float(p.HW), invstd = saved[p.C + c], k = gamma[c] * invstd;
    coef[c * 4u] = saved[c];
    coef[c * 4u + 1u] = k;
    coef[c * 4u + 2u] = -k * invstd * (sdx / N);
    coef[c * 4u + 3u] = -k * (sdy / N);
}
