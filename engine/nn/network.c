// network.c: a model's layers (or a stage of them) on one device: the layout of parameters,
// gradients, optimizer state and activations, host access to tensors, and the recording of the
// forward, loss, backward and optimizer passes. Nothing here knows a layer kind: every layer is
// a node that its kind's table (engine/nn/layer.h, engine/nn/layers/) records through the
// vkt_rec_* functions below; containers (residual) record their bodies through them too.
//
// Fusion is a rule over neighbours, not a kind: a layer whose kind has an `epilogue` (an
// elementwise activation) right after a sibling whose kind `takes_epilogue` (a product) runs in
// that product's epilogue (y = f(x W^T + b) in one dispatch), and its backward in the epilogue
// of that product's input-gradient product (dZ = (dY W) * f'), where the device runs the
// epilogue faster than the separate kernel (vkt_matmul_epilogue_pays; vkt_context_desc.fuse
// overrides). The pre-activation is then written only for activations whose derivative needs it
// (vkt_act_grad_from_output). A kind that `takes_act` (batchnorm2d) applies such an activation
// after it in its forward and the activation's backward in its own, where the derivative follows
// from the output. One SGD step of fashion_mlp records 17 dispatches and 14 barriers
// unfused, 13 and 10 fused (test_mlp_grad checks the counts; docs/PERFORMANCE.md what it bought).
// The optimizer too, where a step's gradients are read by nobody but the optimizer (one batch on
// one device, SGD, no clipping: vkt_net_record_backward_step): a kind may apply the SGD step to a
// weight in its gradient's product (dense: VKT_MM_EPI_SGD) instead of storing the gradient.
//
// Does not: choose devices, move data between devices, or loop over batches (engine/run/train.c
// and parallel/ do).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "layer.h"
#include "network.h"
#include "vkt_internal.h"

#define LABEL_LEN 48

typedef struct stage_layout {
    int first, last;
    uint64_t param_bytes;   // one packed buffer (params, grads and each optimizer state)
    uint64_t state_bytes;   // the buffers' (running statistics)
    uint64_t scratch_bytes; // the largest scratch a node asks for
    // The largest staging a node's padded products may need (vkt_matmul_pad_bytes): the matmul
    // staging buffer, handed to the ops as their scratch while this net records.
    uint64_t staging_bytes;
    uint32_t node_base; // nodes of the model before the stage's first layer
    int ntensors;
    vkt_net_tensor *tensors;
    int nnodes;
    vkt_node *nodes; // pre-order
    int *top_node;   // [last - first]: the node of each top-level layer
    // activation buffer, per slot
    uint64_t slot_bytes;
    uint64_t in_off, in_grad_off, targets_off, loss_off;
    uint64_t correct_off; // after all slots
    uint64_t act_bytes;
    uint32_t in_features, out_features;
    // The optimizer state's buffers: the packed layout (optim_full), or the pieces of the shard
    // (vkt_net_desc.shard_optim), each aligned: tensor i's elements [lo, hi) at byte off.
    bool optim_full;
    uint64_t optim_bytes;
    struct opt_piece {
        uint64_t lo, hi, off;
    } * opt;
} stage_layout;

// Labels are handed to command streams, which keep the pointers until their timings are read:
// they live in blocks that are never reallocated.
#define LABELS_PER_BLOCK 64
typedef struct label_block {
    struct label_block *next;
    char label[LABELS_PER_BLOCK][LABEL_LEN];
} label_block;

struct vkt_net {
    vkt_device *dev;
    vkt_ops *ops;
    vkt_net_desc desc;
    const vkt_model_desc *model;
    stage_layout L;
    vkt_buffer *params, *grads, *opt1, *opt2, *act, *scratch;
    vkt_buffer *state, *work; // the buffers (running statistics); the nodes' shared scratch
    vkt_buffer *staging;      // the padded matmuls' (stage_layout.staging_bytes)
    vkt_net_phase phase;
    // A recording since the last vkt_net_set_phase read the step, seed or row (vkt_rec_phase).
    bool step_dependent;
    bool last_stage;
    bool fuse; // activations run in the matmul epilogues (see the header comment)
    int skip_barrier, barrier_count; // test hook: see vkt_net_test_skip_barrier
    label_block *labels; // newest first; a label never moves once made (streams point at it)
    int nlabels;         // in the newest block
    // Tensor parallelism: the reduction of split layers (vkt_net_set_allreduce), and its first
    // error.
    vkt_net_allreduce_fn allreduce;
    void *allreduce_ctx;
    vkt_status allreduce_status;
};

// ---------------------------------------------------------------------------------------------
// Layout

static uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

static void free_layout(stage_layout *L) {
    free(L->tensors);
    free(L->nodes);
    free(L->top_node);
    free(L->opt);
    L->tensors = NULL;
    L->nodes = NULL;
    L->top_node = NULL;
    L->opt = NULL;
}

static int count_nodes(const vkt_layer_desc *l) {
    int n = 1;
    for (int j = 0; j < l->nlayers; j++)
        n += count_nodes(&l->layers[j]);
    return n;
}

typedef struct layout_walk {
    stage_layout *L;
    uint64_t B, align, s; // rows per slot, alignment, next free byte of a slot
    int tensor;           // next tensor
} layout_walk;

// Lays out node n for layer l (its input and input gradient are in_off/dx_off) and its body;
// returns the next free node index.
static int place(layout_walk *w, const vkt_layer_desc *l, int n, int top, int parent, int prev,
                 const char *path, uint64_t in_off, uint64_t dx_off, bool last_child) {
    stage_layout *L = w->L;
    vkt_node *nd = &L->nodes[n];
    *nd = (vkt_node){.desc = l,
                     .top = top,
                     .parent = parent,
                     .prev = prev,
                     .next = -1,
                     .child0 = -1,
                     .in_off = in_off,
                     .dx_off = dx_off};
    snprintf(nd->path, sizeof nd->path, "%s", path);
    uint64_t bytes = w->B * l->out_features * 4;
    if (l->type->saved) {
        nd->saved_off = w->s;
        w->s = vkt_net_next_offset(w->s, l->type->saved(l, (uint32_t)w->B), w->align);
    }
    if (l->type->scratch) {
        // With the guard after it that the layers' regions have after theirs.
        uint64_t sb = l->type->scratch(l, (uint32_t)w->B) + VKT_NET_TENSOR_GUARD;
        if (sb > L->scratch_bytes) L->scratch_bytes = sb;
    }
    if (l->type->matmuls) {
        vkt_mm_shape sh[VKT_LAYER_MAX_MATMULS];
        int nm = l->type->matmuls(l, (uint32_t)w->B, true, sh);
        for (int i = 0; i < nm; i++) {
            uint64_t pb = vkt_matmul_pad_bytes(sh[i].form, sh[i].M, sh[i].N, sh[i].K);
            if (pb > L->staging_bytes) L->staging_bytes = pb;
        }
    }
    if (l->type->aliases_input) {
        nd->out_off = in_off;
        nd->grad_off = dx_off;
    } else {
        nd->out_off = w->s, w->s = vkt_net_next_offset(w->s, bytes, w->align);
        // A body's last layer writes its output gradient where the container's is: dL/d body
        // output is the container's output gradient (y = x + body(x)).
        if (last_child)
            nd->grad_off = L->nodes[parent].grad_off;
        else
            nd->grad_off = w->s, w->s = vkt_net_next_offset(w->s, bytes, w->align);
    }
    nd->tensor0 = w->tensor;
    vkt_param_spec ps[VKT_LAYER_MAX_PARAMS];
    nd->ntensors = l->type->params ? l->type->params(l, ps) : 0;
    w->tensor += nd->ntensors;
    int next = n + 1, cprev = -1;
    uint64_t cin = in_off, cdx = dx_off;
    for (int j = 0; j < l->nlayers; j++) {
        char sub[sizeof nd->path];
        snprintf(sub, sizeof sub, "%s.%d", path, j);
        int c = next;
        if (j == 0) L->nodes[n].child0 = c;
        next = place(w, &l->layers[j], c, top, n, cprev, sub, cin, cdx, j == l->nlayers - 1);
        if (cprev >= 0) L->nodes[cprev].next = c;
        cin = L->nodes[c].out_off;
        cdx = L->nodes[c].grad_off;
        cprev = c;
    }
    return next;
}

