// train.c (CLI): `vktrain train` and `vktrain eval`. Parses and checks flags into
// vkt_train_opts, prints progress (a bar on a terminal, plain lines otherwise) and the result
// (a JSON object as the last line with --json). The loop itself is engine/run/train.c.
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include <pthread.h>

#include "cli.h"
#include "env.h"
#include "train.h"
#include "viewer.h"

// ---------------------------------------------------------------------------------------------
// Flag values: every number is checked, with a message naming the flag.

bool cli_parse_u64(const char *flag, const char *v, uint64_t min, uint64_t max, uint64_t *out) {
    char *end;
    errno = 0;
    if (!v || !*v || *v == '-') goto bad;
    unsigned long long x = strtoull(v, &end, 10);
    if (errno || *end || x < min || x > max) goto bad;
    *out = x;
    return true;
bad:
    fprintf(stderr, "vktrain: %s wants a whole number from %llu to %llu, not \"%s\"\n", flag,
            (unsigned long long)min, (unsigned long long)max, v ? v : "");
    return false;
}

static bool parse_d(const char *flag, const char *v, double min, double max, double *out) {
    char *end;
    errno = 0;
    if (!v || !*v) goto bad;
    double x = strtod(v, &end);
    if (errno || *end || !isfinite(x) || x < min || x > max) goto bad;
    *out = x;
    return true;
bad:
    fprintf(stderr, "vktrain: %s wants a number from %g to %g, not \"%s\"\n", flag, min, max,
            v ? v : "");
    return false;
}

static bool parse_f(const char *flag, const char *v, double min, double max, float *out) {
    double x;
    if (!parse_d(flag, v, min, max, &x)) return false;
    *out = (float)x;
    return true;
}

// "512M", "2G", "1048576", "1.5GiB" -> bytes.
bool cli_parse_size(const char *flag, const char *v, uint64_t *out) {
    char *end;
    errno = 0;
    double x = v ? strtod(v, &end) : 0;
    if (!v || end == v || errno || !(x > 0)) goto bad;
    double mul = 1;
    if (*end == 'k' || *end == 'K')
        mul = 1024.0, end++;
    else if (*end == 'm' || *end == 'M')
        mul = 1048576.0, end++;
    else if (*end == 'g' || *end == 'G')
        mul = 1073741824.0, end++;
    if (*end == 'i' && end[1] == 'B')
        end += 2;
    else if (*end == 'B')
        end++;
    if (*end) goto bad;
    // From 1 byte to 2^63 - 1 (a larger double does not convert to an integer): nothing is bigger.
    if (!(x * mul >= 1) || !(x * mul < 9223372036854775808.0)) goto bad;
    *out = (uint64_t)(x * mul);
    return true;
bad:
    fprintf(stderr,
            "vktrain: %s wants a size from 1 byte to 8E (like 512M, 2G or 1048576), not \"%s\"\n",
            flag, v ? v : "");
    return false;
}

// ---------------------------------------------------------------------------------------------
// Progress

typedef struct printer {
    bool tty, json, quiet;
    bool show_lr; // a schedule moves the rate: each line says it
} printer;

static void on_progress(const vkt_progress *p, void *user) {
    printer *pr = user;
    if (pr->quiet) return;
    if (p->epoch_end) {
        if (pr->tty) printf("\r\033[K");
        if (p->test_accuracy >= 0)
            printf("epoch %d/%d: train loss %.4f, test loss %.4f, test accuracy %.4f, %.0f "
                   "samples/s\n",
                   p->epoch, p->epochs, p->loss, p->test_loss, p->test_accuracy,
                   p->samples_per_sec);
        else
            printf("epoch %d/%d: train loss %.4f, %.0f samples/s\n", p->epoch, p->epochs, p->loss,
                   p->samples_per_sec);
        fflush(stdout);
        return;
    }
    if (pr->tty) {
        int width = 30, fill = (int)((double)p->batch / p->batches * width);
        char bar[64];
        for (int i = 0; i < width; i++)
            bar[i] = i < fill ? '=' : (i == fill ? '>' : ' ');
        bar[width] = 0;
        int eta = (int)p->eta_sec;
        char lr[40] = "";
        if (pr->show_lr) snprintf(lr, sizeof lr, " lr %.4g", p->lr);
        printf("\r\033[Kepoch %d/%d [%s] %u/%u loss %.4f%s %.0f samples/s ETA %d:%02d", p->epoch,
               p->epochs, bar, p->batch, p->batches, p->loss, lr, p->samples_per_sec, eta / 60,
               eta % 60);
        fflush(stdout);
    } else if (p->batch % (p->batches / 10 ? p->batches / 10 : 1) == 0 ||
               p->batch == p->batches) { // about ten lines an epoch
        char lr[40] = "";
        if (pr->show_lr) snprintf(lr, sizeof lr, " lr %.4g", p->lr);
        printf("epoch %d/%d batch %u/%u step %llu loss %.4f%s %.0f samples/s\n", p->epoch,
               p->epochs, p->batch, p->batches, (unsigned long long)p->step, p->loss, lr,
               p->samples_per_sec);
        fflush(stdout);
    }
}

// ---------------------------------------------------------------------------------------------
// Options shared by train, eval and the other commands that run a model

