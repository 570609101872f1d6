// plan.c: see plan.h. Memory comes from vkt_net_estimate, the same layout arithmetic the
// networks allocate with, so the plan and the allocation cannot disagree.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan.h"

void vkt_plan_shard_rows(const float *share, int n, uint32_t B, uint32_t *rows) {
    double sum = 0, w[VKT_MAX_DEVICES];
    for (int i = 0; i < n; i++)
        sum += share[i] > 0 ? share[i] : 0;
    for (int i = 0; i < n; i++)
        w[i] = sum > 0 ? (share[i] > 0 ? share[i] : 0) : 1;
    if (!(sum > 0)) sum = n;
    uint32_t given = 0;
    double frac[VKT_MAX_DEVICES];
    for (int i = 0; i < n; i++) {
        double exact = B * w[i] / sum;
        rows[i] = (uint32_t)floor(exact);
        frac[i] = exact - rows[i];
        given += rows[i];
    }
    while (given < B) {
        int best = 0;
        for (int i = 1; i < n; i++)
            if (frac[i] > frac[best]) best = i;
        rows[best]++;
        frac[best] = -1;
        given++;
    }
}

int vkt_plan_stage_slots(int S, int s, int M, vkt_schedule schedule) {
    int inflight = schedule == VKT_SCHEDULE_1F1B ? S - s : M;
    return inflight < M ? inflight : M;
}

static vkt_net_memory estimate(const vkt_plan_input *in, int d, int lo, int hi, uint32_t rows,
                               int slots) {
    vkt_net_desc nd = {.model = in->model,
                       .first_layer = lo,
                       .last_layer = hi,
                       .max_batch = rows ? rows : 1,
                       .slots = slots,
                       .optim = in->optim};
    return vkt_net_estimate(&nd, in->align[d]);
}

// The compute of top-level layer l per sample (forward and backward FLOPs, as its kind counts
// them, its body included).
static double layer_cost(const vkt_model_desc *m, int l) {
    vkt_layer_cost c = vkt_model_cost(m, l, l + 1);
    return c.fwd_flops + c.bwd_flops;
}

static void finish(const vkt_plan_input *in, vkt_plan *p) {
    p->fits = p->possible;
    for (int d = 0; d < p->ndevices && p->possible; d++)
        if (p->need[d].total > in->limit[d]) p->fits = false;
}

void vkt_plan_single(const vkt_plan_input *in, vkt_plan *p) {
    memset(p, 0, sizeof *p);
    p->kind = VKT_STRATEGY_SINGLE;
    p->ndevices = 1;
    p->possible = true;
    p->need[0] = estimate(in, 0, 0, in->model->nlayers, in->batch, 1);
    p->rows[0] = in->batch;
    p->lo[0] = 0, p->hi[0] = in->model->nlayers;
    p->compute_share[0] = 1;
    finish(in, p);
    if (!p->fits) snprintf(p->note, sizeof p->note, "the whole model and batch do not fit on #0");
}

void vkt_plan_replicated(const vkt_plan_input *in, vkt_plan *p) {
    memset(p, 0, sizeof *p);
    p->kind = VKT_STRATEGY_REPLICATED;
    p->ndevices = in->ndevices;
    p->possible = in->ndevices >= 2;
    if (!p->possible) snprintf(p->note, sizeof p->note, "needs at least two devices");
    vkt_plan_shard_rows(in->balance, in->ndevices, in->batch, p->rows);
    for (int d = 0; d < in->ndevices; d++) {
        uint32_t rows = p->rows[d] < in->batch ? p->rows[d] + 1 : in->batch;
        p->need[d] = estimate(in, d, 0, in->model->nlayers, rows, 1);
        // The gradient exchange area, one packed buffer in host-visible memory.
        p->need[d].io += p->need[d].params;
        p->need[d].total += p->need[d].params;
        p->lo[d] = 0, p->hi[d] = in->model->nlayers;
        p->compute_share[d] = (double)p->rows[d] / in->batch;
    }
    finish(in, p);
    if (p->possible && !p->fits)
        snprintf(p->note, sizeof p->note,
                 "every device holds the whole model: more devices do "
                 "not lower what each one needs");
}

