// act_relu_fwd: y = f(x) for f = relu, over n floats.
// Bindings, shapes and body: act.glsl.
#version 450
#define ACT ACT_RELU
#define BACKWARD 0
#include "act.glsl"
