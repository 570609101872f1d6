// train.c: the training loop. Loads the model and data (or borrows the caller's, in memory; or
// text, cut into windows), builds the strategy, runs epochs of steps (one submit per step and
// device: forward, backward and update recorded together), evaluates after each epoch, writes
// metrics and checkpoints, and stops with a clear error on a non-finite loss. A sample has
// vkt_model_targets_per_sample targets (one label, T labels for an output [T, V], or MSE's
// floats): every mean and the accuracy count targets, not samples. Printing is the caller's
// (through the progress callback).
#include <errno.h>
#include <libgen.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "checkpoint.h"
#include "data.h"
#include "train.h"
#include "vkt_internal.h"

// ---------------------------------------------------------------------------------------------
// Learning-rate schedules (the torch expressions they equal are in train.h)

const char *vkt_lr_kind_name(vkt_lr_kind kind) {
    switch (kind) {
    case VKT_LR_CONSTANT: return "constant";
    case VKT_LR_COSINE: return "cosine";
    case VKT_LR_STEP: return "step";
    }
    return NULL;
}

vkt_status vkt_lr_check(const vkt_lr_schedule *s, double lr, uint64_t run_steps) {
    if (!vkt_lr_kind_name(s->kind))
        return vkt_fail(VKT_ERR_ARG, "unknown learning-rate schedule %d (constant, cosine or step)",
                        (int)s->kind);
    if (s->kind == VKT_LR_STEP) {
        if (s->step_size < 1)
            return vkt_fail(VKT_ERR_ARG, "--lr-schedule step needs --lr-step-size N, the steps "
                                         "between two decays of the rate (at least 1)");
        if (!(s->gamma > 0) || !isfinite(s->gamma))
            return vkt_fail(VKT_ERR_ARG,
                            "--lr-gamma must be a positive number (the factor of each decay; "
                            "torch's StepLR default is 0.1), not %g",
                            s->gamma);
    }
    if (s->kind == VKT_LR_COSINE) {
        if (!(s->min_lr >= 0) || !(s->min_lr <= lr))
            return vkt_fail(VKT_ERR_ARG, "--lr-min must be between 0 and --lr (%g), not %g", lr,
                            s->min_lr);
        uint64_t T = s->total_steps ? s->total_steps : run_steps;
        if (T < run_steps)
            return vkt_fail(VKT_ERR_ARG,
                            "--lr-total-steps %llu is less than the run's %llu steps: the cosine "
                            "would rise again after step %llu",
                            (unsigned long long)T, (unsigned long long)run_steps,
                            (unsigned long long)T);
        if (s->warmup >= T)
            return vkt_fail(VKT_ERR_ARG,
                            "--warmup-steps %llu leaves the cosine no step: it spans %llu steps "
                            "(%s), warmup included",
                            (unsigned long long)s->warmup, (unsigned long long)T,
                            s->total_steps ? "--lr-total-steps" : "the run's total");
    }
    return VKT_OK;
}

double vkt_lr_at(const vkt_lr_schedule *s, double lr, uint64_t t) {
    uint64_t k = t ? t - 1 : 0; // scheduler steps taken before optimizer step t
    if (k < s->warmup) return lr * (double)(k + 1) / (double)(s->warmup + 1);
    k -= s->warmup;
    switch (s->kind) {
    case VKT_LR_CONSTANT: break;
    case VKT_LR_COSINE: {
        double T = (double)(s->total_steps - s->warmup), lo = s->min_lr;
        return lo + (lr - lo) * (1 + cos(3.14159265358979323846 * (double)k / T)) / 2;
    }
    case VKT_LR_STEP: return lr * pow(s->gamma, (double)(k / s->step_size));
    }
    return lr;
}

// "cosine (warmup 3, lr-min 0, over 20 steps)": a schedule for messages.
static void lr_describe(const vkt_lr_schedule *s, char *buf, size_t size) {
    const char *name = vkt_lr_kind_name(s->kind);
    int n =
        snprintf(buf, size, "%s (warmup %llu", name ? name : "?", (unsigned long long)s->warmup);
    if (n < 0 || (size_t)n >= size) return;
    if (s->kind == VKT_LR_COSINE)
        snprintf(buf + n, size - (size_t)n, ", lr-min %.9g, over %llu steps)", s->min_lr,
                 (unsigned long long)s->total_steps);
    else if (s->kind == VKT_LR_STEP)
        snprintf(buf + n, size - (size_t)n, ", step size %llu, gamma %.9g)",
                 (unsigned long long)s->step_size, s->gamma);
    else
        snprintf(buf + n, size - (size_t)n, ")");
}

// Whether two schedules give the same rates (the fields their kind does not read aside).
static bool lr_same(const vkt_lr_schedule *a, const vkt_lr_schedule *b) {
    if (a->kind != b->kind || a->warmup != b->warmup) return false;
    if (a->kind == VKT_LR_COSINE) return a->min_lr == b->min_lr && a->total_steps == b->total_steps;
    if (a->kind == VKT_LR_STEP) return a->step_size == b->step_size && a->gamma == b->gamma;
    return true;
}

// The schedule a checkpoint's metadata names (one written before schedules: constant, no warmup).
static vkt_status lr_from_meta(const vkt_checkpoint *ck, vkt_lr_schedule *s) {
    memset(s, 0, sizeof *s);
    const char *kind = vkt_checkpoint_meta(ck, "lr_schedule");
    if (!kind) return VKT_OK;
    bool found = false;
    for (int k = VKT_LR_CONSTANT; k <= VKT_LR_STEP; k++)
        if (strcmp(kind, vkt_lr_kind_name((vkt_lr_kind)k)) == 0) {
            s->kind = (vkt_lr_kind)k;
            found = true;
        }
    if (!found)
        return vkt_fail(VKT_ERR_FORMAT,
                        "checkpoint %s names learning-rate schedule \"%s\", which this vktrain "
                        "does not know",
                        vkt_checkpoint_path(ck), kind);
    const char *v;
    if ((v = vkt_checkpoint_meta(ck, "warmup_steps"))) s->warmup = strtoull(v, NULL, 10);
    if ((v = vkt_checkpoint_meta(ck, "lr_step_size"))) s->step_size = strtoull(v, NULL, 10);
    if ((v = vkt_checkpoint_meta(ck, "lr_gamma"))) s->gamma = strtod(v, NULL);
    if ((v = vkt_checkpoint_meta(ck, "lr_min"))) s->min_lr = strtod(v, NULL);
    if ((v = vkt_checkpoint_meta(ck, "lr_total_steps"))) s->total_steps = strtoull(v, NULL, 10);
    return VKT_OK;
}

// A resumed run continues the schedule it was saved with: the same rates from the saved step on.
static vkt_status check_resume_schedule(const vkt_checkpoint *ck, const char *path,
                                        const vkt_lr_schedule *want) {
    vkt_lr_schedule have;
    VKT_TRY(lr_from_meta(ck, &have));
    if (lr_same(&have, want)) return VKT_OK;
    char a[160], b[160];
    lr_describe(&have, a, sizeof a);
    lr_describe(want, b, sizeof b);
    return vkt_fail(VKT_ERR_ARG,
                    "checkpoint %s was trained with learning-rate schedule %s; this run asks for "
                    "%s: resume with the same --lr-schedule, --warmup-steps, --lr-step-size, "
                    "--lr-gamma, --lr-min and number of steps (--epochs, --max-steps, or "
                    "--lr-total-steps), or start a new run from its parameters with --init",
                    path, a, b);
}

// A resumed run is the run it continues: the same batch, seed, data limit, shuffling and
// optimizer settings as the checkpoint records (a key the checkpoint lacks, from an older
// version, is not checked), and a run position that is possible.
static vkt_status check_resume_run(const vkt_checkpoint *ck, const char *path,
                                   const vkt_train_opts *o) {
    const vkt_optim_desc *od = &o->optim;
    char want[16][40];
    const char *keys[16];
    int n = 0;
#define WANT(key, ...) (keys[n] = key, snprintf(want[n++], sizeof want[0], __VA_ARGS__))
    WANT("batch", "%u", o->batch);
    WANT("seed", "%llu", (unsigned long long)o->seed);
    WANT("limit_train", "%u", o->limit_train);
    WANT("shuffle", "%s", o->shuffle ? "true" : "false");
    WANT("lr", "%.9g", od->lr);
    WANT("momentum", "%.9g", od->momentum);
    WANT("nesterov", "%s", od->nesterov ? "true" : "false");
    WANT("weight_decay", "%.9g", od->weight_decay);
    WANT("betas", "%.9g,%.9g", od->beta1, od->beta2);
    WANT("eps", "%.9g", od->eps);
    WANT("clip", "%.9g", od->clip);
#undef WANT
    static const char *const flag[] = {
        "--batch",    "--seed",         "--limit-train",   "--no-shuffle", "--lr",  "--momentum",
        "--nesterov", "--weight-decay", "--beta1/--beta2", "--eps",        "--clip"};
    vkt_status st = VKT_OK;
    for (int i = 0; i < n && st == VKT_OK; i++) {
        const char *have = vkt_checkpoint_meta(ck, keys[i]);
        if (have && strcmp(have, want[i]) != 0)
            st = vkt_fail(VKT_ERR_ARG,
                          "checkpoint %s was trained with %s %s; this run asks for %s: a resumed "
                          "run continues the same training, so give %s as it was (or start a new "
                          "run from its parameters with --init)",
                          path, keys[i], have, want[i], flag[i]);
    }
    // The position: whole numbers, the epoch not negative and not past the run's epochs.
    const char *keys2[] = {"step", "epoch", "batch_in_epoch", "epoch_rows"};
    for (int i = 0; i < 4 && st == VKT_OK; i++) {
        const char *v = vkt_checkpoint_meta(ck, keys2[i]);
        if (v && (!*v || strspn(v, "0123456789") != strlen(v) || strlen(v) > 18))
            st = vkt_fail(VKT_ERR_FORMAT,
                          "checkpoint %s: its run position %s is \"%.40s\", not a whole number "
                          "(the file was edited or is damaged): use --init to start from its "
                          "parameters",
                          path, keys2[i], v);
    }
    const char *ep = vkt_checkpoint_meta(ck, "epoch");
    if (st == VKT_OK && ep && strtoll(ep, NULL, 10) > o->epochs)
        st = vkt_fail(VKT_ERR_ARG,
                      "checkpoint %s has finished %s epochs, more than this run's --epochs %d: "
                      "give --epochs of at least %s to continue it",
                      path, ep, o->epochs, ep);
    return st;
}

