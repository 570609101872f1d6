// test_resubmit.c: the single strategy submits its untimed step again, as recorded for an
// earlier step, only where recording it anew would give the same commands, and the training is
// then the same bit for bit. Every case trains 12 steps twice from the same initial parameters
// and batches: once timing every step (profile_kernels: each step recorded, none submitted
// again) and once as `vktrain train` runs (one step in 16 timed, the untimed ones submitted again
// where vkt_net_step_reusable allows). The parameters and losses must be equal, and the steps
// submitted again as many as the case allows:
//   - fashion_mlp, SGD with momentum, batches written into the mapped net, and through the two
//     upload areas (as on a discrete GPU: one stream per area), with a short batch in the middle
//     (another batch size: recorded anew, and the stream of the full batch recorded again after);
//   - the learning rate changed every fourth step (a schedule): recorded anew at each change;
//   - a dropout model (its masks are drawn from the step): never submitted again;
//   - AdamW (its update reads the step): never submitted again.
// On lavapipe and on SwiftShader (vt_init fails under CI=true where either is missing).
#include <stdlib.h>
#include <string.h>

#include "strategy.h"
#include "test_util.h"

#define STEPS 12
#define BATCH 32
#define SHORT_STEP 6 // the step (1-based) that gets a short batch
#define SHORT_BATCH 20

typedef struct tcase {
    const char *name;
    const char *model_json; // NULL: assets/models/fashion_mlp.json
    vkt_optim_kind optim;
    bool upload_areas;
    bool lr_schedule;
    int min_resubmitted, max_resubmitted;
} tcase;

typedef struct result {
    float *params;
    uint64_t n;
    double loss[STEPS];
    uint64_t resubmitted;
} result;

static vkt_status train(vt *t, int dev, const vkt_model_desc *m, const tcase *c, bool profile,
                        result *out) {
    vkt_strategy_desc d = {.kind = VKT_STRATEGY_SINGLE,
                           .ctx = t->ctx,
                           .model = m,
                           .batch = BATCH,
                           .optim = vkt_optim_default(c->optim),
                           .profile_kernels = profile,
                           .force_upload_areas = c->upload_areas,
                           .ndevices = 1,
                           .devices = {dev}};
    if (c->optim == VKT_OPTIM_SGD) {
        d.optim.lr = 0.05f;
        d.optim.momentum = 0.9f;
    }
    vkt_strategy *s = NULL;
    vkt_status st = vkt_strategy_create(&d, &s);
    if (st == VKT_OK) st = vkt_strategy_init(s, 99);
    size_t F = m->input_features;
    float *x = malloc((size_t)BATCH * F * 4);
    uint32_t *y = malloc((size_t)BATCH * 4);
    if (!x || !y) st = VKT_ERR_HOST_MEMORY;
    for (int i = 0; i < STEPS && st == VKT_OK; i++) {
        uint32_t rows = i + 1 == SHORT_STEP ? SHORT_BATCH : BATCH;
        vt_fill_uniform(x, (size_t)rows * F, 1000 + (uint64_t)i, 0.0f, 1.0f);
        for (uint32_t r = 0; r < rows; r++)
            y[r] = (uint32_t)(r * 7 + (uint32_t)i) % 10;
        if (c->lr_schedule) vkt_strategy_set_lr(s, 0.05f / (float)(1 + i / 4));
        double ls = 0;
        st = vkt_strategy_step(s, x, y, rows, (uint32_t)i + 1, &ls);
        out->loss[i] = ls;
    }
    out->n = 0;
    for (int i = 0; s && i < vkt_strategy_tensor_count(s); i++)
        out->n += vkt_strategy_tensor(s, i)->count;
    out->params = st == VKT_OK ? malloc(out->n * 4) : NULL;
    if (st == VKT_OK && !out->params) st = VKT_ERR_HOST_MEMORY;
    uint64_t at = 0;
    for (int i = 0; st == VKT_OK && i < vkt_strategy_tensor_count(s); i++) {
        st = vkt_strategy_read(s, VKT_STORE_PARAM, i, out->params + at);
        at += vkt_strategy_tensor(s, i)->count;
    }
    vkt_device_stats ds = {0};
    if (s) vkt_strategy_stats(s, 0, &ds);
    out->resubmitted = ds.steps_resubmitted;
    vkt_strategy_destroy(s);
    free(x);
    free(y);
    return st;
}

