// ahead.c: compiling a device's kernels ahead of their first dispatch, on a thread of their own.
//
// lavapipe (Mesa 22.3) builds a pipeline's machine code with LLVM at its first dispatch, for the
// descriptors bound there (its variant key), one kernel after another on the device's queue
// thread: a cold first step is mostly that (fashion_mlp: 6.7 of 7.0 s on a 2-vCPU Zen 2), while
// the machine's other core waits. It keeps what it compiles in Mesa's shader cache, keyed by the
// shader and the variant key, and looks there first. So when a kernel's first dispatch is
// recorded on a device that compiles ahead, this file hands a description of it (the shader, its
// specialization and push constants, and per binding the buffer's size and guard and the view's
// range, which is what the variant key reads of a binding) to a thread with a second logical
// device of the same physical device. That thread builds the same pipeline there, binds buffers
// of the same sizes in the same ranges, and runs the dispatch's first workgroup on them (lavapipe
// skips a dispatch of no workgroups before it compiles; the buffers' contents are never looked
// at, and the kernels bound every index by the push constants, as in the real dispatch):
// lavapipe compiles the variant, into the shared cache. At the submit of a recording that noted
// jobs (vkt_ahead_build, from cmd.c) the thread and the submitting thread (on a third device of
// its own) each take the job whose pipeline took longest to build, and the submit waits until
// every one is built: the two cores compile different kernels, end together, and the device's
// queue thread then finds each kernel in the cache. The submitting thread's first job, the
// quickest to build, tells a warm cache, where it stops (build_front). (Until 2026-12-06 the queue
// thread met the kernels from the first at its dispatches while this thread compiled from the
// last: where they met, both compiled the same kernel, and on a Zen 3 that was fashion_mlp's
// biggest, its SGD-epilogue product, so the cold first step was no shorter than without this
// file; docs/PERFORMANCE.md, fourteenth pass.) A job whose dispatch the device has already run is
// dropped. The results are the same: the same pipelines run the same code. Where the first of
// those jobs was cold, it is built once more to see that Mesa's cache kept it; where it did not,
// the device would compile every kernel again, and compiling ahead stops (cache_keeps_nothing).
//
// Where it does not pay (a warm cache) the work is one job before the submit, then, on the
// thread, a pipeline build, a cache lookup and one workgroup per kernel, as the queue thread
// meets the same kernels in the cache; the thread then takes the last noted first. It runs on
// lavapipe only, unless vkt_context_desc.ahead is VKT_AHEAD_OFF, and only while the device is the
// context's one open CPU device: beside another (a second lavapipe device compiling the same
// kernels, SwiftShader building and tuning its own), the other core is not idle, and a cold
// lavapipe + SwiftShader run was 5% slower with the thread's compiles than without
// (docs/PERFORMANCE.md); its jobs are then dropped. Ranks of an MPI run on one machine each have
// their own context: the CLI turns this off for them (engine/cli/train.c, vkt_world_local_size). A
// failure on the second device (out of memory, say) drops that kernel, and one on the submitting
// thread's device (it fails to open, say) leaves the jobs not yet taken; neither is an error of the
// run: the queue thread compiles those as usual.
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "trace.h"
#include "tune.h"
#include "vkt_abi.h"
#include "vkt_internal.h"

typedef struct ahead_job {
    // The main device's timeline value of the submit that will hold the dispatch: once the
    // device has reached it, its queue thread has compiled the kernel and the job is dropped.
    uint64_t after;
    int64_t build_ns; // the kernel's pipeline build on the device (vkt_kernel.build_ns)
    vkt_shader_id id;
    int nspec, nbind;
    uint32_t spec[32];
    uint32_t push[VKT_MAX_PUSH_BYTES / 4], push_size;
    struct {
        uint64_t buffer_size, guard, offset, size;
    } bind[32];
} ahead_job;

typedef struct vkt_ahead {
    vkt_device *dev; // the device whose kernels are compiled
    pthread_t thread;
    bool started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    // The jobs in the order noted: the first nready were released by a submit (the thread takes
    // the last of those first), the rest wait for the next submit. Released at the submit so
    // that the thread starts from the end of what a recording noted, not from its first kernel,
    // which the queue thread compiles first too.
    ahead_job *jobs;
    int njobs, nready, cap;
    bool stop;
    bool busy;             // the thread is running a job
    uint32_t queued, done; // noted; built on the second device (or the submitter's, below)
    // The devices the jobs are built on, of the same physical device: the thread's (helper) and
    // the submitting thread's in vkt_ahead_build (helper2). Both opened by open_helpers, at the
    // first submit with a job that pays; tried: opened or failed (not retried); opened: helper
    // was.
    vkt_device *helper, *helper2;
    bool tried, opened;
    bool front; // a thread is in build_front (one at a time: helper2's queue is not shared)
    // The driver's shader cache kept nothing (build_front's probe): every job is dropped.
    bool uncached;
} vkt_ahead;

