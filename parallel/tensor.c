// tensor.c: tensor parallelism, as Megatron-LM lays out a transformer (Shoeybi et al., 2019).
// Every device holds a copy of the model in which the weights that can be split are cut into
// slices (vkt_tensor_model): a dense layer followed, past elementwise layers only, by another
// becomes a column split (device k computes output features [lo_k, hi_k)) and a row split (it
// multiplies only those features: its output is a partial sum), and an attention layer's heads
// are split (each device projects, attends and out-projects its heads). Everything else (norms,
// embeddings, a lone head) is whole on every device, computed from the same inputs into the same
// results. Every device runs the whole batch; the partial sums are reduced through the
// communicator (parallel/comm.h): after each row split's product forward, and after each column
// split's input gradient backward, so an MLP block or an attention block costs one reduction
// each way. The loss, the whole layers' gradients and the update then agree on every device
// without any gradient exchange, and a step equals the single-device step up to the order of
// fp32 sums.
//
// Each device is driven by its own host thread, which records the step into its stream; a
// reduction (vkt_rec_allreduce, called by the split layers' recording) ends the stream there,
// submits it, copies the partial sum to a host-visible staging buffer, meets the other devices'
// threads, sums (the last to arrive, in the communicator's fixed order), and begins the stream
// again with the sum copied back. Memory per device: its slices' parameters, gradients and
// optimizer state, the whole layers', the activations of the whole batch (those of a split layer
// at its slice's width) and the staging (vkt_plan_tensor counts the same bytes).
//
// Checkpoints see whole tensors with PyTorch's names: the strategy lists the whole model's
// tensors and gathers and scatters the slices (the layer kinds' tp_pieces say where each lies).
// --clip's global norm sums the slices' squares over the devices (one more reduction, of one
// float) and adds the whole tensors' once (network.c). Devices of different drivers round the
// whole layers differently, so their copies would drift apart: in such a run device 0's whole
// tensors are copied to the others after every step.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "layer.h"
#include "plan.h"
#include "strategy_internal.h"
#include "vkt_internal.h"

// ---------------------------------------------------------------------------------------------
// The split model (shared with the planner)

static uint32_t part(uint32_t full, int k, int n) { return (uint32_t)((uint64_t)full * k / n); }

static void set_last(vkt_shape *s, uint32_t v, uint32_t *features) {
    s->dim[s->ndim - 1] = v;
    *features = (uint32_t)vkt_shape_elements(s);
}

static void mark(vkt_layer_desc *l, vkt_tp_mode mode, int rank, int n, uint32_t lo, uint32_t hi,
                 uint32_t full) {
    l->tp = mode;
    l->tp_rank = rank;
    l->tp_size = n;
    l->tp_lo = lo;
    l->tp_hi = hi;
    l->tp_full = full;
}

static void split_seq(vkt_layer_desc *ls, int nls, int rank, int n) {
    for (int i = 0; i < nls; i++) {
        vkt_layer_desc *l = &ls[i];
        if (l->nlayers) {
            split_seq(l->layers, l->nlayers, rank, n);
            continue;
        }
        vkt_tp_role role = l->type->tp_role;
        if (role == VKT_TP_ROLE_HEADS && l->units >= (uint32_t)n) {
            mark(l, VKT_TP_HEADS, rank, n, part(l->units, rank, n), part(l->units, rank + 1, n),
                 l->units);
            continue;
        }
        if (role != VKT_TP_ROLE_LINEAR || l->units < (uint32_t)n) continue;
        int j = i + 1;
        while (j < nls && !ls[j].nlayers && ls[j].type->tp_role == VKT_TP_ROLE_ELEMENTWISE)
            j++;
        if (j >= nls || ls[j].nlayers || ls[j].type->tp_role != VKT_TP_ROLE_LINEAR) continue;
        uint32_t full = l->units, lo = part(full, rank, n), hi = part(full, rank + 1, n);
        mark(l, VKT_TP_COLUMN, rank, n, lo, hi, full);
        l->units = hi - lo;
        set_last(&l->out, hi - lo, &l->out_features);
        for (int k = i + 1; k < j; k++) {
            mark(&ls[k], VKT_TP_SLICE, rank, n, lo, hi, full);
            set_last(&ls[k].in, hi - lo, &ls[k].in_features);
            set_last(&ls[k].out, hi - lo, &ls[k].out_features);
        }
        mark(&ls[j], VKT_TP_ROW, rank, n, lo, hi, full);
        set_last(&ls[j].in, hi - lo, &ls[j].in_features);
        i = j;
    }
}

