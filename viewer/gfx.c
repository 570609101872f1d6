// gfx.c: the viewer's Vulkan renderer (see gfx.h). One instance and one logical device of its
// own, function tables of its own (volk's global instance table belongs to the training
// context, which may live in the same process), a render pass and two pipelines per target
// format, a font atlas texture, two frames in flight for the window, and a render-to-image path
// for PNGs. Not here: what is drawn (scene.c), the window's event loop (viewer.c).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ctype.h>

#include "vkt_internal.h"
#define GLFW_INCLUDE_NONE
#include <GLFW/glfw3.h>

#include "gfx.h"
#include "vkt_shaders.h"

#define FRAMES 2
#define MAX_IMAGES 16
#define VALIDATION_LAYER "VK_LAYER_KHRONOS_validation"

// clang-format off
#define INSTANCE_FUNCS(X)                                                                          \
    X(vkDestroyInstance) X(vkEnumeratePhysicalDevices) X(vkGetPhysicalDeviceProperties)            \
    X(vkGetPhysicalDeviceProperties2) X(vkGetPhysicalDeviceQueueFamilyProperties)                  \
    X(vkGetPhysicalDeviceMemoryProperties) X(vkGetPhysicalDeviceFormatProperties)                  \
    X(vkEnumerateDeviceExtensionProperties) X(vkCreateDevice) X(vkGetDeviceProcAddr)               \
    X(vkDestroySurfaceKHR) X(vkGetPhysicalDeviceSurfaceSupportKHR)                                 \
    X(vkGetPhysicalDeviceSurfaceCapabilitiesKHR) X(vkGetPhysicalDeviceSurfaceFormatsKHR)           \
    X(vkCreateDebugUtilsMessengerEXT) X(vkDestroyDebugUtilsMessengerEXT)

#define DEVICE_FUNCS(X)                                                                            \
    X(vkDestroyDevice) X(vkGetDeviceQueue) X(vkDeviceWaitIdle) X(vkQueueSubmit)                    \
    X(vkCreateCommandPool) X(vkDestroyCommandPool) X(vkAllocateCommandBuffers)                     \
    X(vkBeginCommandBuffer) X(vkEndCommandBuffer) X(vkResetCommandBuffer) X(vkCreateFence)         \
    X(vkDestroyFence) X(vkWaitForFences) X(vkResetFences) X(vkCreateSemaphore)                     \
    X(vkDestroySemaphore) X(vkCreateBuffer) X(vkDestroyBuffer) X(vkGetBufferMemoryRequirements)    \
    X(vkBindBufferMemory) X(vkCreateImage) X(vkDestroyImage) X(vkGetImageMemoryRequirements)       \
    X(vkBindImageMemory) X(vkAllocateMemory) X(vkFreeMemory) X(vkMapMemory) X(vkCreateImageView)   \
    X(vkDestroyImageView) X(vkCreateSampler) X(vkDestroySampler) X(vkCreateDescriptorSetLayout)    \
    X(vkDestroyDescriptorSetLayout) X(vkCreateDescriptorPool) X(vkDestroyDescriptorPool)           \
    X(vkAllocateDescriptorSets) X(vkUpdateDescriptorSets) X(vkCreatePipelineLayout)                \
    X(vkDestroyPipelineLayout) X(vkCreateShaderModule) X(vkDestroyShaderModule)                    \
    X(vkCreateGraphicsPipelines) X(vkDestroyPipeline) X(vkCreateRenderPass)                        \
    X(vkDestroyRenderPass) X(vkCreateFramebuffer) X(vkDestroyFramebuffer)                          \
    X(vkCmdPipelineBarrier) X(vkCmdCopyBufferToImage) X(vkCmdCopyImageToBuffer)                    \
    X(vkCmdBeginRenderPass) X(vkCmdEndRenderPass) X(vkCmdBindPipeline) X(vkCmdBindVertexBuffers)   \
    X(vkCmdBindDescriptorSets) X(vkCmdPushConstants) X(vkCmdSetViewport) X(vkCmdSetScissor)        \
    X(vkCmdDraw) X(vkCreateSwapchainKHR) X(vkDestroySwapchainKHR) X(vkGetSwapchainImagesKHR)       \
    X(vkAcquireNextImageKHR) X(vkQueuePresentKHR)
// clang-format on

#define DECLARE(name) PFN_##name name;
typedef struct inst_fns {
    INSTANCE_FUNCS(DECLARE)
} inst_fns;
typedef struct dev_fns {
    DEVICE_FUNCS(DECLARE)
} dev_fns;
#undef DECLARE

// A render pass and the two pipelines for one colour format.
typedef struct target {
    VkFormat format;
    VkImageLayout final_layout;
    VkRenderPass pass;
    VkPipeline rect, glyph;
    bool srgb;
} target;

// Host-visible memory for one frame's instances.
typedef struct host_buffer {
    VkBuffer buf;
    VkDeviceMemory mem;
    void *map;
    VkDeviceSize size;
} host_buffer;

typedef struct frame {
    VkCommandBuffer cb;
    VkFence fence;
    VkSemaphore acquired;
    host_buffer inst;
} frame;

struct gfx {
    VkInstance instance;
    inst_fns fi;
    VkDebugUtilsMessengerEXT messenger;
    bool validation;
    uint64_t vcount;
    char who[32]; // gfx_desc.who
    VkPhysicalDevice phys;
    VkPhysicalDeviceMemoryProperties mem;
    uint32_t qfam;
    char name[600];
    VkDevice dev;
    dev_fns fd;
    VkQueue queue;
    VkCommandPool pool;
    VkShaderModule rect_vs, rect_fs, glyph_vs, glyph_fs;
    VkDescriptorSetLayout dsl;
    VkDescriptorPool dpool;
    VkDescriptorSet dset;
    VkPipelineLayout rect_layout, glyph_layout;
    VkImage atlas;
    VkDeviceMemory atlas_mem;
    VkImageView atlas_view;
    VkSampler sampler;
    target off, swap;
    frame frames[FRAMES];
    int cur;
    // window
    GLFWwindow *window;
    VkSurfaceKHR surface;
    VkSwapchainKHR swapchain;
    VkExtent2D extent;
    uint32_t nimages;
    VkImage images[MAX_IMAGES];
    VkImageView views[MAX_IMAGES];
    VkFramebuffer fbs[MAX_IMAGES];
    VkSemaphore rendered[MAX_IMAGES];
    bool stale; // the swapchain no longer matches the window
};

// ---------------------------------------------------------------------------------------------
// Instance and device

static VKAPI_ATTR VkBool32 VKAPI_CALL on_message(VkDebugUtilsMessageSeverityFlagBitsEXT severity,
                                                 VkDebugUtilsMessageTypeFlagsEXT types,
                                                 const VkDebugUtilsMessengerCallbackDataEXT *data,
                                                 void *user) {
    gfx *g = user;
    if (severity & (VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT |
                    VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT)) {
        __atomic_fetch_add(&g->vcount, 1, __ATOMIC_RELAXED);
        fprintf(stderr, "%s: validation %s: %s\n", g->who,
                (severity & VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT) ? "error" : "warning",
                data->pMessage);
    }
    return VK_FALSE;
}

static bool has_layer(const char *name) {
    uint32_t n = 0;
    if (vkEnumerateInstanceLayerProperties(&n, NULL) != VK_SUCCESS || n == 0) return false;
    VkLayerProperties *p = calloc(n, sizeof *p);
    bool found = false;
    if (p && vkEnumerateInstanceLayerProperties(&n, p) == VK_SUCCESS)
        for (uint32_t i = 0; i < n; i++)
            found |= strcmp(p[i].layerName, name) == 0;
    free(p);
    return found;
}

