// replicated.c: data parallelism. Every device holds the whole model; each step's batch is cut
// into shards in proportion to the devices' speed; each replica runs forward, loss (scaled by
// 1/B of the whole batch, so the shards' gradients add up to the whole batch's) and backward;
// the gradients are summed through the communicator and every replica applies the same update,
// so the replicas stay identical.
//
// Overlap (as PyTorch DDP): the backward is cut into buckets of layers, last layers first, each
// its own submit ending in a copy of that bucket's gradients to a host-visible exchange buffer.
// The host reduces bucket k as soon as every replica finished it, while the devices run the
// backward of bucket k+1. A last submit copies the sums back and runs the optimizer.
//
// Replication never lowers the memory a device needs: every device needs the whole model.
//
// Except its optimizer state, with --shard-optimizer (ZeRO stage 1): replica d keeps the state of
// the parameter elements [bound[d], bound[d+1]) only (vkt_plan_optim_shards: equal contiguous
// ranges of the elements in model order, cutting through tensors). The host reduce-scatters each
// bucket (each replica gets back the sums of its own range only) and sums the squared gradient
// norm on the way, for clipping; each replica updates its range, copies those parameters out,
// the host all-gathers them, and a third submit copies every other range's parameters in. The
// ranges are element ranges: where replicas lay tensors out differently (alignment), they map to
// each replica's own offsets tensor by tensor.
//
// Across ranks (desc.world): the replicas are every rank's devices in rank order, the batch is
// sharded over all of them, and each bucket's sum over this rank's devices is summed over the
// ranks (vkt_world_allreduce_f32: in rank order at rank 0, the same bits on every rank) before it
// is copied back. The ranks' devices may pad tensors differently, so a bucket crosses ranks
// packed densely, tensor after tensor in model order; its layers are rank 0's buckets.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "plan.h"
#include "strategy_internal.h"
#include "vkt_internal.h"

#define MAX_BUCKETS 32
// A bucket closes once it holds this many gradient bytes (DDP uses 25 MB on GPUs; these models
// are small, and smaller buckets show the overlap).
#define BUCKET_BYTES (256u << 10)

typedef struct bucket {
    int lo, hi;          // layers [lo, hi)
    uint64_t off, bytes; // range of the packed gradient buffer
} bucket;

typedef struct repl {
    float share[VKT_MAX_DEVICES]; // every replica's of the run (across ranks: global devices)
    int nbuckets;
    bucket b[MAX_BUCKETS]; // b[0] holds the last layers
    // Host-visible, in replica 0's layout on every device: the sums are taken element by element.
    vkt_buffer *xchg[VKT_MAX_DEVICES];
    // Replica d's parameters lie as replica 0's (the same offset alignment): a bucket moves as
    // one range; otherwise tensor by tensor, between its own offsets and replica 0's.
    bool same_layout[VKT_MAX_DEVICES];
    // [0] = s->cmd[d]; [nbuckets] = the update; [nbuckets + 1] = the parameters' copy-in (shard)
    vkt_cmd *cmd[VKT_MAX_DEVICES][MAX_BUCKETS + 2];
    vkt_comm *comm;
    // --shard-optimizer: replica d's optimizer state covers the elements [bound[d], bound[d+1]),
    // which lie at bytes [xb[d], xb[d+1]) of the exchange buffers (replica 0's layout).
    bool shard;
    uint64_t bound[VKT_MAX_DEVICES + 1], xb[VKT_MAX_DEVICES + 1];
    double comm_prev_ns;
    float *dense; // across ranks: the largest bucket packed densely
} repl;

// This rank's devices' rows of a batch of B (*row0: the rows of the ranks before it).
static void shard_rows(const vkt_strategy *s, const repl *r, uint32_t B, uint32_t *rows,
                       uint32_t *row0) {
    uint32_t all[VKT_MAX_DEVICES];
    vkt_plan_shard_rows(r->share, s->gdev, B, all);
    *row0 = 0;
    for (int g = 0; g < s->gfirst; g++)
        *row0 += all[g];
    for (int d = 0; d < s->ndev; d++)
        rows[d] = all[s->gfirst + d];
}

