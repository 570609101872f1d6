// plan.c (CLI): `vktrain plan`. For each strategy (replicated also with --shard-optimizer), the
// bytes each device would need (by kind), whether that fits, the bytes a replicated step moves,
// and the strategy it recommends and why. Opens no device: the arithmetic is
// parallel/plan.c, the same the strategies check before they allocate.
#include <stdio.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "cli.h"
#include "plan.h"

static const char *mib(uint64_t b, char *buf) {
    snprintf(buf, 32, "%.1f MiB", b / 1048576.0);
    return buf;
}

// "replicated+shard-optimizer" for replicated with its optimizer state sharded (its own entry,
// so that the JSON's strategies stay distinct by name), else the strategy's name.
static const char *plan_name(const vkt_plan *p) {
    return p->shard_optimizer ? "replicated+shard-optimizer" : vkt_strategy_name(p->kind);
}

static cJSON *plan_json(const vkt_plan *p, const vkt_plan_input *in, const char *refusal) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "strategy", plan_name(p));
    if (p->kind == VKT_STRATEGY_REPLICATED)
        cJSON_AddBoolToObject(o, "shard_optimizer", p->shard_optimizer);
    cJSON_AddBoolToObject(o, "possible", p->possible);
    cJSON_AddBoolToObject(o, "fits", p->fits);
    if (p->note[0]) cJSON_AddStringToObject(o, "note", p->note);
    if (refusal[0]) cJSON_AddStringToObject(o, "refusal", refusal);
    cJSON *devs = cJSON_AddArrayToObject(o, "devices");
    for (int d = 0; d < p->ndevices && p->possible; d++) {
        cJSON *j = cJSON_CreateObject();
        cJSON_AddNumberToObject(j, "device", d);
        cJSON_AddNumberToObject(j, "bytes_needed", (double)p->need[d].total);
        cJSON_AddNumberToObject(j, "bytes_available", (double)in->limit[d]);
        cJSON_AddBoolToObject(j, "fits", p->device_fits[d]);
        cJSON_AddNumberToObject(j, "parameters_bytes", (double)p->need[d].params);
        cJSON_AddNumberToObject(j, "gradients_bytes", (double)p->need[d].grads);
        cJSON_AddNumberToObject(j, "optimizer_bytes", (double)p->need[d].optim);
        cJSON_AddNumberToObject(j, "activations_bytes", (double)p->need[d].activations);
        cJSON_AddNumberToObject(j, "transfer_bytes", (double)p->need[d].io);
        cJSON_AddNumberToObject(j, "largest_allocation_bytes", (double)p->largest[d]);
        if (in->max_alloc[d])
            cJSON_AddNumberToObject(j, "max_allocation_bytes", (double)in->max_alloc[d]);
        cJSON_AddNumberToObject(j, "compute_share", p->compute_share[d]);
        if (p->kind == VKT_STRATEGY_REPLICATED) {
            cJSON_AddNumberToObject(j, "rows", p->rows[d]);
            cJSON_AddNumberToObject(j, "replica_rows", p->net_rows[d]);
        }
        // What the device moves per step (to and from the host): every strategy but single.
        if (p->kind != VKT_STRATEGY_SINGLE)
            cJSON_AddNumberToObject(j, "bytes_communicated_per_step", (double)p->comm_bytes[d]);
        if (p->kind == VKT_STRATEGY_LAYERS || p->kind == VKT_STRATEGY_LAYERS_TENSOR) {
            cJSON_AddNumberToObject(j, "first_layer", p->lo[d]);
            cJSON_AddNumberToObject(j, "last_layer", p->hi[d] - 1);
        }

        cJSON_AddItemToArray(devs, j);
    }
    if ((p->kind == VKT_STRATEGY_TENSOR || p->kind == VKT_STRATEGY_REPLICATED_TENSOR) &&
        p->possible)
        cJSON_AddNumberToObject(o, "reductions_per_step", p->reductions);
    return o;
}

