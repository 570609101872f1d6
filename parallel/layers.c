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
//
// Across processes (desc.world of more than one rank; T = 1): the stages are every rank's
// devices in rank order, and this rank builds the nets of its own only (global stages gfirst..,
// strategy_internal.h). Every rank computes the same plan from every rank's device facts
// (gathered once). A neighbour on the same rank is handed its micro-batch through host memory as
// above; one on another rank gets it by message: the sender copies it into its host buffer (that
// micro-batch's, untouched until the end of the pass) and sends it without waiting
// (vkt_world_isend; a blocking send deadlocks 1F1B, where both neighbours send before they
// receive), the receiver waits for it (time waiting for its neighbour) and uploads it; each
// thread waits for its own sends at the end of its schedule. The last stage's rank holds the
// losses, the evaluation's counts and the predictions and sends them to every rank; --clip's
// norm is every stage's part, gathered from every rank and summed in stage order (the same bits
// as one process). Tensors are the whole model's on every rank; a read is collective and fills
// dst on rank 0 only. A step that failed on one rank leaves the others to fail by the world's
// timeout, naming it; the run then ends (vkt_world_abort).
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "layer.h"
#include "plan.h"
#include "strategy_internal.h"
#include "vkt_internal.h"

#define MAX_MICRO 4096

// Tags of the messages between ranks (below 2^20, world.h): what they carry, and the micro-batch.
enum { TAG_ACTIVATION = 0, TAG_GRADIENT = 1 << 12, TAG_TENSOR = 2 << 12 };
_Static_assert(MAX_MICRO <= 1 << 12, "a micro-batch's index fits below its tag's kind");

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
    // Across ranks: this rank's first stage (0 alone), every stage's layers, each device's buffer
    // for a micro-batch received from another rank, and its sends not yet waited for.
    int g0;
    int glo[VKT_MAX_DEVICES], ghi[VKT_MAX_DEVICES];
    float *recv_host[VKT_MAX_DEVICES];
    vkt_world_req *reqs[VKT_MAX_DEVICES];
    int nreqs[VKT_MAX_DEVICES];
} layers_impl;

static int slot_of(const layers_impl *L, int d, int mb) { return mb % L->slots[d]; }
// The (global) stage of this rank's device d.
static int stage_of(const layers_impl *L, int d) { return L->g0 + d / L->T; }

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

// Across ranks: every stage's part of the squared norm (this rank's in L->norm_part[g0..]) to
// every rank, into L->norm_part. Called by the last of this rank's devices to arrive.
static vkt_status gather_norms(vkt_strategy *s) {
    layers_impl *L = s->impl;
    double mine[VKT_MAX_DEVICES] = {0}, all[VKT_MAX_DEVICES * VKT_MAX_DEVICES];
    for (int d = 0; d < s->ndev; d++)
        mine[d] = L->norm_part[L->g0 + d];
    VKT_TRY(vkt_world_allgather(s->world, mine, sizeof mine, all,
                                "every stage's squared gradient norm (--clip)"));
    for (int r = 0; r < s->nranks; r++)
        for (int g = s->rank_first[r]; g < s->rank_first[r + 1]; g++)
            L->norm_part[g] = all[r * VKT_MAX_DEVICES + (g - s->rank_first[r])];
    return VKT_OK;
}

// Device d's stage's squared gradient norm (part, the same on every device of the stage); waits
// for every stage's (every rank's) and gives their sum, in stage order. False when another device
// failed.
static bool meet_norms(vkt_strategy *s, int d, float part, float *total) {
    layers_impl *L = s->impl;
    int64_t t0 = vkt_trace_now_ns();
    pthread_mutex_lock(&L->mu);
    if (d % L->T == 0) L->norm_part[stage_of(L, d)] = part;
    bool complete = ++L->norm_arrived == s->ndev;
    pthread_mutex_unlock(&L->mu);
    if (complete) {
        vkt_status st = s->world ? gather_norms(s) : VKT_OK;
        if (st != VKT_OK) {
            stage_fail(L, st);
            return false;
        }
        pthread_mutex_lock(&L->mu);
        double sum = 0;
        for (int g = 0; g < L->S; g++)
            sum += L->norm_part[g];
        L->norm_total = (float)sum;
        L->norm_done = true;
        pthread_cond_broadcast(&L->cv);
        pthread_mutex_unlock(&L->mu);
    }
    pthread_mutex_lock(&L->mu);
    while (!L->norm_done && !L->failed)
        pthread_cond_wait(&L->cv, &L->mu);
    bool ok = L->norm_done;
    *total = L->norm_total;
    pthread_mutex_unlock(&L->mu);
    s->stats[d].wait_ns += (double)(vkt_trace_now_ns() - t0);
    return ok;
}

