// model.h: model description files (JSON), parsed and checked into a vkt_model_desc: a tree of
// layers with the shape of one sample at every point. docs/MODEL_FORMAT.md has the full format;
// in short:
//   {
//     "name": "fashion_mlp",                       optional string (< 64 bytes); default: the
//                                                  file name without its directory and .json
//     "description": "...",                        optional string, ignored
//     "input": [784],                              required: the shape of one sample, 1 to 8
//                                                  positive integers ([784], [1, 28, 28], ...)
//     "layers": [ {"type": "dense", "units": 512}, {"type": "relu"}, ... ],
//     "loss": "softmax_cross_entropy" | "mse"      required
//   }
// Every layer kind (dense, the activations, flatten, residual, ...) is one file of
// engine/nn/layers/ that declares its keys, shapes, parameters, costs and recording
// (engine/nn/layer.h); this header only names what every kind has in common. Keys starting with
// "comment" are ignored everywhere; any other unknown key is an error, so that a typo ("unit",
// "biass") is reported instead of silently meaning the default.
//
// What this module does not do: allocate parameters, choose kernels or initialize weights; the
// network code does that from the vkt_model_desc and the layer kinds.
#ifndef VKT_MODEL_H
#define VKT_MODEL_H

#include "ops.h"
#include "vktrain.h"

// Dimensions of one sample (the batch dimension is not counted): a dense layer's [features],
// a sequence's [T, C], an image's [C, H, W].
#define VKT_MAX_DIMS 8

typedef struct vkt_shape {
    int ndim;                   // 1 .. VKT_MAX_DIMS
    uint32_t dim[VKT_MAX_DIMS]; // row-major; dim[ndim - 1] varies fastest
} vkt_shape;

// Elements of one sample of that shape.
uint64_t vkt_shape_elements(const vkt_shape *s);
// "[2, 3, 4]" into buf.
void vkt_shape_format(const vkt_shape *s, char *buf, size_t size);

typedef enum vkt_loss {
    // "softmax_cross_entropy": classes along the output's last dimension, one label (a class
    // index) per position: one per sample for an output [classes], T for [T, classes] (a
    // language model's next-token targets); the loss is the mean over every position.
    VKT_LOSS_SOFTMAX_XENT,
    VKT_LOSS_MSE, // "mse": mean of squared errors against a target of output_features
} vkt_loss;

// A layer kind's table (engine/nn/layer.h): its keys, shapes, parameters, costs, recording.
typedef struct vkt_layer_type vkt_layer_type;

// How one device's copy of a layer is cut under tensor parallelism (vkt_layer_desc.tp).
typedef enum vkt_tp_mode {
    VKT_TP_NONE,   // whole (replicated on every device)
    VKT_TP_COLUMN, // a product's output features [tp_lo, tp_hi): its weight's rows, its bias
    VKT_TP_ROW,    // a product's input features [tp_lo, tp_hi): its weight's columns; the
                   // devices' outputs are partial sums (one reduction), the bias added once
    VKT_TP_SLICE,  // elementwise between a column and a row split: features [tp_lo, tp_hi)
    VKT_TP_HEADS,  // attention heads [tp_lo, tp_hi): column-split in-projection, row-split out
} vkt_tp_mode;

typedef struct vkt_layer_desc {
    const vkt_layer_type *type; // the kind ("dense", "relu", "residual", ...)
    // The keys a kind reads, as parsed (each kind's file says which it uses).
    uint32_t units; // dense: outputs (the last dimension); conv2d: out_channels
    bool bias;      // dense, conv2d: has a bias vector
    vkt_act act;    // activations
    float alpha;    // leaky_relu: negative slope
    // conv2d, pooling: [h, w] of the window, its stride and the zero padding on each side
    uint32_t kernel[2], stride[2], padding[2];
    float eps, momentum; // batchnorm2d, layernorm
    float p;             // dropout: the probability of zeroing an element
    // Shapes of one sample, filled by the parser from the layers before.
    vkt_shape in, out;
    uint32_t in_features, out_features; // elements of one sample: vkt_shape_elements of in, out
    // The body of a container kind (residual): its layers, in order; owned.
    int nlayers;
    struct vkt_layer_desc *layers;
    // Tensor parallelism (--strategy tensor, parallel/tensor.c): this copy of the layer is one
    // device's slice of it. VKT_TP_NONE in a parsed model. tp_lo, tp_hi: the slice [lo, hi) of
    // the split dimension (output features for a column split, input features for a row split,
    // heads for a heads split), of tp_full; tp_rank: the device's place among tp_size.
    vkt_tp_mode tp;
    int tp_rank, tp_size;
    uint32_t tp_lo, tp_hi, tp_full;
} vkt_layer_desc;