// The optimizer state's pieces: the whole packed layout, or each tensor's part of the shard
// [optim_lo, optim_hi) of the stage's trained elements, packed one after another, each aligned.
static vkt_status layout_optim(const vkt_net_desc *d, uint64_t align, stage_layout *L) {
    L->optim_full = !d->shard_optim;
    L->optim_bytes = L->param_bytes;
    if (L->optim_full) return VKT_OK;
    L->opt = calloc((size_t)L->ntensors + 1, sizeof *L->opt);
    if (!L->opt) {
        free_layout(L);
        return vkt_fail(VKT_ERR_HOST_MEMORY, "out of host memory laying out the network");
    }
    uint64_t e = 0, off = 0; // the first element of tensor i; the next free byte
    for (int i = 0; i < L->ntensors; i++) {
        const vkt_net_tensor *t = &L->tensors[i];
        if (t->state) continue;
        uint64_t end = d->optim_hi < e + t->count ? d->optim_hi : e + t->count;
        uint64_t lo = d->optim_lo > e ? d->optim_lo - e : 0, hi = end > e ? end - e : 0;
        e += t->count;
        if (lo >= hi) continue;
        if (lo * 4 % align) {
            // (The message names the tensor before the layout holding it is freed.)
            vkt_status st = vkt_fail(VKT_ERR_ARG,
                                     "the optimizer shard starts %llu elements into tensor %s, "
                                     "not a multiple of the device's %llu-byte offset alignment",
                                     (unsigned long long)lo, t->name, (unsigned long long)align);
            free_layout(L);
            return st;
        }
        L->opt[i] = (struct opt_piece){.lo = lo, .hi = hi, .off = off};
        off = align_up(off + (hi - lo) * 4, align);
    }
    if (d->optim_lo > d->optim_hi || d->optim_hi > e) {
        free_layout(L);
        return vkt_fail(VKT_ERR_ARG,
                        "optimizer shard [%llu, %llu) is not a range of the stage's %llu "
                        "parameters",
                        (unsigned long long)d->optim_lo, (unsigned long long)d->optim_hi,
                        (unsigned long long)e);
    }
    L->optim_bytes = off ? off : align; // an empty shard still has its (one-word) buffers
    return VKT_OK;
}

static vkt_status make_layout(const vkt_net_desc *d, uint64_t align, stage_layout *L) {
    const vkt_model_desc *m = d->model;
    memset(L, 0, sizeof *L);
    if (d->first_layer < 0 || d->last_layer > m->nlayers || d->first_layer >= d->last_layer)
        return vkt_fail(VKT_ERR_ARG, "stage [%d, %d) is not a range of the model's %d layers",
                        d->first_layer, d->last_layer, m->nlayers);
    if (d->max_batch == 0 || d->slots < 1)
        return vkt_fail(VKT_ERR_ARG, "batch and slots must be >= 1");
    L->first = d->first_layer;
    L->last = d->last_layer;
    L->in_features = m->layers[L->first].in_features;
    L->out_features = m->layers[L->last - 1].out_features;

    // Parameters: every tensor of the stage in model order, each aligned.
    L->ntensors = vkt_model_tensors(m, L->first, L->last, NULL, 0);
    for (int l = L->first; l < L->last; l++)
        L->nnodes += count_nodes(&m->layers[l]);
    L->tensors = calloc((size_t)L->ntensors + 1, sizeof *L->tensors);
    L->nodes = calloc((size_t)L->nnodes, sizeof *L->nodes);
    L->top_node = calloc((size_t)(L->last - L->first), sizeof *L->top_node);
    if (!L->tensors || !L->nodes || !L->top_node) {
        free_layout(L);
        return vkt_fail(VKT_ERR_HOST_MEMORY, "out of host memory laying out the network");
    }
    vkt_model_tensors(m, L->first, L->last, L->tensors, L->ntensors);
    uint64_t off = 0, soff = 0;
    for (int i = 0; i < L->ntensors; i++) {
        uint64_t *o = L->tensors[i].state ? &soff : &off;
        L->tensors[i].offset = *o;
        *o = vkt_net_next_offset(*o, L->tensors[i].count * 4, align);
    }
    L->param_bytes = off ? off : align;
    L->state_bytes = soff;
    VKT_TRY(layout_optim(d, align, L));
    for (int l = 0; l < L->first; l++)
        L->node_base += (uint32_t)count_nodes(&m->layers[l]);

    // Activations, per slot: the stage input and its gradient, then every node's output and
    // output gradient (none for a reshape, which is its input), the targets and the loss rows.
    layout_walk w = {.L = L, .B = d->max_batch, .align = align};
    uint64_t B = d->max_batch;
    L->in_off = w.s, w.s = vkt_net_next_offset(w.s, B * L->in_features * 4, align);
    L->in_grad_off = w.s, w.s = vkt_net_next_offset(w.s, B * L->in_features * 4, align);
    int n = 0, prev = -1;
    uint64_t in = L->in_off, dx = L->in_grad_off;
    for (int l = L->first; l < L->last; l++) {
        char path[16];
        snprintf(path, sizeof path, "%d", l);
        L->top_node[l - L->first] = n;
        int next = place(&w, &m->layers[l], n, l, -1, prev, path, in, dx, false);
        if (prev >= 0) L->nodes[prev].next = n;
        in = L->nodes[n].out_off;
        dx = L->nodes[n].grad_off;
        prev = n;
        n = next;
    }
    VKT_ASSERT(n == L->nnodes && w.tensor == L->ntensors);
    uint64_t tgt = B * vkt_model_targets_per_sample(m) * 4;
    uint64_t rows = m->loss == VKT_LOSS_MSE ? 1 : vkt_model_targets_per_sample(m);
    L->targets_off = w.s, w.s = vkt_net_next_offset(w.s, tgt, align);
    L->loss_off = w.s, w.s = vkt_net_next_offset(w.s, B * rows * 4, align);
    L->slot_bytes = w.s;
    L->correct_off = w.s * (uint64_t)d->slots;
    L->act_bytes = L->correct_off + align;
    return VKT_OK;
}

vkt_net_memory vkt_net_estimate(const vkt_net_desc *desc, uint64_t align) {
    vkt_net_memory m = {0};
    stage_layout *L = malloc(sizeof *L);
    if (!L || make_layout(desc, align, L) != VKT_OK) {
        free(L);
        return m;
    }
    m.params = L->param_bytes;
    m.grads = L->param_bytes;
    int nopt = desc->optim.kind == VKT_OPTIM_ADAMW ? 2 : (desc->optim.momentum != 0 ? 1 : 0);
    m.optim = (uint64_t)nopt * L->optim_bytes;
    m.activations = L->act_bytes;
    // clipping, buffers, scratch, matmul staging
    m.io = align + L->state_bytes + L->scratch_bytes + L->staging_bytes;
    m.total = m.params + m.grads + m.optim + m.activations + m.io;
    free_layout(L);
    free(L);
    return m;
}

vkt_optim_desc vkt_optim_default(vkt_optim_kind kind) {
    if (kind == VKT_OPTIM_ADAMW)
        return (vkt_optim_desc){.kind = kind,
                                .lr = 1e-3f,
                                .beta1 = 0.9f,
                                .beta2 = 0.999f,
                                .eps = 1e-8f,
                                .weight_decay = 0.01f};
    return (vkt_optim_desc){.kind = kind, .lr = 0.01f};
}

