/*
 * engine.h - what the files of the chat template engine share (see jinja.h for what it
 * does): values, the arena, tokens, the tree and the state of one render.
 *
 *   lex.c      template -> tokens (S->toks), with jinja2's whitespace rules
 *   parse.c    tokens -> a tree of statements and expressions (node)
 *   eval.c     the tree -> text: expressions, statements, calls; jinja_render
 *   value.c    the arena and its buffers, values, Python's ==, < and printing, JSON in/out
 *   strings.c  str as Python counts it (code points): strip, split, replace, find, case
 *   filters.c  filters, tests, str/dict/loop methods and global functions: tables of names
 *
 * Invariants: everything a render allocates comes from one arena (S->arena) that
 * jinja_render frees at the end, so values and the tree are never freed one by one. Any
 * error (a template that does not parse, an unsupported construct, raise_exception, an
 * undefined value used) goes through jinja_fail, which records the message and longjmps
 * back to jinja_render: with all memory in the arena there is nothing else to unwind, and
 * no function of the engine returns an error code.
 *
 * A template is hostile input, so one render is bounded three ways, each failing with a
 * one-line message that names the limit:
 *   depth   every recursive function of the parser, the evaluator and the printers (value
 *           printing, tojson, ==, <) enters through jinja_enter, one counter for all,
 *           at most JINJA_MAX_DEPTH levels: no input can exhaust the stack (the JSON
 *           reader bounds the variables' nesting itself, JINJA_MAX_JSON_DEPTH);
 *   steps   jinja_step counts the work (expression nodes, statements, loop iterations,
 *           values visited by printing and comparing, sort comparisons, 16-byte blocks of
 *           strings scanned) against jinja_limits.max_steps: no input can loop for long;
 *   memory  the arena refuses to grow past jinja_limits.max_bytes.
 * Integers are int64: a result Python would give as a big int fails ("integer overflow").
 */
#ifndef ER_CHAT_ENGINE_H
#define ER_CHAT_ENGINE_H

#include <setjmp.h>
#include <stdint.h>
#include <string.h>

#include "chat/jinja.h"
#include "core/status.h"

/* The recursion limit of one render: levels of jinja_enter (parser, evaluator, printers)
 * together. Chains of every construct at this limit need at most 384 KiB of stack built
 * with -O2 and 768 KiB under AddressSanitizer (measured with ulimit -s; the parser's ~14
 * frames per nested argument list are two levels, and eval.c keeps arrays out of the
 * frames that recur). The real templates reach 17 levels; jinja2 itself stops at Python's
 * 1000 frames (about 60 nested parentheses). */
enum { JINJA_MAX_DEPTH = 500 };
/* The nesting of the variables JSON (its values can then be printed within the limit above). */
enum { JINJA_MAX_JSON_DEPTH = 200 };

/* For the few functions kept out of a recursive caller's frame (see eval.c). */
#define JINJA_NOINLINE __attribute__((noinline))

/* ---- values --------------------------------------------------------------------------- */

typedef struct jstr { /* a string in the arena or the template; not NUL-terminated */
    const char *s;
    size_t n;
} jstr;

typedef struct jv jv;
typedef struct jlist jlist;
typedef struct jdict jdict;
typedef struct node node;
typedef struct loopinfo loopinfo;
typedef struct jinja_method jinja_method; /* filters.c: one entry of a method table */

typedef enum jt { J_UNDEF, J_NONE, J_BOOL, J_INT, J_FLOAT, J_STR, J_LIST, J_DICT, J_MACRO, J_BUILTIN, J_METHOD, J_LOOP } jt;

struct jv {
    jt t;
    union {
        int b;
        int64_t i;
        double f;
        jstr s; /* J_STR; J_UNDEF: the name that was undefined */
        jlist *l;
        jdict *d;
        const node *macro;
        int builtin; /* index into filters.c's table of global functions */
        loopinfo *loop;
        struct {
            jv *self;
            const jinja_method *method;
        } m; /* J_METHOD: a method bound to its object */
    };
};

