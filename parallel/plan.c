// plan.c: see plan.h. Memory comes from vkt_net_estimate, the same layout arithmetic the
// networks allocate with, plus what the strategies allocate beside their networks (the single
// strategy's upload areas, the replicas' gradient exchange), so the plan and the allocation
// cannot disagree; tests/test_plan.c and tests/test_cli_plan_grid.sh hold them to the byte.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "layer.h"
#include "plan.h"

static uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }
static double mib(uint64_t b) { return b / 1048576.0; }

void vkt_plan_input_device(vkt_plan_input *in, int d, const vkt_device_info *info,
                           uint64_t mem_limit) {
    // A --mem-limit above the device's memory is the device's memory, as vkt_device_create caps it.
    in->limit[d] = mem_limit && mem_limit < info->memory_bytes ? mem_limit : info->memory_bytes;
    in->align[d] = info->min_storage_buffer_offset_alignment < 16
                       ? 16
                       : info->min_storage_buffer_offset_alignment;
    in->max_alloc[d] = info->max_allocation_bytes;
    // As the device maps its memory (engine/core/device.c): CPU drivers and integrated GPUs with
    // a device-local, host-visible type.
    in->upload_areas[d] = !((info->type == VKT_DEVICE_CPU || info->type == VKT_DEVICE_INTEGRATED) &&
                            info->host_visible_device_local);
}

uint64_t vkt_plan_upload_bytes(const vkt_model_desc *m, uint32_t batch, uint64_t align) {
    // One area: the input rows (aligned), then the targets; two of them.
    uint64_t x = align_up((uint64_t)batch * m->layers[0].in_features * 4, align);
    uint64_t t = (uint64_t)batch * vkt_model_targets_per_sample(m) * 4;
    return 2 * align_up(x + t, align);
}

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

// The largest single buffer of a network: its packed parameters (gradients and optimizer state
// are each as large), its activations, or its buffers and scratch (io less the clipping word; the
// two together, which bounds either).
static uint64_t net_largest(const vkt_plan_input *in, int d, const vkt_net_memory *m) {
    uint64_t big = m->params > m->activations ? m->params : m->activations;
    uint64_t rest = m->io > in->align[d] ? m->io - in->align[d] : 0;
    return big > rest ? big : rest;
}

static bool fits_device(const vkt_plan_input *in, int d, const vkt_net_memory *m,
                        uint64_t largest) {
    return m->total <= in->limit[d] && (!in->max_alloc[d] || largest <= in->max_alloc[d]);
}

// The compute of top-level layer l per sample (forward and backward FLOPs, as its kind counts
// them, its body included).
static double layer_cost(const vkt_model_desc *m, int l) {
    vkt_layer_cost c = vkt_model_cost(m, l, l + 1);
    return c.fwd_flops + c.bwd_flops;
}

static void finish(const vkt_plan_input *in, vkt_plan *p) {
    p->fits = p->possible;
    for (int d = 0; d < p->ndevices && p->possible; d++) {
        p->device_fits[d] = fits_device(in, d, &p->need[d], p->largest[d]);
        if (!p->device_fits[d]) p->fits = false;
    }
}

void vkt_plan_single(const vkt_plan_input *in, vkt_plan *p) {
    memset(p, 0, sizeof *p);
    p->kind = VKT_STRATEGY_SINGLE;
    p->ndevices = 1;
    p->possible = true;
    p->need[0] = estimate(in, 0, 0, in->model->nlayers, in->batch, 1);
    p->largest[0] = net_largest(in, 0, &p->need[0]);
    if (in->upload_areas[0]) {
        uint64_t up = vkt_plan_upload_bytes(in->model, in->batch, in->align[0]);
        p->need[0].io += up;
        p->need[0].total += up;
        if (up / 2 > p->largest[0]) p->largest[0] = up / 2;
    }
    p->rows[0] = in->batch;
    p->net_rows[0] = in->batch;
    p->lo[0] = 0, p->hi[0] = in->model->nlayers;
    p->compute_share[0] = 1;
    finish(in, p);
    if (!p->fits) snprintf(p->note, sizeof p->note, "the whole model and batch do not fit on #0");
}

// The model's tensors (malloc'd, *n of them; NULL when out of host memory).
static vkt_net_tensor *model_tensors(const vkt_model_desc *m, int *n) {
    *n = vkt_model_tensors(m, 0, m->nlayers, NULL, 0);
    vkt_net_tensor *t = calloc((size_t)*n + 1, sizeof *t);
    if (t) vkt_model_tensors(m, 0, m->nlayers, t, *n);
    return t;
}

