// test_tensor.c: --strategy tensor (parallel/tensor.c) computes the single-device training. From
// the same initial parameters (vkt_strategy_init, one seed) and the same batches (file order):
//   - fashion_mlp.json, 20 steps of SGD with momentum (and of AdamW on two of these), over llvmpipe
//   x2, llvmpipe x3,
//     llvmpipe+SwiftShader and llvmpipe+SwiftShader+llvmpipe (512 hidden units: 256/256 and
//     170/171/171; the last dense layer stays whole);
//   - residual_mlp.json (pairs inside residual bodies), an MLP of two pairs of odd widths, and
//     fashion_cnn.json (batchnorm whole: its running statistics are single's), under SGD;
//   - layers,tensor and replicated,tensor (two stages or replicas of two devices: lavapipe x4 and
//     lavapipe+SwiftShader in each group) on fashion_mlp (SGD, 3 micro-batches; AdamW clipped)
//     and char_gpt (AdamW clipped); plain layers clipped (the norm of every stage);
//   - char_gpt.json, 10 AdamW steps of 2 text windows, over llvmpipe x2 and
//     llvmpipe+SwiftShader+llvmpipe (4 heads: 1,1,2; the MLPs' 512 units: 170/171/171);
// give the single run's parameters, losses step by step, evaluation loss and accuracy and
// predicted outputs; steps in halves (begin, prefetch, end) the same bits as whole. Also: the
// split itself (vkt_tensor_model) and that a device holds less than
// the whole model; --clip's global norm; what cannot run is refused (nothing to split, one
// device); a checkpoint
// of a 2-device run has the whole tensors under PyTorch's names and loads, with AdamW's state, into
// one device and into three, which then train on as the 2-device run does; a model whose one dense
// layer alone is over --mem-limit is refused by layers (pointing at --strategy tensor) and trains
// under tensor with every device's peak the plan's figure, under the limit.
//
// Tolerance: |p - p_single| <= 2e-4 + 2e-3 |p_single| (as tests/test_parallel.c): the devices sum
// the same products in other orders (the partial sums of a row split, another driver's matmul).
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "checkpoint.h"
#include "data.h"
#include "plan.h"
#include "strategy.h"
#include "test_util.h"
#include "train.h"

#define VKT_TRY_TEST(e)                                                                            \
    do {                                                                                           \
        vkt_status s_ = (e);                                                                       \
        if (s_ != VKT_OK) return s_;                                                               \
    } while (0)
#define MAX_STEPS 20
#define SEED 1234
// Steps in two halves (vkt_strategy_step_begin / _prefetch / _end) instead of whole.
static bool g_split_steps;

// A training to repeat under each strategy: the model, its data, the optimizer, steps and rows.
typedef struct training {
    const char *name;
    const vkt_model_desc *m;
    const vkt_dataset *ds;
    vkt_optim_desc optim;
    int steps;
    uint32_t batch;
    // layers,tensor when tensor_size > 0: stages of tensor_size devices, micro-batches
    int tensor_size, micro_batches;
    bool plain_layers; // compared as --strategy layers instead (its --clip across stages)
    bool replicas;     // with tensor_size: replicated,tensor instead of layers,tensor
} training;

typedef struct run_result {
    float *params; // all tensors, buffers too, concatenated in model order
    uint64_t n;
    double loss[MAX_STEPS];
    double eval_loss;
    uint64_t eval_correct;
    float *pred; // vkt_strategy_predict on the evaluation batch
    uint64_t npred;
} run_result;

static void result_free(run_result *r) {
    free(r->params);
    free(r->pred);
    memset(r, 0, sizeof *r);
}

static vkt_status make(vt *t, const training *tr, vkt_strategy_kind kind, const char *devices,
                       uint64_t mem_limit, vkt_strategy **out) {
    vkt_strategy_desc d = {.kind = kind,
                           .ctx = t->ctx,
                           .model = tr->m,
                           .batch = tr->batch,
                           .optim = tr->optim,
                           .mem_limit = mem_limit,
                           .tensor_size = tr->tensor_size,
                           .micro_batches = tr->micro_batches};
    *out = NULL;
    VKT_TRY_TEST(vkt_context_select(t->ctx, devices, d.devices, VKT_MAX_DEVICES, &d.ndevices));
    return vkt_strategy_create(&d, out);
}

// Steps [first, first + count) of tr on s (batch i of the data is step i + 1).
static vkt_status train_steps(vkt_strategy *s, const training *tr, int first, int count,
                              double *loss) {
    vkt_batcher b;
    VKT_TRY_TEST(vkt_batcher_init(&b, tr->ds, tr->batch, false, 0));
    float *x = malloc((size_t)tr->batch * tr->m->input_features * 4);
    uint32_t *y = malloc((size_t)tr->batch * vkt_model_targets_per_sample(tr->m) * 4);
    vkt_status st = VKT_OK;
    uint32_t rows = g_split_steps ? vkt_batcher_get(&b, (uint32_t)first, x, y) : 0;
    for (int i = first; i < first + count && st == VKT_OK; i++) {
        double ls = 0;
        if (!g_split_steps) {
            rows = vkt_batcher_get(&b, (uint32_t)i, x, y);
            st = vkt_strategy_step(s, x, y, rows, (uint32_t)i + 1, &ls);
            if (loss) loss[i - first] = ls / rows;
            continue;
        }
        // As engine/run/train.c does: begin, the next batch gathered into the same arrays and
        // prefetched while the step runs, end.
        st = vkt_strategy_step_begin(s, x, y, rows, (uint32_t)i + 1);
        if (st != VKT_OK) break;
        uint32_t next = 0;
        if (i + 1 < first + count) {
            next = vkt_batcher_get(&b, (uint32_t)i + 1, x, y);
            st = vkt_strategy_prefetch(s, x, y, next);
        }
        vkt_status end = vkt_strategy_step_end(s, &ls);
        if (st == VKT_OK) st = end;
        if (loss) loss[i - first] = ls / rows;
        rows = next;
    }
    free(x);
    free(y);
    vkt_batcher_free(&b);
    return st;
}

