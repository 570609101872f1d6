// pool_ops.c: the pooling ops of pool_ops.h. Windows that do not overlap (stride == kernel, as
// the common 2x2 stride 2) run pool_nov.glsl, one invocation per unit of 4 windows of an output
// row: maxpool2d's backward there (every driver) and the forward on lavapipe, which reads through
// texel buffers. Other windows run one invocation per element (an output element forward, an
// input element for the gather backward); global_avgpool's mean a team of lanes per plane.
// Measured on lavapipe at a batch of 128 (GPU time, tests/test_pool.c's shapes aside): maxpool2d
// 2x2 backward over [32, 28, 28] 54 -> 6.2 ms, over [64, 14, 14] 27 -> 3.8 ms; forward 7.8 -> 2.7
// and 3.9 -> 1.9 ms; on SwiftShader the backward 2.7x faster, the forward unchanged.
//
// Every plane is independent of the others, so a view larger than the device's
// maxStorageBufferRange (a batch of 512 of 64 x 56 x 56 floats is 411 MB; lavapipe's range is 128
// MiB) is cut into slices of whole planes, one dispatch each. A slice's binding starts at the
// aligned offset at or below its first plane and the kernel skips the floats between
// (pool_abi.h), so planes of any size slice at any plane; slices whose bindings so overlap the
// previous slice's are ordered by a barrier.
//
// Not here: the layer kinds' shapes and parsing (engine/nn/layers/pool.c).
#include "pool_ops.h"

#include <string.h>

#include "pool_abi.h"
#include "ops_limits.h"
#include "vkt_internal.h"
#include "vkt_shaders.h"

// Planes of more elements than this get a team of lanes each for their mean (as ops_nn.c's row
// ops: narrower rows get an invocation each).
#define POOL_TEAM_MIN_ELEMS 32u
// The most invocations of one dispatch: the kernels' flat index is a uint.
#define POOL_MAX_INVOCATIONS (1ull << 31)

static const vkt_device_info *info_of(vkt_ops *ops) {
    return vkt_device_get_info(vkt_ops_device(ops));
}

uint32_t vkt_pool2d_out_plane(const vkt_pool2d *s) {
    VKT_ASSERT(s->kh >= 1 && s->kw >= 1 && s->sh >= 1 && s->sw >= 1);
    VKT_ASSERT(s->kh <= s->h && s->kw <= s->w);
    return ((s->h - s->kh) / s->sh + 1) * ((s->w - s->kw) / s->sw + 1);
}

// ---------------------------------------------------------------------------------------------
// Dispatch over planes, sliced to the device's storage-buffer range

// One binding: a view of per_plane floats for each plane; *off is its offK in the push.
typedef struct pool_arg {
    vkt_view v;
    uint64_t per_plane;
    uint32_t *off;
} pool_arg;

#define POOL_MAX_ARGS 5

// How a kernel covers its planes: per_plane invocations each (per_group to a workgroup), at most
// max_inv in one dispatch; texel: some bindings are uniform texel buffers (slices of a multiple
// of 4 planes, bound at offsets aligned for texel views too, so that each is whole texels where
// the whole view is).
typedef struct pool_grid {
    uint64_t per_plane;
    uint32_t per_group;
    uint64_t max_inv;
    bool texel;
} pool_grid;

