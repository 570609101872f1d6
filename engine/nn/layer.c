// layer.c: what the engine does with a model's layers without knowing their kinds: finding a
// kind by name, walking the layer tree in model order for the tensors, the costs and the
// products, writing the model as a PyTorch expression, and the double-precision host reference
// that the tests check the device against. Each kind's own part is in engine/nn/layers/.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "layer.h"
#include "vkt_internal.h"

const vkt_layer_type *vkt_layer_type_find(const char *name) {
    for (int i = 0; vkt_layer_types[i]; i++)
        if (strcmp(vkt_layer_types[i]->name, name) == 0) return vkt_layer_types[i];
    return NULL;
}

const char *vkt_layer_type_name(const vkt_layer_desc *l) { return l->type ? l->type->name : "?"; }

uint64_t vkt_shape_elements(const vkt_shape *s) {
    uint64_t n = 1;
    for (int i = 0; i < s->ndim; i++)
        n *= s->dim[i];
    return n;
}

void vkt_shape_format(const vkt_shape *s, char *buf, size_t size) {
    size_t n = 0;
    n += (size_t)snprintf(buf, size, "[");
    for (int i = 0; i < s->ndim && n < size; i++)
        n += (size_t)snprintf(buf + n, size - n, "%s%u", i ? ", " : "", s->dim[i]);
    if (n < size) snprintf(buf + n, size - n, "]");
}

// ---------------------------------------------------------------------------------------------
// Tensors in model order: each layer's own, then its body's, depth first

typedef struct tensor_walk {
    vkt_net_tensor *out;
    int max, n;
    int top;
} tensor_walk;

static void walk_tensors(tensor_walk *w, const vkt_layer_desc *l, const char *path) {
    vkt_param_spec ps[VKT_LAYER_MAX_PARAMS];
    int np = l->type->params ? l->type->params(l, ps) : 0;
    for (int k = 0; k < np; k++, w->n++) {
        if (w->n >= w->max) continue;
        vkt_net_tensor *t = &w->out[w->n];
        memset(t, 0, sizeof *t);
        snprintf(t->name, sizeof t->name, "%s.%s", path, ps[k].name);
        t->layer = w->top;
        t->desc = l;
        t->param = k;
        t->state = ps[k].state;
        t->int64 = ps[k].int64;
        t->ndim = ps[k].ndim;
        t->count = 1;
        for (int d = 0; d < ps[k].ndim; d++) {
            t->shape[d] = ps[k].shape[d];
            t->count *= ps[k].shape[d];
        }
    }
    for (int j = 0; j < l->nlayers; j++) {
        char sub[64];
        snprintf(sub, sizeof sub, "%s.%d", path, j);
        walk_tensors(w, &l->layers[j], sub);
    }
}

int vkt_model_tensors(const vkt_model_desc *m, int lo, int hi, vkt_net_tensor *out, int max) {
    tensor_walk w = {.out = out, .max = max};
    for (int l = lo; l < hi; l++) {
        char path[16];
        snprintf(path, sizeof path, "%d", l);
        w.top = l;
        walk_tensors(&w, &m->layers[l], path);
    }
    return w.n;
}

vkt_param_spec vkt_tensor_spec(const vkt_net_tensor *t) {
    vkt_param_spec ps[VKT_LAYER_MAX_PARAMS];
    int np = t->desc->type->params(t->desc, ps);
    VKT_ASSERT(t->param < np);
    return ps[t->param];
}

uint64_t vkt_model_param_count(const vkt_model_desc *m) {
    int n = vkt_model_tensors(m, 0, m->nlayers, NULL, 0);
    vkt_net_tensor *t = calloc((size_t)n + 1, sizeof *t);
    if (!t) return 0;
    vkt_model_tensors(m, 0, m->nlayers, t, n);
    uint64_t total = 0;
    for (int i = 0; i < n; i++)
        if (!t[i].state) total += t[i].count;
    free(t);
    return total;
}

// ---------------------------------------------------------------------------------------------
// Costs and products

static void add_cost(vkt_layer_cost *sum, const vkt_layer_desc *l) {
    vkt_layer_cost c = {0};
    if (l->type->cost) l->type->cost(l, &c);
    sum->fwd_flops += c.fwd_flops;
    sum->bwd_flops += c.bwd_flops;
    sum->fwd_bytes += c.fwd_bytes;
    sum->bwd_bytes += c.bwd_bytes;
    sum->saved_floats += c.saved_floats;
    for (int j = 0; j < l->nlayers; j++)
        add_cost(sum, &l->layers[j]);
}

vkt_layer_cost vkt_model_cost(const vkt_model_desc *m, int lo, int hi) {
    vkt_layer_cost c = {0};
    for (int l = lo; l < hi; l++)
        add_cost(&c, &m->layers[l]);
    return c;
}

