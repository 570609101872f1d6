// context.c: loading Vulkan through volk, the instance (with the Khronos validation layer and
// synchronization validation when asked), and discovery and selection of physical devices.
// Opening logical devices is device.c's job.
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vkt_internal.h"

#define VALIDATION_LAYER "VK_LAYER_KHRONOS_validation"

static const char *NO_DEVICE_HINT =
    "install a Vulkan driver: on Debian `apt-get install mesa-vulkan-drivers` gives lavapipe, "
    "which runs on the CPU; GPU vendors ship their own drivers";

// ---------------------------------------------------------------------------------------------
// Validation messages

static VKAPI_ATTR VkBool32 VKAPI_CALL on_debug_message(
    VkDebugUtilsMessageSeverityFlagBitsEXT severity, VkDebugUtilsMessageTypeFlagsEXT types,
    const VkDebugUtilsMessengerCallbackDataEXT *data, void *user) {
    vkt_context *ctx = user;
    if (severity & (VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT |
                    VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT)) {
        __atomic_fetch_add(&ctx->validation_count, 1, __ATOMIC_RELAXED);
        const char *kind =
            (severity & VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT) ? "error" : "warning";
        if (ctx->creating) {
            // Held back until the instance exists: when there is no driver, the loader's own
            // complaint would only repeat the one clear sentence the engine prints.
            size_t len = strlen(ctx->deferred);
            snprintf(ctx->deferred + len, sizeof ctx->deferred - len,
                     "vktrain: validation %s: %s\n", kind, data->pMessage);
        } else if (!ctx->quiet_validation) {
            fprintf(stderr, "vktrain: validation %s: %s\n", kind, data->pMessage);
        }
    }
    return VK_FALSE;
}

uint64_t vkt_context_validation_count(const vkt_context *ctx) {
    return __atomic_load_n(&ctx->validation_count, __ATOMIC_RELAXED);
}

bool vkt_context_validation_enabled(const vkt_context *ctx) { return ctx->validation; }

// ---------------------------------------------------------------------------------------------
// Instance

static bool has_layer(const char *name) {
    uint32_t n = 0;
    if (vkEnumerateInstanceLayerProperties(&n, NULL) != VK_SUCCESS) return false;
    VkLayerProperties *props = calloc(n ? n : 1, sizeof *props);
    if (!props) return false;
    bool found = false;
    if (vkEnumerateInstanceLayerProperties(&n, props) == VK_SUCCESS)
        for (uint32_t i = 0; i < n; i++)
            found |= strcmp(props[i].layerName, name) == 0;
    free(props);
    return found;
}

static bool has_instance_extension(const char *layer, const char *name) {
    uint32_t n = 0;
    if (vkEnumerateInstanceExtensionProperties(layer, &n, NULL) != VK_SUCCESS) return false;
    VkExtensionProperties *props = calloc(n ? n : 1, sizeof *props);
    if (!props) return false;
    bool found = false;
    if (vkEnumerateInstanceExtensionProperties(layer, &n, props) == VK_SUCCESS)
        for (uint32_t i = 0; i < n; i++)
            found |= strcmp(props[i].extensionName, name) == 0;
    free(props);
    return found;
}

