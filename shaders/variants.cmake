# variants.cmake: the kernels built from a shared .glsl source with -D defines, one line each:
#   vkt_shader(NAME SOURCE [DEFINE=VALUE ...])
# compiles shaders/SOURCE with glslc -DDEFINE=VALUE ... into the kernel NAME, which C code names
# by the identifier VKT_SHADER_<NAME in capitals> (generated into vkt_shaders.h by CMakeLists.txt;
# a misspelt name does not compile). Standalone shaders (a shaders/*.comp with code of its own)
# are not listed: each is a kernel named after its file. A source compiled here starts with its
# own #version and #extension lines; the defines select the variant.
# Included by CMakeLists.txt (its shader section defines vkt_shader). Not GLSL: shaders/ holds the
# sources, this file says which kernels are made of them.

# ---------------------------------------------------------------------------------------------
# Activations (act.glsl, functions in act_fn.glsl): one shader per activation and direction, not a
# specialization constant, because SwiftShader runs every branch on a specialization constant.
# ACT is one of act_fn.glsl's ACT_*; BACKWARD 0: y = f(x); 1: dx = dy * f'(x) from the forward's
# input x; 2: dx = dy * f'(x) from the forward's output y = f(x) (none for gelu). Over n floats.
vkt_shader(act_relu_fwd act.glsl ACT=ACT_RELU BACKWARD=0)
vkt_shader(act_relu_bwd act.glsl ACT=ACT_RELU BACKWARD=1)
vkt_shader(act_relu_bwdy act.glsl ACT=ACT_RELU BACKWARD=2)
# leaky_relu: slope p.alpha below 0; from the output only for a slope p.alpha >= 0.
vkt_shader(act_leaky_relu_fwd act.glsl ACT=ACT_LEAKY_RELU BACKWARD=0)
vkt_shader(act_leaky_relu_bwd act.glsl ACT=ACT_LEAKY_RELU BACKWARD=1)
vkt_shader(act_leaky_relu_bwdy act.glsl ACT=ACT_LEAKY_RELU BACKWARD=2)
# gelu, tanh form.
vkt_shader(act_gelu_fwd act.glsl ACT=ACT_GELU BACKWARD=0)
vkt_shader(act_gelu_bwd act.glsl ACT=ACT_GELU BACKWARD=1)
# gelu, exact (erf) form.
vkt_shader(act_gelu_erf_fwd act.glsl ACT=ACT_GELU_ERF BACKWARD=0)
vkt_shader(act_gelu_erf_bwd act.glsl ACT=ACT_GELU_ERF BACKWARD=1)
vkt_shader(act_tanh_fwd act.glsl ACT=ACT_TANH BACKWARD=0)
vkt_shader(act_tanh_bwd act.glsl ACT=ACT_TANH BACKWARD=1)
vkt_shader(act_tanh_bwdy act.glsl ACT=ACT_TANH BACKWARD=2)
vkt_shader(act_sigmoid_fwd act.glsl ACT=ACT_SIGMOID BACKWARD=0)
vkt_shader(act_sigmoid_bwd act.glsl ACT=ACT_SIGMOID BACKWARD=1)
vkt_shader(act_sigmoid_bwdy act.glsl ACT=ACT_SIGMOID BACKWARD=2)

# ---------------------------------------------------------------------------------------------
# Optimizers: reading through storage buffers only, or (EW_TEXEL) with the whole vec4s read
# through uniform texel buffers as well (lavapipe: engine/ops/ops_nn.c, texel_reads).
vkt_shader(sgd sgd.glsl)
vkt_shader(sgd_texel sgd.glsl EW_TEXEL=1)
vkt_shader(adamw adamw.glsl)
vkt_shader(adamw_texel adamw.glsl EW_TEXEL=1)

# ---------------------------------------------------------------------------------------------
# Matmul, scalar (matmul_scalar.glsl: any shape, one float per load): the tile fixed at compile
# time, MM_TM rows per workgroup and MM_TC columns per lane. 16 x 16 is SwiftShader's fastest
# scalar tile (docs/PERFORMANCE.md).
vkt_shader(matmul_s4x4 matmul_scalar.glsl MM_TM=4 MM_TC=4)
vkt_shader(matmul_s8x8 matmul_scalar.glsl MM_TM=8 MM_TC=8)
vkt_shader(matmul_s16x16 matmul_scalar.glsl MM_TM=16 MM_TC=16)

