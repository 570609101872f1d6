// layer_check.h: the check every layer kind's test runs on small models built around it. For
// one model and batch, on every device, with fusion on and off:
//  1. the double-precision reference (vkt_ref, each kind's ref_forward/ref_backward) against
//     central finite differences of its own loss, for every parameter and input entry (or an
//     evenly spaced sample of at most lc_case.max_fd per tensor);
//  2. the device's training forward (its output), loss, every parameter gradient and the input
//     gradient against the reference, from the same parameters, in the same phase (seed, step,
//     first row: dropout masks must agree);
//  3. the buffers (running statistics) after that training forward against the reference's;
//  4. an evaluation forward (running statistics, no dropout) against the reference's.
// The loss is softmax cross-entropy or MSE as the model says, a mean over the batch.
#ifndef VKT_LAYER_CHECK_H
#define VKT_LAYER_CHECK_H

#include "ops.h"
#include "test_util.h"

typedef struct lc_case {
    const char *json;  // the model
    uint32_t B;        // batch (rows)
    bool input_grad;   // also check the gradient of the model's input
    double atol, rtol; // device against reference (0: 2e-5 and 2e-3)
    int max_fd;        // finite differences per tensor, at most (0: 300)
    uint32_t row0;     // the phase's first row (0 here is a valid choice)
} lc_case;

// Runs the case; ops[d] belongs to t->dev[d]. Failures are counted in t.
void lc_run(vt *t, vkt_ops *const *ops, const lc_case *c);

#endif