// --lr-schedule and the flags of its kinds into o->lr (--warmup-steps, --lr-step-size and
// --lr-total-steps are already there). A flag the chosen kind does not read is an error, not
// silently nothing. Returns 0, or 2 after printing why.
static int parse_lr_schedule(vkt_train_opts *o, const char *kind, const char *gamma,
                             const char *min, bool step_size, bool total) {
    o->lr.kind = VKT_LR_CONSTANT;
    o->lr.gamma = 0.1; // torch's StepLR default
    if (kind && !strcmp(kind, "cosine"))
        o->lr.kind = VKT_LR_COSINE;
    else if (kind && !strcmp(kind, "step"))
        o->lr.kind = VKT_LR_STEP;
    else if (kind && strcmp(kind, "constant") != 0) {
        fprintf(stderr, "vktrain: --lr-schedule is constant, cosine or step, not \"%s\"\n", kind);
        return 2;
    }
    const char *name = vkt_lr_kind_name(o->lr.kind);
    if (o->lr.kind != VKT_LR_STEP && (step_size || gamma)) {
        fprintf(stderr, "vktrain: %s applies to --lr-schedule step only (this run's is %s)\n",
                step_size ? "--lr-step-size" : "--lr-gamma", name);
        return 2;
    }
    if (o->lr.kind != VKT_LR_COSINE && (min || total)) {
        fprintf(stderr, "vktrain: %s applies to --lr-schedule cosine only (this run's is %s)\n",
                min ? "--lr-min" : "--lr-total-steps", name);
        return 2;
    }
    if (o->lr.kind == VKT_LR_STEP && !step_size) {
        fprintf(stderr, "vktrain: --lr-schedule step needs --lr-step-size N, the steps between "
                        "two decays of the rate (by --lr-gamma, 0.1 by default)\n");
        return 2;
    }
    if (gamma) {
        if (!parse_d("--lr-gamma", gamma, 0, 1e6, &o->lr.gamma)) return 2;
        if (!(o->lr.gamma > 0)) {
            fprintf(stderr,
                    "vktrain: --lr-gamma must be above 0 (the factor of each decay), "
                    "not \"%s\"\n",
                    gamma);
            return 2;
        }
    }
    if (min && !parse_d("--lr-min", min, 0, 1e6, &o->lr.min_lr)) return 2;
    return 0;
}

// --augment crop,flip | crop | flip | none (each at most once) into o->augment; --augment-pad
// (already there) needs crop. Returns 0, or 2 after printing why.
static int parse_augment(vkt_train_opts *o, const char *list, bool pad_given) {
    if (!pad_given) o->augment.pad = 4; // torchvision's RandomCrop(size, padding=4)
    if (list && strcmp(list, "none") != 0) {
        char buf[64];
        snprintf(buf, sizeof buf, "%s", list);
        bool ok = *list && strlen(list) < sizeof buf;
        for (char *save = NULL, *w = ok ? strtok_r(buf, ",", &save) : NULL; w && ok;
             w = strtok_r(NULL, ",", &save)) {
            bool *which = !strcmp(w, "crop")   ? &o->augment.crop
                          : !strcmp(w, "flip") ? &o->augment.flip
                                               : NULL;
            ok = which && !*which;
            if (ok) *which = true;
        }
        if (!ok || list[strlen(list) - 1] == ',' || list[0] == ',' || strstr(list, ",,")) {
            fprintf(stderr,
                    "vktrain: --augment is crop,flip, crop, flip or none (random crops of the "
                    "zero-padded image and horizontal flips), not \"%s\"\n",
                    list);
            return 2;
        }
    }
    if (pad_given && !o->augment.crop) {
        fprintf(stderr, "vktrain: --augment-pad is the padding of --augment crop, which this run "
                        "does not ask for\n");
        return 2;
    }
    return 0;
}

// --data-text FILE[,FILE...], repeatable: every name into o->text_paths (the strings are kept
// here, for the life of the process). Returns 0, or 2 after printing why.
static int add_text_paths(vkt_train_opts *o, const char *list) {
    enum { MAX_PATHS = 256 };
    static const char *paths[MAX_PATHS];
    size_t n = strlen(list);
    bool bad = n == 0 || list[0] == ',' || list[n - 1] == ',' || strstr(list, ",,");
    char *copy = bad ? NULL : strdup(list);
    if (!copy) {
        fprintf(stderr,
                "vktrain: --data-text wants FILE[,FILE...] (files or directories of text), not "
                "\"%s\"\n",
                list);
        return 2;
    }
    for (char *save = NULL, *w = strtok_r(copy, ",", &save); w; w = strtok_r(NULL, ",", &save)) {
        if (o->ntext == MAX_PATHS) {
            fprintf(stderr,
                    "vktrain: --data-text names more than %d files; name their directory "
                    "instead\n",
                    MAX_PATHS);
            return 2;
        }
        paths[o->ntext++] = w; // copy stays allocated: the names point into it
    }
    o->text_paths = paths;
    return 0;
}

static const char *default_model(void) {
    static const char *rel = "assets/models/fashion_mlp.json";
    if (access(rel, R_OK) == 0) return rel;
    return VKT_ASSET_DIR "/models/fashion_mlp.json";
}

