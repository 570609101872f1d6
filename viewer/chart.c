// chart.c: line charts as a draw list (chart.h). The axes first (range from the data, snapped to
// powers of two or to 1-2-5 x 10^k, or to a nice linear step; ticks thinned until their labels
// have room), then the grid, the reference lines, the polylines, the markers, the axes' lines and
// the legend, in that order, so that markers sit on lines and the axes stay solid. Not here:
// Vulkan or files (viewer/offscreen.c renders the list), what the charts show (engine/cli/
// compare.c).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "chart.h"
#include "vkt_internal.h"

#define C_BG UI_HEX(0xffffff)
#define C_PLOT UI_HEX(0xfbfbfc)
#define C_GRID UI_HEX(0xe4e7eb)
#define C_AXIS UI_HEX(0x262a30)
#define C_TEXT UI_HEX(0x1f2328)
#define C_TEXT2 UI_HEX(0x59616b)
#define C_LEGEND_EDGE UI_HEX(0xd0d5db)

// Chosen to stay apart from each other and from the greys of the picture (no grey among them);
// the first 8 the most distinct.
static const uint32_t PALETTE[CHART_PALETTE] = {
    UI_HEX(0x1f77b4), UI_HEX(0xd62728), UI_HEX(0x2ca02c), UI_HEX(0xff7f0e),
    UI_HEX(0x9467bd), UI_HEX(0x8c564b), UI_HEX(0xe377c2), UI_HEX(0x17becf),
    UI_HEX(0xbcbd22), UI_HEX(0xa6007a), UI_HEX(0x0b2e7a), UI_HEX(0xe6ab02),
    UI_HEX(0x00604a), UI_HEX(0xfb8072), UI_HEX(0x5e2d0c), UI_HEX(0x7fd13b),
};

uint32_t chart_background_color(void) { return C_BG; }
uint32_t chart_axis_color(void) { return C_AXIS; }
uint32_t chart_text_color(void) { return C_TEXT; }
uint32_t chart_palette(int i) {
    return PALETTE[((i % CHART_PALETTE) + CHART_PALETTE) % CHART_PALETTE];
}

// ---------------------------------------------------------------------------------------------
// Tick labels

static void fmt_trim(char *out, size_t size, double v, const char *suffix) {
    // Three significant digits at most, no trailing zeros: 1.5, 20, 0.05.
    char buf[32];
    snprintf(buf, sizeof buf, "%.3g", v);
    snprintf(out, size, "%s%s", buf, suffix);
}

