// rows.glsl: the row layout shared by softmax_xent.comp, mse.comp and accuracy.comp (included,
// not compiled on its own). Rows of C columns, W = local_size_x invocations per workgroup.
//   ROW_MODE 0: one invocation per row, walking its C columns (narrow rows, or devices without
//               subgroup shuffles).
//   ROW_MODE 1: a team of TEAM consecutive invocations per row (W / TEAM rows per workgroup),
//               lane l of the team taking columns l, l+TEAM, ... (neighbouring lanes read
//               neighbouring floats). TEAM divides the subgroup size, so a team lies inside one
//               subgroup and combines its partials with subgroupShuffleXor butterflies: no
//               shared memory and no barrier (each barrier costs microseconds on lavapipe and
//               SwiftShader, which made one workgroup per row several times slower than one
//               invocation per row there). Every lane of a butterfly computes a+b as its partner computes
//               b+a, so all lanes end with bitwise the same total.
#extension GL_KHR_shader_subgroup_shuffle : enable

layout(local_size_x_id = VKT_SPEC_LOCAL_X) in;
layout(constant_id = 3) const uint ROW_MODE = 0;
layout(constant_id = 4) const uint TEAM = 1;

// The row of this invocation; groups are folded into y.
uint row_index() {
    uint group = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
    return (group * gl_WorkGroupSize.x + gl_LocalInvocationID.x) / (ROW_MODE == 0 ? 1u : TEAM);
}
// First column and column stride of this invocation within its row.
uint col_first() { return ROW_MODE == 0 ? 0u : gl_LocalInvocationID.x % TEAM; }
uint col_step() { return ROW_MODE == 0 ? 1u : TEAM; }

float row_max(float v) {
    if (ROW_MODE == 0) return v;
    [[unroll]] for (uint o = TEAM / 2; o > 0; o /= 2) v = max(v, subgroupShuffleXor(v, o));
    return v;
}

float row_sum(float v) {
    if (ROW_MODE == 0) return v;
    [[unroll]] for (uint o = TEAM / 2; o > 0; o /= 2) v += subgroupShuffleXor(v, o);
    return v;
}
