// layers.c: model parallelism. The model's layers are cut into contiguous stages, one per
// device; each batch is cut into M micro-batches that flow through the stages: activations go
// forward from stage s to s+1, their gradients come back. One host thread drives each stage in
// the order its schedule gives (GPipe: every forward, then every backward; 1F1B: a warm-up of
// forwards, then one forward and one backward in turn), waiting for what it needs from its
// neighbours. Gradients accumulate over the micro-batches (each scaled by 1/B of the whole
// batch) and one update follows, so a step equals the single-device step on the whole batch.
//
// This is how a model too large for one device trains: a device holds only its stage's
// parameters, gradients, optimizer state and activations. The price is the pipeline bubble,
// (p-1)/(m+p-1) of the time for p stages and m micro-batches under GPipe, which the run
// measures per device.
//
// Transfers go through host memory (Vulkan has no cross-vendor peer-to-peer).
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan.h"
#include "strategy_internal.h"
#include "vkt_internal.h"

#define MAX_MICRO 4096

typedef struct op {
    bool backward;
    int mb;
} op;

typedef struct layers_impl {
    int S, M;
    int lo[VKT_MAX_DEVICES], hi[VKT_MAX_DEVICES];
    int slots[VKT_MAX_DEVICES];
    uint32_t mb_max;
    op *sched[VKT_MAX_DEVICES];
    int nsched[VKT_MAX_DEVICES];
    float *act_host[VKT_MAX_DEVICES];  // per stage: M x [mb_max, out_s] — stage outputs
    float *grad_host[VKT_MAX_DEVICES]; // per stage: M x [mb_max, in_s]  — input gradients
    float *scratch;                    // [mb_max, widest stage boundary], for evaluation
    // The step being run
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool *fwd_done, *bwd_done; // [S * M]
    bool failed;
    vkt_status err;
    char err_msg[1024];
    const float *x;
    const void *targets;
    uint32_t B, step;
    uint32_t rows[MAX_MICRO], row0[MAX_MICRO];
    double loss[MAX_MICRO];
} layers_impl;

static int slot_of(const layers_impl *L, int s, int mb) { return mb % L->slots[s]; }

// ---------------------------------------------------------------------------------------------
// Schedules

static void build_schedule(layers_impl *L, vkt_schedule kind, int s) {
    int M = L->M, n = 0;
    op *o = L->sched[s];
    if (kind == VKT_SCHEDULE_GPIPE) {
        for (int k = 0; k < M; k++)
            o[n++] = (op){false, k};
        for (int k = M - 1; k >= 0; k--)
            o[n++] = (op){true, k};
    } else {
        int warm = L->S - s - 1 < M ? L->S - s - 1 : M;
        for (int k = 0; k < warm; k++)
            o[n++] = (op){false, k};
        for (int i = 0; i < M - warm; i++) {
            o[n++] = (op){false, warm + i};
            o[n++] = (op){true, i};
        }
        for (int i = M - warm; i < M; i++)
            o[n++] = (op){true, i};
    }
    L->nsched[s] = n;
}

// ---------------------------------------------------------------------------------------------
// One stage's thread

typedef struct stage_arg {
    vkt_strategy *s;
    int stage;
} stage_arg;

static void stage_fail(layers_impl *L, vkt_status st) {
    pthread_mutex_lock(&L->mu);
    if (!L->failed) {
        L->failed = true;
        L->err = st;
        snprintf(L->err_msg, sizeof L->err_msg, "%s", vkt_error());
    }
    pthread_cond_broadcast(&L->cv);
    pthread_mutex_unlock(&L->mu);
}

