// strategy.c: the strategy interface, what all strategies share (opening devices, tensor lists,
// trace accounting, uploads), and the single-device strategy. Replicated and layer-partitioned
// training live in replicated.c and layers.c.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "strategy_internal.h"
#include "vkt_internal.h"

const char *vkt_strategy_name(vkt_strategy_kind kind) {
    switch (kind) {
    case VKT_STRATEGY_SINGLE: return "single";
    case VKT_STRATEGY_REPLICATED: return "replicated";
    case VKT_STRATEGY_LAYERS: return "layers";
    case VKT_STRATEGY_TENSOR: return "tensor";
    case VKT_STRATEGY_LAYERS_TENSOR: return "layers,tensor";
    case VKT_STRATEGY_REPLICATED_TENSOR: return "replicated,tensor";
    }
    return "?";
}

// ---------------------------------------------------------------------------------------------
// Shared pieces

void vkt_strategy_device_label(const vkt_context *ctx, const int *devices, int n, int k, char *buf,
                               size_t size) {
    bool identity = true;
    for (int i = 0; i < n; i++)
        identity &= devices[i] == i;
    const char *name = vkt_context_device_info(ctx, devices[k])->name;
    if (identity)
        snprintf(buf, size, "#%d %s", k, name);
    else
        snprintf(buf, size, "#%d %s (device %d)", k, name, devices[k]);
}

vkt_status strategy_open_devices(vkt_strategy *s) {
    const vkt_strategy_desc *d = &s->desc;
    size_t len = 0;
    for (int i = 0; i < d->ndevices; i++) {
        vkt_device_desc dd = {.mem_limit = d->mem_limit};
        VKT_TRY(vkt_device_create(d->ctx, d->devices[i], &dd, &s->dev[i]));
        s->ndev = i + 1;
        VKT_TRY(vkt_ops_create(s->dev[i], &s->ops[i]));
        VKT_TRY(vkt_cmd_create(s->dev[i], &s->cmd[i]));
        const vkt_device_info *info = vkt_device_get_info(s->dev[i]);
        int w = snprintf(s->devices_str + len, sizeof s->devices_str - len, "%s%s", i ? "," : "",
                         info->name);
        if (w > 0 && len + (size_t)w < sizeof s->devices_str) len += (size_t)w;
        vkt_strategy_device_label(d->ctx, d->devices, d->ndevices, i, s->stats[i].label,
                                  sizeof s->stats[i].label);
        s->stats[i].memory_limit = vkt_device_memory_limit(s->dev[i]);
    }
    return VKT_OK;
}

vkt_status strategy_trace_begin(vkt_strategy *s) {
    vkt_trace *t = s->desc.trace;
    if (!t) return VKT_OK;
    VKT_TRY(vkt_trace_set_strategy(t, vkt_strategy_name(s->desc.kind)));
    for (int i = 0; i < s->ndev; i++) {
        // Named as everywhere else (vkt_strategy_device_label), not by the device's own label.
        VKT_TRY(vkt_trace_add_device(t, s->stats[i].label, vkt_device_get_info(s->dev[i])->driver,
                                     vkt_device_memory_limit(s->dev[i]), &s->trace_pid[i]));
        VKT_TRY(vkt_trace_calibrate(t, s->trace_pid[i], s->dev[i]));
    }
    return VKT_OK;
}

vkt_status strategy_account(vkt_strategy *s, int d, int step) {
    return strategy_account_cmd(s, d, s->cmd[d], step);
}

// Whether a dispatch is one of the fused attention kernels (engine/nn/layers/attention.c labels
// them "<phase>:<path>:attention" and "bwd:<path>:attention_stats").
static bool label_is_attention(const char *label) {
    const char *what = label ? strrchr(label, ':') : NULL;
    return what && (strcmp(what + 1, "attention") == 0 || strcmp(what + 1, "attention_stats") == 0);
}

vkt_status strategy_account_cmd(vkt_strategy *s, int d, vkt_cmd *cmd, int step) {
    const vkt_timing *tm;
    int n = vkt_cmd_timings(cmd, &tm);
    for (int i = 0; i < n; i++) {
        double dur = (double)(tm[i].end_ns - tm[i].start_ns);
        s->stats[d].busy_ns += dur;
        if (strncmp(tm[i].label, "comm:", 5) == 0) {
            s->stats[d].comm_ns += dur;
            s->stats[d].gpu_comm_ns += dur;
        }
        if (vkt_net_label_is_matmul(tm[i].label)) s->stats[d].matmul_ns += dur;
        if (label_is_attention(tm[i].label)) s->stats[d].attention_ns += dur;
    }
    uint64_t peak = vkt_device_memory_peak(s->dev[d]);
    if (peak > s->stats[d].peak_memory) s->stats[d].peak_memory = peak;
    vkt_trace *t = s->desc.trace;
    if (!t) return VKT_OK;
    if (n) VKT_TRY(vkt_trace_add_timings(t, s->trace_pid[d], tm, n, step, NULL, NULL));
    return vkt_trace_add_counter(t, s->trace_pid[d], "memory_bytes", vkt_trace_now_ns(),
                                 (double)vkt_device_memory_used(s->dev[d]));
}