int cli_parse_run_options(int argc, char **argv, cli_run_options *c) {
    vkt_train_opts *o = &c->o;
    memset(c, 0, sizeof *c);
    o->model_path = default_model();
    o->epochs = 3;
    o->batch = 128;
    o->seed = 1;
    o->shuffle = true;
    o->strategy.kind = VKT_STRATEGY_SINGLE;
    o->strategy.micro_batches = 1;
    const char *optim = "sgd";
    const char *lr = NULL, *momentum = NULL, *wd = NULL, *clip = NULL, *beta1 = NULL, *beta2 = NULL,
               *eps = NULL;
    const char *strategy = NULL, *balance = NULL, *split = NULL, *schedule = NULL;
    const char *lr_schedule = NULL, *lr_gamma = NULL, *lr_min = NULL;
    bool lr_step_size = false, lr_total = false, pad_given = false;
    const char *augment = NULL;
    uint64_t u;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
#define TAKES_VALUE                                                                                \
    do {                                                                                           \
        if (!v) {                                                                                  \
            fprintf(stderr, "vktrain: %s needs a value\n", a);                                     \
            return 2;                                                                              \
        }                                                                                          \
        i++;                                                                                       \
    } while (0)
        if (!strcmp(a, "--model")) {
            TAKES_VALUE;
            o->model_path = v;
        } else if (!strcmp(a, "--data")) {
            TAKES_VALUE;
            o->data_dir = v;
        } else if (!strcmp(a, "--data-npy")) {
            TAKES_VALUE;
            static char buf[8192];
            snprintf(buf, sizeof buf, "%s", v);
            char *comma = strchr(buf, ',');
            if (!comma || !comma[1] || comma == buf) {
                fprintf(stderr, "vktrain: --data-npy wants X.npy,Y.npy, not \"%s\"\n", v);
                return 2;
            }
            *comma = 0;
            o->npy_x = buf;
            o->npy_y = comma + 1;
        } else if (!strcmp(a, "--data-text")) {
            TAKES_VALUE;
            if (add_text_paths(o, v)) return 2;
        } else if (!strcmp(a, "--limit-train")) {
            TAKES_VALUE;
            if (!cli_parse_u64(a, v, 1, UINT32_MAX, &u)) return 2;
            o->limit_train = (uint32_t)u;
        } else if (!strcmp(a, "--limit-test")) {
            TAKES_VALUE;
            if (!cli_parse_u64(a, v, 1, UINT32_MAX, &u)) return 2;
            o->limit_test = (uint32_t)u;
        } else if (!strcmp(a, "--epochs")) {
            TAKES_VALUE;
            if (!cli_parse_u64(a, v, 1, 1000000, &u)) return 2;
            o->epochs = (int)u;
        } else if (!strcmp(a, "--batch")) {
            TAKES_VALUE;
            if (!cli_parse_u64(a, v, 1, 1 << 20, &u)) return 2;
            o->batch = (uint32_t)u;
        } else if (!strcmp(a, "--max-steps")) {
            TAKES_VALUE;
            if (!cli_parse_u64(a, v, 1, UINT64_MAX >> 1, &u)) return 2;
            o->max_steps = u;
        } else if (!strcmp(a, "--seed")) {
            TAKES_VALUE;
            if (!cli_parse_u64(a, v, 0, UINT64_MAX >> 1, &u)) return 2;
            o->seed = u;
        } else if (!strcmp(a, "--optimizer")) {
            TAKES_VALUE;
            optim = v;
        } else if (!strcmp(a, "--lr")) {
            TAKES_VALUE;
            lr = v;
        } else if (!strcmp(a, "--lr-schedule")) {
            TAKES_VALUE;
            lr_schedule = v;
        } else if (!strcmp(a, "--warmup-steps")) {
            TAKES_VALUE;
            if (!cli_parse_u64(a, v, 0, UINT64_MAX >> 1, &o->lr.warmup)) return 2;
        } else if (!strcmp(a, "--lr-step-size")) {
            TAKES_VALUE;
            if (!cli_parse_u64(a, v, 1, UINT64_MAX >> 1, &o->lr.step_size)) return 2;
            lr_step_size = true;
        } else if (!strcmp(a, "--lr-gamma")) {
            TAKES_VALUE;
            lr_gamma = v;
        } else if (!strcmp(a, "--lr-min")) {
            TAKES_VALUE;
            lr_min = v;
        } else if (!strcmp(a, "--lr-total-steps")) {
            TAKES_VALUE;
            if (!cli_parse_u64(a, v, 1, UINT64_MAX >> 1, &o->lr.total_steps)) return 2;
            lr_total = true;
        } else if (!strcmp(a, "--momentum")) {
            TAKES_VALUE;
            momentum = v;
        } else if (!strcmp(a, "--nesterov")) {
            c->nesterov = true;
        } else if (!strcmp(a, "--weight-decay")) {
            TAKES_VALUE;
            wd = v;
        } else if (!strcmp(a, "--beta1")) {
            TAKES_VALUE;
            beta1 = v;
        } else if (!strcmp(a, "--beta2")) {
            TAKES_VALUE;
            beta2 = v;
        } else if (!strcmp(a, "--eps")) {
            TAKES_VALUE;
            eps = v;
        } else if (!strcmp(a, "--clip")) {
            TAKES_VALUE;
            clip = v;
        } else if (!strcmp(a, "--augment")) {
            TAKES_VALUE;
            augment = v;
        } else if (!strcmp(a, "--augment-pad")) {
            TAKES_VALUE;
            if (!cli_parse_u64(a, v, 1, 65535, &u)) return 2;
            o->augment.pad = (uint32_t)u;
            pad_given = true;
        } else if (!strcmp(a, "--no-shuffle")) {
            o->shuffle = false;
        } else if (!strcmp(a, "--device")) {
            TAKES_VALUE;
            c->device_spec = v;
        } else if (!strcmp(a, "--device-per-rank")) {
            TAKES_VALUE;
            c->device_per_rank = v;
        } else if (!strcmp(a, "--rank-timeout")) {
            TAKES_VALUE;
            char *end;
            c->rank_timeout = strtod(v, &end);
            if (*end || !(c->rank_timeout > 0) || c->rank_timeout > 1e6) {
                fprintf(stderr, "vktrain: --rank-timeout takes seconds above 0, not \"%s\"\n", v);
                return 2;
            }
        } else if (!strcmp(a, "--strategy")) {
            TAKES_VALUE;
            strategy = v;
        } else if (!strcmp(a, "--balance")) {
            TAKES_VALUE;
            balance = v;
        } else if (!strcmp(a, "--split")) {
            TAKES_VALUE;
            split = v;
        } else if (!strcmp(a, "--micro-batches")) {
            TAKES_VALUE;
            if (!cli_parse_u64(a, v, 1, 4096, &u)) return 2;
            o->strategy.micro_batches = (int)u;
        } else if (!strcmp(a, "--pipelines")) {
            TAKES_VALUE;
            if (!cli_parse_u64(a, v, 1, VKT_MAX_DEVICES, &u)) return 2;
            o->strategy.pipelines = (int)u;
        } else if (!strcmp(a, "--schedule")) {
            TAKES_VALUE;
            schedule = v;
        } else if (!strcmp(a, "--tensor-size")) {
            TAKES_VALUE;
            if (!cli_parse_u64(a, v, 2, VKT_MAX_DEVICES, &u)) return 2;
            o->strategy.tensor_size = (int)u;
        } else if (!strcmp(a, "--shard-optimizer")) {
            o->strategy.shard_optimizer = true;
        } else if (!strcmp(a, "--mem-limit")) {
            TAKES_VALUE;
            if (!cli_parse_size(a, v, &o->strategy.mem_limit)) return 2;
        } else if (!strcmp(a, "--metrics")) {
            TAKES_VALUE;
            o->metrics_path = v;
        } else if (!strcmp(a, "--save")) {
            TAKES_VALUE;
            o->save_path = v;
        } else if (!strcmp(a, "--save-every")) {
            TAKES_VALUE;
            if (!cli_parse_u64(a, v, 1, UINT64_MAX / 2, &o->save_every)) return 2;
        } else if (!strcmp(a, "--init")) {
            TAKES_VALUE;
            o->init_path = v;
        } else if (!strcmp(a, "--resume")) {
            TAKES_VALUE;
            o->resume_path = v;
        } else if (!strcmp(a, "--trace")) {
            TAKES_VALUE;
            c->trace_path = v;
        } else if (!strcmp(a, "--json")) {
            c->json = true;
        } else if (!strcmp(a, "--quiet")) {
            c->quiet = true;
        } else if (!strcmp(a, "--view")) {
            c->view = true;
        } else if (!strcmp(a, "--view-device")) {
            TAKES_VALUE;
            c->view_device = v;
        } else if (!strcmp(a, "--exit-after")) {
            TAKES_VALUE;
            float f;
            if (!parse_f(a, v, 0, 1e9, &f)) return 2;
            c->exit_after = f;
        } else if (!strcmp(a, "--no-eval")) {
            o->skip_eval = true;
        } else {
            fprintf(stderr, "vktrain: unknown option %s (vktrain --help lists them)\n", a);
            return 2;
        }
#undef TAKES_VALUE
    }
    if (!strcmp(optim, "sgd")) {
        o->optim = vkt_optim_default(VKT_OPTIM_SGD);
        o->optim.lr = 0.05f; // vktrain's defaults for SGD: lr 0.05, momentum 0.9
        o->optim.momentum = 0.9f;
    } else if (!strcmp(optim, "adamw")) {
        o->optim = vkt_optim_default(VKT_OPTIM_ADAMW);
    } else {
        fprintf(stderr, "vktrain: --optimizer is sgd or adamw, not \"%s\"\n", optim);
        return 2;
    }
    o->optim.nesterov = c->nesterov;
    if (lr && !parse_f("--lr", lr, 1e-12, 1e6, &o->optim.lr)) return 2;
    if (momentum && !parse_f("--momentum", momentum, 0, 0.999999, &o->optim.momentum)) return 2;
    if (wd && !parse_f("--weight-decay", wd, 0, 1e3, &o->optim.weight_decay)) return 2;
    if (beta1 && !parse_f("--beta1", beta1, 0, 0.999999, &o->optim.beta1)) return 2;
    if (beta2 && !parse_f("--beta2", beta2, 0, 0.999999, &o->optim.beta2)) return 2;
    if (eps && !parse_f("--eps", eps, 1e-30, 1, &o->optim.eps)) return 2;
    if (clip && !parse_f("--clip", clip, 1e-9, 1e9, &o->optim.clip)) return 2;
    if (parse_lr_schedule(o, lr_schedule, lr_gamma, lr_min, lr_step_size, lr_total)) return 2;
    if (parse_augment(o, augment, pad_given)) return 2;
    if (c->nesterov && (o->optim.kind != VKT_OPTIM_SGD || o->optim.momentum == 0)) {
        fprintf(stderr, "vktrain: --nesterov needs --optimizer sgd with a non-zero --momentum\n");
        return 2;
    }
    if (strategy) {
        if (!strcmp(strategy, "single"))
            o->strategy.kind = VKT_STRATEGY_SINGLE;
        else if (!strcmp(strategy, "replicated"))
            o->strategy.kind = VKT_STRATEGY_REPLICATED;
        else if (!strcmp(strategy, "layers"))
            o->strategy.kind = VKT_STRATEGY_LAYERS;
        else if (!strcmp(strategy, "tensor"))
            o->strategy.kind = VKT_STRATEGY_TENSOR;
        else if (!strcmp(strategy, "layers,tensor"))
            o->strategy.kind = VKT_STRATEGY_LAYERS_TENSOR;
        else if (!strcmp(strategy, "replicated,tensor"))
            o->strategy.kind = VKT_STRATEGY_REPLICATED_TENSOR;
        else {
            fprintf(stderr,
                    "vktrain: --strategy is single, replicated, layers, tensor, layers,tensor or "
                    "replicated,tensor, not \"%s\"\n",
                    strategy);
            return 2;
        }
        if ((o->strategy.kind == VKT_STRATEGY_LAYERS_TENSOR ||
             o->strategy.kind == VKT_STRATEGY_REPLICATED_TENSOR) &&
            !o->strategy.tensor_size)
            o->strategy.tensor_size = 2;
        c->strategy_given = true;
    }
    if (schedule) {
        if (!strcmp(schedule, "gpipe"))
            o->strategy.schedule = VKT_SCHEDULE_GPIPE;
        else if (!strcmp(schedule, "1f1b"))
            o->strategy.schedule = VKT_SCHEDULE_1F1B;
        else {
            fprintf(stderr, "vktrain: --schedule is gpipe or 1f1b, not \"%s\"\n", schedule);
            return 2;
        }
    }
    if (o->strategy.tensor_size && o->strategy.kind != VKT_STRATEGY_LAYERS_TENSOR &&
        o->strategy.kind != VKT_STRATEGY_REPLICATED_TENSOR) {
        fprintf(stderr, "vktrain: --tensor-size gives the devices per stage of --strategy "
                        "layers,tensor or per replica of replicated,tensor\n");
        return 2;
    }
    c->balance = balance;
    c->split = split;
    return 0;
}

