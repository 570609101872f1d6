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
//
// Pipelines (--pipelines P, T = 1): data x pipeline parallelism. The run's G devices (global, in
// rank order) form P pipelines of S = G / P stages, pipeline p on devices [pS, (p+1)S). Each
// step's batch is sharded over the pipelines in equal shares (vkt_plan_shard_rows; the loss
// still scaled by 1/B of the whole batch) and each pipeline cuts its shard into M micro-batches.
// After the backward, stage s of every pipeline sums its gradients with stage s of the others
// through the host, in pipeline order: this rank's devices of the stage first, then (the stage
// spanning ranks) a world group sum over those ranks with the stage's own tag, so that stage
// threads never mix; with one device of a stage per rank that is the one-process order, bit for
// bit. --clip's norm is pipeline 0's stages' (once per stage) and the update the same
// everywhere. Evaluation and prediction are sharded over the pipelines too (each pipeline's last
// stage reports its shard; across ranks its rank sends it). The plan is one pipeline's (S stages
// at the shard's rows), checked against the smallest device of each stage over the pipelines
// (a refusal names that device). Tensors are pipeline 0's stages' (reads from pipeline 0; a
// write goes to every pipeline's copy). Running statistics (batchnorm) stay each pipeline's own.
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
// TAG_GRADSUM + 2 s, + 1: stage s's gradients summed over the pipelines (vkt_world_group_sum_f32).
// TAG_STATESUM + 2 s, + 1: stage s's running statistics, pipeline 0's, to the other pipelines.
enum {
    TAG_ACTIVATION = 0,
    TAG_GRADIENT = 1 << 12,
    TAG_TENSOR = 2 << 12,
    TAG_GRADSUM = 3 << 12,
    TAG_STATESUM = 4 << 12
};
_Static_assert(MAX_MICRO <= 1 << 12, "a micro-batch's index fits below its tag's kind");

typedef struct op {
    bool backward;
    int mb;
} op;

typedef struct layers_impl {
    int S, M, T; // stages (of a pipeline), micro-batches, devices per stage (T > 1: layers,tensor)
    int P;       // pipelines (T = 1 when P > 1)
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
    uint32_t correct[VKT_MAX_DEVICES][MAX_MICRO];
    // --clip: each stage's squared gradient norm (its first device's, its group's sum; T = 1:
    // each global device's), met by every device before the update: the global norm is the sum
    // of stages 0..S-1 (pipeline 0's).
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
    // Each pipeline's shard and micro-batches (row0: the first row in the whole batch), and what
    // its last stage reported.
    uint32_t prows[VKT_MAX_DEVICES], prow0[VKT_MAX_DEVICES];
    uint32_t rows[VKT_MAX_DEVICES][MAX_MICRO], row0[VKT_MAX_DEVICES][MAX_MICRO];
    double loss[VKT_MAX_DEVICES][MAX_MICRO];
    // Across ranks: this rank's first global device (0 alone), every stage's layers, each device's
    // buffer for a micro-batch received from another rank, and its sends not yet waited for.
    int g0;
    int glo[VKT_MAX_DEVICES], ghi[VKT_MAX_DEVICES];
    float *recv_host[VKT_MAX_DEVICES];
    vkt_world_req *reqs[VKT_MAX_DEVICES];
    int nreqs[VKT_MAX_DEVICES];
    // Pipelines: each device's trained gradients packed in tensor order (gcount floats), the
    // meeting of each stage's devices on this rank (glocal of them, the first gfirst_dev), and
    // the ranks holding each stage (granks[s][0..ngranks[s]), ascending).
    // [0]: the gradients; [1]: the running statistics (buffers), pipeline 0's sent to the others
    // after the update as DDP's broadcast_buffers (the others add zeros).
    float *gpack[2][VKT_MAX_DEVICES];
    uint64_t gcount[2][VKT_MAX_DEVICES];
    int glocal[VKT_MAX_DEVICES], gfirst_dev[VKT_MAX_DEVICES], garrived[2][VKT_MAX_DEVICES];
    bool gdone[2][VKT_MAX_DEVICES];
    int granks[VKT_MAX_DEVICES][VKT_MAX_DEVICES], ngranks[VKT_MAX_DEVICES];
    bool has_state[VKT_MAX_DEVICES]; // stage s holds running statistics
} layers_impl;