vkt_status strategy_upload_input(vkt_net *net, int slot, const float *x, uint32_t B) {
    vkt_view v = vkt_net_input(net, slot);
    return vkt_buffer_write(v.buffer, v.offset, x, (uint64_t)B * vkt_net_in_features(net) * 4);
}

vkt_status strategy_upload_targets(vkt_net *net, int slot, const void *targets, uint32_t B) {
    vkt_view v = vkt_net_targets(net, slot);
    uint64_t per = vkt_model_targets_per_sample(vkt_net_model(net));
    return vkt_buffer_write(v.buffer, v.offset, targets, (uint64_t)B * per * 4);
}

vkt_status strategy_read_loss(vkt_net *net, int slot, uint32_t B, double *sum) {
    float buf[1024];
    vkt_view v = vkt_net_loss_rows(net, slot);
    double total = 0;
    B *= vkt_net_loss_rows_per_sample(net);
    for (uint32_t r = 0; r < B; r += 1024) {
        uint32_t n = B - r < 1024 ? B - r : 1024;
        VKT_TRY(vkt_buffer_read(v.buffer, v.offset + (uint64_t)r * 4, buf, (uint64_t)n * 4));
        for (uint32_t i = 0; i < n; i++)
            total += buf[i];
    }
    *sum = total;
    return VKT_OK;
}

void strategy_plan_input(const vkt_strategy *s, vkt_plan_input *in) {
    const vkt_strategy_desc *d = &s->desc;
    memset(in, 0, sizeof *in);
    in->model = d->model;
    in->batch = d->batch;
    in->optim = d->optim;
    in->ndevices = s->ndev;
    for (int i = 0; i < s->ndev; i++) {
        in->limit[i] = vkt_device_memory_limit(s->dev[i]);
        in->align[i] = vkt_device_align(s->dev[i], 1);
        in->max_alloc[i] = vkt_device_get_info(s->dev[i])->max_allocation_bytes;
        in->upload_areas[i] = !s->dev[i]->device_mapped || d->force_upload_areas;
        in->balance[i] = d->balance[i];
        in->split[i] = d->split[i];
    }
    in->micro_batches = d->micro_batches;
    in->schedule = d->schedule;
    in->tensor_size =
        d->kind == VKT_STRATEGY_LAYERS_TENSOR || d->kind == VKT_STRATEGY_REPLICATED_TENSOR
            ? d->tensor_size
            : 1;
}

vkt_status strategy_refuse(const vkt_strategy *s, const vkt_plan *p, const vkt_plan_input *in) {
    const char *labels[VKT_MAX_DEVICES];
    for (int i = 0; i < s->ndev; i++)
        labels[i] = s->stats[i].label;
    char msg[1024];
    vkt_plan_refusal(p, in, labels, msg, sizeof msg);
    return vkt_fail(p->possible ? VKT_ERR_DEVICE_MEMORY : VKT_ERR_ARG, "%s", msg);
}

// Builds the global tensor list from the nets (replicas: from net 0 only), unless the strategy
// made its own (vtbl.read).
// Every rank's device count, so that each rank knows where its devices stand in the run's.
static vkt_status world_layout(vkt_strategy *s) {
    const vkt_strategy_desc *d = &s->desc;
    s->nranks = 1;
    s->gdev = d->ndevices;
    s->rank_first[1] = d->ndevices;
    if (!d->world || vkt_world_size(d->world) == 1) return VKT_OK;
    s->world = d->world;
    s->rank = vkt_world_rank(d->world);
    s->nranks = vkt_world_size(d->world);
    if (d->kind != VKT_STRATEGY_REPLICATED && d->kind != VKT_STRATEGY_LAYERS)
        return vkt_fail(VKT_ERR_ARG,
                        "across %d ranks, --strategy replicated or layers: --strategy %s keeps "
                        "its devices within one process (run it on one rank's devices)",
                        s->nranks, vkt_strategy_name(d->kind));
    if (d->shard_optimizer)
        return vkt_fail(VKT_ERR_ARG,
                        "--shard-optimizer works within one process, not across %d "
                        "ranks",
                        s->nranks);
    if (s->nranks > VKT_MAX_DEVICES)
        return vkt_fail(VKT_ERR_ARG, "at most %d ranks, not %d", VKT_MAX_DEVICES, s->nranks);
    int counts[VKT_MAX_DEVICES];
    int mine = d->ndevices;
    VKT_TRY(vkt_world_allgather(d->world, &mine, sizeof mine, counts, "every rank's device count"));
    s->rank_first[0] = 0;
    for (int r = 0; r < s->nranks; r++)
        s->rank_first[r + 1] = s->rank_first[r] + counts[r];
    s->gdev = s->rank_first[s->nranks];
    s->gfirst = s->rank_first[s->rank];
    if (s->gdev > VKT_MAX_DEVICES)
        return vkt_fail(VKT_ERR_ARG, "the ranks hold %d devices together; a run takes at most %d",
                        s->gdev, VKT_MAX_DEVICES);
    return VKT_OK;
}

