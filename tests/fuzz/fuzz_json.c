/* fuzz_json.c: libFuzzer target for the JSON parser: parse, then walk every node through the
 * accessors and a few pointer lookups, so navigation code sees every shape the parser accepts. */
#include "tools/json.h"

#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void walk(const oc_json *d, uint32_t node, int depth) {
    oc_error e;
    oc_str s;
    double v;
    int64_t i;
    int b;
    (void)oc_json_str(d, node, &s, &e);
    (void)oc_json_f64(d, node, &v, &e);
    (void)oc_json_i64(d, node, &i, &e);
    (void)oc_json_bool(d, node, &b, &e);
    if (depth > 80) return;
    for (uint32_t c = oc_json_first(d, node); c != OC_JSON_NONE; c = oc_json_next(d, c)) {
        uint32_t v2 = oc_json_value(d, c);
        walk(d, v2 != OC_JSON_NONE ? v2 : c, depth + 1);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    oc_json *d = NULL;
    oc_error e;
    oc_json_limits lim;
    oc_json_limits_default(&lim);
    lim.max_nodes = 1u << 20;
    if (oc_json_parse(&d, (const char *)data, size, &lim, NULL, &e) != OC_OK) return 0;
    uint32_t root = oc_json_root(d);
    walk(d, root, 0);
    (void)oc_json_get(d, root, "a");
    (void)oc_json_pointer(d, root, "/a/0/b~1c");
    (void)oc_json_at(d, root, 3);
    oc_json_free(d);
    return 0;
}
