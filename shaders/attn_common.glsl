// attn_common.glsl: what the causal self-attention kernels share (included, not compiled on its
// own): the specialization constants, the push constants and the loads of a head's D-row.
//
// A D-row (one head's q, k, v, o or do of one position) is held as D4 = ceil(D / 4) vec4s, the
// last one zero-padded when D is not a multiple of 4, so that every dot product and update runs
// on whole vec4s and the padding adds zeros. One invocation holds the rows of one position (a
// query row in attn_fwd and attn_dq, a key row in attn_dkdv) in registers; the rows of the other
// side stream through shared memory TILE at a time, loaded by the whole workgroup.
layout(local_size_x_id = VKT_SPEC_LOCAL_X) in;
layout(constant_id = VKT_ATTN_SPEC_D) const uint D = 64;
layout(constant_id = VKT_ATTN_SPEC_D4) const uint D4 = 16;
layout(constant_id = VKT_ATTN_SPEC_TILE) const uint TILE = 32;
layout(constant_id = VKT_ATTN_SPEC_TEXEL) const uint TEXEL = 0;
layout(constant_id = VKT_ATTN_SPEC_R) const uint R = 1;
layout(constant_id = VKT_ATTN_SPEC_DU) const uint DU = 16;

// for d4 in 0 .. D4 - 1, DU at a time: the inner loop unrolled (DU divides D4), the outer one a
// loop where D4 / DU > 1, so that a large head does not unroll into code that lavapipe takes
// minutes to compile (D = 768 unrolled whole had not compiled after 10 minutes).
#define ATTN_FOR_D4(d4)                                                                            \
    for (uint c4_ = 0u; c4_ < D4; c4_ += DU)                                                       \
        [[unroll]] for (uint u_ = 0u, d4 = c4_; u_ < DU; u_++, d4++)

layout(push_constant) uniform PC { vkt_attn_push p; };

// A score that no key can have: exp(ATTN_MASKED - m) is 0 for every finite m, and it stays
// finite (no inf - inf) where a tile holds no key a row may see.
const float ATTN_MASKED = -1.0e30;

// v = floats base + 4*d4 .. base + 4*d4 + 3 of array a, those at or past D (of the row that
// starts at base) read as 0. Statements, not an expression: a ?: over buffer loads compiles to a
// select that performs the loads anyway.
#define ATTN_LOAD4(v, a, base, d4)                                                                 \
    {                                                                                              \
        uint e_ = (base) + 4u * (d4);                                                              \
        if (4u * (d4) + 4u <= D) {                                                                 \
            v = vec4(a[e_], a[e_ + 1u], a[e_ + 2u], a[e_ + 3u]);                                   \
        } else {                                                                                   \
            v = vec4(a[e_], 0.0, 0.0, 0.0);                                                        \
            if (4u * (d4) + 1u < D) v.y = a[e_ + 1u];                                              \
            if (4u * (d4) + 2u < D) v.z = a[e_ + 2u];                                              \
        }                                                                                          \
    }

// The first D floats of v (D4 vec4s) into a from element base on.
#define ATTN_STORE_ROW(a, base, v)                                                                 \
    for (uint d4_ = 0u; d4_ < D4; d4_++) {                                                         \
        uint e_ = (base) + 4u * d4_;                                                               \
        if (4u * d4_ + 4u <= D) {                                                                  \
            a[e_] = v[d4_].x;                                                                      \
            a[e_ + 1u] = v[d4_].y;                                                                 \
            a[e_ + 2u] = v[d4_].z;                                                                 \
            a[e_ + 3u] = v[d4_].w;                                                                 \
        } else {                                                                                   \
            a[e_] = v[d4_].x;                                                                      \
            if (4u * d4_ + 1u < D) a[e_ + 1u] = v[d4_].y;                                          \
            if (4u * d4_ + 2u < D) a[e_ + 2u] = v[d4_].z;                                          \
        }                                                                                          \
    }

// Element index of row t of sample b (of this dispatch) in qkv, at column col.
uint attn_qkv_at(uint b, uint t, uint col) { return p.qkv_base + (b * p.T + t) * 3u * p.C + col; }
// ... in a [nb*T, C] array (o, do) whose binding starts base elements before sample 0.
uint attn_row_at(uint base, uint b, uint t, uint col) { return base + (b * p.T + t) * p.C + col; }
// Index of (b, h, t) in a [nb, heads, T] array (lse, delta), from its base.
uint attn_bht(uint base, uint b, uint h, uint t) { return base + (b * p.heads + h) * p.T + t; }