// Across ranks: a bucket's sums over this rank's devices (in bufs[0], replica 0's layout) packed
// densely, summed over the ranks, and put back.
static vkt_status world_sum_bucket(vkt_strategy *s, repl *r, const bucket *b, float *sums) {
    const vkt_net *n0 = s->net[0];
    size_t at = 0;
    for (int i = 0; i < vkt_net_tensor_count(n0); i++) {
        const vkt_net_tensor *t = vkt_net_get_tensor(n0, i);
        if (t->state || t->layer < b->lo || t->layer >= b->hi) continue;
        memcpy(r->dense + at, (char *)sums + (t->offset - b->off), t->count * 4);
        at += t->count;
    }
    VKT_TRY(vkt_world_allreduce_f32(s->world, r->dense, at, "a bucket of gradients"));
    at = 0;
    for (int i = 0; i < vkt_net_tensor_count(n0); i++) {
        const vkt_net_tensor *t = vkt_net_get_tensor(n0, i);
        if (t->state || t->layer < b->lo || t->layer >= b->hi) continue;
        memcpy((char *)sums + (t->offset - b->off), r->dense + at, t->count * 4);
        at += t->count;
    }
    return VKT_OK;
}

// Across ranks every rank takes rank 0's buckets (their layers), whatever its own padding.
static vkt_status make_buckets(vkt_strategy *s, repl *r) {
    vkt_net *net = s->net[0];
    const vkt_model_desc *m = s->desc.model;
    int hi = m->nlayers;
    r->nbuckets = 0;
    for (int l = m->nlayers - 1; l >= 0; l--) {
        uint64_t off, bytes;
        vkt_net_param_range(net, l, hi, &off, &bytes);
        bool close = bytes >= BUCKET_BYTES || l == 0 || r->nbuckets == MAX_BUCKETS - 1;
        if (close && (l == 0 || r->nbuckets < MAX_BUCKETS - 1)) {
            r->b[r->nbuckets++] = (bucket){.lo = l, .hi = hi, .off = off, .bytes = bytes};
            hi = l;
        }
    }
    if (!s->world) return VKT_OK;
    int lh[2 * MAX_BUCKETS + 1] = {r->nbuckets};
    for (int k = 0; k < r->nbuckets; k++)
        lh[1 + 2 * k] = r->b[k].lo, lh[2 + 2 * k] = r->b[k].hi;
    VKT_TRY(vkt_world_bcast(s->world, lh, sizeof lh, 0, "the gradient buckets"));
    r->nbuckets = lh[0];
    for (int k = 0; k < r->nbuckets; k++) {
        bucket *b = &r->b[k];
        b->lo = lh[1 + 2 * k], b->hi = lh[2 + 2 * k];
        vkt_net_param_range(net, b->lo, b->hi, &b->off, &b->bytes);
    }
    return VKT_OK;
}

// Records the copies of bucket b's gradients between replica d's gradients and its exchange
// buffer (to_xchg: into the exchange buffer), in replica 0's layout there.
static void record_exchange(vkt_strategy *s, repl *r, int d, vkt_cmd *cmd, const bucket *b,
                            bool to_xchg) {
    vkt_buffer *grads = vkt_net_grads(s->net[d]).buffer;
    const char *label = to_xchg ? "comm:grad_out" : "comm:grad_in";
    if (r->same_layout[d]) {
        vkt_view g = vkt_buffer_view(grads, b->off, b->bytes);
        vkt_view x = vkt_buffer_view(r->xchg[d], b->off, b->bytes);
        vkt_cmd_copy(cmd, to_xchg ? g : x, to_xchg ? x : g, label);
        return;
    }
    const vkt_net *n0 = s->net[0], *nd = s->net[d];
    for (int i = 0; i < vkt_net_tensor_count(nd); i++) {
        const vkt_net_tensor *t = vkt_net_get_tensor(nd, i), *t0 = vkt_net_get_tensor(n0, i);
        if (t->state || t->layer < b->lo || t->layer >= b->hi) continue;
        vkt_view g = vkt_buffer_view(grads, t->offset, t->count * 4);
        vkt_view x = vkt_buffer_view(r->xchg[d], t0->offset, t0->count * 4);
        vkt_cmd_copy(cmd, to_xchg ? g : x, to_xchg ? x : g, label);
        label = NULL; // one timed copy per bucket
    }
}

