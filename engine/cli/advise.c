// advise.c (CLI): `vktrain advise --model FILE --batch N [--results A.json ...]
// [--device-profile NAME|FILE ...] [--mem-limit SIZE] [--devices K] [--json]`. Which device and
// strategy to train this model at this batch with, and why, in numbers. For every candidate
// device (the device of each `bench suite` result, each device profile of assets/devices/):
//   - whether it fits: the planner's bytes (parallel/plan.c through plan.h, the figure the
//     strategies refuse with) against the device's memory, or --mem-limit;
//   - samples/s: from the device's measured points for this model (the measured value at that
//     batch, or interpolated linearly in log batch between the two nearest measured batches), and
//     otherwise a roofline: a step takes at least max(FLOPs / peak FLOP/s, bytes / bandwidth),
//     always printed as "predicted (roofline)"; where a measurement exists the roofline is printed
//     beside it with the error (predicted / measured), so that the roofline is checked;
//   - where no single device fits: the `layers` split over the fewest devices of that kind whose
//     every stage fits (vkt_plan_layers), the bytes per device, and its cost (the pipeline bubble);
// and one recommendation, last. docs/COMPARING.md ("## advise") has the rules and the roofline's
// known error. Opens no device to run anything: a Vulkan context is created only to read the
// storage-buffer alignment of a results file's device when this machine has the same device.
//
// What it does not do: run or measure anything (`vktrain bench suite` measures), or predict the
// time of the communication between pipeline stages or replicas (not counted: say so).
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "cli.h"
#include "model.h"
#include "network.h"
#include "plan.h"
#include "results.h"
#include "vkt_internal.h"

#define MAX_CANDS 32
#define MAX_POINTS 64
// Without the device at hand, offsets are aligned to 256 bytes, the largest
// minStorageBufferOffsetAlignment Vulkan allows: the bytes are then an upper bound.
#define DEFAULT_ALIGN 256
#define MIB 1048576.0

// ---------------------------------------------------------------------------------------------
// Candidates

typedef struct adv_point {
    uint32_t batch;
    double sps;
} adv_point;

typedef enum adv_basis {
    BASIS_NONE,
    BASIS_MEASURED,     // measured at this batch
    BASIS_INTERPOLATED, // between two measured batches
    BASIS_EXTRAPOLATED, // past the measured batches
    BASIS_SCALED,       // a split: one device's measured samples/s, scaled by the pipeline
    BASIS_ROOFLINE,     // no measurement: the roofline
} adv_basis;

static const char *basis_name(adv_basis b) {
    static const char *n[] = {
        "none", "measured", "interpolated", "extrapolated", "scaled from measurements", "roofline"};
    return n[b];
}

typedef struct adv_pred {
    double sps;
    adv_basis basis;
    char how[300];
} adv_pred;

typedef struct adv_roof {
    double flops, bytes;        // per step
    double t_compute, t_memory; // seconds
    double step_s, sps;         // the larger of the two, and batch / it
} adv_roof;

typedef struct adv_split {
    bool found;
    int K, M;
    vkt_schedule schedule;
    vkt_plan plan;
    uint64_t largest; // the largest stage's bytes
    double bubble;    // (K - 1) / (M + K - 1)
    adv_pred pred;    // from the measurements where there are some, else the roofline
    adv_pred roof;    // the roofline's
    // No split: the layer that does not fit alone, and from which limit a split exists.
    int worst_layer;
    vkt_net_memory worst_need;
    uint64_t min_limit;
    int min_K;
} adv_split;

typedef struct adv_cand {
    char label[96], name[256], driver[256], file[512];
    bool profile; // a device profile (else a results file)
    bool runs;    // vktrain runs there (a Vulkan driver exists); false for a TPU
    char runs_note[300];
    uint64_t memory, limit, align;
    const char *align_from;
    double gflops, gbs; // the roofline's peak FLOP/s (in GFLOP/s) and bandwidth (GB/s)
    char peak_from[160];
    char unverified[200];
    int npts;
    adv_point pts[MAX_POINTS];
    char data_note[300]; // results: why they hold no point of this model
    // Computed:
    vkt_plan single;
    adv_pred pred; // single device: measured/interpolated, else the roofline
    adv_roof roof; // single device at the batch
    double error;  // roofline / measured at the batch (0: no measurement)
    adv_split split;
} adv_cand;

typedef struct adv_run {
    const vkt_model_desc *m;
    uint32_t batch;
    vkt_optim_desc optim;
    uint64_t mem_limit; // 0: each device's memory
    int max_devices;
    int micro_batches;   // 0: searched
    int schedule;        // -1: searched
    double flops, saved; // per sample (fwd + bwd), activation floats kept per sample
    int ncand;
    adv_cand c[MAX_CANDS];
    vkt_context *ctx; // opened at most once, for alignments
    bool ctx_tried;
} adv_run;

// ---------------------------------------------------------------------------------------------
// Reading the results and the profiles (results.h)

// dst = src, cut to size (snprintf with "%s" draws -Wrestrict when both sit in one struct).
static void copy_str(char *dst, size_t size, const char *src) {
    size_t n = strlen(src);
    if (n >= size) n = size - 1;
    memmove(dst, src, n);
    dst[n] = 0;
}

static int point_cmp(const void *a, const void *b) {
    const adv_point *x = a, *y = b;
    return x->batch < y->batch ? -1 : x->batch > y->batch;
}

// One `bench suite` result's device, and the points of the result that measured this model.
static void take_results(adv_run *r, const results_file *f, adv_cand *c) {
    copy_str(c->label, sizeof c->label, f->label);
    copy_str(c->name, sizeof c->name, f->name[0] ? f->name : f->label);
    copy_str(c->driver, sizeof c->driver, f->driver);
    copy_str(c->file, sizeof c->file, f->path);
    c->memory = (uint64_t)f->memory_bytes;
    c->gflops = f->fma, c->gbs = f->bw;
    c->runs = true;
    snprintf(c->peak_from, sizeof c->peak_from, "measured by bench suite");
    uint64_t params = vkt_model_param_count(r->m);
    char others[160] = "";
    bool mismatch = false;
    for (int i = 0; i < f->ntr; i++) {
        const results_train *t = &f->tr[i];
        if (strcmp(t->model, r->m->name) != 0) {
            if (!strstr(others, t->model) && strlen(others) + strlen(t->model) + 3 < sizeof others)
                snprintf(others + strlen(others), sizeof others - strlen(others), "%s%s",
                         *others ? ", " : "", t->model);
            continue;
        }
        // The same name but another model (edited file): its points are not this model's.
        double pc = t->parameters, fl = t->flops_per_sample;
        if ((pc >= 0 && pc != (double)params) ||
            (fl >= 0 && fabs(fl - r->flops) > 1e-6 * r->flops)) {
            snprintf(c->data_note, sizeof c->data_note,
                     "its %s has %.0f parameters and %.0f FLOPs per sample, this one %llu and %.0f:"
                     " another model of the same name",
                     t->model, pc < 0 ? 0 : pc, fl < 0 ? 0 : fl, (unsigned long long)params,
                     r->flops);
            mismatch = true;
            continue;
        }
        if (t->fits && c->npts < MAX_POINTS)
            c->pts[c->npts++] = (adv_point){(uint32_t)t->batch, t->sps};
    }
    qsort(c->pts, (size_t)c->npts, sizeof c->pts[0], point_cmp);
    if (!c->npts && !mismatch)
        snprintf(c->data_note, sizeof c->data_note, "the results hold no run of %s%s%s%s",
                 r->m->name, *others ? " (they hold " : "", others, *others ? ")" : "");
}

