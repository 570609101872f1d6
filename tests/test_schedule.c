// test_schedule.c: the learning-rate schedules (vkt_lr_at, vkt_lr_check in engine/run/train.c),
// on the host only. Every schedule, with and without warmup, gives per step the rate that
// torch.optim.lr_scheduler gives (the expressions are in train.h); the numbers below were
// computed once with Debian's python3-torch 1.13 by the script at the end of this file, for SGD
// and checked to be the same for AdamW. Bad schedules are refused with messages naming the flag.
#include <string.h>

#include "test_util.h"
#include "train.h"

typedef struct lr_case {
    const char *name;
    vkt_lr_schedule s; // kind, warmup, step_size, gamma, min_lr, total_steps
    double lr;         // the optimizer's lr
    int steps;         // of the run
    double want[12];   // opt.param_groups[0]["lr"] at torch's 1st, 2nd, ... opt.step()
} lr_case;

// clang-format off
static const lr_case g_cases[] = {
    {"constant", {VKT_LR_CONSTANT, 0, 0, 0.0, 0.0, 0}, 0.1, 12,
     {0.10000000000000001, 0.10000000000000001, 0.10000000000000001, 0.10000000000000001, 0.10000000000000001, 0.10000000000000001, 0.10000000000000001, 0.10000000000000001, 0.10000000000000001, 0.10000000000000001, 0.10000000000000001, 0.10000000000000001}},
    {"constant, warmup 3", {VKT_LR_CONSTANT, 3, 0, 0.0, 0.0, 0}, 0.1, 12,
     {0.025000000000000001, 0.050000000000000003, 0.075000000000000011, 0.10000000000000001, 0.10000000000000001, 0.10000000000000001, 0.10000000000000001, 0.10000000000000001, 0.10000000000000001, 0.10000000000000001, 0.10000000000000001, 0.10000000000000001}},
    {"cosine", {VKT_LR_COSINE, 0, 0, 0.0, 0.0, 12}, 0.1, 12,
     {0.10000000000000001, 0.098296291314453416, 0.093301270189221949, 0.085355339059327379, 0.075000000000000011, 0.062940952255126054, 0.05000000000000001, 0.037059047744873973, 0.025000000000000015, 0.01464466094067263, 0.0066987298107780658, 0.0017037086855465904}},
    {"cosine, lr-min 0.001", {VKT_LR_COSINE, 0, 0, 0.0, 0.001, 12}, 0.1, 12,
     {0.10000000000000001, 0.09831332840130888, 0.093368257487329728, 0.085501785668734107, 0.075250000000000011, 0.063311542732574791, 0.05050000000000001, 0.037688457267425236, 0.025750000000000016, 0.015498214331265903, 0.0076317425126702851, 0.0026866715986911243}},
    {"cosine, warmup 3, lr-min 0.001", {VKT_LR_COSINE, 3, 0, 0.0, 0.001, 12}, 0.1, 12,
     {0.025000000000000001, 0.050000000000000003, 0.075000000000000011, 0.10000000000000001, 0.097014784728902473, 0.088419199934389403, 0.075249999999999997, 0.059095584794513059, 0.041904415205486947, 0.025750000000000009, 0.012580800065610593, 0.0039852152710975388}},
    {"cosine, warmup 2 (torch_equiv's)", {VKT_LR_COSINE, 2, 0, 0.0, 0.0, 10}, 0.002, 10,
     {0.00066666666666666664, 0.0013333333333333333, 0.002, 0.0019238795325112869, 0.0017071067811865476, 0.0013826834323650901, 0.0010000000000000002, 0.00061731656763491045, 0.00029289321881345262, 7.6120467488713291e-05}},
    {"cosine over 20 steps, 12 run, warmup 1", {VKT_LR_COSINE, 1, 0, 0.0, 0.0, 20}, 0.05, 12,
     {0.025000000000000001, 0.050000000000000003, 0.049659032585068062, 0.048645431042515862, 0.04698684378016222, 0.044728512734909839, 0.041932039290643527, 0.038673703953060669, 0.035042385616324237, 0.031137137178519975, 0.027064483636808308, 0.022935516363191692}},
    {"step 4, gamma 0.5", {VKT_LR_STEP, 0, 4, 0.5, 0.0, 0}, 0.1, 12,
     {0.10000000000000001, 0.10000000000000001, 0.10000000000000001, 0.10000000000000001, 0.050000000000000003, 0.050000000000000003, 0.050000000000000003, 0.050000000000000003, 0.025000000000000001, 0.025000000000000001, 0.025000000000000001, 0.025000000000000001}},
    {"step 4, gamma 0.5, warmup 3", {VKT_LR_STEP, 3, 4, 0.5, 0.0, 0}, 0.1, 12,
     {0.025000000000000001, 0.050000000000000003, 0.075000000000000011, 0.10000000000000001, 0.10000000000000001, 0.10000000000000001, 0.10000000000000001, 0.050000000000000003, 0.050000000000000003, 0.050000000000000003, 0.050000000000000003, 0.025000000000000001}},
    {"step 1, gamma 0.1, warmup 1 (AdamW)", {VKT_LR_STEP, 1, 1, 0.1, 0.0, 0}, 0.001, 6,
     {0.00050000000000000001, 0.001, 0.0001, 1.0000000000000001e-05, 1.0000000000000002e-06, 1.0000000000000002e-07}},
};
// clang-format on

