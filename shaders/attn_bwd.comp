// attn_bwd: the fused core of causal self-attention, backward (FlashAttention-2), with the
// forward's scores recomputed from q, k and the saved logsumexp: per sample b, head h,
//   P_ij = exp(scale * q_i . k_j - lse_i) for j <= i (else 0),  dP_ij = do_i . v_j,
//   dS_ij = P_ij (dP_ij - delta_i),
//   dq_i = scale * sum_j dS_ij k_j,  dk_j = scale * sum_i dS_ij q_i,  dv_j = sum_i P_ij do_i.
// Reads qkv [nb*T, 3C], do [nb*T, C], stats [nb, heads, T, 4] = (lse, delta, 0, 0) per row
// (attn_stats; attn_abi.h has the layouts); writes dqkv [nb*T, 3C] (overwrites). Grid: x = row
// blocks of local_size_x * R rows, y = nb * heads, z = 2:
//   z = 0, the query side: an invocation holds q_i, do_i and dq_i of its R query rows i in
//          registers and walks the keys 0 .. end of its block TILE at a time;
//   z = 1, the key side: an invocation holds k_j, v_j, dk_j and dv_j of its R key rows j and
//          walks the queries from its block's first key to T - 1 TILE at a time.
// One dispatch for both, so that the two writers of dqkv's rows are one command (they write
// disjoint columns). Every gradient row is one invocation's sum in a fixed order: deterministic,
// no atomics. Rows past T compute row T - 1 again (loops and barriers stay uniform across the
// workgroup) and store nothing.
// The streamed rows come through shared memory (TEXEL 0: each block loaded once by the
// workgroup) or straight from the texel views (TEXEL 1, lavapipe: see attn_fwd.comp); the loops
// over a block's rows and a row's vec4s run their full constant counts, so that they unroll, and
// rows of a partial block past T are masked.
#version 450
#extension GL_EXT_control_flow_attributes : require
#include "vkt_abi.h"
#include "attn_abi.h"
#include "attn_common.glsl"

layout(std430, binding = 0) readonly buffer QKV { float qkv[]; };
layout(std430, binding = 1) readonly buffer DO { float dout[]; };
layout(std430, binding = 2) readonly buffer STATS { vec4 stats[]; };
layout(std430, binding = 3) writeonly buffer DQKV { float dqkv[]; };
// The same arrays as vec4 texels (TEXEL 1 only).
layout(binding = 4) uniform samplerBuffer qkv_t;
layout(binding = 5) uniform samplerBuffer do_t;
layout(binding = 6) uniform samplerBuffer stats_t;

// The streamed block: k and v (query side), or q and do with their rows' (lse, delta) (key side).
shared vec4 ta[TEXEL != 0u ? 1u : TILE * D4];
shared vec4 tb[TEXEL != 0u ? 1u : TILE * D4];
shared vec2 tst[TEXEL != 0u ? 1u : TILE];

// Row t of the streamed block, vec4 d4: from shared memory or from the texel of index rt + d4.
#define ROW_A(t, rt, d4) (TEXEL != 0u ? texelFetch(qkv_t, int((rt) + (d4))) : ta[(t) * D4 + (d4)])
#define ROW_B(tex, t, rt, d4) (TEXEL != 0u ? texelFetch(tex, int((rt) + (d4))) : tb[(t) * D4 + (d4)])

// Loads rows r0 .. r0 + TILE - 1 of the streamed block into shared memory (TEXEL 0), zeros past
// T: columns ca (of qkv) into ta, and columns cb of qkv (query side: v) or of do (key side) into
// tb, with the rows' stats (key side).
void load_block(uint b, uint h, uint r0, uint ca, uint cb, bool key_side) {
    const uint W = gl_WorkGroupSize.x;
    uint lane = gl_LocalInvocationID.x;
    barrier(); // the previous block is used up
    for (uint e = lane; e < TILE * D4; e += W) {
        uint t = e / D4, d4 = e - t * D4;
        if (r0 + t < p.T) {
            ATTN_LOAD4(ta[e], qkv, attn_qkv_at(b, r0 + t, ca), d4);
            if (key_side) {
                ATTN_LOAD4(tb[e], dout, attn_row_at(p.do_base, b, r0 + t, cb), d4);
            } else {
                ATTN_LOAD4(tb[e], qkv, attn_qkv_at(b, r0 + t, cb), d4);
            }
        } else {
            ta[e] = vec4(0.0);
            tb[e] = vec4(0.0);
        }
    }
    if (key_side)
        for (uint t = lane; t < TILE; t += W)
            tst[t] = r0 + t < p.T ? stats[p.stats_base / 4u + attn_bht(0u, b, h, r0 + t)].xy
                                  : vec2(0.0);
    barrier();
}

