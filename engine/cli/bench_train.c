// bench_train.c (CLI): `vktrain bench train`. Times real training steps of a model (random
// inputs and labels, so no data set is needed and every machine runs the same work) and splits
// each device's step into matmuls, the fused attention kernels, other kernels, communication and
// host overhead, all from GPU timestamps and the host clock of the same run. It then times the
// step's own matmul shapes on their own and reports the step's achieved FLOP/s against them: how
// much the rest of the step costs around the matmuls. (A layer's products are its matrix
// products wherever the step runs them: on lavapipe conv2d computes the stride-1 "same" ones
// with direct kernels instead, engine/ops/conv_ops.h, and their matmul equivalents are timed.)
// --baseline then runs PyTorch CPU on the same model, batch and optimizer (scripts/torch_bench.py
// --serve under Debian's /usr/bin/python3, or $VKT_PYTHON) in --rounds rounds (default 5) that
// alternate with the engine's: each round vktrain's --steps steps, then PyTorch's as many at 1
// thread and at all cores; it reports the faster count, the BLAS PyTorch ran on and the median of
// the rounds' ratios (vktrain over PyTorch's faster count in that round); a PyTorch on netlib's
// reference BLAS is said to be no comparison (NOT COMPARABLE, JSON baseline.comparable false). A
// language model (an embedding first: input [T] token ids) gets ids in [0, V) as its random inputs
// and one label per position, and its throughput in tokens/s as well (samples/s x T).
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "cli.h"
#include "ops.h"
#include "strategy.h"

typedef vkt_mm_shape mm_shape;

const char *cli_rate(double v, char buf[32]) {
    snprintf(buf, 32, v >= 100 ? "%.0f" : "%.3g", v);
    return buf;
}

// The matmuls of one training step of model m at batch B (forward, weight and input gradients),
// as the model's layers declare them.
static int step_shapes(const vkt_model_desc *m, uint32_t B, mm_shape *out, int max) {
    int n = vkt_model_matmuls(m, B, out, max);
    return n < max ? n : max;
}

static double shape_flops(const mm_shape *s) { return 2.0 * s->M * s->N * s->K; }

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

// The step against its matmul shapes run alone, in pairs: one training step (wall clock), then
// every shape once on its own (GPU time, one command buffer, on a second logical device of the
// same physical device), pairs times over, after a pass that warms the shapes up. Each pair
// gives alone / step; *med, *lo and *hi are the median and the quartiles of those ratios, and
// *alone_ns the mean over the passes of the shapes' summed GPU time. Why pairs: this machine's
// speed changes by up to 1.5x for seconds at a time, and a block of steps compared with a block
// of matmuls timed after it read anything from 61% to 125% for the same build; a step and the
// pass after it, 20 ms apart, see the same machine.
static vkt_status step_vs_alone(vkt_context *ctx, int phys, vkt_strategy *st, const float *x,
                                const void *y, uint32_t B, uint32_t step0, const mm_shape *sh,
                                int n, int pairs, double *med, double *lo, double *hi,
                                double *alone_ns) {
    vkt_device *dev = NULL;
    vkt_ops *ops = NULL;
    vkt_cmd *cmd = NULL;
    vkt_buffer *a = NULL, *b = NULL, *c = NULL;
    uint64_t most = 0;
    for (int i = 0; i < n; i++) {
        uint64_t u = (uint64_t)sh[i].M * sh[i].K, v = (uint64_t)sh[i].K * sh[i].N,
                 w = (uint64_t)sh[i].M * sh[i].N;
        if (u > most) most = u;
        if (v > most) most = v;
        if (w > most) most = w;
    }
    double *ratio = calloc((size_t)pairs + 1, sizeof *ratio);
    vkt_status s = ratio ? vkt_device_create(ctx, phys, NULL, &dev)
                         : vkt_set_error(VKT_ERR_HOST_MEMORY, "out of host memory");
    if (s == VKT_OK) s = vkt_ops_create(dev, &ops);
    if (s == VKT_OK) s = vkt_cmd_create(dev, &cmd);
    // Each operand with the network's guard after it, so that on lavapipe the products alone run
    // the compiled variants the step runs (vkt_buffer_create_guarded).
    uint64_t G = VKT_NET_TENSOR_GUARD;
    if (s == VKT_OK) s = vkt_buffer_create_guarded(dev, most * 4, G, "bench a", &a);
    if (s == VKT_OK) s = vkt_buffer_create_guarded(dev, most * 4, G, "bench b", &b);
    if (s == VKT_OK) s = vkt_buffer_create_guarded(dev, most * 4, G, "bench c", &c);
    double sum_alone = 0;
    for (int p = -1; p < pairs && s == VKT_OK; p++) { // p = -1: the warm-up pass, no step
        double step_ns = 0;
        if (p >= 0) {
            struct timespec ts;
            clock_gettime(CLOCK_MONOTONIC, &ts);
            double t0 = ts.tv_sec * 1e9 + ts.tv_nsec, ls;
            s = vkt_strategy_step(st, x, y, B, step0 + (uint32_t)p, &ls);
            clock_gettime(CLOCK_MONOTONIC, &ts);
            step_ns = ts.tv_sec * 1e9 + ts.tv_nsec - t0;
        }
        if (s == VKT_OK) s = vkt_cmd_begin(cmd, true);
        if (s != VKT_OK) break;
        if (p < 0) {
            vkt_cmd_fill(cmd, vkt_buffer_whole(a), 0x3c23d70a); // 0.01f
            vkt_cmd_fill(cmd, vkt_buffer_whole(b), 0x3c23d70a);
            vkt_cmd_barrier(cmd);
        }
        for (int i = 0; i < n; i++) {
            vkt_view va = vkt_buffer_view(a, 0, (uint64_t)sh[i].M * sh[i].K * 4);
            vkt_view vb = vkt_buffer_view(b, 0, (uint64_t)sh[i].K * sh[i].N * 4);
            vkt_view vc = vkt_buffer_view(c, 0, (uint64_t)sh[i].M * sh[i].N * 4);
            vkt_op_matmul(cmd, ops, sh[i].form, vc, va, vb, NULL, 0.0f, sh[i].M, sh[i].N, sh[i].K,
                          "mm");
            vkt_cmd_barrier(cmd);
        }
        s = vkt_ops_status(ops);
        if (s == VKT_OK) s = vkt_cmd_end(cmd);
        if (s == VKT_OK) s = vkt_cmd_submit(cmd);
        if (s == VKT_OK) s = vkt_cmd_wait(cmd, VKT_WAIT_MS);
        const vkt_timing *tm;
        int nt = s == VKT_OK ? vkt_cmd_timings(cmd, &tm) : 0;
        if (s == VKT_OK && nt < n)
            s = vkt_set_error(VKT_ERR_VULKAN, "bench train: the device returned fewer GPU timings "
                                              "than matmuls");
        double pass_ns = 0;
        for (int i = 0; i < nt && i < n; i++)
            pass_ns += (double)(tm[i].end_ns - tm[i].start_ns);
        if (p >= 0 && step_ns > 0) {
            ratio[p] = pass_ns / step_ns;
            sum_alone += pass_ns;
        }
    }
    if (s == VKT_OK) {
        qsort(ratio, (size_t)pairs, sizeof *ratio, cmp_double);
        *med = ratio[pairs / 2];
        *lo = ratio[pairs / 4];
        *hi = ratio[(3 * pairs) / 4];
        *alone_ns = sum_alone / pairs;
    }
    free(ratio);
    vkt_buffer_destroy(c);
    vkt_buffer_destroy(b);
    vkt_buffer_destroy(a);
    vkt_cmd_destroy(cmd);
    vkt_ops_destroy(ops);
    vkt_device_destroy(dev);
    return s;
}

