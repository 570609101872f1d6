// matmul_wide64t_sgd: matmul_wide64t for the optimizer epilogue (VKT_MM_EPI_SGD), which also
// reads the parameters and the momentum buffer through texel buffers (bindings 6 and 7: the same
// views as c and s). engine/ops/matmul.c uses it in place of matmul_wide64t for that epilogue only,
// so that the other products bind no extra views.
#version 450
#define MM_F64 1
#define MM_TEXEL 1
#define MM_SGD_TEXEL 1
#include "vkt_abi.h"
#include "matmul_wide.glsl"
