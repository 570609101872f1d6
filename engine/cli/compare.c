// compare.c: `vktrain compare A.json B.json ... [--png DIR] [--html FILE]`: the results of
// `vktrain bench suite` from several machines side by side (format: docs/COMPARING.md). Tables on
// stdout: the devices, peak FMA and bandwidth, matmul GFLOP/s and fraction of peak per size,
// samples/s by batch per model with the largest batch that fits and the saturation batch, and,
// for each pair of devices and model, the batch ranges where each is faster and the crossover.
// With --png DIR and --html FILE the same as pictures drawn by vktrain itself (viewer/chart.c on
// the viewer's renderer): samples/s and memory against batch size per model (log axes, each
// device's capacity as a line), matmul GFLOP/s and fraction of peak against size. --layout FILE
// says where every point went, in pixels, for tests. Opens no Vulkan device without --png/--html.
// Here: the command, the tables, the crossovers and the HTML page; the reader of the result files
// is compare_read.c, the pictures compare_draw.c (compare.h between them).
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "compare.h"
#include "vkt_internal.h"

#define MAX_MODELS 32

// ---------------------------------------------------------------------------------------------
// Output: a document of headings, tables, lines and pictures, printed as text or as HTML.

typedef struct sbuf {
    char *s;
    size_t n, cap;
    bool oom;
} sbuf;

static void sb_add(sbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->n + n + 1)
            cap *= 2;
        char *p = realloc(b->s, cap);
        if (!p) {
            b->oom = true;
            return;
        }
        b->s = p, b->cap = cap;
    }
    memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = 0;
}

__attribute__((format(printf, 2, 3))) static void sb_printf(sbuf *b, const char *fmt, ...) {
    char buf[2048];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n > 0) sb_add(b, buf, (size_t)n < sizeof buf ? (size_t)n : sizeof buf - 1);
}

static void sb_html(sbuf *b, const char *s) {
    for (; *s; s++) {
        switch (*s) {
        case '<': sb_add(b, "&lt;", 4); break;
        case '>': sb_add(b, "&gt;", 4); break;
        case '&': sb_add(b, "&amp;", 5); break;
        case '"': sb_add(b, "&quot;", 6); break;
        default: sb_add(b, s, 1);
        }
    }
}

#define CELL 96
typedef enum blk_kind { BLK_HEADING, BLK_TABLE, BLK_LINE, BLK_PICTURE } blk_kind;
typedef struct blk {
    blk_kind kind;
    char text[512]; // heading, line, or table title
    int ncols, nrows, caprows;
    char (*cells)[CELL]; // nrows x ncols; row 0 is the header
    int picture;         // BLK_PICTURE: index into the pictures
} blk;

typedef struct doc {
    blk *b;
    int n, cap;
    bool oom;
} doc;

static blk *doc_add(doc *d, blk_kind kind, const char *text) {
    if (d->oom) return NULL;
    if (d->n == d->cap) {
        int cap = d->cap ? d->cap * 2 : 32;
        blk *p = realloc(d->b, (size_t)cap * sizeof *p);
        if (!p) {
            d->oom = true;
            return NULL;
        }
        d->b = p, d->cap = cap;
    }
    blk *b = &d->b[d->n++];
    memset(b, 0, sizeof *b);
    b->kind = kind;
    snprintf(b->text, sizeof b->text, "%s", text);
    return b;
}

__attribute__((format(printf, 3, 4))) static void doc_line(doc *d, blk_kind kind, const char *fmt,
                                                           ...) {
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    doc_add(d, kind, buf);
}

static blk *table_new(doc *d, const char *title, int ncols) {
    blk *b = doc_add(d, BLK_TABLE, title);
    if (b) b->ncols = ncols;
    return b;
}

