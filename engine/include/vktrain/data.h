// data.h: a data set in host memory and the batch iterator that feeds training.
//
// A data set is float32 features x[n, features] (row-major) and uint32 class labels y[n]. It is
// made from arrays in memory (vkt_dataset_from_arrays) or read from one of two file formats:
//   - IDX files (the MNIST / Fashion-MNIST layout), gzip-compressed or not: u8 images scaled to
//     [0,1] by 1/255, u8 labels.
//   - NumPy .npy files (format 1.0, 2.0, 3.0; C order; little-endian): X as '<f4' or '<f8' (kept
//     as raw values) or '|u1' (scaled by 1/255), shape [n, ...] flattened to features; y as
//     '<i8', '<i4', '<u4' or '|u1', shape [n] or [n, 1], values >= 0.
// For files, classes is the largest label + 1; for arrays, the caller says how many there are.
//
// What this module does not do: normalization beyond the u8 scaling, streaming from disk
// (everything is loaded into memory), or any device work. The batcher copies rows into a
// caller's host buffer (augmenting them when asked); uploading them is the trainer's business.
#ifndef VKT_DATA_H
#define VKT_DATA_H

#include "model.h"
#include "vktrain.h"

// Where vkt_dataset_load_mnist_dir looks when the caller has no directory of its own.
#define VKT_DEFAULT_DATA_DIR "/usr/share/datasets/fashion-mnist"

typedef struct vkt_dataset {
    uint32_t n;        // samples
    uint32_t features; // floats per sample
    uint32_t classes;  // files: largest label + 1; arrays: as given
    float *x;          // [n, features], owned
    uint32_t *y;       // [n], owned
    char source[512];  // the file the features came from ("arrays in memory"), for messages
} vkt_dataset;

// Copies n samples, features x[n, features] (row-major) and labels y[n], into *out, which owns the
// copies; the caller keeps x and y. classes is the task's number of classes (the outputs of a
// softmax_cross_entropy model; the one-hot width of an mse one) and every label must be below it.
// Fails with VKT_ERR_ARG (naming the first offending sample) when x or y is NULL, n, features or
// classes is 0, a label is >= classes or a feature is NaN or infinite, and with
// VKT_ERR_HOST_MEMORY when the copies do not fit in memory. On failure *out is left empty. Free
// with vkt_dataset_free. (vkt_train_opts.train_set takes such a set, or any vkt_dataset whose
// fields the caller filled, by pointer without copying it again.)
vkt_status vkt_dataset_from_arrays(const float *x, const uint32_t *y, uint32_t n, uint32_t features,
                                   uint32_t classes, vkt_dataset *out);
// Whether a set is one a run can use: x and y present, n, features and classes at least 1 (and
// classes within the supported count), every label below classes, every feature finite. Fails with
// VKT_ERR_ARG (or VKT_ERR_HOST_MEMORY when n x features overflows) and a message that starts with
// who and names the first offending sample. vkt_train_run checks the sets it is given with it.
vkt_status vkt_dataset_check(const vkt_dataset *ds, const char *who);
// Reads an IDX image file (magic 0x00000803, u8, dims [n, rows, cols]) and an IDX label file
// (magic 0x00000801, u8, dims [n]); either may be gzip-compressed. Fails with VKT_ERR_IO when a
// file cannot be opened and VKT_ERR_FORMAT (naming the file, what was found and what was
// expected) on a wrong magic, truncated data, trailing bytes or an image/label count mismatch;
// VKT_ERR_HOST_MEMORY when the data does not fit in memory. On failure *out is left empty.
// Free with vkt_dataset_free.
vkt_status vkt_dataset_load_idx(const char *images_path, const char *labels_path, vkt_dataset *out);
// Reads {train,t10k}-images-idx3-ubyte[.gz] and {train,t10k}-labels-idx1-ubyte[.gz] from dir
// (NULL: VKT_DEFAULT_DATA_DIR); train picks the training or the test split. The .gz name is
// tried first. Fails as vkt_dataset_load_idx, and with VKT_ERR_IO when neither name exists.
vkt_status vkt_dataset_load_mnist_dir(const char *dir, bool train, vkt_dataset *out);
// Reads features from x_path and labels from y_path (.npy; see the top of this file). Fails with
// VKT_ERR_IO when a file cannot be opened, VKT_ERR_FORMAT on a malformed header, an unsupported
// dtype, Fortran order, truncated data, a non-finite feature, a negative label or a sample count
// mismatch.
vkt_status vkt_dataset_load_npy(const char *x_path, const char *y_path, vkt_dataset *out);
// Keeps the first n samples (n == 0 or n >= ds->n keeps all). classes is unchanged: it is a
// property of the task, not of the samples kept.
void vkt_dataset_limit(vkt_dataset *ds, uint32_t n);
// Frees the arrays and zeroes *ds. Accepts an already-freed or zeroed data set.
void vkt_dataset_free(vkt_dataset *ds);

