// compare_draw.c: `vktrain compare`'s pictures (compare.h): each chart built from the results
// (viewer/chart.h), rendered to PNG on the viewer's renderer (viewer/offscreen.h), written into
// the --png directory, and where each put its points written for --layout. Not here: reading the
// results (compare_read.c), the tables and the HTML page (compare.c).
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "compare.h"
#include "env.h"
#include "offscreen.h"
#include "vkt_internal.h"

// ---------------------------------------------------------------------------------------------
// The pictures

void cmp_picture_free(cmp_picture *p) {
    free(p->series);
    free(p->hl);
    free(p->hl_label);
    free(p->series_label);
    free(p->pts);
    free(p->png);
    cJSON_Delete(p->layout);
}

static void safe_name(char *out, size_t size, const char *s) {
    size_t i = 0;
    for (; s[i] && i + 1 < size; i++)
        out[i] = isalnum((unsigned char)s[i]) || s[i] == '-' || s[i] == '.' ? s[i] : '_';
    out[i] = 0;
}

// Room for n series of up to npts points in all and nh lines.
static bool picture_alloc(cmp_picture *p, int n, int npts, int nh) {
    p->series = calloc((size_t)n + 1, sizeof *p->series);
    p->pts = calloc((size_t)npts + 1, sizeof *p->pts);
    p->hl = calloc((size_t)nh + 1, sizeof *p->hl);
    p->hl_label = calloc((size_t)nh + 1, sizeof *p->hl_label);
    p->series_label = calloc((size_t)n + 1, sizeof *p->series_label);
    return p->series && p->pts && p->hl && p->hl_label && p->series_label;
}

static void series_of(chart_series *s, const cmp_result *r, int key, chart_point *pts, int n) {
    *s = (chart_series){
        .label = r->legend, .color = r->color, .marker = r->marker, .key = key, .pts = pts, .n = n};
}

bool cmp_model_pictures(cmp_picture *tp, cmp_picture *mp, const cmp_result *rs, int n,
                        const char *model) {
    char safe[64];
    safe_name(safe, sizeof safe, model);
    int total = 0;
    for (int k = 0; k < n; k++)
        total += rs[k].res.ntr;
    if (!picture_alloc(tp, n, total, 0) || !picture_alloc(mp, n, total, n)) return false;
    bool lm = cmp_is_lm(rs, n, model);
    snprintf(tp->file, sizeof tp->file, "%s-throughput.png", safe);
    snprintf(tp->kind, sizeof tp->kind, "throughput");
    snprintf(mp->file, sizeof mp->file, "%s-memory.png", safe);
    snprintf(mp->kind, sizeof mp->kind, "memory");
    snprintf(tp->model, sizeof tp->model, "%s", model);
    snprintf(mp->model, sizeof mp->model, "%s", model);
    snprintf(tp->title, sizeof tp->title, "%s: training throughput against batch size", model);
    snprintf(mp->title, sizeof mp->title, "%s: memory against batch size", model);
    snprintf(tp->ytitle, sizeof tp->ytitle, "%s", lm ? "sequences/s" : "samples/s");
    // Saturation batches under the throughput chart.
    size_t o = (size_t)snprintf(tp->note, sizeof tp->note, "saturation batch:");
    for (int k = 0; k < n && o < sizeof tp->note; k++) {
        const results_sat *s = cmp_saturation_of(&rs[k], model);
        if (s)
            o += (size_t)snprintf(tp->note + o, sizeof tp->note - o, "%s %s %d", k ? "," : "",
                                  rs[k].legend, s->batch);
    }
    snprintf(tp->subtitle, sizeof tp->subtitle,
             "one training step of %s at each batch; log axes; each marker a measured batch",
             model);
    snprintf(mp->subtitle, sizeof mp->subtitle,
             "peak device memory of the step (the planner's bytes where not measured) and each "
             "device's capacity");
    snprintf(mp->note, sizeof mp->note,
             "hollow markers: the planner's bytes (not measured, or the batch did not fit); "
             "dashed lines: capacity (--mem-limit, else device memory)");
    int tn = 0, mn = 0, ns = 0, nt = 0;
    for (int k = 0; k < n; k++) {
        const cmp_result *r = &rs[k];
        if (!cmp_has_model(r, model)) continue;
        int *b;
        int nb = cmp_batches_of(r, 1, model, &b);
        if (nb < 0) return false;
        int t0 = tn, m0 = mn;
        for (int i = 0; i < nb; i++) {
            const results_train *e = cmp_train_at(r, model, b[i]);
            if (e->fits) tp->pts[tn++] = (chart_point){(double)e->batch, e->sps, false};
            bool measured = e->fits && e->peak_memory > 0;
            mp->pts[mn++] = (chart_point){(double)e->batch,
                                          measured ? e->peak_memory : e->planned_bytes, !measured};
        }
        free(b);
        // A device that fitted no batch has no throughput curve, but its refusals' bytes.
        if (tn > t0) series_of(&tp->series[nt++], r, k, tp->pts + t0, tn - t0);
        series_of(&mp->series[ns], r, k, mp->pts + m0, mn - m0);
        char cap[32];
        cmp_human_bytes(cap, sizeof cap, cmp_capacity(r));
        snprintf(mp->hl_label[ns], sizeof mp->hl_label[ns], "%s: %s %s", r->legend, cap,
                 r->res.mem_limit > 0 ? "limit" : "memory");
        mp->hl[ns] = (chart_hline){
            .label = mp->hl_label[ns], .color = r->color, .key = k, .y = cmp_capacity(r)};
        ns++;
    }
    tp->c = (chart){.title = tp->title,
                    .subtitle = tp->subtitle,
                    .note = tp->note,
                    .x = {.title = "batch size", .scale = CHART_LOG, .pow2 = true},
                    .y = {.title = tp->ytitle, .scale = CHART_LOG},
                    .series = tp->series,
                    .nseries = nt};
    mp->c = (chart){.title = mp->title,
                    .subtitle = mp->subtitle,
                    .note = mp->note,
                    .x = {.title = "batch size", .scale = CHART_LOG, .pow2 = true},
                    .y = {.title = "bytes", .scale = CHART_LOG, .units = CHART_BYTES, .pow2 = true},
                    .series = mp->series,
                    .nseries = ns,
                    .hlines = mp->hl,
                    .nhlines = ns};
    return true;
}

