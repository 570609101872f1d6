// ui_glyph.vert: the viewer's instanced glyph quads (viewer/ui.h ui_glyph_inst).
// Reads one instance per glyph: screen rect (x0,y0,x1,y1 in pixels), atlas rect (u0,v0,u1,v1,
// normalised), colour (RGBA8). Writes a 4-vertex triangle strip and the atlas coordinate.
// Push constants: the target size in pixels.
#version 450

layout(location = 0) in vec4 in_rect;
layout(location = 1) in vec4 in_uv;
layout(location = 2) in vec4 in_color;

layout(push_constant) uniform PC {
    vec2 viewport;
    float srgb_target;
    float pad;
} pc;

layout(location = 0) out vec4 v_color;
layout(location = 1) out vec2 v_uv;

void main() {
    // Bounds guard: a corner index outside the strip draws nothing.
    uint corner = uint(gl_VertexIndex);
    if (corner > 3u) {
        gl_Position = vec4(0.0);
        return;
    }
    vec2 c = vec2(float(corner & 1u), float(corner >> 1u));
    vec2 pos = mix(in_rect.xy, in_rect.zw, c);
    v_uv = mix(in_uv.xy, in_uv.zw, c);
    vec4 col = in_color;
    if (pc.srgb_target > 0.5) col.rgb = pow(col.rgb, vec3(2.2));
    v_color = col;
    gl_Position = vec4(pos / pc.viewport * 2.0 - 1.0, 0.0, 1.0);
}