// ---------------------------------------------------------------------------------------------
// Neighbours on other ranks

// Receives `bytes` from the neighbour stage on rank `from` into device d's receive buffer: the
// wait is d's wait for its neighbour, as wait_flag's.
static vkt_status recv_remote(vkt_strategy *s, int d, int from, int tag, uint64_t bytes,
                              const char *what) {
    layers_impl *L = s->impl;
    int64_t t0 = vkt_trace_now_ns();
    vkt_status st = vkt_world_recv(s->world, from, tag, L->recv_host[d], bytes, what);
    int64_t t1 = vkt_trace_now_ns();
    s->stats[d].wait_ns += (double)(t1 - t0);
    if (s->desc.trace && t1 - t0 > 1000)
        vkt_trace_add_event(s->desc.trace, s->trace_pid[d], "wait:neighbour", VKT_CAT_WAIT, t0,
                            t1 - t0, (int)L->step);
    return st;
}

// Sends buf (left untouched until wait_sends) to the neighbour stage on rank `to`.
static vkt_status send_remote(vkt_strategy *s, int d, int to, int tag, const float *buf,
                              uint64_t bytes, const char *what) {
    layers_impl *L = s->impl;
    VKT_ASSERT(L->nreqs[d] < 2 * L->M);
    vkt_status st = vkt_world_isend(s->world, to, tag, buf, bytes, what, &L->reqs[d][L->nreqs[d]]);
    if (st == VKT_OK) L->nreqs[d]++;
    return st;
}

// Waits until every send of device d was taken (time waiting for its neighbours).
static vkt_status wait_sends(vkt_strategy *s, int d) {
    layers_impl *L = s->impl;
    int64_t t0 = vkt_trace_now_ns();
    vkt_status st = vkt_world_waitall(s->world, L->reqs[d], L->nreqs[d]);
    L->nreqs[d] = 0;
    int64_t t1 = vkt_trace_now_ns();
    s->stats[d].wait_ns += (double)(t1 - t0);
    if (s->desc.trace && t1 - t0 > 1000)
        vkt_trace_add_event(s->desc.trace, s->trace_pid[d], "wait:neighbour", VKT_CAT_WAIT, t0,
                            t1 - t0, (int)L->step);
    return st;
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
    // A neighbour stage on another rank (the previous one of this rank's first device, the next
    // one of its last).
    bool prev_remote = !first && d - T < 0, next_remote = !last && d + T >= s->ndev;
    int prev_rank = prev_remote ? strategy_rank_of(s, st - 1) : -1;
    int next_rank = next_remote ? strategy_rank_of(s, st + 1) : -1;
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
            } else if (prev_remote) {
                uint64_t bytes = (uint64_t)R * in * 4;
                VKT_TRY(recv_remote(s, d, prev_rank, TAG_ACTIVATION | k, bytes,
                                    "the activations of a micro-batch"));
                VKT_TRY(transfer(s, d, vkt_net_input(net, slot), L->recv_host[d], bytes, true,
                                 "comm:recv_activation"));
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
            if (next_remote) {
                uint64_t bytes = (uint64_t)R * out * 4;
                VKT_TRY(recv_remote(s, d, next_rank, TAG_GRADIENT | k, bytes,
                                    "the gradient of a micro-batch's activations"));
                VKT_TRY(transfer(s, d, vkt_net_output_grad(net, slot), L->recv_host[d], bytes, true,
                                 "comm:recv_gradient"));
            } else if (!last) {
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
            float *host = L->act_host[d] + (uint64_t)k * L->mb_max * out;
            uint64_t bytes = (uint64_t)R * out * 4;
            if (!last)
                VKT_TRY(transfer(s, d, vkt_net_output(net, slot), host, bytes, false,
                                 "comm:send_activation"));
            if (next_remote)
                VKT_TRY(send_remote(s, d, next_rank, TAG_ACTIVATION | k, host, bytes,
                                    "the activations of a micro-batch"));
            set_flag(L, &L->fwd_done[d * L->M + k]);
        } else {
            float *host = L->grad_host[d] + (uint64_t)k * L->mb_max * in;
            uint64_t bytes = (uint64_t)R * in * 4;
            if (!first)
                VKT_TRY(transfer(s, d, vkt_net_input_grad(net, slot), host, bytes, false,
                                 "comm:send_gradient"));
            if (prev_remote)
                VKT_TRY(send_remote(s, d, prev_rank, TAG_GRADIENT | k, host, bytes,
                                    "the gradient of a micro-batch's activations"));
            set_flag(L, &L->bwd_done[d * L->M + k]);
        }
    }
    // The host buffers of this pass's sends stay untouched until every send was taken.
    if (L->nreqs[d]) VKT_TRY(wait_sends(s, d));
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
    for (int d = 0; d < s->ndev; d++)
        L->nreqs[d] = 0; // a failed pass's sends are abandoned: the run ends
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
    // Across ranks the last stage's rank has it; every rank returns its bits.
    if (s->world)
        VKT_TRY(vkt_world_bcast(s->world, &total, sizeof total, s->nranks - 1, "the step's loss"));
    *loss_sum = total;
    return VKT_OK;
}