// Parses "3,1" / "2,2,1" into n numbers; false with a message when malformed.
static bool parse_list(const char *flag, const char *v, int want, float *out) {
    const char *p = v;
    for (int i = 0; i < want; i++) {
        char *end;
        errno = 0;
        double x = strtod(p, &end);
        if (end == p || errno || !isfinite(x) || x < 0 || x > 1e30 ||
            (i < want - 1 && *end != ',') || (i == want - 1 && *end)) {
            fprintf(stderr,
                    "vktrain: %s wants %d comma-separated non-negative numbers (one per "
                    "device), not \"%s\"\n",
                    flag, want, v);
            return false;
        }
        out[i] = (float)x;
        p = end + 1;
    }
    return true;
}

int cli_open(int argc, char **argv, cli_run_options *c, vkt_context **ctx) {
    *ctx = NULL;
    int rc = cli_parse_run_options(argc, argv, c);
    if (rc == 0) rc = cli_resolve_devices(c, ctx);
    if (rc) {
        vkt_context_destroy(*ctx);
        *ctx = NULL;
    }
    return rc;
}

// --device-per-rank A,B,...: this rank's entry (one per rank; devices of one rank joined by '+',
// "llvmpipe+llvmpipe") as a --device list.
static bool rank_devices(const cli_run_options *c, char *spec, size_t size) {
    int rank = c->world ? vkt_world_rank(c->world) : 0,
        ranks = c->world ? vkt_world_size(c->world) : 1;
    if (c->device_spec) {
        fprintf(stderr, "vktrain: give --device or --device-per-rank, not both\n");
        return false;
    }
    const char *p = c->device_per_rank;
    int n = 1;
    for (const char *q = p; *q; q++)
        n += *q == ',';
    if (n != ranks) {
        fprintf(stderr,
                "vktrain: --device-per-rank \"%s\" names %d rank%s and the run has %d (mpirun "
                "-np): one entry per rank, a rank's devices joined by '+'\n",
                p, n, n == 1 ? "" : "s", ranks);
        return false;
    }
    for (int r = 0; r < rank; r++)
        p = strchr(p, ',') + 1;
    size_t len = strcspn(p, ",");
    if (len == 0 || len >= size) {
        fprintf(stderr, "vktrain: --device-per-rank: rank %d's entry is %s\n", rank,
                len ? "too long" : "empty");
        return false;
    }
    for (size_t i = 0; i < len; i++)
        spec[i] = p[i] == '+' ? ',' : p[i];
    spec[len] = '\0';
    return true;
}

