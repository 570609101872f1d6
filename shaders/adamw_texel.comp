// adamw_texel: adamw.glsl with the whole vec4s read through uniform texel buffers (lavapipe).
#version 450
#define EW_TEXEL 1
#include "adamw.glsl"