// Where parameter element e (model order, trained tensors) lies in net n0's packed buffers: its
// tensor's offset plus its index; the parameter count at the packed size. As plan.c's
// packed_offset, so that the plan's bytes moved are the step's.
static uint64_t packed_offset(const vkt_net *n0, uint64_t e) {
    uint64_t at = 0;
    for (int i = 0; i < vkt_net_tensor_count(n0); i++) {
        const vkt_net_tensor *t = vkt_net_get_tensor(n0, i);
        if (t->state) continue;
        if (e < at + t->count) return t->offset + (e - at) * 4;
        at += t->count;
    }
    return vkt_net_packed_bytes(n0);
}

// Records the copies between replica d's buffer buf (its gradients or parameters) and its
// exchange buffer of the exchange bytes [x0, x1) (replica 0's layout), tensor by tensor where
// replica d lays them out otherwise. One timed copy, labelled label.
static void record_range(vkt_strategy *s, repl *r, int d, vkt_cmd *cmd, vkt_buffer *buf,
                         uint64_t x0, uint64_t x1, bool to_xchg, const char *label) {
    if (x1 <= x0) return;
    if (r->same_layout[d]) {
        vkt_view g = vkt_buffer_view(buf, x0, x1 - x0),
                 x = vkt_buffer_view(r->xchg[d], x0, x1 - x0);
        vkt_cmd_copy(cmd, to_xchg ? g : x, to_xchg ? x : g, label);
        return;
    }
    const vkt_net *n0 = s->net[0], *nd = s->net[d];
    for (int i = 0; i < vkt_net_tensor_count(nd); i++) {
        const vkt_net_tensor *t = vkt_net_get_tensor(nd, i), *t0 = vkt_net_get_tensor(n0, i);
        if (t->state) continue;
        uint64_t a = x0 > t0->offset ? x0 : t0->offset;
        uint64_t b = x1 < t0->offset + t0->count * 4 ? x1 : t0->offset + t0->count * 4;
        if (a >= b) continue;
        vkt_view g = vkt_buffer_view(buf, t->offset + (a - t0->offset), b - a);
        vkt_view x = vkt_buffer_view(r->xchg[d], a, b - a);
        vkt_cmd_copy(cmd, to_xchg ? g : x, to_xchg ? x : g, label);
        label = NULL;
    }
}

// --shard-optimizer, after the updates: every replica's updated range to every other replica
// (the host's all-gather over the exchange buffers, then each replica copies the other ranges
// in).
static vkt_status gather_params(vkt_strategy *s, repl *r, uint32_t step) {
    int n = s->ndev, nb = r->nbuckets;
    float *bufs[VKT_MAX_DEVICES];
    size_t bnd[VKT_MAX_DEVICES + 1];
    for (int d = 0; d < n; d++)
        bufs[d] = vkt_buffer_mapped(r->xchg[d]);
    for (int q = 0; q <= n; q++)
        bnd[q] = r->xb[q] / 4;
    int64_t c0 = vkt_trace_now_ns();
    VKT_TRY(vkt_comm_allgather(r->comm, bufs, r->xb[n] / 4, bnd));
    int64_t c1 = vkt_trace_now_ns();
    for (int d = 0; d < n; d++) {
        s->stats[d].comm_ns += (double)(c1 - c0);
        s->stats[d].busy_ns += (double)(c1 - c0); // exposed: every device waits on it
        if (s->desc.trace)
            vkt_trace_add_event(s->desc.trace, s->trace_pid[d], "comm:allgather",
                                VKT_CAT_COMMUNICATION, c0, c1 - c0, (int)step);
        vkt_cmd *cmd = r->cmd[d][nb + 1];
        vkt_buffer *params = vkt_net_params(s->net[d]).buffer;
        VKT_TRY(vkt_cmd_begin(cmd, true));
        record_range(s, r, d, cmd, params, 0, r->xb[d], false, "comm:param_in");
        record_range(s, r, d, cmd, params, r->xb[d + 1], r->xb[n], false, "comm:param_in");
        VKT_TRY(vkt_cmd_end(cmd));
        VKT_TRY(vkt_cmd_submit(cmd));
        s->stats[d].bytes_moved += r->xb[n] - (r->xb[d + 1] - r->xb[d]);
    }
    for (int d = 0; d < n; d++) {
        VKT_TRY(vkt_cmd_wait(r->cmd[d][nb + 1], VKT_WAIT_MS));
        VKT_TRY(strategy_account_cmd(s, d, r->cmd[d][nb + 1], (int)step));
    }
    return VKT_OK;
}