// Opens the context, resolves --device and the strategy's per-device options.
int cli_resolve_devices(cli_run_options *c, vkt_context **ctx) {
    vkt_strategy_desc *sd = &c->o.strategy;
    if (cli_open_context(c->world, ctx) != VKT_OK) return cli_fail(vkt_error());
    char spec[1024];
    const char *device_spec = c->device_spec;
    if (c->device_per_rank && !rank_devices(c, spec, sizeof spec)) return 2;
    if (c->device_per_rank) device_spec = spec;
    if (vkt_context_select(*ctx, device_spec, sd->devices, VKT_MAX_DEVICES, &sd->ndevices) !=
        VKT_OK)
        return cli_fail(vkt_error());
    sd->ctx = *ctx;
    sd->world = c->world;
    bool ranks = c->world && vkt_world_size(c->world) > 1;
    if (!c->strategy_given && (sd->ndevices > 1 || ranks)) sd->kind = VKT_STRATEGY_REPLICATED;
    if (sd->kind == VKT_STRATEGY_SINGLE && sd->ndevices > 1) {
        fprintf(stderr,
                "vktrain: --strategy single runs on one device, and --device lists %d; use "
                "--strategy replicated, layers or tensor\n",
                sd->ndevices);
        return 2;
    }
    if (sd->shard_optimizer && sd->kind != VKT_STRATEGY_REPLICATED) {
        fprintf(stderr,
                "vktrain: --shard-optimizer applies to --strategy replicated (each of several "
                "devices keeps the optimizer state of its shard of the parameters), not to "
                "--strategy %s\n",
                vkt_strategy_name(sd->kind));
        return 2;
    }
    if (c->balance && strcmp(c->balance, "equal") != 0 && strcmp(c->balance, "auto") != 0) {
        if (!parse_list("--balance", c->balance, sd->ndevices, sd->balance)) return 2;
        float sum = 0;
        for (int i = 0; i < sd->ndevices; i++)
            sum += sd->balance[i];
        if (!(sum > 0)) {
            fprintf(stderr, "vktrain: --balance needs at least one positive share\n");
            return 2;
        }
    } else if (c->balance && !strcmp(c->balance, "auto")) {
        for (int i = 0; i < sd->ndevices; i++)
            sd->balance[i] = -1; // measured at start
    }
    if (c->split && strcmp(c->split, "auto") != 0) {
        float f[VKT_MAX_DEVICES];
        // One count per stage (layers,tensor: per group of --tensor-size devices).
        int nstages = sd->kind == VKT_STRATEGY_LAYERS_TENSOR && sd->tensor_size > 1
                          ? sd->ndevices / sd->tensor_size
                          : sd->ndevices;
        if (c->world && vkt_world_size(c->world) > 1) { // the stages of every rank
            nstages = 1;
            for (const char *q = c->split; *q; q++)
                nstages += *q == ',';
            if (nstages > VKT_MAX_DEVICES) nstages = VKT_MAX_DEVICES;
        }
        if (!parse_list("--split", c->split, nstages, f)) return 2;
        for (int i = 0; i < nstages; i++) {
            if (f[i] < 1 || f[i] != floorf(f[i])) {
                fprintf(stderr,
                        "vktrain: --split gives each device a whole number of layers (at "
                        "least 1), not \"%s\"\n",
                        c->split);
                return 2;
            }
            sd->split[i] = (int)f[i];
        }
    }
    return 0;
}