static vkt_status create_instance(gfx *g) {
    const char *exts[16];
    uint32_t nexts = 0;
    if (g->window) {
        uint32_t n = 0;
        const char **req = glfwGetRequiredInstanceExtensions(&n);
        if (!req || n > 12)
            return vkt_fail(
                VKT_ERR_NO_DEVICE,
                "the window system offers no Vulkan surface (GLFW "
                "found no VK_KHR_*_surface extension); render to a file with --png OUT.png");
        for (uint32_t i = 0; i < n; i++)
            exts[nexts++] = req[i];
    }
    const char *layers[1];
    uint32_t nlayers = 0;
    if (g->validation) {
        if (!has_layer(VALIDATION_LAYER))
            return vkt_fail(VKT_ERR_NO_DEVICE,
                            "validation was asked for (VKT_VALIDATION=1) but the "
                            "Khronos validation layer is not installed: apt-get install "
                            "vulkan-validationlayers");
        layers[nlayers++] = VALIDATION_LAYER;
        exts[nexts++] = VK_EXT_DEBUG_UTILS_EXTENSION_NAME;
    }
    VkApplicationInfo app = {
        .sType = VK_STRUCTURE_TYPE_APPLICATION_INFO,
        .pApplicationName = g->who,
        .pEngineName = "vktrain",
        .apiVersion = VK_API_VERSION_1_2,
    };
    VkValidationFeatureEnableEXT enables[] = {
        VK_VALIDATION_FEATURE_ENABLE_SYNCHRONIZATION_VALIDATION_EXT};
    VkValidationFeaturesEXT features = {
        .sType = VK_STRUCTURE_TYPE_VALIDATION_FEATURES_EXT,
        .enabledValidationFeatureCount = 1,
        .pEnabledValidationFeatures = enables,
    };
    VkDebugUtilsMessengerCreateInfoEXT mci = {
        .sType = VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT,
        .pNext = &features,
        .messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT |
                           VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT,
        .messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT |
                       VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT |
                       VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT,
        .pfnUserCallback = on_message,
        .pUserData = g,
    };
    VkInstanceCreateInfo ci = {
        .sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO,
        .pNext = g->validation ? &mci : NULL,
        .pApplicationInfo = &app,
        .enabledLayerCount = nlayers,
        .ppEnabledLayerNames = layers,
        .enabledExtensionCount = nexts,
        .ppEnabledExtensionNames = exts,
    };
    VkResult r = vkCreateInstance(&ci, NULL, &g->instance);
    if (r == VK_ERROR_INCOMPATIBLE_DRIVER || r == VK_ERROR_EXTENSION_NOT_PRESENT)
        return vkt_fail(VKT_ERR_NO_DEVICE,
                        "no Vulkan driver can draw the viewer%s (%s): install "
                        "mesa-vulkan-drivers%s",
                        g->window ? " in a window" : "", vkt_result_name(r),
                        g->window ? ", or render to a file with --png OUT.png" : "");
    VKT_VK(r, "creating the viewer's Vulkan instance");
    // Instance functions of our own instance; volk's globals are left to the engine.
#define LOAD(name) g->fi.name = (PFN_##name)vkGetInstanceProcAddr(g->instance, #name);
    INSTANCE_FUNCS(LOAD)
#undef LOAD
    if (g->validation) {
        mci.pNext = NULL;
        VKT_VK(g->fi.vkCreateDebugUtilsMessengerEXT(g->instance, &mci, NULL, &g->messenger),
               "installing the viewer's validation callback");
    }
    return VKT_OK;
}

static bool icontains(const char *hay, const char *needle) {
    size_t n = strlen(needle);
    if (n == 0) return false;
    for (; *hay; hay++) {
        size_t i = 0;
        while (i < n && hay[i] &&
               tolower((unsigned char)hay[i]) == tolower((unsigned char)needle[i]))
            i++;
        if (i == n) return true;
    }
    return false;
}

typedef struct candidate {
    VkPhysicalDevice handle;
    char name[256], driver[256];
    VkPhysicalDeviceType type;
    int qfam; // a graphics family (that can present, for a window), or -1
} candidate;

static int type_rank(VkPhysicalDeviceType t) {
    switch (t) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return 4;
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return 3;
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return 2;
    case VK_PHYSICAL_DEVICE_TYPE_CPU: return 1;
    default: return 0;
    }
}

static vkt_status pick_device(gfx *g, const char *spec) {
    uint32_t n = 0;
    VKT_VK(g->fi.vkEnumeratePhysicalDevices(g->instance, &n, NULL), "listing Vulkan devices");
    if (n == 0)
        return vkt_fail(VKT_ERR_NO_DEVICE, "no Vulkan device found for the viewer: install "
                                           "mesa-vulkan-drivers (lavapipe)");
    VkPhysicalDevice handles[32];
    candidate cand[32];
    if (n > 32) n = 32;
    VkResult r = g->fi.vkEnumeratePhysicalDevices(g->instance, &n, handles);
    if (r != VK_SUCCESS && r != VK_INCOMPLETE) VKT_VK(r, "listing Vulkan devices");
    char list[1200] = "";
    size_t len = 0;
    for (uint32_t i = 0; i < n; i++) {
        candidate *c = &cand[i];
        c->handle = handles[i];
        VkPhysicalDeviceDriverProperties drv = {
            .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES};
        VkPhysicalDeviceProperties2 p2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2,
                                          .pNext = &drv};
        g->fi.vkGetPhysicalDeviceProperties2(handles[i], &p2);
        snprintf(c->name, sizeof c->name, "%s", p2.properties.deviceName);
        snprintf(c->driver, sizeof c->driver, "%s", drv.driverName);
        c->type = p2.properties.deviceType;
        c->qfam = -1;
        uint32_t nq = 0;
        g->fi.vkGetPhysicalDeviceQueueFamilyProperties(handles[i], &nq, NULL);
        VkQueueFamilyProperties qp[16];
        if (nq > 16) nq = 16;
        g->fi.vkGetPhysicalDeviceQueueFamilyProperties(handles[i], &nq, qp);
        for (uint32_t q = 0; q < nq && c->qfam < 0; q++) {
            if (!(qp[q].queueFlags & VK_QUEUE_GRAPHICS_BIT)) continue;
            if (g->surface) {
                VkBool32 ok = VK_FALSE;
                if (g->fi.vkGetPhysicalDeviceSurfaceSupportKHR(handles[i], q, g->surface, &ok) !=
                        VK_SUCCESS ||
                    !ok)
                    continue;
            }
            c->qfam = (int)q;
        }
        int w = snprintf(list + len, sizeof list - len, "%s%u = %s [%s]%s", i ? "; " : "", i,
                         c->name, c->driver, c->qfam < 0 ? " (cannot draw here)" : "");
        if (w > 0 && (size_t)w < sizeof list - len) len += (size_t)w;
    }
    int chosen = -1;
    if (spec && *spec) {
        if (strchr(spec, ','))
            return vkt_fail(VKT_ERR_ARG,
                            "the viewer draws on one device, but --device \"%s\" lists "
                            "several; the devices are: %s",
                            spec, list);
        char *end = NULL;
        long idx = strtol(spec, &end, 10);
        if (*end == 0) {
            if (idx >= 0 && idx < (long)n) chosen = (int)idx;
        } else {
            const char *needle = icontains(spec, "lavapipe") ? "llvmpipe" : spec;
            for (uint32_t i = 0; i < n && chosen < 0; i++)
                if (icontains(cand[i].name, needle) || icontains(cand[i].driver, needle))
                    chosen = (int)i;
        }
        if (chosen < 0)
            return vkt_fail(VKT_ERR_NO_DEVICE,
                            "--device \"%s\" matches no device; the devices are: %s", spec, list);
        if (cand[chosen].qfam < 0)
            return vkt_fail(VKT_ERR_NO_DEVICE,
                            "device %s has no graphics queue that can %s; the "
                            "devices are: %s",
                            cand[chosen].name, g->surface ? "present to this window" : "draw",
                            list);
    } else {
        for (uint32_t i = 0; i < n; i++)
            if (cand[i].qfam >= 0 &&
                (chosen < 0 || type_rank(cand[i].type) > type_rank(cand[chosen].type)))
                chosen = (int)i;
        if (chosen < 0)
            return vkt_fail(
                VKT_ERR_NO_DEVICE, "no Vulkan device can %s; the devices are: %s",
                g->surface ? "present to this window (use --png OUT.png instead)" : "draw", list);
    }
    g->phys = cand[chosen].handle;
    g->qfam = (uint32_t)cand[chosen].qfam;
    if (icontains(cand[chosen].name, cand[chosen].driver))
        snprintf(g->name, sizeof g->name, "%s (device %d)", cand[chosen].name, chosen);
    else
        snprintf(g->name, sizeof g->name, "%s (%s, device %d)", cand[chosen].name,
                 cand[chosen].driver, chosen);
    g->fi.vkGetPhysicalDeviceMemoryProperties(g->phys, &g->mem);
    return VKT_OK;
}