// Whether device d records bucket k without timestamps: where a submit with timestamps signals
// only when the queue runs dry (lavapipe, vkt_device_info.timestamps_delay_signal), a timed
// bucket would finish, as the host sees it, with the last one, and no reduction would overlap a
// later bucket's backward. The last bucket keeps them (nothing waits on it early). Untimed
// buckets count the time between the host seeing the previous one done and this one.
static bool untimed_bucket(const vkt_strategy *s, const repl *r, int d, int k) {
    return k + 1 < r->nbuckets && !s->desc.profile_kernels &&
           vkt_device_get_info(s->dev[d])->timestamps_delay_signal;
}

static vkt_status repl_step(vkt_strategy *s, const float *x, const void *targets, uint32_t B,
                            uint32_t step, double *loss_sum) {
    repl *r = s->impl;
    int n = s->ndev;
    uint32_t rows[VKT_MAX_DEVICES], row0;
    shard_rows(s, r, B, rows, &row0);
    int64_t t0 = vkt_trace_now_ns();
    const vkt_model_desc *m = s->desc.model;
    uint64_t tgt_per = vkt_model_targets_per_sample(m);
    float scale = 1.0f / (float)B;
    // When device d's buckets began (their submit) and its last bucket seen done, for the buckets
    // recorded without timestamps (untimed_bucket).
    int64_t seen[VKT_MAX_DEVICES];
    // Record and submit every bucket of every device; the devices run while the host reduces.
    for (int d = 0; d < n; d++) {
        seen[d] = vkt_trace_now_ns();
        vkt_net *net = s->net[d];
        uint32_t R = rows[d];
        if (R) {
            VKT_TRY(strategy_upload_input(net, 0, x + (uint64_t)row0 * m->input_features, R));
            VKT_TRY(strategy_upload_targets(
                net, 0, (const char *)targets + (uint64_t)row0 * tgt_per * 4, R));
        }
        for (int k = 0; k < r->nbuckets; k++) {
            vkt_cmd *cmd = r->cmd[d][k];
            const bucket *b = &r->b[k];
            VKT_TRY(vkt_cmd_begin(cmd, !untimed_bucket(s, r, d, k)));
            if (k == 0) {
                vkt_net_record_zero_grads(net, cmd);
                if (R) {
                    strategy_set_phase(s, net, true, step, row0);
                    vkt_net_record_forward(net, cmd, 0, R);
                    vkt_net_record_loss(net, cmd, 0, R, scale);
                }
            }
            if (R) vkt_net_record_backward_layers(net, cmd, 0, R, b->lo, b->hi, false);
            if (b->bytes) record_exchange(s, r, d, cmd, b, true);
            VKT_TRY(vkt_net_status(net));
            VKT_TRY(vkt_cmd_end(cmd));
            VKT_TRY(vkt_cmd_submit(cmd));
        }
        row0 += R;
    }
    // Reduce bucket by bucket, in the order the devices finish them (sharded: each bucket's sums
    // to the replicas whose ranges hold them, and the squared norm of all of them for --clip).
    double sumsq = 0;
    for (int k = 0; k < r->nbuckets; k++) {
        const bucket *b = &r->b[k];
        float *bufs[VKT_MAX_DEVICES];
        for (int d = 0; d < n; d++) {
            int64_t w0 = vkt_trace_now_ns();
            VKT_TRY(vkt_cmd_wait(r->cmd[d][k], VKT_WAIT_MS));
            int64_t w1 = vkt_trace_now_ns();
            // Time the host waited here is time the devices were still computing; attribute it
            // to the devices that had already finished this bucket.
            for (int e = 0; e < d; e++)
                s->stats[e].wait_ns += (double)(w1 - w0);
            VKT_TRY(strategy_account_cmd(s, d, r->cmd[d][k], (int)step));
            if (untimed_bucket(s, r, d, k)) { // its time as the host saw it
                s->stats[d].busy_ns += (double)(w1 - seen[d]);
                if (s->desc.trace)
                    vkt_trace_add_event(s->desc.trace, s->trace_pid[d],
                                        k == 0 ? "bwd:bucket 0 (with the forward, untimed)"
                                               : "bwd:bucket (untimed)",
                                        VKT_CAT_BACKWARD, seen[d], w1 - seen[d], (int)step);
            }
            seen[d] = w1;
            bufs[d] = (float *)((char *)vkt_buffer_mapped(r->xchg[d]) + b->off);
        }
        if (!b->bytes) continue;
        int64_t c0 = vkt_trace_now_ns();
        size_t bnd[VKT_MAX_DEVICES + 1];
        if (r->shard) {
            for (int q = 0; q <= n; q++) {
                uint64_t at = r->xb[q] < b->off              ? b->off
                              : r->xb[q] > b->off + b->bytes ? b->off + b->bytes
                                                             : r->xb[q];
                bnd[q] = (at - b->off) / 4;
            }
            VKT_TRY(vkt_comm_reduce_scatter_sum(r->comm, bufs, b->bytes / 4, bnd, &sumsq));
        } else {
            VKT_TRY(vkt_comm_allreduce_sum(r->comm, bufs, b->bytes / 4));
            if (s->world) {
                uint64_t sent0 = 0, recv0 = 0;
                vkt_world_stats ws;
                vkt_world_get_stats(s->world, &ws);
                sent0 = ws.bytes_sent, recv0 = ws.bytes_received;
                VKT_TRY(world_sum_bucket(s, r, b, bufs[0]));
                for (int d = 1; d < n; d++)
                    memcpy(bufs[d], bufs[0], b->bytes);
                vkt_world_get_stats(s->world, &ws);
                s->stats[0].bytes_moved += ws.bytes_sent - sent0 + ws.bytes_received - recv0;
            }
        }
        int64_t c1 = vkt_trace_now_ns();
        for (int d = 0; d < n; d++) {
            s->stats[d].comm_ns += (double)(c1 - c0);
            // Out, and back: every sum, or the sums of its range.
            s->stats[d].bytes_moved += b->bytes + (r->shard ? (bnd[d + 1] - bnd[d]) * 4 : b->bytes);
            // Hidden by the overlap when the device was still running its later buckets as the
            // reduction ended (it runs them back to back, so it ran throughout); else exposed.
            uint64_t done = 0;
            VKT_TRY(vkt_device_completed(s->dev[d], &done));
            if (done < vkt_cmd_submitted(r->cmd[d][r->nbuckets - 1]))
                s->stats[d].comm_hidden_ns += (double)(c1 - c0);
            else
                s->stats[d].busy_ns += (double)(c1 - c0); // exposed: the device waits on it
            if (s->desc.trace)
                vkt_trace_add_event(s->desc.trace, s->trace_pid[d],
                                    r->shard ? "comm:reduce_scatter" : "comm:allreduce",
                                    VKT_CAT_COMMUNICATION, c0, c1 - c0, (int)step);
        }
    }
    // Copy the sums back and update (sharded: the sums of the replica's range, its range's
    // update, and its updated parameters out to the exchange buffer).
    for (int d = 0; d < n; d++) {
        vkt_net *net = s->net[d];
        vkt_cmd *cmd = r->cmd[d][r->nbuckets];
        VKT_TRY(vkt_cmd_begin(cmd, true));
        for (int k = 0; k < r->nbuckets; k++) {
            const bucket *b = &r->b[k];
            if (!b->bytes) continue;
            if (!r->shard) {
                record_exchange(s, r, d, cmd, b, false);
                continue;
            }
            uint64_t x0 = r->xb[d] > b->off ? r->xb[d] : b->off;
            uint64_t x1 = r->xb[d + 1] < b->off + b->bytes ? r->xb[d + 1] : b->off + b->bytes;
            record_range(s, r, d, cmd, vkt_net_grads(net).buffer, x0, x1, false, "comm:grad_in");
        }
        vkt_cmd_barrier(cmd);
        if (r->shard && s->desc.optim.clip > 0)
            vkt_net_record_step_norm(net, cmd, step, (float)sumsq);
        else
            vkt_net_record_step(net, cmd, step);
        if (r->shard) {
            record_range(s, r, d, cmd, vkt_net_params(net).buffer, r->xb[d], r->xb[d + 1], true,
                         "comm:param_out");
            s->stats[d].bytes_moved += r->xb[d + 1] - r->xb[d];
        }
        VKT_TRY(vkt_net_status(net));
        VKT_TRY(vkt_cmd_end(cmd));
        VKT_TRY(vkt_cmd_submit(cmd));
    }
    double total = 0;
    for (int d = 0; d < n; d++) {
        VKT_TRY(vkt_cmd_wait(r->cmd[d][r->nbuckets], VKT_WAIT_MS));
        VKT_TRY(strategy_account_cmd(s, d, r->cmd[d][r->nbuckets], (int)step));
        if (rows[d]) {
            double ls;
            VKT_TRY(strategy_read_loss(s->net[d], 0, rows[d], &ls));
            total += ls;
        }
    }
    if (r->shard) VKT_TRY(gather_params(s, r, step));
    if (s->world) VKT_TRY(vkt_world_allreduce_f64(s->world, &total, 1, "the step's loss"));
    // Each replica updated its running statistics from its own shard (per-device batch
    // statistics, as DDP without SyncBatchNorm); device 0's are kept, as DDP's broadcast_buffers.
    VKT_TRY(strategy_broadcast_state(s));
    int64_t t1 = vkt_trace_now_ns();
    for (int d = 0; d < n; d++)
        s->stats[d].wall_ns += (double)(t1 - t0);
    *loss_sum = total;
    return VKT_OK;
}

