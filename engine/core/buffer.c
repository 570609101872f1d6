// buffer.c: storage buffers in device memory, and synchronous host <-> device copies through the
// mapping (when the device memory is host-visible) or a staging buffer (when it is not).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vkt_internal.h"

static const VkBufferUsageFlags USAGE =
    VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_UNIFORM_TEXEL_BUFFER_BIT |
    VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT;

static vkt_status buffer_create(vkt_device *dev, uint64_t size, const char *name, bool host,
                                vkt_buffer **out) {
    *out = NULL;
    if (size == 0) return vkt_fail(VKT_ERR_ARG, "buffer %s: size 0", name ? name : "");
    vkt_buffer *b = calloc(1, sizeof *b);
    if (!b) return vkt_fail(VKT_ERR_HOST_MEMORY, "out of host memory");
    b->dev = dev;
    b->size = size;
    snprintf(b->name, sizeof b->name, "%s", name ? name : "buffer");
    VkBufferCreateInfo bci = {
        .sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO,
        .size = size,
        .usage = USAGE,
        .sharingMode = VK_SHARING_MODE_EXCLUSIVE,
    };
    VkResult r = dev->vk.vkCreateBuffer(dev->handle, &bci, NULL, &b->handle);
    if (r != VK_SUCCESS) {
        free(b);
        VKT_VK(r, "creating a buffer");
    }
    VkMemoryRequirements req;
    dev->vk.vkGetBufferMemoryRequirements(dev->handle, b->handle, &req);
    uint32_t type = host ? dev->mem_type_host : dev->mem_type_device;
    vkt_status s = vkt_device_alloc(dev, req, type, b->name, &b->memory);
    if (s == VKT_OK) b->alloc_size = req.size;
    if (s == VKT_OK) {
        r = dev->vk.vkBindBufferMemory(dev->handle, b->handle, b->memory, 0);
        if (r != VK_SUCCESS)
            s = vkt_vk_fail(r, "vkBindBufferMemory", "binding buffer memory", __FILE__, __LINE__);
    }
    if (s == VKT_OK && (host || dev->device_mapped)) {
        r = dev->vk.vkMapMemory(dev->handle, b->memory, 0, VK_WHOLE_SIZE, 0, &b->mapped);
        if (r != VK_SUCCESS)
            s = vkt_vk_fail(r, "vkMapMemory", "mapping a buffer", __FILE__, __LINE__);
    }
    if (s != VKT_OK) {
        vkt_buffer_destroy(b);
        return s;
    }
    *out = b;
    return VKT_OK;
}

vkt_status vkt_buffer_create(vkt_device *dev, uint64_t size, const char *name, vkt_buffer **out) {
    return buffer_create(dev, size, name, false, out);
}

vkt_status vkt_buffer_create_guarded(vkt_device *dev, uint64_t size, uint64_t guard,
                                     const char *name, vkt_buffer **out) {
    vkt_status s = buffer_create(dev, size + guard, name, false, out);
    if (s == VKT_OK) (*out)->guard = guard;
    return s;
}

vkt_status vkt_buffer_create_host(vkt_device *dev, uint64_t size, const char *name,
                                  vkt_buffer **out) {
    return buffer_create(dev, size, name, true, out);
}

void vkt_buffer_destroy(vkt_buffer *b) {
    if (!b) return;
    vkt_device *dev = b->dev;
    if (b->handle) dev->vk.vkDestroyBuffer(dev->handle, b->handle, NULL);
    if (b->mapped) dev->vk.vkUnmapMemory(dev->handle, b->memory);
    vkt_device_free(dev, b->memory, b->alloc_size);
    free(b);
}

uint64_t vkt_buffer_size(const vkt_buffer *b) { return b->size; }
void vkt_buffer_set_guard(vkt_buffer *b, uint64_t bytes) { b->guard = bytes; }
void *vkt_buffer_mapped(vkt_buffer *b) { return b->mapped; }

vkt_view vkt_buffer_view(vkt_buffer *b, uint64_t offset, uint64_t size) {
    return (vkt_view){.buffer = b, .offset = offset, .size = size};
}

vkt_view vkt_buffer_whole(vkt_buffer *b) { return vkt_buffer_view(b, 0, b->size); }

// ---------------------------------------------------------------------------------------------
// Staged copies (GPUs whose device memory the host cannot map)

// One staging buffer per device, kept between calls and grown when a copy needs more: a step's
// uploads and read-backs on a GPU then cost a copy and a submit, not an allocation each.
static void staging_release(vkt_device *dev) {
    if (dev->staging.buffer) dev->vk.vkDestroyBuffer(dev->handle, dev->staging.buffer, NULL);
    if (dev->staging.memory) dev->vk.vkFreeMemory(dev->handle, dev->staging.memory, NULL);
    memset(&dev->staging, 0, sizeof dev->staging);
}

void vkt_device_release_staging(vkt_device *dev) { staging_release(dev); }

