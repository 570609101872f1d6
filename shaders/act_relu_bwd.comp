// act_relu_bwd: dx = dy * f'(x) for f = relu, over n floats.
// Bindings, shapes and body: act.glsl.
#version 450
#define ACT ACT_RELU
#define BACKWARD 1
#include "act.glsl"
