// sgd_texel: sgd.glsl with the whole vec4s read through uniform texel buffers (lavapipe).
#version 450
#define EW_TEXEL 1
#include "sgd.glsl"
