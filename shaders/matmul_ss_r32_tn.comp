// matmul_ss_r32_tn: matmul_ss.glsl for the TN form with vec4 loads and 32 rows per workgroup; see
// matmul_ss.glsl for the shapes it reads and writes.
#version 450
#define SS_G 8
#define SS_FORM VKT_MM_FORM_TN
#include "vkt_abi.h"
#include "matmul_ss.glsl"
