// attn_fwd: the fused core of causal self-attention, forward. Per sample b, head h and query row i
// (D = C / heads, scale = 1 / sqrt(D)):
//   o[i] = sum_{j <= i} softmax_j(scale * q_i . k_j) v_j,
//   lse[i] = logsumexp_{j <= i}(scale * q_i . k_j)
// Reads qkv [nb*T, 3C]; writes o [nb*T, C] and lse [nb, heads, T] (attn_abi.h has the layouts).
// A workgroup is one block of local_size_x * R query rows of one (b, h) (grid: x = query blocks,
// y = nb * heads); each invocation holds the q and o of its R rows in registers and walks the keys
// 0 .. end of its block TILE at a time with an online softmax (per row the running max m and sum
// l; o rescaled by exp(m_old - m_new) when a block of keys raises the max), so the T x T scores
// never exist in memory: only TILE scores per row, in registers.
// The keys and values stream through shared memory (TEXEL 0: each block loaded once by the
// workgroup), or are read straight from the texel view qkv_t (TEXEL 1, lavapipe: inside a loop
// every storage-buffer or shared-memory load there is a loop over the 8 lanes, a texel fetch a
// branch-free gather; no shared memory, no barriers). The loops over a block's keys, an
// invocation's rows and a row's vec4s run their full constant counts (TILE, R, D4), so that they
// unroll; missing keys of a partial block are zeros (or row T - 1 again) that the causal mask
// hides.
#version 450
#extension GL_EXT_control_flow_attributes : require
#include "vkt_abi.h"
#include "attn_abi.h"
#include "attn_common.glsl"

layout(std430, binding = 0) readonly buffer QKV { float qkv[]; };
layout(std430, binding = 1) writeonly buffer O { float o[]; };
layout(std430, binding = 2) writeonly buffer LSE { float lse[]; };
layout(binding = 3) uniform samplerBuffer qkv_t; // qkv as vec4 texels (TEXEL 1 only)

shared vec4 ks[TEXEL != 0u ? 1u : TILE * D4];
shared vec4 vs[TEXEL != 0u ? 1u : TILE * D4];

// Per row r of the invocation: q (scaled), the output accumulator, the running max and sum.
vec4 q[R * D4], acc[R * D4];
float m[R], l[R];

// Row j of the current block of keys, vec4 d4: from shared memory or from the texels of the
// key's row (kt, vt: texel indices of its k and v).
#define KEY4(j, kt, d4) (TEXEL != 0u ? texelFetch(qkv_t, int((kt) + (d4))) : ks[(j) * D4 + (d4)])
#define VAL4(j, vt, d4) (TEXEL != 0u ? texelFetch(qkv_t, int((vt) + (d4))) : vs[(j) * D4 + (d4)])

// One block of keys k0 .. k0 + TILE - 1 for the rows i0, i0 + W, ... of (b, h) (clamped to T - 1;
// i0: the first).
void key_block(uint b, uint h, uint i0, uint k0) {
    const uint W = gl_WorkGroupSize.x;
    float s[R * TILE];
    [[unroll]] for (uint j = 0u; j < TILE; j++) {
        uint kt = attn_qkv_at(b, min(k0 + j, p.T - 1u), p.C + h * D) / 4u;
        float x[R];
        [[unroll]] for (uint r = 0u; r < R; r++) x[r] = 0.0;
        ATTN_FOR_D4(d4) {
            vec4 kv = KEY4(j, kt, d4);
            [[unroll]] for (uint r = 0u; r < R; r++) x[r] += dot(q[r * D4 + d4], kv);
        }
        // Keys past the row (T and past included) are masked; key 0 is in the first block and
        // every row sees it, so m is finite from the first block on.
        [[unroll]] for (uint r = 0u; r < R; r++)
            s[r * TILE + j] = k0 + j <= min(i0 + r * W, p.T - 1u) ? x[r] : ATTN_MASKED;
    }
    float mn[R];
    [[unroll]] for (uint r = 0u; r < R; r++) {
        float mt = m[r];
        [[unroll]] for (uint j = 0u; j < TILE; j++) mt = max(mt, s[r * TILE + j]);
        float alpha = exp(m[r] - mt);
        l[r] *= alpha;
        ATTN_FOR_D4(d4) acc[r * D4 + d4] *= alpha;
        mn[r] = mt;
        m[r] = mt;
    }
    [[unroll]] for (uint j = 0u; j < TILE; j++) {
        uint vt = attn_qkv_at(b, min(k0 + j, p.T - 1u), 2u * p.C + h * D) / 4u;
        float pj[R];
        [[unroll]] for (uint r = 0u; r < R; r++) {
            pj[r] = exp(s[r * TILE + j] - mn[r]);
            l[r] += pj[r];
        }
        ATTN_FOR_D4(d4) {
            vec4 vv = VAL4(j, vt, d4);
            [[unroll]] for (uint r = 0u; r < R; r++) acc[r * D4 + d4] += pj[r] * vv;
        }
    }
}

void main() {
    const uint W = gl_WorkGroupSize.x;
    uint lane = gl_LocalInvocationID.x;
    uint bh = gl_WorkGroupID.y, b = bh / p.heads, h = bh - b * p.heads;
    if (b >= p.nb) return; // whole workgroup
    uint q0 = gl_WorkGroupID.x * W * R, i0 = q0 + lane;
    // Rows past T compute row T - 1 again (the loops and barriers stay uniform) and store nothing.
    for (uint r = 0u; r < R; r++) {
        uint qrow = attn_qkv_at(b, min(i0 + r * W, p.T - 1u), h * D);
        for (uint d4 = 0u; d4 < D4; d4++) {
            ATTN_LOAD4(q[r * D4 + d4], qkv, qrow, d4);
            q[r * D4 + d4] *= p.scale;
            acc[r * D4 + d4] = vec4(0.0);
        }
        m[r] = ATTN_MASKED;
        l[r] = 0.0;
    }
    uint kend = min(q0 + W * R, p.T); // the block's last row sees keys 0 .. kend - 1
    for (uint k0 = 0u; k0 < kend; k0 += TILE) {
        if (TEXEL == 0u) {
            barrier(); // the previous block is used up
            for (uint e = lane; e < TILE * D4; e += W) {
                uint j = e / D4, d4 = e - j * D4;
                if (k0 + j < p.T) {
                    uint krow = attn_qkv_at(b, k0 + j, p.C + h * D);
                    ATTN_LOAD4(ks[e], qkv, krow, d4);
                    ATTN_LOAD4(vs[e], qkv, krow + p.C, d4);
                } else {
                    ks[e] = vec4(0.0);
                    vs[e] = vec4(0.0);
                }
            }
            barrier();
        }
        key_block(b, h, i0, k0);
    }
    for (uint r = 0u; r < R; r++) {
        uint i = i0 + r * W;
        if (i >= p.T) break;
        vec4 y[D4];
        float inv = 1.0 / l[r];
        for (uint d4 = 0u; d4 < D4; d4++) y[d4] = acc[r * D4 + d4] * inv;
        ATTN_STORE_ROW(o, attn_row_at(p.o_base, b, i, h * D), y);
        lse[attn_bht(p.lse_base, b, h, i)] = m[r] + log(l[r]);
    }
}