static vkt_status load_results(adv_run *r, const char *path, adv_cand *c) {
    results_file f;
    vkt_status s = results_load(path, &results_for_advise, &f);
    if (s == VKT_OK) take_results(r, &f, c);
    results_free(&f);
    return s;
}

// The directory of the device profiles: ./assets/devices, else the source tree's.
static const char *profile_dir(void) {
    static const char *rel = "assets/devices";
    if (access(rel, R_OK | X_OK) == 0) return rel;
    return VKT_ASSET_DIR "/devices";
}

// The profile names (file names without .json) of the directory, for messages.
static void profile_names(char *buf, size_t size) {
    buf[0] = 0;
    DIR *dir = opendir(profile_dir());
    if (!dir) return;
    struct dirent *e;
    char names[32][128];
    int n = 0;
    while ((e = readdir(dir)) && n < 32) {
        size_t len = strlen(e->d_name);
        if (len > 5 && len < 128 && !strcmp(e->d_name + len - 5, ".json")) {
            snprintf(names[n], sizeof names[n], "%.*s", (int)(len - 5), e->d_name);
            n++;
        }
    }
    closedir(dir);
    qsort(names, (size_t)n, sizeof names[0], (int (*)(const void *, const void *))strcmp);
    for (int i = 0; i < n; i++)
        snprintf(buf + strlen(buf), size - strlen(buf), "%s%s", i ? ", " : "", names[i]);
}

// Device profiles: format vktrain-device-profile, version 1 (docs/COMPARING.md, ### Device
// profiles); a figure a profile may leave out is absent or null.
static const jf_spec profile_spec = {
    .what = "device profile",
    .hint = "(profiles: assets/devices/*.json)",
    .invalid = "not JSON",
    .format = "vktrain-device-profile",
    .version = 1,
    .name = "vktrain device profile",
    .versioned = "vktrain device profile",
    .redo = "see docs/COMPARING.md (## advise) for the profile format",
};
#define OPTIONAL_POSITIVE (JF_OPTIONAL | JF_NULLABLE | JF_POSITIVE)

// A device profile by NAME (assets/devices/NAME.json) or FILE (a path: contains '/' or ends .json).
static vkt_status load_profile(const char *spec, adv_cand *c) {
    char path[512];
    size_t len = strlen(spec);
    bool is_path = strchr(spec, '/') || (len > 5 && !strcmp(spec + len - 5, ".json"));
    if (is_path)
        snprintf(path, sizeof path, "%s", spec);
    else
        snprintf(path, sizeof path, "%s/%s.json", profile_dir(), spec);
    if (!is_path && access(path, F_OK) != 0) {
        char names[1024];
        profile_names(names, sizeof names);
        return vkt_fail(VKT_ERR_ARG,
                        "no device profile \"%s\" (%s does not exist); the profiles in %s: %s; or "
                        "give a profile file's path",
                        spec, path, profile_dir(), *names ? names : "none");
    }
    jf_doc d = {path, &profile_spec};
    cJSON *root;
    VKT_TRY(jf_load(&d, &root));
    double mem = 0, fp32 = 0, roof = 0, al = 0;
    vkt_status s = jf_str(&d, root, "", "name", true, c->name, sizeof c->name);
    if (s == VKT_OK) s = jf_str(&d, root, "", "label", true, c->label, sizeof c->label);
    if (s == VKT_OK) s = jf_num(&d, root, "", "memory_bytes", JF_POSITIVE, &mem);
    if (s == VKT_OK) s = jf_num(&d, root, "", "bandwidth_gbs", JF_POSITIVE, &c->gbs);
    if (s == VKT_OK) s = jf_num(&d, root, "", "fp32_gflops", OPTIONAL_POSITIVE, &fp32);
    if (s == VKT_OK) s = jf_num(&d, root, "", "roofline_gflops", OPTIONAL_POSITIVE, &roof);
    if (s == VKT_OK)
        s = jf_num(&d, root, "", "storage_buffer_offset_alignment", OPTIONAL_POSITIVE, &al);
    if (s == VKT_OK && fp32 < 0 && roof < 0)
        s = vkt_fail(VKT_ERR_FORMAT,
                     "%s: neither fp32_gflops nor roofline_gflops is a number > 0: the roofline "
                     "needs a peak FLOP rate",
                     path);
    bool runs = false;
    if (s == VKT_OK) s = jf_bool(&d, root, "", "vulkan", true, &runs);
    if (s == VKT_OK)
        s = jf_str(&d, root, "", "vulkan_note", false, c->runs_note, sizeof c->runs_note);
    const cJSON *src = s == VKT_OK ? jf_field(root, "source") : NULL;
    if (s == VKT_OK && !(cJSON_IsString(src) && src->valuestring[0]) &&
        !(cJSON_IsArray(src) && cJSON_GetArraySize(src) > 0))
        s = jf_bad(&d, "source", src, "the vendor's document: a string or an array of strings");
    const cJSON *unv = s == VKT_OK ? jf_field(root, "unverified") : NULL;
    if (s == VKT_OK && unv && !cJSON_IsArray(unv))
        s = jf_bad(&d, "unverified", unv, "an array of field names");
    for (int i = 0; s == VKT_OK && unv && i < cJSON_GetArraySize(unv); i++) {
        const cJSON *u = cJSON_GetArrayItem(unv, i);
        if (!cJSON_IsString(u)) {
            char p[48];
            snprintf(p, sizeof p, "unverified[%d]", i);
            s = jf_bad(&d, p, u, "a field name");
        } else if (strlen(c->unverified) + strlen(u->valuestring) + 3 < sizeof c->unverified) {
            snprintf(c->unverified + strlen(c->unverified),
                     sizeof c->unverified - strlen(c->unverified), "%s%s",
                     *c->unverified ? ", " : "", u->valuestring);
        }
    }
    if (s == VKT_OK) {
        c->profile = true;
        c->runs = runs;
        if (!c->runs && !c->runs_note[0])
            snprintf(c->runs_note, sizeof c->runs_note,
                     "no Vulkan driver: vktrain cannot run there");
        c->memory = (uint64_t)mem;
        c->gflops = roof > 0 ? roof : fp32;
        snprintf(c->peak_from, sizeof c->peak_from, "%s, from the vendor's specifications",
                 roof > 0 ? "roofline_gflops" : "dense FP32");
        c->align = al > 0 ? (uint64_t)al : DEFAULT_ALIGN;
        c->align_from = al > 0 ? "the profile's" : "256 bytes, Vulkan's largest";
        copy_str(c->file, sizeof c->file, path);
    }
    cJSON_Delete(root);
    return s;
}