static bool has(const char *msg, const char *needle) { return strstr(msg, needle) != NULL; }

static void test_torch_rates(vt *t) {
    for (size_t c = 0; c < sizeof g_cases / sizeof g_cases[0]; c++) {
        const lr_case *k = &g_cases[c];
        VT_CHECK(t, vkt_lr_check(&k->s, k->lr, (uint64_t)k->steps) == VKT_OK, "%s: %s", k->name,
                 vkt_error());
        int bad = 0;
        for (int i = 0; i < k->steps; i++) {
            double got = vkt_lr_at(&k->s, k->lr, (uint64_t)i + 1);
            // torch chains its factors (LinearLR, StepLR and CosineAnnealingLR multiply the last
            // rate); vktrain evaluates the closed form: equal to a few units of the last place.
            if (!(fabs(got - k->want[i]) <= 1e-12 * fabs(k->want[i]))) {
                VT_CHECK(t, false, "%s: step %d: rate %.17g, torch %.17g", k->name, i + 1, got,
                         k->want[i]);
                bad++;
            }
        }
        printf("%-40s %d steps: %s\n", k->name, k->steps, bad ? "FAIL" : "torch's rates");
    }
    // The zeroed schedule is the optimizer's rate, exactly, at every step.
    vkt_lr_schedule none = {0};
    VT_OK(t, vkt_lr_check(&none, 0.05, 1000));
    for (uint64_t step = 1; step <= 1000; step += 37)
        VT_CHECK(t, vkt_lr_at(&none, 0.05, step) == 0.05, "constant at step %llu",
                 (unsigned long long)step);
}

// A schedule must fail vkt_lr_check with a message holding every needle.
static void expect_bad(vt *t, vkt_lr_schedule s, double lr, uint64_t steps, const char *n1,
                       const char *n2) {
    vkt_status st = vkt_lr_check(&s, lr, steps);
    VT_CHECK(t, st == VKT_ERR_ARG, "%s: %s (%s), expected VKT_ERR_ARG", n1, vkt_status_name(st),
             vkt_error());
    VT_CHECK(t, st != VKT_OK && has(vkt_error(), n1), "\"%s\" lacks \"%s\"", vkt_error(), n1);
    if (n2) VT_CHECK(t, has(vkt_error(), n2), "\"%s\" lacks \"%s\"", vkt_error(), n2);
}

