// test_mlp_grad.c: the whole backward of a 3-layer MLP with softmax cross-entropy, on every
// device. A double-precision C reference of the network is checked against central finite
// differences of its own loss, entry by entry, for every parameter; the GPU gradients are then
// checked against the reference, entry by entry. Also: backward accumulates (+=), and removing
// one barrier from the recorded backward is caught by synchronization validation.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "network.h"
#include "test_util.h"

// 7 -> dense 6 -> tanh -> dense 5 -> relu -> dense 3, softmax cross-entropy, batch 6.
static const char *MODEL =
    "{\"name\": \"grad_mlp\", \"input\": [7], \"layers\": ["
    "{\"type\": \"dense\", \"units\": 6}, {\"type\": \"tanh\"},"
    "{\"type\": \"dense\", \"units\": 5}, {\"type\": \"relu\"},"
    "{\"type\": \"dense\", \"units\": 3}], \"loss\": \"softmax_cross_entropy\"}";
enum { B = 6, IN = 7, H1 = 6, H2 = 5, C = 3 };

typedef struct params {
    double w1[H1][IN], b1[H1], w2[H2][H1], b2[H2], w3[C][H2], b3[C];
} params;

// Mean softmax cross-entropy of the batch; with g != NULL also its gradient (analytic backprop).
static double ref_loss(const params *p, const double x[B][IN], const uint32_t *y, params *g) {
    double loss = 0;
    if (g) memset(g, 0, sizeof *g);
    for (int b = 0; b < B; b++) {
        double z1[H1], a1[H1], z2[H2], a2[H2], z3[C];
        for (int o = 0; o < H1; o++) {
            z1[o] = p->b1[o];
            for (int i = 0; i < IN; i++)
                z1[o] += p->w1[o][i] * x[b][i];
            a1[o] = tanh(z1[o]);
        }
        for (int o = 0; o < H2; o++) {
            z2[o] = p->b2[o];
            for (int i = 0; i < H1; i++)
                z2[o] += p->w2[o][i] * a1[i];
            a2[o] = z2[o] > 0 ? z2[o] : 0;
        }
        double mx = -INFINITY;
        for (int o = 0; o < C; o++) {
            z3[o] = p->b3[o];
            for (int i = 0; i < H2; i++)
                z3[o] += p->w3[o][i] * a2[i];
            if (z3[o] > mx) mx = z3[o];
        }
        double se = 0;
        for (int o = 0; o < C; o++)
            se += exp(z3[o] - mx);
        double lse = mx + log(se);
        loss += lse - z3[y[b]];
        if (!g) continue;
        double d3[C], d2[H2], d1[H1];
        for (int o = 0; o < C; o++)
            d3[o] = (exp(z3[o] - lse) - (o == (int)y[b])) / B;
        for (int o = 0; o < C; o++) {
            g->b3[o] += d3[o];
            for (int i = 0; i < H2; i++)
                g->w3[o][i] += d3[o] * a2[i];
        }
        for (int i = 0; i < H2; i++) {
            double s = 0;
            for (int o = 0; o < C; o++)
                s += d3[o] * p->w3[o][i];
            d2[i] = z2[i] > 0 ? s : 0;
        }
        for (int o = 0; o < H2; o++) {
            g->b2[o] += d2[o];
            for (int i = 0; i < H1; i++)
                g->w2[o][i] += d2[o] * a1[i];
        }
        for (int i = 0; i < H1; i++) {
            double s = 0;
            for (int o = 0; o < H2; o++)
                s += d2[o] * p->w2[o][i];
            d1[i] = s * (1 - a1[i] * a1[i]);
        }
        for (int o = 0; o < H1; o++) {
            g->b1[o] += d1[o];
            for (int i = 0; i < IN; i++)
                g->w1[o][i] += d1[o] * x[b][i];
        }
    }
    return loss / B;
}

