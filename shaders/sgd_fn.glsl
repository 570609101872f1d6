// sgd_fn.glsl: one step of torch.optim.SGD (dampening 0) on four parameters, shared by the
// optimizer kernel (sgd.glsl) and the matmul's optimizer epilogue (mm_epilogue.glsl), so that
// the fused step does the same arithmetic. g: the gradient, w: the parameters, b: the momentum
// buffer (updated when mode != 0); mode 0 plain, 1 momentum, 2 nesterov. Returns the new w.
vec4 sgd_step(vec4 g, vec4 w, inout vec4 b, float lr, float momentum, float weight_decay,
              uint mode) {
    vec4 d = g;
    if (weight_decay != 0.0) d += weight_decay * w;
    if (mode != 0u) {
        b = momentum * b + d;
        d = mode == 2u ? d + momentum * b : b;
    }
    return w - lr * d;
}
