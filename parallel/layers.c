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
//
// layers,tensor (--tensor-size T): each stage is a group of T devices that hold the T slices of
// the stage's layers (parallel/tensor.c), each driven by its own thread through the stage's
// schedule, reducing within the group. Rank k of a stage takes its input from rank k of the stage
// before and sends its input gradient back to it: a boundary inside a split pair carries each
// rank's slice, one between whole layers the same activation on every rank. Arrays below are per
// device; with T = 1 a device is a stage.
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
    int S, M, T; // stages, micro-batches, devices per stage (T > 1: layers,tensor)
    int lo[VKT_MAX_DEVICES], hi[VKT_MAX_DEVICES]; // each device's stage's layers
    int slots[VKT_MAX_DEVICES];
    uint32_t mb_max;
    op *sched[VKT_MAX_DEVICES];
    int nsched[VKT_MAX_DEVICES];
    float *act_host[VKT_MAX_DEVICES];  // per device: M x [mb_max, out_s] — stage outputs
    float *grad_host[VKT_MAX_DEVICES]; // per device: M x [mb_max, in_s]  — input gradients
    float *scratch;                    // [mb_max, widest stage boundary], for evaluation
    // layers,tensor: each rank's copy of the model, each stage's group, the whole tensors; and a
    // pass that only runs forward (evaluation, or prediction into predict_out).
    vkt_model_desc model[VKT_MAX_DEVICES];
    tp_group *group[VKT_MAX_DEVICES];
    tp_map *map;
    bool forward_only, accuracy;
    float *predict_out;
    uint32_t correct[MAX_MICRO];
    // --clip: each stage's squared gradient norm (its first device's, its group's sum), met by
    // every device before the update: the global norm is the stages' sum.
    double norm_part[VKT_MAX_DEVICES];
    int norm_arrived;
    bool norm_done;
    float norm_total;
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

static int slot_of(const layers_impl *L, int d, int mb) { return mb % L->slots[d]; }
static int stage_of(const layers_impl *L, int d) { return d / L->T; }

// ---------------------------------------------------------------------------------------------
// Schedules