static vkt_status create_device(gfx *g) {
    float prio = 1.0f;
    VkDeviceQueueCreateInfo qci = {
        .sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO,
        .queueFamilyIndex = g->qfam,
        .queueCount = 1,
        .pQueuePriorities = &prio,
    };
    const char *exts[] = {VK_KHR_SWAPCHAIN_EXTENSION_NAME};
    VkDeviceCreateInfo ci = {
        .sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO,
        .queueCreateInfoCount = 1,
        .pQueueCreateInfos = &qci,
        .enabledExtensionCount = g->window ? 1 : 0,
        .ppEnabledExtensionNames = exts,
    };
    VKT_VK(g->fi.vkCreateDevice(g->phys, &ci, NULL, &g->dev), "opening the viewer's device");
#define LOAD(name) g->fd.name = (PFN_##name)g->fi.vkGetDeviceProcAddr(g->dev, #name);
    DEVICE_FUNCS(LOAD)
#undef LOAD
    g->fd.vkGetDeviceQueue(g->dev, g->qfam, 0, &g->queue);
    VkCommandPoolCreateInfo pci = {
        .sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO,
        .flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT,
        .queueFamilyIndex = g->qfam,
    };
    VKT_VK(g->fd.vkCreateCommandPool(g->dev, &pci, NULL, &g->pool),
           "creating the viewer's command pool");
    for (int i = 0; i < FRAMES; i++) {
        frame *f = &g->frames[i];
        VkCommandBufferAllocateInfo ai = {
            .sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
            .commandPool = g->pool,
            .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY,
            .commandBufferCount = 1,
        };
        VKT_VK(g->fd.vkAllocateCommandBuffers(g->dev, &ai, &f->cb), "allocating a command buffer");
        VkFenceCreateInfo fci = {.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO,
                                 .flags = VK_FENCE_CREATE_SIGNALED_BIT};
        VKT_VK(g->fd.vkCreateFence(g->dev, &fci, NULL, &f->fence), "creating a fence");
        VkSemaphoreCreateInfo sci = {.sType = VK_STRUCTURE_TYPE_SEMAPHORE_CREATE_INFO};
        VKT_VK(g->fd.vkCreateSemaphore(g->dev, &sci, NULL, &f->acquired), "creating a semaphore");
    }
    return VKT_OK;
}

// ---------------------------------------------------------------------------------------------
// Memory

static int memory_type(const gfx *g, uint32_t bits, VkMemoryPropertyFlags want,
                       VkMemoryPropertyFlags like) {
    int best = -1, score = -1;
    for (uint32_t i = 0; i < g->mem.memoryTypeCount; i++) {
        VkMemoryPropertyFlags f = g->mem.memoryTypes[i].propertyFlags;
        if (!(bits & (1u << i)) || (f & want) != want) continue;
        int s = __builtin_popcount(f & like);
        if (s > score) best = (int)i, score = s;
    }
    return best;
}

static vkt_status alloc_memory(gfx *g, VkMemoryRequirements req, VkMemoryPropertyFlags want,
                               VkMemoryPropertyFlags like, const char *what, VkDeviceMemory *out) {
    int type = memory_type(g, req.memoryTypeBits, want, like);
    if (type < 0)
        return vkt_fail(VKT_ERR_DEVICE_MEMORY, "the viewer's device %s has no memory type for %s",
                        g->name, what);
    VkMemoryAllocateInfo ai = {
        .sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO,
        .allocationSize = req.size,
        .memoryTypeIndex = (uint32_t)type,
    };
    VKT_VK(g->fd.vkAllocateMemory(g->dev, &ai, NULL, out), what);
    return VKT_OK;
}

static void host_buffer_free(gfx *g, host_buffer *b) {
    if (b->buf) g->fd.vkDestroyBuffer(g->dev, b->buf, NULL);
    if (b->mem) g->fd.vkFreeMemory(g->dev, b->mem, NULL); // unmaps too
    memset(b, 0, sizeof *b);
}

// A mapped, coherent buffer of at least size bytes (kept when it is big enough).
static vkt_status host_buffer_reserve(gfx *g, host_buffer *b, VkDeviceSize size,
                                      VkBufferUsageFlags usage) {
    if (b->buf && b->size >= size) return VKT_OK;
    host_buffer_free(g, b);
    VkDeviceSize n = 65536;
    while (n < size)
        n *= 2;
    VkBufferCreateInfo bci = {
        .sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO,
        .size = n,
        .usage = usage,
        .sharingMode = VK_SHARING_MODE_EXCLUSIVE,
    };
    VKT_VK(g->fd.vkCreateBuffer(g->dev, &bci, NULL, &b->buf), "creating a viewer buffer");
    VkMemoryRequirements req;
    g->fd.vkGetBufferMemoryRequirements(g->dev, b->buf, &req);
    VKT_TRY(alloc_memory(g, req,
                         VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT,
                         VK_MEMORY_PROPERTY_HOST_CACHED_BIT, "a viewer buffer", &b->mem));
    VKT_VK(g->fd.vkBindBufferMemory(g->dev, b->buf, b->mem, 0), "binding a viewer buffer");
    VKT_VK(g->fd.vkMapMemory(g->dev, b->mem, 0, VK_WHOLE_SIZE, 0, &b->map),
           "mapping a viewer buffer");
    b->size = n;
    return VKT_OK;
}

static vkt_status create_image(gfx *g, uint32_t w, uint32_t h, VkFormat format,
                               VkImageUsageFlags usage, VkImage *img, VkDeviceMemory *mem,
                               VkImageView *view) {
    VkImageCreateInfo ici = {
        .sType = VK_STRUCTURE_TYPE_IMAGE_CREATE_INFO,
        .imageType = VK_IMAGE_TYPE_2D,
        .format = format,
        .extent = {w, h, 1},
        .mipLevels = 1,
        .arrayLayers = 1,
        .samples = VK_SAMPLE_COUNT_1_BIT,
        .tiling = VK_IMAGE_TILING_OPTIMAL,
        .usage = usage,
        .sharingMode = VK_SHARING_MODE_EXCLUSIVE,
        .initialLayout = VK_IMAGE_LAYOUT_UNDEFINED,
    };
    VKT_VK(g->fd.vkCreateImage(g->dev, &ici, NULL, img), "creating a viewer image");
    VkMemoryRequirements req;
    g->fd.vkGetImageMemoryRequirements(g->dev, *img, &req);
    VKT_TRY(alloc_memory(g, req, 0, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT, "a viewer image", mem));
    VKT_VK(g->fd.vkBindImageMemory(g->dev, *img, *mem, 0), "binding a viewer image");
    VkImageViewCreateInfo vci = {
        .sType = VK_STRUCTURE_TYPE_IMAGE_VIEW_CREATE_INFO,
        .image = *img,
        .viewType = VK_IMAGE_VIEW_TYPE_2D,
        .format = format,
        .subresourceRange = {VK_IMAGE_ASPECT_COLOR_BIT, 0, 1, 0, 1},
    };
    VKT_VK(g->fd.vkCreateImageView(g->dev, &vci, NULL, view), "creating a viewer image view");
    return VKT_OK;
}

static void image_barrier(gfx *g, VkCommandBuffer cb, VkImage img, VkImageLayout from,
                          VkImageLayout to, VkPipelineStageFlags src_stage, VkAccessFlags src,
                          VkPipelineStageFlags dst_stage, VkAccessFlags dst) {
    VkImageMemoryBarrier b = {
        .sType = VK_STRUCTURE_TYPE_IMAGE_MEMORY_BARRIER,
        .srcAccessMask = src,
        .dstAccessMask = dst,
        .oldLayout = from,
        .newLayout = to,
        .srcQueueFamilyIndex = VK_QUEUE_FAMILY_IGNORED,
        .dstQueueFamilyIndex = VK_QUEUE_FAMILY_IGNORED,
        .image = img,
        .subresourceRange = {VK_IMAGE_ASPECT_COLOR_BIT, 0, 1, 0, 1},
    };
    g->fd.vkCmdPipelineBarrier(cb, src_stage, dst_stage, 0, 0, NULL, 0, NULL, 1, &b);
}