// What the tuning of the first step found: "cold" (it measured), "warm" (every choice came
// from stored measurements), "none" (no product had a choice to make).
static const char *tuning_cache(const vkt_first_step *f) {
    return f->shapes_measured ? "cold" : f->choices_cached ? "warm" : "none";
}

// The time to the first step (cli.h).
void cli_print_first_step(const vkt_first_step *f, double context_s, const char *indent,
                          const char *later_name) {
    char cache[160];
    if (f->shapes_measured)
        snprintf(cache, sizeof cache, "cold cache: tuning measured %llu shapes (%llu timings)",
                 (unsigned long long)f->shapes_measured, (unsigned long long)f->variants_measured);
    else if (f->choices_cached)
        snprintf(cache, sizeof cache, "warm cache: all %llu matmul choices from the cache",
                 (unsigned long long)f->choices_cached);
    else
        snprintf(cache, sizeof cache, "no matmul variant to choose");
    char later[64] = "";
    if (f->later_step_seconds > 0)
        snprintf(later, sizeof later, " (%s %.3f s)", later_name, f->later_step_seconds);
    char ahead[192] = "";
    if (f->ahead_stopped)
        snprintf(ahead, sizeof ahead,
                 ", %llu compiled ahead, then none: Mesa's shader cache keeps nothing here "
                 "(MESA_SHADER_CACHE_DISABLE, or a directory it cannot write)",
                 (unsigned long long)f->kernels_ahead);
    else if (f->kernels_ahead)
        snprintf(ahead, sizeof ahead, ", %llu compiled ahead",
                 (unsigned long long)f->kernels_ahead);
    printf("%sfirst step after %.2f s (%s): context %.2f s, data %.2f s, setup %.2f s, kernel "
           "builds %.2f s (%llu pipelines%s), tuning %.2f s, the step %.3f s%s\n",
           indent, context_s + f->first_step_seconds, cache, context_s, f->data_seconds,
           f->setup_seconds, f->kernel_build_seconds, (unsigned long long)f->kernels_built, ahead,
           f->tuning_seconds, f->step_seconds, later);
}

// The same in JSON (cli.h).
void cli_add_first_step(cJSON *o, const vkt_first_step *f, double context_s) {
    cJSON_AddNumberToObject(o, "first_step_seconds", context_s + f->first_step_seconds);
    cJSON *j = cJSON_AddObjectToObject(o, "first_step");
    cJSON_AddNumberToObject(j, "context_seconds", context_s);
    cJSON_AddNumberToObject(j, "data_seconds", f->data_seconds);
    cJSON_AddNumberToObject(j, "setup_seconds", f->setup_seconds);
    cJSON_AddNumberToObject(j, "kernel_build_seconds", f->kernel_build_seconds);
    cJSON_AddNumberToObject(j, "tuning_seconds", f->tuning_seconds);
    cJSON_AddNumberToObject(j, "step_seconds", f->step_seconds);
    cJSON_AddNumberToObject(j, "later_step_seconds", f->later_step_seconds);
    cJSON_AddNumberToObject(j, "kernels_built", (double)f->kernels_built);
    cJSON_AddNumberToObject(j, "kernels_compiled_ahead", (double)f->kernels_ahead);
    cJSON_AddNumberToObject(j, "compile_ahead_stopped", (double)f->ahead_stopped);
    cJSON_AddNumberToObject(j, "tuning_shapes_measured", (double)f->shapes_measured);
    cJSON_AddNumberToObject(j, "tuning_variants_measured", (double)f->variants_measured);
    cJSON_AddNumberToObject(j, "tuning_choices_cached", (double)f->choices_cached);
    cJSON_AddStringToObject(j, "tuning_cache", tuning_cache(f));
}