// Single-quotes s for /bin/sh into buf.
static void sh_quote(char *buf, size_t size, const char *s) {
    size_t n = 0;
    if (n + 1 < size) buf[n++] = '\'';
    for (; *s && n + 5 < size; s++) {
        if (*s == '\'') {
            memcpy(buf + n, "'\\''", 4);
            n += 4;
        } else {
            buf[n++] = *s;
        }
    }
    if (n + 1 < size) buf[n++] = '\'';
    buf[n] = '\0';
}

// PyTorch as a co-process: scripts/torch_bench.py --serve on the same model, batch, warm-up and
// optimizer, which answers "run THREADS STEPS" with its samples/s, so that its blocks of steps
// alternate with vktrain's.
typedef struct torch_proc {
    pid_t pid;
    FILE *to, *from;
    const char *py;  // the interpreter ($VKT_PYTHON or /usr/bin/python3), for messages
    char last[1024]; // its last line that was not the answer (an error, for the message)
} torch_proc;

// The next JSON object p prints (other lines kept in p->last), or NULL at its end.
static cJSON *torch_read(torch_proc *p) {
    char line[4096];
    while (p->from && fgets(line, sizeof line, p->from)) {
        line[strcspn(line, "\r\n")] = '\0';
        cJSON *j = line[0] == '{' ? cJSON_Parse(line) : NULL;
        if (cJSON_IsObject(j)) return j;
        cJSON_Delete(j);
        if (strspn(line, " \t") != strlen(line)) snprintf(p->last, sizeof p->last, "%s", line);
    }
    return NULL;
}

static void torch_stop(torch_proc *p) {
    if (p->to) fputs("quit\n", p->to), fclose(p->to);
    if (p->from) fclose(p->from);
    if (p->pid > 0) waitpid(p->pid, NULL, 0);
    p->to = p->from = NULL, p->pid = 0;
}

// Ends p after a failure: its input closed (the script ends at its end) and its last lines read,
// for the message.
static bool torch_failed(torch_proc *p, char *msg, size_t msg_size) {
    if (p->to) fclose(p->to), p->to = NULL;
    for (cJSON *j; (j = torch_read(p)) != NULL;)
        cJSON_Delete(j);
    snprintf(msg, msg_size,
             "bench train --baseline: PyTorch did not run (%s: %s); it needs Debian's "
             "python3-torch for /usr/bin/python3 (apt-get install python3-torch, or "
             "scripts/setup.sh test), or VKT_PYTHON naming a Python with torch",
             p->py, p->last[0] ? p->last : "no output");
    torch_stop(p);
    return false;
}

