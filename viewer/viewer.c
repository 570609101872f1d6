// viewer.c: the viewer's two front doors (viewer.h): a PNG rendered offscreen, and a GLFW
// window with its event loop (zoom, pan, panels, pause), which keeps a private copy of a live
// trace fresh without ever holding the trainer up. Not here: the picture (scene.c), Vulkan
// (gfx.c).
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "vkt_internal.h"
#define GLFW_INCLUDE_NONE
#include <GLFW/glfw3.h>
#include <stb/stb_image_write.h>

#include "gfx.h"
#include "scene.h"
#include "viewer.h"

#define DEFAULT_W 1280
#define DEFAULT_H 720
#define LIVE_REFRESH_S 0.2

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static vkt_status parse_panel(const char *name, vw_panel *out) {
    *out = VW_OVERVIEW;
    if (!name || !*name) return VKT_OK;
    for (int p = 0; p < VW_PANELS; p++)
        if (strcmp(name, vw_panel_name((vw_panel)p)) == 0) {
            *out = (vw_panel)p;
            return VKT_OK;
        }
    return vkt_fail(VKT_ERR_ARG,
                    "unknown panel \"%s\": use overview, timeline, devices or training", name);
}

static void view_init(vw_view *v, const vkt_viewer_opts *o, vw_panel panel) {
    memset(v, 0, sizeof *v);
    v->panel = panel;
    v->live = o->live;
    const char *src = o->source ? o->source : "trace";
    const char *slash = strrchr(src, '/');
    snprintf(v->source, sizeof v->source, "%s", slash ? slash + 1 : src);
}

static void rgb_of(uint32_t c, int rgb[3]) {
    rgb[0] = (int)(c & 0xff), rgb[1] = (int)((c >> 8) & 0xff), rgb[2] = (int)((c >> 16) & 0xff);
}

static void put_json_string(FILE *f, const char *s) {
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(f, "\\%c", *p);
        else if (*p < 0x20)
            fprintf(f, "\\u%04x", *p);
        else
            fputc(*p, f);
    }
    fputc('"', f);
}

// Where the picture put the timeline and in which colours, so that a test can check pixels
// against the trace without knowing the layout code; and every text naming a device, as drawn
// ("names": [{"pid", "where", "text"}], vw_layout.names).
// Written to a temporary file and renamed, so that a test polling it never reads half of it.
static vkt_status write_layout(const char *path, const vw_layout *lay, const vw_view *v, int w,
                               int h) {
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f)
        return vkt_fail(VKT_ERR_IO, "cannot write the layout file %s: %s", path, strerror(errno));
    int c[3];
    fprintf(f, "{\"width\":%d,\"height\":%d,\"panel\":\"%s\",", w, h, vw_panel_name(v->panel));
    rgb_of(vw_background_color(), c);
    fprintf(f, "\"background\":[%d,%d,%d],", c[0], c[1], c[2]);
    rgb_of(vw_text_color(), c);
    fprintf(f, "\"text\":[%d,%d,%d],\"categories\":{", c[0], c[1], c[2]);
    for (int k = 0; k < VKT_CAT_COUNT; k++) {
        rgb_of(vw_category_color((vkt_trace_category)k), c);
        fprintf(f, "%s\"%s\":[%d,%d,%d]", k ? "," : "",
                vkt_trace_category_name((vkt_trace_category)k), c[0], c[1], c[2]);
    }
    fprintf(f, "}");
    if (lay->has_timeline) {
        fprintf(f,
                ",\"timeline\":{\"x0\":%.3f,\"x1\":%.3f,\"y0\":%.3f,\"y1\":%.3f,\"t0_us\":%.3f,"
                "\"t1_us\":%.3f,\"rows\":[",
                lay->tl_x0, lay->tl_x1, lay->tl_y0, lay->tl_y1, lay->tl_v0 / 1000.0,
                lay->tl_v1 / 1000.0);
        for (int i = 0; i < lay->nrows; i++)
            fprintf(f, "%s{\"pid\":%d,\"y0\":%.3f,\"y1\":%.3f}", i ? "," : "", lay->rows[i].pid,
                    lay->rows[i].y0, lay->rows[i].y1);
        fprintf(f, "]}");
    }
    fprintf(f, ",\"names\":[");
    for (int i = 0; i < lay->nnames; i++) {
        fprintf(f, "%s{\"pid\":%d,\"where\":\"%s\",\"text\":", i ? "," : "", lay->names[i].pid,
                lay->names[i].where);
        put_json_string(f, lay->names[i].text);
        fputc('}', f);
    }
    fprintf(f, "]}\n");
    if (fclose(f) != 0 || rename(tmp, path) != 0)
        return vkt_fail(VKT_ERR_IO, "cannot write the layout file %s", path);
    return VKT_OK;
}