static vkt_status repl_eval(vkt_strategy *s, const float *x, const void *targets, uint32_t B,
                            double *loss_sum, uint64_t *correct) {
    repl *r = s->impl;
    uint32_t rows[VKT_MAX_DEVICES], row0;
    shard_rows(s, r, B, rows, &row0);
    const vkt_model_desc *m = s->desc.model;
    uint64_t tgt_per = vkt_model_targets_per_sample(m);
    *loss_sum = 0;
    *correct = 0;
    for (int d = 0; d < s->ndev; d++) {
        if (rows[d]) {
            double ls;
            uint64_t c;
            VKT_TRY(strategy_eval_on(s, d, x + (uint64_t)row0 * m->input_features,
                                     (const char *)targets + (uint64_t)row0 * tgt_per * 4, rows[d],
                                     &ls, &c));
            *loss_sum += ls;
            *correct += c;
        }
        row0 += rows[d];
    }
    if (s->world) { // every rank's rows: the whole batch's
        double v[2] = {*loss_sum, (double)*correct};
        VKT_TRY(vkt_world_allreduce_f64(s->world, v, 2, "the evaluation's loss"));
        *loss_sum = v[0];
        *correct = (uint64_t)v[1];
    }
    return VKT_OK;
}

static void repl_destroy(vkt_strategy *s) {
    repl *r = s->impl;
    if (!r) return;
    for (int d = 0; d < s->ndev; d++) {
        for (int k = 1; k <= r->nbuckets + 1; k++)
            vkt_cmd_destroy(r->cmd[d][k]);
        vkt_buffer_destroy(r->xchg[d]);
    }
    vkt_comm_destroy(r->comm);
    free(r->dense);
    free(r);
    s->impl = NULL;
}