// Every tensor of store concatenated in model order: the parameters and the buffers (batchnorm's
// running statistics: every device runs the whole batch, so they are single's too) for
// VKT_STORE_PARAM, the parameters' for the others.
static vkt_status read_all(vkt_strategy *s, vkt_net_store store, float **out, uint64_t *n) {
    *n = 0;
    for (int i = 0; i < vkt_strategy_tensor_count(s); i++)
        if (store == VKT_STORE_PARAM || !vkt_strategy_tensor(s, i)->state)
            *n += vkt_strategy_tensor(s, i)->count;
    *out = malloc(*n * 4);
    uint64_t at = 0;
    for (int i = 0; i < vkt_strategy_tensor_count(s); i++) {
        if (store != VKT_STORE_PARAM && vkt_strategy_tensor(s, i)->state) continue;
        VKT_TRY_TEST(vkt_strategy_read(s, store, i, *out + at));
        at += vkt_strategy_tensor(s, i)->count;
    }
    return VKT_OK;
}

// The training tr under kind on devices from seed SEED: losses, then the evaluation and the
// predictions on the batch after the last, then the parameters.
static vkt_status run(vt *t, const training *tr, vkt_strategy_kind kind, const char *devices,
                      run_result *out) {
    vkt_strategy *s;
    VKT_TRY_TEST(make(t, tr, kind, devices, 0, &s));
    vkt_status st = vkt_strategy_init(s, SEED);
    if (st == VKT_OK) st = train_steps(s, tr, 0, tr->steps, out->loss);
    vkt_batcher b;
    if (st == VKT_OK) st = vkt_batcher_init(&b, tr->ds, tr->batch, false, 0);
    if (st == VKT_OK) {
        float *x = malloc((size_t)tr->batch * tr->m->input_features * 4);
        uint32_t *y = malloc((size_t)tr->batch * vkt_model_targets_per_sample(tr->m) * 4);
        uint32_t rows = vkt_batcher_get(&b, (uint32_t)tr->steps, x, y);
        st = vkt_strategy_eval(s, x, y, rows, &out->eval_loss, &out->eval_correct);
        out->eval_loss /= rows;
        out->npred = (uint64_t)rows * tr->m->output_features;
        out->pred = malloc(out->npred * 4);
        if (st == VKT_OK) st = vkt_strategy_predict(s, x, rows, out->pred);
        free(x);
        free(y);
        vkt_batcher_free(&b);
    }
    if (st == VKT_OK) st = read_all(s, VKT_STORE_PARAM, &out->params, &out->n);
    vkt_strategy_destroy(s);
    return st;
}

// Elements of got out of |got - ref| <= 2e-4 + 2e-3 |ref|; the worst difference in *worst.
static size_t compare_floats(const char *what, const float *got, const float *ref, uint64_t n,
                             double *worst) {
    double *r = malloc(n * sizeof *r);
    *worst = 0;
    for (uint64_t i = 0; i < n; i++) {
        r[i] = ref[i];
        *worst = fmax(*worst, fabs((double)got[i] - r[i]));
    }
    size_t bad = vt_compare(what, got, r, n, 2e-4, 2e-3);
    free(r);
    return bad;
}

static void compare(vt *t, const char *what, const training *tr, const run_result *ref,
                    const run_result *got) {
    VT_CHECK(t, got->n == ref->n && got->npred == ref->npred,
             "%s: %llu parameters and %llu outputs, want %llu and %llu", what,
             (unsigned long long)got->n, (unsigned long long)got->npred, (unsigned long long)ref->n,
             (unsigned long long)ref->npred);
    if (got->n != ref->n || got->npred != ref->npred) return;
    double worst_p, worst_out, worst_loss = 0;
    size_t bad = compare_floats(what, got->params, ref->params, ref->n, &worst_p);
    VT_CHECK(t, bad == 0, "%s: %zu parameters differ from the single-device run", what, bad);
    bad = compare_floats(what, got->pred, ref->pred, ref->npred, &worst_out);
    VT_CHECK(t, bad == 0, "%s: %zu predicted outputs differ from the single-device run", what, bad);
    for (int i = 0; i < tr->steps; i++) {
        double dl = fabs(got->loss[i] - ref->loss[i]);
        worst_loss = fmax(worst_loss, dl);
        VT_CHECK(t, dl <= 2e-4 + 2e-3 * fabs(ref->loss[i]), "%s: step %d's loss %.6f, single %.6f",
                 what, i + 1, got->loss[i], ref->loss[i]);
    }
    VT_CHECK(t, fabs(got->eval_loss - ref->eval_loss) <= 2e-4 + 2e-3 * fabs(ref->eval_loss),
             "%s: evaluation loss %.6f, single %.6f", what, got->eval_loss, ref->eval_loss);
    VT_CHECK(t, llabs((long long)got->eval_correct - (long long)ref->eval_correct) <= 1,
             "%s: evaluation counted %llu correct, single %llu", what,
             (unsigned long long)got->eval_correct, (unsigned long long)ref->eval_correct);
    printf("test_tensor: %-52s max |dp| %.2e |dout| %.2e |dloss| %.2e, loss %.4f -> %.4f\n", what,
           worst_p, worst_out, worst_loss, got->loss[0], got->loss[tr->steps - 1]);
}