static void walk_matmuls(const vkt_layer_desc *l, uint32_t B, bool need_dx, vkt_mm_shape *out,
                         int max, int *n) {
    vkt_mm_shape s[VKT_LAYER_MAX_MATMULS];
    int k = l->type->matmuls ? l->type->matmuls(l, B, need_dx, s) : 0;
    for (int i = 0; i < k; i++, (*n)++)
        if (*n < max) out[*n] = s[i];
    // A body's first layer computes its input gradient when the container does (the two sum).
    for (int j = 0; j < l->nlayers; j++)
        walk_matmuls(&l->layers[j], B, j > 0 || need_dx, out, max, n);
}

int vkt_model_matmuls(const vkt_model_desc *m, uint32_t B, vkt_mm_shape *out, int max) {
    int n = 0;
    for (int l = 0; l < m->nlayers; l++)
        walk_matmuls(&m->layers[l], B, l > 0, out, max, &n);
    return n;
}

// ---------------------------------------------------------------------------------------------
// PyTorch

int vkt_layers_torch(const char *module, const vkt_layer_desc *ls, int nls, char *buf,
                     size_t size) {
    size_t n = (size_t)snprintf(buf, size, "%s(", module);
    for (int l = 0; l < nls && n < size; l++) {
        if (l) n += (size_t)snprintf(buf + n, size - n, ", ");
        if (n < size) n += (size_t)ls[l].type->torch(&ls[l], buf + n, size - n);
    }
    if (n < size) n += (size_t)snprintf(buf + n, size - n, ")");
    return n < size ? (int)n : (int)size; // size: it did not fit
}

vkt_status vkt_model_torch(const vkt_model_desc *m, char *buf, size_t size) {
    size_t n = (size_t)vkt_layers_torch("nn.Sequential", m->layers, m->nlayers, buf, size);
    if (n >= size)
        return vkt_fail(VKT_ERR_ARG, "the PyTorch expression of %s is over %zu bytes", m->name,
                        size);
    return VKT_OK;
}

// ---------------------------------------------------------------------------------------------
// The host reference. Each layer run forward keeps its input and output (keyed by the layer's
// desc, each run once per forward) for its backward.

typedef struct ref_layer {
    const vkt_layer_desc *l;
    int tensor0, ntensors;
    double *x, *y; // [B, in], [B, out] of the last forward
} ref_layer;

struct vkt_ref {
    const vkt_model_desc *m;
    uint32_t B;
    vkt_net_phase phase;
    int nlayers;
    ref_layer *layers;
    int ntensors;
    uint64_t *count;
    double **p, **g;
};

static int count_layers(const vkt_layer_desc *l, int n) {
    int k = 1;
    for (int j = 0; j < l->nlayers; j++)
        k += count_layers(&l->layers[j], 0);
    return n + k;
}

static void list_layers(vkt_ref *r, const vkt_layer_desc *l, int *i, int *t) {
    vkt_param_spec ps[VKT_LAYER_MAX_PARAMS];
    int np = l->type->params ? l->type->params(l, ps) : 0;
    r->layers[*i] = (ref_layer){.l = l, .tensor0 = *t, .ntensors = np};
    (*i)++;
    *t += np;
    for (int j = 0; j < l->nlayers; j++)
        list_layers(r, &l->layers[j], i, t);
}

vkt_ref *vkt_ref_create(const vkt_model_desc *m, uint32_t B) {
    vkt_ref *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    r->m = m;
    r->B = B;
    r->phase = (vkt_net_phase){.train = true, .step = 1};
    for (int l = 0; l < m->nlayers; l++)
        r->nlayers = count_layers(&m->layers[l], r->nlayers);
    r->layers = calloc((size_t)r->nlayers, sizeof *r->layers);
    r->ntensors = vkt_model_tensors(m, 0, m->nlayers, NULL, 0);
    vkt_net_tensor *ts = calloc((size_t)r->ntensors + 1, sizeof *ts);
    r->count = calloc((size_t)r->ntensors + 1, sizeof *r->count);
    r->p = calloc((size_t)r->ntensors + 1, sizeof *r->p);
    r->g = calloc((size_t)r->ntensors + 1, sizeof *r->g);
    bool ok = r->layers && ts && r->count && r->p && r->g;
    if (ok) {
        vkt_model_tensors(m, 0, m->nlayers, ts, r->ntensors);
        int i = 0, t = 0;
        for (int l = 0; l < m->nlayers; l++)
            list_layers(r, &m->layers[l], &i, &t);
        for (int k = 0; k < r->ntensors && ok; k++) {
            r->count[k] = ts[k].count;
            r->p[k] = calloc(ts[k].count, sizeof(double));
            r->g[k] = calloc(ts[k].count, sizeof(double));
            ok = r->p[k] && r->g[k];
        }
        for (int k = 0; k < r->nlayers && ok; k++) {
            r->layers[k].x = calloc((size_t)B * r->layers[k].l->in_features, sizeof(double));
            r->layers[k].y = calloc((size_t)B * r->layers[k].l->out_features, sizeof(double));
            ok = r->layers[k].x && r->layers[k].y;
        }
    }
    free(ts);
    if (!ok) {
        vkt_ref_destroy(r);
        return NULL;
    }
    return r;
}

