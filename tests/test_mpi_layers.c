// test_mpi_layers.c: --strategy layers across MPI processes (parallel/layers.c with desc.world)
// computes the single-device training. Run without mpirun (as CTest does), it starts itself under
// `mpirun -np N` once per configuration and fails when any of them fails, naming it; a missing
// mpirun, or a vktrain built without MPI, is a failure too. Under mpirun, every rank joins the
// world (vkt_world_init), gives the strategy its own devices (the run's stages are every rank's
// devices in rank order) and trains from the same seed on the same synthetic batches:
//   - fashion_mlp over 2 ranks of one llvmpipe each (GPipe, 4 micro-batches), over 3 ranks (1F1B,
//     4 micro-batches, --clip), over llvmpipe on rank 0 and SwiftShader on rank 1 (1F1B, 3
//     micro-batches), and over two stages on rank 0 and one on rank 1 (1F1B, 4 micro-batches,
//     --clip: a local neighbour and a remote one in the same run);
//   - fashion_cnn over two stages on rank 0 and one on rank 1 (GPipe, 1 micro-batch: batchnorm
//     normalises each micro-batch by itself, so only a whole batch is single's), clipped;
//   - --pipelines 2 (data x pipeline): fashion_mlp over 4 ranks of one llvmpipe each (pipelines
//     {0,1} and {2,3}: each pipeline spans two ranks, each stage's gradients are summed over
//     ranks {0,2} or {1,3}; GPipe, 2 micro-batches), and over 2 ranks of two llvmpipe each (a
//     pipeline per rank, each stage summed over both ranks; 1F1B, 2 micro-batches, --clip). Rank
//     0's one-process reference is then --pipelines 2 over 4 llvmpipe in one process, which is
//     also held to the single-device run (with and without --clip), and the bytes each device
//     moved include its stage's gradients out and back every step.
// Each rank checks that the step losses, the evaluation (loss and correct count) and the
// predictions it got are rank 0's bits. Rank 0 then reads the whole model through the collective
// vkt_strategy_read (every rank calls it; rank 0's dst is filled) and runs, in its own process,
// the single-device training (parameters, buffers, losses, evaluation and predictions within the
// tolerance) and the one-process layers training over the same devices (the same bits: the same
// kernels, the same micro-batches, the same order of every sum; within the tolerance when
// clipped, as the device sums the squared norm in an order of its own). The first configuration
// also checks a collective vkt_strategy_write of a tensor that lives on the last rank, and the
// refusals: layers,tensor across ranks, and a model that does not fit (the message names the
// rank of the device); the first --pipelines configuration also checks the write (to every
// pipeline's copy, read back from pipeline 0's) and refuses pipelines that do not divide the
// devices and pipelines that do not fit.
//
// Tolerance: |p - p_single| <= 2e-4 + 2e-3 |p_single| (as tests/test_parallel.c): the stages sum
// the same products as one device in other orders (micro-batches, another driver's matmul).
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "strategy.h"
#include "test_util.h"
#include "world.h"

#define VKT_TRY_TEST(e)                                                                            \
    do {                                                                                           \
        vkt_status s_ = (e);                                                                       \
        if (s_ != VKT_OK) return s_;                                                               \
    } while (0)
#define STEPS 20
#define BATCH 32
#define SEED 1234
#define MAX_RANKS 4
// How long a rank waits for another (vkt_world_init), and how long one configuration may run.
#define RANK_TIMEOUT_S 60
#define CONFIG_TIMEOUT_S 240

typedef struct config {
    const char *name;
    int ranks;
    const char *devices[MAX_RANKS]; // each rank's devices
    const char *model;              // in assets/models
    int micro;
    vkt_schedule sched;
    float clip;
    bool extra; // also the collective write and the refusals
    int pipelines;
} config;

