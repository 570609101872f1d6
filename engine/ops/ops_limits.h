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

// Tests only (matmul.c): the storage range at which vkt_op_matmul splits products, when lower than
// the device's maxStorageBufferRange, for every device of the process; 0 restores the devices'
// own. Set it before recording, from one thread.
void vkt_matmul_test_range(uint64_t bytes);
// Tests only: how many blocks of rows, of columns and K-chunks vkt_op_matmul cuts a product of
// this form and shape into on ops' device (1, 1, 1: one dispatch of the whole), into blocks[3].
void vkt_matmul_test_plan(vkt_ops *ops, vkt_mm_form form, uint32_t M, uint32_t N, uint32_t K,
                          uint32_t blocks[3]);

#endif
