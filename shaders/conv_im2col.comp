// conv_im2col: the columns of a chunk of nb samples, for a convolution computed as a product.
// Reads x[nb][C][H][W] (from element act_off of binding 0); writes cols[K][nb*P] (binding 1 as
// float[], binding 2 as vec4[], the same view), K = C*KH*KW, P = OH*OW:
//   cols[(c*KH + i)*KW + j][b*P + oh*OW + ow] = x[b][c][oh*SH + i - PH][ow*SW + j - PW], or 0
// in the padding. An invocation makes 4 neighbouring columns of one row (x of the grid: columns
// / 4; y and z: the K rows, row = z * numY + y) and writes them as one vec4 where the flags
// allow (VKT_CONV_VEC4: n % 4 == 0 and cols 16-byte aligned) and its workgroup's columns all
// exist, else float by float.
#version 450
#extension GL_EXT_control_flow_attributes : require
#include "conv_abi.h"
#include "conv_geom.glsl"

layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) writeonly buffer COLS { float cols[]; };
layout(std430, binding = 2) writeonly buffer COLS4 { vec4 cols4[]; };
layout(push_constant) uniform PC { vkt_conv_push p; };

void main() {
    uint n0 = 4u * gl_GlobalInvocationID.x;
    uint k = gl_WorkGroupID.z * gl_NumWorkGroups.y + gl_WorkGroupID.y;
    if (n0 >= p.n || k >= K) return;
    uint c = k / KK, r = k - c * KK;
    uint i = r / KW, j = r - i * KW;
    // Column n0's sample and output position, then the next three's by steps.
    uint b = n0 / P, q = n0 - b * P;
    uint oh = q / OW, ow = q - oh * OW;
    vec4 v;
    [[unroll]] for (uint t = 0u; t < 4u; t++) {
        // Unsigned: a row or column in the padding before the image wraps to a huge value.
        uint ih = oh * SH + i - PH, iw = ow * SW + j - PW;
        bool inside = ih < H && iw < W && n0 + t < p.n;
        // Outside, a load of an element that exists (the chunk's first), then discarded: no
        // branch around the load (a branch that may differ between lanes runs both sides on
        // lavapipe and SwiftShader).
        float f = x[inside ? p.act_off + ((b * C + c) * H + ih) * W + iw : p.act_off];
        v[t] = inside ? f : 0.0;
        ow++;
        bool wrap = ow == OW;
        ow = wrap ? 0u : ow;
        oh += wrap ? 1u : 0u;
        wrap = oh == OH;
        oh = wrap ? 0u : oh;
        b += wrap ? 1u : 0u;
    }
    // The same test for the whole workgroup (its columns all inside the row): lavapipe and
    // SwiftShader run both sides of a branch that may differ between lanes (ew.glsl).
    uint at = k * p.n + n0;
    uint group_end = (gl_WorkGroupID.x + 1u) * gl_WorkGroupSize.x * 4u;
    if ((p.flags & VKT_CONV_VEC4) != 0u && group_end <= p.n) {
        cols4[at / 4u] = v;
    } else {
        [[unroll]] for (uint t = 0u; t < 4u; t++)
            if (n0 + t < p.n) cols[at + t] = v[t];
    }
}