static vkt_status create_instance(vkt_context *ctx) {
    const char *layers[1];
    uint32_t nlayers = 0;
    const char *exts[2];
    uint32_t nexts = 0;
    if (ctx->validation) {
        if (!has_layer(VALIDATION_LAYER))
            return vkt_fail(
                VKT_ERR_NO_DEVICE,
                "validation was asked for (VKT_VALIDATION=1) but the Khronos validation "
                "layer is not installed: `apt-get install vulkan-validationlayers`, "
                "or unset VKT_VALIDATION");
        layers[nlayers++] = VALIDATION_LAYER;
        if (!has_instance_extension(VALIDATION_LAYER, VK_EXT_DEBUG_UTILS_EXTENSION_NAME) &&
            !has_instance_extension(NULL, VK_EXT_DEBUG_UTILS_EXTENSION_NAME))
            return vkt_fail(VKT_ERR_NO_DEVICE, "validation needs %s, which no layer offers",
                            VK_EXT_DEBUG_UTILS_EXTENSION_NAME);
        exts[nexts++] = VK_EXT_DEBUG_UTILS_EXTENSION_NAME;
    }

    VkApplicationInfo app = {
        .sType = VK_STRUCTURE_TYPE_APPLICATION_INFO,
        .pApplicationName = "vktrain",
        .pEngineName = "vktrain",
        .apiVersion = VK_API_VERSION_1_2,
    };
    VkValidationFeatureEnableEXT enables[] = {
        VK_VALIDATION_FEATURE_ENABLE_SYNCHRONIZATION_VALIDATION_EXT,
    };
    VkValidationFeaturesEXT features = {
        .sType = VK_STRUCTURE_TYPE_VALIDATION_FEATURES_EXT,
        .enabledValidationFeatureCount = 1,
        .pEnabledValidationFeatures = enables,
    };
    // The messenger in the instance's pNext also sees vkCreateInstance/vkDestroyInstance.
    VkDebugUtilsMessengerCreateInfoEXT messenger = {
        .sType = VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT,
        .pNext = &features,
        .messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT |
                           VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT,
        .messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT |
                       VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT |
                       VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT,
        .pfnUserCallback = on_debug_message,
        .pUserData = ctx,
    };
    VkInstanceCreateInfo ci = {
        .sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO,
        .pNext = ctx->validation ? &messenger : NULL,
        .pApplicationInfo = &app,
        .enabledLayerCount = nlayers,
        .ppEnabledLayerNames = layers,
        .enabledExtensionCount = nexts,
        .ppEnabledExtensionNames = exts,
    };
    ctx->creating = true;
    VkResult r = vkCreateInstance(&ci, NULL, &ctx->instance);
    ctx->creating = false;
    if (r == VK_SUCCESS && !ctx->quiet_validation) fputs(ctx->deferred, stderr);
    ctx->deferred[0] = 0;
    if (r == VK_ERROR_INCOMPATIBLE_DRIVER)
        return vkt_fail(VKT_ERR_NO_DEVICE, "no Vulkan device found (no driver): %s",
                        NO_DEVICE_HINT);
    VKT_VK(r, "creating the Vulkan instance");
    volkLoadInstanceOnly(ctx->instance);
    if (ctx->validation) {
        messenger.pNext = NULL;
        VKT_VK(vkCreateDebugUtilsMessengerEXT(ctx->instance, &messenger, NULL, &ctx->messenger),
               "installing the validation message callback");
    }
    return VKT_OK;
}

// ---------------------------------------------------------------------------------------------
// Physical devices

static bool has_device_extension(const VkExtensionProperties *props, uint32_t n, const char *name) {
    for (uint32_t i = 0; i < n; i++)
        if (strcmp(props[i].extensionName, name) == 0) return true;
    return false;
}

static vkt_device_type map_type(VkPhysicalDeviceType t) {
    switch (t) {
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return VKT_DEVICE_INTEGRATED;
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return VKT_DEVICE_DISCRETE;
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return VKT_DEVICE_VIRTUAL;
    case VK_PHYSICAL_DEVICE_TYPE_CPU: return VKT_DEVICE_CPU;
    default: return VKT_DEVICE_OTHER;
    }
}