// Appends a row (its cells empty) and returns it, or NULL when out of memory.
static char (*table_row(doc *d, blk *b))[CELL] {
    if (!b) return NULL;
    if (b->nrows == b->caprows) {
        int cap = b->caprows ? b->caprows * 2 : 16;
        char(*p)[CELL] = realloc(b->cells, (size_t)cap * b->ncols * CELL);
        if (!p) {
            d->oom = true;
            return NULL;
        }
        b->cells = p, b->caprows = cap;
    }
    char(*row)[CELL] = b->cells + (size_t)b->nrows++ * b->ncols;
    for (int c = 0; c < b->ncols; c++)
        row[c][0] = 0;
    return row;
}

static void doc_free(doc *d) {
    for (int i = 0; i < d->n; i++)
        free(d->b[i].cells);
    free(d->b);
}

// Whether a cell reads as a figure ("15274", "0.580", "4096+", "-", "no fit"): such columns
// line up on the right, words on the left.
static bool figure_cell(const char *s) {
    if (!strcmp(s, "-") || !strcmp(s, "no fit") || !*s) return true;
    char *end;
    strtod(s, &end);
    return end != s && (!*end || !strcmp(end, "+"));
}

static void print_table(FILE *f, const blk *b) {
    int w[CMP_MAX_RESULTS + 16] = {0};
    bool left[CMP_MAX_RESULTS + 16] = {true};
    for (int c = 1; c < b->ncols && c < CMP_MAX_RESULTS + 16; c++)
        for (int r = 1; r < b->nrows; r++)
            left[c] |= !figure_cell(b->cells[(size_t)r * b->ncols + c]);
    for (int r = 0; r < b->nrows; r++)
        for (int c = 0; c < b->ncols && c < CMP_MAX_RESULTS + 16; c++) {
            int len = (int)strlen(b->cells[(size_t)r * b->ncols + c]);
            if (len > w[c]) w[c] = len;
        }
    fprintf(f, "%s\n", b->text);
    for (int r = 0; r < b->nrows; r++) {
        fprintf(f, "  ");
        for (int c = 0; c < b->ncols; c++) {
            const char *s = b->cells[(size_t)r * b->ncols + c];
            fprintf(f, c ? "  " : "");
            if (left[c] && c + 1 == b->ncols)
                fprintf(f, "%s", s); // no trailing blanks
            else
                fprintf(f, left[c] ? "%-*s" : "%*s", w[c], s);
        }
        fprintf(f, "\n");
    }
    fprintf(f, "\n");
}

static void print_doc(FILE *f, const doc *d, const char *png_dir, char (*files)[128]) {
    for (int i = 0; i < d->n; i++) {
        const blk *b = &d->b[i];
        switch (b->kind) {
        case BLK_HEADING: fprintf(f, "== %s\n\n", b->text); break;
        case BLK_TABLE: print_table(f, b); break;
        case BLK_LINE: fprintf(f, "%s\n", b->text); break;
        case BLK_PICTURE:
            if (png_dir) fprintf(f, "picture: %s/%s\n", png_dir, files[b->picture]);
            break;
        }
        // A run of lines ends with a blank line before what is not a line.
        if (b->kind == BLK_LINE && (i + 1 == d->n || d->b[i + 1].kind != BLK_LINE))
            fprintf(f, "\n");
        if (b->kind == BLK_PICTURE && png_dir && (i + 1 == d->n || d->b[i + 1].kind != BLK_PICTURE))
            fprintf(f, "\n");
    }
}

// ---------------------------------------------------------------------------------------------
// The tables