// A results file's device's alignment: this machine's device of the same name, else 256.
static void results_align(adv_run *r, adv_cand *c) {
    if (!r->ctx_tried) {
        r->ctx_tried = true;
        if (cli_open_context(NULL, &r->ctx) != VKT_OK) r->ctx = NULL;
    }
    c->align = DEFAULT_ALIGN;
    c->align_from = "256 bytes, Vulkan's largest (no such device here)";
    for (int i = 0; r->ctx && i < vkt_context_device_count(r->ctx); i++) {
        const vkt_device_info *d = vkt_context_device_info(r->ctx, i);
        if (strcmp(d->name, c->name) != 0) continue;
        c->align = d->min_storage_buffer_offset_alignment < 16
                       ? 16
                       : d->min_storage_buffer_offset_alignment;
        c->align_from = "this machine's device of that name";
        return;
    }
}

// ---------------------------------------------------------------------------------------------
// Predictions

// Samples/s at batch b from the measured points (sorted by batch): the measurement at b, or
// linear in log(batch) between the nearest measured batches below and above b; past the measured
// range the nearest point holds (its step time below it, its samples/s above it).
static adv_pred measured_at(const adv_cand *c, uint32_t b) {
    adv_pred p = {0};
    if (!c->npts) return p;
    const adv_point *lo = NULL, *hi = NULL;
    for (int i = 0; i < c->npts; i++) {
        const adv_point *q = &c->pts[i];
        if (q->batch == b) {
            p.sps = q->sps, p.basis = BASIS_MEASURED;
            snprintf(p.how, sizeof p.how, "measured at batch %u", b);
            return p;
        }
        if (q->batch < b) lo = q;
        if (q->batch > b && !hi) hi = q;
    }
    if (lo && hi) {
        double t = (log(b) - log(lo->batch)) / (log(hi->batch) - log(lo->batch));
        p.sps = lo->sps + t * (hi->sps - lo->sps);
        p.basis = BASIS_INTERPOLATED;
        snprintf(p.how, sizeof p.how,
                 "interpolated in log batch between measured batches %u (%.1f samples/s) and %u "
                 "(%.1f)",
                 lo->batch, lo->sps, hi->batch, hi->sps);
    } else if (hi) {
        p.sps = hi->sps * b / hi->batch;
        p.basis = BASIS_EXTRAPOLATED;
        snprintf(p.how, sizeof p.how,
                 "extrapolated: below the smallest measured batch %u, its step time held",
                 hi->batch);
    } else {
        p.sps = lo->sps;
        p.basis = BASIS_EXTRAPOLATED;
        snprintf(p.how, sizeof p.how,
                 "extrapolated: above the largest measured batch %u, its samples/s held",
                 lo->batch);
    }
    return p;
}

// The roofline of a step of `batch` samples: the time is at least the FLOPs at the peak rate and
// at least the bytes at the bandwidth. Bytes (a lower bound of the traffic): fixed, what does not
// grow with the batch (the parameters, gradients and optimizer state each read and written once:
// 2 x state_bytes, the planner's sizes), then the activations the backward keeps, written in the
// forward and read in the backward, and the input read once: 4 x batch x (2 x saved + in) bytes.
static adv_roof roofline(double flops_per_sample, double fixed, double saved, double in,
                         uint32_t batch, double gflops, double gbs) {
    adv_roof q = {0};
    q.flops = flops_per_sample * batch;
    q.bytes = fixed + 4.0 * batch * (2 * saved + in);
    q.t_compute = q.flops / (gflops * 1e9);
    q.t_memory = q.bytes / (gbs * 1e9);
    q.step_s = fmax(q.t_compute, q.t_memory);
    q.sps = q.step_s > 0 ? batch / q.step_s : 0;
    return q;
}

static double state_bytes(const vkt_net_memory *n) {
    return (double)n->params + (double)n->grads + (double)n->optim;
}

static adv_roof single_roofline(const adv_run *r, const adv_cand *c, uint32_t batch) {
    return roofline(r->flops, 2 * state_bytes(&c->single.need[0]), r->saved, r->m->input_features,
                    batch, c->gflops, c->gbs);
}

// ---------------------------------------------------------------------------------------------
// Plans

static void plan_input(const adv_run *r, const adv_cand *c, int K, int M, vkt_schedule sched,
                       uint64_t limit, vkt_plan_input *in) {
    memset(in, 0, sizeof *in);
    in->model = r->m;
    in->batch = r->batch;
    in->optim = r->optim;
    in->ndevices = K;
    in->micro_batches = M;
    in->schedule = sched;
    for (int d = 0; d < K; d++)
        in->limit[d] = limit, in->align[d] = c->align;
}

