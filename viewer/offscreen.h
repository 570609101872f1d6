// offscreen.h: a draw list (viewer/ui.h) rendered to a PNG with no window and no trace: the
// viewer's font and renderer (gfx.h) on a device of their own, kept open across pictures, so
// that a command drawing many charts (`vktrain compare`) opens Vulkan once. The trace viewer's
// own PNG path is vkt_viewer_render_png (viewer.h).
#ifndef VKT_VIEWER_OFFSCREEN_H
#define VKT_VIEWER_OFFSCREEN_H

#include <stddef.h>
#include <stdint.h>

#include "ui.h"

typedef struct vw_offscreen vw_offscreen;

typedef struct vw_offscreen_desc {
    const char *device_spec; // the device that draws: an index or part of its name; NULL = best
    int validation;          // Khronos validation: 1 on (any message fails), else off
    const char *font_path;   // NULL: DejaVu Sans (ui_font_create)
    const char *who;         // the command drawing, in messages (gfx_desc.who); NULL: vktrain view
} vw_offscreen_desc;

// Opens the font and the renderer. Fails as ui_font_create (VKT_ERR_IO: font missing) and
// gfx_create (VKT_ERR_NO_DEVICE, VKT_ERR_VULKAN). The caller destroys *out.
vkt_status vw_offscreen_create(const vw_offscreen_desc *d, vw_offscreen **out);
void vw_offscreen_destroy(vw_offscreen *o);
// The font to build lists with, and the name of the device that draws.
const ui_font *vw_offscreen_font(const vw_offscreen *o);
const char *vw_offscreen_device_name(const vw_offscreen *o);
// Renders l (l->width x l->height, 16 to 8192 each) and encodes it as an opaque RGB PNG:
// *png (malloc'd, the caller frees it) of *size bytes. Fails with VKT_ERR_ARG (size),
// VKT_ERR_HOST_MEMORY, VKT_ERR_VULKAN, or VKT_ERR_VULKAN when validation is on and the
// validation layer has printed a message (so far, in this renderer).
vkt_status vw_offscreen_png(vw_offscreen *o, const ui_list *l, uint8_t **png, size_t *size);

#endif
