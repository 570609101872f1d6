// ui_rect.frag: coverage of one ui_rect.vert primitive at this pixel. Reads the interpolated
// position in the shape's frame; writes the colour with alpha = colour alpha x coverage
// (signed distance to a rounded box, or to a line segment with square caps, one pixel of
// anti-aliasing). Blending composes it over what is below.
#version 450

layout(location = 0) in vec4 v_color;
layout(location = 1) in vec2 v_local;
layout(location = 2) flat in vec4 v_shape;

layout(location = 0) out vec4 out_color;

void main() {
    float d;
    if (v_shape.w > 0.5) {
        float len = v_shape.x, hw = v_shape.y;
        float dx = max(-hw - v_local.x, v_local.x - (len + hw)); // outside the caps
        float dy = abs(v_local.y) - hw;
        d = max(dx, dy);
    } else {
        vec2 half_size = v_shape.xy;
        float r = min(v_shape.z, min(half_size.x, half_size.y));
        vec2 q = abs(v_local) - (half_size - vec2(r));
        d = length(max(q, vec2(0.0))) + min(max(q.x, q.y), 0.0) - r;
    }
    // Bounds guard: pixels wholly outside the shape write nothing.
    float coverage = clamp(0.5 - d, 0.0, 1.0);
    if (coverage <= 0.0) discard;
    out_color = vec4(v_color.rgb, v_color.a * coverage);
}