// GFLOP/s (with each device's peak FMA as a line) or fraction of peak against size, one series
// per device and form.
bool cmp_matmul_picture(cmp_picture *p, const cmp_result *rs, int n, bool fraction) {
    cmp_mm_key *keys;
    int m = cmp_mm_keys(rs, n, &keys);
    if (m < 0) return false;
    // Forms in order of first appearance.
    char forms[8][8];
    int nf = 0;
    for (int i = 0; i < m; i++) {
        bool seen = false;
        for (int f = 0; f < nf && !seen; f++)
            seen = !strcmp(forms[f], keys[i].form);
        if (!seen && nf < 8) snprintf(forms[nf++], 8, "%s", keys[i].form);
    }
    int total = 0;
    for (int k = 0; k < n; k++)
        total += rs[k].res.nmm;
    bool ok = picture_alloc(p, n * (nf ? nf : 1), total, fraction ? 0 : n);
    if (!ok) {
        free(keys);
        return false;
    }
    snprintf(p->file, sizeof p->file, fraction ? "matmul-fraction.png" : "matmul-gflops.png");
    snprintf(p->kind, sizeof p->kind, fraction ? "matmul_fraction" : "matmul_gflops");
    snprintf(p->title, sizeof p->title,
             fraction ? "matmul: fraction of peak FMA against size"
                      : "matmul GFLOP/s against size");
    snprintf(p->subtitle, sizeof p->subtitle,
             "square fp32 products (M = N = K = size); each marker a measured size");
    if (nf > 1) snprintf(p->note, sizeof p->note, "one line per device and form (NN, NT, TN)");
    snprintf(p->ytitle, sizeof p->ytitle, fraction ? "of peak FMA" : "GFLOP/s");
    // Series labels with the form, when there is more than one form.
    int ns = 0, np = 0;
    for (int k = 0; k < n; k++) {
        for (int f = 0; f < nf; f++) {
            int p0 = np;
            for (int i = 0; i < m; i++) {
                if (strcmp(keys[i].form, forms[f])) continue;
                const results_matmul *e = cmp_mm_at(&rs[k], keys[i].size, forms[f]);
                if (e)
                    p->pts[np++] =
                        (chart_point){(double)e->size, fraction ? e->fraction : e->gflops, false};
            }
            if (np == p0) continue;
            series_of(&p->series[ns], &rs[k], k, p->pts + p0, np - p0);
            if (nf > 1) {
                snprintf(p->series_label[ns], sizeof p->series_label[ns], "%s %s", rs[k].legend,
                         forms[f]);
                p->series[ns].label = p->series_label[ns];
                p->series[ns].marker = f % 2 ? CHART_SQUARE : CHART_DOT;
            }
            ns++;
        }
        if (!fraction) {
            snprintf(p->hl_label[k], sizeof p->hl_label[k], "%s: peak %.1f", rs[k].legend,
                     rs[k].res.fma);
            p->hl[k] = (chart_hline){
                .label = p->hl_label[k], .color = rs[k].color, .key = k, .y = rs[k].res.fma};
        }
    }
    free(keys);
    p->c = (chart){.title = p->title,
                   .subtitle = p->subtitle,
                   .note = p->note[0] ? p->note : (fraction ? NULL : "dashed lines: peak FMA"),
                   .x = {.title = "matrix size", .scale = CHART_LOG, .pow2 = true},
                   .y = fraction ? (chart_axis){.title = p->ytitle,
                                                .scale = CHART_LINEAR,
                                                .units = CHART_PERCENT,
                                                .from_zero = true}
                                 : (chart_axis){.title = p->ytitle, .scale = CHART_LOG},
                   .series = p->series,
                   .nseries = ns,
                   .hlines = p->hl,
                   .nhlines = fraction ? 0 : n};
    return true;
}

