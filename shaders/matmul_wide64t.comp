// matmul_wide64t: matmul_wide64 with a and b read through uniform texel buffers (texelFetch of
// vec4 texels) instead of storage buffers; c, bias and the epilogue's s and z stay storage
// buffers in dvec4 pieces. Why, on lavapipe (Mesa 22.3): there a storage-buffer load, even at a
// workgroup-uniform address, is a loop over the 8 lanes with a branch and a bounds check per
// lane and component, while a texel fetch is a branch-free gather. Same tile, same results.
#version 450
#define MM_F64 1
#define MM_TEXEL 1
#include "vkt_abi.h"
#include "matmul_wide.glsl"
