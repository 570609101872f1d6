// scene.c: the viewer's picture. A title bar; a timeline with one row per device, its GPU work
// coloured by category (so pipeline bubbles and gradient reductions show), step marks, a time
// axis and a legend; per-device utilisation over time; memory per device against its limit;
// loss and accuracy; throughput. Panels are arranged by the view's panel choice. Everything is
// composed from the model into a ui_list; nothing here knows about Vulkan or windows.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scene.h"
#include "vkt_internal.h"

// ---------------------------------------------------------------------------------------------
// Theme

#define C_BG UI_HEX(0x14161b)
#define C_PANEL UI_HEX(0x1d2027)
#define C_PANEL_EDGE UI_HEX(0x2b3039)
#define C_ROW UI_HEX(0x252931)
#define C_GRID UI_HEX(0x2d323b)
#define C_AXIS UI_HEX(0x59616d)
#define C_TEXT UI_HEX(0xe8eaed)
#define C_TEXT2 UI_HEX(0xa4acb7)
#define C_TEXT3 UI_HEX(0x737b87)
#define C_ACCENT UI_HEX(0x4c9be8)
#define C_STEP UI_HEX(0x3c434e)
#define C_LOSS UI_HEX(0xe8a33d)
#define C_ACC UI_HEX(0x5fc2b8)
#define C_THR UI_HEX(0x8fb8f0)
#define C_LIVE UI_HEX(0xe05a5a)

// Category colours: distinct hues (Tableau 10), idle in neutral grey.
static const uint32_t CAT_COLOR[VKT_CAT_COUNT] = {
    UI_HEX(0x4c9be8), // forward: blue
    UI_HEX(0xf28e2b), // backward: orange
    UI_HEX(0x59a14f), // optimizer: green
    UI_HEX(0xc85db5), // communication: magenta
    UI_HEX(0x8a8f98), // wait: grey
    UI_HEX(0xedc948), // other: yellow
};
static const char *CAT_LABEL[VKT_CAT_COUNT] = {
    "forward", "backward", "optimizer", "communication", "wait / idle", "other",
};
static const uint32_t DEV_COLOR[8] = {
    UI_HEX(0x5dade2), UI_HEX(0xf5b041), UI_HEX(0xaf7ac5), UI_HEX(0x48c9b0),
    UI_HEX(0xec7063), UI_HEX(0xa9cce3), UI_HEX(0xf7dc6f), UI_HEX(0x99a3a4),
};

uint32_t vw_category_color(vkt_trace_category c) {
    return CAT_COLOR[c < VKT_CAT_COUNT ? c : VKT_CAT_OTHER];
}
uint32_t vw_background_color(void) { return C_BG; }
uint32_t vw_text_color(void) { return C_TEXT; }
static uint32_t dev_color(int i) { return DEV_COLOR[i % 8]; }

const char *vw_panel_name(vw_panel p) {
    static const char *names[VW_PANELS] = {"overview", "timeline", "devices", "training"};
    return p < VW_PANELS ? names[p] : "?";
}

// ---------------------------------------------------------------------------------------------
// Model

void vw_model_free(vw_model *m) {
    for (int i = 0; i < m->ndev; i++) {
        free(m->dev[i].ev);
        free(m->dev[i].mem);
    }
    free(m->dev);
    free(m->loss.v);
    free(m->accuracy.v);
    free(m->throughput.v);
    free(m->step_start);
    memset(m, 0, sizeof *m);
}

static int cmp_event(const void *a, const void *b) {
    const vkt_trace_event *p = a, *q = b;
    if (p->start_ns != q->start_ns) return p->start_ns < q->start_ns ? -1 : 1;
    return (p->dur_ns < q->dur_ns) - (p->dur_ns > q->dur_ns);
}

// Row d's name. vktrain names a run's devices "#<position> ..." and a trace's rows are its
// positions, so a name that starts with "#d " is kept. A trace of an older vktrain, which
// numbered devices by their index in `vktrain devices`, says "#N name": it becomes
// "#d name (device N)". A run over MPI ranks names them "rank R #k ..." (the rank's own
// position k), kept as they are; any other name (another tool's trace) gets "#d " in front.
static void row_name(int d, const char *label, char *out, size_t size) {
    if (strncmp(label, "rank ", 5) == 0 && label[5] >= '0' && label[5] <= '9') {
        snprintf(out, size, "%s", label);
        return;
    }
    if (label[0] == '#' && label[1] >= '0' && label[1] <= '9') {
        char *end;
        long n = strtol(label + 1, &end, 10);
        if (*end == ' ' || *end == 0) {
            const char *rest = *end ? end + 1 : end;
            if (n == d)
                snprintf(out, size, "%s", label);
            else
                snprintf(out, size, "#%d %s (device %ld)", d, rest, n);
            return;
        }
    }
    snprintf(out, size, "#%d%s%s", d, *label ? " " : "", label);
}

// A row's name as it fits in max_w: whole if it fits; otherwise without the parentheses of the
// device's name ("(LLVM 15.0.6, 256 bits)"), then with the device's name cut ("..."), keeping
// the "#k" in front and the "(device N)" at the end, which tell the rows apart.
static void fit_name(const ui_font *f, ui_face face, float max_w, const char *name, char *out,
                     size_t size) {
    if (ui_text_width(f, face, name) <= max_w) {
        snprintf(out, size, "%s", name);
        return;
    }
    const char *mid = name, *end = name + strlen(name);
    if (*mid == '#') {
        const char *sp = strchr(mid, ' ');
        mid = sp ? sp + 1 : end;
    }
    const char *dev = strstr(mid, " (device ");
    const char *tail = dev && end[-1] == ')' ? dev : end; // " (device N)" or ""
    // The device's name without its parentheses.
    char bare[360];
    size_t n = 0;
    int depth = 0;
    for (const char *p = mid; p < tail && n + 1 < sizeof bare; p++) {
        if (*p == '(') depth++;
        if (depth == 0) bare[n++] = *p;
        if (*p == ')' && depth > 0) depth--;
    }
    while (n > 0 && bare[n - 1] == ' ')
        n--;
    bare[n] = 0;
    int head = (int)(mid - name);
    char buf[400];
    snprintf(buf, sizeof buf, "%.*s%s%s", head, name, bare, tail);
    if (ui_text_width(f, face, buf) <= max_w) {
        snprintf(out, size, "%s", buf);
        return;
    }
    // Cut the name on a UTF-8 boundary, longest first.
    for (size_t k = n; k > 0; k--) {
        if (((unsigned char)bare[k] & 0xc0) == 0x80) continue;
        snprintf(buf, sizeof buf, "%.*s%.*s...%s", head, name, (int)k, bare, tail);
        if (ui_text_width(f, face, buf) <= max_w) {
            snprintf(out, size, "%s", buf);
            return;
        }
    }
    ui_text_shown(f, face, max_w, name, out, size);
}

