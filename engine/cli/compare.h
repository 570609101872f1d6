// compare.h: what `vktrain compare` (engine/cli/compare*.c) shares between its parts: the result
// files of `vktrain bench suite` as results.c reads and checks them, with how compare shows each,
// what the tables and pictures ask of them (compare_read.c), and the pictures (compare_draw.c).
// The command itself, its tables and the HTML page are compare.c. Not part of libvktrain.
#ifndef VKT_CLI_COMPARE_H
#define VKT_CLI_COMPARE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "chart.h"
#include "results.h"
#include "vktrain.h"

struct cJSON;

#define CMP_MAX_RESULTS 16

// ---------------------------------------------------------------------------------------------
// One result file

typedef struct cmp_result {
    results_file res; // what the file says (results_load with results_for_compare)
    char legend[192]; // what pictures and tables call it: the label, or with the file's name
    uint32_t color;
    chart_marker marker;
} cmp_result;

// ---------------------------------------------------------------------------------------------
// What the tables and pictures read

// r's entry of model at batch, or NULL.
const results_train *cmp_train_at(const cmp_result *r, const char *model, int batch);
bool cmp_has_model(const cmp_result *r, const char *model);
// The largest batch measured that fits (0: none); *capped: no batch was refused, so the sweep
// stopped before the memory did.
int cmp_largest_fit(const cmp_result *r, const char *model, bool *capped);
// Whether model is known not to fit at batch: r refused this batch or a smaller one.
bool cmp_known_no_fit(const cmp_result *r, const char *model, int batch);
const results_sat *cmp_saturation_of(const cmp_result *r, const char *model);
// Whether any of rs[0..n) gives tokens/s for model (a language model: samples are sequences).
bool cmp_is_lm(const cmp_result *rs, int n, const char *model);
// What the device had to fit in: the run's --mem-limit, else its memory.
double cmp_capacity(const cmp_result *r);
// The batches any of rs[0..n) has for model, sorted and distinct, in *out (malloc'd); returns
// their count, or -1 when out of memory.
int cmp_batches_of(const cmp_result *rs, int n, const char *model, int **out);
typedef struct cmp_mm_key {
    int size;
    char form[8];
} cmp_mm_key;

// The (size, form) pairs any of rs[0..n) measured, sorted, in *out (malloc'd); returns their
// count, or -1 when out of memory.
int cmp_mm_keys(const cmp_result *rs, int n, cmp_mm_key **out);
const results_matmul *cmp_mm_at(const cmp_result *r, int size, const char *form);
// "256.0 MiB"
void cmp_human_bytes(char *out, size_t size, double b);
// Rates and GFLOP/s as the tables print them: whole numbers from 1000, one decimal from 10,
// three significant digits below.
void cmp_fmt_rate(char *out, size_t size, double v);

// ---------------------------------------------------------------------------------------------
// The pictures (compare_draw.c)

typedef struct cmp_picture {
    char file[128];
    char kind[16];
    char model[64];
    chart c;
    chart_series *series;
    chart_hline *hl;
    char (*hl_label)[128];
    char (*series_label)[224]; // where a series' label is not its device's legend
    chart_point *pts;
    char title[160], subtitle[256], note[256], ytitle[96];
    uint8_t *png;
    size_t png_size;
    struct cJSON *layout; // --layout: where the picture put things (chart_layout_json)
} cmp_picture;

void cmp_picture_free(cmp_picture *p);
// The throughput and memory pictures of model (file MODEL-throughput.png, MODEL-memory.png).
// false when out of memory.
bool cmp_model_pictures(cmp_picture *tp, cmp_picture *mp, const cmp_result *rs, int n,
                        const char *model);
// matmul GFLOP/s (with each device's peak FMA as a line) or, with fraction, the fraction of peak
// against size: one series per device and form. false when out of memory.
bool cmp_matmul_picture(cmp_picture *p, const cmp_result *rs, int n, bool fraction);
// Renders every picture to PNG bytes on the device SPEC names (NULL: the best that can draw), at
// w x h, and its layout when asked. Fails as vw_offscreen_create and vw_offscreen_png.
vkt_status cmp_render_pictures(cmp_picture *pics, int np, const char *device, int w, int h,
                               bool want_layout);
// Writes each picture's PNG into dir (made if missing), atomically.
vkt_status cmp_write_pngs(const cmp_picture *pics, int np, const char *dir);
// The --layout file: the colours, the devices and every picture's layout.
vkt_status cmp_write_layout(const char *path, const cmp_picture *pics, int np, const cmp_result *rs,
                            int n);

#endif
