/*
 * fuzz_jinja.c - libFuzzer target for the chat template engine (make fuzz-jinja).
 *
 * The input is a template, then optionally a NUL byte and the variables JSON (without one:
 * no variables). It is rendered as the library renders a model's template, with bos_token,
 * eos_token and add_generation_prompt given, but under a small step budget and memory
 * limit so that every input ends within milliseconds (the limits themselves are tested in
 * tests/unit/test_chat.c). AddressSanitizer and UBSan (built to abort) watch the engine;
 * the target checks its contract: it returns, a success appends its output and a failure
 * appends nothing, and the message of a failure is one line that names the chat template.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "chat/jinja.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *text = (const char *)data;
    const char *nul = memchr(text, 0, size);
    const size_t n = nul ? (size_t)(nul - text) : size;
    const char *json = nul ? nul + 1 : NULL;
    const size_t json_len = nul ? size - n - 1 : 0;
    static const jinja_var defaults[] = {
        {"add_generation_prompt", NULL, 1}, {"bos_token", "<s>", 0}, {"eos_token", "</s>", 0}};
    jinja_limits limits = {.max_steps = 200000, .max_bytes = 64 << 20};
    strbuf out = {0};
    strbuf_append(&out, "x", 1); /* output is appended after what is there */
    const er_status st = jinja_render(text, n, json, json_len, defaults, 3, &limits, &out);
    if (out.len < 1 || out.data[0] != 'x' || (st != ER_OK && out.len != 1))
        abort();
    if (limits.bytes > limits.max_bytes || limits.depth > 500)
        abort(); /* the arena or the depth guard let a render past its limit */
    if (st != ER_OK) {
        const char *msg = er_last_error();
        if (strncmp(msg, "chat template", 13) != 0 || strchr(msg, '\n'))
            abort();
    }
    strbuf_free(&out);
    return 0;
}