// Both checks of a resume on one opening of the checkpoint: the schedule (want, its span
// resolved) and the run (o).
static vkt_status check_resume(const char *path, const vkt_lr_schedule *want,
                               const vkt_train_opts *o) {
    vkt_checkpoint *ck;
    VKT_TRY(vkt_checkpoint_open(path, &ck));
    vkt_status st = check_resume_schedule(ck, path, want);
    if (st == VKT_OK) st = check_resume_run(ck, path, o);
    vkt_checkpoint_close(ck);
    return st;
}

// ---------------------------------------------------------------------------------------------
// Checkpoints

static const char *optim_state_name(vkt_optim_kind kind, vkt_net_store store) {
    if (kind == VKT_OPTIM_ADAMW) return store == VKT_STORE_OPT1 ? "exp_avg" : "exp_avg_sq";
    return "momentum_buffer";
}

// "dir/run.safetensors" -> stem "dir/run" (the ".safetensors" suffix dropped when present).
static void path_stem(const char *path, char *stem, size_t size) {
    snprintf(stem, size, "%s", path);
    size_t n = strlen(stem);
    const char *ext = ".safetensors";
    size_t e = strlen(ext);
    if (n > e && strcmp(stem + n - e, ext) == 0) stem[n - e] = 0;
}

static void dir_of(const char *path, char *dir, size_t size) {
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s", path);
    snprintf(dir, size, "%s", dirname(tmp));
}

// Whether name is "<prefix>.optim-s<step>.safetensors" with a non-empty prefix and step in
// decimal digits: a name the checkpoint writer gives an optimizer file (*step_out: the step).
static bool optim_file_name(const char *name, const char **prefix_end, uint64_t *step_out) {
    const char *tag = strstr(name, ".optim-s");
    if (!tag || tag == name) return false;
    for (const char *t; (t = strstr(tag + 1, ".optim-s"));)
        tag = t; // the last one: the prefix may hold the tag itself

    const char *digits = tag + strlen(".optim-s");
    size_t nd = strspn(digits, "0123456789");
    if (nd == 0 || nd > 19 || strcmp(digits + nd, ".safetensors") != 0) return false;
    if (prefix_end) *prefix_end = tag;
    if (step_out) *step_out = strtoull(digits, NULL, 10);
    return true;
}

// Removes the optimizer files of this checkpoint other than keep (older steps, and newer ones a
// writer killed before it renamed the checkpoint left), and the temporary files killed writers
// left of them: exactly the names "<stem>.optim-s<digits>.safetensors" (+ ".tmp.<pid>") beside
// it, which only this checkpoint's writer makes (checkpoint names end in .safetensors and are not
// themselves such names: check_save_path). The writer replaces the checkpoint's own temporary
// files itself.
static void remove_stale_optim(const char *path, const char *keep_base) {
    char stem[4096], dir[4096];
    path_stem(path, stem, sizeof stem);
    dir_of(path, dir, sizeof dir);
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s", stem);
    const char *sb = basename(tmp);
    size_t sl = strlen(sb);
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *ent;
    while ((ent = readdir(d))) {
        const char *end;
        char name[512];
        snprintf(name, sizeof name, "%s", ent->d_name);
        char *tmp_tag = strstr(name, ".safetensors.tmp.");
        bool temp = false;
        if (tmp_tag) { // a temporary file: judged by the name it was to become
            tmp_tag[strlen(".safetensors")] = 0;
            if (!vkt_dead_writer_temp(ent->d_name, name)) continue;
            temp = true;
        }
        if (!optim_file_name(name, &end, NULL)) continue;
        if ((size_t)(end - name) != sl || strncmp(name, sb, sl) != 0) continue;
        if (!temp && strcmp(name, keep_base) == 0) continue;
        char full[8192];
        snprintf(full, sizeof full, "%s/%s", dir, ent->d_name);
        struct stat st;
        if (lstat(full, &st) == 0 && S_ISREG(st.st_mode)) unlink(full);
    }
    closedir(d);
}

// A writer killed after it renamed its checkpoint and before remove_stale_optim left the optimizer
// files that checkpoint replaced. A run resumed from the checkpoint that saves to it removes them
// now, as that writer would have: a run with no step left saves nothing, and would leave them for
// good. Only where --resume and --save are the same file, on rank 0, keeping the optimizer file
// the checkpoint names.
static void finish_killed_save(vkt_strategy *s, const char *resume, const char *save) {
    struct stat a, b;
    if (!resume || !save || vkt_strategy_rank(s) != 0 || stat(resume, &a) != 0 ||
        stat(save, &b) != 0 || a.st_dev != b.st_dev || a.st_ino != b.st_ino)
        return;
    vkt_checkpoint *ck;
    if (vkt_checkpoint_open(resume, &ck) != VKT_OK) return; // loaded a moment ago: not expected
    const char *ostate = vkt_checkpoint_meta(ck, "optimizer_state");
    remove_stale_optim(save, ostate ? ostate : "");
    vkt_checkpoint_close(ck);
}

// The name of the checkpoint of step `step` under --save tmpl: every "{step}" in tmpl replaced by
// the step in decimal (none: tmpl itself).
static vkt_status save_name(const char *tmpl, uint64_t step, char *out, size_t size) {
    char num[24];
    snprintf(num, sizeof num, "%llu", (unsigned long long)step);
    size_t n = 0;
    for (const char *p = tmpl; *p;) {
        const char *q = strstr(p, "{step}");
        size_t lit = q ? (size_t)(q - p) : strlen(p), ins = q ? strlen(num) : 0;
        if (n + lit + ins >= size)
            return vkt_fail(VKT_ERR_ARG, "--save %s: the name is too long (at most %zu bytes)",
                            tmpl, size - 1);
        memcpy(out + n, p, lit);
        memcpy(out + n + lit, num, ins);
        n += lit + ins;
        p += lit + (q ? strlen("{step}") : 0);
    }
    out[n] = 0;
    return VKT_OK;
}

// A checkpoint path --save may write: NAME.safetensors, where NAME is not itself the name of an
// optimizer file ("run.optim-s4"), so that every checkpoint's optimizer files have names no other
// checkpoint's can have. A name with "{step}" is judged by the name it gives step 0.
static vkt_status check_save_path(const char *tmpl) {
    char path[4096];
    VKT_TRY(save_name(tmpl, 0, path, sizeof path));
    size_t n = strlen(path), e = strlen(".safetensors");
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    if (n <= e || strcmp(path + n - e, ".safetensors") != 0 || strlen(base) <= e)
        return vkt_fail(
            VKT_ERR_ARG,
            "--save %s: a checkpoint's name must end in .safetensors (e.g. %s.safetensors"
            "; its optimizer state goes beside it as NAME.optim-sSTEP.safetensors)",
            tmpl, tmpl);
    if (optim_file_name(base, NULL, NULL))
        return vkt_fail(VKT_ERR_ARG,
                        "--save %s: that is the name of an optimizer-state file "
                        "(NAME.optim-sSTEP.safetensors), which the checkpoint NAME.safetensors "
                        "writes and removes: choose another name",
                        tmpl);
    return VKT_OK;
}

// Writes the checkpoint of position pos under the name --save gives its step, and keeps that
// name in res->checkpoint (the one a later error message points at).
static vkt_status save_checkpoint(vkt_strategy *s, const vkt_run_position *pos,
                                  const vkt_train_opts *o, vkt_train_result *res) {
    char path[4096];
    VKT_TRY(save_name(o->save_path, pos->step, path, sizeof path));
    VKT_TRY(vkt_checkpoint_save(s, path, pos, o));
    snprintf(res->checkpoint, sizeof res->checkpoint, "%s", path);
    return VKT_OK;
}