static void build_schedule(layers_impl *L, vkt_schedule kind, int d) {
    int M = L->M, n = 0, s = stage_of(L, d);
    op *o = L->sched[d];
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
    L->nsched[d] = n;
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
    // A device of another stage may be waiting in its group's reduction.
    for (int g = 0; g < L->S && L->T > 1; g++)
        tp_group_fail(L->group[g], st);
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

// Device d's stage's squared gradient norm (part, the same on every device of the stage); waits
// for every stage's and gives their sum, in stage order. False when another device failed.
static bool meet_norms(vkt_strategy *s, int d, float part, float *total) {
    layers_impl *L = s->impl;
    int64_t t0 = vkt_trace_now_ns();
    pthread_mutex_lock(&L->mu);
    if (d % L->T == 0) L->norm_part[stage_of(L, d)] = part;
    if (++L->norm_arrived == s->ndev) {
        double sum = 0;
        for (int st = 0; st < L->S; st++)
            sum += L->norm_part[st];
        L->norm_total = (float)sum;
        L->norm_done = true;
        pthread_cond_broadcast(&L->cv);
    }
    while (!L->norm_done && !L->failed)
        pthread_cond_wait(&L->cv, &L->mu);
    bool ok = L->norm_done;
    *total = L->norm_total;
    pthread_mutex_unlock(&L->mu);
    s->stats[d].wait_ns += (double)(vkt_trace_now_ns() - t0);
    return ok;
}

static vkt_status run_stage(vkt_strategy *s, int d) {
    layers_impl *L = s->impl;
    vkt_net *net = s->net[d];
    vkt_cmd *cmd = s->cmd[d];
    const vkt_model_desc *m = s->desc.model;
    int st = stage_of(L, d), T = L->T;
    bool first = st == 0, last = st == L->S - 1, train = !L->forward_only;
    // Rank 0 of the last stage reports what every rank of it computed alike.
    bool reports = last && d % T == 0;
    uint32_t in = vkt_net_in_features(net), out = vkt_net_out_features(net);
    uint64_t tgt_per = vkt_model_targets_per_sample(m);
    float scale = train ? 1.0f / (float)L->B : 1.0f;
    int nops = train ? L->nsched[d] : L->M;
    for (int i = 0; i < nops; i++) {
        op o = train ? L->sched[d][i] : (op){false, i};
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
                if (!wait_flag(s, d, &L->fwd_done[(d - T) * L->M + k], k)) return VKT_OK;
                VKT_TRY(transfer(s, d, vkt_net_input(net, slot),
                                 L->act_host[d - T] + (uint64_t)k * L->mb_max * in,
                                 (uint64_t)R * in * 4, true, "comm:recv_activation"));
            }
            if (last && L->targets)
                VKT_TRY(strategy_upload_targets(
                    net, slot, (const char *)L->targets + (uint64_t)L->row0[k] * tgt_per * 4, R));
            VKT_TRY(vkt_cmd_begin(cmd, train));
            if (train && i == 0) vkt_net_record_zero_grads(net, cmd);
            if (last && L->accuracy) {
                vkt_cmd_fill(cmd, vkt_net_correct(net), 0);
                vkt_cmd_barrier(cmd);
            }
            strategy_set_phase(s, net, train, train ? L->step : 0, train ? L->row0[k] : 0);
            vkt_net_record_forward(net, cmd, slot, R);
            if (last && L->targets) vkt_net_record_loss(net, cmd, slot, R, scale);
            if (last && L->accuracy) vkt_net_record_accuracy(net, cmd, slot, R);
        } else {
            if (!last) {
                if (!wait_flag(s, d, &L->bwd_done[(d + T) * L->M + k], k)) return VKT_OK;
                VKT_TRY(transfer(s, d, vkt_net_output_grad(net, slot),
                                 L->grad_host[d + T] + (uint64_t)k * L->mb_max * out,
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
        if (train) VKT_TRY(strategy_account(s, d, (int)L->step));
        if (!o.backward) {
            if (reports && L->targets) VKT_TRY(strategy_read_loss(net, slot, R, &L->loss[k]));
            if (reports && L->accuracy) {
                vkt_view v = vkt_net_correct(net);
                VKT_TRY(vkt_buffer_read(v.buffer, v.offset, &L->correct[k], 4));
            }
            if (reports && L->predict_out) {
                vkt_view v = vkt_net_output(net, slot);
                VKT_TRY(vkt_buffer_read(v.buffer, v.offset,
                                        L->predict_out + (uint64_t)L->row0[k] * out,
                                        (uint64_t)R * out * 4));
            }
            if (!last)
                VKT_TRY(transfer(s, d, vkt_net_output(net, slot),
                                 L->act_host[d] + (uint64_t)k * L->mb_max * out,
                                 (uint64_t)R * out * 4, false, "comm:send_activation"));
            set_flag(L, &L->fwd_done[d * L->M + k]);
        } else {
            if (!first)
                VKT_TRY(transfer(s, d, vkt_net_input_grad(net, slot),
                                 L->grad_host[d] + (uint64_t)k * L->mb_max * in,
                                 (uint64_t)R * in * 4, false, "comm:send_gradient"));
            set_flag(L, &L->bwd_done[d * L->M + k]);
        }
    }
    if (!train) return VKT_OK;
    // Every micro-batch's gradient is in: one update, clipped by the norm of every stage's.
    float sumsq = 0;
    if (s->desc.optim.clip > 0) {
        VKT_TRY(vkt_cmd_begin(cmd, true));
        vkt_net_record_grad_sumsq(net, cmd);
        VKT_TRY(vkt_net_status(net));
        VKT_TRY(vkt_cmd_end(cmd));
        VKT_TRY(vkt_cmd_submit(cmd));
        VKT_TRY(vkt_cmd_wait(cmd, VKT_WAIT_MS));
        VKT_TRY(strategy_account(s, d, (int)L->step));
        float part;
        VKT_TRY(vkt_net_read_grad_sumsq(net, &part));
        if (!meet_norms(s, d, part, &sumsq)) return VKT_OK;
    }
    VKT_TRY(vkt_cmd_begin(cmd, true));
    if (s->desc.optim.clip > 0)
        vkt_net_record_step_norm(net, cmd, L->step, sumsq);
    else
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
    if (!L->forward_only) a->s->stats[a->stage].wall_ns += (double)(vkt_trace_now_ns() - t0);
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

// Runs the pass L is set up for (a training step, or forward only) on every device, one thread
// each.
static vkt_status run_pass(vkt_strategy *s, const float *x, const void *targets, uint32_t B,
                           uint32_t step) {
    layers_impl *L = s->impl;
    L->x = x;
    L->targets = targets;
    L->B = B;
    L->step = step;
    L->failed = false;
    L->norm_arrived = 0;
    L->norm_done = false;
    memset(L->fwd_done, 0, (size_t)s->ndev * L->M * sizeof(bool));
    memset(L->bwd_done, 0, (size_t)s->ndev * L->M * sizeof(bool));
    cut_batch(L, B);
    for (int k = 0; k < L->M; k++)
        L->loss[k] = 0, L->correct[k] = 0;
    for (int g = 0; g < L->S && L->T > 1; g++)
        tp_group_reset(L->group[g], step);
    pthread_t th[VKT_MAX_DEVICES];
    stage_arg args[VKT_MAX_DEVICES];
    int started = 0;
    for (int d = 0; d < s->ndev; d++) {
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
    return VKT_OK;
}

static vkt_status layers_step(vkt_strategy *s, const float *x, const void *targets, uint32_t B,
                              uint32_t step, double *loss_sum) {
    layers_impl *L = s->impl;
    L->forward_only = L->accuracy = false;
    L->predict_out = NULL;
    VKT_TRY(run_pass(s, x, targets, B, step));
    if (L->map) VKT_TRY(tp_map_sync_whole(s, L->map, step));
    double total = 0;
    for (int k = 0; k < L->M; k++)
        total += L->loss[k];
    *loss_sum = total;
    return VKT_OK;
}

// Prediction (and, for layers,tensor, evaluation) as a pipeline of forwards on the devices'
// threads, micro-batch by micro-batch (the nets hold a micro-batch's rows; a stage's ranks reduce
// together).
static vkt_status layers_tensor_eval(vkt_strategy *s, const float *x, const void *targets,
                                     uint32_t B, double *loss_sum, uint64_t *correct) {
    layers_impl *L = s->impl;
    L->forward_only = true;
    L->accuracy = s->desc.model->loss == VKT_LOSS_SOFTMAX_XENT;
    L->predict_out = NULL;
    VKT_TRY(run_pass(s, x, targets, B, 0));
    *loss_sum = 0;
    *correct = 0;
    for (int k = 0; k < L->M; k++)
        *loss_sum += L->loss[k], *correct += L->correct[k];
    return VKT_OK;
}

static vkt_status layers_predict(vkt_strategy *s, const float *x, uint32_t B, float *out) {
    layers_impl *L = s->impl;
    L->forward_only = true;
    L->accuracy = false;
    L->predict_out = out;
    vkt_status st = run_pass(s, x, NULL, B, 0);
    L->predict_out = NULL;
    return st;
}

static vkt_status layers_tensor_read(vkt_strategy *s, vkt_net_store store, int i, float *dst) {
    return tp_map_read(s, ((layers_impl *)s->impl)->map, store, i, dst);
}

static vkt_status layers_tensor_write(vkt_strategy *s, vkt_net_store store, int i,
                                      const float *src) {
    return tp_map_write(s, ((layers_impl *)s->impl)->map, store, i, src);
}

static vkt_status layers_tensor_init(vkt_strategy *s, uint64_t seed) {
    return tp_map_init(s, ((layers_impl *)s->impl)->map, seed);
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
    if (L->T > 1) {
        // The nets point at the copies of the model: free them first.
        for (int d = 0; d < s->ndev; d++) {
            vkt_net_destroy(s->net[d]);
            s->net[d] = NULL;
        }
        for (int k = 0; k < L->T; k++)
            vkt_model_free(&L->model[k]);
        for (int g = 0; g < L->S; g++)
            tp_group_destroy(L->group[g]);
        tp_map_destroy(L->map);
    }
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
    .step = layers_step, .eval = layers_eval, .destroy = layers_destroy, .predict = layers_predict};
static const strategy_vtbl layers_tensor_vtbl = {.step = layers_step,
                                                 .eval = layers_tensor_eval,
                                                 .destroy = layers_destroy,
                                                 .read = layers_tensor_read,
                                                 .write = layers_tensor_write,
                                                 .init = layers_tensor_init,
                                                 .predict = layers_predict};

// ---------------------------------------------------------------------------------------------
// Placement

static vkt_net_desc stage_desc(const vkt_strategy *s, const layers_impl *L, int d, int lo, int hi) {
    return (vkt_net_desc){.model = L->T > 1 ? &L->model[d % L->T] : s->desc.model,
                          .first_layer = lo,
                          .last_layer = hi,
                          .max_batch = L->mb_max,
                          .slots = L->slots[d],
                          .optim = s->desc.optim};
}

vkt_status strategy_layers_create(vkt_strategy *s) {
    const vkt_strategy_desc *d = &s->desc;
    const vkt_model_desc *m = d->model;
    bool tensor = d->kind == VKT_STRATEGY_LAYERS_TENSOR;
    int T = tensor ? d->tensor_size : 1;
    if (tensor && (T < 2 || d->ndevices % T || d->ndevices / T < 2))
        return vkt_fail(VKT_ERR_ARG,
                        "--strategy layers,tensor needs --tensor-size T of at least 2 and --device "
                        "listing at least two stages of T devices each (stage 0 the first T); "
                        "%d devices and --tensor-size %d were given",
                        d->ndevices, T);
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
    s->vt = &layers_vtbl; // its destroy frees what was made, whatever fails below
    pthread_mutex_init(&L->mu, NULL);
    pthread_cond_init(&L->cv, NULL);
    L->T = T;
    L->S = d->ndevices / T;
    L->M = M;
    L->mb_max = (d->batch + M - 1) / M;
    for (int i = 0; i < d->ndevices; i++)
        L->slots[i] = vkt_plan_stage_slots(L->S, i / T, M, d->schedule);
    VKT_TRY(strategy_open_devices(s));

    vkt_plan_input pi;
    strategy_plan_input(s, &pi);
    vkt_plan p;
    vkt_plan_layers(&pi, &p);
    if (!p.possible)
        return vkt_fail(VKT_ERR_ARG, "--strategy %s: %s", vkt_strategy_name(d->kind), p.note);
    if (!p.fits) return strategy_refuse(s, &p, &pi); // the plan's words and numbers
    for (int i = 0; i < s->ndev; i++)
        L->lo[i] = p.lo[i], L->hi[i] = p.hi[i];
    for (int k = 0; k < T && tensor; k++)
        VKT_TRY(vkt_tensor_model(m, k, T, &L->model[k]));
    size_t nflags = (size_t)(unsigned)s->ndev * (size_t)(unsigned)M;
    L->fwd_done = calloc(nflags, sizeof(bool));
    L->bwd_done = calloc(nflags, sizeof(bool));
    if (!L->fwd_done || !L->bwd_done) return vkt_fail(VKT_ERR_HOST_MEMORY, "out of host memory");
    uint32_t widest = 0;
    for (int i = 0; i < s->ndev; i++) {
        vkt_net_desc nd = stage_desc(s, L, i, L->lo[i], L->hi[i]);
        VKT_TRY(vkt_net_create(s->dev[i], s->ops[i], &nd, &s->net[i]));
        L->sched[i] = calloc((size_t)2 * M, sizeof(op));
        uint32_t in = vkt_net_in_features(s->net[i]), out = vkt_net_out_features(s->net[i]);
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
    if (tensor) {
        // The staging the plan counted: the largest reduction of the split model at mb_max rows.
        uint64_t staging = tp_staging_bytes(m, T, L->mb_max);
        for (int g = 0; g < L->S; g++) {
            VKT_TRY(tp_group_create(s, g * T, T, staging, &L->group[g]));
            for (int k = 0; k < T; k++)
                tp_group_attach(L->group[g], k);
        }
        VKT_TRY(tp_map_create(s, T, &L->map));
        s->vt = &layers_tensor_vtbl;
    }
    return VKT_OK;
}

// Stage boundaries of a layers strategy (for reports); false for other strategies.
bool vkt_strategy_stage(const vkt_strategy *s, int d, int *lo, int *hi) {
    if ((s->desc.kind != VKT_STRATEGY_LAYERS && s->desc.kind != VKT_STRATEGY_LAYERS_TENSOR) ||
        !s->impl || d < 0 || d >= s->ndev)
        return false;
    const layers_impl *L = s->impl;
    *lo = L->lo[d];
    *hi = L->hi[d];
    return true;
}