// context_s < 0: no first step to report (eval).
static void print_json(const vkt_train_result *r, const char *kind, double context_s) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "command", kind);
    if (context_s >= 0 && r->first_step.start_ns) cli_add_first_step(o, &r->first_step, context_s);
    if (r->test_accuracy >= 0)
        cJSON_AddNumberToObject(o, "test_accuracy", r->test_accuracy);
    else
        cJSON_AddNullToObject(o, "test_accuracy");
    cJSON_AddNumberToObject(o, "test_loss", r->test_loss);
    cJSON_AddNumberToObject(o, "train_loss", r->train_loss);
    cJSON_AddNumberToObject(o, "samples_per_sec", r->samples_per_sec);
    cJSON_AddNumberToObject(o, "epochs", r->epochs);
    cJSON_AddNumberToObject(o, "steps", (double)r->steps);
    cJSON_AddNumberToObject(o, "train_seconds", r->train_seconds);
    cJSON_AddStringToObject(o, "device", r->device);
    cJSON_AddStringToObject(o, "strategy", r->strategy);
    cJSON_AddNumberToObject(o, "ranks", r->ranks > 0 ? r->ranks : 1);
    cJSON *devs = cJSON_AddArrayToObject(o, "devices");
    for (int i = 0; i < r->ndevices; i++) {
        const vkt_device_stats *d = &r->devices[i];
        cJSON *j = cJSON_CreateObject();
        cJSON_AddStringToObject(j, "device", d->label);
        double busy = d->wall_ns > 0 ? d->busy_ns / d->wall_ns : 0;
        if (busy > 1) busy = 1;
        cJSON_AddNumberToObject(j, "busy_fraction", busy);
        cJSON_AddNumberToObject(j, "idle_fraction", d->wall_ns > 0 ? 1 - busy : 0);
        cJSON_AddNumberToObject(j, "compute_seconds", (d->busy_ns - d->gpu_comm_ns) * 1e-9);
        cJSON_AddNumberToObject(j, "communication_seconds", d->comm_ns * 1e-9);
        cJSON_AddNumberToObject(j, "communication_hidden_seconds", d->comm_hidden_ns * 1e-9);
        cJSON_AddNumberToObject(j, "matmul_seconds", d->matmul_ns * 1e-9);
        cJSON_AddNumberToObject(j, "attention_seconds", d->attention_ns * 1e-9);
        cJSON_AddNumberToObject(j, "waiting_seconds", d->wait_ns * 1e-9);
        cJSON_AddNumberToObject(j, "bytes_moved", (double)d->bytes_moved);
        cJSON_AddNumberToObject(j, "peak_memory_bytes", (double)d->peak_memory);
        cJSON_AddNumberToObject(j, "memory_limit_bytes", (double)d->memory_limit);
        cJSON_AddItemToArray(devs, j);
    }
    char *s = cJSON_PrintUnformatted(o);
    printf("%s\n", s);
    cJSON_free(s);
    cJSON_Delete(o);
}

static void print_devices(const vkt_train_result *r) {
    for (int i = 0; i < r->ndevices; i++) {
        const vkt_device_stats *d = &r->devices[i];
        double busy = d->wall_ns > 0 ? d->busy_ns / d->wall_ns : 0;
        if (busy > 1) busy = 1;
        printf(
            "  %s: busy %.1f%%, idle %.1f%%, communication %.3f s, waiting %.3f s, moved %.1f MiB, "
            "peak memory %.1f MiB of %.1f MiB\n",
            d->label, 100 * busy, 100 * (1 - busy), d->comm_ns * 1e-9, d->wait_ns * 1e-9,
            d->bytes_moved / 1048576.0, d->peak_memory / 1048576.0, d->memory_limit / 1048576.0);
    }
}

// ---------------------------------------------------------------------------------------------
// train --view: the run on a worker thread, the viewer on this one (GLFW wants the main thread).
// The trainer only appends to the trace; the viewer copies what is new when it redraws, so the
// trainer never waits for it. Closing the window does not stop the training.

typedef struct train_job {
    cli_run_options *c;
    vkt_train_result *r;
    vkt_status status;
    char error[1024];
} train_job;

static void *train_thread(void *p) {
    train_job *j = p;
    j->status = vkt_train_run(&j->c->o, j->r);
    if (j->status != VKT_OK) snprintf(j->error, sizeof j->error, "%s", vkt_error());
    return NULL;
}

vkt_status cli_train_with_viewer(cli_run_options *c, vkt_train_result *r) {
    cli_env env;
    vkt_status st = cli_env_read(&env);
    if (st != VKT_OK) return st;
    train_job job = {.c = c, .r = r};
    pthread_t th;
    if (pthread_create(&th, NULL, train_thread, &job) != 0)
        return vkt_train_run(&c->o, r); // no thread: train without the window
    char title[600];
    snprintf(title, sizeof title, "train %s", c->o.model_path);
    vkt_viewer_opts vo = {.device_spec = c->view_device,
                          .source = title,
                          .live = true,
                          .exit_after_s = c->exit_after,
                          .validation = env.context.validation,
                          .font_path = env.font};
    if (vkt_viewer_run(c->o.trace, &vo) != VKT_OK)
        fprintf(stderr, "vktrain: the viewer stopped (%s); training goes on\n", vkt_error());
    pthread_join(th, NULL);
    if (job.status != VKT_OK) return vkt_set_error(job.status, job.error);
    return VKT_OK;
}

// SIGINT / SIGTERM: the run stops after the step in flight, saves where it stands (with --save)
// and says so; a second signal of either kind ends the process at once (the default action:
// SA_RESETHAND restores it for the signal received, the handler for the other one).
static volatile sig_atomic_t g_stop_signal;
static void on_stop_signal(int sig) {
    g_stop_signal = sig;
    struct sigaction dfl = {.sa_handler = SIG_DFL};
    sigemptyset(&dfl.sa_mask);
    sigaction(sig == SIGINT ? SIGTERM : SIGINT, &dfl, NULL); // async-signal-safe
}
static bool stop_requested(void *user) {
    (void)user;
    return g_stop_signal != 0;
}

// Under mpirun: joins the job; every rank but 0 is quiet (rank 0 prints the run's progress and
// result). Returns 0 or the exit status.
static int join_world(cli_run_options *c) {
    if (c->device_per_rank && !cli_env_under_mpirun()) {
        fprintf(stderr, "vktrain: --device-per-rank is for runs started by mpirun (mpirun -np N "
                        "vktrain train ...); use --device here\n");
        return 2;
    }
    if (!cli_env_under_mpirun()) return 0;
    if (vkt_world_init(NULL, NULL, c->rank_timeout > 0 ? c->rank_timeout : 60, &c->world) != VKT_OK)
        return cli_fail(vkt_error());
    if (vkt_world_size(c->world) > 1 && c->view) {
        fprintf(stderr, "vktrain: --view shows one process's devices; under mpirun write --trace "
                        "FILE (every rank's devices) and open it with vktrain view FILE\n");
        return 2;
    }
    if (vkt_world_rank(c->world) != 0) c->quiet = true, c->json = false;
    return 0;
}