// Reads tensor i of store into a new host buffer (*buf, which the caller frees, NULL on failure)
// and describes it as checkpoint tensor *t under name (the checkpoint of step `step`).
static vkt_status read_for_checkpoint(vkt_strategy *s, vkt_net_store store, int i, const char *name,
                                      uint64_t step, vkt_ckpt_tensor *t, float **buf) {
    const vkt_net_tensor *nt = vkt_strategy_tensor(s, i);
    *buf = malloc(nt->count * 4);
    if (!*buf) return vkt_fail(VKT_ERR_HOST_MEMORY, "out of host memory");
    // A buffer (state) is read through VKT_STORE_PARAM from the state store; num_batches_tracked
    // and its kind are saved as int64, as torch's state_dict holds them.
    *t = (vkt_ckpt_tensor){.name = name,
                           .ndim = nt->ndim,
                           .data = *buf,
                           .int64 = nt->int64 && store == VKT_STORE_PARAM};
    for (int d = 0; d < nt->ndim; d++)
        t->shape[d] = nt->shape[d];
    VKT_TRY(vkt_strategy_read(s, store, i, *buf));
    if (vkt_strategy_rank(s) != 0) return VKT_OK; // across ranks, rank 0 writes the file
    // A non-finite value is never saved: a checkpoint that cannot be loaded back is no checkpoint
    // (vkt_checkpoint_load refuses one), and a diverged run must not replace a good one.
    for (uint64_t k = 0; k < nt->count; k++)
        if (!isfinite((*buf)[k]))
            return vkt_fail(VKT_ERR_NUMERIC,
                            "after step %llu, tensor %s holds %s at element %llu: the training "
                            "diverged, and the checkpoint is not written (the previous one, if "
                            "any, is kept); try a lower --lr or --clip 1",
                            (unsigned long long)step, name,
                            isnan((*buf)[k]) ? "NaN" : "an infinite value", (unsigned long long)k);
    return VKT_OK;
}

vkt_status vkt_checkpoint_save(vkt_strategy *s, const char *path, const vkt_run_position *pos,
                               const vkt_train_opts *o) {
    int n = vkt_strategy_tensor_count(s);
    vkt_ckpt_tensor *t = calloc((size_t)n * 2 + 1, sizeof *t);
    float **bufs = calloc((size_t)n * 3 + 1, sizeof *bufs);
    char(*names)[64] = calloc((size_t)n * 2 + 1, 64);
    vkt_status st =
        (t && bufs && names) ? VKT_OK : vkt_fail(VKT_ERR_HOST_MEMORY, "out of host memory");
    int nb = 0;
    // Optimizer state first: its file must exist before the parameter file names it.
    char stem[4096], optim_path[4200], optim_base[4200];
    path_stem(path, stem, sizeof stem);
    snprintf(optim_path, sizeof optim_path, "%s.optim-s%llu.safetensors", stem,
             (unsigned long long)pos->step);
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s", optim_path);
    snprintf(optim_base, sizeof optim_base, "%s", basename(tmp));
    const vkt_optim_desc *od = &o->optim;
    bool has_optim = vkt_strategy_has_store(s, VKT_STORE_OPT1);
    char v_step[32], v_epoch[32], v_batch[32], v_lr[32], v_mom[32], v_wd[32], v_b1[32], v_b2[32],
        v_eps[32], v_seed[32], v_clip[32], v_warm[32], v_ss[32], v_gamma[32], v_min[32],
        v_total[32], v_pad[32];
    snprintf(v_step, sizeof v_step, "%llu", (unsigned long long)pos->step);
    snprintf(v_epoch, sizeof v_epoch, "%d", pos->epoch);
    snprintf(v_batch, sizeof v_batch, "%u", pos->batch);
    snprintf(v_lr, sizeof v_lr, "%.9g", od->lr);
    snprintf(v_mom, sizeof v_mom, "%.9g", od->momentum);
    snprintf(v_wd, sizeof v_wd, "%.9g", od->weight_decay);
    snprintf(v_b1, sizeof v_b1, "%.9g", od->beta1);
    snprintf(v_b2, sizeof v_b2, "%.9g", od->beta2);
    snprintf(v_eps, sizeof v_eps, "%.9g", od->eps);
    snprintf(v_clip, sizeof v_clip, "%.9g", od->clip);
    snprintf(v_seed, sizeof v_seed, "%llu", (unsigned long long)o->seed);
    const vkt_lr_schedule *ls = &o->lr;
    snprintf(v_warm, sizeof v_warm, "%llu", (unsigned long long)ls->warmup);
    snprintf(v_ss, sizeof v_ss, "%llu", (unsigned long long)ls->step_size);
    snprintf(v_gamma, sizeof v_gamma, "%.17g", ls->gamma);
    snprintf(v_min, sizeof v_min, "%.17g", ls->min_lr);
    snprintf(v_total, sizeof v_total, "%llu", (unsigned long long)ls->total_steps);
    const char *lr_kind = vkt_lr_kind_name(ls->kind);
    const vkt_augment *au = &o->augment;
    snprintf(v_pad, sizeof v_pad, "%u", au->crop ? au->pad : 0);
    char v_bsz[32], v_limit[32], v_eloss[32], v_erows[32], v_first[32];
    snprintf(v_bsz, sizeof v_bsz, "%u", o->batch);
    snprintf(v_limit, sizeof v_limit, "%u", o->limit_train);
    // %.17g: a double read back is the same double (the resumed epoch's mean is the same bits).
    snprintf(v_eloss, sizeof v_eloss, "%.17g", pos->epoch_loss_sum);
    snprintf(v_erows, sizeof v_erows, "%llu", (unsigned long long)pos->epoch_rows);
    snprintf(v_first, sizeof v_first, "%.17g", pos->first_loss);
    const char *model_name = o->strategy.model ? o->strategy.model->name : "";
    vkt_ckpt_meta meta[] = {
        {"format", "vktrain-checkpoint-1"},
        {"model", model_name},
        {"step", v_step},
        {"epoch", v_epoch},
        {"batch_in_epoch", v_batch},
        {"optimizer", od->kind == VKT_OPTIM_ADAMW ? "adamw" : "sgd"},
        {"lr", v_lr},
        {"momentum", v_mom},
        {"nesterov", od->nesterov ? "true" : "false"},
        {"weight_decay", v_wd},
        {"betas", ""},
        {"eps", v_eps},
        {"clip", v_clip},
        {"seed", v_seed},
        {"optimizer_state", has_optim ? optim_base : ""},
        {"lr_schedule", lr_kind ? lr_kind : "?"},
        {"warmup_steps", v_warm},
        {"lr_step_size", v_ss},
        {"lr_gamma", v_gamma},
        {"lr_min", v_min},
        {"lr_total_steps", v_total},
        {"augment", au->crop ? (au->flip ? "crop,flip" : "crop") : (au->flip ? "flip" : "none")},
        {"augment_pad", v_pad},
        {"batch", v_bsz},
        {"limit_train", v_limit},
        {"shuffle", o->shuffle ? "true" : "false"},
        {"epoch_loss_sum", v_eloss},
        {"epoch_rows", v_erows},
        {"first_loss", v_first},
    };
    char betas[64];
    snprintf(betas, sizeof betas, "%s,%s", v_b1, v_b2);
    meta[10].value = betas;
    int nmeta = (int)(sizeof meta / sizeof meta[0]);

    if (st == VKT_OK && has_optim) {
        int k = 0;
        vkt_net_store stores[2] = {VKT_STORE_OPT1, VKT_STORE_OPT2};
        for (int si = 0; si < 2 && st == VKT_OK; si++) {
            if (!vkt_strategy_has_store(s, stores[si])) continue;
            for (int i = 0; i < n && st == VKT_OK; i++) {
                const vkt_net_tensor *nt = vkt_strategy_tensor(s, i);
                if (nt->state) continue; // a buffer has no optimizer state
                snprintf(names[k], 64, "%s.%s", nt->name, optim_state_name(od->kind, stores[si]));
                st = read_for_checkpoint(s, stores[si], i, names[k], pos->step, &t[k], &bufs[nb++]);
                k++;
            }
        }
        if (st == VKT_OK && vkt_strategy_rank(s) == 0)
            st = vkt_checkpoint_write(optim_path, t, k, meta, nmeta);
        for (int i = 0; i < nb; i++)
            free(bufs[i]);
        nb = 0;
    }
    if (st == VKT_OK) {
        for (int i = 0; i < n && st == VKT_OK; i++)
            st = read_for_checkpoint(s, VKT_STORE_PARAM, i, vkt_strategy_tensor(s, i)->name,
                                     pos->step, &t[i], &bufs[nb++]);
        if (st == VKT_OK && vkt_strategy_rank(s) == 0)
            st = vkt_checkpoint_write(path, t, n, meta, nmeta);
    }
    for (int i = 0; i < nb; i++)
        free(bufs[i]);
    if (st == VKT_OK && vkt_strategy_rank(s) == 0)
        remove_stale_optim(path, has_optim ? optim_base : "");
    free(t);
    free(bufs);
    free(names);
    return st;
}