// Records k over `planes` planes; *planes_field and the args' *off are members of push,
// rewritten for each slice.
static void pool_dispatch(vkt_cmd *cmd, vkt_ops *ops, vkt_kernel *k, const pool_arg *args,
                          int nargs, void *push, uint32_t push_size, uint32_t *planes_field,
                          uint32_t planes, pool_grid grid, const char *label) {
    if (!k || planes == 0) return; // a kernel that did not build is reported by vkt_ops_status
    VKT_ASSERT(nargs <= POOL_MAX_ARGS && grid.per_plane > 0);
    const vkt_device_info *d = info_of(ops);
    uint64_t range = d->max_storage_buffer_range, align = d->min_storage_buffer_offset_alignment;
    if (align < 4) align = 4;
    if (grid.texel && d->min_texel_buffer_offset_alignment > align)
        align = d->min_texel_buffer_offset_alignment; // both are powers of two
    if (grid.texel && 16ull * d->max_texel_buffer_elements < range)
        range = 16ull * d->max_texel_buffer_elements;
    // Planes per slice: every binding within the range even when it starts align - 4 bytes
    // before its first plane, and the invocations within the kernel's limit.
    uint64_t chunk = grid.max_inv / grid.per_plane;
    if (chunk > planes) chunk = planes;
    for (int i = 0; i < nargs; i++) {
        uint64_t bytes = 4 * args[i].per_plane;
        VKT_ASSERT(args[i].v.size >= bytes * planes);    // the view must hold the op's shape
        VKT_ASSERT(args[i].v.offset % align == 0);       // as every view is
        VKT_ASSERT(bytes > 0 && bytes + align <= range); // (the parser: 2^24 floats a sample)
        uint64_t fit = (range - align) / bytes;
        if (fit < chunk) chunk = fit;
    }
    if (grid.texel && chunk < planes) chunk = chunk / 4 * 4;
    VKT_ASSERT(chunk > 0);
    const uint32_t *maxc = d->max_workgroup_count;
    for (uint64_t p0 = 0; p0 < planes; p0 += chunk) {
        uint64_t np = planes - p0 < chunk ? planes - p0 : chunk;
        vkt_view bind[POOL_MAX_ARGS];
        bool overlaps = false;
        for (int i = 0; i < nargs; i++) {
            uint64_t start = args[i].v.offset + 4 * args[i].per_plane * p0;
            uint64_t at = start / align * align;
            bind[i] = args[i].v;
            bind[i].offset = at;
            bind[i].size = start - at + 4 * args[i].per_plane * np;
            *args[i].off = (uint32_t)((start - at) / 4);
            overlaps |= at < start;
        }
        *planes_field = (uint32_t)np;
        uint64_t groups = (np * grid.per_plane + grid.per_group - 1) / grid.per_group;
        // Fold the workgroups into y: maxComputeWorkGroupCount[0] is only 65535 on many devices.
        uint64_t gx = groups < maxc[0] ? groups : maxc[0];
        uint64_t gy = (groups + gx - 1) / gx;
        VKT_ASSERT(gy <= maxc[1]);
        // A slice bound from below its first plane overlaps the previous slice's bindings: the
        // bound ranges are what synchronization validation tracks, so order the two.
        if (p0 > 0 && overlaps) vkt_cmd_barrier(cmd);
        vkt_cmd_dispatch(cmd, k, bind, nargs, push, push_size, (uint32_t)gx, (uint32_t)gy, 1,
                         label);
    }
}

// A grid of one invocation per element of a plane (per_plane of them).
static pool_grid grid_elems(vkt_ops *ops, uint64_t per_plane) {
    return (pool_grid){
        .per_plane = per_plane, .per_group = vkt_ops_wg_1d(ops), .max_inv = POOL_MAX_INVOCATIONS};
}

static vkt_pool_push push_of(const vkt_pool2d *s) {
    return (vkt_pool_push){.h = s->h,
                           .w = s->w,
                           .oh = (s->h - s->kh) / s->sh + 1,
                           .ow = (s->w - s->kw) / s->sw + 1,
                           .kh = s->kh,
                           .kw = s->kw,
                           .sh = s->sh,
                           .sw = s->sw};
}

// ---------------------------------------------------------------------------------------------
// The ops

// Windows that do not overlap (stride == kernel) run pool_nov.glsl: units of 4 windows of an
// output row, each element read once and, in the backward, each input gradient written once
// without finding any window's maximum again. Larger windows than this keep the one-invocation-
// per-element kernels (the unit's loops unroll on lavapipe: KH x KW x 4 reads).
#define POOL_NOV_MAX_WINDOW 64u
// Units per dispatch of a pool_nov kernel: its float divisions are exact below 2^24.
#define POOL_NOV_MAX_UNITS (1ull << 24)

static bool nov_applies(const vkt_pool2d *s) {
    return s->sh == s->kh && s->sw == s->kw && s->kh * s->kw <= POOL_NOV_MAX_WINDOW;
}

