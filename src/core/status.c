/* status.c - the per-thread error message (see status.h). */
#include "core/status.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

enum { MESSAGE_CAP = 1024 };

static _Thread_local char last_error[MESSAGE_CAP];

const char *er_status_name(er_status status) {
    switch (status) {
    case ER_OK: return "ER_OK";
    case ER_ERR_INVALID_ARG: return "ER_ERR_INVALID_ARG";
    case ER_ERR_IO: return "ER_ERR_IO";
    case ER_ERR_FORMAT: return "ER_ERR_FORMAT";
    case ER_ERR_UNSUPPORTED: return "ER_ERR_UNSUPPORTED";
    case ER_ERR_NO_MEMORY: return "ER_ERR_NO_MEMORY";
    case ER_ERR_CONTEXT_FULL: return "ER_ERR_CONTEXT_FULL";
    case ER_ERR_DEVICE: return "ER_ERR_DEVICE";
    }
    return "ER_ERR_UNKNOWN";
}

const char *er_last_error(void) { return last_error; }

/* Names from a file may hold control characters; a message stays one printable line. */
static void replace_controls(char *s) {
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f)
            *s = '?';
}

er_status er_fail(er_status status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    replace_controls(last_error);
    return status;
}

er_status er_fail_prefix(er_status status, const char *fmt, ...) {
    char prefix[MESSAGE_CAP];
    char old[MESSAGE_CAP];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, last_error, sizeof old);
    size_t n_prefix = strlen(prefix), n_old = strlen(old);
    if (n_old > MESSAGE_CAP - 1 - n_prefix)
        n_old = MESSAGE_CAP - 1 - n_prefix;
    memcpy(last_error, prefix, n_prefix);
    memcpy(last_error + n_prefix, old, n_old);
    last_error[n_prefix + n_old] = '\0';
    replace_controls(last_error);
    return status;
}