static vkt_status load_tensors(vkt_strategy *s, vkt_checkpoint *ck, vkt_net_store store,
                               const char *suffix) {
    for (int i = 0; i < vkt_strategy_tensor_count(s); i++) {
        const vkt_net_tensor *nt = vkt_strategy_tensor(s, i);
        if (nt->state && store != VKT_STORE_PARAM) continue; // buffers have no optimizer state
        char name[96];
        if (suffix)
            snprintf(name, sizeof name, "%s.%s", nt->name, suffix);
        else
            snprintf(name, sizeof name, "%s", nt->name);
        uint64_t shape[VKT_CKPT_MAX_DIMS] = {0};
        for (int d = 0; d < nt->ndim; d++)
            shape[d] = nt->shape[d];
        VKT_TRY(vkt_checkpoint_expect(ck, name, nt->ndim, shape));
        float *b = malloc(nt->count * 4);
        if (!b) return vkt_fail(VKT_ERR_HOST_MEMORY, "out of host memory");
        vkt_status st = vkt_checkpoint_read(ck, name, b, nt->count);
        for (uint64_t k = 0; st == VKT_OK && k < nt->count; k++)
            if (!isfinite(b[k]))
                st = vkt_fail(VKT_ERR_FORMAT,
                              "checkpoint %s: tensor %s holds a non-finite value "
                              "at element %llu",
                              vkt_checkpoint_path(ck), name, (unsigned long long)k);
        if (st == VKT_OK) st = vkt_strategy_write(s, store, i, b);
        free(b);
        VKT_TRY(st);
    }
    return VKT_OK;
}

vkt_status vkt_checkpoint_load(vkt_strategy *s, const char *path, bool with_optim,
                               vkt_run_position *pos) {
    vkt_checkpoint *ck;
    VKT_TRY(vkt_checkpoint_open(path, &ck));
    vkt_status st = load_tensors(s, ck, VKT_STORE_PARAM, NULL);
    if (st == VKT_OK && pos) {
        const char *v;
        memset(pos, 0, sizeof *pos);
        if ((v = vkt_checkpoint_meta(ck, "step"))) pos->step = strtoull(v, NULL, 10);
        if ((v = vkt_checkpoint_meta(ck, "epoch"))) pos->epoch = atoi(v);
        if ((v = vkt_checkpoint_meta(ck, "batch_in_epoch")))
            pos->batch = (uint32_t)strtoul(v, NULL, 10);
        if ((v = vkt_checkpoint_meta(ck, "epoch_rows"))) pos->epoch_rows = strtoull(v, NULL, 10);
        // The running figures: finite and not negative, or the file was edited.
        const char *fkeys[] = {"epoch_loss_sum", "first_loss"};
        double *fvals[] = {&pos->epoch_loss_sum, &pos->first_loss};
        for (int i = 0; i < 2 && st == VKT_OK; i++) {
            if (!(v = vkt_checkpoint_meta(ck, fkeys[i]))) continue;
            char *end;
            *fvals[i] = strtod(v, &end);
            if (!*v || *end || !isfinite(*fvals[i]) || *fvals[i] < 0)
                st = vkt_fail(VKT_ERR_FORMAT,
                              "checkpoint %s: its %s is \"%.40s\", not a finite number of at "
                              "least 0 (the file was edited or is damaged): use --init to start "
                              "from its parameters",
                              path, fkeys[i], v);
        }
    }
    if (st == VKT_OK && with_optim) {
        if (!vkt_checkpoint_meta(ck, "step"))
            st = vkt_fail(VKT_ERR_FORMAT,
                          "checkpoint %s has no run position (step) to resume "
                          "from; use --init to start from its parameters",
                          path);
        const char *ostate = vkt_checkpoint_meta(ck, "optimizer_state");
        const char *okind = vkt_checkpoint_meta(ck, "optimizer");
        const vkt_optim_desc *od = vkt_strategy_optim(s);
        const char *want = od->kind == VKT_OPTIM_ADAMW ? "adamw" : "sgd";
        if (st == VKT_OK && okind && strcmp(okind, want) != 0)
            st = vkt_fail(VKT_ERR_ARG,
                          "checkpoint %s was trained with --optimizer %s; resume it "
                          "with the same optimizer (not %s)",
                          path, okind, want);
        bool need = vkt_strategy_has_store(s, VKT_STORE_OPT1);
        uint64_t ostep_named = 0;
        if (st == VKT_OK && need) {
            if (!ostate || !*ostate) {
                st = vkt_fail(VKT_ERR_FORMAT,
                              "checkpoint %s holds no optimizer state, which "
                              "this optimizer needs; use --init to restart the optimizer",
                              path);
            } else if (strchr(ostate, '/') || ostate[0] == '.' ||
                       !optim_file_name(ostate, NULL, &ostep_named) || ostep_named != pos->step) {
                // Only a sibling file, by a name the writer gives it (and of the same step).
                st = vkt_fail(
                    VKT_ERR_FORMAT,
                    "checkpoint %s: its metadata optimizer_state names \"%.80s\", "
                    "which is not a file a checkpoint of step %llu writes (NAME.optim-s%llu"
                    ".safetensors beside it): the file was edited or is damaged; use "
                    "--init to start from its parameters",
                    path, ostate, (unsigned long long)pos->step, (unsigned long long)pos->step);
            } else {
                char dir[4096], opath[8192];
                dir_of(path, dir, sizeof dir);
                snprintf(opath, sizeof opath, "%s/%s", dir, ostate);
                vkt_checkpoint *ock;
                st = vkt_checkpoint_open(opath, &ock);
                if (st == VKT_OK) {
                    const char *ostep = vkt_checkpoint_meta(ock, "step");
                    if (!ostep || strtoull(ostep, NULL, 10) != pos->step)
                        st = vkt_fail(VKT_ERR_FORMAT,
                                      "optimizer state %s is not from step %llu "
                                      "of %s",
                                      opath, (unsigned long long)pos->step, path);
                    if (st == VKT_OK)
                        st = load_tensors(s, ock, VKT_STORE_OPT1,
                                          optim_state_name(od->kind, VKT_STORE_OPT1));
                    if (st == VKT_OK && vkt_strategy_has_store(s, VKT_STORE_OPT2))
                        st = load_tensors(s, ock, VKT_STORE_OPT2,
                                          optim_state_name(od->kind, VKT_STORE_OPT2));
                    vkt_checkpoint_close(ock);
                }
            }
        }
    }
    vkt_checkpoint_close(ck);
    return st;
}

// ---------------------------------------------------------------------------------------------
// The loop

typedef struct run {
    const vkt_train_opts *o;
    vkt_model_desc own_model; // read from o->model_path
    const vkt_model_desc *m;  // &own_model, or the caller's o->model
    vkt_dataset train, test;  // read from files, or shallow copies of the caller's sets
    bool borrowed;            // train and test are the caller's: never freed here
    bool have_test;
    vkt_text text; // text runs: the corpus (test holds its validation windows)
    bool is_text;
    uint32_t tps; // targets per sample: the loss means and the accuracy are per target
    vkt_strategy *s;
    FILE *metrics;
    float *x;
    uint32_t *labels;
    float *targets;  // MSE: one-hot rows
    int64_t data_ns; // setup's time in reading the model and the data (the first step's report)
} run;

static void run_free(run *r) {
    vkt_strategy_destroy(r->s);
    if (r->metrics) fclose(r->metrics);
    if (!r->borrowed) {
        vkt_dataset_free(&r->train);
        vkt_dataset_free(&r->test);
    }
    vkt_text_free(&r->text);
    vkt_model_free(&r->own_model);
    free(r->x);
    free(r->labels);
    free(r->targets);
}

// Checks that a data set fits the model: its features; its labels per sample against the
// model's targets per sample; every label below the classes (naming the first that is not).
static vkt_status check_fits(const run *r, const vkt_dataset *d) {
    const vkt_model_desc *m = r->m;
    char in[96], out[96];
    vkt_shape_format(&m->input, in, sizeof in);
    vkt_shape_format(&m->output, out, sizeof out);
    if (d->features != m->input_features)
        return vkt_fail(VKT_ERR_FORMAT,
                        "the data has %u features per sample (%s) but model %s "
                        "takes %u (input %s)",
                        d->features, d->source, m->name, m->input_features, in);
    uint32_t have = vkt_dataset_targets(d);
    if (m->loss == VKT_LOSS_MSE) {
        if (have != 1)
            return vkt_fail(VKT_ERR_FORMAT,
                            "model %s (loss mse) trains against one-hot rows made from one label "
                            "per sample, but the data (%s) has %u labels per sample",
                            m->name, d->source, have);
        // A label past the outputs would make an all-zero target row.
        for (uint64_t i = 0; i < d->n; i++)
            if (d->y[i] >= m->output_features)
                return vkt_fail(VKT_ERR_FORMAT,
                                "the data (%s) has label %u at sample %llu, but model %s (loss "
                                "mse) has %u outputs to one-hot it into (output %s): labels must "
                                "be 0..%u",
                                d->source, d->y[i], (unsigned long long)i, m->name,
                                m->output_features, out, m->output_features - 1);
        return VKT_OK;
    }
    uint32_t want = vkt_model_targets_per_sample(m), V = vkt_model_classes(m);
    if (have != want) {
        if (want == 1)
            return vkt_fail(VKT_ERR_FORMAT,
                            "model %s (output %s) expects one label per sample, but the data (%s) "
                            "has %u per sample (one per position): a model with an output [%u, "
                            "classes] takes them",
                            m->name, out, d->source, have, have);
        return vkt_fail(VKT_ERR_FORMAT,
                        "model %s (output %s) expects %u labels per sample, one per position "
                        "(labels [n, %u], e.g. the next token of each input position), but the "
                        "data (%s) has %u per sample",
                        m->name, out, want, want, d->source, have);
    }
    uint64_t labels = (uint64_t)d->n * have;
    for (uint64_t i = 0; i < labels; i++)
        if (d->y[i] >= V) {
            char pos[48] = "";
            if (have > 1)
                snprintf(pos, sizeof pos, ", position %llu", (unsigned long long)(i % have));
            return vkt_fail(VKT_ERR_FORMAT,
                            "the data (%s) has label %u at sample %llu%s, but model %s has %u "
                            "classes (output %s): labels must be 0..%u",
                            d->source, d->y[i], (unsigned long long)(i / have), pos, m->name, V,
                            out, V - 1);
        }
    if (d->classes > V)
        return vkt_fail(VKT_ERR_FORMAT,
                        "the data has %u classes (%s) but model %s has %u (output %s)", d->classes,
                        d->source, m->name, V, out);
    return VKT_OK;
}

