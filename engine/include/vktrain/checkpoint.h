// checkpoint.h: named tensors in safetensors files, float32 or int64 (a buffer such as
// batchnorm's num_batches_tracked), written atomically and read back with every header field
// checked. The engine holds every tensor as floats: an int64 tensor is converted exactly both
// ways, whole numbers only.
//
// The file format is Hugging Face's safetensors (https://huggingface.co/docs/safetensors):
//   8 bytes   N, the header length, unsigned little-endian
//   N bytes   JSON: {"<name>": {"dtype": "F32" | "I64", "shape": [d0, ...], "data_offsets": [b,
//   e]},
//                    ..., "__metadata__": {"<key>": "<value>", ...}}, padded with spaces so that
//             8 + N is a multiple of 8
//   the data  every tensor's little-endian bytes at [8 + N + b, 8 + N + e), contiguous, in the
//             order given to the writer
// so safetensors.safe_open / torch's load_file read vktrain checkpoints, and vktrain reads theirs
// when the tensors are F32 or I64 (an int64 value read must lie within +-2^24, where a float holds
// every whole number).
//
// Atomic replacement: the writer writes "<path>.tmp.<pid>" in the target's directory, flushes and
// fsyncs it, renames it over <path> and fsyncs the directory. A crash at any point leaves either
// the old file or the new one, never a mix; a failed write removes its temporary file. Temporary
// files left by writers that were killed (their pid no longer runs) are removed by the next
// write to the same path.
//
// Test hook: when the environment variable VKT_TEST_CRASH_AFTER_BYTES=N is set, the writer sends
// itself SIGKILL once it has written N bytes of the temporary file (after flushing them), so
// that tests can kill a write midway and check that the old checkpoint survives.
//
// What this module does not do: decide which tensors a training run saves, or their names (the
// trainer does), or read dtypes other than F32 and I64 (they are reported by name).
#ifndef VKT_CHECKPOINT_H
#define VKT_CHECKPOINT_H

#include "vktrain.h"

#define VKT_CKPT_MAX_DIMS 4

// One tensor to write. data holds the product of shape[0..ndim-1] floats (1 when ndim == 0).
typedef struct vkt_ckpt_tensor {
    const char *name; // non-empty, unique, not "__metadata__"
    int ndim;         // 0..VKT_CKPT_MAX_DIMS (0: a scalar, shape [])
    uint64_t shape[VKT_CKPT_MAX_DIMS];
    const float *data;
    bool int64; // written as I64: every value must be a whole number within int64's range
} vkt_ckpt_tensor;

typedef struct vkt_ckpt_meta {
    const char *key;
    const char *value;
} vkt_ckpt_meta;

// Writes the tensors and metadata to path atomically (see above). Fails with VKT_ERR_ARG on a bad
// name, shape or duplicate, or an int64 tensor's value that is not a whole number in int64's range
// (naming the tensor and the element; nothing is written then), VKT_ERR_IO when the temporary file
// cannot be created, written, synced or renamed (the message names the path and the system's
// reason; the old file is left untouched), VKT_ERR_HOST_MEMORY when the header cannot be built.
vkt_status vkt_checkpoint_write(const char *path, const vkt_ckpt_tensor *tensors, int ntensors,
                                const vkt_ckpt_meta *meta, int nmeta);

// ---------------------------------------------------------------------------------------------
// Reading. The file stays open until vkt_checkpoint_close; tensor data is read on demand.

typedef struct vkt_checkpoint vkt_checkpoint;

// Opens path and checks its header: a sane length, valid JSON, every tensor F32 or I64 with a shape
// whose size matches its byte range, ranges contiguous from 0 and ending exactly at the end of
// the file, metadata values strings. Fails with VKT_ERR_IO when the file cannot be opened or
// read and VKT_ERR_FORMAT (naming the file and the tensor or byte offset) otherwise.
vkt_status vkt_checkpoint_open(const char *path, vkt_checkpoint **out);
void vkt_checkpoint_close(vkt_checkpoint *ck);
const char *vkt_checkpoint_path(const vkt_checkpoint *ck);

// Metadata: the value of key, or NULL when absent. Pointers live until close.
const char *vkt_checkpoint_meta(const vkt_checkpoint *ck, const char *key);
int vkt_checkpoint_meta_count(const vkt_checkpoint *ck);
void vkt_checkpoint_meta_at(const vkt_checkpoint *ck, int i, const char **key, const char **value);

// Tensors, in file order.
int vkt_checkpoint_tensor_count(const vkt_checkpoint *ck);
const char *vkt_checkpoint_tensor_name(const vkt_checkpoint *ck, int i);
// Whether name exists; when it does, its ndim and shape (shape may be NULL).
bool vkt_checkpoint_find(const vkt_checkpoint *ck, const char *name, int *ndim,
                         uint64_t shape[VKT_CKPT_MAX_DIMS]);
// "F32" or "I64", the dtype of tensor name; NULL when absent.
const char *vkt_checkpoint_dtype(const vkt_checkpoint *ck, const char *name);
// Fails with VKT_ERR_FORMAT when name is absent ("checkpoint X has no tensor Y; it holds ...")
// or has another shape ("checkpoint X: tensor 2.weight has shape [256, 512], the model needs
// [128, 512]").
vkt_status vkt_checkpoint_expect(const vkt_checkpoint *ck, const char *name, int ndim,
                                 const uint64_t *shape);
// Copies the count values of tensor name into dst as floats (I64 converted). Fails with
// VKT_ERR_FORMAT when name is absent or an I64 value lies beyond +-2^24 (a float would not hold
// it exactly; the message names the tensor, the element and the value), VKT_ERR_ARG when count is
// not its element count, VKT_ERR_IO when the read comes up short (the file changed since it was
// opened).
vkt_status vkt_checkpoint_read(const vkt_checkpoint *ck, const char *name, float *dst,
                               uint64_t count);

#endif
