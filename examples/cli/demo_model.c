/* demo_model.c: where the CLI finds the bundled models when no -m is given: the demo model
 * (examples/demo/, trained by examples/demo/train.py) for ask, eval and calibrate, and the long
 * model (examples/long/) for eval --suite long. So `ocellus ask` works with no download, from the
 * source root, from any other folder, and after `make install` (which copies both models to
 * PREFIX/share/ocellus/). */
#include "tools/tools.h"

#include "port.h"

#include <stdio.h>
#include <string.h>

#define PATH_BYTES 4096

/* A regular file (never a FIFO, which would block the open). */
static int readable(const char *path) { return oc_port_is_regular_file(path); }

/* Writes DIR/SUB/FILE into out; 0 when it does not fit. */
static int join(char *out, const char *dir, const char *sub, const char *file) {
    int n = snprintf(out, PATH_BYTES, "%s%s%s/%s", dir, dir[0] ? "/" : "", sub, file);
    return n > 0 && n < PATH_BYTES;
}

int oc_tool_bundled_model(oc_tool_bundled which, const char **text_path, const char **mmproj_path) {
    /* One pair of buffers per model, so a demo and a long lookup can be held at once. */
    static char text_buf[2][PATH_BYTES], mmproj_buf[2][PATH_BYTES];
    const int k = which == OC_TOOL_MODEL_LONG;
    const char *text = k ? "ocellus-long.gguf" : "ocellus-demo.gguf";
    const char *mmproj = k ? "ocellus-long-mmproj.gguf" : "ocellus-demo-mmproj.gguf";
    char exe_dir[PATH_BYTES], installed[PATH_BYTES + 32];
    /* In this order: the source tree's root as the working directory (relative paths, as the
     * docs print them); the folder of the program itself (an in-tree build run from elsewhere);
     * PREFIX/share/ocellus beside PREFIX/bin (make install, DESTDIR staging included). */
    const char *dirs[3] = { "", NULL, NULL };
    const char *subs[3] = { k ? "examples/long" : "examples/demo", k ? "examples/long" : "examples/demo",
                            k ? "long" : "demo" };
    if (oc_port_program_dir(exe_dir, sizeof exe_dir)) {
        dirs[1] = exe_dir;
        if (snprintf(installed, sizeof installed, "%s/../share/ocellus", exe_dir) < (int)sizeof installed)
            dirs[2] = installed;
    }
    for (int i = 0; i < 3; i++) {
        if (!dirs[i]) continue;
        if (!join(text_buf[k], dirs[i], subs[i], text) || !join(mmproj_buf[k], dirs[i], subs[i], mmproj)) continue;
        if (readable(text_buf[k]) && readable(mmproj_buf[k])) {
            *text_path = text_buf[k];
            *mmproj_path = mmproj_buf[k];
            return 1;
        }
    }
    return 0;
}

int oc_tool_demo_model(const char **text_path, const char **mmproj_path) {
    return oc_tool_bundled_model(OC_TOOL_MODEL_DEMO, text_path, mmproj_path);
}