static void device_tables(doc *d, const cmp_result *rs, int n) {
    doc_add(d, BLK_HEADING, "devices");
    blk *t = table_new(d, "results compared", 8);
    char(*h)[CELL] = table_row(d, t);
    if (!h) return;
    static const char *head[] = {"device", "name",  "type",    "memory",
                                 "limit",  "suite", "created", "file"};
    for (int c = 0; c < 8; c++)
        snprintf(h[c], CELL, "%s", head[c]);
    for (int k = 0; k < n; k++) {
        char(*row)[CELL] = table_row(d, t);
        if (!row) return;
        const results_file *f = &rs[k].res;
        snprintf(row[0], CELL, "%s", rs[k].legend);
        snprintf(row[1], CELL, "%s", f->name[0] ? f->name : "-");
        snprintf(row[2], CELL, "%s", f->type[0] ? f->type : "-");
        cmp_human_bytes(row[3], CELL, f->memory_bytes);
        if (f->mem_limit > 0)
            cmp_human_bytes(row[4], CELL, f->mem_limit);
        else
            snprintf(row[4], CELL, "-");
        snprintf(row[5], CELL, "%s", f->quick ? "quick" : "full");
        snprintf(row[6], CELL, "%s", f->created[0] ? f->created : "-");
        const char *slash = strrchr(f->path, '/');
        snprintf(row[7], CELL, "%s", slash ? slash + 1 : f->path);
    }

    doc_add(d, BLK_HEADING, "peak");
    t = table_new(d, "peak rates", n + 1);
    h = table_row(d, t);
    if (!h) return;
    snprintf(h[0], CELL, "measure");
    for (int k = 0; k < n; k++)
        snprintf(h[k + 1], CELL, "%s", rs[k].legend);
    char(*fma)[CELL] = table_row(d, t);
    char(*bw)[CELL] = table_row(d, t);
    if (!fma || !bw) return;
    fma = t->cells + (size_t)1 * t->ncols; // rows may have moved when the table grew
    bw = t->cells + (size_t)2 * t->ncols;
    snprintf(fma[0], CELL, "FMA GFLOP/s");
    snprintf(bw[0], CELL, "bandwidth GB/s");
    for (int k = 0; k < n; k++) {
        cmp_fmt_rate(fma[k + 1], CELL, rs[k].res.fma);
        cmp_fmt_rate(bw[k + 1], CELL, rs[k].res.bw);
    }
}

static void matmul_tables(doc *d, const cmp_result *rs, int n) {
    cmp_mm_key *keys;
    int m = cmp_mm_keys(rs, n, &keys);
    if (m < 0) {
        d->oom = true;
        return;
    }
    doc_add(d, BLK_HEADING, "matmul");
    for (int which = 0; which < 2; which++) {
        blk *t = table_new(d, which ? "matmul fraction of peak FMA" : "matmul GFLOP/s", n + 2);
        char(*h)[CELL] = table_row(d, t);
        if (!h) break;
        snprintf(h[0], CELL, "size");
        snprintf(h[1], CELL, "form");
        for (int k = 0; k < n; k++)
            snprintf(h[k + 2], CELL, "%s", rs[k].legend);
        for (int i = 0; i < m; i++) {
            char(*row)[CELL] = table_row(d, t);
            if (!row) break;
            snprintf(row[0], CELL, "%d", keys[i].size);
            snprintf(row[1], CELL, "%s", keys[i].form);
            for (int k = 0; k < n; k++) {
                const results_matmul *e = cmp_mm_at(&rs[k], keys[i].size, keys[i].form);
                if (!e)
                    snprintf(row[k + 2], CELL, "-");
                else if (which)
                    snprintf(row[k + 2], CELL, "%.3f", e->fraction);
                else
                    cmp_fmt_rate(row[k + 2], CELL, e->gflops);
            }
        }
    }
    free(keys);
}

