// device.c: opening one logical device (compute queue, command pool, timeline semaphore, its own
// volk function table), choosing memory types by their flags, and accounting for the device
// memory the engine holds against a limit. Buffers, kernels and command streams are made by
// buffer.c, kernel.c and cmd.c on top of this.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tune.h"
#include "vkt_internal.h"

// Picks a memory type among those allowed by bits: all of want, then the most of like.
static int find_memory_type(const VkPhysicalDeviceMemoryProperties *mem, uint32_t bits,
                            VkMemoryPropertyFlags want, VkMemoryPropertyFlags like, uint32_t heap) {
    int best = -1, best_score = -1;
    for (uint32_t i = 0; i < mem->memoryTypeCount; i++) {
        if (!(bits & (1u << i))) continue;
        VkMemoryPropertyFlags f = mem->memoryTypes[i].propertyFlags;
        if ((f & want) != want) continue;
        if (heap != UINT32_MAX && mem->memoryTypes[i].heapIndex != heap) continue;
        int score = __builtin_popcount(f & like);
        if (score > best_score) best = (int)i, best_score = score;
    }
    return best;
}

static vkt_status choose_memory(vkt_device *dev) {
    const VkPhysicalDeviceMemoryProperties *mem = &dev->phys->mem;
    // The largest device-local heap holds the tensors.
    uint32_t heap = UINT32_MAX;
    for (uint32_t i = 0; i < mem->memoryHeapCount; i++)
        if ((mem->memoryHeaps[i].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT) &&
            (heap == UINT32_MAX || mem->memoryHeaps[i].size > mem->memoryHeaps[heap].size))
            heap = i;
    const VkMemoryPropertyFlags mapped =
        VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
    int dl = -1;
    // On devices whose memory is the host's (CPU drivers, integrated GPUs) a device-local type
    // that is also host-visible is used directly. A discrete GPU's host-visible device-local
    // memory (a BAR window) is small or slow to read: it keeps staging.
    bool unified =
        (dev->info->type == VKT_DEVICE_CPU || dev->info->type == VKT_DEVICE_INTEGRATED) &&
        !dev->force_staged;
    if (unified)
        dl = find_memory_type(mem, ~0u, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT | mapped,
                              VK_MEMORY_PROPERTY_HOST_CACHED_BIT, heap);
    dev->device_mapped = dl >= 0;
    if (dl < 0) dl = find_memory_type(mem, ~0u, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT, 0, heap);
    if (dl < 0) dl = find_memory_type(mem, ~0u, 0, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT, UINT32_MAX);
    int host = find_memory_type(mem, ~0u, mapped, VK_MEMORY_PROPERTY_HOST_CACHED_BIT, UINT32_MAX);
    if (dl < 0 || host < 0)
        return vkt_fail(VKT_ERR_NO_DEVICE, "device %s has no usable memory type", dev->info->name);
    dev->mem_type_device = (uint32_t)dl;
    dev->mem_type_host = (uint32_t)host;
    return VKT_OK;
}