// A split's samples/s: the stages run their micro-batches in a pipeline, so a step lasts
// (M + K - 1) / M times the busiest stage's time for the whole batch: K - 1 ticks to fill and
// drain, M ticks of work (the bubble is (K - 1) / (M + K - 1) of the step). A stage's time is its
// share of the model's compute at the device's measured samples/s at the micro-batch size, or its
// roofline, where each micro-batch after the first reads the stage's weights again (forward and
// backward) and adds into its gradients: (M - 1) x 2 x (parameter + gradient bytes) more. The
// activations passed between stages are not counted.
static void split_predict(const adv_run *r, const adv_cand *c, adv_split *s) {
    const vkt_plan *p = &s->plan;
    int K = s->K, M = s->M;
    uint32_t mb = (r->batch + M - 1) / M;
    double fill = (double)(M + K - 1) / M;
    double worst_m = 0, worst_r = 0;
    adv_pred am = measured_at(c, mb);
    for (int d = 0; d < K; d++) {
        if (am.basis) worst_m = fmax(worst_m, p->compute_share[d] * M * mb / am.sps);
        vkt_layer_cost lc = vkt_model_cost(r->m, p->lo[d], p->hi[d]);
        const vkt_net_memory *nd = &p->need[d];
        double fixed = 2 * state_bytes(nd) + (M - 1) * 2.0 * ((double)nd->params + nd->grads);
        adv_roof q = roofline(lc.fwd_flops + lc.bwd_flops, fixed, lc.saved_floats,
                              r->m->layers[p->lo[d]].in_features, r->batch, c->gflops, c->gbs);
        worst_r = fmax(worst_r, q.step_s);
    }
    s->bubble = (double)(K - 1) / (M + K - 1);
    s->roof.sps = r->batch / (fill * worst_r);
    s->roof.basis = BASIS_ROOFLINE;
    snprintf(s->roof.how, sizeof s->roof.how, "predicted (roofline) of the busiest stage, x %.3f",
             fill);
    if (am.basis) {
        s->pred.sps = r->batch / (fill * worst_m);
        s->pred.basis = BASIS_SCALED;
        snprintf(s->pred.how, sizeof s->pred.how,
                 "from one device's %.1f samples/s at the micro-batch of %u (%s): the busiest "
                 "stage's share of it, x %.3f",
                 am.sps, mb, am.how, fill);
    } else {
        s->pred = s->roof;
    }
}

// The layers split over the fewest devices (2 .. max_devices) whose every stage fits; at that
// count the micro-batches and schedule with the most samples/s (given ones, else searched:
// M = 1, 2, 4, ... up to the batch, GPipe and 1F1B).
static void find_split(const adv_run *r, adv_cand *c) {
    adv_split *best = &c->split;
    memset(best, 0, sizeof *best);
    int n = r->m->nlayers, Kmax = r->max_devices < n ? r->max_devices : n;
    int Ms[40], nM = 0;
    if (r->micro_batches)
        Ms[nM++] = r->micro_batches;
    else {
        for (uint32_t M = 1; M <= r->batch && nM < 38; M *= 2)
            Ms[nM++] = (int)M;
        if ((uint32_t)Ms[nM - 1] != r->batch) Ms[nM++] = (int)r->batch;
    }
    for (int K = 2; K <= Kmax && !best->found; K++)
        for (int i = 0; i < nM; i++)
            for (int sc = 0; sc < 2; sc++) {
                vkt_schedule sched = sc ? VKT_SCHEDULE_1F1B : VKT_SCHEDULE_GPIPE;
                if (r->schedule >= 0 && (int)sched != r->schedule) continue;
                if (r->schedule < 0 && sched == VKT_SCHEDULE_1F1B && Ms[i] == 1) continue;
                vkt_plan_input in;
                plan_input(r, c, K, Ms[i], sched, c->limit, &in);
                adv_split s = {.K = K, .M = Ms[i], .schedule = sched};
                vkt_plan_layers(&in, &s.plan);
                if (!s.plan.fits) continue;
                s.found = true;
                for (int d = 0; d < K; d++)
                    if (s.plan.need[d].total > s.largest) s.largest = s.plan.need[d].total;
                split_predict(r, c, &s);
                if (!best->found || s.pred.sps > best->pred.sps * (1 + 1e-9)) *best = s;
            }
    if (best->found) return;
    // None: the layer that needs the most alone (micro-batches of one row, one in flight), and
    // the smallest limit at which a split over the most devices fits (1F1B with micro-batches of
    // one row holds the fewest activations), to the MiB.
    for (int l = 0; l < n; l++) {
        vkt_net_desc nd = {.model = r->m,
                           .first_layer = l,
                           .last_layer = l + 1,
                           .max_batch = 1,
                           .slots = 1,
                           .optim = r->optim};
        vkt_net_memory em = vkt_net_estimate(&nd, c->align);
        if (em.total > best->worst_need.total) best->worst_layer = l, best->worst_need = em;
    }
    if (Kmax < 2) return;
    vkt_plan_input in;
    vkt_plan p = {0};
    uint64_t lo = best->worst_need.total, hi = c->single.need[0].total;
    for (int tries = 0; tries < 6; tries++, hi *= 2) {
        plan_input(r, c, Kmax, (int)r->batch, VKT_SCHEDULE_1F1B, hi, &in);
        vkt_plan_layers(&in, &p);
        if (p.fits) break;
    }
    if (!p.fits) return;
    while (hi - lo > (1u << 20)) {
        uint64_t mid = lo + (hi - lo) / 2;
        plan_input(r, c, Kmax, (int)r->batch, VKT_SCHEDULE_1F1B, mid, &in);
        vkt_plan_layers(&in, &p);
        if (p.fits)
            hi = mid;
        else
            lo = mid;
    }
    best->min_limit = (hi + (1u << 20) - 1) / (1u << 20) * (1u << 20);
    for (int K = 2; K <= Kmax; K++) {
        plan_input(r, c, K, (int)r->batch, VKT_SCHEDULE_1F1B, best->min_limit, &in);
        vkt_plan_layers(&in, &p);
        if (p.fits) {
            best->min_K = K;
            break;
        }
    }
}

static void evaluate(adv_run *r, adv_cand *c) {
    // A limit cannot add memory: the smaller of the two.
    c->limit = r->mem_limit && r->mem_limit < c->memory ? r->mem_limit : c->memory;
    vkt_plan_input in;
    plan_input(r, c, 1, 1, VKT_SCHEDULE_GPIPE, c->limit, &in);
    vkt_plan_single(&in, &c->single);
    c->roof = single_roofline(r, c, r->batch);
    adv_pred m = measured_at(c, r->batch);
    if (m.basis) {
        c->pred = m;
        c->error = c->roof.sps / m.sps;
    } else {
        c->pred.sps = c->roof.sps;
        c->pred.basis = BASIS_ROOFLINE;
        snprintf(c->pred.how, sizeof c->pred.how, "predicted (roofline)%s",
                 c->profile ? "" : " from the measured peaks");
    }
    if (!c->single.fits) find_split(r, c);
}

// ---------------------------------------------------------------------------------------------
// Text

static const char *sched_name(vkt_schedule s) { return s == VKT_SCHEDULE_1F1B ? "1f1b" : "gpipe"; }

