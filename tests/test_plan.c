// test_plan.c: the memory planner (parallel/plan.c) against what the strategies allocate. On
// lavapipe and SwiftShader (alignments 16 and 256), alone and as two logical devices: under the
// plan's own figure as the limit each strategy is made and every device's peak memory right after
// is the figure to the byte (single with and without the upload areas of a discrete GPU; replicated
// with equal, given and measured shares; layers with the automatic cut, a given split and 1F1B
// micro-batches; tensor over 2 and 3 devices, of fashion_mlp, fashion_cnn and char_gpt, whose
// devices hold their slices and a staging buffer); one byte less is refused with the plan's
// refusal, word for word. Then the arithmetic alone: the upload areas' size, a device's largest
// allocation (maxMemoryAllocationSize) refused in words, and the automatic cut keeping every
// buffer under it.
// (tests/test_cli_plan_grid.sh holds `vktrain plan` and `vktrain train` to the same over a grid.)
#include <stdlib.h>
#include <string.h>

#include "plan.h"
#include "strategy.h"
#include "test_util.h"

typedef struct config {
    const char *what;
    vkt_strategy_kind kind;
    const char *devices;
    uint32_t batch;
    float balance[2];
    int split[2];
    int micro;
    vkt_schedule schedule;
    bool upload_areas;
} config;

static vkt_optim_desc sgd_momentum(void) {
    vkt_optim_desc o = vkt_optim_default(VKT_OPTIM_SGD);
    o.momentum = 0.9f;
    return o;
}

// The plan for d, with the devices described as `vktrain plan` describes them.
static void plan_for(const vkt_strategy_desc *d, vkt_plan_input *in, vkt_plan *p) {
    memset(in, 0, sizeof *in);
    in->model = d->model;
    in->batch = d->batch;
    in->optim = d->optim;
    in->ndevices = d->ndevices;
    in->micro_batches = d->micro_batches;
    in->schedule = d->schedule;
    in->tensor_size =
        d->kind == VKT_STRATEGY_LAYERS_TENSOR || d->kind == VKT_STRATEGY_REPLICATED_TENSOR
            ? d->tensor_size
            : 1;
    for (int i = 0; i < d->ndevices; i++) {
        vkt_plan_input_device(in, i, vkt_context_device_info(d->ctx, d->devices[i]), d->mem_limit);
        if (d->force_upload_areas) in->upload_areas[i] = true;
        in->balance[i] = d->balance[i];
        in->split[i] = d->split[i];
    }
    switch (d->kind) {
    case VKT_STRATEGY_SINGLE: vkt_plan_single(in, p); break;
    case VKT_STRATEGY_REPLICATED: vkt_plan_replicated(in, p); break;
    case VKT_STRATEGY_LAYERS:
    case VKT_STRATEGY_LAYERS_TENSOR: vkt_plan_layers(in, p); break;
    case VKT_STRATEGY_TENSOR:
    case VKT_STRATEGY_REPLICATED_TENSOR: vkt_plan_tensor(in, p); break;
    }
}

// Makes the strategy under limit and checks it against the plan: made with every device's peak
// the plan's figure, or refused with the plan's refusal. Returns whether the plan fitted.
static bool check_limit(vt *t, const config *c, vkt_strategy_desc *d, uint64_t limit) {
    d->mem_limit = limit;
    vkt_plan_input in;
    vkt_plan p;
    plan_for(d, &in, &p);
    vkt_strategy *s = NULL;
    vkt_status st = vkt_strategy_create(d, &s);
    if (p.fits) {
        VT_CHECK(t, st == VKT_OK, "%s on %s under %llu bytes: the plan fits, creation failed: %s",
                 c->what, c->devices, (unsigned long long)limit, vkt_error());
        for (int i = 0; st == VKT_OK && i < d->ndevices; i++) {
            vkt_device_stats ds;
            vkt_strategy_stats(s, i, &ds);
            VT_CHECK(t, ds.peak_memory == p.need[i].total,
                     "%s on %s, device %d: peak %llu bytes, the plan said %llu", c->what,
                     c->devices, i, (unsigned long long)ds.peak_memory,
                     (unsigned long long)p.need[i].total);
        }
    } else {
        char labels[VKT_MAX_DEVICES][300], want[1024];
        const char *label_of[VKT_MAX_DEVICES];
        for (int i = 0; i < d->ndevices; i++) {
            vkt_strategy_device_label(d->ctx, d->devices, d->ndevices, i, labels[i],
                                      sizeof labels[i]);
            label_of[i] = labels[i];
        }
        vkt_plan_refusal(&p, &in, label_of, want, sizeof want);
        VT_CHECK(t, st == VKT_ERR_DEVICE_MEMORY && strcmp(vkt_error(), want) == 0,
                 "%s on %s under %llu bytes: %s: '%s', the plan's refusal '%s'", c->what,
                 c->devices, (unsigned long long)limit, vkt_status_name(st), vkt_error(), want);
    }
    vkt_strategy_destroy(s);
    return p.fits;
}