static void model_table(doc *d, const cmp_result *rs, int n, const char *model) {
    int *b;
    int nb = cmp_batches_of(rs, n, model, &b);
    if (nb < 0) {
        d->oom = true;
        return;
    }
    bool lm = cmp_is_lm(rs, n, model);
    char title[256];
    snprintf(title, sizeof title,
             "%s: %s by batch (- not measured; no fit: the planner refused it)", model,
             lm ? "samples/s (sequences/s)" : "samples/s");
    blk *t = table_new(d, title, n + 1);
    char(*h)[CELL] = table_row(d, t);
    if (!h) {
        free(b);
        return;
    }
    snprintf(h[0], CELL, "batch");
    for (int k = 0; k < n; k++)
        snprintf(h[k + 1], CELL, "%s", rs[k].legend);
    for (int i = 0; i < nb; i++) {
        char(*row)[CELL] = table_row(d, t);
        if (!row) break;
        snprintf(row[0], CELL, "%d", b[i]);
        for (int k = 0; k < n; k++) {
            const results_train *e = cmp_train_at(&rs[k], model, b[i]);
            if (!e)
                snprintf(row[k + 1], CELL, "-");
            else if (!e->fits)
                snprintf(row[k + 1], CELL, "no fit");
            else
                cmp_fmt_rate(row[k + 1], CELL, e->sps);
        }
    }
    char(*fit)[CELL] = table_row(d, t);
    char(*sat)[CELL] = table_row(d, t);
    if (fit && sat) {
        fit = t->cells + (size_t)(t->nrows - 2) * t->ncols;
        snprintf(fit[0], CELL, "largest batch that fits");
        snprintf(sat[0], CELL, "saturation batch");
        for (int k = 0; k < n; k++) {
            bool capped;
            int lf = cmp_largest_fit(&rs[k], model, &capped);
            if (!cmp_has_model(&rs[k], model) || !lf)
                snprintf(fit[k + 1], CELL, "-");
            else
                snprintf(fit[k + 1], CELL, "%d%s", lf, capped ? "+" : "");
            const results_sat *s = cmp_saturation_of(&rs[k], model);
            if (s)
                snprintf(sat[k + 1], CELL, "%d", s->batch);
            else
                snprintf(sat[k + 1], CELL, "-");
        }
    }
    free(b);
}

// ---------------------------------------------------------------------------------------------
// Where one device overtakes another. At each batch both results have (in increasing order): A
// is faster when its samples/s is higher; "only A fits" when B refused this batch or a smaller
// one and A ran it. Batches one result did not run and did not refuse are left out. Consecutive
// batches in the same state make a range; a crossover is where the faster device changes.

typedef enum cross_state { CS_A, CS_B, CS_EQUAL, CS_ONLY_A, CS_ONLY_B } cross_state;