// Notes a text that names device pid, as drawn, in the layout (for tests).
static void note_name(vw_layout *lay, int pid, const char *where, const char *text) {
    if (!lay || lay->nnames >= (int)(sizeof lay->names / sizeof lay->names[0])) return;
    lay->names[lay->nnames].pid = pid;
    lay->names[lay->nnames].where = where;
    snprintf(lay->names[lay->nnames].text, sizeof lay->names[lay->nnames].text, "%s", text);
    lay->nnames++;
}

static bool series(const vkt_trace *t, int pid, const char *name, vw_series *s) {
    size_t total = 0;
    vkt_trace_counter probe;
    vkt_trace_counter_series(t, pid, name, &probe, 0, &total);
    s->n = 0;
    s->v = malloc((total ? total : 1) * sizeof *s->v);
    if (!s->v) return false;
    s->n = vkt_trace_counter_series(t, pid, name, s->v, total, NULL);
    return true;
}

vkt_status vw_model_build(vw_model *m, const vkt_trace *t) {
    vw_model_free(m);
    m->ndev = vkt_trace_device_count(t);
    m->dev = calloc((size_t)(m->ndev ? m->ndev : 1), sizeof *m->dev);
    size_t n = vkt_trace_event_count(t);
    vkt_trace_event *all = malloc((n ? n : 1) * sizeof *all);
    if (!m->dev || !all) goto oom;
    n = vkt_trace_get_events(t, 0, all, n);
    m->nevents = n;
    vkt_trace_get_strategy(t, m->strategy, sizeof m->strategy);
    int maxstep = -1;
    for (int d = 0; d < m->ndev; d++) {
        vw_dev *dv = &m->dev[d];
        vkt_trace_get_device(t, d, &dv->info);
        row_name(d, dv->info.label, dv->name, sizeof dv->name);
        dv->summary_from_trainer = vkt_trace_get_summary(t, d, &dv->summary);
        size_t k = 0;
        for (size_t i = 0; i < n; i++)
            k += all[i].pid == d;
        dv->ev = malloc((k ? k : 1) * sizeof *dv->ev);
        if (!dv->ev) goto oom;
        for (size_t i = 0; i < n; i++)
            if (all[i].pid == d) {
                dv->ev[dv->nev++] = all[i];
                if (all[i].dur_ns > dv->max_dur) dv->max_dur = all[i].dur_ns;
                dv->used_cat[all[i].cat] = true;
                if (all[i].step > maxstep) maxstep = all[i].step;
            }
        qsort(dv->ev, dv->nev, sizeof *dv->ev, cmp_event);
        vw_series mem;
        if (!series(t, d, "memory_bytes", &mem)) goto oom;
        dv->mem = mem.v;
        dv->nmem = mem.n;
    }
    if (!series(t, VKT_TRACE_HOST, "loss", &m->loss) ||
        !series(t, VKT_TRACE_HOST, "accuracy", &m->accuracy) ||
        !series(t, VKT_TRACE_HOST, "samples_per_sec", &m->throughput))
        goto oom;
    m->nsteps = maxstep + 1;
    if (m->nsteps > 0) {
        m->step_start = malloc((size_t)m->nsteps * sizeof *m->step_start);
        if (!m->step_start) goto oom;
        for (int s = 0; s < m->nsteps; s++)
            m->step_start[s] = INT64_MAX;
        for (size_t i = 0; i < n; i++)
            if (all[i].step >= 0 && all[i].start_ns < m->step_start[all[i].step])
                m->step_start[all[i].step] = all[i].start_ns;
    }
    free(all);
    m->empty = !vkt_trace_time_range(t, &m->t0, &m->t1);
    if (m->empty) m->t0 = m->t1 = 0;
    return VKT_OK;
oom:
    free(all);
    vw_model_free(m);
    return vkt_fail(VKT_ERR_HOST_MEMORY, "out of host memory building the viewer's model");
}

void vw_window(const vw_model *m, const vw_view *v, int64_t *v0, int64_t *v1) {
    int64_t span = m->t1 - m->t0;
    if (span < 1000) span = 1000;
    if (v->zoomed && v->v1 > v->v0) {
        *v0 = v->v0;
        *v1 = v->v1;
    } else {
        *v0 = 0;
        *v1 = span;
    }
}

// ---------------------------------------------------------------------------------------------
// Formatting

static void fmt_bytes(double b, char *buf, size_t n) {
    const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int i = 0;
    while (fabs(b) >= 1024 && i < 4)
        b /= 1024, i++;
    snprintf(buf, n,
             i == 0          ? "%.0f %s"
             : fabs(b) < 10  ? "%.2f %s"
             : fabs(b) < 100 ? "%.1f %s"
                             : "%.0f %s",
             b, u[i]);
}

static void fmt_si(double v, char *buf, size_t n) {
    const char *u[] = {"", "k", "M", "G"};
    int i = 0;
    while (fabs(v) >= 1000 && i < 3)
        v /= 1000, i++;
    snprintf(buf, n,
             fabs(v) < 10 && i    ? "%.2f%s"
             : fabs(v) < 100 && i ? "%.1f%s"
                                  : "%.0f%s",
             v, u[i]);
}

static void fmt_duration(double ns, char *buf, size_t n) {
    if (ns < 1e3)
        snprintf(buf, n, "%.0f ns", ns);
    else if (ns < 1e6)
        snprintf(buf, n, "%.1f \xc2\xb5s", ns / 1e3);
    else if (ns < 1e9)
        snprintf(buf, n, "%.1f ms", ns / 1e6);
    else
        snprintf(buf, n, "%.2f s", ns / 1e9);
}

// A tick step of 1, 2 or 5 times a power of ten giving about `want` ticks over range.
static double nice_step(double range, double want) {
    if (!(range > 0) || want < 1) return 1;
    double raw = range / want, p = pow(10, floor(log10(raw))), f = raw / p;
    return (f < 1.5 ? 1 : f < 3.5 ? 2 : f < 7.5 ? 5 : 10) * p;
}

// Time unit for a span of ns: divisor and name.
static void time_unit(double span_ns, double *div, const char **name) {
    if (span_ns < 2e3)
        *div = 1, *name = "ns";
    else if (span_ns < 2e6)
        *div = 1e3, *name = "\xc2\xb5s";
    else if (span_ns < 2e10)
        *div = 1e6, *name = "ms";
    else
        *div = 1e9, *name = "s";
}

static int decimals_for(double step) {
    int d = 0;
    while (d < 6 && fabs(step * pow(10, d) - round(step * pow(10, d))) > 1e-6)
        d++;
    return d;
}

// Strips the category prefix: "fwd:dense0:matmul" -> "dense0:matmul".
static const char *short_name(const char *name) {
    const char *c = strchr(name, ':');
    return c && vkt_trace_category_of(name) != VKT_CAT_OTHER ? c + 1 : name;
}

// ---------------------------------------------------------------------------------------------
// Frames, axes, legends

typedef struct box {
    float x0, y0, x1, y1;
} box;

typedef struct plot {
    box area;
    double xmin, xmax, ymin, ymax;
} plot;