static void check_config(vt *t, const vkt_model_desc *m, const config *c) {
    vkt_strategy_desc d = {.kind = c->kind,
                           .ctx = t->ctx,
                           .model = m,
                           .batch = c->batch,
                           .optim = sgd_momentum(),
                           .micro_batches = c->micro,
                           .schedule = c->schedule,
                           .tensor_size = c->kind == VKT_STRATEGY_LAYERS_TENSOR ||
                                                  c->kind == VKT_STRATEGY_REPLICATED_TENSOR
                                              ? 2
                                              : 0,
                           .force_upload_areas = c->upload_areas};
    VT_OK(t, vkt_context_select(t->ctx, c->devices, d.devices, VKT_MAX_DEVICES, &d.ndevices));
    for (int i = 0; i < d.ndevices && i < 2; i++) {
        d.balance[i] = c->balance[i];
        d.split[i] = c->split[i];
    }
    // The figure: the largest device's need under a limit everything fits.
    d.mem_limit = 1ull << 30;
    vkt_plan_input in;
    vkt_plan p;
    plan_for(&d, &in, &p);
    VT_CHECK(t, p.fits, "%s on %s: does not fit 1 GiB", c->what, c->devices);
    uint64_t figure = 0;
    for (int i = 0; i < d.ndevices; i++)
        if (p.need[i].total > figure) figure = p.need[i].total;
    VT_CHECK(t, check_limit(t, c, &d, figure), "%s on %s: the figure %llu does not fit", c->what,
             c->devices, (unsigned long long)figure);
    bool under = check_limit(t, c, &d, figure - 1);
    // Under layers one byte less may find another cut; otherwise it is refused.
    VT_CHECK(t, c->kind == VKT_STRATEGY_LAYERS || !under, "%s on %s: fits one byte under %llu",
             c->what, c->devices, (unsigned long long)figure);
    check_limit(t, c, &d, 1 << 16);
}

// ---------------------------------------------------------------------------------------------
// The arithmetic alone

