// norm_bn_in.glsl: the inputs of batchnorm2d's passes (included by norm_bn_ew.glsl and
// norm_bn_part.glsl after norm_abi.h; not compiled on its own): x as vec4s (binding 0: texels
// with NORM_TEXEL 1, else storage) and floats (1); with NORM_BWD, dy likewise (2, 3); with
// NORM_ACT (the next layer's activation fused in, one whose derivative follows from its output),
// its code and slope as specialization constants ACT and ALPHA (vkt_abi.h's VKT_ACT_CODE_*)
// and, backward, its output y (4, 5). B_NEXT is the first binding after them. X4(q), DY4(q) and
// Y4(q) read vec4 q; DYA4(q) and DYA1(f) are dy, or with NORM_ACT dy f'(y): the floats the
// activation's own backward would have written.
#if NORM_ACT
#include "act_fn.glsl"
layout(constant_id = VKT_SPEC_USER + 2) const uint ACT = VKT_ACT_CODE_NONE;
layout(constant_id = VKT_SPEC_USER + 3) const float ALPHA = 0.0;
#endif
#if NORM_TEXEL
layout(binding = 0) uniform samplerBuffer x4;
#define X4(q) texelFetch(x4, int(q))
#else
layout(std430, binding = 0) readonly buffer X4 { vec4 x4[]; };
#define X4(q) x4[q]
#endif
layout(std430, binding = 1) readonly buffer X1 { float x1[]; };
#if NORM_BWD
#if NORM_TEXEL
layout(binding = 2) uniform samplerBuffer dy4;
#define DY4(q) texelFetch(dy4, int(q))
#else
layout(std430, binding = 2) readonly buffer DY4 { vec4 dy4[]; };
#define DY4(q) dy4[q]
#endif
layout(std430, binding = 3) readonly buffer DY1 { float dy1[]; };
#if NORM_ACT
#if NORM_TEXEL
layout(binding = 4) uniform samplerBuffer y4;
#define Y4(q) texelFetch(y4, int(q))
#else
layout(std430, binding = 4) readonly buffer Y4B { vec4 y4[]; };
#define Y4(q) y4[q]
#endif
layout(std430, binding = 5) readonly buffer Y1 { float y1[]; };
#define DYA4(q) (DY4(q) * act_grad_y(ACT, ALPHA, Y4(q)))
#define DYA1(f) (dy1[f] * act_grad_y(ACT, ALPHA, vec4(y1[f])).x)
#define B_NEXT 6
#else
#define DYA4(q) DY4(q)
#define DYA1(f) dy1[f]
#define B_NEXT 4
#endif
#else
#define B_NEXT 2
#endif
