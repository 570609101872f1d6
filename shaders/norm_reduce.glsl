// norm_reduce.glsl: the workgroup sums of the normalisation kernels (norm_bn_stats.comp,
// norm_bn_bwd_sums.comp). Included, not compiled on its own. The workgroup size W (local_size_x)
// is a power of two (norm_ops.c); every lane of the workgroup calls each sum (they contain
// barriers). Each lane's value goes to shared memory and the halves are added pairwise, log2(W)
// levels: a fixed order, so the result is the same on every run.
layout(local_size_x_id = VKT_SPEC_LOCAL_X) in;

shared vec2 norm_red[gl_WorkGroupSize.x];

vec2 norm_wg_sum(vec2 v) {
    uint l = gl_LocalInvocationID.x;
    norm_red[l] = v;
    barrier();
    for (uint s = gl_WorkGroupSize.x / 2u; s > 0u; s /= 2u) {
        if (l < s) norm_red[l] += norm_red[l + s];
        barrier();
    }
    vec2 t = norm_red[0];
    barrier(); // the array is written again by the next sum
    return t;
}
