// norm_bn_bwd_sums_act_texel: a batchnorm2d pass with the next layer's activation fused in. The
// kernel is norm_bn_part.glsl (NORM_ACT there says what changes), compiled with the defines below.
#version 450
#define NORM_BWD 1
#define NORM_TEXEL 1
#define NORM_ACT 1
#include "norm_bn_part.glsl"
