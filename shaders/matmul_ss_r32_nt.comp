// matmul_ss_r32_nt: matmul_ss.glsl for the NT form with vec4 loads and 32 rows per workgroup; see
// matmul_ss.glsl for the shapes it reads and writes.
#version 450
#define SS_G 8
#define SS_FORM VKT_MM_FORM_NT
#include "vkt_abi.h"
#include "matmul_ss.glsl"