// Starts PyTorch on the same model, batch, warm-up and optimizer; *header (caller deletes) is
// its description of the run (version, BLAS, optimizer, ...). On failure returns false with the
// reason in msg.
static bool torch_start(const char *model_path, uint32_t B, int warmup, const vkt_optim_desc *od,
                        torch_proc *p, cJSON **header, char *msg, size_t msg_size) {
    memset(p, 0, sizeof *p);
    const char *py = getenv("VKT_PYTHON");
    if (!py || !*py) py = "/usr/bin/python3";
    p->py = py;
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    char qpy[1024], qscript[1200], qmodel[1200], qself[4200], self[4096], cmd[8192];
    // The script builds its module from `vktrain model --torch` of this very binary.
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    self[n > 0 ? n : 0] = '\0';
    sh_quote(qpy, sizeof qpy, py);
    sh_quote(qscript, sizeof qscript, VKT_ASSET_DIR "/../scripts/torch_bench.py");
    sh_quote(qmodel, sizeof qmodel, model_path);
    sh_quote(qself, sizeof qself, self);
    // The optimizer as this run resolved it (vktrain's defaults included), so both sides do the
    // same update.
    char optim[512];
    if (od->kind == VKT_OPTIM_ADAMW)
        snprintf(optim, sizeof optim,
                 "--optimizer adamw --lr %.9g --beta1 %.9g --beta2 %.9g --eps %.9g "
                 "--weight-decay %.9g --clip %.9g",
                 od->lr, od->beta1, od->beta2, od->eps, od->weight_decay, od->clip);
    else
        snprintf(optim, sizeof optim,
                 "--optimizer sgd --lr %.9g --momentum %.9g --nesterov %d --weight-decay %.9g "
                 "--clip %.9g",
                 od->lr, od->momentum, od->nesterov ? 1 : 0, od->weight_decay, od->clip);
    snprintf(cmd, sizeof cmd,
             "exec %s %s %s --batch %u --warmup %d --threads %ld %s --vktrain %s "
             "--serve 2>&1",
             qpy, qscript, qmodel, B, warmup, cpus > 0 ? cpus : 1, optim, qself);
    // Two pipes, both ends here close-on-exec; the child's ends become its stdin and stdout. A
    // PyTorch that dies makes the next request's write fail (EPIPE) instead of a SIGPIPE.
    int to[2] = {-1, -1}, from[2] = {-1, -1};
    if (pipe(to) != 0 || pipe(from) != 0) {
        snprintf(p->last, sizeof p->last, "no pipe");
        if (to[0] >= 0) close(to[0]), close(to[1]);
        return torch_failed(p, msg, msg_size);
    }
    signal(SIGPIPE, SIG_IGN);
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(to[0], 0);
        dup2(from[1], 1);
        close(to[0]), close(to[1]), close(from[0]), close(from[1]);
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    close(to[0]), close(from[1]);
    fcntl(to[1], F_SETFD, FD_CLOEXEC), fcntl(from[0], F_SETFD, FD_CLOEXEC);
    p->pid = pid;
    p->to = pid > 0 ? fdopen(to[1], "w") : NULL;
    p->from = pid > 0 ? fdopen(from[0], "r") : NULL;
    if (!p->to || !p->from) {
        if (!p->to) close(to[1]);
        if (!p->from) close(from[0]);
        snprintf(p->last, sizeof p->last, "could not start /bin/sh");
        return torch_failed(p, msg, msg_size);
    }
    *header = torch_read(p);
    if (!*header) return torch_failed(p, msg, msg_size);
    return true;
}

// PyTorch's samples/s over `steps` steps at `threads` threads (after one untimed step).
static bool torch_run(torch_proc *p, int threads, int steps, double *sps, char *msg,
                      size_t msg_size) {
    if (fprintf(p->to, "run %d %d\n", threads, steps) < 0 || fflush(p->to) != 0)
        return torch_failed(p, msg, msg_size);
    cJSON *j = torch_read(p);
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, "samples_per_sec");
    *sps = cJSON_IsNumber(v) ? v->valuedouble : 0;
    cJSON_Delete(j);
    return *sps > 0 ? true : torch_failed(p, msg, msg_size);
}

