// pool_nov.glsl: maxpool2d and avgpool2d over non-overlapping windows (stride == kernel, the
// common 2x2 stride 2), forward and maxpool2d's backward (included by pool_nov_*.comp; not
// compiled on its own). POOL_NOV_BWD selects the backward, POOL_TEXEL the reads: 1 through
// uniform texel buffers of vec4 texels, whole rows of a unit at a time (lavapipe: a storage-buffer
// load there is a loop over the 8 lanes with a branch per lane, a texel fetch a branch-free
// gather; docs/PERFORMANCE.md), 0 one float at a time through storage buffers (the backward on
// the other drivers: SwiftShader allows only 65536 texels per view; its forward is
// pool_window.comp, which measured faster there).
//
// An invocation is a unit of 4 neighbouring windows of one output row (ow = 4g .. 4g + 3, fewer
// in the row's last unit), i = (plane * rows + r) * groups + g with groups = ceil(ow / 4): it
// reads the KH x 4KW floats of those windows once, keeps the 4 running maxima (or sums) as one
// vec4, and writes the 4 outputs (forward) or all KH x 4KW input gradients (backward: the
// window's maximum gets its dy, the others 0: the windows do not overlap, so no two units write
// one element). The backward's last unit of each row also zeroes the columns right of the last
// window (w % KW of them), and one more row of units (r == oh) zeroes the rows below the last
// window (h % KH). The maximum is PyTorch's: an element replaces the current one when it is
// larger or NaN (ties to the first in row-major order, NaN to the last NaN; pool_window.comp's
// rule). KH and KW are specialization constants, so the loops unroll where the compiler folds
// them (lavapipe: each window element is then a fixed component of a fetched texel); the unit
// index is split by float reciprocals (exact below 2^24 units per dispatch, pool_ops.c), not by
// integer divisions, which the CPU drivers run lane by lane. Units of 2 output rows (one
// invocation each, looping) measured slower on lavapipe than units of one.
#extension GL_EXT_control_flow_attributes : require

#include "pool_abi.h"

layout(local_size_x_id = VKT_SPEC_LOCAL_X) in;
layout(constant_id = VKT_SPEC_USER) const uint KH = 2;
layout(constant_id = VKT_SPEC_USER + 1) const uint KW = 2;
layout(constant_id = VKT_SPEC_USER + 2) const uint MODE = VKT_POOL_MODE_MAX; // forward only
// Texel variants: every row of x and dx starts on a multiple of RA floats, every row of y and dy
// on a multiple of YA (4, 2 or 1), so that rows are read and written in whole vec4s or vec2s.
layout(constant_id = VKT_SPEC_USER + 3) const uint RA = 1;
layout(constant_id = VKT_SPEC_USER + 4) const uint YA = 1;

const uint NW = VKT_POOL_NOV_UNIT; // windows per unit

#if POOL_TEXEL
layout(binding = 0) uniform samplerBuffer xt;
#else
layout(std430, binding = 0) readonly buffer X { float x[]; };
#endif
#if POOL_NOV_BWD
#if POOL_TEXEL
layout(binding = 1) uniform samplerBuffer dyt;
#else
layout(std430, binding = 1) readonly buffer DY { float dy[]; };
#endif
// dx, bound three times (the same view) for stores of 1, 2 or 4 floats.
layout(std430, binding = 2) writeonly buffer DX { float dx[]; };
#if POOL_TEXEL
layout(std430, binding = 3) writeonly buffer DX2 { vec2 dx2[]; };
layout(std430, binding = 4) writeonly buffer DX4 { vec4 dx4[]; };
#endif
#else
layout(std430, binding = 1) writeonly buffer Y { float y[]; };
layout(std430, binding = 2) writeonly buffer Y2 { vec2 y2[]; };
layout(std430, binding = 3) writeonly buffer Y4 { vec4 y4[]; };
#endif
layout(push_constant) uniform PC { vkt_pool_nov_push p; };

// a / b for a < 2^24 from inv = 1 / float(b): the float quotient is within one of the true one,
// and the remainder's sign and size correct it.
uint nov_div(uint a, uint b, float inv) {
    uint q = uint(float(a) * inv);
    int r = int(a) - int(q * b);
    return r < 0 ? q - 1u : (r >= int(b) ? q + 1u : q);
}

#if POOL_TEXEL
// The 4 floats from float f of a texel view (f a multiple of A; texels past the view's last, at
// the end of a row's last unit, read as that one: never used).
#define NOV_LOAD4(t, f, A, last, out)                                                              \
    {                                                                                              \
        uint q_ = (f) >> 2u;                                                                       \
        vec4 t0_ = texelFetch(t, int(min(q_, last)));                                              \
        if (A == 4u) {                                                                             \
            out = t0_;                                                                             \
        } else {                                                                                   \
            vec4 t1_ = texelFetch(t, int(min(q_ + 1u, last)));                                     \
            uint s_ = (f)&3u;                                                                      \
            if (A == 2u)                                                                           \
                out = s_ == 0u ? t0_ : vec4(t0_.zw, t1_.xy);                                       \
            else                                                                                   \
                out = s_ == 0u   ? t0_                                                             \
                      : s_ == 1u ? vec4(t0_.yzw, t1_.x)                                            \
                      : s_ == 2u ? vec4(t0_.zw, t1_.xy)                                            \
                                 : vec4(t0_.w, t1_.xyz);                                           \
        }                                                                                          \
    }
#endif