static void print_cand(const adv_run *r, const adv_cand *c) {
    const vkt_net_memory *n = &c->single.need[0];
    printf("\n%s: %s, %s %s\n", c->label, c->name, c->profile ? "device profile" : "results",
           c->file);
    printf("  peak %.1f GFLOP/s, bandwidth %.1f GB/s (%s); memory %.1f MiB%s\n", c->gflops, c->gbs,
           c->peak_from, c->memory / MIB, c->limit < c->memory ? ", limited by --mem-limit" : "");
    if (c->unverified[0])
        printf("  figures the profile marks unverified: %s (see the file's sources)\n",
               c->unverified);
    if (!c->runs) printf("  NOT a vktrain device: %s\n", c->runs_note);
    printf("  fits: %s: needs %.1f MiB of %.1f MiB (parameters %.1f, gradients %.1f, optimizer "
           "state %.1f, activations %.1f, other %.1f MiB; alignment %llu: %s)\n",
           c->single.fits ? "yes" : "NO", n->total / MIB, c->limit / MIB, n->params / MIB,
           n->grads / MIB, n->optim / MIB, n->activations / MIB, n->io / MIB,
           (unsigned long long)c->align, c->align_from);
    const char *alone = c->single.fits ? "" : " alone, were there room";
    if (c->pred.basis != BASIS_ROOFLINE)
        printf("  samples/s%s: %.1f, %s\n", alone, c->pred.sps, c->pred.how);
    else if (c->profile)
        printf("  samples/s%s: %.1f predicted (roofline): the device has no measurement\n", alone,
               c->pred.sps);
    else
        printf("  samples/s%s: %.1f predicted (roofline) from the measured peaks: %s\n", alone,
               c->pred.sps, c->data_note);
    printf("  roofline: %.1f samples/s predicted (roofline), %s-bound: %.3f ms of compute (%.1f "
           "GFLOP), %.3f ms of memory traffic (%.1f MB) per step",
           c->roof.sps, c->roof.t_compute >= c->roof.t_memory ? "compute" : "memory",
           c->roof.t_compute * 1e3, c->roof.flops / 1e9, c->roof.t_memory * 1e3,
           c->roof.bytes / 1e6);
    if (c->error > 0)
        printf("; predicted/measured %.2f at batch %u%s%s%s", c->error, r->batch,
               c->pred.basis == BASIS_MEASURED ? "" : " (against the ",
               c->pred.basis == BASIS_MEASURED ? "" : basis_name(c->pred.basis),
               c->pred.basis == BASIS_MEASURED ? "" : " value)");
    printf("\n");
    if (c->npts) {
        printf("  roofline error (predicted/measured) at the measured batches:");
        for (int i = 0; i < c->npts; i++)
            printf(" %u: %.2f", c->pts[i].batch,
                   single_roofline(r, c, c->pts[i].batch).sps / c->pts[i].sps);
        printf("\n");
    }
    if (c->single.fits) return;
    const adv_split *s = &c->split;
    if (s->found) {
        uint32_t mb = (r->batch + s->M - 1) / s->M;
        printf("  split: layers over %d %s devices (%s, %d micro-batch%s of %u row%s): the largest "
               "stage "
               "needs %.1f MiB of %.1f MiB; pipeline bubble (K-1)/(M+K-1) = %d/%d = %.1f%% of the "
               "step; %.3g samples/s, %s\n",
               s->K, c->label, sched_name(s->schedule), s->M, s->M == 1 ? "" : "es", mb,
               mb == 1 ? "" : "s", s->largest / MIB, c->limit / MIB, s->K - 1, s->M + s->K - 1,
               100 * s->bubble, s->pred.sps, s->pred.how);
        if (s->pred.basis != BASIS_ROOFLINE)
            printf("    roofline of the split: %.3g samples/s predicted (roofline)\n", s->roof.sps);
        for (int d = 0; d < s->K; d++) {
            const vkt_net_memory *q = &s->plan.need[d];
            printf("    stage %d: layers %d-%d, %.1f MiB (parameters %.1f, gradients %.1f, "
                   "optimizer state %.1f, activations %.1f MiB), %.1f%% of the compute\n",
                   d, s->plan.lo[d], s->plan.hi[d] - 1, q->total / MIB, q->params / MIB,
                   q->grads / MIB, q->optim / MIB, q->activations / MIB,
                   100 * s->plan.compute_share[d]);
        }
    } else {
        const vkt_layer_desc *wl = &r->m->layers[s->worst_layer];
        printf("  split: none over 2 to %d devices: layer %d (%s) alone needs %.1f MiB "
               "(parameters %.1f, gradients %.1f, optimizer state %.1f, activations %.1f MiB at "
               "micro-batches of one row)%s",
               r->max_devices < r->m->nlayers ? r->max_devices : r->m->nlayers, s->worst_layer,
               vkt_layer_type_name(wl), s->worst_need.total / MIB, s->worst_need.params / MIB,
               s->worst_need.grads / MIB, s->worst_need.optim / MIB,
               s->worst_need.activations / MIB,
               s->worst_need.total > c->limit ? ", more than the device has" : "");
        if (s->min_limit)
            printf("; with %.0f MiB per device (--mem-limit %lluM) layers over %d devices fits "
                   "(1f1b, micro-batches of one row)",
                   s->min_limit / MIB, (unsigned long long)(s->min_limit >> 20), s->min_K);
        printf("\n");
    }
}

// ---------------------------------------------------------------------------------------------
// The recommendation

typedef struct adv_choice {
    int cand; // -1: none
    bool split;
    double sps;
    adv_basis basis;
    char why[1024];
} adv_choice;