static bool compiles_ahead(const vkt_device *dev) {
    return !dev->helper && dev->ctx->ahead != VKT_AHEAD_OFF &&
           dev->info->driver_id == VK_DRIVER_ID_MESA_LLVMPIPE;
}

// What run_job measured: the pipeline's build on the helper, and the dispatch from its submit to
// its end, which is where lavapipe compiles the kernel or finds it in Mesa's cache (0 where it
// did not run). The buffers and the rest before it are not in it: under ASan they took 20-30 ms
// of char_gpt's quickest job, as long as its compile.
typedef struct job_times {
    int64_t build_ns, dispatch_ns;
} job_times;

// Builds job's pipeline on helper and runs one workgroup of it, with buffers of the job's sizes
// bound in its ranges and the job's push constants.
static job_times run_job(vkt_device *helper, const ahead_job *job) {
    job_times t = {0, 0};
    vkt_kernel *k = NULL;
    vkt_buffer *bufs[32] = {0};
    vkt_view views[32];
    vkt_cmd *cmd = NULL;
    vkt_status s = vkt_kernel_create(helper, job->id, job->spec, job->nspec, &k);
    for (int i = 0; s == VKT_OK && i < job->nbind; i++) {
        s = vkt_buffer_create(helper, job->bind[i].buffer_size, "compile-ahead binding", &bufs[i]);
        if (s == VKT_OK) {
            bufs[i]->guard = job->bind[i].guard;
            views[i] = vkt_buffer_view(bufs[i], job->bind[i].offset, job->bind[i].size);
        }
    }
    if (s == VKT_OK) s = vkt_cmd_create(helper, &cmd);
    if (s == VKT_OK) s = vkt_cmd_begin(cmd, false);
    if (s == VKT_OK) {
        vkt_cmd_dispatch(cmd, k, views, job->nbind, job->push, job->push_size, 1, 1, 1, NULL);
        s = vkt_cmd_end(cmd);
    }
    int64_t t0 = vkt_trace_now_ns();
    if (s == VKT_OK) s = vkt_cmd_submit(cmd);
    if (s == VKT_OK) s = vkt_cmd_wait(cmd, VKT_WAIT_MS);
    if (s == VKT_OK) t = (job_times){k->build_ns, vkt_trace_now_ns() - t0};
    vkt_cmd_destroy(cmd);
    for (int i = 0; i < job->nbind; i++)
        vkt_buffer_destroy(bufs[i]);
    vkt_kernel_destroy(k);
    return t;
}

// Removes and returns ready job i (i < a->nready).
static ahead_job take(vkt_ahead *a, int i) {
    ahead_job job = a->jobs[i];
    memmove(&a->jobs[i], &a->jobs[i + 1], (size_t)(a->njobs - i - 1) * sizeof *a->jobs);
    a->njobs--, a->nready--;
    return job;
}

// The ready job whose pipeline took longest to build on the device, and the quickest: the
// pipeline build (NIR) goes with the compile (LLVM) it precedes, about 10-20 times longer cold
// (fashion_cnn: 444 ms and 8.6 s for its SGD-epilogue product, 2-4 ms and 60-290 ms for the
// small kernels). Two builders taking the longest first end together; the last noted first, as
// the thread took them, left fashion_cnn's SGD-epilogue kernel to be the last and one core idle
// 7 s.
static int pick_longest(const vkt_ahead *a) {
    int at = 0;
    for (int i = 1; i < a->nready; i++)
        if (a->jobs[i].build_ns > a->jobs[at].build_ns) at = i;
    return at;
}
static int pick_quickest(const vkt_ahead *a) {
    int at = 0;
    for (int i = 1; i < a->nready; i++)
        if (a->jobs[i].build_ns < a->jobs[at].build_ns) at = i;
    return at;
}

// Whether a job may run now: the device has not yet run its dispatch (else its queue thread has
// compiled the kernel) and is the context's one open CPU device.
static bool job_pays(vkt_ahead *a, const ahead_job *job) {
    if (__atomic_load_n(&a->uncached, __ATOMIC_RELAXED)) return false;
    uint64_t reached = 0;
    bool late = vkt_device_completed(a->dev, &reached) == VKT_OK && reached >= job->after;
    bool alone = __atomic_load_n(&a->dev->ctx->cpu_open, __ATOMIC_RELAXED) <= 1;
    return !late && alone;
}