struct jlist {
    jv *items; /* (cap) */
    size_t n, cap;
    int tuple;
};

struct jdict {
    jstr *keys; /* (cap), in insertion order */
    jv *vals;   /* (cap) */
    size_t n, cap;
    uint32_t *slots; /* (n_slots, a power of 2, at least 2n) from 8 keys on: a hash index
                        of the keys, each slot i + 1 for keys[i] or 0 (open addressing) */
    size_t n_slots;
    int ns; /* a namespace(): the only mutable object */
};

struct loopinfo {
    jlist *items;
    size_t index0;
};

typedef struct scope {
    struct scope *parent;
    jdict vars;
} scope;

typedef struct sbuf { /* a growing string in the arena */
    char *p;
    size_t n, cap;
} sbuf;

/* ---- tokens and tree ------------------------------------------------------------------ */

typedef enum tk { T_TEXT, T_VAR_BEGIN, T_VAR_END, T_BLOCK_BEGIN, T_BLOCK_END, T_NAME, T_STRING, T_INT, T_FLOAT, T_OP, T_EOF } tk;

typedef struct token {
    tk k;
    jstr s; /* text, name, decoded string, operator */
    int64_t i;
    double f;
    int line;
} token;

typedef enum nk {
    /* statements */
    N_TEXT, N_OUT, N_IF, N_FOR, N_SET, N_SETBLOCK, N_MACRO, N_BREAK, N_CONTINUE, N_BLOCK,
    /* expressions */
    E_LIT, E_NAME, E_ATTR, E_ITEM, E_SLICE, E_CALL, E_FILTER, E_TEST, E_NEG, E_POS, E_NOT, E_BIN, E_CMP, E_AND, E_OR,
    E_COND, E_LIST, E_TUPLE, E_DICT,
} nk;

typedef struct nlist {
    node **v; /* (cap) */
    size_t n, cap;
} nlist;

struct node {
    nk k;
    int line;
    jv lit;       /* E_LIT */
    jstr name;    /* names, attributes, filters, tests, operators, macro names */
    jstr attr;    /* N_SET: namespace attribute */
    node *a, *b, *c;
    nlist args;    /* call/filter/test arguments, list/tuple items, dict keys and values
                      interleaved, for/set targets (E_NAME), macro parameter defaults */
    jstr *kwnames; /* (args.n) keyword names, {NULL, 0} for positional; macro parameters */
    nlist body, body2;
    int negate; /* E_TEST: is not */
    int elif;   /* N_IF: an elif, the only statement of the else body of the if before it */
};

/* ---- the state of one render ---------------------------------------------------------- */

typedef struct ablock ablock; /* value.c: one block of the arena */

typedef struct state {
    ablock *arena;
    jmp_buf fail;
    er_status status;
    char msg[512];
    const char *src; /* normalized template */
    size_t n;
    token *toks; /* (captok) */
    size_t ntok, captok, pos;
    jdict *ctx; /* the JSON variables */
    const jinja_var *defaults;
    int n_defaults;
    scope *root;
    int brk;   /* 1: break, 2: continue pending */
    int line;  /* the line being evaluated, for messages from deep inside (printing) */
    int depth; /* levels of jinja_enter now */
    int depth_max;
    int64_t steps, max_steps; /* jinja_step's count and its limit */
    size_t bytes, max_bytes;  /* the arena's size and its limit */
} state;

/* Evaluated call arguments. */
typedef struct args {
    jv *v;    /* (n) */
    jstr *kw; /* (n) keyword names, {NULL, 0} for positional */
    size_t n, n_pos;
    int line;
    const char *what; /* for messages */
} args;

/* json.dumps's options, as the tojson filter takes them. */
typedef struct jinja_json_opts {
    int indent; /* -1: none */
    jstr indent_str;
    jstr item_sep, key_sep;
    int sort_keys, ensure_ascii;
} jinja_json_opts;

/* ---- small helpers -------------------------------------------------------------------- */

