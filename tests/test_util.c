// test_util.c: see test_util.h.
// sigaltstack and SA_ONSTACK (XSI, beside the build's _POSIX_C_SOURCE).
#define _DEFAULT_SOURCE
#include "test_util.h"

#include "data.h"

#include <ctype.h>
#include <errno.h>
#include <execinfo.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "env.h"

static int icontains(const char *hay, const char *needle) {
    size_t n = strlen(needle);
    for (; *hay; hay++) {
        size_t i = 0;
        while (i < n && hay[i] &&
               tolower((unsigned char)hay[i]) == tolower((unsigned char)needle[i]))
            i++;
        if (i == n) return 1;
    }
    return 0;
}

// Whether one of list's comma-separated names occurs in hay (case-insensitive).
static bool in_list(const char *list, const char *hay) {
    char name[64];
    for (const char *p = list; *p;) {
        size_t len = strcspn(p, ",");
        if (len > 0 && len < sizeof name) {
            memcpy(name, p, len);
            name[len] = 0;
            if (icontains(hay, name)) return true;
        }
        p += len;
        if (*p == ',') p++;
    }
    return false;
}

int vt_find_device(vt *t, const char *needle) {
    for (int i = 0; i < t->ndev; i++) {
        const vkt_device_info *d = vkt_device_get_info(t->dev[i]);
        if (icontains(d->name, needle) || icontains(d->driver, needle)) return i;
    }
    return -1;
}

// A test that dies of a signal says where: the faulting thread's stack on stderr (the binary's
// offsets, which `addr2line -f -e <test> <offset>` names), and stdout line-buffered, so that the
// last line a test printed precedes it in CTest's log (a pipe's full buffer lost them: one
// SIGSEGV of test_mlp_grad in a CI run left no trace of where it was). Not under AddressSanitizer,
// which reports such a signal itself.
#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define VT_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define VT_ASAN 1
#endif
#ifndef VT_ASAN
static void vt_fatal_signal(int sig) {
    static const char head[] = "test: fatal signal; the stack of the thread that received it:\n";
    ssize_t wrote = write(2, head, sizeof head - 1);
    (void)wrote; // nothing to do about a failed write of a dying process
    void *pc[64];
    backtrace_symbols_fd(pc, backtrace(pc, 64), 2);
    signal(sig, SIG_DFL);
    raise(sig);
}
#endif

// Before main: the crash hook of VKT_TEST_CRASH_AFTER_BYTES (test_checkpoint never calls vt_init,
// and its child process sets the variable after fork()), and the fatal-signal report above.
__attribute__((constructor)) static void vt_install_hooks(void) {
    cli_env_install_hooks();
    setvbuf(stdout, NULL, _IOLBF, 0);
#ifndef VT_ASAN
    void *warm[1];
    backtrace(warm, 1); // loads libgcc's unwinder now, not inside the handler
    static char alt[1 << 16];
    stack_t ss = {.ss_sp = alt, .ss_size = sizeof alt};
    sigaltstack(&ss, NULL);
    struct sigaction sa = {.sa_handler = vt_fatal_signal, .sa_flags = SA_ONSTACK | SA_RESETHAND};
    sigemptyset(&sa.sa_mask);
    const int sigs[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT};
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
        sigaction(sigs[i], &sa, NULL);
#endif
}