void vkt_plan_optim_shards(const vkt_model_desc *m, int n, uint64_t align, uint64_t *bounds) {
    int nt;
    vkt_net_tensor *t = model_tensors(m, &nt);
    uint64_t total = vkt_model_param_count(m), g = align >= 4 ? align / 4 : 1;
    bounds[0] = 0;
    for (int d = 1; d < n; d++) {
        uint64_t want = total * (uint64_t)d / (uint64_t)n, e = 0;
        bounds[d] = want;
        for (int i = 0; t && i < nt; i++) {
            if (t[i].state) continue;
            if (want < e + t[i].count) {
                bounds[d] = e + (want - e) / g * g;
                break;
            }
            e += t[i].count;
        }
    }
    bounds[n] = total;
    free(t);
}

// The byte offset of parameter element e (over the trained tensors in model order) in a packed
// buffer laid out with alignment align, as a network packs it; a tensor's first element is at its
// tensor's offset (the padding before it belongs to the element before), the parameter count at
// the packed size.
static uint64_t packed_offset(const vkt_net_tensor *t, int nt, uint64_t align, uint64_t e) {
    uint64_t off = 0, at = 0;
    for (int i = 0; i < nt; i++) {
        if (t[i].state) continue;
        if (e < at + t[i].count) return off + (e - at) * 4;
        at += t[i].count;
        off = vkt_net_next_offset(off, t[i].count * 4, align);
    }
    return off ? off : align;
}

static vkt_net_memory estimate_shard(const vkt_plan_input *in, int d, uint32_t rows, uint64_t lo,
                                     uint64_t hi) {
    vkt_net_desc nd = {.model = in->model,
                       .first_layer = 0,
                       .last_layer = in->model->nlayers,
                       .max_batch = rows ? rows : 1,
                       .slots = 1,
                       .optim = in->optim,
                       .shard_optim = true,
                       .optim_lo = lo,
                       .optim_hi = hi};
    return vkt_net_estimate(&nd, in->align[d]);
}

void vkt_plan_replicated(const vkt_plan_input *in, vkt_plan *p) {
    memset(p, 0, sizeof *p);
    p->kind = VKT_STRATEGY_REPLICATED;
    p->ndevices = in->ndevices;
    p->possible = in->ndevices >= 2;
    p->shard_optimizer = in->shard_optimizer;
    if (!p->possible) snprintf(p->note, sizeof p->note, "needs at least two devices");
    bool measured = in->ndevices > 0 && in->balance[0] < 0;
    vkt_plan_shard_rows(in->balance, in->ndevices, in->batch, p->rows);
    // --shard-optimizer: device d's optimizer state covers the elements [bounds[d], bounds[d+1])
    // only, at the bounds every device can view (the largest alignment).
    uint64_t bounds[VKT_MAX_DEVICES + 1], amax = 16;
    int nt = 0;
    vkt_net_tensor *t = NULL;
    if (p->shard_optimizer && in->ndevices >= 1) {
        for (int d = 0; d < in->ndevices; d++)
            if (in->align[d] > amax) amax = in->align[d];
        vkt_plan_optim_shards(in->model, in->ndevices, amax, bounds);
        t = model_tensors(in->model, &nt);
    }
    for (int d = 0; d < in->ndevices; d++) {
        // A shard of a smaller batch (an epoch's last) can round one row above its share of the
        // full one; measured shares are not known yet, so such a replica takes the whole batch.
        p->net_rows[d] = measured ? in->batch : p->rows[d] < in->batch ? p->rows[d] + 1 : in->batch;
        p->need[d] = p->shard_optimizer
                         ? estimate_shard(in, d, p->net_rows[d], bounds[d], bounds[d + 1])
                         : estimate(in, d, 0, in->model->nlayers, p->net_rows[d], 1);
        p->largest[d] = net_largest(in, d, &p->need[d]);
        // The gradient exchange area, one packed buffer in host-visible memory, in replica 0's
        // layout (its alignment) on every device (with --shard-optimizer it carries the updated
        // parameters back too).
        uint64_t xchg = p->need[0].params;
        p->need[d].io += xchg;
        p->need[d].total += xchg;
        if (xchg > p->largest[d]) p->largest[d] = xchg;
        p->lo[d] = 0, p->hi[d] = in->model->nlayers;
        p->compute_share[d] = (double)p->rows[d] / in->batch;
        // Bytes moved per step (plan.h gives the formulas).
        p->comm_bytes[d] = 2 * xchg;
        if (p->shard_optimizer && t)
            p->comm_bytes[d] += packed_offset(t, nt, in->align[0], bounds[d + 1]) -
                                packed_offset(t, nt, in->align[0], bounds[d]);
    }
    free(t);
    finish(in, p);
    if (p->possible && !p->fits)
        snprintf(p->note, sizeof p->note, "%s",
                 p->shard_optimizer
                     ? "every device holds the whole parameters, gradients and activations: "
                       "sharding cuts only the optimizer state by the number of devices"
                     : "every device holds the whole model: more devices do not lower what each "
                       "one needs");
}

