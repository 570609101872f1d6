// ui.h: what the viewer draws with, independent of Vulkan: a draw list of instanced rectangles
// (filled, rounded, or line segments) and textured glyph quads, in batches that share a scissor,
// and a font atlas baked by stb_truetype from DejaVu Sans. viewer/gfx.c turns a draw list into
// draw calls; viewer/scene.c fills it. Coordinates are pixels, origin top-left.
#ifndef VKT_VIEWER_UI_H
#define VKT_VIEWER_UI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "vktrain.h"

// Colours are 0xAABBGGRR, i.e. the bytes R, G, B, A in memory (VK_FORMAT_R8G8B8A8_UNORM).
#define UI_RGB(r, g, b) ((uint32_t)(r) | ((uint32_t)(g) << 8) | ((uint32_t)(b) << 16) | 0xff000000u)
#define UI_RGBA(r, g, b, a)                                                                        \
    ((uint32_t)(r) | ((uint32_t)(g) << 8) | ((uint32_t)(b) << 16) | ((uint32_t)(a) << 24))
#define UI_HEX(h) UI_RGB(((h) >> 16) & 0xff, ((h) >> 8) & 0xff, (h)&0xff)
uint32_t ui_alpha(uint32_t color, float a); // the colour with its alpha multiplied by a

// One rectangle instance (shaders/ui_rect.vert): a filled, optionally rounded, box from (x0,y0)
// to (x1,y1) when width == 0; otherwise a line segment from (x0,y0) to (x1,y1) of that width.
typedef struct ui_rect_inst {
    float x0, y0, x1, y1;
    uint32_t color;
    float width, radius, pad;
} ui_rect_inst;

// One glyph instance (shaders/ui_glyph.vert): a screen quad and its atlas rectangle.
typedef struct ui_glyph_inst {
    float x0, y0, x1, y1;
    float u0, v0, u1, v1;
    uint32_t color;
    float pad[3];
} ui_glyph_inst;

typedef enum ui_kind { UI_RECTS, UI_GLYPHS } ui_kind;

typedef struct ui_batch {
    ui_kind kind;
    uint32_t first, count;      // instances in rects[] or glyphs[]
    int32_t sx0, sy0, sx1, sy1; // scissor (pixels)
} ui_batch;

typedef enum ui_face { UI_SMALL, UI_NORMAL, UI_BOLD, UI_TITLE, UI_FACES } ui_face;

typedef struct ui_font ui_font;

typedef struct ui_list {
    const ui_font *font;
    int width, height;
    ui_rect_inst *rects;
    size_t nrects, caprects;
    ui_glyph_inst *glyphs;
    size_t nglyphs, capglyphs;
    ui_batch *batches;
    size_t nbatches, capbatches;
    int32_t scissor[4];
    bool oom; // an allocation failed: the list is incomplete (reported by ui_check)
} ui_list;

// ---------------------------------------------------------------------------------------------
// Fonts

// Bakes the TrueType font at path (every face from it), or with path NULL DejaVu Sans (and
// DejaVu Sans Bold when present), into an 8-bit atlas. Fails with VKT_ERR_IO naming the font
// file and the package that installs it.
vkt_status ui_font_create(const char *path, ui_font **out);
void ui_font_destroy(ui_font *f);
const uint8_t *ui_font_atlas(const ui_font *f, int *w, int *h);
float ui_font_ascent(const ui_font *f, ui_face face); // pixels above the baseline
float ui_font_height(const ui_font *f, ui_face face); // line height in pixels
float ui_text_width(const ui_font *f, ui_face face, const char *s);

// ---------------------------------------------------------------------------------------------
// Draw lists

void ui_list_init(ui_list *l, const ui_font *font, int width, int height);
void ui_list_free(ui_list *l);
void ui_list_reset(ui_list *l, int width, int height);
vkt_status ui_check(const ui_list *l);
void ui_scissor(ui_list *l, float x0, float y0, float x1, float y1);
void ui_noscissor(ui_list *l);
void ui_box(ui_list *l, float x0, float y0, float x1, float y1, uint32_t color);
void ui_rounded(ui_list *l, float x0, float y0, float x1, float y1, float radius, uint32_t color);
void ui_line(ui_list *l, float x0, float y0, float x1, float y1, float width, uint32_t color);
// Dashed horizontal or vertical line.
void ui_dashed(ui_list *l, float x0, float y0, float x1, float y1, float width, float dash,
               uint32_t color);

typedef enum ui_align { UI_LEFT, UI_CENTER, UI_RIGHT } ui_align;
// Draws UTF-8 text with its baseline at y; returns its width. Text that does not fit in max_w
// (0 = no limit) is cut and ends with "...".
float ui_text(ui_list *l, ui_face face, float x, float y, ui_align align, float max_w,
              uint32_t color, const char *s);
float ui_textf(ui_list *l, ui_face face, float x, float y, ui_align align, uint32_t color,
               const char *fmt, ...) __attribute__((format(printf, 7, 8)));
// The text ui_text draws for s within max_w: s, or its cut prefix and "..." ("" when nothing
// fits), written to out (at most size bytes).
void ui_text_shown(const ui_font *f, ui_face face, float max_w, const char *s, char *out,
                   size_t size);

#endif
