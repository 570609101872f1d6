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
    return vkt_tensor_comm_range(split, 0, split->nlayers, false, B);
}

vkt_tensor_comm vkt_tensor_comm_range(const vkt_model_desc *split, int lo, int hi, bool input_grad,
                                      uint32_t B) {
    vkt_tensor_comm c = {0};
    // The range's first layer computes its input gradient when the stage's input needs one.
    comm_seq(split->layers + lo, 1, input_grad, B, &c);
    if (hi > lo + 1) comm_seq(split->layers + lo + 1, hi - lo - 1, true, B, &c);
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

// Tensor i's index in the nets of the group starting at first (-1: that group does not hold it).
static int local_in(vkt_strategy *s, int first, int i) {
    if (first == s->owner[i]) return s->local[i];
    return vkt_net_find_tensor(s->net[first], s->tensors[i].name);
}

// Writes to every group holding the tensor (a stage's only; every replica's under
// replicated,tensor).
vkt_status tp_map_write(vkt_strategy *s, const tp_map *M, vkt_net_store store, int i,
                        const float *src) {
    uint64_t K = cols_of(&s->tensors[i]);
    for (int first = 0; first < s->ndev; first += M->n) {
        int li = local_in(s, first, i);
        for (int k = 0; k < M->n && li >= 0; k++) {
            vkt_net *net = s->net[first + k];
            if (!M->np[i]) {
                VKT_TRY(vkt_net_write_tensor(net, store, li, src));
                continue;
            }
            float *tmp = malloc(vkt_net_get_tensor(net, li)->count * 4);
            if (!tmp) return vkt_fail(VKT_ERR_HOST_MEMORY, "out of host memory");
            for (int c = 0; c < M->np[i]; c++) {
                const vkt_tp_piece *p = &M->pieces[i][k][c];
                for (uint64_t r = 0; r < p->nrows; r++)
                    memcpy(tmp + (p->local_row0 + r) * p->ncols, src + (p->row0 + r) * K + p->col0,
                           p->ncols * 4);
            }
            vkt_status st = vkt_net_write_tensor(net, store, li, tmp);
            free(tmp);
            VKT_TRY(st);
        }
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
            int li = M->np[i] ? -1 : local_in(s, first, i);
            if (li < 0) continue;
            VKT_TRY(vkt_net_read_tensor(s->net[first], VKT_STORE_PARAM, li, M->sync));
            for (int k = 1; k < M->n; k++)
                VKT_TRY(vkt_net_write_tensor(s->net[first + k], VKT_STORE_PARAM, li, M->sync));
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
// The strategy: tensor (one group of every device, the whole batch), or replicated,tensor (G
// groups of T devices, each a replica of the model split T ways, the batch sharded over the
// groups; after the backward, device k of every group sums its gradients with device k of the
// others, as replicated does between whole replicas)

typedef struct tensor_impl {
    int T, G;                              // devices per group, groups
    vkt_model_desc model[VKT_MAX_DEVICES]; // rank k's copy (its slices)
    tp_group *group[VKT_MAX_DEVICES];
    tp_map *map;
    struct tensor_arg {
        vkt_strategy *s;
        int d;
    } arg[VKT_MAX_DEVICES];
    // replicated,tensor: each device's gradients in host-visible memory (its own layout), and
    // the meeting of rank k's devices across the groups
    vkt_buffer *xchg[VKT_MAX_DEVICES];
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int arrived[VKT_MAX_DEVICES];
    uint64_t generation[VKT_MAX_DEVICES];
    bool failed;
    // The step or pass being run: rows and first row of each group's shard.
    uint32_t step, B, rows[VKT_MAX_DEVICES], row0[VKT_MAX_DEVICES];
    bool train, eval, accuracy;
    float scale;
    float *predict_out;
    double loss[VKT_MAX_DEVICES];
    uint32_t correct[VKT_MAX_DEVICES];
} tensor_impl;

static void fail_all(vkt_strategy *s, vkt_status st) {
    tensor_impl *T = s->impl;
    for (int g = 0; g < T->G; g++)
        tp_group_fail(T->group[g], st);
    pthread_mutex_lock(&T->mu);
    T->failed = true;
    pthread_cond_broadcast(&T->cv);
    pthread_mutex_unlock(&T->mu);
}

// Device d's gradients are in its exchange buffer: waits for the same rank of every group, and
// the last to arrive sums them tensor by tensor (group order; each device's own offsets), in place.
static bool meet_replicas(vkt_strategy *s, int d) {
    tensor_impl *T = s->impl;
    int k = d % T->T;
    int64_t t0 = vkt_trace_now_ns();
    double reduce_ns = 0;
    pthread_mutex_lock(&T->mu);
    uint64_t gen = T->generation[k];
    if (++T->arrived[k] == T->G && !T->failed) {
        int64_t c0 = vkt_trace_now_ns();
        vkt_net *n0 = s->net[k];
        for (int i = 0; i < vkt_net_tensor_count(n0); i++) {
            const vkt_net_tensor *t = vkt_net_get_tensor(n0, i);
            if (t->state) continue;
            float *acc = (float *)((char *)vkt_buffer_mapped(T->xchg[k]) + t->offset);
            for (int g = 1; g < T->G; g++) {
                int e = g * T->T + k;
                const float *src = (const float *)((char *)vkt_buffer_mapped(T->xchg[e]) +
                                                   vkt_net_get_tensor(s->net[e], i)->offset);
                for (uint64_t j = 0; j < t->count; j++)
                    acc[j] += src[j];
            }
            for (int g = 1; g < T->G; g++) {
                int e = g * T->T + k;
                memcpy((char *)vkt_buffer_mapped(T->xchg[e]) +
                           vkt_net_get_tensor(s->net[e], i)->offset,
                       acc, t->count * 4);
            }
        }
        int64_t c1 = vkt_trace_now_ns();
        reduce_ns = (double)(c1 - c0);
        for (int g = 0; g < T->G; g++) {
            int e = g * T->T + k;
            s->stats[e].comm_ns += reduce_ns;
            s->stats[e].busy_ns += reduce_ns;
            if (s->desc.trace)
                vkt_trace_add_event(s->desc.trace, s->trace_pid[e], "comm:allreduce_replicas",
                                    VKT_CAT_COMMUNICATION, c0, c1 - c0, (int)T->step);
        }
        T->arrived[k] = 0;
        T->generation[k]++;
        pthread_cond_broadcast(&T->cv);
    } else {
        while (T->generation[k] == gen && !T->failed)
            pthread_cond_wait(&T->cv, &T->mu);
    }
    bool ok = !T->failed;
    pthread_mutex_unlock(&T->mu);
    double waited = (double)(vkt_trace_now_ns() - t0) - reduce_ns;
    if (waited > 0) s->stats[d].wait_ns += waited;
    s->stats[d].bytes_moved += 2 * vkt_net_packed_bytes(s->net[d]);
    return ok;
}

// Runs what was recorded, sums the gradients with the other replicas' (meet_replicas) and begins
// the stream again with the sums copied back.
static vkt_status exchange_gradients(vkt_strategy *s, int d) {
    tensor_impl *T = s->impl;
    vkt_cmd *cmd = s->cmd[d];
    vkt_view g = vkt_net_grads(s->net[d]), x = vkt_buffer_whole(T->xchg[d]);
    vkt_cmd_copy(cmd, g, x, "comm:grad_out");
    VKT_TRY(vkt_cmd_end(cmd));
    VKT_TRY(vkt_cmd_submit(cmd));
    VKT_TRY(vkt_cmd_wait(cmd, VKT_WAIT_MS));
    VKT_TRY(strategy_account_cmd(s, d, cmd, (int)T->step));
    if (!meet_replicas(s, d)) return vkt_fail(VKT_ERR_ARG, "another device of the run failed");
    VKT_TRY(vkt_cmd_begin(cmd, true));
    vkt_cmd_copy(cmd, x, g, "comm:grad_in");
    vkt_cmd_barrier(cmd);
    return VKT_OK;
}

// One device's part of a step (train), an evaluation or a forward (predict), on its group's
// shard of the batch, already in its net.
static vkt_status run_device(vkt_strategy *s, int d) {
    tensor_impl *T = s->impl;
    vkt_net *net = s->net[d];
    vkt_cmd *cmd = s->cmd[d];
    int grp = d / T->T;
    bool reports = d % T->T == 0; // rank 0 reports its group's loss and outputs
    uint32_t R = T->rows[grp];
    VKT_TRY(vkt_cmd_begin(cmd, T->train));
    if (T->train) {
        vkt_net_record_zero_grads(net, cmd);
        strategy_set_phase(s, net, true, T->step, T->row0[grp]);
    } else {
        if (T->accuracy) {
            vkt_cmd_fill(cmd, vkt_net_correct(net), 0);
            vkt_cmd_barrier(cmd);
        }
        strategy_set_phase(s, net, false, 0, 0);
    }
    if (R) {
        vkt_net_record_forward(net, cmd, 0, R);
        if (T->train || T->eval) vkt_net_record_loss(net, cmd, 0, R, T->scale);
        if (T->accuracy) vkt_net_record_accuracy(net, cmd, 0, R);
        if (T->train) vkt_net_record_backward(net, cmd, 0, R, false);
    }
    vkt_status st = VKT_OK;
    if (T->train && T->G > 1) st = exchange_gradients(s, d);
    if (T->train && st == VKT_OK) vkt_net_record_step(net, cmd, T->step);
    if (st == VKT_OK) st = vkt_net_status(net);
    vkt_status e = vkt_cmd_end(cmd);
    VKT_TRY(st);
    VKT_TRY(e);
    VKT_TRY(vkt_cmd_submit(cmd));
    VKT_TRY(vkt_cmd_wait(cmd, VKT_WAIT_MS));
    if (T->train) VKT_TRY(strategy_account_cmd(s, d, cmd, (int)T->step));
    if (!reports || !R) return VKT_OK;
    if (T->train || T->eval) VKT_TRY(strategy_read_loss(net, 0, R, &T->loss[grp]));
    if (T->accuracy) {
        vkt_view v = vkt_net_correct(net);
        VKT_TRY(vkt_buffer_read(v.buffer, v.offset, &T->correct[grp], 4));
    }
    if (T->predict_out) {
        vkt_view v = vkt_net_output(net, 0);
        uint32_t out = vkt_net_out_features(net);
        VKT_TRY(vkt_buffer_read(v.buffer, v.offset, T->predict_out + (uint64_t)T->row0[grp] * out,
                                (uint64_t)R * out * 4));
    }
    return VKT_OK;
}

static void *device_thread(void *p) {
    struct tensor_arg *a = p;
    vkt_status st = run_device(a->s, a->d);
    if (st != VKT_OK) fail_all(a->s, st);
    return NULL;
}

// Uploads each group's shard of the batch to its devices and runs the pass on all of them, one
// thread each.
static vkt_status run_all(vkt_strategy *s, const float *x, const void *targets, uint32_t B) {
    tensor_impl *T = s->impl;
    const vkt_model_desc *m = s->desc.model;
    uint64_t tgt_per = vkt_model_targets_per_sample(m);
    T->B = B;
    const float equal[VKT_MAX_DEVICES] = {0};
    vkt_plan_shard_rows(equal, T->G, B, T->rows);
    for (int g = 0, r0 = 0; g < T->G; r0 += T->rows[g], g++) {
        T->row0[g] = (uint32_t)r0;
        T->loss[g] = 0, T->correct[g] = 0;
    }
    for (int d = 0; d < s->ndev; d++) {
        int g = d / T->T;
        if (!T->rows[g]) continue;
        VKT_TRY(strategy_upload_input(s->net[d], 0, x + (uint64_t)T->row0[g] * m->input_features,
                                      T->rows[g]));
        if (targets)
            VKT_TRY(strategy_upload_targets(
                s->net[d], 0, (const char *)targets + (uint64_t)T->row0[g] * tgt_per * 4,
                T->rows[g]));
    }
    for (int g = 0; g < T->G; g++)
        tp_group_reset(T->group[g], T->step);
    T->failed = false;
    memset(T->arrived, 0, sizeof T->arrived);
    pthread_t th[VKT_MAX_DEVICES];
    int started = 0;
    for (int d = 0; d < s->ndev; d++) {
        if (pthread_create(&th[d], NULL, device_thread, &T->arg[d]) != 0) {
            fail_all(s, vkt_fail(VKT_ERR_HOST_MEMORY, "cannot start a device thread"));
            break;
        }
        started++;
    }
    for (int d = 0; d < started; d++)
        pthread_join(th[d], NULL);
    for (int g = 0; g < T->G; g++) {
        vkt_status err;
        const char *msg;
        if (tp_group_failed(T->group[g], &err, &msg)) return vkt_fail(err, "%s", msg);
    }
    return VKT_OK;
}

// replicated,tensor: every group's running statistics (from its own shard) replaced by group 0's,
// as replicated does (DDP's broadcast_buffers).
static vkt_status broadcast_state(vkt_strategy *s) {
    tensor_impl *T = s->impl;
    for (int i = 0; i < s->ntensors && T->G > 1; i++) {
        if (!s->tensors[i].state) continue;
        float *v = malloc(s->tensors[i].count * 4);
        if (!v) return vkt_fail(VKT_ERR_HOST_MEMORY, "out of host memory");
        vkt_status st = tp_map_read(s, T->map, VKT_STORE_PARAM, i, v);
        if (st == VKT_OK) st = tp_map_write(s, T->map, VKT_STORE_PARAM, i, v);
        free(v);
        VKT_TRY(st);
    }
    return VKT_OK;
}

static vkt_status tensor_step(vkt_strategy *s, const float *x, const void *targets, uint32_t B,
                              uint32_t step, double *loss_sum) {
    tensor_impl *T = s->impl;
    int64_t t0 = vkt_trace_now_ns();
    T->step = step, T->train = true, T->eval = false, T->accuracy = false;
    T->predict_out = NULL;
    T->scale = 1.0f / (float)B;
    VKT_TRY(run_all(s, x, targets, B));
    VKT_TRY(tp_map_sync_whole(s, T->map, step));
    VKT_TRY(broadcast_state(s));
    // The devices of a group computed the same loss from the same whole output.
    *loss_sum = 0;
    for (int g = 0; g < T->G; g++)
        *loss_sum += T->loss[g];
    int64_t t1 = vkt_trace_now_ns();
    for (int d = 0; d < s->ndev; d++)
        s->stats[d].wall_ns += (double)(t1 - t0);
    return VKT_OK;
}

static vkt_status tensor_eval(vkt_strategy *s, const float *x, const void *targets, uint32_t B,
                              double *loss_sum, uint64_t *correct) {
    tensor_impl *T = s->impl;
    T->step = 0, T->train = false, T->eval = true;
    T->accuracy = s->desc.model->loss == VKT_LOSS_SOFTMAX_XENT;
    T->predict_out = NULL;
    T->scale = 1.0f / (float)B;
    VKT_TRY(run_all(s, x, targets, B));
    *loss_sum = 0;
    *correct = 0;
    for (int g = 0; g < T->G; g++)
        *loss_sum += T->loss[g], *correct += T->correct[g];
    return VKT_OK;
}

static vkt_status tensor_predict(vkt_strategy *s, const float *x, uint32_t B, float *out) {
    tensor_impl *T = s->impl;
    T->step = 0, T->train = false, T->eval = false, T->accuracy = false;
    T->predict_out = out;
    vkt_status st = run_all(s, x, NULL, B);
    T->predict_out = NULL;
    return st;
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
        vkt_buffer_destroy(T->xchg[d]);
    }
    for (int k = 0; k < T->T; k++)
        vkt_model_free(&T->model[k]);
    for (int g = 0; g < T->G; g++)
        tp_group_destroy(T->group[g]);
    tp_map_destroy(T->map);
    pthread_mutex_destroy(&T->mu);
    pthread_cond_destroy(&T->cv);
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
    bool composed = d->kind == VKT_STRATEGY_REPLICATED_TENSOR;
    int Tn = composed ? d->tensor_size : d->ndevices;
    if (composed && (Tn < 2 || d->ndevices % Tn || d->ndevices / Tn < 2))
        return vkt_fail(VKT_ERR_ARG,
                        "--strategy replicated,tensor needs --tensor-size T of at least 2 and "
                        "--device listing at least two replicas of T devices each (the first T "
                        "replica 0); %d devices and --tensor-size %d were given",
                        d->ndevices, Tn);
    if (d->ndevices < 2)
        return vkt_fail(VKT_ERR_ARG, "--strategy tensor needs at least two devices in --device "
                                     "(the same one twice gives two logical devices)");
    tensor_impl *T = calloc(1, sizeof *T);
    if (!T) return vkt_fail(VKT_ERR_HOST_MEMORY, "out of host memory");
    pthread_mutex_init(&T->mu, NULL);
    pthread_cond_init(&T->cv, NULL);
    T->T = Tn;
    T->G = d->ndevices / Tn;
    s->impl = T;
    s->vt = &tensor_vtbl; // its destroy frees the copies of the model after the nets
    VKT_TRY(strategy_open_devices(s));

    // What does not fit is refused before anything is allocated, in the plan's words.
    vkt_plan_input pi;
    strategy_plan_input(s, &pi);
    vkt_plan p;
    vkt_plan_tensor(&pi, &p);
    if (!p.fits) return strategy_refuse(s, &p, &pi);
    for (int k = 0; k < Tn; k++)
        VKT_TRY(vkt_tensor_model(d->model, k, Tn, &T->model[k]));
    for (int i = 0; i < s->ndev; i++) {
        vkt_net_desc nd = {.model = &T->model[i % Tn],
                           .first_layer = 0,
                           .last_layer = d->model->nlayers,
                           .max_batch = p.net_rows[i],
                           .slots = 1,
                           .optim = d->optim};
        VKT_TRY(vkt_net_create(s->dev[i], s->ops[i], &nd, &s->net[i]));
        T->arg[i] = (struct tensor_arg){s, i};
        if (T->G > 1)
            VKT_TRY(vkt_buffer_create_host(s->dev[i], vkt_net_packed_bytes(s->net[i]),
                                           "gradient exchange", &T->xchg[i]));
    }
    uint64_t staging = tp_staging_bytes(d->model, Tn, p.net_rows[0]);
    for (int g = 0; g < T->G; g++) {
        VKT_TRY(tp_group_create(s, g * Tn, Tn, staging, &T->group[g]));
        for (int k = 0; k < Tn; k++)
            tp_group_attach(T->group[g], k);
    }
    return tp_map_create(s, Tn, &T->map);
}
