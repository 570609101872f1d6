// pool_avg_bwd: avgpool2d backward in gather form (and global_avgpool's, as one window over a
// plane), one invocation per input element.
// Reads dy[planes, oh, ow] (from dy[off0]); writes every element of dx[planes, h, w] (from
// dx[off1]): the sum of dy over the windows that hold it, divided by kh * kw (0 outside every
// window). Groups folded into y.
#version 450
#include "pool_abi.h"

layout(local_size_x_id = VKT_SPEC_LOCAL_X) in;
layout(std430, binding = 0) readonly buffer DY { float dy[]; };
layout(std430, binding = 1) writeonly buffer DX { float dx[]; };
layout(push_constant) uniform PC { vkt_pool_push p; };

void main() {
    uint group = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
    uint i = group * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
    uint per = p.h * p.w;
    if (i >= p.planes * per) return;
    uint plane = i / per, r = i % per, ih = r / p.w, iw = r % p.w;
    uint oh0 = ih >= p.kh ? (ih - p.kh) / p.sh + 1 : 0, oh1 = min(ih / p.sh, p.oh - 1);
    uint ow0 = iw >= p.kw ? (iw - p.kw) / p.sw + 1 : 0, ow1 = min(iw / p.sw, p.ow - 1);
    uint yplane = p.off0 + plane * p.oh * p.ow;
    float acc = 0.0;
    for (uint oh = oh0; oh <= oh1; oh++)
        for (uint ow = ow0; ow <= ow1; ow++) acc += dy[yplane + oh * p.ow + ow];
    dx[p.off1 + i] = acc / float(p.kh * p.kw);
}