static vkt_status validation_verdict(const gfx *g) {
    uint64_t n = gfx_validation_count(g);
    if (n)
        return vkt_fail(VKT_ERR_VULKAN,
                        "the viewer's Vulkan usage drew %llu validation message%s "
                        "(printed above)",
                        (unsigned long long)n, n == 1 ? "" : "s");
    return VKT_OK;
}

// ---------------------------------------------------------------------------------------------
// PNG

vkt_status vkt_viewer_render_png(const vkt_trace *t, const vkt_viewer_opts *o,
                                 const char *png_path) {
    int w = o->width ? o->width : DEFAULT_W, h = o->height ? o->height : DEFAULT_H;
    if (w < 320 || h < 200 || w > 8192 || h > 8192)
        return vkt_fail(VKT_ERR_ARG, "picture size %dx%d is outside 320x200 .. 8192x8192", w, h);
    vw_panel panel;
    VKT_TRY(parse_panel(o->panel, &panel));
    ui_font *font = NULL;
    gfx *g = NULL;
    vw_model model = {0};
    ui_list list;
    ui_list_init(&list, NULL, w, h);
    uint8_t *rgba = malloc((size_t)w * h * 4);
    vkt_status s =
        rgba ? VKT_OK
             : vkt_fail(VKT_ERR_HOST_MEMORY, "out of host memory for a %dx%d picture", w, h);
    if (s == VKT_OK) s = ui_font_create(o->font_path, &font);
    if (s == VKT_OK) {
        int aw, ah;
        const uint8_t *atlas = ui_font_atlas(font, &aw, &ah);
        gfx_desc d = {.device_spec = o->device_spec,
                      .atlas = atlas,
                      .atlas_w = aw,
                      .atlas_h = ah,
                      .validation = o->validation};
        s = gfx_create(&d, &g);
    }
    if (s == VKT_OK) s = vw_model_build(&model, t);
    vw_layout lay;
    vw_view v;
    view_init(&v, o, panel);
    if (s == VKT_OK) {
        snprintf(v.device, sizeof v.device, "%s", gfx_device_name(g));
        list.font = font;
        vw_compose(&list, &model, &v, &lay);
        s = gfx_render_image(g, &list, rgba);
    }
    if (s == VKT_OK) {
        // Opaque RGB: the alpha channel says nothing about the picture.
        for (size_t i = 0, n = (size_t)w * h; i < n; i++)
            memmove(rgba + 3 * i, rgba + 4 * i, 3);
        char tmp[4096];
        snprintf(tmp, sizeof tmp, "%s.tmp.%ld", png_path, (long)getpid());
        if (!stbi_write_png(tmp, w, h, 3, rgba, w * 3)) {
            s = vkt_fail(VKT_ERR_IO,
                         "cannot write the PNG %s (is the directory there and writable?)",
                         png_path);
            unlink(tmp);
        } else if (rename(tmp, png_path) != 0) {
            s = vkt_fail(VKT_ERR_IO, "cannot write the PNG %s: %s", png_path, strerror(errno));
            unlink(tmp);
        }
    }
    if (s == VKT_OK && o->layout_path) s = write_layout(o->layout_path, &lay, &v, w, h);
    if (g) {
        vkt_status vs = validation_verdict(g);
        if (s == VKT_OK) s = vs;
    }
    vw_model_free(&model);
    ui_list_free(&list);
    gfx_destroy(g);
    ui_font_destroy(font);
    free(rgba);
    return s;
}

// ---------------------------------------------------------------------------------------------
// Window

typedef struct app {
    GLFWwindow *win;
    vw_view view;
    vw_model model;
    vw_layout layout;
    bool dirty;
    bool dragging;
    double drag_x;
    int64_t drag_v0, drag_v1;
    double cursor_x, cursor_y;
} app;

static char glfw_message[512];

