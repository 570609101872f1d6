// offscreen.c: draw lists to PNG bytes (offscreen.h): gfx_render_image into RGBA, the alpha
// dropped (it says nothing about the picture), stb_image_write's encoder into a growing buffer.
// Not here: what is drawn (chart.c, scene.c), writing files (the caller: atomically).
#include <stdlib.h>
#include <string.h>

#include <stb/stb_image_write.h>

#include "gfx.h"
#include "offscreen.h"
#include "vkt_internal.h"

struct vw_offscreen {
    ui_font *font;
    gfx *g;
};

vkt_status vw_offscreen_create(const vw_offscreen_desc *d, vw_offscreen **out) {
    *out = NULL;
    vw_offscreen *o = calloc(1, sizeof *o);
    if (!o) return vkt_fail(VKT_ERR_HOST_MEMORY, "out of host memory opening the renderer");
    vkt_status s = ui_font_create(d->font_path, &o->font);
    if (s == VKT_OK) {
        int aw, ah;
        const uint8_t *atlas = ui_font_atlas(o->font, &aw, &ah);
        gfx_desc gd = {.device_spec = d->device_spec,
                       .atlas = atlas,
                       .atlas_w = aw,
                       .atlas_h = ah,
                       .validation = d->validation,
                       .who = d->who};
        s = gfx_create(&gd, &o->g);
    }
    if (s != VKT_OK) {
        vw_offscreen_destroy(o);
        return s;
    }
    *out = o;
    return VKT_OK;
}

void vw_offscreen_destroy(vw_offscreen *o) {
    if (!o) return;
    gfx_destroy(o->g);
    ui_font_destroy(o->font);
    free(o);
}

const ui_font *vw_offscreen_font(const vw_offscreen *o) { return o->font; }
const char *vw_offscreen_device_name(const vw_offscreen *o) { return gfx_device_name(o->g); }

typedef struct png_buf {
    uint8_t *data;
    size_t size, cap;
    bool oom;
} png_buf;

static void png_append(void *ctx, void *data, int n) {
    png_buf *b = ctx;
    if (b->oom || n <= 0) return;
    if (b->size + (size_t)n > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 1 << 16;
        while (cap < b->size + (size_t)n)
            cap *= 2;
        uint8_t *p = realloc(b->data, cap);
        if (!p) {
            b->oom = true;
            return;
        }
        b->data = p, b->cap = cap;
    }
    memcpy(b->data + b->size, data, (size_t)n);
    b->size += (size_t)n;
}

vkt_status vw_offscreen_png(vw_offscreen *o, const ui_list *l, uint8_t **png, size_t *size) {
    *png = NULL, *size = 0;
    int w = l->width, h = l->height;
    if (w < 16 || h < 16 || w > 8192 || h > 8192)
        return vkt_fail(VKT_ERR_ARG, "picture size %dx%d is outside 16x16 .. 8192x8192", w, h);
    uint8_t *rgba = malloc((size_t)w * h * 4);
    if (!rgba) return vkt_fail(VKT_ERR_HOST_MEMORY, "out of host memory for a %dx%d picture", w, h);
    vkt_status s = gfx_render_image(o->g, l, rgba);
    uint64_t msgs = gfx_validation_count(o->g);
    if (s == VKT_OK && msgs)
        s = vkt_fail(VKT_ERR_VULKAN,
                     "the renderer's Vulkan usage drew %llu validation message%s (printed above)",
                     (unsigned long long)msgs, msgs == 1 ? "" : "s");
    png_buf b = {0};
    if (s == VKT_OK) {
        for (size_t i = 0, n = (size_t)w * h; i < n; i++)
            memmove(rgba + 3 * i, rgba + 4 * i, 3);
        // Unfiltered rows: charts are flat colour, which stb's deflate packs better unfiltered
        // than after its per-row filter choice (597 KB against 656 KB for compare's 8 pictures of
        // tests/test_cli_compare.sh), and an unfiltered PNG is quick to read back in a test.
        int filter = stbi_write_force_png_filter;
        stbi_write_force_png_filter = 0;
        int ok = stbi_write_png_to_func(png_append, &b, w, h, 3, rgba, w * 3);
        stbi_write_force_png_filter = filter;
        if (!ok || b.oom) {
            free(b.data);
            s = vkt_fail(VKT_ERR_HOST_MEMORY, "out of host memory encoding a %dx%d PNG", w, h);
        } else {
            *png = b.data, *size = b.size;
        }
    }
    free(rgba);
    return s;
}
