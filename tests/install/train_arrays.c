// train_arrays.c: a program outside the vktrain tree, built against an installed libvktrain by
// tests/test_install.sh. It trains an MLP (8 features -> dense 16 -> relu -> dense 3) from arrays
// in memory: the model is JSON text given to vkt_model_parse, the data three separable clusters
// made here, the run vkt_train_run on lavapipe with the validation layer on. Exits non-zero,
// saying what it saw, unless the last epoch's loss is below half the first step's, the accuracy
// on held-out samples is at least 0.9, evaluating the checkpoint it saved gives the same accuracy,
// the run left the caller's arrays alone, data that does not fit the model and a missing model
// are refused with a message, and the validation layer reported nothing.
// Args: DEVICE CHECKPOINT (a path to write the trained parameters to).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <vktrain/data.h>
#include <vktrain/model.h>
#include <vktrain/train.h>
#include <vktrain/vktrain.h>

enum { FEATURES = 8, CLASSES = 3, NTRAIN = 384, NTEST = 192 };

static const char *MODEL =
    "{\"name\": \"clusters\", \"input\": [8],"
    " \"layers\": [{\"type\": \"dense\", \"units\": 16}, {\"type\": \"relu\"},"
    "              {\"type\": \"dense\", \"units\": 3}],"
    " \"loss\": \"softmax_cross_entropy\"}";

static uint64_t rng = 0x9E3779B97F4A7C15u;
static float uniform(void) { // in [-1, 1)
    rng = rng * 6364136223846793005u + 1442695040888963407u;
    return (float)((rng >> 40) * (1.0 / (1u << 24))) * 2.0f - 1.0f;
}

// Class c's samples lie around a centre of their own, with noise much smaller than the gaps.
static void make_data(float *x, uint32_t *y, int n, const float centre[CLASSES][FEATURES]) {
    for (int i = 0; i < n; i++) {
        y[i] = (uint32_t)(i % CLASSES);
        for (int f = 0; f < FEATURES; f++)
            x[i * FEATURES + f] = centre[y[i]][f] + 0.4f * uniform();
    }
}

static double first_loss = -1;
static void on_progress(const vkt_progress *p, void *user) {
    (void)user;
    if (!p->epoch_end && p->step == 1) first_loss = p->loss;
    if (p->epoch_end)
        printf("epoch %d: train loss %.4f, test loss %.4f, test accuracy %.3f\n", p->epoch, p->loss,
               p->test_loss, p->test_accuracy);
}