static void on_glfw_error(int code, const char *what) {
    snprintf(glfw_message, sizeof glfw_message, "%s (GLFW error 0x%x)", what, code);
}

static int64_t full_span(const app *a) {
    int64_t s = a->model.t1 - a->model.t0;
    return s < 1000 ? 1000 : s;
}

// Zooms by factor (< 1 zooms in) keeping the time under anchor (0..1 of the window) in place.
static void zoom(app *a, double factor, double anchor) {
    int64_t v0, v1, full = full_span(a);
    vw_window(&a->model, &a->view, &v0, &v1);
    double span = (double)(v1 - v0), t = v0 + anchor * span, ns = span * factor;
    if (ns < 1000) ns = 1000; // 1 us: below this the timestamps themselves are noise
    if (ns >= (double)full) {
        a->view.zoomed = false;
    } else {
        double n0 = t - anchor * ns;
        if (n0 < 0) n0 = 0;
        if (n0 + ns > full) n0 = full - ns;
        a->view.zoomed = true;
        a->view.v0 = (int64_t)n0;
        a->view.v1 = (int64_t)(n0 + ns);
    }
    a->dirty = true;
}

static void pan_to(app *a, int64_t v0, int64_t v1) {
    int64_t span = v1 - v0, full = full_span(a);
    if (!a->view.zoomed || span >= full) return;
    if (v0 < 0) v0 = 0;
    if (v0 + span > full) v0 = full - span;
    a->view.v0 = v0;
    a->view.v1 = v0 + span;
    a->dirty = true;
}

static double cursor_anchor(const app *a) {
    const vw_layout *l = &a->layout;
    if (!l->has_timeline || l->tl_x1 <= l->tl_x0) return 0.5;
    double f = (a->cursor_x - l->tl_x0) / (l->tl_x1 - l->tl_x0);
    return f < 0 ? 0 : f > 1 ? 1 : f;
}

static void on_key(GLFWwindow *w, int key, int scancode, int action, int mods) {
    app *a = glfwGetWindowUserPointer(w);
    if (action == GLFW_RELEASE) return;
    int64_t v0, v1;
    vw_window(&a->model, &a->view, &v0, &v1);
    switch (key) {
    case GLFW_KEY_ESCAPE:
    case GLFW_KEY_Q: glfwSetWindowShouldClose(w, GLFW_TRUE); break;
    case GLFW_KEY_TAB:
        a->view.panel =
            (vw_panel)(((int)a->view.panel + ((mods & GLFW_MOD_SHIFT) ? VW_PANELS - 1 : 1)) %
                       VW_PANELS);
        a->dirty = true;
        break;
    case GLFW_KEY_1:
    case GLFW_KEY_2:
    case GLFW_KEY_3:
    case GLFW_KEY_4:
        a->view.panel = (vw_panel)(key - GLFW_KEY_1);
        a->dirty = true;
        break;
    case GLFW_KEY_EQUAL:
    case GLFW_KEY_KP_ADD:
    case GLFW_KEY_UP: zoom(a, 1 / 1.5, 0.5); break;
    case GLFW_KEY_MINUS:
    case GLFW_KEY_KP_SUBTRACT:
    case GLFW_KEY_DOWN: zoom(a, 1.5, 0.5); break;
    case GLFW_KEY_LEFT: pan_to(a, v0 - (v1 - v0) / 5, v1 - (v1 - v0) / 5); break;
    case GLFW_KEY_RIGHT: pan_to(a, v0 + (v1 - v0) / 5, v1 + (v1 - v0) / 5); break;
    case GLFW_KEY_0:
    case GLFW_KEY_HOME:
    case GLFW_KEY_R:
        a->view.zoomed = false;
        a->dirty = true;
        break;
    case GLFW_KEY_SPACE:
    case GLFW_KEY_P:
        if (a->view.live) a->view.paused = !a->view.paused, a->dirty = true;
        break;
    default: break;
    }
}

static void on_scroll(GLFWwindow *w, double dx, double dy) {
    app *a = glfwGetWindowUserPointer(w);
    if (dy != 0) zoom(a, pow(1.25, -dy), cursor_anchor(a));
}

