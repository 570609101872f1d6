// conv_dw_reduce: the split-K weight gradient's sums (conv_dw.comp): dw[M][N] += the sum over
// j < parts of part[j][m][c] for columns c < N, and, when NB = N + 1, db[M] += the sums of
// column N. Reads part[parts][M][NB] (binding 0); reads and writes dw (binding 1) and db
// (binding 2; dw again when there is no bias column). One invocation per (m, c), folded into y;
// the partials added in the order of j, the same every run.
#version 450
#include "conv_abi.h"

layout(local_size_x_id = VKT_SPEC_LOCAL_X) in;
layout(std430, binding = 0) readonly buffer PART { float part[]; };
layout(std430, binding = 1) buffer DW { float dw[]; };
layout(std430, binding = 2) buffer DB { float db[]; };
layout(push_constant) uniform PC { vkt_conv_reduce_push p; };

void main() {
    uint group = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
    uint e = group * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
    uint per = p.M * p.NB;
    if (e >= per) return;
    uint m = e / p.NB, c = e - m * p.NB;
    float s = 0.0;
    for (uint j = 0u; j < p.parts; j++) s += part[j * per + e];
    if (c < p.N) dw[m * p.N + c] += s;
    else db[m] += s;
}
