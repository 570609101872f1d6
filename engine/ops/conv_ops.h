// conv_ops.h: the kernels of a 2-D convolution computed as matrix products (im2col): the
// columns of a chunk of samples, the input gradient from the columns' gradient, the permutes
// between the products' layout and NCHW activations, and the bias gradient. The products
// themselves are vkt_op_matmul (ops.h); engine/nn/layers/conv2d.c puts the two together.
//
// Layouts, for a chunk of nb samples starting at sample b0 of an NCHW activation:
//   x, dx  [B][C][H][W]        the layer's input and its gradient (whole-batch views)
//   y, dy  [B][OC][OH][OW]     its output and output gradient (whole-batch views)
//   cols   [K][nb*P]           K = C*KH*KW rows (c, i, j), column b*P + oh*OW + ow, P = OH*OW
//   z, dz  [OC][nb*P]          the chunk's product W[OC, K] cols and its gradient
// The ops slice the whole-batch views to the chunk themselves (binding from an aligned offset at
// or before the chunk's first sample), so that no binding passes maxStorageBufferRange; the
// chunk's own views (cols, z) must fit in it. Like every op they record dispatches only, no
// barrier; shapes are checked against views with VKT_ASSERT.
#ifndef VKT_CONV_OPS_H
#define VKT_CONV_OPS_H

#include "ops.h"

typedef struct vkt_conv_geom {
    uint32_t C, H, W;    // input of one sample
    uint32_t OC, OH, OW; // output of one sample: OH = (H + 2*PH - KH)/SH + 1, OW likewise
    uint32_t KH, KW, SH, SW, PH, PW;
} vkt_conv_geom;

// K = C*KH*KW (rows of the columns, the product's inner size) and P = OH*OW.
uint64_t vkt_conv_k(const vkt_conv_geom *g);
uint64_t vkt_conv_p(const vkt_conv_geom *g);

// cols[K, nb*P] = the columns of samples [b0, b0+nb) of x (0 in the padding).
void vkt_op_conv_im2col(vkt_cmd *cmd, vkt_ops *ops, vkt_view cols, vkt_view x,
                        const vkt_conv_geom *g, uint32_t b0, uint32_t nb, const char *label);
// dx of samples [b0, b0+nb) = the sum, for each input element, of the entries of dcols[K, nb*P]
// that im2col copied from it (overwrites; a gather, deterministic).
void vkt_op_conv_col2im(vkt_cmd *cmd, vkt_ops *ops, vkt_view dx, vkt_view dcols,
                        const vkt_conv_geom *g, uint32_t b0, uint32_t nb, const char *label);
// y[b0 + b][oc][p] = z[oc][b*P + p] (+ bias[oc] when bias != NULL), for b < nb.
void vkt_op_conv_to_nchw(vkt_cmd *cmd, vkt_ops *ops, vkt_view y, vkt_view z, const vkt_view *bias,
                         uint32_t OC, uint32_t P, uint32_t b0, uint32_t nb, const char *label);
// dz[oc][b*P + p] = dy[b0 + b][oc][p], for b < nb.
void vkt_op_conv_from_nchw(vkt_cmd *cmd, vkt_ops *ops, vkt_view dz, vkt_view dy, uint32_t OC,
                           uint32_t P, uint32_t b0, uint32_t nb, const char *label);
// db[R] += the row sums of dz[R, N] (accumulates; deterministic).
void vkt_op_conv_rowsum(vkt_cmd *cmd, vkt_ops *ops, vkt_view db, vkt_view dz, uint32_t R,
                        uint32_t N, const char *label);

// The weight gradient of a conv whose gradient is small next to its n = nb*P columns, split
// over the columns (the engine's matmul gives such a product one workgroup):
//   dw[M, N] += dZ[M, n] cols[N, n]^T  and, with db, db[M] += the row sums of dZ
// where dZ is read straight from the output gradient: dZ[m][b*P + q] = dy[b0 + b][m][q].
// vkt_conv_dw_parts: the number S of parts (0: the split does not pay for this shape, use the
// matmul); vkt_conv_dw_part_bytes: the partials' bytes (S*8*M*(N + bias) floats).
// vkt_op_conv_dw_parts writes the partial sums of the S parts into part; after a barrier,
// vkt_op_conv_dw_reduce adds them, in order, into dw (and db) (accumulates; deterministic).
uint32_t vkt_conv_dw_parts(uint32_t M, uint32_t N, bool bias, uint64_t n);
uint64_t vkt_conv_dw_part_bytes(uint32_t M, uint32_t N, bool bias, uint64_t n);
void vkt_op_conv_dw_parts(vkt_cmd *cmd, vkt_ops *ops, vkt_view part, vkt_view dy, vkt_view cols,
                          uint32_t M, uint32_t N, uint32_t P, uint32_t b0, uint32_t nb, bool bias,
                          const char *label);
void vkt_op_conv_dw_reduce(vkt_cmd *cmd, vkt_ops *ops, vkt_view dw, const vkt_view *db,
                           vkt_view part, uint32_t M, uint32_t N, uint64_t n, const char *label);