static void on_cursor(GLFWwindow *w, double x, double y) {
    app *a = glfwGetWindowUserPointer(w);
    a->cursor_x = x, a->cursor_y = y;
    if (a->dragging && a->layout.has_timeline) {
        double per_px = (double)(a->drag_v1 - a->drag_v0) / (a->layout.tl_x1 - a->layout.tl_x0);
        int64_t d = (int64_t)((x - a->drag_x) * per_px);
        pan_to(a, a->drag_v0 - d, a->drag_v1 - d);
    }
}

static void on_button(GLFWwindow *w, int button, int action, int mods) {
    app *a = glfwGetWindowUserPointer(w);
    if (button != GLFW_MOUSE_BUTTON_LEFT) return;
    const vw_layout *l = &a->layout;
    bool inside = l->has_timeline && a->cursor_x >= l->tl_x0 && a->cursor_x <= l->tl_x1 &&
                  a->cursor_y >= l->tl_y0 - 20 && a->cursor_y <= l->tl_y1 + 30;
    if (action == GLFW_PRESS && inside) {
        int64_t v0, v1;
        vw_window(&a->model, &a->view, &v0, &v1);
        a->dragging = true;
        a->drag_x = a->cursor_x;
        a->drag_v0 = v0, a->drag_v1 = v1;
    } else if (action == GLFW_RELEASE) {
        a->dragging = false;
    }
}

static void on_resize(GLFWwindow *w, int width, int height) {
    app *a = glfwGetWindowUserPointer(w);
    a->dirty = true;
}

static void on_refresh(GLFWwindow *w) {
    app *a = glfwGetWindowUserPointer(w);
    a->dirty = true; // exposed after being covered: the window system may have lost the pixels
}

static vkt_status open_window(const vkt_viewer_opts *o, const char *title, GLFWwindow **out) {
    *out = NULL;
    // No display (DISPLAY unset) is GLFW's to find: glfwInit fails and its message says so.
    glfwSetErrorCallback(on_glfw_error);
    if (!glfwInit())
        return vkt_fail(VKT_ERR_NO_DEVICE,
                        "cannot open a window: %s; render the trace to a file "
                        "with --png OUT.png instead",
                        glfw_message[0] ? glfw_message : "GLFW failed to start");
    if (!glfwVulkanSupported()) {
        glfwTerminate();
        return vkt_fail(VKT_ERR_NO_DEVICE,
                        "the window system cannot show Vulkan (GLFW found no "
                        "Vulkan loader or surface support); use --png OUT.png instead");
    }
    glfwWindowHint(GLFW_CLIENT_API, GLFW_NO_API);
    glfwWindowHint(GLFW_RESIZABLE, GLFW_TRUE);
    int w = o->width ? o->width : DEFAULT_W, h = o->height ? o->height : DEFAULT_H;
    *out = glfwCreateWindow(w, h, title, NULL, NULL);
    if (!*out) {
        glfwTerminate();
        return vkt_fail(VKT_ERR_NO_DEVICE,
                        "cannot open a %dx%d window: %s; use --png OUT.png "
                        "instead",
                        w, h, glfw_message[0] ? glfw_message : "GLFW failed");
    }
    return VKT_OK;
}

