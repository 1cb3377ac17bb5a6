/* status.c: status names and the one function that records an error message. */
#include "core/core.h"

#include <stdarg.h>
#include <stdio.h>

const char *oc_status_str(oc_status status) {
    switch (status) {
    case OC_OK: return "ok";
    case OC_ERR_NOMEM: return "out of memory";
    case OC_ERR_INVALID: return "invalid argument";
    case OC_ERR_IO: return "i/o error";
    case OC_ERR_FORMAT: return "format error";
    case OC_ERR_NOT_FOUND: return "not found";
    case OC_ERR_TYPE: return "type mismatch";
    case OC_ERR_UNSUPPORTED: return "unsupported";
    case OC_ERR_RANGE: return "out of range";
    case OC_ERR_DEVICE: return "device error";
    case OC_ERR_ABORTED: return "aborted";
    }
    return "unknown status";
}

oc_status oc_fail(oc_error *err, oc_status status, const char *fmt, ...) {
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->message, sizeof err->message, fmt, ap);
        va_end(ap);
        /* A message is one line whatever a caller formatted into it (a name or token from a
         * hostile file may hold a newline): control bytes become '?'. */
        for (char *c = err->message; *c; c++)
            if ((unsigned char)*c < 0x20 || *c == 0x7f) *c = '?';
        err->status = status;
    }
    return status;
}

void oc_quote(char *dst, size_t dst_bytes, const char *s, size_t n) {
    size_t limit = dst_bytes - 4, j = 0;
    for (size_t i = 0; i < n && j < limit; i++) {
        unsigned char c = (unsigned char)s[i];
        dst[j++] = (c >= 0x20 && c != 0x7f) ? (char)c : '?';
    }
    if (j < n && j == limit) { dst[j++] = '.'; dst[j++] = '.'; dst[j++] = '.'; }
    dst[j] = '\0';
}