// Deep copies n layers (their bodies too) into *out; on failure *out holds what was copied, every
// body not copied set to none, for vkt_model_free.
static vkt_status copy_layers(const vkt_layer_desc *src, int n, vkt_layer_desc **out) {
    vkt_layer_desc *d = calloc((size_t)n, sizeof *d);
    *out = d;
    if (!d) return vkt_fail(VKT_ERR_HOST_MEMORY, "out of host memory");
    memcpy(d, src, sizeof *d * (size_t)n);
    for (int i = 0; i < n; i++)
        d[i].layers = NULL, d[i].nlayers = 0;
    for (int i = 0; i < n; i++) {
        if (!src[i].nlayers) continue;
        d[i].nlayers = src[i].nlayers;
        vkt_status st = copy_layers(src[i].layers, src[i].nlayers, &d[i].layers);
        if (st != VKT_OK) {
            if (!d[i].layers) d[i].nlayers = 0;
            return st;
        }
    }
    return VKT_OK;
}

vkt_status vkt_tensor_model(const vkt_model_desc *m, int rank, int n, vkt_model_desc *out) {
    *out = *m;
    out->layers = NULL;
    out->nlayers = 0;
    vkt_status st = copy_layers(m->layers, m->nlayers, &out->layers);
    if (out->layers) out->nlayers = m->nlayers;
    if (st != VKT_OK) {
        vkt_model_free(out);
        return st;
    }
    split_seq(out->layers, out->nlayers, rank, n);
    return VKT_OK;
}

// need_dx: whether the backward computes the layer's input gradient (as vkt_rec_need_dx: not the
// model's first layer, nor the first of a body whose container does not).
static void comm_seq(const vkt_layer_desc *ls, int nls, bool need_dx, uint32_t B,
                     vkt_tensor_comm *c) {
    for (int i = 0; i < nls; i++) {
        const vkt_layer_desc *l = &ls[i];
        bool dx = i > 0 || need_dx;
        comm_seq(l->layers, l->nlayers, dx, B, c);
        uint64_t fwd = 0, bwd = 0;
        if (l->tp == VKT_TP_ROW || l->tp == VKT_TP_HEADS) fwd = 4ull * B * l->out_features;
        if ((l->tp == VKT_TP_COLUMN || l->tp == VKT_TP_HEADS) && dx)
            bwd = 4ull * B * l->in_features;
        if (l->tp == VKT_TP_COLUMN || l->tp == VKT_TP_HEADS) c->split_layers++;
        c->reductions += (fwd > 0) + (bwd > 0);
        c->bytes += fwd + bwd;
        if (fwd > c->largest) c->largest = fwd;
        if (bwd > c->largest) c->largest = bwd; // (evaluation reduces the forward's only)
    }
}

vkt_tensor_comm vkt_tensor_comm_of(const vkt_model_desc *split, uint32_t B) {
    vkt_tensor_comm c = {0};
    comm_seq(split->layers, split->nlayers, false, B, &c);
    return c;
}

// ---------------------------------------------------------------------------------------------
// Groups: the devices that hold the slices of the same layers, and their reductions

struct tp_group {
    vkt_strategy *s;
    int first, n;                         // devices [first, first + n)
    vkt_buffer *staging[VKT_MAX_DEVICES]; // host-visible: a reduction's part and its sum
    uint64_t staging_bytes;
    vkt_comm *comm;
    struct tp_rank {
        tp_group *g;
        int d;
    } rank[VKT_MAX_DEVICES];
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int arrived;
    uint64_t generation;
    bool failed;
    vkt_status err;
    char err_msg[1024];
    uint32_t step; // for the trace
};

