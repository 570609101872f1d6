// generate.c (CLI): `vktrain generate --init CKPT [--model FILE] [--prompt TEXT] [--tokens N]
// [--temperature X] [--top-k K] [--seed S] [--device SPEC]`. Samples text from a trained language
// model: a model whose input is [T] token ids and whose output is [T, V] logits under
// softmax_cross_entropy (the next token at every position, assets/models/char_gpt.json). Each
// new token comes from the logits at the last position of the window of the last T tokens (the
// model is causal, so the positions after it, zeros, change nothing), softmax at the temperature
// over the top K, drawn with the seeded generator: the same seed gives the same text. Tokens are
// bytes when V <= 256 (printed as they come), ids otherwise (printed separated by spaces).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "strategy.h"

// splitmix64 -> [0, 1): the engine's generator (engine/nn/network.c uses the same).
static double uniform(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return (double)(z >> 11) / 9007199254740992.0;
}

// The next token from one position's logits.
static uint32_t sample(const float *logits, uint32_t V, double temperature, uint32_t top_k,
                       uint64_t *rng, double *p) {
    uint32_t best = 0;
    for (uint32_t v = 1; v < V; v++)
        if (logits[v] > logits[best]) best = v;
    if (temperature == 0) return best;
    // The k-th largest logit is the cut (ties at the cut are all kept).
    double cut = -INFINITY;
    if (top_k && top_k < V) {
        for (uint32_t v = 0; v < V; v++)
            p[v] = logits[v];
        for (uint32_t k = 0; k < top_k; k++) {
            uint32_t m = 0;
            for (uint32_t v = 1; v < V; v++)
                if (p[v] > p[m]) m = v;
            cut = p[m];
            p[m] = -INFINITY;
        }
    }
    double sum = 0;
    for (uint32_t v = 0; v < V; v++) {
        p[v] = logits[v] >= cut ? exp((logits[v] - logits[best]) / temperature) : 0;
        sum += p[v];
    }
    double u = uniform(rng) * sum, acc = 0;
    for (uint32_t v = 0; v < V; v++) {
        acc += p[v];
        if (u < acc && p[v] > 0) return v;
    }
    return best;
}

static int usage_error(const char *what) {
    fprintf(stderr, "vktrain generate: %s\n", what);
    return 2;
}

