// network.c: a model's layers on one device, and the recording of their forward, loss,
// backward and optimizer passes (dense layers as torch.nn.Linear, activations as their own
// layers). Layout first (pure arithmetic, shared by the memory planner and the allocation),
// then allocation, then host access to tensors, then recording.
//
// Fusion: an activation layer right after a dense layer of the same stage runs in that layer's
// matmul epilogue (vkt_op_matmul_ex: y = f(x W^T + b) in one dispatch), and its backward in the
// epilogue of the next dense layer's input-gradient matmul (dZ = (dY W) * f'), where the device
// runs the epilogue faster than the separate kernel (vkt_matmul_epilogue_pays; VKT_NET_FUSE=0 or 1
// overrides). The pre-activation z is then written only for activations whose derivative needs
// it (gelu, leaky_relu with a negative slope: vkt_act_grad_from_output); the others take f'
// from their output y. Fused into the next matmul's prologue instead, the backward would
// recompute f' once per k step of every output instead of once per output.
// One SGD step of fashion_mlp (784-512-256-10, relu; vkt_cmd_dispatch_count and
// vkt_cmd_barrier_count, test_mlp_grad checks the same counts): 17 dispatches and 14 barriers
// unfused (the one vkt_cmd_begin records included; plus the zeroing fill), 13 and 10 fused. What
// it bought: docs/PERFORMANCE.md.
// The optimizer too, where a step's gradients are read by nobody but the optimizer (one batch on
// one device, SGD, no clipping: vkt_net_record_backward_step, which the single-device strategy
// uses): a weight gradient's matmul applies the SGD step to the weights in its epilogue
// (VKT_MM_EPI_SGD) instead of storing dW for a separate pass over all parameters. On lavapipe,
// fashion_mlp: the SGD pass took 1.0 ms per step; fused, the two large weight gradients took
// 0.45 and 0.15 ms longer and the SGD left for the other tensors 0.04-0.07 ms.
//
// Does not: choose devices, move data between devices, or loop over batches (train.c and
// parallel/ do).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "network.h"
#include "vkt_internal.h"

#define MAX_LAYERS 256
#define LABEL_LEN 40

typedef struct layer_slot {
    uint64_t out, grad; // offsets in the activation buffer: [B, out] output and its gradient
} layer_slot;

typedef struct stage_layout {
    int first, last;
    uint64_t param_bytes; // one packed buffer (params, grads and each optimizer state)
    uint64_t weight_off[MAX_LAYERS], bias_off[MAX_LAYERS];
    int ntensors;
    vkt_net_tensor tensors[2 * MAX_LAYERS];
    // activation buffer, per slot
    uint64_t slot_bytes;
    uint64_t in_off, in_grad_off, targets_off, loss_off;
    layer_slot layer[MAX_LAYERS];
    uint64_t correct_off; // after all slots
    uint64_t act_bytes;
    uint32_t in_features, out_features;
} stage_layout;

struct vkt_net {
    vkt_device *dev;
    vkt_ops *ops;
    vkt_net_desc desc;
    const vkt_model_desc *model;
    stage_layout L;
    vkt_buffer *params, *grads, *opt1, *opt2, *act, *scratch;
    bool last_stage;
    bool fuse; // activations run in the matmul epilogues (see the header comment)
    int skip_barrier, barrier_count; // test hook: see vkt_net_test_skip_barrier
    char (*labels)[LABEL_LEN];
    int nlabels, cap_labels;
};

// ---------------------------------------------------------------------------------------------
// Layout

static uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