vkt_status tp_group_create(vkt_strategy *s, int first, int n, uint64_t staging_bytes,
                           tp_group **out) {
    tp_group *g = calloc(1, sizeof *g);
    *out = g;
    if (!g) return vkt_fail(VKT_ERR_HOST_MEMORY, "out of host memory");
    g->s = s, g->first = first, g->n = n, g->staging_bytes = staging_bytes;
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
    for (int k = 0; k < n; k++) {
        g->rank[k] = (struct tp_rank){g, first + k};
        VKT_TRY(vkt_buffer_create_host(s->dev[first + k], staging_bytes, "tensor-parallel staging",
                                       &g->staging[k]));
    }
    return vkt_comm_create_local(n, &g->comm);
}

void tp_group_destroy(tp_group *g) {
    if (!g) return;
    for (int k = 0; k < g->n; k++)
        vkt_buffer_destroy(g->staging[k]);
    vkt_comm_destroy(g->comm);
    pthread_mutex_destroy(&g->mu);
    pthread_cond_destroy(&g->cv);
    free(g);
}

void tp_group_reset(tp_group *g, uint32_t step) {
    g->failed = false;
    g->arrived = 0;
    g->step = step;
}

void tp_group_fail(tp_group *g, vkt_status st) {
    pthread_mutex_lock(&g->mu);
    if (!g->failed) {
        g->failed = true;
        g->err = st;
        snprintf(g->err_msg, sizeof g->err_msg, "%s", vkt_error());
    }
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
}

bool tp_group_failed(const tp_group *g, vkt_status *err, const char **msg) {
    *err = g->err;
    *msg = g->err_msg;
    return g->failed;
}

// Rank k's part is in its staging; waits for every rank's, and the last to arrive sums them in
// place (rank 0, 1, ... order: every rank gets the same bits). Fails when another rank's thread
// failed (the pass is abandoned).
static vkt_status meet_and_sum(tp_group *g, int k, uint64_t nfloats) {
    vkt_strategy *s = g->s;
    int d = g->first + k;
    int64_t t0 = vkt_trace_now_ns();
    double reduce_ns = 0;
    pthread_mutex_lock(&g->mu);
    uint64_t gen = g->generation;
    if (++g->arrived == g->n && !g->failed) {
        float *bufs[VKT_MAX_DEVICES];
        for (int e = 0; e < g->n; e++)
            bufs[e] = vkt_buffer_mapped(g->staging[e]);
        int64_t c0 = vkt_trace_now_ns();
        vkt_status st = vkt_comm_allreduce_sum(g->comm, bufs, nfloats);
        int64_t c1 = vkt_trace_now_ns();
        reduce_ns = (double)(c1 - c0);
        for (int e = g->first; e < g->first + g->n; e++) {
            // Nothing overlaps a reduction: every device of the group waits for it.
            s->stats[e].comm_ns += reduce_ns;
            s->stats[e].busy_ns += reduce_ns;
            if (s->desc.trace)
                vkt_trace_add_event(s->desc.trace, s->trace_pid[e], "comm:allreduce",
                                    VKT_CAT_COMMUNICATION, c0, c1 - c0, (int)g->step);
        }
        if (st != VKT_OK && !g->failed) {
            g->failed = true;
            g->err = st;
            snprintf(g->err_msg, sizeof g->err_msg, "%s", vkt_error());
        }
        g->arrived = 0;
        g->generation++;
        pthread_cond_broadcast(&g->cv);
    } else {
        while (g->generation == gen && !g->failed)
            pthread_cond_wait(&g->cv, &g->mu);
    }
    bool ok = !g->failed;
    vkt_status err = g->err;
    pthread_mutex_unlock(&g->mu);
    int64_t t1 = vkt_trace_now_ns();
    double waited = (double)(t1 - t0) - reduce_ns;
    if (waited > 0) s->stats[d].wait_ns += waited;
    if (s->desc.trace && waited > 1000)
        vkt_trace_add_event(s->desc.trace, s->trace_pid[d], "wait:devices", VKT_CAT_WAIT, t0,
                            (int64_t)waited, (int)g->step);
    s->stats[d].bytes_moved += 2 * 4 * nfloats;
    // (The run reports the first failure, kept in the group's err_msg.)
    return ok ? VKT_OK : err;
}

