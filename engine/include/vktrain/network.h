// network.h: a model (or a contiguous range of its layers, a pipeline stage) instantiated on one
// device. Parameters, gradients and optimizer state each live in one buffer with the same
// packing, so that zeroing, clipping and the optimizer run as single dispatches over all of
// them; activations live in per-slot buffers so that several micro-batches can be in flight.
//
// Recording functions add work to a command stream and put barriers between dependent ops;
// nothing here submits or waits except the host-side tensor reads and writes. What each layer
// records is its kind's (engine/nn/layer.h). An activation right after a product (dense) of the
// same sequence is recorded inside that product (and its backward inside the product's input
// gradient) where the device runs that faster (vkt_matmul_epilogue_pays); the context's
// vkt_context_desc.fuse, read at vkt_net_create, turns that off or on everywhere. The result is
// the same either way (network.c).
#ifndef VKT_NETWORK_H
#define VKT_NETWORK_H

#include "model.h"
#include "ops.h"
#include "vktrain.h"

// Bytes left free after every tensor (aligned) in the packed buffers and the activations, on
// every device so that every device packs alike: on lavapipe a texel view whose size has bits
// 8-15 zero reads this much more of its buffer, so that no kernel is compiled twice for the sizes
// of its views (engine/core/cmd.c, texel_view; docs/PERFORMANCE.md). The next tensor starts at
// vkt_net_next_offset.
#define VKT_NET_TENSOR_GUARD 256u

// Where the tensor after one at byte off of `bytes` bytes starts, with alignment align.
static inline uint64_t vkt_net_next_offset(uint64_t off, uint64_t bytes, uint64_t align) {
    uint64_t end = (off + bytes + align - 1) / align * align;
    return (end + VKT_NET_TENSOR_GUARD + align - 1) / align * align;
}

typedef enum vkt_optim_kind { VKT_OPTIM_SGD, VKT_OPTIM_ADAMW } vkt_optim_kind;

typedef struct vkt_optim_desc {
    vkt_optim_kind kind;
    float lr;
    float momentum;          // SGD
    bool nesterov;           // SGD
    float weight_decay;      // SGD: L2 added to the gradient; AdamW: decoupled
    float beta1, beta2, eps; // AdamW
    float clip;              // global gradient-norm clipping; 0 = off
} vkt_optim_desc;

// The optimizer defaults PyTorch uses (SGD lr 0.01 momentum 0; AdamW lr 1e-3, betas 0.9/0.999,
// eps 1e-8, weight decay 0.01).
vkt_optim_desc vkt_optim_default(vkt_optim_kind kind);

typedef struct vkt_net_desc {
    const vkt_model_desc *model;
    int first_layer, last_layer; // the stage: layers [first, last); 0 and nlayers for all
    uint32_t max_batch;          // rows per slot
    int slots;                   // activation sets (micro-batches in flight); >= 1
    vkt_optim_desc optim;
    // A sharded optimizer (ZeRO stage 1, parallel/replicated.c): the optimizer state covers only
    // the stage's parameter elements [optim_lo, optim_hi), counted over its trained tensors in
    // model order (buffers excluded), and vkt_net_record_step updates only those. Where the range
    // starts inside a tensor, the start must lie a multiple of the device's offset alignment into
    // it (vkt_plan_optim_shards chooses such bounds). false: the whole stage (the default).
    bool shard_optim;
    uint64_t optim_lo, optim_hi;
} vkt_net_desc;

// Which of the packed buffers a tensor is read from or written to.
// A tensor that is a buffer (vkt_net_tensor.state: batchnorm's running statistics) lives in
// the state store only, which VKT_STORE_PARAM reads and writes for it; it has no gradient or
// optimizer state. On a net with a sharded optimizer (vkt_net_desc.shard_optim), reads of
// VKT_STORE_OPT1/OPT2 fill only the tensor's elements inside the shard (the rest of dst is left
// as it was) and writes take only those from src.
typedef enum vkt_net_store {
    VKT_STORE_PARAM,
    VKT_STORE_GRAD,
    VKT_STORE_OPT1, // SGD momentum buffer / AdamW exp_avg
    VKT_STORE_OPT2, // AdamW exp_avg_sq
} vkt_net_store;