// Waits until flag is set (or another stage failed); adds the wait to the device's stats.
static bool wait_flag(vkt_strategy *s, int d, bool *flag, int mb) {
    layers_impl *L = s->impl;
    int64_t t0 = vkt_trace_now_ns();
    pthread_mutex_lock(&L->mu);
    while (!*flag && !L->failed)
        pthread_cond_wait(&L->cv, &L->mu);
    bool ok = !L->failed;
    pthread_mutex_unlock(&L->mu);
    int64_t t1 = vkt_trace_now_ns();
    s->stats[d].wait_ns += (double)(t1 - t0);
    if (s->desc.trace && t1 - t0 > 1000)
        vkt_trace_add_event(s->desc.trace, s->trace_pid[d], "wait:neighbour", VKT_CAT_WAIT, t0,
                            t1 - t0, (int)L->step);
    (void)mb;
    return ok;
}

static void set_flag(layers_impl *L, bool *flag) {
    pthread_mutex_lock(&L->mu);
    *flag = true;
    pthread_cond_broadcast(&L->cv);
    pthread_mutex_unlock(&L->mu);
}

// Host copy in or out of a view, counted as communication.
static vkt_status transfer(vkt_strategy *s, int d, vkt_view v, float *host, uint64_t bytes,
                           bool to_device, const char *name) {
    int64_t t0 = vkt_trace_now_ns();
    vkt_status st = to_device ? vkt_buffer_write(v.buffer, v.offset, host, bytes)
                              : vkt_buffer_read(v.buffer, v.offset, host, bytes);
    int64_t t1 = vkt_trace_now_ns();
    s->stats[d].comm_ns += (double)(t1 - t0);
    s->stats[d].busy_ns += (double)(t1 - t0); // the device's row is occupied by the transfer
    s->stats[d].bytes_moved += bytes;
    layers_impl *L = s->impl;
    if (s->desc.trace)
        vkt_trace_add_event(s->desc.trace, s->trace_pid[d], name, VKT_CAT_COMMUNICATION, t0,
                            t1 - t0, (int)L->step);
    return st;
}

static vkt_status run_stage(vkt_strategy *s, int d) {
    layers_impl *L = s->impl;
    vkt_net *net = s->net[d];
    vkt_cmd *cmd = s->cmd[d];
    const vkt_model_desc *m = s->desc.model;
    bool first = d == 0, last = d == L->S - 1;
    uint32_t in = vkt_net_in_features(net), out = vkt_net_out_features(net);
    uint64_t tgt_per = vkt_model_targets_per_sample(m);
    float scale = 1.0f / (float)L->B;
    for (int i = 0; i < L->nsched[d]; i++) {
        op o = L->sched[d][i];
        int k = o.mb, slot = slot_of(L, d, k);
        uint32_t R = L->rows[k];
        if (R == 0) { // fewer rows than micro-batches: nothing to do, but neighbours wait on it
            set_flag(L, o.backward ? &L->bwd_done[d * L->M + k] : &L->fwd_done[d * L->M + k]);
            continue;
        }
        if (!o.backward) {
            if (first) {
                VKT_TRY(strategy_upload_input(net, slot, L->x + (uint64_t)L->row0[k] * in, R));
            } else {
                if (!wait_flag(s, d, &L->fwd_done[(d - 1) * L->M + k], k)) return VKT_OK;
                VKT_TRY(transfer(s, d, vkt_net_input(net, slot),
                                 L->act_host[d - 1] + (uint64_t)k * L->mb_max * in,
                                 (uint64_t)R * in * 4, true, "comm:recv_activation"));
            }
            if (last)
                VKT_TRY(strategy_upload_targets(
                    net, slot, (const char *)L->targets + (uint64_t)L->row0[k] * tgt_per * 4, R));
            VKT_TRY(vkt_cmd_begin(cmd, true));
            if (i == 0) vkt_net_record_zero_grads(net, cmd);
            strategy_set_phase(s, net, true, L->step, L->row0[k]);
            vkt_net_record_forward(net, cmd, slot, R);
            if (last) vkt_net_record_loss(net, cmd, slot, R, scale);
        } else {
            if (!last) {
                if (!wait_flag(s, d, &L->bwd_done[(d + 1) * L->M + k], k)) return VKT_OK;
                VKT_TRY(transfer(s, d, vkt_net_output_grad(net, slot),
                                 L->grad_host[d + 1] + (uint64_t)k * L->mb_max * out,
                                 (uint64_t)R * out * 4, true, "comm:recv_gradient"));
            }
            VKT_TRY(vkt_cmd_begin(cmd, true));
            if (i == 0) vkt_net_record_zero_grads(net, cmd);
            strategy_set_phase(s, net, true, L->step, L->row0[k]);
            vkt_net_record_backward(net, cmd, slot, R, !first);
        }
        VKT_TRY(vkt_net_status(net));
        VKT_TRY(vkt_cmd_end(cmd));
        VKT_TRY(vkt_cmd_submit(cmd));
        VKT_TRY(vkt_cmd_wait(cmd, VKT_WAIT_MS));
        VKT_TRY(strategy_account(s, d, (int)L->step));
        if (!o.backward) {
            if (last) {
                VKT_TRY(strategy_read_loss(net, slot, R, &L->loss[k]));
            } else {
                VKT_TRY(transfer(s, d, vkt_net_output(net, slot),
                                 L->act_host[d] + (uint64_t)k * L->mb_max * out,
                                 (uint64_t)R * out * 4, false, "comm:send_activation"));
            }
            set_flag(L, &L->fwd_done[d * L->M + k]);
        } else {
            if (!first)
                VKT_TRY(transfer(s, d, vkt_net_input_grad(net, slot),
                                 L->grad_host[d] + (uint64_t)k * L->mb_max * in,
                                 (uint64_t)R * in * 4, false, "comm:send_gradient"));
            set_flag(L, &L->bwd_done[d * L->M + k]);
        }
    }
    // Every micro-batch's gradient is in: one update.
    VKT_TRY(vkt_cmd_begin(cmd, true));
    vkt_net_record_step(net, cmd, L->step);
    VKT_TRY(vkt_net_status(net));
    VKT_TRY(vkt_cmd_end(cmd));
    VKT_TRY(vkt_cmd_submit(cmd));
    VKT_TRY(vkt_cmd_wait(cmd, VKT_WAIT_MS));
    return strategy_account(s, d, (int)L->step);
}

