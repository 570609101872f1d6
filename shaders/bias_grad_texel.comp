// bias_grad_texel: bias_grad.comp for N a multiple of 4, with dy read through a uniform texel
// buffer of vec4 texels (lavapipe: engine/ops/ops_nn.c says why). db[N] += sum over rows of dy[R,N].
// Invocation i sums columns 4i .. 4i+3 over all R rows, in row order, as one vec4 (no shared
// memory and no barrier, which lavapipe runs as a switch between coroutines); deterministic.
// Groups folded into y.
#version 450
#include "vkt_abi.h"

layout(local_size_x_id = VKT_SPEC_LOCAL_X) in;
layout(binding = 0) uniform samplerBuffer dyt;
layout(std430, binding = 1) buffer DB { vec4 db4[]; };
layout(push_constant) uniform PC { vkt_bias_push p; };

void main() {
    uint group = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
    uint c4 = group * gl_WorkGroupSize.x + gl_LocalInvocationID.x, n4 = p.N / 4u;
    if (c4 >= n4) return;
    vec4 acc = vec4(0.0);
    for (uint r = 0; r < p.R; r++) acc += texelFetch(dyt, int(r * n4 + c4));
    db4[c4] += acc;
}
