// mm_epilogue.glsl: the activation epilogue of the matmul kernels (matmul_scalar.glsl,
// matmul_wide.glsl, matmul_tiled.comp; any other matmul kernel adds it the same way). Not
// SwiftShader's matmul_ss.glsl: added there as in matmul_scalar.glsl (one rolled loop after the
// store), it slowed the plain product, and SwiftShader does not fuse (below); engine/ops/matmul.c
// runs an epilogue on that device's scalar kernel instead. With z the kernel's result at
// an output position (the product, plus bias, plus beta c), the epilogue makes c:
//   VKT_MM_EPI_FORWARD     c = f(z)
//   VKT_MM_EPI_FORWARD_Z   c = f(z), and the kernel also stores z (binding 5) for a backward
//                          that needs f's input (gelu)
//   VKT_MM_EPI_GRAD_X      c = z * f'(s), s (binding 4) = f's input at that position
//   VKT_MM_EPI_GRAD_Y      c = z * f'(x) computed from s = f(x), f's output
// The GRAD forms are an activation's backward fused into the matmul that produces its output
// gradient (dY = dZ' W of the next dense layer, NN): one extra read of s per output, against a
// dispatch, a barrier, and a write and two reads of every element for the separate kernel. Not in
// the prologue of the matmuls that consume dZ: three kernels read dZ (the weight gradient dZ^T X,
// the bias gradient and the next dX = dZ W), each would have to apply f' itself, and a matmul
// prologue applies it to every operand load, K / tile times per element instead of once.
//
// The activation (VKT_ACT_CODE_*, ACT_NONE by default) and the mode are specialization constants.
// This file declares them and does the arithmetic (act_fn.glsl's functions, the same as the
// act_* kernels'); the including kernel declares bindings 4 (read, s) and 5 (written, z) in
// its own layout, loads s only when MM_EPI_READS_S, stores z only when MM_EPI_WRITES_Z, applies
// mm_epi to four outputs at a time (any four: the functions are elementwise) and stores c under
// its bounds guard.
//
// What the drivers do with the constants (measured: docs/PERFORMANCE.md, "Fused step"):
// lavapipe (and GPU drivers) fold them when they build the pipeline, so each specialization runs
// only its own activation and ACT_NONE compiles to the plain product. SwiftShader does not: it
// runs every block of a shader whether its condition holds or not (masked), so a fused epilogue
// computes every activation for every output, and only a body in a loop that is not unrolled
// (matmul_scalar.glsl) keeps the plain product's cost small. So the engine does not fuse on
// SwiftShader (vkt_matmul_epilogue_pays); these kernels serve it for correctness.
#include "act_fn.glsl"
#include "sgd_fn.glsl"

layout(constant_id = VKT_SPEC_MM_ACT) const uint MM_ACT = ACT_NONE;
layout(constant_id = VKT_SPEC_MM_EPI) const uint MM_EPI = VKT_MM_EPI_FORWARD;

const bool MM_EPI_ON = MM_ACT != ACT_NONE;
const bool MM_EPI_WRITES_Z = MM_EPI_ON && MM_EPI == VKT_MM_EPI_FORWARD_Z;
// (GRAD_X and GRAD_Y are the modes 2 and 3: a || here broke glslc's optimizer when unused.)
const bool MM_EPI_READS_S = MM_EPI_ON && MM_EPI >= VKT_MM_EPI_GRAD_X && MM_EPI <= VKT_MM_EPI_GRAD_Y;
// The optimizer step on the product (VKT_MM_EPI_SGD, activation ACT_NONE): only the wide kernel
// implements it (matmul_wide.glsl); engine/ops/matmul.c gives it to no other kernel.
const bool MM_EPI_SGD = MM_EPI == VKT_MM_EPI_SGD;

// One SGD step of parameters w with gradient g and momentum buffer b (updated in place): the
// arithmetic of the optimizer kernel (sgd_fn.glsl).
vec4 mm_sgd(vec4 g, vec4 w, inout vec4 b) {
    return sgd_step(g, w, b, p.alpha, p.momentum, p.weight_decay, p.sgd_mode);
}

// c at four outputs (any four: the functions are elementwise) from z there and, in the GRAD
// modes, s there; alpha is leaky_relu's slope.
vec4 mm_epi(vec4 z, vec4 s, float alpha) {
    vec4 c = z;
    if (MM_EPI_ON) {
        if (MM_EPI == VKT_MM_EPI_GRAD_X)
            c = z * act_grad_x(MM_ACT, alpha, s);
        else if (MM_EPI == VKT_MM_EPI_GRAD_Y)
            c = z * act_grad_y(MM_ACT, alpha, s);
        else
            c = act_forward(MM_ACT, alpha, z);
    }
    return c;
}
