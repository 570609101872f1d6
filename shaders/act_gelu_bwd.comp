// act_gelu_bwd: dx = dy * f'(x) for f = gelu (tanh form), over n floats.
// Bindings, shapes and body: act.glsl.
#version 450
#define ACT ACT_GELU
#define BACKWARD 1
#include "act.glsl"
