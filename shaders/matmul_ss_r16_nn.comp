// matmul_ss_r16_nn: matmul_ss.glsl for the NN form with vec4 loads and 16 rows per workgroup; see
// matmul_ss.glsl for the shapes it reads and writes.
#version 450
#define SS_G 4
#define SS_FORM VKT_MM_FORM_NN
#include "vkt_abi.h"
#include "matmul_ss.glsl"
