// layer_check.c: see layer_check.h.
#include "layer_check.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "layer.h"
#include "network.h"

#define SEED 42

typedef struct lc {
    vt *t;
    const lc_case *c;
    const vkt_model_desc *m;
    uint32_t B;
    vkt_ref *ref;
    vkt_net_phase train, eval;
    double *x, *ymse, *gx, *z, *d;
    float *xf, *ymsef;
    uint32_t *ycls;
    // Expected: outputs of the training and evaluation forwards, the loss, the buffers after one
    // training forward (per tensor; NULL for parameters).
    double *y_train, *y_eval, loss;
    double **state_after;
} lc;

static double ref_loss(lc *s, bool grads) {
    const vkt_model_desc *m = s->m;
    uint32_t C = m->output_features, B = s->B;
    double loss = 0;
    vkt_ref_forward(s->ref, s->x, s->z);
    for (uint32_t b = 0; b < B; b++) {
        const double *z = s->z + (uint64_t)b * C;
        double *d = s->d + (uint64_t)b * C;
        if (m->loss == VKT_LOSS_MSE) {
            for (uint32_t o = 0; o < C; o++) {
                double e = z[o] - s->ymse[(uint64_t)b * C + o];
                loss += e * e;
                d[o] = 2 * e / B;
            }
        } else {
            double mx = -INFINITY, se = 0;
            for (uint32_t o = 0; o < C; o++)
                mx = fmax(mx, z[o]);
            for (uint32_t o = 0; o < C; o++)
                se += exp(z[o] - mx);
            double lse = mx + log(se);
            loss += lse - z[s->ycls[b]];
            for (uint32_t o = 0; o < C; o++)
                d[o] = (exp(z[o] - lse) - (o == s->ycls[b])) / B;
        }
    }
    if (grads) vkt_ref_backward(s->ref, s->d, s->gx);
    return loss / B;
}

// The reference from the device's initial parameters and buffers: finite differences, then the
// expected results of one training forward and backward and of an evaluation forward.
static void build_reference(lc *s, vkt_net *net) {
    vt *t = s->t;
    const vkt_model_desc *m = s->m;
    int nt = vkt_net_tensor_count(net);
    s->ref = vkt_ref_create(m, s->B);
    VT_CHECK(t, s->ref && vkt_ref_tensor_count(s->ref) == nt,
             "%s: the reference has the network's tensors", m->name);
    if (!s->ref || t->failures) return;
    vkt_ref_set_phase(s->ref, &s->train);
    double **state0 = calloc((size_t)nt, sizeof *state0);
    s->state_after = calloc((size_t)nt, sizeof *s->state_after);
    for (int i = 0; i < nt; i++) {
        const vkt_net_tensor *te = vkt_net_get_tensor(net, i);
        float *buf = malloc(te->count * 4);
        VT_OK(t, vkt_net_read_tensor(net, VKT_STORE_PARAM, i, buf));
        for (uint64_t k = 0; k < te->count; k++)
            vkt_ref_param(s->ref, i)[k] = buf[k];
        free(buf);
        if (te->state) {
            state0[i] = malloc(te->count * sizeof(double));
            memcpy(state0[i], vkt_ref_param(s->ref, i), te->count * sizeof(double));
        }
    }
    ref_loss(s, true);
    int bad = 0, n = 0, max_fd = s->c->max_fd ? s->c->max_fd : 300;
    double h = 1e-6;
    for (int i = 0; i <= nt; i++) {
        bool is_x = i == nt;
        const vkt_net_tensor *te = is_x ? NULL : vkt_net_get_tensor(net, i);
        if (!is_x && te->state) continue;
        if (is_x && !s->c->input_grad) continue;
        double *v = is_x ? s->x : vkt_ref_param(s->ref, i);
        uint64_t count = is_x ? (uint64_t)s->B * m->input_features : te->count;
        double *g = malloc(count * sizeof(double));
        memcpy(g, is_x ? s->gx : vkt_ref_grad(s->ref, i), count * sizeof(double));
        uint64_t stride = count > (uint64_t)max_fd ? (count + max_fd - 1) / max_fd : 1;
        for (uint64_t k = 0; k < count; k += stride) {
            double keep = v[k];
            v[k] = keep + h;
            double lp = ref_loss(s, false);
            v[k] = keep - h;
            double lm = ref_loss(s, false);
            v[k] = keep;
            double fd = (lp - lm) / (2 * h);
            n++;
            if (fabs(fd - g[k]) > 1e-7 + 1e-5 * fabs(g[k]) && bad++ < 5)
                fprintf(stderr, "  FD %s %s[%llu]: analytic %.10g, finite difference %.10g\n",
                        m->name, is_x ? "input" : te->name, (unsigned long long)k, g[k], fd);
        }
        free(g);
    }
    VT_CHECK(t, bad == 0,
             "%s: %d of %d reference gradient entries disagree with finite "
             "differences",
             m->name, bad, n);
    // One training forward from the initial buffers: the expected output, loss, gradients and
    // buffers; then the evaluation forward from those buffers.
    for (int i = 0; i < nt; i++)
        if (state0[i])
            memcpy(vkt_ref_param(s->ref, i), state0[i],
                   vkt_ref_tensor_size(s->ref, i) * sizeof(double));
    s->loss = ref_loss(s, true);
    uint64_t nout = (uint64_t)s->B * m->output_features;
    s->y_train = malloc(nout * sizeof(double));
    s->y_eval = malloc(nout * sizeof(double));
    memcpy(s->y_train, s->z, nout * sizeof(double));
    for (int i = 0; i < nt; i++)
        if (state0[i]) {
            s->state_after[i] = malloc(vkt_ref_tensor_size(s->ref, i) * sizeof(double));
            memcpy(s->state_after[i], vkt_ref_param(s->ref, i),
                   vkt_ref_tensor_size(s->ref, i) * sizeof(double));
            free(state0[i]);
        }
    free(state0);
    vkt_ref_set_phase(s->ref, &s->eval);
    vkt_ref_forward(s->ref, s->x, s->y_eval);
    vkt_ref_set_phase(s->ref, &s->train);
}