static vkt_status describe_device(vkt_physical *p, int index) {
    vkt_device_info *info = &p->info;
    memset(info, 0, sizeof *info);
    info->index = index;

    VkPhysicalDeviceDriverProperties driver = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES};
    VkPhysicalDeviceSubgroupProperties subgroup = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES, .pNext = &driver};
    VkPhysicalDeviceMaintenance3Properties m3 = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_3_PROPERTIES, .pNext = &subgroup};
    VkPhysicalDeviceProperties2 props = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2,
                                         .pNext = &m3};
    vkGetPhysicalDeviceProperties2(p->handle, &props);
    const VkPhysicalDeviceLimits *lim = &props.properties.limits;

    snprintf(info->name, sizeof info->name, "%s", props.properties.deviceName);
    if (driver.driverInfo[0])
        snprintf(info->driver, sizeof info->driver, "%s (%s)", driver.driverName,
                 driver.driverInfo);
    else
        snprintf(info->driver, sizeof info->driver, "%s", driver.driverName);
    info->vendor_id = props.properties.vendorID;
    info->device_id = props.properties.deviceID;
    info->driver_id = (uint32_t)driver.driverID;
    info->timestamps_delay_signal = driver.driverID == VK_DRIVER_ID_MESA_LLVMPIPE;
    info->type = map_type(props.properties.deviceType);
    info->api_version = props.properties.apiVersion;
    info->driver_version = props.properties.driverVersion;
    info->subgroup_size = subgroup.subgroupSize;
    info->subgroup_shuffle = (subgroup.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT) &&
                             (subgroup.supportedOperations & VK_SUBGROUP_FEATURE_SHUFFLE_BIT);
    info->max_workgroup_invocations = lim->maxComputeWorkGroupInvocations;
    for (int i = 0; i < 3; i++) {
        info->max_workgroup_size[i] = lim->maxComputeWorkGroupSize[i];
        info->max_workgroup_count[i] = lim->maxComputeWorkGroupCount[i];
    }
    info->shared_memory_bytes = lim->maxComputeSharedMemorySize;
    info->max_push_constants_bytes = lim->maxPushConstantsSize;
    info->max_storage_buffer_range = lim->maxStorageBufferRange;
    info->max_allocation_bytes = m3.maxMemoryAllocationSize;
    info->min_storage_buffer_offset_alignment = (uint32_t)lim->minStorageBufferOffsetAlignment;
    info->min_texel_buffer_offset_alignment = (uint32_t)lim->minTexelBufferOffsetAlignment;
    info->max_texel_buffer_elements = lim->maxTexelBufferElements;
    info->timestamp_period_ns = lim->timestampPeriod;
    memcpy(info->uuid, props.properties.pipelineCacheUUID, 16);

    vkGetPhysicalDeviceMemoryProperties(p->handle, &p->mem);
    for (uint32_t i = 0; i < p->mem.memoryHeapCount; i++)
        if ((p->mem.memoryHeaps[i].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT) &&
            p->mem.memoryHeaps[i].size > info->memory_bytes)
            info->memory_bytes = p->mem.memoryHeaps[i].size;
    for (uint32_t i = 0; i < p->mem.memoryTypeCount; i++) {
        VkMemoryPropertyFlags f = p->mem.memoryTypes[i].propertyFlags;
        if ((f & VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT) &&
            (f & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT) && (f & VK_MEMORY_PROPERTY_HOST_COHERENT_BIT))
            info->host_visible_device_local = true;
    }

    // The compute queue: prefer a family with timestamps; among those the first with compute.
    uint32_t nq = 0;
    vkGetPhysicalDeviceQueueFamilyProperties(p->handle, &nq, NULL);
    VkQueueFamilyProperties *q = calloc(nq ? nq : 1, sizeof *q);
    if (!q) return vkt_fail(VKT_ERR_HOST_MEMORY, "out of host memory listing queue families");
    vkGetPhysicalDeviceQueueFamilyProperties(p->handle, &nq, q);
    int best = -1;
    for (uint32_t i = 0; i < nq; i++) {
        if (!(q[i].queueFlags & VK_QUEUE_COMPUTE_BIT)) continue;
        if (best < 0 || (q[best].timestampValidBits == 0 && q[i].timestampValidBits > 0))
            best = (int)i;
    }
    if (best >= 0) {
        p->queue_family = (uint32_t)best;
        info->timestamp_valid_bits = q[best].timestampValidBits;
    }
    free(q);
    if (best < 0) return VKT_ERR_NO_DEVICE; // no compute queue: the device is skipped

    uint32_t ne = 0;
    vkEnumerateDeviceExtensionProperties(p->handle, NULL, &ne, NULL);
    VkExtensionProperties *ext = calloc(ne ? ne : 1, sizeof *ext);
    if (!ext) return vkt_fail(VKT_ERR_HOST_MEMORY, "out of host memory listing extensions");
    vkEnumerateDeviceExtensionProperties(p->handle, NULL, &ne, ext);
    info->calibrated_timestamps =
        has_device_extension(ext, ne, VK_EXT_CALIBRATED_TIMESTAMPS_EXTENSION_NAME);
    info->external_memory_host =
        has_device_extension(ext, ne, VK_EXT_EXTERNAL_MEMORY_HOST_EXTENSION_NAME);
    info->cooperative_matrix = has_device_extension(ext, ne, "VK_KHR_cooperative_matrix");
    free(ext);

    VkPhysicalDeviceFeatures feat;
    vkGetPhysicalDeviceFeatures(p->handle, &feat);
    info->shader_float64 = feat.shaderFloat64;
    return VKT_OK;
}

