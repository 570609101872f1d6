// norm_bn_part.glsl: the partial sums of batchnorm2d (included by norm_bn_stats*.comp and
// norm_bn_bwd_sums*.comp; not compiled on its own). NORM_BWD 0: the forward's statistics, 1: the
// backward's sums; NORM_TEXEL 1 reads the whole vec4s through uniform texel buffers (lavapipe:
// a storage-buffer load there is a loop over the lanes with a branch per lane, a texel fetch a
// branch-free gather), 0 through storage buffers.
//
// x[B, C, HW] (and dy) is cut into parts: spp samples (this dispatch's [first, first + n), the
// last part fewer) by one of the nseg segments of seglen floats of each plane (the last shorter)
// by one channel. One invocation per part walks its planes' segment in order, as vec4s where
// they are whole (the floats before the first whole vec4 and after the last through the float
// binding), with no shared memory and no barrier (lavapipe and SwiftShader run a barrier as a
// switch between coroutines). It writes, for channel c and part q of the whole batch, at
// part[((c * parts + q) * nseg + s) * 2]:
//   NORM_BWD 0: the part's mean and M2 (sum of squared deviations from that mean), from one pass
//               of sums shifted by the part's first float (two passes cost lavapipe 2.4 ms
//               against 1.4 for 128 x 32 x 28 x 28 floats);
//   NORM_BWD 1: sum dy and sum dy * xhat, xhat = (x - mean) * invstd (saved[c], saved[C + c]).
// norm_bn_finish / norm_bn_bwd_finish add them up per channel in that order: the same inputs
// give the same bits on every run. Bindings from p.base floats before the first sample.
// NORM_ACT 1 (norm_bn_bwd_sums_act*: the next layer's activation fused into the backward, where
// its derivative follows from its output): dy is that activation's output gradient, read with
// its output y (bindings 4 and 5, saved and part moving to 6 and 7), and dy f'(y) is summed,
// the floats its own backward would have written (activation: ACT and ALPHA, as norm_bn_ew.glsl).
#extension GL_EXT_control_flow_attributes : require
#include "norm_abi.h"
#include "norm_bn_in.glsl"

layout(local_size_x_id = VKT_SPEC_LOCAL_X) in;
// 1 when every segment is whole vec4s (HW % 4 == 0: then so is every slice's start), 0 otherwise.
layout(constant_id = VKT_SPEC_USER) const uint WHOLE = 0;
#if NORM_BWD
layout(std430, binding = B_NEXT) readonly buffer S { float saved[]; };
layout(std430, binding = B_NEXT + 1) writeonly buffer P { float part[]; };
#else
layout(std430, binding = B_NEXT) writeonly buffer P { float part[]; };
#endif
layout(push_constant) uniform PC { vkt_bn_push p; };

float hsum(vec4 v) { return (v.x + v.y) + (v.z + v.w); }

// A segment of len floats from float f0: head floats, then body vec4s from vec4 q0, then tail
// floats from t0.
struct seg {
    uint f0, head, q0, body, t0, tail;
};

seg seg_at(uint f0, uint len) {
    seg g;
    g.f0 = f0;
    g.head = WHOLE != 0u ? 0u : min((4u - f0 % 4u) % 4u, len);
    g.body = (len - g.head) / 4u;
    g.q0 = (f0 + g.head) / 4u;
    g.t0 = f0 + g.head + 4u * g.body;
    g.tail = len - g.head - 4u * g.body;
    return g;
}

void main() {
    uint i = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * gl_WorkGroupSize.x +
             gl_LocalInvocationID.x;
    uint nparts = (p.n + p.spp - 1u) / p.spp; // parts of this slice
    if (i >= nparts * p.C * p.nseg) return;
    uint s = i % p.nseg, t = i / p.nseg, c = t % p.C, q = t / p.C;
    uint b0 = q * p.spp, nb = min(p.spp, p.n - b0);
    uint len = min(p.seglen, p.HW - s * p.seglen), stride = p.C * p.HW;
    uint f00 = p.base + b0 * stride + c * p.HW + s * p.seglen;
#if NORM_BWD
    float mean = saved[c], invstd = saved[p.C + c];
    vec4 a4 = vec4(0.0), b4 = vec4(0.0);
    float sdy = 0.0, sdx = 0.0;
    for (uint b = 0u; b < nb; b++) {
        seg g = seg_at(f00 + b * stride, len);
        for (uint k = 0u; k < g.body; k++) {
            vec4 d = DYA4(g.q0 + k);
            a4 += d;
            b4 += d * (X4(g.q0 + k) - mean);
        }
        for (uint k = 0u; k < g.head; k++) {
            float d = DYA1(g.f0 + k);
            sdy += d;
            sdx += d * (x1[g.f0 + k] - mean);
        }
        for (uint k = 0u; k < g.tail; k++) {
            float d = DYA1(g.t0 + k);
            sdy += d;
            sdx += d * (x1[g.t0 + k] - mean);
        }
    }
    vec2 r = vec2(hsum(a4) + sdy, (hsum(b4) + sdx) * invstd);
#else
    // One pass of sums shifted by the part's first float k (within a few standard deviations of
    // the mean, so that m2 = sum d^2 - (sum d)^2 / n loses no more than a bit or two to
    // cancellation, however far the mean is from 0), for the part's mean and M2.
    float k = x1[f00];
    vec4 a4 = vec4(0.0), q4 = vec4(0.0);
    float sum = 0.0, sq = 0.0;
    for (uint b = 0u; b < nb; b++) {
        seg g = seg_at(f00 + b * stride, len);
        for (uint j = 0u; j < g.body; j++) {
            vec4 d = X4(g.q0 + j) - k;
            a4 += d;
            q4 += d * d;
        }
        for (uint j = 0u; j < g.head; j++) {
            float d = x1[g.f0 + j] - k;
            sum += d;
            sq += d * d;
        }
        for (uint j = 0u; j < g.tail; j++) {
            float d = x1[g.t0 + j] - k;
            sum += d;
            sq += d * d;
        }
    }
    float n = float(nb * len), s1 = hsum(a4) + sum;
    vec2 r = vec2(k + s1 / n, max(hsum(q4) + sq - s1 * (s1 / n), 0.0));
#endif
    uint o = ((c * p.parts + p.first / p.spp + q) * p.nseg + s) * 2u;
    part[o] = r.x;
    part[o + 1u] = r.y;
}
