// compare_read.c: what `vktrain compare`'s tables and pictures read of the results (compare.h):
// a model's entry at a batch, the largest batch that fits, the saturation batch, the batches and
// matmul sizes of all results, and how numbers are printed. The files themselves are read and
// checked by results.c. Not here: output.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compare.h"

const results_train *cmp_train_at(const cmp_result *r, const char *model, int batch) {
    for (int i = 0; i < r->res.ntr; i++) {
        const results_train *t = &r->res.tr[i];
        if (t->batch == batch && !strcmp(t->model, model)) return t;
    }
    return NULL;
}

bool cmp_has_model(const cmp_result *r, const char *model) {
    for (int i = 0; i < r->res.ntr; i++)
        if (!strcmp(r->res.tr[i].model, model)) return true;
    return false;
}

// The largest batch measured that fits (0: none); *capped: no batch was refused, so the sweep
// stopped at its cap rather than at the memory.
int cmp_largest_fit(const cmp_result *r, const char *model, bool *capped) {
    int best = 0;
    *capped = true;
    for (int i = 0; i < r->res.ntr; i++) {
        const results_train *t = &r->res.tr[i];
        if (strcmp(t->model, model)) continue;
        if (t->fits && t->batch > best) best = t->batch;
        if (!t->fits) *capped = false;
    }
    return best;
}

// Whether model is known not to fit at batch: the file refused this batch or a smaller one.
bool cmp_known_no_fit(const cmp_result *r, const char *model, int batch) {
    for (int i = 0; i < r->res.ntr; i++) {
        const results_train *t = &r->res.tr[i];
        if (!strcmp(t->model, model) && !t->fits && t->batch <= batch) return true;
    }
    return false;
}

const results_sat *cmp_saturation_of(const cmp_result *r, const char *model) {
    for (int i = 0; i < r->res.nsat; i++)
        if (!strcmp(r->res.sat[i].model, model)) return &r->res.sat[i];
    return NULL;
}

bool cmp_is_lm(const cmp_result *rs, int n, const char *model) {
    for (int k = 0; k < n; k++)
        for (int i = 0; i < rs[k].res.ntr; i++)
            if (!strcmp(rs[k].res.tr[i].model, model) && rs[k].res.tr[i].tokens_per_s > 0)
                return true;
    return false;
}

double cmp_capacity(const cmp_result *r) {
    return r->res.mem_limit > 0 ? r->res.mem_limit : r->res.memory_bytes;
}

static int cmp_int(const void *a, const void *b) {
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

// The batches any result has for model, sorted, distinct; returns the count.
int cmp_batches_of(const cmp_result *rs, int n, const char *model, int **out) {
    int cap = 0;
    for (int k = 0; k < n; k++)
        cap += rs[k].res.ntr;
    int *b = malloc(((size_t)cap + 1) * sizeof *b), nb = 0;
    if (!b) return -1;
    for (int k = 0; k < n; k++)
        for (int i = 0; i < rs[k].res.ntr; i++)
            if (!strcmp(rs[k].res.tr[i].model, model)) b[nb++] = rs[k].res.tr[i].batch;
    qsort(b, (size_t)nb, sizeof *b, cmp_int);
    int m = 0;
    for (int i = 0; i < nb; i++)
        if (!m || b[m - 1] != b[i]) b[m++] = b[i];
    *out = b;
    return m;
}

void cmp_human_bytes(char *out, size_t size, double b) {
    static const char *unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int k = 0;
    while (k < 4 && b >= 1024)
        b /= 1024, k++;
    snprintf(out, size, k ? "%.1f %s" : "%.0f %s", b, unit[k]);
}

// Rates and GFLOP/s as the tables print them: whole numbers from 1000, one decimal from 10,
// three significant digits below.
void cmp_fmt_rate(char *out, size_t size, double v) {
    if (v >= 1000)
        snprintf(out, size, "%.0f", v);
    else if (v >= 10)
        snprintf(out, size, "%.1f", v);
    else
        snprintf(out, size, "%.3g", v);
}

static int mm_key_order(const void *a, const void *b) {
    const cmp_mm_key *x = a, *y = b;
    if (x->size != y->size) return (x->size > y->size) - (x->size < y->size);
    return strcmp(x->form, y->form);
}

const results_matmul *cmp_mm_at(const cmp_result *r, int size, const char *form) {
    for (int i = 0; i < r->res.nmm; i++) {
        const results_matmul *m = &r->res.mm[i];
        if (m->size == size && !strcmp(m->form, form)) return m;
    }
    return NULL;
}

// The (size, form) pairs any result measured, sorted; returns the count (-1: out of memory).
int cmp_mm_keys(const cmp_result *rs, int n, cmp_mm_key **out) {
    int cap = 0;
    for (int k = 0; k < n; k++)
        cap += rs[k].res.nmm;
    cmp_mm_key *keys = malloc(((size_t)cap + 1) * sizeof *keys);
    if (!keys) return -1;
    int m = 0;
    for (int k = 0; k < n; k++)
        for (int i = 0; i < rs[k].res.nmm; i++) {
            const results_matmul *e = &rs[k].res.mm[i];
            bool seen = false;
            for (int j = 0; j < m && !seen; j++)
                seen = keys[j].size == e->size && !strcmp(keys[j].form, e->form);
            if (!seen) {
                keys[m].size = e->size;
                snprintf(keys[m].form, sizeof keys[m].form, "%s", e->form);
                m++;
            }
        }
    qsort(keys, (size_t)m, sizeof *keys, mm_key_order);
    *out = keys;
    return m;
}