// The copies of the model the devices of a stage hold: the whole model, or (layers,tensor)
// rank k's slices on the stage's k-th device, with the staging of their reductions.
typedef struct stage_models {
    int T;
    const vkt_model_desc *m[VKT_MAX_DEVICES];
    vkt_model_desc split[VKT_MAX_DEVICES];
    uint64_t staging;
} stage_models;

static bool stage_models_make(const vkt_plan_input *in, uint32_t rows, stage_models *sm) {
    memset(sm, 0, sizeof *sm);
    sm->T = in->tensor_size > 1 ? in->tensor_size : 1;
    if (sm->T == 1) {
        sm->m[0] = in->model;
        return true;
    }
    sm->staging = 4; // the clipping norm's reduction (tp_staging_bytes)
    for (int k = 0; k < sm->T; k++) {
        if (vkt_tensor_model(in->model, k, sm->T, &sm->split[k]) != VKT_OK) return false;
        sm->m[k] = &sm->split[k];
        vkt_tensor_comm c = vkt_tensor_comm_of(&sm->split[k], rows);
        if (c.largest > sm->staging) sm->staging = c.largest;
    }
    return true;
}

static void stage_models_free(stage_models *sm) {
    for (int k = 0; k < sm->T && sm->T > 1; k++)
        vkt_model_free(&sm->split[k]);
}

// Device d's need as a device of stage (d / T) holding layers [lo, hi).
static vkt_net_memory stage_need(const vkt_plan_input *in, const stage_models *sm, int d, int lo,
                                 int hi, uint32_t rows, int slots) {
    vkt_net_desc nd = {.model = sm->m[d % sm->T],
                       .first_layer = lo,
                       .last_layer = hi,
                       .max_batch = rows ? rows : 1,
                       .slots = slots,
                       .optim = in->optim};
    vkt_net_memory m = vkt_net_estimate(&nd, in->align[d]);
    m.io += sm->staging;
    m.total += sm->staging;
    return m;
}

static uint64_t stage_largest(const vkt_plan_input *in, const stage_models *sm, int d,
                              const vkt_net_memory *m) {
    uint64_t big = net_largest(in, d, m);
    return sm->staging > big ? sm->staging : big;
}

// Whether every device of stage st fits layers [lo, hi); *em: the first one that does not (or
// the stage's first device's need).
static bool stage_fits(const vkt_plan_input *in, const stage_models *sm, int st, int lo, int hi,
                       uint32_t rows, int slots, vkt_net_memory *em) {
    for (int k = 0; k < sm->T; k++) {
        int d = st * sm->T + k;
        vkt_net_memory m = stage_need(in, sm, d, lo, hi, rows, slots);
        if (k == 0) *em = m;
        if (!fits_device(in, d, &m, stage_largest(in, sm, d, &m))) {
            *em = m;
            return false;
        }
    }
    return true;
}

