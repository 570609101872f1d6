// act_tanh_fwd: y = f(x) for f = tanh, over n floats.
// Bindings, shapes and body: act.glsl.
#version 450
#define ACT ACT_TANH
#define BACKWARD 0
#include "act.glsl"
