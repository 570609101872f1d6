// test_optim.c: the SGD and AdamW kernels of engine/ops/ops_nn.c on every device. First four steps on
// five parameters against literal values of PyTorch's update rules (below: how they were made);
// then three steps on 2,000,003 and 2,000,000 parameters against the double-precision references of
// ref_ops.c.
//
// Tolerances (|got - want| <= atol + rtol*|want|): parameters 2e-6 + 2e-6*|want| for the literal
// sequences (fp32 state carried over four steps), 1e-6 + 1e-5*|want| for the large runs' p, buf,
// m and v.
#include <stdlib.h>
#include <string.h>

#include "ops.h"
#include "ref_ops.h"
#include "test_util.h"

// ---------------------------------------------------------------------------------------------
// Literal sequences. P0 and GRADS are the parameters before the first step and the gradient of
// each step. The expected parameters after each step were computed with this python3 script
// (double precision, the update rules of torch.optim.SGD with dampening 0, first step buf = d,
// and of torch.optim.AdamW), and pasted with %.17g:
//
//   import math
//   p0 = [0.5, -1.25, 2.0, 0.0, 3.0e-3]
//   grads = [[0.1, -0.2, 0.3, -0.4, 1.5], [-0.05, 0.25, 0.1, 0.0, -2.0],
//            [0.2, 0.2, -0.3, 0.15, 0.5], [0.0, -0.1, 0.05, -0.2, 1.0]]
//   def sgd(lr, momentum, wd, nesterov):
//       p = list(p0); buf = None; out = []
//       for g in grads:
//           d = [gi + wd * pi for gi, pi in zip(g, p)]
//           if momentum != 0:
//               buf = list(d) if buf is None else [momentum * b + di for b, di in zip(buf, d)]
//               d = [di + momentum * b for di, b in zip(d, buf)] if nesterov else list(buf)
//           p = [pi - lr * di for pi, di in zip(p, d)]
//           out.append(list(p))
//       return out
//   def adamw(lr, b1, b2, eps, wd):
//       p = list(p0); m = [0.0] * len(p); v = [0.0] * len(p); out = []
//       for t, g in enumerate(grads, 1):
//           p = [pi * (1 - lr * wd) for pi in p]
//           m = [b1 * mi + (1 - b1) * gi for mi, gi in zip(m, g)]
//           v = [b2 * vi + (1 - b2) * gi * gi for vi, gi in zip(v, g)]
//           bc1 = 1 - b1 ** t; bc2 = 1 - b2 ** t
//           p = [pi - (lr / bc1) * mi / (math.sqrt(vi) / math.sqrt(bc2) + eps)
//                for pi, mi, vi in zip(p, m, v)]
//           out.append(list(p))
//       return out
//   # printed: sgd(0.1, 0.9, 0.01, False), sgd(0.1, 0.9, 0.01, True), sgd(0.1, 0.9, 0.0, False),
//   #          sgd(0.1, 0.0, 0.01, False), adamw(1e-3, 0.9, 0.999, 1e-8, 0.01)

#define NP 5
#define NSTEPS 4
static const float P0[NP] = {0.5f, -1.25f, 2.0f, 0.0f, 3.0e-3f};
static const float GRADS[NSTEPS][NP] = {{0.1f, -0.2f, 0.3f, -0.4f, 1.5f},
                                        {-0.05f, 0.25f, 0.1f, 0.0f, -2.0f},
                                        {0.2f, 0.2f, -0.3f, 0.15f, 0.5f},
                                        {0.0f, -0.1f, 0.05f, -0.2f, 1.0f}};

typedef struct sgd_case {
    float lr, momentum, wd;
    bool nesterov;
    double want[NSTEPS][NP];
} sgd_case;

