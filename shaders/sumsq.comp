// sumsq: out[0] += sum of x[i]^2 for i < n (one float; accumulates).
// Reads x[n] (bound as float[] and vec4[], as in ew.glsl); reads and writes out[0].
// Workgroups take blocks of W*KS vec4s, block b by workgroup b mod G (at most 256 workgroups,
// ops_nn.c): lane l reads vec4s l, l+W, ... of the block (neighbouring lanes read neighbouring
// vec4s, the inner loop unrolled, the outer one workgroup-uniform). With SUBGROUP = 1 each
// subgroup adds its lanes' sums by a shuffle-xor butterfly and one lane adds the subgroup's sum
// into out[0]; with SUBGROUP = 0 (no shuffles on the device) every lane adds its own. There is no
// barrier: on lavapipe and SwiftShader a barrier costs microseconds per workgroup, which made a
// shared-memory reduction many times slower than this. The adds into out[0] are a compare-and-swap loop
// on the float's bits (SwiftShader has no float atomics); capping the grid keeps them few (at most
// 8k on lavapipe, whose subgroups are 8 wide) and the rounding small, but their order is up to the
// device, so the last bits of out[0] may differ between runs.
#version 450
#extension GL_EXT_control_flow_attributes : require
#extension GL_KHR_shader_subgroup_shuffle : enable
#include "vkt_abi.h"

layout(local_size_x_id = VKT_SPEC_LOCAL_X) in;
layout(constant_id = 3) const uint SUBGROUP = 1;
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer X4 { vec4 x4[]; };
layout(std430, binding = 2) buffer O { uint out_bits[]; };
layout(push_constant) uniform PC { vkt_scale_push p; }; // p.n elements; p.s unused

const uint KS = 8; // vec4s per lane per block (ops_nn.c's SUMSQ_BLOCK = 4 * KS * W floats)

void main() {
    uint l = gl_LocalInvocationID.x;
    uint nq = p.n / 4u; // whole vec4s
    uint block = gl_WorkGroupSize.x * KS;
    vec4 a = vec4(0.0);
    for (uint b0 = gl_WorkGroupID.x * block; b0 < nq; b0 += gl_NumWorkGroups.x * block) {
        if (b0 + block <= nq) {
            [[unroll]] for (uint k = 0; k < KS; k++) {
                vec4 v = x4[b0 + k * gl_WorkGroupSize.x + l];
                a += v * v;
            }
        } else {
            [[unroll]] for (uint k = 0; k < KS; k++) {
                uint q = b0 + k * gl_WorkGroupSize.x + l;
                if (q < nq) { // an if, not ?: which would load x4[q] past the end too
                    vec4 v = x4[q];
                    a += v * v;
                }
            }
        }
    }
    uint g = gl_WorkGroupID.x * gl_WorkGroupSize.x + l;
    if (g < p.n - 4u * nq) { // the last n % 4 floats, one per lane of workgroup 0
        float t = x[4u * nq + g];
        a.x += t * t;
    }
    float s = (a.x + a.y) + (a.z + a.w);
    if (SUBGROUP == 1) {
        for (uint o = gl_SubgroupSize / 2u; o > 0u; o /= 2u) s += subgroupShuffleXor(s, o);
        if (gl_SubgroupInvocationID != 0u) return;
    }
    if (s == 0.0) return; // nothing to add (also lanes past the end)
    uint old = out_bits[0], seen;
    do {
        seen = old;
        old = atomicCompSwap(out_bits[0], seen, floatBitsToUint(uintBitsToFloat(seen) + s));
    } while (old != seen);
}
