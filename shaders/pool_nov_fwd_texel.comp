// pool_nov_fwd_texel: maxpool2d and avgpool2d forward over windows that do not overlap, reading
// uniform texel buffers (lavapipe). The kernel is pool_nov.glsl, compiled with the defines below (a
// line of shaders/variants.cmake would replace this file).
#version 450
#define POOL_NOV_BWD 0
#define POOL_TEXEL 1
#include "pool_nov.glsl"