static const config configs[] = {
    {"fashion_mlp, 2 ranks x llvmpipe, gpipe M=4",
     2,
     {"llvmpipe", "llvmpipe"},
     "fashion_mlp",
     4,
     VKT_SCHEDULE_GPIPE,
     0,
     true,
     1},
    {"fashion_mlp, 3 ranks x llvmpipe, 1f1b M=4, clip",
     3,
     {"llvmpipe", "llvmpipe", "llvmpipe"},
     "fashion_mlp",
     4,
     VKT_SCHEDULE_1F1B,
     0.5f,
     false,
     1},
    {"fashion_mlp, llvmpipe | swiftshader, 1f1b M=3",
     2,
     {"llvmpipe", "swiftshader"},
     "fashion_mlp",
     3,
     VKT_SCHEDULE_1F1B,
     0,
     false,
     1},
    {"fashion_mlp, llvmpipe x2 | llvmpipe, 1f1b M=4, clip",
     2,
     {"llvmpipe,llvmpipe", "llvmpipe"},
     "fashion_mlp",
     4,
     VKT_SCHEDULE_1F1B,
     0.5f,
     false,
     1},
    {"fashion_cnn, llvmpipe x2 | llvmpipe, gpipe M=1, clip",
     2,
     {"llvmpipe,llvmpipe", "llvmpipe"},
     "fashion_cnn",
     1,
     VKT_SCHEDULE_GPIPE,
     0.5f,
     false,
     1},
    {"fashion_mlp, 4 ranks x llvmpipe, 2 pipelines of 2, gpipe M=2",
     4,
     {"llvmpipe", "llvmpipe", "llvmpipe", "llvmpipe"},
     "fashion_mlp",
     2,
     VKT_SCHEDULE_GPIPE,
     0,
     true,
     2},
    {"fashion_mlp, llvmpipe x2 | llvmpipe x2, 2 pipelines of 2, 1f1b M=2, clip",
     2,
     {"llvmpipe,llvmpipe", "llvmpipe,llvmpipe"},
     "fashion_mlp",
     2,
     VKT_SCHEDULE_1F1B,
     0.5f,
     false,
     2},
};
#define NCONFIGS ((int)(sizeof configs / sizeof configs[0]))

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

// ---------------------------------------------------------------------------------------------
// Synthetic data: ten prototype inputs, each row one of them plus noise, labelled by it.

typedef struct data {
    uint32_t features;
    float *x;    // [(STEPS + 1) * BATCH, features]: batch i is step i + 1; the last one evaluates
    uint32_t *y; // [(STEPS + 1) * BATCH]
} data;

static void data_make(data *d, uint32_t features, uint32_t classes) {
    uint32_t n = (STEPS + 1) * BATCH;
    d->features = features;
    d->x = malloc((size_t)n * features * 4);
    d->y = malloc((size_t)n * 4);
    float *proto = malloc((size_t)classes * features * 4);
    vt_fill_uniform(proto, (size_t)classes * features, 7, 0, 1);
    uint64_t rng = 11;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t c = (uint32_t)(vt_rand_u64(&rng) % classes);
        d->y[i] = c;
        for (uint32_t j = 0; j < features; j++)
            d->x[(size_t)i * features + j] =
                0.6f * proto[(size_t)c * features + j] + vt_rand_uniform(&rng, 0, 0.4f);
    }
    free(proto);
}

static const float *batch_x(const data *d, int i) { return d->x + (size_t)i * BATCH * d->features; }
static const uint32_t *batch_y(const data *d, int i) { return d->y + (size_t)i * BATCH; }

// ---------------------------------------------------------------------------------------------
// One training

typedef struct result {
    double loss[STEPS]; // per step, the sum over the batch
    double eval_loss;
    uint64_t eval_correct;
    float *pred; // [BATCH, outputs] of the evaluation batch
    float *all;  // every tensor (parameters and buffers) in model order (rank 0)
    uint64_t nall;
} result;

static void result_free(result *r) {
    free(r->pred);
    free(r->all);
    memset(r, 0, sizeof *r);
}

