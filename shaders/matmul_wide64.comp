// matmul_wide64: matmul_wide.glsl with dvec4 loads (8 floats per load; the bits are moved, never
// used as doubles). Only for devices with shaderFloat64 (lavapipe: each load inside a loop costs
// a per-lane loop there, so halving the number of loads is what makes it fast).
#version 450
#define MM_F64 1
#include "vkt_abi.h"
#include "matmul_wide.glsl"
