/* cli.h: shared declarations of the ocellus CLI. Each command lives in its own cmd_*.c file and
 * returns the process exit status (0 ok, 1 failure, 2 usage error). */
#ifndef OC_CLI_H
#define OC_CLI_H

typedef struct cli_command {
    const char *name;
    const char *help;
    int (*run)(int argc, char **argv);   /* argv[0] is the command name */
} cli_command;

/* The demo model, relative to the source tree's root. cli_demo_model sets both paths and returns 1
 * when both files are there, else returns 0. */
#define OC_DEMO_TEXT "examples/demo/ocellus-demo.gguf"
#define OC_DEMO_MMPROJ "examples/demo/ocellus-demo-mmproj.gguf"
int cli_demo_model(const char **text_path, const char **mmproj_path);

/* --backend NAME (cpu, opencl, auto) into *out; 0 for another name (cli_backend.c). */
#include "ocellus.h"
int cli_parse_backend(const char *name, oc_backend_choice *out);
/* Their --help lines; pad: the spaces that bring a 13-column option name to the command's column. */
#define CLI_BACKEND_HELP(pad)                                                                         \
    "  --backend B" pad "where the model runs: cpu (default), opencl (fails without a usable\n"     \
    "             " pad "device), auto (OpenCL when it opens, else the CPU)\n"                      \
    "  --device D " pad "OpenCL device: index (clinfo -l) or a piece of its name; default:\n"       \
    "             " pad "the first GPU, else the first device\n"

/* Reads value as a whole number in [lo, hi] (lo, hi within int) into *out; otherwise prints
 * "ocellus CMD: OPT wants a whole number in [lo, hi], not 'value'" and returns 0 (cli_args.c). */
int cli_int_arg(const char *cmd, const char *opt, const char *value, long lo, long hi, int *out);

int cmd_version(int argc, char **argv);
int cmd_plan(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_ask(int argc, char **argv);
int cmd_convert(int argc, char **argv);
int cmd_scene(int argc, char **argv);
int cmd_eval(int argc, char **argv);
int cmd_calibrate(int argc, char **argv);
/* `ocellus eval --suite long` (cmd_eval_long.c); cmd_eval hands over when it sees --suite long. */
int cmd_eval_long(int argc, char **argv);

#endif
