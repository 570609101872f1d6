// test_zero.c: replicated training with a sharded optimizer (--shard-optimizer, ZeRO stage 1)
// computes the single-device training and holds less optimizer state per device.
//
//   - fashion_mlp.json, 20 steps (SGD with momentum; AdamW with --clip, which the test checks
//     binds), and char_gpt.json, 10 and 20 steps of 2 windows of text (SGD with momentum; AdamW
//     with --clip), sharded over llvmpipe,llvmpipe, llvmpipe x3 and llvmpipe,SwiftShader (whose
//     tensors pad to 256 bytes where lavapipe's pad to 16): every parameter within
//     |p - p_single| <= 2e-4 + 2e-3 |p_single| of the single-device run (test_parallel's
//     tolerance), the losses within 1e-3.
//   - Memory: every device's peak once the strategy is made is the planner's figure to the byte,
//     and lies below plain replicated's by the planner's optimizer-state difference, which is at
//     least 95% of the optimizer state's (n-1)/n.
//   - Communication: every device's bytes moved over the steps are the planner's bytes per step
//     times the steps, plain and sharded.
//   - Checkpoints: the optimizer state read from a sharded run is whole (it matches a
//     single-device run's after the same steps), and a checkpoint file written from it resumes
//     on one device, replicated without sharding, and sharded over another device count and
//     driver, each ending where 20 uninterrupted steps end; resuming without the optimizer state
//     does not (so the check can fail).
//   - --shard-optimizer with another strategy is refused with its message.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "checkpoint.h"
#include "data.h"
#include "plan.h"
#include "strategy.h"
#include "test_util.h"

#define STEPS 20
#define BATCH 32
#define MAX_NAMES 256

typedef struct zcfg {
    vkt_strategy_kind kind;
    const char *devices;
    bool shard;
    vkt_optim_desc optim;
    uint32_t batch;
    int first, steps; // batches (and step numbers - 1) [first, first + steps)
    const char *load; // checkpoint to start from (NULL: the seed's parameters)
    bool load_optim;  // with its optimizer state
    const char *save; // checkpoint to write after the steps (NULL: none)
} zcfg;

typedef struct zres {
    float *params; // every trained tensor, concatenated in model order
    uint64_t n;
    double loss[STEPS];
    int ndev;
    uint64_t peak[VKT_MAX_DEVICES], bytes[VKT_MAX_DEVICES];
    vkt_plan plan; // replicated: the planner's view of the same run
} zres;

static const char *store_prefix(vkt_net_store st) {
    return st == VKT_STORE_PARAM ? "param" : st == VKT_STORE_OPT1 ? "exp_avg" : "exp_avg_sq";
}

// The planner's plan for the run (the devices as `vktrain plan` describes them).
static void plan_of(const vkt_strategy_desc *d, vkt_plan *p) {
    vkt_plan_input in;
    memset(&in, 0, sizeof in);
    in.model = d->model;
    in.batch = d->batch;
    in.optim = d->optim;
    in.ndevices = d->ndevices;
    in.shard_optimizer = d->shard_optimizer;
    for (int i = 0; i < d->ndevices; i++)
        vkt_plan_input_device(&in, i, vkt_context_device_info(d->ctx, d->devices[i]), 0);
    vkt_plan_replicated(&in, p);
}

// Writes every tensor of s (parameters and the optimizer's stores) to path.
static vkt_status save(vkt_strategy *s, const char *path) {
    vkt_ckpt_tensor ts[3 * MAX_NAMES];
    char names[3 * MAX_NAMES][96];
    int n = 0;
    vkt_status st = VKT_OK;
    vkt_net_store stores[3] = {VKT_STORE_PARAM, VKT_STORE_OPT1, VKT_STORE_OPT2};
    for (int k = 0; k < 3 && st == VKT_OK; k++) {
        if (!vkt_strategy_has_store(s, stores[k])) continue;
        for (int i = 0; i < vkt_strategy_tensor_count(s) && n < 3 * MAX_NAMES; i++) {
            const vkt_net_tensor *t = vkt_strategy_tensor(s, i);
            if (t->state && k) continue;
            float *v = malloc(t->count * 4);
            for (uint64_t j = 0; j < t->count; j++)
                v[j] = NAN; // a piece no replica filled stays NaN and fails the comparisons
            st = vkt_strategy_read(s, stores[k], i, v);
            snprintf(names[n], sizeof names[n], "%s/%s", store_prefix(stores[k]), t->name);
            ts[n] = (vkt_ckpt_tensor){.name = names[n], .ndim = t->ndim, .data = v};
            for (int dd = 0; dd < t->ndim; dd++)
                ts[n].shape[dd] = t->shape[dd];
            n++;
            if (st != VKT_OK) break;
        }
    }
    if (st == VKT_OK) st = vkt_checkpoint_write(path, ts, n, NULL, 0);
    for (int i = 0; i < n; i++)
        free((void *)ts[i].data);
    return st;
}

