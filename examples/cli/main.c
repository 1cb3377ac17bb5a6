/* main.c: the ocellus command-line tool: dispatches `ocellus COMMAND ...` to cmd_ask.c and the
 * commands of the tools library (examples/tools/tools.h). */
#include "cli.h"

#include <stdio.h>
#include <string.h>

static const cli_command commands[] = {
    { "ask", "answer a question about images: ocellus ask -m M --mmproj V -i IMG PROMPT", cmd_ask },
    { "version", "print the version and this CPU's kernel paths", oc_tool_version },
    { "plan", "check an attention plan file and summarize it", oc_tool_plan },
    { "info", "print the keys and tensor table of a GGUF file", oc_tool_info },
    { "tokenize", "tokenize a text with a model's vocabulary", oc_tool_tokenize },
    { "convert", "Hugging Face Qwen2-VL checkpoint -> text + mmproj GGUF", oc_tool_convert },
    { "quantize", "GGUF -> GGUF with Q8_0 / Q4_0 matrices: ocellus quantize IN OUT --type q8_0", oc_tool_quantize },
    { "bench", "benchmarks: ocellus bench matmul|attention [-t N] ...", oc_tool_bench },
    { "scene", "write synthetic scene items (images + question/answer) to a directory", oc_tool_scene },
    { "eval", "accuracy on fresh synthetic scenes: ocellus eval [-m M --mmproj V] [--items N]", oc_tool_eval },
    { "serve", "OpenAI-compatible HTTP server: ocellus serve [-m M --mmproj V] [--port N] [--slots N]", cmd_serve },
    { "calibrate", "compute an attention plan: ocellus calibrate [-m M --mmproj V] --suite demo -o OUT.plan", oc_tool_calibrate },
};

static void usage(FILE *f) {
    fprintf(f, "usage: ocellus COMMAND [ARGS...]\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].help);
    fprintf(f, "\nRun 'ocellus COMMAND --help' for a command's options.\n");
}

int main(int argc, char **argv) {
    if (argc < 2) { usage(stderr); return 2; }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) { usage(stdout); return 0; }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name)) return commands[i].run(argc - 1, argv + 1);
    fprintf(stderr, "ocellus: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