// Records with frame 0's command buffer, submits, and waits: for one-off uploads and PNGs.
static vkt_status begin_once(gfx *g, VkCommandBuffer *cb) {
    frame *f = &g->frames[0];
    VKT_VK(g->fd.vkWaitForFences(g->dev, 1, &f->fence, VK_TRUE, UINT64_MAX),
           "waiting for the viewer");
    VKT_VK(g->fd.vkResetCommandBuffer(f->cb, 0), "resetting a command buffer");
    VkCommandBufferBeginInfo bi = {
        .sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
        .flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT,
    };
    VKT_VK(g->fd.vkBeginCommandBuffer(f->cb, &bi), "beginning a command buffer");
    *cb = f->cb;
    return VKT_OK;
}

static vkt_status submit_once(gfx *g) {
    frame *f = &g->frames[0];
    VKT_VK(g->fd.vkEndCommandBuffer(f->cb), "ending a command buffer");
    VKT_VK(g->fd.vkResetFences(g->dev, 1, &f->fence), "resetting a fence");
    VkSubmitInfo si = {
        .sType = VK_STRUCTURE_TYPE_SUBMIT_INFO,
        .commandBufferCount = 1,
        .pCommandBuffers = &f->cb,
    };
    VKT_VK(g->fd.vkQueueSubmit(g->queue, 1, &si, f->fence), "submitting the viewer's work");
    VKT_VK(g->fd.vkWaitForFences(g->dev, 1, &f->fence, VK_TRUE, UINT64_MAX),
           "waiting for the viewer");
    return VKT_OK;
}

// ---------------------------------------------------------------------------------------------
// Pipelines

static vkt_status shader(gfx *g, vkt_shader_id id, VkShaderModule *out) {
    const vkt_shader_blob *b = vkt_shader_get(id);
    if (!b) return vkt_fail(VKT_ERR_ARG, "the viewer's shader %u is not in this build", id);
    VkShaderModuleCreateInfo ci = {
        .sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO,
        .codeSize = b->size,
        .pCode = b->code,
    };
    VKT_VK(g->fd.vkCreateShaderModule(g->dev, &ci, NULL, out), "creating a viewer shader module");
    return VKT_OK;
}

static vkt_status create_layouts(gfx *g) {
    VKT_TRY(shader(g, VKT_SHADER_UI_RECT_VERT, &g->rect_vs));
    VKT_TRY(shader(g, VKT_SHADER_UI_RECT_FRAG, &g->rect_fs));
    VKT_TRY(shader(g, VKT_SHADER_UI_GLYPH_VERT, &g->glyph_vs));
    VKT_TRY(shader(g, VKT_SHADER_UI_GLYPH_FRAG, &g->glyph_fs));
    VkDescriptorSetLayoutBinding bind = {
        .binding = 0,
        .descriptorType = VK_DESCRIPTOR_TYPE_COMBINED_IMAGE_SAMPLER,
        .descriptorCount = 1,
        .stageFlags = VK_SHADER_STAGE_FRAGMENT_BIT,
    };
    VkDescriptorSetLayoutCreateInfo dci = {
        .sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO,
        .bindingCount = 1,
        .pBindings = &bind,
    };
    VKT_VK(g->fd.vkCreateDescriptorSetLayout(g->dev, &dci, NULL, &g->dsl),
           "creating a descriptor set layout");
    VkPushConstantRange pcr = {VK_SHADER_STAGE_VERTEX_BIT, 0, 16};
    VkPipelineLayoutCreateInfo lci = {
        .sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO,
        .pushConstantRangeCount = 1,
        .pPushConstantRanges = &pcr,
    };
    VKT_VK(g->fd.vkCreatePipelineLayout(g->dev, &lci, NULL, &g->rect_layout),
           "creating a pipeline layout");
    lci.setLayoutCount = 1;
    lci.pSetLayouts = &g->dsl;
    VKT_VK(g->fd.vkCreatePipelineLayout(g->dev, &lci, NULL, &g->glyph_layout),
           "creating a pipeline layout");
    return VKT_OK;
}

static vkt_status create_pipeline(gfx *g, VkRenderPass pass, bool glyph, VkPipeline *out) {
    VkPipelineShaderStageCreateInfo stages[2] = {
        {.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO,
         .stage = VK_SHADER_STAGE_VERTEX_BIT,
         .module = glyph ? g->glyph_vs : g->rect_vs,
         .pName = "main"},
        {.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO,
         .stage = VK_SHADER_STAGE_FRAGMENT_BIT,
         .module = glyph ? g->glyph_fs : g->rect_fs,
         .pName = "main"},
    };
    VkVertexInputBindingDescription vb = {
        .binding = 0,
        .stride = glyph ? sizeof(ui_glyph_inst) : sizeof(ui_rect_inst),
        .inputRate = VK_VERTEX_INPUT_RATE_INSTANCE,
    };
    VkVertexInputAttributeDescription rect_attrs[3] = {
        {0, 0, VK_FORMAT_R32G32B32A32_SFLOAT, offsetof(ui_rect_inst, x0)},
        {1, 0, VK_FORMAT_R8G8B8A8_UNORM, offsetof(ui_rect_inst, color)},
        {2, 0, VK_FORMAT_R32G32_SFLOAT, offsetof(ui_rect_inst, width)},
    };
    VkVertexInputAttributeDescription glyph_attrs[3] = {
        {0, 0, VK_FORMAT_R32G32B32A32_SFLOAT, offsetof(ui_glyph_inst, x0)},
        {1, 0, VK_FORMAT_R32G32B32A32_SFLOAT, offsetof(ui_glyph_inst, u0)},
        {2, 0, VK_FORMAT_R8G8B8A8_UNORM, offsetof(ui_glyph_inst, color)},
    };
    VkPipelineVertexInputStateCreateInfo vi = {
        .sType = VK_STRUCTURE_TYPE_PIPELINE_VERTEX_INPUT_STATE_CREATE_INFO,
        .vertexBindingDescriptionCount = 1,
        .pVertexBindingDescriptions = &vb,
        .vertexAttributeDescriptionCount = 3,
        .pVertexAttributeDescriptions = glyph ? glyph_attrs : rect_attrs,
    };
    VkPipelineInputAssemblyStateCreateInfo ia = {
        .sType = VK_STRUCTURE_TYPE_PIPELINE_INPUT_ASSEMBLY_STATE_CREATE_INFO,
        .topology = VK_PRIMITIVE_TOPOLOGY_TRIANGLE_STRIP,
    };
    VkPipelineViewportStateCreateInfo vp = {
        .sType = VK_STRUCTURE_TYPE_PIPELINE_VIEWPORT_STATE_CREATE_INFO,
        .viewportCount = 1,
        .scissorCount = 1,
    };
    VkPipelineRasterizationStateCreateInfo rs = {
        .sType = VK_STRUCTURE_TYPE_PIPELINE_RASTERIZATION_STATE_CREATE_INFO,
        .polygonMode = VK_POLYGON_MODE_FILL,
        .cullMode = VK_CULL_MODE_NONE,
        .frontFace = VK_FRONT_FACE_COUNTER_CLOCKWISE,
        .lineWidth = 1.0f,
    };
    VkPipelineMultisampleStateCreateInfo ms = {
        .sType = VK_STRUCTURE_TYPE_PIPELINE_MULTISAMPLE_STATE_CREATE_INFO,
        .rasterizationSamples = VK_SAMPLE_COUNT_1_BIT,
    };
    VkPipelineColorBlendAttachmentState blend = {
        .blendEnable = VK_TRUE,
        .srcColorBlendFactor = VK_BLEND_FACTOR_SRC_ALPHA,
        .dstColorBlendFactor = VK_BLEND_FACTOR_ONE_MINUS_SRC_ALPHA,
        .colorBlendOp = VK_BLEND_OP_ADD,
        .srcAlphaBlendFactor = VK_BLEND_FACTOR_ONE,
        .dstAlphaBlendFactor = VK_BLEND_FACTOR_ONE_MINUS_SRC_ALPHA,
        .alphaBlendOp = VK_BLEND_OP_ADD,
        .colorWriteMask = 0xf,
    };
    VkPipelineColorBlendStateCreateInfo cb = {
        .sType = VK_STRUCTURE_TYPE_PIPELINE_COLOR_BLEND_STATE_CREATE_INFO,
        .attachmentCount = 1,
        .pAttachments = &blend,
    };
    VkDynamicState dyn[] = {VK_DYNAMIC_STATE_VIEWPORT, VK_DYNAMIC_STATE_SCISSOR};
    VkPipelineDynamicStateCreateInfo ds = {
        .sType = VK_STRUCTURE_TYPE_PIPELINE_DYNAMIC_STATE_CREATE_INFO,
        .dynamicStateCount = 2,
        .pDynamicStates = dyn,
    };
    VkGraphicsPipelineCreateInfo ci = {
        .sType = VK_STRUCTURE_TYPE_GRAPHICS_PIPELINE_CREATE_INFO,
        .stageCount = 2,
        .pStages = stages,
        .pVertexInputState = &vi,
        .pInputAssemblyState = &ia,
        .pViewportState = &vp,
        .pRasterizationState = &rs,
        .pMultisampleState = &ms,
        .pColorBlendState = &cb,
        .pDynamicState = &ds,
        .layout = glyph ? g->glyph_layout : g->rect_layout,
        .renderPass = pass,
    };
    VKT_VK(g->fd.vkCreateGraphicsPipelines(g->dev, VK_NULL_HANDLE, 1, &ci, NULL, out),
           "creating a viewer pipeline");
    return VKT_OK;
}

