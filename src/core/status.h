/*
 * status.h - setting and reading the per-thread error message behind er_status.
 *
 * Every failure path in the library ends in er_fail(), which formats the message
 * (what was wrong, and where: file, tensor, byte offset) and returns the status, so
 * that `return er_fail(ER_ERR_FORMAT, "%s: ...", path);` is the one way to fail.
 */
#ifndef ER_CORE_STATUS_H
#define ER_CORE_STATUS_H

#include "edgerunner.h"

#if defined(__GNUC__)
#define ER_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define ER_PRINTF(a, b)
#endif

er_status er_fail(er_status status, const char *fmt, ...) ER_PRINTF(2, 3);

/* Prefixes the current message with more context ("loading model.gguf: " + message)
 * and returns the status unchanged. */
er_status er_fail_prefix(er_status status, const char *fmt, ...) ER_PRINTF(2, 3);

#endif
