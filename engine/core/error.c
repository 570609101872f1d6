// error.c: status codes and the per-thread error message. A failing function writes one line
// saying what happened and what to do; the CLI prints it and exits non-zero.
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "vkt_internal.h"

static _Thread_local char g_error[1024];

const char *vkt_error(void) { return g_error; }

vkt_status vkt_fail(vkt_status s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_error, sizeof g_error, fmt, ap);
    va_end(ap);
    return s;
}

vkt_status vkt_set_error(vkt_status s, const char *message) {
    return vkt_fail(s, "%s", message ? message : "");
}

const char *vkt_status_name(vkt_status s) {
    switch (s) {
    case VKT_OK: return "VKT_OK";
    case VKT_ERR_NO_DEVICE: return "VKT_ERR_NO_DEVICE";
    case VKT_ERR_ARG: return "VKT_ERR_ARG";
    case VKT_ERR_VULKAN: return "VKT_ERR_VULKAN";
    case VKT_ERR_DEVICE_MEMORY: return "VKT_ERR_DEVICE_MEMORY";
    case VKT_ERR_HOST_MEMORY: return "VKT_ERR_HOST_MEMORY";
    case VKT_ERR_IO: return "VKT_ERR_IO";
    case VKT_ERR_FORMAT: return "VKT_ERR_FORMAT";
    case VKT_ERR_NUMERIC: return "VKT_ERR_NUMERIC";
    case VKT_ERR_TIMEOUT: return "VKT_ERR_TIMEOUT";
    }
    return "VKT_ERR_?";
}

const char *vkt_result_name(VkResult r) {
    switch (r) {
#define R(x)                                                                                       \
    case x: return #x;
        R(VK_SUCCESS)
        R(VK_NOT_READY)
        R(VK_TIMEOUT) R(VK_EVENT_SET) R(VK_EVENT_RESET) R(VK_INCOMPLETE) R(
            VK_ERROR_OUT_OF_HOST_MEMORY) R(VK_ERROR_OUT_OF_DEVICE_MEMORY)
            R(VK_ERROR_INITIALIZATION_FAILED) R(VK_ERROR_DEVICE_LOST) R(VK_ERROR_MEMORY_MAP_FAILED)
                R(VK_ERROR_LAYER_NOT_PRESENT) R(VK_ERROR_EXTENSION_NOT_PRESENT)
                    R(VK_ERROR_FEATURE_NOT_PRESENT) R(VK_ERROR_INCOMPATIBLE_DRIVER)
                        R(VK_ERROR_TOO_MANY_OBJECTS) R(VK_ERROR_FORMAT_NOT_SUPPORTED)
                            R(VK_ERROR_FRAGMENTED_POOL) R(VK_ERROR_UNKNOWN) R(
                                VK_ERROR_OUT_OF_POOL_MEMORY) R(VK_ERROR_INVALID_EXTERNAL_HANDLE)
                                R(VK_ERROR_FRAGMENTATION) R(VK_ERROR_INVALID_OPAQUE_CAPTURE_ADDRESS)
                                    R(VK_PIPELINE_COMPILE_REQUIRED) R(VK_ERROR_SURFACE_LOST_KHR)
                                        R(VK_ERROR_NATIVE_WINDOW_IN_USE_KHR) R(VK_SUBOPTIMAL_KHR)
                                            R(VK_ERROR_OUT_OF_DATE_KHR)
                                                R(VK_ERROR_VALIDATION_FAILED_EXT)
#undef R
                                                    default : return "VK_RESULT_UNKNOWN";
    }
}

vkt_status vkt_vk_fail(VkResult r, const char *call, const char *what, const char *file, int line) {
    vkt_status s = VKT_ERR_VULKAN;
    const char *hint = "";
    if (r == VK_ERROR_OUT_OF_DEVICE_MEMORY) {
        s = VKT_ERR_DEVICE_MEMORY;
        hint = " (the device is out of memory: use a smaller batch or model, or split the model "
               "across devices with --strategy layers)";
    } else if (r == VK_ERROR_OUT_OF_HOST_MEMORY) {
        s = VKT_ERR_HOST_MEMORY;
    } else if (r == VK_ERROR_DEVICE_LOST) {
        hint = " (the device was lost: the driver crashed or reset it)";
    }
    return vkt_fail(s, "Vulkan call failed while %s: %s returned %s at %s:%d%s", what, call,
                    vkt_result_name(r), file, line, hint);
}

_Noreturn void vkt_abort(const char *what, const char *file, int line) {
    fprintf(stderr, "vktrain: internal error: %s (%s:%d)\n", what, file, line);
    abort();
}
