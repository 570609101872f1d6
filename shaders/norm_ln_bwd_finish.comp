// norm_ln_bwd_finish: layernorm's weight and bias gradients from the p.parts partial column
// sums of norm_ln_bwd_cols, added in part order: dgamma[d] += sum dy * xhat, dbeta[d] += sum dy,
// one invocation per column d < D (groups folded into y). Reads part[parts * D * 2]; reads and
// writes dgamma[D], dbeta[D].
#version 450
#include "norm_abi.h"

layout(local_size_x_id = VKT_SPEC_LOCAL_X) in;
layout(std430, binding = 0) readonly buffer P { float part[]; };
layout(std430, binding = 1) buffer DG { float dgamma[]; };
layout(std430, binding = 2) buffer DB { float dbeta[]; };
layout(push_constant) uniform PC { vkt_ln_push p; };

void main() {
    uint d = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * gl_WorkGroupSize.x +
             gl_LocalInvocationID.x;
    if (d >= p.D) return;
    vec2 s = vec2(0.0);
    for (uint q = 0u; q < p.parts; q++) {
        uint o = (q * p.D + d) * 2u;
        s += vec2(part[o], part[o + 1u]);
    }
    dgamma[d] += s.x;
    dbeta[d] += s.y;
}