static void choose(const adv_run *r, adv_choice *ch) {
    ch->cand = -1;
    ch->why[0] = 0;
    int nfit = 0;
    for (int i = 0; i < r->ncand; i++) {
        const adv_cand *c = &r->c[i];
        if (!c->runs) continue;
        bool split = !c->single.fits;
        if (split && !c->split.found) continue;
        const adv_pred *p = split ? &c->split.pred : &c->pred;
        nfit++;
        // A device that fits alone beats a split; then the most samples/s.
        bool better =
            ch->cand < 0 || (ch->split && !split) || (ch->split == split && p->sps > ch->sps);
        if (better) ch->cand = i, ch->split = split, ch->sps = p->sps, ch->basis = p->basis;
    }
    if (ch->cand < 0) {
        const adv_cand *small = NULL;
        for (int i = 0; i < r->ncand; i++)
            if (!small || r->c[i].single.need[0].total * (double)small->limit <
                              small->single.need[0].total * (double)r->c[i].limit)
                small = &r->c[i];
        uint64_t need = small ? small->single.need[0].total : 0, lim = small ? small->limit : 0;
        uint64_t min_limit = small ? small->split.min_limit : 0;
        int n = snprintf(ch->why, sizeof ch->why,
                         "%s at batch %u fits on none of these devices, alone or split into "
                         "layers over up to %d of them (it needs %.1f MiB on one %s, which has "
                         "%.1f MiB",
                         r->m->name, r->batch, r->max_devices, need / MIB,
                         small ? small->label : "device", lim / MIB);
        if (small && small->split.worst_need.total > lim)
            n += snprintf(ch->why + n, sizeof ch->why - (size_t)n,
                          ", and its layer %d alone needs %.1f MiB", small->split.worst_layer,
                          small->split.worst_need.total / MIB);
        if (min_limit)
            snprintf(ch->why + n, sizeof ch->why - (size_t)n,
                     "): a split over %d devices needs %.0f MiB each; lower --batch or use "
                     "devices with more memory",
                     small->split.min_K, min_limit / MIB);
        else
            snprintf(ch->why + n, sizeof ch->why - (size_t)n,
                     "): lower --batch or use devices with more memory");
        return;
    }
    const adv_cand *c = &r->c[ch->cand];
    const char *basis =
        ch->basis == BASIS_ROOFLINE ? "predicted (roofline)" : basis_name(ch->basis);
    if (!ch->split) {
        int n = snprintf(ch->why, sizeof ch->why,
                         "%s trains %s at batch %u alone: it needs %.1f MiB of %.1f MiB and gives "
                         "%.1f samples/s (%s), the most of the %d device%s vktrain runs on that "
                         "hold it",
                         c->label, r->m->name, r->batch, c->single.need[0].total / MIB,
                         c->limit / MIB, ch->sps, basis, nfit, nfit == 1 ? "" : "s");
        // The runner-up, for the margin.
        const adv_cand *next = NULL;
        for (int i = 0; i < r->ncand; i++) {
            const adv_cand *o = &r->c[i];
            if (i == ch->cand || !o->runs || !o->single.fits) continue;
            if (!next || o->pred.sps > next->pred.sps) next = o;
        }
        if (next)
            n += snprintf(ch->why + n, sizeof ch->why - (size_t)n, " (next: %s, %.1f, %s)",
                          next->label, next->pred.sps,
                          next->pred.basis == BASIS_ROOFLINE ? "predicted (roofline)"
                                                             : basis_name(next->pred.basis));
        // A device vktrain cannot run on (a TPU) with a higher roofline is named, not chosen.
        for (int i = 0; i < r->ncand && n < (int)sizeof ch->why; i++) {
            const adv_cand *o = &r->c[i];
            if (!o->runs && o->single.fits && o->pred.sps > ch->sps)
                n += snprintf(ch->why + n, sizeof ch->why - (size_t)n,
                              "; %s predicts %.1f (roofline) but has no Vulkan driver", o->label,
                              o->pred.sps);
        }
    } else {
        const adv_split *s = &c->split;
        snprintf(ch->why, sizeof ch->why,
                 "no single device fits (%s needs %.1f MiB of %.1f MiB); layers over %d %s "
                 "devices (%s, %d micro-batches) needs at most %.1f MiB on each, and gives %.3g "
                 "samples/s (%s) with %.1f%% of the step in the pipeline bubble",
                 c->label, c->single.need[0].total / MIB, c->limit / MIB, s->K, c->label,
                 sched_name(s->schedule), s->M, s->largest / MIB, ch->sps, basis, 100 * s->bubble);
    }
}

// ---------------------------------------------------------------------------------------------
// JSON

static cJSON *pred_json(const adv_pred *p) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "samples_per_sec", p->sps);
    cJSON_AddStringToObject(o, "basis", basis_name(p->basis));
    cJSON_AddStringToObject(o, "how", p->how);
    return o;
}

static cJSON *memory_json(const vkt_net_memory *n, uint64_t limit) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "bytes_needed", (double)n->total);
    cJSON_AddNumberToObject(o, "bytes_available", (double)limit);
    cJSON_AddBoolToObject(o, "fits", n->total <= limit);
    cJSON_AddNumberToObject(o, "parameters_bytes", (double)n->params);
    cJSON_AddNumberToObject(o, "gradients_bytes", (double)n->grads);
    cJSON_AddNumberToObject(o, "optimizer_bytes", (double)n->optim);
    cJSON_AddNumberToObject(o, "activations_bytes", (double)n->activations);
    cJSON_AddNumberToObject(o, "other_bytes", (double)n->io);
    return o;
}