static void crossover_lines(doc *d, const cmp_result *A, const cmp_result *B, const char *model,
                            const int *b, int nb) {
    doc_line(d, BLK_LINE, "%s, %s vs %s", model, A->legend, B->legend);
    int lo = -1, hi = -1, last_faster = -1, last_faster_end = -1; // batch indices
    cross_state cur = CS_EQUAL;
    double rmin = 0, rmax = 0;
    int compared = 0, ranges_faster = 0, crossovers = 0;
    for (int i = 0; i <= nb; i++) {
        cross_state st = CS_EQUAL;
        double ratio = 1;
        bool use = false;
        if (i < nb) {
            const results_train *ea = cmp_train_at(A, model, b[i]),
                                *eb = cmp_train_at(B, model, b[i]);
            bool fa = ea && ea->fits, fb = eb && eb->fits;
            bool na = ea ? !ea->fits : cmp_known_no_fit(A, model, b[i]);
            bool nb_ = eb ? !eb->fits : cmp_known_no_fit(B, model, b[i]);
            if (fa && fb) {
                use = true;
                st = ea->sps > eb->sps ? CS_A : ea->sps < eb->sps ? CS_B : CS_EQUAL;
                ratio = st == CS_B ? eb->sps / ea->sps : ea->sps / eb->sps;
            } else if (fa && nb_) {
                use = true, st = CS_ONLY_A;
            } else if (fb && na) {
                use = true, st = CS_ONLY_B;
            }
        }
        if (i < nb && !use) continue;
        // Close the current range when the state changes or at the end.
        if (lo >= 0 && (i == nb || st != cur)) {
            char range[64];
            if (lo == hi)
                snprintf(range, sizeof range, "batch %d", b[lo]);
            else
                snprintf(range, sizeof range, "batch %d-%d", b[lo], b[hi]);
            if (cur == CS_A || cur == CS_B) {
                const cmp_result *w = cur == CS_A ? A : B;
                if (last_faster >= 0 && last_faster != (int)cur) {
                    // The crossover: between the last batch of the previous faster range and the
                    // first of this one, interpolated where log(ratio) crosses 0 on log batch.
                    int b1 = b[last_faster_end], b2 = b[lo];
                    const results_train *a1 = cmp_train_at(A, model, b1),
                                        *o1 = cmp_train_at(B, model, b1);
                    const results_train *a2 = cmp_train_at(A, model, b2),
                                        *o2 = cmp_train_at(B, model, b2);
                    double r1 = log(a1->sps / o1->sps), r2 = log(a2->sps / o2->sps);
                    double t = r1 / (r1 - r2);
                    double bx = exp(log((double)b1) + t * (log((double)b2) - log((double)b1)));
                    doc_line(d, BLK_LINE,
                             "  crossover at batch %d: %s overtakes %s between batch %d and %d "
                             "(about %.3g by log-log interpolation)",
                             b2, w->legend, cur == CS_A ? B->legend : A->legend, b1, b2, bx);
                    crossovers++;
                }
                char ratios[48];
                if (lo == hi)
                    snprintf(ratios, sizeof ratios, "%.2fx", rmin);
                else
                    snprintf(ratios, sizeof ratios, "%.2fx-%.2fx", rmin, rmax);
                doc_line(d, BLK_LINE, "  %s faster at %s (%s)", w->legend, range, ratios);
                last_faster = (int)cur, last_faster_end = hi;
                ranges_faster++;
            } else if (cur == CS_EQUAL) {
                doc_line(d, BLK_LINE, "  equal at %s", range);
            } else {
                doc_line(d, BLK_LINE, "  only %s fits at %s",
                         cur == CS_ONLY_A ? A->legend : B->legend, range);
            }
            lo = -1;
        }
        if (i == nb) break;
        compared++;
        if (lo < 0) {
            lo = hi = i, cur = st, rmin = rmax = ratio;
        } else {
            hi = i;
            rmin = fmin(rmin, ratio), rmax = fmax(rmax, ratio);
        }
    }
    if (!compared)
        doc_line(d, BLK_LINE, "  no batch that both ran or that one ran and the other refused");
    else if (ranges_faster && !crossovers)
        doc_line(d, BLK_LINE, "  no crossover: %s is faster at every batch both ran",
                 last_faster == CS_A ? A->legend : B->legend);
}

static void crossover_section(doc *d, const cmp_result *rs, int n, char (*models)[64], int nm) {
    if (n < 2) return;
    doc_add(d, BLK_HEADING,
            "where one device overtakes another (faster: more samples/s at the same batch)");
    for (int m = 0; m < nm; m++) {
        int *b;
        int nb = cmp_batches_of(rs, n, models[m], &b);
        if (nb < 0) {
            d->oom = true;
            return;
        }
        for (int i = 0; i < n; i++)
            for (int j = i + 1; j < n; j++)
                if (cmp_has_model(&rs[i], models[m]) && cmp_has_model(&rs[j], models[m]))
                    crossover_lines(d, &rs[i], &rs[j], models[m], b, nb);
        free(b);
    }
}

// ---------------------------------------------------------------------------------------------
// The HTML page

static void base64(sbuf *b, const uint8_t *p, size_t n) {
    static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char out[4];
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16;
        if (i + 1 < n) v |= (uint32_t)p[i + 1] << 8;
        if (i + 2 < n) v |= p[i + 2];
        out[0] = tab[(v >> 18) & 63];
        out[1] = tab[(v >> 12) & 63];
        out[2] = i + 1 < n ? tab[(v >> 6) & 63] : '=';
        out[3] = i + 2 < n ? tab[v & 63] : '=';
        sb_add(b, out, 4);
    }
}

