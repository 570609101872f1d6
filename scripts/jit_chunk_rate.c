// jit_chunk_rate.c: times a straight-line run of a CPU driver's JIT code alone (x86-64).
//
//   cc -O2 scripts/jit_chunk_rate.c -o jcr
//   ./jcr DUMP LO HI MULS [REPS [COPIES]]
//
// DUMP is a dump of one of the driver's executable mappings (scripts/jit_profile.py writes them
// and prints this command for its hottest loop's longest run), LO and HI the run's offsets in it,
// MULS its multiplies. The run must be vector instructions only, with no control flow and no
// memory operand but %rsp-relative ones (jit_profile.py picks such a run): the harness points
// %rsp at a 1 MiB scratch block filled with small normal floats (FTZ and DAZ set, so no operand
// is ever denormal), copies the run COPIES times (default 1) into an executable buffer inside a
// counted loop and runs it REPS times (default 20000). It prints the multiplies per nanosecond and
// per cycle at the clock given by JCR_GHZ (default 3.3): what the run's arithmetic costs without
// the loads, calls and branches around it; COPIES > 1 shows what a longer loop body costs (the
// micro-op cache: docs/PERFORMANCE.md, twelfth pass).
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#if defined(__x86_64__)
#include <pmmintrin.h>
#include <sys/mman.h>
#include <xmmintrin.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: %s DUMP LO HI MULS [REPS [COPIES]]\n", argv[0]);
        return 2;
    }
    FILE *f = fopen(argv[1], "rb");
    if (!f) {
        perror(argv[1]);
        return 1;
    }
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *dump = malloc(size > 0 ? (size_t)size : 1);
    if (!dump || fread(dump, 1, (size_t)size, f) != (size_t)size) {
        fprintf(stderr, "%s: could not read it\n", argv[1]);
        return 1;
    }
    fclose(f);
    long lo = strtol(argv[2], NULL, 0), hi = strtol(argv[3], NULL, 0);
    long muls = atol(argv[4]);
    long reps = argc > 5 ? atol(argv[5]) : 20000;
    int copies = argc > 6 ? atoi(argv[6]) : 1;
    if (lo < 0 || hi <= lo || hi > size || muls <= 0 || reps <= 0 || copies < 1 ||
        (hi - lo) * (long)copies > (1L << 22) - 64) {
        fprintf(stderr, "bad range %#lx-%#lx (the dump has %#lx bytes), MULS, REPS or COPIES\n",
                lo, hi, size);
        return 2;
    }
    size_t cap = 1u << 22;
    unsigned char *code =
        mmap(NULL, cap, PROT_READ | PROT_WRITE | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (code == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    // fn(scratch %rdi, reps %rsi): push rbx; mov rbx, rsp; mov rsp, rdi; loop: run x copies;
    // dec rsi; jnz loop; mov rsp, rbx; pop rbx; vzeroupper; ret.
    static const unsigned char pro[] = {0x53, 0x48, 0x89, 0xe3, 0x48, 0x89, 0xfc};
    static const unsigned char epi[] = {0x48, 0x89, 0xdc, 0x5b, 0xc5, 0xf8, 0x77, 0xc3};
    size_t p = 0;
    memcpy(code, pro, sizeof pro);
    p += sizeof pro;
    size_t loop = p;
    for (int c = 0; c < copies; c++, p += (size_t)(hi - lo))
        memcpy(code + p, dump + lo, (size_t)(hi - lo));
    code[p++] = 0x48, code[p++] = 0xff, code[p++] = 0xce; // dec rsi
    code[p++] = 0x0f, code[p++] = 0x85;                   // jnz rel32
    int rel = (int)((long)loop - (long)(p + 4));
    memcpy(code + p, &rel, 4);
    p += 4;
    memcpy(code + p, epi, sizeof epi);
    // The scratch block: the run's %rsp offsets reach at most a few tens of KiB either way.
    float *scratch = aligned_alloc(64, 1u << 20);
    if (!scratch) return 1;
    for (size_t i = 0; i < (1u << 18); i++)
        scratch[i] = 1.0f / (float)(1 + (i & 7));
    _MM_SET_FLUSH_ZERO_MODE(_MM_FLUSH_ZERO_ON);
    _MM_SET_DENORMALS_ZERO_MODE(_MM_DENORMALS_ZERO_ON);
    void (*fn)(void *, long);
    memcpy(&fn, &code, sizeof fn);
    void *sp = scratch + (1u << 17); // the middle: negative and positive offsets both land inside
    fn(sp, 16);                      // warm up
    double t0 = now();
    fn(sp, reps);
    double t = now() - t0;
    const char *ghz_env = getenv("JCR_GHZ");
    double ghz = ghz_env ? atof(ghz_env) : 3.3;
    double n = (double)muls * copies * reps;
    printf("%ld bytes x %d: %.3f multiplies per ns, %.2f per cycle at %.2f GHz (%.1f ns a pass)\n",
           hi - lo, copies, n / t * 1e-9, n / t / (ghz * 1e9), ghz, t / reps * 1e9);
    return 0;
}
#else
int main(void) {
    fprintf(stderr, "jit_chunk_rate: x86-64 only\n");
    return 2;
}
#endif