void main() {
    uint i = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * gl_WorkGroupSize.x +
             gl_LocalInvocationID.x;
    if (i >= p.planes * p.upp) return;
    uint plane = nov_div(i, p.upp, p.inv_upp), u = i - plane * p.upp;
    uint r = nov_div(u, p.groups, p.inv_groups), g = u - r * p.groups;
    uint ow0 = NW * g, c0 = ow0 * KW, hw = p.h * p.w;
    // The first float of row r * KH of this plane, in x (and dx) coordinates of the plane.
    uint row0 = plane * hw + r * KH * p.w;
    uint last = p.ow - 1u;                 // the row's last window
    uint n = min(NW, p.ow - ow0);          // the windows of this unit
    uint yrow = plane * p.oh * p.ow + r * p.ow; // this output row, in y (dy) coordinates
#if POOL_NOV_BWD
    uint c1 = g + 1u == p.groups ? p.w : c0 + NW * KW; // the columns this unit writes
    if (r == p.oh) {
        // The rows below the last window.
        for (uint a = 0u; a < p.h - p.oh * KH; a++) {
            uint rf = p.off2 + row0 + a * p.w;
#if POOL_TEXEL
            for (uint c = c0; c < c1; c += RA) {
                if (RA == 4u) dx4[(rf + c) / 4u] = vec4(0.0);
                if (RA == 2u) dx2[(rf + c) / 2u] = vec2(0.0);
                if (RA == 1u) dx[rf + c] = 0.0;
            }
#else
            for (uint c = c0; c < c1; c++) dx[rf + c] = 0.0;
#endif
        }
        return;
    }
#endif
    vec4 m = vec4(uintBitsToFloat(0xff800000u)), s = vec4(0.0); // -inf
    uvec4 at = uvec4(0u);
#if POOL_TEXEL
    // Each row's 4 KW floats as KW vec4s; the windows' elements are fixed components of them
    // once KW is folded. Within a window the elements come in row-major order, as PyTorch scans.
    uint xlast = uint(textureSize(xt)) - 1u;
    [[unroll]] for (uint a = 0u; a < KH; a++) {
        uint rf = p.off0 + row0 + a * p.w + c0;
        [[unroll]] for (uint k = 0u; k < KW; k++) {
            vec4 t;
            NOV_LOAD4(xt, rf + 4u * k, RA, xlast, t);
            [[unroll]] for (uint c = 0u; c < 4u; c++) {
                uint j = (4u * k + c) / KW, b = (4u * k + c) % KW;
                float v = t[c];
                // Not max(): that returns the other operand of a NaN.
                if (v > m[j] || isnan(v)) {
                    m[j] = v;
                    at[j] = a * KW + b;
                }
                s[j] += v;
            }
        }
    }
#else
    // Windows past the row's last (ow0 + j >= ow) read that one's columns instead: in range,
    // never written.
    uvec4 col = min(uvec4(ow0) + uvec4(0u, 1u, 2u, 3u), uvec4(last)) * KW;
    [[unroll]] for (uint a = 0u; a < KH; a++) {
        uint rf = p.off0 + row0 + a * p.w;
        [[unroll]] for (uint b = 0u; b < KW; b++) {
            [[unroll]] for (uint j = 0u; j < NW; j++) {
                float v = x[rf + col[j] + b];
                if (v > m[j] || isnan(v)) {
                    m[j] = v;
                    at[j] = a * KW + b;
                }
                s[j] += v;
            }
        }
    }
#endif
#if POOL_NOV_BWD
    vec4 d;
#if POOL_TEXEL
    NOV_LOAD4(dyt, p.off1 + yrow + ow0, YA, uint(textureSize(dyt)) - 1u, d);
    [[unroll]] for (uint a = 0u; a < KH; a++) {
        uint rf = p.off2 + row0 + a * p.w + c0;
        [[unroll]] for (uint e0 = 0u; e0 < NW * KW; e0 += RA) {
            if (c0 + e0 + RA <= c1) {
                vec4 o;
                [[unroll]] for (uint t = 0u; t < RA; t++) {
                    uint j = (e0 + t) / KW, b = (e0 + t) % KW;
                    o[t] = j < n && at[j] == a * KW + b ? d[j] : 0.0;
                }
                if (RA == 4u) dx4[(rf + e0) / 4u] = o;
                if (RA == 2u) dx2[(rf + e0) / 2u] = o.xy;
                if (RA == 1u) dx[rf + e0] = o.x;
            }
        }
        // The columns right of the row's last window (w % KW, in the row's last unit only).
        for (uint c = NW * KW; c < c1 - c0; c++) dx[rf + c] = 0.0;
    }
#else
    [[unroll]] for (uint j = 0u; j < NW; j++) d[j] = dy[p.off1 + yrow + min(ow0 + j, last)];
    [[unroll]] for (uint a = 0u; a < KH; a++) {
        uint rf = p.off2 + row0 + a * p.w;
        [[unroll]] for (uint j = 0u; j < NW; j++) {
            if (j < n) {
                [[unroll]] for (uint b = 0u; b < KW; b++)
                    dx[rf + c0 + j * KW + b] = at[j] == a * KW + b ? d[j] : 0.0;
            }
        }
        // The columns right of the row's last window (in the row's last unit only).
        for (uint c = c0 + n * KW; c < c1; c++) dx[rf + c] = 0.0;
    }
#endif
#else
    vec4 v = MODE == VKT_POOL_MODE_MAX ? m : s / float(KH * KW);
    uint yf = p.off1 + yrow + ow0;
    // (n is a multiple of YA: rows of y start on multiples of YA, units on multiples of 4.)
    [[unroll]] for (uint e0 = 0u; e0 < NW; e0 += YA) {
        if (e0 < n) {
            if (YA == 4u) y4[yf / 4u] = v;
            if (YA == 2u) y2[(yf + e0) / 2u] = e0 == 0u ? v.xy : v.zw;
            if (YA == 1u) y[yf + e0] = v[e0];
        }
    }
#endif
}