void vkt_plan_layers(const vkt_plan_input *in, vkt_plan *p) {
    memset(p, 0, sizeof *p);
    const vkt_model_desc *m = in->model;
    int T = in->tensor_size > 1 ? in->tensor_size : 1;
    int n = m->nlayers, S = in->ndevices / T;
    int M = in->micro_batches > 0 ? in->micro_batches : 1;
    uint32_t mb = (in->batch + M - 1) / M;
    p->kind = T > 1 ? VKT_STRATEGY_LAYERS_TENSOR : VKT_STRATEGY_LAYERS;
    p->ndevices = in->ndevices;
    if (T > 1 && (in->ndevices % T || S < 2)) {
        snprintf(p->note, sizeof p->note,
                 "needs a whole number of stages of --tensor-size %d devices each, at least two "
                 "(%d devices were given)",
                 T, in->ndevices);
        return;
    }
    if (S < 2 || n < S) {
        snprintf(p->note, sizeof p->note,
                 S < 2 ? "needs at least two devices" : "needs at least one layer per device");
        return;
    }
    stage_models sm;
    if (!stage_models_make(in, mb, &sm)) {
        stage_models_free(&sm);
        snprintf(p->note, sizeof p->note, "out of host memory");
        return;
    }
    p->possible = true;
    double total_cost = 0;
    for (int l = 0; l < n; l++)
        total_cost += layer_cost(m, l);
    int lo[VKT_MAX_DEVICES], hi[VKT_MAX_DEVICES]; // per stage
    if (in->split[0] > 0) {
        int at = 0;
        for (int st = 0; st < S; st++) {
            lo[st] = at;
            at += in->split[st];
            hi[st] = at;
        }
        if (at != n) {
            p->possible = false;
            snprintf(p->note, sizeof p->note, "--split gives %d layers in all, the model has %d",
                     at, n);
            stage_models_free(&sm);
            return;
        }
    } else {
        // Dynamic programme over cut points: best[s][j] = the smallest largest-stage compute
        // that puts layers [0, j) on stages [0, s), every stage fitting its devices.
        double *best = malloc(sizeof(double) * (size_t)(S + 1) * (size_t)(n + 1));
        int *from = malloc(sizeof(int) * (size_t)(S + 1) * (size_t)(n + 1));
        double *prefix = malloc(sizeof(double) * (size_t)(n + 1));
        if (!best || !from || !prefix) {
            free(best), free(from), free(prefix);
            stage_models_free(&sm);
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
                    vkt_net_memory em;
                    if (!stage_fits(in, &sm, st - 1, i, j, mb, slots, &em)) continue;
                    double c = fmax(BEST(st - 1, i), prefix[j] - prefix[i]);
                    if (c < BEST(st, j)) BEST(st, j) = c, FROM(st, j) = i;
                }
        if (isfinite(BEST(S, n))) {
            int j = n;
            for (int st = S; st >= 1; st--) {
                int i = FROM(st, j);
                lo[st - 1] = i, hi[st - 1] = j;
                j = i;
            }
        } else {
            // Nothing fits: report the compute-balanced cut, so the sizes shown say how far off.
            for (int st = 0; st < S; st++) {
                lo[st] = st == 0 ? 0 : hi[st - 1];
                hi[st] = st == S - 1 ? n : lo[st] + 1;
                while (hi[st] < n - (S - st - 1) && prefix[hi[st]] < total_cost * (st + 1) / S)
                    hi[st]++;
            }
            snprintf(p->note, sizeof p->note, "no cut into %d contiguous stages fits every device",
                     S);
            // A layer that fits no stage alone cannot be placed by any cut: only splitting its
            // weights helps.
            for (int l = 0; l < n; l++) {
                bool fits_one = false;
                vkt_net_memory em = {0};
                for (int st = 0; st < S && !fits_one; st++)
                    fits_one = stage_fits(in, &sm, st, l, l + 1, mb,
                                          vkt_plan_stage_slots(S, st, M, in->schedule), &em);
                if (fits_one) continue;
                snprintf(p->note, sizeof p->note,
                         "layer %d (%s) alone needs %.1f MiB (parameters %.1f, gradients %.1f, "
                         "optimizer state %.1f), more than any device has: stages hold whole "
                         "layers, and --strategy tensor splits a layer's weights across the "
                         "devices",
                         l, m->layers[l].type->name, mib(em.total), mib(em.params), mib(em.grads),
                         mib(em.optim));
                break;
            }
        }
#undef BEST
#undef FROM
        free(best), free(from), free(prefix);
    }
    for (int d = 0; d < in->ndevices; d++) {
        int st = d / T, slots = vkt_plan_stage_slots(S, st, M, in->schedule);
        p->lo[d] = lo[st], p->hi[d] = hi[st];
        p->need[d] = stage_need(in, &sm, d, lo[st], hi[st], mb, slots);
        p->largest[d] = stage_largest(in, &sm, d, &p->need[d]);
        p->net_rows[d] = mb;
        double c = 0;
        for (int l = lo[st]; l < hi[st]; l++)
            c += layer_cost(sm.m[d % T], l);
        p->compute_share[d] = total_cost > 0 ? c / total_cost : 0;
        p->rows[d] = in->batch;
        // Each boundary the stage touches: the batch's activations one way, their gradients the
        // other (what the transfers count), at this device's width there.
        const vkt_model_desc *dm = sm.m[d % T];
        if (st > 0) p->comm_bytes[d] += 2ull * 4 * in->batch * dm->layers[lo[st]].in_features;
        if (st < S - 1)
            p->comm_bytes[d] += 2ull * 4 * in->batch * dm->layers[hi[st] - 1].out_features;
        // layers,tensor: the reductions of the stage's split layers, over the micro-batches.
        if (T > 1)
            p->comm_bytes[d] +=
                2 * vkt_tensor_comm_range(dm, lo[st], hi[st], st > 0, in->batch).bytes;
    }
    stage_models_free(&sm);
    finish(in, p);
}

