// cmd.c: command streams. One stream is one primary command buffer into which a whole training
// step (hundreds of dispatches, copies and barriers) is recorded and submitted at once: a submit
// costs ~180 us on lavapipe against ~13 us for a dispatch inside a command buffer. Descriptor sets
// come from pools owned by the stream and reset with it; GPU timestamps bracket every labelled
// operation so that the trace can say where each step's time went.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vkt_abi.h"
#include "vkt_internal.h"

#define SETS_PER_POOL 1024
#define QUERIES_PER_POOL 1024
#define MAX_POOLS 64

typedef struct timed_op {
    const char *label;
    uint32_t query; // global query index of the start; end is query + 1
} timed_op;

struct vkt_cmd {
    vkt_device *dev;
    VkCommandBuffer cb;
    VkDescriptorPool dpools[MAX_POOLS];
    int ndpools, dpool_cur;
    VkQueryPool qpools[MAX_POOLS];
    int nqpools;
    uint32_t nqueries; // used in this recording
    timed_op *ops;
    int nops, cap_ops;
    vkt_timing *timings;
    int ntimings;
    bool timestamps, recording, recorded;
    int ndispatch, nbarrier;
    // Texel-buffer views made for this recording's dispatches; destroyed when the stream is
    // recorded again (after its last submit finished) or destroyed.
    VkBufferView *views;
    int nviews, cap_views;
    vkt_status err;     // first recording error, returned by vkt_cmd_end
    uint64_t submitted; // timeline value of the last submit (0 = never)
};

vkt_status vkt_cmd_create(vkt_device *dev, vkt_cmd **out) {
    *out = NULL;
    vkt_cmd *c = calloc(1, sizeof *c);
    if (!c) return vkt_fail(VKT_ERR_HOST_MEMORY, "out of host memory");
    c->dev = dev;
    VkCommandBufferAllocateInfo ai = {
        .sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
        .commandPool = dev->pool,
        .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY,
        .commandBufferCount = 1,
    };
    VkResult r = dev->vk.vkAllocateCommandBuffers(dev->handle, &ai, &c->cb);
    if (r != VK_SUCCESS) {
        free(c);
        VKT_VK(r, "allocating a command buffer");
    }
    *out = c;
    return VKT_OK;
}

static void destroy_views(vkt_cmd *c) {
    for (int i = 0; i < c->nviews; i++)
        c->dev->vk.vkDestroyBufferView(c->dev->handle, c->views[i], NULL);
    c->nviews = 0;
}

void vkt_cmd_destroy(vkt_cmd *c) {
    if (!c) return;
    vkt_device *dev = c->dev;
    if (c->submitted) vkt_device_wait_value(dev, c->submitted, VKT_WAIT_MS);
    for (int i = 0; i < c->ndpools; i++)
        dev->vk.vkDestroyDescriptorPool(dev->handle, c->dpools[i], NULL);
    for (int i = 0; i < c->nqpools; i++)
        dev->vk.vkDestroyQueryPool(dev->handle, c->qpools[i], NULL);
    if (c->cb) dev->vk.vkFreeCommandBuffers(dev->handle, dev->pool, 1, &c->cb);
    destroy_views(c);
    free(c->views);
    free(c->ops);
    free(c->timings);
    free(c);
}

static void set_err(vkt_cmd *c, vkt_status s) {
    if (c->err == VKT_OK) c->err = s;
}

static vkt_status add_descriptor_pool(vkt_cmd *c) {
    if (c->ndpools == MAX_POOLS)
        return vkt_fail(VKT_ERR_ARG, "a command stream recorded more than %d dispatches",
                        MAX_POOLS * SETS_PER_POOL);
    VkDescriptorPoolSize size[2] = {
        {.type = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, .descriptorCount = SETS_PER_POOL * 8},
        {.type = VK_DESCRIPTOR_TYPE_UNIFORM_TEXEL_BUFFER, .descriptorCount = SETS_PER_POOL * 2},
    };
    VkDescriptorPoolCreateInfo ci = {
        .sType = VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO,
        .maxSets = SETS_PER_POOL,
        .poolSizeCount = 2,
        .pPoolSizes = size,
    };
    VKT_VK(c->dev->vk.vkCreateDescriptorPool(c->dev->handle, &ci, NULL, &c->dpools[c->ndpools]),
           "creating a descriptor pool");
    c->ndpools++;
    return VKT_OK;
}

