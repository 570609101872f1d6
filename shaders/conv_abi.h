// conv_abi.h: what C (engine/ops/conv_ops.c) and the conv_* kernels share: the specialization
// constants of a convolution's geometry and the push constants of its kernels.
//
// The geometry is compiled into each kernel as specialization constants (one pipeline per conv
// shape): the divisions and remainders that turn a flat index into (sample, channel, row,
// column) then become multiplies by constants, where each would otherwise be an integer
// division per lane (a CPU driver has no vector instruction for it on x86).
#ifndef VKT_CONV_ABI_H
#define VKT_CONV_ABI_H

#include "vkt_abi.h"

// conv_im2col, conv_col2im: the input [C, H, W] of one sample, the kernel [KH, KW], the stride
// and the zero padding on each side; the output [OH, OW] follows from them.
#define VKT_SPEC_CONV_C (VKT_SPEC_USER + 0)
#define VKT_SPEC_CONV_H (VKT_SPEC_USER + 1)
#define VKT_SPEC_CONV_W (VKT_SPEC_USER + 2)
#define VKT_SPEC_CONV_KH (VKT_SPEC_USER + 3)
#define VKT_SPEC_CONV_KW (VKT_SPEC_USER + 4)
#define VKT_SPEC_CONV_SH (VKT_SPEC_USER + 5)
#define VKT_SPEC_CONV_SW (VKT_SPEC_USER + 6)
#define VKT_SPEC_CONV_PH (VKT_SPEC_USER + 7)
#define VKT_SPEC_CONV_PW (VKT_SPEC_USER + 8)
// conv_permute: the channels and the positions P = OH*OW of one sample, and the direction.
#define VKT_SPEC_CONV_PERM_OC (VKT_SPEC_USER + 0)
#define VKT_SPEC_CONV_PERM_P (VKT_SPEC_USER + 1)
#define VKT_SPEC_CONV_PERM_DIR (VKT_SPEC_USER + 2)
// floats per invocation: 4 or 1 (8 in conv_permute64)
#define VKT_SPEC_CONV_PERM_V (VKT_SPEC_USER + 3)

#define VKT_CONV_TO_NCHW 0   // y[b][oc][p] = z[oc][b*P + p] (+ bias[oc])
#define VKT_CONV_FROM_NCHW 1 // dz[oc][b*P + p] = dy[b][oc][p]

// The kernels of a chunk of nb samples. A chunk's columns are [K, nb*P] (column b*P + p);
// act_off is the element offset, inside its binding, of the chunk's first sample in the NCHW
// activation (x, dx, y or dy: the host binds from an aligned offset at or before it).
//   conv_im2col:  n = nb*P columns per row; grid (columns / 4, K rows); binding 0 = x, 1 and 2 =
//                 cols (float[] and vec4[])
//   conv_col2im:  n = nb*C*H*W input elements; binding 0 = dcols, 1 = dx (overwritten)
//   conv_permute: n = nb*OC*P output elements; bindings in conv_permute.glsl
// flags: VKT_CONV_BIAS (conv_permute adds the bias), VKT_CONV_VEC4 (conv_im2col may write the
// columns as vec4s: n % 4 == 0 and the view 16-byte aligned).
#define VKT_CONV_BIAS 1u
#define VKT_CONV_VEC4 2u
VKT_STRUCT(vkt_conv_push) {
    VKT_U32 n;
    VKT_U32 nb;
    VKT_U32 act_off;
    VKT_U32 flags;
};

// conv_rowsum: db[R] += the sums of the R rows of dz[R, N] (the bias gradient from a chunk's
// dZ), one workgroup per row. Binding 0 = dz, 1 = db.
VKT_STRUCT(vkt_conv_rowsum_push) {
    VKT_U32 R;
    VKT_U32 N;
};