static vkt_status load(vkt_strategy *s, const char *path, bool optim) {
    vkt_checkpoint *ck;
    vkt_status st = vkt_checkpoint_open(path, &ck);
    if (st != VKT_OK) return st;
    vkt_net_store stores[3] = {VKT_STORE_PARAM, VKT_STORE_OPT1, VKT_STORE_OPT2};
    for (int k = 0; k < (optim ? 3 : 1) && st == VKT_OK; k++) {
        if (!vkt_strategy_has_store(s, stores[k])) continue;
        for (int i = 0; i < vkt_strategy_tensor_count(s) && st == VKT_OK; i++) {
            const vkt_net_tensor *t = vkt_strategy_tensor(s, i);
            if (t->state && k) continue;
            char name[96];
            snprintf(name, sizeof name, "%s/%s", store_prefix(stores[k]), t->name);
            float *v = malloc(t->count * 4);
            st = vkt_checkpoint_read(ck, name, v, t->count);
            if (st == VKT_OK) st = vkt_strategy_write(s, stores[k], i, v);
            free(v);
        }
    }
    vkt_checkpoint_close(ck);
    return st;
}

static vkt_status run(vt *t, const vkt_model_desc *m, const vkt_dataset *ds, const zcfg *c,
                      zres *out) {
    memset(out, 0, sizeof *out);
    vkt_strategy_desc d = {.kind = c->kind,
                           .ctx = t->ctx,
                           .model = m,
                           .batch = c->batch,
                           .optim = c->optim,
                           .shard_optimizer = c->shard};
    vkt_status st = vkt_context_select(t->ctx, c->devices, d.devices, VKT_MAX_DEVICES, &d.ndevices);
    if (st != VKT_OK) return st;
    if (c->kind == VKT_STRATEGY_REPLICATED) plan_of(&d, &out->plan);
    vkt_strategy *s;
    st = vkt_strategy_create(&d, &s);
    if (st != VKT_OK) return st;
    out->ndev = vkt_strategy_device_count(s);
    for (int i = 0; i < out->ndev; i++) {
        vkt_device_stats ds0;
        vkt_strategy_stats(s, i, &ds0);
        out->peak[i] = ds0.peak_memory;
    }
    st = vkt_strategy_init(s, 1234);
    if (st == VKT_OK && c->load) st = load(s, c->load, c->load_optim);
    vkt_batcher b;
    bool batcher = false;
    if (st == VKT_OK) st = vkt_batcher_init(&b, ds, c->batch, false, 0);
    batcher = st == VKT_OK;
    float *x = malloc((size_t)c->batch * m->input_features * 4);
    uint32_t *y = malloc((size_t)c->batch * vkt_model_targets_per_sample(m) * 4);
    for (int i = 0; i < c->steps && st == VKT_OK; i++) {
        double ls = 0;
        uint32_t rows = vkt_batcher_get(&b, (uint32_t)(c->first + i), x, y);
        st = vkt_strategy_step(s, x, y, rows, (uint32_t)(c->first + i) + 1, &ls);
        out->loss[i] = ls / rows;
    }
    for (int i = 0; i < out->ndev; i++) {
        vkt_device_stats ds1;
        vkt_strategy_stats(s, i, &ds1);
        out->bytes[i] = ds1.bytes_moved;
    }
    if (st == VKT_OK && c->save) st = save(s, c->save);
    for (int i = 0; i < vkt_strategy_tensor_count(s); i++)
        if (!vkt_strategy_tensor(s, i)->state) out->n += vkt_strategy_tensor(s, i)->count;
    out->params = malloc(out->n * 4);
    uint64_t at = 0;
    for (int i = 0; i < vkt_strategy_tensor_count(s) && st == VKT_OK; i++) {
        if (vkt_strategy_tensor(s, i)->state) continue;
        st = vkt_strategy_read(s, VKT_STORE_PARAM, i, out->params + at);
        at += vkt_strategy_tensor(s, i)->count;
    }
    free(x);
    free(y);
    if (batcher) vkt_batcher_free(&b);
    vkt_strategy_destroy(s);
    return st;
}

