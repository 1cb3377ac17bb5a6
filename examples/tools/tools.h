/* tools.h: the commands of the ocellus program (examples/cli/) as its dispatcher calls them, and the helpers
 * they share. The commands whose work needs the library's internals (kernels, the thread pool, the
 * tokenizer, plans, the converter, the scene generator and eval: the tool library, examples/tools/,
 * libocellus-tools.a) include those headers themselves; the front end (examples/cli/main.c, examples/cli/cmd_ask.c,
 * examples/cli/cli.h) stays over include/ocellus.h and this header alone, which includes only ocellus.h and
 * standard headers (tests/test_cli_includes.sh checks). */
#ifndef OC_TOOLS_H
#define OC_TOOLS_H

#include "ocellus.h"

/* ---- commands: `ocellus NAME ...`; argv[0] is the command name; each returns the process exit
 * status (0 ok, 1 failure, 2 usage error). One file each in examples/cli/cmd_NAME.c. */
int oc_tool_version(int argc, char **argv);
int oc_tool_plan(int argc, char **argv);
int oc_tool_info(int argc, char **argv);
int oc_tool_tokenize(int argc, char **argv);
int oc_tool_bench(int argc, char **argv);       /* bench matmul|attention|vlm|kernels|plans */
int oc_tool_convert(int argc, char **argv);
int oc_tool_quantize(int argc, char **argv);   /* cmd_quantize.c: GGUF -> GGUF with Q8_0 / Q4_0 matrices */
int oc_tool_scene(int argc, char **argv);
int oc_tool_eval(int argc, char **argv);        /* hands --suite long to oc_tool_eval_long */
int oc_tool_eval_long(int argc, char **argv);
int oc_tool_calibrate(int argc, char **argv);

/* ---- what every command shares, so they spell options and messages the same */

/* The bundled models, relative to the source tree's root. oc_tool_bundled_model looks for one in
 * ./examples/NAME/ (the source root), in examples/NAME/ beside the running program (an in-tree
 * build run from another folder) and in share/ocellus/NAME/ beside the program's bin/ (after make
 * install); it sets both paths (static storage, valid until the next call for the same model) and
 * returns 1 when both files are there, else returns 0 (examples/cli/demo_model.c). oc_tool_demo_model is the
 * demo's lookup. */
#define OC_DEMO_TEXT "examples/demo/ocellus-demo.gguf"
#define OC_DEMO_MMPROJ "examples/demo/ocellus-demo-mmproj.gguf"
#define OC_LONG_TEXT "examples/long/ocellus-long.gguf"
#define OC_LONG_MMPROJ "examples/long/ocellus-long-mmproj.gguf"
/* Where the lookup searched, for messages. */
#define OC_TOOL_MODEL_PLACES "the source root's examples/, beside the ocellus program, PREFIX/share/ocellus/"
typedef enum oc_tool_bundled { OC_TOOL_MODEL_DEMO, OC_TOOL_MODEL_LONG } oc_tool_bundled;
int oc_tool_bundled_model(oc_tool_bundled which, const char **text_path, const char **mmproj_path);
int oc_tool_demo_model(const char **text_path, const char **mmproj_path);

/* The demo model knows only its synthetic world (demo_check.c): these return 1 when a question
 * (with n_images pictures) or a picture file is inside what it was trained on, else 0 with a
 * one-line reason in why, for a warning. The image check decodes at most 112 x 112 pixels. */
int oc_tool_demo_question_check(const char *question, int n_images, char *why, size_t why_bytes);
int oc_tool_demo_image_check(const char *path, char *why, size_t why_bytes);

/* --backend NAME (cpu, opencl, auto) into *out; 0 for another name (examples/cli/backend_arg.c). */
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
/* The whole of s a decimal number <= hi (no sign, no space): 1 and *out, else 0 (args.c). */
int oc_tool_parse_ull(const char *s, unsigned long long hi, unsigned long long *out);
/* The same for a whole number in [lo, hi] that may be negative: 1 and *out, else 0 (args.c). */
int oc_tool_parse_ll(const char *s, long long lo, long long hi, long long *out);
/* "A-B" or "A" (B = A) with 1 <= A <= B <= max: 1 and *lo, *hi, else 0 (args.c): the
 * --images-per-item of eval and scene. */
int oc_tool_parse_range(const char *s, long max, int32_t *lo, int32_t *hi);

#endif
