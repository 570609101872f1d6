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

// The bound on a conv layer's scratch (columns, product and columns' gradient of one chunk of
// samples) by which engine/nn/layers/conv2d.c cuts a batch into chunks: 32 MiB by default. A
// test sets it small to force several chunks; 0 restores the default. Read when a network is
// laid out and recorded: change it only between networks.
uint64_t vkt_conv_chunk_bytes(void);
void vkt_conv_set_chunk_bytes(uint64_t bytes);

#endif