// ---------------------------------------------------------------------------------------------
// Creation

static bool fuses_forward(const vkt_net *net, int n);

vkt_status vkt_net_create(vkt_device *dev, vkt_ops *ops, const vkt_net_desc *desc, vkt_net **out) {
    *out = NULL;
    vkt_net *net = calloc(1, sizeof *net);
    if (!net) return vkt_fail(VKT_ERR_HOST_MEMORY, "out of host memory");
    net->dev = dev;
    net->ops = ops;
    net->desc = *desc;
    net->model = desc->model;
    net->skip_barrier = -1;
    net->phase = (vkt_net_phase){.train = true, .step = 1};
    vkt_status s = make_layout(desc, vkt_device_align(dev, 1), &net->L);
    if (s != VKT_OK) {
        free(net);
        return s;
    }
    net->last_stage = desc->last_layer == desc->model->nlayers;
    switch (vkt_device_fuse_mode(dev)) { // the context's vkt_context_desc.fuse
    case VKT_FUSE_ON: net->fuse = true; break;
    case VKT_FUSE_OFF: net->fuse = false; break;
    default: net->fuse = vkt_matmul_epilogue_pays(ops);
    }
    for (int n = 0; n < net->L.nnodes; n++)
        net->L.nodes[n].fused_fwd = fuses_forward(net, n);
    const stage_layout *L = &net->L;
    const vkt_optim_desc *o = &desc->optim;
    s = vkt_buffer_create(dev, L->param_bytes, "parameters", &net->params);
    if (s == VKT_OK) s = vkt_buffer_create(dev, L->param_bytes, "gradients", &net->grads);
    if (s == VKT_OK && (o->kind == VKT_OPTIM_ADAMW || o->momentum != 0))
        s = vkt_buffer_create(dev, L->optim_bytes,
                              o->kind == VKT_OPTIM_ADAMW ? "AdamW exp_avg" : "SGD momentum",
                              &net->opt1);
    if (s == VKT_OK && o->kind == VKT_OPTIM_ADAMW)
        s = vkt_buffer_create(dev, L->optim_bytes, "AdamW exp_avg_sq", &net->opt2);
    if (s == VKT_OK) s = vkt_buffer_create(dev, L->act_bytes, "activations", &net->act);
    if (s == VKT_OK)
        s = vkt_buffer_create(dev, vkt_device_align(dev, 4), "clip scratch", &net->scratch);
    if (s == VKT_OK && L->state_bytes)
        s = vkt_buffer_create(dev, L->state_bytes, "buffers (running statistics)", &net->state);
    if (s == VKT_OK && L->scratch_bytes)
        s = vkt_buffer_create(dev, L->scratch_bytes, "layer scratch", &net->work);
    if (s == VKT_OK && L->staging_bytes) {
        static const float zeros[VKT_OPS_SCRATCH_ZEROS / 4];
        s = vkt_buffer_create(dev, L->staging_bytes, "matmul staging", &net->staging);
        if (s == VKT_OK) s = vkt_buffer_write(net->staging, 0, zeros, sizeof zeros);
    }
    if (s != VKT_OK) {
        vkt_net_destroy(net);
        return s;
    }
    // The layout leaves VKT_NET_TENSOR_GUARD bytes after every tensor of these buffers (the
    // optimizer state's only where it packs as the parameters do, not a shard's pieces).
    _Static_assert(VKT_NET_TENSOR_GUARD >= VKT_TEXEL_WIDEN, "the guard must hold a widened view");
    net->params->guard = net->grads->guard = net->act->guard = VKT_NET_TENSOR_GUARD;
    if (net->work) net->work->guard = VKT_NET_TENSOR_GUARD; // the layers' regions: theirs
    if (L->optim_full) {
        if (net->opt1) net->opt1->guard = VKT_NET_TENSOR_GUARD;
        if (net->opt2) net->opt2->guard = VKT_NET_TENSOR_GUARD;
    }
    *out = net;
    return VKT_OK;
}

void vkt_net_destroy(vkt_net *net) {
    if (!net) return;
    vkt_buffer_destroy(net->work);
    vkt_buffer_destroy(net->staging);
    if (net->ops) vkt_ops_set_scratch(net->ops, NULL); // its staging buffer is gone
    vkt_buffer_destroy(net->state);
    vkt_buffer_destroy(net->scratch);
    vkt_buffer_destroy(net->act);
    vkt_buffer_destroy(net->opt2);
    vkt_buffer_destroy(net->opt1);
    vkt_buffer_destroy(net->grads);
    vkt_buffer_destroy(net->params);
    free_layout(&net->L);
    for (label_block *b = net->labels, *next; b; b = next) {
        next = b->next;
        free(b);
    }
    free(net);
}

// ---------------------------------------------------------------------------------------------
// Host access

int vkt_net_tensor_count(const vkt_net *net) { return net->L.ntensors; }
const vkt_net_tensor *vkt_net_get_tensor(const vkt_net *net, int i) {
    return i >= 0 && i < net->L.ntensors ? &net->L.tensors[i] : NULL;
}
const vkt_model_desc *vkt_net_model(const vkt_net *net) { return net->model; }
vkt_device *vkt_net_device(const vkt_net *net) { return net->dev; }

uint64_t vkt_net_param_count(const vkt_net *net) {
    uint64_t n = 0;
    for (int i = 0; i < net->L.ntensors; i++)
        if (!net->L.tensors[i].state) n += net->L.tensors[i].count;
    return n;
}

int vkt_net_find_tensor(const vkt_net *net, const char *name) {
    for (int i = 0; i < net->L.ntensors; i++)
        if (strcmp(net->L.tensors[i].name, name) == 0) return i;
    return -1;
}

static vkt_buffer *store_buffer(vkt_net *net, vkt_net_store store) {
    switch (store) {
    case VKT_STORE_PARAM: return net->params;
    case VKT_STORE_GRAD: return net->grads;
    case VKT_STORE_OPT1: return net->opt1;
    case VKT_STORE_OPT2: return net->opt2;
    }
    return NULL;
}

// The buffer that holds tensor i in store (a buffer's only store is its state), or NULL.
static vkt_buffer *tensor_buffer(vkt_net *net, vkt_net_store store, int i) {
    if (i < 0 || i >= net->L.ntensors) return NULL;
    if (net->L.tensors[i].state) return store == VKT_STORE_PARAM ? net->state : NULL;
    return store_buffer(net, store);
}

// Where tensor i lies in store's buffer: its elements [*lo, *hi) at byte *off (the whole
// tensor, except in a sharded optimizer's state: its piece of the shard, maybe none).
static void tensor_place(const vkt_net *net, vkt_net_store store, int i, uint64_t *lo, uint64_t *hi,
                         uint64_t *off) {
    const vkt_net_tensor *t = &net->L.tensors[i];
    bool opt = store == VKT_STORE_OPT1 || store == VKT_STORE_OPT2;
    if (!opt || net->L.optim_full) {
        *lo = 0, *hi = t->count, *off = t->offset;
        return;
    }
    *lo = net->L.opt[i].lo, *hi = net->L.opt[i].hi, *off = net->L.opt[i].off;
}

vkt_status vkt_net_read_tensor(vkt_net *net, vkt_net_store store, int i, float *dst) {
    vkt_buffer *b = tensor_buffer(net, store, i);
    if (!b) return vkt_fail(VKT_ERR_ARG, "no such tensor or store (%d, %d)", i, (int)store);
    uint64_t lo, hi, off;
    tensor_place(net, store, i, &lo, &hi, &off);
    return hi > lo ? vkt_buffer_read(b, off, dst + lo, (hi - lo) * 4) : VKT_OK;
}

