// adamw: adamw.glsl reading through storage buffers only.
#version 450
#include "adamw.glsl"