// Renders every picture to PNG bytes (and its layout when asked).
vkt_status cmp_render_pictures(cmp_picture *pics, int np, const char *device, int w, int h,
                               bool want_layout) {
    cli_env env;
    VKT_TRY(cli_env_read(&env));
    vw_offscreen_desc od = {.device_spec = device,
                            .validation = env.context.validation,
                            .font_path = env.font,
                            .who = "vktrain compare"};
    vw_offscreen *o;
    VKT_TRY(vw_offscreen_create(&od, &o));
    ui_list l;
    ui_list_init(&l, vw_offscreen_font(o), w, h);
    vkt_status s = VKT_OK;
    for (int i = 0; i < np && s == VKT_OK; i++) {
        chart_layout lay;
        ui_list_reset(&l, w, h);
        s = chart_compose(&l, &pics[i].c, &lay);
        if (s == VKT_OK) s = vw_offscreen_png(o, &l, &pics[i].png, &pics[i].png_size);
        if (s == VKT_OK && want_layout) {
            pics[i].layout = chart_layout_json(&pics[i].c, &lay);
            if (!pics[i].layout) s = vkt_fail(VKT_ERR_HOST_MEMORY, "out of host memory");
        }
    }
    ui_list_free(&l);
    vw_offscreen_destroy(o);
    return s;
}

// ---------------------------------------------------------------------------------------------
// Files

vkt_status cmp_write_pngs(const cmp_picture *pics, int np, const char *dir) {
    VKT_TRY(vkt_mkdirs(dir));
    for (int i = 0; i < np; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, pics[i].file);
        vkt_chunk c = {pics[i].png, pics[i].png_size};
        VKT_TRY(vkt_write_file_atomic(path, &c, 1, "picture"));
    }
    return VKT_OK;
}

static cJSON *rgb(uint32_t c) {
    int v[3] = {(int)(c & 0xff), (int)((c >> 8) & 0xff), (int)((c >> 16) & 0xff)};
    return cJSON_CreateIntArray(v, 3);
}

vkt_status cmp_write_layout(const char *path, const cmp_picture *pics, int np, const cmp_result *rs,
                            int n) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddItemToObject(o, "background", rgb(chart_background_color()));
    cJSON_AddItemToObject(o, "axis", rgb(chart_axis_color()));
    cJSON_AddItemToObject(o, "text", rgb(chart_text_color()));
    cJSON *devs = cJSON_AddArrayToObject(o, "devices");
    for (int k = 0; k < n; k++) {
        cJSON *d = cJSON_CreateObject();
        cJSON_AddNumberToObject(d, "key", k);
        cJSON_AddStringToObject(d, "label", rs[k].res.label);
        cJSON_AddStringToObject(d, "legend", rs[k].legend);
        cJSON_AddStringToObject(d, "file", rs[k].res.path);
        cJSON_AddItemToObject(d, "color", rgb(rs[k].color));
        cJSON_AddItemToArray(devs, d);
    }
    cJSON *arr = cJSON_AddArrayToObject(o, "pictures");
    for (int i = 0; i < np; i++) {
        cJSON *p = cJSON_Duplicate(pics[i].layout, 1);
        if (!p) continue;
        cJSON_AddStringToObject(p, "file", pics[i].file);
        cJSON_AddStringToObject(p, "kind", pics[i].kind);
        if (pics[i].model[0]) cJSON_AddStringToObject(p, "model", pics[i].model);
        cJSON_AddItemToArray(arr, p);
    }
    char *text = cJSON_Print(o);
    cJSON_Delete(o);
    if (!text) return vkt_fail(VKT_ERR_HOST_MEMORY, "out of host memory writing %s", path);
    vkt_chunk c[2] = {{text, strlen(text)}, {"\n", 1}};
    vkt_status s = vkt_write_file_atomic(path, c, 2, "layout file");
    cJSON_free(text);
    return s;
}
