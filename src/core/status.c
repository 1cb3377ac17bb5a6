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
        err->status = status;
    }
    return status;
}
