// norm_bn_finish: batchnorm2d's per-channel statistics and coefficients, one invocation per
// channel c < C (groups folded into y). p.train = 1: combines the parts * nseg partial (mean,
// M2) of norm_bn_stats (norm_bn_part.glsl) in order, part by part and segment by segment
// (Chan's formula: the mean and M2 of two sets from theirs), writes
// saved[c] = mean, saved[C + c] = invstd = 1/sqrt(var + eps) (biased var = M2 / N, N = B*HW),
// updates running_mean[c] and running_var[c] (the unbiased variance M2 / (N - 1)) with momentum,
// and adds 1 to num_batches[0] (invocation 0). p.train = 0: the running statistics are the
// mean and var, and only coef is written. Both: coef[c * 4 + {0, 1, 2}] = mean, gamma*invstd,
// beta (norm_bn_apply's y = (x - mean) * gamma*invstd + beta).
#version 450
#include "norm_abi.h"

layout(local_size_x_id = VKT_SPEC_LOCAL_X) in;
layout(std430, binding = 0) readonly buffer P { float part[]; };
layout(std430, binding = 1) writeonly buffer S { float saved[]; };
layout(std430, binding = 2) writeonly buffer K { float coef[]; };
layout(std430, binding = 3) buffer RM { float run_mean[]; };
layout(std430, binding = 4) buffer RV { float run_var[]; };
layout(std430, binding = 5) buffer NB { float num_batches[]; };
layout(std430, binding = 6) readonly buffer G { float gamma[]; };
layout(std430, binding = 7) readonly buffer BE { float beta[]; };
layout(push_constant) uniform PC { vkt_bn_push p; };

void main() {
    uint c = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * gl_WorkGroupSize.x +
             gl_LocalInvocationID.x;
    if (c >= p.C) return;
    float mean, invstd;
    if (p.train != 0u) {
        float n = 0.0, m2 = 0.0;
        mean = 0.0;
        uint o = c * p.parts * p.nseg * 2u;
        for (uint q = 0u; q < p.parts; q++)
            for (uint s = 0u; s < p.nseg; s++, o += 2u) {
                float nb = float(min(p.spp, p.B - q * p.spp) * min(p.seglen, p.HW - s * p.seglen));
                float mb = part[o], m2b = part[o + 1u];
                float nab = n + nb, d = mb - mean;
                mean += d * (nb / nab);
                m2 += m2b + d * d * (n * (nb / nab));
                n = nab;
            }
        float var = m2 / n;
        invstd = 1.0 / sqrt(var + p.eps);
        saved[c] = mean;
        saved[p.C + c] = invstd;
        float m = p.momentum;
        run_mean[c] = (1.0 - m) * run_mean[c] + m * mean;
        run_var[c] = (1.0 - m) * run_var[c] + m * (m2 / (n - 1.0));
        if (c == 0u) num_batches[0] += 1.0;
    } else {
        mean = run_mean[c];
        invstd = 1.0 / sqrt(run_var[c] + p.eps);
    }
    coef[c * 4u] = mean;
    coef[c * 4u + 1u] = gamma[c] * invstd;
    coef[c * 4u + 2u] = beta[c];
}