static vkt_status alloc_set(vkt_cmd *c, VkDescriptorSetLayout layout, VkDescriptorSet *set) {
    for (;;) {
        if (c->dpool_cur == c->ndpools) VKT_TRY(add_descriptor_pool(c));
        VkDescriptorSetAllocateInfo ai = {
            .sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO,
            .descriptorPool = c->dpools[c->dpool_cur],
            .descriptorSetCount = 1,
            .pSetLayouts = &layout,
        };
        VkResult r = c->dev->vk.vkAllocateDescriptorSets(c->dev->handle, &ai, set);
        if (r == VK_SUCCESS) return VKT_OK;
        if (r != VK_ERROR_OUT_OF_POOL_MEMORY && r != VK_ERROR_FRAGMENTED_POOL)
            VKT_VK(r, "allocating a descriptor set");
        c->dpool_cur++;
    }
}

// Reserves two queries (start, end) for a labelled op; resets them inside the command buffer.
static vkt_status begin_timed(vkt_cmd *c, const char *label) {
    vkt_device *dev = c->dev;
    uint32_t q = c->nqueries;
    uint32_t pool = q / QUERIES_PER_POOL;
    if ((int)pool == MAX_POOLS)
        return vkt_fail(VKT_ERR_ARG, "a command stream timed more than %d operations",
                        MAX_POOLS * QUERIES_PER_POOL / 2);
    if ((int)pool == c->nqpools) {
        VkQueryPoolCreateInfo ci = {
            .sType = VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO,
            .queryType = VK_QUERY_TYPE_TIMESTAMP,
            .queryCount = QUERIES_PER_POOL,
        };
        VKT_VK(dev->vk.vkCreateQueryPool(dev->handle, &ci, NULL, &c->qpools[c->nqpools]),
               "creating a timestamp query pool");
        c->nqpools++;
    }
    if (c->nops == c->cap_ops) {
        int cap = c->cap_ops ? 2 * c->cap_ops : 64;
        timed_op *ops = realloc(c->ops, (size_t)cap * sizeof *ops);
        if (!ops) return vkt_fail(VKT_ERR_HOST_MEMORY, "out of host memory");
        c->ops = ops;
        c->cap_ops = cap;
    }
    c->ops[c->nops++] = (timed_op){.label = label, .query = q};
    uint32_t local = q % QUERIES_PER_POOL;
    dev->vk.vkCmdResetQueryPool(c->cb, c->qpools[pool], local, 2);
    // Both stamps at the bottom of the pipe: the start is written once everything before has
    // finished, the end once this op has, so ops on one queue never overlap in the trace.
    dev->vk.vkCmdWriteTimestamp(c->cb, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, c->qpools[pool],
                                local);
    c->nqueries += 2;
    return VKT_OK;
}

static void end_timed(vkt_cmd *c) {
    uint32_t q = c->ops[c->nops - 1].query + 1;
    c->dev->vk.vkCmdWriteTimestamp(c->cb, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT,
                                   c->qpools[q / QUERIES_PER_POOL], q % QUERIES_PER_POOL);
}

bool vkt_cmd_timed(const vkt_cmd *c) { return c->timestamps; }
uint64_t vkt_cmd_submitted(const vkt_cmd *c) { return c->submitted; }

