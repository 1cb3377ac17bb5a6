/* demo_model.c: where the CLI finds the bundled demo model (examples/demo/, trained by
 * examples/demo/train.py) when no -m is given, so `ocellus ask` and `ocellus eval` work from the
 * source tree with no download. */
#include "tools/tools.h"

#include "port.h"

static int readable(const char *path) { return oc_port_is_regular_file(path); }

int oc_tool_demo_model(const char **text_path, const char **mmproj_path) {
    if (!readable(OC_DEMO_TEXT) || !readable(OC_DEMO_MMPROJ)) return 0;
    *text_path = OC_DEMO_TEXT;
    *mmproj_path = OC_DEMO_MMPROJ;
    return 1;
}
