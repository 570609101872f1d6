// act.glsl: the body of the activation shaders act_<name>_<fwd|bwd>.comp, each of which defines
// ACT (one of the ACT_* below) and BACKWARD (0 or 1) and includes this file. They are
// separate shaders, not specialization constants, because SwiftShader runs every branch on a
// specialization constant: relu's backward took 6x as long there with all five activations
// behind one.
// Forward (BACKWARD = 0): reads x[n], writes out[n] = f(x) (out may alias x; bindings 2-3 are
// unused and bound to x). Backward: reads x[n] (the forward's input) and dy[n], writes
// out[n] = dy * f'(x) (out may alias dy).
// Each array is bound as float[] and vec4[]; 4*EW_K elements per invocation (ew.glsl).
#extension GL_EXT_control_flow_attributes : require
#include "vkt_abi.h"
#include "ew.glsl"

#define ACT_RELU 0
#define ACT_LEAKY_RELU 1
#define ACT_GELU 2
#define ACT_TANH 3
#define ACT_SIGMOID 4

layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer X4 { vec4 x4[]; };
layout(std430, binding = 2) readonly buffer DY { float dy[]; };
layout(std430, binding = 3) readonly buffer DY4 { vec4 dy4[]; };
layout(std430, binding = 4) writeonly buffer O { float o[]; };
layout(std430, binding = 5) writeonly buffer O4 { vec4 o4[]; };
layout(push_constant) uniform PC { vkt_act_push p; };

const float GELU_K = 0.7978845608028654; // sqrt(2/pi)
const float GELU_C = 0.044715;

// tanh saturates to +-1 in fp32 beyond |x| = 9.1; clamping keeps drivers that evaluate it through
// exp(2x) from computing inf/inf.
vec4 tanh_safe(vec4 v) { return tanh(clamp(v, -15.0, 15.0)); }

// (1 + tanh(u)) / 2 with u = k (x + c x^3), written as 1 / (1 + exp(-2u)): the same function as
// PyTorch's 0.5 x (1 + tanh(u)), without its cancellation for x << 0 (1 + tanh(u) rounding to 0
// where the true value is 1e-6). exp overflowing to inf gives s = 0, never NaN.
vec4 gelu_s(vec4 v) { return 1.0 / (1.0 + exp(-2.0 * GELU_K * (v + GELU_C * v * v * v))); }

vec4 forward(vec4 v) {
#if ACT == ACT_RELU
    return max(v, 0.0);
#elif ACT == ACT_LEAKY_RELU
    return mix(p.alpha * v, v, greaterThan(v, vec4(0.0)));
#elif ACT == ACT_GELU
    return v * gelu_s(v);
#elif ACT == ACT_TANH
    return tanh_safe(v);
#else
    return 1.0 / (1.0 + exp(-v)); // sigmoid: exp overflow to inf gives 0, as it should
#endif
}

// f'(x). At x == 0, relu's is 0 and leaky_relu's alpha, as PyTorch's backward (x > 0 ? 1 : a).
vec4 derivative(vec4 v) {
#if ACT == ACT_RELU
    return mix(vec4(0.0), vec4(1.0), greaterThan(v, vec4(0.0)));
#elif ACT == ACT_LEAKY_RELU
    return mix(vec4(p.alpha), vec4(1.0), greaterThan(v, vec4(0.0)));
#elif ACT == ACT_GELU
    // d/dx of x s: s + x (1 - t^2)/2 u' with (1 - t^2)/2 = 2 s (1 - s), u' = k (1 + 3c x^2).
    vec4 s = gelu_s(v);
    return s + 2.0 * v * s * (1.0 - s) * GELU_K * (1.0 + 3.0 * GELU_C * v * v);
#elif ACT == ACT_TANH
    vec4 t = tanh_safe(v);
    return 1.0 - t * t;
#else
    vec4 s = 1.0 / (1.0 + exp(-v));
    return s * (1.0 - s);
#endif
}

void ew_apply(uint q, uint m) {
    vec4 v, r;
    EW_LOAD(v, x, x4, q, m);
#if BACKWARD
    vec4 d;
    EW_LOAD(d, dy, dy4, q, m);
    r = d * derivative(v);
#else
    r = forward(v);
#endif
    EW_STORE(o, o4, q, m, r);
}

void main() { ew_run(p.n); }
