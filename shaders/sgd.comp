// sgd: sgd.glsl reading through storage buffers only.
#version 450
#include "sgd.glsl"
