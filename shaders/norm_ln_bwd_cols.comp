// norm_ln_bwd_cols: the partial column sums of layernorm's weight and bias gradients. Reads
// x[R, D], dy[R, D] and stats[2R] of this slice; for each part q of VKT_LN_ROWS_PER_PART rows
// (the last may have fewer) and column d writes part[((p.part0 + q) * D + d) * 2 + {0, 1}] =
// sum over the part's rows of dy * xhat and of dy. A workgroup is TX columns x TY row lanes
// (local_size_x, local_size_y): lane (lx, ly) sums rows ly, ly + TY, ... of the part in column
// group * TX + lx (neighbouring lanes read neighbouring floats), and the TY sums of a column are
// added in a fixed order. Workgroup g takes column group g % ceil(D / TX) of part g / that;
// groups folded into y.
#version 450
#extension GL_EXT_control_flow_attributes : require
#include "norm_abi.h"

layout(local_size_x_id = VKT_SPEC_LOCAL_X, local_size_y_id = VKT_SPEC_LOCAL_Y) in;
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer DY { float dy[]; };
layout(std430, binding = 2) readonly buffer S { float stats[]; };
layout(std430, binding = 3) writeonly buffer P { float part[]; };
layout(push_constant) uniform PC { vkt_ln_push p; };

shared vec2 red[gl_WorkGroupSize.y][gl_WorkGroupSize.x];

void main() {
    uint TX = gl_WorkGroupSize.x, TY = gl_WorkGroupSize.y;
    uint ngx = (p.D + TX - 1u) / TX;
    uint nparts = (p.R + VKT_LN_ROWS_PER_PART - 1u) / VKT_LN_ROWS_PER_PART;
    uint group = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
    if (group >= ngx * nparts) return; // the whole workgroup
    uint lx = gl_LocalInvocationID.x, ly = gl_LocalInvocationID.y;
    uint q = group / ngx, col = (group % ngx) * TX + lx;
    uint r0 = q * VKT_LN_ROWS_PER_PART, r1 = min(p.R, r0 + VKT_LN_ROWS_PER_PART);
    vec2 acc = vec2(0.0);
    if (col < p.D)
        for (uint r = r0 + ly; r < r1; r += TY) {
            float d = dy[r * p.D + col];
            acc += vec2(d * ((x[r * p.D + col] - stats[2u * r]) * stats[2u * r + 1u]), d);
        }
    red[ly][lx] = acc;
    barrier();
    if (ly == 0u && col < p.D) {
        vec2 s = vec2(0.0);
        for (uint k = 0u; k < TY; k++) s += red[k][lx];
        uint o = ((p.part0 + q) * p.D + col) * 2u;
        part[o] = s.x;
        part[o + 1u] = s.y;
    }
}
