/* cli.h: shared declarations of the ocellus program, all of it in this folder. main.c dispatches
 * `ocellus COMMAND ...`; `ask` is a front end over include/ocellus.h (cmd_ask.c); the other
 * commands (cmd_*.c, bench_*.c) and the helpers they share are declared in examples/tools/tools.h and use
 * the tool library (examples/tools/). Each command returns the process exit status (0 ok, 1 failure, 2
 * usage error). */
#ifndef OC_CLI_H
#define OC_CLI_H

#include "ocellus.h"
#include "tools/tools.h"

typedef struct cli_command {
    const char *name;
    const char *help;
    int (*run)(int argc, char **argv);   /* argv[0] is the command name */
} cli_command;

int cmd_ask(int argc, char **argv);
int cmd_serve(int argc, char **argv);   /* examples/serve/ (serve_none.c without libmicrohttpd) */

#endif
