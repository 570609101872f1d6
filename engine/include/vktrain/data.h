// data.h: a data set in host memory and the batch iterator that feeds training.
//
// A data set is float32 features x[n, features] (row-major) and uint32 class labels y[n, targets]:
// one label per sample (targets 1: a classifier's class), or one per position (targets T: a
// language model's next-token ids, for a model whose output is [T, classes]). It is made from
// arrays in memory (vkt_dataset_from_arrays, vkt_dataset_from_sequences) or read from one of two
// file formats:
//   - IDX files (the MNIST / Fashion-MNIST layout), gzip-compressed or not: u8 images scaled to
//     [0,1] by 1/255, u8 labels.
//   - NumPy .npy files (format 1.0, 2.0, 3.0; C order; little-endian): X as '<f4' or '<f8' (kept
//     as raw values), '|u1' (scaled by 1/255), or '<i4' / '<i8' (token ids, converted to floats
//     exactly: each must be in [0, 2^24)), shape [n, ...] flattened to features; y as '<i8',
//     '<i4', '<u4' or '|u1', values >= 0, shape [n] or [n, 1] (one label per sample) or [n, T, ...]
//     (targets = the product of the dimensions after the first).
// For files, classes is the largest label + 1; for arrays, the caller says how many there are.
//
// Text (a third source, for byte-level language models): files read as bytes (vocabulary 256),
// concatenated, the last tenth held out for validation; training windows are drawn from the rest
// by the batcher (vkt_batcher_init_text), the validation windows are a fixed data set
// (vkt_text_validation). The definitions are at vkt_text below.
//
// What this module does not do: normalization beyond the u8 scaling, tokenization beyond bytes,
// streaming from disk (everything is loaded into memory), or any device work. The batcher copies
// rows into a caller's host buffer (augmenting them when asked); uploading them is the trainer's
// business.
#ifndef VKT_DATA_H
#define VKT_DATA_H

#include "model.h"
#include "vktrain.h"

// Where vkt_dataset_load_mnist_dir looks when the caller has no directory of its own.
#define VKT_DEFAULT_DATA_DIR "/usr/share/datasets/fashion-mnist"
// The text a byte-level language model trains on when the caller names none: Debian's `fortunes`
// package (scripts/setup.sh installs it).
#define VKT_DEFAULT_TEXT_DIR "/usr/share/games/fortunes"

typedef struct vkt_dataset {
    uint32_t n;        // samples
    uint32_t features; // floats per sample
    uint32_t classes;  // files: largest label + 1; arrays: as given
    uint32_t targets;  // labels per sample: 1 (0 is read as 1), or T, one per position
    float *x;          // [n, features], owned
    uint32_t *y;       // [n, targets], owned
    char source[512];  // the file the features came from ("arrays in memory"), for messages
} vkt_dataset;

// Labels per sample: ds->targets, or 1 when it is 0 (a set whose fields the caller filled).
uint32_t vkt_dataset_targets(const vkt_dataset *ds);

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
// The same with `targets` labels per sample, y[n, targets] (a language model's next-token ids:
// targets = T for an output [T, classes]); refusals name the sample and the position.
vkt_status vkt_dataset_from_sequences(const float *x, const uint32_t *y, uint32_t n,
                                      uint32_t features, uint32_t targets, uint32_t classes,
                                      vkt_dataset *out);
// Whether a set is one a run can use: x and y present, n, features and classes at least 1 (and
// classes within the supported count), every label below classes, every feature finite. Fails with
// VKT_ERR_ARG (or VKT_ERR_HOST_MEMORY when n x features or n x targets overflows) and a message
// that starts with who and names the first offending sample (and position, when targets > 1).
// vkt_train_run checks the sets it is given with it.
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
// dtype, Fortran order, truncated data, a non-finite feature, an integer feature (token id)
// outside [0, 2^24) (naming the row and column), a negative label (naming the sample, and the
// position when there are several per sample) or a sample count mismatch.
vkt_status vkt_dataset_load_npy(const char *x_path, const char *y_path, vkt_dataset *out);
// Keeps the first n samples (n == 0 or n >= ds->n keeps all). classes is unchanged: it is a
// property of the task, not of the samples kept.
void vkt_dataset_limit(vkt_dataset *ds, uint32_t n);
// Frees the arrays and zeroes *ds. Accepts an already-freed or zeroed data set.
void vkt_dataset_free(vkt_dataset *ds);

// ---------------------------------------------------------------------------------------------
// Text. The bytes of the files named, in the order given, a directory standing for its regular
// files (symbolic links and subdirectories skipped, as are fortune's ".dat" index files) in
// byte-wise sorted name order; gzip-compressed files are read decompressed. The corpus is split
// once: its last floor(n / 10) bytes are the validation part, the first n - floor(n / 10) the
// training part. A window of a model with input [T] (and output [T, 256]) is T + 1 consecutive
// bytes: the first T are the inputs (as floats 0..255), the last T the targets (the next byte
// of each position).
//
// Training (vkt_batcher_init_text): an epoch is W = floor((P - 1) / T) windows, P the training
// part's bytes (so about every training byte is a target once an epoch), or the first `limit`
// of them; batches of `batch` windows, ceil(W / batch) of them, the last one holding the rest.
// Window j of epoch e (j counting across the epoch's batches from 0) starts at
//   shuffled:   a uniform draw in [0, P - T - 1] from splitmix64 with the state
//               mix(seed ^ mix(e + 0x6A09E667F3BCC909) ^ mix(j + 0xBB67AE8584CAA73B)), by the
//               shuffle's rejection draw (below): any start of a window inside the part;
//   unshuffled: j T (the training part cut into consecutive windows, in order, every epoch).
// Either depends on (seed, e, j) alone: the same seed gives the same batches whatever the
// strategy, the devices or a resume.
// Validation (vkt_text_validation): the validation part cut into consecutive windows from its
// first byte, window k starting at k T (they overlap by the one byte that is window k's last
// target and window k + 1's first input), floor((V - 1) / T) of them for V bytes, or the first
// `limit`: the same windows in every evaluation.