// Prediction (and, for layers,tensor and across ranks, evaluation) as a pipeline of forwards on
// the devices' threads, micro-batch by micro-batch (the nets hold a micro-batch's rows; a stage's
// ranks reduce together).
static vkt_status layers_pipe_eval(vkt_strategy *s, const float *x, const void *targets, uint32_t B,
                                   double *loss_sum, uint64_t *correct) {
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

// Across ranks: evaluation and prediction as pipelines, their results sent from the last stage's
// rank to every rank.
static vkt_status layers_world_eval(vkt_strategy *s, const float *x, const void *targets,
                                    uint32_t B, double *loss_sum, uint64_t *correct) {
    VKT_TRY(layers_pipe_eval(s, x, targets, B, loss_sum, correct));
    struct {
        double loss;
        uint64_t correct;
    } r = {*loss_sum, *correct};
    VKT_TRY(
        vkt_world_bcast(s->world, &r, sizeof r, s->nranks - 1, "the evaluation's loss and count"));
    *loss_sum = r.loss;
    *correct = r.correct;
    return VKT_OK;
}

static vkt_status layers_world_predict(vkt_strategy *s, const float *x, uint32_t B, float *out) {
    VKT_TRY(layers_predict(s, x, B, out));
    return vkt_world_bcast(s->world, out, (size_t)B * s->desc.model->output_features * 4,
                           s->nranks - 1, "the predictions");
}

// Tensor i of the whole model lives on stage owner[i] (local[i] in its net, on its rank). A read
// is collective: the owner reads it and, if it is not rank 0, sends it there, first with its
// status; rank 0 returns it in dst, the others return VKT_OK with dst untouched.
static vkt_status layers_world_read(vkt_strategy *s, vkt_net_store store, int i, float *dst) {
    layers_impl *L = s->impl;
    int g = s->owner[i], owner = strategy_rank_of(s, g);
    const vkt_net_tensor *t = &s->tensors[i];
    size_t bytes = (size_t)t->count * 4;
    struct {
        int32_t status;
        char msg[500];
    } head = {0};
    if (owner == s->rank) {
        vkt_net *net = s->net[g - L->g0];
        if (s->rank == 0) return vkt_net_read_tensor(net, store, s->local[i], dst);
        float *buf = malloc(bytes ? bytes : 1);
        vkt_status st = buf ? vkt_net_read_tensor(net, store, s->local[i], buf)
                            : vkt_fail(VKT_ERR_HOST_MEMORY, "out of host memory");
        head.status = (int32_t)st;
        if (st != VKT_OK) snprintf(head.msg, sizeof head.msg, "%s", vkt_error());
        vkt_status sent =
            vkt_world_send(s->world, 0, TAG_TENSOR, &head, sizeof head, "a tensor's status");
        if (sent == VKT_OK && st == VKT_OK)
            sent = vkt_world_send(s->world, 0, TAG_TENSOR, buf, bytes, t->name);
        free(buf);
        return st != VKT_OK ? vkt_fail(st, "%s", head.msg) : sent;
    }
    if (s->rank != 0) return VKT_OK;
    VKT_TRY(vkt_world_recv(s->world, owner, TAG_TENSOR, &head, sizeof head, "a tensor's status"));
    if (head.status != VKT_OK)
        return vkt_fail((vkt_status)head.status, "rank %d could not read tensor %s: %s", owner,
                        t->name, head.msg);
    return vkt_world_recv(s->world, owner, TAG_TENSOR, dst, bytes, t->name);
}

// Every rank is given the same src; the owner writes it.
static vkt_status layers_world_write(vkt_strategy *s, vkt_net_store store, int i,
                                     const float *src) {
    layers_impl *L = s->impl;
    int g = s->owner[i];
    if (strategy_rank_of(s, g) != s->rank) return VKT_OK;
    return vkt_net_write_tensor(s->net[g - L->g0], store, s->local[i], src);
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
        free(L->recv_host[d]);
        free(L->reqs[d]);
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
                                                 .eval = layers_pipe_eval,
                                                 .destroy = layers_destroy,
                                                 .read = layers_tensor_read,
                                                 .write = layers_tensor_write,
                                                 .init = layers_tensor_init,
                                                 .predict = layers_predict};
static const strategy_vtbl layers_world_vtbl = {.step = layers_step,
                                                .eval = layers_world_eval,
                                                .destroy = layers_destroy,
                                                .read = layers_world_read,
                                                .write = layers_world_write,
                                                .predict = layers_world_predict};

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

// Each of this rank's devices' net, schedule and host buffers (L's placement made).
static vkt_status make_stages(vkt_strategy *s) {
    layers_impl *L = s->impl;
    int M = L->M;
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
        if (s->world) { // a micro-batch from another rank: activations in, or gradients back
            L->recv_host[i] = malloc((size_t)L->mb_max * (in > out ? in : out) * 4);
            L->reqs[i] = calloc((size_t)2 * M, sizeof(vkt_world_req));
            if (!L->recv_host[i] || !L->reqs[i])
                return vkt_fail(VKT_ERR_HOST_MEMORY, "out of host memory");
        }
        build_schedule(L, s->desc.schedule, i);
    }
    L->scratch = malloc((size_t)L->mb_max * widest * 4);
    if (!L->scratch) return vkt_fail(VKT_ERR_HOST_MEMORY, "out of host memory");
    return VKT_OK;
}