vkt_status vkt_net_write_tensor(vkt_net *net, vkt_net_store store, int i, const float *src) {
    vkt_buffer *b = tensor_buffer(net, store, i);
    if (!b) return vkt_fail(VKT_ERR_ARG, "no such tensor or store (%d, %d)", i, (int)store);
    uint64_t lo, hi, off;
    tensor_place(net, store, i, &lo, &hi, &off);
    return hi > lo ? vkt_buffer_write(b, off, src + lo, (hi - lo) * 4) : VKT_OK;
}

void vkt_net_set_phase(vkt_net *net, const vkt_net_phase *ph) {
    net->phase = *ph;
    net->step_dependent = false;
}

bool vkt_rec_training(const vkt_rec *r) { return r->ph.train; }

const vkt_net_phase *vkt_rec_phase(vkt_rec *r) {
    r->net->step_dependent = true;
    return &r->ph;
}

// SGD's update reads the rate, momentum, decay and Nesterov flag, the same every step; AdamW's
// reads the step (bias correction) and clipping a norm read back per step.
bool vkt_net_step_reusable(const vkt_net *net) {
    const vkt_optim_desc *o = &net->desc.optim;
    return net->phase.train && !net->step_dependent && o->kind == VKT_OPTIM_SGD && !(o->clip > 0);
}
const vkt_net_phase *vkt_net_get_phase(const vkt_net *net) { return &net->phase; }
void vkt_net_set_lr(vkt_net *net, float lr) { net->desc.optim.lr = lr; }

static vkt_status zero_buffer(vkt_buffer *b) {
    if (!b) return VKT_OK;
    void *z = calloc(1, vkt_buffer_size(b));
    if (!z) return vkt_fail(VKT_ERR_HOST_MEMORY, "out of host memory");
    vkt_status s = vkt_buffer_write(b, 0, z, vkt_buffer_size(b));
    free(z);
    return s;
}

vkt_status vkt_net_reset_optimizer(vkt_net *net) {
    VKT_TRY(zero_buffer(net->opt1));
    return zero_buffer(net->opt2);
}

// splitmix64 -> uniform in [0,1) with 53 bits: the engine's reproducible generator.
static double rng_uniform(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return (double)(z >> 11) / 9007199254740992.0;
}

void vkt_tensor_init_values(const vkt_model_desc *m, const vkt_net_tensor *t, uint64_t seed,
                            float *v) {
    // Each tensor's generator depends only on the seed and the tensor's place in the model, so a
    // stage of a split model gets exactly the parameters the whole model would.
    vkt_param_spec ps = vkt_tensor_spec(t);
    // A top-level layer's first two tensors keep the streams they had before layers nested
    // (layer*2 + which: the same seed gives the same dense parameters as then); a nested layer's,
    // and a third or later tensor (which layer*2 + which would share with the next layer), take
    // the FNV-1a hash of the name.
    uint64_t stream = (uint64_t)t->layer * 2 + (uint64_t)t->param;
    if (t->desc != &m->layers[t->layer] || t->param >= 2) {
        stream = 0xcbf29ce484222325ull;
        for (const char *c = t->name; *c; c++)
            stream = (stream ^ (uint8_t)*c) * 0x100000001b3ull;
    }
    uint64_t s = seed * 0x100000001b3ull + stream;
    for (uint64_t k = 0; k < t->count; k++)
        v[k] = ps.init == VKT_INIT_CONST ? (float)ps.a : (float)((2 * rng_uniform(&s) - 1) * ps.a);
}

vkt_status vkt_net_init(vkt_net *net, uint64_t seed) {
    VKT_TRY(zero_buffer(net->params)); // padding between tensors stays zero
    VKT_TRY(zero_buffer(net->state));
    for (int i = 0; i < net->L.ntensors; i++) {
        const vkt_net_tensor *t = &net->L.tensors[i];
        float *v = malloc(t->count * 4);
        if (!v) return vkt_fail(VKT_ERR_HOST_MEMORY, "out of host memory");
        vkt_tensor_init_values(net->model, t, seed, v);
        vkt_status st = vkt_net_write_tensor(net, VKT_STORE_PARAM, i, v);
        free(v);
        VKT_TRY(st);
    }
    VKT_TRY(zero_buffer(net->grads));
    return vkt_net_reset_optimizer(net);
}

// ---------------------------------------------------------------------------------------------
// Views

static vkt_view act_view(vkt_net *net, int slot, uint64_t off, uint64_t bytes) {
    return vkt_buffer_view(net->act, (uint64_t)slot * net->L.slot_bytes + off, bytes);
}

uint32_t vkt_net_in_features(const vkt_net *net) { return net->L.in_features; }
uint32_t vkt_net_out_features(const vkt_net *net) { return net->L.out_features; }

vkt_view vkt_net_input(vkt_net *net, int slot) {
    return act_view(net, slot, net->L.in_off,
                    (uint64_t)net->desc.max_batch * net->L.in_features * 4);
}
vkt_view vkt_net_input_grad(vkt_net *net, int slot) {
    return act_view(net, slot, net->L.in_grad_off,
                    (uint64_t)net->desc.max_batch * net->L.in_features * 4);
}
static const vkt_node *top_node(const vkt_net *net, int l) {
    return &net->L.nodes[net->L.top_node[l - net->L.first]];
}
static vkt_view node_view(vkt_net *net, int slot, uint64_t off, const vkt_layer_desc *l,
                          bool input) {
    return act_view(net, slot, off,
                    (uint64_t)net->desc.max_batch * (input ? l->in_features : l->out_features) * 4);
}
vkt_view vkt_net_output(vkt_net *net, int slot) {
    const vkt_node *n = top_node(net, net->L.last - 1);
    return node_view(net, slot, n->out_off, n->desc, false);
}
vkt_view vkt_net_output_grad(vkt_net *net, int slot) {
    const vkt_node *n = top_node(net, net->L.last - 1);
    return node_view(net, slot, n->grad_off, n->desc, false);
}
vkt_view vkt_net_targets(vkt_net *net, int slot) {
    uint64_t per = vkt_model_targets_per_sample(net->model);
    return act_view(net, slot, net->L.targets_off, (uint64_t)net->desc.max_batch * per * 4);
}
vkt_view vkt_net_loss_rows(vkt_net *net, int slot) {
    return act_view(net, slot, net->L.loss_off,
                    (uint64_t)net->desc.max_batch * vkt_net_loss_rows_per_sample(net) * 4);
}
uint32_t vkt_net_loss_rows_per_sample(const vkt_net *net) {
    return net->model->loss == VKT_LOSS_MSE ? 1 : vkt_model_targets_per_sample(net->model);
}
vkt_view vkt_net_correct(vkt_net *net) { return vkt_buffer_view(net->act, net->L.correct_off, 4); }
vkt_view vkt_net_params(vkt_net *net) { return vkt_buffer_whole(net->params); }
vkt_view vkt_net_grads(vkt_net *net) { return vkt_buffer_whole(net->grads); }

static vkt_view tensor_view(vkt_buffer *b, const vkt_net_tensor *t) {
    return vkt_buffer_view(b, t->offset, t->count * 4);
}

// ---------------------------------------------------------------------------------------------
// What the layer kinds record through (layer.h)

const vkt_node *vkt_rec_node(const vkt_rec *r, int node) { return &r->net->L.nodes[node]; }

