// vktrain.h: the public API of libvktrain, read as a table of contents.
//
// Conventions. Every function that can fail returns vkt_status (VKT_OK == 0) and leaves a one-line
// message for vkt_error(): what happened and what to do about it. Objects come in
// _create/_destroy pairs; destroy accepts NULL. A device owns everything made on it (buffers,
// kernels, command streams) and must outlive them. Nothing here is thread-safe per object; distinct
// devices may be driven from distinct threads.
#ifndef VKTRAIN_H
#define VKTRAIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// ---------------------------------------------------------------------------------------------
// Status and errors (engine/core/error.c)

typedef enum vkt_status {
    VKT_OK = 0,
    VKT_ERR_NO_DEVICE,     // no Vulkan loader or no driver, or a --device item matched nothing
    VKT_ERR_ARG,           // a bad argument or flag value
    VKT_ERR_VULKAN,        // a Vulkan call failed (the message names the call and the VkResult)
    VKT_ERR_DEVICE_MEMORY, // the device (or the --mem-limit) has no room
    VKT_ERR_HOST_MEMORY,   // malloc failed
    VKT_ERR_IO,            // a file could not be opened, read or written
    VKT_ERR_FORMAT,        // a malformed model, data or checkpoint file
    VKT_ERR_NUMERIC,       // NaN or infinite loss
    VKT_ERR_TIMEOUT,       // the device did not finish in time
} vkt_status;

// The message of the last failure on this thread ("" if none). Valid until the next failure.
const char *vkt_error(void);
// Sets this thread's message (to carry an error from a worker thread to the caller's); returns s.
vkt_status vkt_set_error(vkt_status s, const char *message);
// Short name of a status ("VKT_ERR_IO").
const char *vkt_status_name(vkt_status s);

// ---------------------------------------------------------------------------------------------
// Context and device discovery (engine/core/context.c)

typedef struct vkt_context vkt_context;
typedef struct vkt_device vkt_device;

typedef enum vkt_device_type {
    VKT_DEVICE_OTHER = 0,
    VKT_DEVICE_INTEGRATED,
    VKT_DEVICE_DISCRETE,
    VKT_DEVICE_VIRTUAL,
    VKT_DEVICE_CPU,
} vkt_device_type;

// What the engine knows about one physical device, read once at context creation.
typedef struct vkt_device_info {
    int index;        // position in the context's device list
    char name[256];   // VkPhysicalDeviceProperties::deviceName
    char driver[256]; // driverName, plus driverInfo when the driver gives one
    uint32_t vendor_id, device_id, driver_id;
    vkt_device_type type;
    uint32_t api_version; // VK_MAKE_API_VERSION encoded
    uint32_t driver_version;
    uint64_t memory_bytes; // size of the largest device-local heap
    uint32_t subgroup_size;
    bool subgroup_shuffle; // compute shaders have subgroupShuffle (VK_SUBGROUP_FEATURE_SHUFFLE_BIT)
    uint32_t max_workgroup_invocations;
    uint32_t max_workgroup_size[3];
    uint32_t max_workgroup_count[3];
    uint32_t shared_memory_bytes;
    uint32_t max_push_constants_bytes;
    uint64_t max_storage_buffer_range;
    uint64_t max_allocation_bytes; // maxMemoryAllocationSize (Vulkan 1.1)
    uint32_t min_storage_buffer_offset_alignment;
    uint32_t min_texel_buffer_offset_alignment;
    uint32_t max_texel_buffer_elements; // R32G32B32A32 texels: 16 bytes each
    float timestamp_period_ns;
    uint32_t timestamp_valid_bits;  // of the compute queue family; 0 = no timestamps
    bool host_visible_device_local; // a DEVICE_LOCAL|HOST_VISIBLE type exists (CPU drivers, ReBAR)
    bool calibrated_timestamps;     // VK_EXT_calibrated_timestamps
    bool external_memory_host;      // VK_EXT_external_memory_host
    bool cooperative_matrix;        // VK_KHR_cooperative_matrix
    bool shader_float64;
    // A submit whose command buffer writes timestamps signals only once the queue has run dry
    // (lavapipe, measured on Mesa 22.3.6: four submits of copies, each with one timestamp pair,
    // all signalled at the end of the fourth; without timestamps each at its own end; SwiftShader
    // signals each at its own end either way). Work that overlaps a host task with later submits
    // records those submits without timestamps there.
    bool timestamps_delay_signal;
    uint8_t uuid[16]; // pipelineCacheUUID, for caches keyed by driver build
} vkt_device_info;