void vkt_plan_layers(const vkt_plan_input *in, vkt_plan *p) {
    memset(p, 0, sizeof *p);
    const vkt_model_desc *m = in->model;
    int n = m->nlayers, S = in->ndevices;
    int M = in->micro_batches > 0 ? in->micro_batches : 1;
    uint32_t mb = (in->batch + M - 1) / M;
    p->kind = VKT_STRATEGY_LAYERS;
    p->ndevices = S;
    if (S < 2 || n < S) {
        snprintf(p->note, sizeof p->note,
                 S < 2 ? "needs at least two devices" : "needs at least one layer per device");
        return;
    }
    p->possible = true;
    double total_cost = 0;
    for (int l = 0; l < n; l++)
        total_cost += layer_cost(m, l);
    if (in->split[0] > 0) {
        int at = 0;
        for (int d = 0; d < S; d++) {
            p->lo[d] = at;
            at += in->split[d];
            p->hi[d] = at;
        }
        if (at != n) {
            p->possible = false;
            snprintf(p->note, sizeof p->note, "--split gives %d layers in all, the model has %d",
                     at, n);
            return;
        }
    } else {
        // Dynamic programme over cut points: best[s][j] = the smallest largest-stage compute
        // that puts layers [0, j) on devices [0, s), every stage fitting its device.
        double *best = malloc(sizeof(double) * (size_t)(S + 1) * (size_t)(n + 1));
        int *from = malloc(sizeof(int) * (size_t)(S + 1) * (size_t)(n + 1));
        double *prefix = malloc(sizeof(double) * (size_t)(n + 1));
        if (!best || !from || !prefix) {
            free(best), free(from), free(prefix);
            p->possible = false;
            snprintf(p->note, sizeof p->note, "out of host memory");
            return;
        }
        prefix[0] = 0;
        for (int l = 0; l < n; l++)
            prefix[l + 1] = prefix[l] + layer_cost(m, l);
#define BEST(a, b) best[(a) * (n + 1) + (b)]
#define FROM(a, b) from[(a) * (n + 1) + (b)]
        for (int a = 0; a <= S; a++)
            for (int b = 0; b <= n; b++)
                BEST(a, b) = INFINITY, FROM(a, b) = -1;
        BEST(0, 0) = 0;
        for (int st = 1; st <= S; st++)
            for (int j = st; j <= n - (S - st); j++)
                for (int i = st - 1; i < j; i++) {
                    if (!isfinite(BEST(st - 1, i))) continue;
                    int slots = vkt_plan_stage_slots(S, st - 1, M, in->schedule);
                    if (estimate(in, st - 1, i, j, mb, slots).total > in->limit[st - 1]) continue;
                    double c = fmax(BEST(st - 1, i), prefix[j] - prefix[i]);
                    if (c < BEST(st, j)) BEST(st, j) = c, FROM(st, j) = i;
                }
        if (isfinite(BEST(S, n))) {
            int j = n;
            for (int st = S; st >= 1; st--) {
                int i = FROM(st, j);
                p->lo[st - 1] = i, p->hi[st - 1] = j;
                j = i;
            }
        } else {
            // Nothing fits: report the compute-balanced cut, so the sizes shown say how far off.
            for (int st = 0; st < S; st++) {
                p->lo[st] = st == 0 ? 0 : p->hi[st - 1];
                p->hi[st] = st == S - 1 ? n : p->lo[st] + 1;
                while (p->hi[st] < n - (S - st - 1) &&
                       prefix[p->hi[st]] < total_cost * (st + 1) / S)
                    p->hi[st]++;
            }
            snprintf(p->note, sizeof p->note, "no cut into %d contiguous stages fits every device",
                     S);
        }
#undef BEST
#undef FROM
        free(best), free(from), free(prefix);
    }
    for (int d = 0; d < S; d++) {
        int slots = vkt_plan_stage_slots(S, d, M, in->schedule);
        p->need[d] = estimate(in, d, p->lo[d], p->hi[d], mb, slots);
        double c = 0;
        for (int l = p->lo[d]; l < p->hi[d]; l++)
            c += layer_cost(m, l);
        p->compute_share[d] = total_cost > 0 ? c / total_cost : 0;
        p->rows[d] = in->batch;
    }
    finish(in, p);
}