// The thread: runs the ready jobs on a->helper (opened by open_helpers; without it every job is
// dropped and the queue thread compiles those kernels). It calls Vulkan only while a->busy.
static void *ahead_thread(void *arg) {
    vkt_ahead *a = arg;
    vkt_busy_ignore_thread(true);
    pthread_mutex_lock(&a->mu);
    for (;;) {
        while (!a->stop && a->nready == 0)
            pthread_cond_wait(&a->cv, &a->mu);
        if (a->stop) break;
        // While a submit waits for its jobs (a->front), the longest first; otherwise the last
        // noted, away from where the queue thread starts.
        ahead_job job = take(a, a->front ? pick_longest(a) : a->nready - 1);
        vkt_device *helper = a->helper;
        a->busy = true;
        pthread_mutex_unlock(&a->mu);
        bool run = helper && job_pays(a, &job);
        if (run) run_job(helper, &job);
        pthread_mutex_lock(&a->mu);
        a->busy = false;
        if (run) a->done++, vkt_startup_count_ahead();
        pthread_cond_broadcast(&a->cv);
    }
    pthread_mutex_unlock(&a->mu);
    return NULL;
}

void vkt_ahead_note(vkt_device *dev, vkt_kernel *k, const vkt_view *bind, int nbind,
                    const void *push, uint32_t push_size) {
    k->ahead_noted = true;
    vkt_ahead *a = dev->ahead;
    if (!a || nbind > 32 || push_size > VKT_MAX_PUSH_BYTES) return;
    if (__atomic_load_n(&a->uncached, __ATOMIC_RELAXED)) return;
    ahead_job job = {.after = dev->timeline_value + 1,
                     .build_ns = k->build_ns,
                     .id = k->id,
                     .nspec = k->nspec,
                     .nbind = nbind};
    memcpy(job.spec, k->spec, sizeof job.spec);
    if (push_size) memcpy(job.push, push, push_size);
    job.push_size = push_size;
    for (int i = 0; i < nbind; i++) {
        job.bind[i].buffer_size = bind[i].buffer->size;
        job.bind[i].guard = bind[i].buffer->guard;
        job.bind[i].offset = bind[i].offset;
        job.bind[i].size = bind[i].size;
    }
    pthread_mutex_lock(&a->mu);
    if (a->njobs == a->cap) {
        int cap = a->cap ? 2 * a->cap : 16;
        ahead_job *nj = realloc(a->jobs, (size_t)cap * sizeof *nj);
        if (!nj) {
            pthread_mutex_unlock(&a->mu);
            return;
        }
        a->jobs = nj, a->cap = cap;
    }
    a->jobs[a->njobs++] = job;
    a->queued++;
    pthread_mutex_unlock(&a->mu);
}

// A job's dispatch on a helper that took less than HIT_RATIO times its kernel's pipeline build,
// plus HIT_SLACK_NS, found its machine code in Mesa's cache (a hit) rather than compiled it. The
// pipeline build is the least of the device's and the helper's (least_build: one that the
// machine's other work lengthened, twice here, would make a compile look quick). Both are the
// same Mesa code's on the same machine, so the ratio holds on a slow CPU and a fast one; the
// slack is the wait for a core on a busy machine. Under validation on a 2-vCPU Zen 4, for the
// quickest kernels of fashion_mlp and char_gpt (0.6-2.3 ms to build; under ASan 1.7-7.1 ms): a
// compile took 10-27 times the build and 17 ms at least (under ASan, whose allocator slows Mesa's
// pipeline build more than LLVM, 6.3-27 times and 30 ms), a hit 0.2-2.6 times, and up to 11 ms
// beside two processes that kept both cores busy. (Until 2026-12-07 the rule was the whole job's
// time, buffers included, under 4 times the build plus 20 ms: a cold compile on a fast machine
// came under the 20 ms, and under ASan char_gpt's hits did not.)
enum { HIT_RATIO = 3 };
#define HIT_SLACK_NS 5000000
static int64_t least_build(const ahead_job *job, job_times t) {
    return job->build_ns > 0 && job->build_ns < t.build_ns ? job->build_ns : t.build_ns;
}
static bool cache_hit(const ahead_job *job, job_times t) {
    int64_t build = least_build(job, t);
    return t.dispatch_ns > 0 && build > 0 && t.dispatch_ns < HIT_RATIO * build + HIT_SLACK_NS;
}