static vkt_status staging_get(vkt_device *dev, uint64_t size) {
    if (dev->staging.buffer && dev->staging.size >= size) return VKT_OK;
    staging_release(dev);
    uint64_t want = size < (1u << 20) ? (1u << 20) : size;
    vkt_staging *st = &dev->staging;
    VkBufferCreateInfo bci = {
        .sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO,
        .size = want,
        .usage = VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT,
        .sharingMode = VK_SHARING_MODE_EXCLUSIVE,
    };
    VKT_VK(dev->vk.vkCreateBuffer(dev->handle, &bci, NULL, &st->buffer),
           "creating a staging buffer");
    VkMemoryRequirements req;
    dev->vk.vkGetBufferMemoryRequirements(dev->handle, st->buffer, &req);
    VkMemoryAllocateInfo ai = {
        .sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO,
        .allocationSize = req.size,
        .memoryTypeIndex = dev->mem_type_host,
    };
    VkResult r = dev->vk.vkAllocateMemory(dev->handle, &ai, NULL, &st->memory);
    if (r == VK_SUCCESS) r = dev->vk.vkBindBufferMemory(dev->handle, st->buffer, st->memory, 0);
    if (r == VK_SUCCESS)
        r = dev->vk.vkMapMemory(dev->handle, st->memory, 0, VK_WHOLE_SIZE, 0, &st->ptr);
    if (r != VK_SUCCESS) {
        staging_release(dev);
        return vkt_vk_fail(r, "vkAllocateMemory/vkMapMemory", "making a staging buffer", __FILE__,
                           __LINE__);
    }
    st->size = want;
    return VKT_OK;
}

// Records and runs one copy between a buffer and the staging buffer, and waits for it.
static vkt_status staged_copy(vkt_device *dev, VkBuffer src, uint64_t src_off, VkBuffer dst,
                              uint64_t dst_off, uint64_t size) {
    VkCommandBufferAllocateInfo ai = {
        .sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
        .commandPool = dev->pool,
        .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY,
        .commandBufferCount = 1,
    };
    VkCommandBuffer cb;
    VKT_VK(dev->vk.vkAllocateCommandBuffers(dev->handle, &ai, &cb), "allocating a command buffer");
    VkCommandBufferBeginInfo bi = {
        .sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
        .flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT,
    };
    VkBufferCopy region = {.srcOffset = src_off, .dstOffset = dst_off, .size = size};
    VkMemoryBarrier before = {
        .sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
        .srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT,
        .dstAccessMask = VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT,
    };
    VkMemoryBarrier after = {
        .sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
        .srcAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT,
        .dstAccessMask =
            VK_ACCESS_HOST_READ_BIT | VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT,
    };
    VkResult r = dev->vk.vkBeginCommandBuffer(cb, &bi);
    if (r == VK_SUCCESS) {
        dev->vk.vkCmdPipelineBarrier(
            cb, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
            VK_PIPELINE_STAGE_TRANSFER_BIT, 0, 1, &before, 0, NULL, 0, NULL);
        dev->vk.vkCmdCopyBuffer(cb, src, dst, 1, &region);
        dev->vk.vkCmdPipelineBarrier(cb, VK_PIPELINE_STAGE_TRANSFER_BIT,
                                     VK_PIPELINE_STAGE_HOST_BIT |
                                         VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
                                     0, 1, &after, 0, NULL, 0, NULL);
        r = dev->vk.vkEndCommandBuffer(cb);
    }
    vkt_status s = r == VK_SUCCESS ? VKT_OK
                                   : vkt_vk_fail(r, "vkBeginCommandBuffer/vkEndCommandBuffer",
                                                 "recording a staged copy", __FILE__, __LINE__);
    uint64_t value = 0;
    if (s == VKT_OK) s = vkt_device_submit(dev, cb, &value);
    if (s == VKT_OK) s = vkt_device_wait_value(dev, value, VKT_WAIT_MS);
    dev->vk.vkFreeCommandBuffers(dev->handle, dev->pool, 1, &cb);
    return s;
}

static vkt_status check_range(const vkt_buffer *b, uint64_t offset, uint64_t size, const char *op) {
    if (offset > b->size || size > b->size - offset)
        return vkt_fail(VKT_ERR_ARG,
                        "%s of %llu bytes at offset %llu is outside buffer %s (%llu bytes)", op,
                        (unsigned long long)size, (unsigned long long)offset, b->name,
                        (unsigned long long)b->size);
    return VKT_OK;
}

vkt_status vkt_buffer_write(vkt_buffer *b, uint64_t offset, const void *src, uint64_t size) {
    VKT_TRY(check_range(b, offset, size, "write"));
    if (size == 0) return VKT_OK;
    vkt_device *dev = b->dev;
    VKT_TRY(vkt_device_wait_idle(dev));
    if (b->mapped) {
        memcpy((char *)b->mapped + offset, src, size);
        return VKT_OK;
    }
    VKT_TRY(staging_get(dev, size));
    memcpy(dev->staging.ptr, src, size);
    return staged_copy(dev, dev->staging.buffer, 0, b->handle, offset, size);
}

vkt_status vkt_buffer_read(vkt_buffer *b, uint64_t offset, void *dst, uint64_t size) {
    VKT_TRY(check_range(b, offset, size, "read"));
    if (size == 0) return VKT_OK;
    vkt_device *dev = b->dev;
    VKT_TRY(vkt_device_wait_idle(dev));
    if (b->mapped) {
        memcpy(dst, (const char *)b->mapped + offset, size);
        return VKT_OK;
    }
    VKT_TRY(staging_get(dev, size));
    VKT_TRY(staged_copy(dev, b->handle, offset, dev->staging.buffer, 0, size));
    memcpy(dst, dev->staging.ptr, size);
    return VKT_OK;
}
