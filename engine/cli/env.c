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

void cli_env_read(cli_env *e) {
    memset(e, 0, sizeof *e);
    const char *v = getenv("VKT_VALIDATION");
    cache_dir(e->cache_dir, sizeof e->cache_dir);
    const char *tune = var("VKT_TUNE"), *fuse = var("VKT_NET_FUSE"), *conv = var("VKT_CONV");
    const char *ahead = var("VKT_AHEAD");
    e->context = (vkt_context_desc){
        .validation = v && strcmp(v, "1") == 0,
        .cache_dir = e->cache_dir,
        .tune = !tune                                        ? VKT_TUNE_ON
                : !strcmp(tune, "0") || !strcmp(tune, "off") ? VKT_TUNE_OFF
                : !strcmp(tune, "force")                     ? VKT_TUNE_FORCE
                                                             : VKT_TUNE_ON,
        .matmul_variant = var("VKT_MATMUL_VARIANT"),
        .fuse = !fuse                    ? VKT_FUSE_AUTO
                : strcmp(fuse, "0") == 0 ? VKT_FUSE_OFF
                                         : VKT_FUSE_ON,
        .conv = conv && strcmp(conv, "columns") == 0 ? VKT_CONV_COLUMNS : VKT_CONV_AUTO,
        .ahead = ahead && (!strcmp(ahead, "0") || !strcmp(ahead, "off")) ? VKT_AHEAD_OFF
                                                                         : VKT_AHEAD_AUTO,
    };
    e->font = getenv("VKT_FONT");
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