// vkt_net_allreduce_fn: runs what was recorded, takes part in the sum, and begins the stream again
// with the sum copied back into v.
static vkt_status tp_allreduce(void *ctx, vkt_cmd *cmd, vkt_view v) {
    struct tp_rank *rk = ctx;
    tp_group *g = rk->g;
    vkt_strategy *s = g->s;
    int k = rk->d - g->first;
    VKT_ASSERT(v.size <= g->staging_bytes && v.size % 4 == 0);
    bool timed = vkt_cmd_timed(cmd);
    vkt_view st = vkt_buffer_view(g->staging[k], 0, v.size);
    vkt_cmd_copy(cmd, v, st, "comm:tp_send");
    vkt_status e = vkt_cmd_end(cmd);
    if (e == VKT_OK) e = vkt_cmd_submit(cmd);
    if (e == VKT_OK) e = vkt_cmd_wait(cmd, VKT_WAIT_MS);
    if (e == VKT_OK) e = strategy_account_cmd(s, rk->d, cmd, (int)g->step);
    if (e != VKT_OK)
        tp_group_fail(g, e);
    else
        e = meet_and_sum(g, k, v.size / 4);
    // The stream is recording again whatever happened, so the rest of the recording is valid.
    vkt_status b = vkt_cmd_begin(cmd, timed);
    if (e == VKT_OK && b == VKT_OK) {
        vkt_cmd_copy(cmd, st, v, "comm:tp_recv");
        vkt_cmd_barrier(cmd);
    }
    return e != VKT_OK ? e : b;
}

void tp_group_attach(tp_group *g, int k) {
    vkt_net_set_allreduce(g->s->net[g->first + k], tp_allreduce, &g->rank[k]);
}

// ---------------------------------------------------------------------------------------------
// Whole tensors from and to the slices

struct tp_map {
    int n; // devices per group
    // Where rank k's slice of whole tensor i lies (np[i] pieces, the same count on every rank;
    // 0: every rank holds it whole); the group holding it starts at s->owner[i], its index in
    // those nets is s->local[i].
    int *np;
    vkt_tp_piece (*pieces)[VKT_MAX_DEVICES][VKT_TP_MAX_PIECES];
    // Devices of different drivers round the whole layers differently (a product's summation
    // order, the transcendental functions): their copies would drift apart, step by step, and
    // the ranks would feed different inputs to the split layers. Then the whole tensors (and
    // running statistics) of such a group are copied from its first device to the others after
    // each step.
    bool mixed[VKT_MAX_DEVICES]; // per group's first device
    bool any_mixed;
    float *sync; // host room for the largest whole tensor
};

