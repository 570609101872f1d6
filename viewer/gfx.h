// gfx.h: the viewer's Vulkan renderer. It owns its own instance (with the window system's
// surface extensions when there is a window, none when headless) and its own logical device, so
// it never shares a queue with a training device, and draws a ui_list (viewer/ui.h) with two
// graphics pipelines: instanced rectangles/lines and instanced glyph quads from a font atlas.
// Either into an offscreen image read back to memory, or into a GLFW window's swapchain.
#ifndef VKT_VIEWER_GFX_H
#define VKT_VIEWER_GFX_H

#include "ui.h"

typedef struct GLFWwindow GLFWwindow;
typedef struct gfx gfx;

typedef struct gfx_desc {
    const char *device_spec; // an index or part of a device or driver name; NULL = the best
    GLFWwindow *window;      // NULL: headless (offscreen only)
    const uint8_t *atlas;    // R8 font atlas
    int atlas_w, atlas_h;
    // Khronos validation: 1 on; 0 (or any other value) off.
    int validation;
    // Who draws, for the application name and the validation messages' prefix: "vktrain view"
    // when NULL, "vktrain compare" for compare's pictures.
    const char *who;
} gfx_desc;

// Fails with VKT_ERR_NO_DEVICE (no Vulkan, no device with graphics and, for a window,
// presentation, or a --device that matches none: the message lists the devices), or the failing
// Vulkan call.
vkt_status gfx_create(const gfx_desc *desc, gfx **out);
void gfx_destroy(gfx *g);
const char *gfx_device_name(const gfx *g);
// Validation messages (warnings and errors) seen so far; the viewer fails when not zero.
uint64_t gfx_validation_count(const gfx *g);
bool gfx_validation_enabled(const gfx *g);
// Renders l (l->width x l->height pixels) offscreen and copies the pixels to rgba (4 bytes a
// pixel, rows top to bottom).
vkt_status gfx_render_image(gfx *g, const ui_list *l, uint8_t *rgba);
// The size the next frame must have: the swapchain's extent after any resize (0x0 when the
// window is minimised).
void gfx_window_extent(gfx *g, int fb_w, int fb_h, int *w, int *h);
// Draws l into the window and presents it. *shown is false when nothing was presented (the
// window is minimised, or the swapchain was out of date and has been recreated: draw again at
// the new gfx_window_extent).
vkt_status gfx_present(gfx *g, const ui_list *l, bool *shown);

#endif