// The median of v[0..n), which it sorts.
static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// The baseline in rounds: each round (after a pause) one untimed vktrain step and `steps` timed
// ones, then PyTorch's `steps` at 1 thread and at all cores, back to back. Each round's ratio is
// vktrain's samples/s over PyTorch's faster count in that round; the result (*out, caller deletes)
// is PyTorch's description with the rounds, the medians and the ratio, the median of the rounds'
// ratios. Why rounds: on the team's shared 2-core machines PyTorch's rate moved by 1.8x between
// runs minutes apart, and a ratio of two blocks timed one after the other followed it; a round's
// two sides, a second or two apart, see the same machine. On failure returns false with the
// reason in msg.
static bool torch_rounds(const char *model_path, vkt_strategy *s, const float *x, const void *y,
                         uint32_t B, uint32_t step0, int steps, int warmup, int rounds,
                         const vkt_optim_desc *od, cJSON **out, char *msg, size_t msg_size) {
    torch_proc p;
    cJSON *o = NULL;
    if (!torch_start(model_path, B, warmup, od, &p, &o, msg, msg_size)) return false;
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    int counts[2] = {1, cpus > 1 ? (int)cpus : 1}, ncounts = cpus > 1 ? 2 : 1;
    double *v = calloc((size_t)rounds * (3 + 2), sizeof *v);
    double *vk = v, *best = v + rounds, *ratio = v + 2 * rounds,
           *per[2] = {v + 3 * rounds, v + 4 * rounds};
    int won[2] = {0, 0};
    bool ok = v != NULL;
    if (!ok) snprintf(msg, msg_size, "bench train --baseline: out of host memory");
    cJSON *jr = cJSON_AddArrayToObject(o, "rounds");
    uint32_t step = step0;
    for (int r = 0; r < rounds && ok; r++) {
        // OpenBLAS's pthread workers (PyTorch's products) busy-wait up to 2^28 cycles (~0.1 s)
        // after a call before they sleep (bench.c): vktrain's block starts after they do.
        if (r > 0) nanosleep(&(struct timespec){.tv_nsec = 250000000}, NULL);
        double ls;
        vkt_status st = vkt_strategy_step(s, x, y, B, step++, &ls);
        int64_t t0 = vkt_trace_now_ns();
        for (int i = 0; i < steps && st == VKT_OK; i++)
            st = vkt_strategy_step(s, x, y, B, step++, &ls);
        int64_t t1 = vkt_trace_now_ns();
        if (st != VKT_OK) {
            snprintf(msg, msg_size, "%s", vkt_error());
            ok = false;
            break;
        }
        vk[r] = (double)B * steps / ((t1 - t0) * 1e-9);
        cJSON *jround = cJSON_CreateObject(), *jt = cJSON_CreateObject();
        cJSON_AddNumberToObject(jround, "vktrain", vk[r]);
        cJSON_AddItemToObject(jround, "pytorch", jt);
        cJSON_AddItemToArray(jr, jround);
        int win = 0;
        for (int k = 0; k < ncounts && ok; k++) {
            ok = torch_run(&p, counts[k], steps, &per[k][r], msg, msg_size);
            if (ok && per[k][r] > per[win][r]) win = k;
            char key[16];
            snprintf(key, sizeof key, "%d", counts[k]);
            if (ok) cJSON_AddNumberToObject(jt, key, per[k][r]);
        }
        if (!ok) break;
        won[win]++;
        best[r] = per[win][r];
        ratio[r] = vk[r] / best[r];
        cJSON_AddNumberToObject(jround, "ratio", ratio[r]);
    }
    torch_stop(&p); // (where torch_run failed, torch_failed has stopped it already)
    if (ok) {
        cJSON *tried = cJSON_AddObjectToObject(o, "threads_tried"); // each count's median
        int most = 0;
        for (int k = 0; k < ncounts; k++) {
            char key[16];
            snprintf(key, sizeof key, "%d", counts[k]);
            cJSON_AddNumberToObject(tried, key, median(per[k], rounds));
            if (won[k] > won[most]) most = k;
        }
        cJSON_AddNumberToObject(o, "threads", counts[most]); // faster in the most rounds
        cJSON_AddNumberToObject(o, "threads_rounds_won", won[most]);
        cJSON_AddNumberToObject(o, "steps", steps);
        cJSON_AddNumberToObject(o, "rounds_count", rounds);
        cJSON_AddNumberToObject(o, "vktrain_samples_per_sec", median(vk, rounds));
        double tsps = median(best, rounds);
        cJSON_AddNumberToObject(o, "samples_per_sec", tsps);
        const cJSON *tok = cJSON_GetObjectItemCaseSensitive(o, "tokens_per_sample");
        if (cJSON_IsNumber(tok))
            cJSON_AddNumberToObject(o, "tokens_per_sec", tsps * tok->valuedouble);
        cJSON_AddNumberToObject(o, "ratio", median(ratio, rounds));
        *out = o;
    } else {
        cJSON_Delete(o);
    }
    free(v);
    return ok;
}

// ---------------------------------------------------------------------------------------------
// Timed training steps (bench train and bench suite)

uint32_t cli_bench_lm_tokens(const vkt_model_desc *m) {
    // A language model: token ids [T] into an embedding first.
    bool lm = m->nlayers > 0 && m->input.ndim == 1 &&
              !strcmp(vkt_layer_type_name(&m->layers[0]), "embedding");
    return lm ? m->input_features : 0;
}