// Whether a model reads bytes of text: input [T], output [T, 256], softmax_cross_entropy.
static bool reads_bytes(const vkt_model_desc *m) {
    return m->input.ndim == 1 && m->loss == VKT_LOSS_SOFTMAX_XENT && m->output.ndim == 2 &&
           m->output.dim[0] == m->input.dim[0] && m->output.dim[1] == 256;
}

// Text: the corpus, its validation windows as the test set; the training windows come from the
// batcher (vkt_batcher_init_text).
static vkt_status load_text(run *r) {
    const vkt_train_opts *o = r->o;
    const vkt_model_desc *m = r->m;
    const char *fallback = VKT_DEFAULT_TEXT_DIR;
    const char *const *paths = o->ntext ? o->text_paths : &fallback;
    if (!o->ntext && access(fallback, R_OK) != 0)
        return vkt_fail(VKT_ERR_IO,
                        "model %s is a byte-level language model and no data is named; its "
                        "default text, %s, is missing: install Debian's fortunes package "
                        "(scripts/setup.sh does) or name text with --data-text FILE",
                        m->name, fallback);
    // The text first: an unreadable or empty file is reported whatever the model.
    VKT_TRY(vkt_text_load(paths, o->ntext ? o->ntext : 1, &r->text));
    if (!reads_bytes(m)) {
        char in[96], out[96];
        vkt_shape_format(&m->input, in, sizeof in);
        vkt_shape_format(&m->output, out, sizeof out);
        return vkt_fail(VKT_ERR_ARG,
                        "text (%s) trains a byte-level language model: input [T] (T bytes as "
                        "ids), output [T, 256] (the next byte's scores at every position) under "
                        "softmax_cross_entropy; model %s has input %s, output %s and loss %s",
                        r->text.source, m->name, in, out, vkt_model_loss_name(m->loss));
    }
    uint32_t T = m->input.dim[0];
    VKT_TRY(vkt_text_check(&r->text, T));
    VKT_TRY(vkt_text_validation(&r->text, T, o->limit_test, &r->test));
    r->is_text = true;
    r->have_test = true;
    return check_fits(r, &r->test);
}

// Across ranks: rank 0's data set to every rank (which then draws the same batches from it).
static vkt_status bcast_dataset(vkt_world *w, vkt_dataset *d) {
    if (vkt_world_size(w) == 1) return VKT_OK;
    uint32_t head[4] = {d->n, d->features, d->classes, d->targets};
    VKT_TRY(vkt_world_bcast(w, head, sizeof head, 0, "the data set's size"));
    VKT_TRY(vkt_world_bcast(w, d->source, sizeof d->source, 0, "the data set's name"));
    uint64_t tps = head[3] ? head[3] : 1;
    if (vkt_world_rank(w) != 0) {
        d->n = head[0], d->features = head[1], d->classes = head[2], d->targets = head[3];
        d->x = malloc((size_t)d->n * d->features * 4 + 4);
        d->y = malloc((size_t)d->n * tps * 4 + 4);
        if (!d->x || !d->y) return vkt_fail(VKT_ERR_HOST_MEMORY, "out of host memory for the data");
    }
    VKT_TRY(vkt_world_bcast(w, d->x, (size_t)d->n * d->features * 4, 0, "the data set"));
    return vkt_world_bcast(w, d->y, (size_t)d->n * tps * 4, 0, "the data set's labels");
}

static vkt_status load_data(run *r, bool need_train) {
    const vkt_train_opts *o = r->o;
    bool in_memory = o->train_set || (!need_train && o->test_set);
    if (o->ntext > 0 && (in_memory || o->npy_x || o->data_dir))
        return vkt_fail(VKT_ERR_ARG,
                        "--data-text is one source of data, and this run names another (%s): "
                        "give one of --data-text, --data-npy, --data",
                        in_memory  ? "a data set in memory"
                        : o->npy_x ? "--data-npy"
                                   : "--data");
    // Text: named, or the default data of a model that reads bytes.
    if (o->ntext > 0 || (!in_memory && !o->npy_x && !o->data_dir && reads_bytes(r->m)))
        return load_text(r);
    if (need_train && !o->train_set && o->test_set)
        return vkt_fail(VKT_ERR_ARG,
                        "test_set is given without train_set: a run trains on the sets in memory "
                        "or on files, not on both (give train_set too, or neither)");
    if (o->train_set || (!need_train && o->test_set)) {
        // In memory: shallow copies, so that the limits below shorten the copy and not the set.
        r->borrowed = true;
        if (o->train_set) {
            VKT_TRY(vkt_dataset_check(o->train_set, "train_set"));
            r->train = *o->train_set;
        }
        if (o->test_set) {
            VKT_TRY(vkt_dataset_check(o->test_set, "test_set"));
            r->test = *o->test_set;
        } else if (!need_train) {
            r->test = r->train; // evaluation without a test set: on the training set
        }
        r->have_test = o->test_set || !need_train;
        if (need_train) vkt_dataset_limit(&r->train, o->limit_train);
        if (r->have_test) vkt_dataset_limit(&r->test, o->limit_test);
        if (need_train) VKT_TRY(check_fits(r, &r->train));
        return r->have_test ? check_fits(r, &r->test) : VKT_OK;
    }
    vkt_world *w = o->strategy.world;
    bool reads = !w || vkt_world_rank(w) == 0; // across ranks, rank 0 reads the files
    if (o->npy_x) {
        if (reads)
            VKT_TRY(vkt_dataset_load_npy(o->npy_x, o->npy_y, need_train ? &r->train : &r->test));
        r->have_test = !need_train;
    } else {
        if (need_train && reads) VKT_TRY(vkt_dataset_load_mnist_dir(o->data_dir, true, &r->train));
        if (reads) VKT_TRY(vkt_dataset_load_mnist_dir(o->data_dir, false, &r->test));
        r->have_test = true;
    }
    if (need_train) vkt_dataset_limit(&r->train, o->limit_train);
    if (r->have_test) vkt_dataset_limit(&r->test, o->limit_test);
    if (w && need_train) VKT_TRY(bcast_dataset(w, &r->train));
    if (w && r->have_test) VKT_TRY(bcast_dataset(w, &r->test));
    // Both sets: a test label past the model's classes would read as a NaN loss.
    if (need_train) VKT_TRY(check_fits(r, &r->train));
    return r->have_test ? check_fits(r, &r->test) : VKT_OK;
}

static vkt_status setup(run *r, bool need_train) {
    const vkt_train_opts *o = r->o;
    int64_t t0 = vkt_trace_now_ns();
    if (o->batch < 1) return vkt_fail(VKT_ERR_ARG, "--batch must be at least 1");
    if (o->model_path) {
        VKT_TRY(vkt_model_load(o->model_path, &r->own_model));
        r->m = &r->own_model;
    } else if (o->model) {
        r->m = o->model;
    } else {
        return vkt_fail(VKT_ERR_ARG, "no model: set vkt_train_opts.model_path to a model file or "
                                     ".model to a vkt_model_desc (vkt_model_parse makes one)");
    }
    VKT_TRY(load_data(r, need_train));
    r->tps = vkt_model_targets_per_sample(r->m);
    uint64_t rows = o->batch;
    uint64_t labels = r->m->loss == VKT_LOSS_MSE ? 1 : r->tps; // MSE: one label, made one-hot
    r->x = malloc(rows * r->m->input_features * 4);
    r->labels = malloc(rows * labels * 4);
    r->targets = malloc(rows * r->m->output_features * 4);
    if (!r->x || !r->labels || !r->targets)
        return vkt_fail(VKT_ERR_HOST_MEMORY, "out of host memory");
    vkt_strategy_desc sd = o->strategy;
    sd.model = r->m;
    sd.batch = o->batch;
    sd.optim = o->optim;
    sd.trace = o->trace;
    r->data_ns = vkt_trace_now_ns() - t0;
    return vkt_strategy_create(&sd, &r->s);
}