static const sgd_case SGD_CASES[] = {
    {0.1f,
     0.9f,
     0.01f,
     false,
     {{0.48949999999999999, -1.22875, 1.968, 0.040000000000000008, -0.14700299999999999},
      {0.48456050000000001, -1.23339625, 1.9272320000000001, 0.075960000000000014,
       -0.081858696999999994},
      {0.45963038950000001, -1.25634447875, 1.918613568, 0.093248040000000018,
       -0.073146965602999992},
      {0.43673365966050004, -1.26574154014625, 1.9039383656320001, 0.12871402796000003,
       -0.165233260380097}}},
    {0.1f,
     0.9f,
     0.01f,
     true,
     {{0.48004999999999998, -1.209625, 1.9392, 0.076000000000000012, -0.28200570000000003},
      {0.480132905, -1.2376142125, 1.89059552, 0.10825560000000002, -0.022972319170000033},
      {0.43722731198050002, -1.2770416992462501, 1.9110046365119999, 0.10864835436000002,
       -0.065052434146577021},
      {0.41621366598468706, -1.2742139108805572, 1.890943468531427, 0.16039283145071603,
       -0.24782161308787085}}},
    {0.1f,
     0.9f,
     0.0f,
     false,
     {{0.48999999999999999, -1.23, 1.97, 0.040000000000000008, -0.14700000000000002},
      {0.48599999999999999, -1.2369999999999999, 1.9330000000000001, 0.076000000000000012,
       -0.082000000000000031},
      {0.46239999999999998, -1.2632999999999999, 1.9297, 0.093400000000000025,
       -0.073500000000000038},
      {0.44116, -1.2769699999999999, 1.9217299999999999, 0.12906000000000004,
       -0.16585000000000005}}},
    {0.1f,
     0.0f,
     0.01f,
     false,
     {{0.48949999999999999, -1.22875, 1.968, 0.040000000000000008, -0.14700299999999999},
      {0.49401050000000002, -1.25252125, 1.956032, 0.039960000000000009, 0.053144003000000023},
      {0.47351648950000003, -1.27126872875, 1.984075968, 0.024920040000000011,
       0.0030908589970000122},
      {0.47304297301050002, -1.25999746002125, 1.977091892032, 0.044895119960000014,
       -0.096912231861996989}}},
};

static const double ADAMW_WANT[NSTEPS][NP] = {
    {0.49899500010000003, -1.2489875000499999, 1.9989800000333333, 0.00099999997500000055,
     0.0019999700066666666},
    {0.49872367314403299, -1.2491377424294812, 1.9980889463215719, 0.0016700482054407258,
     0.0021934604150085093},
    {0.49806057435678147, -1.2495705376707207, 1.9980205784620246, 0.0019304506112431234,
     0.0022147502969884106},
    {0.49751650882000692, -1.2497616578135926, 1.9978949301879718, 0.0023702552633175777,
     0.0020185671099580385},
};

typedef struct dctx {
    vt *t;
    vkt_device *dev;
    vkt_ops *ops;
    vkt_cmd *cmd;
    const char *name;
} dctx;

// A buffer of `bytes` holding init, or zeros when init is NULL.
static vkt_buffer *buf_new(dctx *c, size_t bytes, const void *init, const char *name) {
    vkt_buffer *b = NULL;
    vkt_status s = vkt_buffer_create(c->dev, bytes, name, &b);
    VT_CHECK(c->t, s == VKT_OK, "%s on %s: %s", name, c->name, vkt_error());
    if (s != VKT_OK) return NULL;
    // Optimizer state starts at zero; device memory is not promised to.
    void *zero = init ? NULL : calloc(1, bytes);
    VT_OK(c->t, vkt_buffer_write(b, 0, init ? init : zero, bytes));
    free(zero);
    return b;
}

// Ends, checks that every kernel built, submits and waits.
static bool run(dctx *c, const char *what) { return vt_run(c->t, c->cmd, c->ops, what, c->name); }

static void compare(dctx *c, const char *what, const float *got, const double *want, size_t n,
                    double atol, double rtol) {
    size_t bad = vt_compare(what, got, want, n, atol, rtol);
    VT_CHECK(c->t, bad == 0, "%s on %s: %zu of %zu wrong", what, c->name, bad, n);
}