vkt_status cli_bench_batch(const vkt_model_desc *m, uint32_t B, float **x_out, void **y_out) {
    uint32_t tokens = cli_bench_lm_tokens(m);
    uint32_t vocab = tokens ? m->layers[0].units : 0; // the embedding's rows
    uint32_t per = vkt_model_targets_per_sample(m), classes = vkt_model_classes(m);
    float *x = malloc((size_t)B * m->input_features * 4);
    void *y = malloc((size_t)B * per * 4);
    *x_out = NULL, *y_out = NULL;
    if (!x || !y) {
        free(x), free(y);
        return vkt_set_error(VKT_ERR_HOST_MEMORY, "out of host memory for the benchmark's batch");
    }
    uint64_t r = 0x9e3779b97f4a7c15ull;
    for (uint64_t i = 0; i < (uint64_t)B * m->input_features; i++) {
        r ^= r << 13, r ^= r >> 7, r ^= r << 17;
        x[i] = tokens ? (float)((r >> 40) % vocab) : (float)(r >> 40) / (float)(1 << 24);
    }
    // mse: one-hot rows of output_features; softmax_cross_entropy: a class in [0, classes) for
    // each of the per-sample positions (one for a classifier, T for a language model).
    for (uint64_t i = 0; i < (uint64_t)B * per; i++) {
        r ^= r << 13, r ^= r >> 7, r ^= r << 17;
        if (m->loss == VKT_LOSS_MSE)
            ((float *)y)[i] = (float)(i % per == (i / per) % per);
        else
            ((uint32_t *)y)[i] = (uint32_t)((r >> 40) % classes);
    }
    *x_out = x, *y_out = y;
    return VKT_OK;
}

vkt_status cli_bench_run_steps(vkt_strategy *s, const vkt_model_desc *m, const float *x,
                               const void *y, uint32_t B, cli_bench_steps *r) {
    r->steps = 0;
    r->wall_ns = 0;
    r->loss0 = 0;
    uint32_t per = vkt_model_targets_per_sample(m);
    vkt_status st = VKT_OK;
    for (int i = 0; st == VKT_OK; i++) {
        int timed = i - r->warmup; // the timed steps run so far
        if (timed >= r->max_steps || (timed >= r->min_steps && r->wall_ns >= r->min_seconds * 1e9))
            break;
        if (i == r->warmup) vkt_strategy_ahead_wait(s), vkt_strategy_reset_stats(s);
        if (i == 0) vkt_startup_counters_get(&r->at_first_begin);
        double ls;
        int64_t t0 = vkt_trace_now_ns();
        st = vkt_strategy_step(s, x, y, B, (uint32_t)i + 1, &ls);
        int64_t t1 = vkt_trace_now_ns();
        if (st != VKT_OK) break;
        if (i >= r->warmup) r->wall_ns += (double)(t1 - t0), r->steps++;
        if (i == 0) {
            vkt_startup_counters_get(&r->at_first_end);
            r->first_begin_ns = t0, r->first_end_ns = t1;
            r->loss0 = ls / ((double)B * per); // the mean over every target
        }
    }
    return st;
}

cli_step_split cli_bench_split(const vkt_device_stats *ds, double wall_ns) {
    cli_step_split p;
    double w = ds->wall_ns > 0 ? ds->wall_ns : wall_ns;
    if (!(w > 0)) return (cli_step_split){.host_and_idle = 1};
    p.matmul = ds->matmul_ns / w;
    p.attention = ds->attention_ns / w;
    p.communication = ds->comm_ns / w;
    p.other_kernels = (ds->busy_ns - ds->matmul_ns - ds->attention_ns - ds->gpu_comm_ns) / w;
    if (p.other_kernels < 0) p.other_kernels = 0;
    p.host_and_idle = 1 - p.matmul - p.attention - p.other_kernels - p.communication;
    if (p.host_and_idle < 0) p.host_and_idle = 0;
    return p;
}

vkt_status cli_bench_train_point(const vkt_strategy_desc *sd, uint64_t seed, cli_bench_steps *run,
                                 cli_train_point *out) {
    memset(out, 0, sizeof *out);
    uint32_t B = sd->batch;
    float *x = NULL;
    void *y = NULL;
    vkt_strategy *s = NULL;
    vkt_startup_counters c0, c1;
    vkt_startup_counters_get(&c0);
    int64_t t0 = vkt_trace_now_ns();
    vkt_status st = cli_bench_batch(sd->model, B, &x, &y);
    if (st == VKT_OK) st = vkt_strategy_create(sd, &s);
    if (st == VKT_OK) st = vkt_strategy_init(s, seed);
    if (st == VKT_OK) st = vkt_strategy_prebuild(s);
    int64_t t1 = vkt_trace_now_ns();
    if (st == VKT_OK) st = cli_bench_run_steps(s, sd->model, x, y, B, run);
    if (st == VKT_OK) {
        vkt_device_stats ds;
        vkt_strategy_stats(s, 0, &ds);
        vkt_startup_counters_get(&c1);
        out->steps = run->steps;
        out->step_ms = run->wall_ns / run->steps * 1e-6;
        out->samples_per_sec = B * run->steps / (run->wall_ns * 1e-9);
        out->split = cli_bench_split(&ds, run->wall_ns);
        out->peak_memory = ds.peak_memory;
        out->loss0 = run->loss0;
        out->setup_seconds = (t1 - t0) * 1e-9;
        out->first_step_seconds = (run->first_end_ns - run->first_begin_ns) * 1e-9;
        out->kernels_built = c1.kernels_built - c0.kernels_built;
        out->shapes_measured = c1.shapes_measured - c0.shapes_measured;
    }
    vkt_strategy_destroy(s);
    free(x);
    free(y);
    return st;
}

// ---------------------------------------------------------------------------------------------
// vktrain bench train