// Parameters (and the losses of the steps both ran, from_step on) against the reference.
static bool compare(vt *t, const char *what, const zres *ref, const zres *got, int steps,
                    int ref_from) {
    VT_CHECK(t, got->n == ref->n && got->params && ref->params, "%s: %llu parameters, want %llu",
             what, (unsigned long long)got->n, (unsigned long long)ref->n);
    if (got->n != ref->n || !got->params || !ref->params) return false;
    double *r = malloc(ref->n * sizeof *r), worst = 0, worst_loss = 0;
    for (uint64_t i = 0; i < ref->n; i++) {
        r[i] = ref->params[i];
        worst = fmax(worst, fabs(got->params[i] - r[i]));
    }
    size_t bad = vt_compare(what, got->params, r, ref->n, 2e-4, 2e-3);
    free(r);
    VT_CHECK(t, bad == 0, "%s: %zu parameters differ from the single-device run", what, bad);
    for (int i = 0; i < steps; i++)
        worst_loss = fmax(worst_loss, fabs(got->loss[i] - ref->loss[ref_from + i]));
    VT_CHECK(t, worst_loss < 1e-3, "%s: losses differ by %g", what, worst_loss);
    printf("test_zero: %-58s max |dp| %.2e, max |dloss| %.2e\n", what, worst, worst_loss);
    return bad == 0;
}

// Memory and bytes moved of a sharded run against the planner and plain replicated's plan.
static void check_plan(vt *t, const char *what, const zres *got, const zres *plain, int steps) {
    const vkt_plan *p = &got->plan;
    VT_CHECK(t, p->fits && p->shard_optimizer, "%s: the plan does not fit or is not sharded", what);
    for (int i = 0; i < got->ndev; i++) {
        VT_CHECK(t, got->peak[i] == p->need[i].total,
                 "%s, device %d: peak %llu bytes once made, the plan said %llu", what, i,
                 (unsigned long long)got->peak[i], (unsigned long long)p->need[i].total);
        VT_CHECK(t, got->bytes[i] == (uint64_t)steps * p->comm_bytes[i],
                 "%s, device %d: moved %llu bytes in %d steps, the plan says %llu a step", what, i,
                 (unsigned long long)got->bytes[i], steps, (unsigned long long)p->comm_bytes[i]);
        if (!plain) continue;
        const vkt_plan *q = &plain->plan;
        uint64_t full = q->need[i].optim, cut = full - p->need[i].optim;
        double want = (double)full * (got->ndev - 1) / got->ndev;
        VT_CHECK(t, plain->peak[i] - got->peak[i] == cut,
                 "%s, device %d: peak %llu bytes, plain replicated's %llu: %llu less, the plan's "
                 "optimizer state %llu less",
                 what, i, (unsigned long long)got->peak[i], (unsigned long long)plain->peak[i],
                 (unsigned long long)(plain->peak[i] - got->peak[i]), (unsigned long long)cut);
        VT_CHECK(t, cut >= 0.95 * want && cut <= full,
                 "%s, device %d: optimizer state cut by %llu bytes of %llu, want about %.0f", what,
                 i, (unsigned long long)cut, (unsigned long long)full, want);
        VT_CHECK(t, p->comm_bytes[i] > q->comm_bytes[i],
                 "%s, device %d: sharded moves %llu bytes a step, plain %llu", what, i,
                 (unsigned long long)p->comm_bytes[i], (unsigned long long)q->comm_bytes[i]);
        printf("test_zero: %-40s #%d peak %8.3f MiB (plain %8.3f MiB, optimizer %.3f -> %.3f "
               "MiB), %.3f MiB moved a step (plain %.3f)\n",
               what, i, got->peak[i] / 1048576.0, plain->peak[i] / 1048576.0, full / 1048576.0,
               p->need[i].optim / 1048576.0, p->comm_bytes[i] / 1048576.0,
               q->comm_bytes[i] / 1048576.0);
    }
}

