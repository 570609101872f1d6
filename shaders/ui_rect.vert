// ui_rect.vert: the viewer's instanced rectangles and line segments (viewer/ui.h ui_rect_inst).
// Reads one instance per primitive: rect (x0,y0,x1,y1 in pixels), colour (RGBA8), params
// (line width, 0 = filled box; corner radius). Writes a 4-vertex triangle strip covering the
// shape plus one pixel of margin for anti-aliasing, and the fragment's position in the shape's
// own frame for ui_rect.frag. Push constants: the target size in pixels.
#version 450

layout(location = 0) in vec4 in_rect;
layout(location = 1) in vec4 in_color;
layout(location = 2) in vec2 in_params;

layout(push_constant) uniform PC {
    vec2 viewport;
    float srgb_target; // 1: the target is an sRGB format, so colours are linearised first
    float pad;
} pc;

layout(location = 0) out vec4 v_color;
layout(location = 1) out vec2 v_local; // position relative to the shape's centre (box) or start (line)
layout(location = 2) flat out vec4 v_shape; // box: half size, radius, 0; line: length, half width, 1

void main() {
    // Bounds guard: a corner index outside the strip draws nothing (degenerate position).
    uint corner = uint(gl_VertexIndex);
    if (corner > 3u) {
        gl_Position = vec4(0.0);
        return;
    }
    vec2 c = vec2(float(corner & 1u), float(corner >> 1u));
    vec2 pos;
    if (in_params.x > 0.0) {
        vec2 p0 = in_rect.xy, p1 = in_rect.zw;
        vec2 d = p1 - p0;
        float len = length(d);
        vec2 dir = len > 1e-6 ? d / len : vec2(1.0, 0.0);
        vec2 nrm = vec2(-dir.y, dir.x);
        float hw = 0.5 * in_params.x;
        // Square caps of half the width, so consecutive segments of a polyline meet without gaps.
        float along = mix(-hw - 1.0, len + hw + 1.0, c.x);
        float across = mix(-hw - 1.0, hw + 1.0, c.y);
        pos = p0 + dir * along + nrm * across;
        v_local = vec2(along, across);
        v_shape = vec4(len, hw, 0.0, 1.0);
    } else {
        vec2 lo = in_rect.xy - vec2(1.0), hi = in_rect.zw + vec2(1.0);
        pos = mix(lo, hi, c);
        vec2 centre = 0.5 * (in_rect.xy + in_rect.zw);
        v_local = pos - centre;
        v_shape = vec4(0.5 * (in_rect.zw - in_rect.xy), in_params.y, 0.0);
    }
    vec4 col = in_color;
    if (pc.srgb_target > 0.5) col.rgb = pow(col.rgb, vec3(2.2));
    v_color = col;
    gl_Position = vec4(pos / pc.viewport * 2.0 - 1.0, 0.0, 1.0);
}