static vkt_status write_html(const char *path, const doc *d, const cmp_picture *pics,
                             const cmp_result *rs, int n) {
    sbuf b = {0};
    sb_printf(&b, "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
                  "<title>vktrain compare: ");
    for (int k = 0; k < n; k++) {
        if (k) sb_printf(&b, ", ");
        sb_html(&b, rs[k].legend);
    }
    sb_printf(&b, "</title>\n<style>\n"
                  "body{font-family:'DejaVu Sans',sans-serif;margin:2em;color:#1f2328;max-width:"
                  "1100px}\n"
                  "table{border-collapse:collapse;margin:0.5em 0 1.5em}\n"
                  "caption{text-align:left;font-weight:bold;padding:0.3em 0}\n"
                  "th,td{border:1px solid #d0d5db;padding:0.2em 0.6em;text-align:right}\n"
                  "th:first-child,td:first-child{text-align:left}\n"
                  "th{background:#f3f4f6}\nimg{display:block;margin:0.5em 0 1.5em;max-width:100%%}"
                  "\np.l{margin:0.1em 0;font-family:'DejaVu Sans Mono',monospace;"
                  "white-space:pre}\n</style>\n</head>\n<body>\n<h1>vktrain compare</h1>\n");
    for (int i = 0; i < d->n; i++) {
        const blk *k = &d->b[i];
        switch (k->kind) {
        case BLK_HEADING:
            sb_printf(&b, "<h2>");
            sb_html(&b, k->text);
            sb_printf(&b, "</h2>\n");
            break;
        case BLK_LINE:
            sb_printf(&b, "<p class=\"l\">");
            sb_html(&b, k->text);
            sb_printf(&b, "</p>\n");
            break;
        case BLK_TABLE:
            sb_printf(&b, "<table>\n<caption>");
            sb_html(&b, k->text);
            sb_printf(&b, "</caption>\n");
            for (int r = 0; r < k->nrows; r++) {
                sb_printf(&b, "<tr>");
                for (int c = 0; c < k->ncols; c++) {
                    sb_printf(&b, r ? "<td>" : "<th>");
                    sb_html(&b, k->cells[(size_t)r * k->ncols + c]);
                    sb_printf(&b, r ? "</td>" : "</th>");
                }
                sb_printf(&b, "</tr>\n");
            }
            sb_printf(&b, "</table>\n");
            break;
        case BLK_PICTURE: {
            const cmp_picture *p = &pics[k->picture];
            sb_printf(&b, "<img alt=\"");
            sb_html(&b, p->title);
            sb_printf(&b, "\" src=\"data:image/png;base64,");
            base64(&b, p->png, p->png_size);
            sb_printf(&b, "\">\n");
            break;
        }
        }
    }
    sb_printf(&b, "</body>\n</html>\n");
    vkt_status s =
        b.oom ? vkt_fail(VKT_ERR_HOST_MEMORY, "out of host memory writing %s", path) : VKT_OK;
    if (s == VKT_OK) {
        vkt_chunk c = {b.s, b.n};
        s = vkt_write_file_atomic(path, &c, 1, "HTML page");
    }
    free(b.s);
    return s;
}

// ---------------------------------------------------------------------------------------------
// Colours and names

// A device keeps its colour from one comparison to the next: the palette entry its label hashes
// to (FNV-1a), or the next free one when another device here has it already. Up to 8 devices
// draw from the palette's first 8 colours, the most distinct.
static void assign_colors(cmp_result *rs, int n) {
    bool used[CHART_PALETTE] = {false};
    int np = n <= 8 ? 8 : CHART_PALETTE;
    for (int k = 0; k < n; k++) {
        uint32_t h = 2166136261u;
        for (const unsigned char *p = (const unsigned char *)rs[k].res.label; *p; p++)
            h = (h ^ *p) * 16777619u;
        int c = (int)(h % (uint32_t)np);
        for (int t = 0; t < np && used[c]; t++)
            c = (c + 1) % np;
        used[c] = true;
        rs[k].color = chart_palette(c);
    }
}