vkt_status vkt_cmd_begin(vkt_cmd *c, bool timestamps) {
    vkt_device *dev = c->dev;
    if (c->submitted) VKT_TRY(vkt_device_wait_value(dev, c->submitted, VKT_WAIT_MS));
    if (timestamps && dev->info->timestamp_valid_bits == 0) timestamps = false;
    c->timestamps = timestamps;
    c->nops = c->ntimings = 0;
    c->nqueries = 0;
    c->ndispatch = c->nbarrier = 0;
    c->err = VKT_OK;
    c->recorded = false;
    for (int i = 0; i < c->ndpools; i++)
        VKT_VK(dev->vk.vkResetDescriptorPool(dev->handle, c->dpools[i], 0),
               "resetting a descriptor pool");
    c->dpool_cur = 0;
    destroy_views(c);
    VKT_VK(dev->vk.vkResetCommandBuffer(c->cb, 0), "resetting a command buffer");
    VkCommandBufferBeginInfo bi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
    VKT_VK(dev->vk.vkBeginCommandBuffer(c->cb, &bi), "beginning a command buffer");
    c->recording = true;
    // Work of earlier submits (another stream's copy into a buffer this one reads, the last
    // step's update) is finished and visible before this stream starts.
    vkt_cmd_barrier(c);
    return VKT_OK;
}

static bool view_ok(vkt_cmd *c, const vkt_view *v, const char *what) {
    const vkt_device_info *info = c->dev->info;
    if (!v->buffer || v->buffer->dev != c->dev) {
        set_err(c, vkt_fail(VKT_ERR_ARG, "%s: a view of another device's buffer (or none)", what));
        return false;
    }
    if (v->size == 0 || v->offset + v->size > v->buffer->size) {
        set_err(c,
                vkt_fail(VKT_ERR_ARG, "%s: view [%llu, +%llu) is outside buffer %s of %llu bytes",
                         what, (unsigned long long)v->offset, (unsigned long long)v->size,
                         v->buffer->name, (unsigned long long)v->buffer->size));
        return false;
    }
    return true;
    (void)info;
}

// A view of v as R32G32B32A32_SFLOAT texels (the engine's one texel format), kept until the
// stream is recorded again. The range must be whole texels and within maxTexelBufferElements.
static vkt_status texel_view(vkt_cmd *c, const vkt_view *v, const char *shader, int binding,
                             VkBufferView *out) {
    vkt_device *dev = c->dev;
    uint64_t max = 16ull * dev->info->max_texel_buffer_elements;
    if (v->size % 16 || v->size > max)
        return vkt_fail(VKT_ERR_ARG,
                        "kernel %s binding %d: a texel buffer of %llu bytes (must be a multiple "
                        "of 16, at most %llu on %s)",
                        shader, binding, (unsigned long long)v->size, (unsigned long long)max,
                        dev->label);
    if (c->nviews == c->cap_views) {
        int cap = c->cap_views ? 2 * c->cap_views : 64;
        VkBufferView *nv = realloc(c->views, (size_t)cap * sizeof *nv);
        if (!nv) return vkt_fail(VKT_ERR_HOST_MEMORY, "out of host memory");
        c->views = nv;
        c->cap_views = cap;
    }
    VkBufferViewCreateInfo ci = {
        .sType = VK_STRUCTURE_TYPE_BUFFER_VIEW_CREATE_INFO,
        .buffer = v->buffer->handle,
        .format = VK_FORMAT_R32G32B32A32_SFLOAT,
        .offset = v->offset,
        .range = v->size,
    };
    // lavapipe (Mesa 22.3) compiles a kernel once per variant key, and the key holds per texel
    // view level_zero_only = !view->u.tex.last_level, which for a buffer view reads bits 8-15 of
    // its byte size (a union with u.buf.size): views of 262,144 and 401,408 bytes made one kernel
    // compile twice. Its disk cache then missed the second compile in the next run (the cache key
    // hashes the shader's NIR, which a compile rewrites and a cache load does not), so each run
    // after a cold one compiled those kernels again. A view with those bits zero therefore reads
    // 256 bytes more where its buffer guarantees that no other view covers them (the guard after
    // the network's tensors): every such view then has the bits nonzero, the kernel one variant.
    // The shader reads no further than before (docs/PERFORMANCE.md, "Time to the first step").
    if (dev->info->driver_id == VK_DRIVER_ID_MESA_LLVMPIPE && v->buffer->guard >= VKT_TEXEL_WIDEN &&
        ((v->size >> 8) & 0xff) == 0 && v->offset + v->size + VKT_TEXEL_WIDEN <= v->buffer->size &&
        v->size + VKT_TEXEL_WIDEN <= max)
        ci.range += VKT_TEXEL_WIDEN;
    VKT_VK(dev->vk.vkCreateBufferView(dev->handle, &ci, NULL, out), "creating a texel buffer view");
    c->views[c->nviews++] = *out;
    return VKT_OK;
}

