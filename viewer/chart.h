// chart.h: line charts of measurements as a draw list (viewer/ui.h), for `vktrain compare`:
// a title, a plot area with linear or logarithmic axes (ticks at powers of two or at 1-2-5 x
// 10^k, labels as numbers, bytes or percentages), one polyline per series with a marker at each
// point (hollow markers for figures that were planned rather than measured), dashed horizontal
// reference lines (a device's capacity, its peak), and a legend. No Vulkan and no files: the
// caller renders the list (viewer/offscreen.h) and writes what it likes. chart_layout_json says
// where everything went, in pixels, so that a test can check a picture against the numbers.
#ifndef VKT_VIEWER_CHART_H
#define VKT_VIEWER_CHART_H

#include <stdbool.h>
#include <stdint.h>

#include "ui.h"

struct cJSON;

typedef enum chart_scale { CHART_LINEAR, CHART_LOG } chart_scale;
// How tick labels read: 4096, 20k, 1.5M; 256 KiB, 2 GiB; 40%.
typedef enum chart_units { CHART_NUMBER, CHART_BYTES, CHART_PERCENT } chart_units;

typedef struct chart_axis {
    const char *title; // "batch size", "samples/s"
    chart_scale scale;
    chart_units units;
    bool pow2;      // log axis: ticks at powers of two (batch sizes, matrix sizes, bytes)
    bool from_zero; // linear axis: the range starts at 0
} chart_axis;

typedef struct chart_point {
    double x, y;
    bool hollow; // drawn as a ring: a planned figure, not a measured one
} chart_point;

typedef enum chart_marker { CHART_DOT, CHART_SQUARE } chart_marker;

typedef struct chart_series {
    const char *label;
    uint32_t color;
    chart_marker marker;
    int key;                // the caller's number for it (a device's index), copied into the layout
    const chart_point *pts; // in the order the polyline joins them
    int n;
} chart_series;

// A dashed horizontal line at y across the plot. Lines that land on the same pixel row share
// it: their dashes interleave, so each colour still shows.
typedef struct chart_hline {
    const char *label; // its legend entry
    uint32_t color;
    int key;
    double y;
} chart_hline;

typedef struct chart {
    const char *title, *subtitle; // subtitle may be NULL
    const char *note;             // one line under the plot, may be NULL
    chart_axis x, y;
    const chart_series *series;
    int nseries;
    const chart_hline *hlines;
    int nhlines;
} chart;

#define CHART_MAX_TICKS 40
#define CHART_MAX_LEGEND 48

typedef struct chart_tick {
    double value;
    float px; // along the axis: x for the x axis, y for the y axis
    bool labelled;
    char label[32];
} chart_tick;

// An axis as drawn: value v sits at pixel p0 + (f(v) - f(min)) / (f(max) - f(min)) * (p1 - p0),
// f the identity or the natural logarithm.
typedef struct chart_axis_layout {
    chart_scale scale;
    double min, max;
    float p0, p1; // pixels of min and max (for y, p0 is below p1: larger)
    int nticks;
    chart_tick ticks[CHART_MAX_TICKS];
} chart_axis_layout;

typedef struct chart_legend_entry {
    int series;               // index into chart.series, or -1
    int hline;                // index into chart.hlines, or -1
    float sx0, sy0, sx1, sy1; // the swatch (a line or a dash in the entry's colour)
    char text[96];            // its text (drawn cut to the legend's width when longer)
} chart_legend_entry;

typedef struct chart_layout {
    int width, height;
    float x0, y0, x1, y1; // the plot area; the axes are its left and bottom edges
    chart_axis_layout x, y;
    int nlegend;
    chart_legend_entry legend[CHART_MAX_LEGEND];
    bool empty; // no point and no line: the picture says so instead of drawing axes
} chart_layout;

// Composes c into l (l->width x l->height pixels, l->font set) and says where it went in lay
// (may be NULL). Points that are not finite, or not positive on a log axis, are left out. Fails
// only with VKT_ERR_HOST_MEMORY (ui_check).
vkt_status chart_compose(ui_list *l, const chart *c, chart_layout *lay);
// The pixel of value v on an axis as drawn (not clamped to the plot).
float chart_map(const chart_axis_layout *a, double v);
// The layout as JSON, with every series' points and every line in pixels beside the values they
// stand for: {"width", "height", "plot": {x0, y0, x1, y1}, "x": axis, "y": axis, "series":
// [{"key", "label", "color": [r, g, b], "points": [{"x", "y", "px", "py", "hollow"}]}],
// "hlines": [{"key", "label", "color", "value", "py", "x0", "x1"}], "legend": [...]}; an axis is
// {"scale": "log"|"linear", "min", "max", "p0", "p1", "ticks": [{"value", "px", "label"}]}.
// NULL when out of memory.
struct cJSON *chart_layout_json(const chart *c, const chart_layout *lay);

// Colours of the picture (for legends and tests).
uint32_t chart_background_color(void);
uint32_t chart_axis_color(void);
uint32_t chart_text_color(void);
// The i-th of CHART_PALETTE colours that stay apart from each other, the background, the grid
// and the text (i modulo CHART_PALETTE); the first 8 are the most distinct.
#define CHART_PALETTE 16
uint32_t chart_palette(int i);

#endif