static void target_free(gfx *g, target *t) {
    if (t->rect) g->fd.vkDestroyPipeline(g->dev, t->rect, NULL);
    if (t->glyph) g->fd.vkDestroyPipeline(g->dev, t->glyph, NULL);
    if (t->pass) g->fd.vkDestroyRenderPass(g->dev, t->pass, NULL);
    memset(t, 0, sizeof *t);
}

// A render pass that clears, draws, and leaves the image in final_layout, with the external
// dependencies that order it after what came before (a present's acquire, an earlier frame) and
// before what reads it (a copy to the host, the presentation engine).
static vkt_status target_make(gfx *g, target *t, VkFormat format, VkImageLayout final_layout) {
    if (t->pass && t->format == format && t->final_layout == final_layout) return VKT_OK;
    target_free(g, t);
    t->format = format;
    t->final_layout = final_layout;
    t->srgb = format == VK_FORMAT_B8G8R8A8_SRGB || format == VK_FORMAT_R8G8B8A8_SRGB ||
              format == VK_FORMAT_A8B8G8R8_SRGB_PACK32;
    VkAttachmentDescription att = {
        .format = format,
        .samples = VK_SAMPLE_COUNT_1_BIT,
        .loadOp = VK_ATTACHMENT_LOAD_OP_CLEAR,
        .storeOp = VK_ATTACHMENT_STORE_OP_STORE,
        .stencilLoadOp = VK_ATTACHMENT_LOAD_OP_DONT_CARE,
        .stencilStoreOp = VK_ATTACHMENT_STORE_OP_DONT_CARE,
        .initialLayout = VK_IMAGE_LAYOUT_UNDEFINED,
        .finalLayout = final_layout,
    };
    VkAttachmentReference ref = {0, VK_IMAGE_LAYOUT_COLOR_ATTACHMENT_OPTIMAL};
    VkSubpassDescription sub = {
        .pipelineBindPoint = VK_PIPELINE_BIND_POINT_GRAPHICS,
        .colorAttachmentCount = 1,
        .pColorAttachments = &ref,
    };
    bool to_host = final_layout == VK_IMAGE_LAYOUT_TRANSFER_SRC_OPTIMAL;
    VkSubpassDependency deps[2] = {
        {
            .srcSubpass = VK_SUBPASS_EXTERNAL,
            .dstSubpass = 0,
            .srcStageMask =
                VK_PIPELINE_STAGE_COLOR_ATTACHMENT_OUTPUT_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
            .dstStageMask = VK_PIPELINE_STAGE_COLOR_ATTACHMENT_OUTPUT_BIT,
            .srcAccessMask = VK_ACCESS_TRANSFER_READ_BIT,
            .dstAccessMask =
                VK_ACCESS_COLOR_ATTACHMENT_WRITE_BIT | VK_ACCESS_COLOR_ATTACHMENT_READ_BIT,
        },
        {
            .srcSubpass = 0,
            .dstSubpass = VK_SUBPASS_EXTERNAL,
            .srcStageMask = VK_PIPELINE_STAGE_COLOR_ATTACHMENT_OUTPUT_BIT,
            .dstStageMask =
                to_host ? VK_PIPELINE_STAGE_TRANSFER_BIT : VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT,
            .srcAccessMask = VK_ACCESS_COLOR_ATTACHMENT_WRITE_BIT,
            .dstAccessMask = to_host ? VK_ACCESS_TRANSFER_READ_BIT : 0,
        },
    };
    VkRenderPassCreateInfo rci = {
        .sType = VK_STRUCTURE_TYPE_RENDER_PASS_CREATE_INFO,
        .attachmentCount = 1,
        .pAttachments = &att,
        .subpassCount = 1,
        .pSubpasses = &sub,
        .dependencyCount = 2,
        .pDependencies = deps,
    };
    VKT_VK(g->fd.vkCreateRenderPass(g->dev, &rci, NULL, &t->pass), "creating a viewer render pass");
    VKT_TRY(create_pipeline(g, t->pass, false, &t->rect));
    VKT_TRY(create_pipeline(g, t->pass, true, &t->glyph));
    return VKT_OK;
}

// ---------------------------------------------------------------------------------------------
// Font atlas