static int slot_of(const layers_impl *L, int d, int mb) { return mb % L->slots[d]; }
// The stage of this rank's device d (in its pipeline), and its pipeline.
static int stage_of(const layers_impl *L, int d) {
    return L->T > 1 ? d / L->T : (L->g0 + d) % L->S;
}
static int pipe_of(const layers_impl *L, int d) { return L->T > 1 ? 0 : (L->g0 + d) / L->S; }

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

// Device d's host communication from t0 until now, moving `bytes`.
static void account_comm(vkt_strategy *s, int d, int64_t t0, uint64_t bytes, const char *name) {
    int64_t t1 = vkt_trace_now_ns();
    s->stats[d].comm_ns += (double)(t1 - t0);
    s->stats[d].busy_ns += (double)(t1 - t0); // the device's row is occupied by the transfer
    s->stats[d].bytes_moved += bytes;
    layers_impl *L = s->impl;
    if (s->desc.trace)
        vkt_trace_add_event(s->desc.trace, s->trace_pid[d], name, VKT_CAT_COMMUNICATION, t0,
                            t1 - t0, (int)L->step);
}

// Host copy in or out of a view, counted as communication.
static vkt_status transfer(vkt_strategy *s, int d, vkt_view v, float *host, uint64_t bytes,
                           bool to_device, const char *name) {
    int64_t t0 = vkt_trace_now_ns();
    vkt_status st = to_device ? vkt_buffer_write(v.buffer, v.offset, host, bytes)
                              : vkt_buffer_read(v.buffer, v.offset, host, bytes);
    account_comm(s, d, t0, bytes, name);
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
// for every stage's (every rank's) and gives their sum, in stage order: pipeline 0's stages', so
// that every pipeline takes the same bits. False when another device failed.
static bool meet_norms(vkt_strategy *s, int d, float part, float *total) {
    layers_impl *L = s->impl;
    int64_t t0 = vkt_trace_now_ns();
    pthread_mutex_lock(&L->mu);
    if (L->T > 1 && d % L->T == 0) L->norm_part[stage_of(L, d)] = part;
    if (L->T == 1) L->norm_part[L->g0 + d] = part; // pipeline 0's are stages 0..S-1
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

// ---------------------------------------------------------------------------------------------
// Pipelines: each stage's gradients summed over the pipelines

// Device d's trained gradients (its micro-batches' done) to the host, summed with those of its
// stage in every other pipeline, in pipeline order, and back: this rank's devices of the stage
// meet, the last to arrive sums theirs into the first's pack and, the stage spanning ranks, sums
// that over its ranks (vkt_world_group_sum_f32, the stage's own tags). state: the running
// statistics instead, pipeline 0's only (the others give zeros, so the sum is its values
// exactly). False (VKT_OK) when another device failed.
static vkt_status sum_over_pipelines(vkt_strategy *s, int d, bool state, bool *ok) {
    layers_impl *L = s->impl;
    vkt_net *net = s->net[d];
    int st = stage_of(L, d), nt = vkt_net_tensor_count(net), w = state;
    uint64_t n = L->gcount[w][d], at = 0;
    vkt_net_store store = state ? VKT_STORE_PARAM : VKT_STORE_GRAD;
    *ok = false;
    int64_t t0 = vkt_trace_now_ns();
    for (int i = 0; i < nt; i++) {
        const vkt_net_tensor *t = vkt_net_get_tensor(net, i);
        if (t->state != state) continue;
        if (state && pipe_of(L, d) != 0)
            memset(L->gpack[w][d] + at, 0, t->count * 4);
        else
            VKT_TRY(vkt_net_read_tensor(net, store, i, L->gpack[w][d] + at));
        at += t->count;
    }
    VKT_ASSERT(at == n);
    account_comm(s, d, t0, n * 4, state ? "comm:state_out" : "comm:grad_out");
    pthread_mutex_lock(&L->mu);
    bool last = ++L->garrived[w][st] == L->glocal[st];
    pthread_mutex_unlock(&L->mu);
    float *acc = L->gpack[w][L->gfirst_dev[st]];
    if (last) {
        int64_t c0 = vkt_trace_now_ns();
        for (int e = L->gfirst_dev[st] + 1; e < s->ndev; e++) {
            if (stage_of(L, e) != st) continue;
            const float *b = L->gpack[w][e];
            for (uint64_t j = 0; j < n; j++)
                acc[j] += b[j];
        }
        vkt_status gs = VKT_OK;
        if (s->world && L->ngranks[st] > 1 && n > 0) // n: the same on every rank
            gs = vkt_world_group_sum_f32(s->world, L->granks[st], L->ngranks[st],
                                         (state ? TAG_STATESUM : TAG_GRADSUM) + 2 * st, acc, n,
                                         state ? "a stage's running statistics from pipeline 0"
                                               : "a stage's gradients summed over the pipelines");
        account_comm(s, d, c0, 0, state ? "comm:state_sum" : "comm:grad_sum");
        if (gs != VKT_OK) {
            stage_fail(L, gs);
            return VKT_OK;
        }
        set_flag(L, &L->gdone[w][st]);
    } else if (!wait_flag(s, d, &L->gdone[w][st], 0)) {
        return VKT_OK;
    }
    t0 = vkt_trace_now_ns();
    at = 0;
    for (int i = 0; i < nt; i++) {
        const vkt_net_tensor *t = vkt_net_get_tensor(net, i);
        if (t->state != state) continue;
        VKT_TRY(vkt_net_write_tensor(net, store, i, acc + at));
        at += t->count;
    }
    account_comm(s, d, t0, n * 4, state ? "comm:state_in" : "comm:grad_in");
    *ok = true;
    return VKT_OK;
}

static vkt_status run_stage(vkt_strategy *s, int d) {
    layers_impl *L = s->impl;
    vkt_net *net = s->net[d];
    vkt_cmd *cmd = s->cmd[d];
    const vkt_model_desc *m = s->desc.model;
    int st = stage_of(L, d), pp = pipe_of(L, d), T = L->T;
    bool first = st == 0, last = st == L->S - 1, train = !L->forward_only;
    // Rank 0 of the last stage reports what every rank of it computed alike.
    bool reports = last && d % T == 0;
    // A neighbour stage on another rank (the previous one of this rank's first device, the next
    // one of its last).
    bool prev_remote = !first && d - T < 0, next_remote = !last && d + T >= s->ndev;
    int prev_rank = prev_remote ? strategy_rank_of(s, L->g0 + d - T) : -1;
    int next_rank = next_remote ? strategy_rank_of(s, L->g0 + d + T) : -1;
    const uint32_t *rows = L->rows[pp], *row0 = L->row0[pp];
    bool zeroed = false; // this step's gradients zeroed (recorded)
    uint32_t in = vkt_net_in_features(net), out = vkt_net_out_features(net);
    uint64_t tgt_per = vkt_model_targets_per_sample(m);
    float scale = train ? 1.0f / (float)L->B : 1.0f;
    int nops = train ? L->nsched[d] : L->M;
    for (int i = 0; i < nops; i++) {
        op o = train ? L->sched[d][i] : (op){false, i};
        int k = o.mb, slot = slot_of(L, d, k);
        uint32_t R = rows[k];
        if (R == 0) { // fewer rows than micro-batches: nothing to do, but neighbours wait on it
            set_flag(L, o.backward ? &L->bwd_done[d * L->M + k] : &L->fwd_done[d * L->M + k]);
            continue;
        }
        if (!o.backward) {
            if (first) {
                VKT_TRY(strategy_upload_input(net, slot, L->x + (uint64_t)row0[k] * in, R));
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
                    net, slot, (const char *)L->targets + (uint64_t)row0[k] * tgt_per * 4, R));
            VKT_TRY(vkt_cmd_begin(cmd, train));
            if (train && !zeroed) vkt_net_record_zero_grads(net, cmd), zeroed = true;
            if (last && L->accuracy) {
                vkt_cmd_fill(cmd, vkt_net_correct(net), 0);
                vkt_cmd_barrier(cmd);
            }
            strategy_set_phase(s, net, train, train ? L->step : 0, train ? row0[k] : 0);
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
            if (!zeroed) vkt_net_record_zero_grads(net, cmd), zeroed = true;
            strategy_set_phase(s, net, true, L->step, row0[k]);
            vkt_net_record_backward(net, cmd, slot, R, !first);
        }
        VKT_TRY(vkt_net_status(net));
        VKT_TRY(vkt_cmd_end(cmd));
        VKT_TRY(vkt_cmd_submit(cmd));
        VKT_TRY(vkt_cmd_wait(cmd, VKT_WAIT_MS));
        if (train) VKT_TRY(strategy_account(s, d, (int)L->step));
        if (!o.backward) {
            if (reports && L->targets) VKT_TRY(strategy_read_loss(net, slot, R, &L->loss[pp][k]));
            if (reports && L->accuracy) {
                vkt_view v = vkt_net_correct(net);
                VKT_TRY(vkt_buffer_read(v.buffer, v.offset, &L->correct[pp][k], 4));
            }
            if (reports && L->predict_out) {
                vkt_view v = vkt_net_output(net, slot);
                VKT_TRY(vkt_buffer_read(v.buffer, v.offset,
                                        L->predict_out + (uint64_t)row0[k] * out,
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
    if (!zeroed) { // a pipeline given no rows (a batch smaller than the pipelines): no gradient
        VKT_TRY(vkt_cmd_begin(cmd, true));
        vkt_net_record_zero_grads(net, cmd);
        VKT_TRY(vkt_net_status(net));
        VKT_TRY(vkt_cmd_end(cmd));
        VKT_TRY(vkt_cmd_submit(cmd));
        VKT_TRY(vkt_cmd_wait(cmd, VKT_WAIT_MS));
        VKT_TRY(strategy_account(s, d, (int)L->step));
    }
    // Every micro-batch's gradient is in (every pipeline's, summed): one update, clipped by the
    // norm of every stage's.
    if (L->P > 1) {
        bool ok;
        VKT_TRY(sum_over_pipelines(s, d, false, &ok));
        if (!ok) return VKT_OK;
    }
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
    VKT_TRY(strategy_account(s, d, (int)L->step));
    // Each pipeline's running statistics saw its shard only: pipeline 0's are kept everywhere.
    bool ok = true;
    if (L->P > 1 && L->has_state[stage_of(L, d)]) VKT_TRY(sum_over_pipelines(s, d, true, &ok));
    return VKT_OK;
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

// Shards B rows over the pipelines (equal shares) and cuts each shard into M micro-batches of
// near-equal size (the first shard % M get one more row).
static void cut_batch(layers_impl *L, uint32_t B) {
    float equal[VKT_MAX_DEVICES] = {0};
    vkt_plan_shard_rows(equal, L->P, B, L->prows);
    uint32_t r0 = 0;
    for (int p = 0; p < L->P; p++) {
        L->prow0[p] = r0;
        uint32_t base = L->prows[p] / L->M, extra = L->prows[p] % L->M;
        for (int k = 0; k < L->M; k++) {
            L->rows[p][k] = base + ((uint32_t)k < extra ? 1 : 0);
            L->row0[p][k] = r0;
            r0 += L->rows[p][k];
        }
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
    for (int p = 0; p < L->P; p++)
        for (int k = 0; k < L->M; k++)
            L->loss[p][k] = 0, L->correct[p][k] = 0;
    for (int g = 0; g < L->S; g++)
        for (int w = 0; w < 2; w++)
            L->garrived[w][g] = 0, L->gdone[w][g] = false;
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

// The rank holding pipeline p's last stage (which reports its shard's results).
static int reporting_rank(const vkt_strategy *s, int p) {
    const layers_impl *L = s->impl;
    return strategy_rank_of(s, (p + 1) * L->S * L->T - 1);
}

// Each pipeline's n results (vals[p n ..]) summed over its micro-batches: across ranks, sent from
// the rank of its last stage to every rank, so that every rank returns the same bits.
static vkt_status share_results(vkt_strategy *s, double *vals, int n, const char *what) {
    layers_impl *L = s->impl;
    for (int p = 0; p < L->P && s->world; p++)
        VKT_TRY(vkt_world_bcast(s->world, vals + p * n, (size_t)n * sizeof *vals,
                                reporting_rank(s, p), what));
    return VKT_OK;
}

static vkt_status layers_step(vkt_strategy *s, const float *x, const void *targets, uint32_t B,
                              uint32_t step, double *loss_sum) {
    layers_impl *L = s->impl;
    L->forward_only = L->accuracy = false;
    L->predict_out = NULL;
    VKT_TRY(run_pass(s, x, targets, B, step));
    if (L->map) VKT_TRY(tp_map_sync_whole(s, L->map, step));
    double part[VKT_MAX_DEVICES] = {0};
    for (int p = 0; p < L->P; p++)
        for (int k = 0; k < L->M; k++)
            part[p] += L->loss[p][k];
    VKT_TRY(share_results(s, part, 1, "the step's loss"));
    double total = 0;
    for (int p = 0; p < L->P; p++)
        total += part[p];
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
    double part[2 * VKT_MAX_DEVICES] = {0}; // each pipeline's loss and count
    for (int p = 0; p < L->P; p++)
        for (int k = 0; k < L->M; k++)
            part[2 * p] += L->loss[p][k], part[2 * p + 1] += L->correct[p][k];
    VKT_TRY(share_results(s, part, 2, "the evaluation's loss and count"));
    *loss_sum = 0;
    *correct = 0;
    for (int p = 0; p < L->P; p++)
        *loss_sum += part[2 * p], *correct += (uint64_t)part[2 * p + 1];
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

// Across ranks or over pipelines: prediction as pipelines, each pipeline's rows sent from its
// last stage's rank to every rank.
static vkt_status layers_world_predict(vkt_strategy *s, const float *x, uint32_t B, float *out) {
    layers_impl *L = s->impl;
    VKT_TRY(layers_predict(s, x, B, out));
    size_t row = (size_t)s->desc.model->output_features;
    for (int p = 0; p < L->P && s->world; p++)
        VKT_TRY(vkt_world_bcast(s->world, out + L->prow0[p] * row, L->prows[p] * row * 4,
                                reporting_rank(s, p), "the predictions"));
    return VKT_OK;
}

// Tensor i of the whole model lives on stage owner[i] (local[i] in its net, on its rank; over
// pipelines, pipeline 0's stage, global device owner[i]). A read is collective: the owner reads
// it and, if it is not rank 0, sends it there, first with its status; rank 0 returns it in dst,
// the others return VKT_OK with dst untouched. Alone, the owner reads it.
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

// Every rank is given the same src; the owner writes it, and the same stage of every other
// pipeline (its net lists the same tensors).
static vkt_status layers_world_write(vkt_strategy *s, vkt_net_store store, int i,
                                     const float *src) {
    layers_impl *L = s->impl;
    for (int p = 0; p < L->P; p++) {
        int g = p * L->S + s->owner[i];
        if (strategy_rank_of(s, g) == s->rank)
            VKT_TRY(vkt_net_write_tensor(s->net[g - L->g0], store, s->local[i], src));
    }
    return VKT_OK;
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
    for (int k = 0; k < L->M; k++) { // one pipeline
        uint32_t R = L->rows[0][k];
        if (!R) continue;
        for (int d = 0; d < L->S; d++) {
            vkt_net *net = s->net[d];
            vkt_cmd *cmd = s->cmd[d];
            bool last = d == L->S - 1;
            uint32_t in = vkt_net_in_features(net);
            if (d == 0)
                VKT_TRY(strategy_upload_input(net, 0, x + (uint64_t)L->row0[0][k] * in, R));
            else
                VKT_TRY(strategy_upload_input(net, 0, buf, R));
            if (last)
                VKT_TRY(strategy_upload_targets(
                    net, 0, (const char *)targets + (uint64_t)L->row0[0][k] * tgt_per * 4, R));
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
        free(L->gpack[0][d]), free(L->gpack[1][d]);
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
// Across ranks, or over several pipelines in one process.
static const strategy_vtbl layers_world_vtbl = {.step = layers_step,
                                                .eval = layers_pipe_eval,
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
    if (L->P == 1) return VKT_OK;
    // Pipelines: each device's packed gradients, its stage's meeting and the stage's ranks.
    for (int g = 0; g < L->S; g++) {
        L->glocal[g] = 0, L->gfirst_dev[g] = -1, L->ngranks[g] = 0;
        for (int p = 0; p < L->P; p++) {
            int r = strategy_rank_of(s, p * L->S + g);
            if (!L->ngranks[g] || L->granks[g][L->ngranks[g] - 1] != r)
                L->granks[g][L->ngranks[g]++] = r;
        }
    }
    for (int i = 0; i < s->ndev; i++) {
        int g = stage_of(L, i);
        if (L->gfirst_dev[g] < 0) L->gfirst_dev[g] = i;
        L->glocal[g]++;
        for (int t = 0; t < vkt_net_tensor_count(s->net[i]); t++) {
            const vkt_net_tensor *nt = vkt_net_get_tensor(s->net[i], t);
            L->gcount[nt->state][i] += nt->count;
        }
        if (L->gcount[1][i]) L->has_state[g] = true; // the same stage layers on every rank
        for (int w = 0; w < 2; w++) {
            L->gpack[w][i] = malloc((size_t)(L->gcount[w][i] ? L->gcount[w][i] : 1) * 4);
            if (!L->gpack[w][i]) return vkt_fail(VKT_ERR_HOST_MEMORY, "out of host memory");
        }
    }
    return VKT_OK;
}

// What every rank tells the others once, when the strategy is made: whether it got so far, what
// must be the same on every rank, and its devices as the plan sees them.
typedef struct rank_facts {
    int32_t ok;
    char err[400];
    uint32_t batch, nlayers, input_features, output_features;
    int32_t micro, schedule, clip, ndev, pipelines;
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

// One pipeline's plan (its S stages at the shard's rows) from the run's G devices (run, labels:
// every device's facts and name): stage g's limit and largest allocation are the smallest of its
// devices over the pipelines, its alignment the largest, so that what fits the plan fits every
// pipeline's devices; a refusal names the device of the stage with the least memory. One
// pipeline: the run's own. where: what the run is, for a refusal that does not apply.
static vkt_status pipeline_plan(const vkt_strategy *s, const vkt_plan_input *run,
                                const char *const *labels, const char *where, vkt_plan_input *pi,
                                vkt_plan *p) {
    const layers_impl *L = s->impl;
    int n = L->S * L->T;
    const char *names[VKT_MAX_DEVICES];
    *pi = *run;
    pi->ndevices = n;
    pi->batch = (run->batch + (uint32_t)L->P - 1) / (uint32_t)L->P; // the largest shard
    for (int g = 0; g < n; g++) {
        int least = g;
        for (int q = 1; q < L->P; q++) {
            int e = q * n + g;
            if (run->limit[e] < run->limit[least]) least = e;
            if (run->align[e] > pi->align[g]) pi->align[g] = run->align[e];
            uint64_t a = run->max_alloc[e]; // 0: no bound
            if (a && (!pi->max_alloc[g] || a < pi->max_alloc[g])) pi->max_alloc[g] = a;
        }
        pi->limit[g] = run->limit[least];
        names[g] = labels[least];
    }
    vkt_plan_layers(pi, p);
    if (!p->possible) return vkt_fail(VKT_ERR_ARG, "%s: %s", where, p->note);
    if (!p->fits) { // the plan's words and numbers, the device named (with its rank)
        char msg[1024];
        vkt_plan_refusal(p, pi, names, msg, sizeof msg);
        if (L->P == 1) return vkt_fail(VKT_ERR_DEVICE_MEMORY, "%s", msg);
        return vkt_fail(VKT_ERR_DEVICE_MEMORY,
                        "--pipelines %d (each pipeline %d of the %d devices, at %u rows): %s", L->P,
                        n, run->ndevices, pi->batch, msg);
    }
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
                      .ndev = s->ndev,
                      .pipelines = ((layers_impl *)s->impl)->P};
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
            a->pipelines != b->pipelines || memcmp(a->split, b->split, sizeof a->split) != 0)
            st = vkt_fail(VKT_ERR_ARG,
                          "--strategy layers across ranks: rank %d was given another model, batch, "
                          "--micro-batches, --pipelines, --schedule, --clip or --split than rank 0 "
                          "(%u layers and %llu parameters, batch %u, %d micro-batches, %d "
                          "pipelines against %u, %llu, %u, %d, %d); every rank must run the same "
                          "training",
                          r, b->nlayers, (unsigned long long)b->params, b->batch, b->micro,
                          b->pipelines, a->nlayers, (unsigned long long)a->params, a->batch,
                          a->micro, a->pipelines);
    }
    if (st == VKT_OK) {
        vkt_plan_input run;
        strategy_plan_input(s, &run);
        run.ndevices = s->gdev;
        const char *labels[VKT_MAX_DEVICES];
        for (int r = 0; r < s->nranks; r++)
            for (int g = s->rank_first[r]; g < s->rank_first[r + 1]; g++) {
                int k = g - s->rank_first[r];
                run.limit[g] = all[r].limit[k];
                run.align[g] = all[r].align[k];
                run.max_alloc[g] = all[r].max_alloc[k];
                run.upload_areas[g] = false;
                run.balance[g] = 0;
                run.split[g] = d->split[g];
                labels[g] = all[r].label[k];
            }
        char where[128];
        snprintf(where, sizeof where, "--strategy layers over the %d devices of %d ranks", s->gdev,
                 s->nranks);
        st = pipeline_plan(s, &run, labels, where, pi, p);
    }
    free(f);
    return st;
}

// Across ranks or over pipelines: the whole model's tensors, each on the stage (of pipeline 0)
// holding its layer.
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
        // Its index in the stage's net: the same in every pipeline's copy held here.
        for (int p = 0; p < L->P && s->local[i] < 0; p++) {
            int e = p * L->S + g;
            if (e < L->g0 || e >= L->g0 + s->ndev) continue;
            s->local[i] = vkt_net_find_tensor(s->net[e - L->g0], s->tensors[i].name);
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
    int P = d->pipelines > 0 ? d->pipelines : 1;
    if (M > MAX_MICRO) return vkt_fail(VKT_ERR_ARG, "at most %d micro-batches", MAX_MICRO);
    if (P > 1 && tensor)
        return vkt_fail(VKT_ERR_ARG,
                        "--pipelines %d applies to --strategy layers, not to "
                        "layers,tensor (use --pipelines 1)",
                        P);
    if (P > 1 && (s->gdev % P || s->gdev / P < 2))
        return vkt_fail(VKT_ERR_ARG,
                        "--pipelines %d needs the run's devices to divide into %d pipelines of at "
                        "least two stages each; the run has %d devices%s",
                        P, P, s->gdev, s->world ? " (every rank's together)" : "");
    if ((uint32_t)M > d->batch)
        return vkt_fail(VKT_ERR_ARG, "--micro-batches %d is more than the batch of %u rows", M,
                        d->batch);
    if ((uint64_t)M * (uint64_t)P > d->batch)
        return vkt_fail(VKT_ERR_ARG,
                        "--micro-batches %d in each of --pipelines %d is more than the batch of "
                        "%u rows (each pipeline's shard is about %u rows)",
                        M, P, d->batch, d->batch / (uint32_t)P);
    layers_impl *L = calloc(1, sizeof *L);
    if (!L) return vkt_fail(VKT_ERR_HOST_MEMORY, "out of host memory");
    s->impl = L;
    s->vt = &layers_vtbl; // its destroy frees what was made, whatever fails below
    pthread_mutex_init(&L->mu, NULL);
    pthread_cond_init(&L->cv, NULL);
    L->T = T;
    L->P = P;
    L->g0 = s->gfirst;
    L->S = s->gdev / T / P;
    L->M = M;
    uint32_t shard = (d->batch + (uint32_t)P - 1) / (uint32_t)P; // the largest
    L->mb_max = (shard + M - 1) / M;
    for (int i = 0; i < d->ndevices; i++)
        L->slots[i] = vkt_plan_stage_slots(L->S, stage_of(L, i), M, d->schedule);
    vkt_status opened = strategy_open_devices(s);

    vkt_plan_input pi;
    vkt_plan p;
    if (s->world) {
        VKT_TRY(world_plan(s, opened, &pi, &p));
    } else {
        VKT_TRY(opened);
        vkt_plan_input run;
        strategy_plan_input(s, &run);
        const char *labels[VKT_MAX_DEVICES];
        for (int i = 0; i < s->ndev; i++)
            labels[i] = s->stats[i].label;
        char where[64];
        snprintf(where, sizeof where, "--strategy %s", vkt_strategy_name(d->kind));
        VKT_TRY(pipeline_plan(s, &run, labels, where, &pi, &p));
    }
    for (int g = 0; g < L->S; g++)
        L->glo[g] = p.lo[g * T], L->ghi[g] = p.hi[g * T];
    for (int i = 0; i < s->ndev; i++) { // a pipeline's device: the plan's of its stage
        int e = T > 1 ? i : stage_of(L, i);
        L->lo[i] = p.lo[e], L->hi[i] = p.hi[e];
    }
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
    if (!s->world && P > 1) {
        if (st == VKT_OK) st = world_tensors(s);
        if (st == VKT_OK) s->vt = &layers_world_vtbl;
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
