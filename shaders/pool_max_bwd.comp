// pool_max_bwd: maxpool2d backward in gather form, one invocation per input element.
// Reads x[planes, h, w] (the forward's input, from x[off0]) and dy[planes, oh, ow] (from
// dy[off1]); writes every element of dx[planes, h, w] (from dx[off2]): the sum of dy over the
// windows whose maximum is this element, 0 if none. Each window's maximum is found again from x
// as PyTorch's CPU kernel picks it: scanning the window in row-major order, an element replaces
// the current one when it is larger or NaN, so ties go to the first of the largest and a NaN to
// the last NaN (pool_window.comp applies the same test). No atomics and no saved indices: the sum
// over windows runs in a fixed order, so the result is deterministic. Groups folded into y.
#version 450
#include "pool_abi.h"

layout(local_size_x_id = VKT_SPEC_LOCAL_X) in;
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer DY { float dy[]; };
layout(std430, binding = 2) writeonly buffer DX { float dx[]; };
layout(push_constant) uniform PC { vkt_pool_push p; };

// The index in x of the maximum of the window whose first element is x[first].
uint window_argmax(uint first) {
    float m = uintBitsToFloat(0xff800000u); // -inf
    uint at = first;
    for (uint a = 0; a < p.kh; a++)
        for (uint b = 0; b < p.kw; b++) {
            uint j = first + a * p.w + b;
            float v = x[j];
            if (v > m || isnan(v)) {
                m = v;
                at = j;
            }
        }
    return at;
}

void main() {
    uint group = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
    uint i = group * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
    uint per = p.h * p.w;
    if (i >= p.planes * per) return;
    uint plane = i / per, r = i % per, ih = r / p.w, iw = r % p.w;
    // The windows holding (ih, iw): oh * sh <= ih < oh * sh + kh, and the same across.
    uint oh0 = ih >= p.kh ? (ih - p.kh) / p.sh + 1 : 0, oh1 = min(ih / p.sh, p.oh - 1);
    uint ow0 = iw >= p.kw ? (iw - p.kw) / p.sw + 1 : 0, ow1 = min(iw / p.sw, p.ow - 1);
    uint xplane = p.off0 + plane * per, yplane = p.off1 + plane * p.oh * p.ow;
    float acc = 0.0;
    for (uint oh = oh0; oh <= oh1; oh++)
        for (uint ow = ow0; ow <= ow1; ow++)
            if (window_argmax(xplane + oh * p.sh * p.w + ow * p.sw) == xplane + r)
                acc += dy[yplane + oh * p.ow + ow];
    dx[p.off2 + i] = acc;
}