static void check_arithmetic(vt *t, const vkt_model_desc *mlp) {
    // Upload areas: the input rows aligned, then one label per row, the area aligned; two.
    // 5 rows of 784 floats = 15680 bytes -> 15872 (256-aligned); + 20 bytes of labels -> 16128.
    VT_CHECK(t, vkt_plan_upload_bytes(mlp, 5, 256) == 2 * 16128, "upload areas: %llu",
             (unsigned long long)vkt_plan_upload_bytes(mlp, 5, 256));
    VT_CHECK(t, vkt_plan_upload_bytes(mlp, 5, 16) == 2 * (15680 + 32), "upload areas: %llu",
             (unsigned long long)vkt_plan_upload_bytes(mlp, 5, 16));

    // The largest allocation: a single device whose maxMemoryAllocationSize is one byte under the
    // packed parameters does not fit, whatever its limit, and says which allocation.
    vkt_plan_input in = {.model = mlp, .batch = 32, .optim = sgd_momentum(), .ndevices = 1};
    in.limit[0] = 1ull << 30;
    in.align[0] = 16;
    vkt_plan p;
    vkt_plan_single(&in, &p);
    VT_CHECK(t, p.fits && p.largest[0] == p.need[0].params, "largest %llu, parameters %llu",
             (unsigned long long)p.largest[0], (unsigned long long)p.need[0].params);
    in.max_alloc[0] = p.need[0].params - 1;
    vkt_plan_single(&in, &p);
    const char *label[1] = {"#0 test device"};
    char why[1024], want[200];
    vkt_plan_refusal(&p, &in, label, why, sizeof why);
    snprintf(want, sizeof want, "needs one allocation of %llu bytes",
             (unsigned long long)p.need[0].params);
    VT_CHECK(t, !p.fits && !p.device_fits[0] && strstr(why, want) && strstr(why, "#0 test device"),
             "max_alloc: fits %d: %s", p.fits, why);
    in.max_alloc[0] = p.need[0].params;
    vkt_plan_single(&in, &p);
    VT_CHECK(t, p.fits, "max_alloc = the largest buffer fits");
    vkt_plan_refusal(&p, &in, label, why, sizeof why);
    VT_CHECK(t, why[0] == 0, "a plan that fits has no refusal: %s", why);

    // The automatic cut keeps every buffer under the largest allocation: a narrow dense into
    // 2048 units, six relus, a dense of 2048 x 2048. The compute puts the last dense alone on
    // stage 1 and the relus' activations (the largest buffer) on stage 0; with that buffer one
    // byte over the bound, relus move to stage 1.
    vkt_model_desc m;
    VT_OK(t, vkt_model_parse("{\"name\": \"relus\", \"input\": [16], \"layers\": ["
                             "{\"type\": \"dense\", \"units\": 2048}, {\"type\": \"relu\"}, "
                             "{\"type\": \"relu\"}, {\"type\": \"relu\"}, {\"type\": \"relu\"}, "
                             "{\"type\": \"relu\"}, {\"type\": \"relu\"}, "
                             "{\"type\": \"dense\", \"units\": 2048}], "
                             "\"loss\": \"mse\"}",
                             "relus", &m));
    vkt_plan_input li = {.model = &m, .batch = 512, .optim = sgd_momentum(), .ndevices = 2};
    for (int i = 0; i < 2; i++)
        li.limit[i] = 1ull << 30, li.align[i] = 16;
    vkt_plan free_cut, bound_cut;
    vkt_plan_layers(&li, &free_cut);
    VT_CHECK(t, free_cut.fits && free_cut.lo[1] == 7 && free_cut.largest[0] > free_cut.largest[1],
             "the compute's cut: layers %d-%d | %d-%d, largest %llu | %llu", free_cut.lo[0],
             free_cut.hi[0] - 1, free_cut.lo[1], free_cut.hi[1] - 1,
             (unsigned long long)free_cut.largest[0], (unsigned long long)free_cut.largest[1]);
    for (int i = 0; i < 2; i++)
        li.max_alloc[i] = free_cut.largest[0] - 1;
    vkt_plan_layers(&li, &bound_cut);
    VT_CHECK(
        t,
        bound_cut.fits && bound_cut.lo[1] < 7 && bound_cut.largest[0] <= li.max_alloc[0] &&
            bound_cut.largest[1] <= li.max_alloc[1],
        "under a largest allocation of %llu: fits %d, layers %d-%d | %d-%d, largest %llu | %llu",
        (unsigned long long)li.max_alloc[0], bound_cut.fits, bound_cut.lo[0], bound_cut.hi[0] - 1,
        bound_cut.lo[1], bound_cut.hi[1] - 1, (unsigned long long)bound_cut.largest[0],
        (unsigned long long)bound_cut.largest[1]);
    vkt_model_free(&m);

    // Measured shares (--balance auto, balance[0] < 0): any replica may be given the whole batch.
    vkt_plan_input ri = {.model = mlp, .batch = 64, .optim = sgd_momentum(), .ndevices = 2};
    for (int i = 0; i < 2; i++)
        ri.limit[i] = 1ull << 30, ri.align[i] = 16;
    vkt_plan equal, measured;
    vkt_plan_replicated(&ri, &equal);
    ri.balance[0] = ri.balance[1] = -1;
    vkt_plan_replicated(&ri, &measured);
    VT_CHECK(t,
             equal.net_rows[0] == 33 && measured.net_rows[0] == 64 && measured.net_rows[1] == 64 &&
                 measured.need[0].total > equal.need[0].total,
             "replica rows: equal %u, measured %u", equal.net_rows[0], measured.net_rows[0]);
}