vkt_view vkt_rec_in(const vkt_rec *r, int node) {
    const vkt_node *n = vkt_rec_node(r, node);
    return node_view(r->net, r->slot, n->in_off, n->desc, true);
}
vkt_view vkt_rec_dx(const vkt_rec *r, int node) {
    const vkt_node *n = vkt_rec_node(r, node);
    return node_view(r->net, r->slot, n->dx_off, n->desc, true);
}
vkt_view vkt_rec_out(const vkt_rec *r, int node) {
    const vkt_node *n = vkt_rec_node(r, node);
    return node_view(r->net, r->slot, n->out_off, n->desc, false);
}
vkt_view vkt_rec_dy(const vkt_rec *r, int node) {
    const vkt_node *n = vkt_rec_node(r, node);
    return node_view(r->net, r->slot, n->grad_off, n->desc, false);
}
vkt_view vkt_rec_body_out(const vkt_rec *r, int node) {
    int c = vkt_rec_node(r, node)->child0;
    VKT_ASSERT(c >= 0);
    while (vkt_rec_node(r, c)->next >= 0)
        c = vkt_rec_node(r, c)->next;
    return vkt_rec_out(r, c);
}

uint32_t vkt_rec_rows(const vkt_rec *r, int node) {
    const vkt_layer_desc *l = vkt_rec_node(r, node)->desc;
    return r->B * (l->in_features / l->in.dim[l->in.ndim - 1]);
}

int vkt_rec_tensor(const vkt_rec *r, int node, int k) {
    const vkt_node *n = vkt_rec_node(r, node);
    VKT_ASSERT(k < n->ntensors);
    return n->tensor0 + k;
}

static vkt_buffer *tensor_buffer(vkt_net *net, vkt_net_store store, int i);

vkt_view vkt_rec_param(const vkt_rec *r, int node, int k, vkt_net_store store) {
    int i = vkt_rec_tensor(r, node, k);
    vkt_buffer *b = tensor_buffer(r->net, store, i);
    VKT_ASSERT(b); // a buffer has no gradient or optimizer state
    return tensor_view(b, &r->net->L.tensors[i]);
}

vkt_view vkt_rec_saved(const vkt_rec *r, int node) {
    const vkt_node *n = vkt_rec_node(r, node);
    VKT_ASSERT(n->desc->type->saved);
    return act_view(r->net, r->slot, n->saved_off,
                    n->desc->type->saved(n->desc, r->net->desc.max_batch));
}

vkt_view vkt_rec_scratch(const vkt_rec *r) {
    VKT_ASSERT(r->net->work);
    return vkt_buffer_whole(r->net->work);
}

uint32_t vkt_rec_node_id(const vkt_rec *r, int node) {
    return r->net->L.node_base + (uint32_t)node;
}

const vkt_optim_desc *vkt_rec_optim(const vkt_rec *r) { return &r->net->desc.optim; }

// Labels must outlive the stream's timings: each net keeps its own, made once per layer/phase.
const char *vkt_rec_label(const vkt_rec *r, int node, const char *phase, const char *what) {
    vkt_net *net = r->net;
    char buf[LABEL_LEN];
    snprintf(buf, sizeof buf, "%s:%s:%s", phase, vkt_rec_node(r, node)->path, what);
    for (label_block *b = net->labels; b; b = b->next) {
        int n = b == net->labels ? net->nlabels : LABELS_PER_BLOCK;
        for (int i = 0; i < n; i++)
            if (strcmp(b->label[i], buf) == 0) return b->label[i];
    }
    if (!net->labels || net->nlabels == LABELS_PER_BLOCK) {
        label_block *b = malloc(sizeof *b);
        if (!b) return "unlabelled";
        b->next = net->labels;
        net->labels = b;
        net->nlabels = 0;
    }
    memcpy(net->labels->label[net->nlabels], buf, LABEL_LEN);
    return net->labels->label[net->nlabels++];
}

bool vkt_rec_need_dx(const vkt_rec *r, int node) {
    const vkt_node *n = vkt_rec_node(r, node);
    if (n->prev >= 0) return true;
    if (n->parent >= 0) return vkt_rec_need_dx(r, n->parent);
    return r->input_grad;
}

void vkt_rec_barrier(vkt_rec *r) {
    if (r->net->barrier_count++ != r->net->skip_barrier) vkt_cmd_barrier(r->cmd);
}

void vkt_rec_flush_late(vkt_rec *r) {
    if (r->late < 0) return;
    int n = r->late;
    r->late = -1;
    vkt_rec_node(r, n)->desc->type->backward_late(r, n);
}

bool vkt_net_label_is_matmul(const char *label) {
    const char *what = label ? strrchr(label, ':') : NULL;
    if (!what) return false;
    for (int i = 0; vkt_layer_types[i]; i++) {
        const char *const *ml = vkt_layer_types[i]->matmul_labels;
        for (int k = 0; ml && ml[k]; k++)
            if (strcmp(what + 1, ml[k]) == 0) return true;
    }
    return false;
}

// The activation of node n, when its kind has an epilogue form.
static bool epilogue_of(const vkt_net *net, int n, vkt_act *act, float *alpha) {
    const vkt_layer_desc *l = net->L.nodes[n].desc;
    return l->type->epilogue && l->type->epilogue(l, act, alpha);
}

// Whether node n's forward runs in the epilogue of its previous sibling's product. Not after a
// row split's product: its output is a partial sum until the reduction after it.
static bool fuses_forward(const vkt_net *net, int n) {
    const vkt_node *nd = &net->L.nodes[n];
    vkt_act act;
    float alpha;
    if (!net->fuse || nd->prev < 0 || !epilogue_of(net, n, &act, &alpha)) return false;
    const vkt_layer_desc *p = net->L.nodes[nd->prev].desc;
    return (p->type->takes_epilogue && p->tp != VKT_TP_ROW) ||
           (p->type->takes_act && vkt_act_grad_from_output(act, alpha));
}

bool vkt_rec_act_input_kept(const vkt_rec *r, int node) {
    const vkt_node *nd = vkt_rec_node(r, node);
    vkt_act act;
    float alpha;
    if (!nd->fused_fwd || !epilogue_of(r->net, node, &act, &alpha)) return true;
    return !vkt_act_grad_from_output(act, alpha);
}

// Whether node n's backward runs in the epilogue of its next sibling's input-gradient product,
// when the backward records top-level layers [r->lo, r->hi). Not when n's input gradient is not
// needed (the stage's first layer without input_grad) or the product is outside the range, nor
// into a column split's product, whose input gradient is reduced after it.
static bool fuses_backward(const vkt_rec *r, int n) {
    const vkt_node *nd = vkt_rec_node(r, n);
    vkt_act act;
    float alpha;
    return r->net->fuse && nd->next >= 0 && vkt_rec_node(r, nd->next)->desc->type->takes_epilogue &&
           vkt_rec_node(r, nd->next)->desc->tp != VKT_TP_COLUMN &&
           epilogue_of(r->net, n, &act, &alpha) && nd->top >= r->lo &&
           vkt_rec_node(r, nd->next)->top < r->hi && vkt_rec_need_dx(r, n);
}

// Whether activation node n's backward runs in its previous sibling's (a kind that takes_act,
// whose forward ran n's), when the backward records top-level layers [r->lo, r->hi): both in
// the range.
static bool fuses_backward_prev(const vkt_rec *r, int n) {
    const vkt_node *nd = vkt_rec_node(r, n);
    return nd->fused_fwd && nd->prev >= 0 && vkt_rec_node(r, nd->prev)->desc->type->takes_act &&
           vkt_rec_node(r, nd->prev)->top >= r->lo && nd->top < r->hi;
}

bool vkt_rec_bwd_act_after(const vkt_rec *r, int node, vkt_act *act, float *alpha, vkt_view *dy,
                           vkt_view *y) {
    int a = vkt_rec_node(r, node)->next;
    if (a < 0 || !fuses_backward_prev(r, a)) return false;
    epilogue_of(r->net, a, act, alpha);
    *dy = vkt_rec_dy(r, a);
    *y = vkt_rec_out(r, a);
    return true;
}

