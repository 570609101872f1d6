// norm_bn_apply: batchnorm2d's normalisation, reading storage buffers. The kernel is
// norm_bn_ew.glsl, compiled with the defines below (a line of shaders/variants.cmake would replace
// this file).
#version 450
#define NORM_BWD 0
#define NORM_TEXEL 0
#include "norm_bn_ew.glsl"