// What a forward (and the backward of the same rows) computes: training (batch statistics,
// dropout) or evaluation (running statistics, no dropout), with the seed and step that draw a
// dropout mask and the row of the whole batch that a slot's row 0 is (a shard's or a
// micro-batch's offset), so that a mask per sample does not depend on how the batch is cut.
typedef struct vkt_net_phase {
    bool train;
    uint64_t seed;
    uint32_t step;
    uint32_t row0;
} vkt_net_phase;

struct vkt_layer_desc;

typedef struct vkt_net_tensor {
    char name[64]; // PyTorch's names: "<layer index>.weight", "<block>.<j>.bias" in a residual
    int layer;     // the top-level layer it belongs to (index in the model's layer list)
    const struct vkt_layer_desc *desc; // the (possibly nested) layer that owns it
    int param;                         // which of that layer's parameters (0: weight, ...)
    int ndim;
    uint32_t shape[4]; // as PyTorch's: a dense weight [out, in], a bias [out]
    uint64_t count;    // elements
    uint64_t offset;   // bytes into each packed buffer (the state buffer for a buffer)
    bool state;        // a buffer (running statistics), not a trained parameter
    bool int64;        // saved as int64 (num_batches_tracked); a float on the device
} vkt_net_tensor;

typedef struct vkt_net vkt_net;

// Fails with VKT_ERR_DEVICE_MEMORY (naming the device, bytes needed and left) when the stage
// does not fit; nothing is left allocated then.
vkt_status vkt_net_create(vkt_device *dev, vkt_ops *ops, const vkt_net_desc *desc, vkt_net **out);
void vkt_net_destroy(vkt_net *net);

// Builds the pipelines of the net's matrix products at its max_batch rows ahead of the first
// step, on up to `threads` threads at once (vkt_ops_prebuild), where the net records its products
// plain (no fused epilogues); elsewhere does nothing. Choosing each product's kernel may measure
// the candidates (first use of a shape). What it does not foresee builds at first use, as
// always. Returns the first failure.
vkt_status vkt_net_prebuild(vkt_net *net, int threads);

// Bytes the stage would allocate on a device for a given batch and slot count, without
// allocating: parameters, gradients, optimizer state, activations (for the memory planner).
typedef struct vkt_net_memory {
    uint64_t params, grads, optim, activations, io, total; // io: buffers, scratch, clipping
} vkt_net_memory;
vkt_net_memory vkt_net_estimate(const vkt_net_desc *desc, uint64_t align);

int vkt_net_tensor_count(const vkt_net *net);
const vkt_net_tensor *vkt_net_get_tensor(const vkt_net *net, int i);
uint64_t vkt_net_param_count(const vkt_net *net);
int vkt_net_find_tensor(const vkt_net *net, const char *name);
vkt_status vkt_net_read_tensor(vkt_net *net, vkt_net_store store, int i, float *dst);
vkt_status vkt_net_write_tensor(vkt_net *net, vkt_net_store store, int i, const float *src);
// PyTorch's nn.Linear default initialisation (weights and biases uniform in
// +-1/sqrt(fan_in), i.e. kaiming_uniform with a = sqrt(5)) from a seeded generator: the same
// seed gives the same parameters on every device. Optimizer state and gradients are zeroed.
vkt_status vkt_net_init(vkt_net *net, uint64_t seed);
// Zeroes optimizer state (a fresh optimizer).
vkt_status vkt_net_reset_optimizer(vkt_net *net);