static const void *batch_targets(run *r, uint32_t B) {
    if (r->m->loss != VKT_LOSS_MSE) return r->labels;
    uint32_t C = r->m->output_features;
    memset(r->targets, 0, (size_t)B * C * 4);
    for (uint32_t i = 0; i < B; i++)
        if (r->labels[i] < C) r->targets[(size_t)i * C + r->labels[i]] = 1.0f;
    return r->targets;
}

static vkt_status evaluate(run *r, double *loss, double *acc) {
    *loss = 0;
    *acc = -1;
    if (!r->have_test || r->test.n == 0) return VKT_OK;
    vkt_batcher b;
    VKT_TRY(vkt_batcher_init(&b, &r->test, r->o->batch, false, 0));
    double loss_sum = 0;
    uint64_t correct = 0;
    vkt_status st = VKT_OK;
    for (uint32_t i = 0; i < vkt_batcher_count(&b) && st == VKT_OK; i++) {
        uint32_t B = vkt_batcher_get(&b, i, r->x, r->labels);
        double ls;
        uint64_t c;
        st = vkt_strategy_eval(r->s, r->x, batch_targets(r, B), B, &ls, &c);
        loss_sum += ls;
        correct += c;
    }
    vkt_batcher_free(&b);
    VKT_TRY(st);
    double targets = (double)r->test.n * r->tps; // positions (MSE: outputs) of every sample
    *loss = loss_sum / targets;
    if (!isfinite(*loss))
        return vkt_fail(VKT_ERR_NUMERIC,
                        "the test loss is %s: the parameters diverged (or overflowed), and they "
                        "are not saved; try a lower --lr or --clip 1",
                        isnan(*loss) ? "NaN" : "infinite");
    *acc = r->m->loss == VKT_LOSS_SOFTMAX_XENT ? (double)correct / targets : -1;
    return VKT_OK;
}

// ---------------------------------------------------------------------------------------------
// Time to the first step

void vkt_first_step_split(vkt_first_step *f, int64_t start_ns, int64_t data_ns,
                          const vkt_startup_counters *at_start, int64_t begin_ns,
                          const vkt_startup_counters *at_begin, int64_t end_ns,
                          const vkt_startup_counters *at_end) {
    const vkt_startup_counters *a = at_start, *b = at_begin, *e = at_end;
    // Kernel builds and tuning are exclusive wall time (tune.c), so what is left of each interval
    // is its own part; clamped at 0 for work of unrelated threads of the process.
    double setup = (double)(begin_ns - start_ns - data_ns) -
                   (b->kernel_build_ns - a->kernel_build_ns) - (b->tuning_ns - a->tuning_ns);
    double step = (double)(end_ns - begin_ns) - (e->kernel_build_ns - b->kernel_build_ns) -
                  (e->tuning_ns - b->tuning_ns);
    f->start_ns = start_ns;
    f->first_step_seconds = (double)(end_ns - start_ns) * 1e-9;
    f->data_seconds = (double)data_ns * 1e-9;
    f->kernel_build_seconds = (e->kernel_build_ns - a->kernel_build_ns) * 1e-9;
    f->tuning_seconds = (e->tuning_ns - a->tuning_ns) * 1e-9;
    f->setup_seconds = setup > 0 ? setup * 1e-9 : 0;
    f->step_seconds = step > 0 ? step * 1e-9 : 0;
    f->kernels_built = e->kernels_built - a->kernels_built;
    f->kernels_ahead = e->kernels_ahead - a->kernels_ahead;
    f->ahead_stopped = e->ahead_stopped - a->ahead_stopped;
    f->shapes_measured = e->shapes_measured - a->shapes_measured;
    f->variants_measured = e->variants_measured - a->variants_measured;
    f->choices_cached = e->choices_cached - a->choices_cached;
}

// ---------------------------------------------------------------------------------------------
// Metrics across a resume

// Whether line[0..n) is a line vktrain writes to a metrics file: a JSON object whose "type" is
// "step" or "epoch" and whose "step" is a whole number (*step).
static bool metrics_line(const char *line, size_t n, uint64_t *step) {
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithLengthOpts(line, n, &end, false);
    bool ok = j && cJSON_IsObject(j) && end == line + n;
    const cJSON *type = ok ? cJSON_GetObjectItemCaseSensitive(j, "type") : NULL;
    const cJSON *st = ok ? cJSON_GetObjectItemCaseSensitive(j, "step") : NULL;
    ok = ok && cJSON_IsString(type) &&
         (strcmp(type->valuestring, "step") == 0 || strcmp(type->valuestring, "epoch") == 0) &&
         cJSON_IsNumber(st) && st->valuedouble >= 0 && st->valuedouble < 9007199254740992.0 &&
         st->valuedouble == floor(st->valuedouble);
    if (ok) *step = (uint64_t)st->valuedouble;
    cJSON_Delete(j);
    return ok;
}

// Whether the n bytes of an unterminated last line are what a write of one of our lines that was
// cut short leaves: a prefix of '{"type":"step"' or '{"type":"epoch"', or a longer line that begins
// with one.
static bool torn_metrics_line(const char *line, size_t n) {
    static const char *const heads[] = {"{\"type\":\"step\"", "{\"type\":\"epoch\""};
    for (int i = 0; i < 2; i++) {
        size_t h = strlen(heads[i]);
        if (memcmp(line, heads[i], n < h ? n : h) == 0) return true;
    }
    return false;
}

// A resumed run's metrics file (f, opened "a+" on the regular file path): the lines up to the
// checkpoint's step are kept and the rest cut off, where a run killed after its last checkpoint
// went on writing (its last line torn, perhaps). One ftruncate, so the file is at every moment
// either as it was or as the uninterrupted run had it at the checkpoint. A line that is not ours
// leaves the file as it is and fails the run.
static vkt_status metrics_resume(FILE *f, const char *path, uint64_t step) {
    enum { LINE_MAX_BYTES = 4096 }; // our lines are about 200 bytes
    enum { BLOCK = 65536 };
    char *blk = malloc(BLOCK);
    if (!blk) return vkt_fail(VKT_ERR_HOST_MEMORY, "out of host memory");
    char line[LINE_MAX_BYTES];
    size_t ll = 0;              // bytes of the current line in line[] (up to LINE_MAX_BYTES)
    uint64_t at = 0;            // offset of the current line's first byte
    uint64_t len = 0;           // bytes of the current line
    uint64_t keep = UINT64_MAX; // offset of the first line past the checkpoint
    uint64_t lineno = 0;
    const char *bad = NULL;
    rewind(f);
    size_t n;
    while (!bad && (n = fread(blk, 1, BLOCK, f)) > 0) {
        for (size_t i = 0; i < n && !bad;) {
            const char *nl = memchr(blk + i, '\n', n - i);
            size_t take = nl ? (size_t)(nl - (blk + i)) : n - i;
            if (ll + take <= sizeof line) {
                memcpy(line + ll, blk + i, take);
                ll += take;
            } else {
                ll = sizeof line + 1; // too long: no line of ours
            }
            len += take;
            i += take;
            if (!nl) break;
            i++; // the newline
            lineno++;
            uint64_t s = 0;
            if (ll > sizeof line || !metrics_line(line, ll, &s)) {
                bad = "is not one of the JSON lines vktrain writes";
                break;
            }
            if (keep == UINT64_MAX && s > step) keep = at;
            at += len + 1;
            len = 0;
            ll = 0;
        }
    }
    free(blk);
    if (ferror(f))
        return vkt_fail(VKT_ERR_IO, "cannot read the metrics file %s to resume it: %s", path,
                        strerror(errno));
    if (!bad && len > 0) { // an unterminated last line: one a kill cut short, or not ours
        lineno++;
        if (ll > sizeof line || !torn_metrics_line(line, ll))
            bad = "(the last, unterminated) is not the start of a line vktrain writes";
        else if (keep == UINT64_MAX)
            keep = at;
    }
    if (bad)
        return vkt_fail(VKT_ERR_FORMAT,
                        "metrics file %s: line %llu %s, so it is left as it is: --resume cuts the "
                        "metrics of the run it continues back to the checkpoint's step (%llu) and "
                        "appends to them; give --metrics a new file or the run's own",
                        path, (unsigned long long)lineno, bad, (unsigned long long)step);
    if (keep != UINT64_MAX && (fflush(f) != 0 || ftruncate(fileno(f), (off_t)keep) != 0))
        return vkt_fail(VKT_ERR_IO,
                        "cannot cut the metrics file %s back to the checkpoint's step %llu: %s",
                        path, (unsigned long long)step, strerror(errno));
    if (fseek(f, 0, SEEK_END) != 0)
        return vkt_fail(VKT_ERR_IO, "cannot seek in the metrics file %s: %s", path,
                        strerror(errno));
    return VKT_OK;
}

// Opens the metrics file: a new run starts it afresh; a resumed run continues the one of the run
// it resumes (metrics_resume), or appends where it is not a regular file.
static vkt_status metrics_open(run *r, const char *path, bool resume, uint64_t step) {
    struct stat sb;
    bool regular = stat(path, &sb) != 0 || S_ISREG(sb.st_mode); // (absent: created regular)
    r->metrics = fopen(path, !resume ? "w" : regular ? "a+" : "a");
    if (!r->metrics)
        return vkt_fail(VKT_ERR_IO, "cannot write metrics file %s: %s", path, strerror(errno));
    if (!resume || !regular || fstat(fileno(r->metrics), &sb) != 0 || !S_ISREG(sb.st_mode))
        return VKT_OK;
    return metrics_resume(r->metrics, path, step);
}