static void run_on(lc *s, vkt_device *dev, vkt_ops *ops, bool fuse) {
    vt *t = s->t;
    const vkt_model_desc *m = s->m;
    char where[256];
    snprintf(where, sizeof where, "%s (B %u) %s on %s", m->name, s->B, fuse ? "fused" : "unfused",
             vkt_device_label(dev));
    vkt_context_set_fuse(t->ctx, fuse ? VKT_FUSE_ON : VKT_FUSE_OFF);
    vkt_net_desc nd = {.model = m,
                       .first_layer = 0,
                       .last_layer = m->nlayers,
                       .max_batch = s->B,
                       .slots = 1,
                       .optim = vkt_optim_default(VKT_OPTIM_SGD)};
    vkt_net *net = NULL;
    vkt_cmd *cmd = NULL;
    VT_OK(t, vkt_net_create(dev, ops, &nd, &net));
    vkt_context_set_fuse(t->ctx, VKT_FUSE_AUTO);
    if (net) VT_OK(t, vkt_cmd_create(dev, &cmd));
    if (!net || !cmd) goto out;
    VT_OK(t, vkt_net_init(net, SEED));
    if (!s->ref) build_reference(s, net);
    if (!s->ref || !s->y_eval) goto out;
    double atol = s->c->atol ? s->c->atol : 2e-5, rtol = s->c->rtol ? s->c->rtol : 2e-3;

    vkt_view in = vkt_net_input(net, 0), tg = vkt_net_targets(net, 0);
    VT_OK(t, vkt_buffer_write(in.buffer, in.offset, s->xf, 4ull * s->B * m->input_features));
    if (m->loss == VKT_LOSS_MSE)
        VT_OK(t,
              vkt_buffer_write(tg.buffer, tg.offset, s->ymsef, 4ull * s->B * m->output_features));
    else
        VT_OK(t, vkt_buffer_write(tg.buffer, tg.offset, s->ycls, 4ull * s->B));
    VT_OK(t, vkt_cmd_begin(cmd, false));
    vkt_net_record_zero_grads(net, cmd);
    vkt_net_set_phase(net, &s->train);
    vkt_net_record_forward(net, cmd, 0, s->B);
    vkt_net_record_loss(net, cmd, 0, s->B, 1.0f / (float)s->B);
    vkt_net_record_backward(net, cmd, 0, s->B, s->c->input_grad);
    if (!vt_run(t, cmd, ops, "training forward and backward", where)) goto out;

    uint64_t nout = (uint64_t)s->B * m->output_features;
    uint64_t most =
        nout > (uint64_t)s->B * m->input_features ? nout : (uint64_t)s->B * m->input_features;
    for (int i = 0; i < vkt_net_tensor_count(net); i++)
        if (vkt_net_get_tensor(net, i)->count > most) most = vkt_net_get_tensor(net, i)->count;
    float *buf = malloc(most * 4);
    char what[400];
    vkt_view o = vkt_net_output(net, 0);
    VT_OK(t, vkt_buffer_read(o.buffer, o.offset, buf, nout * 4));
    snprintf(what, sizeof what, "%s: training forward output", where);
    VT_CHECK(t, vt_compare(what, buf, s->y_train, nout, atol, rtol) == 0, "%s", what);
    vkt_view lr = vkt_net_loss_rows(net, 0);
    VT_OK(t, vkt_buffer_read(lr.buffer, lr.offset, buf, 4ull * s->B));
    double loss = 0;
    for (uint32_t b = 0; b < s->B; b++)
        loss += buf[b];
    loss /= s->B;
    VT_CHECK(t, fabs(loss - s->loss) <= atol + rtol * fabs(s->loss),
             "%s: loss %.8g, reference %.8g", where, loss, s->loss);
    for (int i = 0; i < vkt_net_tensor_count(net); i++) {
        const vkt_net_tensor *te = vkt_net_get_tensor(net, i);
        if (te->state) {
            VT_OK(t, vkt_net_read_tensor(net, VKT_STORE_PARAM, i, buf));
            snprintf(what, sizeof what, "%s: %s after the training forward", where, te->name);
            VT_CHECK(t, vt_compare(what, buf, s->state_after[i], te->count, atol, rtol) == 0, "%s",
                     what);
        } else {
            VT_OK(t, vkt_net_read_tensor(net, VKT_STORE_GRAD, i, buf));
            snprintf(what, sizeof what, "%s: d%s", where, te->name);
            VT_CHECK(t, vt_compare(what, buf, vkt_ref_grad(s->ref, i), te->count, atol, rtol) == 0,
                     "%s", what);
        }
    }
    if (s->c->input_grad) {
        vkt_view gi = vkt_net_input_grad(net, 0);
        uint64_t nin = (uint64_t)s->B * m->input_features;
        VT_OK(t, vkt_buffer_read(gi.buffer, gi.offset, buf, nin * 4));
        snprintf(what, sizeof what, "%s: d input", where);
        VT_CHECK(t, vt_compare(what, buf, s->gx, nin, atol, rtol) == 0, "%s", what);
    }
    // Evaluation from the buffers the training forward left.
    VT_OK(t, vkt_cmd_begin(cmd, false));
    vkt_net_set_phase(net, &s->eval);
    vkt_net_record_forward(net, cmd, 0, s->B);
    if (vt_run(t, cmd, ops, "evaluation forward", where)) {
        VT_OK(t, vkt_buffer_read(o.buffer, o.offset, buf, nout * 4));
        snprintf(what, sizeof what, "%s: evaluation forward output", where);
        VT_CHECK(t, vt_compare(what, buf, s->y_eval, nout, atol, rtol) == 0, "%s", what);
    }
    free(buf);
out:
    vkt_cmd_destroy(cmd);
    vkt_net_destroy(net);
}