static void test_bad(vt *t) {
    expect_bad(t, (vkt_lr_schedule){.kind = (vkt_lr_kind)7}, 0.1, 10, "unknown", "cosine");
    expect_bad(t, (vkt_lr_schedule){.kind = VKT_LR_STEP, .gamma = 0.1}, 0.1, 10, "--lr-step-size",
               NULL);
    expect_bad(t, (vkt_lr_schedule){.kind = VKT_LR_STEP, .step_size = 3}, 0.1, 10, "--lr-gamma",
               "not 0");
    expect_bad(t, (vkt_lr_schedule){.kind = VKT_LR_STEP, .step_size = 3, .gamma = -0.5}, 0.1, 10,
               "--lr-gamma", "-0.5");
    expect_bad(t, (vkt_lr_schedule){.kind = VKT_LR_COSINE, .min_lr = -1e-3}, 0.1, 10, "--lr-min",
               NULL);
    expect_bad(t, (vkt_lr_schedule){.kind = VKT_LR_COSINE, .min_lr = 0.2}, 0.1, 10, "--lr-min",
               "0.2");
    expect_bad(t, (vkt_lr_schedule){.kind = VKT_LR_COSINE, .warmup = 10}, 0.1, 10,
               "--warmup-steps 10", "spans 10 steps");
    expect_bad(t, (vkt_lr_schedule){.kind = VKT_LR_COSINE, .warmup = 12, .total_steps = 12}, 0.1,
               10, "--warmup-steps 12", "--lr-total-steps");
    expect_bad(t, (vkt_lr_schedule){.kind = VKT_LR_COSINE, .total_steps = 8}, 0.1, 10,
               "--lr-total-steps 8", "10 steps");
    // What the kinds do not read is not checked: a warmup longer than the run is fine for
    // constant and step (the run warms up throughout).
    VT_OK(t, vkt_lr_check(&(vkt_lr_schedule){.warmup = 50}, 0.1, 10));
    VT_OK(t, vkt_lr_check(
                 &(vkt_lr_schedule){.kind = VKT_LR_STEP, .warmup = 50, .step_size = 1, .gamma = 2},
                 0.1, 10));
    VT_CHECK(t,
             strcmp(vkt_lr_kind_name(VKT_LR_CONSTANT), "constant") == 0 &&
                 strcmp(vkt_lr_kind_name(VKT_LR_COSINE), "cosine") == 0 &&
                 strcmp(vkt_lr_kind_name(VKT_LR_STEP), "step") == 0 &&
                 vkt_lr_kind_name((vkt_lr_kind)9) == NULL,
             "kind names");
}

int main(void) {
    vt t = {.name = "test_schedule"};
    test_torch_rates(&t);
    test_bad(&t);
    return vt_finish(&t);
}

// The numbers above: /usr/bin/python3 with
//   import torch
//   from torch.optim.lr_scheduler import LinearLR, CosineAnnealingLR, StepLR, SequentialLR
//   def rates(make, total, lr):
//       p = torch.nn.Parameter(torch.zeros(1)); opt = torch.optim.SGD([p], lr=lr)  # or AdamW
//       s, out = make(opt), []
//       for _ in range(total):
//           out.append(opt.param_groups[0]["lr"]); p.grad = torch.ones(1); opt.step()
//           if s: s.step()
//       return out
//   warm = lambda W: lambda o: LinearLR(o, start_factor=1/(W+1), end_factor=1.0, total_iters=W)
//   seq = lambda W, main: lambda o: SequentialLR(o, [warm(W)(o), main(o)], milestones=[W])
// and, case by case (T_max = T - W):
//   constant                      None
//   constant, warmup 3            warm(3)
//   cosine                        CosineAnnealingLR(o, T_max=12)
//   cosine, lr-min 0.001          CosineAnnealingLR(o, T_max=12, eta_min=0.001)
//   cosine, warmup 3, lr-min      seq(3, lambda o: CosineAnnealingLR(o, T_max=9, eta_min=0.001))
//   cosine, warmup 2              seq(2, lambda o: CosineAnnealingLR(o, T_max=8))
//   cosine over 20, warmup 1      seq(1, lambda o: CosineAnnealingLR(o, T_max=19))
//   step 4, gamma 0.5             StepLR(o, step_size=4, gamma=0.5)
//   step 4, gamma 0.5, warmup 3   seq(3, lambda o: StepLR(o, step_size=4, gamma=0.5))
//   step 1, gamma 0.1, warmup 1   seq(1, lambda o: StepLR(o, step_size=1, gamma=0.1))
