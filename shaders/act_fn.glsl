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
// Exact gelu: ops.h's VKT_ACT_GELU_ERF has the value of VKT_ACT_CODE_NONE (it was added after
// it), so its shader code is the next one; engine/ops/matmul.c maps it the same way.
#define ACT_GELU_ERF (VKT_ACT_CODE_NONE + 1)

const float GELU_K = 0.7978845608028654; // sqrt(2/pi)
const float GELU_C = 0.044715;

// tanh saturates to +-1 in fp32 beyond |x| = 9.1; clamping keeps drivers that evaluate it through
// exp(2x) from computing inf/inf.
vec4 tanh_safe(vec4 v) { return tanh(clamp(v, -15.0, 15.0)); }

// (1 + tanh(u)) / 2 with u = k (x + c x^3), written as 1 / (1 + exp(-2u)): the same function as
// PyTorch's 0.5 x (1 + tanh(u)), without its cancellation for x << 0 (1 + tanh(u) rounding to 0
// where the true value is 1e-6). exp overflowing to inf gives s = 0, never NaN.
vec4 gelu_s(vec4 v) { return 1.0 / (1.0 + exp(-2.0 * GELU_K * (v + GELU_C * v * v * v))); }

// ---- Exact gelu: x Phi(x), Phi(x) = (1 + erf(x / sqrt 2)) / 2, the normal distribution function.
// GLSL has no erf. With z = |x| / sqrt 2:
//  - z < 0.84375: erf(z) from its Taylor series to z^19 (the next term is below 4e-10 of erf);
//  - otherwise erfc(z) = t exp(-z^2 + P(t)), t = 1 / (1 + z/2), P of degree 9: the Chebyshev fit
//    of Numerical Recipes' erfcc, whose fractional error is below 1.2e-7 for every z >= 0.
// Phi is 1/2 +- erf(z)/2 near 0, 1 - erfc(z)/2 for x > 0 and erfc(z)/2 for x < 0: the tail
// x << 0 keeps erfc's relative accuracy instead of cancelling in 1 + erf. Simulated in float
// with correctly rounded exp, erf is within 1.1e-7 of the double erf and erfc within 4.7e-7; on
// lavapipe and SwiftShader gelu is within 1.0e-7 (relative) for x >= 0 and 6.4e-7 for x < 0,
// gelu' within 4.4e-7 (tests/test_gelu.c). erfc(z) changes by 2 z^2 times a relative change of
// z, so exp(-z^2) is taken from x itself, not from the rounded x / sqrt 2: as
// exp(-xh^2 / 2) exp(-(x - xh)(x + xh) / 2) with xh = |x| rounded to 12 bits, where xh^2 / 2 is
// exact; exp of the large part goes through gelu_exp_neg.
const float GELU_ERF_INV_SQRT2 = 0.7071067811865476;
const float GELU_ERF_INV_SQRT2PI = 0.3989422804014327; // 1 / sqrt(2 pi)
const float GELU_ERF_SMALL = 0.84375;                  // z: Taylor below, erfc above
const float GELU_ERF_XMAX = 14.0; // |x|: erfc(14 / sqrt 2) = 3e-44, 0 in float; keeps inf finite

// exp(a) for a <= 0 with the argument reduced first: a = n ln2 + r, |r| <= ln2 / 2 (ln 2 split in
// two parts, Cody and Waite), exp(a) = 2^n exp(r). A driver that evaluates exp(a) as
// exp2(a log2 e) rounds a log2 e, which costs |a| ulps (1e-5 relative at a = -81); exp of the
// small r loses almost nothing, and ldexp is exact.
vec4 gelu_exp_neg(vec4 a) {
    const float LOG2E = 1.4426950408889634;
    const float LN2_HI = 0.693145751953125; // 15 significant bits: n * LN2_HI is exact
    const float LN2_LO = 1.42860682030941723e-6;
    vec4 n = floor(a * LOG2E + 0.5);
    vec4 r = (a - n * LN2_HI) - n * LN2_LO;
    return ldexp(exp(r), ivec4(n));
}

// erf(z) for 0 <= z < 0.84375: (2 / sqrt pi) sum_k (-1)^k z^(2k+1) / (k! (2k+1)), k = 0..9,
// as z + z q(z^2) so that the leading z carries no rounding.
vec4 gelu_erf_small(vec4 z) {
    vec4 s = z * z;
    vec4 p = vec4(-1.6365844691e-07); // k = 9: -(2 / sqrt pi) / (9! 19)
    p = p * s + 1.6462114366e-06;
    p = p * s - 1.4925650358e-05;
    p = p * s + 1.2055332982e-04;
    p = p * s - 8.5483270235e-04;
    p = p * s + 5.2239776254e-03;
    p = p * s - 2.6866170645e-02;
    p = p * s + 1.1283791671e-01;
    p = p * s - 3.7612638903e-01;
    p = p * s + 1.2837916710e-01; // k = 0: 2 / sqrt pi, less the 1 added exactly below
    return z + z * p;
}

