// conv_permute: shaders/conv_permute.glsl for every device (vec4 and float moves). A wrapper
// until shaders/variants.cmake lists the variant: vkt_shader(conv_permute conv_permute.glsl).
#version 450
#include "conv_permute.glsl"
