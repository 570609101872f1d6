// accuracy: correct[0] += number of rows b of logits[B,C] whose argmax equals labels[b].
// Reads logits[B*C], labels[B]; atomically adds to correct[0] (uint32); writes preds[B] (uint32
// argmax) when WRITE_PREDS (constant 5) = 1 (otherwise binding 3 is unused and bound to correct).
// Ties go to the lowest index, as torch.argmax. Row layout: rows.glsl.
#version 450
#extension GL_EXT_control_flow_attributes : require
#include "vkt_abi.h"
#include "rows.glsl"

layout(constant_id = 5) const uint WRITE_PREDS = 0;
layout(std430, binding = 0) readonly buffer L { float logits[]; };
layout(std430, binding = 1) readonly buffer Y { uint labels[]; };
layout(std430, binding = 2) buffer N { uint correct[]; };
layout(std430, binding = 3) writeonly buffer P { uint preds[]; };
layout(push_constant) uniform PC { vkt_rows_push p; };

void main() {
    uint row = row_index();
    if (row >= p.B) return; // the whole team of the row returns: no shuffle reads a gone lane
    uint base = row * p.C, c0 = col_first(), step = col_step();
    // Scanning upwards with a strict > keeps the lowest index of equal maxima.
    float best = -1.0 / 0.0;
    uint arg = 0xffffffffu;
    for (uint j = c0; j < p.C; j += step) {
        float v = logits[base + j];
        if (arg == 0xffffffffu || v > best) best = v, arg = j;
    }
    if (ROW_MODE == 1) {
        // Lowest index among equal maxima: a total order, so every lane ends with the same pair.
        [[unroll]] for (uint o = TEAM / 2; o > 0; o /= 2) {
            float v = subgroupShuffleXor(best, o);
            uint a = subgroupShuffleXor(arg, o);
            // A lane with no column (C < TEAM) holds arg 0xffffffff and never wins.
            if (a != 0xffffffffu && (arg == 0xffffffffu || v > best || (v == best && a < arg)))
                best = v, arg = a;
        }
    }
    if (c0 != 0) return;
    if (WRITE_PREDS == 1) preds[row] = arg;
    if (arg == labels[row]) atomicAdd(correct[0], 1u);
}
