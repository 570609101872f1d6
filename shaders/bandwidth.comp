// bandwidth: a device-memory copy for `vktrain bench suite` (engine/cli/suite.c), which times it
// with GPU timestamps and counts the bytes read plus the bytes written. Reads src4[n4], writes
// dst4[n4] (vec4s; shaders/bench_abi.h says how invocations are laid over them). Nothing but the
// copy: no arithmetic, so the figure is the memory's, not the ALUs'. The bounds guard is the
// workgroup's (n4 is a multiple of a workgroup's share): a guard per vec4 made lavapipe and
// SwiftShader mask every load and store, and the copy 10-25% slower. K (vec4s per invocation) is
// a specialization constant because the drivers disagree: lavapipe copied faster with 1,
// SwiftShader with 4 (the suite runs both and keeps the faster).
#version 450
#include "bench_abi.h"

layout(local_size_x_id = VKT_SPEC_LOCAL_X) in;
layout(constant_id = VKT_SPEC_USER) const uint K = 1;
layout(std430, binding = 0) readonly buffer Src { vec4 src4[]; };
layout(std430, binding = 1) writeonly buffer Dst { vec4 dst4[]; };
layout(push_constant) uniform PC { vkt_bandwidth_push p; };

void main() {
    uint group = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
    uint base = group * gl_WorkGroupSize.x * K;
    if (base >= p.n4) return;
    uint first = base + gl_LocalInvocationID.x;
    for (uint k = 0; k < K; k++) {
        uint q = first + k * gl_WorkGroupSize.x;
        dst4[q] = src4[q];
    }
}