// The helper's first dispatch also starts its use of the cache, so a first job whose kernel the
// cache turns out to keep (cache_keeps_nothing) was a hit where its dispatch took less than
// FIRST_HIT_RATIO times the pipeline build: 6.2 at most here, against 8.8 and more for a compile.
// Taking a warm cache for a cold one builds every pipeline before the submit; the other way
// leaves the kernels to the thread and the queue thread.
enum { FIRST_HIT_RATIO = 8 };

// Whether Mesa's shader cache keeps what the helpers compile: a job whose first build was not a
// hit is built again on helper2, where a cache that keeps it gives its machine code back
// (cache_hit; under validation on a 2-vCPU Zen 4, in 0.5-1.1 ms against 17-80 ms). Where the cache
// keeps nothing (MESA_SHADER_CACHE_DISABLE=true, a cache directory that cannot be written, a
// process whose effective user is not its real one: Mesa then turns it off) every kernel compiled
// ahead was compiled again by the device's queue thread: fashion_mlp's cold first step took
// 5.2-6.6 s with this file's builds against 3.3-4.0 s without (docs/PERFORMANCE.md, twenty-first
// pass). Mesa writes its cache files on a thread of its own at the lowest priority, which a busy
// machine (the suite's other test beside this one) leaves waiting, so a build that finds nothing is
// tried again after each of UNCACHED_WAITS_MS before the cache is taken for one that keeps nothing
// (under two busy processes, one cold run in three found the file at the second try). Costs a cache
// lookup; where the cache keeps nothing, four compiles of the quickest kernel (20-100 ms each) and
// 0.5 s of waits, against a second compile of every kernel. (Until 2026-12-07 a build again counted
// as found where the whole job took less than half the first's time: in the suite's sanitizer run,
// beside another test, a first build that waited on the other test's threads made a compile look
// found, and compiling ahead went on.) Called without a->mu.
static const long UNCACHED_WAITS_MS[] = {50, 150, 300};
static bool cache_keeps_nothing(vkt_device *helper, const ahead_job *job) {
    int n = (int)(sizeof UNCACHED_WAITS_MS / sizeof UNCACHED_WAITS_MS[0]);
    for (int attempt = 0; attempt <= n; attempt++) {
        if (attempt > 0)
            nanosleep(&(struct timespec){.tv_nsec = UNCACHED_WAITS_MS[attempt - 1] * 1000000L},
                      NULL);
        if (cache_hit(job, run_job(helper, job))) return false;
    }
    return true;
}

// vkt_ahead_build's part: the submitting thread and the thread each take the ready job whose
// pipeline took longest to build, each on a device of its own, until none is left and the
// thread's last one is built. Where the first job the submitting thread runs (the quickest
// kernel to build) finds the cache warm it stops there and leaves the rest to the thread and to the
// queue thread, which then find their kernels in the cache: building them all first would only
// build every pipeline twice (fashion_mlp warm: 0.6 s later to the first step). Called with a->mu
// held; returns with it held.
static void build_front(vkt_ahead *a) {
    bool first = true;
    for (;;) {
        while (a->nready > 0) {
            // The first: the kernel quickest to build, the cheapest probe of the cache.
            ahead_job job = take(a, first ? pick_quickest(a) : pick_longest(a));
            pthread_mutex_unlock(&a->mu);
            bool run = a->helper2 && job_pays(a, &job);
            // Its builds are not the run's kernel builds (they are counted as compiled ahead).
            bool was = vkt_busy_ignore_thread(true);
            job_times t = run ? run_job(a->helper2, &job) : (job_times){0, 0};
            // The first job's dispatch tells a warm cache (a hit) from a cold one; where it is no
            // hit, the probe also tells a cache that keeps nothing.
            bool hit = run && first && cache_hit(&job, t);
            bool uncached = run && first && !hit && cache_keeps_nothing(a->helper2, &job);
            bool warm = hit || (run && first && !uncached &&
                                t.dispatch_ns < FIRST_HIT_RATIO * least_build(&job, t));
            first = first && !run;
            vkt_busy_ignore_thread(was);
            pthread_mutex_lock(&a->mu);
            if (run) a->done++, vkt_startup_count_ahead();
            if (warm) return;
            if (uncached) {
                // The rest would be compiled twice: the jobs are dropped (the thread's current
                // one ends on its own) and no more are noted.
                __atomic_store_n(&a->uncached, true, __ATOMIC_RELAXED);
                a->njobs = a->nready = 0;
                vkt_startup_count_ahead_stopped();
                return;
            }
            if (!a->helper2) break; // no device: the queue thread compiles the rest
        }
        if (!a->busy || a->nready > 0 || !a->helper2) break;
        pthread_cond_wait(&a->cv, &a->mu);
    }
}