int vt_init(vt *t, const char *name) {
    memset(t, 0, sizeof *t);
    t->name = name;
    // The CLI's VKT_* variables (VKT_CACHE_DIR, VKT_TUNE, VKT_MATMUL_VARIANT, VKT_NET_FUSE), with
    // validation always on.
    cli_env env;
    if (cli_env_read(&env) != VKT_OK) {
        fprintf(stderr, "%s: cannot start: %s\n", name, vkt_error());
        return 1;
    }
    env.context.validation = 1;
    if (vkt_context_create(&env.context, &t->ctx) != VKT_OK) {
        fprintf(stderr, "%s: cannot start: %s\n", name, vkt_error());
        return 1;
    }
    // VKT_TEST_DRIVERS (the harness's, for tests/CMakeLists.txt): a comma-separated list of
    // names; only the devices whose name or driver contains one are opened, and under CI=true
    // only those drivers are required.
    const char *only = getenv("VKT_TEST_DRIVERS");
    int n = vkt_context_device_count(t->ctx);
    for (int i = 0; i < n && t->ndev < VT_MAX_DEVICES; i++) {
        const vkt_device_info *info = vkt_context_device_info(t->ctx, i);
        if (only && !in_list(only, info->name) && !in_list(only, info->driver)) continue;
        if (vkt_device_create(t->ctx, i, NULL, &t->dev[t->ndev]) != VKT_OK) {
            fprintf(stderr, "%s: cannot open device %d: %s\n", name, i, vkt_error());
            return 1;
        }
        t->ndev++;
    }
    // CI must exercise both CPU drivers, from two vendors. Elsewhere, say what is missing.
    const char *ci = getenv("CI");
    bool in_ci = ci && strcmp(ci, "true") == 0;
    const char *need[] = {"llvmpipe", "swiftshader"};
    for (int i = 0; i < 2; i++) {
        if (vt_find_device(t, need[i]) >= 0) continue;
        if (only && !in_list(only, need[i])) {
            fprintf(stderr, "%s: note: VKT_TEST_DRIVERS=%s: not testing %s\n", name, only, need[i]);
            continue;
        }
        if (in_ci) {
            fprintf(stderr,
                    "%s: FAIL: CI=true but the %s driver is missing (scripts/setup.sh "
                    "installs it)\n",
                    name, need[i]);
            return 1;
        }
        fprintf(stderr, "%s: note: no %s device; testing the others only\n", name, need[i]);
    }
    for (int i = 0; i < t->ndev; i++)
        printf("%s: device %d: %s\n", name, i, vkt_device_label(t->dev[i]));
    return 0;
}

int vt_finish(vt *t) {
    for (int i = t->ndev - 1; i >= 0; i--)
        vkt_device_destroy(t->dev[i]);
    uint64_t messages = t->ctx ? vkt_context_validation_count(t->ctx) : 0;
    vkt_context_destroy(t->ctx);
    if (messages > t->expected_validation) {
        fprintf(stderr, "%s: FAIL: %llu validation message(s)\n", t->name,
                (unsigned long long)(messages - t->expected_validation));
        t->failures++;
    }
    printf("%s: %d checks, %d failed\n", t->name, t->checks, t->failures);
    if (t->checks == 0) {
        fprintf(stderr, "%s: FAIL: no check ran\n", t->name);
        return 1;
    }
    return t->failures ? 1 : 0;
}

uint64_t vt_rand_u64(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

float vt_rand_uniform(uint64_t *s, float lo, float hi) {
    double u = (double)(vt_rand_u64(s) >> 11) / 9007199254740992.0;
    return (float)(lo + (hi - lo) * u);
}

void vt_fill_uniform(float *x, size_t n, uint64_t seed, float lo, float hi) {
    uint64_t s = seed;
    for (size_t i = 0; i < n; i++)
        x[i] = vt_rand_uniform(&s, lo, hi);
}

size_t vt_compare(const char *what, const float *got, const double *ref, size_t n, double atol,
                  double rtol) {
    size_t bad = 0, worst = 0;
    double worst_excess = -1;
    for (size_t i = 0; i < n; i++) {
        double tol = atol + rtol * fabs(ref[i]);
        double err = fabs((double)got[i] - ref[i]);
        if (!(err <= tol)) { // NaN counts as a miss
            bad++;
            double excess = isnan(err) ? INFINITY : err - tol;
            if (excess > worst_excess) worst_excess = excess, worst = i;
        }
    }
    if (bad)
        fprintf(stderr,
                "  %s: %zu of %zu out of tolerance (atol %g, rtol %g); worst [%zu]: got %.9g, "
                "want %.9g\n",
                what, bad, n, atol, rtol, worst, got[worst], ref[worst]);
    return bad;
}

void vt_write_file(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, n, f) != n || fclose(f) != 0) {
        fprintf(stderr, "cannot write %s\n", path);
        exit(1);
    }
}