static void *stage_thread(void *p) {
    stage_arg *a = p;
    layers_impl *L = a->s->impl;
    int64_t t0 = vkt_trace_now_ns();
    vkt_status st = run_stage(a->s, a->stage);
    a->s->stats[a->stage].wall_ns += (double)(vkt_trace_now_ns() - t0);
    if (st != VKT_OK) stage_fail(L, st);
    return NULL;
}

// Cuts B rows into M micro-batches of near-equal size (the first B % M get one more row).
static void cut_batch(layers_impl *L, uint32_t B) {
    uint32_t base = B / L->M, extra = B % L->M, r0 = 0;
    for (int k = 0; k < L->M; k++) {
        L->rows[k] = base + ((uint32_t)k < extra ? 1 : 0);
        L->row0[k] = r0;
        r0 += L->rows[k];
    }
}

static vkt_status layers_step(vkt_strategy *s, const float *x, const void *targets, uint32_t B,
                              uint32_t step, double *loss_sum) {
    layers_impl *L = s->impl;
    L->x = x;
    L->targets = targets;
    L->B = B;
    L->step = step;
    L->failed = false;
    memset(L->fwd_done, 0, (size_t)L->S * L->M * sizeof(bool));
    memset(L->bwd_done, 0, (size_t)L->S * L->M * sizeof(bool));
    cut_batch(L, B);
    for (int k = 0; k < L->M; k++)
        L->loss[k] = 0;
    pthread_t th[VKT_MAX_DEVICES];
    stage_arg args[VKT_MAX_DEVICES];
    int started = 0;
    for (int d = 0; d < L->S; d++) {
        args[d] = (stage_arg){s, d};
        if (pthread_create(&th[d], NULL, stage_thread, &args[d]) != 0) {
            stage_fail(L, vkt_fail(VKT_ERR_HOST_MEMORY, "cannot start a pipeline stage thread"));
            break;
        }
        started++;
    }
    for (int d = 0; d < started; d++)
        pthread_join(th[d], NULL);
    if (L->failed) return vkt_fail(L->err, "%s", L->err_msg);
    double total = 0;
    for (int k = 0; k < L->M; k++)
        total += L->loss[k];
    *loss_sum = total;
    return VKT_OK;
}