static vkt_strategy_desc desc_for(vt *t, const config *c, const vkt_model_desc *m,
                                  vkt_strategy_kind kind, vkt_world *w) {
    vkt_strategy_desc d = {.kind = kind,
                           .ctx = t->ctx,
                           .model = m,
                           .batch = BATCH,
                           .micro_batches = c->micro,
                           .schedule = c->sched,
                           .pipelines = c->pipelines,
                           .world = w};
    d.optim = vkt_optim_default(VKT_OPTIM_SGD);
    d.optim.lr = 0.05f;
    d.optim.momentum = 0.9f;
    d.optim.clip = c->clip;
    return d;
}

// Trains on s: STEPS steps, the evaluation and the predictions on the batch after them, then
// every tensor (collective reads: on every rank of a world, filled on rank 0 only).
static vkt_status train(vkt_strategy *s, const vkt_model_desc *m, const data *dt, result *out) {
    VKT_TRY_TEST(vkt_strategy_init(s, SEED));
    for (int i = 0; i < STEPS; i++)
        VKT_TRY_TEST(vkt_strategy_step(s, batch_x(dt, i), batch_y(dt, i), BATCH, (uint32_t)i + 1,
                                       &out->loss[i]));
    VKT_TRY_TEST(vkt_strategy_eval(s, batch_x(dt, STEPS), batch_y(dt, STEPS), BATCH,
                                   &out->eval_loss, &out->eval_correct));
    out->pred = calloc((size_t)BATCH * m->output_features, 4);
    VKT_TRY_TEST(vkt_strategy_predict(s, batch_x(dt, STEPS), BATCH, out->pred));
    out->nall = 0;
    for (int i = 0; i < vkt_strategy_tensor_count(s); i++)
        out->nall += vkt_strategy_tensor(s, i)->count;
    out->all = calloc(out->nall, 4);
    uint64_t at = 0;
    for (int i = 0; i < vkt_strategy_tensor_count(s); i++) {
        VKT_TRY_TEST(vkt_strategy_read(s, VKT_STORE_PARAM, i, out->all + at));
        at += vkt_strategy_tensor(s, i)->count;
    }
    return VKT_OK;
}

// A training in this process alone (no world) on devices.
static vkt_status train_here(vt *t, const config *c, const vkt_model_desc *m, const data *dt,
                             vkt_strategy_kind kind, const char *devices, result *out) {
    vkt_strategy_desc d = desc_for(t, c, m, kind, NULL);
    if (kind == VKT_STRATEGY_SINGLE) d.micro_batches = d.pipelines = 0;
    VKT_TRY_TEST(vkt_context_select(t->ctx, devices, d.devices, VKT_MAX_DEVICES, &d.ndevices));
    vkt_strategy *s;
    VKT_TRY_TEST(vkt_strategy_create(&d, &s));
    vkt_status st = train(s, m, dt, out);
    vkt_strategy_destroy(s);
    return st;
}

// ---------------------------------------------------------------------------------------------
// Checks

static double worst_diff(const float *a, const float *b, uint64_t n) {
    double w = 0;
    for (uint64_t i = 0; i < n; i++)
        w = fmax(w, fabs((double)a[i] - b[i]));
    return w;
}

// got within the tolerance of ref (parameters, buffers, predictions, losses, evaluation).
static void compare_near(vt *t, const char *what, const result *ref, const result *got,
                         uint32_t outputs) {
    VT_CHECK(t, got->nall == ref->nall, "%s: %llu elements, want %llu", what,
             (unsigned long long)got->nall, (unsigned long long)ref->nall);
    if (got->nall != ref->nall) return;
    double *r = malloc(ref->nall * sizeof *r);
    for (uint64_t i = 0; i < ref->nall; i++)
        r[i] = ref->all[i];
    size_t bad = vt_compare(what, got->all, r, ref->nall, 2e-4, 2e-3);
    VT_CHECK(t, bad == 0, "%s: %zu tensor elements out of the tolerance", what, bad);
    uint64_t np = (uint64_t)BATCH * outputs;
    for (uint64_t i = 0; i < np; i++)
        r[i] = ref->pred[i];
    bad = vt_compare(what, got->pred, r, np, 2e-4, 2e-3);
    VT_CHECK(t, bad == 0, "%s: %zu predictions out of the tolerance", what, bad);
    free(r);
    double worst_loss = 0;
    for (int i = 0; i < STEPS; i++)
        worst_loss = fmax(worst_loss, fabs(got->loss[i] - ref->loss[i]) / BATCH);
    VT_CHECK(t, worst_loss < 1e-3, "%s: mean losses differ by %g", what, worst_loss);
    double de = fabs(got->eval_loss - ref->eval_loss) / BATCH;
    VT_CHECK(t, de < 1e-3, "%s: evaluation loss differs by %g", what, de);
    VT_CHECK(t, llabs((long long)got->eval_correct - (long long)ref->eval_correct) <= 1,
             "%s: evaluation counted %llu correct, the reference %llu", what,
             (unsigned long long)got->eval_correct, (unsigned long long)ref->eval_correct);
    printf("test_mpi_layers: %s: max |dp| %.2e, max |dloss| %.2e, loss %.4f -> %.4f\n", what,
           worst_diff(got->all, ref->all, ref->nall), worst_loss, got->loss[0] / BATCH,
           got->loss[STEPS - 1] / BATCH);
}