bool vkt_rec_fwd_epilogue(const vkt_rec *r, int node, vkt_mm_epilogue *epi, vkt_view *out,
                          vkt_view *saved) {
    int a = vkt_rec_node(r, node)->next;
    *epi = (vkt_mm_epilogue){.kind = VKT_MM_EPI_NONE};
    if (a < 0 || !vkt_rec_node(r, a)->fused_fwd) return false;
    vkt_act act;
    float alpha;
    epilogue_of(r->net, a, &act, &alpha);
    // y = act(z) into the activation's output; z itself into this node's where the activation's
    // backward needs it.
    *saved = vkt_rec_out(r, node);
    *epi = (vkt_mm_epilogue){.kind = VKT_MM_EPI_ACT,
                             .act = act,
                             .alpha = alpha,
                             .saved = vkt_rec_act_input_kept(r, a) ? saved : NULL};
    *out = vkt_rec_out(r, a);
    return true;
}

bool vkt_rec_bwd_epilogue(const vkt_rec *r, int node, vkt_mm_epilogue *epi, vkt_view *dx,
                          vkt_view *saved) {
    int a = vkt_rec_node(r, node)->prev;
    *epi = (vkt_mm_epilogue){.kind = VKT_MM_EPI_NONE};
    if (a < 0 || !fuses_backward(r, a)) return false;
    vkt_act act;
    float alpha;
    epilogue_of(r->net, a, &act, &alpha);
    // dx * f', f' from the activation's input, or from its output where the fused forward kept
    // only that.
    bool kept = vkt_rec_act_input_kept(r, a);
    *saved = kept ? vkt_rec_in(r, a) : vkt_rec_out(r, a);
    *epi = (vkt_mm_epilogue){.kind = kept ? VKT_MM_EPI_GRAD_X : VKT_MM_EPI_GRAD_Y,
                             .act = act,
                             .alpha = alpha,
                             .saved = saved};
    *dx = vkt_rec_dx(r, a);
    return true;
}

// ---------------------------------------------------------------------------------------------
// Recording

void vkt_net_record_zero_grads(vkt_net *net, vkt_cmd *cmd) {
    vkt_cmd_fill(cmd, vkt_net_grads(net), 0);
    vkt_cmd_barrier(cmd);
}

static vkt_rec rec_make(vkt_net *net, vkt_cmd *cmd, int slot, uint32_t B) {
    // This net's padded products stage their operands in its planned buffer.
    vkt_view staging = net->staging ? vkt_buffer_whole(net->staging) : (vkt_view){0};
    vkt_ops_set_scratch(net->ops, net->staging ? &staging : NULL);
    return (vkt_rec){.net = net,
                     .cmd = cmd,
                     .ops = net->ops,
                     .slot = slot,
                     .B = B,
                     .lo = net->L.first,
                     .hi = net->L.last,
                     .late = -1,
                     .ph = net->phase};
}

// A sequence of siblings from node n on: each layer, then a barrier (a fused activation ran in
// the product before it; a reshape is its input and records nothing).
static void forward_seq(vkt_rec *r, int n) {
    for (; n >= 0; n = vkt_rec_node(r, n)->next) {
        const vkt_node *nd = vkt_rec_node(r, n);
        if (nd->fused_fwd || nd->desc->type->aliases_input) continue;
        nd->desc->type->forward(r, n);
        vkt_cmd_barrier(r->cmd);
    }
}

void vkt_rec_forward_body(vkt_rec *r, int node) { forward_seq(r, vkt_rec_node(r, node)->child0); }

void vkt_net_record_forward(vkt_net *net, vkt_cmd *cmd, int slot, uint32_t B) {
    vkt_rec r = rec_make(net, cmd, slot, B);
    forward_seq(&r, net->L.top_node[0]);
}

void vkt_net_record_loss(vkt_net *net, vkt_cmd *cmd, int slot, uint32_t B, float grad_scale) {
    VKT_ASSERT(net->last_stage);
    uint32_t C = net->L.out_features;
    if (net->model->loss == VKT_LOSS_MSE) {
        vkt_op_mse(cmd, net->ops, vkt_net_loss_rows(net, slot), vkt_net_output_grad(net, slot),
                   vkt_net_output(net, slot), vkt_net_targets(net, slot), B, C, grad_scale,
                   "fwd:loss:mse");
    } else {
        // One row of class scores per position; the mean over the whole batch's positions.
        uint32_t T = vkt_model_targets_per_sample(net->model);
        vkt_op_softmax_xent(cmd, net->ops, vkt_net_loss_rows(net, slot),
                            vkt_net_output_grad(net, slot), vkt_net_output(net, slot),
                            vkt_net_targets(net, slot), B * T, C / T, grad_scale / (float)T,
                            "fwd:loss:softmax_xent");
    }
    vkt_cmd_barrier(cmd);
}

void vkt_net_record_accuracy(vkt_net *net, vkt_cmd *cmd, int slot, uint32_t B) {
    VKT_ASSERT(net->last_stage);
    uint32_t T = vkt_model_targets_per_sample(net->model);
    vkt_op_accuracy(cmd, net->ops, vkt_net_correct(net), NULL, vkt_net_output(net, slot),
                    vkt_net_targets(net, slot), B * T, net->L.out_features / T, "fwd:accuracy");
    vkt_cmd_barrier(cmd);
}

// One node's backward, then a barrier, unless it ran in its neighbour's product or records
// nothing. A kind's deferred work (r->late) goes into the same level as the next node's.
static void backward_node(vkt_rec *r, int n) {
    const vkt_node *nd = vkt_rec_node(r, n);
    if (nd->desc->type->aliases_input || fuses_backward(r, n) || fuses_backward_prev(r, n)) return;
    vkt_rec_flush_late(r);
    nd->desc->type->backward(r, n);
    vkt_rec_barrier(r);
}

void vkt_rec_backward_body(vkt_rec *r, int node) {
    int n = vkt_rec_node(r, node)->child0;
    while (vkt_rec_node(r, n)->next >= 0)
        n = vkt_rec_node(r, n)->next;
    for (; n >= 0; n = vkt_rec_node(r, n)->prev)
        backward_node(r, n);
}

void vkt_net_record_backward(vkt_net *net, vkt_cmd *cmd, int slot, uint32_t B, bool input_grad) {
    vkt_net_record_backward_layers(net, cmd, slot, B, net->L.first, net->L.last, input_grad);
}

void vkt_net_param_range(const vkt_net *net, int lo, int hi, uint64_t *off, uint64_t *bytes) {
    uint64_t a = UINT64_MAX, b = 0, al = vkt_device_align(net->dev, 1);
    for (int i = 0; i < net->L.ntensors; i++) {
        const vkt_net_tensor *t = &net->L.tensors[i];
        if (t->layer < lo || t->layer >= hi || t->state) continue;
        if (t->offset < a) a = t->offset;
        uint64_t next = vkt_net_next_offset(t->offset, t->count * 4, al);
        if (next > b) b = next;
    }
    if (a == UINT64_MAX) {
        *off = *bytes = 0;
        return;
    }
    // Up to the next tensor's start (the padding and the guard are zero and travel along), so
    // that ranges stay aligned for views and the ranges of consecutive layers tile the buffer.
    if (b > net->L.param_bytes) b = net->L.param_bytes;
    *off = a;
    *bytes = b - a;
}

uint64_t vkt_net_packed_bytes(const vkt_net *net) { return net->L.param_bytes; }