// A number for a JSON line in fmt, or null where it is not finite (JSON has no NaN).
static const char *jnum(char *buf, size_t size, const char *fmt, double v) {
    if (!isfinite(v)) return "null";
    snprintf(buf, size, fmt, v);
    return buf;
}

// The parameters and buffers after step `step` are finite, or the run fails naming the first
// tensor and element that is not (a step with a finite loss whose update overflowed, when no
// later step's loss, no evaluation and no checkpoint saw it).
static vkt_status check_finite(vkt_strategy *s, uint64_t step) {
    for (int i = 0; i < vkt_strategy_tensor_count(s); i++) {
        const vkt_net_tensor *nt = vkt_strategy_tensor(s, i);
        float *b = malloc(nt->count * 4);
        if (!b) return vkt_fail(VKT_ERR_HOST_MEMORY, "out of host memory");
        vkt_status st = vkt_strategy_read(s, VKT_STORE_PARAM, i, b);
        // Across ranks the read is collective and fills rank 0's b only (layers: the stage's
        // rank sends it): rank 0 judges, and its failure ends the job.
        bool judge = vkt_strategy_rank(s) == 0;
        for (uint64_t k = 0; st == VKT_OK && judge && k < nt->count; k++)
            if (!isfinite(b[k]))
                st = vkt_fail(VKT_ERR_NUMERIC,
                              "after step %llu, tensor %s holds %s at element %llu: the last "
                              "update overflowed (the training diverged); try a lower --lr or "
                              "--clip 1",
                              (unsigned long long)step, nt->name,
                              isnan(b[k]) ? "NaN" : "an infinite value", (unsigned long long)k);
        free(b);
        VKT_TRY(st);
    }
    return VKT_OK;
}

static void fill_result(run *r, vkt_train_result *res) {
    snprintf(res->device, sizeof res->device, "%s", vkt_strategy_devices(r->s));
    snprintf(res->strategy, sizeof res->strategy, "%s", vkt_strategy_name(r->o->strategy.kind));
    res->ndevices = vkt_strategy_device_count(r->s);
    res->ranks = vkt_strategy_ranks(r->s);
    for (int i = 0; i < res->ndevices; i++)
        vkt_strategy_stats(r->s, i, &res->devices[i]);
}

