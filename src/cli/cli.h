/* cli.h — the `kiln` command: one file per subcommand. Each returns the
 * process exit status; errors go to stderr as one line "kiln: error: ...". */
#ifndef KILN_CLI_CLI_H
#define KILN_CLI_CLI_H

#include "runtime/session.h"

int kiln_cmd_run(int argc, char **argv);
int kiln_cmd_info(int argc, char **argv);
int kiln_cmd_devices(int argc, char **argv);
int kiln_cmd_train(int argc, char **argv);

/* Prints "kiln: error: <message>" (folded to one line), frees st, returns 1. */
int kiln_cli_fail(kiln_status_t st);
/* Prints "kiln: error: <fmt>" and returns 1. */
int kiln_cli_failf(const char *fmt, ...) KILN_PRINTF(1, 2);
bool kiln_cli_wants_help(int argc, char **argv);

#endif