void vkt_cmd_dispatch(vkt_cmd *c, vkt_kernel *k, const vkt_view *bind, int nbind, const void *push,
                      uint32_t push_size, uint32_t gx, uint32_t gy, uint32_t gz,
                      const char *label) {
    vkt_device *dev = c->dev;
    if (!c->recording) {
        set_err(c, vkt_fail(VKT_ERR_ARG, "kernel %s: dispatch outside begin/end", k->shader));
        return;
    }
    if (c->err != VKT_OK) return;
    if (nbind != k->nbindings) {
        set_err(c, vkt_fail(VKT_ERR_ARG, "kernel %s takes %d buffers, %d given", k->shader,
                            k->nbindings, nbind));
        return;
    }
    if (push_size > VKT_MAX_PUSH_BYTES || push_size % 4) {
        set_err(c, vkt_fail(VKT_ERR_ARG, "kernel %s: push constants of %u bytes", k->shader,
                            push_size));
        return;
    }
    const uint32_t *maxc = dev->info->max_workgroup_count;
    if (gx > maxc[0] || gy > maxc[1] || gz > maxc[2]) {
        set_err(c,
                vkt_fail(VKT_ERR_ARG, "kernel %s: %ux%ux%u workgroups exceed %s's limit %ux%ux%u",
                         k->shader, gx, gy, gz, dev->label, maxc[0], maxc[1], maxc[2]));
        return;
    }
    if (gx == 0 || gy == 0 || gz == 0) return;
    VkDescriptorBufferInfo infos[32];
    VkWriteDescriptorSet writes[32];
    VkDescriptorSet set;
    vkt_status s = alloc_set(c, k->set_layout, &set);
    if (s != VKT_OK) {
        set_err(c, s);
        return;
    }
    VkBufferView tviews[32];
    for (int i = 0; i < nbind; i++) {
        if (!view_ok(c, &bind[i], k->shader)) return;
        bool texel = k->types[i] == VK_DESCRIPTOR_TYPE_UNIFORM_TEXEL_BUFFER;
        uint64_t align = texel ? dev->info->min_texel_buffer_offset_alignment
                               : dev->info->min_storage_buffer_offset_alignment;
        if (align && bind[i].offset % align) {
            set_err(c, vkt_fail(VKT_ERR_ARG,
                                "kernel %s binding %d: offset %llu is not a multiple "
                                "of %s's %s alignment %llu",
                                k->shader, i, (unsigned long long)bind[i].offset, dev->label,
                                texel ? "texel-buffer" : "storage", (unsigned long long)align));
            return;
        }
        writes[i] = (VkWriteDescriptorSet){
            .sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET,
            .dstSet = set,
            .dstBinding = (uint32_t)i,
            .descriptorCount = 1,
            .descriptorType = k->types[i],
        };
        if (texel) {
            s = texel_view(c, &bind[i], k->shader, i, &tviews[i]);
            if (s != VKT_OK) {
                set_err(c, s);
                return;
            }
            writes[i].pTexelBufferView = &tviews[i];
        } else {
            infos[i] =
                (VkDescriptorBufferInfo){bind[i].buffer->handle, bind[i].offset, bind[i].size};
            writes[i].pBufferInfo = &infos[i];
        }
    }
    dev->vk.vkUpdateDescriptorSets(dev->handle, (uint32_t)nbind, writes, 0, NULL);
    if (!k->ahead_noted) vkt_ahead_note(dev, k, bind, nbind, push, push_size);
    if (label && c->timestamps) {
        s = begin_timed(c, label);
        if (s != VKT_OK) {
            set_err(c, s);
            return;
        }
    }
    dev->vk.vkCmdBindPipeline(c->cb, VK_PIPELINE_BIND_POINT_COMPUTE, k->pipeline);
    dev->vk.vkCmdBindDescriptorSets(c->cb, VK_PIPELINE_BIND_POINT_COMPUTE, k->layout, 0, 1, &set, 0,
                                    NULL);
    if (push_size)
        dev->vk.vkCmdPushConstants(c->cb, k->layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, push_size,
                                   push);
    dev->vk.vkCmdDispatch(c->cb, gx, gy, gz);
    if (label && c->timestamps) end_timed(c);
    c->ndispatch++;
}