// The phase the next recorded forward and backward compute in (until the next call); a new net
// is in training at step 1, seed 0, row 0. A backward must be recorded in the phase of its
// forward.
void vkt_net_set_phase(vkt_net *net, const vkt_net_phase *ph);
const vkt_net_phase *vkt_net_get_phase(const vkt_net *net);
// The learning rate the next recorded optimizer steps use (a schedule's rate for the step).
void vkt_net_set_lr(vkt_net *net, float lr);
// Whether the training step recorded since the last vkt_net_set_phase (forward, loss and
// vkt_net_record_backward_step) is the same commands for every step with the same batch size and
// optimizer settings (vkt_optim_desc), so that a strategy may submit it again instead of
// recording it: false when a layer's recording read the step, seed or row (dropout masks) or the
// optimizer's update changes per step (AdamW's bias correction, clipping).
bool vkt_net_step_reusable(const vkt_net *net);

// Views for feeding the stage and passing activations between stages. slot < slots.
uint32_t vkt_net_in_features(const vkt_net *net);
uint32_t vkt_net_out_features(const vkt_net *net);
vkt_view vkt_net_input(vkt_net *net, int slot);       // [max_batch, in] the stage's input
vkt_view vkt_net_output(vkt_net *net, int slot);      // [max_batch, out] the stage's output
vkt_view vkt_net_input_grad(vkt_net *net, int slot);  // [max_batch, in] d loss / d input
vkt_view vkt_net_output_grad(vkt_net *net, int slot); // [max_batch, out] d loss / d output
// labels (uint32 [B, positions]) or MSE targets [B, out] (vkt_model_targets_per_sample)
vkt_view vkt_net_targets(vkt_net *net, int slot);
// [max_batch, vkt_net_loss_rows_per_sample] losses: one per sample (mse: its summed squared
// errors), or one per position (softmax_cross_entropy)
vkt_view vkt_net_loss_rows(vkt_net *net, int slot);
uint32_t vkt_net_loss_rows_per_sample(const vkt_net *net);
vkt_view vkt_net_correct(vkt_net *net); // uint32 counter for accuracy
vkt_view vkt_net_params(vkt_net *net);
vkt_view vkt_net_grads(vkt_net *net);

// Recording. Layer labels look like "fwd:2:dense", "bwd:0:dense", "opt:sgd" (the trace's
// categories come from the prefix).
void vkt_net_record_zero_grads(vkt_net *net, vkt_cmd *cmd);
// The zeroing before a step recorded by vkt_net_record_backward_step (the same slot and B): the
// gradients it sums into, not those of the weights whose SGD step it takes inside their
// gradient's product (it neither writes nor reads them; their bytes are left as they were).
// On lavapipe filling fashion_mlp's whole 2.1 MB of gradients took up to 0.25 ms of a 9 ms step
// (traced, docs/PERFORMANCE.md). Then a barrier, as vkt_net_record_zero_grads.
void vkt_net_record_zero_grads_step(vkt_net *net, vkt_cmd *cmd, int slot, uint32_t B);
void vkt_net_record_forward(vkt_net *net, vkt_cmd *cmd, int slot, uint32_t B);
// The loss of the last stage: loss rows and the output gradient, scaled by grad_scale (1/B of
// the whole batch, so that micro-batches and shards add up to the whole batch's gradient).
void vkt_net_record_loss(vkt_net *net, vkt_cmd *cmd, int slot, uint32_t B, float grad_scale);
// Backward through the stage from its output gradient; accumulates parameter gradients.
// input_grad: also compute the gradient of the stage's input (needed by an earlier stage).
void vkt_net_record_backward(vkt_net *net, vkt_cmd *cmd, int slot, uint32_t B, bool input_grad);
// The same for the layers [lo, hi) of the stage only (model indices), from hi-1 down to lo:
// lets a data-parallel step send the last layers' gradients while earlier layers still run.
void vkt_net_record_backward_layers(vkt_net *net, vkt_cmd *cmd, int slot, uint32_t B, int lo,
                                    int hi, bool input_grad);
