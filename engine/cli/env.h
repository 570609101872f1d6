// env.h: the environment variables of the vktrain CLI, turned into fields of the library's
// description structs (the library reads no environment variable). The test harness
// (tests/test_util.c) maps them the same way, so that test binaries honour them too.
// A variable that takes words (all but the directories, files and variant names) refuses any other
// value: cli_env_read fails with a message naming it and the words it takes.
//   VKT_VALIDATION=0|off|1|on  vkt_context_desc.validation = 1, vkt_viewer_opts.validation = 1
//   VKT_CACHE_DIR=DIR|off      vkt_context_desc.cache_dir: DIR; "off" or "" none; unset:
//                              $XDG_CACHE_HOME/vktrain, else $HOME/.cache/vktrain, else none
//   VKT_TUNE=on|1|off|0|force  vkt_context_desc.tune: VKT_TUNE_ON (unset), _OFF, _FORCE
//   VKT_MATMUL_VARIANT=N[,N]   vkt_context_desc.matmul_variant: variant names, none,
//                              stores-dvec4, stores-vec4 (a name that is none of these: an
//                              error listing them)
//   VKT_NET_FUSE=auto|0|off|1|on  vkt_context_desc.fuse: VKT_FUSE_AUTO (unset), _OFF, _ON
//   VKT_CONV=auto|columns      vkt_context_desc.conv: VKT_CONV_AUTO (unset), _COLUMNS
//   VKT_AHEAD=on|1|off|0       vkt_context_desc.ahead: VKT_AHEAD_AUTO (unset), _OFF
//   VKT_FONT=FILE.ttf          vkt_viewer_opts.font_path
//   VKT_TEST_CRASH_AFTER_BYTES=N   the crash hook of engine/core/fileio.c (tests only)
#ifndef VKT_CLI_ENV_H
#define VKT_CLI_ENV_H

#include "vktrain.h"

typedef struct cli_env {
    vkt_context_desc context; // its strings point into this struct or the environment
    const char *font;         // VKT_FONT, or NULL
    char cache_dir[4096];
} cli_env;

// Reads the variables into *e (which must stay put while e->context is used). Fails with
// VKT_ERR_ARG on a value a variable does not take (the message says which and what it takes).
vkt_status cli_env_read(cli_env *e);
// Installs the process-wide test hooks the variables ask for (VKT_TEST_CRASH_AFTER_BYTES, read
// again at every file written, so that a variable set later, after a fork(), counts too).
void cli_env_install_hooks(void);
// Whether this process was started by mpirun (Open MPI's OMPI_COMM_WORLD_SIZE, or PMI_SIZE /
// PMIX_RANK of MPICH and other launchers): train then joins the job (world.h).
bool cli_env_under_mpirun(void);

#endif
