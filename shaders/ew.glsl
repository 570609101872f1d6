// ew.glsl: the skeleton of the elementwise shaders (act, scale, clip_scale, sgd, adamw; sumsq
// reads the same way). Included, not compiled on its own.
//
// Every array of n floats is bound twice, as float[] and as vec4[] (the same view): an invocation
// handles EW_K vec4s (slots group*W*EW_K + k*W + l, so that neighbouring invocations touch
// neighbouring vec4s), reading and writing them whole through the vec4 binding, which is several
// times faster than one float per invocation on lavapipe and SwiftShader (docs/PERFORMANCE.md,
// "The other kernels"); only the last, partial vec4
// of an n that is not a multiple of 4 goes through the float binding (one lane, one workgroup),
// never past element n-1.
// Workgroups are folded into y (group = y * numX + x).
layout(local_size_x_id = VKT_SPEC_LOCAL_X) in;

const uint EW_K = 4; // vec4s per invocation (ops_nn.c's EW_FLOATS = 4 * EW_K)

// v = the vec4 at slot q of array a (vec4 view a4) when m = min(4, n - 4q) of its elements are
// valid; missing lanes read 0. Statements, not expressions: a ?: over buffer loads compiles to a
// select that performs the scalar loads too (slower on both drivers).
#define EW_LOAD(v, a, a4, q, m) EW_LOAD_FROM(v, a, a4[q], q, m)
// The same with the whole vec4s read through a uniform texel buffer t of the array (vec4
// texels): on lavapipe a texel fetch is a branch-free gather where a storage-buffer load is a
// loop over the lanes (engine/ops/ops_nn.c: texel_reads). The partial vec4 still reads floats.
#define EW_LOAD_TEXEL(v, a, t, q, m) EW_LOAD_FROM(v, a, texelFetch(t, int(q)), q, m)
// whole: the expression that reads the whole vec4 at slot q.
#define EW_LOAD_FROM(v, a, whole, q, m)                                                         \
    if ((m) == 4u) {                                                                           \
        v = whole;                                                                             \
    } else {                                                                                   \
        v = vec4(a[4u * (q)], 0.0, 0.0, 0.0);                                                  \
        if ((m) > 1u) v.y = a[4u * (q) + 1u];                                                  \
        if ((m) > 2u) v.z = a[4u * (q) + 2u];                                                  \
    }
#define EW_STORE(a, a4, q, m, v)                                                                \
    if ((m) == 4u) {                                                                           \
        a4[q] = (v);                                                                           \
    } else {                                                                                   \
        a[4u * (q)] = (v).x;                                                                   \
        if ((m) > 1u) a[4u * (q) + 1u] = (v).y;                                                \
        if ((m) > 2u) a[4u * (q) + 2u] = (v).z;                                                \
    }

// Defined by the including shader: process the vec4 at slot q, m of whose lanes are valid.
void ew_apply(uint q, uint m);

void ew_run(uint n) {
    uint group = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
    uint first = group * gl_WorkGroupSize.x * EW_K + gl_LocalInvocationID.x;
    uint nfull = n / 4u, rest = n % 4u;
    [[unroll]] for (uint k = 0; k < EW_K; k++) {
        uint q = first + k * gl_WorkGroupSize.x;
        if (q < nfull) ew_apply(q, 4u);
    }
    // The partial vec4, by one lane of the workgroup whose range holds it. The test is the same
    // for the whole workgroup: lavapipe and SwiftShader run both sides of a branch that may
    // differ between lanes, and with the tail code in such a branch every op took much longer.
    if (rest != 0u && group == nfull / (gl_WorkGroupSize.x * EW_K)) {
        if (gl_LocalInvocationID.x == 0u) ew_apply(nfull, rest);
    }
}