static void fmt_value(char *out, size_t size, double v, chart_units u, bool pow2) {
    double a = fabs(v);
    if (u == CHART_PERCENT) {
        fmt_trim(out, size, v * 100, "%");
    } else if (u == CHART_BYTES) {
        static const char *unit[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
        int k = 0;
        while (k < 5 && a >= 1024)
            a /= 1024, k++;
        char sfx[8];
        snprintf(sfx, sizeof sfx, " %s", unit[k]);
        fmt_trim(out, size, v < 0 ? -a : a, sfx);
    } else if (v == 0) {
        snprintf(out, size, "0");
    } else if (pow2 && a >= 1 && a < 65536) {
        snprintf(out, size, "%.0f", v);
    } else if (pow2 && a >= 65536) {
        int k = 0;
        static const char *unit[] = {"", "Ki", "Mi", "Gi", "Ti"};
        while (k < 4 && a >= 1024)
            a /= 1024, k++;
        fmt_trim(out, size, v < 0 ? -a : a, unit[k]);
    } else if (a >= 1e9) {
        fmt_trim(out, size, v / 1e9, "G");
    } else if (a >= 1e6) {
        fmt_trim(out, size, v / 1e6, "M");
    } else if (a >= 1e3) {
        fmt_trim(out, size, v / 1e3, "k");
    } else {
        fmt_trim(out, size, v, "");
    }
}

// ---------------------------------------------------------------------------------------------
// Axes

float chart_map(const chart_axis_layout *a, double v) {
    double f0 = a->min, f1 = a->max, f = v;
    if (a->scale == CHART_LOG) f0 = log(f0), f1 = log(f1), f = log(v);
    double t = f1 > f0 ? (f - f0) / (f1 - f0) : 0.5;
    return (float)(a->p0 + t * (a->p1 - a->p0));
}

static bool usable(const chart_axis *ax, double v) {
    return isfinite(v) && (ax->scale != CHART_LOG || v > 0);
}

// The 1-2-5 x 10^k value at or below v (down) or at or above it (up).
static double snap125(double v, bool up) {
    double d = pow(10, floor(log10(v)));
    static const double m[] = {1, 2, 5, 10};
    if (up) {
        for (int i = 0; i < 4; i++)
            if (m[i] * d >= v * (1 - 1e-9)) return m[i] * d;
        return 10 * d;
    }
    for (int i = 3; i >= 0; i--)
        if (m[i] * d <= v * (1 + 1e-9)) return m[i] * d;
    return d;
}

static double nice_step(double span, int want) {
    double raw = span / want, d = pow(10, floor(log10(raw))), m = raw / d;
    return (m <= 1 ? 1 : m <= 2 ? 2 : m <= 5 ? 5 : 10) * d;
}

static void add_tick(chart_axis_layout *a, double v, bool labelled, const chart_axis *ax) {
    if (a->nticks >= CHART_MAX_TICKS) return;
    chart_tick *t = &a->ticks[a->nticks++];
    t->value = v;
    t->px = chart_map(a, v);
    t->labelled = labelled;
    t->label[0] = 0;
    if (labelled) fmt_value(t->label, sizeof t->label, v, ax->units, ax->pow2);
}

// Range and ticks of an axis over the values vals[0..n) (the usable ones), drawn from pixel p0 to
// p1; min_gap: the fewest pixels between two labels.
static void axis_build(chart_axis_layout *a, const chart_axis *ax, const double *vals, size_t n,
                       float p0, float p1, float min_gap) {
    memset(a, 0, sizeof *a);
    a->scale = ax->scale;
    a->p0 = p0, a->p1 = p1;
    double lo = INFINITY, hi = -INFINITY;
    for (size_t i = 0; i < n; i++)
        if (usable(ax, vals[i])) lo = fmin(lo, vals[i]), hi = fmax(hi, vals[i]);
    if (!(lo <= hi)) lo = ax->scale == CHART_LOG ? 1 : 0, hi = ax->scale == CHART_LOG ? 10 : 1;
    float span = fabsf(p1 - p0);
    if (ax->scale == CHART_LOG && ax->pow2) {
        int e0 = (int)floor(log2(lo) + 1e-9), e1 = (int)ceil(log2(hi) - 1e-9);
        if (e1 <= e0) e0--, e1++;
        a->min = ldexp(1, e0), a->max = ldexp(1, e1);
        // Every power of two a tick; every k-th (aligned, so 1 MiB, 4 MiB, 16 MiB) labelled.
        int k = 1;
        while (k < 64 && span / (e1 - e0) * k < min_gap)
            k *= 2;
        bool all = e1 - e0 + 1 <= CHART_MAX_TICKS;
        for (int e = e0; e <= e1; e++) {
            bool lab = ((e % k) + k) % k == 0;
            if (lab || all) add_tick(a, ldexp(1, e), lab, ax);
        }
    } else if (ax->scale == CHART_LOG) {
        a->min = snap125(lo, false), a->max = snap125(hi, true);
        if (a->max <= a->min)
            a->min = snap125(a->min * 0.99, false), a->max = snap125(a->max * 1.01, true);
        double decades = log10(a->max / a->min), per_decade = span / decades;
        int d0 = (int)floor(log10(a->min) + 1e-9), d1 = (int)ceil(log10(a->max) - 1e-9);
        bool sub = per_decade * log10(2.5) >= min_gap; // room for 1, 2, 5
        int k = 1;
        while (!sub && k < 64 && per_decade * k < min_gap)
            k++;
        for (int d = d0; d <= d1; d++) {
            for (int m = 1; m <= 9; m++) {
                double v = m * pow(10, d);
                if (v < a->min * (1 - 1e-9) || v > a->max * (1 + 1e-9)) continue;
                bool lab = sub ? (m == 1 || m == 2 || m == 5) : (m == 1 && ((d % k) + k) % k == 0);
                bool minor = per_decade >= 60;
                if (lab || minor) add_tick(a, v, lab, ax);
            }
        }
    } else {
        if (ax->from_zero) lo = fmin(lo, 0);
        if (hi <= lo) hi = lo + (lo != 0 ? fabs(lo) : 1);
        int want = (int)(span / (min_gap * 1.5f));
        double step = nice_step(hi - lo, want < 2 ? 2 : want > 10 ? 10 : want);
        a->min = floor(lo / step + 1e-9) * step, a->max = ceil(hi / step - 1e-9) * step;
        if (a->max <= a->min) a->max = a->min + step;
        int nsteps = (int)lround((a->max - a->min) / step);
        for (int i = 0; i <= nsteps; i++) {
            double v = a->min + i * step;
            if (fabs(v) < step * 1e-9) v = 0;
            add_tick(a, v, true, ax);
        }
    }
    for (int i = 0; i < a->nticks; i++) // min and max moved after the ticks' first mapping
        a->ticks[i].px = chart_map(a, a->ticks[i].value);
}

// ---------------------------------------------------------------------------------------------
// Drawing

// A dashed segment in any direction: dashes of `dash` pixels, gaps of `gap`, the first dash
// starting `phase` pixels in.
static void dashed_segment(ui_list *l, float x0, float y0, float x1, float y1, float width,
                           float dash, float gap, float phase, uint32_t color) {
    float dx = x1 - x0, dy = y1 - y0, len = sqrtf(dx * dx + dy * dy);
    if (len < 0.5f) return;
    float ux = dx / len, uy = dy / len;
    for (float s = phase; s < len; s += dash + gap) {
        float e = s + dash < len ? s + dash : len;
        ui_line(l, x0 + ux * s, y0 + uy * s, x0 + ux * e, y0 + uy * e, width, color);
    }
}

static void marker(ui_list *l, float x, float y, chart_marker m, bool hollow, uint32_t color) {
    float r = 4.5f;
    // A ring of background keeps a marker readable where lines cross it.
    if (m == CHART_SQUARE) {
        ui_box(l, x - r - 1.5f, y - r - 1.5f, x + r + 1.5f, y + r + 1.5f, C_BG);
        ui_box(l, x - r, y - r, x + r, y + r, color);
        if (hollow) ui_box(l, x - r + 2.2f, y - r + 2.2f, x + r - 2.2f, y + r - 2.2f, C_BG);
    } else {
        ui_rounded(l, x - r - 1.5f, y - r - 1.5f, x + r + 1.5f, y + r + 1.5f, r + 1.5f, C_BG);
        ui_rounded(l, x - r, y - r, x + r, y + r, r, color);
        if (hollow)
            ui_rounded(l, x - r + 2.2f, y - r + 2.2f, x + r - 2.2f, y + r - 2.2f, r - 2.2f, C_BG);
    }
}

static bool point_ok(const chart *c, const chart_point *p) {
    return usable(&c->x, p->x) && usable(&c->y, p->y);
}

// For each line, how many lines share its pixel row and its place among them.
static void hline_groups(const chart *c, const chart_layout *lay, int *count, int *place) {
    for (int i = 0; i < c->nhlines; i++) {
        count[i] = 0, place[i] = 0;
        float yi = chart_map(&lay->y, c->hlines[i].y);
        for (int j = 0; j < c->nhlines; j++) {
            if (!usable(&c->y, c->hlines[j].y)) continue;
            if (fabsf(chart_map(&lay->y, c->hlines[j].y) - yi) < 2.5f) {
                if (j < i) place[i]++;
                count[i]++;
            }
        }
    }
}

#define HLINE_DASH 9.0f

// Alone, a line is dashed; sharing its pixel row with count - 1 others, each draws every
// count-th dash, so that the colours alternate along the row and none hides another.
static void draw_hline(ui_list *l, float x0, float x1, float y, int count, int place,
                       uint32_t color) {
    float gap = count > 1 ? HLINE_DASH * (float)(count - 1) : HLINE_DASH * 0.7f;
    dashed_segment(l, x0, y, x1, y, 2.0f, HLINE_DASH, gap, HLINE_DASH * (float)place, color);
}

vkt_status chart_compose(ui_list *l, const chart *c, chart_layout *out) {
    chart_layout lay_local, *lay = out ? out : &lay_local;
    memset(lay, 0, sizeof *lay);
    const ui_font *font = l->font;
    float W = (float)l->width, H = (float)l->height;
    lay->width = l->width, lay->height = l->height;
    ui_box(l, 0, 0, W, H, C_BG);

    // Title.
    float top = 14 + ui_font_ascent(font, UI_TITLE);
    ui_text(l, UI_TITLE, 20, top, UI_LEFT, W - 40, C_TEXT, c->title ? c->title : "");
    if (c->subtitle) {
        top += ui_font_height(font, UI_NORMAL) + 6;
        ui_text(l, UI_NORMAL, 20, top, UI_LEFT, W - 40, C_TEXT2, c->subtitle);
    }

    // Values per axis.
    size_t npts = 0;
    for (int s = 0; s < c->nseries; s++)
        npts += (size_t)(c->series[s].n > 0 ? c->series[s].n : 0);
    double *xs = malloc((npts + 1) * sizeof *xs),
           *ys = malloc((npts + c->nhlines + 1) * sizeof *ys);
    if (!xs || !ys) {
        free(xs), free(ys);
        return vkt_fail(VKT_ERR_HOST_MEMORY, "out of host memory drawing a chart");
    }
    size_t nx = 0, ny = 0;
    for (int s = 0; s < c->nseries; s++)
        for (int i = 0; i < c->series[s].n; i++)
            if (point_ok(c, &c->series[s].pts[i])) {
                xs[nx++] = c->series[s].pts[i].x;
                ys[ny++] = c->series[s].pts[i].y;
            }
    size_t npoints = nx;
    int nlines = 0;
    for (int h = 0; h < c->nhlines; h++)
        if (usable(&c->y, c->hlines[h].y)) ys[ny++] = c->hlines[h].y, nlines++;
    lay->empty = npoints == 0 && nlines == 0;

    // Legend entries and the legend's width.
    float lw = 0, row = 19;
    for (int s = 0; s < c->nseries && lay->nlegend < CHART_MAX_LEGEND; s++) {
        chart_legend_entry *e = &lay->legend[lay->nlegend++];
        e->series = s, e->hline = -1;
        snprintf(e->text, sizeof e->text, "%s", c->series[s].label ? c->series[s].label : "");
        lw = fmaxf(lw, ui_text_width(font, UI_NORMAL, e->text));
    }
    for (int h = 0; h < c->nhlines && lay->nlegend < CHART_MAX_LEGEND; h++) {
        chart_legend_entry *e = &lay->legend[lay->nlegend++];
        e->series = -1, e->hline = h;
        snprintf(e->text, sizeof e->text, "%s", c->hlines[h].label ? c->hlines[h].label : "");
        lw = fmaxf(lw, ui_text_width(font, UI_NORMAL, e->text));
    }
    float max_text = W * 0.30f;
    if (lw > max_text) lw = max_text;
    float legend_w = lay->nlegend ? lw + 50 : 0;

    // The plot area: y ticks first (their labels' width sets the left margin).
    float y0 = top + 34, y1 = H - (c->note ? 72 : 56);
    y0 = floorf(y0), y1 = floorf(y1);
    axis_build(&lay->y, &c->y, ys, ny, y1 - 16, y0 + 12, 24);
    float yl = 0;
    for (int i = 0; i < lay->y.nticks; i++)
        if (lay->y.ticks[i].labelled)
            yl = fmaxf(yl, ui_text_width(font, UI_SMALL, lay->y.ticks[i].label));
    float x0 = floorf(20 + yl + 10), x1 = floorf(W - 20 - (legend_w ? legend_w + 16 : 0));
    if (x1 < x0 + 100) x1 = x0 + 100;
    lay->x0 = x0, lay->y0 = y0, lay->x1 = x1, lay->y1 = y1;
    float xgap = 0;
    for (size_t i = 0; i < nx; i++) { // widest label decides the spacing
        char b[32];
        fmt_value(b, sizeof b, xs[i], c->x.units, c->x.pow2);
        xgap = fmaxf(xgap, ui_text_width(font, UI_SMALL, b));
    }
    axis_build(&lay->x, &c->x, xs, nx, x0 + 16, x1 - 14, fmaxf(36, xgap + 14));
    free(xs), free(ys);

    ui_box(l, x0, y0, x1, y1, C_PLOT);
    if (lay->empty) {
        ui_text(l, UI_NORMAL, (x0 + x1) / 2, (y0 + y1) / 2, UI_CENTER, 0, C_TEXT2,
                "nothing measured to draw");
        return ui_check(l);
    }
    // Grid at the labelled ticks, tick marks and labels outside.
    for (int i = 0; i < lay->x.nticks; i++) {
        const chart_tick *t = &lay->x.ticks[i];
        float px = roundf(t->px);
        if (t->labelled) {
            ui_box(l, px - 0.5f, y0, px + 0.5f, y1, C_GRID);
            ui_text(l, UI_SMALL, px, y1 + 8 + ui_font_ascent(font, UI_SMALL), UI_CENTER, 0, C_TEXT2,
                    t->label);
        }
        ui_box(l, px - 0.5f, y1 + 1, px + 0.5f, y1 + (t->labelled ? 6 : 4), C_AXIS);
    }
    for (int i = 0; i < lay->y.nticks; i++) {
        const chart_tick *t = &lay->y.ticks[i];
        float py = roundf(t->px);
        if (t->labelled) {
            ui_box(l, x0, py - 0.5f, x1, py + 0.5f, C_GRID);
            ui_text(l, UI_SMALL, x0 - 8, py + ui_font_ascent(font, UI_SMALL) * 0.4f, UI_RIGHT, 0,
                    C_TEXT2, t->label);
        }
        ui_box(l, x0 - (t->labelled ? 6 : 4), py - 0.5f, x0 - 1, py + 0.5f, C_AXIS);
    }
    if (c->x.title)
        ui_text(l, UI_NORMAL, (x0 + x1) / 2, y1 + 26 + ui_font_ascent(font, UI_NORMAL), UI_CENTER,
                0, C_TEXT, c->x.title);
    if (c->y.title) ui_text(l, UI_NORMAL, x0, y0 - 10, UI_LEFT, x1 - x0, C_TEXT, c->y.title);
    if (c->note) ui_text(l, UI_SMALL, x0, H - 12, UI_LEFT, W - x0 - 20, C_TEXT2, c->note);

    // Reference lines, then polylines, then markers, clipped to the plot.
    ui_scissor(l, x0 + 1, y0, x1, y1 - 1);
    int *count = calloc((size_t)c->nhlines + 1, sizeof *count),
        *place = calloc((size_t)c->nhlines + 1, sizeof *place);
    if (!count || !place) {
        free(count), free(place);
        return vkt_fail(VKT_ERR_HOST_MEMORY, "out of host memory drawing a chart");
    }
    hline_groups(c, lay, count, place);
    for (int h = 0; h < c->nhlines; h++)
        if (usable(&c->y, c->hlines[h].y))
            draw_hline(l, x0 + 1, x1, chart_map(&lay->y, c->hlines[h].y), count[h], place[h],
                       c->hlines[h].color);
    for (int s = 0; s < c->nseries; s++) {
        const chart_series *se = &c->series[s];
        const chart_point *prev = NULL;
        for (int i = 0; i < se->n; i++) {
            const chart_point *p = &se->pts[i];
            if (!point_ok(c, p)) {
                prev = NULL; // a gap in the data is a gap in the line
                continue;
            }
            if (prev) {
                float ax = chart_map(&lay->x, prev->x), ay = chart_map(&lay->y, prev->y);
                float bx = chart_map(&lay->x, p->x), by = chart_map(&lay->y, p->y);
                if (prev->hollow || p->hollow)
                    dashed_segment(l, ax, ay, bx, by, 2.0f, 5, 4, 0, se->color);
                else
                    ui_line(l, ax, ay, bx, by, 2.0f, se->color);
            }
            prev = p;
        }
    }
    for (int s = 0; s < c->nseries; s++) {
        const chart_series *se = &c->series[s];
        for (int i = 0; i < se->n; i++)
            if (point_ok(c, &se->pts[i]))
                marker(l, chart_map(&lay->x, se->pts[i].x), chart_map(&lay->y, se->pts[i].y),
                       se->marker, se->pts[i].hollow, se->color);
    }
    ui_noscissor(l);

    // The axes: solid two-pixel lines on whole pixels.
    ui_box(l, x0 - 1, y0, x0 + 1, y1 + 1, C_AXIS);
    ui_box(l, x0 - 1, y1 - 1, x1, y1 + 1, C_AXIS);

    // Legend, right of the plot.
    if (lay->nlegend) {
        float lx0 = x1 + 16, lx1 = W - 20, ly = y0;
        float lh = row * lay->nlegend + 12;
        if (ly + lh > y1) lh = y1 - ly;
        ui_box(l, lx0, ly, lx1, ly + lh, C_LEGEND_EDGE);
        ui_box(l, lx0 + 1, ly + 1, lx1 - 1, ly + lh - 1, C_BG);
        for (int i = 0; i < lay->nlegend; i++) {
            chart_legend_entry *e = &lay->legend[i];
            float cy = ly + 6 + row * i + row / 2;
            if (cy + row / 2 > ly + lh) {
                lay->nlegend = i; // no room: the rest is not drawn, and not in the layout
                break;
            }
            float sx0 = lx0 + 8, sx1 = lx0 + 32;
            e->sx0 = sx0, e->sx1 = sx1, e->sy0 = cy - 1, e->sy1 = cy + 1;
            if (e->series >= 0) {
                const chart_series *se = &c->series[e->series];
                ui_line(l, sx0, cy, sx1, cy, 2.0f, se->color);
                marker(l, (sx0 + sx1) / 2, cy, se->marker, false, se->color);
            } else {
                const chart_hline *hl = &c->hlines[e->hline];
                dashed_segment(l, sx0, cy, sx1, cy, 2.0f, 7, 4, 0, hl->color);
            }
            ui_text(l, UI_NORMAL, sx1 + 8, cy + ui_font_ascent(font, UI_NORMAL) * 0.38f, UI_LEFT,
                    lx1 - sx1 - 14, C_TEXT, e->text);
        }
    }
    free(count), free(place);
    return ui_check(l);
}

// ---------------------------------------------------------------------------------------------
// Layout as JSON

static cJSON *rgb_json(uint32_t c) {
    int v[3] = {(int)(c & 0xff), (int)((c >> 8) & 0xff), (int)((c >> 16) & 0xff)};
    return cJSON_CreateIntArray(v, 3);
}

static cJSON *axis_json(const chart_axis_layout *a) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "scale", a->scale == CHART_LOG ? "log" : "linear");
    cJSON_AddNumberToObject(o, "min", a->min);
    cJSON_AddNumberToObject(o, "max", a->max);
    cJSON_AddNumberToObject(o, "p0", a->p0);
    cJSON_AddNumberToObject(o, "p1", a->p1);
    cJSON *ticks = cJSON_AddArrayToObject(o, "ticks");
    for (int i = 0; i < a->nticks; i++) {
        cJSON *t = cJSON_CreateObject();
        cJSON_AddNumberToObject(t, "value", a->ticks[i].value);
        cJSON_AddNumberToObject(t, "px", a->ticks[i].px);
        if (a->ticks[i].labelled) cJSON_AddStringToObject(t, "label", a->ticks[i].label);
        cJSON_AddItemToArray(ticks, t);
    }
    return o;
}

