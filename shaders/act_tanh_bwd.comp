// act_tanh_bwd: dx = dy * f'(x) for f = tanh, over n floats.
// Bindings, shapes and body: act.glsl.
#version 450
#define ACT ACT_TANH
#define BACKWARD 1
#include "act.glsl"
