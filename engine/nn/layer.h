// layer.h: the layer interface. Each layer kind is one file of engine/nn/layers/ that fills a
// vkt_layer_type with VKT_LAYER_TYPE(name, ...): the JSON keys it accepts and their checks, its
// output shape, its parameter tensors (PyTorch's names, shapes and initialisation), its FLOPs,
// bytes and kept activations, the matrix products it runs, how it records forward and backward,
// how it fuses with a neighbour, a double-precision host reference of both passes, and its
// PyTorch module. The build generates the registry from those lines (CMakeLists.txt), so a new
// kind touches no other engine file: the parser, the network layout and recording, the planner,
// the strategies, `bench train`, checkpoints, the tests' reference and the PyTorch scripts all
// go through this table.
//
// Not installed: the public view of a model is model.h.
#ifndef VKT_LAYER_H
#define VKT_LAYER_H

#include <cjson/cJSON.h>

#include "model.h"
#include "network.h"
#include "ops.h"

#define VKT_LAYER_MAX_PARAMS 8

// ---------------------------------------------------------------------------------------------
// Parsing (engine/nn/model.c)

typedef struct vkt_layer_parse {
    const char *src;   // the source name, for messages
    char path[192];    // the layer's JSON path: "layers[2]", "layers[2].layers[0]"
    const cJSON *json; // the layer's object (its keys are already checked against the kind's)
} vkt_layer_parse;