// The pieces of exact gelu at |x| = ax (clamped): z = ax / sqrt 2, t = 1 / (1 + z/2), and
// exp(-x^2 / 2) = exp(-z^2) = e_hi * e_lo (see above).
struct gelu_erf_parts {
    vec4 z, t, e_hi, e_lo;
};

gelu_erf_parts gelu_erf_split(vec4 v) {
    gelu_erf_parts g;
    vec4 ax = min(abs(v), GELU_ERF_XMAX);
    vec4 xh = uintBitsToFloat(floatBitsToUint(ax) & 0xfffff000u);
    g.z = ax * GELU_ERF_INV_SQRT2;
    g.t = 1.0 / (1.0 + 0.5 * g.z);
    g.e_hi = gelu_exp_neg(-0.5 * (xh * xh));
    g.e_lo = exp(-0.5 * ((ax - xh) * (ax + xh)));
    return g;
}

// erfc(z) for z >= 0: t exp(-z^2) exp(P(t)) (Numerical Recipes' coefficients).
vec4 gelu_erfc(gelu_erf_parts g) {
    vec4 t = g.t, p = vec4(0.17087277);
    p = p * t - 0.82215223;
    p = p * t + 1.48851587;
    p = p * t - 1.13520398;
    p = p * t + 0.27886807;
    p = p * t - 0.18628806;
    p = p * t + 0.09678418;
    p = p * t + 0.37409196;
    p = p * t + 1.00002368;
    p = p * t - 1.26551223;
    return t * g.e_hi * (g.e_lo * exp(p));
}

// Phi(v).
vec4 gelu_phi(vec4 v, gelu_erf_parts g) {
    vec4 half_erf = 0.5 * gelu_erf_small(g.z), erfc_z = gelu_erfc(g);
    bvec4 small = lessThan(g.z, vec4(GELU_ERF_SMALL)), pos = greaterThanEqual(v, vec4(0.0));
    vec4 phi_pos = mix(1.0 - 0.5 * erfc_z, 0.5 + half_erf, small);
    vec4 phi_neg = mix(0.5 * erfc_z, 0.5 - half_erf, small);
    return mix(phi_neg, phi_pos, pos);
}

// gelu(v) = v Phi(v).
vec4 gelu_erf_forward(vec4 v) { return v * gelu_phi(v, gelu_erf_split(v)); }

// gelu'(v) = Phi(v) + v phi(v), phi(v) = exp(-v^2 / 2) / sqrt(2 pi).
vec4 gelu_erf_grad(vec4 v) {
    gelu_erf_parts g = gelu_erf_split(v);
    return gelu_phi(v, g) + v * (GELU_ERF_INV_SQRT2PI * g.e_hi * g.e_lo);
}

// sigmoid: exp overflow to inf gives 0, as it should.
vec4 sigmoid_of(vec4 v) { return 1.0 / (1.0 + exp(-v)); }

// f(v). alpha is leaky_relu's negative slope. ACT_NONE is the identity.
vec4 act_forward(uint act, float alpha, vec4 v) {
    if (act == ACT_RELU) return max(v, 0.0);
    if (act == ACT_LEAKY_RELU) return mix(alpha * v, v, greaterThan(v, vec4(0.0)));
    if (act == ACT_GELU) return v * gelu_s(v);
    if (act == ACT_TANH) return tanh_safe(v);
    if (act == ACT_SIGMOID) return sigmoid_of(v);
    if (act == ACT_GELU_ERF) return gelu_erf_forward(v);
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
    if (act == ACT_GELU_ERF) return gelu_erf_grad(v);
    return vec4(1.0);
}

// f'(x) from y = f(x), for the activations whose derivative is a function of their output
// (ops.h vkt_act_grad_from_output): relu and leaky_relu with alpha >= 0 (y > 0 exactly when
// x > 0), tanh (1 - y^2) and sigmoid (y (1 - y)). These are the very expressions act_grad_x
// evaluates after recomputing y from x, so both give the same floats. Never called for gelu,
// tanh or exact (not invertible; the host keeps its input instead) nor for a negative slope.
vec4 act_grad_y(uint act, float alpha, vec4 y) {
    if (act == ACT_RELU) return mix(vec4(0.0), vec4(1.0), greaterThan(y, vec4(0.0)));
    if (act == ACT_LEAKY_RELU) return mix(vec4(alpha), vec4(1.0), greaterThan(y, vec4(0.0)));
    if (act == ACT_TANH) return 1.0 - y * y;
    if (act == ACT_SIGMOID) return y * (1.0 - y);
    return vec4(1.0);
}