static const strategy_vtbl repl_vtbl = {
    .step = repl_step, .eval = repl_eval, .destroy = repl_destroy};

// Seconds one forward + backward of `rows` rows takes on device d (for --balance auto).
static vkt_status measure_speed(vkt_strategy *s, int d, uint32_t rows, double *sec) {
    vkt_net *net = s->net[d];
    vkt_cmd *cmd = s->cmd[d];
    *sec = 0;
    for (int rep = 0; rep < 2; rep++) { // the first run builds pipelines and warms caches
        int64_t t0 = vkt_trace_now_ns();
        VKT_TRY(vkt_cmd_begin(cmd, false));
        vkt_cmd_fill(cmd, vkt_net_input(net, 0), 0);
        vkt_cmd_fill(cmd, vkt_net_targets(net, 0), 0);
        vkt_cmd_barrier(cmd);
        strategy_set_phase(s, net, true, 1, 0);
        vkt_net_record_forward(net, cmd, 0, rows);
        vkt_net_record_loss(net, cmd, 0, rows, 1.0f);
        vkt_net_record_backward(net, cmd, 0, rows, false);
        vkt_net_record_zero_grads(net, cmd);
        VKT_TRY(vkt_net_status(net));
        VKT_TRY(vkt_cmd_end(cmd));
        VKT_TRY(vkt_cmd_submit(cmd));
        VKT_TRY(vkt_cmd_wait(cmd, VKT_WAIT_MS));
        *sec = (vkt_trace_now_ns() - t0) * 1e-9;
    }
    return VKT_OK;
}

