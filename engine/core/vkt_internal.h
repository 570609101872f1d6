// vkt_internal.h: the engine's private structures and helpers, shared by engine/ and parallel/.
// Not installed, not part of the public API.
#ifndef VKT_INTERNAL_H
#define VKT_INTERNAL_H

#include <volk.h>

#include "vktrain.h"

// ---------------------------------------------------------------------------------------------
// Errors

// Sets the thread's error message (printf-style) and returns s.
vkt_status vkt_fail(vkt_status s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
const char *vkt_result_name(VkResult r);

// Every Vulkan call is checked, in every build: on failure the message names the call, the
// VkResult, the file and line, and what the engine was doing. Returns from the enclosing function.
#define VKT_VK(call, what)                                                                         \
    do {                                                                                           \
        VkResult vkt_r_ = (call);                                                                  \
        if (vkt_r_ != VK_SUCCESS) return vkt_vk_fail(vkt_r_, #call, what, __FILE__, __LINE__);     \
    } while (0)
vkt_status vkt_vk_fail(VkResult r, const char *call, const char *what, const char *file, int line);

// Returns from the enclosing function when a vkt call fails.
#define VKT_TRY(expr)                                                                              \
    do {                                                                                           \
        vkt_status vkt_s_ = (expr);                                                                \
        if (vkt_s_ != VKT_OK) return vkt_s_;                                                       \
    } while (0)

// Broken invariant: print and abort (not compiled out under NDEBUG).
#define VKT_ASSERT(cond)                                                                           \
    do {                                                                                           \
        if (!(cond)) vkt_abort(#cond, __FILE__, __LINE__);                                         \
    } while (0)
_Noreturn void vkt_abort(const char *what, const char *file, int line);

// ---------------------------------------------------------------------------------------------
// Shaders embedded by the build (generated vkt_shaders.c, indexed by the ids of vkt_shaders.h)

typedef struct vkt_shader_blob {
    const char *name;
    const uint32_t *code;
    size_t size; // bytes
} vkt_shader_blob;
extern const vkt_shader_blob vkt_shader_blobs[];
// The SPIR-V of kernel id (a VKT_SHADER_* of vkt_shaders.h), or NULL when id is none.
const vkt_shader_blob *vkt_shader_get(vkt_shader_id id);

// ---------------------------------------------------------------------------------------------
// Objects

typedef struct vkt_physical {
    VkPhysicalDevice handle;
    vkt_device_info info;
    uint32_t queue_family;
    VkPhysicalDeviceMemoryProperties mem;
    int opened; // logical devices open on it now (the labels of repeats get " (2)", ...)
} vkt_physical;

struct vkt_context {
    VkInstance instance;
    VkDebugUtilsMessengerEXT messenger;
    bool validation;
    bool quiet_validation;
    uint64_t validation_count; // updated atomically by the messenger callback
    bool creating;             // inside vkCreateInstance: messages go to deferred
    char deferred[4096];
    int ndevices;
    vkt_physical *devices;
    // vkt_context_desc's knobs, read by the devices when they use them.
    char cache_dir[4096];     // "" = no disk caches
    bool cache_dir_tried;     // tune.c made (or failed to make) it: under tune.c's lock
    bool cache_dir_ok;        // ... and it exists
    vkt_tune_mode tune;       // matmul.c, tune.c
    char matmul_variant[256]; // "" = choose by measurement (matmul.c)
    vkt_fuse_mode fuse;       // vkt_device_fuse_mode
    vkt_conv_mode conv;       // vkt_device_conv_mode
    vkt_ahead_mode ahead;     // ahead.c
    // CPU devices open now (ahead.c's helpers not counted): changed by the threads that open and
    // destroy devices, read by ahead.c's threads; atomic.
    int cpu_open;
};

typedef struct vkt_staging {
    VkBuffer buffer;
    VkDeviceMemory memory;
    void *ptr;
    uint64_t size;
} vkt_staging;

struct vkt_device {
    vkt_context *ctx;
    const vkt_physical *phys;
    const vkt_device_info *info;
    VkDevice handle;
    struct VolkDeviceTable vk;
    VkQueue queue;
    VkCommandPool pool;
    VkPipelineCache pipeline_cache;
    size_t pipeline_cache_loaded; // bytes of cache data it started from (tune.c)
    VkSemaphore timeline;
    uint64_t timeline_value;  // last value signalled by a submit
    uint32_t mem_type_device; // best device-local type
    uint32_t mem_type_host;   // host-visible, coherent type for staging / readback
    bool device_mapped;       // mem_type_device is also host-visible
    bool force_staged;        // vkt_device_desc.staged
    uint64_t mem_limit, mem_used, mem_peak;
    vkt_staging staging; // host-visible copy area of staged reads and writes (buffer.c)
    char label[300];
    // Compiling ahead (ahead.c): its state where the device compiles ahead (its thread, with the
    // second logical device, starts at the first submit); helper: this device is that second one.
    struct vkt_ahead *ahead;
    bool helper;
};

#define VKT_TEXEL_WIDEN 256

struct vkt_buffer {
    vkt_device *dev;
    VkBuffer handle;
    VkDeviceMemory memory;
    uint64_t size;
    uint64_t alloc_size; // what the device's accounting holds for it
    void *mapped;        // non-NULL when host-visible
    // Bytes after the end of every view a kernel binds that no other view covers (the network's
    // packed buffers, activations and layer scratch: VKT_NET_TENSOR_GUARD; the matmul's tuning
    // operands; the CLI's benchmark operands, vkt_buffer_set_guard), 0 when not known. On
    // lavapipe cmd.c's texel_view widens a view by VKT_TEXEL_WIDEN into it.
    uint64_t guard;
    char name[64];
};

struct vkt_kernel {
    vkt_device *dev;
    const char *shader;
    // What built it (ahead.c builds it again on its second device), and whether its first
    // recorded dispatch was handed to ahead.c.
    vkt_shader_id id;
    int nspec;
    uint32_t spec[32];
    bool ahead_noted;
    int64_t build_ns; // how long its pipeline took to build here (ahead.c compares a job with it)
    int nbindings;
    // Per binding: STORAGE_BUFFER, or UNIFORM_TEXEL_BUFFER (bound through a VkBufferView of
    // R32G32B32A32_SFLOAT texels that cmd.c makes per dispatch: GLSL samplerBuffer, vec4 texels).
    VkDescriptorType types[32];
    VkDescriptorSetLayout set_layout;
    VkPipelineLayout layout;
    VkPipeline pipeline;
};

// Whether networks fuse activations and the SGD step into matmul epilogues on this device: its
// context's vkt_context_desc.fuse (VKT_FUSE_AUTO: where vkt_matmul_epilogue_pays).
vkt_fuse_mode vkt_device_fuse_mode(const vkt_device *dev);
// How conv2d computes on this device: its context's vkt_context_desc.conv.
vkt_conv_mode vkt_device_conv_mode(const vkt_device *dev);

// The part of v from byte offset, size bytes long (asserted inside v).
static inline vkt_view vkt_view_sub(vkt_view v, uint64_t offset, uint64_t size) {
    VKT_ASSERT(offset + size <= v.size);
    return (vkt_view){v.buffer, v.offset + offset, size};
}

// Whether a texel-buffer view may start at byte offset off on this device (matmul.c, ops_nn.c).
static inline bool vkt_texel_offset_ok(const vkt_device_info *d, uint64_t off) {
    return d->min_texel_buffer_offset_alignment == 0 ||
           off % d->min_texel_buffer_offset_alignment == 0;
}

// Submits one command buffer on the device's queue, signalling the next timeline value; the
// value is returned in *value. Used by cmd.c and by the one-shot copies of buffer.c.
vkt_status vkt_device_submit(vkt_device *dev, VkCommandBuffer cb, uint64_t *value);
vkt_status vkt_device_wait_value(vkt_device *dev, uint64_t value, uint64_t timeout_ms);
// Waits for everything submitted to the device so far.
vkt_status vkt_device_wait_idle(vkt_device *dev);
// The timeline value the device has reached (every submit up to it has finished).
vkt_status vkt_device_completed(vkt_device *dev, uint64_t *value);
// The timeline value of the stream's last submit (0: never submitted).
uint64_t vkt_cmd_submitted(const vkt_cmd *c);
// Allocates device memory against the device's limit (accounting included) / frees it.
vkt_status vkt_device_alloc(vkt_device *dev, VkMemoryRequirements req, uint32_t type_index,
                            const char *what, VkDeviceMemory *out);
void vkt_device_free(vkt_device *dev, VkDeviceMemory mem, uint64_t size);
void vkt_device_release_staging(vkt_device *dev);
// The second logical device of dev's physical device that ahead.c compiles on: not counted
// among the opened devices, labelled after dev, never compiling ahead itself.
vkt_status vkt_device_open_helper(vkt_device *dev, vkt_device **out);
// ahead.c: notes kernel k's first recorded dispatch (its bindings' buffer sizes, guards and view
// ranges, its push constants) for dev's compile thread; nothing where dev does not compile
// ahead. vkt_ahead_stop: stops and joins the thread, closes the second device
// (vkt_device_destroy calls it first).
void vkt_ahead_note(vkt_device *dev, vkt_kernel *k, const vkt_view *bind, int nbind,
                    const void *push, uint32_t push_size);
void vkt_ahead_stop(vkt_device *dev);
// device.c, for each device it opens: whether it compiles ahead (its state, the thread started at
// the first submit that has something to hand over).
void vkt_ahead_open(vkt_device *dev);
// cmd.c, before a submit: the jobs noted until now are built before it returns, the first of
// them on the calling thread (a device of its own) while the thread takes the last.
void vkt_ahead_build(vkt_device *dev);

// ---------------------------------------------------------------------------------------------
// A set of borrowed strings (engine/core/strset.c): duplicate checks in linear time.
typedef struct vkt_strset {
    const char **slots;
    size_t cap, n;
} vkt_strset;
// Room for expected strings; false when out of host memory.
bool vkt_strset_init(vkt_strset *set, size_t expected);
// Adds s (the pointer is kept, not the string copied): 1 added, 0 already there, -1 out of memory.
int vkt_strset_add(vkt_strset *set, const char *s);
void vkt_strset_free(vkt_strset *set);

// ---------------------------------------------------------------------------------------------
// Files (engine/core/fileio.c)

typedef struct vkt_chunk {
    const void *data;
    uint64_t size;
} vkt_chunk;
// Replaces path with the concatenated chunks atomically (temporary file, fsync, rename, directory
// fsync). what names the file in the error message ("checkpoint").
vkt_status vkt_write_file_atomic(const char *path, const vkt_chunk *chunks, int nchunks,
                                 const char *what);
// mkdir -p.
vkt_status vkt_mkdirs(const char *path);
// Test hook of vkt_write_file_atomic, process-wide (the CLI and the test harness map
// VKT_TEST_CRASH_AFTER_BYTES onto it): called once per file written; after writing the number of
// bytes it returns, the writer kills itself with SIGKILL, as a crash mid-write would (UINT64_MAX:
// never), so that tests can check that the previous file survives. NULL (the default): never.
typedef uint64_t (*vkt_crash_hook)(void);
void vkt_test_set_crash_hook(vkt_crash_hook hook);
// Whether name is "<base>.tmp.<pid>", the temporary file of a writer (vkt_write_file_atomic) whose
// process no longer runs: what a killed writer left behind.
bool vkt_dead_writer_temp(const char *name, const char *base);
// The whole file, NUL-terminated (malloc'd), or NULL when missing, unreadable, not a regular file
// or over max bytes.
void *vkt_read_file(const char *path, size_t max, size_t *size);
// Opens an input file for reading, only if it is a regular file: a FIFO given as a file would
// block the run, a device or a directory would never end or make no sense, so each is refused by
// what it is. On failure returns -1 with a VKT_ERR_IO message "cannot open <what> <path>: <reason>
// <hint>" (hint may be NULL) or "<what> <path> is a FIFO, not a regular file ...".
int vkt_open_input(const char *path, const char *what, const char *hint);
// The host CPU's cache of a level (2 or 3; data or unified) in bytes, as Linux's sysfs gives it
// for cpu0, else glibc's sysconf, else 0 (engine/core/host_cache.c).
uint64_t vkt_host_cache_bytes(int level);

#endif