static vkt_status list_devices(vkt_context *ctx) {
    uint32_t n = 0;
    VKT_VK(vkEnumeratePhysicalDevices(ctx->instance, &n, NULL), "listing Vulkan devices");
    if (n == 0) return vkt_fail(VKT_ERR_NO_DEVICE, "no Vulkan device found: %s", NO_DEVICE_HINT);
    VkPhysicalDevice *handles = calloc(n, sizeof *handles);
    ctx->devices = calloc(n, sizeof *ctx->devices);
    if (!handles || !ctx->devices) {
        free(handles);
        return vkt_fail(VKT_ERR_HOST_MEMORY, "out of host memory listing devices");
    }
    VkResult r = vkEnumeratePhysicalDevices(ctx->instance, &n, handles);
    if (r != VK_SUCCESS && r != VK_INCOMPLETE) {
        free(handles);
        VKT_VK(r, "listing Vulkan devices");
    }
    for (uint32_t i = 0; i < n; i++) {
        vkt_physical *p = &ctx->devices[ctx->ndevices];
        p->handle = handles[i];
        vkt_status s = describe_device(p, ctx->ndevices);
        if (s == VKT_OK)
            ctx->ndevices++;
        else if (s != VKT_ERR_NO_DEVICE) {
            free(handles);
            return s;
        }
    }
    free(handles);
    if (ctx->ndevices == 0)
        return vkt_fail(VKT_ERR_NO_DEVICE, "no Vulkan device with a compute queue found: %s",
                        NO_DEVICE_HINT);
    return VKT_OK;
}

// ---------------------------------------------------------------------------------------------
// Public

// Copies s (NULL: "") into buf; false when it does not fit.
static bool copy_option(char *buf, size_t size, const char *s) {
    return snprintf(buf, size, "%s", s ? s : "") < (int)size;
}

vkt_status vkt_context_create(const vkt_context_desc *desc, vkt_context **out) {
    *out = NULL;
    vkt_context_desc d = desc ? *desc : (vkt_context_desc){0};
    char cache_dir[sizeof((vkt_context *)0)->cache_dir];
    char variant[sizeof((vkt_context *)0)->matmul_variant];
    if (!copy_option(cache_dir, sizeof cache_dir, d.cache_dir))
        return vkt_fail(VKT_ERR_ARG, "the cache directory's path is longer than %zu bytes",
                        sizeof cache_dir - 1);
    if (!copy_option(variant, sizeof variant, d.matmul_variant))
        return vkt_fail(VKT_ERR_ARG, "the matmul variant list is longer than %zu bytes",
                        sizeof variant - 1);
    if (volkInitialize() != VK_SUCCESS)
        return vkt_fail(
            VKT_ERR_NO_DEVICE,
            "no Vulkan device found: the Vulkan loader (libvulkan.so.1) is missing; "
            "`apt-get install libvulkan1 mesa-vulkan-drivers` installs it with lavapipe");
    vkt_context *ctx = calloc(1, sizeof *ctx);
    if (!ctx) return vkt_fail(VKT_ERR_HOST_MEMORY, "out of host memory");
    ctx->validation = d.validation == 1;
    ctx->quiet_validation = d.quiet_validation;
    memcpy(ctx->cache_dir, cache_dir, sizeof cache_dir);
    memcpy(ctx->matmul_variant, variant, sizeof variant);
    ctx->tune = d.tune;
    ctx->fuse = d.fuse;
    ctx->conv = d.conv;
    ctx->ahead = d.ahead;
    vkt_status s = create_instance(ctx);
    if (s == VKT_OK) s = list_devices(ctx);
    if (s != VKT_OK) {
        vkt_context_destroy(ctx);
        return s;
    }
    *out = ctx;
    return VKT_OK;
}

void vkt_context_destroy(vkt_context *ctx) {
    if (!ctx) return;
    if (ctx->messenger) vkDestroyDebugUtilsMessengerEXT(ctx->instance, ctx->messenger, NULL);
    if (ctx->instance) vkDestroyInstance(ctx->instance, NULL);
    free(ctx->devices);
    free(ctx);
}

void vkt_context_set_tune(vkt_context *ctx, vkt_tune_mode mode) { ctx->tune = mode; }

vkt_status vkt_context_set_matmul_variant(vkt_context *ctx, const char *names) {
    char v[sizeof ctx->matmul_variant];
    if (!copy_option(v, sizeof v, names))
        return vkt_fail(VKT_ERR_ARG, "the matmul variant list is longer than %zu bytes",
                        sizeof v - 1);
    memcpy(ctx->matmul_variant, v, sizeof v);
    return VKT_OK;
}

void vkt_context_set_fuse(vkt_context *ctx, vkt_fuse_mode fuse) { ctx->fuse = fuse; }
void vkt_context_set_conv(vkt_context *ctx, vkt_conv_mode conv) { ctx->conv = conv; }

int vkt_context_device_count(const vkt_context *ctx) { return ctx->ndevices; }