static inline jstr cstr(const char *s) { return (jstr){s, strlen(s)}; }
static inline int jstr_eq(jstr a, const char *b) { return a.n == strlen(b) && memcmp(a.s, b, a.n) == 0; }
static inline int jstr_same(jstr a, jstr b) { return a.n == b.n && (a.n == 0 || memcmp(a.s, b.s, a.n) == 0); }
#define SHOWN(x) (int)((x).n > 60 ? 60 : (x).n), (x).s /* for "%.*s": at most 60 bytes of a name */

static inline jv v_undef(jstr name) { return (jv){.t = J_UNDEF, .s = name}; }
static inline jv v_none(void) { return (jv){.t = J_NONE}; }
static inline jv v_bool(int b) { return (jv){.t = J_BOOL, .b = b != 0}; }
static inline jv v_int(int64_t i) { return (jv){.t = J_INT, .i = i}; }
static inline jv v_float(double f) { return (jv){.t = J_FLOAT, .f = f}; }
static inline jv v_str(jstr s) { return (jv){.t = J_STR, .s = s}; }
static inline jv v_list(jlist *l) { return (jv){.t = J_LIST, .l = l}; }
static inline jv v_dict(jdict *d) { return (jv){.t = J_DICT, .d = d}; }

static inline int jv_is_num(jv v) { return v.t == J_INT || v.t == J_FLOAT || v.t == J_BOOL; }
static inline double jv_num(jv v) { return v.t == J_FLOAT ? v.f : v.t == J_INT ? (double)v.i : (double)v.b; }
static inline int64_t jv_int(jv v) { return v.t == J_INT ? v.i : v.b; } /* J_INT or J_BOOL */

/* ---- value.c -------------------------------------------------------------------------- */

_Noreturn void jinja_fail(state *S, er_status st, int line, const char *fmt, ...) ER_PRINTF(4, 5);
/* One level deeper into a recursion; beyond JINJA_MAX_DEPTH fails with st, "<what> nested
 * too deeply". jinja_leave on the way out (a failure needs none: the render is over). */
_Noreturn void jinja_depth_fail(state *S, er_status st, int line, const char *what);
static inline void jinja_enter(state *S, er_status st, int line, const char *what) {
    if (++S->depth > JINJA_MAX_DEPTH)
        jinja_depth_fail(S, st, line, what);
    if (S->depth > S->depth_max)
        S->depth_max = S->depth;
}
static inline void jinja_leave(state *S) { S->depth--; }
/* n units of work (see the header); beyond the budget the render fails. */
_Noreturn void jinja_steps_fail(state *S, int line);
static inline void jinja_step(state *S, int line, int64_t n) {
    if ((S->steps += n) > S->max_steps)
        jinja_steps_fail(S, line);
}
/* Work on n bytes of a string that allocates nothing (a scan, a comparison). */
static inline void jinja_step_bytes(state *S, int line, size_t n) { jinja_step(S, line, 1 + (int64_t)(n >> 4)); }
void *jinja_alloc(state *S, size_t size);
void *jinja_zalloc(state *S, size_t size);
/* items (n used of *cap, `size` bytes each) with room for `need` more: the arena has no
 * realloc, so a full array moves to one twice as large (first_cap at first). */
void *jinja_grow(state *S, void *items, size_t n, size_t need, size_t *cap, size_t size, size_t first_cap);
void jinja_arena_free(state *S);
jstr jinja_strdup(state *S, const char *s, size_t n);

void jinja_sb_put(state *S, sbuf *b, const char *s, size_t n);
void jinja_sb_printf(state *S, sbuf *b, const char *fmt, ...) ER_PRINTF(3, 4);
static inline void sb_puts(state *S, sbuf *b, const char *s) { jinja_sb_put(S, b, s, strlen(s)); }
static inline jstr sb_str(const sbuf *b) { return (jstr){b->p ? b->p : "", b->n}; }

jlist *jinja_list_new(state *S, size_t cap);
void jinja_list_push(state *S, jlist *l, jv v);
jdict *jinja_dict_new(state *S);
jv *jinja_dict_find(state *S, const jdict *d, jstr key);
void jinja_dict_set(state *S, jdict *d, jstr key, jv v);
jlist *jinja_dict_items(state *S, const jdict *d); /* [(key, value), ...] */