vkt_status tp_map_create(vkt_strategy *s, int n, tp_map **out) {
    const vkt_model_desc *m = s->desc.model;
    tp_map *M = calloc(1, sizeof *M);
    *out = M;
    if (!M) return vkt_fail(VKT_ERR_HOST_MEMORY, "out of host memory");
    M->n = n;
    int nt = vkt_model_tensors(m, 0, m->nlayers, NULL, 0);
    if (nt > MAX_TENSORS)
        return vkt_fail(VKT_ERR_ARG, "model %s has %d tensors, more than the %d a run can hold",
                        m->name, nt, MAX_TENSORS);
    s->ntensors = vkt_model_tensors(m, 0, m->nlayers, s->tensors, MAX_TENSORS);
    M->np = calloc((size_t)nt + 1, sizeof *M->np);
    M->pieces = calloc((size_t)nt + 1, sizeof *M->pieces);
    if (!M->np || !M->pieces) return vkt_fail(VKT_ERR_HOST_MEMORY, "out of host memory");
    uint64_t largest = 1;
    for (int i = 0; i < nt; i++) {
        s->owner[i] = -1;
        for (int first = 0; first < s->ndev && s->owner[i] < 0; first += n) {
            int li = vkt_net_find_tensor(s->net[first], s->tensors[i].name);
            if (li >= 0) s->owner[i] = first, s->local[i] = li;
        }
        VKT_ASSERT(s->owner[i] >= 0);
        for (int k = 0; k < n; k++) {
            const vkt_net_tensor *lt = vkt_net_get_tensor(s->net[s->owner[i] + k], s->local[i]);
            VKT_ASSERT(strcmp(lt->name, s->tensors[i].name) == 0);
            const vkt_layer_desc *l = lt->desc;
            int c = l->type->tp_pieces ? l->type->tp_pieces(l, lt->param, M->pieces[i][k]) : 0;
            VKT_ASSERT(k == 0 || c == M->np[i]);
            M->np[i] = c;
        }
        if (!M->np[i] && s->tensors[i].count > largest) largest = s->tensors[i].count;
    }
    for (int first = 0; first < s->ndev; first += n)
        for (int k = 1; k < n; k++)
            if (strcmp(vkt_device_get_info(s->dev[first + k])->driver,
                       vkt_device_get_info(s->dev[first])->driver))
                M->mixed[first] = M->any_mixed = true;
    M->sync = M->any_mixed ? malloc(largest * 4) : NULL;
    if (M->any_mixed && !M->sync) return vkt_fail(VKT_ERR_HOST_MEMORY, "out of host memory");
    return VKT_OK;
}

void tp_map_destroy(tp_map *M) {
    if (!M) return;
    free(M->np);
    free(M->pieces);
    free(M->sync);
    free(M);
}

// Columns of whole tensor t seen as a matrix (vkt_tp_piece).
static uint64_t cols_of(const vkt_net_tensor *t) { return t->count / t->shape[0]; }

vkt_status tp_map_read(vkt_strategy *s, const tp_map *M, vkt_net_store store, int i, float *dst) {
    int first = s->owner[i];
    if (!M->np[i]) return vkt_net_read_tensor(s->net[first], store, s->local[i], dst);
    uint64_t K = cols_of(&s->tensors[i]);
    vkt_status st = VKT_OK;
    for (int k = 0; k < M->n && st == VKT_OK; k++) {
        vkt_net *net = s->net[first + k];
        float *tmp = malloc(vkt_net_get_tensor(net, s->local[i])->count * 4);
        if (!tmp) return vkt_fail(VKT_ERR_HOST_MEMORY, "out of host memory");
        st = vkt_net_read_tensor(net, store, s->local[i], tmp);
        for (int c = 0; c < M->np[i] && st == VKT_OK; c++) {
            const vkt_tp_piece *p = &M->pieces[i][k][c];
            for (uint64_t r = 0; r < p->nrows; r++)
                memcpy(dst + (p->row0 + r) * K + p->col0, tmp + (p->local_row0 + r) * p->ncols,
                       p->ncols * 4);
        }
        free(tmp);
    }
    return st;
}

vkt_status tp_map_write(vkt_strategy *s, const tp_map *M, vkt_net_store store, int i,
                        const float *src) {
    int first = s->owner[i];
    uint64_t K = cols_of(&s->tensors[i]);
    for (int k = 0; k < M->n; k++) {
        vkt_net *net = s->net[first + k];
        if (!M->np[i]) {
            VKT_TRY(vkt_net_write_tensor(net, store, s->local[i], src));
            continue;
        }
        float *tmp = malloc(vkt_net_get_tensor(net, s->local[i])->count * 4);
        if (!tmp) return vkt_fail(VKT_ERR_HOST_MEMORY, "out of host memory");
        for (int c = 0; c < M->np[i]; c++) {
            const vkt_tp_piece *p = &M->pieces[i][k][c];
            for (uint64_t r = 0; r < p->nrows; r++)
                memcpy(tmp + (p->local_row0 + r) * p->ncols, src + (p->row0 + r) * K + p->col0,
                       p->ncols * 4);
        }
        vkt_status st = vkt_net_write_tensor(net, store, s->local[i], tmp);
        free(tmp);
        VKT_TRY(st);
    }
    return VKT_OK;
}