// got has ref's bits.
static void compare_same(vt *t, const char *what, const result *ref, const result *got,
                         uint32_t outputs) {
    bool same = got->nall == ref->nall && memcmp(got->all, ref->all, ref->nall * 4) == 0 &&
                memcmp(got->pred, ref->pred, (size_t)BATCH * outputs * 4) == 0 &&
                memcmp(got->loss, ref->loss, sizeof ref->loss) == 0 &&
                got->eval_loss == ref->eval_loss && got->eval_correct == ref->eval_correct;
    VT_CHECK(t, same, "%s: not the same bits (max |dp| %.3g, loss %.9g against %.9g)", what,
             got->nall == ref->nall ? worst_diff(got->all, ref->all, ref->nall) : -1.0,
             got->loss[STEPS - 1], ref->loss[STEPS - 1]);
    if (same) printf("test_mpi_layers: %s: the same bits\n", what);
}

// What every rank got (losses, evaluation, predictions) is rank 0's.
static void check_ranks_agree(vt *t, vkt_world *w, const char *what, const result *got,
                              uint32_t outputs) {
    size_t np = (size_t)BATCH * outputs;
    size_t bytes = sizeof got->loss + 16 + np * 4;
    unsigned char *mine = malloc(bytes), *zero = malloc(bytes);
    memcpy(mine, got->loss, sizeof got->loss);
    memcpy(mine + sizeof got->loss, &got->eval_loss, 8);
    memcpy(mine + sizeof got->loss + 8, &got->eval_correct, 8);
    memcpy(mine + sizeof got->loss + 16, got->pred, np * 4);
    memcpy(zero, mine, bytes);
    VT_OK(t, vkt_world_bcast(w, zero, bytes, 0, "rank 0's results"));
    VT_CHECK(t, memcmp(zero, mine, bytes) == 0,
             "%s: rank %d's losses, evaluation or predictions are not rank 0's bits (last loss "
             "%.9g)",
             what, vkt_world_rank(w), got->loss[STEPS - 1]);
    free(mine);
    free(zero);
}

// Each device moved its boundaries' activations and gradients (to and from a neighbour on this
// rank or another alike): both ways for every training step, forward for the evaluation and the
// prediction; each row once, in whichever pipeline has it. Over pipelines, also its stage's
// trained gradients to the host and their sums back, every step.
static void check_bytes(vt *t, vkt_strategy *s, const vkt_model_desc *m, int rank, int pipelines) {
    for (int i = 0; i < vkt_strategy_device_count(s); i++) {
        int lo, hi;
        if (!vkt_strategy_stage(s, i, &lo, &hi)) continue;
        uint64_t per_row = 0; // floats a row carries across the stage's boundaries
        if (lo > 0) per_row += m->layers[lo].in_features;
        if (hi < m->nlayers) per_row += m->layers[hi - 1].out_features;
        uint64_t rows = BATCH / (uint64_t)(pipelines > 1 ? pipelines : 1); // BATCH divides
        uint64_t want = (2ull * STEPS + 2) * rows * per_row * 4;
        for (int k = 0; k < vkt_strategy_tensor_count(s) && pipelines > 1; k++) {
            const vkt_net_tensor *tn = vkt_strategy_tensor(s, k);
            if (!tn->state && tn->layer >= lo && tn->layer < hi)
                want += 2ull * STEPS * tn->count * 4;
        }
        vkt_device_stats ds;
        vkt_strategy_stats(s, i, &ds);
        VT_CHECK(t, ds.bytes_moved == want && ds.comm_ns > 0,
                 "rank %d device %d (layers %d to %d): %llu bytes moved, want %llu", rank, i, lo,
                 hi - 1, (unsigned long long)ds.bytes_moved, (unsigned long long)want);
    }
}