// The byte range [*off, *off + *bytes) of the packed parameter/gradient buffers that holds the
// tensors of layers [lo, hi); *bytes is 0 when those layers have no parameters.
void vkt_net_param_range(const vkt_net *net, int lo, int hi, uint64_t *off, uint64_t *bytes);
// Bytes of each packed buffer (parameters, gradients, optimizer state).
uint64_t vkt_net_packed_bytes(const vkt_net *net);
int vkt_net_first_layer(const vkt_net *net);
int vkt_net_last_layer(const vkt_net *net);
// Gradient clipping (when the descriptor asks) and one optimizer update; step counts from 1.
// With a sharded optimizer only the shard's parameters are updated (and clipped), one dispatch
// per piece of a tensor in it; the clipping norm is still that of all the net's gradients.
void vkt_net_record_step(vkt_net *net, vkt_cmd *cmd, uint32_t step);
// The same, with the squared global gradient norm given: clipping scales by sqrt(sumsq) instead
// of summing the net's own gradients (a sharded optimizer's replica holds the summed gradients
// of its shard only; the host computes the norm of all of them while it sums them).
void vkt_net_record_step_norm(vkt_net *net, vkt_cmd *cmd, uint32_t step, float sumsq);
// The squared norm of the net's gradients into its clipping word (a tensor-parallel net's: its
// slices' summed over its group, the whole tensors' once), and that word read back once the stream
// ran: a strategy whose devices hold different parameters (layers) sums them into the global norm
// for vkt_net_record_step_norm.
void vkt_net_record_grad_sumsq(vkt_net *net, vkt_cmd *cmd);
vkt_status vkt_net_read_grad_sumsq(vkt_net *net, float *out);
// vkt_net_record_backward (no input gradient) then vkt_net_record_step, for a step of one batch
// on a whole model whose gradients nobody reads: with SGD, no clipping, and fusion on
// (vkt_context_desc.fuse), each weight gradient whose matmul can take the optimizer epilogue
// (vkt_matmul_sgd_fits) applies the SGD step to its weights there instead of storing the
// gradient, and SGD runs separately only over the other tensors. The parameters come out as
// vkt_net_record_backward + vkt_net_record_step make them, up to rounding; the gradient buffer
// then lacks those weights' gradients (their bytes are neither written nor read). Returns the
// number of weight tensors fused (0: exactly the two calls).
int vkt_net_record_backward_step(vkt_net *net, vkt_cmd *cmd, int slot, uint32_t B, uint32_t step);
// Counts rows whose argmax matches the label into the correct counter (last stage).
void vkt_net_record_accuracy(vkt_net *net, vkt_cmd *cmd, int slot, uint32_t B);
// For the test that proves synchronization validation guards the backward: the which-th barrier
// (from 0) that vkt_net_record_backward* would record is left out (an activation fused into a
// matmul records none of its own). -1 restores them all.
void vkt_net_test_skip_barrier(vkt_net *net, int which);
// Whether a label recorded by a network is one of a matrix product (the layer kinds say which of
// their labels are): the step's matmul time is the sum of those.
bool vkt_net_label_is_matmul(const char *label);
// Tensor parallelism: the reduction a split layer's recording calls (vkt_rec_allreduce): fn
// sums v over the devices sharing the layer, in place, and may end, submit and wait for cmd and
// begin it again (what was recorded before v's reduction runs before it). An error it returns is
// kept for vkt_net_status.
typedef vkt_status (*vkt_net_allreduce_fn)(void *ctx, vkt_cmd *cmd, vkt_view v);
void vkt_net_set_allreduce(vkt_net *net, vkt_net_allreduce_fn fn, void *ctx);
// The initial values of tensor t of the whole model m (as vkt_model_tensors lists it) from seed:
// what vkt_net_init writes, t->count floats into v.
void vkt_tensor_init_values(const vkt_model_desc *m, const vkt_net_tensor *t, uint64_t seed,
                            float *v);
// Any error from building kernels while recording, or from a reduction (vkt_net_set_allreduce).
vkt_status vkt_net_status(vkt_net *net);
const vkt_model_desc *vkt_net_model(const vkt_net *net);
vkt_device *vkt_net_device(const vkt_net *net);

#endif
