// cli.h: what the vktrain subcommands share (engine/cli/*.c). Not part of libvktrain.
#ifndef VKT_CLI_H
#define VKT_CLI_H

#include "vktrain.h"

// Prints "vktrain: <what>" on stderr and returns 1, the exit status of a failed command.
int cli_fail(const char *what);
// Creates the context the way every command does (validation from VKT_VALIDATION).
vkt_status cli_open_context(vkt_context **ctx);
// `vktrain view FILE.json` (engine/cli/view.c).
int cmd_view(int argc, char **argv);

#endif
