// conv_permute64: shaders/conv_permute.glsl with V = 8 (texel reads, dvec4 stores), for devices
// with shaderFloat64. A wrapper until shaders/variants.cmake lists the variant:
// vkt_shader(conv_permute64 conv_permute.glsl CONV_F64=1).
#version 450
#define CONV_F64 1
#include "conv_permute.glsl"