// A tensor of the last stage written from every rank (each given the same values) and read back
// at rank 0; over pipelines, every pipeline's copy written.
static void check_write(vt *t, vkt_strategy *s, vkt_world *w, const vkt_model_desc *m,
                        const data *dt, int pipelines) {
    int i = vkt_strategy_tensor_count(s) - 1;
    const vkt_net_tensor *tn = vkt_strategy_tensor(s, i);
    float *v = malloc(tn->count * 4), *back = malloc(tn->count * 4);
    vt_fill_uniform(v, tn->count, 99, -1, 1);
    memset(back, 0, tn->count * 4);
    VT_OK(t, vkt_strategy_write(s, VKT_STORE_PARAM, i, v));
    VT_OK(t, vkt_strategy_read(s, VKT_STORE_PARAM, i, back));
    if (vkt_world_rank(w) == 0)
        VT_CHECK(t, memcmp(v, back, tn->count * 4) == 0,
                 "tensor %s written from every rank did not read back at rank 0", tn->name);
    else
        VT_CHECK(t, back[0] == 0 && back[tn->count - 1] == 0,
                 "vkt_strategy_read filled dst on rank %d (only rank 0's is)", vkt_world_rank(w));
    free(v);
    free(back);
    if (pipelines < 2) return;
    // Every pipeline got the write: a batch whose halves are the same rows predicts the same
    // bits in both (pipeline 0 has the first half, pipeline 1 the second).
    size_t half = (size_t)BATCH / 2 * m->input_features, nout = (size_t)BATCH * m->output_features;
    float *x = malloc(half * 2 * 4), *out = calloc(nout, 4);
    memcpy(x, batch_x(dt, 0), half * 4);
    memcpy(x + half, batch_x(dt, 0), half * 4);
    VT_OK(t, vkt_strategy_predict(s, x, BATCH, out));
    VT_CHECK(t, memcmp(out, out + nout / 2, nout / 2 * 4) == 0,
             "rank %d: after a write of %s, pipeline 1 predicts other bits than pipeline 0 for "
             "the same rows",
             vkt_world_rank(w), tn->name);
    free(x);
    free(out);
}

