// pool_nov_bwd: maxpool2d backward over windows that do not overlap, reading storage buffers. The
// kernel is pool_nov.glsl, compiled with the defines below (a line of shaders/variants.cmake would
// replace this file).
#version 450
#define POOL_NOV_BWD 1
#define POOL_TEXEL 0
#include "pool_nov.glsl"
