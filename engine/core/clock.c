// clock.c: the offset between a device's timestamp clock and the host clock (CLOCK_MONOTONIC),
// so that GPU timestamps of several devices land on one host timeline (engine/core/trace.c).
// Two ways: VK_EXT_calibrated_timestamps where the device has it (lavapipe does), which samples
// both clocks at once; otherwise a submitted command buffer that writes one timestamp, bracketed
// by host clock reads before the submit and after the wait (SwiftShader). Not here: drift
// correction over long runs (calibrate again between epochs if it matters).
#include <stdlib.h>
#include <time.h>

#include "trace.h"
#include "vkt_internal.h"

#define CALIBRATION_SAMPLES 8
#define BRACKET_ROUNDS 12

static int64_t host_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

// Device ticks -> ns exactly as cmd.c converts query results, so that offsets apply to them.
static int64_t ticks_to_ns(const vkt_device *dev, uint64_t ticks) {
    uint32_t bits = dev->info->timestamp_valid_bits;
    uint64_t mask = bits >= 64 ? ~0ull : (1ull << bits) - 1;
    return (int64_t)(uint64_t)((double)(ticks & mask) * dev->info->timestamp_period_ns);
}

static bool has_domains(const vkt_device *dev) {
    if (!dev->info->calibrated_timestamps || !vkGetPhysicalDeviceCalibrateableTimeDomainsEXT ||
        !dev->vk.vkGetCalibratedTimestampsEXT)
        return false;
    uint32_t n = 0;
    if (vkGetPhysicalDeviceCalibrateableTimeDomainsEXT(dev->phys->handle, &n, NULL) != VK_SUCCESS)
        return false;
    VkTimeDomainEXT domains[16];
    if (n > 16) n = 16;
    VkResult r = vkGetPhysicalDeviceCalibrateableTimeDomainsEXT(dev->phys->handle, &n, domains);
    if (r != VK_SUCCESS && r != VK_INCOMPLETE) return false;
    bool device = false, monotonic = false;
    for (uint32_t i = 0; i < n; i++) {
        device |= domains[i] == VK_TIME_DOMAIN_DEVICE_EXT;
        monotonic |= domains[i] == VK_TIME_DOMAIN_CLOCK_MONOTONIC_EXT;
    }
    return device && monotonic;
}

// Several simultaneous samples of both clocks; the one the driver says is tightest wins.
static vkt_status calibrated(vkt_device *dev, int64_t *offset, int64_t *uncertainty) {
    VkCalibratedTimestampInfoEXT info[2] = {
        {.sType = VK_STRUCTURE_TYPE_CALIBRATED_TIMESTAMP_INFO_EXT,
         .timeDomain = VK_TIME_DOMAIN_DEVICE_EXT},
        {.sType = VK_STRUCTURE_TYPE_CALIBRATED_TIMESTAMP_INFO_EXT,
         .timeDomain = VK_TIME_DOMAIN_CLOCK_MONOTONIC_EXT},
    };
    uint64_t best_dev = UINT64_MAX;
    for (int i = 0; i < CALIBRATION_SAMPLES; i++) {
        uint64_t ts[2], deviation = 0;
        VKT_VK(dev->vk.vkGetCalibratedTimestampsEXT(dev->handle, 2, info, ts, &deviation),
               "reading calibrated timestamps");
        if (deviation < best_dev) {
            best_dev = deviation;
            *offset = (int64_t)ts[1] - ticks_to_ns(dev, ts[0]);
        }
    }
    // The deviation is in ns; one tick of rounding on top of it.
    *uncertainty = (int64_t)best_dev + (int64_t)(dev->info->timestamp_period_ns + 1.0f);
    return VKT_OK;
}