const vkt_device_info *vkt_context_device_info(const vkt_context *ctx, int index) {
    if (index < 0 || index >= ctx->ndevices) return NULL;
    return &ctx->devices[index].info;
}

const char *vkt_device_type_name(vkt_device_type t) {
    switch (t) {
    case VKT_DEVICE_INTEGRATED: return "integrated";
    case VKT_DEVICE_DISCRETE: return "discrete";
    case VKT_DEVICE_VIRTUAL: return "virtual";
    case VKT_DEVICE_CPU: return "cpu";
    default: return "other";
    }
}

void vkt_api_version_string(uint32_t v, char *buf, size_t size) {
    snprintf(buf, size, "%u.%u.%u", VK_API_VERSION_MAJOR(v), VK_API_VERSION_MINOR(v),
             VK_API_VERSION_PATCH(v));
}

static int type_rank(vkt_device_type t) {
    switch (t) {
    case VKT_DEVICE_DISCRETE: return 4;
    case VKT_DEVICE_INTEGRATED: return 3;
    case VKT_DEVICE_VIRTUAL: return 2;
    case VKT_DEVICE_CPU: return 1;
    default: return 0;
    }
}

int vkt_context_best_device(const vkt_context *ctx) {
    int best = 0;
    for (int i = 1; i < ctx->ndevices; i++) {
        const vkt_device_info *a = &ctx->devices[i].info, *b = &ctx->devices[best].info;
        int ra = type_rank(a->type), rb = type_rank(b->type);
        if (ra != rb) {
            if (ra > rb) best = i;
            continue;
        }
        // Same kind: the larger workgroups (lavapipe's 1024 against SwiftShader's 256 on CPUs),
        // then the larger memory.
        if (a->max_workgroup_invocations != b->max_workgroup_invocations) {
            if (a->max_workgroup_invocations > b->max_workgroup_invocations) best = i;
        } else if (a->memory_bytes > b->memory_bytes) {
            best = i;
        }
    }
    return best;
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

static void list_for_message(const vkt_context *ctx, char *buf, size_t size) {
    size_t len = 0;
    buf[0] = 0;
    for (int i = 0; i < ctx->ndevices && len + 1 < size; i++) {
        int w = snprintf(buf + len, size - len, "%s%d = %s [%s]", i ? "; " : "", i,
                         ctx->devices[i].info.name, ctx->devices[i].info.driver);
        if (w < 0) break;
        len += (size_t)w;
    }
}

vkt_status vkt_context_select(const vkt_context *ctx, const char *spec, int *out, int max,
                              int *count) {
    *count = 0;
    if (!spec || !*spec) {
        if (max < 1) return vkt_fail(VKT_ERR_ARG, "no room for a device");
        out[0] = vkt_context_best_device(ctx);
        *count = 1;
        return VKT_OK;
    }
    char list[700];
    const char *p = spec;
    while (*p) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        char item[128];
        if (len == 0 || len >= sizeof item) {
            list_for_message(ctx, list, sizeof list);
            return vkt_fail(VKT_ERR_NO_DEVICE, "bad --device item in \"%s\"; the devices are: %s",
                            spec, list);
        }
        memcpy(item, p, len);
        item[len] = 0;
        int found = -1;
        char *num_end = NULL;
        long idx = strtol(item, &num_end, 10);
        if (*num_end == 0) {
            if (idx >= 0 && idx < ctx->ndevices) found = (int)idx;
        } else {
            const char *needle = strcmp(item, "lavapipe") == 0 || strcmp(item, "LAVAPIPE") == 0 ||
                                         icontains(item, "lavapipe")
                                     ? "llvmpipe"
                                     : item;
            for (int i = 0; i < ctx->ndevices && found < 0; i++)
                if (icontains(ctx->devices[i].info.name, needle) ||
                    icontains(ctx->devices[i].info.driver, needle))
                    found = i;
        }
        if (found < 0) {
            list_for_message(ctx, list, sizeof list);
            return vkt_fail(VKT_ERR_NO_DEVICE,
                            "--device item \"%s\" matches no device; the devices are: %s", item,
                            list);
        }
        if (*count >= max) return vkt_fail(VKT_ERR_ARG, "--device lists more than %d devices", max);
        out[(*count)++] = found;
        p = end ? end + 1 : p + len;
        if (end && !*p) {
            list_for_message(ctx, list, sizeof list);
            return vkt_fail(VKT_ERR_NO_DEVICE,
                            "--device \"%s\" ends with a comma; the devices are: %s", spec, list);
        }
    }
    return VKT_OK;
}