// Opens the two devices the jobs are built on, on the submitting thread, once a noted job pays
// (beside another open CPU device every job is dropped, and opening them there would only start
// more lavapipe devices, their queue threads and LLVM contexts, for nothing), and only while the
// thread runs no job. No device is created while another of these threads calls Vulkan: the
// Khronos validation layer (1.3.239) looks up its per-device state in a map that vkCreateDevice
// writes without a lock (KhronosGroup/Vulkan-ValidationLayers#4391). With each thread opening
// its own device at its first job, the two opened at once beside the other's calls; a run in the
// suite then died of SIGSEGV after "Couldn't find VkBuffer Object" at a vkBindBufferMemory
// (test_cli_plan_grid, 2026-12-07). A failed open is not retried: the queue thread compiles every
// kernel, as without this file. Called with a->mu held.
static void open_helpers(vkt_ahead *a) {
    if (a->tried) return;
    bool pays = false;
    for (int i = 0; i < a->njobs && !pays; i++)
        pays = job_pays(a, &a->jobs[i]);
    if (!pays) return;
    while (a->busy)
        pthread_cond_wait(&a->cv, &a->mu);
    a->tried = true;
    bool was = vkt_busy_ignore_thread(true);
    if (vkt_device_open_helper(a->dev, &a->helper) != VKT_OK) a->helper = NULL;
    if (a->helper && vkt_device_open_helper(a->dev, &a->helper2) != VKT_OK) a->helper2 = NULL;
    vkt_busy_ignore_thread(was);
    a->opened = a->helper != NULL;
}

// Hands the jobs noted so far to the thread (starting it the first time).
static void release(vkt_ahead *a) {
    if (a->nready == a->njobs) return;
    a->nready = a->njobs;
    if (!a->started) a->started = pthread_create(&a->thread, NULL, ahead_thread, a) == 0;
    pthread_cond_broadcast(&a->cv);
}

void vkt_ahead_build(vkt_device *dev) {
    vkt_ahead *a = dev->ahead;
    if (!a) return;
    pthread_mutex_lock(&a->mu);
    while (a->front)
        pthread_cond_wait(&a->cv, &a->mu);
    if (a->nready < a->njobs) {
        open_helpers(a);
        release(a);
        if (a->started) {
            a->front = true;
            build_front(a);
            a->front = false;
            pthread_cond_broadcast(&a->cv);
        }
    }
    pthread_mutex_unlock(&a->mu);
}

void vkt_ahead_open(vkt_device *dev) {
    if (!compiles_ahead(dev)) return;
    vkt_ahead *a = calloc(1, sizeof *a);
    if (!a) return; // not an error: the device compiles at first dispatch as without this file
    a->dev = dev;
    pthread_mutex_init(&a->mu, NULL);
    pthread_cond_init(&a->cv, NULL);
    dev->ahead = a;
}

void vkt_ahead_stop(vkt_device *dev) {
    vkt_ahead *a = dev->ahead;
    if (!a) return;
    pthread_mutex_lock(&a->mu);
    a->stop = true;
    pthread_cond_broadcast(&a->cv);
    pthread_mutex_unlock(&a->mu);
    if (a->started) pthread_join(a->thread, NULL);
    vkt_device_destroy(a->helper2);
    vkt_device_destroy(a->helper);
    pthread_cond_destroy(&a->cv);
    pthread_mutex_destroy(&a->mu);
    free(a->jobs);
    free(a);
    dev->ahead = NULL;
}

void vkt_device_ahead_counts(vkt_device *dev, uint32_t *queued, uint32_t *done) {
    vkt_ahead *a = dev->ahead;
    *queued = *done = 0;
    if (!a) return;
    pthread_mutex_lock(&a->mu);
    *queued = a->queued, *done = a->done;
    pthread_mutex_unlock(&a->mu);
}

bool vkt_device_ahead_opened(vkt_device *dev) {
    vkt_ahead *a = dev->ahead;
    if (!a) return false;
    pthread_mutex_lock(&a->mu);
    bool opened = a->opened;
    pthread_mutex_unlock(&a->mu);
    return opened;
}

void vkt_device_ahead_wait(vkt_device *dev) {
    vkt_ahead *a = dev->ahead;
    if (!a) return;
    pthread_mutex_lock(&a->mu);
    open_helpers(a);
    release(a);
    while (a->started && (a->nready > 0 || a->busy))
        pthread_cond_wait(&a->cv, &a->mu);
    pthread_mutex_unlock(&a->mu);
}