// Two results of one device (two drivers' label, or two runs) are told apart by file name, and
// the later ones get square markers.
static void assign_legends(cmp_result *rs, int n) {
    for (int k = 0; k < n; k++) {
        bool dup = false, earlier = false;
        for (int j = 0; j < n; j++)
            if (j != k && !strcmp(rs[j].res.label, rs[k].res.label)) dup = true, earlier |= j < k;
        rs[k].marker = earlier ? CHART_SQUARE : CHART_DOT;
        if (!dup) {
            snprintf(rs[k].legend, sizeof rs[k].legend, "%s", rs[k].res.label);
            continue;
        }
        const char *base = strrchr(rs[k].res.path, '/');
        base = base ? base + 1 : rs[k].res.path;
        size_t len = strlen(base);
        if (len > 5 && !strcmp(base + len - 5, ".json")) len -= 5;
        snprintf(rs[k].legend, sizeof rs[k].legend, "%s (%.*s)", rs[k].res.label, (int)len, base);
    }
}

// ---------------------------------------------------------------------------------------------
// The command

static int usage_error(const char *msg, const char *arg) {
    fprintf(stderr,
            "vktrain compare: %s%s%s\n"
            "usage: vktrain compare A.json [B.json ...] [--png DIR] [--html FILE.html] "
            "[--size WxH] [--device SPEC] [--layout FILE.json]\n"
            "  (1 to %d results of `vktrain bench suite`; docs/COMPARING.md)\n",
            msg, arg ? " " : "", arg ? arg : "", CMP_MAX_RESULTS);
    return 2;
}