// conv_dw: the split-K weight-gradient product (conv_dw.comp says what it computes): the output
// tile (rows TM of the gradient's M, columns TN of its NB), floats per load V (4 or 1), whether
// the operands are read as texels (TEXEL: V = 4 only), the positions P of a sample of the
// output gradient, and whether the gradient has the bias column (BIAS: column N = the row sums
// of the output gradient).
#define VKT_SPEC_CONV_DW_TM (VKT_SPEC_USER + 0)
#define VKT_SPEC_CONV_DW_TN (VKT_SPEC_USER + 1)
#define VKT_SPEC_CONV_DW_V (VKT_SPEC_USER + 2)
#define VKT_SPEC_CONV_DW_TEXEL (VKT_SPEC_USER + 3)
#define VKT_SPEC_CONV_DW_P (VKT_SPEC_USER + 4)
#define VKT_SPEC_CONV_DW_BIAS (VKT_SPEC_USER + 5)
// conv_fwd: the small-K forward product written in NCHW (conv_fwd.glsl): rows TM of the output
// tile, the product's inner size K, floats per column piece V (1, 4, or 8 in conv_fwd64),
// texel reads of the columns (TEXEL: V = 4 or 8), P positions per sample, and whether a bias
// is added.
#define VKT_SPEC_CONV_FWD_TM (VKT_SPEC_USER + 0)
#define VKT_SPEC_CONV_FWD_K (VKT_SPEC_USER + 1)
#define VKT_SPEC_CONV_FWD_V (VKT_SPEC_USER + 2)
#define VKT_SPEC_CONV_FWD_TEXEL (VKT_SPEC_USER + 3)
#define VKT_SPEC_CONV_FWD_P (VKT_SPEC_USER + 4)
#define VKT_SPEC_CONV_FWD_BIAS (VKT_SPEC_USER + 5)

// conv_direct: a stride-1 "same" convolution's forward or input gradient straight from the
// activations (conv_direct.comp): the geometry's constants above (VKT_SPEC_CONV_C holding the
// output rows R), TM rows per workgroup, the direction (FWD: 1 forward, 0 input gradient) and
// whether a bias is added (forward only).
#define VKT_SPEC_CONV_DIRECT_TM (VKT_SPEC_USER + 9)
#define VKT_SPEC_CONV_DIRECT_FWD (VKT_SPEC_USER + 10)
#define VKT_SPEC_CONV_DIRECT_BIAS (VKT_SPEC_USER + 11)
// conv_direct: I input channels (summed over), n = nb*P positions of the chunk, the element
// offsets of the chunk's first sample in the input's and output's bindings, and the texels of
// the input's and A's bindings.
VKT_STRUCT(vkt_conv_direct_push) {
    VKT_U32 I;
    VKT_U32 n;
    VKT_U32 in_off;
    VKT_U32 out_off;
    VKT_U32 ntex_in;
    VKT_U32 ntex_a;
};
// conv_direct_dw: OC output channels, n = nb*P positions of the chunk, the element offsets of the
// chunk's first sample in dy's and x's bindings, the texels of those bindings, and the pieces of
// 4 positions a part takes (the workgroups of z).
VKT_STRUCT(vkt_conv_direct_dw_push) {
    VKT_U32 OC;
    VKT_U32 n;
    VKT_U32 dy_off;
    VKT_U32 x_off;
    VKT_U32 ntex_dy;
    VKT_U32 ntex_x;
    VKT_U32 pieces;
};
// conv_dw: M channels of the output gradient, N rows of the columns (their K), n = nb*P columns;
// a_off: the element offset of the chunk's first sample in the output gradient's binding;
// pieces: V-float pieces per part (the workgroups of y); tiles_n: output tiles along NB.
VKT_STRUCT(vkt_conv_dw_push) {
    VKT_U32 M;
    VKT_U32 N;
    VKT_U32 n;
    VKT_U32 a_off;
    VKT_U32 pieces;
    VKT_U32 tiles_n;
};

// conv_dw_reduce: dw[M, N] += the sum over j < parts of part[j][M][NB] (columns < N), and, with
// NB = N + 1, db[M] += the sums of column N; one invocation per (m, column), j in order.
VKT_STRUCT(vkt_conv_reduce_push) {
    VKT_U32 M;
    VKT_U32 N;
    VKT_U32 NB;
    VKT_U32 parts;
};

// conv_fwd: M output channels, n = nb*P columns, y_off: the element offset of the chunk's first
// sample in y's binding; pieces: V-float column pieces per workgroup of y.
VKT_STRUCT(vkt_conv_fwd_push) {
    VKT_U32 M;
    VKT_U32 n;
    VKT_U32 y_off;
    VKT_U32 pieces;
};

#endif