// Whether the matmul measures its kernel variants (engine/ops/matmul.c, engine/core/tune.h).
typedef enum vkt_tune_mode {
    VKT_TUNE_ON = 0, // measure a shape's candidates at its first use unless stored (the default)
    VKT_TUNE_OFF,    // never measure: each product takes its first candidate that fits
    VKT_TUNE_FORCE,  // ignore stored measurements: measure again what this process meets
} vkt_tune_mode;

// Whether networks fuse activations and the SGD step into the epilogues of their matmuls.
typedef enum vkt_fuse_mode {
    VKT_FUSE_AUTO = 0, // where the device's kernels gain from it (vkt_matmul_epilogue_pays)
    VKT_FUSE_OFF,
    VKT_FUSE_ON,
} vkt_fuse_mode;

// How conv2d layers compute their forward and input gradient.
typedef enum vkt_conv_mode {
    VKT_CONV_AUTO = 0, // the direct kernels where the device and geometry take them (conv_ops.h)
    VKT_CONV_COLUMNS,  // always columns (im2col) and the matmul: the order of sums every driver
                       // shares (comparisons across drivers, and of the two paths)
} vkt_conv_mode;

// Whether a device compiles its kernels ahead of their first dispatch (engine/core/ahead.c).
typedef enum vkt_ahead_mode {
    VKT_AHEAD_AUTO = 0, // where the driver compiles at a kernel's first dispatch (lavapipe)
    VKT_AHEAD_OFF,
} vkt_ahead_mode;

// How a context and every device opened on it behave. All zeros (or desc == NULL) is the default:
// no validation, no disk caches, measure at first use, fuse where it pays. The library reads no
// environment variable: the CLI fills these fields from VKT_VALIDATION, VKT_CACHE_DIR, VKT_TUNE,
// VKT_MATMUL_VARIANT, VKT_NET_FUSE, VKT_CONV and VKT_AHEAD (engine/cli/env.c). Strings are copied.
typedef struct vkt_context_desc {
    // Khronos validation (with synchronization validation): 1 on; 0 (or any other value) off.
    // Tests always turn it on.
    int validation;
    // Print validation messages to stderr (they are counted either way).
    bool quiet_validation;
    // The directory of the disk caches (kernel measurements and pipeline caches, keyed by device
    // and driver build; engine/core/tune.h), made on first use. NULL or "": none, measurements are
    // kept in memory and repeated by each process. The CLI's default is ~/.cache/vktrain.
    const char *cache_dir;
    vkt_tune_mode tune;
    // Fixes the matmul's kernel variant instead of choosing by measurement (benchmarks,
    // experiments): "name[,name]" with names of vkt_matmul_candidates; a wide name replaces the
    // wide candidates, a scalar name the scalar ones, "none" drops the wide ones; "stores-dvec4"
    // or "stores-vec4" fixes how the 8-float wide kernels write their pieces (which the host's
    // CPU decides otherwise, matmul.c store64_pays) and leaves the choice alone. NULL: choose.
    // vkt_ops_create fails with VKT_ERR_ARG on a list that names no variant
    // (vkt_matmul_check_variants, ops.h; a list set on a live context is checked by the next
    // vkt_ops_create only, so check it first).
    const char *matmul_variant;
    vkt_fuse_mode fuse;
    vkt_conv_mode conv;
    // lavapipe compiles a kernel (LLVM) at its first dispatch, one after another on its queue
    // thread: a cold first step is mostly that. VKT_AHEAD_AUTO there opens a second logical
    // device whose thread compiles, from the last recorded kernel backwards, the same kernels
    // with bindings of the same sizes (running one workgroup of each on buffers of its own) into
    // Mesa's shader cache, where the first dispatch then finds them (engine/core/ahead.c).
    // Nothing else changes: the same kernels, the same results.
    vkt_ahead_mode ahead;
} vkt_context_desc;