// ---------------------------------------------------------------------------------------------
// The literal sequences

static void test_sgd_literal(dctx *c, const sgd_case *k) {
    vkt_buffer *p = buf_new(c, sizeof P0, P0, "p"), *g = buf_new(c, sizeof P0, NULL, "g");
    vkt_buffer *buf = buf_new(c, sizeof P0, NULL, "momentum");
    if (!p || !g || !buf) goto done;
    for (int s = 0; s < NSTEPS; s++) {
        char what[128];
        snprintf(what, sizeof what, "sgd lr %g momentum %g wd %g%s step %d", k->lr, k->momentum,
                 k->wd, k->nesterov ? " nesterov" : "", s + 1);
        VT_OK(c->t, vkt_buffer_write(g, 0, GRADS[s], sizeof GRADS[s]));
        VT_OK(c->t, vkt_cmd_begin(c->cmd, false));
        // Without momentum the buffer may be any view: pass none at all.
        vkt_view vb = k->momentum != 0 ? vkt_buffer_whole(buf) : (vkt_view){0};
        vkt_op_sgd(c->cmd, c->ops, vkt_buffer_whole(p), vkt_buffer_whole(g), vb, NP, k->lr,
                   k->momentum, k->wd, k->nesterov, "sgd");
        if (!run(c, what)) break;
        float got[NP];
        VT_OK(c->t, vkt_buffer_read(p, 0, got, sizeof got));
        compare(c, what, got, k->want[s], NP, 2e-6, 2e-6);
    }
done:
    vkt_buffer_destroy(buf), vkt_buffer_destroy(g), vkt_buffer_destroy(p);
}

static void test_adamw_literal(dctx *c) {
    vkt_buffer *p = buf_new(c, sizeof P0, P0, "p"), *g = buf_new(c, sizeof P0, NULL, "g");
    vkt_buffer *m = buf_new(c, sizeof P0, NULL, "m"), *v = buf_new(c, sizeof P0, NULL, "v");
    if (!p || !g || !m || !v) goto done;
    for (int s = 0; s < NSTEPS; s++) {
        char what[96];
        snprintf(what, sizeof what, "adamw lr 1e-3 wd 0.01 step %d", s + 1);
        VT_OK(c->t, vkt_buffer_write(g, 0, GRADS[s], sizeof GRADS[s]));
        VT_OK(c->t, vkt_cmd_begin(c->cmd, false));
        vkt_op_adamw(c->cmd, c->ops, vkt_buffer_whole(p), vkt_buffer_whole(g), vkt_buffer_whole(m),
                     vkt_buffer_whole(v), NP, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, (uint32_t)s + 1,
                     "adamw");
        if (!run(c, what)) break;
        float got[NP];
        VT_OK(c->t, vkt_buffer_read(p, 0, got, sizeof got));
        compare(c, what, got, ADAMW_WANT[s], NP, 2e-6, 2e-6);
    }
done:
    vkt_buffer_destroy(v), vkt_buffer_destroy(m), vkt_buffer_destroy(g), vkt_buffer_destroy(p);
}

// ---------------------------------------------------------------------------------------------
// Large n against ref_ops.c: three steps of SGD (nesterov, wd) and of AdamW, fresh gradients
// each step, both optimizers in one command stream per step. Run with n = 2,000,003 (a partial
// last vec4) and 2,000,000: on lavapipe a multiple of 4 takes the kernels that read through
// texel buffers (sgd_texel, adamw_texel), the other the storage-buffer ones.