void vkt_plan_tensor(const vkt_plan_input *in, vkt_plan *p) {
    memset(p, 0, sizeof *p);
    const vkt_model_desc *m = in->model;
    int n = in->ndevices;
    // replicated,tensor when tensor_size > 1: G replicas of T devices, the batch sharded.
    bool composed = in->tensor_size > 1;
    int T = composed ? in->tensor_size : n, G = composed ? n / T : 1;
    p->kind = composed ? VKT_STRATEGY_REPLICATED_TENSOR : VKT_STRATEGY_TENSOR;
    p->ndevices = n;
    if (n < 2) {
        snprintf(p->note, sizeof p->note, "needs at least two devices");
        return;
    }
    if (composed && (n % T || G < 2)) {
        snprintf(p->note, sizeof p->note,
                 "needs a whole number of replicas of --tensor-size %d devices each, at least two "
                 "(%d devices were given)",
                 T, n);
        return;
    }
    // Each replica's rows for a full batch; a smaller batch's shard is never larger.
    uint32_t rows = (in->batch + (uint32_t)G - 1) / (uint32_t)G;
    vkt_layer_cost whole = vkt_model_cost(m, 0, m->nlayers);
    double total = whole.fwd_flops + whole.bwd_flops;
    // The staging every device holds is the largest part of any device's reductions.
    vkt_model_desc split[VKT_MAX_DEVICES] = {0};
    vkt_tensor_comm c[VKT_MAX_DEVICES] = {0};
    uint64_t staging = 4; // at least the clipping norm's (tp_staging_bytes)
    bool ok = true;
    for (int k = 0; k < T && ok; k++) {
        ok = vkt_tensor_model(m, k, T, &split[k]) == VKT_OK;
        if (!ok) break;
        c[k] = vkt_tensor_comm_of(&split[k], rows);
        if (c[k].largest > staging) staging = c[k].largest;
    }
    if (!ok) {
        snprintf(p->note, sizeof p->note, "out of host memory");
    } else if (c[0].split_layers == 0) {
        snprintf(p->note, sizeof p->note,
                 "no layer of %s can be split over %d devices (a dense layer followed by "
                 "another past elementwise layers only, with at least %d outputs, or an "
                 "attention layer with at least %d heads): every device would hold the whole "
                 "model",
                 m->name, T, T, T);
    } else {
        p->possible = true;
        p->reductions = c[0].reductions;
        for (int d = 0; d < n; d++) {
            vkt_net_desc nd = {.model = &split[d % T],
                               .first_layer = 0,
                               .last_layer = m->nlayers,
                               .max_batch = rows,
                               .slots = 1,
                               .optim = in->optim};
            p->need[d] = vkt_net_estimate(&nd, in->align[d]);
            p->largest[d] = net_largest(in, d, &p->need[d]);
            p->need[d].io += staging;
            p->need[d].total += staging;
            if (staging > p->largest[d]) p->largest[d] = staging;
            p->comm_bytes[d] = 2 * c[d % T].bytes;
            if (G > 1) {
                // The gradient exchange: the device's packed gradients in host-visible memory,
                // out and back each step.
                p->need[d].io += p->need[d].params;
                p->need[d].total += p->need[d].params;
                p->comm_bytes[d] += 2 * p->need[d].params;
            }
            p->rows[d] = in->batch / (uint32_t)G;
            p->net_rows[d] = rows;
            p->lo[d] = 0, p->hi[d] = m->nlayers;
            vkt_layer_cost lc = vkt_model_cost(&split[d % T], 0, m->nlayers);
            p->compute_share[d] = total > 0 ? (lc.fwd_flops + lc.bwd_flops) / total / G : 0;
        }
        finish(in, p);
        if (!p->fits)
            snprintf(p->note, sizeof p->note,
                     "the whole layers, the activations of the whole batch and the slices do "
                     "not fit");
    }
    for (int k = 0; k < T; k++)
        vkt_model_free(&split[k]);
}

// ---------------------------------------------------------------------------------------------
// Refusals

