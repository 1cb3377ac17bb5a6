/* fuzz_demo_question.c: libFuzzer target for the demo's question grammar (examples/tools/
 * demo_check.c), which reads whatever a user types after `ocellus ask`: the first byte picks the
 * number of pictures (0-9), the rest is the question. The matcher must end on every input, read
 * nothing past the string's end, and always leave a reason when it says no. */
#include "tools/tools.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0 || size > 4096) return 0;
    char *q = malloc(size);   /* exactly the question and its NUL: ASan sees any read past it */
    if (!q) return 0;
    memcpy(q, data + 1, size - 1);
    q[size - 1] = '\0';
    char why[512];
    why[0] = '\0';
    if (!oc_tool_demo_question_check(q, data[0] % 10, why, sizeof why) && why[0] == '\0') abort();
    free(q);
    return 0;
}
