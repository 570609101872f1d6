// pool_window: maxpool2d and avgpool2d forward, one invocation per output element.
// Reads x[planes, h, w] (from x[off0]); writes y[planes, oh, ow] (from y[off1]): for MODE
// VKT_POOL_MODE_MAX the largest element of the kh x kw window at (oh * sh, ow * sw), NaN if the
// window holds one (PyTorch propagates NaN); for VKT_POOL_MODE_AVG the window's sum divided by
// kh * kw. One loop computes both and the mode picks one at the end: SwiftShader runs both sides
// of a branch on a specialization constant (shaders/variants.cmake), and one more add or compare
// per element costs less than a second loop. Groups folded into y.
#version 450
#include "pool_abi.h"

layout(local_size_x_id = VKT_SPEC_LOCAL_X) in;
layout(constant_id = VKT_SPEC_USER) const uint MODE = VKT_POOL_MODE_MAX;
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) writeonly buffer Y { float y[]; };
layout(push_constant) uniform PC { vkt_pool_push p; };

void main() {
    uint group = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
    uint i = group * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
    uint per = p.oh * p.ow;
    if (i >= p.planes * per) return;
    uint plane = i / per, r = i % per, oh = r / p.ow, ow = r % p.ow;
    uint base = p.off0 + plane * p.h * p.w + oh * p.sh * p.w + ow * p.sw;
    float m = uintBitsToFloat(0xff800000u), s = 0.0; // -inf
    for (uint a = 0; a < p.kh; a++)
        for (uint b = 0; b < p.kw; b++) {
            float v = x[base + a * p.w + b];
            // Not max(): that returns the other operand of a NaN.
            if (v > m || isnan(v)) m = v;
            s += v;
        }
    y[p.off1 + i] = MODE == VKT_POOL_MODE_MAX ? m : s / float(p.kh * p.kw);
}