vkt_status vkt_net_prebuild(vkt_net *net, int threads) {
    // Only a net that records its products plain (no fused epilogues: SwiftShader, where a
    // pipeline takes 0.2-0.7 s to build); elsewhere the steps run the fused kernels, built at
    // their first use (lavapipe's pipelines build in milliseconds and compile at first dispatch).
    if (net->fuse) return VKT_OK;
    enum { MAX_SHAPES = 512 };
    vkt_mm_shape *shapes = malloc(MAX_SHAPES * sizeof *shapes);
    vkt_kernel_key *keys = malloc(MAX_SHAPES * sizeof *keys);
    vkt_status st = VKT_OK;
    if (!shapes || !keys) {
        st = vkt_fail(VKT_ERR_HOST_MEMORY, "out of host memory");
    } else {
        int n = vkt_model_matmuls(net->model, net->desc.max_batch, shapes, MAX_SHAPES);
        if (n > MAX_SHAPES) n = MAX_SHAPES; // the rest build at their first use
        n = vkt_matmul_plain_keys(net->ops, shapes, n, keys);
        st = vkt_ops_status(net->ops); // a measurement that failed to build a candidate
        if (st == VKT_OK) st = vkt_ops_prebuild(net->ops, keys, n, threads);
    }
    free(shapes);
    free(keys);
    return st;
}

int vkt_net_first_layer(const vkt_net *net) { return net->L.first; }
int vkt_net_last_layer(const vkt_net *net) { return net->L.last; }

// The backward of top-level layers [lo, hi), last to first. fused_sgd (not NULL): kinds that can
// apply the SGD step inside a weight gradient's product do and mark the tensor; returns how many.
static int record_backward(vkt_net *net, vkt_cmd *cmd, int slot, uint32_t B, int lo, int hi,
                           bool input_grad, bool *fused_sgd) {
    VKT_ASSERT(lo >= net->L.first && hi <= net->L.last);
    vkt_rec r = rec_make(net, cmd, slot, B);
    r.lo = lo;
    r.hi = hi;
    r.input_grad = input_grad;
    r.fused_sgd = fused_sgd;
    for (int l = hi - 1; l >= lo; l--)
        backward_node(&r, net->L.top_node[l - net->L.first]);
    if (r.late >= 0) {
        vkt_rec_flush_late(&r);
        vkt_rec_barrier(&r);
    }
    return r.nfused;
}

void vkt_net_record_backward_layers(vkt_net *net, vkt_cmd *cmd, int slot, uint32_t B, int lo,
                                    int hi, bool input_grad) {
    record_backward(net, cmd, slot, B, lo, hi, input_grad, NULL);
}

// Whether vkt_net_record_backward_step fuses the optimizer into the weight gradients at all.
static bool step_fuses(const vkt_net *net) {
    const vkt_optim_desc *o = &net->desc.optim;
    return net->fuse && o->kind == VKT_OPTIM_SGD && !(o->clip > 0);
}

// The tensors whose SGD step vkt_net_record_backward_step (slot, batch B) takes inside their
// gradient's product, each node's fuses_sgd: skip[ntensors] (all false where the step does not
// fuse). Returns how many.
static int fused_plan(vkt_net *net, int slot, uint32_t B, bool *skip) {
    memset(skip, 0, (size_t)net->L.ntensors * sizeof *skip);
    if (!step_fuses(net)) return 0;
    vkt_rec r = rec_make(net, NULL, slot, B);
    r.fused_sgd = skip;
    int n = 0;
    for (int i = 0; i < net->L.nnodes; i++) {
        const vkt_layer_type *t = net->L.nodes[i].desc->type;
        if (t->fuses_sgd && t->fuses_sgd(&r, i)) skip[vkt_rec_tensor(&r, i, 0)] = true, n++;
    }
    return n;
}

void vkt_net_record_zero_grads_step(vkt_net *net, vkt_cmd *cmd, int slot, uint32_t B) {
    bool *skip = calloc((size_t)net->L.ntensors + 1, sizeof *skip);
    if (!skip || fused_plan(net, slot, B, skip) == 0) {
        free(skip);
        vkt_net_record_zero_grads(net, cmd);
        return;
    }
    // The packed buffer less the skipped tensors' bytes (the tensors lie in order), in as few
    // fills as they leave.
    uint64_t at = 0, end = vkt_buffer_size(net->grads);
    for (int i = 0; i <= net->L.ntensors; i++) {
        const vkt_net_tensor *t = i < net->L.ntensors ? &net->L.tensors[i] : NULL;
        if (t && (t->state || !skip[i])) continue;
        uint64_t to = t ? t->offset : end;
        VKT_ASSERT(to >= at);
        if (to > at) vkt_cmd_fill(cmd, vkt_buffer_view(net->grads, at, to - at), 0);
        if (t) at = t->offset + t->count * 4;
    }
    free(skip);
    vkt_cmd_barrier(cmd);
}

int vkt_net_record_backward_step(vkt_net *net, vkt_cmd *cmd, int slot, uint32_t B, uint32_t step) {
    bool *fused = calloc((size_t)net->L.ntensors + 1, sizeof *fused);
    int nfused = 0;
    if (fused && step_fuses(net))
        nfused = record_backward(net, cmd, slot, B, net->L.first, net->L.last, false, fused);
    else
        record_backward(net, cmd, slot, B, net->L.first, net->L.last, false, NULL);
    // vkt_net_record_zero_grads_step leaves the tensors of fused_plan unzeroed: each must have
    // taken its step in its product (a kind's fuses_sgd agrees with its backward), or its
    // gradient would be summed onto a stale one.
    bool *plan = fused ? calloc((size_t)net->L.ntensors + 1, sizeof *plan) : NULL;
    if (plan && fused_plan(net, slot, B, plan) > 0)
        for (int i = 0; i < net->L.ntensors; i++)
            VKT_ASSERT(!plan[i] || fused[i]);
    free(plan);
    const vkt_optim_desc *o = &net->desc.optim;
    if (nfused == 0) {
        free(fused);
        vkt_net_record_step(net, cmd, step);
        return 0;
    }
    // SGD over the tensors that did not take their step in a matmul, one dispatch per run of them
    // that lies contiguous in the packed buffers (with the alignment padding between: zeros, which
    // SGD keeps zero, as vkt_net_record_step's whole-buffer pass does).
    uint64_t al = vkt_device_align(net->dev, 1);
    for (int i = 0; i < net->L.ntensors; i++)
        if (net->L.tensors[i].state) fused[i] = true; // not in the packed buffers
    for (int i = 0; i < net->L.ntensors;) {
        if (fused[i]) {
            i++;
            continue;
        }
        int j = i + 1;
        while (j < net->L.ntensors && !fused[j] &&
               net->L.tensors[j].offset == vkt_net_next_offset(net->L.tensors[j - 1].offset,
                                                               net->L.tensors[j - 1].count * 4, al))
            j++;
        const vkt_net_tensor *a = &net->L.tensors[i], *z = &net->L.tensors[j - 1];
        uint64_t off = a->offset, bytes = z->offset + z->count * 4 - a->offset;
        vkt_view p = vkt_buffer_view(net->params, off, bytes);
        vkt_view g = vkt_buffer_view(net->grads, off, bytes);
        vkt_view buf = net->opt1 ? vkt_buffer_view(net->opt1, off, bytes) : g;
        vkt_op_sgd(cmd, net->ops, p, g, buf, (uint32_t)(bytes / 4), o->lr, o->momentum,
                   o->weight_decay, o->nesterov, "opt:sgd");
        i = j;
    }
    free(fused);
    vkt_cmd_barrier(cmd);
    return nfused;
}

void vkt_net_test_skip_barrier(vkt_net *net, int which) {
    net->skip_barrier = which;
    net->barrier_count = 0;
}

// Elementwise ops over a whole packed buffer, in chunks that respect maxStorageBufferRange
// (128 MiB on lavapipe) and the 32-bit element counts of the kernels.
static uint64_t chunk_bytes(const vkt_net *net) {
    const vkt_device_info *info = vkt_device_get_info(net->dev);
    uint64_t range = info->max_storage_buffer_range;
    if (range > (1ull << 31)) range = 1ull << 31;
    uint64_t a = vkt_device_align(net->dev, 1);
    return range / a * a;
}

