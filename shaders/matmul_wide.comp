// matmul_wide: c[M,N] = op(a) op(b) (+ bias[N]) (+ beta c) with vec4 loads; see matmul_wide.glsl
// for the shapes it reads and writes and the conditions the host checks before using it.
#version 450
#include "vkt_abi.h"
#include "matmul_wide.glsl"
