// norm_bn_stats: batchnorm2d's partial statistics, reading storage buffers. The kernel is
// norm_bn_part.glsl, compiled with the defines below (a line of shaders/variants.cmake would
// replace this file).
#version 450
#define NORM_BWD 0
#define NORM_TEXEL 0
#include "norm_bn_part.glsl"
