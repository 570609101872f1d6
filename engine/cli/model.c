// model.c (CLI): `vktrain model FILE [--json | --torch]`. What a model file describes, as the
// layer kinds declare it: every layer (nested ones indented) with its input and output shape
// per sample, its parameters and its FLOPs per sample; the totals; or (--torch) the model as a
// PyTorch expression, which the PyTorch scripts (tests/torch_equiv.py, scripts/torch_bench.py)
// build their module from, so that they never switch on a layer kind themselves.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "cli.h"
#include "layer.h"
#include "model.h"

static bool contains(const vkt_layer_desc *l, const vkt_layer_desc *d) {
    if (l == d) return true;
    for (int j = 0; j < l->nlayers; j++)
        if (contains(&l->layers[j], d)) return true;
    return false;
}

// Trained parameters of l, its body's included (not its buffers).
static uint64_t layer_params(const vkt_model_desc *m, const vkt_layer_desc *l) {
    int n = vkt_model_tensors(m, 0, m->nlayers, NULL, 0);
    vkt_net_tensor *t = calloc((size_t)n + 1, sizeof *t);
    uint64_t sum = 0;
    if (!t) return 0;
    vkt_model_tensors(m, 0, m->nlayers, t, n);
    for (int i = 0; i < n; i++)
        if (!t[i].state && contains(l, t[i].desc)) sum += t[i].count;
    free(t);
    return sum;
}

static void print_layers(const vkt_model_desc *m, const vkt_layer_desc *ls, int n,
                         const char *prefix, int depth, cJSON *arr) {
    for (int i = 0; i < n; i++) {
        const vkt_layer_desc *l = &ls[i];
        char path[64], in[96], out[96];
        snprintf(path, sizeof path, "%s%s%d", prefix, *prefix ? "." : "", i);
        vkt_shape_format(&l->in, in, sizeof in);
        vkt_shape_format(&l->out, out, sizeof out);
        // A container's figures include its body's (printed below it, indented).
        vkt_model_desc one = {.nlayers = 1, .layers = (vkt_layer_desc *)l};
        vkt_layer_cost c = vkt_model_cost(&one, 0, 1);
        uint64_t params = layer_params(m, l);
        if (arr) {
            cJSON *o = cJSON_CreateObject();
            cJSON_AddStringToObject(o, "path", path);
            cJSON_AddStringToObject(o, "type", vkt_layer_type_name(l));
            cJSON_AddStringToObject(o, "in", in);
            cJSON_AddStringToObject(o, "out", out);
            cJSON_AddNumberToObject(o, "parameters", (double)params);
            cJSON_AddNumberToObject(o, "flops_per_sample", c.fwd_flops + c.bwd_flops);
            cJSON_AddItemToArray(arr, o);
        } else {
            printf("  %-8s %*s%-*s %-16s -> %-16s %12llu %14.0f\n", path, 2 * depth, "",
                   24 - 2 * depth > 0 ? 24 - 2 * depth : 0, vkt_layer_type_name(l), in, out,
                   (unsigned long long)params, c.fwd_flops + c.bwd_flops);
        }
        if (l->nlayers) print_layers(m, l->layers, l->nlayers, path, depth + 1, arr);
    }
}

int cmd_model(int argc, char **argv) {
    const char *path = NULL;
    bool json = false, torch = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json"))
            json = true;
        else if (!strcmp(argv[i], "--torch"))
            torch = true;
        else if (argv[i][0] != '-' && !path)
            path = argv[i];
        else {
            fprintf(stderr, "vktrain model: unknown option %s (usage: vktrain model FILE "
                            "[--json | --torch])\n",
                    argv[i]);
            return 2;
        }
    }
    if (!path) {
        fprintf(stderr, "vktrain model: which model? (usage: vktrain model FILE [--json | "
                        "--torch]; examples in assets/models/)\n");
        return 2;
    }
    vkt_model_desc m;
    if (vkt_model_load(path, &m) != VKT_OK) return cli_fail(vkt_error());
    int rc = 0;
    char in[96], out[96];
    vkt_shape_format(&m.input, in, sizeof in);
    vkt_shape_format(&m.output, out, sizeof out);
    vkt_layer_cost c = vkt_model_cost(&m, 0, m.nlayers);
    if (torch) {
        size_t size = 1 << 20;
        char *buf = malloc(size);
        if (!buf || vkt_model_torch(&m, buf, size) != VKT_OK)
            rc = cli_fail(buf ? vkt_error() : "out of host memory");
        else
            printf("%s\n", buf);
        free(buf);
    } else if (json) {
        cJSON *o = cJSON_CreateObject(), *arr = cJSON_CreateArray();
        cJSON_AddStringToObject(o, "name", m.name);
        cJSON_AddStringToObject(o, "input", in);
        cJSON_AddStringToObject(o, "output", out);
        cJSON_AddStringToObject(o, "loss", vkt_model_loss_name(m.loss));
        cJSON_AddNumberToObject(o, "parameters", (double)vkt_model_param_count(&m));
        cJSON_AddNumberToObject(o, "flops_per_sample", c.fwd_flops + c.bwd_flops);
        cJSON_AddNumberToObject(o, "saved_floats_per_sample", c.saved_floats);
        print_layers(&m, m.layers, m.nlayers, "", 0, arr);
        cJSON_AddItemToObject(o, "layers", arr);
        char *s = cJSON_PrintUnformatted(o);
        printf("%s\n", s ? s : "{}");
        free(s);
        cJSON_Delete(o);
    } else {
        printf("%s: %s -> %s, loss %s\n", m.name, in, out, vkt_model_loss_name(m.loss));
        printf("  %-8s %-24s %-16s    %-16s %12s %14s\n", "layer", "type", "in", "out",
               "parameters", "FLOPs/sample");
        print_layers(&m, m.layers, m.nlayers, "", 0, NULL);
        printf("  %llu parameters; %.0f FLOPs per sample and step (forward %.0f, backward "
               "%.0f); %.0f activation floats per sample kept for the backward\n",
               (unsigned long long)vkt_model_param_count(&m), c.fwd_flops + c.bwd_flops,
               c.fwd_flops, c.bwd_flops, c.saved_floats);
    }
    vkt_model_free(&m);
    return rc;
}