// Each round gives an interval that must hold the offset: the device wrote its stamp d after
// the host read h0 and before the host read h1, so offset is in [h0 - d, h1 - d]. Without drift
// all rounds hold the same offset, so their intersection is the estimate; if rounds disagree
// (the clocks are not the same rate), the narrowest single round is used instead.
static vkt_status bracketed(vkt_device *dev, int64_t *offset, int64_t *uncertainty) {
    VkQueryPool pool = VK_NULL_HANDLE;
    VkCommandBuffer cb = VK_NULL_HANDLE;
    vkt_status st = VKT_OK;
    VkResult r;
    VkQueryPoolCreateInfo qci = {
        .sType = VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO,
        .queryType = VK_QUERY_TYPE_TIMESTAMP,
        .queryCount = 1,
    };
    VkCommandBufferAllocateInfo ai = {
        .sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
        .commandPool = dev->pool,
        .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY,
        .commandBufferCount = 1,
    };
    VkCommandBufferBeginInfo bi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
    if ((r = dev->vk.vkCreateQueryPool(dev->handle, &qci, NULL, &pool)) != VK_SUCCESS ||
        (r = dev->vk.vkAllocateCommandBuffers(dev->handle, &ai, &cb)) != VK_SUCCESS ||
        (r = dev->vk.vkBeginCommandBuffer(cb, &bi)) != VK_SUCCESS) {
        st = vkt_vk_fail(r, "vkCreateQueryPool/vkAllocateCommandBuffers/vkBeginCommandBuffer",
                         "preparing clock calibration", __FILE__, __LINE__);
        goto done;
    }
    dev->vk.vkCmdResetQueryPool(cb, pool, 0, 1);
    dev->vk.vkCmdWriteTimestamp(cb, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, pool, 0);
    if ((r = dev->vk.vkEndCommandBuffer(cb)) != VK_SUCCESS) {
        st =
            vkt_vk_fail(r, "vkEndCommandBuffer", "preparing clock calibration", __FILE__, __LINE__);
        goto done;
    }
    int64_t lo = INT64_MIN, hi = INT64_MAX, best_lo = 0, best_hi = INT64_MAX;
    for (int i = 0; i < BRACKET_ROUNDS; i++) {
        uint64_t value, stamp = 0;
        int64_t h0 = host_ns();
        if ((st = vkt_device_submit(dev, cb, &value)) != VKT_OK) goto done;
        if ((st = vkt_device_wait_value(dev, value, VKT_WAIT_MS)) != VKT_OK) goto done;
        int64_t h1 = host_ns();
        r = dev->vk.vkGetQueryPoolResults(dev->handle, pool, 0, 1, sizeof stamp, &stamp,
                                          sizeof stamp,
                                          VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT);
        if (r != VK_SUCCESS) {
            st = vkt_vk_fail(r, "vkGetQueryPoolResults", "reading the calibration timestamp",
                             __FILE__, __LINE__);
            goto done;
        }
        int64_t d = ticks_to_ns(dev, stamp);
        int64_t a = h0 - d, b = h1 - d;
        if (a > lo) lo = a;
        if (b < hi) hi = b;
        if (b - a < best_hi - best_lo) best_lo = a, best_hi = b;
    }
    if (lo > hi) lo = best_lo, hi = best_hi;
    *offset = lo + (hi - lo) / 2;
    *uncertainty = (hi - lo + 1) / 2 + (int64_t)(dev->info->timestamp_period_ns + 1.0f);
done:
    if (cb) dev->vk.vkFreeCommandBuffers(dev->handle, dev->pool, 1, &cb);
    if (pool) dev->vk.vkDestroyQueryPool(dev->handle, pool, NULL);
    return st;
}

vkt_status vkt_device_clock_offset(vkt_device *dev, int64_t *offset_ns, int64_t *uncertainty_ns,
                                   const char **method) {
    if (dev->info->timestamp_valid_bits == 0)
        return vkt_fail(VKT_ERR_ARG,
                        "device %s has no timestamps on its compute queue, so its "
                        "work cannot be placed on the trace's timeline",
                        dev->label);
    // Everything submitted before must be finished, or the bracket would time that work too.
    VKT_TRY(vkt_device_wait_idle(dev));
    if (has_domains(dev)) {
        *method = "calibrated_timestamps";
        return calibrated(dev, offset_ns, uncertainty_ns);
    }
    *method = "submit_bracket";
    return bracketed(dev, offset_ns, uncertainty_ns);
}