void vkt_cmd_barrier(vkt_cmd *c) {
    if (!c->recording || c->err != VKT_OK) return;
    VkMemoryBarrier mb = {
        .sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
        .srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT,
        .dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT |
                         VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT,
    };
    // Write-after-read hazards are covered by the execution dependency of the same barrier.
    const VkPipelineStageFlags stages =
        VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT;
    c->dev->vk.vkCmdPipelineBarrier(c->cb, stages, stages, 0, 1, &mb, 0, NULL, 0, NULL);
    c->nbarrier++;
}

void vkt_cmd_copy(vkt_cmd *c, vkt_view src, vkt_view dst, const char *label) {
    if (!c->recording || c->err != VKT_OK) return;
    if (!view_ok(c, &src, "copy source") || !view_ok(c, &dst, "copy destination")) return;
    if (src.size != dst.size) {
        set_err(c, vkt_fail(VKT_ERR_ARG, "copy of %llu bytes into a view of %llu bytes",
                            (unsigned long long)src.size, (unsigned long long)dst.size));
        return;
    }
    vkt_cmd_copy_rows(c, src, 0, dst, 0, 1, src.size, label);
}

void vkt_cmd_copy_rows(vkt_cmd *c, vkt_view src, uint64_t src_stride, vkt_view dst,
                       uint64_t dst_stride, uint32_t rows, uint64_t row_bytes, const char *label) {
    if (!c->recording || c->err != VKT_OK || rows == 0) return;
    if (!view_ok(c, &src, "copy source") || !view_ok(c, &dst, "copy destination")) return;
    uint64_t last = (uint64_t)(rows - 1);
    if (row_bytes == 0 || (rows > 1 && dst_stride < row_bytes) ||
        last * src_stride + row_bytes > src.size || last * dst_stride + row_bytes > dst.size) {
        set_err(c, vkt_fail(VKT_ERR_ARG,
                            "copy of %u rows of %llu bytes (strides %llu, %llu) between views of "
                            "%llu and %llu bytes",
                            rows, (unsigned long long)row_bytes, (unsigned long long)src_stride,
                            (unsigned long long)dst_stride, (unsigned long long)src.size,
                            (unsigned long long)dst.size));
        return;
    }
    VkBufferCopy one, *r = rows == 1 ? &one : malloc(rows * sizeof *r); // per-step uploads: one
    if (!r) {
        set_err(c, vkt_fail(VKT_ERR_HOST_MEMORY, "out of host memory"));
        return;
    }
    for (uint32_t i = 0; i < rows; i++)
        r[i] = (VkBufferCopy){.srcOffset = src.offset + i * src_stride,
                              .dstOffset = dst.offset + i * dst_stride,
                              .size = row_bytes};
    if (label && c->timestamps) {
        vkt_status s = begin_timed(c, label);
        if (s != VKT_OK) {
            if (r != &one) free(r);
            set_err(c, s);
            return;
        }
    }
    c->dev->vk.vkCmdCopyBuffer(c->cb, src.buffer->handle, dst.buffer->handle, rows, r);
    if (label && c->timestamps) end_timed(c);
    if (r != &one) free(r);
}