// Whether the pool_nov kernels read x (and dy) through texel buffers: on lavapipe (as ops_nn.c's
// texel_reads), when each view is whole texels (slices of 4 planes: pool_dispatch) at offsets a
// texel view may take.
static bool nov_texel(vkt_ops *ops, const vkt_pool2d *s, vkt_view x, vkt_view dy) {
    const vkt_device_info *d = info_of(ops);
    uint64_t in = (uint64_t)s->planes * s->h * s->w, out = s->planes * vkt_pool2d_out_plane(s);
    return d->driver_id == VK_DRIVER_ID_MESA_LLVMPIPE && in % 4 == 0 && out % 4 == 0 &&
           vkt_texel_offset_ok(d, x.offset) && vkt_texel_offset_ok(d, dy.offset);
}

// The largest of 4, 2 and 1 that divides n.
static uint32_t align_of(uint32_t n) { return n % 4 == 0 ? 4 : n % 2 == 0 ? 2 : 1; }

static void nov_record(vkt_cmd *cmd, vkt_ops *ops, bool bwd, vkt_pool_mode mode, vkt_view out,
                       vkt_view dy, vkt_view x, const vkt_pool2d *s, const char *label) {
    bool texel = nov_texel(ops, s, x, bwd ? dy : x);
    VKT_ASSERT(texel || bwd); // the forward through storage buffers is pool_window's
    vkt_shader_id shader = !bwd    ? VKT_SHADER_POOL_NOV_FWD_TEXEL
                           : texel ? VKT_SHADER_POOL_NOV_BWD_TEXEL
                                   : VKT_SHADER_POOL_NOV_BWD;
    uint32_t wg = vkt_ops_wg_1d(ops);
    uint32_t oh = s->h / s->kh, ow = s->w / s->kw;
    uint32_t groups = (ow + VKT_POOL_NOV_UNIT - 1) / VKT_POOL_NOV_UNIT;
    uint32_t rows = oh + (bwd && s->h % s->kh ? 1 : 0);
    // Texel slices start on multiples of 4 planes at 16-byte offsets (pool_dispatch), so every
    // row of x and dx starts on a multiple of align_of(w) floats, of y and dy of align_of(ow).
    uint32_t spec[8] = {wg,
                        1,
                        1,
                        s->kh,
                        s->kw,
                        mode == VKT_POOL_MAX ? VKT_POOL_MODE_MAX : VKT_POOL_MODE_AVG,
                        texel ? align_of(s->w) : 1,
                        texel ? align_of(ow) : 1};
    vkt_kernel *k = vkt_ops_kernel(ops, shader, spec, 8);
    vkt_pool_nov_push p = {.h = s->h,
                           .w = s->w,
                           .oh = oh,
                           .ow = ow,
                           .groups = groups,
                           .upp = rows * groups,
                           .inv_groups = 1.0f / (float)groups,
                           .inv_upp = 1.0f / (float)(rows * groups)};
    uint64_t in = (uint64_t)s->h * s->w, o = (uint64_t)oh * ow;
    pool_grid grid = {
        .per_plane = p.upp, .per_group = wg, .max_inv = POOL_NOV_MAX_UNITS, .texel = texel};
    if (bwd) {
        pool_arg args[5] = {{x, in, &p.off0},
                            {dy, o, &p.off1},
                            {out, in, &p.off2},
                            {out, in, &p.off2},
                            {out, in, &p.off2}};
        pool_dispatch(cmd, ops, k, args, texel ? 5 : 3, &p, sizeof p, &p.planes, s->planes, grid,
                      label);
    } else {
        pool_arg args[4] = {
            {x, in, &p.off0}, {out, o, &p.off1}, {out, o, &p.off1}, {out, o, &p.off1}};
        pool_dispatch(cmd, ops, k, args, 4, &p, sizeof p, &p.planes, s->planes, grid, label);
    }
}