// What every rank tells the others once, when the strategy is made: whether it got so far, what
// must be the same on every rank, and its devices as the plan sees them.
typedef struct rank_facts {
    int32_t ok;
    char err[400];
    uint32_t batch, nlayers, input_features, output_features;
    int32_t micro, schedule, clip, ndev;
    uint64_t params;
    int32_t split[VKT_MAX_DEVICES];
    uint64_t limit[VKT_MAX_DEVICES], align[VKT_MAX_DEVICES], max_alloc[VKT_MAX_DEVICES];
    char label[VKT_MAX_DEVICES][96];
} rank_facts;

// Every rank's status st: the first failure (this rank's own first) fails every rank alike, so
// that a rank that could not go on is not left waiting for by the others.
// doing: what a rank could not do ("open its devices"); what: what is gathered, for a timeout.
static vkt_status world_agree(vkt_strategy *s, vkt_status st, rank_facts *f, rank_facts *all,
                              const char *doing, const char *what) {
    f->ok = st == VKT_OK;
    if (st != VKT_OK) snprintf(f->err, sizeof f->err, "%s", vkt_error());
    VKT_TRY(vkt_world_allgather(s->world, f, sizeof *f, all, what));
    if (st != VKT_OK) return vkt_fail(st, "%s", f->err);
    for (int r = 0; r < s->nranks; r++)
        if (!all[r].ok)
            return vkt_fail(VKT_ERR_ARG, "rank %d could not %s: %s", r, doing, all[r].err);
    return VKT_OK;
}