typedef struct vkt_model_desc {
    char name[64];
    vkt_shape input;         // "input", as written
    uint32_t input_features; // its product
    int nlayers;
    vkt_layer_desc *layers; // [nlayers], owned: the top-level layers (the units of a split)
    vkt_loss loss;
    vkt_shape output;         // the last layer's output shape
    uint32_t output_features; // its product
} vkt_model_desc;

// Reads and parses a model file. Fails with VKT_ERR_IO when the file cannot be read and as
// vkt_model_parse otherwise. Free with vkt_model_free.
vkt_status vkt_model_load(const char *path, vkt_model_desc *out);
// Parses JSON text; source_name names it in messages (a file name). Fails with VKT_ERR_FORMAT and
// a message naming the source and either the byte offset, line and column of invalid JSON or the
// JSON path of the bad value ("layers[3].units", "layers[2].layers[0].type"), what was found
// and what is expected. On failure *out is left empty (safe to vkt_model_free).
vkt_status vkt_model_parse(const char *json_text, const char *source_name, vkt_model_desc *out);
void vkt_model_free(vkt_model_desc *m);
// softmax_cross_entropy: the classes (the output's last dimension); 0 for mse.
uint32_t vkt_model_classes(const vkt_model_desc *m);
// Targets per sample: labels (uint32), one per position, for softmax_cross_entropy; floats,
// output_features of them, for mse. The mean loss is the summed loss over B times this.
uint32_t vkt_model_targets_per_sample(const vkt_model_desc *m);
// Trainable parameters of every layer, nested ones included (not the buffers a layer keeps
// beside them, such as batchnorm's running statistics).
uint64_t vkt_model_param_count(const vkt_model_desc *m);
// The names used in model files: "relu", "softmax_cross_entropy", ... ("?" if out of range).
const char *vkt_model_act_name(vkt_act act);
const char *vkt_model_loss_name(vkt_loss loss);
// The layer's kind as written in model files ("dense", "residual", ...).
const char *vkt_layer_type_name(const vkt_layer_desc *l);

// ---------------------------------------------------------------------------------------------
// What the layers declare, summed over a model (the planner, `vktrain model` and `bench train`
// read these; none of them looks at a layer's kind).

// Multiply-adds counted as 2 FLOPs, per sample; bytes are the tensors each pass reads and
// writes once (a lower bound of the memory traffic); saved: the activation floats per sample
// the layer keeps for its backward.
typedef struct vkt_layer_cost {
    double fwd_flops, bwd_flops;
    double fwd_bytes, bwd_bytes;
    double saved_floats;
} vkt_layer_cost;

// The cost of top-level layers [lo, hi) (their bodies included), per sample.
vkt_layer_cost vkt_model_cost(const vkt_model_desc *m, int lo, int hi);

// The matrix products of one training step at batch B (forward, weight and input gradients;
// the model's first layer computes no input gradient). Writes up to max, returns how many there
// are (may be more than max).
int vkt_model_matmuls(const vkt_model_desc *m, uint32_t B, vkt_mm_shape *out, int max);

// The model as a PyTorch expression over torch.nn (as `nn`) and a Residual(nn.Sequential) whose
// forward returns x + super().forward(x): "nn.Sequential(nn.Linear(784, 512), nn.ReLU(), ...)".
// Loading a vktrain checkpoint into that module with load_state_dict(strict=True) works.
// Returns VKT_ERR_ARG when buf is too small.
vkt_status vkt_model_torch(const vkt_model_desc *m, char *buf, size_t size);

#endif
