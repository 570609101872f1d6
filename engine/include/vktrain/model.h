// model.h: model description files (JSON), parsed and checked into a vkt_model_desc.
//
// The format (docs/MODEL_FORMAT.md has the full text):
//   {
//     "name": "fashion_mlp",                       optional string (< 64 bytes); default: the
//                                                  file name without its directory and .json
//     "description": "...",                        optional string, ignored
//     "input": [784],                              required: the shape of one sample, 1 to 8
//                                                  positive integers; features = their product
//     "layers": [                                  required, non-empty, in order:
//       {"type": "dense", "units": 512, "bias": true},   units >= 1; bias optional, default true
//       {"type": "relu"},
//       {"type": "leaky_relu", "negative_slope": 0.01},  negative_slope optional, default 0.01
//       {"type": "gelu", "approximate": "tanh"},         only the tanh approximation exists
//       {"type": "tanh"}, {"type": "sigmoid"}
//     ],
//     "loss": "softmax_cross_entropy" | "mse"      required
//   }
// Keys starting with "comment" are ignored everywhere; any other unknown key is an error, so
// that a typo ("unit", "biass") is reported instead of silently meaning the default.
// At least one dense layer is required; softmax_cross_entropy needs at least 2 outputs.
//
// What this module does not do: allocate parameters, choose kernels or initialize weights; the
// layer code does that from the vkt_model_desc.
#ifndef VKT_MODEL_H
#define VKT_MODEL_H

#include "ops.h"
#include "vktrain.h"

typedef enum vkt_layer_kind {
    VKT_LAYER_DENSE,      // y[B,out] = x[B,in] W[out,in]^T (+ b[out])
    VKT_LAYER_ACTIVATION, // y = act(x), elementwise; in_features == out_features
} vkt_layer_kind;

typedef enum vkt_loss {
    VKT_LOSS_SOFTMAX_XENT, // "softmax_cross_entropy": labels are class indices < output_features
    VKT_LOSS_MSE,          // "mse": mean of squared errors against a target of output_features
} vkt_loss;

typedef struct vkt_layer_desc {
    vkt_layer_kind kind;
    uint32_t units;       // dense: outputs
    bool bias;            // dense: has a bias vector
    vkt_act act;          // activation
    float alpha;          // leaky_relu: negative slope
    uint32_t in_features; // filled by the parser from the layers before
    uint32_t out_features;
} vkt_layer_desc;

typedef struct vkt_model_desc {
    char name[64];
    uint32_t input_features; // product of "input"
    int nlayers;
    vkt_layer_desc *layers; // [nlayers], owned
    vkt_loss loss;
    uint32_t output_features; // out_features of the last layer
} vkt_model_desc;

// Reads and parses a model file. Fails with VKT_ERR_IO when the file cannot be read and as
// vkt_model_parse otherwise. Free with vkt_model_free.
vkt_status vkt_model_load(const char *path, vkt_model_desc *out);
// Parses JSON text; source_name names it in messages (a file name). Fails with VKT_ERR_FORMAT and
// a message naming the source and either the byte offset, line and column of invalid JSON or the
// JSON path of the bad value ("layers[3].units"), what was found and what is expected. On
// failure *out is left empty (safe to vkt_model_free).
vkt_status vkt_model_parse(const char *json_text, const char *source_name, vkt_model_desc *out);
void vkt_model_free(vkt_model_desc *m);
// Trainable parameters: for every dense layer in*out weights plus out biases when it has them.
uint64_t vkt_model_param_count(const vkt_model_desc *m);
// The names used in model files: "relu", "softmax_cross_entropy", ... ("?" if out of range).
const char *vkt_model_act_name(vkt_act act);
const char *vkt_model_loss_name(vkt_loss loss);

#endif