// The parameter tensors of params in the order of the network's tensor list.
static double *tensor_ptr(params *p, int i) {
    double *t[6] = {&p->w1[0][0], p->b1, &p->w2[0][0], p->b2, &p->w3[0][0], p->b3};
    return t[i];
}

static void run_device(vt *t, vkt_device *dev, const vkt_model_desc *m) {
    const char *label = vkt_device_label(dev);
    vkt_ops *ops = NULL;
    vkt_net *net = NULL;
    vkt_cmd *cmd = NULL;
    vkt_net_desc nd = {.model = m,
                       .first_layer = 0,
                       .last_layer = m->nlayers,
                       .max_batch = B,
                       .slots = 1,
                       .optim = vkt_optim_default(VKT_OPTIM_SGD)};
    VT_OK(t, vkt_ops_create(dev, &ops));
    VT_OK(t, vkt_net_create(dev, ops, &nd, &net));
    VT_OK(t, vkt_cmd_create(dev, &cmd));
    if (!net || !cmd) goto out;
    VT_CHECK(t, vkt_net_tensor_count(net) == 6, "6 tensors, got %d", vkt_net_tensor_count(net));
    VT_OK(t, vkt_net_init(net, 42));

    // Inputs and labels; the parameters are the GPU's (PyTorch-style init), read back.
    float xf[B * IN];
    double x[B][IN];
    uint32_t y[B] = {0, 1, 2, 2, 1, 0};
    vt_fill_uniform(xf, B * IN, 7, -1.5f, 1.5f);
    for (int i = 0; i < B * IN; i++)
        x[i / IN][i % IN] = xf[i];
    params p;
    float buf[64];
    for (int i = 0; i < 6; i++) {
        const vkt_net_tensor *nt = vkt_net_get_tensor(net, i);
        VT_OK(t, vkt_net_read_tensor(net, VKT_STORE_PARAM, i, buf));
        for (uint64_t k = 0; k < nt->count; k++)
            tensor_ptr(&p, i)[k] = buf[k];
        // PyTorch's Linear default: uniform within 1/sqrt(fan_in).
        double bound = 1.0 / sqrt((double)m->layers[nt->layer].in_features);
        for (uint64_t k = 0; k < nt->count; k++)
            VT_CHECK(t, fabs(buf[k]) <= bound, "init of %s[%llu] = %g outside +-%g", nt->name,
                     (unsigned long long)k, buf[k], bound);
    }

    // 1. The reference against finite differences of its own loss, every entry.
    params g, q = p;
    ref_loss(&p, x, y, &g);
    int fd_bad = 0, n_entries = 0;
    for (int i = 0; i < 6; i++) {
        const vkt_net_tensor *nt = vkt_net_get_tensor(net, i);
        for (uint64_t k = 0; k < nt->count; k++) {
            double *v = &tensor_ptr(&q, i)[k], keep = *v, h = 1e-6;
            *v = keep + h;
            double lp = ref_loss(&q, x, y, NULL);
            *v = keep - h;
            double lm = ref_loss(&q, x, y, NULL);
            *v = keep;
            double fd = (lp - lm) / (2 * h), an = tensor_ptr(&g, i)[k];
            n_entries++;
            if (fabs(fd - an) > 1e-8 + 1e-5 * fabs(an)) {
                if (fd_bad++ < 5)
                    fprintf(stderr, "  FD %s[%llu]: analytic %.10g, finite difference %.10g\n",
                            nt->name, (unsigned long long)k, an, fd);
            }
        }
    }
    VT_CHECK(t, fd_bad == 0, "%d of %d reference gradient entries disagree with finite differences",
             fd_bad, n_entries);

    // 2. The GPU backward against the reference, every entry (atol 2e-6 + rtol 1e-3: fp32).
    vkt_view in = vkt_net_input(net, 0), tg = vkt_net_targets(net, 0);
    VT_OK(t, vkt_buffer_write(in.buffer, in.offset, xf, sizeof xf));
    VT_OK(t, vkt_buffer_write(tg.buffer, tg.offset, y, sizeof y));
    for (int pass = 0; pass < 2; pass++) {
        // pass 0: one backward after zeroing; pass 1: two backwards, which must accumulate to 2x.
        VT_OK(t, vkt_cmd_begin(cmd, false));
        vkt_net_record_zero_grads(net, cmd);
        for (int rep = 0; rep <= pass; rep++) {
            vkt_net_record_forward(net, cmd, 0, B);
            vkt_net_record_loss(net, cmd, 0, B, 1.0f / B);
            vkt_net_record_backward(net, cmd, 0, B, false);
        }
        VT_OK(t, vkt_net_status(net));
        VT_OK(t, vkt_cmd_end(cmd));
        VT_OK(t, vkt_cmd_submit(cmd));
        VT_OK(t, vkt_cmd_wait(cmd, VKT_WAIT_MS));
        double loss_sum = 0;
        float rows[B];
        vkt_view lr = vkt_net_loss_rows(net, 0);
        VT_OK(t, vkt_buffer_read(lr.buffer, lr.offset, rows, sizeof rows));
        for (int b = 0; b < B; b++)
            loss_sum += rows[b];
        double want = ref_loss(&p, x, y, NULL);
        VT_CHECK(t, fabs(loss_sum / B - want) < 1e-5, "%s: loss %g, reference %g", label,
                 loss_sum / B, want);
        for (int i = 0; i < 6; i++) {
            const vkt_net_tensor *nt = vkt_net_get_tensor(net, i);
            double ref[64];
            VT_OK(t, vkt_net_read_tensor(net, VKT_STORE_GRAD, i, buf));
            for (uint64_t k = 0; k < nt->count; k++)
                ref[k] = (pass + 1) * tensor_ptr(&g, i)[k];
            char what[96];
            snprintf(what, sizeof what, "%s d%s (%s)", label, nt->name,
                     pass ? "accumulated twice" : "once");
            VT_CHECK(t, vt_compare(what, buf, ref, nt->count, 2e-6, 1e-3) == 0, "%s", what);
        }
    }

    // 3. Leaving out one barrier of the backward must be reported by synchronization validation.
    uint64_t before = vkt_context_validation_count(t->ctx);
    vkt_net_test_skip_barrier(net, 1);
    VT_OK(t, vkt_cmd_begin(cmd, false));
    vkt_net_record_zero_grads(net, cmd);
    vkt_net_record_forward(net, cmd, 0, B);
    vkt_net_record_loss(net, cmd, 0, B, 1.0f / B);
    vkt_net_record_backward(net, cmd, 0, B, false);
    VT_OK(t, vkt_cmd_end(cmd));
    VT_OK(t, vkt_cmd_submit(cmd));
    VT_OK(t, vkt_cmd_wait(cmd, VKT_WAIT_MS));
    vkt_net_test_skip_barrier(net, -1);
    uint64_t caught = vkt_context_validation_count(t->ctx) - before;
    VT_CHECK(t, caught > 0, "%s: a backward without one of its barriers was not reported", label);
    printf("test_mlp_grad: %s: the missing barrier gave %llu validation message(s), as it must\n",
           label, (unsigned long long)caught);
    t->expected_validation += caught;
out:
    vkt_cmd_destroy(cmd);
    vkt_net_destroy(net);
    vkt_ops_destroy(ops);
}

int main(void) {
    vt tv, *t = &tv;
    if (vt_init(t, "test_mlp_grad")) return 1;
    vkt_model_desc m;
    VT_OK(t, vkt_model_parse(MODEL, "grad_mlp", &m));
    for (int d = 0; d < t->ndev; d++)
        run_device(t, t->dev[d], &m);
    vkt_model_free(&m);
    return vt_finish(t);
}