static void plan_print(const vkt_plan *p, const vkt_plan_input *in, const char *const *label,
                       const char *refusal) {
    char a[32], b[32], c[32], d2[32], e[32], f[32];
    printf("%s: %s\n", p->shard_optimizer ? "replicated --shard-optimizer" : plan_name(p),
           !p->possible ? "not applicable"
           : p->fits    ? "fits"
                        : "does NOT fit");
    // A strategy that does not fit says so as `train` would refuse it.
    if (p->possible && !p->fits)
        printf("  %s\n", refusal);
    else if (p->note[0])
        printf("  %s\n", p->note);
    int width = 0;
    for (int d = 0; d < p->ndevices && p->possible; d++)
        if ((int)strlen(label[d]) > width) width = (int)strlen(label[d]);
    for (int d = 0; d < p->ndevices && p->possible; d++) {
        const vkt_net_memory *m = &p->need[d];
        printf("  %-*s needs %10s of %10s %s (params %s, grads %s, optim %s, activations %s)",
               width, label[d], mib(m->total, a), mib(in->limit[d], b),
               p->device_fits[d] ? "ok  " : "OVER", mib(m->params, c), mib(m->grads, d2),
               mib(m->optim, e), mib(m->activations, f));
        if (p->kind == VKT_STRATEGY_LAYERS || p->kind == VKT_STRATEGY_LAYERS_TENSOR)
            printf(" layers %d-%d, moves %s a step", p->lo[d], p->hi[d] - 1,
                   mib(p->comm_bytes[d], a));
        if (p->kind == VKT_STRATEGY_REPLICATED)
            printf(" %u rows, moves %s a step", p->rows[d], mib(p->comm_bytes[d], a));
        if ((p->kind == VKT_STRATEGY_TENSOR || p->kind == VKT_STRATEGY_REPLICATED_TENSOR))
            printf(" %.0f%% of the compute, moves %.1f %s a step", 100 * p->compute_share[d],
                   p->comm_bytes[d] < (1u << 20) ? p->comm_bytes[d] / 1024.0
                                                 : p->comm_bytes[d] / 1048576.0,
                   p->comm_bytes[d] < (1u << 20) ? "KiB" : "MiB");
        printf("\n");
    }
    if ((p->kind == VKT_STRATEGY_TENSOR || p->kind == VKT_STRATEGY_REPLICATED_TENSOR) &&
        p->possible)
        printf("  %d reductions a step (each split pair one forward, one backward)\n",
               p->reductions);
}

// --device-per-rank A,B+C: the run mpirun would start, its ranks' devices one list (rank r's
// devices in order, rank_of[] each one's rank); *nranks 1 without the flag.
static void ranks_as_devices(cli_run_options *c, char *spec, size_t size, int *rank_of,
                             int *nranks) {
    *nranks = 1;
    memset(rank_of, 0, VKT_MAX_DEVICES * sizeof *rank_of);
    if (!c->device_per_rank) return;
    snprintf(spec, size, "%s", c->device_per_rank);
    int dev = 0;
    for (char *q = spec; *q; q++) {
        if (*q == '+') *q = ',';
        if (*q == ',') {
            if (dev + 1 < VKT_MAX_DEVICES) dev++;
            if (c->device_per_rank[q - spec] == ',') (*nranks)++;
        }
        rank_of[dev] = *nranks - 1;
    }
    c->device_spec = spec;
    c->device_per_rank = NULL;
}