static float plot_x(const plot *p, double x) {
    return p->area.x0 + (float)((x - p->xmin) / (p->xmax - p->xmin)) * (p->area.x1 - p->area.x0);
}
static float plot_y(const plot *p, double y) {
    return p->area.y1 - (float)((y - p->ymin) / (p->ymax - p->ymin)) * (p->area.y1 - p->area.y0);
}

// Legend entries right-aligned on a header line ending at x1; returns where it starts.
typedef struct legend_item {
    uint32_t color;
    char text[96];
} legend_item;

static float legend(ui_list *l, float x1, float y, const legend_item *items, int n, bool line);
static float legend_width(const ui_list *l, const legend_item *items, int n, bool line) {
    float w = 0;
    for (int i = 0; i < n; i++)
        w += ui_text_width(l->font, UI_SMALL, items[i].text) + 6 + (line ? 14 : 10) + 14;
    return w;
}

// A panel: background, title, legend (right), subtitle (between them, cut to fit); returns the
// area below the header. With where, the legend's entries name devices 0, 1, ...: they are noted
// in lay as drawn.
static box panel(ui_list *l, box b, const char *title, const char *subtitle,
                 const legend_item *items, int nitems, bool line_legend, vw_layout *lay,
                 const char *where) {
    ui_rounded(l, b.x0, b.y0, b.x1, b.y1, 6, C_PANEL_EDGE);
    ui_rounded(l, b.x0 + 1, b.y0 + 1, b.x1 - 1, b.y1 - 1, 5, C_PANEL);
    float w = ui_text(l, UI_BOLD, b.x0 + 14, b.y0 + 22, UI_LEFT, 0, C_TEXT, title);
    float sx = b.x0 + 14 + w + 10;
    // A legend too long for the header keeps only each entry's first word ("#0").
    legend_item short_items[16];
    if (nitems && nitems <= 16 && legend_width(l, items, nitems, line_legend) > b.x1 - 14 - sx) {
        for (int i = 0; i < nitems; i++) {
            short_items[i] = items[i];
            char *sp = strchr(short_items[i].text, ' ');
            if (sp) *sp = 0;
        }
        items = short_items;
    }
    for (int i = 0; where && i < nitems; i++)
        note_name(lay, i, where, items[i].text);
    float lx = nitems ? legend(l, b.x1 - 14, b.y0 + 22, items, nitems, line_legend) : b.x1 - 14;
    if (subtitle && *subtitle && ui_text_width(l->font, UI_SMALL, subtitle) <= lx - 12 - sx)
        ui_text(l, UI_SMALL, sx, b.y0 + 22, UI_LEFT, 0, C_TEXT3, subtitle);
    return (box){b.x0 + 14, b.y0 + 34, b.x1 - 14, b.y1 - 10};
}

static float legend(ui_list *l, float x1, float y, const legend_item *items, int n, bool line) {
    float x = x1;
    for (int i = n - 1; i >= 0; i--) {
        float w = ui_text_width(l->font, UI_SMALL, items[i].text);
        x -= w;
        ui_text(l, UI_SMALL, x, y, UI_LEFT, 0, C_TEXT2, items[i].text);
        x -= 6;
        if (line)
            ui_line(l, x - 14, y - 4, x, y - 4, 3, items[i].color);
        else
            ui_rounded(l, x - 10, y - 9, x, y + 1, 2, items[i].color);
        x -= (line ? 14 : 10) + 14;
    }
    return x;
}

typedef void (*fmt_fn)(double v, double step, char *buf, size_t n);

static void fmt_plain(double v, double step, char *buf, size_t n) {
    snprintf(buf, n, "%.*f", decimals_for(step), v);
}
static void fmt_percent(double v, double step, char *buf, size_t n) {
    snprintf(buf, n, "%.0f%%", v * 100);
}
// Byte ticks share the unit their step is written in ("0.5 GiB", "1.0 GiB"; "20 MiB", "40 MiB").
static void fmt_bytes_tick(double v, double step, char *buf, size_t n) {
    const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int k = 0;
    double unit = 1;
    while (k < 4 && unit * 1024 <= step * 8)
        unit *= 1024, k++;
    if (v == 0)
        snprintf(buf, n, "0");
    else
        snprintf(buf, n, "%.*f %s", decimals_for(step / unit), v / unit, u[k]);
}
static void fmt_si_tick(double v, double step, char *buf, size_t n) {
    const char *u[] = {"", "k", "M", "G"};
    int i = 0;
    if (v == 0) {
        snprintf(buf, n, "0");
        return;
    }
    double top = fabs(v) > step ? fabs(v) : step;
    while (top >= 1000 && i < 3)
        top /= 1000, v /= 1000, step /= 1000, i++;
    snprintf(buf, n, "%.*f%s", decimals_for(step), v, u[i]);
}

// Horizontal grid and left (or right) y labels.
static void y_axis(ui_list *l, const plot *p, double step, fmt_fn fmt, bool right, uint32_t color) {
    if (!(step > 0)) return;
    for (double y = ceil(p->ymin / step - 1e-9) * step; y <= p->ymax + step * 1e-6; y += step) {
        if (fabs(y) < step * 1e-6) y = 0; // no "-0"
        float py = plot_y(p, y);
        if (!right) ui_box(l, p->area.x0, py - 0.5f, p->area.x1, py + 0.5f, C_GRID);
        char buf[32];
        fmt(y, step, buf, sizeof buf);
        if (right)
            ui_text(l, UI_SMALL, p->area.x1 + 6, py + 4, UI_LEFT, 0, color, buf);
        else
            ui_text(l, UI_SMALL, p->area.x0 - 6, py + 4, UI_RIGHT, 0, color, buf);
    }
}

// Time axis along the bottom of area for the window [v0, v1] (ns from the trace start), with
// tick labels and an axis title with the unit.
static void time_axis(ui_list *l, box a, int64_t v0, int64_t v1, bool grid, float grid_top) {
    double span = (double)(v1 - v0), div;
    const char *unit;
    time_unit(span, &div, &unit);
    double step = nice_step(span / div, (a.x1 - a.x0) / 110.0);
    int dec = decimals_for(step);
    ui_box(l, a.x0, a.y1 - 0.5f, a.x1, a.y1 + 0.5f, C_AXIS);
    for (double t = ceil(v0 / div / step - 1e-9) * step; t * div <= v1 + 1e-6 * span; t += step) {
        if (fabs(t) < step * 1e-6) t = 0; // no "-0"
        float x = a.x0 + (float)((t * div - v0) / span) * (a.x1 - a.x0);
        if (grid) ui_box(l, x - 0.5f, grid_top, x + 0.5f, a.y1, ui_alpha(C_GRID, 0.8f));
        ui_box(l, x - 0.5f, a.y1, x + 0.5f, a.y1 + 4, C_AXIS);
        char buf[32];
        snprintf(buf, sizeof buf, "%.*f", dec, t);
        ui_text(l, UI_SMALL, x, a.y1 + 16, UI_CENTER, 0, C_TEXT2, buf);
    }
    char title[64];
    snprintf(title, sizeof title, "time since start (%s)", unit);
    ui_text(l, UI_SMALL, a.x1, a.y1 + 30, UI_RIGHT, 0, C_TEXT3, title);
}