// Opens physical device index; of: the device whose compile helper this is (ahead.c), or NULL.
static vkt_status device_open(vkt_context *ctx, int index, const vkt_device_desc *desc,
                              const vkt_device *of, vkt_device **out) {
    *out = NULL;
    if (index < 0 || index >= ctx->ndevices)
        return vkt_fail(VKT_ERR_NO_DEVICE,
                        "device index %d is out of range: there are %d devices "
                        "(`vktrain devices` lists them)",
                        index, ctx->ndevices);
    vkt_device *dev = calloc(1, sizeof *dev);
    if (!dev) return vkt_fail(VKT_ERR_HOST_MEMORY, "out of host memory");
    dev->ctx = ctx;
    dev->phys = &ctx->devices[index];
    dev->info = &dev->phys->info;
    dev->helper = of != NULL;
    // The same physical device opened again (two logical devices) gets a distinct label. A
    // helper, opened on ahead.c's thread, reads no count that the caller's thread changes.
    int nth = of ? 0 : ctx->devices[index].opened + 1;
    if (of)
        snprintf(dev->label, sizeof dev->label, "%.200s, compiling ahead", of->label);
    else if (nth == 1)
        snprintf(dev->label, sizeof dev->label, "#%d %s", index, dev->info->name);
    else
        snprintf(dev->label, sizeof dev->label, "#%d %s (%d)", index, dev->info->name, nth);
    // A limit above what the device has is the device's memory (the planner caps it the same way).
    dev->mem_limit = desc && desc->mem_limit && desc->mem_limit < dev->info->memory_bytes
                         ? desc->mem_limit
                         : dev->info->memory_bytes;
    dev->force_staged = desc && desc->staged;

    vkt_status s = choose_memory(dev);
    if (s != VKT_OK) {
        free(dev);
        return s;
    }

    float priority = 1.0f;
    VkDeviceQueueCreateInfo qci = {
        .sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO,
        .queueFamilyIndex = dev->phys->queue_family,
        .queueCount = 1,
        .pQueuePriorities = &priority,
    };
    const char *exts[4];
    uint32_t nexts = 0;
    if (dev->info->calibrated_timestamps)
        exts[nexts++] = VK_EXT_CALIBRATED_TIMESTAMPS_EXTENSION_NAME;
    if (dev->info->external_memory_host) exts[nexts++] = VK_EXT_EXTERNAL_MEMORY_HOST_EXTENSION_NAME;
    VkPhysicalDeviceVulkan12Features f12 = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES,
        .timelineSemaphore = VK_TRUE,
    };
    VkPhysicalDeviceFeatures2 f2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2,
                                    .pNext = &f12};
    f2.features.shaderFloat64 = dev->info->shader_float64;
    VkDeviceCreateInfo dci = {
        .sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO,
        .pNext = &f2,
        .queueCreateInfoCount = 1,
        .pQueueCreateInfos = &qci,
        .enabledExtensionCount = nexts,
        .ppEnabledExtensionNames = exts,
    };
    VkResult r = vkCreateDevice(dev->phys->handle, &dci, NULL, &dev->handle);
    if (r != VK_SUCCESS) {
        free(dev);
        VKT_VK(r, "opening the logical device");
    }
    // One function table per device: volkLoadDevice is global and wrong with several devices.
    volkLoadDeviceTable(&dev->vk, dev->handle);
    dev->vk.vkGetDeviceQueue(dev->handle, dev->phys->queue_family, 0, &dev->queue);
    *out = dev; // from here on vkt_device_destroy cleans up whatever was made
    if (!dev->helper) {
        ctx->devices[index].opened++;
        if (dev->info->type == VKT_DEVICE_CPU)
            __atomic_fetch_add(&ctx->cpu_open, 1, __ATOMIC_RELAXED);
    }

    VkCommandPoolCreateInfo pci = {
        .sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO,
        .flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT,
        .queueFamilyIndex = dev->phys->queue_family,
    };
    VkSemaphoreTypeCreateInfo sti = {
        .sType = VK_STRUCTURE_TYPE_SEMAPHORE_TYPE_CREATE_INFO,
        .semaphoreType = VK_SEMAPHORE_TYPE_TIMELINE,
        .initialValue = 0,
    };
    VkSemaphoreCreateInfo sci = {.sType = VK_STRUCTURE_TYPE_SEMAPHORE_CREATE_INFO, .pNext = &sti};
    vkt_status st = VKT_OK;
    r = dev->vk.vkCreateCommandPool(dev->handle, &pci, NULL, &dev->pool);
    if (r == VK_SUCCESS) r = dev->vk.vkCreateSemaphore(dev->handle, &sci, NULL, &dev->timeline);
    // The pipeline cache starts from what an earlier process of this device and driver build
    // saved (tune.c checks the header), so kernels it compiled are not compiled again.
    size_t cache_size = 0;
    void *cache_data = vkt_pipeline_cache_load(dev, &cache_size);
    VkPipelineCacheCreateInfo cci = {
        .sType = VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO,
        .initialDataSize = cache_size,
        .pInitialData = cache_data,
    };
    if (r == VK_SUCCESS)
        r = dev->vk.vkCreatePipelineCache(dev->handle, &cci, NULL, &dev->pipeline_cache);
    free(cache_data);
    dev->pipeline_cache_loaded = cache_size;
    if (r != VK_SUCCESS)
        st = vkt_vk_fail(r, "vkCreateCommandPool/vkCreateSemaphore/vkCreatePipelineCache",
                         "opening the logical device", __FILE__, __LINE__);
    if (st != VKT_OK) {
        vkt_device_destroy(dev);
        *out = NULL;
        return st;
    }
    vkt_ahead_open(dev);
    return VKT_OK;
}

