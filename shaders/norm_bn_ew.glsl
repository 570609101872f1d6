// norm_bn_ew.glsl: batchnorm2d's elementwise passes (included by norm_bn_apply*.comp and
// norm_bn_dx*.comp; not compiled on its own), NORM_BWD 0 and 1:
//   apply: y  = (x - coef[4c]) * coef[4c + 1] + coef[4c + 2]          (norm_bn_finish)
//   dx:    dx = coef[4c + 1] dy + (x - coef[4c]) coef[4c + 2] + coef[4c + 3] (norm_bn_bwd_finish)
// over this dispatch's planes [first, first + n) of x[B, C, HW] (and dy), c = plane % C.
// LPP lanes per plane (the host picks about BN_EW_VEC4 vec4s per lane: lavapipe's cost per
// invocation showed at 4), local_size_x / LPP planes per workgroup, or for large planes one
// plane's k-th chunk per workgroup (k = gl_WorkGroupID.x); workgroups folded over y and z. Each
// lane reads its plane's four coefficients once (no division per element) and takes every LPP-th
// whole vec4 (NORM_TEXEL 1: read through uniform texel buffers, lavapipe; 0: storage buffers);
// the floats before the plane's first whole vec4 and after its last go through the float
// bindings, in the first and last chunk. Bindings from p.base floats before the first plane.
// NORM_ACT 1 (norm_bn_apply_act*, norm_bn_dx_act*: the next layer's activation fused in, where
// its derivative follows from its output): apply writes y = f(z); dx reads that activation's
// output gradient dy and output y (bindings 4 and 5, the rest moving up by two) and takes
// dy f'(y) for its dy, the floats the activation's own backward would have written. The
// activation is the specialization constants ACT and ALPHA (vkt_abi.h's VKT_ACT_CODE_*).
#extension GL_EXT_control_flow_attributes : require
#include "norm_abi.h"
#include "norm_bn_in.glsl"

layout(local_size_x_id = VKT_SPEC_LOCAL_X) in;
// 1 when every plane is whole vec4s (HW % 4 == 0: then so is every slice's start), 0 otherwise.
layout(constant_id = VKT_SPEC_USER) const uint WHOLE = 0;
// Lanes per plane: a power of two dividing the workgroup, which takes local_size_x / LPP planes
// (small planes: a 14 x 14 plane's 49 vec4s to 16 lanes) or, when LPP is the whole workgroup, a
// chunk of one plane.
layout(constant_id = VKT_SPEC_USER + 1) const uint LPP = 64;
layout(std430, binding = B_NEXT) readonly buffer K { vec4 coef[]; };
layout(std430, binding = B_NEXT + 1) writeonly buffer O4 { vec4 o4[]; };
layout(std430, binding = B_NEXT + 2) writeonly buffer O1 { float o1[]; };
#if !NORM_BWD && NORM_ACT
#define ACTF4(v) act_forward(ACT, ALPHA, v)
#define ACTF1(v) act_forward(ACT, ALPHA, vec4(v)).x
#else
#define ACTF4(v) (v)
#define ACTF1(v) (v)
#endif
layout(push_constant) uniform PC { vkt_bn_push p; };

// One float through the float bindings.
void one(uint f, vec4 k) {
#if NORM_BWD
    o1[f] = k.y * DYA1(f) + (x1[f] - k.x) * k.z + k.w;
#else
    o1[f] = ACTF1((x1[f] - k.x) * k.y + k.z);
#endif
}

void main() {
    uint ppw = gl_WorkGroupSize.x / LPP, l = gl_LocalInvocationID.x % LPP, W = LPP;
    uint lp = (gl_WorkGroupID.z * gl_NumWorkGroups.y + gl_WorkGroupID.y) * ppw +
              gl_LocalInvocationID.x / LPP;
    if (lp >= p.n) return;
    uint c = (p.first + lp) % p.C;
    vec4 k = coef[c]; // mean, scale, then beta (apply) or the two dx terms
    uint f0 = p.base + lp * p.HW;
    uint head = WHOLE != 0u ? 0u : min((4u - f0 % 4u) % 4u, p.HW), body = (p.HW - head) / 4u;
    uint q0 = (f0 + head) / 4u, chunk = (body + p.chunks - 1u) / p.chunks;
    uint qa = gl_WorkGroupID.x * chunk, qb = min(qa + chunk, body);
    for (uint q = q0 + qa + l; q < q0 + qb; q += W) {
#if NORM_BWD
        o4[q] = k.y * DYA4(q) + (X4(q) - k.x) * k.z + k.w;
#else
        o4[q] = ACTF4((X4(q) - k.x) * k.y + k.z);
#endif
    }
    // The floats before the first whole vec4 (first chunk) and after the last (last chunk).
    if (WHOLE != 0u) return;
    uint t0 = f0 + head + 4u * body, tail = p.HW - head - 4u * body;
    if (gl_WorkGroupID.x == 0u && l < head) one(f0 + l, k);
    if (gl_WorkGroupID.x + 1u == p.chunks && l < tail) one(t0 + l, k);
}