// "<src>: <path>.<key>: <what>" as VKT_ERR_FORMAT (key NULL: the layer itself).
vkt_status vkt_parse_fail(const vkt_layer_parse *p, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
// A whole number in [lo, hi] under key; absent: *out is left as it is, or an error when required.
vkt_status vkt_parse_uint(const vkt_layer_parse *p, const char *key, bool required, uint32_t lo,
                          uint32_t hi, const char *meaning, uint32_t *out);
// true/false; absent: *out is left as it is.
vkt_status vkt_parse_bool(const vkt_layer_parse *p, const char *key, bool *out);
// A finite number; absent: *out is left as it is.
vkt_status vkt_parse_float(const vkt_layer_parse *p, const char *key, float *out);
// A number in [lo, hi] (a probability, an epsilon); absent: *out is left as it is.
vkt_status vkt_parse_range(const vkt_layer_parse *p, const char *key, double lo, double hi,
                           bool lo_open, bool hi_open, const char *meaning, float *out);
// A whole number in [lo, hi] for both of [h, w], or a list [h, w] of two (PyTorch's int or
// tuple for kernel_size, stride, padding); absent: out is left as it is, or an error when
// required.
vkt_status vkt_parse_pair(const vkt_layer_parse *p, const char *key, bool required, uint32_t lo,
                          uint32_t hi, const char *meaning, uint32_t out[2]);
// A nested list of layers under key (a container's body), parsed from the input shape in: fills
// l->layers, l->nlayers, and l->out with the last one's output shape.
vkt_status vkt_parse_body(const vkt_layer_parse *p, const char *key, vkt_layer_desc *l);

// ---------------------------------------------------------------------------------------------
// Parameters

typedef enum vkt_init {
    VKT_INIT_UNIFORM, // uniform in [-a, a] from the run's seeded generator
    VKT_INIT_CONST,   // every entry a
} vkt_init;

typedef struct vkt_param_spec {
    const char *name; // PyTorch's attribute: "weight", "bias", "in_proj_weight"
    int ndim;
    uint32_t shape[4];
    vkt_init init;
    double a;
    // A buffer, not a parameter (batchnorm's running_mean): in the state_dict and checkpoints,
    // but no gradient, no optimizer state, not all-reduced; it lives in VKT_STORE_STATE.
    bool state;
    // Saved as int64 (num_batches_tracked): the device keeps it as a float (exact to 2^24).
    bool int64;
} vkt_param_spec;

// ---------------------------------------------------------------------------------------------
// Recording (engine/nn/network.c). A node is one layer of one network (a stage), nested layers
// included, in pre-order; the network gives each node its views in the slot's activation area.

typedef struct vkt_node {
    const vkt_layer_desc *desc;
    int top;                    // index of the top-level layer it belongs to (the unit of a split)
    int parent;                 // the container's node, -1 at the top level
    int prev, next;             // siblings in the same sequence, -1 at its ends
    int child0;                 // a container's first child node (-1: none)
    char path[48];              // the PyTorch module path: "2", "2.1"
    uint64_t in_off, dx_off;    // its input and input gradient in a slot (a neighbour's)
    uint64_t out_off, grad_off; // its output and output gradient in a slot
    int tensor0, ntensors;      // its own parameter tensors in the network's list
    bool fused_fwd;             // an activation run in prev's forward (its product's epilogue)
    uint64_t saved_off; // its own per-slot storage from forward to backward (kind's `saved`)
} vkt_node;

// What one recording call sees: the network, the stream, the slot and batch, and (backward) the
// range of top-level layers recorded and whether the stage's input gradient is wanted.
typedef struct vkt_rec {
    vkt_net *net;
    vkt_cmd *cmd;
    vkt_ops *ops;
    int slot;
    uint32_t B;
    int lo, hi;
    bool input_grad;
    // Backward with the optimizer fused (vkt_net_record_backward_step), else NULL: a kind that
    // applies the SGD step to a weight inside its gradient's product sets fused_sgd[tensor].
    bool *fused_sgd;
    int nfused;
    int late; // a node whose backward_late runs after the next barrier (-1: none)
    // The phase (vkt_net_set_phase): training (batch statistics, dropout masks) or evaluation,
    // the run's seed and step, and the row of the whole batch this slot's row 0 is (a shard's
    // or micro-batch's offset), so that masks drawn per sample are the same however the batch
    // is cut. Read through vkt_rec_training and vkt_rec_phase, never directly: a recording that
    // read the seed, step or row is one a strategy may not submit again for another step
    // (vkt_net_step_reusable).
    vkt_net_phase ph;
} vkt_rec;

// Whether the recording is in the training phase (the same for every training step).
bool vkt_rec_training(const vkt_rec *r);
// The whole phase: the seed, step and row as well. Marks the net's recording as one that changes
// from step to step (vkt_net_step_reusable is then false until the next vkt_net_set_phase).
const vkt_net_phase *vkt_rec_phase(vkt_rec *r);

const vkt_node *vkt_rec_node(const vkt_rec *r, int node);
// The node's input, output, output gradient (dy) and input gradient (dx) in the slot.
vkt_view vkt_rec_in(const vkt_rec *r, int node);
vkt_view vkt_rec_out(const vkt_rec *r, int node);
vkt_view vkt_rec_dy(const vkt_rec *r, int node);
vkt_view vkt_rec_dx(const vkt_rec *r, int node);
// Rows of the node's input as a matrix whose rows are its last dimension: B times the product
// of the other dimensions (a dense layer on [B, T, C] multiplies B*T rows).
uint32_t vkt_rec_rows(const vkt_rec *r, int node);
// The node's k-th parameter tensor in a store (parameters, gradients, optimizer state).
vkt_view vkt_rec_param(const vkt_rec *r, int node, int k, vkt_net_store store);
// The node's own per-slot storage (its kind's `saved` bytes at the net's batch).
vkt_view vkt_rec_saved(const vkt_rec *r, int node);
// The net's scratch buffer (the largest `scratch` of its kinds), shared by every node and slot:
// valid only between the barriers around the node's own use of it.
vkt_view vkt_rec_scratch(const vkt_rec *r);
// A small integer that tells the node's dropout stream apart from the others' (its pre-order
// index in the whole model, the same in every stage).
uint32_t vkt_rec_node_id(const vkt_rec *r, int node);
// The network tensor index of the node's k-th parameter.
int vkt_rec_tensor(const vkt_rec *r, int node, int k);
const vkt_optim_desc *vkt_rec_optim(const vkt_rec *r);
// "fwd:2:dense", "bwd:2.1:dweight": labels that outlive the stream.
const char *vkt_rec_label(const vkt_rec *r, int node, const char *phase, const char *what);
// Whether the backward must write the node's input gradient.
bool vkt_rec_need_dx(const vkt_rec *r, int node);
// A barrier between levels of the backward (counted for vkt_net_test_skip_barrier).
void vkt_rec_barrier(vkt_rec *r);
// Tensor parallelism: sums v (floats) over the devices that share the layer (a row split's
// partial outputs, a column split's partial input gradients), in place, after a barrier; the
// work recorded before it runs first. Through the net's communicator
// (vkt_net_set_allreduce); a net without one fails with an error (vkt_net_status).
void vkt_rec_allreduce(vkt_rec *r, vkt_view v);
// A container's body: forward (each layer followed by a barrier) and backward (last to first),
// and the output of its last layer.
void vkt_rec_forward_body(vkt_rec *r, int node);
void vkt_rec_backward_body(vkt_rec *r, int node);
vkt_view vkt_rec_body_out(const vkt_rec *r, int node);
// Runs a pending backward_late now (a kind records it beside its own work, after a barrier).
void vkt_rec_flush_late(vkt_rec *r);
// Fusion with the neighbours, for a kind with takes_epilogue. Forward: when the next layer is an
// activation fused into this product, *epi is its epilogue, *out its output (written instead of
// this node's) and the pre-activation goes to this node's output only where the activation's
// backward needs it (epi->saved). Backward: when the previous layer's backward is fused into
// this node's input-gradient product, *epi applies it and *dx is that layer's input gradient.
// Each returns whether it fused; *saved is storage for the view epi->saved points to.
bool vkt_rec_fwd_epilogue(const vkt_rec *r, int node, vkt_mm_epilogue *epi, vkt_view *out,
                          vkt_view *saved);
bool vkt_rec_bwd_epilogue(const vkt_rec *r, int node, vkt_mm_epilogue *epi, vkt_view *dx,
                          vkt_view *saved);
// For a kind with takes_act: whether the next layer's activation ran in this node's forward and
// its backward runs in this node's backward; if so its act and alpha, its output gradient *dy
// (read in place of this node's) and its output *y.
bool vkt_rec_bwd_act_after(const vkt_rec *r, int node, vkt_act *act, float *alpha, vkt_view *dy,
                           vkt_view *y);
// Whether an activation node keeps its input for its backward (not when its forward ran fused
// and f' follows from its output).
bool vkt_rec_act_input_kept(const vkt_rec *r, int node);

// ---------------------------------------------------------------------------------------------
// The double-precision host reference (engine/nn/layer.c): what the tests check every kernel and
// backward against. Parameters and gradients are in the model's tensor order (as a network of
// the whole model lists them).

typedef struct vkt_ref vkt_ref;

// For batches of B samples. NULL when out of host memory.
vkt_ref *vkt_ref_create(const vkt_model_desc *m, uint32_t B);
void vkt_ref_destroy(vkt_ref *r);
// Training (the default) or evaluation, the seed, step and first row, as vkt_net_set_phase.
void vkt_ref_set_phase(vkt_ref *r, const vkt_net_phase *ph);
const vkt_net_phase *vkt_ref_phase(const vkt_ref *r);
// The pre-order index of a layer in the model (vkt_rec_node_id of its node).
uint32_t vkt_ref_node_id(const vkt_ref *r, const vkt_layer_desc *l);
int vkt_ref_tensor_count(const vkt_ref *r);
uint64_t vkt_ref_tensor_size(const vkt_ref *r, int i);
double *vkt_ref_param(vkt_ref *r, int i);
double *vkt_ref_grad(vkt_ref *r, int i);
// y[B, output] = model(x[B, input]); keeps what the backward needs.
void vkt_ref_forward(vkt_ref *r, const double *x, double *y);
// From dy[B, output] after vkt_ref_forward: sets (not accumulates) every parameter gradient, and
// dx[B, input] unless NULL.
void vkt_ref_backward(vkt_ref *r, const double *dy, double *dx);
// For container kinds: their body on x -> y, and its backward dy -> dx (accumulating into the
// body's parameter gradients).
void vkt_ref_forward_body(vkt_ref *r, const vkt_layer_desc *l, const double *x, double *y);
void vkt_ref_backward_body(vkt_ref *r, const vkt_layer_desc *l, const double *dy, double *dx);
uint32_t vkt_ref_batch(const vkt_ref *r);
// The activations and their derivatives in double precision (engine/nn/layers/activation.c).
double vkt_act_ref(vkt_act act, double alpha, double x);
double vkt_act_ref_grad(vkt_act act, double alpha, double x);

// ---------------------------------------------------------------------------------------------
// The table

// The most products one layer kind lists (vkt_layer_type.matmuls): attention's six.
#define VKT_LAYER_MAX_MATMULS 6

// What tensor parallelism (parallel/tensor.c) may do with a kind: split it as a product (a
// column split followed, past elementwise layers only, by a row split: one reduction forward,
// one backward), slice it elementwise between those two, split its heads, or nothing (every
// device runs it whole).
typedef enum vkt_tp_role {
    VKT_TP_ROLE_NONE,
    VKT_TP_ROLE_LINEAR,      // keeps its outputs in vkt_layer_desc.units
    VKT_TP_ROLE_ELEMENTWISE, // the same shape out as in, each element on its own
    VKT_TP_ROLE_HEADS,       // attention: the heads count in units
} vkt_tp_role;

// Where one device's slice of a tensor lies in the whole tensor, both seen as matrices of rows
// (the first dimension) by columns (the product of the others; 1 for a vector): the whole's rows
// [row0, row0 + nrows) x columns [col0, col0 + ncols) are the slice's rows [local_row0,
// local_row0 + nrows), each of ncols columns.
typedef struct vkt_tp_piece {
    uint64_t row0, nrows, col0, ncols, local_row0;
} vkt_tp_piece;
#define VKT_TP_MAX_PIECES 3

struct vkt_layer_type {
    const char *name;        // the "type" of model files
    const char *const *keys; // the keys it accepts besides "type" (NULL-terminated; may be NULL)
    // Reads the keys from p->json into l (l->in is set) and sets l->out; fails through
    // vkt_parse_fail.
    vkt_status (*parse)(const vkt_layer_parse *p, vkt_layer_desc *l);
    // Its own parameter tensors (a container's body lists its own); returns how many.
    int (*params)(const vkt_layer_desc *l, vkt_param_spec *out);
    // Per sample, its own work (a container's body is added by the caller).
    void (*cost)(const vkt_layer_desc *l, vkt_layer_cost *c);
    // The products of its forward and backward at batch B (need_dx: its input gradient too);
    // at most VKT_LAYER_MAX_MATMULS; returns how many. As matrix products, on any device: a
    // device may run some with other kernels of the same FLOPs (conv2d's direct kernels on
    // lavapipe; bench train's comparison then times the matmul equivalents).
    int (*matmuls)(const vkt_layer_desc *l, uint32_t B, bool need_dx, vkt_mm_shape *out);
    const char *const *matmul_labels; // the label ends ("dense", "dweight") that are products
    // An elementwise activation that a product can apply in its epilogue: its act and alpha.
    bool (*epilogue)(const vkt_layer_desc *l, vkt_act *act, float *alpha);
    // Its forward product can apply the next layer's epilogue, and its input-gradient product
    // the backward of the activation before it.
    bool takes_epilogue;
    // Its forward can apply the next layer's activation, where that activation's derivative
    // follows from its output (vkt_act_grad_from_output), and its backward then that
    // activation's backward first (batchnorm2d: vkt_rec_fwd_epilogue, vkt_rec_bwd_act_after).
    bool takes_act;
    // The output is the input, reshaped (flatten): no memory, no work.
    bool aliases_input;
    // Bytes per slot the node keeps from its forward to its backward besides its output (a
    // batchnorm's batch statistics), at batch B (NULL: none).
    uint64_t (*saved)(const vkt_layer_desc *l, uint32_t B);
    // Bytes of temporary storage its recording needs at batch B (im2col columns), shared with
    // every other node (NULL: none).
    uint64_t (*scratch)(const vkt_layer_desc *l, uint32_t B);
    void (*forward)(vkt_rec *r, int node);
    // Accumulates its parameter gradients (+=); writes dx when vkt_rec_need_dx.
    void (*backward)(vkt_rec *r, int node);
    // Work the backward deferred past the next barrier (r->late = node asked for it).
    void (*backward_late)(vkt_rec *r, int node);
    // Whether its backward, with the optimizer fused (r->fused_sgd), applies the SGD step to its
    // first tensor inside that tensor's gradient product and marks it in r->fused_sgd: the step
    // then neither writes nor reads that gradient, and vkt_net_record_zero_grads_step leaves it
    // unzeroed (vkt_net_record_backward_step checks that the two agree). NULL: never.
    bool (*fuses_sgd)(vkt_rec *r, int node);
    // Host reference over B samples; p/g: its own tensors (buffers included: a training forward
    // updates them as the device does). backward accumulates into g.
    void (*ref_forward)(vkt_ref *r, const vkt_layer_desc *l, double *const *p, const double *x,
                        double *y);
    void (*ref_backward)(vkt_ref *r, const vkt_layer_desc *l, double *const *p, double *const *g,
                         const double *x, const double *y, const double *dy, double *dx);
    // Its torch.nn module ("nn.Linear(784, 512)"); returns the length as snprintf does.
    int (*torch)(const vkt_layer_desc *l, char *buf, size_t size);
    // Tensor parallelism: what may be done with it, and for a device's copy l (l->tp set) the
    // pieces of the whole tensor `param` that the copy holds (at most VKT_TP_MAX_PIECES; 0: the
    // copy holds the whole tensor, as every device does). NULL: it holds every tensor whole.
    vkt_tp_role tp_role;
    int (*tp_pieces)(const vkt_layer_desc *l, int param, vkt_tp_piece *out);
};

// VKT_LAYER_TYPE(name, .field = ...): defines the kind vkt_layer_<name> (at the start of a line:
// the build reads these lines to make the registry).
#define VKT_LAYER_TYPE(lname, ...)                                                                 \
    const vkt_layer_type vkt_layer_##lname = {.name = #lname, __VA_ARGS__}

// Every kind, NULL-terminated (generated: build/vkt_layer_registry.c).
extern const vkt_layer_type *const vkt_layer_types[];
const vkt_layer_type *vkt_layer_type_find(const char *name);

// ---------------------------------------------------------------------------------------------
// Walking a model (engine/nn/layer.c)

// The tensors of top-level layers [lo, hi) in model order, as a network lays them out (offset
// 0); returns how many there are (more than max: only max written).
int vkt_model_tensors(const vkt_model_desc *m, int lo, int hi, vkt_net_tensor *out, int max);
// "module(l0, l1, ...)" from the layers' torch modules into buf (a container's body; the model
// is "nn.Sequential"); returns the length written, or size when it did not fit.
int vkt_layers_torch(const char *module, const vkt_layer_desc *ls, int nls, char *buf, size_t size);
// The parameter spec of tensor t (as vkt_model_tensors returned it).
vkt_param_spec vkt_tensor_spec(const vkt_net_tensor *t);

#endif
