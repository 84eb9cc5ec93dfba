/*
 * test_chat.c - the chat module's own parts: core/json.h's reader (items, errors with their
 * offsets, the depth limit) and writer, and the engine's name tables (sorted, as bsearch
 * needs). The engine's behaviour is tested end to end in test_tokenizer.c (templates) and
 * against jinja2 in tests/tokenizer.
 */
#include <stdlib.h>
#include <string.h>

#include "chat/engine.h"
#include "core/json.h"
#include "test.h"

/* The items of a document as text: scalars as written back, strings decoded in quotes,
 * keys before ':', "[" "{" for containers and ")" for each JSON_END (the last one ends the
 * document). NULL on an error, with r->error set. */
static char *walk(const char *text, int max_depth, json_reader *r) {
    static char out[4096];
    size_t n = 0;
    int open = 0;
    json_item it;
    json_init(r, text, strlen(text), max_depth);
    while (json_next(r, &it)) {
        char piece[256] = "", s[128];
        if (it.key.body) {
            json_decode(it.key, s);
            snprintf(piece, sizeof piece, "%.*s:", (int)it.key.len, s);
        }
        const size_t k = strlen(piece);
        switch (it.kind) {
        case JSON_NULL: snprintf(piece + k, sizeof piece - k, "null "); break;
        case JSON_BOOL: snprintf(piece + k, sizeof piece - k, "%s ", it.boolean ? "true" : "false"); break;
        case JSON_INT: snprintf(piece + k, sizeof piece - k, "%lld ", (long long)it.i); break;
        case JSON_FLOAT: snprintf(piece + k, sizeof piece - k, "%g ", it.f); break;
        case JSON_STRING:
            json_decode(it.str, s);
            snprintf(piece + k, sizeof piece - k, "'%.*s' ", (int)it.str.len, s);
            break;
        case JSON_ARRAY:
        case JSON_OBJECT:
            snprintf(piece + k, sizeof piece - k, it.kind == JSON_ARRAY ? "[ " : "{ ");
            open++;
            break;
        case JSON_END: snprintf(piece + k, sizeof piece - k, ") "); break;
        }
        memcpy(out + n, piece, strlen(piece) + 1);
        n += strlen(piece);
        if (it.kind == JSON_END && open-- == 0)
            return out;
    }
    return NULL;
}

static void test_json_reader(void) {
    json_reader r;
    const char *got = walk(" {\"a\": [1, -2.5e1, \"x\\u00e9\\n\", true, null], \"b\": {}, \"\": false} ", 200, &r);
    CHECK(got && !strcmp(got, "{ a:[ 1 -25 'x\xc3\xa9\n' true null ) b:{ ) :false ) ) "), "walk: %s", got ? got : r.error);
    got = walk("[-0, 0.5e-3, 1E+2, -9223372036854775808, 9223372036854775807, 1e400]", 200, &r);
    CHECK(got && !strcmp(got, "[ 0 0.0005 100 -9223372036854775808 9223372036854775807 inf ) ) "), "numbers: %s",
          got ? got : r.error);
    got = walk("\"\\ud83d\\ude00 \\ud800\"", 200, &r);
    CHECK(got && !strcmp(got, "'\xf0\x9f\x98\x80 \xed\xa0\x80' ) "), "a pair and a lone surrogate: %s", got ? got : r.error);

    static const struct {
        const char *text, *error;
        size_t at;
    } bad[] = {
        {"", "unexpected end", 0},
        {"{\"a\" 1}", "expected ':'", 5},
        {"{\"a\": 1,}", "expected a key", 8},
        {"[1 2]", "expected ',' or ']'", 3},
        {"{\"a\": 1 \"b\"}", "expected ',' or '}'", 8},
        {"[tru]", "unexpected character", 1},
        {"\"abc", "unterminated string", 4},
        {"\"a\x01\"", "control character in a string", 3},
        {"\"\\x\"", "bad escape", 3},
        {"[1.2.3]", "bad number", 6},
        {"{} x", "trailing characters", 3},
        /* strict since issue 23: hex digits in \u, RFC 8259's numbers, integers in int64 */
        {"\"\\u000g\"", "bad escape", 3},
        {"\"\\ud800\\udc0g\"", "bad escape", 9},
        {"01", "bad number", 2},
        {"[1.]", "bad number", 3},
        {"-.5", "bad number", 3},
        {"+1", "unexpected character", 0},
        {"[1e]", "bad number", 3},
        {"-", "bad number", 1},
        {"9223372036854775808", "integer beyond 64 bits", 19},
        {"[-9223372036854775809]", "integer beyond 64 bits", 21},
        {"123456789012345678901234567890123456789012345678901234567890123456", "integer beyond 64 bits", 66},
        {"NaN", "unexpected character", 0},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        got = walk(bad[i].text, 200, &r);
        CHECK(!got && r.error && !strcmp(r.error, bad[i].error) && r.error_at == bad[i].at, "bad JSON %zu '%s': %s at %zu", i,
              bad[i].text, r.error ? r.error : "(accepted)", r.error_at);
    }
    /* the depth limit: values inside max_depth containers are read, one level more fails */
    CHECK(walk("[[1]]", 2, &r) != NULL, "depth 2 within a limit of 2: %s", r.error ? r.error : "");
    CHECK(!walk("[[[1]]]", 2, &r) && r.error && !strcmp(r.error, "nesting too deep") && r.error_at == 3,
          "depth 3 beyond a limit of 2: %s at %zu", r.error ? r.error : "(accepted)", r.error_at);
    char deep[2 * 100000 + 1];
    memset(deep, '[', 100000);
    memset(deep + 100000, ']', 100000);
    deep[sizeof deep - 1] = 0;
    CHECK(!walk(deep, 200, &r) && r.error && !strcmp(r.error, "nesting too deep"), "100000 nested arrays refused");
}

static void test_json_quote(void) {
    static const struct {
        const char *s;
        int ensure_ascii;
        const char *quoted;
    } cases[] = {
        {"plain", 0, "\"plain\""},
        {"q\"b\\s/\n\r\t\b\f\x01\x1f\x7f", 0, "\"q\\\"b\\\\s/\\n\\r\\t\\b\\f\\u0001\\u001f\x7f\""},
        {"\xc3\xa9\xf0\x9f\x98\x80", 0, "\"\xc3\xa9\xf0\x9f\x98\x80\""},
        {"\xc3\xa9\xf0\x9f\x98\x80", 1, "\"\\u00e9\\ud83d\\ude00\""},
        {"a\xffz", 1, "\"a\\ufffdz\""},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char out[128];
        const size_t n = json_quote(NULL, cases[i].s, strlen(cases[i].s), cases[i].ensure_ascii);
        const size_t written = json_quote(out, cases[i].s, strlen(cases[i].s), cases[i].ensure_ascii);
        CHECK(n == written && n == strlen(cases[i].quoted) && !memcmp(out, cases[i].quoted, n), "json_quote case %zu: '%.*s'", i,
              (int)written, out);
    }
}

void test_chat(void) {
    test_json_reader();
    test_json_quote();
    const char *unsorted = jinja_check_tables();
    CHECK(!unsorted, "the filter, test, method and function tables are sorted (bsearch): '%s' is out of order",
          unsorted ? unsorted : "");
}