// Loads Vulkan, creates the instance and lists every physical device the loader sees. Fails with
// VKT_ERR_NO_DEVICE (and a message saying how to install a driver) when there is no loader or no
// device, or when validation is asked for and the layer is not installed; with VKT_ERR_ARG when
// cache_dir or matmul_variant is too long (4095 and 255 bytes).
vkt_status vkt_context_create(const vkt_context_desc *desc, vkt_context **out);
void vkt_context_destroy(vkt_context *ctx);
// Change tune, matmul_variant, fuse and conv of a live context. Its devices read them when they
// next choose a matmul variant or create a network, so a change applies to what is recorded or
// built after it. Not while another thread uses a device of ctx. set_matmul_variant fails with
// VKT_ERR_ARG (and changes nothing) when names is too long.
void vkt_context_set_tune(vkt_context *ctx, vkt_tune_mode mode);
vkt_status vkt_context_set_matmul_variant(vkt_context *ctx, const char *names);
void vkt_context_set_fuse(vkt_context *ctx, vkt_fuse_mode fuse);
void vkt_context_set_conv(vkt_context *ctx, vkt_conv_mode conv);
int vkt_context_device_count(const vkt_context *ctx);
const vkt_device_info *vkt_context_device_info(const vkt_context *ctx, int index);
// Validation messages (warnings and errors) seen so far; tests fail when this is not zero.
uint64_t vkt_context_validation_count(const vkt_context *ctx);
bool vkt_context_validation_enabled(const vkt_context *ctx);
// Index of the best device: discrete GPU, then integrated, virtual, CPU; ties go to the device
// with the larger workgroups and memory.
int vkt_context_best_device(const vkt_context *ctx);
// Resolves a --device SPEC: a comma-separated list whose items are an index or a
// case-insensitive substring of the device or driver name ("lavapipe" is an alias of
// "llvmpipe"). NULL or "" selects the best device. The same device may appear more than once.
// Writes up to max indices to out and their number to count. An item that matches nothing
// fails with VKT_ERR_NO_DEVICE and a message that lists the devices.
vkt_status vkt_context_select(const vkt_context *ctx, const char *spec, int *out, int max,
                              int *count);
const char *vkt_device_type_name(vkt_device_type t);
// Writes "major.minor.patch" into buf.
void vkt_api_version_string(uint32_t v, char *buf, size_t size);

// ---------------------------------------------------------------------------------------------
// Devices (engine/core/device.c): one logical device with its compute queue, command pool, timeline
// semaphore, timestamp queries and its own volk function table. The same physical device may be
// opened more than once; each open is an independent logical device.

typedef struct vkt_device_desc {
    uint64_t mem_limit; // cap on the bytes this engine allocates on the device; 0 = the heap size
    bool staged;        // never map device memory, stage every read and write as on a discrete
                        // GPU (so CPU drivers exercise that path too)
} vkt_device_desc;

vkt_status vkt_device_create(vkt_context *ctx, int index, const vkt_device_desc *desc,
                             vkt_device **out);
// Waits for the device to go idle, then frees everything made on it in reverse order.
void vkt_device_destroy(vkt_device *dev);
const vkt_device_info *vkt_device_get_info(const vkt_device *dev);
// Bytes of device memory this engine holds on the device now, at its peak, and its limit.
uint64_t vkt_device_memory_used(const vkt_device *dev);
uint64_t vkt_device_memory_peak(const vkt_device *dev);
uint64_t vkt_device_memory_limit(const vkt_device *dev);
// A short label for messages: "#1 llvmpipe (LLVM 15.0.6, 256 bits)".
const char *vkt_device_label(const vkt_device *dev);
// Compiling ahead (vkt_context_desc.ahead): the kernels handed to the device's compile thread so
// far, and of those the ones it built on its second device (compiled, or found in Mesa's cache);
// the others it dropped, the device's own first dispatch having come first. 0 and 0 where it
// does not compile ahead.
void vkt_device_ahead_counts(vkt_device *dev, uint32_t *queued, uint32_t *done);
// Whether the compile thread has opened its second device: at the first kernel it builds, so
// never while another CPU device is open in the context (tests).
bool vkt_device_ahead_opened(vkt_device *dev);
// Hands every kernel queued so far to the compile thread (a submit does that) and waits until
// it has taken them all (tests).
void vkt_device_ahead_wait(vkt_device *dev);

// ---------------------------------------------------------------------------------------------
// Buffers (engine/core/buffer.c). A buffer is one VkBuffer with its own memory; tensors are ranges
// (vkt_view) inside a few large buffers. Memory types are chosen by their flags: device-local
// first; when that type is also host-visible (CPU drivers) the buffer is mapped and read and
// written directly, otherwise reads and writes go through a staging buffer.

typedef struct vkt_buffer vkt_buffer;

typedef struct vkt_view {
    vkt_buffer *buffer;
    uint64_t offset; // bytes; a multiple of the device's minStorageBufferOffsetAlignment
    uint64_t size;   // bytes
} vkt_view;

