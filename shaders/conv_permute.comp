// conv_permute: between a chunk's product layout [OC][nb*P] (column b*P + p) and the NCHW
// activation [nb][OC][P] (from element act_off of its binding).
//   DIR = VKT_CONV_TO_NCHW:   reads z (bindings 0/1) and bias[OC] (binding 4, when the flags say
//                             VKT_CONV_BIAS); writes y (bindings 2/3):
//                             y[b][oc][p] = z[oc][b*P + p] + bias[oc]
//   DIR = VKT_CONV_FROM_NCHW: reads dy (bindings 0/1); writes dz (bindings 2/3):
//                             dz[oc][b*P + p] = dy[b][oc][p]
// Each array is bound as float[] and as vec4[] (the same view). V = 4 (P % 4 == 0, both views
// and act_off 4-float aligned: the host checks): an invocation moves one vec4, 4 neighbouring
// positions of one (b, oc), several times faster than float by float on lavapipe (as ew.glsl
// finds); V = 1: one float. Invocations in NCHW order; workgroups folded into y.
#version 450
#include "conv_abi.h"

layout(local_size_x_id = VKT_SPEC_LOCAL_X) in;
layout(constant_id = VKT_SPEC_CONV_PERM_OC) const uint OC = 1;
layout(constant_id = VKT_SPEC_CONV_PERM_P) const uint P = 1;
layout(constant_id = VKT_SPEC_CONV_PERM_DIR) const uint DIR = VKT_CONV_TO_NCHW;
layout(constant_id = VKT_SPEC_CONV_PERM_V) const uint V = 1;
layout(std430, binding = 0) readonly buffer SRC { float src[]; };
layout(std430, binding = 1) readonly buffer SRC4 { vec4 src4[]; };
layout(std430, binding = 2) writeonly buffer DST { float dst[]; };
layout(std430, binding = 3) writeonly buffer DST4 { vec4 dst4[]; };
layout(std430, binding = 4) readonly buffer BIAS { float bias[]; };
layout(push_constant) uniform PC { vkt_conv_push p; };

void main() {
    uint group = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
    uint e = V * (group * gl_WorkGroupSize.x + gl_LocalInvocationID.x);
    if (e >= p.n) return;
    uint t = e / P, q = e - t * P;
    uint b = t / OC, oc = t - b * OC;
    uint zi = oc * (p.nb * P) + b * P + q, yi = p.act_off + e;
    if (DIR == VKT_CONV_TO_NCHW) {
        float add = (p.flags & VKT_CONV_BIAS) != 0u ? bias[oc] : 0.0;
        if (V == 4u) dst4[yi / 4u] = src4[zi / 4u] + add;
        else dst[yi] = src[zi] + add;
    } else {
        if (V == 4u) dst4[zi / 4u] = src4[yi / 4u];
        else dst[zi] = src[yi];
    }
}
