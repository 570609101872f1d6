// conv_geom.glsl: a convolution's geometry as specialization constants (conv_abi.h says why), for
// conv_im2col.comp and conv_col2im.comp, with their workgroup size. Included, not compiled on
// its own.
layout(local_size_x_id = VKT_SPEC_LOCAL_X) in;
layout(constant_id = VKT_SPEC_CONV_C) const uint C = 1;
layout(constant_id = VKT_SPEC_CONV_H) const uint H = 1;
layout(constant_id = VKT_SPEC_CONV_W) const uint W = 1;
layout(constant_id = VKT_SPEC_CONV_KH) const uint KH = 1;
layout(constant_id = VKT_SPEC_CONV_KW) const uint KW = 1;
layout(constant_id = VKT_SPEC_CONV_SH) const uint SH = 1;
layout(constant_id = VKT_SPEC_CONV_SW) const uint SW = 1;
layout(constant_id = VKT_SPEC_CONV_PH) const uint PH = 0;
layout(constant_id = VKT_SPEC_CONV_PW) const uint PW = 0;
const uint OH = (H + 2u * PH - KH) / SH + 1u;
const uint OW = (W + 2u * PW - KW) / SW + 1u;
const uint P = OH * OW; // output positions of one sample
const uint KK = KH * KW;
const uint K = C * KK; // rows of the columns: (c, i, j)