// Fails with VKT_ERR_DEVICE_MEMORY (naming the device, the bytes asked and the bytes left) when
// the allocation would pass the device's memory limit or the driver refuses it.
vkt_status vkt_buffer_create(vkt_device *dev, uint64_t size, const char *name, vkt_buffer **out);
// A buffer in host-visible, host-coherent memory, always mapped (vkt_buffer_mapped): staging and
// exchange areas between devices. Counted against the device's limit like any buffer.
vkt_status vkt_buffer_create_host(vkt_device *dev, uint64_t size, const char *name,
                                  vkt_buffer **out);
void vkt_buffer_destroy(vkt_buffer *buf);
// Declares that every view of buf a kernel binds has `bytes` bytes after it, inside buf, that no
// other view covers. With 256 or more, lavapipe's texel views of buf may read into them, so that
// a kernel compiles once whatever the sizes of its views (engine/core/cmd.c, texel_view). The
// network's buffers are guarded (VKT_NET_TENSOR_GUARD); other callers lay out theirs alike.
void vkt_buffer_set_guard(vkt_buffer *buf, uint64_t bytes);
// A buffer for one view of `size` bytes at offset 0: `size` + `guard` bytes, the guard declared
// (vkt_buffer_set_guard). Bind vkt_buffer_view(buf, 0, size), not the whole buffer.
vkt_status vkt_buffer_create_guarded(vkt_device *dev, uint64_t size, uint64_t guard,
                                     const char *name, vkt_buffer **out);
uint64_t vkt_buffer_size(const vkt_buffer *buf);
vkt_view vkt_buffer_view(vkt_buffer *buf, uint64_t offset, uint64_t size);
vkt_view vkt_buffer_whole(vkt_buffer *buf);
// Synchronous host <-> device copies. They wait for the device's queue to be idle first, so they
// are for set-up, tests and checkpoints, not for the inner loop.
vkt_status vkt_buffer_write(vkt_buffer *buf, uint64_t offset, const void *src, uint64_t size);
vkt_status vkt_buffer_read(vkt_buffer *buf, uint64_t offset, void *dst, uint64_t size);
// The host pointer of a mapped buffer, or NULL when the buffer is not host-visible.
void *vkt_buffer_mapped(vkt_buffer *buf);
// Rounds size up to the device's storage-buffer offset alignment, for packing views.
uint64_t vkt_device_align(const vkt_device *dev, uint64_t size);

// ---------------------------------------------------------------------------------------------
// Kernels (engine/core/kernel.c): a compute pipeline built from one embedded shader. Specialization
// constant i takes spec[i] (ids 0..2 are the workgroup size, see shaders/vkt_abi.h). Bindings are
// storage buffers 0..n-1 of set 0, found in the SPIR-V.

typedef struct vkt_kernel vkt_kernel;

// An embedded shader: one of the VKT_SHADER_* identifiers that the build generates into
// vkt_shaders.h from shaders/*.comp and the table of variants in shaders/variants.cmake
// (VKT_SHADER_AXPY, VKT_SHADER_ACT_RELU_FWD, ...), so that a misspelt shader does not compile.
// vkt_shaders.h is installed beside this header (<vktrain/vkt_shaders.h>); the ids are valid for
// the library they were built with only (a new shader renumbers them).
typedef uint32_t vkt_shader_id;

// Fails with VKT_ERR_ARG when shader is no embedded shader's id, or the workgroup size (spec[0..2])
// exceeds the device's limits.
vkt_status vkt_kernel_create(vkt_device *dev, vkt_shader_id shader, const uint32_t *spec, int nspec,
                             vkt_kernel **out);
void vkt_kernel_destroy(vkt_kernel *k);
int vkt_kernel_binding_count(const vkt_kernel *k);
// The name of an embedded shader ("axpy", "act_relu_fwd"), or NULL when id is none.
const char *vkt_shader_name(vkt_shader_id id);

