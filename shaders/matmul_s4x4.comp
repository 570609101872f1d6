// matmul_s4x4: matmul_scalar.glsl with a tile of 4 rows per workgroup and 4 columns per lane; see
// matmul_scalar.glsl for the shapes it reads and writes.
#version 450
#define MM_TM 4
#define MM_TC 4
#include "vkt_abi.h"
#include "matmul_scalar.glsl"