// The forward product of a conv with a small inner size K (vkt_conv_fwd_small: K <= 32 and not
// a multiple of 8, where the matmul has no wide kernel), written in NCHW:
//   y[b0 + b][m][q] = bias[m] (when bias != NULL) + sum over k of w[m][k] cols[k][b*P + q]
// (overwrites the chunk's samples of y; w is [M, K]).
bool vkt_conv_fwd_small(uint32_t M, uint32_t K);
void vkt_op_conv_forward_small(vkt_cmd *cmd, vkt_ops *ops, vkt_view y, vkt_view cols, vkt_view w,
                               const vkt_view *bias, uint32_t M, uint32_t K, uint32_t P,
                               uint32_t b0, uint32_t nb, const char *label);

// A stride-1 conv whose output is as large as its input, forward or input gradient, straight
// from the activations (no columns, permutes or col2im), for the chunk's samples [b0, b0+nb):
//   fwd:   out = y,  in = x,  a = W transposed to [C][OC][KH][KW] (vkt_op_conv_to_nchw with
//          P = KH*KW and C "samples" writes it), bias or NULL:
//          y[b][oc][h][w] = bias[oc] + sum over c, i, j of W[oc][c][i][j] x[b][c][h+i-PH][w+j-PW]
//   !fwd:  out = dx, in = dy, a = W [OC][C][KH][KW], no bias:
//          dx[b][c][h][w] = sum over oc, i, j of W[oc][c][i][j] dy[b][oc][h+PH-i][w+PW-j]
// (overwrites; 0 outside the input's plane). vkt_conv_direct_shape: whether the geometry allows
// it (stride 1, output as large as the input, P and rows*KH*KW multiples of 4, at most 25 taps;
// rows = OC forward, C backward); vkt_conv_direct: and whether the device takes it (CPU drivers
// with 8-lane subgroups and shuffles, i.e. lavapipe; not under VKT_CONV_COLUMNS, the context's
// vkt_context_desc.conv). vkt_op_conv_direct: false, recording
// nothing, where the views cannot be bound as its texels and vec4s (the caller takes the
// columns' path).
bool vkt_conv_direct_shape(const vkt_conv_geom *g, bool fwd);
bool vkt_conv_direct(vkt_ops *ops, const vkt_conv_geom *g, bool fwd);
bool vkt_op_conv_direct(vkt_cmd *cmd, vkt_ops *ops, vkt_view out, vkt_view in, vkt_view a,
                        const vkt_view *bias, const vkt_conv_geom *g, bool fwd, uint32_t b0,
                        uint32_t nb, const char *label);

// The weight gradient of a stride-1 conv whose output is as large as its input, straight from
// the activations (no columns, no permute), for a chunk's samples [b0, b0+nb), n = nb*P
// positions: vkt_op_conv_direct_dw writes the partial sums of parts of the positions into part
// (vkt_conv_direct_dw_part_bytes: parts x OC x (C*KH*KW + bias) floats), and after a barrier
// vkt_op_conv_direct_dw_reduce adds them, in order, into dw [OC][C*KH*KW] (and db[OC])
// (accumulates; deterministic). vkt_conv_direct_dw_shape: the geometry of vkt_conv_direct_shape
// with at least 8 input channels (the lanes take one each); vkt_conv_direct_dw: and the device
// (as vkt_conv_direct); vkt_conv_direct_dw_fits: and the chunk's views bind as its texels (the op
// asserts it).
bool vkt_conv_direct_dw_shape(const vkt_conv_geom *g);
bool vkt_conv_direct_dw(vkt_ops *ops, const vkt_conv_geom *g);
bool vkt_conv_direct_dw_fits(vkt_ops *ops, vkt_view dy, vkt_view x, const vkt_conv_geom *g,
                             uint32_t b0, uint32_t nb);
uint64_t vkt_conv_direct_dw_part_bytes(const vkt_conv_geom *g, bool bias, uint64_t n);
void vkt_op_conv_direct_dw(vkt_cmd *cmd, vkt_ops *ops, vkt_view part, vkt_view dy, vkt_view x,
                           const vkt_conv_geom *g, bool bias, uint32_t b0, uint32_t nb,
                           const char *label);
void vkt_op_conv_direct_dw_reduce(vkt_cmd *cmd, vkt_ops *ops, vkt_view dw, const vkt_view *db,
                                  vkt_view part, const vkt_conv_geom *g, uint64_t n,
                                  const char *label);

// The bound on a conv layer's scratch (columns, product and columns' gradient of one chunk of
// samples) by which engine/nn/layers/conv2d.c cuts a batch into chunks: 32 MiB by default. A
// test sets it small to force several chunks; 0 restores the default. Read when a network is
// laid out and recorded: change it only between networks.
uint64_t vkt_conv_chunk_bytes(void);
void vkt_conv_set_chunk_bytes(uint64_t bytes);

#endif