// ---------------------------------------------------------------------------------------------
// Start-up counters (engine/core/tune.c): what building kernels and measuring the matmul's
// variants have cost this process so far, for reports of the time to a run's first step (take
// the difference of two reads). The times are wall clock and exclusive of each other: an instant
// in which some thread measures variants is tuning (the candidates' pipelines it builds
// included), one in which some thread builds a pipeline and none measures is kernel building,
// so that however many devices' threads work at once, the two never add up to more than the
// time that passed. Process-wide: they count every context and device.
typedef struct vkt_startup_counters {
    uint64_t kernels_built;     // pipelines created (vkt_kernel_create)
    uint64_t kernels_ahead;     // kernels compiled ahead on a second device (ahead.c), not in
                                // kernels_built nor in the times below (another thread's work)
    uint64_t ahead_stopped;     // devices that stopped compiling ahead: the driver's shader cache
                                // kept nothing, so the device would compile each kernel again
    uint64_t shapes_measured;   // matmul shapes whose variants (some or all) were measured
    uint64_t choices_cached;    // matmul variant choices made from stored measurements alone
                                // (the disk's, or this process's for a shape met before)
    uint64_t variants_measured; // variant timings measured (a shape has one per candidate)
    double kernel_build_ns;     // wall time creating pipelines, outside tuning
    double tuning_ns;           // wall time measuring variants (and saving the measurements)
} vkt_startup_counters;

void vkt_startup_counters_get(vkt_startup_counters *out);

// ---------------------------------------------------------------------------------------------
// Command streams (engine/core/cmd.c): record many dispatches, copies and barriers into one command
// buffer, submit it, wait for it, and read each labelled dispatch's GPU time.
// A recorded stream may be submitted again without re-recording (the same buffers are used).

typedef struct vkt_cmd vkt_cmd;

typedef struct vkt_timing {
    const char *label;         // as given to the recording call (must outlive the stream)
    uint64_t start_ns, end_ns; // device clock, in ns
} vkt_timing;

vkt_status vkt_cmd_create(vkt_device *dev, vkt_cmd **out);
void vkt_cmd_destroy(vkt_cmd *cmd);
// Starts recording (discarding what was recorded before). timestamps: write a GPU timestamp
// around every labelled dispatch and copy.
vkt_status vkt_cmd_begin(vkt_cmd *cmd, bool timestamps);
// Whether the stream was begun with timestamps (and the device has them).
bool vkt_cmd_timed(const vkt_cmd *cmd);
// Records one dispatch of groups gx*gy*gz. bind holds one view per binding of the kernel.
// label may be NULL (not timed). Errors (wrong binding count, push too large, view misaligned)
// are remembered and returned by vkt_cmd_end.
void vkt_cmd_dispatch(vkt_cmd *cmd, vkt_kernel *k, const vkt_view *bind, int nbind,
                      const void *push, uint32_t push_size, uint32_t gx, uint32_t gy, uint32_t gz,
                      const char *label);
// A full compute/transfer memory barrier: everything recorded before it is done and visible to
// everything recorded after it.
void vkt_cmd_barrier(vkt_cmd *cmd);
void vkt_cmd_copy(vkt_cmd *cmd, vkt_view src, vkt_view dst, const char *label);
// Copies rows rows of row_bytes bytes, row r from src.offset + r * src_stride to dst.offset +
// r * dst_stride (one copy command; src_stride 0 copies the same bytes into every row). Both views
// must hold the rows they span; rows that overlap in dst are an error.
void vkt_cmd_copy_rows(vkt_cmd *cmd, vkt_view src, uint64_t src_stride, vkt_view dst,
                       uint64_t dst_stride, uint32_t rows, uint64_t row_bytes, const char *label);
// Fills a view with a 32-bit pattern (0 gives 0.0f).
void vkt_cmd_fill(vkt_cmd *cmd, vkt_view dst, uint32_t value);
vkt_status vkt_cmd_end(vkt_cmd *cmd);
// Submits the recorded stream; returns at once.
vkt_status vkt_cmd_submit(vkt_cmd *cmd);
// Waits for the last submit of this stream. Fails with VKT_ERR_TIMEOUT after timeout_ms.
vkt_status vkt_cmd_wait(vkt_cmd *cmd, uint64_t timeout_ms);
// After a wait: the timings of the labelled operations of the last submit, in record order.
int vkt_cmd_timings(const vkt_cmd *cmd, const vkt_timing **out);
int vkt_cmd_dispatch_count(const vkt_cmd *cmd);
// Barriers recorded since vkt_cmd_begin, the one it records itself included.
int vkt_cmd_barrier_count(const vkt_cmd *cmd);

// Default wait used by the engine: generous, so that slow CPU drivers never time out, but finite
// so that a hung device is reported rather than waited on forever.
#define VKT_WAIT_MS 600000u

#ifdef __cplusplus
}
#endif
#endif
