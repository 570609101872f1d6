// matmul_s8x8: matmul_scalar.glsl with a tile of 8 rows per workgroup and 8 columns per lane; see
// matmul_scalar.glsl for the shapes it reads and writes.
#version 450
#define MM_TM 8
#define MM_TC 8
#include "vkt_abi.h"
#include "matmul_scalar.glsl"