static void collect_tensors(vkt_strategy *s) {
    if (s->vt->read) return;
    s->ntensors = 0;
    int nnets = s->replicated ? 1 : s->ndev;
    for (int d = 0; d < nnets; d++) {
        for (int i = 0; i < vkt_net_tensor_count(s->net[d]) && s->ntensors < MAX_TENSORS; i++) {
            s->tensors[s->ntensors] = *vkt_net_get_tensor(s->net[d], i);
            s->owner[s->ntensors] = d;
            s->local[s->ntensors] = i;
            s->ntensors++;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// single

// Where the net's memory is not host-visible (a discrete GPU), a step copies its batch from a
// host-visible upload area into the net at its start, inside its own command buffer: that
// replaces a staged write (a submit and a wait of its own) per step, and the host writes the next
// batch into the other area while the step runs (vkt_strategy_prefetch). Where the net's memory
// is mapped (CPU drivers, integrated GPUs), the batch is written straight into the net before the
// submit, as a device-side copy would only add work: there the overlap is the trainer gathering
// and converting the next batch while the step runs.

static uint64_t targets_per_row(const vkt_net *net) {
    return vkt_model_targets_per_sample(vkt_net_model(net));
}

static vkt_status ring_write(vkt_strategy *s, int slot, const float *x, const void *targets,
                             uint32_t B) {
    vkt_net *net = s->net[0];
    uint64_t xb = (uint64_t)B * vkt_net_in_features(net) * 4;
    uint64_t tb = (uint64_t)B * targets_per_row(net) * 4;
    VKT_TRY(vkt_buffer_write(s->ring[slot], 0, x, xb));
    return vkt_buffer_write(s->ring[slot], s->ring_targets_off, targets, tb);
}

// Whether the next step's dispatches are timed. On lavapipe a timestamp puts work in the driver's
// binning scene, which each later pipeline barrier then flushes through its rasterizer threads
// and waits for: 110-250 us a barrier against about 13 us untimed, 5-10% of fashion_mlp's step
// (docs/PERFORMANCE.md, "Timestamps"). The run's figures (busy, matmul time) come from the timed
// steps; a trace and the benchmarks' per-kernel split time every step.
static bool single_timed(vkt_strategy *s) {
    bool timed = s->desc.profile_kernels || s->desc.trace || s->since_timed == 0;
    s->since_timed = (s->since_timed + 1) % VKT_SINGLE_TIMED_EVERY;
    return timed;
}

static bool optim_same(const vkt_optim_desc *a, const vkt_optim_desc *b) {
    return a->kind == b->kind && a->lr == b->lr && a->momentum == b->momentum &&
           a->nesterov == b->nesterov && a->weight_decay == b->weight_decay &&
           a->beta1 == b->beta1 && a->beta2 == b->beta2 && a->eps == b->eps && a->clip == b->clip;
}

// Runs the step whose batch is in place (in the net where its memory is mapped, else in upload
// area `area`): submits the untimed stream recorded for an earlier step where it still holds
// (struct vkt_strategy.reuse; on lavapipe recording a fashion_mlp step took about 0.3 ms of
// host time in which the device idled, docs/PERFORMANCE.md), else records the step and submits it.
static vkt_status single_run(vkt_strategy *s, int area, uint32_t B, uint32_t step, int64_t t0) {
    vkt_net *net = s->net[0];
    bool timed = single_timed(s);
    s->run_B = B;
    s->run_step = step;
    s->run_t0 = t0;
    strategy_stream *r = &s->reuse[area];
    if (!timed && r->ok && r->B == B && optim_same(&r->optim, &s->desc.optim)) {
        s->run_cmd = r->cmd;
        s->stats[0].steps_resubmitted++;
        return vkt_cmd_submit(s->run_cmd);
    }
    vkt_cmd *cmd = s->cmd[0];
    if (!timed) {
        if (!r->cmd) VKT_TRY(vkt_cmd_create(s->dev[0], &r->cmd));
        cmd = r->cmd;
        r->ok = false;
    }
    s->run_cmd = cmd;
    VKT_TRY(vkt_cmd_begin(cmd, timed));
    if (s->ring[0]) {
        uint64_t xb = (uint64_t)B * vkt_net_in_features(net) * 4;
        uint64_t tb = (uint64_t)B * targets_per_row(net) * 4;
        vkt_view in = vkt_net_input(net, 0), tg = vkt_net_targets(net, 0);
        in.size = xb;
        tg.size = tb;
        vkt_cmd_copy(cmd, vkt_buffer_view(s->ring[area], 0, xb), in, "upload:input");
        vkt_cmd_copy(cmd, vkt_buffer_view(s->ring[area], s->ring_targets_off, tb), tg,
                     "upload:targets");
        vkt_cmd_barrier(cmd);
    }
    vkt_net_record_zero_grads_step(net, cmd, 0, B);
    strategy_set_phase(s, net, true, step, 0);
    vkt_net_record_forward(net, cmd, 0, B);
    vkt_net_record_loss(net, cmd, 0, B, 1.0f / (float)B);
    // One batch, one device, nobody reads the gradients: the weight updates may run in the
    // weight-gradient matmuls (vkt_net_record_backward_step).
    vkt_net_record_backward_step(net, cmd, 0, B, step);
    VKT_TRY(vkt_net_status(net));
    VKT_TRY(vkt_cmd_end(cmd));
    VKT_TRY(vkt_cmd_submit(cmd));
    if (!timed && vkt_net_step_reusable(net)) {
        *r = (strategy_stream){.cmd = cmd, .ok = true, .B = B, .optim = s->desc.optim};
    }
    return VKT_OK;
}

static vkt_status single_submit(vkt_strategy *s, const float *x, const void *targets, uint32_t B,
                                uint32_t step) {
    int64_t t0 = vkt_trace_now_ns();
    if (!s->ring[0]) {
        VKT_TRY(strategy_upload_input(s->net[0], 0, x, B));
        VKT_TRY(strategy_upload_targets(s->net[0], 0, targets, B));
        return single_run(s, 0, B, step, t0);
    }
    int slot;
    if (s->prefetched) {
        s->prefetched = false;
        if (s->pf_x != x || s->pf_t != targets || s->pf_B != B)
            return vkt_fail(VKT_ERR_ARG, "the step was given another batch than the one "
                                         "prefetched for it (vkt_strategy_prefetch)");
        slot = s->pf_slot;
    } else {
        slot = s->ring_next;
        VKT_TRY(ring_write(s, slot, x, targets, B));
    }
    s->ring_next = slot ^ 1;
    return single_run(s, slot, B, step, t0);
}

static vkt_status single_prefetch(vkt_strategy *s, const float *x, const void *targets,
                                  uint32_t B) {
    if (!s->ring[0]) return VKT_OK; // mapped: the next submit writes the net directly
    // The running step reads ring[ring_next ^ 1]; ring[ring_next] is free.
    VKT_TRY(ring_write(s, s->ring_next, x, targets, B));
    s->prefetched = true;
    s->pf_slot = s->ring_next;
    s->pf_x = x;
    s->pf_t = targets;
    s->pf_B = B;
    return VKT_OK;
}

static vkt_status single_finish(vkt_strategy *s, double *loss_sum) {
    vkt_net *net = s->net[0];
    vkt_cmd *cmd = s->run_cmd; // set by single_run: a step was begun (vkt_strategy_step_end)
    VKT_TRY(vkt_cmd_wait(cmd, VKT_WAIT_MS));
    VKT_TRY(strategy_read_loss(net, 0, s->run_B, loss_sum));
    double wall = (double)(vkt_trace_now_ns() - s->run_t0);
    s->stats[0].wall_ns += wall;
    if (vkt_cmd_timed(cmd)) s->timed_wall_ns += wall;
    return strategy_account_cmd(s, 0, cmd, (int)s->run_step);
}

// Forward, loss and accuracy of one batch on one net (used by every strategy whose last stage
// is a whole model: single and replicated).
static vkt_status eval_on(vkt_strategy *s, int d, const float *x, const void *targets, uint32_t B,
                          double *loss_sum, uint64_t *correct) {
    vkt_net *net = s->net[d];
    vkt_cmd *cmd = s->cmd[d];
    VKT_TRY(strategy_upload_input(net, 0, x, B));
    VKT_TRY(strategy_upload_targets(net, 0, targets, B));
    VKT_TRY(vkt_cmd_begin(cmd, false));
    vkt_cmd_fill(cmd, vkt_net_correct(net), 0);
    vkt_cmd_barrier(cmd);
    strategy_set_phase(s, net, false, 0, 0);
    vkt_net_record_forward(net, cmd, 0, B);
    vkt_net_record_loss(net, cmd, 0, B, 1.0f / (float)B);
    if (vkt_net_model(net)->loss == VKT_LOSS_SOFTMAX_XENT) vkt_net_record_accuracy(net, cmd, 0, B);
    VKT_TRY(vkt_net_status(net));
    VKT_TRY(vkt_cmd_end(cmd));
    VKT_TRY(vkt_cmd_submit(cmd));
    VKT_TRY(vkt_cmd_wait(cmd, VKT_WAIT_MS));
    VKT_TRY(strategy_read_loss(net, 0, B, loss_sum));
    uint32_t c = 0;
    if (vkt_net_model(net)->loss == VKT_LOSS_SOFTMAX_XENT) {
        vkt_view v = vkt_net_correct(net);
        VKT_TRY(vkt_buffer_read(v.buffer, v.offset, &c, 4));
    }
    *correct = c;
    return VKT_OK;
}

static vkt_status single_eval(vkt_strategy *s, const float *x, const void *targets, uint32_t B,
                              double *loss_sum, uint64_t *correct) {
    return eval_on(s, 0, x, targets, B, loss_sum, correct);
}

static void single_destroy(vkt_strategy *s) {
    for (int i = 0; i < 2; i++) {
        vkt_buffer_destroy(s->ring[i]);
        vkt_cmd_destroy(s->reuse[i].cmd);
    }
}

static const strategy_vtbl single_vtbl = {
    .submit = single_submit,
    .prefetch = single_prefetch,
    .finish = single_finish,
    .eval = single_eval,
    .destroy = single_destroy,
};

static vkt_status single_create(vkt_strategy *s) {
    if (s->desc.ndevices != 1)
        return vkt_fail(VKT_ERR_ARG,
                        "--strategy single runs on one device; %d were given (use "
                        "--strategy replicated or layers for several)",
                        s->desc.ndevices);
    VKT_TRY(strategy_open_devices(s));
    // What the plan says does not fit is refused before anything is allocated, in its words.
    vkt_plan_input pi;
    strategy_plan_input(s, &pi);
    vkt_plan p;
    vkt_plan_single(&pi, &p);
    if (!p.fits) return strategy_refuse(s, &p, &pi);
    vkt_net_desc nd = {
        .model = s->desc.model,
        .first_layer = 0,
        .last_layer = s->desc.model->nlayers,
        .max_batch = s->desc.batch,
        .slots = 1,
        .optim = s->desc.optim,
    };
    VKT_TRY(vkt_net_create(s->dev[0], s->ops[0], &nd, &s->net[0]));
    s->vt = &single_vtbl;
    vkt_net *net = s->net[0];
    s->ring_targets_off =
        vkt_device_align(s->dev[0], (uint64_t)s->desc.batch * vkt_net_in_features(net) * 4);
    // The areas the plan counted (pi.upload_areas), of the size it counted.
    uint64_t size = vkt_plan_upload_bytes(s->desc.model, s->desc.batch, pi.align[0]) / 2;
    for (int i = 0; i < 2 && pi.upload_areas[0]; i++)
        VKT_TRY(vkt_buffer_create_host(s->dev[0], size, "upload area", &s->ring[i]));
    return VKT_OK;
}

// ---------------------------------------------------------------------------------------------
// Public

vkt_status vkt_strategy_create(const vkt_strategy_desc *desc, vkt_strategy **out) {
    *out = NULL;
    if (desc->ndevices < 1 || desc->ndevices > VKT_MAX_DEVICES)
        return vkt_fail(VKT_ERR_ARG, "between 1 and %d devices, not %d", VKT_MAX_DEVICES,
                        desc->ndevices);
    if (desc->batch < 1) return vkt_fail(VKT_ERR_ARG, "batch must be at least 1");
    if (desc->shard_optimizer && desc->kind != VKT_STRATEGY_REPLICATED)
        return vkt_fail(VKT_ERR_ARG,
                        "--shard-optimizer applies to --strategy replicated (each replica keeps "
                        "the optimizer state of its shard), not to --strategy %s",
                        vkt_strategy_name(desc->kind));
    if (desc->pipelines > 1 && desc->kind != VKT_STRATEGY_LAYERS)
        return vkt_fail(VKT_ERR_ARG,
                        "--pipelines %d applies to --strategy layers (pipelines of stages, the "
                        "batch sharded over them), not to --strategy %s",
                        desc->pipelines, vkt_strategy_name(desc->kind));
    vkt_strategy *s = calloc(1, sizeof *s);
    if (!s) return vkt_fail(VKT_ERR_HOST_MEMORY, "out of host memory");
    s->desc = *desc;
    vkt_status st = world_layout(s);
    if (st != VKT_OK) {
        free(s);
        return st;
    }
    switch (desc->kind) {
    case VKT_STRATEGY_SINGLE: st = single_create(s); break;
    case VKT_STRATEGY_REPLICATED: st = strategy_replicated_create(s); break;
    case VKT_STRATEGY_LAYERS:
    case VKT_STRATEGY_LAYERS_TENSOR: st = strategy_layers_create(s); break;
    case VKT_STRATEGY_TENSOR:
    case VKT_STRATEGY_REPLICATED_TENSOR: st = strategy_tensor_create(s); break;
    default: st = vkt_fail(VKT_ERR_ARG, "unknown strategy");
    }
    if (st == VKT_OK) {
        collect_tensors(s);
        st = strategy_trace_begin(s);
    }
    if (st != VKT_OK) {
        vkt_strategy_destroy(s);
        return st;
    }
    *out = s;
    return VKT_OK;
}

int vkt_strategy_rank(const vkt_strategy *s) { return s->rank; }
int vkt_strategy_ranks(const vkt_strategy *s) { return s->nranks; }

int strategy_rank_of(const vkt_strategy *s, int g) {
    int r = 0;
    while (r + 1 < s->nranks && g >= s->rank_first[r + 1])
        r++;
    return r;
}

void vkt_strategy_destroy(vkt_strategy *s) {
    if (!s) return;
    if (s->vt && s->vt->destroy) s->vt->destroy(s);
    for (int i = s->ndev - 1; i >= 0; i--) {
        vkt_net_destroy(s->net[i]);
        vkt_cmd_destroy(s->cmd[i]);
        vkt_ops_destroy(s->ops[i]);
        vkt_device_destroy(s->dev[i]);
    }
    free(s);
}

const char *vkt_strategy_devices(const vkt_strategy *s) { return s->devices_str; }
int vkt_strategy_tensor_count(const vkt_strategy *s) { return s->ntensors; }
const vkt_net_tensor *vkt_strategy_tensor(const vkt_strategy *s, int i) {
    return i >= 0 && i < s->ntensors ? &s->tensors[i] : NULL;
}

const vkt_optim_desc *vkt_strategy_optim(const vkt_strategy *s) { return &s->desc.optim; }

bool vkt_strategy_has_store(const vkt_strategy *s, vkt_net_store store) {
    const vkt_optim_desc *o = &s->desc.optim;
    switch (store) {
    case VKT_STORE_PARAM:
    case VKT_STORE_GRAD: return true;
    case VKT_STORE_OPT1: return o->kind == VKT_OPTIM_ADAMW || o->momentum != 0;
    case VKT_STORE_OPT2: return o->kind == VKT_OPTIM_ADAMW;
    }
    return false;
}

vkt_status vkt_strategy_read(vkt_strategy *s, vkt_net_store store, int i, float *dst) {
    if (i < 0 || i >= s->ntensors) return vkt_fail(VKT_ERR_ARG, "no tensor %d", i);
    if (s->vt->read) return s->vt->read(s, store, i, dst);
    // A sharded optimizer's state: each replica fills its shard's piece of the tensor (and
    // vkt_strategy_write's every-replica write gives each its piece).
    if (s->replicated && s->desc.shard_optimizer &&
        (store == VKT_STORE_OPT1 || store == VKT_STORE_OPT2)) {
        for (int d = 0; d < s->ndev; d++)
            VKT_TRY(vkt_net_read_tensor(s->net[d], store, s->local[i], dst));
        return VKT_OK;
    }
    return vkt_net_read_tensor(s->net[s->owner[i]], store, s->local[i], dst);
}

vkt_status vkt_strategy_write(vkt_strategy *s, vkt_net_store store, int i, const float *src) {
    if (i < 0 || i >= s->ntensors) return vkt_fail(VKT_ERR_ARG, "no tensor %d", i);
    if (s->vt->write) return s->vt->write(s, store, i, src);
    if (s->replicated) {
        for (int d = 0; d < s->ndev; d++)
            VKT_TRY(vkt_net_write_tensor(s->net[d], store, s->local[i], src));
        return VKT_OK;
    }
    return vkt_net_write_tensor(s->net[s->owner[i]], store, s->local[i], src);
}

void strategy_set_phase(const vkt_strategy *s, vkt_net *net, bool train, uint32_t step,
                        uint32_t row0) {
    vkt_net_phase ph = {.train = train, .seed = s->seed, .step = step, .row0 = row0};
    vkt_net_set_phase(net, &ph);
}

vkt_status strategy_broadcast_state(vkt_strategy *s) {
    vkt_net *src = s->net[0];
    for (int i = 0; i < vkt_net_tensor_count(src); i++) {
        const vkt_net_tensor *t = vkt_net_get_tensor(src, i);
        if (!t->state) continue;
        float *v = malloc(t->count * 4);
        if (!v) return vkt_fail(VKT_ERR_HOST_MEMORY, "out of host memory");
        vkt_status st = VKT_OK;
        if (s->rank == 0) st = vkt_net_read_tensor(src, VKT_STORE_PARAM, i, v);
        // Across ranks: rank 0's first replica's, to every other rank's replicas.
        if (s->world && st == VKT_OK)
            st = vkt_world_bcast(s->world, v, t->count * 4, 0, "the running statistics");
        for (int d = s->rank == 0 ? 1 : 0; d < s->ndev && st == VKT_OK; d++)
            st = vkt_net_write_tensor(s->net[d], VKT_STORE_PARAM, i, v);
        free(v);
        VKT_TRY(st);
    }
    return VKT_OK;
}

void vkt_strategy_set_lr(vkt_strategy *s, float lr) {
    s->desc.optim.lr = lr;
    for (int d = 0; d < s->ndev; d++)
        if (s->net[d]) vkt_net_set_lr(s->net[d], lr);
}

vkt_status vkt_strategy_init(vkt_strategy *s, uint64_t seed) {
    s->seed = seed;
    for (int d = 0; d < s->ndev; d++)
        if (s->net[d]) VKT_TRY(vkt_net_init(s->net[d], seed));
    return s->vt->init ? s->vt->init(s, seed) : VKT_OK;
}

vkt_status vkt_strategy_prebuild(vkt_strategy *s) {
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    int threads = cpus < 1 ? 1 : cpus > 16 ? 16 : (int)cpus;
    for (int d = 0; d < s->ndev; d++)
        if (s->net[d]) VKT_TRY(vkt_net_prebuild(s->net[d], threads));
    return VKT_OK;
}

vkt_status vkt_strategy_step_begin(vkt_strategy *s, const float *x, const void *targets, uint32_t B,
                                   uint32_t step) {
    if (s->in_step)
        return vkt_fail(VKT_ERR_ARG, "a step began before the previous one ended "
                                     "(vkt_strategy_step_end)");
    if (B < 1 || B > s->desc.batch)
        return vkt_fail(VKT_ERR_ARG, "a step of %u rows on a strategy built for %u", B,
                        s->desc.batch);
    vkt_status st = s->vt->submit ? s->vt->submit(s, x, targets, B, step)
                                  : s->vt->step(s, x, targets, B, step, &s->step_loss);
    s->in_step = st == VKT_OK;
    return st;
}

vkt_status vkt_strategy_prefetch(vkt_strategy *s, const float *x, const void *targets, uint32_t B) {
    if (B < 1 || B > s->desc.batch)
        return vkt_fail(VKT_ERR_ARG, "a batch of %u rows on a strategy built for %u", B,
                        s->desc.batch);
    if (!s->in_step || !s->vt->prefetch || s->prefetched) return VKT_OK;
    return s->vt->prefetch(s, x, targets, B);
}

vkt_status vkt_strategy_step_end(vkt_strategy *s, double *loss_sum) {
    if (!s->in_step) return vkt_fail(VKT_ERR_ARG, "vkt_strategy_step_end without a step begun");
    s->in_step = false;
    if (!s->vt->finish) {
        *loss_sum = s->step_loss;
        return VKT_OK;
    }
    return s->vt->finish(s, loss_sum);
}

bool vkt_strategy_host_overlaps(const vkt_strategy *s) {
    for (int d = 0; d < s->ndev; d++)
        if (vkt_device_get_info(s->dev[d])->type == VKT_DEVICE_CPU) return false;
    return true;
}

vkt_status vkt_strategy_step(vkt_strategy *s, const float *x, const void *targets, uint32_t B,
                             uint32_t step, double *loss_sum) {
    VKT_TRY(vkt_strategy_step_begin(s, x, targets, B, step));
    return vkt_strategy_step_end(s, loss_sum);
}

vkt_status vkt_strategy_predict(vkt_strategy *s, const float *x, uint32_t B, float *out) {
    if (B < 1 || B > s->desc.batch)
        return vkt_fail(VKT_ERR_ARG, "a batch of %u rows on a strategy built for %u", B,
                        s->desc.batch);
    if (s->in_step) return vkt_fail(VKT_ERR_ARG, "vkt_strategy_predict during a step");
    if (s->vt->predict) return s->vt->predict(s, x, B, out);
    // The stages in order (a replica holds the whole model: the first one is enough); each
    // stage's output comes back to the host and goes into the next one's input.
    const float *in = x;
    float *buf = NULL;
    vkt_status st = VKT_OK;
    for (int d = 0; d < s->ndev && st == VKT_OK; d++) {
        vkt_net *net = s->net[d];
        bool last = vkt_net_last_layer(net) == s->desc.model->nlayers;
        uint64_t n = (uint64_t)B * vkt_net_out_features(net);
        float *dst = last ? out : malloc(n * 4);
        if (!dst) {
            st = vkt_fail(VKT_ERR_HOST_MEMORY, "out of host memory");
            break;
        }
        vkt_cmd *cmd = s->cmd[d];
        st = strategy_upload_input(net, 0, in, B);
        if (st == VKT_OK) st = vkt_cmd_begin(cmd, false);
        if (st == VKT_OK) {
            strategy_set_phase(s, net, false, 0, 0);
            vkt_net_record_forward(net, cmd, 0, B);
            st = vkt_net_status(net);
            vkt_status e = vkt_cmd_end(cmd);
            if (st == VKT_OK) st = e;
        }
        if (st == VKT_OK) st = vkt_cmd_submit(cmd);
        if (st == VKT_OK) st = vkt_cmd_wait(cmd, VKT_WAIT_MS);
        if (st == VKT_OK) {
            vkt_view v = vkt_net_output(net, 0);
            st = vkt_buffer_read(v.buffer, v.offset, dst, n * 4);
        }
        free(buf);
        buf = last ? NULL : dst;
        in = dst;
        if (last) break;
    }
    free(buf);
    return st;
}

vkt_status vkt_strategy_eval(vkt_strategy *s, const float *x, const void *targets, uint32_t B,
                             double *loss_sum, uint64_t *correct) {
    if (B < 1 || B > s->desc.batch)
        return vkt_fail(VKT_ERR_ARG, "an evaluation of %u rows on a strategy built for %u", B,
                        s->desc.batch);
    return s->vt->eval(s, x, targets, B, loss_sum, correct);
}

int vkt_strategy_device_count(const vkt_strategy *s) { return s->ndev; }

void vkt_strategy_stats(const vkt_strategy *s, int i, vkt_device_stats *out) {
    *out = s->stats[i];
    out->peak_memory = vkt_device_memory_peak(s->dev[i]);
    // single, where some steps ran untimed: the timed steps' GPU times, scaled to the whole wall
    // time (their busy fraction is the run's estimate).
    if (s->desc.kind == VKT_STRATEGY_SINGLE && s->timed_wall_ns > 0 &&
        s->timed_wall_ns < out->wall_ns) {
        double f = out->wall_ns / s->timed_wall_ns;
        out->busy_ns *= f;
        out->matmul_ns *= f;
        out->attention_ns *= f;
        out->gpu_comm_ns *= f;
    }
}

int vkt_strategy_trace_pid(const vkt_strategy *s, int i) { return s->trace_pid[i]; }

void vkt_strategy_reset_stats(vkt_strategy *s) {
    s->since_timed = 0;
    s->timed_wall_ns = 0;
    for (int i = 0; i < s->ndev; i++) {
        vkt_device_stats keep = s->stats[i];
        memset(&s->stats[i], 0, sizeof s->stats[i]);
        memcpy(s->stats[i].label, keep.label, sizeof keep.label);
        s->stats[i].memory_limit = keep.memory_limit;
    }
}

void vkt_strategy_ahead_wait(vkt_strategy *s) {
    for (int i = 0; i < s->ndev; i++)
        vkt_device_ahead_wait(s->dev[i]);
}

// Exposed for replicated.c: evaluation on replica 0.
vkt_status strategy_eval_on(vkt_strategy *s, int d, const float *x, const void *targets, uint32_t B,
                            double *loss_sum, uint64_t *correct) {
    return eval_on(s, d, x, targets, B, loss_sum, correct);
}