// ---------------------------------------------------------------------------------------------
// Batches. An epoch visits every sample exactly once, in batches of `batch` rows; the last batch
// holds the remainder (drop_last=False in PyTorch's DataLoader), so there are ceil(n / batch)
// batches. Without shuffling the order is the file order. With shuffling the order of epoch e is
// a Fisher-Yates shuffle of 0..n-1 driven by splitmix64 (Steele, Lea, Flood 2014) whose state
// starts at mix(seed ^ mix(e + 0x632BE59BD9B4E019)), mix being splitmix64's finalizer, and j is
// drawn uniformly in [0, i] by rejection. It depends only on (seed, e, n), never on the epochs
// before, so training resumed at epoch e sees exactly the batches it would have seen.

//
// Augmentation (training batches of images, samples shaped [C, H, W], row-major): what
// torchvision's transforms.Compose([RandomCrop((H, W), padding=pad), RandomHorizontalFlip()])
// does, on the host as a batch is gathered. Crop: the sample is padded with pad zeros on every
// side and the H x W window at (top, left) of it is kept, top and left uniform in [0, 2 pad];
// flip: with probability 1/2 the window is mirrored along W. The draws of sample k (its index in
// the data set) in epoch e come from splitmix64 with the state
// mix(seed ^ mix(e + 0x4CF5AD432745937F) ^ mix(k + 0x2545F4914F6CDD1D)), in that order (top,
// left by the rejection draw above, then flip = the top bit of the next output), each only
// when asked: they depend on (seed, e, k) alone, never on the batch size, the shuffle, the
// strategy or the devices, so a resumed run sees exactly the samples it would have seen.

typedef struct vkt_augment {
    bool crop; // RandomCrop((H, W), padding=pad): a window of the zero-padded sample
    bool flip; // RandomHorizontalFlip(p=0.5): mirrored along W
    uint32_t
        pad; // crop: zeros on each side, 1 to 65535 (the CLI's default, torchvision's usual: 4)
} vkt_augment;

typedef struct vkt_batcher {
    const vkt_dataset *ds; // borrowed; must outlive the batcher
    uint32_t batch;
    bool shuffle;
    uint64_t seed;
    uint64_t epoch;
    uint32_t *order;  // [ds->n]: the sample index of each position in this epoch
    vkt_augment aug;  // none unless vkt_batcher_augment set it
    uint32_t c, h, w; // the sample's shape when augmenting
} vkt_batcher;

// Prepares the order of epoch 0. Fails with VKT_ERR_ARG when batch is 0 or the data set is
// empty, VKT_ERR_HOST_MEMORY when the order array cannot be allocated. Free with
// vkt_batcher_free.
vkt_status vkt_batcher_init(vkt_batcher *b, const vkt_dataset *ds, uint32_t batch, bool shuffle,
                            uint64_t seed);
// Sets the order of epoch `epoch` (a no-op without shuffling).
void vkt_batcher_epoch(vkt_batcher *b, uint64_t epoch);
// Batches per epoch: ceil(n / batch).
uint32_t vkt_batcher_count(const vkt_batcher *b);
// Copies batch i of the current epoch into x[rows, features] and y[rows] (either may be NULL),
// augmented when vkt_batcher_augment asked for it, and returns rows: batch, or less for the last
// batch; 0 when i is out of range.
uint32_t vkt_batcher_get(const vkt_batcher *b, uint32_t i, float *x, uint32_t *y);
// Augments every batch vkt_batcher_get gives from now on (see above), the samples being shaped
// `shape` (the model's input). Fails with VKT_ERR_ARG, leaving the batcher as it was, when
// shape is not [C, H, W], its elements are not the data's features, or crop has a pad of 0 (it
// would change nothing) or above 65535. Neither crop nor flip: augmentation off.
vkt_status vkt_batcher_augment(vkt_batcher *b, const vkt_augment *a, const vkt_shape *shape);
// One sample: src [C, H, W] of data set index k in epoch `epoch`, augmented into dst (another
// buffer) as vkt_batcher_get does (a copy when augmentation is off).
void vkt_augment_sample(const vkt_batcher *b, uint32_t k, const float *src, float *dst);
void vkt_batcher_free(vkt_batcher *b);

#endif