// Tensors of two checkpoint files (both from the same model's runs) within tolerance: the
// parameters as compare's, the optimizer state relative to its tensor's largest value.
static void compare_files(vt *t, const char *what, const char *a, const char *b) {
    vkt_checkpoint *ca = NULL, *cb = NULL;
    VT_OK(t, vkt_checkpoint_open(a, &ca));
    VT_OK(t, vkt_checkpoint_open(b, &cb));
    if (!ca || !cb) {
        vkt_checkpoint_close(ca);
        vkt_checkpoint_close(cb);
        return;
    }
    int n = vkt_checkpoint_tensor_count(ca), bad = 0, opt = 0;
    VT_CHECK(t, n == vkt_checkpoint_tensor_count(cb), "%s: %d tensors against %d", what, n,
             vkt_checkpoint_tensor_count(cb));
    for (int i = 0; i < n; i++) {
        const char *name = vkt_checkpoint_tensor_name(ca, i);
        int nd;
        uint64_t shape[VKT_CKPT_MAX_DIMS], count = 1;
        if (!vkt_checkpoint_find(cb, name, &nd, shape)) {
            VT_CHECK(t, false, "%s: %s missing", what, name);
            continue;
        }
        for (int k = 0; k < nd; k++)
            count *= shape[k];
        float *x = malloc(count * 4), *y = malloc(count * 4);
        double *r = malloc(count * sizeof *r), mx = 0;
        VT_OK(t, vkt_checkpoint_read(ca, name, x, count));
        VT_OK(t, vkt_checkpoint_read(cb, name, y, count));
        for (uint64_t k = 0; k < count; k++) {
            r[k] = y[k];
            mx = fmax(mx, fabs(r[k]));
        }
        bool is_param = strncmp(name, "param/", 6) == 0;
        opt += !is_param;
        VT_CHECK(t, is_param || mx > 0, "%s: %s is all zeros", what, name);
        bad += vt_compare(name, x, r, count, is_param ? 2e-4 : 1e-4 * mx, 2e-3) != 0;
        free(x), free(y), free(r);
    }
    VT_CHECK(t, bad == 0 && opt > 0, "%s: %d tensors differ (%d of optimizer state)", what, bad,
             opt);
    printf("test_zero: %-58s %d tensors, %d of optimizer state, agree\n", what, n, opt);
    vkt_checkpoint_close(ca);
    vkt_checkpoint_close(cb);
}

static vkt_optim_desc sgd_momentum(void) {
    vkt_optim_desc o = vkt_optim_default(VKT_OPTIM_SGD);
    o.lr = 0.05f;
    o.momentum = 0.9f;
    return o;
}

static vkt_optim_desc adamw_clip(void) {
    vkt_optim_desc o = vkt_optim_default(VKT_OPTIM_ADAMW);
    o.lr = 2e-3f;
    o.clip = 0.5f;
    return o;
}

// Single-device reference and sharded runs of one model and optimizer; plain: a plain
// replicated run on the same devices for each sharded one (its memory and bytes).
static void sharded_cases(vt *t, const char *name, const vkt_model_desc *m, const vkt_dataset *ds,
                          vkt_optim_desc o, uint32_t batch, int steps, const char *const *devices,
                          int ndevices, bool have_ss, zres *ref_out) {
    zcfg c = {.kind = VKT_STRATEGY_SINGLE,
              .devices = "llvmpipe",
              .optim = o,
              .batch = batch,
              .steps = steps};
    zres ref;
    VT_OK(t, run(t, m, ds, &c, &ref));
    VT_CHECK(t, ref.loss[steps - 1] < ref.loss[0], "%s: the single-device run did not learn", name);
    for (int k = 0; k < ndevices; k++) {
        if (strstr(devices[k], "swiftshader") && !have_ss) continue; // failed under CI=true
        char what[160];
        snprintf(what, sizeof what, "%s %s%s, sharded on %s", name,
                 o.kind == VKT_OPTIM_ADAMW ? "adamw" : "sgd", o.clip > 0 ? "+clip" : "",
                 devices[k]);
        zres got, plain;
        c.kind = VKT_STRATEGY_REPLICATED;
        c.devices = devices[k];
        c.shard = true;
        vkt_status st = run(t, m, ds, &c, &got);
        VT_CHECK(t, st == VKT_OK, "%s: %s", what, vkt_error());
        if (st == VKT_OK) compare(t, what, &ref, &got, steps, 0);
        c.shard = false;
        st = run(t, m, ds, &c, &plain);
        VT_CHECK(t, st == VKT_OK, "%s (plain): %s", what, vkt_error());
        if (st == VKT_OK && got.params) {
            check_plan(t, what, &got, &plain, steps);
            for (int i = 0; i < plain.ndev; i++)
                VT_CHECK(t, plain.bytes[i] == (uint64_t)steps * plain.plan.comm_bytes[i],
                         "%s, plain, device %d: moved %llu bytes, the plan says %llu a step", what,
                         i, (unsigned long long)plain.bytes[i],
                         (unsigned long long)plain.plan.comm_bytes[i]);
        }
        free(got.params);
        free(plain.params);
    }
    if (ref_out)
        *ref_out = ref;
    else
        free(ref.params);
}

