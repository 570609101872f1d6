// act_fn.glsl: the engine's activation functions on vec4s, one definition of each: f(x), f'(x)
// from the input x, and f'(x) from the output y = f(x) where that is possible. Included by
// act.glsl (the elementwise act_* kernels, where the activation is a compile-time constant
// and glslc folds the selection away) and by mm_epilogue.glsl (the matmul kernels' activation
// epilogue, where it is a specialization constant that the driver folds at pipeline creation).
// Declares no bindings and reads nothing but its arguments.
//
// The activation codes are vkt_abi.h's VKT_ACT_CODE_* (equal to ops.h's vkt_act).
#define ACT_RELU VKT_ACT_CODE_RELU
#define ACT_LEAKY_RELU VKT_ACT_CODE_LEAKY_RELU
#define ACT_GELU VKT_ACT_CODE_GELU
#define ACT_TANH VKT_ACT_CODE_TANH
#define ACT_SIGMOID VKT_ACT_CODE_SIGMOID
#define ACT_NONE VKT_ACT_CODE_NONE

const float GELU_K = 0.7978845608028654; // sqrt(2/pi)
const float GELU_C = 0.044715;

// tanh saturates to +-1 in fp32 beyond |x| = 9.1; clamping keeps drivers that evaluate it through
// exp(2x) from computing inf/inf.
vec4 tanh_safe(vec4 v) { return tanh(clamp(v, -15.0, 15.0)); }

// (1 + tanh(u)) / 2 with u = k (x + c x^3), written as 1 / (1 + exp(-2u)): the same function as
// PyTorch's 0.5 x (1 + tanh(u)), without its cancellation for x << 0 (1 + tanh(u) rounding to 0
// where the true value is 1e-6). exp overflowing to inf gives s = 0, never NaN.
vec4 gelu_s(vec4 v) { return 1.0 / (1.0 + exp(-2.0 * GELU_K * (v + GELU_C * v * v * v))); }

// sigmoid: exp overflow to inf gives 0, as it should.
vec4 sigmoid_of(vec4 v) { return 1.0 / (1.0 + exp(-v)); }

// f(v). alpha is leaky_relu's negative slope. ACT_NONE is the identity.
vec4 act_forward(uint act, float alpha, vec4 v) {
    if (act == ACT_RELU) return max(v, 0.0);
    if (act == ACT_LEAKY_RELU) return mix(alpha * v, v, greaterThan(v, vec4(0.0)));
    if (act == ACT_GELU) return v * gelu_s(v);
    if (act == ACT_TANH) return tanh_safe(v);
    if (act == ACT_SIGMOID) return sigmoid_of(v);
    return v;
}

// f'(x). At x == 0, relu's is 0 and leaky_relu's alpha, as PyTorch's backward (x > 0 ? 1 : a).
vec4 act_grad_x(uint act, float alpha, vec4 v) {
    if (act == ACT_RELU) return mix(vec4(0.0), vec4(1.0), greaterThan(v, vec4(0.0)));
    if (act == ACT_LEAKY_RELU) return mix(vec4(alpha), vec4(1.0), greaterThan(v, vec4(0.0)));
    if (act == ACT_GELU) {
        // d/dx of x s: s + x (1 - t^2)/2 u' with (1 - t^2)/2 = 2 s (1 - s), u' = k (1 + 3c x^2).
        vec4 s = gelu_s(v);
        return s + 2.0 * v * s * (1.0 - s) * GELU_K * (1.0 + 3.0 * GELU_C * v * v);
    }
    if (act == ACT_TANH) {
        vec4 t = tanh_safe(v);
        return 1.0 - t * t;
    }
    if (act == ACT_SIGMOID) {
        vec4 s = sigmoid_of(v);
        return s * (1.0 - s);
    }
    return vec4(1.0);
}

// f'(x) from y = f(x), for the activations whose derivative is a function of their output
// (ops.h vkt_act_grad_from_output): relu and leaky_relu with alpha >= 0 (y > 0 exactly when
// x > 0), tanh (1 - y^2) and sigmoid (y (1 - y)). These are the very expressions act_grad_x
// evaluates after recomputing y from x, so both give the same floats. Never called for gelu
// (not invertible; the host keeps its input instead) nor for a negative slope.
vec4 act_grad_y(uint act, float alpha, vec4 y) {
    if (act == ACT_RELU) return mix(vec4(0.0), vec4(1.0), greaterThan(y, vec4(0.0)));
    if (act == ACT_LEAKY_RELU) return mix(vec4(alpha), vec4(1.0), greaterThan(y, vec4(0.0)));
    if (act == ACT_TANH) return 1.0 - y * y;
    if (act == ACT_SIGMOID) return y * (1.0 - y);
    return vec4(1.0);
}