// "N bytes (X MiB: parameters a, gradients b, optimizer state c, activations d, <io> e MiB)"
static void need_text(const vkt_net_memory *m, const char *io_name, char *buf, size_t size) {
    snprintf(buf, size,
             "%llu bytes (%.1f MiB: parameters %.1f, gradients %.1f, optimizer state %.1f, "
             "activations %.1f, %s %.1f MiB)",
             (unsigned long long)m->total, mib(m->total), mib(m->params), mib(m->grads),
             mib(m->optim), mib(m->activations), io_name, mib(m->io));
}

void vkt_plan_refusal(const vkt_plan *p, const vkt_plan_input *in, const char *const *labels,
                      char *buf, size_t size) {
    buf[0] = 0;
    if (!p->possible) {
        snprintf(buf, size, "%s: %s", vkt_strategy_name(p->kind), p->note);
        return;
    }
    int d = 0;
    while (d < p->ndevices && p->device_fits[d])
        d++;
    if (d == p->ndevices) return;
    const vkt_net_memory *m = &p->need[d];
    const char *who = labels[d];
    int tsize = in->tensor_size > 1 ? in->tensor_size : 1; // devices per stage
    char need[256], has[96];
    if (m->total > in->limit[d]) {
        const char *io =
            p->kind == VKT_STRATEGY_SINGLE && in->upload_areas[d] ? "upload areas and other"
            : p->kind == VKT_STRATEGY_REPLICATED                  ? "exchange and other"
            : p->kind == VKT_STRATEGY_TENSOR || p->kind == VKT_STRATEGY_REPLICATED_TENSOR
                ? "staging and other"
                : "other";
        need_text(m, io, need, sizeof need);
        snprintf(has, sizeof has, "%llu bytes (%.1f MiB)", (unsigned long long)in->limit[d],
                 mib(in->limit[d]));
    } else {
        snprintf(need, sizeof need, "one allocation of %llu bytes (%.1f MiB)",
                 (unsigned long long)p->largest[d], mib(p->largest[d]));
        snprintf(has, sizeof has, "at most %llu bytes (%.1f MiB) at once",
                 (unsigned long long)in->max_alloc[d], mib(in->max_alloc[d]));
    }
    switch (p->kind) {
    case VKT_STRATEGY_SINGLE:
        snprintf(buf, size,
                 "single: %s needs %s for the whole model and batch but has %s; lower --batch, "
                 "raise --mem-limit, or split the model over several devices with --strategy "
                 "layers (or its weights with --strategy tensor)",
                 who, need, has);
        break;
    case VKT_STRATEGY_REPLICATED:
        if (p->shard_optimizer)
            snprintf(buf, size,
                     "replicated --shard-optimizer: %s needs %s for a replica with 1/%d of the "
                     "optimizer state but has %s; the parameters, gradients and activations are "
                     "whole on every device: --strategy layers splits the model across devices",
                     who, need, p->ndevices, has);
        else
            snprintf(buf, size,
                     "replicated: %s needs %s for a whole replica but has %s; every device holds "
                     "the whole model, so more devices do not help: --strategy layers splits the "
                     "model across devices",
                     who, need, has);
        break;
    case VKT_STRATEGY_LAYERS:
    case VKT_STRATEGY_LAYERS_TENSOR:
        if (in->split[0] > 0)
            snprintf(buf, size,
                     "%s: stage %d (layers %d to %d) needs %s on %s, which has %s; change "
                     "--split or use --split auto",
                     vkt_strategy_name(p->kind), d / tsize, p->lo[d], p->hi[d] - 1, need, who, has);
        else
            snprintf(buf, size,
                     "%s: model %s does not fit on these %d devices even split into stages "
                     "(%s): in the cut that balances their compute, stage %d (layers %d to %d) "
                     "needs %s on %s, which has %s; add devices, raise --mem-limit, or lower "
                     "--batch",
                     vkt_strategy_name(p->kind), in->model->name, p->ndevices, p->note, d / tsize,
                     p->lo[d], p->hi[d] - 1, need, who, has);
        break;
    case VKT_STRATEGY_TENSOR:
    case VKT_STRATEGY_REPLICATED_TENSOR:
        snprintf(buf, size,
                 "%s: %s needs %s for its slices of the split layers, the whole of the others "
                 "and the activations of its batch, but has %s; add devices (the slices shrink "
                 "with them), lower --batch, or raise --mem-limit",
                 vkt_strategy_name(p->kind), who, need, has);
        break;
    }
}
