// pool_global: global_avgpool forward, y[planes] = the mean of each plane of x[planes, hw].
// Reads x[planes * hw] (from x[off0]); writes y[planes] (from y[off1]). A plane is a row of
// rows.glsl: one invocation per plane (ROW_MODE 0: small planes, or no subgroup shuffles) or a
// team of TEAM lanes whose partial sums a butterfly adds (ROW_MODE 1), for planes of up to
// 224 x 224 = 50176 elements and more.
#version 450
#extension GL_EXT_control_flow_attributes : require
#include "pool_abi.h"
#include "rows.glsl"

layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) writeonly buffer Y { float y[]; };
layout(push_constant) uniform PC { vkt_pool_rows_push p; };

void main() {
    uint row = row_index();
    if (row >= p.planes) return; // the whole team of the row returns: no shuffle reads a gone lane
    uint base = p.off0 + row * p.hw, c0 = col_first(), step = col_step();
    float s = 0.0;
    for (uint j = c0; j < p.hw; j += step) s += x[base + j];
    s = row_sum(s);
    if (c0 == 0) y[p.off1 + row] = s / float(p.hw);
}