// Evaluation: each micro-batch through the stages in turn, on this thread.
static vkt_status layers_eval(vkt_strategy *s, const float *x, const void *targets, uint32_t B,
                              double *loss_sum, uint64_t *correct) {
    layers_impl *L = s->impl;
    const vkt_model_desc *m = s->desc.model;
    uint64_t tgt_per = vkt_model_targets_per_sample(m);
    cut_batch(L, B);
    *loss_sum = 0;
    *correct = 0;
    float *buf = L->scratch;
    for (int k = 0; k < L->M; k++) {
        uint32_t R = L->rows[k];
        if (!R) continue;
        for (int d = 0; d < L->S; d++) {
            vkt_net *net = s->net[d];
            vkt_cmd *cmd = s->cmd[d];
            bool last = d == L->S - 1;
            uint32_t in = vkt_net_in_features(net);
            if (d == 0)
                VKT_TRY(strategy_upload_input(net, 0, x + (uint64_t)L->row0[k] * in, R));
            else
                VKT_TRY(strategy_upload_input(net, 0, buf, R));
            if (last)
                VKT_TRY(strategy_upload_targets(
                    net, 0, (const char *)targets + (uint64_t)L->row0[k] * tgt_per * 4, R));
            VKT_TRY(vkt_cmd_begin(cmd, false));
            if (last) {
                vkt_cmd_fill(cmd, vkt_net_correct(net), 0);
                vkt_cmd_barrier(cmd);
            }
            strategy_set_phase(s, net, false, 0, 0);
            vkt_net_record_forward(net, cmd, 0, R);
            if (last) {
                vkt_net_record_loss(net, cmd, 0, R, 1.0f);
                if (m->loss == VKT_LOSS_SOFTMAX_XENT) vkt_net_record_accuracy(net, cmd, 0, R);
            }
            VKT_TRY(vkt_net_status(net));
            VKT_TRY(vkt_cmd_end(cmd));
            VKT_TRY(vkt_cmd_submit(cmd));
            VKT_TRY(vkt_cmd_wait(cmd, VKT_WAIT_MS));
            if (!last) {
                vkt_view v = vkt_net_output(net, 0);
                VKT_TRY(vkt_buffer_read(v.buffer, v.offset, buf,
                                        (uint64_t)R * vkt_net_out_features(net) * 4));
            } else {
                double ls;
                VKT_TRY(strategy_read_loss(net, 0, R, &ls));
                *loss_sum += ls;
                if (m->loss == VKT_LOSS_SOFTMAX_XENT) {
                    uint32_t c;
                    vkt_view v = vkt_net_correct(net);
                    VKT_TRY(vkt_buffer_read(v.buffer, v.offset, &c, 4));
                    *correct += c;
                }
            }
        }
    }
    return VKT_OK;
}

static void layers_destroy(vkt_strategy *s) {
    layers_impl *L = s->impl;
    if (!L) return;
    for (int d = 0; d < VKT_MAX_DEVICES; d++) {
        free(L->sched[d]);
        free(L->act_host[d]);
        free(L->grad_host[d]);
    }
    free(L->scratch);
    free(L->fwd_done);
    free(L->bwd_done);
    pthread_mutex_destroy(&L->mu);
    pthread_cond_destroy(&L->cv);
    free(L);
    s->impl = NULL;
}

static const strategy_vtbl layers_vtbl = {
    .step = layers_step, .eval = layers_eval, .destroy = layers_destroy};

// ---------------------------------------------------------------------------------------------
// Placement

static vkt_net_desc stage_desc(const vkt_strategy *s, const layers_impl *L, int d, int lo, int hi) {
    return (vkt_net_desc){.model = s->desc.model,
                          .first_layer = lo,
                          .last_layer = hi,
                          .max_batch = L->mb_max,
                          .slots = L->slots[d],
                          .optim = s->desc.optim};
}