void vt_remove_dir(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        char p[1024];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        struct stat st;
        if (stat(p, &st) == 0 && S_ISDIR(st.st_mode))
            vt_remove_dir(p);
        else
            unlink(p);
    }
    closedir(d);
    rmdir(dir);
}

bool vt_run(vt *t, vkt_cmd *cmd, vkt_ops *ops, const char *what, const char *where) {
    vkt_status s = vkt_cmd_end(cmd);
    VT_CHECK(t, s == VKT_OK, "%s on %s: recording: %s", what, where, vkt_error());
    vkt_status k = ops ? vkt_ops_status(ops) : VKT_OK;
    VT_CHECK(t, k == VKT_OK, "%s on %s: kernel: %s", what, where, vkt_error());
    if (s != VKT_OK || k != VKT_OK) return false;
    s = vkt_cmd_submit(cmd);
    if (s == VKT_OK) s = vkt_cmd_wait(cmd, VKT_WAIT_MS);
    VT_CHECK(t, s == VKT_OK, "%s on %s: run: %s", what, where, vkt_error());
    return s == VKT_OK;
}

vkt_status vt_words_text(uint32_t windows, vkt_text *text, vkt_dataset *ds) {
    static const char *const words[] = {
        "the ",  "engine ", "trains ", "a ",     "model ", "on ",    "any ", "device, ", "and ",
        "then ", "it ",     "splits ", "work. ", "Every ", "layer ", "is ",  "one ",     "file. "};
    enum { TEXT = 64 << 10 };
    char *bytes = malloc(TEXT);
    if (!bytes) return VKT_ERR_HOST_MEMORY;
    uint64_t rng = 7;
    for (size_t n = 0; n < TEXT;) {
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        const char *w = words[(rng >> 33) % (sizeof words / sizeof *words)];
        for (; *w && n < TEXT; w++)
            bytes[n++] = *w;
    }
    vkt_status st = vkt_text_from_bytes(bytes, TEXT, "test text", text);
    free(bytes);
    if (st == VKT_OK) st = vkt_text_validation(text, 128, windows, ds);
    return st;
}

bool vt_under_mpirun(void) {
    return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_RANK") || getenv("PMIX_RANK");
}

int vt_mpirun_self(const char *name, int np, const char *arg, double deadline_s) {
    char self[4096], n[16];
    ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    if (len <= 0) {
        fprintf(stderr, "%s: FAIL: cannot find this test's binary: %s\n", name, strerror(errno));
        return -1;
    }
    self[len] = 0;
    snprintf(n, sizeof n, "%d", np);
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        setpgid(0, 0);
        // Copies through shared memory: single-copy (CMA) is refused in some containers, where
        // large messages then crawl (docs/PARALLELISM.md).
        execlp("mpirun", "mpirun", "--allow-run-as-root", "--oversubscribe", "--mca",
               "btl_vader_single_copy_mechanism", "none", "-np", n, self, arg, (char *)NULL);
        fprintf(stderr,
                "%s: FAIL: cannot run mpirun (%s): install openmpi-bin (scripts/setup.sh "
                "does)\n",
                name, strerror(errno));
        _exit(127);
    }
    setpgid(pid, pid);
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        int status;
        pid_t r = waitpid(pid, &status, WNOHANG);
        if (r == pid) {
            if (WIFEXITED(status)) return WEXITSTATUS(status);
            fprintf(stderr, "%s: FAIL: mpirun -np %d %s died of signal %d\n", name, np, arg,
                    WIFSIGNALED(status) ? WTERMSIG(status) : 0);
            return -1;
        }
        if (r < 0) return -1;
        struct timespec t;
        clock_gettime(CLOCK_MONOTONIC, &t);
        if ((t.tv_sec - t0.tv_sec) + (t.tv_nsec - t0.tv_nsec) * 1e-9 > deadline_s) {
            fprintf(stderr, "%s: FAIL: mpirun -np %d %s ran past %.0f s; ending it\n", name, np,
                    arg, deadline_s);
            kill(-pid, SIGTERM);
            sleep(2);
            kill(-pid, SIGKILL);
            waitpid(pid, &status, 0);
            return -1;
        }
        struct timespec ts = {0, 50000000};
        nanosleep(&ts, NULL);
    }
}