// The plan of every rank's devices in rank order (the same on every rank), after each rank
// opened its own.
static vkt_status world_plan(vkt_strategy *s, vkt_status opened, vkt_plan_input *pi, vkt_plan *p) {
    const vkt_strategy_desc *d = &s->desc;
    const vkt_model_desc *m = d->model;
    rank_facts *f = calloc((size_t)s->nranks + 1, sizeof *f), *all = f + 1;
    if (!f) return vkt_fail(VKT_ERR_HOST_MEMORY, "out of host memory");
    *f = (rank_facts){.batch = d->batch,
                      .nlayers = (uint32_t)m->nlayers,
                      .input_features = m->input_features,
                      .output_features = m->output_features,
                      .micro = d->micro_batches > 0 ? d->micro_batches : 1,
                      .schedule = (int32_t)d->schedule,
                      .clip = d->optim.clip > 0,
                      .ndev = s->ndev};
    int nt = vkt_model_tensors(m, 0, m->nlayers, s->tensors, MAX_TENSORS);
    for (int i = 0; i < nt && i < MAX_TENSORS; i++)
        f->params += s->tensors[i].count;
    for (int i = 0; i < VKT_MAX_DEVICES; i++)
        f->split[i] = d->split[i];
    for (int i = 0; i < s->ndev && opened == VKT_OK; i++) {
        f->limit[i] = vkt_device_memory_limit(s->dev[i]);
        f->align[i] = vkt_device_align(s->dev[i], 1);
        f->max_alloc[i] = vkt_device_get_info(s->dev[i])->max_allocation_bytes;
        snprintf(f->label[i], sizeof f->label[i], "rank %d's %s", s->rank, s->stats[i].label);
    }
    vkt_status st = world_agree(s, opened, f, all, "open its devices",
                                "every rank's devices (--strategy layers)");
    // What the ranks must agree on: one model, batch and schedule.
    for (int r = 1; r < s->nranks && st == VKT_OK; r++) {
        const rank_facts *a = &all[0], *b = &all[r];
        if (a->batch != b->batch || a->nlayers != b->nlayers || a->params != b->params ||
            a->input_features != b->input_features || a->output_features != b->output_features ||
            a->micro != b->micro || a->schedule != b->schedule || a->clip != b->clip ||
            memcmp(a->split, b->split, sizeof a->split) != 0)
            st = vkt_fail(VKT_ERR_ARG,
                          "--strategy layers across ranks: rank %d was given another model, batch, "
                          "--micro-batches, --schedule, --clip or --split than rank 0 (%u layers "
                          "and %llu parameters, batch %u, %d micro-batches against %u, %llu, %u, "
                          "%d); every rank must run the same training",
                          r, b->nlayers, (unsigned long long)b->params, b->batch, b->micro,
                          a->nlayers, (unsigned long long)a->params, a->batch, a->micro);
    }
    if (st == VKT_OK) {
        strategy_plan_input(s, pi);
        pi->ndevices = s->gdev;
        const char *labels[VKT_MAX_DEVICES];
        for (int r = 0; r < s->nranks; r++)
            for (int g = s->rank_first[r]; g < s->rank_first[r + 1]; g++) {
                int k = g - s->rank_first[r];
                pi->limit[g] = all[r].limit[k];
                pi->align[g] = all[r].align[k];
                pi->max_alloc[g] = all[r].max_alloc[k];
                pi->upload_areas[g] = false;
                pi->balance[g] = 0;
                pi->split[g] = d->split[g];
                labels[g] = all[r].label[k];
            }
        vkt_plan_layers(pi, p);
        if (!p->possible) {
            st = vkt_fail(VKT_ERR_ARG, "--strategy layers over the %d devices of %d ranks: %s",
                          s->gdev, s->nranks, p->note);
        } else if (!p->fits) { // the plan's words and numbers, the device named with its rank
            char msg[1024];
            vkt_plan_refusal(p, pi, labels, msg, sizeof msg);
            st = vkt_fail(VKT_ERR_DEVICE_MEMORY, "%s", msg);
        }
    }
    free(f);
    return st;
}