vkt_status strategy_layers_create(vkt_strategy *s) {
    const vkt_strategy_desc *d = &s->desc;
    const vkt_model_desc *m = d->model;
    if (d->ndevices < 2)
        return vkt_fail(VKT_ERR_ARG, "--strategy layers needs at least two devices in --device "
                                     "(the same one twice gives two logical devices)");
    int M = d->micro_batches > 0 ? d->micro_batches : 1;
    if (M > MAX_MICRO) return vkt_fail(VKT_ERR_ARG, "at most %d micro-batches", MAX_MICRO);
    if ((uint32_t)M > d->batch)
        return vkt_fail(VKT_ERR_ARG, "--micro-batches %d is more than the batch of %u rows", M,
                        d->batch);
    layers_impl *L = calloc(1, sizeof *L);
    if (!L) return vkt_fail(VKT_ERR_HOST_MEMORY, "out of host memory");
    s->impl = L;
    pthread_mutex_init(&L->mu, NULL);
    pthread_cond_init(&L->cv, NULL);
    L->S = d->ndevices;
    L->M = M;
    L->mb_max = (d->batch + M - 1) / M;
    for (int i = 0; i < L->S; i++)
        L->slots[i] = vkt_plan_stage_slots(L->S, i, M, d->schedule);
    VKT_TRY(strategy_open_devices(s));

    vkt_plan_input pi;
    strategy_plan_input(s, &pi);
    vkt_plan p;
    vkt_plan_layers(&pi, &p);
    if (!p.possible) return vkt_fail(VKT_ERR_ARG, "--strategy layers: %s", p.note);
    if (!p.fits) return strategy_refuse(s, &p, &pi); // the plan's words and numbers
    for (int i = 0; i < L->S; i++)
        L->lo[i] = p.lo[i], L->hi[i] = p.hi[i];
    size_t nflags = (size_t)(unsigned)L->S * (size_t)(unsigned)M;
    L->fwd_done = calloc(nflags, sizeof(bool));
    L->bwd_done = calloc(nflags, sizeof(bool));
    if (!L->fwd_done || !L->bwd_done) return vkt_fail(VKT_ERR_HOST_MEMORY, "out of host memory");
    uint32_t widest = 0;
    for (int i = 0; i < L->S; i++) {
        vkt_net_desc nd = stage_desc(s, L, i, L->lo[i], L->hi[i]);
        VKT_TRY(vkt_net_create(s->dev[i], s->ops[i], &nd, &s->net[i]));
        L->sched[i] = calloc((size_t)2 * M, sizeof(op));
        uint32_t in = m->layers[L->lo[i]].in_features, out = m->layers[L->hi[i] - 1].out_features;
        if (in > widest) widest = in;
        if (out > widest) widest = out;
        L->act_host[i] = malloc((size_t)M * L->mb_max * out * 4);
        L->grad_host[i] = malloc((size_t)M * L->mb_max * in * 4);
        if (!L->sched[i] || !L->act_host[i] || !L->grad_host[i])
            return vkt_fail(VKT_ERR_HOST_MEMORY, "out of host memory");
        build_schedule(L, d->schedule, i);
    }
    L->scratch = malloc((size_t)L->mb_max * widest * 4);
    if (!L->scratch) return vkt_fail(VKT_ERR_HOST_MEMORY, "out of host memory");
    s->vt = &layers_vtbl;
    return VKT_OK;
}

// Stage boundaries of a layers strategy (for reports); false for other strategies.
bool vkt_strategy_stage(const vkt_strategy *s, int d, int *lo, int *hi) {
    if (s->desc.kind != VKT_STRATEGY_LAYERS || !s->impl || d < 0 || d >= s->ndev) return false;
    const layers_impl *L = s->impl;
    *lo = L->lo[d];
    *hi = L->hi[d];
    return true;
}
