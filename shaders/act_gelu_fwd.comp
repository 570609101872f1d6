// act_gelu_fwd: y = f(x) for f = gelu (tanh form), over n floats.
// Bindings, shapes and body: act.glsl.
#version 450
#define ACT ACT_GELU
#define BACKWARD 0
#include "act.glsl"
