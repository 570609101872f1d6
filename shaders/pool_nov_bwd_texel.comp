// pool_nov_bwd_texel: pool_nov_bwd reading uniform texel buffers (lavapipe). The kernel is
// pool_nov.glsl, compiled with the defines below (a line of shaders/variants.cmake would replace
// this file).
#version 450
#define POOL_NOV_BWD 1
#define POOL_TEXEL 1
#include "pool_nov.glsl"