// tr on one llvmpipe, then under tensor on each of devices[], against it.
static void compare_tensor(vt *t, const training *tr, const char *const *devices, int n,
                           bool have_ss) {
    run_result ref = {0};
    VT_OK(t, run(t, tr, VKT_STRATEGY_SINGLE, "llvmpipe", &ref));
    VT_CHECK(t, ref.loss[tr->steps - 1] < ref.loss[0], "%s: the single run did not learn: %g -> %g",
             tr->name, ref.loss[0], ref.loss[tr->steps - 1]);
    for (int i = 0; i < n && ref.params; i++) {
        if (strstr(devices[i], "swiftshader") && !have_ss) continue; // vt_init failed it under CI
        char what[160];
        vkt_strategy_kind kind = tr->plain_layers                  ? VKT_STRATEGY_LAYERS
                                 : tr->tensor_size && tr->replicas ? VKT_STRATEGY_REPLICATED_TENSOR
                                 : tr->tensor_size                 ? VKT_STRATEGY_LAYERS_TENSOR
                                                                   : VKT_STRATEGY_TENSOR;
        snprintf(what, sizeof what, "%s %s on %s", tr->name, vkt_strategy_name(kind), devices[i]);
        run_result got = {0};
        vkt_status st = run(t, tr, kind, devices[i], &got);
        VT_CHECK(t, st == VKT_OK, "%s: %s", what, vkt_error());
        if (st == VKT_OK) compare(t, what, tr, &ref, &got);
        result_free(&got);
    }
    result_free(&ref);
}

// ---------------------------------------------------------------------------------------------
// The split

static void check_split(vt *t, const vkt_model_desc *mlp, const vkt_model_desc *gpt) {
    int fails = t->failures;
    // fashion_mlp over 3: dense 512 column-split 170/171/171, relu sliced, dense 256 row-split;
    // relu and the last dense whole.
    static const uint32_t lo3[4] = {0, 170, 341, 512};
    for (int r = 0; r < 3; r++) {
        vkt_model_desc s;
        VT_OK(t, vkt_tensor_model(mlp, r, 3, &s));
        if (t->failures > fails) return;
        const vkt_layer_desc *l = s.layers;
        VT_CHECK(t,
                 l[0].tp == VKT_TP_COLUMN && l[0].units == lo3[r + 1] - lo3[r] &&
                     l[0].tp_lo == lo3[r] && l[0].tp_hi == lo3[r + 1] && l[0].tp_full == 512 &&
                     l[1].tp == VKT_TP_SLICE && l[1].in_features == l[0].units &&
                     l[2].tp == VKT_TP_ROW && l[2].in_features == l[0].units && l[2].units == 256 &&
                     l[3].tp == VKT_TP_NONE && l[4].tp == VKT_TP_NONE && l[4].in_features == 256,
                 "fashion_mlp rank %d of 3: dense %u [%u, %u) of %u (mode %d), relu %d, dense %d "
                 "in %u, then %d, %d",
                 r, l[0].units, l[0].tp_lo, l[0].tp_hi, l[0].tp_full, l[0].tp, l[1].tp, l[2].tp,
                 l[2].in_features, l[3].tp, l[4].tp);
        vkt_model_free(&s);
    }
    // char_gpt over 3: each attention's 4 heads 1, 1, 2; each MLP's 512 units 170/171/171.
    static const uint32_t heads3[4] = {0, 1, 2, 4};
    for (int r = 0; r < 3; r++) {
        vkt_model_desc s;
        VT_OK(t, vkt_tensor_model(gpt, r, 3, &s));
        if (t->failures > fails) return;
        for (int b = 2; b < 10; b++) {
            const vkt_layer_desc *body = s.layers[b].layers;
            if (b % 2 == 0)
                VT_CHECK(t,
                         body[0].tp == VKT_TP_NONE && body[1].tp == VKT_TP_HEADS &&
                             body[1].tp_lo == heads3[r] && body[1].tp_hi == heads3[r + 1],
                         "char_gpt rank %d, block %d: attention mode %d, heads [%u, %u)", r, b,
                         body[1].tp, body[1].tp_lo, body[1].tp_hi);
            else
                VT_CHECK(t,
                         body[0].tp == VKT_TP_NONE && body[1].tp == VKT_TP_COLUMN &&
                             body[1].units == lo3[r + 1] - lo3[r] && body[2].tp == VKT_TP_SLICE &&
                             body[3].tp == VKT_TP_ROW && body[3].units == 128,
                         "char_gpt rank %d, block %d: dense %u (mode %d), gelu %d, dense %d", r, b,
                         body[1].units, body[1].tp, body[2].tp, body[3].tp);
        }
        VT_CHECK(t, s.layers[0].tp == VKT_TP_NONE && s.layers[11].tp == VKT_TP_NONE,
                 "char_gpt rank %d: the embedding or the lone head was split", r);
        vkt_model_free(&s);
    }
}