void lc_run(vt *t, vkt_ops *const *ops, const lc_case *c) {
    vkt_model_desc m;
    VT_OK(t, vkt_model_parse(c->json, "layer_check", &m));
    if (t->failures) return;
    lc s = {.t = t, .c = c, .m = &m, .B = c->B};
    s.train = (vkt_net_phase){.train = true, .seed = SEED, .step = 3, .row0 = c->row0};
    s.eval = (vkt_net_phase){.train = false, .seed = SEED, .step = 3, .row0 = c->row0};
    uint64_t nin = (uint64_t)c->B * m.input_features, nout = (uint64_t)c->B * m.output_features;
    s.x = calloc(nin, sizeof(double));
    s.gx = calloc(nin, sizeof(double));
    s.xf = calloc(nin, sizeof(float));
    s.ymse = calloc(nout, sizeof(double));
    s.ymsef = calloc(nout, sizeof(float));
    s.z = calloc(nout, sizeof(double));
    s.d = calloc(nout, sizeof(double));
    s.ycls = calloc(c->B, sizeof(uint32_t));
    uint64_t h = 0;
    for (const char *p = c->json; *p; p++)
        h = h * 131 + (uint8_t)*p;
    vt_fill_uniform(s.xf, nin, 7 + h, -1.5f, 1.5f);
    vt_fill_uniform(s.ymsef, nout, 70 + h, -1.0f, 1.0f);
    for (uint64_t k = 0; k < nin; k++)
        s.x[k] = s.xf[k];
    for (uint64_t k = 0; k < nout; k++)
        s.ymse[k] = s.ymsef[k];
    for (uint32_t b = 0; b < c->B; b++)
        s.ycls[b] = (uint32_t)((b * 7 + h) % m.output_features);
    for (int d = 0; d < t->ndev && ops[d]; d++)
        for (int f = 0; f < 2; f++)
            run_on(&s, t->dev[d], ops[d], f == 1);
    if (s.state_after)
        for (int i = 0; i < vkt_ref_tensor_count(s.ref); i++)
            free(s.state_after[i]);
    free(s.state_after);
    vkt_ref_destroy(s.ref);
    free(s.x);
    free(s.gx);
    free(s.xf);
    free(s.ymse);
    free(s.ymsef);
    free(s.z);
    free(s.d);
    free(s.ycls);
    free(s.y_train);
    free(s.y_eval);
    vkt_model_free(&m);
}
