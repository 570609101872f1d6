// scene.h: what the viewer shows, as a draw list. A model (events per device sorted by time,
// counter series, step boundaries) is built from a trace; the picture is composed from the
// model and the view state (panel, zoom window, live/paused) into a ui_list. No Vulkan, no
// window: the same code draws the PNG and the window.
#ifndef VKT_VIEWER_SCENE_H
#define VKT_VIEWER_SCENE_H

#include "trace.h"
#include "ui.h"

typedef struct vw_dev {
    vkt_trace_device info;
    // The row's name: "#<row> ..." as vktrain names a run's devices (docs/PARALLELISM.md,
    // "Naming devices"); a trace's name that does not start with its row's number gets it.
    char name[360];
    vkt_trace_event *ev; // sorted by start
    size_t nev;
    int64_t max_dur;
    vkt_trace_counter *mem; // memory_bytes, in time order
    size_t nmem;
    vkt_trace_summary summary;
    bool summary_from_trainer;
    bool used_cat[VKT_CAT_COUNT];
} vw_dev;

typedef struct vw_series {
    vkt_trace_counter *v;
    size_t n;
} vw_series;

typedef struct vw_model {
    int ndev;
    vw_dev *dev;
    vw_series loss, accuracy, throughput;
    int64_t t0, t1; // whole trace, host ns
    bool empty;
    int nsteps;
    int64_t *step_start; // earliest event of each step on any device (INT64_MAX: none)
    size_t nevents;
    char strategy[64];
} vw_model;

typedef enum vw_panel { VW_OVERVIEW, VW_TIMELINE, VW_DEVICES, VW_TRAINING, VW_PANELS } vw_panel;

typedef struct vw_view {
    vw_panel panel;
    bool zoomed;    // false: the window follows the whole trace
    int64_t v0, v1; // zoom window, ns relative to the model's t0
    bool live, paused, interactive;
    char source[256]; // the file shown, or "live"
    char device[300]; // the device drawing it
} vw_view;

// Where the picture put things, for tests (vktrain view --layout) and for mouse input.
typedef struct vw_layout {
    bool has_timeline;
    float tl_x0, tl_x1, tl_y0, tl_y1; // the timeline's plot area
    int64_t tl_v0, tl_v1;             // its window, ns relative to the model's t0
    int nrows;
    struct {
        int pid;
        float y0, y1;
    } rows[64];
    // Every text that names a device, as drawn (cut to fit), so that a test can read the
    // numbering: "timeline" and "breakdown" row labels, "utilisation" and "memory" legend entries,
    // "memory limit" lines (pid: the first device the line names).
    int nnames;
    struct {
        int pid;
        const char *where; // a static string
        char text[160];
    } names[128];
} vw_layout;

// Builds the model from a trace (reading it with the trace's own locking). Replaces m's
// contents; fails only with VKT_ERR_HOST_MEMORY.
vkt_status vw_model_build(vw_model *m, const vkt_trace *t);
void vw_model_free(vw_model *m);
// The zoom window the picture uses (the whole trace unless zoomed).
void vw_window(const vw_model *m, const vw_view *v, int64_t *v0, int64_t *v1);
// Composes the picture into l (sized l->width x l->height). layout may be NULL.
void vw_compose(ui_list *l, const vw_model *m, const vw_view *v, vw_layout *layout);
// Colours, for tests and legends.
uint32_t vw_category_color(vkt_trace_category c);
uint32_t vw_background_color(void);
uint32_t vw_text_color(void);
const char *vw_panel_name(vw_panel p);

#endif