int main(void) {
    vt tv, *t = &tv;
    if (vt_init(t, "test_plan")) return 1;
    // The tuner's scratch is borrowed from what the limit leaves (plan.h): no tuning here, so that
    // the peaks are the strategies' own (measured shares run steps while the strategy is made).
    vkt_context_set_tune(t->ctx, VKT_TUNE_OFF);
    vkt_model_desc mlp, cnn, gpt;
    VT_OK(t, vkt_model_load(VKT_SOURCE_DIR "/assets/models/fashion_mlp.json", &mlp));
    VT_OK(t, vkt_model_load(VKT_SOURCE_DIR "/assets/models/fashion_cnn.json", &cnn));
    VT_OK(t, vkt_model_load(VKT_SOURCE_DIR "/assets/models/char_gpt.json", &gpt));
    if (t->failures) return vt_finish(t);
    check_arithmetic(t, &mlp);

    bool have_ss = vt_find_device(t, "swiftshader") >= 0;
#define CFG(w, k, dv, b) .what = w, .kind = VKT_STRATEGY_##k, .devices = dv, .batch = b
    const config configs[] = {
        {CFG("single", SINGLE, "llvmpipe", 100)},
        {CFG("single, upload areas", SINGLE, "llvmpipe", 100), .upload_areas = true},
        {CFG("single", SINGLE, "swiftshader", 100)},
        {CFG("single, upload areas", SINGLE, "swiftshader", 77), .upload_areas = true},
        {CFG("replicated", REPLICATED, "llvmpipe,llvmpipe", 64)},
        {CFG("replicated 3:1", REPLICATED, "llvmpipe,swiftshader", 64), .balance = {3, 1}},
        {CFG("replicated, measured shares", REPLICATED, "llvmpipe,llvmpipe", 16),
         .balance = {-1, -1}},
        {CFG("layers", LAYERS, "llvmpipe,swiftshader", 64)},
        {CFG("layers 2,3", LAYERS, "llvmpipe,llvmpipe", 64), .split = {2, 3}},
        {CFG("layers, 1F1B over 4", LAYERS, "llvmpipe,llvmpipe", 64), .micro = 4,
         .schedule = VKT_SCHEDULE_1F1B},
        {CFG("tensor", TENSOR, "llvmpipe,llvmpipe", 64)},
        {CFG("tensor", TENSOR, "llvmpipe,swiftshader", 77)},
        {CFG("tensor over 3", TENSOR, "llvmpipe,swiftshader,llvmpipe", 33)},
        {CFG("replicated,tensor 2x2", REPLICATED_TENSOR, "llvmpipe,swiftshader,llvmpipe,llvmpipe",
             63)},
        {CFG("layers,tensor 2x2", LAYERS_TENSOR, "llvmpipe,llvmpipe,llvmpipe,llvmpipe", 64),
         .micro = 2},
        {CFG("layers,tensor 2x2, 1F1B", LAYERS_TENSOR, "llvmpipe,swiftshader,swiftshader,llvmpipe",
             50),
         .micro = 3, .schedule = VKT_SCHEDULE_1F1B},
    };
    for (size_t i = 0; i < sizeof configs / sizeof configs[0]; i++) {
        if (!have_ss && strstr(configs[i].devices, "swiftshader")) continue;
        check_config(t, &mlp, &configs[i]);
    }
    // A model with buffers (batchnorm's running statistics) and layer scratch (the convolutions').
    const config cnn_configs[] = {
        {CFG("cnn single", SINGLE, "llvmpipe", 16)},
        {CFG("cnn single, upload areas", SINGLE, "swiftshader", 16), .upload_areas = true},
        {CFG("cnn layers", LAYERS, "llvmpipe,llvmpipe", 16), .micro = 2},
        {CFG("cnn tensor", TENSOR, "llvmpipe,swiftshader", 16)},
    };
    // Under tensor: the attention layers split by heads and the MLPs by units, beside the whole
    // embeddings, norms and head, and the staging of the largest reduction.
    const config gpt_configs[] = {
        {CFG("char_gpt single", SINGLE, "llvmpipe", 4)},
        {CFG("char_gpt tensor", TENSOR, "llvmpipe,llvmpipe", 4)},
        {CFG("char_gpt tensor", TENSOR, "llvmpipe,swiftshader", 3)},
        {CFG("char_gpt tensor over 3", TENSOR, "llvmpipe,llvmpipe,llvmpipe", 2)},
        {CFG("char_gpt layers,tensor 2x2", LAYERS_TENSOR, "llvmpipe,swiftshader,llvmpipe,llvmpipe",
             4),
         .micro = 2},
    };
#undef CFG
    for (size_t i = 0; i < sizeof cnn_configs / sizeof cnn_configs[0]; i++) {
        if (!have_ss && strstr(cnn_configs[i].devices, "swiftshader")) continue;
        check_config(t, &cnn, &cnn_configs[i]);
    }
    for (size_t i = 0; i < sizeof gpt_configs / sizeof gpt_configs[0]; i++) {
        if (!have_ss && strstr(gpt_configs[i].devices, "swiftshader")) continue;
        check_config(t, &gpt, &gpt_configs[i]);
    }
    vkt_model_free(&gpt);
    vkt_model_free(&cnn);
    vkt_model_free(&mlp);
    return vt_finish(t);
}
