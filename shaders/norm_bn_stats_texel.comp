// norm_bn_stats_texel: norm_bn_stats reading uniform texel buffers (lavapipe). The kernel is
// norm_bn_part.glsl, compiled with the defines below (a line of shaders/variants.cmake would
// replace this file).
#version 450
#define NORM_BWD 0
#define NORM_TEXEL 1
#include "norm_bn_part.glsl"