int cmd_compare(int argc, char **argv) {
    const char *files[CMP_MAX_RESULTS], *png_dir = NULL, *html = NULL, *layout = NULL,
                                        *device = NULL;
    int nfiles = 0, W = 1000, H = 620;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        bool has_value = i + 1 < argc;
        if (!strcmp(a, "--png") && has_value) {
            png_dir = argv[++i];
        } else if (!strcmp(a, "--html") && has_value) {
            html = argv[++i];
        } else if (!strcmp(a, "--layout") && has_value) {
            layout = argv[++i];
        } else if (!strcmp(a, "--device") && has_value) {
            device = argv[++i];
        } else if (!strcmp(a, "--size") && has_value) {
            const char *v = argv[++i];
            char *end;
            long w = strtol(v, &end, 10), h = 0;
            if (*end == 'x' || *end == 'X') h = strtol(end + 1, &end, 10);
            if (*end || w < 480 || h < 320 || w > 4096 || h > 4096)
                return usage_error("--size wants WIDTHxHEIGHT from 480x320 to 4096x4096, not", v);
            W = (int)w, H = (int)h;
        } else if (a[0] == '-' && a[1]) {
            static const char *const known[] = {"--png", "--html", "--layout", "--device",
                                                "--size"};
            bool is_known = false;
            for (size_t k = 0; k < sizeof known / sizeof *known; k++)
                is_known |= !strcmp(a, known[k]);
            return usage_error(is_known ? "missing value for" : "unknown option", a);
        } else if (nfiles == CMP_MAX_RESULTS) {
            return usage_error("at most 16 results at a time; one too many:", a);
        } else {
            files[nfiles++] = a;
        }
    }
    if (!nfiles)
        return usage_error("which results? give the JSON files `vktrain bench suite --out` wrote",
                           NULL);
    if (layout && !png_dir && !html)
        return usage_error("--layout says where the pictures put things; it needs --png or",
                           "--html");

    cmp_result rs[CMP_MAX_RESULTS] = {0};
    int n = 0;
    for (; n < nfiles; n++) {
        if (results_load(files[n], &results_for_compare, &rs[n].res) != VKT_OK) {
            int rc = cli_fail(vkt_error());
            for (int k = 0; k <= n; k++)
                results_free(&rs[k].res);
            return rc;
        }
    }
    assign_legends(rs, n);
    assign_colors(rs, n);

    // Models in order of first appearance.
    char models[MAX_MODELS][64];
    int nm = 0;
    for (int k = 0; k < n; k++)
        for (int i = 0; i < rs[k].res.ntr; i++) {
            bool seen = false;
            for (int m = 0; m < nm && !seen; m++)
                seen = !strcmp(models[m], rs[k].res.tr[i].model);
            if (seen) continue;
            if (nm == MAX_MODELS) {
                char msg[256];
                snprintf(msg, sizeof msg,
                         "%s: train[%d]: model %s is one more than the %d that compare draws",
                         rs[k].res.path, i, rs[k].res.tr[i].model, MAX_MODELS);
                for (int j = 0; j < n; j++)
                    results_free(&rs[j].res);
                return cli_fail(msg);
            }
            snprintf(models[nm++], 64, "%s", rs[k].res.tr[i].model);
        }

    bool draw = png_dir || html;
    int np = 2 + 2 * nm;
    cmp_picture *pics = calloc((size_t)np, sizeof *pics);
    doc d = {0};
    vkt_status s = pics ? VKT_OK : vkt_fail(VKT_ERR_HOST_MEMORY, "out of host memory");
    if (s == VKT_OK) {
        device_tables(&d, rs, n);
        matmul_tables(&d, rs, n);
        if (!cmp_matmul_picture(&pics[0], rs, n, false) ||
            !cmp_matmul_picture(&pics[1], rs, n, true))
            d.oom = true;
        blk *b = doc_add(&d, BLK_PICTURE, "");
        if (b) b->picture = 0;
        if ((b = doc_add(&d, BLK_PICTURE, ""))) b->picture = 1;
        for (int m = 0; m < nm; m++) {
            doc_line(&d, BLK_HEADING, "model %s", models[m]);
            model_table(&d, rs, n, models[m]);
            if (!cmp_model_pictures(&pics[2 + 2 * m], &pics[3 + 2 * m], rs, n, models[m]))
                d.oom = true;
            if ((b = doc_add(&d, BLK_PICTURE, ""))) b->picture = 2 + 2 * m;
            if ((b = doc_add(&d, BLK_PICTURE, ""))) b->picture = 3 + 2 * m;
        }
        crossover_section(&d, rs, n, models, nm);
        if (d.oom) s = vkt_fail(VKT_ERR_HOST_MEMORY, "out of host memory building the tables");
    }
    if (s == VKT_OK && draw) s = cmp_render_pictures(pics, np, device, W, H, layout != NULL);
    if (s == VKT_OK && png_dir) s = cmp_write_pngs(pics, np, png_dir);
    if (s == VKT_OK && html) s = write_html(html, &d, pics, rs, n);
    if (s == VKT_OK && layout) s = cmp_write_layout(layout, pics, np, rs, n);
    if (s == VKT_OK) {
        char(*names)[128] = calloc((size_t)np, sizeof *names);
        for (int i = 0; names && i < np; i++)
            snprintf(names[i], sizeof names[i], "%s", pics[i].file);
        printf("vktrain compare: %d result%s\n\n", n, n == 1 ? "" : "s");
        print_doc(stdout, &d, names ? png_dir : NULL, names);
        if (html) printf("wrote %s\n", html);
        free(names);
    }
    int rc = s == VKT_OK ? 0 : cli_fail(vkt_error());
    for (int i = 0; pics && i < np; i++)
        cmp_picture_free(&pics[i]);
    free(pics);
    doc_free(&d);
    for (int k = 0; k < n; k++)
        results_free(&rs[k].res);
    return rc;
}