void vkt_ref_destroy(vkt_ref *r) {
    if (!r) return;
    for (int k = 0; r->layers && k < r->nlayers; k++) {
        free(r->layers[k].x);
        free(r->layers[k].y);
    }
    for (int k = 0; k < r->ntensors; k++) {
        if (r->p) free(r->p[k]);
        if (r->g) free(r->g[k]);
    }
    free(r->layers);
    free(r->count);
    free(r->p);
    free(r->g);
    free(r);
}

int vkt_ref_tensor_count(const vkt_ref *r) { return r->ntensors; }
uint64_t vkt_ref_tensor_size(const vkt_ref *r, int i) { return r->count[i]; }
double *vkt_ref_param(vkt_ref *r, int i) { return r->p[i]; }
double *vkt_ref_grad(vkt_ref *r, int i) { return r->g[i]; }
uint32_t vkt_ref_batch(const vkt_ref *r) { return r->B; }
void vkt_ref_set_phase(vkt_ref *r, const vkt_net_phase *ph) { r->phase = *ph; }
const vkt_net_phase *vkt_ref_phase(const vkt_ref *r) { return &r->phase; }

static ref_layer *find(vkt_ref *r, const vkt_layer_desc *l) {
    for (int k = 0; k < r->nlayers; k++)
        if (r->layers[k].l == l) return &r->layers[k];
    VKT_ASSERT(!"a layer of another model");
    return NULL;
}

// The layers are listed in pre-order, as the network numbers its nodes.
uint32_t vkt_ref_node_id(const vkt_ref *r, const vkt_layer_desc *l) {
    return (uint32_t)(find((vkt_ref *)r, l) - r->layers);
}

static void seq_forward(vkt_ref *r, const vkt_layer_desc *ls, int n, const double *x, double *y) {
    const double *in = x;
    for (int j = 0; j < n; j++) {
        ref_layer *rl = find(r, &ls[j]);
        memcpy(rl->x, in, sizeof(double) * r->B * ls[j].in_features);
        ls[j].type->ref_forward(r, &ls[j], r->p + rl->tensor0, rl->x, rl->y);
        in = rl->y;
    }
    memcpy(y, in, sizeof(double) * r->B * ls[n - 1].out_features);
}

static void seq_backward(vkt_ref *r, const vkt_layer_desc *ls, int n, const double *dy,
                         double *dx) {
    size_t most = 0;
    for (int j = 0; j < n; j++)
        if (ls[j].in_features > most) most = ls[j].in_features;
    double *d = malloc(sizeof(double) * r->B *
                       (most > ls[n - 1].out_features ? most : ls[n - 1].out_features));
    double *e = malloc(sizeof(double) * r->B * (most ? most : 1));
    VKT_ASSERT(d && e);
    memcpy(d, dy, sizeof(double) * r->B * ls[n - 1].out_features);
    for (int j = n - 1; j >= 0; j--) {
        ref_layer *rl = find(r, &ls[j]);
        memset(e, 0, sizeof(double) * r->B * ls[j].in_features);
        ls[j].type->ref_backward(r, &ls[j], r->p + rl->tensor0, r->g + rl->tensor0, rl->x, rl->y, d,
                                 e);
        memcpy(d, e, sizeof(double) * r->B * ls[j].in_features);
    }
    if (dx) memcpy(dx, d, sizeof(double) * r->B * ls[0].in_features);
    free(d);
    free(e);
}

void vkt_ref_forward(vkt_ref *r, const double *x, double *y) {
    seq_forward(r, r->m->layers, r->m->nlayers, x, y);
}

void vkt_ref_backward(vkt_ref *r, const double *dy, double *dx) {
    for (int k = 0; k < r->ntensors; k++)
        memset(r->g[k], 0, sizeof(double) * r->count[k]);
    seq_backward(r, r->m->layers, r->m->nlayers, dy, dx);
}

void vkt_ref_forward_body(vkt_ref *r, const vkt_layer_desc *l, const double *x, double *y) {
    seq_forward(r, l->layers, l->nlayers, x, y);
}

void vkt_ref_backward_body(vkt_ref *r, const vkt_layer_desc *l, const double *dy, double *dx) {
    seq_backward(r, l->layers, l->nlayers, dy, dx);
}
