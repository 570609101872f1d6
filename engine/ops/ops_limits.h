// ops_limits.h: workgroup shapes from a device's limits, shared by the files of engine/ops/
// (defined in ops_nn.c). Not installed.
#ifndef VKT_OPS_LIMITS_H
#define VKT_OPS_LIMITS_H

#include <stdbool.h>
#include <stdint.h>

#include "ops.h"

// Invocations of a 1-D workgroup: 256, or fewer where the device allows fewer.
uint32_t vkt_ops_wg_1d(vkt_ops *ops);
// Whether the device's compute shaders have subgroupShuffleXor (rows.glsl's teams).
bool vkt_ops_has_shuffle(vkt_ops *ops);

#endif
