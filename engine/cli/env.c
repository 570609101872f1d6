// env.c: the CLI's environment variables as fields of the library's description structs (see
// env.h for the table). Only the CLI and the test harness call this; libvktrain and the viewer
// read no environment.
#include "env.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vkt_internal.h"

static const char *var(const char *name) {
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

// VKT_CACHE_DIR, else $XDG_CACHE_HOME/vktrain, else $HOME/.cache/vktrain; "" when off or none.
static void cache_dir(char *buf, size_t size) {
    const char *e = getenv("VKT_CACHE_DIR"), *xdg = var("XDG_CACHE_HOME"), *home = var("HOME");
    buf[0] = '\0';
    if (e) {
        if (*e && strcmp(e, "off") != 0) snprintf(buf, size, "%s", e);
    } else if (xdg) {
        snprintf(buf, size, "%s/vktrain", xdg);
    } else if (home) {
        snprintf(buf, size, "%s/.cache/vktrain", home);
    }
}

// The value of variable name among words[] (n of them; unset or "" is the first's value), as
// values[i]; any other value is an error that names the variable, the value and the words.
static vkt_status choose(const char *name, const char *const *words, const int *values, int n,
                         int *out) {
    const char *v = var(name);
    if (!v) {
        *out = values[0];
        return VKT_OK;
    }
    char list[256] = "";
    for (int i = 0; i < n; i++) {
        if (strcmp(v, words[i]) == 0) {
            *out = values[i];
            return VKT_OK;
        }
        size_t at = strlen(list);
        snprintf(list + at, sizeof list - at, "%s%s",
                 i == 0       ? ""
                 : i + 1 == n ? " or "
                              : ", ",
                 words[i]);
    }
    return vkt_fail(VKT_ERR_ARG, "%s=%s is not a setting it takes: use %s (or leave it unset)",
                    name, v, list);
}

#define CHOOSE(name, out, ...)                                                                     \
    do {                                                                                           \
        static const char *const w_[] = {__VA_ARGS__};                                             \
        int v_;                                                                                    \
        VKT_TRY(choose(#name, w_, name##_values, (int)(sizeof w_ / sizeof *w_), &v_));             \
        out = v_;                                                                                  \
    } while (0)

vkt_status cli_env_read(cli_env *e) {
    memset(e, 0, sizeof *e);
    cache_dir(e->cache_dir, sizeof e->cache_dir);
    // Each variable's words and what they set: the first is the default (unset or "").
    static const int VKT_VALIDATION_values[] = {0, 0, 1, 1};
    static const int VKT_TUNE_values[] = {VKT_TUNE_ON, VKT_TUNE_ON, VKT_TUNE_OFF, VKT_TUNE_OFF,
                                          VKT_TUNE_FORCE};
    static const int VKT_NET_FUSE_values[] = {VKT_FUSE_AUTO, VKT_FUSE_OFF, VKT_FUSE_OFF,
                                              VKT_FUSE_ON, VKT_FUSE_ON};
    static const int VKT_CONV_values[] = {VKT_CONV_AUTO, VKT_CONV_COLUMNS};
    static const int VKT_AHEAD_values[] = {VKT_AHEAD_AUTO, VKT_AHEAD_AUTO, VKT_AHEAD_OFF,
                                           VKT_AHEAD_OFF};
    int validation, tune, fuse, conv, ahead;
    CHOOSE(VKT_VALIDATION, validation, "0", "off", "1", "on");
    CHOOSE(VKT_TUNE, tune, "on", "1", "off", "0", "force");
    CHOOSE(VKT_NET_FUSE, fuse, "auto", "0", "off", "1", "on");
    CHOOSE(VKT_CONV, conv, "auto", "columns");
    CHOOSE(VKT_AHEAD, ahead, "on", "1", "off", "0");
    e->context = (vkt_context_desc){
        .validation = validation,
        .cache_dir = e->cache_dir,
        .tune = (vkt_tune_mode)tune,
        .matmul_variant = var("VKT_MATMUL_VARIANT"),
        .fuse = (vkt_fuse_mode)fuse,
        .conv = (vkt_conv_mode)conv,
        .ahead = (vkt_ahead_mode)ahead,
    };
    e->font = getenv("VKT_FONT");
    return VKT_OK;
}

// VKT_TEST_CRASH_AFTER_BYTES=N: the writer of a file kills itself after N bytes.
static uint64_t crash_after_bytes(void) {
    const char *v = var("VKT_TEST_CRASH_AFTER_BYTES");
    return v ? strtoull(v, NULL, 10) : UINT64_MAX;
}

bool cli_env_under_mpirun(void) {
    return var("OMPI_COMM_WORLD_SIZE") || var("PMI_SIZE") || var("PMIX_RANK");
}

void cli_env_install_hooks(void) { vkt_test_set_crash_hook(crash_after_bytes); }