// What each device holds under tensor is less than the whole model: its parameters are its
// slices and the whole layers, which the plan counts as the strategy allocates (test_plan).
static void check_share(vt *t, const vkt_model_desc *m) {
    vkt_plan_input in = {.model = m, .batch = 32, .ndevices = 2};
    in.optim = vkt_optim_default(VKT_OPTIM_SGD);
    for (int i = 0; i < 2; i++)
        in.limit[i] = 1ull << 30, in.align[i] = 16;
    vkt_plan whole, tp;
    in.ndevices = 1;
    vkt_plan_single(&in, &whole);
    in.ndevices = 2;
    vkt_plan_tensor(&in, &tp);
    // fashion_mlp: 784x512 + 512 + 512x256 + 256 + 256x10 + 10 floats whole; a device holds half
    // of the first three and all of the rest: 535818 - (401920 + 131072) / 2 = 269322 floats,
    // and after each of its 6 tensors the guard (VKT_NET_TENSOR_GUARD) and some alignment.
    VT_CHECK(t,
             tp.possible && tp.fits && tp.need[0].params >= 269322 * 4 + 6 * VKT_NET_TENSOR_GUARD &&
                 tp.need[0].params < 269322 * 4 + 6 * VKT_NET_TENSOR_GUARD + 1024 &&
                 whole.need[0].params >= 535818 * 4,
             "fashion_mlp over 2: parameters %llu bytes a device, %llu whole",
             (unsigned long long)tp.need[0].params, (unsigned long long)whole.need[0].params);
    VT_CHECK(t, tp.reductions == 1,
             "fashion_mlp: %d reductions a step, want 1 (the row split's "
             "forward; the column split is the first layer, no input "
             "gradient)",
             tp.reductions);
}

// ---------------------------------------------------------------------------------------------
// Refusals

static void check_refusals(vt *t, const vkt_model_desc *mlp) {
    int fails = t->failures;
    training tr = {.batch = 16, .optim = vkt_optim_default(VKT_OPTIM_SGD)};
    vkt_strategy *s = NULL;
    vkt_status st;
    // Nothing to split: a lone dense layer; a dense followed by a layernorm (not elementwise)
    // before the next; a hidden layer narrower than the devices.
    static const char *const lone[] = {
        "{\"name\": \"lone\", \"input\": [784], \"layers\": [{\"type\": \"dense\", \"units\": "
        "10}], \"loss\": \"softmax_cross_entropy\"}",
        "{\"name\": \"normed\", \"input\": [784], \"layers\": [{\"type\": \"dense\", \"units\": "
        "64}, {\"type\": \"layernorm\"}, {\"type\": \"dense\", \"units\": 10}], \"loss\": "
        "\"softmax_cross_entropy\"}",
        "{\"name\": \"narrow\", \"input\": [784], \"layers\": [{\"type\": \"dense\", \"units\": "
        "2}, {\"type\": \"relu\"}, {\"type\": \"dense\", \"units\": 10}], \"loss\": "
        "\"softmax_cross_entropy\"}",
    };
    for (int i = 0; i < 3; i++) {
        vkt_model_desc m;
        VT_OK(t, vkt_model_parse(lone[i], "lone", &m));
        if (t->failures > fails) return;
        tr.m = &m;
        st = make(t, &tr, VKT_STRATEGY_TENSOR, "llvmpipe,llvmpipe,llvmpipe", 0, &s);
        VT_CHECK(t, st == VKT_ERR_ARG && strstr(vkt_error(), "can be split") && !s,
                 "%s under tensor over 3: %s: %s", m.name, vkt_status_name(st), vkt_error());
        vkt_strategy_destroy(s);
        if (i == 2) {
            // Two hidden units split over two devices, one each.
            st = make(t, &tr, VKT_STRATEGY_TENSOR, "llvmpipe,llvmpipe", 0, &s);
            VT_CHECK(t, st == VKT_OK, "narrow over 2: %s", vkt_error());
            vkt_strategy_destroy(s);
        }
        vkt_model_free(&m);
    }
    tr.m = mlp;
    st = make(t, &tr, VKT_STRATEGY_TENSOR, "llvmpipe", 0, &s);
    VT_CHECK(t, st == VKT_ERR_ARG && strstr(vkt_error(), "two devices") && !s, "one device: %s: %s",
             vkt_status_name(st), vkt_error());
    vkt_strategy_destroy(s);
}

// ---------------------------------------------------------------------------------------------
// Checkpoints

// Whether a and b list the same tensors: names, shapes, counts, kinds.
static bool same_tensors(vt *t, const char *what, const vkt_strategy *a, const vkt_strategy *b) {
    int n = vkt_strategy_tensor_count(a);
    VT_CHECK(t, n == vkt_strategy_tensor_count(b), "%s: %d tensors, single %d", what, n,
             vkt_strategy_tensor_count(b));
    if (n != vkt_strategy_tensor_count(b)) return false;
    bool same = true;
    for (int i = 0; i < n; i++) {
        const vkt_net_tensor *x = vkt_strategy_tensor(a, i), *y = vkt_strategy_tensor(b, i);
        bool eq = !strcmp(x->name, y->name) && x->ndim == y->ndim && x->count == y->count &&
                  x->state == y->state && !memcmp(x->shape, y->shape, sizeof x->shape);
        VT_CHECK(t, eq, "%s: tensor %d is %s [%u, %u] (%llu), single's %s [%u, %u] (%llu)", what, i,
                 x->name, x->shape[0], x->ndim > 1 ? x->shape[1] : 0, (unsigned long long)x->count,
                 y->name, y->shape[0], y->ndim > 1 ? y->shape[1] : 0, (unsigned long long)y->count);
        same = same && eq;
    }
    return same;
}