// What cannot run across ranks is refused on every rank, in words that say why.
static void check_refusals(vt *t, const config *c, const vkt_model_desc *m, vkt_world *w,
                           const char *devices) {
    vkt_strategy_desc d = desc_for(t, c, m, VKT_STRATEGY_LAYERS_TENSOR, w);
    d.tensor_size = 2;
    VT_OK(t, vkt_context_select(t->ctx, devices, d.devices, VKT_MAX_DEVICES, &d.ndevices));
    vkt_strategy *s = NULL;
    vkt_status st = vkt_strategy_create(&d, &s);
    VT_CHECK(t, st == VKT_ERR_ARG && strstr(vkt_error(), "layers,tensor"),
             "layers,tensor across ranks: status %d, %s", (int)st, vkt_error());
    vkt_strategy_destroy(s);
    s = NULL;
    d = desc_for(t, c, m, VKT_STRATEGY_LAYERS, w);
    VT_OK(t, vkt_context_select(t->ctx, devices, d.devices, VKT_MAX_DEVICES, &d.ndevices));
    d.mem_limit = 256 << 10; // fashion_mlp's first dense layer alone is 1.5 MiB of parameters
    st = vkt_strategy_create(&d, &s);
    VT_CHECK(t, st == VKT_ERR_DEVICE_MEMORY && strstr(vkt_error(), "rank "),
             "a model that fits no rank's device: status %d, %s", (int)st, vkt_error());
    if (vkt_world_rank(w) == 0) printf("test_mpi_layers: refused: %s\n", vkt_error());
    vkt_strategy_destroy(s);
    if (c->pipelines < 2) return;
    // Pipelines that do not divide the run's devices, and ones that do not fit.
    s = NULL;
    d.mem_limit = 0;
    d.pipelines = 3;
    st = vkt_strategy_create(&d, &s);
    VT_CHECK(t, st == VKT_ERR_ARG && strstr(vkt_error(), "--pipelines 3"),
             "--pipelines 3 over 4 devices: status %d, %s", (int)st, vkt_error());
    if (vkt_world_rank(w) == 0) printf("test_mpi_layers: refused: %s\n", vkt_error());
    vkt_strategy_destroy(s);
    s = NULL;
    d.pipelines = c->pipelines;
    d.mem_limit = 256 << 10;
    st = vkt_strategy_create(&d, &s);
    VT_CHECK(t,
             st == VKT_ERR_DEVICE_MEMORY && strstr(vkt_error(), "--pipelines") &&
                 strstr(vkt_error(), "rank "),
             "pipelines that fit no rank's device: status %d, %s", (int)st, vkt_error());
    if (vkt_world_rank(w) == 0) printf("test_mpi_layers: refused: %s\n", vkt_error());
    vkt_strategy_destroy(s);
}

// ---------------------------------------------------------------------------------------------
// Under mpirun: one configuration

static int run_rank(const config *c) {
    vt tv, *t = &tv;
    vkt_world *w = NULL;
    double t0 = now_s();
    if (vkt_world_init(NULL, NULL, RANK_TIMEOUT_S, &w) != VKT_OK) {
        fprintf(stderr, "test_mpi_layers: cannot join the MPI job: %s\n", vkt_error());
        return 1;
    }
    int rank = vkt_world_rank(w);
    if (vkt_world_size(w) != c->ranks) {
        fprintf(stderr, "test_mpi_layers: %d ranks, the configuration wants %d\n",
                vkt_world_size(w), c->ranks);
        vkt_world_abort(w, 1);
    }
    if (vt_init(t, "test_mpi_layers")) vkt_world_abort(w, 1);
    vkt_model_desc m;
    char path[512];
    snprintf(path, sizeof path, "%s/assets/models/%s.json", VKT_SOURCE_DIR, c->model);
    VT_OK(t, vkt_model_load(path, &m));
    if (t->failures) vkt_world_abort(w, 1);
    data dt;
    data_make(&dt, m.input_features, m.output_features);

    // The run over every rank's devices.
    result got = {0};
    vkt_strategy_desc d = desc_for(t, c, &m, VKT_STRATEGY_LAYERS, w);
    VT_OK(t, vkt_context_select(t->ctx, c->devices[rank], d.devices, VKT_MAX_DEVICES, &d.ndevices));
    vkt_strategy *s = NULL;
    vkt_status st = t->failures ? VKT_ERR_ARG : vkt_strategy_create(&d, &s);
    VT_CHECK(t, st == VKT_OK, "%s: rank %d: %s", c->name, rank, vkt_error());
    if (st == VKT_OK) {
        int lo, hi;
        for (int i = 0; i < vkt_strategy_device_count(s); i++)
            if (vkt_strategy_stage(s, i, &lo, &hi))
                printf("test_mpi_layers: rank %d device %d: layers %d to %d\n", rank, i, lo,
                       hi - 1);
        double t1 = now_s();
        st = train(s, &m, &dt, &got);
        if (rank == 0)
            printf("test_mpi_layers: %s: set up in %.1f s, trained in %.1f s\n", c->name, t1 - t0,
                   now_s() - t1);
        VT_CHECK(t, st == VKT_OK, "%s: rank %d: %s", c->name, rank, vkt_error());
    }
    if (st != VKT_OK) vkt_world_abort(w, 1); // the others wait for this rank
    check_ranks_agree(t, w, c->name, &got, m.output_features);
    check_bytes(t, s, &m, rank, c->pipelines);
    if (c->extra) check_write(t, s, w, &m, &dt, c->pipelines);
    vkt_strategy_destroy(s);
    if (c->extra) check_refusals(t, c, &m, w, c->devices[rank]);

    // Rank 0: the same training on one device, and as one process over the same devices.
    if (rank == 0) {
        result ref = {0}, here = {0};
        double t1 = now_s();
        VT_OK(t, train_here(t, c, &m, &dt, VKT_STRATEGY_SINGLE, "llvmpipe", &ref));
        VT_CHECK(t, ref.loss[STEPS - 1] < ref.loss[0],
                 "the single-device run did not learn: %g -> %g", ref.loss[0] / BATCH,
                 ref.loss[STEPS - 1] / BATCH);
        if (ref.all) compare_near(t, c->name, &ref, &got, m.output_features);
        char all[256] = "";
        for (int r = 0; r < c->ranks; r++)
            snprintf(all + strlen(all), sizeof all - strlen(all), "%s%s", r ? "," : "",
                     c->devices[r]);
        char what[400];
        snprintf(what, sizeof what, "%s against one process over %s", c->name, all);
        VT_OK(t, train_here(t, c, &m, &dt, VKT_STRATEGY_LAYERS, all, &here));
        // --clip's squared norm is summed on the device by atomic adds in the device's order
        // (shaders/sumsq.comp): its last bits, and so the clipped steps', vary from run to run.
        if (here.all && c->clip > 0) compare_near(t, what, &here, &got, m.output_features);
        if (here.all && c->clip == 0) compare_same(t, what, &here, &got, m.output_features);
        if (here.all && c->pipelines > 1) { // data x pipeline in one process against single
            snprintf(what, sizeof what, "%s, one process over %s", c->name, all);
            compare_near(t, what, &ref, &here, m.output_features);
        }
        printf("test_mpi_layers: %s: the references in %.1f s\n", c->name, now_s() - t1);
        result_free(&ref);
        result_free(&here);
    }
    result_free(&got);
    free(dt.x);
    free(dt.y);
    vkt_model_free(&m);
    int rc = vt_finish(t);
    vkt_world_finalize(w);
    return rc;
}