# Matmul for SwiftShader (matmul_ss.glsl): one shader per form (SS_FORM), vec4 loads, SS_G row
# groups of 4: 16 rows per workgroup (SS_G=4) or 32 (SS_G=8).
vkt_shader(matmul_ss_r16_nn matmul_ss.glsl SS_G=4 SS_FORM=VKT_MM_FORM_NN)
vkt_shader(matmul_ss_r16_nt matmul_ss.glsl SS_G=4 SS_FORM=VKT_MM_FORM_NT)
vkt_shader(matmul_ss_r16_tn matmul_ss.glsl SS_G=4 SS_FORM=VKT_MM_FORM_TN)
vkt_shader(matmul_ss_r32_nn matmul_ss.glsl SS_G=8 SS_FORM=VKT_MM_FORM_NN)
vkt_shader(matmul_ss_r32_nt matmul_ss.glsl SS_G=8 SS_FORM=VKT_MM_FORM_NT)
vkt_shader(matmul_ss_r32_tn matmul_ss.glsl SS_G=8 SS_FORM=VKT_MM_FORM_TN)

# Matmul, register-tiled with wide loads (matmul_wide.glsl; the tile and width are specialization
# constants). matmul_wide: vec4 pieces.
vkt_shader(matmul_wide matmul_wide.glsl)
# dvec4 pieces (8 floats per load; the bits are moved, never used as doubles), for devices with
# shaderFloat64: on lavapipe each load inside a loop costs a per-lane loop, so halving the
# number of loads is what makes it fast.
vkt_shader(matmul_wide64 matmul_wide.glsl MM_F64=1)
# matmul_wide64 with a and b read through uniform texel buffers (texelFetch of vec4 texels);
# c, bias and the epilogue's s and z stay storage buffers in dvec4 pieces. On lavapipe a
# storage-buffer load, even at a workgroup-uniform address, is a loop over the 8 lanes with a
# branch and a bounds check per lane and component, while a texel fetch is a branch-free gather.
# Same tile, same results.
vkt_shader(matmul_wide64t matmul_wide.glsl MM_F64=1 MM_TEXEL=1)
# matmul_wide64t for the optimizer epilogue (VKT_MM_EPI_SGD), which also reads the parameters and
# the momentum buffer through texel buffers (bindings 6 and 7: the same views as c and s).
# engine/ops/matmul.c uses it in place of matmul_wide64t for that epilogue only, so that the
# other products bind no extra views.
vkt_shader(matmul_wide64t_sgd matmul_wide.glsl MM_F64=1 MM_TEXEL=1 MM_SGD_TEXEL=1)
# Products with a side of at most 16 floats on the CPU drivers (matmul_narrow.glsl: the form says
# which side), in place of the padded texel kernel's copies and 64-column tiles.
vkt_shader(matmul_narrow matmul_narrow.glsl)

# ---------------------------------------------------------------------------------------------
# The peak fp32 FMA rate (peak_fma.glsl) for `vktrain bench`: PEAK_CHAINS independent chains of
# PEAK_UNROLL steps per loop iteration. engine/cli/bench.c times each shape and keeps the fastest:
# 32 x 8 is the fastest on the AVX-512 CPU measured, 16 x 4 and 24 x 4 on an AVX2 one, where
# lavapipe's code for 32 x 8 waits on the multiply-then-add latency (peak_fma.glsl says why).
vkt_shader(peak_fma_c32u8 peak_fma.glsl PEAK_CHAINS=32 PEAK_UNROLL=8)
vkt_shader(peak_fma_c24u4 peak_fma.glsl PEAK_CHAINS=24 PEAK_UNROLL=4)
vkt_shader(peak_fma_c16u4 peak_fma.glsl PEAK_CHAINS=16 PEAK_UNROLL=4)