// The stores a strategy of tr keeps for its parameters.
static int stores_of(const training *tr, vkt_net_store *st) {
    int n = 0;
    st[n++] = VKT_STORE_PARAM;
    if (tr->optim.kind == VKT_OPTIM_ADAMW || tr->optim.momentum > 0) st[n++] = VKT_STORE_OPT1;
    if (tr->optim.kind == VKT_OPTIM_ADAMW) st[n++] = VKT_STORE_OPT2;
    return n;
}

// tr's first `steps` steps under tensor on 2 devices, saved; loaded into one llvmpipe and into
// three devices (other seeds first, so that the load must overwrite): every store is the 2-device
// run's to the bit, the checkpoint holds the whole tensors under single's names; then all three
// train `more` steps and agree.
static void check_checkpoint(vt *t, const training *tr, int steps, int more, const char *three,
                             const char *dir) {
    int fails = t->failures;
    char path[512];
    snprintf(path, sizeof path, "%s/%s.safetensors", dir, tr->name);
    vkt_strategy *two = NULL, *one = NULL, *tri = NULL;
    VT_OK(t, make(t, tr, VKT_STRATEGY_TENSOR, "llvmpipe,llvmpipe", 0, &two));
    VT_OK(t, make(t, tr, VKT_STRATEGY_SINGLE, "llvmpipe", 0, &one));
    VT_OK(t, make(t, tr, VKT_STRATEGY_TENSOR, three, 0, &tri));
    if (!two || !one || !tri) goto out;
    VT_OK(t, vkt_strategy_init(two, SEED));
    VT_OK(t, vkt_strategy_init(one, SEED + 1));
    VT_OK(t, vkt_strategy_init(tri, SEED + 2));
    VT_OK(t, train_steps(two, tr, 0, steps, NULL));
    VT_CHECK(t, vkt_strategy_has_store(two, VKT_STORE_OPT2), "AdamW without exp_avg_sq");
    vkt_train_opts o = {.optim = tr->optim, .seed = SEED, .batch = tr->batch};
    o.strategy.model = tr->m;
    vkt_run_position pos = {.step = (uint64_t)steps, .batch = (uint32_t)steps};
    VT_OK(t, vkt_checkpoint_save(two, path, &pos, &o));
    if (t->failures > fails) goto out;

    // The file: whole tensors, single's names and shapes.
    char what[200];
    snprintf(what, sizeof what, "%s checkpoint of tensor x2", tr->name);
    same_tensors(t, what, two, one);
    vkt_checkpoint *ck = NULL;
    VT_OK(t, vkt_checkpoint_open(path, &ck));
    if (ck) {
        VT_CHECK(t, vkt_checkpoint_tensor_count(ck) == vkt_strategy_tensor_count(one),
                 "%s: %d tensors in the file, single has %d", what, vkt_checkpoint_tensor_count(ck),
                 vkt_strategy_tensor_count(one));
        for (int i = 0; i < vkt_strategy_tensor_count(one); i++) {
            const vkt_net_tensor *nt = vkt_strategy_tensor(one, i);
            uint64_t shape[VKT_CKPT_MAX_DIMS] = {0};
            for (int k = 0; k < nt->ndim; k++)
                shape[k] = nt->shape[k];
            VT_CHECK(t, vkt_checkpoint_expect(ck, nt->name, nt->ndim, shape) == VKT_OK, "%s: %s",
                     what, vkt_error());
        }
        vkt_checkpoint_close(ck);
    }

    vkt_run_position got;
    VT_OK(t, vkt_checkpoint_load(one, path, true, &got));
    VT_CHECK(t, got.step == (uint64_t)steps, "the loaded position is step %llu",
             (unsigned long long)got.step);
    VT_OK(t, vkt_checkpoint_load(tri, path, true, &got));
    snprintf(what, sizeof what, "%s tensor on %s", tr->name, three);
    same_tensors(t, what, tri, one);
    vkt_net_store stores[3];
    int nstores = stores_of(tr, stores);
    for (int k = 0; k < nstores; k++) {
        float *a = NULL, *b = NULL, *c = NULL;
        uint64_t na = 0, nb = 0, nc = 0;
        VT_OK(t, read_all(two, stores[k], &a, &na));
        VT_OK(t, read_all(one, stores[k], &b, &nb));
        VT_OK(t, read_all(tri, stores[k], &c, &nc));
        VT_CHECK(t, na == nb && nb == nc && !memcmp(a, b, na * 4),
                 "%s: store %d loaded into one device differs from the tensor run's", tr->name,
                 stores[k]);
        VT_CHECK(t, na == nc && !memcmp(a, c, na * 4),
                 "%s: store %d loaded into %s differs from the tensor run's", tr->name, stores[k],
                 three);
        free(a);
        free(b);
        free(c);
    }
    // Trained on from there, the three agree (the optimizer state sits where each expects it).
    if (t->failures == fails && more > 0) {
        VT_OK(t, train_steps(two, tr, steps, more, NULL));
        VT_OK(t, train_steps(one, tr, steps, more, NULL));
        VT_OK(t, train_steps(tri, tr, steps, more, NULL));
        float *a = NULL, *b = NULL, *c = NULL;
        uint64_t na = 0, nb = 0, nc = 0;
        VT_OK(t, read_all(two, VKT_STORE_PARAM, &a, &na));
        VT_OK(t, read_all(one, VKT_STORE_PARAM, &b, &nb));
        VT_OK(t, read_all(tri, VKT_STORE_PARAM, &c, &nc));
        if (na == nb && nb == nc) {
            double w1, w3;
            size_t bad1 = compare_floats("resumed on one device", b, a, na, &w1);
            size_t bad3 = compare_floats("resumed on three devices", c, a, na, &w3);
            VT_CHECK(t, bad1 == 0 && bad3 == 0,
                     "%s: %d steps on from the checkpoint: %zu parameters of one device's and "
                     "%zu of %s's differ from tensor x2's",
                     tr->name, more, bad1, bad3, three);
            printf("test_tensor: %s checkpoint of tensor x2 loads into llvmpipe and %s, bit for "
                   "bit; %d steps on, max |dp| %.2e and %.2e\n",
                   tr->name, three, more, w1, w3);
        }
        free(a);
        free(b);
        free(c);
    }
out:
    vkt_strategy_destroy(two);
    vkt_strategy_destroy(one);
    vkt_strategy_destroy(tri);
}