void vkt_op_pool2d_forward(vkt_cmd *cmd, vkt_ops *ops, vkt_pool_mode mode, vkt_view y, vkt_view x,
                           const vkt_pool2d *s, const char *label) {
    uint32_t out = vkt_pool2d_out_plane(s);
    // Through storage buffers (SwiftShader) the unit kernel measured 10-25% slower forward than
    // one invocation per output; through lavapipe's texel buffers about 3x faster.
    if (nov_applies(s) && nov_texel(ops, s, x, x)) {
        nov_record(cmd, ops, false, mode, y, x, x, s, label);
        return;
    }
    uint32_t wg = vkt_ops_wg_1d(ops);
    uint32_t spec[4] = {wg, 1, 1, mode == VKT_POOL_MAX ? VKT_POOL_MODE_MAX : VKT_POOL_MODE_AVG};
    vkt_kernel *k = vkt_ops_kernel(ops, VKT_SHADER_POOL_WINDOW, spec, 4);
    vkt_pool_push p = push_of(s);
    pool_arg args[2] = {{x, (uint64_t)s->h * s->w, &p.off0}, {y, out, &p.off1}};
    pool_dispatch(cmd, ops, k, args, 2, &p, sizeof p, &p.planes, s->planes, grid_elems(ops, out),
                  label);
}

void vkt_op_pool2d_backward(vkt_cmd *cmd, vkt_ops *ops, vkt_pool_mode mode, vkt_view dx,
                            vkt_view dy, vkt_view x, const vkt_pool2d *s, const char *label) {
    uint32_t out = vkt_pool2d_out_plane(s);
    if (mode == VKT_POOL_MAX && nov_applies(s)) {
        nov_record(cmd, ops, true, mode, dx, dy, x, s, label);
        return;
    }
    uint64_t in = (uint64_t)s->h * s->w;
    uint32_t spec[3] = {vkt_ops_wg_1d(ops), 1, 1};
    vkt_pool_push p = push_of(s);
    if (mode == VKT_POOL_MAX) {
        vkt_kernel *k = vkt_ops_kernel(ops, VKT_SHADER_POOL_MAX_BWD, spec, 3);
        pool_arg args[3] = {{x, in, &p.off0}, {dy, out, &p.off1}, {dx, in, &p.off2}};
        pool_dispatch(cmd, ops, k, args, 3, &p, sizeof p, &p.planes, s->planes, grid_elems(ops, in),
                      label);
    } else {
        vkt_kernel *k = vkt_ops_kernel(ops, VKT_SHADER_POOL_AVG_BWD, spec, 3);
        pool_arg args[2] = {{dy, out, &p.off0}, {dx, in, &p.off1}};
        pool_dispatch(cmd, ops, k, args, 2, &p, sizeof p, &p.planes, s->planes, grid_elems(ops, in),
                      label);
    }
}

void vkt_op_global_avgpool_forward(vkt_cmd *cmd, vkt_ops *ops, vkt_view y, vkt_view x,
                                   uint32_t planes, uint32_t hw, const char *label) {
    VKT_ASSERT(hw > 0);
    uint32_t wg = vkt_ops_wg_1d(ops), team = 1;
    if (hw > POOL_TEAM_MIN_ELEMS && vkt_ops_has_shuffle(ops)) {
        // A power of two that divides the subgroup (so that a team never straddles two) and the
        // workgroup, with about 8 or more elements per lane (ops_nn.c's rule for row ops).
        uint32_t sg = info_of(ops)->subgroup_size, cap = sg < 32 ? sg : 32;
        while (team < cap && team < wg && team * 8 <= hw)
            team *= 2;
    }
    uint32_t spec[5] = {wg, 1, 1, team > 1 ? 1 : 0, team};
    vkt_kernel *k = vkt_ops_kernel(ops, VKT_SHADER_POOL_GLOBAL, spec, 5);
    vkt_pool_rows_push p = {.hw = hw};
    pool_arg args[2] = {{x, hw, &p.off0}, {y, 1, &p.off1}};
    pool_grid grid = {.per_plane = team, .per_group = wg, .max_inv = POOL_MAX_INVOCATIONS};
    pool_dispatch(cmd, ops, k, args, 2, &p, sizeof p, &p.planes, planes, grid, label);
}

void vkt_op_global_avgpool_backward(vkt_cmd *cmd, vkt_ops *ops, vkt_view dx, vkt_view dy,
                                    uint32_t planes, uint32_t hw, const char *label) {
    // One window over each plane, seen as a row of hw: avgpool2d's gather with one window.
    vkt_pool2d s = {.planes = planes, .h = 1, .w = hw, .kh = 1, .kw = hw, .sh = 1, .sw = hw};
    vkt_op_pool2d_backward(cmd, ops, VKT_POOL_AVG, dx, dy, dy, &s, label);
}
