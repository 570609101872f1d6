// viewer.h: the trace viewer, drawn with Vulkan on a device of its own (never a training
// device's queue). Two ways to use it: render a trace to a PNG with no display at all, or show
// it in a window (GLFW) that redraws while another thread keeps appending to the trace (live
// training: the trainer never waits for the viewer; see vkt_trace_sync in trace.h).
#ifndef VKT_VIEWER_H
#define VKT_VIEWER_H

#include "trace.h"

typedef struct vkt_viewer_opts {
    const char *device_spec; // the device that draws: an index or part of its name; NULL = best
    const char *source;      // what the title calls the trace ("run.json"); NULL = "trace"
    int width, height;       // picture size, or the window's first size; 0 = 1280x720
    const char *panel;       // "overview" (default), "timeline", "devices" or "training"
    double exit_after_s;     // window: close by itself this long after the first frame; 0 = never
    bool live;               // another thread is appending to the trace
    const char *layout_path; // if set, where the picture put the timeline (JSON, for tests)
    // Khronos validation on the viewer's device: 1 on (any message fails the call); 0 (or any
    // other value) off. The CLI sets it from VKT_VALIDATION.
    int validation;
    // A TrueType file for every face; NULL = DejaVu Sans and DejaVu Sans Bold
    // (fonts-dejavu-core). The CLI sets it from VKT_FONT.
    const char *font_path;
} vkt_viewer_opts;

// Renders the trace offscreen and writes a PNG (atomically). Fails with VKT_ERR_ARG (bad size
// or panel), VKT_ERR_NO_DEVICE (no device can draw), VKT_ERR_IO (font missing, PNG not
// writable), or VKT_ERR_VULKAN (including any validation message when validation is on).
vkt_status vkt_viewer_render_png(const vkt_trace *t, const vkt_viewer_opts *opts,
                                 const char *png_path);

// Opens a window and shows the trace until the user closes it (Esc, q, the close button) or
// exit_after_s passes. Must run on the main thread (GLFW's rule). Keys: Tab / 1-4 switch panels,
// + / - / mouse wheel zoom, arrows / drag pan, 0 resets, Space pauses live updates. Fails with
// VKT_ERR_NO_DEVICE when there is no display (GLFW finds none: the message says why and suggests
// --png) and otherwise as vkt_viewer_render_png.
vkt_status vkt_viewer_run(vkt_trace *t, const vkt_viewer_opts *opts);

#endif