// ---------------------------------------------------------------------------------------------
// Memory

// wide_mlp: 784 -> 8192 -> 10. Its first dense layer's weight, gradient and momentum (77 MB) are
// over 64 MiB: no cut of layers fits (the refusal points at tensor), and tensor over 2 holds half
// of it on each device.
static void check_memory(vt *t, const vkt_dataset *ds) {
    int fails = t->failures;
    const uint64_t limit = 64ull << 20;
    vkt_model_desc m;
    if (access(VKT_SOURCE_DIR "/assets/models/wide_mlp.json", R_OK) == 0)
        VT_OK(t, vkt_model_load(VKT_SOURCE_DIR "/assets/models/wide_mlp.json", &m));
    else
        VT_OK(t, vkt_model_parse("{\"name\": \"wide_mlp\", \"input\": [784], \"layers\": ["
                                 "{\"type\": \"dense\", \"units\": 8192}, {\"type\": \"relu\"}, "
                                 "{\"type\": \"dense\", \"units\": 10}], "
                                 "\"loss\": \"softmax_cross_entropy\"}",
                                 "wide_mlp", &m));
    if (t->failures > fails) return;
    training tr = {.name = "wide_mlp", .m = &m, .ds = ds, .batch = 32, .steps = 3};
    tr.optim = vkt_optim_default(VKT_OPTIM_SGD);
    tr.optim.lr = 0.05f;
    tr.optim.momentum = 0.9f;
    vkt_strategy *s = NULL;
    vkt_status st = make(t, &tr, VKT_STRATEGY_LAYERS, "llvmpipe,llvmpipe", limit, &s);
    VT_CHECK(t, st == VKT_ERR_DEVICE_MEMORY && strstr(vkt_error(), "--strategy tensor") && !s,
             "wide_mlp under layers x2 in 64 MiB: %s: %s", vkt_status_name(st), vkt_error());
    vkt_strategy_destroy(s);
    s = NULL;

    // The tuner borrows its scratch from what the limit leaves (plan.h): off, so that the peaks
    // are the strategy's own.
    vkt_context_set_tune(t->ctx, VKT_TUNE_OFF);
    st = make(t, &tr, VKT_STRATEGY_TENSOR, "llvmpipe,llvmpipe", limit, &s);
    VT_CHECK(t, st == VKT_OK, "wide_mlp under tensor x2 in 64 MiB: %s", vkt_error());
    double loss[3] = {0};
    if (s) {
        VT_OK(t, vkt_strategy_init(s, SEED));
        VT_OK(t, train_steps(s, &tr, 0, 3, loss));
        VT_CHECK(t, loss[2] < loss[0] && isfinite(loss[2]), "wide_mlp: loss %g -> %g", loss[0],
                 loss[2]);
        vkt_plan_input in = {.model = &m, .batch = tr.batch, .optim = tr.optim, .ndevices = 2};
        int dev[VKT_MAX_DEVICES], nd = 0;
        VT_OK(t, vkt_context_select(t->ctx, "llvmpipe,llvmpipe", dev, VKT_MAX_DEVICES, &nd));
        for (int i = 0; i < 2; i++)
            vkt_plan_input_device(&in, i, vkt_context_device_info(t->ctx, dev[i]), limit);
        vkt_plan p;
        vkt_plan_tensor(&in, &p);
        VT_CHECK(t, p.fits, "the plan says wide_mlp does not fit tensor x2 in 64 MiB: %s", p.note);
        for (int i = 0; i < 2; i++) {
            vkt_device_stats ds_;
            vkt_strategy_stats(s, i, &ds_);
            VT_CHECK(t, ds_.peak_memory == p.need[i].total && ds_.peak_memory < limit,
                     "wide_mlp tensor x2, device %d: peak %llu bytes, the plan's %llu, limit %llu",
                     i, (unsigned long long)ds_.peak_memory, (unsigned long long)p.need[i].total,
                     (unsigned long long)limit);
            printf("test_tensor: wide_mlp tensor on llvmpipe,llvmpipe in 64 MiB: device %d peak "
                   "%.1f MiB (the plan's), loss %.4f -> %.4f\n",
                   i, ds_.peak_memory / 1048576.0, loss[0], loss[2]);
        }
    }
    vkt_strategy_destroy(s);
    vkt_model_free(&m);
}