static void run_case(vt *t, int dev, const tcase *c) {
    const char *where = vkt_device_label(t->dev[dev]);
    vkt_model_desc m;
    vkt_status st = c->model_json
                        ? vkt_model_parse(c->model_json, c->name, &m)
                        : vkt_model_load(VKT_SOURCE_DIR "/assets/models/fashion_mlp.json", &m);
    VT_OK(t, st);
    if (st != VKT_OK) return;
    result fresh = {0}, reused = {0};
    VT_OK(t, train(t, dev, &m, c, true, &fresh));
    VT_OK(t, train(t, dev, &m, c, false, &reused));
    if (fresh.params && reused.params) {
        uint64_t bad = 0;
        for (uint64_t i = 0; i < fresh.n; i++)
            bad += memcmp(&fresh.params[i], &reused.params[i], 4) != 0;
        VT_CHECK(t, fresh.n == reused.n && bad == 0,
                 "%s on %s: %llu of %llu parameters differ from the run that recorded every step",
                 c->name, where, (unsigned long long)bad, (unsigned long long)fresh.n);
        VT_CHECK(t, memcmp(fresh.loss, reused.loss, sizeof fresh.loss) == 0,
                 "%s on %s: the losses differ from the run that recorded every step", c->name,
                 where);
    }
    VT_CHECK(t, fresh.resubmitted == 0, "%s on %s: %llu steps submitted again timing every step",
             c->name, where, (unsigned long long)fresh.resubmitted);
    VT_CHECK(t,
             (int)reused.resubmitted >= c->min_resubmitted &&
                 (int)reused.resubmitted <= c->max_resubmitted,
             "%s on %s: %llu steps submitted again, want %d to %d", c->name, where,
             (unsigned long long)reused.resubmitted, c->min_resubmitted, c->max_resubmitted);
    free(fresh.params);
    free(reused.params);
    vkt_model_free(&m);
}

int main(void) {
    vt tv, *t = &tv;
    if (vt_init(t, "test_resubmit")) return 1;
    // Step 1 is timed (recorded into its own stream), step 2 records the stream that later steps
    // submit again. Mapped: steps 3-5, the short step 6 records its own, step 7 records the full
    // batch's again, 8-12 submit it: 8. Two upload areas, used in turn: step 2 records area 1's
    // stream, 3 area 0's; 4 and 5 resubmit; 6 (short, area 1) records; 7 (area 0) resubmits, 8
    // (area 1) records the full batch again; 9-12 resubmit: 7. The schedule changes the rate
    // at steps 5 and 9: each records; with the short step 6 and step 7 recording too, 3, 4, 8,
    // 10, 11 and 12 resubmit: 6.
    static const tcase cases[] = {
        {"fashion_mlp sgd, mapped", NULL, VKT_OPTIM_SGD, false, false, 8, 8},
        {"fashion_mlp sgd, upload areas", NULL, VKT_OPTIM_SGD, true, false, 7, 7},
        {"fashion_mlp sgd, lr schedule", NULL, VKT_OPTIM_SGD, false, true, 6, 6},
        {"dropout_mlp sgd",
         "{\"name\": \"dropout_mlp\", \"input\": [784], \"layers\": ["
         "{\"type\": \"dense\", \"units\": 64}, {\"type\": \"relu\"},"
         "{\"type\": \"dropout\", \"p\": 0.3}, {\"type\": \"dense\", \"units\": 10}],"
         "\"loss\": \"softmax_cross_entropy\"}",
         VKT_OPTIM_SGD, false, false, 0, 0},
        {"fashion_mlp adamw", NULL, VKT_OPTIM_ADAMW, false, false, 0, 0},
    };
    const char *drivers[] = {"llvmpipe", "swiftshader"};
    for (int k = 0; k < 2; k++) {
        int dev = vt_find_device(t, drivers[k]);
        if (dev < 0) continue; // vt_init said so, and failed under CI=true
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
            run_case(t, dev, &cases[i]);
    }
    return vt_finish(t);
}