// A failure on one rank ends the job: the other ranks may be waiting for this one.
static int world_end(cli_run_options *c, int rc) {
    if (!c->world) return rc;
    if (rc != 0 && vkt_world_size(c->world) > 1) vkt_world_abort(c->world, rc);
    vkt_world_finalize(c->world);
    c->world = NULL;
    return rc;
}

int cmd_train(int argc, char **argv) {
    int64_t cli_start = vkt_trace_now_ns(); // the context's opening counts to the first step
    cli_run_options c;
    vkt_context *ctx = NULL;
    int rc = cli_parse_run_options(argc, argv, &c);
    if (rc) return rc;
    if ((rc = join_world(&c)) != 0) return world_end(&c, rc);
    if ((rc = cli_resolve_devices(&c, &ctx)) != 0) {
        vkt_context_destroy(ctx);
        return world_end(&c, rc);
    }
    printer pr = {.tty = isatty(STDOUT_FILENO),
                  .json = c.json,
                  .quiet = c.quiet,
                  .show_lr = c.o.lr.kind != VKT_LR_CONSTANT || c.o.lr.warmup > 0};
    c.o.progress = on_progress;
    c.o.progress_user = &pr;
    c.o.should_stop = stop_requested;
    struct sigaction sa = {.sa_handler = on_stop_signal, .sa_flags = SA_RESETHAND};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    vkt_trace *trace = NULL;
    if (c.trace_path || c.view) {
        if (vkt_trace_create(&trace) != VKT_OK) {
            vkt_context_destroy(ctx);
            return cli_fail(vkt_error());
        }
        c.o.trace = trace;
    }
    vkt_train_result r;
    vkt_status st;
    if (c.view)
        st = cli_train_with_viewer(&c, &r);
    else
        st = vkt_train_run(&c.o, &r);
    rc = 0;
    if (st != VKT_OK) {
        if (c.world && vkt_world_size(c.world) > 1) {
            char msg[2048];
            snprintf(msg, sizeof msg, "rank %d (%s): %s", vkt_world_rank(c.world),
                     vkt_world_where(c.world), vkt_error());
            rc = cli_fail(msg);
        } else {
            rc = cli_fail(vkt_error());
        }
    }
    // Every rank's timeline into rank 0's trace (collective), which rank 0 writes.
    if (rc == 0 && trace && c.trace_path && r.steps > 0 && c.world &&
        vkt_trace_gather_world(trace, c.world) != VKT_OK)
        rc = cli_fail(vkt_error());
    if (rc == 0 && trace && c.trace_path && r.steps > 0 &&
        (!c.world || vkt_world_rank(c.world) == 0)) {
        if (vkt_trace_write(trace, c.trace_path) != VKT_OK) rc = cli_fail(vkt_error());
    }
    if (rc == 0) {
        char ranks[64] = "";
        if (r.ranks > 1) snprintf(ranks, sizeof ranks, " over %d ranks, rank 0's devices", r.ranks);
        if (!c.quiet)
            printf("trained %s on %s (%s%s%s): %d epochs, %llu steps, %.0f samples/s\n",
                   c.o.model_path, r.device, r.strategy,
                   c.o.strategy.shard_optimizer ? ", optimizer state sharded" : "", ranks, r.epochs,
                   (unsigned long long)r.steps, r.samples_per_sec);
        double context_s = r.first_step.start_ns ? (r.first_step.start_ns - cli_start) * 1e-9 : 0;
        if (!c.quiet && r.first_step.start_ns)
            cli_print_first_step(&r.first_step, context_s, "", "later steps");
        if (!c.quiet && r.ndevices > 1) print_devices(&r);
        if (c.json) print_json(&r, "train", context_s);
    }
    if (rc == 0 && r.interrupted) {
        int sig = (int)g_stop_signal;
        fprintf(stderr, "vktrain: stopped by %s after step %llu%s%s%s\n",
                sig == SIGTERM ? "SIGTERM" : "SIGINT", (unsigned long long)r.steps,
                c.o.save_path ? "; the checkpoint of that step is " : " (no --save: nothing kept)",
                c.o.save_path ? r.checkpoint : "",
                c.o.save_path ? ": continue with --resume and the same options" : "");
        rc = 128 + sig;
    }
    vkt_trace_destroy(trace);
    vkt_context_destroy(ctx);
    return world_end(&c, rc);
}

int cmd_eval(int argc, char **argv) {
    cli_run_options c;
    vkt_context *ctx;
    int rc = cli_open(argc, argv, &c, &ctx);
    if (rc) return rc;
    if (!c.o.init_path) {
        vkt_context_destroy(ctx);
        fprintf(stderr, "vktrain: eval needs --init CHECKPOINT.safetensors\n");
        return 2;
    }
    vkt_train_result r;
    if (vkt_eval_run(&c.o, &r) != VKT_OK)
        rc = cli_fail(vkt_error());
    else {
        if (r.test_accuracy >= 0)
            printf("%s on %s: test accuracy %.4f, test loss %.4f\n", c.o.init_path, r.device,
                   r.test_accuracy, r.test_loss);
        else
            printf("%s on %s: loss %.4f\n", c.o.init_path, r.device, r.test_loss);
        if (c.json) print_json(&r, "eval", -1);
    }
    vkt_context_destroy(ctx);
    return rc;
}
