/*
 * json.h - a small JSON reader and a JSON string writer, for any part of the library that
 * reads or writes JSON (today the chat templates' variables and their tojson filter).
 *
 * The reader is a pull reader: it allocates nothing and calls nothing back; the caller asks
 * for one item at a time and builds whatever it wants (the chat engine builds its values
 * with a short recursive function). It validates as it goes and stops at the first
 * error, naming what was wrong and the byte offset where it saw it. Nesting deeper than
 * max_depth fails instead of recursing further, so a hostile document cannot exhaust the
 * stack of a recursive caller.
 *
 *   json_reader r;
 *   json_init(&r, text, n, 200);
 *   json_item it;
 *   json_next(&r, &it)   1: the top value; then for an array or an object its members
 *                        one call each (an object member's key in it.key), a JSON_END that
 *                        closes it, and after the top value one more JSON_END for the end
 *                        of the text. 0: r.error, at byte r.error_at; every later call is 0.
 *
 * What it reads is RFC 8259's JSON, as Python's json.loads reads it, with these
 * differences: an integer must fit in int64 ("integer beyond 64 bits": Python's are
 * unbounded), a number has at most 63 characters ("number too long"), a float beyond the
 * doubles reads as +-inf or 0 (as Python's float()), NaN and Infinity (Python's extensions)
 * are refused; a lone surrogate becomes its 3 UTF-8 bytes; bytes >= 0x80 are copied, not
 * checked.
 */
#ifndef ER_CORE_JSON_H
#define ER_CORE_JSON_H

#include <stddef.h>
#include <stdint.h>

enum { JSON_MAX_DEPTH = 255 }; /* the deepest max_depth json_init takes */

typedef enum json_kind { JSON_NULL, JSON_BOOL, JSON_INT, JSON_FLOAT, JSON_STRING, JSON_ARRAY, JSON_OBJECT, JSON_END } json_kind;

/* A string as it stands in the text, checked: json_decode writes its len bytes. */
typedef struct json_str {
    const char *body; /* after the opening quote */
    const char *end;  /* after the closing quote */
    size_t len;       /* decoded length, never more than end - body */
} json_str;

typedef struct json_item {
    json_kind kind;
    json_str key; /* a member of an object: its key */
    json_str str; /* JSON_STRING */
    int boolean;  /* JSON_BOOL */
    int64_t i;    /* JSON_INT */
    double f;     /* JSON_FLOAT */
} json_item;

typedef struct json_reader {
    const char *start, *p, *end;
    int max_depth;
    int depth;                     /* containers open */
    int fresh;                     /* the innermost container has no member yet */
    int done;                      /* the top value has been read */
    char open[JSON_MAX_DEPTH + 1]; /* (depth) '[' or '{' per open container */
    int big_int_as_float;          /* set after json_init: an integer beyond int64 reads as a
                                      JSON_FLOAT (its nearest double) instead of failing, as
                                      model folders' configs hold 1e30 as an integer */
    const char *error;             /* what was wrong; NULL while all is well */
    size_t error_at;               /* its byte offset */
} json_reader;

/* max_depth: containers nested around the deepest value (0: scalars only); at most
 * JSON_MAX_DEPTH. */
void json_init(json_reader *r, const char *text, size_t n, int max_depth);

/* The next item; 0 on an error (see the header). */
int json_next(json_reader *r, json_item *it);

/* Writes the decoded bytes of s (s.len of them, no NUL) to out. */
void json_decode(json_str s, char *out);

/* Writes s[0..n) as a JSON string, quotes included, as Python's json.dumps does: \" \\ \n
 * \r \t \b \f, other control characters as \u00XX, and with ensure_ascii every non-ASCII
 * character as \uXXXX (a surrogate pair beyond U+FFFF, U+FFFD for a byte that is not
 * UTF-8). Returns the length; out NULL: only the length, to size the buffer. */
size_t json_quote(char *out, const char *s, size_t n, int ensure_ascii);

#endif