vkt_status vkt_device_create(vkt_context *ctx, int index, const vkt_device_desc *desc,
                             vkt_device **out) {
    return device_open(ctx, index, desc, NULL, out);
}

vkt_status vkt_device_open_helper(vkt_device *dev, vkt_device **out) {
    vkt_device_desc desc = {.staged = dev->force_staged};
    return device_open(dev->ctx, (int)(dev->phys - dev->ctx->devices), &desc, dev, out);
}

// Saves the pipeline cache when this device added to it (best effort: a cache).
static void save_pipeline_cache(vkt_device *dev) {
    size_t size = 0;
    if (dev->vk.vkGetPipelineCacheData(dev->handle, dev->pipeline_cache, &size, NULL) !=
            VK_SUCCESS ||
        size == dev->pipeline_cache_loaded || size < 32)
        return;
    void *data = malloc(size);
    if (data &&
        dev->vk.vkGetPipelineCacheData(dev->handle, dev->pipeline_cache, &size, data) == VK_SUCCESS)
        vkt_pipeline_cache_save(dev, data, size);
    free(data);
}

void vkt_device_destroy(vkt_device *dev) {
    if (!dev) return;
    vkt_ahead_stop(dev);
    if (!dev->helper) {
        ((vkt_physical *)dev->phys)->opened--;
        if (dev->info->type == VKT_DEVICE_CPU)
            __atomic_fetch_sub(&dev->ctx->cpu_open, 1, __ATOMIC_RELAXED);
    }
    if (dev->handle) {
        dev->vk.vkDeviceWaitIdle(dev->handle);
        vkt_device_release_staging(dev);
        if (dev->pipeline_cache) {
            save_pipeline_cache(dev);
            dev->vk.vkDestroyPipelineCache(dev->handle, dev->pipeline_cache, NULL);
        }
        if (dev->timeline) dev->vk.vkDestroySemaphore(dev->handle, dev->timeline, NULL);
        if (dev->pool) dev->vk.vkDestroyCommandPool(dev->handle, dev->pool, NULL);
        dev->vk.vkDestroyDevice(dev->handle, NULL);
    }
    free(dev);
}

const vkt_device_info *vkt_device_get_info(const vkt_device *dev) { return dev->info; }
uint64_t vkt_device_memory_used(const vkt_device *dev) { return dev->mem_used; }
uint64_t vkt_device_memory_peak(const vkt_device *dev) { return dev->mem_peak; }
uint64_t vkt_device_memory_limit(const vkt_device *dev) { return dev->mem_limit; }
const char *vkt_device_label(const vkt_device *dev) { return dev->label; }

vkt_fuse_mode vkt_device_fuse_mode(const vkt_device *dev) { return dev->ctx->fuse; }
vkt_conv_mode vkt_device_conv_mode(const vkt_device *dev) { return dev->ctx->conv; }

uint64_t vkt_device_align(const vkt_device *dev, uint64_t size) {
    uint64_t a = dev->info->min_storage_buffer_offset_alignment;
    if (a < 16) a = 16;
    return (size + a - 1) / a * a;
}

// ---------------------------------------------------------------------------------------------
// Memory accounting