// The nets initialised their own copies (the whole tensors as the whole model would, the slices
// not): the slices are written from the whole model's values.
vkt_status tp_map_init(vkt_strategy *s, const tp_map *M, uint64_t seed) {
    for (int i = 0; i < s->ntensors; i++) {
        if (!M->np[i]) continue;
        const vkt_net_tensor *t = &s->tensors[i];
        float *v = malloc(t->count * 4);
        if (!v) return vkt_fail(VKT_ERR_HOST_MEMORY, "out of host memory");
        vkt_tensor_init_values(s->desc.model, t, seed, v);
        vkt_status st = tp_map_write(s, M, VKT_STORE_PARAM, i, v);
        free(v);
        VKT_TRY(st);
    }
    return VKT_OK;
}

vkt_status tp_map_sync_whole(vkt_strategy *s, tp_map *M, uint32_t step) {
    if (!M->any_mixed) return VKT_OK;
    for (int first = 0; first < s->ndev; first += M->n) {
        if (!M->mixed[first]) continue;
        int64_t c0 = vkt_trace_now_ns();
        uint64_t bytes = 0;
        for (int i = 0; i < s->ntensors; i++) {
            if (M->np[i] || s->owner[i] != first) continue;
            VKT_TRY(vkt_net_read_tensor(s->net[first], VKT_STORE_PARAM, s->local[i], M->sync));
            for (int k = 1; k < M->n; k++)
                VKT_TRY(
                    vkt_net_write_tensor(s->net[first + k], VKT_STORE_PARAM, s->local[i], M->sync));
            bytes += s->tensors[i].count * 4;
        }
        int64_t c1 = vkt_trace_now_ns();
        for (int d = first; d < first + M->n; d++) {
            s->stats[d].comm_ns += (double)(c1 - c0);
            s->stats[d].busy_ns += (double)(c1 - c0);
            s->stats[d].bytes_moved += bytes;
            if (s->desc.trace)
                vkt_trace_add_event(s->desc.trace, s->trace_pid[d], "comm:sync_whole",
                                    VKT_CAT_COMMUNICATION, c0, c1 - c0, (int)step);
        }
    }
    return VKT_OK;
}

uint64_t tp_staging_bytes(const vkt_model_desc *m, int n, uint32_t B) {
    uint64_t staging = 4; // the clipping norm's reduction
    for (int k = 0; k < n; k++) {
        vkt_model_desc split;
        if (vkt_tensor_model(m, k, n, &split) != VKT_OK) return 0;
        vkt_tensor_comm c = vkt_tensor_comm_of(&split, B);
        if (c.largest > staging) staging = c.largest;
        vkt_model_free(&split);
    }
    return staging;
}

// ---------------------------------------------------------------------------------------------
// The strategy: one group of every device, the whole model, the whole batch

typedef struct tensor_impl {
    vkt_model_desc model[VKT_MAX_DEVICES]; // each device's copy (its slices)
    tp_group *group;
    tp_map *map;
    struct tensor_arg {
        vkt_strategy *s;
        int d;
    } arg[VKT_MAX_DEVICES];
    // The step or pass being run.
    uint32_t step, B;
    bool train, eval, accuracy;
    float scale;
} tensor_impl;

