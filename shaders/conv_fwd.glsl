// conv_fwd.glsl: the kernels conv_fwd (shaders/conv_fwd.comp) and conv_fwd64 (conv_fwd64.comp,
// CONV_F64: for devices with shaderFloat64, V = 8 too). Included, not compiled on its own.
//
// The forward product of a convolution with a small inner size K (the columns' rows,
// C*KH*KW, e.g. 9 for one input channel and a 3x3 kernel), written straight into the NCHW output:
//   y[b][m][q] = bias[m] (BIAS) + sum over k < K of w[m][k] cols[k][b*P + q]
// for the chunk's n = nb*P columns. Reads cols[K][n] (as vec4 texels: binding 0 (TEXEL), as
// vec4s: 1, as floats: 2, the same view), w[M][K] (3) and bias[M] (4); writes y from element
// y_off (5 as vec4s or, V = 8, dvec4s; 6 as floats, the same view), each element once.
// Workgroups of x: tiles of TM output channels; of y: groups of `pieces` V-float column pieces,
// lane l taking pieces l, l + WG, ... of its group. V = 4 or 8 needs P % V == 0 and
// y_off % V == 0 (a piece inside one sample, its store one aligned vec4 or dvec4); V = 8 is
// conv_fwd64's only and needs TEXEL (the host checks).
//
// Why: the engine's matmul has no wide kernel for a K that is not a multiple of 8 (its scalar
// kernel ran the 1 -> 32 channel 3x3 conv of fashion_cnn at 1.6 GFLOP/s on lavapipe), and its
// output [M][n] needed a permute to NCHW after it. Here each lane keeps its tile's TM*K weights
// (loaded once) and every column piece it loads feeds TM FMAs; on lavapipe a dvec4 store costs
// about what a vec4 store does (a loop over the lanes per component), so V = 8 halves the cost of
// the stores, which is most of the kernel's.
#extension GL_EXT_control_flow_attributes : require
#ifdef CONV_F64
#extension GL_ARB_gpu_shader_fp64 : require
#endif
#include "conv_abi.h"

layout(local_size_x_id = VKT_SPEC_LOCAL_X) in;
layout(constant_id = VKT_SPEC_CONV_FWD_TM) const uint TM = 1;
layout(constant_id = VKT_SPEC_CONV_FWD_K) const uint K = 1;
layout(constant_id = VKT_SPEC_CONV_FWD_V) const uint V = 1;
layout(constant_id = VKT_SPEC_CONV_FWD_TEXEL) const bool TEXEL = false;
layout(constant_id = VKT_SPEC_CONV_FWD_P) const uint P = 1;
layout(constant_id = VKT_SPEC_CONV_FWD_BIAS) const bool BIAS = false;

layout(binding = 0) uniform samplerBuffer ct;
layout(std430, binding = 1) readonly buffer C4 { vec4 c4[]; };
layout(std430, binding = 2) readonly buffer C1 { float c1[]; };
layout(std430, binding = 3) readonly buffer Wt { float w[]; };
layout(std430, binding = 4) readonly buffer Bias { float bias[]; };
layout(std430, binding = 5) writeonly buffer Y4 { vec4 y4[]; };
layout(std430, binding = 6) writeonly buffer Y1 { float y1[]; };
#ifdef CONV_F64
layout(std430, binding = 5) writeonly buffer Y8 { dvec4 y8[]; };
#endif
layout(push_constant) uniform PC { vkt_conv_fwd_push p; };

// The 4 floats from element e (a multiple of 4, or V = 1: e's float in x).
vec4 load_c(uint e) {
    if (V == 1u) return vec4(c1[e], 0.0, 0.0, 0.0);
    return TEXEL ? texelFetch(ct, int(e / 4u)) : c4[e / 4u];
}

// The 8 floats lo, hi stored as one dvec4 at element e (a multiple of 8).
void store8(uint e, vec4 lo, vec4 hi) {
#ifdef CONV_F64
    uvec4 l = floatBitsToUint(lo), h = floatBitsToUint(hi);
    y8[e / 8u] = dvec4(packDouble2x32(l.xy), packDouble2x32(l.zw), packDouble2x32(h.xy),
                       packDouble2x32(h.zw));
#endif
}

// V = 8: two pieces of 4 side by side (V = 1 or 4: one piece, VH = 1).
const uint VH = V == 8u ? 2u : 1u;
const uint VP = V == 8u ? 4u : V;

void main() {
    const uint WG = gl_WorkGroupSize.x;
    uint m0 = gl_WorkGroupID.x * TM;
    if (m0 >= p.M) return; // the whole workgroup
    uint l = gl_LocalInvocationID.x;
    uint q0 = gl_WorkGroupID.y * p.pieces, q1 = min(q0 + p.pieces, p.n / V);
    // The tile's weights and biases, rows past M clamped (computed, not stored).
    float wr[TM][K], br[TM];
    [[unroll]] for (uint r = 0u; r < TM; r++) {
        uint m = min(m0 + r, p.M - 1u);
        [[unroll]] for (uint k = 0u; k < K; k++) wr[r][k] = w[m * K + k];
        br[r] = BIAS ? bias[m] : 0.0;
    }
    for (uint q = q0 + l; q < q1; q += WG) {
        uint j = q * V;
        vec4 cv[VH][K];
        [[unroll]] for (uint h = 0u; h < VH; h++) {
            [[unroll]] for (uint k = 0u; k < K; k++) cv[h][k] = load_c(k * p.n + j + h * 4u);
        }
        uint b = j / P, o = p.y_off + (b * p.M + m0) * P + (j - b * P);
        [[unroll]] for (uint r = 0u; r < TM; r++) {
            vec4 s[VH];
            [[unroll]] for (uint h = 0u; h < VH; h++) {
                s[h] = vec4(br[r]);
                [[unroll]] for (uint k = 0u; k < K; k++)
                    s[h] = fma(vec4(wr[r][k]), cv[h][k], s[h]);
            }
            if (m0 + r < p.M) {
                if (V == 8u) store8(o + r * P, s[0], s[VH - 1u]);
                else if (V == 4u) y4[(o + r * P) / 4u] = s[0];
                else y1[o + r * P] = s[0].x;
            }
        }
    }
}
