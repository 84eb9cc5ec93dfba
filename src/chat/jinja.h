/*
 * jinja.h - a small Jinja engine for chat templates: the subset that real chat templates
 * use, with the semantics of jinja2 as Hugging Face's apply_chat_template configures it
 * (trim_blocks, lstrip_blocks, loop controls, an immutable sandbox, tojson as
 * json.dumps(ensure_ascii=False), raise_exception, strftime_now, namespace).
 *
 * Values are Python's: None, bools, ints, floats, strings, lists, tuples, dicts (in
 * insertion order) and jinja2's Undefined, printed as Python prints them. The variables
 * come from a JSON object. Everything one render allocates lives in an arena that is
 * freed when it returns.
 *
 * Supported: {{ }}, {% %}, {# #} with - and + whitespace control; if/elif/else, for (with
 * else, a filter condition, tuple unpacking, loop.*), set (names, namespace attributes,
 * blocks), macro with defaults and keyword arguments, break/continue, raw, generation;
 * expressions with Python's operators, slices, conditional expressions, list/dict/tuple
 * literals; the common filters, tests and str/dict methods. Anything else fails with
 * ER_ERR_UNSUPPORTED naming the construct and its line.
 *
 * This header is all that chat.c sees. The engine is six files that share engine.h:
 * lex.c (template -> tokens), parse.c (tokens -> tree), eval.c (tree -> text, and
 * jinja_render), value.c (values, the arena, Python's printing, JSON in and out),
 * strings.c (Python's str methods on UTF-8) and filters.c (the filters, tests, methods
 * and global functions, each a table of names).
 */
#ifndef ER_CHAT_JINJA_H
#define ER_CHAT_JINJA_H

#include <stddef.h>
#include <stdint.h>

#include "edgerunner.h"
#include "tokenizer/unicode.h"

/* A variable given when the JSON object does not define it. */
typedef struct jinja_var {
    const char *name;
    const char *str; /* a string value, or NULL for a bool */
    int boolean;     /* when str is NULL */
} jinja_var;

/* What one rendering may use. A template comes from the model file: hostile input. The
 * defaults are far above what real templates need, and low enough that a template written
 * to exhaust them fails within seconds. Measured with jinja_limits' outputs: the templates
 * of Qwen3, Llama 3 and Phi-3 take at most 1,641 steps, 256 KiB and 17 levels of depth on
 * the conversations of tests/tokenizer, and 315k steps and 7 MiB (7 bytes per byte of
 * input) on a conversation of 1000 messages (1 MB); a step takes 20-100 ns. */
enum {
    JINJA_DEFAULT_STEPS = 50 * 1000 * 1000,
    JINJA_DEFAULT_BYTES = 256 << 20,         /* plus ... */
    JINJA_DEFAULT_BYTES_PER_INPUT_BYTE = 16, /* ... this much per byte of template and JSON */
};

typedef struct jinja_limits {
    int64_t max_steps; /* units of work (engine.h says which); 0: JINJA_DEFAULT_STEPS */
    size_t max_bytes;  /* the arena; 0: JINJA_DEFAULT_BYTES + 16 per byte of the input */
    /* set by jinja_render, for tests and measurements: what the rendering used */
    int64_t steps;
    size_t bytes;
    int depth;
} jinja_limits;

/* Renders the template source[0..n) with the variables of the JSON object json[0..json_len)
 * (json may be NULL: no variables) and then `defaults`, appending the result to out.
 * limits NULL: the defaults. Beyond a limit the rendering fails (ER_ERR_UNSUPPORTED) with
 * a message that names it. */
er_status jinja_render(const char *source, size_t n, const char *json, size_t json_len, const jinja_var *defaults,
                       int n_defaults, jinja_limits *limits, strbuf *out);

#endif