static vkt_status upload_atlas(gfx *g, const uint8_t *pixels, int w, int h) {
    VKT_TRY(create_image(g, (uint32_t)w, (uint32_t)h, VK_FORMAT_R8_UNORM,
                         VK_IMAGE_USAGE_SAMPLED_BIT | VK_IMAGE_USAGE_TRANSFER_DST_BIT, &g->atlas,
                         &g->atlas_mem, &g->atlas_view));
    host_buffer staging = {0};
    vkt_status s =
        host_buffer_reserve(g, &staging, (VkDeviceSize)w * h, VK_BUFFER_USAGE_TRANSFER_SRC_BIT);
    VkCommandBuffer cb;
    if (s == VKT_OK) {
        memcpy(staging.map, pixels, (size_t)w * h);
        s = begin_once(g, &cb);
    }
    if (s == VKT_OK) {
        image_barrier(g, cb, g->atlas, VK_IMAGE_LAYOUT_UNDEFINED,
                      VK_IMAGE_LAYOUT_TRANSFER_DST_OPTIMAL, VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT, 0,
                      VK_PIPELINE_STAGE_TRANSFER_BIT, VK_ACCESS_TRANSFER_WRITE_BIT);
        VkBufferImageCopy region = {
            .imageSubresource = {VK_IMAGE_ASPECT_COLOR_BIT, 0, 0, 1},
            .imageExtent = {(uint32_t)w, (uint32_t)h, 1},
        };
        g->fd.vkCmdCopyBufferToImage(cb, staging.buf, g->atlas,
                                     VK_IMAGE_LAYOUT_TRANSFER_DST_OPTIMAL, 1, &region);
        image_barrier(g, cb, g->atlas, VK_IMAGE_LAYOUT_TRANSFER_DST_OPTIMAL,
                      VK_IMAGE_LAYOUT_SHADER_READ_ONLY_OPTIMAL, VK_PIPELINE_STAGE_TRANSFER_BIT,
                      VK_ACCESS_TRANSFER_WRITE_BIT, VK_PIPELINE_STAGE_FRAGMENT_SHADER_BIT,
                      VK_ACCESS_SHADER_READ_BIT);
        s = submit_once(g);
    }
    host_buffer_free(g, &staging);
    VKT_TRY(s);

    VkSamplerCreateInfo sci = {
        .sType = VK_STRUCTURE_TYPE_SAMPLER_CREATE_INFO,
        .magFilter = VK_FILTER_LINEAR,
        .minFilter = VK_FILTER_LINEAR,
        .mipmapMode = VK_SAMPLER_MIPMAP_MODE_NEAREST,
        .addressModeU = VK_SAMPLER_ADDRESS_MODE_CLAMP_TO_EDGE,
        .addressModeV = VK_SAMPLER_ADDRESS_MODE_CLAMP_TO_EDGE,
        .addressModeW = VK_SAMPLER_ADDRESS_MODE_CLAMP_TO_EDGE,
        .maxLod = 0.0f,
    };
    VKT_VK(g->fd.vkCreateSampler(g->dev, &sci, NULL, &g->sampler), "creating the atlas sampler");
    VkDescriptorPoolSize ps = {VK_DESCRIPTOR_TYPE_COMBINED_IMAGE_SAMPLER, 1};
    VkDescriptorPoolCreateInfo pci = {
        .sType = VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO,
        .maxSets = 1,
        .poolSizeCount = 1,
        .pPoolSizes = &ps,
    };
    VKT_VK(g->fd.vkCreateDescriptorPool(g->dev, &pci, NULL, &g->dpool),
           "creating a descriptor pool");
    VkDescriptorSetAllocateInfo ai = {
        .sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO,
        .descriptorPool = g->dpool,
        .descriptorSetCount = 1,
        .pSetLayouts = &g->dsl,
    };
    VKT_VK(g->fd.vkAllocateDescriptorSets(g->dev, &ai, &g->dset),
           "allocating the atlas descriptor set");
    VkDescriptorImageInfo ii = {g->sampler, g->atlas_view,
                                VK_IMAGE_LAYOUT_SHADER_READ_ONLY_OPTIMAL};
    VkWriteDescriptorSet wr = {
        .sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET,
        .dstSet = g->dset,
        .dstBinding = 0,
        .descriptorCount = 1,
        .descriptorType = VK_DESCRIPTOR_TYPE_COMBINED_IMAGE_SAMPLER,
        .pImageInfo = &ii,
    };
    g->fd.vkUpdateDescriptorSets(g->dev, 1, &wr, 0, NULL);
    return VKT_OK;
}

// ---------------------------------------------------------------------------------------------
// Drawing a list

static VkDeviceSize glyph_offset(const ui_list *l) {
    return ((VkDeviceSize)l->nrects * sizeof(ui_rect_inst) + 255) / 256 * 256;
}

static vkt_status upload_list(gfx *g, host_buffer *b, const ui_list *l) {
    VkDeviceSize off = glyph_offset(l);
    VKT_TRY(host_buffer_reserve(g, b, off + l->nglyphs * sizeof(ui_glyph_inst) + 16,
                                VK_BUFFER_USAGE_VERTEX_BUFFER_BIT));
    if (l->nrects) memcpy(b->map, l->rects, l->nrects * sizeof(ui_rect_inst));
    if (l->nglyphs) memcpy((char *)b->map + off, l->glyphs, l->nglyphs * sizeof(ui_glyph_inst));
    return VKT_OK;
}

static void record_list(gfx *g, VkCommandBuffer cb, const target *t, VkFramebuffer fb,
                        const ui_list *l, VkBuffer buf) {
    VkClearValue clear = {.color = {.float32 = {0, 0, 0, 1}}};
    VkRenderPassBeginInfo rbi = {
        .sType = VK_STRUCTURE_TYPE_RENDER_PASS_BEGIN_INFO,
        .renderPass = t->pass,
        .framebuffer = fb,
        .renderArea = {{0, 0}, {(uint32_t)l->width, (uint32_t)l->height}},
        .clearValueCount = 1,
        .pClearValues = &clear,
    };
    g->fd.vkCmdBeginRenderPass(cb, &rbi, VK_SUBPASS_CONTENTS_INLINE);
    VkViewport vp = {0, 0, (float)l->width, (float)l->height, 0, 1};
    g->fd.vkCmdSetViewport(cb, 0, 1, &vp);
    float push[4] = {(float)l->width, (float)l->height, t->srgb ? 1.0f : 0.0f, 0};
    VkDeviceSize offs[2] = {0, glyph_offset(l)};
    int bound = -1;
    for (size_t i = 0; i < l->nbatches; i++) {
        const ui_batch *b = &l->batches[i];
        if (b->count == 0 || b->sx1 <= b->sx0 || b->sy1 <= b->sy0) continue;
        if ((int)b->kind != bound) {
            bool glyph = b->kind == UI_GLYPHS;
            g->fd.vkCmdBindPipeline(cb, VK_PIPELINE_BIND_POINT_GRAPHICS,
                                    glyph ? t->glyph : t->rect);
            VkPipelineLayout layout = glyph ? g->glyph_layout : g->rect_layout;
            if (glyph)
                g->fd.vkCmdBindDescriptorSets(cb, VK_PIPELINE_BIND_POINT_GRAPHICS, layout, 0, 1,
                                              &g->dset, 0, NULL);
            g->fd.vkCmdPushConstants(cb, layout, VK_SHADER_STAGE_VERTEX_BIT, 0, sizeof push, push);
            g->fd.vkCmdBindVertexBuffers(cb, 0, 1, &buf, &offs[glyph ? 1 : 0]);
            bound = (int)b->kind;
        }
        VkRect2D sc = {{b->sx0, b->sy0},
                       {(uint32_t)(b->sx1 - b->sx0), (uint32_t)(b->sy1 - b->sy0)}};
        g->fd.vkCmdSetScissor(cb, 0, 1, &sc);
        g->fd.vkCmdDraw(cb, 4, b->count, 0, b->first);
    }
    g->fd.vkCmdEndRenderPass(cb);
}

vkt_status gfx_render_image(gfx *g, const ui_list *l, uint8_t *rgba) {
    VKT_TRY(ui_check(l));
    const VkFormat format = VK_FORMAT_R8G8B8A8_UNORM;
    VKT_TRY(target_make(g, &g->off, format, VK_IMAGE_LAYOUT_TRANSFER_SRC_OPTIMAL));
    VkImage img = VK_NULL_HANDLE;
    VkDeviceMemory mem = VK_NULL_HANDLE;
    VkImageView view = VK_NULL_HANDLE;
    VkFramebuffer fb = VK_NULL_HANDLE;
    host_buffer rb = {0};
    uint32_t w = (uint32_t)l->width, h = (uint32_t)l->height;
    vkt_status s = create_image(
        g, w, h, format, VK_IMAGE_USAGE_COLOR_ATTACHMENT_BIT | VK_IMAGE_USAGE_TRANSFER_SRC_BIT,
        &img, &mem, &view);
    if (s == VKT_OK) {
        VkFramebufferCreateInfo fci = {
            .sType = VK_STRUCTURE_TYPE_FRAMEBUFFER_CREATE_INFO,
            .renderPass = g->off.pass,
            .attachmentCount = 1,
            .pAttachments = &view,
            .width = w,
            .height = h,
            .layers = 1,
        };
        VkResult r = g->fd.vkCreateFramebuffer(g->dev, &fci, NULL, &fb);
        if (r != VK_SUCCESS)
            s = vkt_vk_fail(r, "vkCreateFramebuffer", "rendering the picture", __FILE__, __LINE__);
    }
    if (s == VKT_OK)
        s = host_buffer_reserve(g, &rb, (VkDeviceSize)w * h * 4, VK_BUFFER_USAGE_TRANSFER_DST_BIT);
    frame *f = &g->frames[0];
    VkCommandBuffer cb;
    if (s == VKT_OK) s = begin_once(g, &cb);
    if (s == VKT_OK) s = upload_list(g, &f->inst, l);
    if (s == VKT_OK) {
        record_list(g, cb, &g->off, fb, l, f->inst.buf);
        VkBufferImageCopy region = {
            .imageSubresource = {VK_IMAGE_ASPECT_COLOR_BIT, 0, 0, 1},
            .imageExtent = {w, h, 1},
        };
        g->fd.vkCmdCopyImageToBuffer(cb, img, VK_IMAGE_LAYOUT_TRANSFER_SRC_OPTIMAL, rb.buf, 1,
                                     &region);
        VkBufferMemoryBarrier bb = {
            .sType = VK_STRUCTURE_TYPE_BUFFER_MEMORY_BARRIER,
            .srcAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT,
            .dstAccessMask = VK_ACCESS_HOST_READ_BIT,
            .srcQueueFamilyIndex = VK_QUEUE_FAMILY_IGNORED,
            .dstQueueFamilyIndex = VK_QUEUE_FAMILY_IGNORED,
            .buffer = rb.buf,
            .size = VK_WHOLE_SIZE,
        };
        g->fd.vkCmdPipelineBarrier(cb, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_PIPELINE_STAGE_HOST_BIT,
                                   0, 0, NULL, 1, &bb, 0, NULL);
        s = submit_once(g);
    }
    if (s == VKT_OK) memcpy(rgba, rb.map, (size_t)w * h * 4);
    host_buffer_free(g, &rb);
    if (fb) g->fd.vkDestroyFramebuffer(g->dev, fb, NULL);
    if (view) g->fd.vkDestroyImageView(g->dev, view, NULL);
    if (img) g->fd.vkDestroyImage(g->dev, img, NULL);
    if (mem) g->fd.vkFreeMemory(g->dev, mem, NULL);
    return s;
}

