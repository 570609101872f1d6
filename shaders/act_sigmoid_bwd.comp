// act_sigmoid_bwd: dx = dy * f'(x) for f = sigmoid, over n floats.
// Bindings, shapes and body: act.glsl.
#version 450
#define ACT ACT_SIGMOID
#define BACKWARD 1
#include "act.glsl"