typedef struct vkt_text {
    uint8_t *bytes;   // [n], owned
    uint64_t n;       // bytes in all
    uint64_t train_n; // the training part: bytes [0, train_n); validation: [train_n, n)
    uint32_t files;   // files read
    char source[512]; // the path given (the first of several, "+ N more"), for messages
} vkt_text;

// Reads and concatenates the files (or directories) of paths[0..npaths) and splits the corpus.
// Fails with VKT_ERR_IO when a path cannot be opened or read (naming it), VKT_ERR_ARG when
// npaths is 0 or a directory holds no file to read, VKT_ERR_FORMAT when the text is empty
// (naming the paths) or corrupt gzip data; VKT_ERR_HOST_MEMORY when it does not fit in memory.
// On failure *out is left empty. Free with vkt_text_free.
vkt_status vkt_text_load(const char *const *paths, int npaths, vkt_text *out);
// The same from n bytes in memory (copied; source names them in messages).
vkt_status vkt_text_from_bytes(const void *bytes, uint64_t n, const char *source, vkt_text *out);
// Whether windows of T + 1 bytes fit: both parts must hold one. Fails with VKT_ERR_FORMAT, the
// message giving each part's bytes and the window's, when T is 0 or a part is too short.
vkt_status vkt_text_check(const vkt_text *t, uint32_t T);
// The validation windows (above) as a data set: x [n, T] the input bytes, y [n, T] the targets,
// targets T, classes 256; limit 0 takes them all. Fails as vkt_text_check, and with
// VKT_ERR_HOST_MEMORY. Free with vkt_dataset_free.
vkt_status vkt_text_validation(const vkt_text *t, uint32_t T, uint32_t limit, vkt_dataset *out);
// Frees the bytes and zeroes *t. Accepts an already-freed or zeroed corpus.
void vkt_text_free(vkt_text *t);

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
    const vkt_dataset *ds; // borrowed; must outlive the batcher (NULL for text)
    uint32_t batch;
    bool shuffle;
    uint64_t seed;
    uint64_t epoch;
    uint32_t *order;  // [ds->n]: the sample index of each position in this epoch
    vkt_augment aug;  // none unless vkt_batcher_augment set it
    uint32_t c, h, w; // the sample's shape when augmenting
    // Text (vkt_batcher_init_text): windows drawn from the training part of *text.
    const vkt_text *text; // borrowed; must outlive the batcher
    uint32_t T;           // window inputs (the model's input [T])
    uint32_t windows;     // per epoch (W, or the limit)
} vkt_batcher;

// Prepares the order of epoch 0. Fails with VKT_ERR_ARG when batch is 0 or the data set is
// empty, VKT_ERR_HOST_MEMORY when the order array cannot be allocated. Free with
// vkt_batcher_free.
vkt_status vkt_batcher_init(vkt_batcher *b, const vkt_dataset *ds, uint32_t batch, bool shuffle,
                            uint64_t seed);
// Training windows of T + 1 bytes from the training part of t (see "Text" above), `limit` of
// them an epoch (0, or more than W: W). Fails with VKT_ERR_ARG when batch is 0, and as
// vkt_text_check. Free with vkt_batcher_free.
vkt_status vkt_batcher_init_text(vkt_batcher *b, const vkt_text *t, uint32_t T, uint32_t batch,
                                 bool shuffle, uint64_t seed, uint32_t limit);
// Where window j of the current epoch starts in t->bytes (text batchers only).
uint64_t vkt_batcher_window(const vkt_batcher *b, uint32_t j);
// Sets the order of epoch `epoch` (a no-op without shuffling).
void vkt_batcher_epoch(vkt_batcher *b, uint64_t epoch);
// Batches per epoch: ceil(n / batch) (text: ceil(windows / batch)).
uint32_t vkt_batcher_count(const vkt_batcher *b);
// Samples per epoch: n (text: windows).
uint32_t vkt_batcher_samples(const vkt_batcher *b);
// Copies batch i of the current epoch into x[rows, features] and y[rows, targets] (either may
// be NULL; text: features = targets = T), augmented when vkt_batcher_augment asked for it, and
// returns rows: batch, or less for the last batch; 0 when i is out of range.
uint32_t vkt_batcher_get(const vkt_batcher *b, uint32_t i, float *x, uint32_t *y);
// Augments every batch vkt_batcher_get gives from now on (see above), the samples being shaped
// `shape` (the model's input). Fails with VKT_ERR_ARG, leaving the batcher as it was, when
// shape is not [C, H, W], its elements are not the data's features, crop has a pad of 0 (it
// would change nothing) or above 65535, or the batcher gives text. Neither crop nor flip:
// augmentation off.
vkt_status vkt_batcher_augment(vkt_batcher *b, const vkt_augment *a, const vkt_shape *shape);
// One sample: src [C, H, W] of data set index k in epoch `epoch`, augmented into dst (another
// buffer) as vkt_batcher_get does (a copy when augmentation is off).
void vkt_augment_sample(const vkt_batcher *b, uint32_t k, const float *src, float *dst);
void vkt_batcher_free(vkt_batcher *b);

#endif
