// conv_permute.glsl: the kernels conv_permute (shaders/conv_permute.comp) and conv_permute64
// (conv_permute64.comp, CONV_F64: for devices with shaderFloat64, V = 8 too). Included, not
// compiled on its own.
//
// Between a chunk's product layout [OC][nb*P] (column b*P + p) and the NCHW activation
// [nb][OC][P] (from element act_off of its binding).
//   DIR = VKT_CONV_TO_NCHW:   reads z (bindings 0/1) and bias[OC] (binding 4, when the flags say
//                             VKT_CONV_BIAS); writes y (bindings 2/3):
//                             y[b][oc][p] = z[oc][b*P + p] + bias[oc]
//   DIR = VKT_CONV_FROM_NCHW: reads dy (bindings 0/1); writes dz (bindings 2/3):
//                             dz[oc][b*P + p] = dy[b][oc][p]
// Each array is bound as float[] and as vec4[] (the same view). V = 4 (P % 4 == 0, both views
// and act_off 4-float aligned: the host checks): an invocation moves one vec4, 4 neighbouring
// positions of one (b, oc), several times faster than float by float on lavapipe (as ew.glsl
// finds); V = 1: one float. Invocations in NCHW order; workgroups folded into y.
// V = 8 (CONV_F64 only): an invocation writes 8 floats of the destination as one dvec4, in the
// destination's order, and reads them as two vec4 texels of the source (binding 5; each 4
// lies inside one (b, oc): P % 4 == 0), from wherever each lies: the destination 32-byte
// aligned, n % 8 == 0 (the host checks). On lavapipe a texel fetch and a dvec4 store each cost
// about what a vec4 load or store does (a loop over the lanes per component), for twice the
// floats: measured 2.5 times faster than V = 4 in a copy.
#extension GL_EXT_control_flow_attributes : require
#ifdef CONV_F64
#extension GL_ARB_gpu_shader_fp64 : require
#endif
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
#ifdef CONV_F64
layout(binding = 5) uniform samplerBuffer srct;
layout(std430, binding = 3) writeonly buffer DST8 { dvec4 dst8[]; };
#endif
layout(push_constant) uniform PC { vkt_conv_push p; };

#ifdef CONV_F64
// V = 8: destination elements e .. e + 7 (e a multiple of 8 in the destination's order).
void move8(uint e) {
    vec4 v[2];
    [[unroll]] for (uint h = 0u; h < 2u; h++) {
        uint d = e + 4u * h, si;
        float add = 0.0;
        if (DIR == VKT_CONV_TO_NCHW) {
            // d is an NCHW element of the chunk: (b, oc, q); the source z[oc][b*P + q].
            uint t = d / P, q = d - t * P, b = t / OC, oc = t - b * OC;
            si = oc * (p.nb * P) + b * P + q;
            add = (p.flags & VKT_CONV_BIAS) != 0u ? bias[oc] : 0.0;
        } else {
            // d is an element of dz: (oc, column b*P + q); the source dy[b][oc][q].
            uint np = p.nb * P, oc = d / np, col = d - oc * np, b = col / P, q = col - b * P;
            si = p.act_off + (b * OC + oc) * P + q;
        }
        v[h] = texelFetch(srct, int(si / 4u)) + add;
    }
    uvec4 l = floatBitsToUint(v[0]), h = floatBitsToUint(v[1]);
    uint di = DIR == VKT_CONV_TO_NCHW ? p.act_off + e : e;
    dst8[di / 8u] = dvec4(packDouble2x32(l.xy), packDouble2x32(l.zw), packDouble2x32(h.xy),
                          packDouble2x32(h.zw));
}
#endif

void main() {
    uint group = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
    uint e = V * (group * gl_WorkGroupSize.x + gl_LocalInvocationID.x);
    if (e >= p.n) return;
#ifdef CONV_F64
    if (V == 8u) {
        move8(e);
        return;
    }
#endif
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