static void no_data(ui_list *l, box a, const char *what) {
    ui_text(l, UI_NORMAL, (a.x0 + a.x1) / 2, (a.y0 + a.y1) / 2, UI_CENTER, a.x1 - a.x0, C_TEXT3,
            what);
}

// A counter series as a polyline (step = hold each value until the next sample), clipped to
// the plot by scissor.
static void draw_series(ui_list *l, const plot *p, const vkt_trace_counter *v, size_t n, int64_t t0,
                        double scale, bool step, uint32_t color, bool fill, bool dots) {
    if (n == 0) return;
    ui_scissor(l, p->area.x0, p->area.y0 - 2, p->area.x1 + 1, p->area.y1 + 1);
    float px = 0, py = 0, base = plot_y(p, p->ymin > 0 ? p->ymin : 0);
    size_t drawn = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(v[i].value)) continue;
        float x = plot_x(p, (double)(v[i].t_ns - t0)), y = plot_y(p, v[i].value * scale);
        if (drawn) {
            if (fill) {
                float top = step ? py : (py + y) / 2;
                ui_box(l, px, top, x, base, ui_alpha(color, 0.16f));
            }
            if (step) {
                ui_line(l, px, py, x, py, 2, color);
                ui_line(l, x, py, x, y, 2, color);
            } else {
                ui_line(l, px, py, x, y, 2, color);
            }
        }
        px = x, py = y;
        drawn++;
    }
    if (dots && drawn <= 60)
        for (size_t i = 0; i < n; i++) {
            if (!isfinite(v[i].value)) continue;
            float x = plot_x(p, (double)(v[i].t_ns - t0)), y = plot_y(p, v[i].value * scale);
            ui_rounded(l, x - 3, y - 3, x + 3, y + 3, 3, color);
        }
    ui_noscissor(l);
}

static double series_max(const vkt_trace_counter *v, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++)
        if (isfinite(v[i].value) && v[i].value > m) m = v[i].value;
    return m;
}

static double last_value(const vw_series *s) {
    for (size_t i = s->n; i > 0; i--)
        if (isfinite(s->v[i - 1].value)) return s->v[i - 1].value;
    return NAN;
}

// ---------------------------------------------------------------------------------------------
// Timeline

