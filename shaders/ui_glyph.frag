// ui_glyph.frag: one glyph pixel. Reads the font atlas (R8: coverage) at the interpolated atlas
// coordinate; writes the text colour with alpha = colour alpha x coverage.
#version 450

layout(set = 0, binding = 0) uniform sampler2D atlas;

layout(location = 0) in vec4 v_color;
layout(location = 1) in vec2 v_uv;

layout(location = 0) out vec4 out_color;

void main() {
    // Bounds guard: the sampler clamps to the atlas edge; empty texels write nothing.
    float coverage = texture(atlas, clamp(v_uv, vec2(0.0), vec2(1.0))).r;
    if (coverage <= 0.0) discard;
    out_color = vec4(v_color.rgb, v_color.a * coverage);
}