const char *jinja_type_name(jv v);
int jinja_truthy(jv v);
int jinja_eq(state *S, int line, jv a, jv b);  /* Python's == (a namespace equals only itself) */
int jinja_cmp(state *S, int line, jv a, jv b); /* -1, 0, 1; fails as Python's < would */
void jinja_print(state *S, sbuf *b, jv v);      /* str(v), what {{ v }} prints */
/* Sorts idx[0..n) stably (equal elements keep their order, as in Python's sort) by
 * less(ctx, a, b), with O(n log n) calls: a merge sort. */
void jinja_sort(state *S, size_t *idx, size_t n, int (*less)(state *S, void *ctx, size_t a, size_t b), void *ctx);
jstr jinja_str(state *S, jv v);

/* The variables: a JSON object, else a failure naming what was wrong and where. */
jdict *jinja_read_json(state *S, const char *json, size_t n);
/* json.dumps(v) with the tojson filter's options. */
jstr jinja_tojson(state *S, int line, jv v, const jinja_json_opts *o);

/* ---- strings.c ------------------------------------------------------------------------ */

int jinja_isspace(int32_t cp); /* Python's str.isspace, enough of it for templates */
size_t jinja_skip_space(const char *s, size_t n, size_t i);
size_t jinja_n_chars(jstr s);
size_t *jinja_char_offsets(state *S, jstr s, size_t *n); /* (n + 1) byte offsets of the code points */
size_t jinja_char_at(jstr s, size_t i);                  /* the byte offset of code point i, or s.n */
const char *jinja_find(jstr s, size_t from, jstr sub);
jstr jinja_strip(jstr s, const jstr *chars, int left, int right); /* chars NULL: white space */
jv jinja_split(state *S, jstr s, const jstr *sep, int64_t maxsplit, int from_right);
enum { CASE_LOWER, CASE_UPPER, CASE_CAPITALIZE, CASE_TITLE };
jstr jinja_case(state *S, jstr s, int mode); /* ASCII letters only, as before */
jstr jinja_replace(state *S, jstr s, jstr old, jstr new_s, int64_t count);
jstr jinja_spaces(state *S, int64_t n); /* n (or no) spaces */

/* ---- lex.c, parse.c ------------------------------------------------------------------- */

void jinja_lex(state *S);                /* S->src -> S->toks */
void jinja_parse(state *S, nlist *body); /* S->toks -> the statements of the template */

/* ---- eval.c --------------------------------------------------------------------------- */

jv jinja_get_attr(state *S, int line, jv obj, jstr name);
jv jinja_get_item(state *S, int line, jv obj, jv key);
jlist *jinja_iter(state *S, int line, jv v); /* what a for loop goes over */
int jinja_contains(state *S, int line, jv container, jv item);
size_t jinja_length(state *S, int line, jv v);
jv jinja_binop(state *S, int line, jstr op, jv a, jv b);

/* Argument `i` (positional) or `name` (keyword); NULL when absent. */
const jv *jinja_arg(const args *a, size_t i, const char *name);
jstr jinja_arg_str(state *S, const args *a, size_t i, const char *name, const char *def);
int64_t jinja_arg_int(state *S, const args *a, size_t i, const char *name, int64_t def);
int jinja_arg_bool(const args *a, size_t i, const char *name, int def);

/* ---- filters.c ------------------------------------------------------------------------ */

jv jinja_filter(state *S, int line, jstr name, jv v, const args *a);
int jinja_test(state *S, int line, jstr name, jv v, const args *a);
const jinja_method *jinja_method_find(jv obj, jstr name); /* NULL: obj has no such method */
jv jinja_call_method(state *S, int line, jv self, const jinja_method *m, const args *a);
int jinja_builtin_find(jstr name); /* -1: no global function of that name */
jv jinja_call_builtin(state *S, int line, int which, const args *a);
const char *jinja_check_tables(void); /* NULL, or the first name out of order (unit tests) */

#endif