static vkt_status make_layout(const vkt_net_desc *d, uint64_t align, stage_layout *L) {
    const vkt_model_desc *m = d->model;
    memset(L, 0, sizeof *L);
    if (d->first_layer < 0 || d->last_layer > m->nlayers || d->first_layer >= d->last_layer)
        return vkt_fail(VKT_ERR_ARG, "stage [%d, %d) is not a range of the model's %d layers",
                        d->first_layer, d->last_layer, m->nlayers);
    if (d->last_layer - d->first_layer > MAX_LAYERS)
        return vkt_fail(VKT_ERR_ARG, "a stage of more than %d layers", MAX_LAYERS);
    if (d->max_batch == 0 || d->slots < 1)
        return vkt_fail(VKT_ERR_ARG, "batch and slots must be >= 1");
    L->first = d->first_layer;
    L->last = d->last_layer;
    L->in_features = m->layers[L->first].in_features;
    L->out_features = m->layers[L->last - 1].out_features;

    uint64_t off = 0;
    for (int l = L->first; l < L->last; l++) {
        const vkt_layer_desc *ly = &m->layers[l];
        if (ly->kind != VKT_LAYER_DENSE) continue;
        vkt_net_tensor *w = &L->tensors[L->ntensors++];
        snprintf(w->name, sizeof w->name, "%d.weight", l);
        w->layer = l;
        w->ndim = 2;
        w->shape[0] = ly->out_features;
        w->shape[1] = ly->in_features;
        w->count = (uint64_t)ly->out_features * ly->in_features;
        w->offset = off;
        L->weight_off[l - L->first] = off;
        off = align_up(off + w->count * 4, align);
        if (ly->bias) {
            vkt_net_tensor *b = &L->tensors[L->ntensors++];
            snprintf(b->name, sizeof b->name, "%d.bias", l);
            b->layer = l;
            b->ndim = 1;
            b->shape[0] = ly->out_features;
            b->count = ly->out_features;
            b->offset = off;
            L->bias_off[l - L->first] = off;
            off = align_up(off + b->count * 4, align);
        }
    }
    L->param_bytes = off ? off : align;

    uint64_t B = d->max_batch;
    uint64_t s = 0;
    L->in_off = s, s = align_up(s + B * L->in_features * 4, align);
    L->in_grad_off = s, s = align_up(s + B * L->in_features * 4, align);
    for (int l = L->first; l < L->last; l++) {
        uint64_t n = B * m->layers[l].out_features * 4;
        L->layer[l - L->first].out = s, s = align_up(s + n, align);
        L->layer[l - L->first].grad = s, s = align_up(s + n, align);
    }
    uint64_t tgt = B * (m->loss == VKT_LOSS_MSE ? L->out_features : 1) * 4;
    L->targets_off = s, s = align_up(s + tgt, align);
    L->loss_off = s, s = align_up(s + B * 4, align);
    L->slot_bytes = s;
    L->correct_off = s * (uint64_t)d->slots;
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
    m.optim = (uint64_t)nopt * L->param_bytes;
    m.activations = L->act_bytes;
    m.io = align; // clipping scratch
    m.total = m.params + m.grads + m.optim + m.activations + m.io;
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

vkt_status vkt_net_create(vkt_device *dev, vkt_ops *ops, const vkt_net_desc *desc, vkt_net **out) {
    *out = NULL;
    vkt_net *net = calloc(1, sizeof *net);
    if (!net) return vkt_fail(VKT_ERR_HOST_MEMORY, "out of host memory");
    net->dev = dev;
    net->ops = ops;
    net->desc = *desc;
    net->model = desc->model;
    net->skip_barrier = -1;
    vkt_status s = make_layout(desc, vkt_device_align(dev, 1), &net->L);
    if (s != VKT_OK) {
        free(net);
        return s;
    }
    net->last_stage = desc->last_layer == desc->model->nlayers;
    const char *fuse = getenv("VKT_NET_FUSE");
    net->fuse = fuse && *fuse ? strcmp(fuse, "0") != 0 : vkt_matmul_epilogue_pays(ops);
    const stage_layout *L = &net->L;
    const vkt_optim_desc *o = &desc->optim;
    s = vkt_buffer_create(dev, L->param_bytes, "parameters", &net->params);
    if (s == VKT_OK) s = vkt_buffer_create(dev, L->param_bytes, "gradients", &net->grads);
    if (s == VKT_OK && (o->kind == VKT_OPTIM_ADAMW || o->momentum != 0))
        s = vkt_buffer_create(dev, L->param_bytes,
                              o->kind == VKT_OPTIM_ADAMW ? "AdamW exp_avg" : "SGD momentum",
                              &net->opt1);
    if (s == VKT_OK && o->kind == VKT_OPTIM_ADAMW)
        s = vkt_buffer_create(dev, L->param_bytes, "AdamW exp_avg_sq", &net->opt2);
    if (s == VKT_OK) s = vkt_buffer_create(dev, L->act_bytes, "activations", &net->act);
    if (s == VKT_OK)
        s = vkt_buffer_create(dev, vkt_device_align(dev, 4), "clip scratch", &net->scratch);
    if (s != VKT_OK) {
        vkt_net_destroy(net);
        return s;
    }
    *out = net;
    return VKT_OK;
}

void vkt_net_destroy(vkt_net *net) {
    if (!net) return;
    vkt_buffer_destroy(net->scratch);
    vkt_buffer_destroy(net->act);
    vkt_buffer_destroy(net->opt2);
    vkt_buffer_destroy(net->opt1);
    vkt_buffer_destroy(net->grads);
    vkt_buffer_destroy(net->params);
    free(net->labels);
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
        n += net->L.tensors[i].count;
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

vkt_status vkt_net_read_tensor(vkt_net *net, vkt_net_store store, int i, float *dst) {
    vkt_buffer *b = store_buffer(net, store);
    if (!b || i < 0 || i >= net->L.ntensors)
        return vkt_fail(VKT_ERR_ARG, "no such tensor or store (%d, %d)", i, (int)store);
    const vkt_net_tensor *t = &net->L.tensors[i];
    return vkt_buffer_read(b, t->offset, dst, t->count * 4);
}

vkt_status vkt_net_write_tensor(vkt_net *net, vkt_net_store store, int i, const float *src) {
    vkt_buffer *b = store_buffer(net, store);
    if (!b || i < 0 || i >= net->L.ntensors)
        return vkt_fail(VKT_ERR_ARG, "no such tensor or store (%d, %d)", i, (int)store);
    const vkt_net_tensor *t = &net->L.tensors[i];
    return vkt_buffer_write(b, t->offset, src, t->count * 4);
}

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

vkt_status vkt_net_init(vkt_net *net, uint64_t seed) {
    // Each layer's generator depends only on the seed and the layer index, so a stage of a
    // split model gets exactly the parameters the whole model would.
    VKT_TRY(zero_buffer(net->params)); // padding between tensors stays zero
    for (int i = 0; i < net->L.ntensors; i++) {
        const vkt_net_tensor *t = &net->L.tensors[i];
        const vkt_layer_desc *ly = &net->model->layers[t->layer];
        double bound = 1.0 / sqrt((double)ly->in_features);
        bool is_bias = t->ndim == 1;
        uint64_t s = seed * 0x100000001b3ull + (uint64_t)t->layer * 2 + (is_bias ? 1 : 0);
        float *v = malloc(t->count * 4);
        if (!v) return vkt_fail(VKT_ERR_HOST_MEMORY, "out of host memory");
        for (uint64_t k = 0; k < t->count; k++)
            v[k] = (float)((2 * rng_uniform(&s) - 1) * bound);
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
static vkt_view layer_out(vkt_net *net, int slot, int l) {
    return act_view(net, slot, net->L.layer[l - net->L.first].out,
                    (uint64_t)net->desc.max_batch * net->model->layers[l].out_features * 4);
}
static vkt_view layer_grad(vkt_net *net, int slot, int l) {
    return act_view(net, slot, net->L.layer[l - net->L.first].grad,
                    (uint64_t)net->desc.max_batch * net->model->layers[l].out_features * 4);
}
vkt_view vkt_net_output(vkt_net *net, int slot) { return layer_out(net, slot, net->L.last - 1); }
vkt_view vkt_net_output_grad(vkt_net *net, int slot) {
    return layer_grad(net, slot, net->L.last - 1);
}
vkt_view vkt_net_targets(vkt_net *net, int slot) {
    uint64_t per = net->model->loss == VKT_LOSS_MSE ? net->L.out_features : 1;
    return act_view(net, slot, net->L.targets_off, (uint64_t)net->desc.max_batch * per * 4);
}
vkt_view vkt_net_loss_rows(vkt_net *net, int slot) {
    return act_view(net, slot, net->L.loss_off, (uint64_t)net->desc.max_batch * 4);
}
vkt_view vkt_net_correct(vkt_net *net) { return vkt_buffer_view(net->act, net->L.correct_off, 4); }
vkt_view vkt_net_params(vkt_net *net) { return vkt_buffer_whole(net->params); }
vkt_view vkt_net_grads(vkt_net *net) { return vkt_buffer_whole(net->grads); }

static vkt_view tensor_view(vkt_buffer *b, const vkt_net_tensor *t) {
    return vkt_buffer_view(b, t->offset, t->count * 4);
}

// The layer input of layer l in a slot: the previous layer's output, or the stage input.
static vkt_view layer_in(vkt_net *net, int slot, int l) {
    return l == net->L.first ? vkt_net_input(net, slot) : layer_out(net, slot, l - 1);
}

static int weight_tensor(const vkt_net *net, int l) {
    for (int i = 0; i < net->L.ntensors; i++)
        if (net->L.tensors[i].layer == l && net->L.tensors[i].ndim == 2) return i;
    return -1;
}

// ---------------------------------------------------------------------------------------------
// Recording

// Labels must outlive the stream's timings: each net keeps its own, made once per layer/phase.
static const char *layer_label(vkt_net *net, const char *phase, int l, const char *what) {
    char buf[LABEL_LEN];
    snprintf(buf, sizeof buf, "%s:%d:%s", phase, l, what);
    for (int i = 0; i < net->nlabels; i++)
        if (strcmp(net->labels[i], buf) == 0) return net->labels[i];
    if (net->nlabels == net->cap_labels) {
        int cap = net->cap_labels ? 2 * net->cap_labels : 32;
        char(*t)[LABEL_LEN] = realloc(net->labels, (size_t)cap * LABEL_LEN);
        if (!t) return "unlabelled";
        net->labels = t;
        net->cap_labels = cap;
    }
    memcpy(net->labels[net->nlabels], buf, LABEL_LEN);
    return net->labels[net->nlabels++];
}

void vkt_net_record_zero_grads(vkt_net *net, vkt_cmd *cmd) {
    vkt_cmd_fill(cmd, vkt_net_grads(net), 0);
    vkt_cmd_barrier(cmd);
}

// Whether activation layer a runs in the forward epilogue of the dense layer before it.
static bool act_fused_forward(const vkt_net *net, int a) {
    const vkt_model_desc *m = net->model;
    return net->fuse && a > net->L.first && a < net->L.last &&
           m->layers[a].kind == VKT_LAYER_ACTIVATION && m->layers[a - 1].kind == VKT_LAYER_DENSE;
}

// Whether activation layer a's input is in memory for its backward: always unless the fused
// forward skipped writing it, which it does where f' follows from the output.
static bool act_input_kept(const vkt_net *net, int a) {
    const vkt_layer_desc *ly = &net->model->layers[a];
    return !act_fused_forward(net, a) || !vkt_act_grad_from_output(ly->act, ly->alpha);
}

// Whether activation layer a's backward runs in the epilogue of the input-gradient matmul of the
// dense layer after it, when the backward records layers [lo, hi). Not when a's gradient is not
// needed (the stage's first layer without input_grad) or the dense layer is outside the range.
static bool act_fused_backward(const vkt_net *net, int a, int lo, int hi, bool input_grad) {
    const vkt_model_desc *m = net->model;
    return net->fuse && a >= lo && a + 1 < hi && m->layers[a].kind == VKT_LAYER_ACTIVATION &&
           m->layers[a + 1].kind == VKT_LAYER_DENSE && (a > net->L.first || input_grad);
}

void vkt_net_record_forward(vkt_net *net, vkt_cmd *cmd, int slot, uint32_t B) {
    const vkt_model_desc *m = net->model;
    for (int l = net->L.first; l < net->L.last; l++) {
        const vkt_layer_desc *ly = &m->layers[l];
        if (act_fused_forward(net, l)) continue; // ran in the dense layer's epilogue
        vkt_view in = layer_in(net, slot, l), out = layer_out(net, slot, l);
        if (ly->kind == VKT_LAYER_DENSE) {
            int w = weight_tensor(net, l);
            const vkt_net_tensor *wt = &net->L.tensors[w];
            vkt_view bias;
            bool has_bias = ly->bias;
            if (has_bias) bias = tensor_view(net->params, &net->L.tensors[w + 1]);
            // y[B,out] = x[B,in] W[out,in]^T + b, and with a fused activation layer after it
            // act(y) into that layer's output (y itself into this one's when the act needs it).
            // (The label stays "dense": the trace and the step statistics count it as a matmul.)
            vkt_mm_epilogue epi = {VKT_MM_EPI_NONE};
            vkt_view z = out;
            if (act_fused_forward(net, l + 1)) {
                const vkt_layer_desc *al = &m->layers[l + 1];
                epi = (vkt_mm_epilogue){.kind = VKT_MM_EPI_ACT,
                                        .act = al->act,
                                        .alpha = al->alpha,
                                        .saved = act_input_kept(net, l + 1) ? &z : NULL};
                out = layer_out(net, slot, l + 1);
            }
            vkt_op_matmul_ex(cmd, net->ops, VKT_MM_NT, out, in, tensor_view(net->params, wt),
                             has_bias ? &bias : NULL, 0.0f, B, ly->out_features, ly->in_features,
                             &epi, layer_label(net, "fwd", l, "dense"));
        } else {
            vkt_op_act_forward(cmd, net->ops, ly->act, ly->alpha, out, in, B * ly->out_features,
                               layer_label(net, "fwd", l, "act"));
        }
        vkt_cmd_barrier(cmd);
    }
}

void vkt_net_record_loss(vkt_net *net, vkt_cmd *cmd, int slot, uint32_t B, float grad_scale) {
    VKT_ASSERT(net->last_stage);
    uint32_t C = net->L.out_features;
    if (net->model->loss == VKT_LOSS_MSE)
        vkt_op_mse(cmd, net->ops, vkt_net_loss_rows(net, slot), vkt_net_output_grad(net, slot),
                   vkt_net_output(net, slot), vkt_net_targets(net, slot), B, C, grad_scale,
                   "fwd:loss:mse");
    else
        vkt_op_softmax_xent(cmd, net->ops, vkt_net_loss_rows(net, slot),
                            vkt_net_output_grad(net, slot), vkt_net_output(net, slot),
                            vkt_net_targets(net, slot), B, C, grad_scale, "fwd:loss:softmax_xent");
    vkt_cmd_barrier(cmd);
}

void vkt_net_record_accuracy(vkt_net *net, vkt_cmd *cmd, int slot, uint32_t B) {
    VKT_ASSERT(net->last_stage);
    vkt_op_accuracy(cmd, net->ops, vkt_net_correct(net), NULL, vkt_net_output(net, slot),
                    vkt_net_targets(net, slot), B, net->L.out_features, "fwd:accuracy");
    vkt_cmd_barrier(cmd);
}

void vkt_net_record_backward(vkt_net *net, vkt_cmd *cmd, int slot, uint32_t B, bool input_grad) {
    vkt_net_record_backward_layers(net, cmd, slot, B, net->L.first, net->L.last, input_grad);
}

void vkt_net_param_range(const vkt_net *net, int lo, int hi, uint64_t *off, uint64_t *bytes) {
    uint64_t a = UINT64_MAX, b = 0;
    for (int i = 0; i < net->L.ntensors; i++) {
        const vkt_net_tensor *t = &net->L.tensors[i];
        if (t->layer < lo || t->layer >= hi) continue;
        if (t->offset < a) a = t->offset;
        if (t->offset + t->count * 4 > b) b = t->offset + t->count * 4;
    }
    if (a == UINT64_MAX) {
        *off = *bytes = 0;
        return;
    }
    // Up to the next tensor's aligned start (the padding is zero and travels along), so that
    // ranges stay aligned for views.
    uint64_t al = vkt_device_align(net->dev, 1);
    b = align_up(b, al);
    if (b > net->L.param_bytes) b = net->L.param_bytes;
    *off = a;
    *bytes = b - a;
}

uint64_t vkt_net_packed_bytes(const vkt_net *net) { return net->L.param_bytes; }
int vkt_net_first_layer(const vkt_net *net) { return net->L.first; }
int vkt_net_last_layer(const vkt_net *net) { return net->L.last; }

// The weight tensor of dense layer l, its momentum buffer (when the optimizer keeps one) and the
// SGD epilogue that applies the step to it from the gradient the product computes.
static vkt_mm_epilogue sgd_epilogue(vkt_net *net, int l, vkt_view *buf) {
    const vkt_optim_desc *o = &net->desc.optim;
    const vkt_net_tensor *wt = &net->L.tensors[weight_tensor(net, l)];
    bool momentum = o->momentum != 0.0f && net->opt1;
    if (momentum) *buf = tensor_view(net->opt1, wt);
    return (vkt_mm_epilogue){.kind = VKT_MM_EPI_SGD,
                             .alpha = o->lr,
                             .saved = momentum ? buf : NULL,
                             .momentum = momentum ? o->momentum : 0.0f,
                             .weight_decay = o->weight_decay,
                             .nesterov = o->nesterov};
}

// Whether dense layer l's weight gradient can take its SGD step in the matmul's epilogue.
static bool sgd_fuses(vkt_net *net, int slot, uint32_t B, int l) {
    const vkt_layer_desc *ly = &net->model->layers[l];
    const vkt_net_tensor *wt = &net->L.tensors[weight_tensor(net, l)];
    vkt_view p = tensor_view(net->params, wt), dy = layer_grad(net, slot, l);
    vkt_view x = layer_in(net, slot, l), buf;
    vkt_mm_epilogue e = sgd_epilogue(net, l, &buf);
    return vkt_matmul_sgd_fits(net->ops, VKT_MM_TN, &p, &dy, &x, e.saved, ly->out_features,
                               ly->in_features, B);
}

// dW = dy^T x of dense layer l with the SGD step applied to W in the epilogue (the gradient is
// not stored).
static void record_fused_dweight(vkt_net *net, vkt_cmd *cmd, int slot, uint32_t B, int l) {
    const vkt_layer_desc *ly = &net->model->layers[l];
    const vkt_net_tensor *wt = &net->L.tensors[weight_tensor(net, l)];
    vkt_view buf;
    vkt_mm_epilogue e = sgd_epilogue(net, l, &buf);
    vkt_op_matmul_ex(cmd, net->ops, VKT_MM_TN, tensor_view(net->params, wt),
                     layer_grad(net, slot, l), layer_in(net, slot, l), NULL, 0.0f, ly->out_features,
                     ly->in_features, B, &e, layer_label(net, "bwd", l, "dweight"));
}

// The backward of layers [lo, hi). fused_sgd (not NULL): where a dense layer's weight gradient
// can take its SGD step in the matmul's epilogue, it does, and fused_sgd[w] is set for its weight
// tensor w; returns how many did. Such a product writes W, which the same layer's input-gradient
// product reads: it goes into the next level (after the barrier), beside the next dense layer's
// products, which read other tensors.
static int record_backward(vkt_net *net, vkt_cmd *cmd, int slot, uint32_t B, int lo, int hi,
                           bool input_grad, bool *fused_sgd) {
    const vkt_model_desc *m = net->model;
    VKT_ASSERT(lo >= net->L.first && hi <= net->L.last);
    int nfused = 0, pending = -1; // pending: a layer whose fused weight gradient waits a level
    for (int l = hi - 1; l >= lo; l--) {
        const vkt_layer_desc *ly = &m->layers[l];
        // An activation whose backward ran in the epilogue of the dense layer after it.
        if (act_fused_backward(net, l, lo, hi, input_grad)) continue;
        if (pending >= 0) record_fused_dweight(net, cmd, slot, B, pending);
        pending = -1;
        bool need_dx = l > net->L.first || input_grad;
        vkt_view dy = layer_grad(net, slot, l);
        vkt_view x = layer_in(net, slot, l);
        vkt_view dx =
            l == net->L.first ? vkt_net_input_grad(net, slot) : layer_grad(net, slot, l - 1);
        if (ly->kind == VKT_LAYER_DENSE) {
            int w = weight_tensor(net, l);
            const vkt_net_tensor *wt = &net->L.tensors[w];
            if (fused_sgd && sgd_fuses(net, slot, B, l)) {
                fused_sgd[w] = true;
                nfused++;
                if (need_dx)
                    pending = l;
                else
                    record_fused_dweight(net, cmd, slot, B, l);
            } else {
                // dW[out,in] += dy[B,out]^T x[B,in]
                vkt_op_matmul(cmd, net->ops, VKT_MM_TN, tensor_view(net->grads, wt), dy, x, NULL,
                              1.0f, ly->out_features, ly->in_features, B,
                              layer_label(net, "bwd", l, "dweight"));
            }
            // db[out] += column sums of dy
            if (ly->bias)
                vkt_op_bias_grad(cmd, net->ops, tensor_view(net->grads, &net->L.tensors[w + 1]), dy,
                                 B, ly->out_features, layer_label(net, "bwd", l, "dbias"));
            // dx[B,in] = dy[B,out] W[out,in], and with the activation layer before it fused, on
            // through it: its input gradient dx * f' (f' from its input, or from its output
            // where the fused forward kept only that).
            vkt_mm_epilogue epi = {VKT_MM_EPI_NONE};
            vkt_view saved;
            if (need_dx && act_fused_backward(net, l - 1, lo, hi, input_grad)) {
                int a = l - 1;
                const vkt_layer_desc *al = &m->layers[a];
                bool kept = act_input_kept(net, a);
                saved = kept ? layer_in(net, slot, a) : layer_out(net, slot, a);
                epi = (vkt_mm_epilogue){.kind = kept ? VKT_MM_EPI_GRAD_X : VKT_MM_EPI_GRAD_Y,
                                        .act = al->act,
                                        .alpha = al->alpha,
                                        .saved = &saved};
                dx = a == net->L.first ? vkt_net_input_grad(net, slot)
                                       : layer_grad(net, slot, a - 1);
            }
            if (need_dx)
                vkt_op_matmul_ex(cmd, net->ops, VKT_MM_NN, dx, dy, tensor_view(net->params, wt),
                                 NULL, 0.0f, B, ly->in_features, ly->out_features, &epi,
                                 layer_label(net, "bwd", l, "dinput"));
        } else if (need_dx) {
            if (act_input_kept(net, l))
                vkt_op_act_backward(cmd, net->ops, ly->act, ly->alpha, dx, dy, x,
                                    B * ly->out_features, layer_label(net, "bwd", l, "act"));
            else
                vkt_op_act_backward_from_output(cmd, net->ops, ly->act, ly->alpha, dx, dy,
                                                layer_out(net, slot, l), B * ly->out_features,
                                                layer_label(net, "bwd", l, "act"));
        }
        if (net->barrier_count++ != net->skip_barrier) vkt_cmd_barrier(cmd);
    }
    if (pending >= 0) {
        record_fused_dweight(net, cmd, slot, B, pending);
        if (net->barrier_count++ != net->skip_barrier) vkt_cmd_barrier(cmd);
    }
    return nfused;
}

void vkt_net_record_backward_layers(vkt_net *net, vkt_cmd *cmd, int slot, uint32_t B, int lo,
                                    int hi, bool input_grad) {
    record_backward(net, cmd, slot, B, lo, hi, input_grad, NULL);
}

int vkt_net_record_backward_step(vkt_net *net, vkt_cmd *cmd, int slot, uint32_t B, uint32_t step) {
    const vkt_optim_desc *o = &net->desc.optim;
    bool fused[2 * MAX_LAYERS] = {false};
    int nfused = 0;
    if (net->fuse && o->kind == VKT_OPTIM_SGD && !(o->clip > 0) &&
        net->L.ntensors <= 2 * MAX_LAYERS)
        nfused = record_backward(net, cmd, slot, B, net->L.first, net->L.last, false, fused);
    else
        record_backward(net, cmd, slot, B, net->L.first, net->L.last, false, NULL);
    if (nfused == 0) {
        vkt_net_record_step(net, cmd, step);
        return 0;
    }
    // SGD over the tensors that did not take their step in a matmul, one dispatch per run of them
    // that lies contiguous in the packed buffers (with the alignment padding between: zeros, which
    // SGD keeps zero, as vkt_net_record_step's whole-buffer pass does).
    uint64_t al = vkt_device_align(net->dev, 1);
    for (int i = 0; i < net->L.ntensors;) {
        if (fused[i]) {
            i++;
            continue;
        }
        int j = i + 1;
        while (j < net->L.ntensors && !fused[j] &&
               net->L.tensors[j].offset ==
                   align_up(net->L.tensors[j - 1].offset + net->L.tensors[j - 1].count * 4, al))
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

void vkt_net_record_step(vkt_net *net, vkt_cmd *cmd, uint32_t step) {
    const vkt_optim_desc *o = &net->desc.optim;
    uint64_t total = net->L.param_bytes, chunk = chunk_bytes(net);
    if (o->clip > 0) {
        vkt_view sum = vkt_buffer_view(net->scratch, 0, 4);
        vkt_cmd_fill(cmd, sum, 0);
        vkt_cmd_barrier(cmd);
        for (uint64_t off = 0; off < total; off += chunk) {
            uint64_t n = total - off < chunk ? total - off : chunk;
            vkt_op_sumsq(cmd, net->ops, sum, vkt_buffer_view(net->grads, off, n), (uint32_t)(n / 4),
                         "opt:clip:sumsq");
            vkt_cmd_barrier(cmd); // chunks accumulate into one scalar
        }
        for (uint64_t off = 0; off < total; off += chunk) {
            uint64_t n = total - off < chunk ? total - off : chunk;
            vkt_op_clip_scale(cmd, net->ops, vkt_buffer_view(net->grads, off, n), sum,
                              (uint32_t)(n / 4), o->clip, "opt:clip:scale");
        }
        vkt_cmd_barrier(cmd);
    }
    for (uint64_t off = 0; off < total; off += chunk) {
        uint64_t n = total - off < chunk ? total - off : chunk;
        vkt_view p = vkt_buffer_view(net->params, off, n), g = vkt_buffer_view(net->grads, off, n);
        if (o->kind == VKT_OPTIM_ADAMW) {
            vkt_op_adamw(cmd, net->ops, p, g, vkt_buffer_view(net->opt1, off, n),
                         vkt_buffer_view(net->opt2, off, n), (uint32_t)(n / 4), o->lr, o->beta1,
                         o->beta2, o->eps, o->weight_decay, step, "opt:adamw");
        } else {
            vkt_view buf = net->opt1 ? vkt_buffer_view(net->opt1, off, n) : g;
            vkt_op_sgd(cmd, net->ops, p, g, buf, (uint32_t)(n / 4), o->lr, o->momentum,
                       o->weight_decay, o->nesterov, "opt:sgd");
        }
    }
    vkt_cmd_barrier(cmd);
}

vkt_status vkt_net_status(vkt_net *net) { return vkt_ops_status(net->ops); }
