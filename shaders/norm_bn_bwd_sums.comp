// norm_bn_bwd_sums: batchnorm2d's partial backward sums, reading storage buffers. The kernel is
// norm_bn_part.glsl, compiled with the defines below (a line of shaders/variants.cmake would
// replace this file).
#version 450
#define NORM_BWD 1
#define NORM_TEXEL 0
#include "norm_bn_part.glsl"
