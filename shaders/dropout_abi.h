// dropout_abi.h: what the dropout kernel (shaders/dropout.comp) and its host side
// (engine/ops/dropout_ops.c, the layer's double reference in engine/nn/layers/dropout.c) share:
// the push constants and the mask's hash, written once in the subset of C that GLSL also reads
// (32-bit unsigned arithmetic only), so that the host computes exactly the device's mask.
//
// The mask is counter-based: element e of the sample in row `row` of the whole batch keeps its
// value when the hash of (seed, step, node, row, e) says so. Nothing is carried from one element,
// step or dispatch to the next, so a sample's mask does not depend on how the batch is cut into
// shards or micro-batches, on the order of the dispatches or on which device draws it; the
// backward recomputes it instead of storing it.
//
// The hash is MurmurHash3_x86_32 over the six 32-bit words (seed_lo, seed_hi, step, node, row,
// e) with the seed 0 (its reference output for any six words is what these functions give). The
// host folds the first four words, the same for every element of one dispatch, into `key`
// (vkt_dropout_key, the murmur state after them); the kernel folds in row and e and finalizes.
//
// Keep test: the top 24 bits u of the hash are uniform in [0, 2^24), and the element is kept when
// u >= threshold, threshold = round(p * 2^24) (vkt_dropout_threshold in dropout_ops.c). So the
// keep probability is exactly 1 - threshold / 2^24, within 2^-25 of 1 - p for every float p in
// [0, 1]; p = 0 keeps everything (threshold 0) and p = 1 nothing (threshold 2^24 > every u).
// 24 bits and not 32 because every threshold then is an integer that a float p * 2^24 rounds to
// without the 2^32 overflow at p = 1.
//
// A C file includes it after ops.h: vkt_abi.h defines macros named as ops.h's enum values
// (VKT_MM_EPI_*).
#ifndef VKT_DROPOUT_ABI_H
#define VKT_DROPOUT_ABI_H

#include "vkt_abi.h"

// Functions: plain in GLSL, static inline in C.
#ifdef VKT_GLSL
#define VKT_DROPOUT_FN
#else
#include <stdbool.h>
#define VKT_DROPOUT_FN static inline
#endif

// dropout: out[i] = in[i] * keep(i) * scale for i < n, in[] and out[] the rows [row, ...) of F
// features each from element `base` on (a slice's first element in the op's whole view; the
// first member is the dispatch's element count, as vkt_abi.h's ops have it). row0 is the whole
// batch's row of the op's row 0. Bindings: 0, 1 = in (float[], vec4[]); 2, 3 = out.
VKT_STRUCT(vkt_dropout_push) {
    VKT_U32 n;         // elements of this dispatch
    VKT_U32 base;      // the first element of this dispatch in the op's [B, F] view
    VKT_U32 features;  // F: elements of one sample (the mask's element index runs over these)
    VKT_U32 row0;      // the whole batch's row of the view's row 0
    VKT_U32 key;       // vkt_dropout_key(seed_lo, seed_hi, step, node)
    VKT_U32 threshold; // keep when the hash's top 24 bits are >= this (0 .. 2^24)
    VKT_F32 scale;     // 1 / (1 - p), 0 for p = 1
};

#define VKT_DROPOUT_ONE (1u << 24) // the threshold of p = 1: nothing is kept

VKT_DROPOUT_FN VKT_U32 vkt_dropout_rotl(VKT_U32 x, VKT_U32 r) {
    return (x << r) | (x >> (32u - r));
}

// MurmurHash3_x86_32's body: one 32-bit word k into the state h.
VKT_DROPOUT_FN VKT_U32 vkt_dropout_mix(VKT_U32 h, VKT_U32 k) {
    k *= 0xcc9e2d51u;
    k = vkt_dropout_rotl(k, 15u);
    k *= 0x1b873593u;
    h ^= k;
    h = vkt_dropout_rotl(h, 13u);
    return h * 5u + 0xe6546b64u;
}

// MurmurHash3's finalizer (fmix32): every input bit reaches every output bit.
VKT_DROPOUT_FN VKT_U32 vkt_dropout_fmix(VKT_U32 h) {
    h ^= h >> 16u;
    h *= 0x85ebca6bu;
    h ^= h >> 13u;
    h *= 0xc2b2ae35u;
    h ^= h >> 16u;
    return h;
}

// The state after the words that one dispatch shares: the run's 64-bit seed as two words, the
// step and the node (vkt_rec_node_id).
VKT_DROPOUT_FN VKT_U32 vkt_dropout_key(VKT_U32 seed_lo, VKT_U32 seed_hi, VKT_U32 step,
                                       VKT_U32 node) {
    VKT_U32 h = 0u;
    h = vkt_dropout_mix(h, seed_lo);
    h = vkt_dropout_mix(h, seed_hi);
    h = vkt_dropout_mix(h, step);
    return vkt_dropout_mix(h, node);
}

// The 32-bit hash of element e of the sample in row `row` of the whole batch.
VKT_DROPOUT_FN VKT_U32 vkt_dropout_hash(VKT_U32 key, VKT_U32 row, VKT_U32 e) {
    VKT_U32 h = vkt_dropout_mix(key, row);
    h = vkt_dropout_mix(h, e);
    return vkt_dropout_fmix(h ^ 24u); // murmur's length word: six 4-byte words
}

// Whether element e of row `row` keeps its value.
VKT_DROPOUT_FN bool vkt_dropout_keep(VKT_U32 key, VKT_U32 threshold, VKT_U32 row, VKT_U32 e) {
    return (vkt_dropout_hash(key, row, e) >> 8u) >= threshold;
}

#endif
