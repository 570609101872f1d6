// act_sigmoid_bwdy: dx = dy * f'(x) computed from the forward's output y = f(x), for
// f = sigmoid, over n floats. Bindings, shapes and body: act.glsl.
#version 450
#define ACT ACT_SIGMOID
#define BACKWARD 2
#include "act.glsl"