// ---------------------------------------------------------------------------------------------

int main(void) {
    vt tv, *t = &tv;
    if (vt_init(t, "test_tensor")) return 1;
    vkt_model_desc mlp, gpt;
    vkt_dataset ds = {0};
    VT_OK(t, vkt_model_load(VKT_SOURCE_DIR "/assets/models/fashion_mlp.json", &mlp));
    VT_OK(t, vkt_model_load(VKT_SOURCE_DIR "/assets/models/char_gpt.json", &gpt));
    VT_OK(t, vkt_dataset_load_mnist_dir(NULL, true, &ds));
    if (t->failures) return vt_finish(t);
    vkt_dataset_limit(&ds, (MAX_STEPS + 1) * 32);
    bool have_ss = vt_find_device(t, "swiftshader") >= 0;

    check_split(t, &mlp, &gpt);
    check_share(t, &mlp);
    check_refusals(t, &mlp);

    static const char *const mlp_devices[] = {"llvmpipe,llvmpipe", "llvmpipe,llvmpipe,llvmpipe",
                                              "llvmpipe,swiftshader",
                                              "llvmpipe,swiftshader,llvmpipe"};
    training sgd = {.name = "fashion_mlp sgd", .m = &mlp, .ds = &ds, .steps = 20, .batch = 32};
    sgd.optim = vkt_optim_default(VKT_OPTIM_SGD);
    sgd.optim.lr = 0.05f;
    sgd.optim.momentum = 0.9f;
    compare_tensor(t, &sgd, mlp_devices, 4, have_ss);
    // Steps in halves run whole in begin under tensor: the same bits as whole steps.
    {
        run_result whole = {0}, halves = {0};
        VT_OK(t, run(t, &sgd, VKT_STRATEGY_TENSOR, "llvmpipe,llvmpipe", &whole));
        g_split_steps = true;
        VT_OK(t, run(t, &sgd, VKT_STRATEGY_TENSOR, "llvmpipe,llvmpipe", &halves));
        g_split_steps = false;
        VT_CHECK(t,
                 whole.params && halves.params && whole.n == halves.n &&
                     !memcmp(whole.params, halves.params, whole.n * 4) &&
                     !memcmp(whole.loss, halves.loss, sizeof whole.loss),
                 "tensor steps in halves (begin, prefetch, end) differ from whole steps");
        result_free(&whole);
        result_free(&halves);
    }
    training adamw = sgd;
    adamw.name = "fashion_mlp adamw";
    adamw.optim = vkt_optim_default(VKT_OPTIM_ADAMW);
    adamw.optim.lr = 1e-3f;
    // (AdamW on two of them: the suite's time; SGD covers all four.)
    static const char *const adamw_devices[] = {"llvmpipe,llvmpipe,llvmpipe",
                                                "llvmpipe,swiftshader"};
    compare_tensor(t, &adamw, adamw_devices, 2, have_ss);
    // --clip: the global norm over the slices of every device and the whole tensors once. 0.5
    // binds from the first step (the norm starts near 2).
    training clipped = adamw;
    clipped.name = "fashion_mlp adamw clip 0.5";
    clipped.optim.clip = 0.5f;
    static const char *const clip_devices[] = {"llvmpipe,llvmpipe",
                                               "llvmpipe,swiftshader,llvmpipe"};
    compare_tensor(t, &clipped, clip_devices, 2, have_ss);
    // layers,tensor: two stages of two devices (the first stage's cut may fall inside a split
    // pair: each rank's slice crosses to the same rank), 1 and 3 micro-batches, clipped by the norm
    // of every stage.
    static const char *const four[] = {"llvmpipe,llvmpipe,llvmpipe,llvmpipe",
                                       "llvmpipe,swiftshader,llvmpipe,swiftshader"};
    training lt = sgd;
    lt.name = "fashion_mlp sgd";
    lt.tensor_size = 2;
    lt.micro_batches = 3;
    compare_tensor(t, &lt, four, 2, have_ss);
    training ltc = clipped;
    ltc.tensor_size = 2;
    ltc.micro_batches = 1;
    compare_tensor(t, &ltc, four, 1, have_ss);
    // replicated,tensor: two replicas of two devices, the batch halved between them, each rank's
    // gradients summed with the other replica's same rank; SGD, and AdamW clipped.
    training rt = lt;
    rt.replicas = true;
    rt.micro_batches = 0;
    compare_tensor(t, &rt, four, 2, have_ss);
    training rtc = ltc;
    rtc.replicas = true;
    rtc.micro_batches = 0;
    compare_tensor(t, &rtc, four, 1, have_ss);
    // Plain layers with --clip: the norm is every stage's, not each stage's own (each stage
    // clipped by its own norm until the stages met for it: 50 times the tolerance after 20 steps).
    training plc = clipped;
    plc.plain_layers = true;
    plc.micro_batches = 2;
    static const char *const two_stages[] = {"llvmpipe,swiftshader"};
    compare_tensor(t, &plc, two_stages, 1, have_ss);

    // residual_mlp: the pairs inside the residual bodies, whose column splits need their input
    // gradient (one reduction each way per block); the top-level dense before a block is whole.
    static const char *const pair_devices[] = {"llvmpipe,llvmpipe",
                                               "llvmpipe,swiftshader,llvmpipe"};
    {
        vkt_model_desc rm = {0};
        VT_OK(t, vkt_model_load(VKT_SOURCE_DIR "/assets/models/residual_mlp.json", &rm));
        training rtr = sgd;
        rtr.name = "residual_mlp sgd";
        rtr.m = &rm;
        if (rm.nlayers) compare_tensor(t, &rtr, pair_devices, 2, have_ss);
        vkt_model_free(&rm);
    }
    // Two pairs in a row, odd widths (50 over 3: 16/17/17; 20: 6/7/7), a weight without bias and
    // GELU between the second pair: the second column split reduces its input gradient.
    {
        vkt_model_desc om = {0};
        VT_OK(t, vkt_model_parse("{\"name\": \"odd_pairs\", \"input\": [784], \"layers\": ["
                                 "{\"type\": \"dense\", \"units\": 50}, {\"type\": \"relu\"}, "
                                 "{\"type\": \"dense\", \"units\": 30, \"bias\": false}, "
                                 "{\"type\": \"relu\"}, {\"type\": \"dense\", \"units\": 20}, "
                                 "{\"type\": \"gelu\"}, {\"type\": \"dense\", \"units\": 10}], "
                                 "\"loss\": \"softmax_cross_entropy\"}",
                                 "odd_pairs", &om));
        training otr = sgd;
        otr.name = "odd_pairs sgd";
        otr.m = &om;
        if (om.nlayers) compare_tensor(t, &otr, pair_devices, 2, have_ss);
        vkt_model_free(&om);
    }
    // fashion_cnn: convolutions and batchnorm whole on every device over the whole batch (the
    // running statistics single's too), its dense pair split. 8 steps, as test_parallel's (its
    // batchnorm makes the training sensitive to rounding). On lavapipe+SwiftShader the whole
    // layers' copies drifted apart (each driver rounds its convolutions its own way) until the
    // strategy copied them from device 0 after every step of a mixed-driver run: 2.1e-4 from
    // single's after 8 steps before, as close as single on either driver after.
    {
        vkt_model_desc cm = {0};
        training ctr = sgd;
        ctr.name = "fashion_cnn sgd";
        ctr.m = &cm;
        ctr.steps = 8;
        static const char *const cnn_devices[] = {"llvmpipe,llvmpipe", "llvmpipe,swiftshader"};
        if (vkt_model_load(VKT_SOURCE_DIR "/assets/models/fashion_cnn.json", &cm) == VKT_OK)
            compare_tensor(t, &ctr, cnn_devices, 2, have_ss);
        vkt_model_free(&cm);
    }

    // char_gpt: windows of 128 bytes of English-like text (words from a short list, a fixed
    // generator), the held-out windows in order as a data set.
    vkt_text text = {0};
    vkt_dataset gds = {0};
    // 10 steps: a step with SwiftShader among the devices takes 1.5-2 s (its attention kernels).
    training gtr = {.name = "char_gpt adamw", .m = &gpt, .ds = &gds, .steps = 10, .batch = 2};
    gtr.optim = vkt_optim_default(VKT_OPTIM_ADAMW);
    gtr.optim.lr = 1e-3f;
    VT_OK(t, vt_words_text((uint32_t)(gtr.steps + 4) * gtr.batch, &text, &gds));
    if (gds.n) {
        static const char *const gpt_devices[] = {"llvmpipe,llvmpipe",
                                                  "llvmpipe,swiftshader,llvmpipe"};
        compare_tensor(t, &gtr, gpt_devices, 2, have_ss);
        // layers,tensor over two stages of two (llvmpipe and SwiftShader in each), 2
        // micro-batches of one window, --clip 1.
        training glt = gtr;
        glt.name = "char_gpt adamw clip 1";
        glt.optim.clip = 1.0f;
        glt.tensor_size = 2;
        glt.micro_batches = 2;
        static const char *const gpt_four[] = {"llvmpipe,swiftshader,llvmpipe,swiftshader"};
        compare_tensor(t, &glt, gpt_four, 1, have_ss);
        training grt = glt;
        grt.replicas = true;
        grt.micro_batches = 0;
        compare_tensor(t, &grt, gpt_four, 1, have_ss);
    }

    // Checkpoints: fashion_mlp's AdamW (a column and a row split, cut 256/256 then 170/171/171)
    // and char_gpt's (attention's heads 2/2 then 1/1/2).
    char dir[] = "/tmp/vkt_test_tensor_XXXXXX";
    VT_CHECK(t, mkdtemp(dir) != NULL, "mkdtemp failed");
    const char *three = have_ss ? "llvmpipe,swiftshader,llvmpipe" : "llvmpipe,llvmpipe,llvmpipe";
    check_checkpoint(t, &adamw, 5, 5, three, dir);
    if (gds.n) check_checkpoint(t, &gtr, 2, 2, three, dir);
    vt_remove_dir(dir);

    check_memory(t, &ds);

    vkt_dataset_free(&gds);
    vkt_text_free(&text);
    vkt_dataset_free(&ds);
    vkt_model_free(&gpt);
    vkt_model_free(&mlp);
    return vt_finish(t);
}