// ---------------------------------------------------------------------------------------------
// Window: swapchain

static void swapchain_release(gfx *g) {
    for (uint32_t i = 0; i < g->nimages; i++) {
        if (g->fbs[i]) g->fd.vkDestroyFramebuffer(g->dev, g->fbs[i], NULL);
        if (g->views[i]) g->fd.vkDestroyImageView(g->dev, g->views[i], NULL);
        if (g->rendered[i]) g->fd.vkDestroySemaphore(g->dev, g->rendered[i], NULL);
        g->fbs[i] = VK_NULL_HANDLE, g->views[i] = VK_NULL_HANDLE, g->rendered[i] = VK_NULL_HANDLE;
    }
    g->nimages = 0;
}

static vkt_status swapchain_make(gfx *g, int fb_w, int fb_h) {
    VKT_VK(g->fd.vkDeviceWaitIdle(g->dev), "waiting for the viewer before resizing");
    VkSurfaceCapabilitiesKHR caps;
    VKT_VK(g->fi.vkGetPhysicalDeviceSurfaceCapabilitiesKHR(g->phys, g->surface, &caps),
           "reading the window surface");
    VkExtent2D ext = caps.currentExtent;
    if (ext.width == UINT32_MAX) {
        ext.width = (uint32_t)(fb_w > 0 ? fb_w : 0);
        ext.height = (uint32_t)(fb_h > 0 ? fb_h : 0);
        if (ext.width < caps.minImageExtent.width) ext.width = caps.minImageExtent.width;
        if (ext.height < caps.minImageExtent.height) ext.height = caps.minImageExtent.height;
        if (ext.width > caps.maxImageExtent.width) ext.width = caps.maxImageExtent.width;
        if (ext.height > caps.maxImageExtent.height) ext.height = caps.maxImageExtent.height;
    }
    g->extent = ext;
    g->stale = false;
    if (ext.width == 0 || ext.height == 0) return VKT_OK; // minimised: no swapchain until restored

    uint32_t nf = 0;
    VKT_VK(g->fi.vkGetPhysicalDeviceSurfaceFormatsKHR(g->phys, g->surface, &nf, NULL),
           "reading surface formats");
    VkSurfaceFormatKHR formats[64];
    if (nf > 64) nf = 64;
    VkResult r = g->fi.vkGetPhysicalDeviceSurfaceFormatsKHR(g->phys, g->surface, &nf, formats);
    if ((r != VK_SUCCESS && r != VK_INCOMPLETE) || nf == 0)
        return vkt_fail(VKT_ERR_VULKAN, "the window surface offers no format (%s)",
                        vkt_result_name(r));
    VkSurfaceFormatKHR sf = formats[0];
    for (uint32_t i = 0; i < nf; i++)
        if ((formats[i].format == VK_FORMAT_B8G8R8A8_UNORM ||
             formats[i].format == VK_FORMAT_R8G8B8A8_UNORM) &&
            formats[i].colorSpace == VK_COLOR_SPACE_SRGB_NONLINEAR_KHR) {
            sf = formats[i];
            break;
        }
    uint32_t count = caps.minImageCount + 1;
    if (caps.maxImageCount && count > caps.maxImageCount) count = caps.maxImageCount;
    VkCompositeAlphaFlagBitsKHR alpha = VK_COMPOSITE_ALPHA_OPAQUE_BIT_KHR;
    if (!(caps.supportedCompositeAlpha & alpha))
        alpha = (VkCompositeAlphaFlagBitsKHR)(caps.supportedCompositeAlpha &
                                              -caps.supportedCompositeAlpha);
    VkSwapchainKHR old = g->swapchain;
    VkSwapchainCreateInfoKHR sci = {
        .sType = VK_STRUCTURE_TYPE_SWAPCHAIN_CREATE_INFO_KHR,
        .surface = g->surface,
        .minImageCount = count,
        .imageFormat = sf.format,
        .imageColorSpace = sf.colorSpace,
        .imageExtent = ext,
        .imageArrayLayers = 1,
        .imageUsage = VK_IMAGE_USAGE_COLOR_ATTACHMENT_BIT,
        .imageSharingMode = VK_SHARING_MODE_EXCLUSIVE,
        .preTransform = caps.currentTransform,
        .compositeAlpha = alpha,
        .presentMode = VK_PRESENT_MODE_FIFO_KHR, // always supported; paces the loop
        .clipped = VK_TRUE,
        .oldSwapchain = old,
    };
    swapchain_release(g);
    g->swapchain = VK_NULL_HANDLE;
    r = g->fd.vkCreateSwapchainKHR(g->dev, &sci, NULL, &g->swapchain);
    if (old) g->fd.vkDestroySwapchainKHR(g->dev, old, NULL);
    VKT_VK(r, "creating the window's swapchain");
    VKT_TRY(target_make(g, &g->swap, sf.format, VK_IMAGE_LAYOUT_PRESENT_SRC_KHR));
    uint32_t n = 0;
    VKT_VK(g->fd.vkGetSwapchainImagesKHR(g->dev, g->swapchain, &n, NULL),
           "reading swapchain images");
    if (n > MAX_IMAGES)
        return vkt_fail(VKT_ERR_VULKAN, "the swapchain has %u images; the viewer handles %d", n,
                        MAX_IMAGES);
    VKT_VK(g->fd.vkGetSwapchainImagesKHR(g->dev, g->swapchain, &n, g->images),
           "reading swapchain images");
    for (uint32_t i = 0; i < n; i++) {
        g->nimages = i + 1;
        VkImageViewCreateInfo vci = {
            .sType = VK_STRUCTURE_TYPE_IMAGE_VIEW_CREATE_INFO,
            .image = g->images[i],
            .viewType = VK_IMAGE_VIEW_TYPE_2D,
            .format = sf.format,
            .subresourceRange = {VK_IMAGE_ASPECT_COLOR_BIT, 0, 1, 0, 1},
        };
        VKT_VK(g->fd.vkCreateImageView(g->dev, &vci, NULL, &g->views[i]),
               "creating a swapchain view");
        VkFramebufferCreateInfo fci = {
            .sType = VK_STRUCTURE_TYPE_FRAMEBUFFER_CREATE_INFO,
            .renderPass = g->swap.pass,
            .attachmentCount = 1,
            .pAttachments = &g->views[i],
            .width = ext.width,
            .height = ext.height,
            .layers = 1,
        };
        VKT_VK(g->fd.vkCreateFramebuffer(g->dev, &fci, NULL, &g->fbs[i]), "creating a framebuffer");
        VkSemaphoreCreateInfo smi = {.sType = VK_STRUCTURE_TYPE_SEMAPHORE_CREATE_INFO};
        VKT_VK(g->fd.vkCreateSemaphore(g->dev, &smi, NULL, &g->rendered[i]),
               "creating a semaphore");
    }
    return VKT_OK;
}