static int fail(const char *what) {
    fprintf(stderr, "train_arrays: %s: %s\n", what, vkt_error());
    return 1;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: train_arrays DEVICE CHECKPOINT\n");
        return 2;
    }
    const char *device = argv[1];
    float centre[CLASSES][FEATURES];
    for (int c = 0; c < CLASSES; c++)
        for (int f = 0; f < FEATURES; f++)
            centre[c][f] = 1.5f * uniform();
    static float xtr[NTRAIN * FEATURES], xte[NTEST * FEATURES], xcopy[NTRAIN * FEATURES];
    static uint32_t ytr[NTRAIN], yte[NTEST];
    make_data(xtr, ytr, NTRAIN, centre);
    make_data(xte, yte, NTEST, centre);
    memcpy(xcopy, xtr, sizeof xtr);

    vkt_model_desc model;
    if (vkt_model_parse(MODEL, "train_arrays.c", &model) != VKT_OK) return fail("model");
    vkt_dataset train, test;
    if (vkt_dataset_from_arrays(xtr, ytr, NTRAIN, FEATURES, CLASSES, &train) != VKT_OK)
        return fail("training set");
    if (vkt_dataset_from_arrays(xte, yte, NTEST, FEATURES, CLASSES, &test) != VKT_OK)
        return fail("test set");

    vkt_context *ctx;
    if (vkt_context_create(&(vkt_context_desc){.validation = 1}, &ctx) != VKT_OK)
        return fail("context");
    vkt_train_opts o = {.model = &model,
                        .train_set = &train,
                        .test_set = &test,
                        .epochs = 8,
                        .batch = 32,
                        .seed = 1,
                        .shuffle = true,
                        .progress = on_progress,
                        .save_path = argv[2]};
    o.optim = vkt_optim_default(VKT_OPTIM_SGD);
    o.optim.lr = 0.1f;
    o.optim.momentum = 0.9f;
    o.strategy.kind = VKT_STRATEGY_SINGLE;
    o.strategy.ctx = ctx;
    o.strategy.micro_batches = 1;
    int rc = 0;
    if (vkt_context_select(ctx, device, o.strategy.devices, 1, &o.strategy.ndevices) != VKT_OK) {
        rc = fail("device");
    } else {
        vkt_train_result r;
        if (vkt_train_run(&o, &r) != VKT_OK) {
            rc = fail("training");
        } else {
            printf("trained on %s: %llu steps, first step's loss %.4f, last epoch's %.4f, "
                   "test accuracy %.3f\n",
                   r.device, (unsigned long long)r.steps, first_loss, r.train_loss,
                   r.test_accuracy);
            if (!(first_loss > 0 && r.train_loss < 0.5 * first_loss)) {
                fprintf(stderr, "train_arrays: the loss did not fall to half: %.4f -> %.4f\n",
                        first_loss, r.train_loss);
                rc = 1;
            }
            if (!(r.test_accuracy >= 0.9)) {
                fprintf(stderr, "train_arrays: test accuracy %.3f < 0.9\n", r.test_accuracy);
                rc = 1;
            }
            if (r.steps != 8 * (NTRAIN / 32)) {
                fprintf(stderr, "train_arrays: %llu steps, expected %d\n",
                        (unsigned long long)r.steps, 8 * (NTRAIN / 32));
                rc = 1;
            }
            // The saved parameters, evaluated on the same in-memory test set.
            vkt_train_opts e = o;
            e.save_path = NULL;
            e.init_path = argv[2];
            vkt_train_result er;
            if (vkt_eval_run(&e, &er) != VKT_OK) {
                rc = fail("evaluating the checkpoint");
            } else if (er.test_accuracy != r.test_accuracy) {
                fprintf(stderr,
                        "train_arrays: the checkpoint evaluates to accuracy %.4f, "
                        "training reported %.4f\n",
                        er.test_accuracy, r.test_accuracy);
                rc = 1;
            }
        }
        // What does not fit is refused before any device work.
        vkt_dataset narrow;
        if (vkt_dataset_from_arrays(xtr, ytr, NTRAIN, FEATURES / 2, CLASSES, &narrow) != VKT_OK)
            return fail("narrow set");
        vkt_train_opts bad = o;
        bad.save_path = NULL;
        bad.train_set = &narrow;
        vkt_train_result br;
        vkt_status s = vkt_train_run(&bad, &br);
        if (s != VKT_ERR_FORMAT || !strstr(vkt_error(), "4 features")) {
            fprintf(stderr, "train_arrays: 4 features for a model of 8 gave %s: %s\n",
                    vkt_status_name(s), vkt_error());
            rc = 1;
        }
        vkt_dataset_free(&narrow);
        bad = o;
        bad.save_path = NULL;
        bad.model = NULL;
        s = vkt_train_run(&bad, &br);
        if (s != VKT_ERR_ARG || !strstr(vkt_error(), "no model")) {
            fprintf(stderr, "train_arrays: no model gave %s: %s\n", vkt_status_name(s),
                    vkt_error());
            rc = 1;
        }
        // A test set alone would train on the files: refused.
        bad = o;
        bad.save_path = NULL;
        bad.train_set = NULL;
        s = vkt_train_run(&bad, &br);
        if (s != VKT_ERR_ARG || !strstr(vkt_error(), "without train_set")) {
            fprintf(stderr, "train_arrays: test_set without train_set gave %s: %s\n",
                    vkt_status_name(s), vkt_error());
            rc = 1;
        }
        // A label the set's classes do not allow, in a set the caller filled in by hand.
        bad = o;
        bad.save_path = NULL;
        vkt_dataset hand = train;
        uint32_t ybad[NTRAIN];
        memcpy(ybad, train.y, sizeof ybad);
        ybad[5] = CLASSES;
        hand.y = ybad;
        bad.train_set = &hand;
        s = vkt_train_run(&bad, &br);
        if (s != VKT_ERR_ARG || !strstr(vkt_error(), "train_set: sample 5")) {
            fprintf(stderr, "train_arrays: a bad label in train_set gave %s: %s\n",
                    vkt_status_name(s), vkt_error());
            rc = 1;
        }
    }
    if (train.n != NTRAIN || memcmp(train.x, xcopy, sizeof xcopy) != 0) {
        fprintf(stderr, "train_arrays: the run changed the caller's training set\n");
        rc = 1;
    }
    uint64_t nval = vkt_context_validation_count(ctx);
    if (!vkt_context_validation_enabled(ctx) || nval != 0) {
        fprintf(stderr, "train_arrays: validation %s, %llu messages\n",
                vkt_context_validation_enabled(ctx) ? "on" : "off", (unsigned long long)nval);
        rc = 1;
    }
    vkt_context_destroy(ctx);
    vkt_dataset_free(&train);
    vkt_dataset_free(&test);
    vkt_model_free(&model);
    if (rc == 0) printf("train_arrays: ok\n");
    return rc;
}