int cmd_generate(int argc, char **argv) {
    const char *prompt = "\n";
    long tokens = 200, top_k = 0;
    double temperature = 1.0;
    // Its own options; the rest (--model, --init, --device, --seed) are the run options.
    char **rest = calloc((size_t)argc + 1, sizeof *rest);
    if (!rest) return cli_fail("out of host memory");
    int nrest = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        bool own = !strcmp(a, "--prompt") || !strcmp(a, "--tokens") ||
                   !strcmp(a, "--temperature") || !strcmp(a, "--top-k");
        if (!own) {
            rest[nrest++] = argv[i];
            continue;
        }
        if (i + 1 >= argc) {
            free(rest);
            fprintf(stderr, "vktrain generate: %s needs a value\n", a);
            return 2;
        }
        const char *v = argv[++i];
        char *end;
        if (!strcmp(a, "--prompt")) {
            prompt = v;
        } else if (!strcmp(a, "--tokens")) {
            tokens = strtol(v, &end, 10);
            if (*end || tokens < 1 || tokens > 1000000) {
                free(rest);
                return usage_error("--tokens must be a whole number from 1 to 1000000");
            }
        } else if (!strcmp(a, "--top-k")) {
            top_k = strtol(v, &end, 10);
            if (*end || top_k < 0) {
                free(rest);
                return usage_error("--top-k must be a whole number >= 0 (0: every token)");
            }
        } else {
            temperature = strtod(v, &end);
            if (*end || !(temperature >= 0) || !isfinite(temperature)) {
                free(rest);
                return usage_error("--temperature must be a number >= 0 (0: always the most "
                                   "likely token)");
            }
        }
    }
    cli_run_options c;
    vkt_context *ctx;
    int rc = cli_open(nrest, rest, &c, &ctx);
    free(rest);
    if (rc) return rc;
    if (!c.o.init_path) {
        vkt_context_destroy(ctx);
        return usage_error("needs --init CHECKPOINT.safetensors (a trained language model)");
    }
    vkt_model_desc m;
    vkt_strategy *s = NULL;
    float *x = NULL, *y = NULL;
    double *p = NULL;
    uint32_t *ids = NULL;
    if (vkt_model_load(c.o.model_path, &m) != VKT_OK) {
        vkt_context_destroy(ctx);
        return cli_fail(vkt_error());
    }
    uint32_t T = m.input.dim[0], V = vkt_model_classes(&m);
    if (m.input.ndim != 1 || m.loss != VKT_LOSS_SOFTMAX_XENT || m.output.ndim != 2 ||
        m.output.dim[0] != T) {
        char in[96], out[96];
        vkt_shape_format(&m.input, in, sizeof in);
        vkt_shape_format(&m.output, out, sizeof out);
        fprintf(stderr,
                "vktrain generate: %s is not a language model: generate needs an input [T] of "
                "token ids and an output [T, V] of next-token logits under "
                "softmax_cross_entropy (as assets/models/char_gpt.json); it has input %s and "
                "output %s\n",
                c.o.model_path, in, out);
        vkt_model_free(&m);
        vkt_context_destroy(ctx);
        return 1;
    }
    vkt_strategy_desc d = c.o.strategy;
    d.model = &m;
    d.batch = 1;
    if (d.ndevices == 1) d.kind = VKT_STRATEGY_SINGLE;
    size_t plen = strlen(prompt);
    uint64_t n = plen + (uint64_t)tokens;
    vkt_status st = vkt_strategy_create(&d, &s);
    if (st == VKT_OK) st = vkt_strategy_init(s, c.o.seed);
    if (st == VKT_OK) st = vkt_checkpoint_load(s, c.o.init_path, false, NULL);
    x = calloc(T, sizeof *x);
    y = malloc((size_t)T * V * sizeof *y);
    p = malloc((size_t)V * sizeof *p);
    ids = malloc((size_t)(n ? n : 1) * sizeof *ids);
    if (st == VKT_OK && (!x || !y || !p || !ids))
        st = vkt_set_error(VKT_ERR_HOST_MEMORY, "out of host memory");
    uint64_t have = 0;
    for (size_t i = 0; i < plen && st == VKT_OK; i++) {
        uint32_t id = (uint8_t)prompt[i];
        if (id >= V) {
            char msg[160];
            snprintf(msg, sizeof msg,
                     "the prompt's byte %u at %zu is not a token of this model (V = %u)", id, i, V);
            st = vkt_set_error(VKT_ERR_ARG, msg);
        }
        ids[have++] = id;
    }
    if (st == VKT_OK && V <= 256) fwrite(prompt, 1, plen, stdout);
    uint64_t rng = c.o.seed * 0x9e3779b97f4a7c15ull + 0x2545f4914f6cdd1dull;
    for (long k = 0; k < tokens && st == VKT_OK; k++) {
        uint64_t w = have < T ? have : T, first = have - w;
        memset(x, 0, T * sizeof *x);
        for (uint64_t j = 0; j < w; j++)
            x[j] = (float)ids[first + j];
        st = vkt_strategy_predict(s, x, 1, y);
        if (st != VKT_OK) break;
        uint32_t id =
            sample(y + (w ? w - 1 : 0) * (uint64_t)V, V, temperature, (uint32_t)top_k, &rng, p);
        ids[have++] = id;
        if (V <= 256)
            fputc((int)id, stdout);
        else
            printf("%s%u", have > 1 ? " " : "", id);
        fflush(stdout);
    }
    if (st == VKT_OK) printf("\n");
    free(x);
    free(y);
    free(p);
    free(ids);
    vkt_strategy_destroy(s);
    vkt_model_free(&m);
    vkt_context_destroy(ctx);
    return st == VKT_OK ? 0 : cli_fail(vkt_error());
}