static cJSON *cand_json(const adv_run *r, const adv_cand *c) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "label", c->label);
    cJSON_AddStringToObject(o, "name", c->name);
    cJSON_AddStringToObject(o, "source", c->profile ? "profile" : "results");
    cJSON_AddStringToObject(o, "file", c->file);
    cJSON_AddBoolToObject(o, "runs_vktrain", c->runs);
    if (!c->runs) cJSON_AddStringToObject(o, "runs_note", c->runs_note);
    if (c->unverified[0]) cJSON_AddStringToObject(o, "unverified", c->unverified);
    cJSON_AddNumberToObject(o, "memory_bytes", (double)c->memory);
    cJSON_AddNumberToObject(o, "limit_bytes", (double)c->limit);
    cJSON_AddNumberToObject(o, "alignment", (double)c->align);
    cJSON_AddNumberToObject(o, "peak_gflops", c->gflops);
    cJSON_AddNumberToObject(o, "bandwidth_gbs", c->gbs);
    cJSON *single = memory_json(&c->single.need[0], c->limit);
    cJSON_AddBoolToObject(single, "plan_fits", c->single.fits);
    cJSON_AddItemToObject(o, "single", single);
    cJSON_AddItemToObject(o, "prediction", pred_json(&c->pred));
    if (!c->npts && c->data_note[0]) cJSON_AddStringToObject(o, "data_note", c->data_note);
    cJSON *rf = cJSON_AddObjectToObject(o, "roofline");
    cJSON_AddNumberToObject(rf, "samples_per_sec", c->roof.sps);
    cJSON_AddNumberToObject(rf, "step_s", c->roof.step_s);
    cJSON_AddNumberToObject(rf, "compute_s", c->roof.t_compute);
    cJSON_AddNumberToObject(rf, "memory_s", c->roof.t_memory);
    cJSON_AddNumberToObject(rf, "flops", c->roof.flops);
    cJSON_AddNumberToObject(rf, "bytes", c->roof.bytes);
    cJSON_AddStringToObject(rf, "bound",
                            c->roof.t_compute >= c->roof.t_memory ? "compute" : "memory");
    if (c->error > 0) cJSON_AddNumberToObject(o, "roofline_error", c->error);
    cJSON *chk = cJSON_AddArrayToObject(o, "roofline_check");
    for (int i = 0; i < c->npts; i++) {
        cJSON *e = cJSON_CreateObject();
        double pr = single_roofline(r, c, c->pts[i].batch).sps;
        cJSON_AddNumberToObject(e, "batch", c->pts[i].batch);
        cJSON_AddNumberToObject(e, "measured", c->pts[i].sps);
        cJSON_AddNumberToObject(e, "roofline", pr);
        cJSON_AddNumberToObject(e, "ratio", pr / c->pts[i].sps);
        cJSON_AddItemToArray(chk, e);
    }
    if (c->single.fits) return o;
    const adv_split *s = &c->split;
    cJSON *sp = cJSON_AddObjectToObject(o, "split");
    cJSON_AddBoolToObject(sp, "found", s->found);
    if (s->found) {
        cJSON_AddStringToObject(sp, "strategy", "layers");
        cJSON_AddNumberToObject(sp, "devices", s->K);
        cJSON_AddNumberToObject(sp, "micro_batches", s->M);
        cJSON_AddStringToObject(sp, "schedule", sched_name(s->schedule));
        cJSON_AddNumberToObject(sp, "largest_bytes", (double)s->largest);
        cJSON_AddNumberToObject(sp, "bubble_fraction", s->bubble);
        cJSON_AddItemToObject(sp, "prediction", pred_json(&s->pred));
        cJSON_AddItemToObject(sp, "roofline", pred_json(&s->roof));
        cJSON *st = cJSON_AddArrayToObject(sp, "stages");
        for (int d = 0; d < s->K; d++) {
            cJSON *e = memory_json(&s->plan.need[d], c->limit);
            cJSON_AddNumberToObject(e, "first_layer", s->plan.lo[d]);
            cJSON_AddNumberToObject(e, "last_layer", s->plan.hi[d] - 1);
            cJSON_AddNumberToObject(e, "compute_share", s->plan.compute_share[d]);
            cJSON_AddItemToArray(st, e);
        }
    } else {
        cJSON_AddNumberToObject(sp, "largest_layer", s->worst_layer);
        cJSON_AddItemToObject(sp, "largest_layer_memory", memory_json(&s->worst_need, c->limit));
        if (s->min_limit) {
            cJSON_AddNumberToObject(sp, "min_limit_bytes", (double)s->min_limit);
            cJSON_AddNumberToObject(sp, "min_limit_devices", s->min_K);
        }
    }
    return o;
}

// ---------------------------------------------------------------------------------------------
// The command

static int usage_error(const char *msg, const char *arg) {
    fprintf(stderr,
            "vktrain advise: %s%s%s (usage: vktrain advise --model FILE --batch N [--results "
            "A.json ...] [--device-profile NAME|FILE ...] [--mem-limit SIZE] [--devices K] "
            "[--optimizer sgd|adamw] [--momentum X] [--micro-batches M] [--schedule gpipe|1f1b] "
            "[--json])\n",
            msg, arg ? " " : "", arg ? arg : "");
    return 2;
}

static bool parse_uint(const char *v, unsigned long lo, unsigned long hi, unsigned long *out) {
    char *end;
    errno = 0;
    unsigned long x = v && *v != '-' ? strtoul(v, &end, 10) : 0;
    if (!v || *v == '-' || end == v || *end || errno || x < lo || x > hi) return false;
    *out = x;
    return true;
}