void query_side() {
    const uint W = gl_WorkGroupSize.x;
    uint lane = gl_LocalInvocationID.x;
    uint bh = gl_WorkGroupID.y, b = bh / p.heads, h = bh - b * p.heads;
    if (b >= p.nb) return; // whole workgroup
    uint q0 = gl_WorkGroupID.x * W * R, i0 = q0 + lane;
    vec4 q[R * D4], g[R * D4], dq[R * D4];
    vec2 st[R]; // (lse_i, delta_i)
    for (uint r = 0u; r < R; r++) {
        uint i = min(i0 + r * W, p.T - 1u);
        uint qrow = attn_qkv_at(b, i, h * D), grow = attn_row_at(p.do_base, b, i, h * D);
        for (uint d4 = 0u; d4 < D4; d4++) {
            ATTN_LOAD4(q[r * D4 + d4], qkv, qrow, d4);
            q[r * D4 + d4] *= p.scale;
            ATTN_LOAD4(g[r * D4 + d4], dout, grow, d4);
            dq[r * D4 + d4] = vec4(0.0);
        }
        st[r] = stats[p.stats_base / 4u + attn_bht(0u, b, h, i)].xy;
    }
    uint kend = min(q0 + W * R, p.T);
    for (uint k0 = 0u; k0 < kend; k0 += TILE) {
        if (TEXEL == 0u) load_block(b, h, k0, p.C + h * D, 2u * p.C + h * D, false);
        [[unroll]] for (uint j = 0u; j < TILE; j++) {
            uint kt = attn_qkv_at(b, min(k0 + j, p.T - 1u), p.C + h * D) / 4u, vt = kt + p.C / 4u;
            vec4 k[D4];
            float s[R], dp[R];
            [[unroll]] for (uint r = 0u; r < R; r++) s[r] = dp[r] = 0.0;
            ATTN_FOR_D4(d4) {
                k[d4] = ROW_A(j, kt, d4);
                vec4 v = ROW_B(qkv_t, j, vt, d4);
                [[unroll]] for (uint r = 0u; r < R; r++) {
                    s[r] += dot(q[r * D4 + d4], k[d4]);
                    dp[r] += dot(g[r * D4 + d4], v);
                }
            }
            [[unroll]] for (uint r = 0u; r < R; r++) {
                float pij = k0 + j <= min(i0 + r * W, p.T - 1u) ? exp(s[r] - st[r].x) : 0.0;
                float ds = pij * (dp[r] - st[r].y);
                ATTN_FOR_D4(d4) dq[r * D4 + d4] += ds * k[d4];
            }
        }
    }
    for (uint r = 0u; r < R; r++) {
        uint i = i0 + r * W;
        if (i >= p.T) break;
        vec4 y[D4];
        for (uint d4 = 0u; d4 < D4; d4++) y[d4] = dq[r * D4 + d4] * p.scale;
        ATTN_STORE_ROW(dqkv, p.dqkv_base + (b * p.T + i) * 3u * p.C + h * D, y);
    }
}

void key_side() {
    const uint W = gl_WorkGroupSize.x;
    uint lane = gl_LocalInvocationID.x;
    uint bh = gl_WorkGroupID.y, b = bh / p.heads, h = bh - b * p.heads;
    if (b >= p.nb) return; // whole workgroup
    uint k0 = gl_WorkGroupID.x * W * R, j0 = k0 + lane;
    vec4 k[R * D4], v[R * D4], dk[R * D4], dv[R * D4];
    for (uint r = 0u; r < R; r++) {
        uint krow = attn_qkv_at(b, min(j0 + r * W, p.T - 1u), p.C + h * D);
        for (uint d4 = 0u; d4 < D4; d4++) {
            ATTN_LOAD4(k[r * D4 + d4], qkv, krow, d4);
            ATTN_LOAD4(v[r * D4 + d4], qkv, krow + p.C, d4);
            dk[r * D4 + d4] = vec4(0.0);
            dv[r * D4 + d4] = vec4(0.0);
        }
    }
    for (uint i0 = k0; i0 < p.T; i0 += TILE) {
        if (TEXEL == 0u) load_block(b, h, i0, h * D, h * D, true);
        [[unroll]] for (uint t = 0u; t < TILE; t++) {
            uint i = min(i0 + t, p.T - 1u);
            uint qt = attn_qkv_at(b, i, h * D) / 4u, gt = attn_row_at(p.do_base, b, i, h * D) / 4u;
            vec2 st = TEXEL != 0u
                          ? texelFetch(stats_t, int(p.stats_base / 4u + attn_bht(0u, b, h, i))).xy
                          : tst[t];
            vec4 qi[D4], gi[D4];
            float s[R], dp[R];
            [[unroll]] for (uint r = 0u; r < R; r++) s[r] = dp[r] = 0.0;
            ATTN_FOR_D4(d4) {
                qi[d4] = ROW_A(t, qt, d4);
                gi[d4] = ROW_B(do_t, t, gt, d4);
                [[unroll]] for (uint r = 0u; r < R; r++) {
                    s[r] += dot(qi[d4], k[r * D4 + d4]);
                    dp[r] += dot(gi[d4], v[r * D4 + d4]);
                }
            }
            [[unroll]] for (uint r = 0u; r < R; r++) {
                // Queries before the key, and rows of a partial block past T, see nothing of it.
                uint j = min(j0 + r * W, p.T - 1u);
                float pij = i0 + t >= j && i0 + t < p.T ? exp(s[r] * p.scale - st.x) : 0.0;
                float ds = pij * (dp[r] - st.y) * p.scale;
                ATTN_FOR_D4(d4) {
                    dv[r * D4 + d4] += pij * gi[d4];
                    dk[r * D4 + d4] += ds * qi[d4];
                }
            }
        }
    }
    for (uint r = 0u; r < R; r++) {
        uint j = j0 + r * W;
        if (j >= p.T) break;
        uint dst = p.dqkv_base + (b * p.T + j) * 3u * p.C + p.C + h * D;
        vec4 y[D4];
        for (uint d4 = 0u; d4 < D4; d4++) y[d4] = dk[r * D4 + d4];
        ATTN_STORE_ROW(dqkv, dst, y);
        for (uint d4 = 0u; d4 < D4; d4++) y[d4] = dv[r * D4 + d4];
        ATTN_STORE_ROW(dqkv, dst + p.C, y);
    }
}

void main() {
    if (gl_WorkGroupID.z == 0u)
        query_side();
    else
        key_side();
}
