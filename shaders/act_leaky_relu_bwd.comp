// act_leaky_relu_bwd: dx = dy * f'(x) for f = leaky_relu (slope p.alpha below 0), over n floats.
// Bindings, shapes and body: act.glsl.
#version 450
#define ACT ACT_LEAKY_RELU
#define BACKWARD 1
#include "act.glsl"