int cmd_plan(int argc, char **argv) {
    cli_run_options c;
    vkt_context *ctx;
    int rc = cli_parse_run_options(argc, argv, &c);
    if (rc) return rc;
    char spec[1024];
    int rank_of[VKT_MAX_DEVICES], nranks;
    if (c.device_per_rank && c.device_spec) {
        fprintf(stderr, "vktrain: give --device or --device-per-rank, not both\n");
        return 2;
    }
    ranks_as_devices(&c, spec, sizeof spec, rank_of, &nranks);
    rc = cli_resolve_devices(&c, &ctx);
    if (rc) {
        vkt_context_destroy(ctx);
        return rc;
    }
    vkt_model_desc model;
    if (vkt_model_load(c.o.model_path, &model) != VKT_OK) {
        vkt_context_destroy(ctx);
        return cli_fail(vkt_error());
    }
    const vkt_strategy_desc *sd = &c.o.strategy;
    vkt_plan_input in = {.model = &model,
                         .batch = c.o.batch,
                         .optim = c.o.optim,
                         .ndevices = sd->ndevices,
                         .micro_batches = sd->micro_batches,
                         .schedule = sd->schedule};
    char labels[VKT_MAX_DEVICES][300];
    const char *label_of[VKT_MAX_DEVICES];
    for (int i = 0; i < sd->ndevices; i++) {
        vkt_plan_input_device(&in, i, vkt_context_device_info(ctx, sd->devices[i]), sd->mem_limit);
        in.balance[i] = sd->balance[i]; // < 0: --balance auto
        in.split[i] = sd->split[i];
        char own[300];
        vkt_strategy_device_label(ctx, sd->devices, sd->ndevices, i, own, sizeof own);
        if (nranks > 1)
            snprintf(labels[i], sizeof labels[i], "rank %d %s", rank_of[i], own);
        else
            snprintf(labels[i], sizeof labels[i], "%s", own);
        label_of[i] = labels[i];
    }
    // plans[3]: replicated with --shard-optimizer, shown after plain replicated (order).
    // plans[5], plans[6]: layers,tensor and replicated,tensor, groups of --tensor-size (2).
    enum { NPLANS = 7 };
    vkt_plan plans[NPLANS];
    const int order[NPLANS] = {0, 1, 3, 2, 4, 5, 6};
    vkt_plan_single(&in, &plans[0]);
    vkt_plan_replicated(&in, &plans[1]);
    vkt_plan_layers(&in, &plans[2]);
    // --pipelines P: the layers row is one pipeline's G / P stages at the largest shard's rows,
    // each stage against its smallest device over the pipelines (as parallel/layers.c plans it).
    int P = sd->pipelines > 1 ? sd->pipelines : 1;
    vkt_plan_input pin = in;
    if (P > 1 && sd->ndevices % P == 0 && sd->ndevices / P >= 2) {
        int S = sd->ndevices / P;
        pin.ndevices = S;
        pin.batch = (c.o.batch + (uint32_t)P - 1) / (uint32_t)P;
        for (int g = 0; g < S; g++)
            for (int p = 1; p < P; p++) {
                int d = p * S + g;
                if (in.limit[d] < pin.limit[g]) pin.limit[g] = in.limit[d];
                if (in.max_alloc[d] < pin.max_alloc[g]) pin.max_alloc[g] = in.max_alloc[d];
                if (in.align[d] > pin.align[g]) pin.align[g] = in.align[d];
            }
        vkt_plan_layers(&pin, &plans[2]);
        snprintf(plans[2].note, sizeof plans[2].note,
                 "--pipelines %d: one pipeline of %d stages at %u rows shown; every pipeline's "
                 "stage g needs the same (its smallest device's limit shown); each step sums every "
                 "stage's gradients over the pipelines",
                 P, S, pin.batch);
    } else if (P > 1) {
        plans[2].possible = plans[2].fits = false;
        snprintf(plans[2].note, sizeof plans[2].note,
                 "--pipelines %d needs the %d devices to divide into %d pipelines of at least two "
                 "stages",
                 P, sd->ndevices, P);
    }
    vkt_plan_input zin = in;
    zin.shard_optimizer = true;
    vkt_plan_replicated(&zin, &plans[3]);
    vkt_plan_tensor(&in, &plans[4]);
    vkt_plan_input lin = in;
    lin.tensor_size = sd->tensor_size > 1 ? sd->tensor_size : 2;
    vkt_plan_layers(&lin, &plans[5]);
    vkt_plan_tensor(&lin, &plans[6]);
    // Across ranks: replicated and layers (parallel/world.c); the rest stay within a process.
    for (int k = 0; k < NPLANS && nranks > 1; k++) {
        if (k == 1 || k == 2) continue;
        plans[k].possible = false;
        plans[k].fits = false;
        snprintf(plans[k].note, sizeof plans[k].note,
                 k == 0 ? "the run has %d ranks" : "within one process only, not across %d ranks",
                 nranks);
    }
    // What `train --strategy X` says when X does not fit (the same function words it there).
    char refusal[NPLANS][1024];
    for (int i = 0; i < NPLANS; i++)
        vkt_plan_refusal(&plans[i],
                         i >= 5   ? &lin
                         : i == 2 ? &pin
                                  : &in,
                         label_of, refusal[i], sizeof refusal[i]);

    // Recommendation: one device that fits trains alone; with several, replication when a
    // replica fits everywhere (it scales throughput and has no pipeline bubble), with its
    // optimizer state sharded when only that fits (or --shard-optimizer asks for it where it
    // fits), layers when a cut into stages fits (one activation crosses each boundary per
    // micro-batch), tensor when only splitting the weights themselves fits (two reductions of the
    // whole batch's activations per split pair and step, and every device runs the unsplit
    // layers on the whole batch); otherwise nothing does.
    const char *rec = "none";
    char why[1200];
    char a[32], b[32];
    const vkt_plan *z = &plans[3];
    int zworst = 0; // the device where plain replicated is furthest over (or nearest) its limit
    for (int d = 1; d < sd->ndevices; d++)
        if (plans[1].need[d].total * in.limit[zworst] > plans[1].need[zworst].total * in.limit[d])
            zworst = d;
    if (sd->ndevices > 1 && z->fits && (!plans[1].fits || sd->shard_optimizer)) {
        rec = "replicated+shard-optimizer";
        char m[6][32];
        snprintf(why, sizeof why,
                 "%s: with the optimizer state sharded over the %d devices a replica needs %s on "
                 "%s (optimizer state %s instead of %s), which has %s; each step all-gathers the "
                 "updated parameters (%s moved a step per device, plain %s)",
                 plans[1].fits ? "asked for by --shard-optimizer, and it fits"
                               : "a whole replica does not fit",
                 sd->ndevices, mib(z->need[zworst].total, m[0]), labels[zworst],
                 mib(z->need[zworst].optim, m[1]), mib(plans[1].need[zworst].optim, m[2]),
                 mib(in.limit[zworst], m[3]), mib(z->comm_bytes[zworst], m[4]),
                 mib(plans[1].comm_bytes[zworst], m[5]));
    } else if (sd->ndevices == 1) {
        if (plans[0].fits) {
            rec = "single";
            snprintf(why, sizeof why, "one device was given and the model fits on it");
        } else {
            snprintf(why, sizeof why, "%s", refusal[0]);
        }
    } else if (plans[1].fits) {
        rec = "replicated";
        snprintf(why, sizeof why,
                 "a whole replica fits on every device, so sharding the batch "
                 "scales throughput with no pipeline bubble; layers would only be needed for a "
                 "model too large for one device");
    } else if (plans[2].fits) {
        rec = "layers";
        int worst = 0;
        for (int d = 1; d < sd->ndevices; d++)
            if (plans[1].need[d].total * in.limit[worst] > plans[1].need[worst].total * in.limit[d])
                worst = d;
        snprintf(why, sizeof why,
                 "a whole replica needs %s on %s, which has %s; split "
                 "into stages the largest stage needs %s",
                 mib(plans[1].need[worst].total, a), labels[worst], mib(in.limit[worst], b),
                 "less");
        uint64_t mx = 0;
        for (int d = 0; d < sd->ndevices; d++)
            if (plans[2].need[d].total > mx) mx = plans[2].need[d].total;
        char m2[32];
        snprintf(why + strlen(why) - 4, sizeof why - strlen(why) + 4, "%s", mib(mx, m2));
    } else if (plans[4].fits) {
        rec = "tensor";
        uint64_t mx = 0;
        for (int d = 0; d < sd->ndevices; d++)
            if (plans[4].need[d].total > mx) mx = plans[4].need[d].total;
        snprintf(why, sizeof why,
                 "neither a whole replica nor any cut into stages fits (%s); with the weights "
                 "split across the devices the largest device needs %s",
                 plans[2].note[0] ? plans[2].note : "see layers above", mib(mx, a));
    } else if (plans[5].fits) {
        rec = "layers,tensor";
        uint64_t mx = 0;
        for (int d = 0; d < sd->ndevices; d++)
            if (plans[5].need[d].total > mx) mx = plans[5].need[d].total;
        snprintf(why, sizeof why,
                 "neither stages of whole layers nor the weights split over every device fit; "
                 "stages of %d devices, each splitting its layers' weights, need at most %s a "
                 "device",
                 lin.tensor_size, mib(mx, a));
    } else {
        snprintf(why, sizeof why,
                 "the model fits on these devices neither whole, nor split into stages, nor "
                 "with its weights split, nor both: add devices, raise --mem-limit, or lower "
                 "--batch");
    }

    if (c.json) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "model", model.name);
        cJSON_AddNumberToObject(o, "parameters", (double)vkt_model_param_count(&model));
        cJSON_AddNumberToObject(o, "batch", c.o.batch);
        cJSON_AddNumberToObject(o, "ranks", nranks);
        cJSON *devs = cJSON_AddArrayToObject(o, "devices");
        for (int i = 0; i < sd->ndevices; i++) {
            cJSON *j = cJSON_CreateObject();
            cJSON_AddNumberToObject(j, "position", i);
            cJSON_AddNumberToObject(j, "index", sd->devices[i]);
            cJSON_AddNumberToObject(j, "rank", rank_of[i]);
            cJSON_AddStringToObject(j, "name", vkt_context_device_info(ctx, sd->devices[i])->name);
            cJSON_AddStringToObject(j, "label", labels[i]);
            cJSON_AddNumberToObject(j, "memory_limit_bytes", (double)in.limit[i]);
            cJSON_AddItemToArray(devs, j);
        }
        cJSON *arr = cJSON_AddArrayToObject(o, "strategies");
        for (int k = 0; k < NPLANS; k++)
            cJSON_AddItemToArray(arr, plan_json(&plans[order[k]],
                                                order[k] >= 5   ? &lin
                                                : order[k] == 2 ? &pin
                                                                : &in,
                                                refusal[order[k]]));
        cJSON_AddStringToObject(o, "recommended", rec);
        cJSON_AddStringToObject(o, "why", why);
        char *s = cJSON_PrintUnformatted(o);
        printf("%s\n", s);
        cJSON_free(s);
        cJSON_Delete(o);
    } else {
        printf("model %s: %llu parameters, batch %u, optimizer %s\n", model.name,
               (unsigned long long)vkt_model_param_count(&model), c.o.batch,
               c.o.optim.kind == VKT_OPTIM_ADAMW ? "adamw" : "sgd");
        for (int k = 0; k < NPLANS; k++)
            plan_print(&plans[order[k]],
                       order[k] >= 5   ? &lin
                       : order[k] == 2 ? &pin
                                       : &in,
                       label_of, refusal[order[k]]);
        if (nranks > 1 && plans[1].possible) {
            // Each bucket's sum goes to rank 0 and back (parallel/replicated.c): rank 0 moves
            // 2 (R - 1) gradient sets a step over the network, every other rank 2.
            uint64_t g = vkt_model_param_count(&model) * 4;
            char m0[32], m1[32];
            printf("across %d ranks: replicated sends and receives %s a step over the network on "
                   "rank 0, %s on every other rank; layers sends the activations and gradients "
                   "that cross a rank boundary (moves above)\n",
                   nranks, mib(2 * (uint64_t)(nranks - 1) * g, m0), mib(2 * g, m1));
        }
        printf("recommended: %s: %s\n", rec, why);
    }
    vkt_model_free(&model);
    vkt_context_destroy(ctx);
    return strcmp(rec, "none") == 0 ? 1 : 0;
}