// Across ranks: the whole model's tensors, each on the stage holding its layer.
static vkt_status world_tensors(vkt_strategy *s) {
    layers_impl *L = s->impl;
    const vkt_model_desc *m = s->desc.model;
    int nt = vkt_model_tensors(m, 0, m->nlayers, NULL, 0);
    if (nt > MAX_TENSORS)
        return vkt_fail(VKT_ERR_ARG, "model %s has %d tensors, more than the %d a run can hold",
                        m->name, nt, MAX_TENSORS);
    s->ntensors = vkt_model_tensors(m, 0, m->nlayers, s->tensors, MAX_TENSORS);
    for (int i = 0; i < s->ntensors; i++) {
        int g = 0, layer = s->tensors[i].layer;
        while (g + 1 < L->S && layer >= L->ghi[g])
            g++;
        s->owner[i] = g;
        s->local[i] = -1;
        if (g >= L->g0 && g < L->g0 + s->ndev) {
            s->local[i] = vkt_net_find_tensor(s->net[g - L->g0], s->tensors[i].name);
            VKT_ASSERT(s->local[i] >= 0);
        }
    }
    return VKT_OK;
}

vkt_status strategy_layers_create(vkt_strategy *s) {
    const vkt_strategy_desc *d = &s->desc;
    const vkt_model_desc *m = d->model;
    bool tensor = d->kind == VKT_STRATEGY_LAYERS_TENSOR;
    int T = tensor ? d->tensor_size : 1;
    if (tensor && s->world)
        return vkt_fail(VKT_ERR_ARG,
                        "--strategy layers,tensor keeps its stages within one process; across "
                        "%d ranks use --strategy layers (every rank's devices are stages)",
                        s->nranks);
    if (tensor && (T < 2 || d->ndevices % T || d->ndevices / T < 2))
        return vkt_fail(VKT_ERR_ARG,
                        "--strategy layers,tensor needs --tensor-size T of at least 2 and --device "
                        "listing at least two stages of T devices each (stage 0 the first T); "
                        "%d devices and --tensor-size %d were given",
                        d->ndevices, T);
    if (s->gdev < 2)
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
    L->g0 = s->gfirst;
    L->S = s->gdev / T;
    L->M = M;
    L->mb_max = (d->batch + M - 1) / M;
    for (int i = 0; i < d->ndevices; i++)
        L->slots[i] = vkt_plan_stage_slots(L->S, stage_of(L, i), M, d->schedule);
    vkt_status opened = strategy_open_devices(s);

    vkt_plan_input pi;
    vkt_plan p;
    if (s->world) {
        VKT_TRY(world_plan(s, opened, &pi, &p));
    } else {
        VKT_TRY(opened);
        strategy_plan_input(s, &pi);
        vkt_plan_layers(&pi, &p);
        if (!p.possible)
            return vkt_fail(VKT_ERR_ARG, "--strategy %s: %s", vkt_strategy_name(d->kind), p.note);
        if (!p.fits) return strategy_refuse(s, &p, &pi); // the plan's words and numbers
    }
    for (int g = 0; g < L->S; g++)
        L->glo[g] = p.lo[g * T], L->ghi[g] = p.hi[g * T];
    for (int i = 0; i < s->ndev; i++)
        L->lo[i] = p.lo[L->g0 + i], L->hi[i] = p.hi[L->g0 + i];
    vkt_status st = VKT_OK;
    for (int k = 0; k < T && tensor && st == VKT_OK; k++)
        st = vkt_tensor_model(m, k, T, &L->model[k]);
    if (st == VKT_OK) st = make_stages(s);
    if (st == VKT_OK && tensor) {
        // The staging the plan counted: the largest reduction of the split model at mb_max rows.
        uint64_t staging = tp_staging_bytes(m, T, L->mb_max);
        for (int g = 0; g < L->S && st == VKT_OK; g++) {
            st = tp_group_create(s, g * T, T, staging, &L->group[g]);
            for (int k = 0; k < T && st == VKT_OK; k++)
                tp_group_attach(L->group[g], k);
        }
        if (st == VKT_OK) st = tp_map_create(s, T, &L->map);
        if (st == VKT_OK) s->vt = &layers_tensor_vtbl;
    }
    if (s->world) {
        if (st == VKT_OK) st = world_tensors(s);
        if (st == VKT_OK) s->vt = &layers_world_vtbl;
        // Every rank made its stages, or every rank fails.
        rank_facts *f = calloc((size_t)s->nranks + 1, sizeof *f);
        if (!f) return vkt_fail(VKT_ERR_HOST_MEMORY, "out of host memory");
        st = world_agree(s, st, f, f + 1, "make its stages",
                         "every rank's stages (--strategy layers)");
        free(f);
    }
    return st;
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