void gfx_window_extent(gfx *g, int fb_w, int fb_h, int *w, int *h) {
    bool changed = fb_w != (int)g->extent.width || fb_h != (int)g->extent.height;
    if (!g->swapchain || g->stale || changed) {
        if (fb_w > 0 && fb_h > 0) {
            if (swapchain_make(g, fb_w, fb_h) != VKT_OK) g->extent = (VkExtent2D){0, 0};
        } else {
            g->extent = (VkExtent2D){0, 0};
        }
    }
    *w = g->swapchain ? (int)g->extent.width : 0;
    *h = g->swapchain ? (int)g->extent.height : 0;
}

vkt_status gfx_present(gfx *g, const ui_list *l, bool *shown) {
    *shown = false;
    VKT_TRY(ui_check(l));
    if (!g->swapchain || g->extent.width == 0 || (int)g->extent.width != l->width ||
        (int)g->extent.height != l->height) {
        g->stale = true;
        return VKT_OK;
    }
    frame *f = &g->frames[g->cur];
    VKT_VK(g->fd.vkWaitForFences(g->dev, 1, &f->fence, VK_TRUE, UINT64_MAX), "waiting for a frame");
    uint32_t image;
    VkResult r = g->fd.vkAcquireNextImageKHR(g->dev, g->swapchain, UINT64_MAX, f->acquired,
                                             VK_NULL_HANDLE, &image);
    if (r == VK_ERROR_OUT_OF_DATE_KHR) {
        g->stale = true;
        return VKT_OK;
    }
    if (r != VK_SUBOPTIMAL_KHR) VKT_VK(r, "acquiring a swapchain image");
    VKT_TRY(upload_list(g, &f->inst, l));
    VKT_VK(g->fd.vkResetCommandBuffer(f->cb, 0), "resetting a command buffer");
    VkCommandBufferBeginInfo bi = {
        .sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
        .flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT,
    };
    VKT_VK(g->fd.vkBeginCommandBuffer(f->cb, &bi), "beginning a frame");
    record_list(g, f->cb, &g->swap, g->fbs[image], l, f->inst.buf);
    VKT_VK(g->fd.vkEndCommandBuffer(f->cb), "ending a frame");
    VKT_VK(g->fd.vkResetFences(g->dev, 1, &f->fence), "resetting a fence");
    VkPipelineStageFlags wait_stage = VK_PIPELINE_STAGE_COLOR_ATTACHMENT_OUTPUT_BIT;
    VkSubmitInfo si = {
        .sType = VK_STRUCTURE_TYPE_SUBMIT_INFO,
        .waitSemaphoreCount = 1,
        .pWaitSemaphores = &f->acquired,
        .pWaitDstStageMask = &wait_stage,
        .commandBufferCount = 1,
        .pCommandBuffers = &f->cb,
        .signalSemaphoreCount = 1,
        .pSignalSemaphores = &g->rendered[image],
    };
    VKT_VK(g->fd.vkQueueSubmit(g->queue, 1, &si, f->fence), "submitting a frame");
    VkPresentInfoKHR pi = {
        .sType = VK_STRUCTURE_TYPE_PRESENT_INFO_KHR,
        .waitSemaphoreCount = 1,
        .pWaitSemaphores = &g->rendered[image],
        .swapchainCount = 1,
        .pSwapchains = &g->swapchain,
        .pImageIndices = &image,
    };
    r = g->fd.vkQueuePresentKHR(g->queue, &pi);
    g->cur = (g->cur + 1) % FRAMES;
    if (r == VK_ERROR_OUT_OF_DATE_KHR || r == VK_SUBOPTIMAL_KHR) {
        g->stale = true; // presented or not, the next frame needs a new swapchain
        *shown = r == VK_SUBOPTIMAL_KHR;
        return VKT_OK;
    }
    VKT_VK(r, "presenting a frame");
    *shown = true;
    return VKT_OK;
}

// ---------------------------------------------------------------------------------------------
// Lifecycle

static vkt_status init(gfx *g, const gfx_desc *d) {
    VKT_TRY(create_instance(g));
    if (g->window)
        VKT_VK(glfwCreateWindowSurface(g->instance, g->window, NULL, &g->surface),
               "creating the window's Vulkan surface");
    VKT_TRY(pick_device(g, d->device_spec));
    VKT_TRY(create_device(g));
    VKT_TRY(create_layouts(g));
    return upload_atlas(g, d->atlas, d->atlas_w, d->atlas_h);
}

vkt_status gfx_create(const gfx_desc *d, gfx **out) {
    *out = NULL;
    // The engine may have loaded Vulkan already (train --view): its loader entry points are
    // then left alone, since a trainer thread may be using them.
    if (!vkGetInstanceProcAddr && volkInitialize() != VK_SUCCESS)
        return vkt_fail(VKT_ERR_NO_DEVICE, "the viewer found no Vulkan loader (libvulkan.so.1): "
                                           "apt-get install libvulkan1 mesa-vulkan-drivers");
    gfx *g = calloc(1, sizeof *g);
    if (!g) return vkt_fail(VKT_ERR_HOST_MEMORY, "out of host memory");
    g->window = d->window;
    g->validation = d->validation == 1;
    snprintf(g->who, sizeof g->who, "%s", d->who ? d->who : "vktrain view");
    vkt_status s = init(g, d);
    if (s != VKT_OK) {
        gfx_destroy(g);
        return s;
    }
    *out = g;
    return VKT_OK;
}

void gfx_destroy(gfx *g) {
    if (!g) return;
    if (g->dev) {
        g->fd.vkDeviceWaitIdle(g->dev);
        swapchain_release(g);
        if (g->swapchain) g->fd.vkDestroySwapchainKHR(g->dev, g->swapchain, NULL);
        target_free(g, &g->swap);
        target_free(g, &g->off);
        for (int i = 0; i < FRAMES; i++) {
            frame *f = &g->frames[i];
            host_buffer_free(g, &f->inst);
            if (f->acquired) g->fd.vkDestroySemaphore(g->dev, f->acquired, NULL);
            if (f->fence) g->fd.vkDestroyFence(g->dev, f->fence, NULL);
        }
        if (g->sampler) g->fd.vkDestroySampler(g->dev, g->sampler, NULL);
        if (g->atlas_view) g->fd.vkDestroyImageView(g->dev, g->atlas_view, NULL);
        if (g->atlas) g->fd.vkDestroyImage(g->dev, g->atlas, NULL);
        if (g->atlas_mem) g->fd.vkFreeMemory(g->dev, g->atlas_mem, NULL);
        if (g->dpool) g->fd.vkDestroyDescriptorPool(g->dev, g->dpool, NULL);
        if (g->rect_layout) g->fd.vkDestroyPipelineLayout(g->dev, g->rect_layout, NULL);
        if (g->glyph_layout) g->fd.vkDestroyPipelineLayout(g->dev, g->glyph_layout, NULL);
        if (g->dsl) g->fd.vkDestroyDescriptorSetLayout(g->dev, g->dsl, NULL);
        VkShaderModule mods[] = {g->rect_vs, g->rect_fs, g->glyph_vs, g->glyph_fs};
        for (int i = 0; i < 4; i++)
            if (mods[i]) g->fd.vkDestroyShaderModule(g->dev, mods[i], NULL);
        if (g->pool) g->fd.vkDestroyCommandPool(g->dev, g->pool, NULL); // frees the command buffers
        g->fd.vkDestroyDevice(g->dev, NULL);
    }
    if (g->surface) g->fi.vkDestroySurfaceKHR(g->instance, g->surface, NULL);
    if (g->messenger) g->fi.vkDestroyDebugUtilsMessengerEXT(g->instance, g->messenger, NULL);
    if (g->instance) g->fi.vkDestroyInstance(g->instance, NULL);
    free(g);
}

const char *gfx_device_name(const gfx *g) { return g->name; }
uint64_t gfx_validation_count(const gfx *g) {
    return __atomic_load_n(&g->vcount, __ATOMIC_RELAXED);
}
bool gfx_validation_enabled(const gfx *g) { return g->validation; }
