// bias_grad: db[N] += sum over rows of dy[R,N] (accumulates).
// Reads dy[R*N]; reads and writes db[N]. A workgroup is TX columns x TY row slices
// (local_size_x, local_size_y): invocation (lx, ly) sums rows ly, ly+TY, ... of column
// group*TX + lx, so neighbouring invocations read neighbouring floats; the TY partial sums of a
// column are then added in a fixed order (deterministic, no atomics). Groups folded into y.
#version 450
#extension GL_EXT_control_flow_attributes : require
#include "vkt_abi.h"

layout(local_size_x_id = VKT_SPEC_LOCAL_X, local_size_y_id = VKT_SPEC_LOCAL_Y) in;
layout(std430, binding = 0) readonly buffer DY { float dy[]; };
layout(std430, binding = 1) buffer DB { float db[]; };
layout(push_constant) uniform PC { vkt_bias_push p; };

shared float part[gl_WorkGroupSize.y][gl_WorkGroupSize.x];

void main() {
    uint group = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
    if (group * gl_WorkGroupSize.x >= p.N) return; // whole workgroup past the end (folded grid)
    uint lx = gl_LocalInvocationID.x, ly = gl_LocalInvocationID.y;
    uint col = group * gl_WorkGroupSize.x + lx;
    float acc = 0.0;
    if (col < p.N)
        for (uint r = ly; r < p.R; r += gl_WorkGroupSize.y) acc += dy[r * p.N + col];
    part[ly][lx] = acc;
    barrier();
    if (ly == 0 && col < p.N) {
        float s = 0.0;
        [[unroll]] for (uint k = 0; k < gl_WorkGroupSize.y; k++) s += part[k][lx];
        db[col] += s;
    }
}