vkt_status vkt_train_run(const vkt_train_opts *o, vkt_train_result *res) {
    memset(res, 0, sizeof *res);
    res->test_accuracy = -1;
    int64_t start_ns = vkt_trace_now_ns();
    vkt_startup_counters at_start, at_begin, at_end;
    vkt_startup_counters_get(&at_start);
    double first_ns = 0; // the first step's wall time, for later_step_seconds
    if (o->epochs < 1) return vkt_fail(VKT_ERR_ARG, "--epochs must be at least 1");
    if (!(o->optim.lr > 0) || !isfinite(o->optim.lr))
        return vkt_fail(VKT_ERR_ARG, "--lr must be a positive number");
    if (o->init_path && o->resume_path)
        return vkt_fail(VKT_ERR_ARG, "--init and --resume exclude each other: --resume continues "
                                     "a run, --init starts a new one from given parameters");
    if (o->save_every && !o->save_path)
        return vkt_fail(VKT_ERR_ARG,
                        "--save-every %llu needs --save FILE.safetensors: where its "
                        "checkpoints go (with {step} in the name, each is kept)",
                        (unsigned long long)o->save_every);
    if (o->save_path) VKT_TRY(check_save_path(o->save_path));
    run r = {.o = o};
    vkt_status st = setup(&r, true);
    vkt_run_position pos = {0};
    if (st == VKT_OK) st = vkt_strategy_init(r.s, o->seed);
    if (st == VKT_OK) st = vkt_strategy_prebuild(r.s);
    if (st == VKT_OK && o->init_path) st = vkt_checkpoint_load(r.s, o->init_path, false, NULL);
    if (st == VKT_OK && o->resume_path) st = vkt_checkpoint_load(r.s, o->resume_path, true, &pos);
    vkt_batcher b = {0};
    if (st == VKT_OK && r.is_text)
        st = vkt_batcher_init_text(&b, &r.text, r.m->input.dim[0], o->batch, o->shuffle, o->seed,
                                   o->limit_train);
    else if (st == VKT_OK)
        st = vkt_batcher_init(&b, &r.train, o->batch, o->shuffle, o->seed);
    if (st == VKT_OK) st = vkt_batcher_augment(&b, &o->augment, &r.m->input);
    if (st != VKT_OK) {
        vkt_batcher_free(&b);
        run_free(&r);
        return st;
    }
    uint32_t nb = vkt_batcher_count(&b);
    uint64_t total_steps = (uint64_t)o->epochs * nb;
    if (o->max_steps && o->max_steps < total_steps) total_steps = o->max_steps;
    // The schedule with its span resolved; checkpoints carry it (so does this copy of the options).
    vkt_train_opts oo = *o;
    if (!oo.lr.total_steps) oo.lr.total_steps = total_steps;
    oo.strategy.model = r.m; // the checkpoints' "model" metadata
    st = vkt_lr_check(&o->lr, o->optim.lr, total_steps);
    if (st == VKT_OK && o->resume_path) st = check_resume(o->resume_path, &oo.lr, o);
    char resumed_save[4096]; // the name this run gives the checkpoint of the step it resumes at
    if (st == VKT_OK && o->save_path)
        st = save_name(o->save_path, pos.step, resumed_save, sizeof resumed_save);
    if (st == VKT_OK && o->save_path) finish_killed_save(r.s, o->resume_path, resumed_save);
    if (st == VKT_OK && o->metrics_path && vkt_strategy_rank(r.s) == 0) // rank 0 writes them
        st = metrics_open(&r, o->metrics_path, o->resume_path != NULL, pos.step);
    if (st != VKT_OK) {
        vkt_batcher_free(&b);
        run_free(&r);
        return st;
    }
    o = &oo;
    uint64_t step = pos.step, step0 = pos.step; // step0: where this call began
    uint64_t samples = 0;
    double train_ns = 0;
    double epoch_loss = 0;
    uint64_t epoch_rows = 0;
    bool stopped = false;
    uint64_t checked = step; // the parameters after this step are known finite (loaded, saved)
    bool overlap = r.s && vkt_strategy_host_overlaps(r.s);
    // The divergence check's reference: the run's first loss, carried by its checkpoints (one
    // from an older vktrain: this call's first).
    double first_loss = pos.first_loss;
    bool have_first = first_loss > 0;
    char n1[32], n2[32], n3[32], n4[32], n5[32], n6[32];
    for (int epoch = pos.epoch; epoch < o->epochs && st == VKT_OK && !stopped; epoch++) {
        vkt_batcher_epoch(&b, (uint64_t)epoch);
        // A resumed epoch carries on with the sums of its steps before the checkpoint.
        bool resumed = epoch == pos.epoch && pos.batch > 0;
        epoch_loss = resumed ? pos.epoch_loss_sum : 0;
        epoch_rows = resumed ? pos.epoch_rows : 0;
        uint32_t first = epoch == pos.epoch ? pos.batch : 0;
        uint32_t B = 0; // rows of batch i when it was gathered during the previous step
        for (uint32_t i = first; i < nb && st == VKT_OK; i++) {
            bool asked = o->should_stop && o->should_stop(o->should_stop_user);
            if (step >= total_steps || asked) {
                res->interrupted = asked && step < total_steps;
                stopped = true;
                pos = (vkt_run_position){.step = step,
                                         .epoch = epoch,
                                         .batch = i,
                                         .epoch_loss_sum = i ? epoch_loss : 0,
                                         .epoch_rows = i ? epoch_rows : 0,
                                         .first_loss = have_first ? first_loss : 0};
                break;
            }
            if (B == 0) B = vkt_batcher_get(&b, i, r.x, r.labels);
            double lr = vkt_lr_at(&o->lr, o->optim.lr, step + 1);
            vkt_strategy_set_lr(r.s, (float)lr);
            int64_t t0 = vkt_trace_now_ns();
            bool first_step = step == step0;
            if (first_step) vkt_startup_counters_get(&at_begin);
            st = vkt_strategy_step_begin(r.s, r.x, batch_targets(&r, B), B, (uint32_t)(step + 1));
            if (st != VKT_OK) break;
            // The next batch of the epoch is gathered, converted and handed over while the
            // devices run this step (begin has taken its own copy of this one), where that
            // work does not take the cores the devices run on.
            uint32_t next = 0;
            if (overlap && i + 1 < nb && step + 1 < total_steps) {
                next = vkt_batcher_get(&b, i + 1, r.x, r.labels);
                st = vkt_strategy_prefetch(r.s, r.x, batch_targets(&r, next), next);
            }
            double loss_sum = 0;
            vkt_status end = vkt_strategy_step_end(r.s, &loss_sum);
            if (st == VKT_OK) st = end;
            if (st != VKT_OK) break;
            step++;
            int64_t t1 = vkt_trace_now_ns();
            train_ns += (double)(t1 - t0);
            if (first_step) {
                vkt_startup_counters_get(&at_end);
                vkt_first_step_split(&res->first_step, start_ns, r.data_ns, &at_start, t0,
                                     &at_begin, t1, &at_end);
                first_ns = (double)(t1 - t0);
            }
            samples += B;
            double loss = loss_sum / ((double)B * r.tps);
            if (!isfinite(loss)) {
                st = vkt_fail(VKT_ERR_NUMERIC,
                              "the loss became %s at step %llu (epoch %d, batch "
                              "%u): training stopped%s%s; try a lower --lr or --clip 1",
                              isnan(loss) ? "NaN" : "infinite", (unsigned long long)step, epoch + 1,
                              i + 1,
                              !o->save_path        ? ""
                              : res->checkpoint[0] ? ", the last good checkpoint is "
                                                   : ", no checkpoint was saved by this run (",
                              !o->save_path        ? ""
                              : res->checkpoint[0] ? res->checkpoint
                                                   : "none before this step)");
                break;
            }
            if (!have_first) {
                first_loss = loss;
                have_first = true;
            }
            epoch_loss += loss_sum;
            epoch_rows += B;
            double sps = samples / (train_ns * 1e-9);
            if (o->trace) {
                int64_t now = vkt_trace_now_ns();
                vkt_trace_add_counter(o->trace, VKT_TRACE_HOST, "loss", now, loss);
                vkt_trace_add_counter(o->trace, VKT_TRACE_HOST, "samples_per_sec", now, sps);
            }
            if (r.metrics)
                fprintf(r.metrics,
                        "{\"type\":\"step\",\"step\":%llu,\"epoch\":%d,\"batch\":%u,"
                        "\"rows\":%u,\"lr\":%s,\"loss\":%s,\"samples_per_sec\":%s}\n",
                        (unsigned long long)step, epoch + 1, i + 1, B,
                        jnum(n1, sizeof n1, "%.9g", (double)(float)lr),
                        jnum(n2, sizeof n2, "%.9g", loss), jnum(n3, sizeof n3, "%.6g", sps));
            if (r.metrics) fflush(r.metrics); // whole lines, as they come (a viewer may follow)
            // Divergence: the line above shows the loss that stops the run.
            if (loss > VKT_DIVERGENCE_FACTOR * fmax(first_loss, 1e-3)) {
                st = vkt_fail(VKT_ERR_NUMERIC,
                              "the loss diverged at step %llu (epoch %d, batch %u): %.4g, over "
                              "%.0f times the first step's %.4g; training stopped%s%s; try a "
                              "lower --lr (this run: %.4g) or --clip 1",
                              (unsigned long long)step, epoch + 1, i + 1, loss,
                              VKT_DIVERGENCE_FACTOR, first_loss,
                              !o->save_path        ? ""
                              : res->checkpoint[0] ? ", the last good checkpoint is "
                                                   : ", no checkpoint was saved by this run (",
                              !o->save_path        ? ""
                              : res->checkpoint[0] ? res->checkpoint
                                                   : "none before this step)",
                              o->optim.lr);
                break;
            }
            if (o->progress) {
                vkt_progress p = {.epoch = epoch + 1,
                                  .epochs = o->epochs,
                                  .batch = i + 1,
                                  .batches = nb,
                                  .step = step,
                                  .lr = (float)lr,
                                  .loss = loss,
                                  .samples_per_sec = sps,
                                  .eta_sec = (double)(total_steps - step) *
                                             (train_ns * 1e-9 / (step - pos.step))};
                o->progress(&p, o->progress_user);
            }
            // Every save_every steps a checkpoint, where the end of the epoch or of the run does
            // not write that step's anyway.
            if (o->save_path && o->save_every && step % o->save_every == 0 && i + 1 < nb &&
                step < total_steps) {
                vkt_run_position at = {.step = step,
                                       .epoch = epoch,
                                       .batch = i + 1,
                                       .epoch_loss_sum = epoch_loss,
                                       .epoch_rows = epoch_rows,
                                       .first_loss = first_loss};
                st = save_checkpoint(r.s, &at, o, res);
                if (st != VKT_OK) break;
                checked = step;
            }
            B = next;
        }
        if (st != VKT_OK || stopped) break;
        double tl = 0, ta = -1;
        if (!o->skip_eval) st = evaluate(&r, &tl, &ta);
        if (st != VKT_OK) break;
        res->epochs = epoch + 1;
        res->train_loss = epoch_rows ? epoch_loss / ((double)epoch_rows * r.tps) : 0;
        res->test_loss = tl;
        res->test_accuracy = ta;
        if (o->trace && ta >= 0)
            vkt_trace_add_counter(o->trace, VKT_TRACE_HOST, "accuracy", vkt_trace_now_ns(), ta);
        double sps = samples / (train_ns * 1e-9);
        if (r.metrics) {
            char acc[32];
            snprintf(acc, sizeof acc, "%.6g", ta);
            fprintf(r.metrics,
                    "{\"type\":\"epoch\",\"epoch\":%d,\"step\":%llu,\"train_loss\":%s,"
                    "\"test_loss\":%s,\"test_accuracy\":%s,\"samples_per_sec\":%s}\n",
                    epoch + 1, (unsigned long long)step,
                    jnum(n4, sizeof n4, "%.9g", res->train_loss), jnum(n5, sizeof n5, "%.9g", tl),
                    isfinite(ta) ? acc : "null", jnum(n6, sizeof n6, "%.6g", sps));
            fflush(r.metrics);
        }
        if (o->progress) {
            vkt_progress p = {.epoch_end = true,
                              .epoch = epoch + 1,
                              .epochs = o->epochs,
                              .batch = nb,
                              .batches = nb,
                              .step = step,
                              .loss = res->train_loss,
                              .samples_per_sec = sps,
                              .test_loss = tl,
                              .test_accuracy = ta};
            o->progress(&p, o->progress_user);
        }
        pos = (vkt_run_position){.step = step,
                                 .epoch = epoch + 1,
                                 .batch = 0,
                                 .first_loss = have_first ? first_loss : 0};
        if (o->save_path) st = save_checkpoint(r.s, &pos, o, res);
        if (o->save_path && st == VKT_OK) checked = step; // the save read every tensor
    }
    if (st == VKT_OK && stopped) {
        if (epoch_rows) res->train_loss = epoch_loss / ((double)epoch_rows * r.tps);
        if (o->save_path) st = save_checkpoint(r.s, &pos, o, res);
        if (o->save_path && st == VKT_OK) checked = step;
    }
    // The parameters the run ends with are finite (the last step's update had no later loss to
    // show it), before the caller reports the run.
    if (st == VKT_OK && r.s && checked != step) st = check_finite(r.s, step);
    if (r.s && o->trace) {
        // The trainer's own figures go into the trace, so the file and the report agree.
        for (int d = 0; d < vkt_strategy_device_count(r.s); d++) {
            vkt_device_stats ds;
            vkt_strategy_stats(r.s, d, &ds);
            double busy = ds.wall_ns > 0 ? ds.busy_ns / ds.wall_ns : 0;
            if (busy > 1) busy = 1;
            vkt_trace_summary sum = {.busy_fraction = busy,
                                     .idle_fraction = 1 - busy,
                                     .busy_ns = ds.busy_ns,
                                     .wall_ns = ds.wall_ns,
                                     .bytes_moved = ds.bytes_moved,
                                     .peak_memory_bytes = ds.peak_memory};
            vkt_trace_set_summary(o->trace, vkt_strategy_trace_pid(r.s, d), &sum);
        }
    }
    // A metrics line that did not reach the file (a full disk) is an error, not a cut file and
    // exit 0.
    if (r.metrics && (fflush(r.metrics) != 0 || ferror(r.metrics)) && st == VKT_OK)
        st = vkt_fail(VKT_ERR_IO,
                      "writing the metrics file %s failed: %s (free disk space or choose another "
                      "path)",
                      o->metrics_path, strerror(errno));
    res->steps = step;
    if (step > step0 + 1)
        res->first_step.later_step_seconds =
            (train_ns - first_ns) * 1e-9 / (double)(step - step0 - 1);
    res->train_seconds = train_ns * 1e-9;
    res->samples_per_sec = train_ns > 0 ? samples / (train_ns * 1e-9) : 0;
    if (r.s) fill_result(&r, res);
    vkt_batcher_free(&b);
    run_free(&r);
    return st;
}

vkt_status vkt_eval_run(const vkt_train_opts *o, vkt_train_result *res) {
    memset(res, 0, sizeof *res);
    if (!o->init_path) return vkt_fail(VKT_ERR_ARG, "eval needs --init CHECKPOINT");
    run r = {.o = o};
    vkt_status st = setup(&r, false);
    if (st == VKT_OK) st = vkt_checkpoint_load(r.s, o->init_path, false, NULL);
    if (st == VKT_OK) st = evaluate(&r, &res->test_loss, &res->test_accuracy);
    if (r.s) fill_result(&r, res);
    run_free(&r);
    return st;
}