int cli_bench_train(int argc, char **argv) {
    // bench-only flags first, the rest are the run options (--model, --device, --strategy, ...)
    int steps = 20, warmup = 3, rounds = 5;
    bool baseline = false;
    char *rest[256];
    int nrest = 0;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--baseline")) {
            baseline = true;
        } else if ((!strcmp(argv[i], "--steps") || !strcmp(argv[i], "--rounds")) && i + 1 < argc) {
            bool st = !strcmp(argv[i], "--steps");
            uint64_t n;
            if (!cli_parse_u64(argv[i], argv[i + 1], 1, st ? 100000 : 1000, &n)) return 2;
            *(st ? &steps : &rounds) = (int)n;
            i++;
        } else if (nrest < 256) {
            rest[nrest++] = argv[i];
        }
    }
    int64_t cli_start = vkt_trace_now_ns(); // the context's opening counts to the first step
    cli_run_options c;
    vkt_context *ctx;
    int rc = cli_open(nrest, rest, &c, &ctx);
    if (rc) return rc;
    int64_t start_ns = vkt_trace_now_ns();
    vkt_startup_counters at_start;
    vkt_startup_counters_get(&at_start);
    vkt_model_desc m;
    if (vkt_model_load(c.o.model_path, &m) != VKT_OK) {
        vkt_context_destroy(ctx);
        return cli_fail(vkt_error());
    }
    vkt_strategy_desc sd = c.o.strategy;
    sd.model = &m;
    sd.batch = c.o.batch;
    sd.optim = c.o.optim;
    // The split below needs the dispatches timed: every one where the strategy splits work
    // across devices; single times one step in 16 on its own (vkt_strategy_desc.profile_kernels),
    // so that samples/s is what `vktrain train` runs at, and the split is those steps'.
    sd.profile_kernels = sd.kind != VKT_STRATEGY_SINGLE;
    vkt_strategy *s = NULL;
    uint32_t B = c.o.batch;
    uint32_t tokens = cli_bench_lm_tokens(&m);
    bool lm = tokens > 0;
    int64_t data_ns = vkt_trace_now_ns() - start_ns; // the model (no data: inputs are random)
    float *x = NULL;
    void *y = NULL;
    vkt_status st = cli_bench_batch(&m, B, &x, &y);
    if (st == VKT_OK) st = vkt_strategy_create(&sd, &s);
    if (st == VKT_OK) st = vkt_strategy_init(s, c.o.seed);
    if (st == VKT_OK) st = vkt_strategy_prebuild(s);
    cli_bench_steps run = {.warmup = warmup, .min_steps = steps, .max_steps = steps};
    if (st == VKT_OK) st = cli_bench_run_steps(s, &m, x, y, B, &run);
    double wall_ns = run.wall_ns, loss0 = run.loss0;
    vkt_first_step first = {0}; // the first warm-up step: kernels built and shapes tuned
    if (st == VKT_OK)
        vkt_first_step_split(&first, start_ns, data_ns, &at_start, run.first_begin_ns,
                             &run.at_first_begin, run.first_end_ns, &run.at_first_end);
    first.later_step_seconds = wall_ns / steps * 1e-9;
    double context_s = (start_ns - cli_start) * 1e-9;
    mm_shape shapes[3 * 256];
    int nshapes = step_shapes(&m, B, shapes, 3 * 256);
    double step_flops = 0;
    for (int i = 0; i < nshapes; i++)
        step_flops += shape_flops(&shapes[i]);
    // The per-device split of the training steps above, before the comparison adds steps.
    int ndev = st == VKT_OK ? vkt_strategy_device_count(s) : 0;
    vkt_device_stats *dstats = calloc((size_t)ndev + 1, sizeof *dstats);
    for (int d = 0; d < ndev && dstats; d++)
        vkt_strategy_stats(s, d, &dstats[d]);
    // The standalone comparison is meaningful for one device holding the whole model.
    bool compare = sd.kind == VKT_STRATEGY_SINGLE;
    double ratio_med = 0, ratio_lo = 0, ratio_hi = 0, alone_ns = 0;
    if (st == VKT_OK && !dstats) st = vkt_set_error(VKT_ERR_HOST_MEMORY, "out of host memory");
    if (st == VKT_OK && compare)
        st = step_vs_alone(ctx, sd.devices[0], s, x, y, B, (uint32_t)(warmup + steps) + 1, shapes,
                           nshapes, steps, &ratio_med, &ratio_lo, &ratio_hi, &alone_ns);
    if (st != VKT_OK) {
        rc = cli_fail(vkt_error());
    } else {
        double sps = B * steps / (wall_ns * 1e-9);
        double step_gflops = step_flops * steps / wall_ns;
        const vkt_device_info *info = vkt_context_device_info(ctx, sd.devices[0]);
        char api[32];
        vkt_api_version_string(info->api_version, api, sizeof api);
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "benchmark", "train");
        cJSON_AddStringToObject(o, "model", m.name);
        cJSON_AddStringToObject(o, "strategy", vkt_strategy_name(sd.kind));
        cJSON_AddBoolToObject(o, "shard_optimizer", sd.shard_optimizer);
        cJSON_AddStringToObject(o, "device", info->name);
        cJSON_AddStringToObject(o, "driver", info->driver);
        cJSON_AddStringToObject(o, "api_version", api);
        cJSON_AddNumberToObject(o, "vendor_id", info->vendor_id);
        cJSON_AddNumberToObject(o, "batch", B);
        cJSON_AddNumberToObject(o, "steps", steps);
        cJSON_AddNumberToObject(o, "samples_per_sec", sps);
        if (lm) {
            cJSON_AddNumberToObject(o, "tokens_per_sample", tokens);
            cJSON_AddNumberToObject(o, "tokens_per_sec", sps * tokens);
        }
        cJSON_AddNumberToObject(o, "step_ms", wall_ns / steps * 1e-6);
        cJSON_AddNumberToObject(o, "step_gflops", step_gflops);
        cJSON_AddNumberToObject(o, "initial_loss", loss0); // the first step's, at initialization
        if (compare && alone_ns > 0) {
            cJSON_AddNumberToObject(o, "matmul_alone_gflops", step_flops / alone_ns);
            cJSON_AddNumberToObject(o, "step_vs_matmul_alone", ratio_med);
            cJSON_AddNumberToObject(o, "step_vs_matmul_alone_q1", ratio_lo);
            cJSON_AddNumberToObject(o, "step_vs_matmul_alone_q3", ratio_hi);
        }
        cli_add_first_step(o, &first, context_s);
        cli_host machine;
        char machine_line[512];
        cli_host_get(&machine);
        cJSON_AddItemToObject(o, "host", cli_host_json(&machine));
        cJSON *devs = cJSON_AddArrayToObject(o, "devices");
        char tok[64] = "";
        if (lm) snprintf(tok, sizeof tok, " (%.0f tokens/s, %u a sample)", sps * tokens, tokens);
        char rb[32];
        printf("bench train: %s, batch %u, %s%s on %s: %s samples/s%s, %.2f ms/step, %.2f "
               "GFLOP/s in the step\n",
               m.name, B, vkt_strategy_name(sd.kind),
               sd.shard_optimizer ? " --shard-optimizer" : "", vkt_strategy_devices(s),
               cli_rate(sps, rb), tok, wall_ns / steps * 1e-6, step_gflops);
        printf("  host: %s\n", cli_host_text(&machine, machine_line, sizeof machine_line));
        // The text names attention where the step ran attention kernels; the JSON always has it.
        bool attn = false;
        for (int d = 0; d < ndev; d++)
            attn = attn || dstats[d].attention_ns > 0;
        for (int d = 0; d < ndev; d++) {
            vkt_device_stats ds = dstats[d];
            cli_step_split sp = cli_bench_split(&ds, wall_ns);
            double mm = sp.matmul, at = sp.attention, other = sp.other_kernels,
                   comm = sp.communication, host = sp.host_and_idle;
            cJSON *j = cJSON_CreateObject();
            cJSON_AddStringToObject(j, "device", ds.label);
            cJSON_AddNumberToObject(j, "matmul_fraction", mm);
            cJSON_AddNumberToObject(j, "attention_fraction", at);
            cJSON_AddNumberToObject(j, "other_kernels_fraction", other);
            cJSON_AddNumberToObject(j, "communication_fraction", comm);
            cJSON_AddNumberToObject(j, "host_and_idle_fraction", host);
            cJSON_AddNumberToObject(j, "peak_memory_bytes", (double)ds.peak_memory);
            cJSON_AddNumberToObject(j, "bytes_moved_per_step", (double)ds.bytes_moved / steps);
            cJSON_AddNumberToObject(j, "steps_resubmitted", (double)ds.steps_resubmitted);
            cJSON_AddItemToArray(devs, j);
            char a[48] = "", r[96] = "";
            if (attn) snprintf(a, sizeof a, "attention %.1f%%, ", 100 * at);
            if (ds.steps_resubmitted)
                snprintf(r, sizeof r, "; %llu of %d steps submitted as recorded for an earlier one",
                         (unsigned long long)ds.steps_resubmitted, steps);
            printf("  %s: matmul %.1f%%, %sother kernels %.1f%%, communication %.1f%%, host "
                   "overhead and idle %.1f%%%s\n",
                   ds.label, 100 * mm, a, 100 * other, 100 * comm, 100 * host, r);
        }
        bool quirk = false;
        for (int d = 0; d < ndev; d++)
            quirk =
                quirk || vkt_context_device_info(sd.ctx, sd.devices[d])->timestamps_delay_signal;
        if (quirk && sd.kind == VKT_STRATEGY_REPLICATED)
            printf("  every dispatch timed for this split: on lavapipe timestamps hold a submit's "
                   "signal back until its queue runs dry, so the buckets' reduction does not "
                   "overlap the backward here; vktrain train runs those buckets untimed\n");
        cli_print_first_step(&first, context_s, "  ", "timed steps");
        if (compare && alone_ns > 0)
            printf("  the step's matmul shapes alone: %.2f GFLOP/s; the whole step achieves %.0f%% "
                   "of that (median of %d steps each paired with its shapes run alone right "
                   "after it; quartiles %.0f%%-%.0f%%)\n",
                   step_flops / alone_ns, 100 * ratio_med, steps, 100 * ratio_lo, 100 * ratio_hi);
        cJSON *torch = NULL;
        char msg[1024];
        // The steps so far: the warm-up and timed ones, and step_vs_alone's.
        uint32_t next_step = (uint32_t)(warmup + 2 * steps) + 1;
        if (baseline && !torch_rounds(c.o.model_path, s, x, y, B, next_step, steps, warmup, rounds,
                                      &sd.optim, &torch, msg, sizeof msg)) {
            rc = cli_fail(msg);
            rc = rc ? rc : 2;
        }
        if (torch) {
            double tsps = cJSON_GetObjectItemCaseSensitive(torch, "samples_per_sec")->valuedouble;
            double ratio = cJSON_GetObjectItemCaseSensitive(torch, "ratio")->valuedouble;
            const cJSON *ver = cJSON_GetObjectItemCaseSensitive(torch, "version");
            const cJSON *thr = cJSON_GetObjectItemCaseSensitive(torch, "threads");
            const cJSON *blas = cJSON_GetObjectItemCaseSensitive(torch, "blas");
            const cJSON *blib = cJSON_GetObjectItemCaseSensitive(torch, "blas_library");
            const cJSON *tried = cJSON_GetObjectItemCaseSensitive(torch, "threads_tried");
            const cJSON *opt = cJSON_GetObjectItemCaseSensitive(torch, "optimizer");
            char ttok[64] = "", tr[128] = "";
            if (lm) snprintf(ttok, sizeof ttok, " (%.0f tokens/s)", tsps * tokens);
            for (const cJSON *t = tried ? tried->child : NULL; t; t = t->next)
                if (cJSON_IsNumber(t))
                    snprintf(tr + strlen(tr), sizeof tr - strlen(tr), "%s%s: %.3g",
                             t == tried->child ? "" : ", ", t->string, t->valuedouble);
            const cJSON *kind = cJSON_GetObjectItemCaseSensitive(torch, "blas_kind");
            bool comparable = !cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(torch, "comparable"));
            const cJSON *won = cJSON_GetObjectItemCaseSensitive(torch, "threads_rounds_won");
            printf("  PyTorch %s CPU (%d thread%s, faster in %d of %d rounds; median samples/s by "
                   "threads {%s}; BLAS %s, %s: %s), same model, batch and %s: %s samples/s%s; "
                   "vktrain / PyTorch = %.2f%s\n",
                   cJSON_IsString(ver) ? ver->valuestring : "?",
                   cJSON_IsNumber(thr) ? thr->valueint : 0,
                   cJSON_IsNumber(thr) && thr->valueint == 1 ? "" : "s",
                   cJSON_IsNumber(won) ? won->valueint : 0, rounds, tr,
                   cJSON_IsString(blas) ? blas->valuestring : "?",
                   cJSON_IsString(kind) ? kind->valuestring : "?",
                   cJSON_IsString(blib) ? blib->valuestring : "?",
                   cJSON_IsString(opt) ? opt->valuestring : "optimizer", cli_rate(tsps, rb), ttok,
                   ratio, comparable ? "" : " (NOT COMPARABLE)");
            char rs[512] = "";
            const cJSON *jr = cJSON_GetObjectItemCaseSensitive(torch, "rounds");
            for (const cJSON *r = jr ? jr->child : NULL; r; r = r->next)
                snprintf(rs + strlen(rs), sizeof rs - strlen(rs), "%s%.2f",
                         r == jr->child ? "" : " / ",
                         cJSON_GetObjectItemCaseSensitive(r, "ratio")->valuedouble);
            const cJSON *vks = cJSON_GetObjectItemCaseSensitive(torch, "vktrain_samples_per_sec");
            char rb2[32];
            printf("  the ratio is the median of %d rounds, each vktrain's %d steps then "
                   "PyTorch's %d at each thread count, back to back (a round's sides see the same "
                   "machine): %s; vktrain %s samples/s over the rounds\n",
                   rounds, steps, steps, rs,
                   cli_rate(cJSON_IsNumber(vks) ? vks->valuedouble : 0, rb2));
            if (!comparable)
                printf("  NOT COMPARABLE: PyTorch ran on netlib's reference BLAS, whose products "
                       "are unoptimised, so the ratio flatters vktrain; make OpenBLAS the system "
                       "BLAS (apt-get install libopenblas0-pthread, as scripts/setup.sh test "
                       "does) and run again\n");
            cJSON_AddItemToObject(o, "baseline", torch);
        }
        char cmdline[2048] = "vktrain bench train";
        for (int i = 0; i < argc; i++) {
            strncat(cmdline, " ", sizeof cmdline - strlen(cmdline) - 1);
            strncat(cmdline, argv[i], sizeof cmdline - strlen(cmdline) - 1);
        }
        cJSON_AddStringToObject(o, "command", cmdline);
        printf("  reproduce: %s\n", cmdline);
        if (c.json) {
            char *js = cJSON_PrintUnformatted(o);
            printf("%s\n", js);
            cJSON_free(js);
        }
        cJSON_Delete(o);
    }
    free(dstats);
    free(x);
    free(y);
    vkt_strategy_destroy(s);
    vkt_model_free(&m);
    vkt_context_destroy(ctx);
    return rc;
}
