// act_sigmoid_fwd: y = f(x) for f = sigmoid, over n floats.
// Bindings, shapes and body: act.glsl.
#version 450
#define ACT ACT_SIGMOID
#define BACKWARD 0
#include "act.glsl"
