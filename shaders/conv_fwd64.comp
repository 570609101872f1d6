// conv_fwd64: shaders/conv_fwd.glsl with dvec4 stores, for devices with shaderFloat64. A wrapper
// until shaders/variants.cmake lists the variant: vkt_shader(conv_fwd64 conv_fwd.glsl CONV_F64=1).
#version 450
#define CONV_F64 1
#include "conv_fwd.glsl"
