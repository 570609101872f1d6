// bench_blas.c (CLI): the CPU BLAS that `vktrain bench matmul --baseline` compares against: one
// fp32 sgemm call and what the library says about itself (version and build configuration, the
// core kernel it chose, its thread count). The only file that includes cblas.h; bench.c times the
// calls and spot-checks their results exactly as it does the GPU's.
//
// OpenBLAS is optional at build time (CMakeLists.txt defines VKT_HAVE_OPENBLAS when pkg-config
// finds it). CMake prefers Debian's ILP64 build (libopenblas64-pthread-dev: 64-bit integers,
// unsuffixed symbols, libopenblas64.so.0), which links by its own name whatever the system's
// libblas.so.3 is (scripts/setup.sh test also installs the LP64 libopenblas0-pthread, which
// becomes that libblas.so.3, for PyTorch's baselines). The integer type comes from the header
// (blasint), checked at run time against the library's own config.
//
// It does not choose the kernel: OPENBLAS_CORETYPE in the user's environment applies, and the
// benchmark reports what ran. The thread count: bench.c tries 1 thread and all cores per size and
// keeps the faster, unless OPENBLAS_NUM_THREADS or OMP_NUM_THREADS fixes it.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

#ifdef VKT_HAVE_OPENBLAS
#include <cblas.h>
#ifndef OPENBLAS_VERSION
// Another cblas.h (the reference BLAS's, /usr/include/x86_64-linux-gnu/cblas.h) came first: its
// integer type need not match the library linked.
#error "cblas.h is not OpenBLAS's: put the OpenBLAS pkg-config include path first"
#endif

bool cli_blas_info_get(cli_blas_info *info, char *msg, size_t msg_size) {
    memset(info, 0, sizeof *info);
    info->library = "OpenBLAS";
    info->config = openblas_get_config();
    info->corename = openblas_get_corename();
    info->threads = openblas_get_num_threads();
    info->threads_env = getenv("OPENBLAS_NUM_THREADS") || getenv("OMP_NUM_THREADS");
    info->int_bits = (int)(8 * sizeof(blasint));
    info->coretype_env = getenv("OPENBLAS_CORETYPE");
    // The config string starts "OpenBLAS 0.3.21 ...": the version of the library that runs, which
    // may differ from the header's.
    const char *cfg = info->config ? info->config : "";
    const char *v = strstr(cfg, "OpenBLAS ");
    size_t n = 0;
    if (v) {
        v += strlen("OpenBLAS ");
        while (v[n] && v[n] != ' ' && n + 1 < sizeof info->version)
            n++;
        memcpy(info->version, v, n);
    }
    info->version[n] = 0;
    // An ILP64 library says USE64BITINT in its config; the header must agree, or every integer
    // argument of cblas_sgemm is misread.
    bool lib64 = strstr(cfg, "USE64BITINT") != NULL;
    if (lib64 != (info->int_bits == 64)) {
        snprintf(msg, msg_size,
                 "the OpenBLAS library (\"%s\") and the cblas.h it was built with disagree on "
                 "the integer width (%d-bit blasint): rebuild vktrain against one installation",
                 cfg, info->int_bits);
        return false;
    }
    return true;
}

void cli_blas_sgemm(bool trans_a, bool trans_b, uint32_t M, uint32_t N, uint32_t K, const float *a,
                    const float *b, float *c) {
    blasint m = (blasint)M, n = (blasint)N, k = (blasint)K;
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                trans_b ? CblasTrans : CblasNoTrans, m, n, k, 1.0f, a, trans_a ? m : k, b,
                trans_b ? k : n, 0.0f, c, n);
}

void cli_blas_set_threads(int n) { openblas_set_num_threads(n); }

#else // no OpenBLAS in this build

bool cli_blas_info_get(cli_blas_info *info, char *msg, size_t msg_size) {
    memset(info, 0, sizeof *info);
    snprintf(msg, msg_size,
             "--baseline needs OpenBLAS and this build has none: install it (Debian: apt-get "
             "install libopenblas64-pthread-dev, or scripts/setup.sh test) and rebuild (cmake "
             "finds it)");
    return false;
}

void cli_blas_sgemm(bool trans_a, bool trans_b, uint32_t M, uint32_t N, uint32_t K, const float *a,
                    const float *b, float *c) {
    abort(); // unreachable: bench.c calls it only after cli_blas_info_get succeeded
}

void cli_blas_set_threads(int n) { abort(); } // unreachable, as cli_blas_sgemm

#endif