// Across ranks: every rank's shares (this rank's in r->share[0..ndev) when given: manual or
// measured; else equal), in global device order.
static vkt_status world_shares(vkt_strategy *s, repl *r, bool given) {
    float mine[VKT_MAX_DEVICES], all[VKT_MAX_DEVICES * VKT_MAX_DEVICES];
    for (int i = 0; i < VKT_MAX_DEVICES; i++)
        mine[i] = i < s->ndev ? (given ? r->share[i] : 1) : 0;
    VKT_TRY(vkt_world_allgather(s->world, mine, sizeof mine, all, "every rank's batch shares"));
    for (int q = 0; q < s->nranks; q++)
        for (int i = s->rank_first[q]; i < s->rank_first[q + 1]; i++)
            r->share[i] = all[q * VKT_MAX_DEVICES + i - s->rank_first[q]];
    return VKT_OK;
}

// Across ranks: the plan over every rank's devices, this rank's at their global places and the
// others' as its first device without a limit (only this rank's devices are checked here; each
// rank checks its own); the fitting plan's entries moved to this rank's device indices.
static vkt_status world_plan(vkt_strategy *s, const repl *r, vkt_plan_input *pi, vkt_plan *p) {
    vkt_plan_input loc = *pi;
    for (int g = s->gdev - 1; g >= 0; g--) {
        int d = g - s->gfirst, src = d >= 0 && d < s->ndev ? d : 0;
        pi->limit[g] = d == src ? loc.limit[src] : UINT64_MAX / 4;
        pi->align[g] = loc.align[src];
        pi->max_alloc[g] = loc.max_alloc[src];
        pi->upload_areas[g] = loc.upload_areas[src];
        pi->balance[g] = loc.balance[0] < 0 ? -1 : r->share[g];
    }
    pi->ndevices = s->gdev;
    vkt_plan_replicated(pi, p);
    for (int d = 0; d < s->ndev; d++) {
        int g = s->gfirst + d;
        if (p->need[g].total > pi->limit[g])
            return vkt_fail(VKT_ERR_DEVICE_MEMORY,
                            "rank %d's %s needs %.1f MiB for its replica of model %s at %u rows, "
                            "more than its %.1f MiB: replication needs the whole model on every "
                            "device; --strategy layers splits it over the ranks",
                            s->rank, s->stats[d].label, p->need[g].total / 1048576.0,
                            s->desc.model->name, p->net_rows[g], pi->limit[g] / 1048576.0);
        p->net_rows[d] = p->net_rows[g];
    }
    p->fits = true;
    return VKT_OK;
}