vkt_status vkt_device_alloc(vkt_device *dev, VkMemoryRequirements req, uint32_t type_index,
                            const char *what, VkDeviceMemory *out) {
    *out = VK_NULL_HANDLE;
    if (dev->mem_used + req.size > dev->mem_limit)
        return vkt_fail(
            VKT_ERR_DEVICE_MEMORY,
            "device %s has no room for %s: it needs %llu bytes (%.1f MiB) more, and %llu "
            "of its %llu bytes are in use (limit %.1f MiB); use a smaller batch or model, "
            "raise --mem-limit, or split the model with --strategy layers",
            dev->label, what, (unsigned long long)req.size, req.size / 1048576.0,
            (unsigned long long)dev->mem_used, (unsigned long long)dev->mem_limit,
            dev->mem_limit / 1048576.0);
    if (dev->info->max_allocation_bytes && req.size > dev->info->max_allocation_bytes)
        return vkt_fail(VKT_ERR_DEVICE_MEMORY,
                        "device %s cannot allocate %s: %llu bytes is more than its largest "
                        "allocation (%llu bytes)",
                        dev->label, what, (unsigned long long)req.size,
                        (unsigned long long)dev->info->max_allocation_bytes);
    if (!(req.memoryTypeBits & (1u << type_index)))
        return vkt_fail(VKT_ERR_VULKAN, "device %s: %s cannot live in memory type %u", dev->label,
                        what, type_index);
    VkMemoryAllocateInfo ai = {
        .sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO,
        .allocationSize = req.size,
        .memoryTypeIndex = type_index,
    };
    VkResult r = dev->vk.vkAllocateMemory(dev->handle, &ai, NULL, out);
    if (r != VK_SUCCESS) {
        char msg[200];
        snprintf(msg, sizeof msg, "allocating %llu bytes for %s on %s",
                 (unsigned long long)req.size, what, dev->label);
        return vkt_vk_fail(r, "vkAllocateMemory", msg, __FILE__, __LINE__);
    }
    dev->mem_used += req.size;
    if (dev->mem_used > dev->mem_peak) dev->mem_peak = dev->mem_used;
    return VKT_OK;
}

void vkt_device_free(vkt_device *dev, VkDeviceMemory mem, uint64_t size) {
    if (!mem) return;
    dev->vk.vkFreeMemory(dev->handle, mem, NULL);
    dev->mem_used -= size;
}

// ---------------------------------------------------------------------------------------------
// Submission on the timeline

vkt_status vkt_device_submit(vkt_device *dev, VkCommandBuffer cb, uint64_t *value) {
    uint64_t next = dev->timeline_value + 1;
    VkTimelineSemaphoreSubmitInfo tsi = {
        .sType = VK_STRUCTURE_TYPE_TIMELINE_SEMAPHORE_SUBMIT_INFO,
        .signalSemaphoreValueCount = 1,
        .pSignalSemaphoreValues = &next,
    };
    VkSubmitInfo si = {
        .sType = VK_STRUCTURE_TYPE_SUBMIT_INFO,
        .pNext = &tsi,
        .commandBufferCount = 1,
        .pCommandBuffers = &cb,
        .signalSemaphoreCount = 1,
        .pSignalSemaphores = &dev->timeline,
    };
    VKT_VK(dev->vk.vkQueueSubmit(dev->queue, 1, &si, VK_NULL_HANDLE),
           "submitting work to the device");
    dev->timeline_value = next;
    if (value) *value = next;
    return VKT_OK;
}

vkt_status vkt_device_wait_value(vkt_device *dev, uint64_t value, uint64_t timeout_ms) {
    VkSemaphoreWaitInfo wi = {
        .sType = VK_STRUCTURE_TYPE_SEMAPHORE_WAIT_INFO,
        .semaphoreCount = 1,
        .pSemaphores = &dev->timeline,
        .pValues = &value,
    };
    VkResult r = dev->vk.vkWaitSemaphores(dev->handle, &wi, timeout_ms * 1000000ull);
    if (r == VK_TIMEOUT)
        return vkt_fail(VKT_ERR_TIMEOUT,
                        "device %s did not finish its work within %llu ms; the "
                        "driver may be hung",
                        dev->label, (unsigned long long)timeout_ms);
    VKT_VK(r, "waiting for the device");
    return VKT_OK;
}

vkt_status vkt_device_completed(vkt_device *dev, uint64_t *value) {
    VKT_VK(dev->vk.vkGetSemaphoreCounterValue(dev->handle, dev->timeline, value),
           "reading the device's timeline");
    return VKT_OK;
}

vkt_status vkt_device_wait_idle(vkt_device *dev) {
    return vkt_device_wait_value(dev, dev->timeline_value, VKT_WAIT_MS);
}