// One device's part of a step (train), an evaluation or a forward (predict), on the whole batch
// already in its net.
static vkt_status run_device(vkt_strategy *s, int d) {
    tensor_impl *T = s->impl;
    vkt_net *net = s->net[d];
    vkt_cmd *cmd = s->cmd[d];
    uint32_t B = T->B;
    VKT_TRY(vkt_cmd_begin(cmd, T->train));
    if (T->train) {
        vkt_net_record_zero_grads(net, cmd);
        strategy_set_phase(s, net, true, T->step, 0);
    } else {
        if (T->accuracy) {
            vkt_cmd_fill(cmd, vkt_net_correct(net), 0);
            vkt_cmd_barrier(cmd);
        }
        strategy_set_phase(s, net, false, 0, 0);
    }
    vkt_net_record_forward(net, cmd, 0, B);
    if (T->train || T->eval) vkt_net_record_loss(net, cmd, 0, B, T->scale);
    if (T->accuracy) vkt_net_record_accuracy(net, cmd, 0, B);
    if (T->train) {
        vkt_net_record_backward(net, cmd, 0, B, false);
        vkt_net_record_step(net, cmd, T->step);
    }
    vkt_status st = vkt_net_status(net);
    vkt_status e = vkt_cmd_end(cmd);
    VKT_TRY(st);
    VKT_TRY(e);
    VKT_TRY(vkt_cmd_submit(cmd));
    VKT_TRY(vkt_cmd_wait(cmd, VKT_WAIT_MS));
    return T->train ? strategy_account_cmd(s, d, cmd, (int)T->step) : VKT_OK;
}

static void *device_thread(void *p) {
    struct tensor_arg *a = p;
    tensor_impl *T = a->s->impl;
    vkt_status st = run_device(a->s, a->d);
    if (st != VKT_OK) tp_group_fail(T->group, st);
    return NULL;
}

// Uploads the batch to every device and runs the pass on all of them, one thread each.
static vkt_status run_all(vkt_strategy *s, const float *x, const void *targets) {
    tensor_impl *T = s->impl;
    for (int d = 0; d < s->ndev; d++) {
        VKT_TRY(strategy_upload_input(s->net[d], 0, x, T->B));
        if (targets) VKT_TRY(strategy_upload_targets(s->net[d], 0, targets, T->B));
    }
    tp_group_reset(T->group, T->step);
    pthread_t th[VKT_MAX_DEVICES];
    int started = 0;
    for (int d = 0; d < s->ndev; d++) {
        if (pthread_create(&th[d], NULL, device_thread, &T->arg[d]) != 0) {
            tp_group_fail(T->group, vkt_fail(VKT_ERR_HOST_MEMORY, "cannot start a device thread"));
            break;
        }
        started++;
    }
    for (int d = 0; d < started; d++)
        pthread_join(th[d], NULL);
    vkt_status err;
    const char *msg;
    if (tp_group_failed(T->group, &err, &msg)) return vkt_fail(err, "%s", msg);
    return VKT_OK;
}

static vkt_status tensor_step(vkt_strategy *s, const float *x, const void *targets, uint32_t B,
                              uint32_t step, double *loss_sum) {
    tensor_impl *T = s->impl;
    int64_t t0 = vkt_trace_now_ns();
    T->step = step, T->B = B, T->train = true, T->eval = false, T->accuracy = false;
    T->scale = 1.0f / (float)B;
    VKT_TRY(run_all(s, x, targets));
    VKT_TRY(tp_map_sync_whole(s, T->map, step));
    // Every device computed the same loss from the same whole output.
    VKT_TRY(strategy_read_loss(s->net[0], 0, B, loss_sum));
    int64_t t1 = vkt_trace_now_ns();
    for (int d = 0; d < s->ndev; d++)
        s->stats[d].wall_ns += (double)(t1 - t0);
    return VKT_OK;
}

static vkt_status tensor_eval(vkt_strategy *s, const float *x, const void *targets, uint32_t B,
                              double *loss_sum, uint64_t *correct) {
    tensor_impl *T = s->impl;
    T->step = 0, T->B = B, T->train = false, T->eval = true;
    T->accuracy = s->desc.model->loss == VKT_LOSS_SOFTMAX_XENT;
    T->scale = 1.0f / (float)B;
    VKT_TRY(run_all(s, x, targets));
    VKT_TRY(strategy_read_loss(s->net[0], 0, B, loss_sum));
    uint32_t c = 0;
    if (T->accuracy) {
        vkt_view v = vkt_net_correct(s->net[0]);
        VKT_TRY(vkt_buffer_read(v.buffer, v.offset, &c, 4));
    }
    *correct = c;
    return VKT_OK;
}