vkt_status strategy_replicated_create(vkt_strategy *s) {
    const vkt_strategy_desc *d = &s->desc;
    if (s->gdev < 2)
        return vkt_fail(VKT_ERR_ARG, "--strategy replicated needs at least two devices in --device "
                                     "(the same one twice gives two logical devices)");
    repl *r = calloc(1, sizeof *r);
    if (!r) return vkt_fail(VKT_ERR_HOST_MEMORY, "out of host memory");
    s->impl = r;
    s->replicated = true;
    bool auto_balance = d->balance[0] < 0, manual = false;
    for (int i = 0; i < d->ndevices; i++) {
        r->share[i] = 1;
        if (!auto_balance && d->balance[i] > 0) manual = true;
    }
    if (manual)
        for (int i = 0; i < d->ndevices; i++)
            r->share[i] = d->balance[i];
    VKT_TRY(strategy_open_devices(s));
    if (s->world) VKT_TRY(world_shares(s, r, manual));

    // Check every replica fits before allocating anything (the plan's refusal): replication
    // needs the whole model on every device, so the message points at the strategy that splits
    // it. Each replica is built for the rows the plan counted.
    vkt_plan_input pi;
    strategy_plan_input(s, &pi); // the shares as given: equal, manual or measured (auto)
    pi.shard_optimizer = r->shard = d->shard_optimizer;
    vkt_plan p;
    if (s->world)
        VKT_TRY(world_plan(s, r, &pi, &p));
    else
        vkt_plan_replicated(&pi, &p);
    if (!p.fits) return strategy_refuse(s, &p, &pi);
    if (r->shard) { // the plan's shards: at bounds every device can view
        uint64_t amax = 16;
        for (int i = 0; i < s->ndev; i++)
            if (pi.align[i] > amax) amax = pi.align[i];
        vkt_plan_optim_shards(d->model, s->ndev, amax, r->bound);
    }
    for (int i = 0; i < s->ndev; i++) {
        vkt_net_desc nd = {.model = d->model,
                           .first_layer = 0,
                           .last_layer = d->model->nlayers,
                           .max_batch = p.net_rows[i],
                           .slots = 1,
                           .optim = d->optim,
                           .shard_optim = r->shard,
                           .optim_lo = r->bound[i],
                           .optim_hi = r->bound[i + 1]};
        VKT_TRY(vkt_net_create(s->dev[i], s->ops[i], &nd, &s->net[i]));
    }
    VKT_TRY(make_buckets(s, r));
    if (s->world) {
        uint64_t most = 0;
        for (int k = 0; k < r->nbuckets; k++)
            if (r->b[k].bytes > most) most = r->b[k].bytes;
        r->dense = malloc(most ? most : 4);
        if (!r->dense) return vkt_fail(VKT_ERR_HOST_MEMORY, "out of host memory");
    }
    uint64_t packed = vkt_net_packed_bytes(s->net[0]); // what the plan counted for the exchange
    for (int i = 0; i < s->ndev; i++) {
        // Replicas of devices with different offset alignments pad their tensors differently
        // (lavapipe 16 bytes, SwiftShader 256): their gradients were summed out of place.
        r->same_layout[i] = vkt_net_packed_bytes(s->net[i]) == packed;
        for (int t = 0; r->same_layout[i] && t < vkt_net_tensor_count(s->net[i]); t++)
            r->same_layout[i] = vkt_net_get_tensor(s->net[i], t)->offset ==
                                vkt_net_get_tensor(s->net[0], t)->offset;
        VKT_TRY(vkt_buffer_create_host(s->dev[i], packed, "gradient exchange", &r->xchg[i]));
        // The padding between tensors stays zero (per-tensor copies never write it).
        memset(vkt_buffer_mapped(r->xchg[i]), 0, packed);
        r->cmd[i][0] = s->cmd[i];
        for (int k = 1; k <= r->nbuckets + (r->shard ? 1 : 0); k++)
            VKT_TRY(vkt_cmd_create(s->dev[i], &r->cmd[i][k]));
    }
    for (int q = 0; q <= s->ndev; q++)
        r->xb[q] = packed_offset(s->net[0], r->bound[q]);
    VKT_TRY(vkt_comm_create_local(s->ndev, &r->comm));
    if (auto_balance) {
        uint32_t probe = d->batch < 64 ? d->batch : 64;
        for (int i = 0; i < s->ndev; i++) {
            double sec;
            VKT_TRY(measure_speed(s, i, probe, &sec));
            r->share[i] = (float)(1.0 / (sec > 1e-9 ? sec : 1e-9));
        }
        if (s->world) VKT_TRY(world_shares(s, r, true));
    }
    s->vt = &repl_vtbl;
    return VKT_OK;
}
