// matmul_s16x16: matmul_scalar.glsl with a tile of 16 rows per workgroup and 16 columns per lane
// (SwiftShader's fastest: about 1.45x the 8 x 8 tile at 1024^3); see matmul_scalar.glsl for the
// shapes it reads and writes.
#version 450
#define MM_TM 16
#define MM_TC 16
#include "vkt_abi.h"
#include "matmul_scalar.glsl"
