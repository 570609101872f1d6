// ui.c: the viewer's draw list and its font. The font is DejaVu Sans (regular, and bold for
// headings), or the one file vkt_viewer_opts.font_path names, baked once by stb_truetype's packer
// into one 8-bit atlas at the few sizes the viewer uses, with 2x horizontal oversampling so that
// text placed at fractional x stays sharp. Not here: anything Vulkan (gfx.c), what is drawn
// (scene.c).
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <stb/stb_truetype.h>

#include "ui.h"
#include "vkt_internal.h"

#define FONT_PATH "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf"
#define FONT_BOLD_PATH "/usr/share/fonts/truetype/dejavu/DejaVuSans-Bold.ttf"
#define ATLAS_W 1024
#define ATLAS_H 512
// Baked code points: ASCII and Latin-1 (for the micro sign, the multiplication sign, ...).
#define RANGE0_FIRST 32
#define RANGE0_COUNT 95
#define RANGE1_FIRST 160
#define RANGE1_COUNT 96

struct ui_font {
    uint8_t *atlas;
    stbtt_packedchar chars[UI_FACES][RANGE0_COUNT + RANGE1_COUNT];
    float ascent[UI_FACES], height[UI_FACES];
};

// Em sizes in pixels, for a 1280x720 picture read at arm's length.
static const float FACE_EM[UI_FACES] = {11.0f, 13.0f, 13.0f, 20.0f};
static const bool FACE_BOLD[UI_FACES] = {false, false, true, true};

uint32_t ui_alpha(uint32_t color, float a) {
    float old = (float)(color >> 24);
    uint32_t na = (uint32_t)(old * (a < 0 ? 0 : a > 1 ? 1 : a) + 0.5f);
    return (color & 0x00ffffffu) | (na << 24);
}

// ---------------------------------------------------------------------------------------------
// Font

// A font file's bytes (engine/core/fileio.c), or NULL when missing, unreadable, empty or over 64
// MiB.
static uint8_t *read_file(const char *path, size_t *size) {
    uint8_t *data = vkt_read_file(path, 64u << 20, size);
    if (data && *size == 0) {
        free(data);
        data = NULL;
    }
    return data;
}

vkt_status ui_font_create(const char *font_path, ui_font **out) {
    *out = NULL;
    const char *path = font_path ? font_path : FONT_PATH;
    size_t size = 0, bold_size = 0;
    uint8_t *regular = read_file(path, &size);
    if (!regular)
        return vkt_fail(VKT_ERR_IO,
                        "the viewer's font %s cannot be read (%s): install it with "
                        "`apt-get install fonts-dejavu-core`, or point VKT_FONT at a .ttf file",
                        path, strerror(errno));
    uint8_t *bold = font_path ? NULL : read_file(FONT_BOLD_PATH, &bold_size);
    ui_font *f = calloc(1, sizeof *f);
    if (f) f->atlas = calloc(ATLAS_W, ATLAS_H);
    if (!f || !f->atlas) {
        free(regular), free(bold);
        if (f) free(f);
        return vkt_fail(VKT_ERR_HOST_MEMORY, "out of host memory baking the font");
    }
    vkt_status s = VKT_OK;
    stbtt_pack_context pc;
    if (!stbtt_PackBegin(&pc, f->atlas, ATLAS_W, ATLAS_H, 0, 1, NULL)) {
        s = vkt_fail(VKT_ERR_HOST_MEMORY, "out of host memory baking the font");
        goto done;
    }
    stbtt_PackSetOversampling(&pc, 2, 1);
    for (int face = 0; face < UI_FACES && s == VKT_OK; face++) {
        const uint8_t *ttf = FACE_BOLD[face] && bold ? bold : regular;
        stbtt_fontinfo info;
        if (!stbtt_InitFont(&info, ttf, stbtt_GetFontOffsetForIndex(ttf, 0))) {
            s = vkt_fail(VKT_ERR_FORMAT, "the font file %s is not a TrueType font", path);
            break;
        }
        float scale = stbtt_ScaleForMappingEmToPixels(&info, FACE_EM[face]);
        int asc, desc, gap;
        stbtt_GetFontVMetrics(&info, &asc, &desc, &gap);
        f->ascent[face] = (float)asc * scale;
        f->height[face] = (float)(asc - desc + gap) * scale;
        stbtt_pack_range ranges[2] = {
            {.font_size = STBTT_POINT_SIZE(FACE_EM[face]),
             .first_unicode_codepoint_in_range = RANGE0_FIRST,
             .num_chars = RANGE0_COUNT,
             .chardata_for_range = f->chars[face]},
            {.font_size = STBTT_POINT_SIZE(FACE_EM[face]),
             .first_unicode_codepoint_in_range = RANGE1_FIRST,
             .num_chars = RANGE1_COUNT,
             .chardata_for_range = f->chars[face] + RANGE0_COUNT},
        };
        if (!stbtt_PackFontRanges(&pc, ttf, 0, ranges, 2))
            s = vkt_fail(VKT_ERR_FORMAT, "the font %s does not fit the %dx%d atlas", path, ATLAS_W,
                         ATLAS_H);
    }
    stbtt_PackEnd(&pc);
done:
    free(regular);
    free(bold);
    if (s != VKT_OK) {
        ui_font_destroy(f);
        return s;
    }
    *out = f;
    return VKT_OK;
}