static vkt_status window_loop(app *a, gfx *g, const ui_font *font, vkt_trace *src, vkt_trace *copy,
                              const vkt_viewer_opts *o) {
    ui_list list;
    ui_list_init(&list, font, 1, 1);
    vkt_status s = VKT_OK;
    double first_frame = -1, last_sync = now_s();
    uint64_t synced_version = vkt_trace_version(src);
    char last_layout[sizeof(vw_layout) + sizeof(vw_panel) + 2 * sizeof(int)] = {0};
    a->dirty = true;
    while (!glfwWindowShouldClose(a->win) && s == VKT_OK) {
        // Sleep until input, or until the live trace or the exit timer needs a look.
        glfwWaitEventsTimeout(a->view.live || first_frame < 0 ? 0.05 : 0.25);
        if (first_frame >= 0 && o->exit_after_s > 0 && now_s() - first_frame >= o->exit_after_s)
            break;
        if (a->view.live && !a->view.paused && now_s() - last_sync >= LIVE_REFRESH_S) {
            last_sync = now_s();
            uint64_t ver = vkt_trace_version(src);
            if (ver != synced_version) {
                synced_version = ver;
                if ((s = vkt_trace_sync(copy, src)) != VKT_OK) break;
                if ((s = vw_model_build(&a->model, copy)) != VKT_OK) break;
                a->dirty = true;
            }
        }
        int fw, fh, w, h;
        glfwGetFramebufferSize(a->win, &fw, &fh);
        gfx_window_extent(g, fw, fh, &w, &h);
        if (w == 0 || h == 0) continue; // minimised: nothing to draw until restored
        if (!a->dirty && w == list.width && h == list.height) continue;
        ui_list_reset(&list, w, h);
        vw_compose(&list, &a->model, &a->view, &a->layout);
        bool shown;
        if ((s = gfx_present(g, &list, &shown)) != VKT_OK) break;
        if (!shown) continue; // the swapchain was recreated: draw again at the new size
        a->dirty = false;
        if (first_frame < 0) {
            first_frame = now_s();
            fprintf(stderr, "vktrain view: showing %s on %s (%dx%d)\n", a->view.source,
                    gfx_device_name(g), w, h);
        }
        // The layout file follows the picture (panel, zoom, size) for tests that drive the window.
        char cur[sizeof last_layout];
        memcpy(cur, &a->layout, sizeof a->layout);
        memcpy(cur + sizeof a->layout, &a->view.panel, sizeof a->view.panel);
        memcpy(cur + sizeof a->layout + sizeof a->view.panel, &w, sizeof w);
        memcpy(cur + sizeof a->layout + sizeof a->view.panel + sizeof w, &h, sizeof h);
        if (o->layout_path && memcmp(cur, last_layout, sizeof cur) != 0) {
            s = write_layout(o->layout_path, &a->layout, &a->view, w, h);
            memcpy(last_layout, cur, sizeof cur);
        }
    }
    ui_list_free(&list);
    return s;
}

vkt_status vkt_viewer_run(vkt_trace *t, const vkt_viewer_opts *o) {
    vw_panel panel;
    VKT_TRY(parse_panel(o->panel, &panel));
    int w = o->width ? o->width : DEFAULT_W, h = o->height ? o->height : DEFAULT_H;
    if (w < 320 || h < 200 || w > 8192 || h > 8192)
        return vkt_fail(VKT_ERR_ARG, "window size %dx%d is outside 320x200 .. 8192x8192", w, h);
    app a = {0};
    view_init(&a.view, o, panel);
    a.view.interactive = true;
    char title[400];
    snprintf(title, sizeof title, "vktrain view - %s", a.view.source); // ASCII: WM_NAME is Latin-1
    ui_font *font = NULL;
    gfx *g = NULL;
    vkt_trace *copy = NULL;
    vkt_status s = ui_font_create(o->font_path, &font);
    if (s == VKT_OK) s = open_window(o, title, &a.win);
    if (s != VKT_OK) {
        ui_font_destroy(font);
        return s;
    }
    glfwSetWindowUserPointer(a.win, &a);
    glfwSetKeyCallback(a.win, on_key);
    glfwSetScrollCallback(a.win, on_scroll);
    glfwSetCursorPosCallback(a.win, on_cursor);
    glfwSetMouseButtonCallback(a.win, on_button);
    glfwSetFramebufferSizeCallback(a.win, on_resize);
    glfwSetWindowRefreshCallback(a.win, on_refresh);
    int aw, ah;
    const uint8_t *atlas = ui_font_atlas(font, &aw, &ah);
    gfx_desc d = {.device_spec = o->device_spec,
                  .window = a.win,
                  .atlas = atlas,
                  .atlas_w = aw,
                  .atlas_h = ah,
                  .validation = o->validation};
    s = gfx_create(&d, &g);
    // The picture is drawn from a private copy, so a trainer appending to t only ever waits
    // for the short copy of what is new.
    if (s == VKT_OK) s = vkt_trace_create(&copy);
    if (s == VKT_OK) s = vkt_trace_sync(copy, t);
    if (s == VKT_OK) s = vw_model_build(&a.model, copy);
    if (s == VKT_OK) {
        snprintf(a.view.device, sizeof a.view.device, "%s", gfx_device_name(g));
        s = window_loop(&a, g, font, t, copy, o);
    }
    if (g) {
        vkt_status vs = validation_verdict(g);
        if (s == VKT_OK) s = vs;
    }
    gfx_destroy(g);
    glfwDestroyWindow(a.win);
    glfwTerminate();
    vw_model_free(&a.model);
    vkt_trace_destroy(copy);
    ui_font_destroy(font);
    return s;
}
