/* backend_arg.c: the --backend / --device options that ask, eval and bench vlm share
 * (examples/tools/tools.h): one parser for the names, so every command spells them the same. */
#include "tools/tools.h"

#include <string.h>

int oc_tool_parse_backend(const char *name, oc_backend_choice *out) {
    static const struct { const char *name; oc_backend_choice choice; } names[] = {
        { "cpu", OC_BACKEND_CPU }, { "opencl", OC_BACKEND_OPENCL }, { "auto", OC_BACKEND_AUTO },
    };
    for (size_t i = 0; name && i < sizeof names / sizeof names[0]; i++)
        if (!strcmp(name, names[i].name)) {
            *out = names[i].choice;
            return 1;
        }
    return 0;
}