void ui_font_destroy(ui_font *f) {
    if (!f) return;
    free(f->atlas);
    free(f);
}

const uint8_t *ui_font_atlas(const ui_font *f, int *w, int *h) {
    *w = ATLAS_W;
    *h = ATLAS_H;
    return f->atlas;
}

float ui_font_ascent(const ui_font *f, ui_face face) { return f->ascent[face]; }
float ui_font_height(const ui_font *f, ui_face face) { return f->height[face]; }

// Next code point of UTF-8 text; malformed bytes come out as '?'.
static uint32_t next_codepoint(const char **p) {
    const unsigned char *s = (const unsigned char *)*p;
    uint32_t c = s[0];
    int n = c < 0x80             ? 0
            : (c & 0xe0) == 0xc0 ? 1
            : (c & 0xf0) == 0xe0 ? 2
            : (c & 0xf8) == 0xf0 ? 3
                                 : -1;
    if (n < 0) {
        *p += 1;
        return '?';
    }
    c &= n == 0 ? 0x7f : (0x3f >> n);
    for (int i = 1; i <= n; i++) {
        if ((s[i] & 0xc0) != 0x80) {
            *p += i;
            return '?';
        }
        c = (c << 6) | (s[i] & 0x3f);
    }
    *p += n + 1;
    return c;
}

static int glyph_index(uint32_t c) {
    if (c >= RANGE0_FIRST && c < RANGE0_FIRST + RANGE0_COUNT) return (int)(c - RANGE0_FIRST);
    if (c >= RANGE1_FIRST && c < RANGE1_FIRST + RANGE1_COUNT)
        return RANGE0_COUNT + (int)(c - RANGE1_FIRST);
    return '?' - RANGE0_FIRST;
}

static float text_width_n(const ui_font *f, ui_face face, const char *s, size_t nbytes) {
    float w = 0;
    const char *end = s + nbytes;
    while (s < end && *s)
        w += f->chars[face][glyph_index(next_codepoint(&s))].xadvance;
    return w;
}

float ui_text_width(const ui_font *f, ui_face face, const char *s) {
    return text_width_n(f, face, s, strlen(s));
}

// ---------------------------------------------------------------------------------------------
// Draw list

void ui_list_init(ui_list *l, const ui_font *font, int width, int height) {
    memset(l, 0, sizeof *l);
    l->font = font;
    ui_list_reset(l, width, height);
}

void ui_list_free(ui_list *l) {
    free(l->rects);
    free(l->glyphs);
    free(l->batches);
    memset(l, 0, sizeof *l);
}

void ui_list_reset(ui_list *l, int width, int height) {
    l->width = width;
    l->height = height;
    l->nrects = l->nglyphs = l->nbatches = 0;
    l->oom = false;
    ui_noscissor(l);
}

vkt_status ui_check(const ui_list *l) {
    return l->oom ? vkt_fail(VKT_ERR_HOST_MEMORY, "out of host memory building the picture")
                  : VKT_OK;
}

void ui_scissor(ui_list *l, float x0, float y0, float x1, float y1) {
    l->scissor[0] = x0 < 0 ? 0 : (int32_t)x0;
    l->scissor[1] = y0 < 0 ? 0 : (int32_t)y0;
    l->scissor[2] = x1 > l->width ? l->width : (int32_t)(x1 + 0.999f);
    l->scissor[3] = y1 > l->height ? l->height : (int32_t)(y1 + 0.999f);
}

void ui_noscissor(ui_list *l) {
    l->scissor[0] = l->scissor[1] = 0;
    l->scissor[2] = l->width;
    l->scissor[3] = l->height;
}

static bool grow(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return true;
    size_t n = *cap ? *cap * 2 : 256;
    while (n < need)
        n *= 2;
    void *q = realloc(*p, n * elem);
    if (!q) return false;
    *p = q;
    *cap = n;
    return true;
}

// The batch the next instance of kind goes into: the last one if it matches.
static ui_batch *batch_for(ui_list *l, ui_kind kind) {
    if (l->nbatches) {
        ui_batch *b = &l->batches[l->nbatches - 1];
        if (b->kind == kind && b->sx0 == l->scissor[0] && b->sy0 == l->scissor[1] &&
            b->sx1 == l->scissor[2] && b->sy1 == l->scissor[3])
            return b;
    }
    if (!grow((void **)&l->batches, &l->capbatches, l->nbatches + 1, sizeof *l->batches)) {
        l->oom = true;
        return NULL;
    }
    ui_batch *b = &l->batches[l->nbatches++];
    *b = (ui_batch){.kind = kind,
                    .first = (uint32_t)(kind == UI_RECTS ? l->nrects : l->nglyphs),
                    .sx0 = l->scissor[0],
                    .sy0 = l->scissor[1],
                    .sx1 = l->scissor[2],
                    .sy1 = l->scissor[3]};
    return b;
}