// ---------------------------------------------------------------------------------------------
// Without mpirun: every configuration under mpirun

int main(int argc, char **argv) {
    if (vt_under_mpirun()) {
        int k = argc > 1 ? atoi(argv[1]) : -1;
        if (k < 0 || k >= NCONFIGS) {
            fprintf(stderr, "test_mpi_layers: under mpirun, give a configuration 0..%d\n",
                    NCONFIGS - 1);
            return 1;
        }
        return run_rank(&configs[k]);
    }
    if (!vkt_world_available()) {
        fprintf(stderr, "test_mpi_layers: FAIL: this vktrain was built without MPI (install "
                        "libopenmpi-dev, as scripts/setup.sh does, and build again)\n");
        return 1;
    }
    int failed = 0;
    double t0 = now_s();
    for (int k = 0; k < NCONFIGS; k++) {
        double t1 = now_s();
        char idx[16];
        snprintf(idx, sizeof idx, "%d", k);
        int rc = vt_mpirun_self("test_mpi_layers", configs[k].ranks, idx, CONFIG_TIMEOUT_S);
        printf("test_mpi_layers: [%s] %s (%.1f s)\n", rc == 0 ? "ok" : "FAIL", configs[k].name,
               now_s() - t1);
        if (rc != 0) {
            fprintf(stderr, "test_mpi_layers: FAIL: %s (mpirun -np %d %s %d exited %d)\n",
                    configs[k].name, configs[k].ranks, argv[0], k, rc);
            failed++;
        }
    }
    printf("test_mpi_layers: %d configurations, %d failed (%.1f s)\n", NCONFIGS, failed,
           now_s() - t0);
    return failed ? 1 : 0;
}