// One optimizer update of n floats: parameters p and gradients g from byte off of their
// buffers, the optimizer state from byte ooff of its.
static void record_update(vkt_net *net, vkt_cmd *cmd, uint32_t step, uint64_t off, uint64_t ooff,
                          uint64_t n) {
    const vkt_optim_desc *o = &net->desc.optim;
    vkt_view p = vkt_buffer_view(net->params, off, n * 4),
             g = vkt_buffer_view(net->grads, off, n * 4);
    if (o->kind == VKT_OPTIM_ADAMW) {
        vkt_op_adamw(cmd, net->ops, p, g, vkt_buffer_view(net->opt1, ooff, n * 4),
                     vkt_buffer_view(net->opt2, ooff, n * 4), (uint32_t)n, o->lr, o->beta1,
                     o->beta2, o->eps, o->weight_decay, step, "opt:adamw");
    } else {
        vkt_view buf = net->opt1 ? vkt_buffer_view(net->opt1, ooff, n * 4) : g;
        vkt_op_sgd(cmd, net->ops, p, g, buf, (uint32_t)n, o->lr, o->momentum, o->weight_decay,
                   o->nesterov, "opt:sgd");
    }
}

// The optimizer's spans, each at most a chunk: the whole packed buffers (gradients, parameters
// and state alike), or each tensor's piece of a sharded optimizer's shard. Each call gives the
// next span after (*i, *at) (start at 0, 0): *n elements at byte *off of the parameters and
// gradients and *ooff of the state; false after the last.
static bool step_span(const vkt_net *net, uint64_t chunk, int *i, uint64_t *at, uint64_t *off,
                      uint64_t *ooff, uint64_t *n) {
    const stage_layout *L = &net->L;
    if (L->optim_full) {
        if (*at >= L->param_bytes) return false;
        *off = *ooff = *at;
        *n = (L->param_bytes - *at < chunk ? L->param_bytes - *at : chunk) / 4;
        *at += *n * 4;
        return true;
    }
    for (; *i < L->ntensors; (*i)++, *at = 0) {
        const struct opt_piece *pc = &L->opt[*i];
        uint64_t len = (pc->hi - pc->lo) * 4;
        if (*at >= len) continue; // an empty piece, or this piece done
        *off = L->tensors[*i].offset + pc->lo * 4 + *at;
        *ooff = pc->off + *at;
        *n = (len - *at < chunk ? len - *at : chunk) / 4;
        *at += *n * 4;
        return true;
    }
    return false;
}

// Clipping (by the net's own gradients, or by sumsq when given) and the update.
// Whether the net holds a slice of tensor t, not the whole (tensor parallelism).
static bool tensor_sliced(const vkt_net_tensor *t) {
    vkt_tp_piece p[VKT_TP_MAX_PIECES];
    const vkt_layer_desc *l = t->desc;
    return l->tp != VKT_TP_NONE && l->type->tp_pieces && l->type->tp_pieces(l, t->param, p) > 0;
}

// The squared gradient norm of a tensor-parallel net's model into sum: its slices' summed over
// the devices (through the net's reduction), then the whole tensors', which every device holds
// alike, added once.
static void record_split_sumsq(vkt_net *net, vkt_cmd *cmd, vkt_view sum, uint64_t chunk) {
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < net->L.ntensors; i++) {
            const vkt_net_tensor *t = &net->L.tensors[i];
            if (t->state || tensor_sliced(t) != (pass == 0)) continue;
            for (uint64_t at = 0; at < t->count * 4; at += chunk) {
                uint64_t nb = t->count * 4 - at < chunk ? t->count * 4 - at : chunk;
                vkt_op_sumsq(cmd, net->ops, sum, vkt_buffer_view(net->grads, t->offset + at, nb),
                             (uint32_t)(nb / 4), "opt:clip:sumsq");
                vkt_cmd_barrier(cmd); // they accumulate into one scalar
            }
        }
        if (pass > 0) break;
        vkt_status st = net->allreduce(net->allreduce_ctx, cmd, sum);
        if (st != VKT_OK && net->allreduce_status == VKT_OK) net->allreduce_status = st;
    }
}

void vkt_net_record_grad_sumsq(vkt_net *net, vkt_cmd *cmd) {
    uint64_t total = net->L.param_bytes, chunk = chunk_bytes(net);
    vkt_view sum = vkt_buffer_view(net->scratch, 0, 4);
    vkt_cmd_fill(cmd, sum, 0);
    vkt_cmd_barrier(cmd);
    if (net->allreduce) {
        record_split_sumsq(net, cmd, sum, chunk);
        return;
    }
    for (uint64_t at = 0; at < total; at += chunk) {
        uint64_t nb = total - at < chunk ? total - at : chunk;
        vkt_op_sumsq(cmd, net->ops, sum, vkt_buffer_view(net->grads, at, nb), (uint32_t)(nb / 4),
                     "opt:clip:sumsq");
        vkt_cmd_barrier(cmd); // chunks accumulate into one scalar
    }
}

vkt_status vkt_net_read_grad_sumsq(vkt_net *net, float *out) {
    return vkt_buffer_read(net->scratch, 0, out, 4);
}

static void record_step(vkt_net *net, vkt_cmd *cmd, uint32_t step, const float *sumsq) {
    const vkt_optim_desc *o = &net->desc.optim;
    uint64_t chunk = chunk_bytes(net), off, ooff, n;
    if (o->clip > 0) {
        vkt_view sum = vkt_buffer_view(net->scratch, 0, 4);
        if (sumsq) {
            uint32_t bits;
            memcpy(&bits, sumsq, 4);
            vkt_cmd_fill(cmd, sum, bits);
            vkt_cmd_barrier(cmd);
        } else {
            vkt_net_record_grad_sumsq(net, cmd);
        }
        int i = 0;
        uint64_t at = 0;
        while (step_span(net, chunk, &i, &at, &off, &ooff, &n))
            vkt_op_clip_scale(cmd, net->ops, vkt_buffer_view(net->grads, off, n * 4), sum,
                              (uint32_t)n, o->clip, "opt:clip:scale");
        vkt_cmd_barrier(cmd);
    }
    int i = 0;
    uint64_t at = 0;
    while (step_span(net, chunk, &i, &at, &off, &ooff, &n))
        record_update(net, cmd, step, off, ooff, n);
    vkt_cmd_barrier(cmd);
}

void vkt_net_record_step(vkt_net *net, vkt_cmd *cmd, uint32_t step) {
    record_step(net, cmd, step, NULL);
}

void vkt_net_record_step_norm(vkt_net *net, vkt_cmd *cmd, uint32_t step, float sumsq) {
    record_step(net, cmd, step, &sumsq);
}

void vkt_net_set_allreduce(vkt_net *net, vkt_net_allreduce_fn fn, void *ctx) {
    net->allreduce = fn;
    net->allreduce_ctx = ctx;
    net->allreduce_status = VKT_OK;
}

void vkt_rec_allreduce(vkt_rec *r, vkt_view v) {
    vkt_net *net = r->net;
    vkt_cmd_barrier(r->cmd);
    vkt_status st = VKT_OK;
    if (!net->allreduce)
        st = vkt_fail(VKT_ERR_ARG, "a layer split across devices was recorded on a network "
                                   "without a communicator (vkt_net_set_allreduce)");
    else
        st = net->allreduce(net->allreduce_ctx, r->cmd, v);
    if (st != VKT_OK && net->allreduce_status == VKT_OK) net->allreduce_status = st;
}

vkt_status vkt_net_status(vkt_net *net) {
    vkt_status st = vkt_ops_status(net->ops);
    return st != VKT_OK ? st : net->allreduce_status;
}
