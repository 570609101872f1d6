// conv_fwd: shaders/conv_fwd.glsl for every device (vec4 and float stores). A wrapper until
// shaders/variants.cmake lists the variant: vkt_shader(conv_fwd conv_fwd.glsl).
#version 450
#include "conv_fwd.glsl"