void vkt_cmd_fill(vkt_cmd *c, vkt_view dst, uint32_t value) {
    if (!c->recording || c->err != VKT_OK) return;
    if (!view_ok(c, &dst, "fill")) return;
    if (dst.offset % 4 || dst.size % 4) {
        set_err(c, vkt_fail(VKT_ERR_ARG, "fill of a view not aligned to 4 bytes"));
        return;
    }
    c->dev->vk.vkCmdFillBuffer(c->cb, dst.buffer->handle, dst.offset, dst.size, value);
}

vkt_status vkt_cmd_end(vkt_cmd *c) {
    vkt_device *dev = c->dev;
    if (!c->recording) return vkt_fail(VKT_ERR_ARG, "vkt_cmd_end without vkt_cmd_begin");
    // Make every write of the stream visible to the host (reads after the wait) and to the
    // next submission.
    VkMemoryBarrier mb = {
        .sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
        .srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT,
        .dstAccessMask = VK_ACCESS_HOST_READ_BIT,
    };
    dev->vk.vkCmdPipelineBarrier(
        c->cb, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
        VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &mb, 0, NULL, 0, NULL);
    c->recording = false;
    VKT_VK(dev->vk.vkEndCommandBuffer(c->cb), "ending a command buffer");
    if (c->err != VKT_OK) return c->err;
    c->recorded = true;
    return VKT_OK;
}

vkt_status vkt_cmd_submit(vkt_cmd *c) {
    if (!c->recorded)
        return vkt_fail(VKT_ERR_ARG, "submit of a command stream that was not recorded");
    // A command buffer may not be pending twice: wait for its previous submit first.
    if (c->submitted) VKT_TRY(vkt_device_wait_value(c->dev, c->submitted, VKT_WAIT_MS));
    // The kernels whose first dispatch this recording holds are compiled first, on both cores
    // (ahead.c); the device then finds them built.
    vkt_ahead_build(c->dev);
    return vkt_device_submit(c->dev, c->cb, &c->submitted);
}

vkt_status vkt_cmd_wait(vkt_cmd *c, uint64_t timeout_ms) {
    if (!c->submitted) return VKT_OK;
    vkt_device *dev = c->dev;
    VKT_TRY(vkt_device_wait_value(dev, c->submitted, timeout_ms));
    c->ntimings = 0;
    if (!c->timestamps || c->nops == 0) return VKT_OK;
    vkt_timing *t = realloc(c->timings, (size_t)c->nops * sizeof *t);
    if (!t) return vkt_fail(VKT_ERR_HOST_MEMORY, "out of host memory");
    c->timings = t;
    uint64_t mask = dev->info->timestamp_valid_bits >= 64
                        ? ~0ull
                        : (1ull << dev->info->timestamp_valid_bits) - 1;
    double period = dev->info->timestamp_period_ns;
    uint64_t stamps[QUERIES_PER_POOL];
    for (int p = 0; p * QUERIES_PER_POOL < (int)c->nqueries; p++) {
        uint32_t n = c->nqueries - (uint32_t)p * QUERIES_PER_POOL;
        if (n > QUERIES_PER_POOL) n = QUERIES_PER_POOL;
        VKT_VK(dev->vk.vkGetQueryPoolResults(dev->handle, c->qpools[p], 0, n, sizeof stamps, stamps,
                                             sizeof(uint64_t),
                                             VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT),
               "reading GPU timestamps");
        for (int i = 0; i < c->nops; i++) {
            uint32_t q = c->ops[i].query;
            if (q / QUERIES_PER_POOL != (uint32_t)p) continue;
            uint32_t l = q % QUERIES_PER_POOL;
            t[i].label = c->ops[i].label;
            t[i].start_ns = (uint64_t)((double)(stamps[l] & mask) * period);
            t[i].end_ns = (uint64_t)((double)(stamps[l + 1] & mask) * period);
        }
    }
    c->ntimings = c->nops;
    return VKT_OK;
}

int vkt_cmd_timings(const vkt_cmd *c, const vkt_timing **out) {
    *out = c->timings;
    return c->ntimings;
}

int vkt_cmd_dispatch_count(const vkt_cmd *c) { return c->ndispatch; }
int vkt_cmd_barrier_count(const vkt_cmd *c) { return c->nbarrier; }