cJSON *chart_layout_json(const chart *c, const chart_layout *lay) {
    cJSON *o = cJSON_CreateObject();
    if (!o) return NULL;
    cJSON_AddNumberToObject(o, "width", lay->width);
    cJSON_AddNumberToObject(o, "height", lay->height);
    cJSON_AddBoolToObject(o, "empty", lay->empty);
    cJSON *plot = cJSON_AddObjectToObject(o, "plot");
    cJSON_AddNumberToObject(plot, "x0", lay->x0);
    cJSON_AddNumberToObject(plot, "y0", lay->y0);
    cJSON_AddNumberToObject(plot, "x1", lay->x1);
    cJSON_AddNumberToObject(plot, "y1", lay->y1);
    cJSON_AddItemToObject(o, "x", axis_json(&lay->x));
    cJSON_AddItemToObject(o, "y", axis_json(&lay->y));
    cJSON *series = cJSON_AddArrayToObject(o, "series");
    for (int s = 0; s < c->nseries; s++) {
        const chart_series *se = &c->series[s];
        cJSON *so = cJSON_CreateObject();
        cJSON_AddNumberToObject(so, "key", se->key);
        cJSON_AddStringToObject(so, "label", se->label ? se->label : "");
        cJSON_AddItemToObject(so, "color", rgb_json(se->color));
        cJSON_AddStringToObject(so, "marker", se->marker == CHART_SQUARE ? "square" : "dot");
        cJSON *pts = cJSON_AddArrayToObject(so, "points");
        for (int i = 0; i < se->n; i++) {
            const chart_point *p = &se->pts[i];
            if (!point_ok(c, p) || lay->empty) continue;
            cJSON *po = cJSON_CreateObject();
            cJSON_AddNumberToObject(po, "x", p->x);
            cJSON_AddNumberToObject(po, "y", p->y);
            cJSON_AddNumberToObject(po, "px", chart_map(&lay->x, p->x));
            cJSON_AddNumberToObject(po, "py", chart_map(&lay->y, p->y));
            cJSON_AddBoolToObject(po, "hollow", p->hollow);
            cJSON_AddItemToArray(pts, po);
        }
        cJSON_AddItemToArray(series, so);
    }
    cJSON *hl = cJSON_AddArrayToObject(o, "hlines");
    for (int h = 0; h < c->nhlines; h++) {
        if (!usable(&c->y, c->hlines[h].y) || lay->empty) continue;
        cJSON *ho = cJSON_CreateObject();
        cJSON_AddNumberToObject(ho, "key", c->hlines[h].key);
        cJSON_AddStringToObject(ho, "label", c->hlines[h].label ? c->hlines[h].label : "");
        cJSON_AddItemToObject(ho, "color", rgb_json(c->hlines[h].color));
        cJSON_AddNumberToObject(ho, "value", c->hlines[h].y);
        cJSON_AddNumberToObject(ho, "py", chart_map(&lay->y, c->hlines[h].y));
        cJSON_AddNumberToObject(ho, "x0", lay->x0 + 1);
        cJSON_AddNumberToObject(ho, "x1", lay->x1);
        cJSON_AddItemToArray(hl, ho);
    }
    cJSON *lg = cJSON_AddArrayToObject(o, "legend");
    for (int i = 0; i < lay->nlegend; i++) {
        const chart_legend_entry *e = &lay->legend[i];
        cJSON *eo = cJSON_CreateObject();
        uint32_t col = e->series >= 0 ? c->series[e->series].color : c->hlines[e->hline].color;
        cJSON_AddStringToObject(eo, "text", e->text);
        cJSON_AddItemToObject(eo, "color", rgb_json(col));
        cJSON_AddNumberToObject(
            eo, "key", e->series >= 0 ? c->series[e->series].key : c->hlines[e->hline].key);
        cJSON_AddStringToObject(eo, "kind", e->series >= 0 ? "series" : "hline");
        cJSON_AddNumberToObject(eo, "x0", e->sx0);
        cJSON_AddNumberToObject(eo, "y0", e->sy0);
        cJSON_AddNumberToObject(eo, "x1", e->sx1);
        cJSON_AddNumberToObject(eo, "y1", e->sy1);
        cJSON_AddItemToArray(lg, eo);
    }
    return o;
}