// First event of dv that may end after v0 (events are sorted by start; none lasts more than
// max_dur).
static size_t first_visible(const vw_dev *dv, int64_t v0_abs) {
    int64_t key = v0_abs - dv->max_dur;
    size_t lo = 0, hi = dv->nev;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (dv->ev[mid].start_ns < key)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static void timeline(ui_list *l, box b, const vw_model *m, const vw_view *v, vw_layout *lay) {
    int64_t v0, v1;
    vw_window(m, v, &v0, &v1);
    char sub[160], d0[32], d1[32];
    fmt_duration((double)(v1 - v0), d0, sizeof d0);
    fmt_duration((double)(m->t1 - m->t0), d1, sizeof d1);
    if (v->zoomed)
        snprintf(sub, sizeof sub, "GPU work per device  \xc2\xb7  window %s of %s", d0, d1);
    else
        snprintf(sub, sizeof sub, "GPU work per device on the host clock  \xc2\xb7  %s", d1);
    legend_item items[VKT_CAT_COUNT];
    int nitems = 0;
    bool any_other = false;
    for (int d = 0; d < m->ndev; d++)
        any_other |= m->dev[d].used_cat[VKT_CAT_OTHER];
    for (int c = 0; c < VKT_CAT_COUNT; c++) {
        if (c == VKT_CAT_OTHER && !any_other) continue;
        items[nitems].color = CAT_COLOR[c];
        snprintf(items[nitems].text, sizeof items[nitems].text, "%s", CAT_LABEL[c]);
        nitems++;
    }
    box a = panel(l, b, "Timeline", sub, items, nitems, false, NULL, NULL);
    if (m->ndev == 0 || m->nevents == 0) {
        no_data(l, a,
                v->live ? "waiting for the trainer's first step..."
                        : "no device events in this trace");
        return;
    }
    float gutter = (a.x1 - a.x0) * 0.16f;
    if (gutter < 120) gutter = 120;
    if (gutter > 210) gutter = 210;
    box plotb = {a.x0 + gutter, a.y0 + 18, a.x1 - 4, a.y1 - 34};
    float avail = plotb.y1 - plotb.y0, gap = 6;
    float rh = (avail - gap * (m->ndev - 1)) / m->ndev;
    if (rh > 80) rh = 80;
    if (rh < 8) rh = 8, gap = 2;
    plotb.y1 = plotb.y0 + rh * m->ndev + gap * (m->ndev - 1);
    double span = (double)(v1 - v0), pxw = plotb.x1 - plotb.x0;
#define TX(t) (plotb.x0 + (float)(((double)((t)-m->t0) - (double)v0) / span * pxw))
    if (lay) {
        lay->has_timeline = true;
        lay->tl_x0 = plotb.x0, lay->tl_x1 = plotb.x1, lay->tl_y0 = plotb.y0, lay->tl_y1 = plotb.y1;
        lay->tl_v0 = v0, lay->tl_v1 = v1;
        lay->nrows = 0;
    }
    // Step marks: a line at each step's first event and its number, where there is room.
    time_axis(l, (box){plotb.x0, plotb.y0, plotb.x1, plotb.y1 + 6}, v0, v1, true, plotb.y0);
    // Marks closer than 6 px are skipped (500 steps in 1000 px would be a grey smear), and a
    // label is written only where the previous one has ended.
    float last_label = -1e9f, last_mark = -1e9f;
    for (int s = 0; s < m->nsteps; s++) {
        if (m->step_start[s] == INT64_MAX) continue;
        float x = TX(m->step_start[s]);
        if (x < plotb.x0 - 0.5f || x > plotb.x1 || fabsf(x - last_mark) < 6) continue;
        last_mark = x;
        ui_box(l, x - 0.5f, plotb.y0 - 14, x + 0.5f, plotb.y1, C_STEP);
        char buf[32];
        snprintf(buf, sizeof buf, "step %d", s);
        float w = ui_text_width(l->font, UI_SMALL, buf);
        if (x + 4 > last_label + 10 && x + 4 + w < plotb.x1) {
            ui_text(l, UI_SMALL, x + 4, plotb.y0 - 4, UI_LEFT, 0, C_TEXT3, buf);
            last_label = x + 4 + w;
        }
    }
    int ncols = (int)pxw + 1;
    float(*cov)[VKT_CAT_COUNT] = calloc((size_t)ncols, sizeof *cov);
    if (!cov) {
        l->oom = true;
        return;
    }
    for (int d = 0; d < m->ndev; d++) {
        const vw_dev *dv = &m->dev[d];
        float y0 = plotb.y0 + d * (rh + gap), y1 = y0 + rh;
        if (lay && lay->nrows < 64) {
            lay->rows[lay->nrows].pid = d;
            lay->rows[lay->nrows].y0 = y0, lay->rows[lay->nrows].y1 = y1;
            lay->nrows++;
        }
        ui_rounded(l, plotb.x0, y0, plotb.x1, y1, 3, ui_alpha(C_ROW, 0.85f));
        // Device label: name, then what it did.
        ui_box(l, a.x0, y0 + 3, a.x0 + 3, y1 - 3, dev_color(d));
        float ty = rh >= 30 ? y0 + rh / 2 - 2 : y0 + rh / 2 + 5;
        char shown[sizeof dv->name];
        fit_name(l->font, UI_BOLD, gutter - 18, dv->name, shown, sizeof shown);
        ui_text(l, UI_BOLD, a.x0 + 10, ty, UI_LEFT, gutter - 18, C_TEXT, shown);
        note_name(lay, d, "timeline", shown);
        if (rh >= 30) {
            char mem[32], info[96];
            fmt_bytes((double)dv->summary.peak_memory_bytes, mem, sizeof mem);
            snprintf(info, sizeof info, "busy %.0f%%  \xc2\xb7  peak %s",
                     dv->summary.busy_fraction * 100, mem);
            ui_text(l, UI_SMALL, a.x0 + 10, ty + 15, UI_LEFT, gutter - 18, C_TEXT2, info);
        }
        // Events: wide ones as boxes (with their name when it fits), narrow ones summed per
        // pixel column and drawn in the column's dominant category.
        ui_scissor(l, plotb.x0, y0, plotb.x1, y1);
        memset(cov, 0, (size_t)ncols * sizeof *cov);
        int64_t a0 = m->t0 + v0, a1 = m->t0 + v1;
        float ey0 = y0 + 3, ey1 = y1 - 3;
        for (size_t i = first_visible(dv, a0); i < dv->nev && dv->ev[i].start_ns < a1; i++) {
            const vkt_trace_event *e = &dv->ev[i];
            if (e->start_ns + e->dur_ns < a0) continue;
            float x0 = TX(e->start_ns), x1 = TX(e->start_ns + e->dur_ns);
            if (x1 - x0 >= 1.0f) {
                float xr = x1 - x0 > 4 ? x1 - 1 : x1; // a hairline between neighbours
                ui_box(l, x0, ey0, xr, ey1, CAT_COLOR[e->cat]);
                // The name, when it fits whole or with at least a few letters before the dots.
                if (xr - x0 > 30 && rh >= 16) {
                    float cx0 = x0 < plotb.x0 ? plotb.x0 : x0, cx1 = xr > plotb.x1 ? plotb.x1 : xr;
                    const char *name = short_name(e->name);
                    float room = cx1 - cx0 - 8, need = ui_text_width(l->font, UI_SMALL, name);
                    if (need <= room || room >= 52)
                        ui_text(l, UI_SMALL, cx0 + 4, (ey0 + ey1) / 2 + 4, UI_LEFT, room,
                                UI_HEX(0x101216), name);
                }
            } else {
                int c = (int)(x0 - plotb.x0);
                if (c >= 0 && c < ncols) cov[c][e->cat] += x1 - x0 > 0.05f ? x1 - x0 : 0.05f;
            }
        }
        for (int c = 0; c < ncols; c++) {
            float total = 0, best = 0;
            int cat = 0;
            for (int k = 0; k < VKT_CAT_COUNT; k++) {
                total += cov[c][k];
                if (cov[c][k] > best) best = cov[c][k], cat = k;
            }
            if (total <= 0) continue;
            float x = plotb.x0 + c;
            ui_box(l, x, ey0, x + 1, ey1,
                   ui_alpha(CAT_COLOR[cat], total > 1      ? 1
                                            : total < 0.4f ? 0.4f
                                                           : total));
        }
        ui_noscissor(l);
    }
    free(cov);
#undef TX
}

// ---------------------------------------------------------------------------------------------
// Utilisation and memory

// Busy fraction of dv in nb buckets of [a0, a1) (absolute ns): the union of its non-wait events.
static void utilisation(const vw_dev *dv, int64_t a0, int64_t a1, int nb, float *out) {
    double width = (double)(a1 - a0) / nb;
    double *acc = calloc((size_t)nb, sizeof *acc);
    if (!acc) return;
    int64_t cur_a = 0, cur_b = INT64_MIN; // the union interval being extended
    for (size_t i = first_visible(dv, a0);; i++) {
        bool done = i >= dv->nev || dv->ev[i].start_ns >= a1;
        const vkt_trace_event *e = done ? NULL : &dv->ev[i];
        if (e && e->cat == VKT_CAT_WAIT) continue;
        if (e && e->start_ns <= cur_b) {
            if (e->start_ns + e->dur_ns > cur_b) cur_b = e->start_ns + e->dur_ns;
            continue;
        }
        if (cur_b > cur_a) { // flush the finished interval into the buckets
            double a = (double)((cur_a > a0 ? cur_a : a0) - a0),
                   bb = (double)((cur_b < a1 ? cur_b : a1) - a0);
            for (int k = (int)(a / width); k < nb && k * width < bb; k++) {
                double lo = k * width, hi = lo + width;
                double o = (bb < hi ? bb : hi) - (a > lo ? a : lo);
                if (o > 0) acc[k] += o;
            }
        }
        if (done) break;
        cur_a = e->start_ns, cur_b = e->start_ns + e->dur_ns;
    }
    for (int k = 0; k < nb; k++)
        out[k] = (float)(acc[k] / width > 1 ? 1 : acc[k] / width);
    free(acc);
}

static void utilisation_panel(ui_list *l, box b, const vw_model *m, const vw_view *v,
                              vw_layout *lay) {
    int64_t v0, v1;
    vw_window(m, v, &v0, &v1);
    legend_item items[8];
    int n = m->ndev < 8 ? m->ndev : 8;
    for (int d = 0; d < n; d++) {
        items[d].color = dev_color(d);
        snprintf(items[d].text, sizeof items[d].text, "#%d %.0f%% busy", d,
                 m->dev[d].summary.busy_fraction * 100);
    }
    box a = panel(l, b, "Utilisation", "busy share of each time bucket", items, m->nevents ? n : 0,
                  true, lay, "utilisation");
    if (m->ndev == 0 || m->nevents == 0) {
        no_data(l, a, "no device events");
        return;
    }
    plot p = {{a.x0 + 40, a.y0 + 6, a.x1 - 4, a.y1 - 34}, (double)v0, (double)v1, 0, 1};
    y_axis(l, &p, 0.25, fmt_percent, false, C_TEXT2);
    time_axis(l, p.area, v0, v1, false, 0);
    int nb = (int)((p.area.x1 - p.area.x0) / 10);
    if (nb < 4) nb = 4;
    if (nb > 400) nb = 400;
    float u[400];
    ui_scissor(l, p.area.x0, p.area.y0 - 2, p.area.x1 + 1, p.area.y1 + 1);
    for (int d = 0; d < m->ndev; d++) {
        utilisation(&m->dev[d], m->t0 + v0, m->t0 + v1, nb, u);
        float bw = (p.area.x1 - p.area.x0) / nb, base = plot_y(&p, 0);
        for (int k = 0; k < nb; k++) {
            float x0 = p.area.x0 + k * bw, x1 = x0 + bw, y = plot_y(&p, u[k]);
            ui_box(l, x0, y, x1, base, ui_alpha(dev_color(d), 0.12f));
            ui_line(l, x0, y, x1, y, 2, dev_color(d));
            if (k + 1 < nb) ui_line(l, x1, y, x1, plot_y(&p, u[k + 1]), 2, dev_color(d));
        }
    }
    ui_noscissor(l);
}

static void memory_panel(ui_list *l, box b, const vw_model *m, const vw_view *v, vw_layout *lay) {
    int64_t v0, v1;
    vw_window(m, v, &v0, &v1);
    double peak = 0, limit_max = 0;
    size_t samples = 0;
    for (int d = 0; d < m->ndev; d++) {
        double p = series_max(m->dev[d].mem, m->dev[d].nmem);
        if (p > peak) peak = p;
        if ((double)m->dev[d].info.memory_limit > limit_max)
            limit_max = (double)m->dev[d].info.memory_limit;
        samples += m->dev[d].nmem;
    }
    // Limits far above the peak would flatten the curves: then they are named, not drawn.
    bool limits_on_scale = limit_max > 0 && peak >= 0.25 * limit_max;
    char sub[128], lim[32];
    fmt_bytes(limit_max, lim, sizeof lim);
    if (limit_max > 0 && !limits_on_scale)
        snprintf(sub, sizeof sub, "limit %s, off the scale", lim);
    else
        snprintf(sub, sizeof sub, "held per device, against its limit");
    legend_item items[8];
    int n = m->ndev < 8 ? m->ndev : 8;
    for (int d = 0; d < n; d++) {
        char pk[32];
        fmt_bytes(series_max(m->dev[d].mem, m->dev[d].nmem), pk, sizeof pk);
        items[d].color = dev_color(d);
        snprintf(items[d].text, sizeof items[d].text, "#%d peak %s", d, pk);
    }
    box a = panel(l, b, "Memory", sub, items, samples ? n : 0, true, lay, "memory");
    if (samples == 0) {
        no_data(l, a, "no memory samples in this trace");
        return;
    }
    double top = limits_on_scale ? (limit_max > peak ? limit_max : peak) * 1.08 : peak * 1.25;
    if (!(top > 0)) top = 1;
    plot p = {{a.x0 + 62, a.y0 + 6, a.x1 - 4, a.y1 - 34}, (double)v0, (double)v1, 0, top};
    double unit = 1;
    while (top / unit >= 1024)
        unit *= 1024;
    double step = nice_step(top / unit, (p.area.y1 - p.area.y0) / 34.0) * unit;
    y_axis(l, &p, step, fmt_bytes_tick, false, C_TEXT2);
    time_axis(l, p.area, v0, v1, false, 0);
    // One dashed line per distinct limit, naming the devices that share it.
    for (int d = 0; d < m->ndev && limits_on_scale; d++) {
        uint64_t lim_d = m->dev[d].info.memory_limit;
        bool seen = lim_d == 0;
        for (int e = 0; e < d && !seen; e++)
            seen = m->dev[e].info.memory_limit == lim_d;
        if (seen) continue;
        char who[128] = "", bytes[32];
        size_t len = 0;
        int count = 0;
        for (int e = d; e < m->ndev; e++)
            if (m->dev[e].info.memory_limit == lim_d && len + 8 < sizeof who)
                len +=
                    (size_t)snprintf(who + len, sizeof who - len, "%s#%d", count++ ? " " : "", e);
        fmt_bytes((double)lim_d, bytes, sizeof bytes);
        float y = plot_y(&p, (double)lim_d);
        uint32_t col = count == 1 ? dev_color(d) : C_TEXT2;
        ui_dashed(l, p.area.x0, y, p.area.x1, y, 1.5f, 6, ui_alpha(col, 0.8f));
        char text[160];
        snprintf(text, sizeof text, "limit %s (%s)", bytes, who);
        ui_text(l, UI_SMALL, p.area.x1 - 4, y + 13, UI_RIGHT, 0, col, text);
        note_name(lay, d, "memory limit", text);
    }
    for (int d = 0; d < m->ndev; d++) {
        const vw_dev *dv = &m->dev[d];
        draw_series(l, &p, dv->mem, dv->nmem, m->t0, 1.0, true, dev_color(d), true, false);
        // The last sample holds until the end of the trace.
        if (dv->nmem && isfinite(dv->mem[dv->nmem - 1].value)) {
            float x0 = plot_x(&p, (double)(dv->mem[dv->nmem - 1].t_ns - m->t0)),
                  x1 = plot_x(&p, (double)(m->t1 - m->t0));
            float y = plot_y(&p, dv->mem[dv->nmem - 1].value);
            ui_scissor(l, p.area.x0, p.area.y0 - 2, p.area.x1 + 1, p.area.y1 + 1);
            ui_box(l, x0, y, x1, plot_y(&p, 0), ui_alpha(dev_color(d), 0.16f));
            ui_line(l, x0, y, x1, y, 2, dev_color(d));
            ui_noscissor(l);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Training curves

static void training_panel(ui_list *l, box b, const vw_model *m) {
    char sub[128] = "";
    double last_loss = m->loss.n ? last_value(&m->loss) : NAN;
    double last_acc = m->accuracy.n ? last_value(&m->accuracy) : NAN;
    if (isfinite(last_loss) && isfinite(last_acc))
        snprintf(sub, sizeof sub, "last %.4g  \xc2\xb7  %.1f%%", last_loss, last_acc * 100);
    else if (isfinite(last_loss))
        snprintf(sub, sizeof sub, "last %.4g", last_loss);
    else if (isfinite(last_acc))
        snprintf(sub, sizeof sub, "last %.1f%%", last_acc * 100);
    legend_item items[2] = {{C_LOSS, "loss (left)"}, {C_ACC, "accuracy (right)"}};
    bool any = m->loss.n || m->accuracy.n;
    box a = panel(l, b, "Loss & accuracy", sub, items, any ? 2 : 0, true, NULL, NULL);
    if (!any) {
        no_data(l, a, "no loss or accuracy samples in this trace");
        return;
    }
    double span = (double)(m->t1 - m->t0);
    if (span < 1000) span = 1000;
    double lmax = series_max(m->loss.v, m->loss.n);
    if (!(lmax > 0)) lmax = 1;
    double lstep = nice_step(lmax, 4);
    double ltop = ceil(lmax * 1.05 / lstep) * lstep;
    plot p = {{a.x0 + 44, a.y0 + 6, a.x1 - 42, a.y1 - 34}, 0, span, 0, ltop};
    y_axis(l, &p, lstep, fmt_plain, false, C_LOSS);
    plot pa = p;
    pa.ymin = 0, pa.ymax = 1;
    y_axis(l, &pa, 0.25, fmt_percent, true, C_ACC);
    time_axis(l, p.area, 0, (int64_t)span, false, 0);
    draw_series(l, &p, m->loss.v, m->loss.n, m->t0, 1.0, false, C_LOSS, false, true);
    draw_series(l, &pa, m->accuracy.v, m->accuracy.n, m->t0, 1.0, false, C_ACC, false, true);
}

static void throughput_panel(ui_list *l, box b, const vw_model *m) {
    char sub[96] = "", buf[32];
    if (m->throughput.n) {
        double sum = 0;
        size_t k = 0;
        for (size_t i = 0; i < m->throughput.n; i++)
            if (isfinite(m->throughput.v[i].value)) sum += m->throughput.v[i].value, k++;
        fmt_si(k ? sum / k : 0, buf, sizeof buf);
        snprintf(sub, sizeof sub, "mean %s samples/s", buf);
    }
    legend_item items[1] = {{C_THR, "samples/s"}};
    box a = panel(l, b, "Throughput", sub, items, m->throughput.n ? 1 : 0, true, NULL, NULL);
    if (m->throughput.n == 0) {
        no_data(l, a, "no throughput samples in this trace");
        return;
    }
    double span = (double)(m->t1 - m->t0);
    if (span < 1000) span = 1000;
    double top = series_max(m->throughput.v, m->throughput.n);
    if (!(top > 0)) top = 1;
    double step = nice_step(top, 4);
    plot p = {
        {a.x0 + 44, a.y0 + 6, a.x1 - 4, a.y1 - 34}, 0, span, 0, ceil(top * 1.05 / step) * step};
    y_axis(l, &p, step, fmt_si_tick, false, C_TEXT2);
    time_axis(l, p.area, 0, (int64_t)span, false, 0);
    draw_series(l, &p, m->throughput.v, m->throughput.n, m->t0, 1.0, false, C_THR, true, true);
}

// ---------------------------------------------------------------------------------------------
// Where the time went

// Time of each category in [a0, a1), and the time with no event at all (a bubble).
static void time_by_category(const vw_dev *dv, int64_t a0, int64_t a1,
                             double out[VKT_CAT_COUNT + 1]) {
    for (int c = 0; c <= VKT_CAT_COUNT; c++)
        out[c] = 0;
    int64_t covered = 0, cur_a = 0, cur_b = INT64_MIN;
    for (size_t i = first_visible(dv, a0); i < dv->nev && dv->ev[i].start_ns < a1; i++) {
        const vkt_trace_event *e = &dv->ev[i];
        int64_t s0 = e->start_ns > a0 ? e->start_ns : a0,
                s1 = e->start_ns + e->dur_ns < a1 ? e->start_ns + e->dur_ns : a1;
        if (s1 <= s0) continue;
        out[e->cat] += (double)(s1 - s0);
        if (s0 > cur_b) {
            if (cur_b > cur_a) covered += cur_b - cur_a;
            cur_a = s0, cur_b = s1;
        } else if (s1 > cur_b) {
            cur_b = s1;
        }
    }
    if (cur_b > cur_a) covered += cur_b - cur_a;
    // Overlapping events (several queues in one row) are scaled to the covered time.
    double sum = 0;
    for (int c = 0; c < VKT_CAT_COUNT; c++)
        sum += out[c];
    if (sum > (double)covered && sum > 0)
        for (int c = 0; c < VKT_CAT_COUNT; c++)
            out[c] *= (double)covered / sum;
    out[VKT_CAT_COUNT] = (double)(a1 - a0 - covered);
}

static void breakdown_panel(ui_list *l, box b, const vw_model *m, const vw_view *v,
                            vw_layout *lay) {
    if (b.y1 - b.y0 < 90) return;
    int64_t v0, v1;
    vw_window(m, v, &v0, &v1);
    legend_item items[VKT_CAT_COUNT + 1];
    int n = 0;
    bool any_other = false;
    for (int d = 0; d < m->ndev; d++)
        any_other |= m->dev[d].used_cat[VKT_CAT_OTHER];
    for (int c = 0; c < VKT_CAT_COUNT; c++) {
        if (c == VKT_CAT_OTHER && !any_other) continue;
        items[n].color = CAT_COLOR[c];
        snprintf(items[n].text, sizeof items[n].text, "%s", CAT_LABEL[c]);
        n++;
    }
    items[n].color = UI_HEX(0x3a3f48);
    snprintf(items[n].text, sizeof items[n].text, "no work (bubble)");
    n++;
    box a = panel(l, b, "Where the time went", "share of the window per device", items,
                  m->nevents ? n : 0, false, NULL, NULL);
    if (m->ndev == 0 || m->nevents == 0) {
        no_data(l, a, "no device events");
        return;
    }
    float gutter = (a.x1 - a.x0) * 0.16f;
    if (gutter < 120) gutter = 120;
    if (gutter > 210) gutter = 210;
    float x0 = a.x0 + gutter, x1 = a.x1 - 4, y = a.y0 + 8;
    float rh = (a.y1 - a.y0 - 8) / m->ndev - 8;
    if (rh > 34) rh = 34;
    if (rh < 10) rh = 10;
    for (int d = 0; d < m->ndev && y + rh <= a.y1 + 1; d++, y += rh + 8) {
        double t[VKT_CAT_COUNT + 1], window = (double)(v1 - v0);
        time_by_category(&m->dev[d], m->t0 + v0, m->t0 + v1, t);
        ui_box(l, a.x0, y + 3, a.x0 + 3, y + rh - 3, dev_color(d));
        char shown[sizeof m->dev[d].name];
        fit_name(l->font, UI_BOLD, gutter - 18, m->dev[d].name, shown, sizeof shown);
        ui_text(l, UI_BOLD, a.x0 + 10, y + rh / 2 + 5, UI_LEFT, gutter - 18, C_TEXT, shown);
        note_name(lay, d, "breakdown", shown);
        ui_rounded(l, x0, y, x1, y + rh, 3, UI_HEX(0x3a3f48));
        float x = x0;
        for (int c = 0; c <= VKT_CAT_COUNT; c++) {
            float w = (float)(t[c] / window) * (x1 - x0);
            if (w <= 0) continue;
            if (c < VKT_CAT_COUNT) ui_box(l, x, y, x + w, y + rh, CAT_COLOR[c]);
            char buf[64];
            snprintf(buf, sizeof buf, "%.0f%%", 100 * t[c] / window);
            if (w > ui_text_width(l->font, UI_SMALL, buf) + 8 && rh >= 16)
                ui_text(l, UI_SMALL, x + w / 2, y + rh / 2 + 4, UI_CENTER, 0,
                        c < VKT_CAT_COUNT ? UI_HEX(0x101216) : C_TEXT2, buf);
            x += w;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The whole picture

static void title_bar(ui_list *l, const vw_model *m, const vw_view *v) {
    float W = (float)l->width;
    ui_box(l, 0, 0, W, 58, UI_HEX(0x181a20));
    ui_box(l, 0, 58, W, 59, C_PANEL_EDGE);
    float w = ui_text(l, UI_TITLE, 18, 30, UI_LEFT, 0, C_TEXT, "vktrain");
    ui_text(l, UI_TITLE, 18 + w + 8, 30, UI_LEFT, 0, C_TEXT2, "training trace");
    char dur[32], info[400];
    fmt_duration((double)(m->t1 - m->t0), dur, sizeof dur);
    snprintf(info, sizeof info,
             "%s  \xc2\xb7  strategy: %s  \xc2\xb7  %d device%s  \xc2\xb7  %d step%s  "
             "\xc2\xb7  %zu events  \xc2\xb7  %s",
             v->source, m->strategy[0] ? m->strategy : "unknown", m->ndev, m->ndev == 1 ? "" : "s",
             m->nsteps, m->nsteps == 1 ? "" : "s", m->nevents, dur);
    ui_text(l, UI_SMALL, 19, 49, UI_LEFT, W * 0.55f, C_TEXT2, info);
    // Panel tabs, right-aligned; the shown one highlighted.
    static const char *tabs[VW_PANELS] = {"1 Overview", "2 Timeline", "3 Devices", "4 Training"};
    float x = W - 18;
    for (int i = VW_PANELS - 1; i >= 0; i--) {
        float tw = ui_text_width(l->font, UI_NORMAL, tabs[i]) + 20;
        bool on = (int)v->panel == i;
        if (on) ui_rounded(l, x - tw, 17, x, 41, 12, ui_alpha(C_ACCENT, 0.9f));
        ui_text(l, UI_NORMAL, x - tw / 2, 34, UI_CENTER, 0, on ? UI_HEX(0x0e1014) : C_TEXT2,
                tabs[i]);
        x -= tw + 6;
    }
    if (v->live) {
        const char *badge = v->paused ? "PAUSED" : "LIVE";
        float bw = ui_text_width(l->font, UI_BOLD, badge) + 20;
        x -= 10;
        ui_rounded(l, x - bw, 17, x, 41, 12, v->paused ? UI_HEX(0x6b7380) : C_LIVE);
        ui_text(l, UI_BOLD, x - bw / 2, 34, UI_CENTER, 0, UI_HEX(0xffffff), badge);
    }
}

static void footer(ui_list *l, const vw_view *v) {
    float W = (float)l->width, H = (float)l->height;
    const char *hint = v->interactive
                           ? "Tab / 1-4 panels    + / - / wheel: zoom    arrows / drag: pan    "
                             "0: reset    Space: pause    Esc: quit"
                           : "";
    char left[400];
    if (*hint)
        snprintf(left, sizeof left, "%s", hint);
    else
        snprintf(left, sizeof left, "drawn with Vulkan on %s", v->device);
    ui_text(l, UI_SMALL, 18, H - 9, UI_LEFT, W * 0.7f, C_TEXT3, left);
    ui_textf(l, UI_SMALL, W - 18, H - 9, UI_RIGHT, C_TEXT3, "vktrain %s", VKT_VERSION);
}

void vw_compose(ui_list *l, const vw_model *m, const vw_view *v, vw_layout *layout) {
    if (layout) memset(layout, 0, sizeof *layout);
    float W = (float)l->width, H = (float)l->height;
    ui_box(l, 0, 0, W, H, C_BG);
    title_bar(l, m, v);
    footer(l, v);
    box c = {14, 70, W - 14, H - 26};
    if (c.x1 - c.x0 < 200 || c.y1 - c.y0 < 120) return; // too small to say anything useful
    float gap = 12;
    switch (v->panel) {
    case VW_TIMELINE: {
        // Rows as tall as useful; below them, where each device's time went.
        float need = 34 + 18 + 44 + m->ndev * 84.0f;
        float th = need < (c.y1 - c.y0) * 0.62f ? need : (c.y1 - c.y0) * 0.62f;
        timeline(l, (box){c.x0, c.y0, c.x1, c.y0 + th}, m, v, layout);
        float bh = 34 + 18 + m->ndev * 42.0f; // panels end where their content does
        if (c.y0 + th + gap + bh > c.y1) bh = c.y1 - (c.y0 + th + gap);
        breakdown_panel(l, (box){c.x0, c.y0 + th + gap, c.x1, c.y0 + th + gap + bh}, m, v, layout);
        break;
    }
    case VW_DEVICES: {
        float mid = (c.y0 + c.y1) / 2;
        utilisation_panel(l, (box){c.x0, c.y0, c.x1, mid - gap / 2}, m, v, layout);
        memory_panel(l, (box){c.x0, mid + gap / 2, c.x1, c.y1}, m, v, layout);
        break;
    }
    case VW_TRAINING: {
        float mid = (c.y0 + c.y1) / 2;
        training_panel(l, (box){c.x0, c.y0, c.x1, mid - gap / 2}, m);
        throughput_panel(l, (box){c.x0, mid + gap / 2, c.x1, c.y1}, m);
        break;
    }
    default: {
        // The timeline takes what its rows need (up to half), the rest is a 2x2 grid; a small
        // picture keeps one row of the grid (utilisation, loss) or none (the other panels stay
        // one key away), rather than drawing plots too small to read.
        float ch = c.y1 - c.y0;
        float need = 34 + 18 + 44 + m->ndev * 46.0f;
        float th = need < ch * 0.5f ? need : ch * 0.5f;
        if (th < ch * 0.36f) th = ch * 0.36f;
        float rest = ch - th - gap;
        if (rest < 150) th = ch, rest = 0;
        timeline(l, (box){c.x0, c.y0, c.x1, c.y0 + th}, m, v, layout);
        float gy0 = c.y0 + th + gap, gmid = (gy0 + c.y1) / 2, xmid = (c.x0 + c.x1) / 2;
        if (rest >= 150 && rest < 320) {
            utilisation_panel(l, (box){c.x0, gy0, xmid - gap / 2, c.y1}, m, v, layout);
            training_panel(l, (box){xmid + gap / 2, gy0, c.x1, c.y1}, m);
        } else if (rest >= 320) {
            utilisation_panel(l, (box){c.x0, gy0, xmid - gap / 2, gmid - gap / 2}, m, v, layout);
            memory_panel(l, (box){xmid + gap / 2, gy0, c.x1, gmid - gap / 2}, m, v, layout);
            training_panel(l, (box){c.x0, gmid + gap / 2, xmid - gap / 2, c.y1}, m);
            throughput_panel(l, (box){xmid + gap / 2, gmid + gap / 2, c.x1, c.y1}, m);
        }
        break;
    }
    }
}