static void test_large(dctx *c, uint32_t NL) {
    size_t bytes = NL * 4ull;
    float *p0 = malloc(bytes), *g = malloc(bytes), *got = malloc(bytes);
    vt_fill_uniform(p0, NL, 7, -1, 1);
    double *sp = malloc(NL * 8), *sb = calloc(NL, 8), *ap = malloc(NL * 8), *am = calloc(NL, 8);
    double *av = calloc(NL, 8), *dg = malloc(NL * 8);
    for (size_t i = 0; i < NL; i++)
        sp[i] = ap[i] = p0[i];
    vkt_buffer *bsp = buf_new(c, bytes, p0, "sgd p"), *bsb = buf_new(c, bytes, NULL, "sgd buf");
    vkt_buffer *bap = buf_new(c, bytes, p0, "adamw p"), *bam = buf_new(c, bytes, NULL, "adamw m");
    vkt_buffer *bav = buf_new(c, bytes, NULL, "adamw v"), *bg = buf_new(c, bytes, NULL, "g");
    if (!bsp || !bsb || !bap || !bam || !bav || !bg) goto done;
    for (uint32_t s = 1; s <= 3; s++) {
        vt_fill_uniform(g, NL, 100 + s, -2, 2);
        for (size_t i = 0; i < NL; i++)
            dg[i] = g[i];
        VT_OK(c->t, vkt_buffer_write(bg, 0, g, bytes));
        VT_OK(c->t, vkt_cmd_begin(c->cmd, false));
        vkt_op_sgd(c->cmd, c->ops, vkt_buffer_whole(bsp), vkt_buffer_whole(bg),
                   vkt_buffer_whole(bsb), NL, 0.05f, 0.9f, 1e-4f, true, "sgd");
        vkt_op_adamw(c->cmd, c->ops, vkt_buffer_whole(bap), vkt_buffer_whole(bg),
                     vkt_buffer_whole(bam), vkt_buffer_whole(bav), NL, 1e-3f, 0.9f, 0.999f, 1e-8f,
                     0.01f, s, "adamw");
        if (!run(c, "large optimizer step")) goto done;
        ref_sgd(sp, dg, sb, NL, 0.05f, 0.9f, 1e-4f, true);
        ref_adamw(ap, dg, am, av, NL, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, s);
    }
    struct {
        vkt_buffer *b;
        const double *ref;
        const char *what;
    } outs[] = {{bsp, sp, "sgd p"},
                {bsb, sb, "sgd buf"},
                {bap, ap, "adamw p"},
                {bam, am, "adamw m"},
                {bav, av, "adamw v"}};
    for (size_t k = 0; k < sizeof outs / sizeof *outs; k++) {
        VT_OK(c->t, vkt_buffer_read(outs[k].b, 0, got, bytes));
        char what[96];
        snprintf(what, sizeof what, "%s after 3 steps, n=%u", outs[k].what, NL);
        compare(c, what, got, outs[k].ref, NL, 1e-6, 1e-5);
    }
done:
    vkt_buffer_destroy(bg), vkt_buffer_destroy(bav), vkt_buffer_destroy(bam);
    vkt_buffer_destroy(bap), vkt_buffer_destroy(bsb), vkt_buffer_destroy(bsp);
    free(p0), free(g), free(got), free(sp), free(sb), free(ap), free(am), free(av), free(dg);
}

int main(void) {
    vt tv, *t = &tv;
    if (vt_init(t, "test_optim")) return 1;
    for (int d = 0; d < t->ndev; d++) {
        dctx c = {.t = t, .dev = t->dev[d], .name = vkt_device_label(t->dev[d])};
        VT_OK(t, vkt_ops_create(c.dev, &c.ops));
        VT_OK(t, vkt_cmd_create(c.dev, &c.cmd));
        if (c.ops && c.cmd) {
            for (size_t k = 0; k < sizeof SGD_CASES / sizeof *SGD_CASES; k++)
                test_sgd_literal(&c, &SGD_CASES[k]);
            test_adamw_literal(&c);
            test_large(&c, 2000003u);
            test_large(&c, 2000000u);
        }
        vkt_cmd_destroy(c.cmd);
        vkt_ops_destroy(c.ops);
        VT_CHECK(t, vkt_device_memory_used(c.dev) == 0, "memory not returned on %s", c.name);
    }
    return vt_finish(t);
}
