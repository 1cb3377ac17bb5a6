/* args.c: the one way every command reads a number from its arguments. atoi took "-1",
 * "12abc" and 99999999999 (overflowing int) without a word; here the whole text must be a number
 * within the option's range, or the command stops with one line naming the option. */
#include "tools/tools.h"
#include "port.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

int oc_tool_int_arg(const char *cmd, const char *opt, const char *value, long lo, long hi, int *out) {
    char *end = NULL;
    errno = 0;
    long v = value ? strtol(value, &end, 10) : 0;
    if (!value || !*value || *end || errno == ERANGE || v < lo || v > hi) {
        fprintf(stderr, "ocellus %s: %s wants a whole number in [%ld, %ld], not '%s'\n", cmd, opt, lo, hi,
                value ? value : "");
        return 0;
    }
    *out = (int)v;
    return 1;
}

int oc_tool_parse_ull(const char *s, unsigned long long hi, unsigned long long *out) {
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (*s < '0' || *s > '9' || *end != '\0' || errno || v > hi) return 0;
    *out = v;
    return 1;
}

int oc_tool_parse_ll(const char *s, long long lo, long long hi, long long *out) {
    char *end;
    if (!s) return 0;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (*s == '\0' || *end != '\0' || errno || v < lo || v > hi) return 0;
    *out = v;
    return 1;
}

int oc_tool_parse_range(const char *s, long max, int32_t *lo, int32_t *hi) {
    char *end;
    long a = strtol(s, &end, 10), b = a;
    if (end == s) return 0;
    if (*end == '-') {
        const char *t = end + 1;
        b = strtol(t, &end, 10);
        if (end == t) return 0;
    }
    if (*end != '\0' || a < 1 || b < a || b > max) return 0;
    *lo = (int32_t)a;
    *hi = (int32_t)b;
    return 1;
}

int oc_tool_output_ok(const char *cmd, const char *opt, const char *path) {
    char msg[4200];
    if (!path || oc_port_check_writable(path, msg, sizeof msg) == 0) return 1;
    fprintf(stderr, "ocellus %s: %s %s\n", cmd, opt, msg);
    return 0;
}

int oc_tool_input_ok(const char *cmd, const char *opt, const char *path) {
    char msg[4200];
    FILE *f = path ? oc_port_fopen_regular(path, msg, sizeof msg) : NULL;
    if (f) {
        fclose(f);
        return 1;
    }
    if (path) fprintf(stderr, "ocellus %s: %s %s\n", cmd, opt, msg);
    return 0;
}
