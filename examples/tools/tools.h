/* tools.h: what the ocellus CLI (examples/cli) calls in the tools library (libocellus-tools.a).
 * The commands whose work needs the library's internals (kernels, the thread pool, the tokenizer,
 * plans, the converter, the scene generator and eval) live in examples/tools/cli/; the CLI is
 * left with a dispatcher and front ends over include/ocellus.h. This header is that boundary: it
 * includes only ocellus.h and standard headers, so the CLI never sees an internal header
 * (tests/test_cli_includes.sh checks). */
#ifndef OC_TOOLS_H
#define OC_TOOLS_H

#include "ocellus.h"

/* ---- commands: `ocellus NAME ...`; argv[0] is the command name; each returns the process exit
 * status (0 ok, 1 failure, 2 usage error). One file each in examples/tools/cli/cmd_NAME.c. */
int oc_tool_version(int argc, char **argv);
int oc_tool_plan(int argc, char **argv);
int oc_tool_info(int argc, char **argv);
int oc_tool_tokenize(int argc, char **argv);
int oc_tool_bench(int argc, char **argv);       /* bench matmul|attention|vlm|kernels */
int oc_tool_convert(int argc, char **argv);
int oc_tool_scene(int argc, char **argv);
int oc_tool_eval(int argc, char **argv);        /* hands --suite long to oc_tool_eval_long */
int oc_tool_eval_long(int argc, char **argv);
int oc_tool_calibrate(int argc, char **argv);

/* ---- what every command shares, so they spell options and messages the same */

/* The demo model, relative to the source tree's root. oc_tool_demo_model sets both paths and
 * returns 1 when both files are there, else returns 0 (demo_model.c). */
#define OC_DEMO_TEXT "examples/demo/ocellus-demo.gguf"
#define OC_DEMO_MMPROJ "examples/demo/ocellus-demo-mmproj.gguf"
int oc_tool_demo_model(const char **text_path, const char **mmproj_path);

/* --backend NAME (cpu, opencl, auto) into *out; 0 for another name (backend_arg.c). */
int oc_tool_parse_backend(const char *name, oc_backend_choice *out);
/* Their --help lines; pad: the spaces that bring a 13-column option name to the command's column. */
#define OC_TOOL_BACKEND_HELP(pad)                                                                     \
    "  --backend B" pad "where the model runs: cpu (default), opencl (fails without a usable\n"     \
    "             " pad "device), auto (OpenCL when it opens, else the CPU)\n"                      \
    "  --device D " pad "OpenCL device: index (clinfo -l) or a piece of its name; default:\n"       \
    "             " pad "the first GPU, else the first device\n"

/* The image buffer of every command that decodes image files (ask's --max-image-pixels default):
 * files go through oc_ask, which decodes them within the context's limits (reduced or refused). */
#define OC_TOOL_MAX_IMAGE_PIXELS ((int64_t)1 << 24)

/* An output path checked when the command starts, not after its run (args.c): 1 when path can be
 * written, else prints "ocellus CMD: OPT PATH: cannot write: why" and returns 0. */
int oc_tool_output_ok(const char *cmd, const char *opt, const char *path);

/* An input path checked when the command starts: 1 when path is a regular file that can be
 * opened (a FIFO is refused, never waited on), else prints "ocellus CMD: OPT PATH: why" and
 * returns 0 (args.c). */
int oc_tool_input_ok(const char *cmd, const char *opt, const char *path);

/* Reads value as a whole number in [lo, hi] (lo, hi within int) into *out; otherwise prints
 * "ocellus CMD: OPT wants a whole number in [lo, hi], not 'value'" and returns 0 (args.c). */
int oc_tool_int_arg(const char *cmd, const char *opt, const char *value, long lo, long hi, int *out);

#endif