static vkt_status tensor_predict(vkt_strategy *s, const float *x, uint32_t B, float *out) {
    tensor_impl *T = s->impl;
    T->step = 0, T->B = B, T->train = false, T->eval = false, T->accuracy = false;
    VKT_TRY(run_all(s, x, NULL));
    vkt_view v = vkt_net_output(s->net[0], 0);
    return vkt_buffer_read(v.buffer, v.offset, out,
                           (uint64_t)B * vkt_net_out_features(s->net[0]) * 4);
}

static vkt_status tensor_read(vkt_strategy *s, vkt_net_store store, int i, float *dst) {
    return tp_map_read(s, ((tensor_impl *)s->impl)->map, store, i, dst);
}

static vkt_status tensor_write(vkt_strategy *s, vkt_net_store store, int i, const float *src) {
    return tp_map_write(s, ((tensor_impl *)s->impl)->map, store, i, src);
}

static vkt_status tensor_init(vkt_strategy *s, uint64_t seed) {
    return tp_map_init(s, ((tensor_impl *)s->impl)->map, seed);
}

static void tensor_destroy(vkt_strategy *s) {
    tensor_impl *T = s->impl;
    if (!T) return;
    // The nets point at the copies of the model: free them first.
    for (int d = 0; d < s->ndev; d++) {
        vkt_net_destroy(s->net[d]);
        s->net[d] = NULL;
        vkt_model_free(&T->model[d]);
    }
    tp_group_destroy(T->group);
    tp_map_destroy(T->map);
    free(T);
    s->impl = NULL;
}

static const strategy_vtbl tensor_vtbl = {.step = tensor_step,
                                          .eval = tensor_eval,
                                          .destroy = tensor_destroy,
                                          .read = tensor_read,
                                          .write = tensor_write,
                                          .init = tensor_init,
                                          .predict = tensor_predict};

vkt_status strategy_tensor_create(vkt_strategy *s) {
    const vkt_strategy_desc *d = &s->desc;
    if (d->ndevices < 2)
        return vkt_fail(VKT_ERR_ARG, "--strategy tensor needs at least two devices in --device "
                                     "(the same one twice gives two logical devices)");
    tensor_impl *T = calloc(1, sizeof *T);
    if (!T) return vkt_fail(VKT_ERR_HOST_MEMORY, "out of host memory");
    s->impl = T;
    s->vt = &tensor_vtbl; // its destroy frees the copies of the model after the nets
    VKT_TRY(strategy_open_devices(s));

    // What does not fit is refused before anything is allocated, in the plan's words.
    vkt_plan_input pi;
    strategy_plan_input(s, &pi);
    vkt_plan p;
    vkt_plan_tensor(&pi, &p);
    if (!p.fits) return strategy_refuse(s, &p, &pi);
    for (int i = 0; i < s->ndev; i++) {
        VKT_TRY(vkt_tensor_model(d->model, i, s->ndev, &T->model[i]));
        vkt_net_desc nd = {.model = &T->model[i],
                           .first_layer = 0,
                           .last_layer = d->model->nlayers,
                           .max_batch = d->batch,
                           .slots = 1,
                           .optim = d->optim};
        VKT_TRY(vkt_net_create(s->dev[i], s->ops[i], &nd, &s->net[i]));
        T->arg[i] = (struct tensor_arg){s, i};
    }
    VKT_TRY(
        tp_group_create(s, 0, s->ndev, tp_staging_bytes(d->model, s->ndev, d->batch), &T->group));
    for (int i = 0; i < s->ndev; i++)
        tp_group_attach(T->group, i);
    return tp_map_create(s, s->ndev, &T->map);
}
