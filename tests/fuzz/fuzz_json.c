/*
 * fuzz_json.c - libFuzzer target for the JSON reader and writer (make fuzz-json).
 *
 * Reads every item of the input, decoding each key and string into a buffer of exactly
 * its length (AddressSanitizer flags a write past it), and checks the reader's promises:
 * the depth never passes the limit, a decoded string is never longer than its text, an
 * error names what and where, and after the end of the document nothing more is read.
 * Then json_quote must size what it writes, and the reader must read it back to the
 * same bytes.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/json.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

enum { MAX_DEPTH = 16 }; /* small, so that the fuzzer reaches the limit */

static void decode(json_str s) {
    if (s.len > (size_t)(s.end - s.body))
        abort();
    char *out = malloc(s.len ? s.len : 1);
    json_decode(s, out);
    free(out);
}

static void read_all(const char *text, size_t n) {
    json_reader r;
    json_item it;
    json_init(&r, text, n, MAX_DEPTH);
    int open = 0;
    while (json_next(&r, &it)) {
        if (r.depth > MAX_DEPTH + 1 || r.p > r.end)
            abort();
        if (it.key.body)
            decode(it.key);
        if (it.kind == JSON_STRING)
            decode(it.str);
        if (it.kind == JSON_ARRAY || it.kind == JSON_OBJECT)
            open++;
        if (it.kind == JSON_END && open-- == 0) {
            if (r.p != r.end || !json_next(&r, &it) || it.kind != JSON_END)
                abort(); /* the end of the document is final */
            return;
        }
    }
    if (!r.error || r.error_at > n)
        abort();
}

static void round_trip(const char *s, size_t n) {
    const size_t len = json_quote(NULL, s, n, 0);
    char *quoted = malloc(len);
    if (json_quote(quoted, s, n, 0) != len)
        abort();
    json_reader r;
    json_item it;
    json_init(&r, quoted, len, 0);
    if (!json_next(&r, &it) || it.kind != JSON_STRING || it.str.len != n)
        abort();
    char *back = malloc(n ? n : 1);
    json_decode(it.str, back);
    if (memcmp(back, s, n) != 0)
        abort();
    free(back);
    free(quoted);
    const size_t ascii = json_quote(NULL, s, n, 1);
    quoted = malloc(ascii);
    if (json_quote(quoted, s, n, 1) != ascii)
        abort();
    for (size_t i = 0; i < ascii; i++)
        if ((unsigned char)quoted[i] >= 0x80)
            abort();
    free(quoted);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    read_all((const char *)data, size);
    round_trip((const char *)data, size);
    return 0;
}
