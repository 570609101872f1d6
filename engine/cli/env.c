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

// One word a variable takes and what it sets.
typedef struct {
    const char *word;
    int value;
} env_word;

// The value of variable name among its words (n of them; unset or "" is the first's value); any
// other value is an error that names the variable, the value and the words.
static vkt_status choose(const char *name, const env_word *words, int n, int *out) {
    const char *v = var(name);
    if (!v) {
        *out = words[0].value;
        return VKT_OK;
    }
    char list[256] = "";
    for (int i = 0; i < n; i++) {
        if (strcmp(v, words[i].word) == 0) {
            *out = words[i].value;
            return VKT_OK;
        }
        size_t at = strlen(list);
        snprintf(list + at, sizeof list - at, "%s%s",
                 i == 0       ? ""
                 : i + 1 == n ? " or "
                              : ", ",
                 words[i].word);
    }
    return vkt_fail(VKT_ERR_ARG, "%s=%s is not a setting it takes: use %s (or leave it unset)",
                    name, v, list);
}

// out = the value of variable name, from its table of {word, value} pairs (the first the
// default).
#define CHOOSE(name, out, table)                                                                   \
    do {                                                                                           \
        int v_;                                                                                    \
        VKT_TRY(choose(#name, table, (int)(sizeof table / sizeof *table), &v_));                   \
        out = v_;                                                                                  \
    } while (0)

vkt_status cli_env_read(cli_env *e) {
    memset(e, 0, sizeof *e);
    cache_dir(e->cache_dir, sizeof e->cache_dir);
    // Each variable's words and what they set: the first is the default (unset or "").
    static const env_word validation_words[] = {{"0", 0}, {"off", 0}, {"1", 1}, {"on", 1}};
    static const env_word tune_words[] = {{"on", VKT_TUNE_ON},
                                          {"1", VKT_TUNE_ON},
                                          {"off", VKT_TUNE_OFF},
                                          {"0", VKT_TUNE_OFF},
                                          {"force", VKT_TUNE_FORCE}};
    static const env_word fuse_words[] = {{"auto", VKT_FUSE_AUTO},
                                          {"0", VKT_FUSE_OFF},
                                          {"off", VKT_FUSE_OFF},
                                          {"1", VKT_FUSE_ON},
                                          {"on", VKT_FUSE_ON}};
    static const env_word conv_words[] = {{"auto", VKT_CONV_AUTO}, {"columns", VKT_CONV_COLUMNS}};
    static const env_word ahead_words[] = {{"on", VKT_AHEAD_AUTO},
                                           {"1", VKT_AHEAD_AUTO},
                                           {"off", VKT_AHEAD_OFF},
                                           {"0", VKT_AHEAD_OFF}};
    int validation, tune, fuse, conv, ahead;
    CHOOSE(VKT_VALIDATION, validation, validation_words);
    CHOOSE(VKT_TUNE, tune, tune_words);
    CHOOSE(VKT_NET_FUSE, fuse, fuse_words);
    CHOOSE(VKT_CONV, conv, conv_words);
    CHOOSE(VKT_AHEAD, ahead, ahead_words);
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