int main(void) {
    vt tv, *t = &tv;
    if (vt_init(t, "test_zero")) return 1;
    vkt_model_desc m;
    vkt_dataset ds = {0};
    VT_OK(t, vkt_model_load(VKT_SOURCE_DIR "/assets/models/fashion_mlp.json", &m));
    VT_OK(t, vkt_dataset_load_mnist_dir(NULL, true, &ds));
    if (t->failures) return vt_finish(t);
    vkt_dataset_limit(&ds, (STEPS + 1) * BATCH);
    bool have_ss = vt_find_device(t, "swiftshader") >= 0;
    const char *const devs[] = {"llvmpipe,llvmpipe", "llvmpipe,llvmpipe,llvmpipe",
                                "llvmpipe,swiftshader"};

    // fashion_mlp: SGD with momentum, and AdamW with clipping.
    sharded_cases(t, "fashion_mlp", &m, &ds, sgd_momentum(), BATCH, STEPS, devs, 3, have_ss, NULL);
    zres aref;
    sharded_cases(t, "fashion_mlp", &m, &ds, adamw_clip(), BATCH, STEPS, devs, 3, have_ss, &aref);
    {
        // The clipping binds (the same run unclipped ends elsewhere), so the sharded runs' global
        // norm is tested.
        vkt_optim_desc o = adamw_clip();
        o.clip = 0;
        zcfg c = {.kind = VKT_STRATEGY_SINGLE,
                  .devices = "llvmpipe",
                  .optim = o,
                  .batch = BATCH,
                  .steps = STEPS};
        zres un;
        VT_OK(t, run(t, &m, &ds, &c, &un));
        double diff = 0;
        for (uint64_t i = 0; un.params && aref.params && i < un.n; i++)
            diff = fmax(diff, fabs(un.params[i] - aref.params[i]));
        VT_CHECK(t, diff > 1e-3, "clipping at 0.5 changed the parameters by only %g", diff);
        printf("test_zero: clipping at 0.5 moves the 20-step parameters by up to %.2e\n", diff);
        free(un.params);
    }

    // Checkpoints: 10 AdamW steps sharded over three devices, written whole; the same 10 steps
    // on one device. Then the last 10 steps from the sharded file on one device, replicated
    // without sharding, and sharded over two other devices.
    {
        char dir[] = "/tmp/test_zero_XXXXXX";
        VT_CHECK(t, mkdtemp(dir) != NULL, "mkdtemp");
        char shard_path[128], single_path[128];
        snprintf(shard_path, sizeof shard_path, "%s/sharded.safetensors", dir);
        snprintf(single_path, sizeof single_path, "%s/single.safetensors", dir);
        zcfg c = {.kind = VKT_STRATEGY_REPLICATED,
                  .devices = "llvmpipe,llvmpipe,llvmpipe",
                  .shard = true,
                  .optim = adamw_clip(),
                  .batch = BATCH,
                  .steps = STEPS / 2,
                  .save = shard_path};
        zres half;
        VT_OK(t, run(t, &m, &ds, &c, &half));
        free(half.params);
        c.kind = VKT_STRATEGY_SINGLE;
        c.devices = "llvmpipe";
        c.shard = false;
        c.save = single_path;
        VT_OK(t, run(t, &m, &ds, &c, &half));
        free(half.params);
        compare_files(t, "10 steps sharded x3 against single, checkpointed", shard_path,
                      single_path);
        const zcfg resumes[] = {
            {.kind = VKT_STRATEGY_SINGLE, .devices = "llvmpipe"},
            {.kind = VKT_STRATEGY_REPLICATED, .devices = "llvmpipe,llvmpipe"},
            {.kind = VKT_STRATEGY_REPLICATED, .devices = "llvmpipe,swiftshader", .shard = true},
        };
        for (size_t k = 0; k < sizeof resumes / sizeof *resumes; k++) {
            if (strstr(resumes[k].devices, "swiftshader") && !have_ss) continue;
            zcfg r = resumes[k];
            r.optim = adamw_clip();
            r.batch = BATCH;
            r.first = STEPS / 2;
            r.steps = STEPS / 2;
            r.load = shard_path;
            r.load_optim = true;
            char what[160];
            snprintf(what, sizeof what, "resumed from sharded x3: %s%s on %s",
                     vkt_strategy_name(r.kind), r.shard ? " sharded" : "", r.devices);
            zres got;
            vkt_status st = run(t, &m, &ds, &r, &got);
            VT_CHECK(t, st == VKT_OK, "%s: %s", what, vkt_error());
            if (st == VKT_OK) compare(t, what, &aref, &got, STEPS / 2, STEPS / 2);
            free(got.params);
        }
        // The other way: a single-device checkpoint resumed sharded.
        zcfg r = {.kind = VKT_STRATEGY_REPLICATED,
                  .devices = "llvmpipe,llvmpipe",
                  .shard = true,
                  .optim = adamw_clip(),
                  .batch = BATCH,
                  .first = STEPS / 2,
                  .steps = STEPS / 2,
                  .load = single_path,
                  .load_optim = true};
        zres got;
        VT_OK(t, run(t, &m, &ds, &r, &got));
        compare(t, "resumed from single: replicated sharded on llvmpipe,llvmpipe", &aref, &got,
                STEPS / 2, STEPS / 2);
        free(got.params);
        // Without the optimizer state the run ends elsewhere: the state above was used.
        r.load = shard_path;
        r.load_optim = false;
        VT_OK(t, run(t, &m, &ds, &r, &got));
        double diff = 0;
        for (uint64_t i = 0; got.params && aref.params && i < got.n; i++)
            diff = fmax(diff, fabs(got.params[i] - aref.params[i]));
        VT_CHECK(t, diff > 1e-3, "resumed without the optimizer state, only %g off", diff);
        printf("test_zero: resumed without the optimizer state ends up to %.2e off\n", diff);
        free(got.params);
        unlink(shard_path);
        unlink(single_path);
        rmdir(dir);
    }
    free(aref.params);

    // char_gpt.json: 10 steps (SGD, lavapipe + SwiftShader) and 20 (AdamW) of 2 windows.
    {
        vkt_model_desc gm;
        vkt_text text;
        vkt_dataset gds = {0};
        VT_OK(t, vkt_model_load(VKT_SOURCE_DIR "/assets/models/char_gpt.json", &gm));
        VT_OK(t, vt_words_text(21 * 4, &text, &gds));
        if (!t->failures) {
            const char *const two[] = {"llvmpipe,swiftshader"};
            const char *const three[] = {"llvmpipe,llvmpipe,llvmpipe"};
            // 10 steps where SwiftShader runs: a step there takes 1.5-2 s (its attention).
            sharded_cases(t, "char_gpt", &gm, &gds, sgd_momentum(), 2, 10, two, 1, have_ss, NULL);
            vkt_optim_desc o = adamw_clip();
            o.lr = 1e-3f;
            sharded_cases(t, "char_gpt", &gm, &gds, o, 2, 20, three, 1, have_ss, NULL);
        }
        vkt_dataset_free(&gds);
        vkt_text_free(&text);
        vkt_model_free(&gm);
    }

    // Another strategy refuses the flag, in words that name it.
    {
        vkt_strategy_desc d = {.kind = VKT_STRATEGY_LAYERS,
                               .ctx = t->ctx,
                               .model = &m,
                               .batch = BATCH,
                               .optim = sgd_momentum(),
                               .shard_optimizer = true};
        VT_OK(t, vkt_context_select(t->ctx, "llvmpipe,llvmpipe", d.devices, VKT_MAX_DEVICES,
                                    &d.ndevices));
        vkt_strategy *s = NULL;
        vkt_status st = vkt_strategy_create(&d, &s);
        VT_CHECK(t,
                 st == VKT_ERR_ARG && strstr(vkt_error(), "--shard-optimizer applies to "
                                                          "--strategy replicated"),
                 "layers with shard_optimizer: %s: %s", vkt_status_name(st), vkt_error());
        vkt_strategy_destroy(s);
    }

    vkt_dataset_free(&ds);
    vkt_model_free(&m);
    return vt_finish(t);
}