int cmd_advise(int argc, char **argv) {
    const char *model_path = NULL, *results[MAX_CANDS], *profiles[MAX_CANDS];
    int nres = 0, nprof = 0;
    const char *optim = "sgd", *momentum = NULL;
    unsigned long batch = 0, devices = VKT_MAX_DEVICES, micro = 0;
    uint64_t mem_limit = 0;
    int schedule = -1;
    bool json = false;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        bool list = !strcmp(a, "--results") || !strcmp(a, "--device-profile");
        if (list) {
            // Every following argument up to the next flag.
            int got = 0;
            while (i + 1 < argc && strncmp(argv[i + 1], "--", 2) != 0) {
                const char **dst = !strcmp(a, "--results") ? results : profiles;
                int *nd = !strcmp(a, "--results") ? &nres : &nprof;
                if (nres + nprof >= MAX_CANDS) return usage_error("more than 32 devices", NULL);
                dst[(*nd)++] = argv[++i];
                got++;
            }
            if (!got) return usage_error(a, "needs a file or name");
            continue;
        }
        if (!strcmp(a, "--json")) {
            json = true;
            continue;
        }
        if (!v) return usage_error(a, "needs a value");
        i++;
        if (!strcmp(a, "--model"))
            model_path = v;
        else if (!strcmp(a, "--batch")) {
            if (!parse_uint(v, 1, 1u << 24, &batch))
                return usage_error("--batch takes a whole number from 1 to 16777216, not", v);
        } else if (!strcmp(a, "--devices")) {
            if (!parse_uint(v, 2, VKT_MAX_DEVICES, &devices))
                return usage_error("--devices takes the most devices a split may use, 2 to 16, "
                                   "not",
                                   v);
        } else if (!strcmp(a, "--micro-batches")) {
            if (!parse_uint(v, 1, 1u << 24, &micro))
                return usage_error("--micro-batches takes a whole number >= 1, not", v);
        } else if (!strcmp(a, "--schedule")) {
            if (!strcmp(v, "gpipe"))
                schedule = VKT_SCHEDULE_GPIPE;
            else if (!strcmp(v, "1f1b"))
                schedule = VKT_SCHEDULE_1F1B;
            else
                return usage_error("--schedule is gpipe or 1f1b, not", v);
        } else if (!strcmp(a, "--mem-limit")) {
            if (!cli_parse_size(a, v, &mem_limit)) return 2;
        } else if (!strcmp(a, "--optimizer"))
            optim = v;
        else if (!strcmp(a, "--momentum"))
            momentum = v;
        else
            return usage_error("unknown option", a);
    }
    if (!model_path) return usage_error("which model? --model FILE (assets/models/)", NULL);
    if (!batch) return usage_error("which batch size? --batch N", NULL);
    if (micro > batch) return usage_error("--micro-batches is more than --batch:", NULL);

    adv_run *r = calloc(1, sizeof *r);
    vkt_model_desc m;
    if (!r) return cli_fail("out of host memory");
    if (vkt_model_load(model_path, &m) != VKT_OK) {
        free(r);
        return cli_fail(vkt_error());
    }
    int rc = 0;
    r->m = &m;
    r->batch = (uint32_t)batch;
    r->mem_limit = mem_limit;
    r->max_devices = (int)devices;
    r->micro_batches = (int)micro;
    r->schedule = schedule;
    if (!strcmp(optim, "sgd")) {
        r->optim = vkt_optim_default(VKT_OPTIM_SGD);
        r->optim.momentum = 0.9f; // vktrain's default, as `vktrain train`
    } else if (!strcmp(optim, "adamw"))
        r->optim = vkt_optim_default(VKT_OPTIM_ADAMW);
    else {
        rc = usage_error("--optimizer is sgd or adamw, not", optim);
        goto done;
    }
    if (momentum) {
        char *end;
        double x = strtod(momentum, &end);
        if (*end || end == momentum || !(x >= 0 && x < 1) || r->optim.kind != VKT_OPTIM_SGD) {
            rc = usage_error("--momentum takes a number in [0, 1) with --optimizer sgd, not",
                             momentum);
            goto done;
        }
        r->optim.momentum = (float)x;
    }
    vkt_layer_cost cost = vkt_model_cost(&m, 0, m.nlayers);
    r->flops = cost.fwd_flops + cost.bwd_flops;
    r->saved = cost.saved_floats;

    // The candidates: the results' devices, the profiles; neither given: every profile.
    char names[1024];
    if (!nres && !nprof) {
        static char buf[32][128];
        profile_names(names, sizeof names);
        for (char *save = NULL, *w = strtok_r(names, ", ", &save); w && nprof < 32;
             w = strtok_r(NULL, ", ", &save)) {
            snprintf(buf[nprof], sizeof buf[nprof], "%s", w);
            profiles[nprof] = buf[nprof];
            nprof++;
        }
    }
    for (int i = 0; i < nres && rc == 0; i++) {
        adv_cand *c = &r->c[r->ncand++];
        if (load_results(r, results[i], c) != VKT_OK)
            rc = cli_fail(vkt_error());
        else
            results_align(r, c);
    }
    for (int i = 0; i < nprof && rc == 0; i++)
        if (load_profile(profiles[i], &r->c[r->ncand++]) != VKT_OK) rc = cli_fail(vkt_error());
    if (rc) goto done;
    if (!r->ncand) {
        rc = cli_fail("no devices to advise on: give --results FILE.json or --device-profile NAME");
        goto done;
    }
    for (int i = 0; i < r->ncand; i++)
        evaluate(r, &r->c[i]);
    adv_choice ch;
    choose(r, &ch);
    const char *optim_text = r->optim.kind == VKT_OPTIM_ADAMW ? "adamw"
                             : r->optim.momentum != 0         ? "sgd with momentum"
                                                              : "sgd";
    if (json) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "model", m.name);
        cJSON_AddNumberToObject(o, "parameters", (double)vkt_model_param_count(&m));
        cJSON_AddNumberToObject(o, "flops_per_sample", r->flops);
        cJSON_AddNumberToObject(o, "saved_floats_per_sample", r->saved);
        cJSON_AddNumberToObject(o, "batch", r->batch);
        cJSON_AddStringToObject(o, "optimizer", optim_text);
        if (mem_limit)
            cJSON_AddNumberToObject(o, "mem_limit_bytes", (double)mem_limit);
        else
            cJSON_AddNullToObject(o, "mem_limit_bytes");
        cJSON_AddNumberToObject(o, "max_devices", r->max_devices);
        cJSON_AddStringToObject(
            o, "roofline_formula",
            "step_s >= max(flops / (peak_gflops * 1e9), bytes / (bandwidth_gbs "
            "* 1e9)); bytes = 2 * (parameters + gradients + optimizer state "
            "bytes) + 4 * batch * (2 * saved_floats_per_sample + input floats)");
        cJSON *arr = cJSON_AddArrayToObject(o, "devices");
        for (int i = 0; i < r->ncand; i++)
            cJSON_AddItemToArray(arr, cand_json(r, &r->c[i]));
        cJSON *rec = cJSON_AddObjectToObject(o, "recommended");
        if (ch.cand >= 0) {
            const adv_cand *c = &r->c[ch.cand];
            cJSON_AddStringToObject(rec, "device", c->label);
            cJSON_AddStringToObject(rec, "strategy", ch.split ? "layers" : "single");
            cJSON_AddNumberToObject(rec, "devices", ch.split ? c->split.K : 1);
            cJSON_AddNumberToObject(rec, "samples_per_sec", ch.sps);
            cJSON_AddStringToObject(rec, "basis", basis_name(ch.basis));
        } else {
            cJSON_AddNullToObject(rec, "device");
            cJSON_AddStringToObject(rec, "strategy", "none");
        }
        cJSON_AddStringToObject(rec, "why", ch.why);
        char *s = cJSON_PrintUnformatted(o);
        printf("%s\n", s ? s : "{}");
        cJSON_free(s);
        cJSON_Delete(o);
    } else {
        printf("advise: %s, %llu parameters, %.0f FLOPs per sample and step (as `vktrain model` "
               "counts them), batch %u, optimizer %s; memory per device: %s\n",
               m.name, (unsigned long long)vkt_model_param_count(&m), r->flops, r->batch,
               optim_text, mem_limit ? "--mem-limit or less" : "each device's");
        printf("roofline: step >= max(FLOPs / peak FLOP/s, bytes / bandwidth), bytes = 2 x "
               "(parameters + gradients + optimizer state) + 4 x batch x (2 x activation floats "
               "kept + input floats); a lower bound of the step, so an upper bound of samples/s\n");
        for (int i = 0; i < r->ncand; i++)
            print_cand(r, &r->c[i]);
        printf("\nrecommended: %s%s%s: %s\n", ch.cand >= 0 ? r->c[ch.cand].label : "none",
               ch.cand >= 0 ? ", " : "",
               ch.cand < 0 ? ""
               : ch.split  ? "layers"
                           : "single",
               ch.why);
    }
    rc = ch.cand >= 0 ? 0 : 1;
done:
    if (r->ctx) vkt_context_destroy(r->ctx);
    vkt_model_free(&m);
    free(r);
    return rc;
}
