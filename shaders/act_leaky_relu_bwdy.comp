// act_leaky_relu_bwdy: dx = dy * f'(x) computed from the forward's output y = f(x), for
// f = leaky_relu with a slope p.alpha >= 0, over n floats. Bindings, shapes and body: act.glsl.
#version 450
#define ACT ACT_LEAKY_RELU
#define BACKWARD 2
#include "act.glsl"
