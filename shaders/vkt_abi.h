// vkt_abi.h: the one header that C and GLSL share. Push-constant layouts and the specialization
// constant ids live here so that the host and the shaders can never disagree about them.
//
// GLSL sees it with VKT_GLSL defined (glslc -DVKT_GLSL=1); C sees plain structs. Every member is
// 4 bytes (no vec3, no 8-byte types), so the C layout equals the std430 layout of a push-constant
// block. Use one struct per shader:  layout(push_constant) uniform PC { vkt_axpy_push p; };
#ifndef VKT_ABI_H
#define VKT_ABI_H

#ifdef VKT_GLSL
#define VKT_U32 uint
#define VKT_I32 int
#define VKT_F32 float
#define VKT_STRUCT(name) struct name
#else
#include <stdint.h>
#define VKT_U32 uint32_t
#define VKT_I32 int32_t
#define VKT_F32 float
#define VKT_STRUCT(name) \
    typedef struct name name; \
    struct name
#endif

// Specialization constant ids: 0..2 are always the workgroup size (local_size_x_id = 0, ...);
// kernel-specific constants start at VKT_SPEC_USER.
#define VKT_SPEC_LOCAL_X 0
#define VKT_SPEC_LOCAL_Y 1
#define VKT_SPEC_LOCAL_Z 2
#define VKT_SPEC_USER 3

// The largest push-constant block any shader may use (the Vulkan minimum guarantee).
#define VKT_MAX_PUSH_BYTES 128

// y[i] = a * x[i] + y[i] for i < n. Bindings: 0 = x (n floats), 1 = y (n floats).
VKT_STRUCT(vkt_axpy_push) {
    VKT_U32 n;
    VKT_F32 a;
};

#endif