static void push_rect(ui_list *l, ui_rect_inst r) {
    if ((r.color >> 24) == 0) return;
    if (!grow((void **)&l->rects, &l->caprects, l->nrects + 1, sizeof *l->rects)) {
        l->oom = true;
        return;
    }
    ui_batch *b = batch_for(l, UI_RECTS);
    if (!b) return;
    l->rects[l->nrects++] = r;
    b->count++;
}

void ui_box(ui_list *l, float x0, float y0, float x1, float y1, uint32_t color) {
    if (x1 <= x0 || y1 <= y0) return;
    push_rect(l, (ui_rect_inst){x0, y0, x1, y1, color, 0, 0, 0});
}

void ui_rounded(ui_list *l, float x0, float y0, float x1, float y1, float radius, uint32_t color) {
    if (x1 <= x0 || y1 <= y0) return;
    push_rect(l, (ui_rect_inst){x0, y0, x1, y1, color, 0, radius, 0});
}

void ui_line(ui_list *l, float x0, float y0, float x1, float y1, float width, uint32_t color) {
    push_rect(l, (ui_rect_inst){x0, y0, x1, y1, color, width > 0 ? width : 1, 0, 0});
}

void ui_dashed(ui_list *l, float x0, float y0, float x1, float y1, float width, float dash,
               uint32_t color) {
    if (x0 == x1) { // vertical
        for (float y = y0; y < y1; y += 2 * dash)
            ui_box(l, x0 - width / 2, y, x0 + width / 2, y + dash < y1 ? y + dash : y1, color);
    } else {
        for (float x = x0; x < x1; x += 2 * dash)
            ui_box(l, x, y0 - width / 2, x + dash < x1 ? x + dash : x1, y0 + width / 2, color);
    }
}

static void draw_run(ui_list *l, ui_face face, float x, float y, uint32_t color, const char *s,
                     size_t nbytes) {
    const ui_font *f = l->font;
    const char *end = s + nbytes;
    float px = x, py = (float)(int)(y + 0.5f); // baselines on whole pixels keep text crisp
    while (s < end && *s) {
        uint32_t c = next_codepoint(&s);
        stbtt_aligned_quad q;
        stbtt_GetPackedQuad(f->chars[face], ATLAS_W, ATLAS_H, glyph_index(c), &px, &py, &q, 0);
        if (c == ' ') continue;
        if (!grow((void **)&l->glyphs, &l->capglyphs, l->nglyphs + 1, sizeof *l->glyphs)) {
            l->oom = true;
            return;
        }
        ui_batch *b = batch_for(l, UI_GLYPHS);
        if (!b) return;
        l->glyphs[l->nglyphs++] =
            (ui_glyph_inst){q.x0, q.y0, q.x1, q.y1, q.s0, q.t0, q.s1, q.t1, color, {0, 0, 0}};
        b->count++;
    }
}

// How many bytes of s ui_text draws within max_w (0 = no limit); *cut: whether it adds "...".
static size_t text_fit(const ui_font *f, ui_face face, float max_w, const char *s, bool *cut) {
    size_t n = strlen(s);
    *cut = false;
    if (max_w <= 0 || text_width_n(f, face, s, n) <= max_w) return n;
    float dots = ui_text_width(f, face, "...");
    // The longest prefix (on a code point boundary) that leaves room for the dots.
    const char *p = s;
    while (*p) {
        const char *q = p;
        next_codepoint(&q);
        if (text_width_n(f, face, s, (size_t)(q - s)) + dots > max_w) break;
        p = q;
    }
    *cut = p > s;
    return (size_t)(p - s);
}

void ui_text_shown(const ui_font *f, ui_face face, float max_w, const char *s, char *out,
                   size_t size) {
    bool cut;
    size_t n = text_fit(f, face, max_w, s, &cut);
    snprintf(out, size, "%.*s%s", (int)n, s, cut ? "..." : "");
}

float ui_text(ui_list *l, ui_face face, float x, float y, ui_align align, float max_w,
              uint32_t color, const char *s) {
    const ui_font *f = l->font;
    bool cut;
    size_t n = text_fit(f, face, max_w, s, &cut);
    if (n == 0) return 0;
    float w = text_width_n(f, face, s, n) + (cut ? ui_text_width(f, face, "...") : 0);
    float x0 = align == UI_LEFT ? x : align == UI_CENTER ? x - w / 2 : x - w;
    draw_run(l, face, x0, y, color, s, n);
    if (cut) draw_run(l, face, x0 + w - ui_text_width(f, face, "..."), y, color, "...", 3);
    return w;
}

float ui_textf(ui_list *l, ui_face face, float x, float y, ui_align align, uint32_t color,
               const char *fmt, ...) {
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    return ui_text(l, face, x, y, align, 0, color, buf);
}
