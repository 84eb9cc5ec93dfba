/*
 * jinja.c - the chat template engine (see jinja.h): lexer, parser, evaluator.
 *
 *   lex()     the template -> tokens, applying jinja2's whitespace rules as its lexer does
 *             (newlines normalized, one trailing newline dropped, lstrip_blocks, trim_blocks,
 *             "-" and "+" markers)
 *   parse_*() tokens -> a tree of statements and expressions, jinja2's precedence:
 *             cond-expr < or < and < not < comparisons < + - < ~ < * / // % < ** < unary
 *             < filters and tests < postfix (.attr [item] (call))
 *   render()  walks the tree; values are Python's (jv), printed as Python prints them.
 *
 * Memory and errors: everything a render allocates (tokens, tree, values, strings) comes
 * from one arena that jinja_render frees at the end. An error anywhere (a template that
 * does not parse, an unsupported construct, raise_exception, an undefined value used)
 * records its message and longjmps back to jinja_render: with all memory in the arena
 * there is nothing else to unwind.
 */
#define _POSIX_C_SOURCE 200809L

#include "tokenizer/jinja.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/status.h"

enum { MAX_DEPTH = 200 }; /* nesting of JSON, expressions and macro calls */

/* ---- arena ---------------------------------------------------------------------------- */

typedef struct ablock {
    struct ablock *next;
    size_t used, cap;
    _Alignas(16) unsigned char data[];
} ablock;

typedef struct jstr {
    const char *s;
    size_t n;
} jstr;

typedef struct jv jv;
typedef struct jlist jlist;
typedef struct jdict jdict;
typedef struct node node;
typedef struct loopinfo loopinfo;

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
        int builtin;
        loopinfo *loop;
        struct {
            jv *self;
            jstr name;
        } m; /* J_METHOD: a method bound to its object */
    };
};

struct jlist {
    jv *items;
    size_t n, cap;
    int tuple;
};

struct jdict {
    jstr *keys;
    jv *vals;
    size_t n, cap;
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

typedef struct sbuf {
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
    node **v;
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
};

/* ---- state ---------------------------------------------------------------------------- */

typedef struct state {
    ablock *arena;
    jmp_buf fail;
    er_status status;
    char msg[512];
    const char *src; /* normalized template */
    size_t n;
    token *toks;
    size_t ntok, captok, pos;
    jdict *ctx; /* the JSON variables */
    const jinja_var *defaults;
    int n_defaults;
    scope *root;
    int brk;   /* 1: break, 2: continue pending */
    int depth; /* recursion guard */
} state;

static _Noreturn void fail(state *S, er_status st, int line, const char *fmt, ...) ER_PRINTF(4, 5);

static void fail(state *S, er_status st, int line, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int k = line > 0 ? snprintf(S->msg, sizeof S->msg, "chat template line %d: ", line)
                     : snprintf(S->msg, sizeof S->msg, "chat template: ");
    vsnprintf(S->msg + k, sizeof S->msg - (size_t)k, fmt, ap);
    va_end(ap);
    S->status = st;
    longjmp(S->fail, 1);
}

static void *ar_alloc(state *S, size_t size) {
    size = (size + 15) & ~(size_t)15;
    if (!S->arena || S->arena->cap - S->arena->used < size) {
        const size_t cap = size > 65536 ? size : 65536;
        ablock *b = malloc(sizeof *b + cap);
        if (!b)
            fail(S, ER_ERR_NO_MEMORY, 0, "out of memory");
        b->next = S->arena;
        b->used = 0;
        b->cap = cap;
        S->arena = b;
    }
    void *p = S->arena->data + S->arena->used;
    S->arena->used += size;
    return p;
}

static void *ar_zalloc(state *S, size_t size) { return memset(ar_alloc(S, size), 0, size); }

static jstr ar_str(state *S, const char *s, size_t n) {
    char *p = ar_alloc(S, n + 1);
    if (n)
        memcpy(p, s, n);
    p[n] = 0;
    return (jstr){p, n};
}

static jstr cstr(const char *s) { return (jstr){s, strlen(s)}; }
static int jstr_eq(jstr a, const char *b) { return a.n == strlen(b) && memcmp(a.s, b, a.n) == 0; }
static int jstr_same(jstr a, jstr b) { return a.n == b.n && (a.n == 0 || memcmp(a.s, b.s, a.n) == 0); }
#define SHOWN(x) (int)((x).n > 60 ? 60 : (x).n), (x).s

static void sb_put(state *S, sbuf *b, const char *s, size_t n) {
    if (b->cap - b->n < n) {
        size_t cap = b->cap ? 2 * b->cap : 256;
        while (cap - b->n < n)
            cap *= 2;
        char *p = ar_alloc(S, cap);
        if (b->n)
            memcpy(p, b->p, b->n);
        b->p = p;
        b->cap = cap;
    }
    if (n)
        memcpy(b->p + b->n, s, n);
    b->n += n;
}

static void sb_puts(state *S, sbuf *b, const char *s) { sb_put(S, b, s, strlen(s)); }

static void sb_printf(state *S, sbuf *b, const char *fmt, ...) ER_PRINTF(3, 4);
static void sb_printf(state *S, sbuf *b, const char *fmt, ...) {
    char tmp[64];
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    sb_put(S, b, tmp, k < 0 ? 0 : (size_t)k < sizeof tmp ? (size_t)k : sizeof tmp - 1);
}

static jstr sb_str(sbuf *b) { return (jstr){b->p ? b->p : "", b->n}; }

/* ---- values --------------------------------------------------------------------------- */

static jv v_undef(jstr name) { return (jv){.t = J_UNDEF, .s = name}; }
static jv v_none(void) { return (jv){.t = J_NONE}; }
static jv v_bool(int b) { return (jv){.t = J_BOOL, .b = b != 0}; }
static jv v_int(int64_t i) { return (jv){.t = J_INT, .i = i}; }
static jv v_float(double f) { return (jv){.t = J_FLOAT, .f = f}; }
static jv v_str(jstr s) { return (jv){.t = J_STR, .s = s}; }

static jlist *new_list(state *S, size_t cap) {
    jlist *l = ar_zalloc(S, sizeof *l);
    if (cap) {
        l->items = ar_alloc(S, cap * sizeof *l->items);
        l->cap = cap;
    }
    return l;
}

static void list_push(state *S, jlist *l, jv v) {
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 8;
        jv *items = ar_alloc(S, cap * sizeof *items);
        if (l->n)
            memcpy(items, l->items, l->n * sizeof *items);
        l->items = items;
        l->cap = cap;
    }
    l->items[l->n++] = v;
}

static jv v_list(jlist *l) { return (jv){.t = J_LIST, .l = l}; }

static jdict *new_dict(state *S) { return ar_zalloc(S, sizeof(jdict)); }

static jv *dict_find(const jdict *d, jstr key) {
    for (size_t i = d->n; i-- > 0;)
        if (jstr_same(d->keys[i], key))
            return &d->vals[i];
    return NULL;
}

static void dict_set(state *S, jdict *d, jstr key, jv v) {
    jv *slot = dict_find(d, key);
    if (slot) {
        *slot = v;
        return;
    }
    if (d->n == d->cap) {
        size_t cap = d->cap ? 2 * d->cap : 8;
        jstr *keys = ar_alloc(S, cap * sizeof *keys);
        jv *vals = ar_alloc(S, cap * sizeof *vals);
        if (d->n) {
            memcpy(keys, d->keys, d->n * sizeof *keys);
            memcpy(vals, d->vals, d->n * sizeof *vals);
        }
        d->keys = keys, d->vals = vals, d->cap = cap;
    }
    d->keys[d->n] = key;
    d->vals[d->n++] = v;
}

static jv v_dict(jdict *d) { return (jv){.t = J_DICT, .d = d}; }

static const char *type_name(jv v) {
    switch (v.t) {
    case J_UNDEF: return "undefined";
    case J_NONE: return "NoneType";
    case J_BOOL: return "bool";
    case J_INT: return "int";
    case J_FLOAT: return "float";
    case J_STR: return "str";
    case J_LIST: return v.l->tuple ? "tuple" : "list";
    case J_DICT: return v.d->ns ? "Namespace" : "dict";
    case J_LOOP: return "LoopContext";
    default: return "function";
    }
}

static int truthy(jv v) {
    switch (v.t) {
    case J_UNDEF:
    case J_NONE: return 0;
    case J_BOOL: return v.b;
    case J_INT: return v.i != 0;
    case J_FLOAT: return v.f != 0;
    case J_STR: return v.s.n != 0;
    case J_LIST: return v.l->n != 0;
    case J_DICT: return v.d->n != 0 || v.d->ns;
    default: return 1;
    }
}

static int is_num(jv v) { return v.t == J_INT || v.t == J_FLOAT || v.t == J_BOOL; }
static double num(jv v) { return v.t == J_FLOAT ? v.f : v.t == J_INT ? (double)v.i : (double)v.b; }

static int py_eq(jv a, jv b) {
    if (is_num(a) && is_num(b)) {
        if (a.t != J_FLOAT && b.t != J_FLOAT)
            return (a.t == J_INT ? a.i : a.b) == (b.t == J_INT ? b.i : b.b);
        return num(a) == num(b);
    }
    if (a.t != b.t)
        return 0;
    switch (a.t) {
    case J_UNDEF:
    case J_NONE: return 1;
    case J_STR: return jstr_same(a.s, b.s);
    case J_LIST:
        if (a.l->n != b.l->n || a.l->tuple != b.l->tuple)
            return 0;
        for (size_t i = 0; i < a.l->n; i++)
            if (!py_eq(a.l->items[i], b.l->items[i]))
                return 0;
        return 1;
    case J_DICT:
        if (a.d->n != b.d->n)
            return 0;
        for (size_t i = 0; i < a.d->n; i++) {
            const jv *o = dict_find(b.d, a.d->keys[i]);
            if (!o || !py_eq(a.d->vals[i], *o))
                return 0;
        }
        return 1;
    case J_MACRO: return a.macro == b.macro;
    case J_BUILTIN: return a.builtin == b.builtin;
    default: return 0;
    }
}

/* -1, 0, 1; fails (Python's TypeError) on values that have no order. */
static int py_cmp(state *S, int line, jv a, jv b) {
    if (is_num(a) && is_num(b)) {
        if (a.t != J_FLOAT && b.t != J_FLOAT) {
            const int64_t x = a.t == J_INT ? a.i : a.b, y = b.t == J_INT ? b.i : b.b;
            return x < y ? -1 : x > y;
        }
        return num(a) < num(b) ? -1 : num(a) > num(b);
    }
    if (a.t == J_STR && b.t == J_STR) {
        const size_t n = a.s.n < b.s.n ? a.s.n : b.s.n;
        const int c = n ? memcmp(a.s.s, b.s.s, n) : 0; /* UTF-8 byte order is code point order */
        return c ? (c < 0 ? -1 : 1) : a.s.n < b.s.n ? -1 : a.s.n > b.s.n;
    }
    if (a.t == J_LIST && b.t == J_LIST) {
        for (size_t i = 0; i < a.l->n && i < b.l->n; i++) {
            if (!py_eq(a.l->items[i], b.l->items[i]))
                return py_cmp(S, line, a.l->items[i], b.l->items[i]);
        }
        return a.l->n < b.l->n ? -1 : a.l->n > b.l->n;
    }
    fail(S, ER_ERR_INVALID_ARG, line, "cannot compare %s and %s", type_name(a), type_name(b));
}

/* ---- Python printing ------------------------------------------------------------------ */

/* float.__repr__: the shortest digits that round-trip, fixed notation for exponents in
 * [-4, 16), else d.ddde+XX. */
static void put_float(state *S, sbuf *b, double f) {
    if (isnan(f)) {
        sb_puts(S, b, "nan");
        return;
    }
    if (isinf(f)) {
        sb_puts(S, b, f < 0 ? "-inf" : "inf");
        return;
    }
    char e[40];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(e, sizeof e, "%.*e", prec - 1, f);
        if (strtod(e, NULL) == f)
            break;
    }
    /* e = [-]d[.ddd]e(+|-)XX */
    const char *p = e;
    if (*p == '-') {
        sb_put(S, b, "-", 1);
        p++;
    }
    char digits[24];
    int nd = 0;
    for (; *p && *p != 'e'; p++)
        if (*p != '.')
            digits[nd++] = *p;
    const int exp = atoi(p + 1);
    while (nd > 1 && digits[nd - 1] == '0')
        nd--;
    if (exp >= -4 && exp < 16) {
        if (exp < 0) {
            sb_put(S, b, "0.", 2);
            for (int i = 0; i < -exp - 1; i++)
                sb_put(S, b, "0", 1);
            sb_put(S, b, digits, (size_t)nd);
        } else {
            for (int i = 0; i <= exp; i++)
                sb_put(S, b, i < nd ? &digits[i] : "0", 1);
            sb_put(S, b, ".", 1);
            if (nd > exp + 1)
                sb_put(S, b, digits + exp + 1, (size_t)(nd - exp - 1));
            else
                sb_put(S, b, "0", 1);
        }
    } else {
        sb_put(S, b, digits, 1);
        if (nd > 1) {
            sb_put(S, b, ".", 1);
            sb_put(S, b, digits + 1, (size_t)nd - 1);
        }
        sb_printf(S, b, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    }
}

static void put_repr(state *S, sbuf *b, jv v);

/* repr() of a string: single quotes unless it has ' and no ". */
static void put_str_repr(state *S, sbuf *b, jstr s) {
    const int dq = memchr(s.s, '\'', s.n) && !memchr(s.s, '"', s.n);
    const char q = dq ? '"' : '\'';
    sb_put(S, b, &q, 1);
    for (size_t i = 0; i < s.n; i++) {
        const unsigned char c = (unsigned char)s.s[i];
        if (c == '\\' || c == (unsigned char)q) {
            sb_put(S, b, "\\", 1);
            sb_put(S, b, &s.s[i], 1);
        } else if (c == '\n') {
            sb_puts(S, b, "\\n");
        } else if (c == '\r') {
            sb_puts(S, b, "\\r");
        } else if (c == '\t') {
            sb_puts(S, b, "\\t");
        } else if (c < 0x20 || c == 0x7f) {
            sb_printf(S, b, "\\x%02x", c);
        } else {
            sb_put(S, b, &s.s[i], 1);
        }
    }
    sb_put(S, b, &q, 1);
}

/* str(): what {{ v }} prints. */
static void put_str(state *S, sbuf *b, jv v) {
    switch (v.t) {
    case J_UNDEF: break;
    case J_NONE: sb_puts(S, b, "None"); break;
    case J_BOOL: sb_puts(S, b, v.b ? "True" : "False"); break;
    case J_INT: sb_printf(S, b, "%lld", (long long)v.i); break;
    case J_FLOAT: put_float(S, b, v.f); break;
    case J_STR: sb_put(S, b, v.s.s, v.s.n); break;
    default: put_repr(S, b, v); break;
    }
}

static void put_repr(state *S, sbuf *b, jv v) {
    switch (v.t) {
    case J_STR: put_str_repr(S, b, v.s); break;
    case J_LIST:
        sb_puts(S, b, v.l->tuple ? "(" : "[");
        for (size_t i = 0; i < v.l->n; i++) {
            if (i)
                sb_puts(S, b, ", ");
            put_repr(S, b, v.l->items[i]);
        }
        sb_puts(S, b, v.l->tuple ? (v.l->n == 1 ? ",)" : ")") : "]");
        break;
    case J_DICT:
        sb_puts(S, b, v.d->ns ? "<Namespace {" : "{");
        for (size_t i = 0; i < v.d->n; i++) {
            if (i)
                sb_puts(S, b, ", ");
            put_str_repr(S, b, v.d->keys[i]);
            sb_puts(S, b, ": ");
            put_repr(S, b, v.d->vals[i]);
        }
        sb_puts(S, b, v.d->ns ? "}>" : "}");
        break;
    case J_UNDEF: sb_puts(S, b, "Undefined"); break;
    case J_MACRO:
    case J_BUILTIN:
    case J_METHOD: sb_puts(S, b, "<function>"); break;
    case J_LOOP: sb_puts(S, b, "<LoopContext>"); break;
    default: put_str(S, b, v); break;
    }
}

static jstr to_str(state *S, jv v) {
    if (v.t == J_STR)
        return v.s;
    sbuf b = {0};
    put_str(S, &b, v);
    return sb_str(&b);
}

/* ---- JSON ----------------------------------------------------------------------------- */

typedef struct jparse {
    state *S;
    const char *start, *p, *end;
} jparse;

static _Noreturn void json_fail(jparse *J, const char *what) {
    fail(J->S, ER_ERR_INVALID_ARG, 0, "variables JSON: %s at byte %zu", what, (size_t)(J->p - J->start));
}

static void json_ws(jparse *J) {
    while (J->p < J->end && (*J->p == ' ' || *J->p == '\t' || *J->p == '\n' || *J->p == '\r'))
        J->p++;
}

static int hex4(const char *p, uint32_t *out) {
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        const char c = p[i];
        v = v * 16 + (uint32_t)(c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : 99);
        if (v >= 0x10000)
            return 0;
    }
    *out = v;
    return 1;
}

static jstr json_string(jparse *J) {
    sbuf b = {0};
    J->p++; /* the opening quote */
    for (;;) {
        if (J->p >= J->end)
            json_fail(J, "unterminated string");
        const char c = *J->p++;
        if (c == '"')
            break;
        if ((unsigned char)c < 0x20)
            json_fail(J, "control character in a string");
        if (c != '\\') {
            sb_put(J->S, &b, &c, 1);
            continue;
        }
        if (J->p >= J->end)
            json_fail(J, "unterminated string");
        const char e = *J->p++;
        const char *simple = strchr("\"\\/bfnrt", e);
        if (simple && e) {
            static const char out[] = "\"\\/\b\f\n\r\t";
            sb_put(J->S, &b, &out[simple - "\"\\/bfnrt"], 1);
            continue;
        }
        uint32_t u, lo;
        if (e != 'u' || J->end - J->p < 4 || !hex4(J->p, &u))
            json_fail(J, "bad escape");
        J->p += 4;
        if (u >= 0xD800 && u < 0xDC00 && J->end - J->p >= 6 && J->p[0] == '\\' && J->p[1] == 'u' && hex4(J->p + 2, &lo) &&
            lo >= 0xDC00 && lo < 0xE000) {
            u = 0x10000 + ((u - 0xD800) << 10) + (lo - 0xDC00);
            J->p += 6;
        }
        char enc[4];
        sb_put(J->S, &b, enc, (size_t)utf8_put(u, enc)); /* a lone surrogate is kept as its 3 bytes */
    }
    return sb_str(&b);
}

static jv json_value(jparse *J, int depth) {
    json_ws(J);
    if (depth > MAX_DEPTH)
        json_fail(J, "nesting too deep");
    if (J->p >= J->end)
        json_fail(J, "unexpected end");
    const char c = *J->p;
    if (c == '"')
        return v_str(json_string(J));
    if (c == '{') {
        jdict *d = new_dict(J->S);
        J->p++;
        json_ws(J);
        if (J->p < J->end && *J->p == '}') {
            J->p++;
            return v_dict(d);
        }
        for (;;) {
            json_ws(J);
            if (J->p >= J->end || *J->p != '"')
                json_fail(J, "expected a key");
            const jstr key = json_string(J);
            json_ws(J);
            if (J->p >= J->end || *J->p != ':')
                json_fail(J, "expected ':'");
            J->p++;
            dict_set(J->S, d, key, json_value(J, depth + 1));
            json_ws(J);
            if (J->p < J->end && *J->p == ',') {
                J->p++;
                continue;
            }
            if (J->p < J->end && *J->p == '}') {
                J->p++;
                return v_dict(d);
            }
            json_fail(J, "expected ',' or '}'");
        }
    }
    if (c == '[') {
        jlist *l = new_list(J->S, 0);
        J->p++;
        json_ws(J);
        if (J->p < J->end && *J->p == ']') {
            J->p++;
            return v_list(l);
        }
        for (;;) {
            list_push(J->S, l, json_value(J, depth + 1));
            json_ws(J);
            if (J->p < J->end && *J->p == ',') {
                J->p++;
                continue;
            }
            if (J->p < J->end && *J->p == ']') {
                J->p++;
                return v_list(l);
            }
            json_fail(J, "expected ',' or ']'");
        }
    }
    static const char *const words[] = {"true", "false", "null"};
    for (int w = 0; w < 3; w++) {
        const size_t n = strlen(words[w]);
        if ((size_t)(J->end - J->p) >= n && memcmp(J->p, words[w], n) == 0) {
            J->p += n;
            return w == 2 ? v_none() : v_bool(w == 0);
        }
    }
    if (c == '-' || (c >= '0' && c <= '9')) {
        const char *s = J->p;
        int is_float = 0;
        while (J->p < J->end && strchr("+-0123456789.eE", *J->p) && *J->p) {
            is_float |= *J->p == '.' || *J->p == 'e' || *J->p == 'E';
            J->p++;
        }
        char tmp[64];
        const size_t n = (size_t)(J->p - s);
        if (n >= sizeof tmp)
            json_fail(J, "number too long");
        memcpy(tmp, s, n);
        tmp[n] = 0;
        char *e;
        if (is_float) {
            const double f = strtod(tmp, &e);
            if (*e)
                json_fail(J, "bad number");
            return v_float(f);
        }
        const long long i = strtoll(tmp, &e, 10);
        if (*e)
            json_fail(J, "bad number");
        return v_int(i);
    }
    json_fail(J, "unexpected character");
}

typedef struct dump_opts {
    int indent; /* -1: none */
    jstr indent_str;
    jstr item_sep, key_sep;
    int sort_keys, ensure_ascii;
} dump_opts;

static void dump_string(state *S, sbuf *b, jstr s, int ensure_ascii) {
    sb_put(S, b, "\"", 1);
    for (size_t i = 0; i < s.n;) {
        const unsigned char c = (unsigned char)s.s[i];
        if (c == '"' || c == '\\') {
            sb_put(S, b, "\\", 1);
            sb_put(S, b, (const char *)&c, 1);
            i++;
        } else if (c < 0x20) {
            const char *esc = c == '\n' ? "\\n" : c == '\r' ? "\\r" : c == '\t' ? "\\t" : c == '\b' ? "\\b" : c == '\f' ? "\\f" : NULL;
            if (esc)
                sb_puts(S, b, esc);
            else
                sb_printf(S, b, "\\u%04x", c);
            i++;
        } else if (c >= 0x80 && ensure_ascii) {
            const int32_t cp = utf8_next((const unsigned char *)s.s, s.n, &i);
            const uint32_t u = cp < 0 ? 0xFFFD : (uint32_t)cp;
            if (u >= 0x10000)
                sb_printf(S, b, "\\u%04x\\u%04x", 0xD800 + ((u - 0x10000) >> 10), 0xDC00 + ((u - 0x10000) & 0x3ff));
            else
                sb_printf(S, b, "\\u%04x", u);
        } else {
            sb_put(S, b, (const char *)&c, 1);
            i++;
        }
    }
    sb_put(S, b, "\"", 1);
}

static void dump_newline(state *S, sbuf *b, const dump_opts *o, int level) {
    sb_put(S, b, "\n", 1);
    for (int i = 0; i < level; i++)
        sb_put(S, b, o->indent_str.s, o->indent_str.n);
}

static void dump_json(state *S, int line, sbuf *b, jv v, const dump_opts *o, int level) {
    if (level > MAX_DEPTH)
        fail(S, ER_ERR_INVALID_ARG, line, "tojson: nesting too deep");
    switch (v.t) {
    case J_NONE: sb_puts(S, b, "null"); break;
    case J_BOOL: sb_puts(S, b, v.b ? "true" : "false"); break;
    case J_INT: sb_printf(S, b, "%lld", (long long)v.i); break;
    case J_FLOAT:
        if (isnan(v.f))
            sb_puts(S, b, "NaN");
        else if (isinf(v.f))
            sb_puts(S, b, v.f < 0 ? "-Infinity" : "Infinity");
        else
            put_float(S, b, v.f);
        break;
    case J_STR: dump_string(S, b, v.s, o->ensure_ascii); break;
    case J_LIST:
        if (!v.l->n) {
            sb_puts(S, b, "[]");
            break;
        }
        sb_puts(S, b, "[");
        for (size_t i = 0; i < v.l->n; i++) {
            if (i)
                sb_put(S, b, o->item_sep.s, o->item_sep.n);
            if (o->indent >= 0)
                dump_newline(S, b, o, level + 1);
            dump_json(S, line, b, v.l->items[i], o, level + 1);
        }
        if (o->indent >= 0)
            dump_newline(S, b, o, level);
        sb_puts(S, b, "]");
        break;
    case J_DICT: {
        if (v.d->ns)
            fail(S, ER_ERR_INVALID_ARG, line, "tojson: a namespace is not JSON serializable");
        if (!v.d->n) {
            sb_puts(S, b, "{}");
            break;
        }
        size_t *order = ar_alloc(S, v.d->n * sizeof *order);
        for (size_t i = 0; i < v.d->n; i++)
            order[i] = i;
        if (o->sort_keys) /* insertion sort: dicts in templates are small */
            for (size_t i = 1; i < v.d->n; i++)
                for (size_t j = i; j > 0 && py_cmp(S, line, v_str(v.d->keys[order[j - 1]]), v_str(v.d->keys[order[j]])) > 0; j--) {
                    const size_t t = order[j];
                    order[j] = order[j - 1];
                    order[j - 1] = t;
                }
        sb_puts(S, b, "{");
        for (size_t k = 0; k < v.d->n; k++) {
            const size_t i = order[k];
            if (k)
                sb_put(S, b, o->item_sep.s, o->item_sep.n);
            if (o->indent >= 0)
                dump_newline(S, b, o, level + 1);
            dump_string(S, b, v.d->keys[i], o->ensure_ascii);
            sb_put(S, b, o->key_sep.s, o->key_sep.n);
            dump_json(S, line, b, v.d->vals[i], o, level + 1);
        }
        if (o->indent >= 0)
            dump_newline(S, b, o, level);
        sb_puts(S, b, "}");
        break;
    }
    default: fail(S, ER_ERR_INVALID_ARG, line, "tojson: Object of type %s is not JSON serializable", type_name(v));
    }
}

/* ---- lexer ---------------------------------------------------------------------------- */

/* Python's str.isspace, enough of it for templates. */
static int py_space(int32_t cp) {
    return cp == ' ' || (cp >= 0x09 && cp <= 0x0d) || (cp >= 0x1c && cp <= 0x1f) ||
           (cp >= 0x80 && (unicode_class(cp) & UNI_SPACE));
}

static size_t rstrip_len(const char *s, size_t n) {
    size_t end = 0;
    for (size_t i = 0; i < n;) {
        const int32_t cp = utf8_next((const unsigned char *)s, n, &i);
        if (!py_space(cp))
            end = i;
    }
    return end;
}

static size_t skip_space(const char *s, size_t n, size_t i) {
    while (i < n) {
        size_t k = i;
        if (!py_space(utf8_next((const unsigned char *)s, n, &k)))
            break;
        i = k;
    }
    return i;
}

static token *push_tok(state *S, tk k, int line) {
    if (S->ntok == S->captok) {
        const size_t cap = S->captok ? 2 * S->captok : 256;
        token *t = ar_alloc(S, cap * sizeof *t);
        if (S->ntok)
            memcpy(t, S->toks, S->ntok * sizeof *t);
        S->toks = t;
        S->captok = cap;
    }
    token *t = &S->toks[S->ntok++];
    memset(t, 0, sizeof *t);
    t->k = k;
    t->line = line;
    return t;
}

static int count_lines(const char *s, size_t n) {
    int k = 0;
    for (size_t i = 0; i < n; i++)
        k += s[i] == '\n';
    return k;
}

/* A string literal's body with Python's escapes (jinja2 decodes it with unicode-escape). */
static jstr decode_string(state *S, const char *s, size_t n, int line) {
    sbuf b = {0};
    for (size_t i = 0; i < n; i++) {
        if (s[i] != '\\' || i + 1 >= n) {
            sb_put(S, &b, &s[i], 1);
            continue;
        }
        const char e = s[++i];
        const char *simple = strchr("\\'\"abfnrtv\n", e);
        if (simple && e) {
            static const char out[] = "\\'\"\a\b\f\n\r\t\v";
            if (e != '\n') /* backslash-newline is a line continuation */
                sb_put(S, &b, &out[simple - "\\'\"abfnrtv\n"], 1);
            continue;
        }
        uint32_t u = 0;
        int digits = e == 'x' ? 2 : e == 'u' ? 4 : e == 'U' ? 8 : 0;
        if (digits) {
            if (i + (size_t)digits >= n)
                fail(S, ER_ERR_FORMAT, line, "truncated \\%c escape in a string", e);
            for (int k = 1; k <= digits; k++) {
                const char c = s[i + (size_t)k];
                const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
                if (d < 0)
                    fail(S, ER_ERR_FORMAT, line, "bad \\%c escape in a string", e);
                u = u * 16 + (uint32_t)d;
            }
            i += (size_t)digits;
        } else if (e >= '0' && e <= '7') {
            u = (uint32_t)(e - '0');
            for (int k = 0; k < 2 && i + 1 < n && s[i + 1] >= '0' && s[i + 1] <= '7'; k++)
                u = u * 8 + (uint32_t)(s[++i] - '0');
        } else {
            sb_put(S, &b, &s[i - 1], 2); /* unknown escapes stay as written */
            continue;
        }
        if (u > 0x10ffff)
            fail(S, ER_ERR_FORMAT, line, "escape beyond U+10FFFF in a string");
        char enc[4];
        sb_put(S, &b, enc, (size_t)utf8_put(u, enc));
    }
    return sb_str(&b);
}

/* Tokens of one {{ }} or {% %} tag from S->src[*pos]; stops after the end delimiter and
 * returns its whitespace marker ('-', '+' or 0). */
static char lex_tag(state *S, size_t *pos, int *line, int block) {
    const char *s = S->src;
    const size_t n = S->n;
    size_t i = *pos;
    int depth = 0;
    for (;;) {
        while (i < n && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r')) {
            *line += s[i] == '\n';
            i++;
        }
        if (i >= n)
            fail(S, ER_ERR_FORMAT, *line, "unexpected end of template inside a %s tag", block ? "{% %}" : "{{ }}");
        const char c = s[i];
        if (depth == 0) { /* the end delimiter, with its whitespace marker */
            const char e0 = block ? '%' : '}';
            size_t k = i;
            char sign = 0;
            if ((c == '-' || (c == '+' && block)) && i + 2 < n && s[i + 1] == e0 && s[i + 2] == '}') {
                sign = c;
                k = i + 1;
            }
            if (k + 1 < n && s[k] == e0 && s[k + 1] == '}') {
                push_tok(S, block ? T_BLOCK_END : T_VAR_END, *line);
                *pos = k + 2;
                return sign;
            }
        }
        token *t;
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_') {
            size_t k = i;
            while (k < n && ((s[k] >= 'a' && s[k] <= 'z') || (s[k] >= 'A' && s[k] <= 'Z') || (s[k] >= '0' && s[k] <= '9') || s[k] == '_'))
                k++;
            t = push_tok(S, T_NAME, *line);
            t->s = (jstr){s + i, k - i};
            i = k;
        } else if (c >= '0' && c <= '9') {
            size_t k = i;
            while (k < n && ((s[k] >= '0' && s[k] <= '9') || s[k] == '_'))
                k++;
            int is_float = 0;
            if (k + 1 < n && s[k] == '.' && s[k + 1] >= '0' && s[k + 1] <= '9') {
                is_float = 1;
                for (k++; k < n && ((s[k] >= '0' && s[k] <= '9') || s[k] == '_'); k++)
                    ;
            }
            if (k < n && (s[k] == 'e' || s[k] == 'E')) {
                size_t e = k + 1;
                if (e < n && (s[e] == '+' || s[e] == '-'))
                    e++;
                if (e < n && s[e] >= '0' && s[e] <= '9') {
                    is_float = 1;
                    for (k = e; k < n && ((s[k] >= '0' && s[k] <= '9') || s[k] == '_'); k++)
                        ;
                }
            }
            char tmp[64];
            size_t m = 0;
            for (size_t j = i; j < k && m + 1 < sizeof tmp; j++)
                if (s[j] != '_')
                    tmp[m++] = s[j];
            tmp[m] = 0;
            t = push_tok(S, is_float ? T_FLOAT : T_INT, *line);
            if (is_float)
                t->f = strtod(tmp, NULL);
            else
                t->i = strtoll(tmp, NULL, 10);
            i = k;
        } else if (c == '\'' || c == '"') {
            size_t k = i + 1;
            while (k < n && s[k] != c) {
                if (s[k] == '\\' && k + 1 < n)
                    k++;
                k++;
            }
            if (k >= n)
                fail(S, ER_ERR_FORMAT, *line, "unterminated string");
            t = push_tok(S, T_STRING, *line);
            t->s = decode_string(S, s + i + 1, k - i - 1, *line);
            *line += count_lines(s + i, k - i);
            i = k + 1;
        } else {
            static const char *const ops2[] = {"//", "**", "==", "!=", "<=", ">="};
            size_t len = 0;
            for (size_t o = 0; o < sizeof ops2 / sizeof ops2[0]; o++)
                if (i + 1 < n && s[i] == ops2[o][0] && s[i + 1] == ops2[o][1])
                    len = 2;
            if (!len && strchr("+-*/%~<>=()[]{},.:|", c) && c)
                len = 1;
            if (!len)
                fail(S, ER_ERR_FORMAT, *line, "unexpected character '%c' in a tag", c);
            if (c == '(' || c == '[' || c == '{')
                depth++;
            else if ((c == ')' || c == ']' || c == '}') && depth > 0)
                depth--;
            t = push_tok(S, T_OP, *line);
            t->s = (jstr){s + i, len};
            i += len;
        }
    }
}

static void lex(state *S) {
    const char *s = S->src;
    const size_t n = S->n;
    size_t pos = 0;
    int line = 1, line_starting = 1;
    while (pos < n) {
        size_t p = pos;
        while (p + 1 < n && !(s[p] == '{' && (s[p + 1] == '{' || s[p + 1] == '%' || s[p + 1] == '#')))
            p++;
        if (p + 1 >= n) {
            token *t = push_tok(S, T_TEXT, line);
            t->s = (jstr){s + pos, n - pos};
            break;
        }
        const char kind = s[p + 1];
        const char sign = p + 2 < n && (s[p + 2] == '-' || s[p + 2] == '+') ? s[p + 2] : 0;
        size_t q = p + 2 + (sign != 0);
        /* {% raw %} ... {% endraw %} */
        int raw = 0;
        if (kind == '%') {
            size_t k = q;
            while (k < n && (s[k] == ' ' || s[k] == '\t' || s[k] == '\n'))
                k++;
            if (n - k >= 3 && !memcmp(s + k, "raw", 3)) {
                size_t e = k + 3;
                while (e < n && (s[e] == ' ' || s[e] == '\t' || s[e] == '\n'))
                    e++;
                if (e < n && s[e] == '-')
                    e++;
                raw = n - e >= 2 && s[e] == '%' && s[e + 1] == '}';
            }
        }
        size_t text_len = p - pos;
        if (sign == '-') {
            text_len = rstrip_len(s + pos, text_len);
        } else if (sign != '+' && kind != '{') { /* lstrip_blocks */
            size_t l_pos = text_len;
            while (l_pos > 0 && s[pos + l_pos - 1] != '\n')
                l_pos--;
            if ((l_pos > 0 || line_starting) && l_pos < text_len && skip_space(s + pos, text_len, l_pos) == text_len)
                text_len = l_pos;
        }
        if (text_len) {
            token *t = push_tok(S, T_TEXT, line);
            t->s = (jstr){s + pos, text_len};
        }
        line += count_lines(s + pos, p - pos);
        char end_sign = 0;
        int block_like = kind != '{';
        if (raw) {
            /* the body runs to {%[-+]? endraw [-]%}; no trim after "raw %}" itself */
            size_t body = q;
            while (s[body] != '%')
                body++;
            const int raw_minus = s[body - 1] == '-';
            body += 2;
            if (raw_minus)
                body = skip_space(s, n, body);
            size_t e = body;
            for (;; e++) {
                if (e + 1 >= n)
                    fail(S, ER_ERR_FORMAT, line, "{%% raw %%} without {%% endraw %%}");
                if (s[e] == '{' && s[e + 1] == '%') {
                    size_t k = e + 2 + (s[e + 2] == '-' || s[e + 2] == '+');
                    while (k < n && (s[k] == ' ' || s[k] == '\t' || s[k] == '\n'))
                        k++;
                    if (n - k >= 6 && !memcmp(s + k, "endraw", 6))
                        break;
                }
            }
            size_t body_len = e - body;
            if (s[e + 2] == '-')
                body_len = rstrip_len(s + body, body_len);
            if (body_len) {
                token *t = push_tok(S, T_TEXT, line);
                t->s = (jstr){s + body, body_len};
            }
            line += count_lines(s + q, e - q);
            size_t k = e + 2;
            while (k + 1 < n && (s[k] != '%' || s[k + 1] != '}'))
                k++;
            if (k + 1 >= n)
                fail(S, ER_ERR_FORMAT, line, "unterminated {%% endraw %%} tag");
            end_sign = s[k - 1] == '-' || s[k - 1] == '+' ? s[k - 1] : 0;
            pos = k + 2;
        } else if (kind == '#') {
            size_t e = q;
            while (e + 1 < n && !(s[e] == '#' && s[e + 1] == '}'))
                e++;
            if (e + 1 >= n)
                fail(S, ER_ERR_FORMAT, line, "unterminated comment");
            end_sign = e > q && (s[e - 1] == '-' || s[e - 1] == '+') ? s[e - 1] : 0;
            line += count_lines(s + q, e - q);
            pos = e + 2;
        } else {
            push_tok(S, kind == '%' ? T_BLOCK_BEGIN : T_VAR_BEGIN, line);
            pos = q;
            end_sign = lex_tag(S, &pos, &line, kind == '%');
        }
        const size_t before = pos;
        if (end_sign == '-')
            pos = skip_space(s, n, pos);
        else if (end_sign != '+' && block_like && pos < n && s[pos] == '\n')
            pos++; /* trim_blocks */
        line += count_lines(s + before, pos - before);
        line_starting = pos > before ? s[pos - 1] == '\n' : 0;
    }
    push_tok(S, T_EOF, line);
}

/* ---- parser --------------------------------------------------------------------------- */

static token *cur(state *S) { return &S->toks[S->pos]; }
static token *peek(state *S, size_t k) { return &S->toks[S->pos + k < S->ntok ? S->pos + k : S->ntok - 1]; }
static int is_op(const token *t, const char *op) { return t->k == T_OP && jstr_eq(t->s, op); }
static int is_name(const token *t, const char *name) { return t->k == T_NAME && jstr_eq(t->s, name); }

static _Noreturn void parse_fail(state *S, const char *expected) {
    const token *t = cur(S);
    if (t->k == T_EOF)
        fail(S, ER_ERR_FORMAT, t->line, "expected %s, found the end of the template", expected);
    if (t->k == T_BLOCK_END || t->k == T_VAR_END)
        fail(S, ER_ERR_FORMAT, t->line, "expected %s, found the end of the tag", expected);
    fail(S, ER_ERR_FORMAT, t->line, "expected %s, found '%.*s'", expected, t->k == T_INT || t->k == T_FLOAT ? 6 : SHOWN(t->s));
}

static void expect_op(state *S, const char *op) {
    if (!is_op(cur(S), op)) {
        char what[16];
        snprintf(what, sizeof what, "'%s'", op);
        parse_fail(S, what);
    }
    S->pos++;
}

static node *new_node(state *S, nk k, int line) {
    node *x = ar_zalloc(S, sizeof *x);
    x->k = k;
    x->line = line;
    return x;
}

static void nl_push(state *S, nlist *l, node *x) {
    if (l->n == l->cap) {
        const size_t cap = l->cap ? 2 * l->cap : 4;
        node **v = ar_alloc(S, cap * sizeof *v);
        if (l->n)
            memcpy(v, l->v, l->n * sizeof *v);
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = x;
}

static node *parse_expr(state *S);
static node *parse_or(state *S);
static node *parse_unary(state *S, int with_filter);
static node *parse_primary(state *S);
static node *parse_postfix(state *S, node *x);

static void parse_args(state *S, node *call) {
    /* "(" already consumed: positional then keyword arguments, to ")" */
    size_t cap = 0;
    while (!is_op(cur(S), ")")) {
        if (call->args.n)
            expect_op(S, ",");
        if (is_op(cur(S), ")"))
            break;
        if (is_op(cur(S), "*") || is_op(cur(S), "**"))
            fail(S, ER_ERR_UNSUPPORTED, cur(S)->line, "*args and **kwargs in calls are not supported");
        jstr kw = {NULL, 0};
        if (cur(S)->k == T_NAME && is_op(peek(S, 1), "=")) {
            kw = cur(S)->s;
            S->pos += 2;
        }
        nl_push(S, &call->args, parse_expr(S));
        if (call->args.n > cap) {
            const size_t ncap = cap ? 2 * cap : 4;
            jstr *k = ar_zalloc(S, ncap * sizeof *k);
            if (call->kwnames)
                memcpy(k, call->kwnames, (call->args.n - 1) * sizeof *k);
            call->kwnames = k;
            cap = ncap;
        }
        call->kwnames[call->args.n - 1] = kw;
    }
    S->pos++;
}

static node *parse_filter_expr(state *S, node *x) {
    for (;;) {
        token *t = cur(S);
        if (is_op(t, "|")) {
            S->pos++;
            if (cur(S)->k != T_NAME)
                parse_fail(S, "a filter name");
            node *f = new_node(S, E_FILTER, t->line);
            f->name = cur(S)->s;
            S->pos++;
            f->a = x;
            if (is_op(cur(S), "(")) {
                S->pos++;
                parse_args(S, f);
            }
            x = f;
        } else if (is_name(t, "is")) {
            S->pos++;
            node *test = new_node(S, E_TEST, t->line);
            if (is_name(cur(S), "not")) {
                test->negate = 1;
                S->pos++;
            }
            if (cur(S)->k != T_NAME)
                parse_fail(S, "a test name");
            test->name = cur(S)->s;
            S->pos++;
            test->a = x;
            token *u = cur(S);
            if (is_op(u, "(")) {
                S->pos++;
                parse_args(S, test);
            } else if ((u->k == T_NAME || u->k == T_STRING || u->k == T_INT || u->k == T_FLOAT || is_op(u, "[") ||
                        is_op(u, "{")) &&
                       !is_name(u, "else") && !is_name(u, "or") && !is_name(u, "and")) {
                /* one argument without parentheses: "is divisibleby 3" */
                node *arg = parse_postfix(S, parse_primary(S));
                nl_push(S, &test->args, arg);
                test->kwnames = ar_zalloc(S, sizeof *test->kwnames);
            }
            x = test;
        } else if (is_op(t, "(")) {
            S->pos++;
            node *c = new_node(S, E_CALL, t->line);
            c->a = x;
            parse_args(S, c);
            x = c;
        } else {
            return x;
        }
    }
}

static node *parse_postfix(state *S, node *x) {
    for (;;) {
        token *t = cur(S);
        if (is_op(t, ".")) {
            S->pos++;
            token *u = cur(S);
            node *a = new_node(S, E_ATTR, t->line);
            a->a = x;
            if (u->k == T_NAME) {
                a->name = u->s;
            } else if (u->k == T_INT) {
                a->k = E_ITEM; /* foo.0 is foo[0] */
                a->b = new_node(S, E_LIT, u->line);
                a->b->lit = v_int(u->i);
            } else {
                parse_fail(S, "an attribute name");
            }
            S->pos++;
            x = a;
        } else if (is_op(t, "[")) {
            S->pos++;
            node *part[3] = {NULL, NULL, NULL};
            int slice = 0;
            for (int k = 0; k < 3; k++) {
                if (!is_op(cur(S), ":") && !is_op(cur(S), "]"))
                    part[k] = parse_expr(S);
                if (!is_op(cur(S), ":") || k == 2)
                    break;
                S->pos++;
                slice = 1;
            }
            expect_op(S, "]");
            node *a = new_node(S, slice ? E_SLICE : E_ITEM, t->line);
            if (!slice && !part[0])
                fail(S, ER_ERR_FORMAT, t->line, "empty subscript");
            a->a = x;
            a->b = part[0];
            if (slice) {
                nl_push(S, &a->args, part[1]);
                nl_push(S, &a->args, part[2]);
            }
            x = a;
        } else if (is_op(t, "(")) {
            S->pos++;
            node *c = new_node(S, E_CALL, t->line);
            c->a = x;
            parse_args(S, c);
            x = c;
        } else {
            return x;
        }
    }
}

static node *parse_primary(state *S) {
    token *t = cur(S);
    node *x;
    if (t->k == T_NAME) {
        S->pos++;
        x = new_node(S, E_LIT, t->line);
        if (jstr_eq(t->s, "true") || jstr_eq(t->s, "True"))
            x->lit = v_bool(1);
        else if (jstr_eq(t->s, "false") || jstr_eq(t->s, "False"))
            x->lit = v_bool(0);
        else if (jstr_eq(t->s, "none") || jstr_eq(t->s, "None"))
            x->lit = v_none();
        else {
            x->k = E_NAME;
            x->name = t->s;
        }
        return x;
    }
    if (t->k == T_STRING) {
        sbuf b = {0};
        while (cur(S)->k == T_STRING) { /* adjacent literals concatenate */
            sb_put(S, &b, cur(S)->s.s, cur(S)->s.n);
            S->pos++;
        }
        x = new_node(S, E_LIT, t->line);
        x->lit = v_str(sb_str(&b));
        return x;
    }
    if (t->k == T_INT || t->k == T_FLOAT) {
        S->pos++;
        x = new_node(S, E_LIT, t->line);
        x->lit = t->k == T_INT ? v_int(t->i) : v_float(t->f);
        return x;
    }
    if (is_op(t, "(")) {
        S->pos++;
        if (is_op(cur(S), ")")) {
            S->pos++;
            return new_node(S, E_TUPLE, t->line);
        }
        x = parse_expr(S);
        if (is_op(cur(S), ",")) {
            node *tup = new_node(S, E_TUPLE, t->line);
            nl_push(S, &tup->args, x);
            while (is_op(cur(S), ",")) {
                S->pos++;
                if (is_op(cur(S), ")"))
                    break;
                nl_push(S, &tup->args, parse_expr(S));
            }
            x = tup;
        }
        expect_op(S, ")");
        return x;
    }
    if (is_op(t, "[")) {
        S->pos++;
        x = new_node(S, E_LIST, t->line);
        while (!is_op(cur(S), "]")) {
            if (x->args.n)
                expect_op(S, ",");
            if (is_op(cur(S), "]"))
                break;
            nl_push(S, &x->args, parse_expr(S));
        }
        S->pos++;
        return x;
    }
    if (is_op(t, "{")) {
        S->pos++;
        x = new_node(S, E_DICT, t->line);
        while (!is_op(cur(S), "}")) {
            if (x->args.n)
                expect_op(S, ",");
            if (is_op(cur(S), "}"))
                break;
            nl_push(S, &x->args, parse_expr(S));
            expect_op(S, ":");
            nl_push(S, &x->args, parse_expr(S));
        }
        S->pos++;
        return x;
    }
    parse_fail(S, "an expression");
}

static node *parse_unary(state *S, int with_filter) {
    token *t = cur(S);
    node *x;
    if (is_op(t, "-") || is_op(t, "+")) {
        S->pos++;
        x = new_node(S, is_op(t, "-") ? E_NEG : E_POS, t->line);
        x->a = parse_unary(S, 0);
    } else {
        x = parse_primary(S);
    }
    x = parse_postfix(S, x);
    return with_filter ? parse_filter_expr(S, x) : x;
}

static node *binary(state *S, const token *t, node *l, node *r) {
    node *x = new_node(S, E_BIN, t->line);
    x->name = t->s;
    x->a = l;
    x->b = r;
    return x;
}

static node *parse_pow(state *S) {
    node *x = parse_unary(S, 1);
    while (is_op(cur(S), "**")) {
        token *t = cur(S);
        S->pos++;
        x = binary(S, t, x, parse_unary(S, 1));
    }
    return x;
}

static node *parse_math2(state *S) {
    node *x = parse_pow(S);
    while (is_op(cur(S), "*") || is_op(cur(S), "/") || is_op(cur(S), "//") || is_op(cur(S), "%")) {
        token *t = cur(S);
        S->pos++;
        x = binary(S, t, x, parse_pow(S));
    }
    return x;
}

static node *parse_concat(state *S) {
    node *x = parse_math2(S);
    while (is_op(cur(S), "~")) {
        token *t = cur(S);
        S->pos++;
        x = binary(S, t, x, parse_math2(S));
    }
    return x;
}

static node *parse_math1(state *S) {
    node *x = parse_concat(S);
    while (is_op(cur(S), "+") || is_op(cur(S), "-")) {
        token *t = cur(S);
        S->pos++;
        x = binary(S, t, x, parse_concat(S));
    }
    return x;
}

static node *parse_compare(state *S) {
    node *x = parse_math1(S);
    node *cmp = NULL;
    for (;;) {
        token *t = cur(S);
        jstr op;
        if (is_op(t, "==") || is_op(t, "!=") || is_op(t, "<") || is_op(t, "<=") || is_op(t, ">") || is_op(t, ">=")) {
            op = t->s;
            S->pos++;
        } else if (is_name(t, "in")) {
            op = cstr("in");
            S->pos++;
        } else if (is_name(t, "not") && is_name(peek(S, 1), "in")) {
            op = cstr("not in");
            S->pos += 2;
        } else {
            break;
        }
        if (!cmp) {
            cmp = new_node(S, E_CMP, t->line);
            cmp->a = x;
        }
        node *operand = new_node(S, E_LIT, t->line); /* holds the operator name and its right side */
        operand->name = op;
        operand->a = parse_math1(S);
        nl_push(S, &cmp->args, operand);
    }
    return cmp ? cmp : x;
}

static node *parse_not(state *S) {
    if (is_name(cur(S), "not")) {
        token *t = cur(S);
        S->pos++;
        node *x = new_node(S, E_NOT, t->line);
        x->a = parse_not(S);
        return x;
    }
    return parse_compare(S);
}

static node *parse_and(state *S) {
    node *x = parse_not(S);
    while (is_name(cur(S), "and")) {
        token *t = cur(S);
        S->pos++;
        node *y = new_node(S, E_AND, t->line);
        y->a = x;
        y->b = parse_not(S);
        x = y;
    }
    return x;
}

static node *parse_or(state *S) {
    if (++S->depth > MAX_DEPTH)
        fail(S, ER_ERR_FORMAT, cur(S)->line, "expression nested too deeply");
    node *x = parse_and(S);
    while (is_name(cur(S), "or")) {
        token *t = cur(S);
        S->pos++;
        node *y = new_node(S, E_OR, t->line);
        y->a = x;
        y->b = parse_and(S);
        x = y;
    }
    S->depth--;
    return x;
}

static node *parse_expr(state *S) {
    node *x = parse_or(S);
    while (is_name(cur(S), "if")) {
        token *t = cur(S);
        S->pos++;
        node *c = new_node(S, E_COND, t->line);
        c->a = parse_or(S); /* condition */
        c->b = x;
        if (is_name(cur(S), "else")) {
            S->pos++;
            c->c = parse_expr(S);
        }
        x = c;
    }
    return x;
}

/* An expression or a bare tuple "a, b" (in {{ }} and set). */
static node *parse_tuple(state *S, int with_cond) {
    const int line = cur(S)->line;
    node *x = with_cond ? parse_expr(S) : parse_or(S);
    if (!is_op(cur(S), ","))
        return x;
    node *tup = new_node(S, E_TUPLE, line);
    nl_push(S, &tup->args, x);
    while (is_op(cur(S), ",")) {
        S->pos++;
        if (cur(S)->k == T_BLOCK_END || cur(S)->k == T_VAR_END || is_name(cur(S), "in") || is_op(cur(S), "="))
            break;
        nl_push(S, &tup->args, with_cond ? parse_expr(S) : parse_or(S));
    }
    return tup;
}

static void expect_block_end(state *S) {
    if (cur(S)->k != T_BLOCK_END)
        parse_fail(S, "the end of the tag ('%}')");
    S->pos++;
}

static void parse_body(state *S, nlist *body, const char *const *stops);

/* The assignment target of for/set: names, or for set also ns.attr. */
static void parse_targets(state *S, node *x, int allow_attr) {
    for (;;) {
        if (cur(S)->k != T_NAME)
            parse_fail(S, "a variable name");
        node *name = new_node(S, E_NAME, cur(S)->line);
        name->name = cur(S)->s;
        S->pos++;
        if (allow_attr && is_op(cur(S), ".") && peek(S, 1)->k == T_NAME && x->args.n == 0) {
            x->attr = peek(S, 1)->s;
            S->pos += 2;
        }
        nl_push(S, &x->args, name);
        if (!is_op(cur(S), ","))
            return;
        S->pos++;
    }
}

static const char *const unsupported_tags[] = {"include", "import", "from", "extends", "block", "filter", "call",
                                               "with", "do", "autoescape", "trans", "recursive", NULL};
static const char *const end_tags[] = {"elif", "else", "endif", "endfor", "endset", "endmacro", "endgeneration", NULL};

static int in_words(jstr s, const char *const *words) {
    for (; words && *words; words++)
        if (jstr_eq(s, *words))
            return 1;
    return 0;
}

static node *parse_statement(state *S);

/* if/elif after its keyword: condition, body, then elif (a nested if), else or endif. */
static node *parse_if_rest(state *S, int line) {
    node *x = new_node(S, N_IF, line);
    x->a = parse_expr(S);
    expect_block_end(S);
    static const char *const stops[] = {"elif", "else", "endif", NULL};
    parse_body(S, &x->body, stops);
    token *end = cur(S);
    S->pos++;
    if (jstr_eq(end->s, "elif")) {
        nl_push(S, &x->body2, parse_if_rest(S, end->line));
        return x; /* the nested if consumed the endif */
    }
    if (jstr_eq(end->s, "else")) {
        expect_block_end(S);
        static const char *const stops2[] = {"endif", NULL};
        parse_body(S, &x->body2, stops2);
        S->pos++;
    }
    expect_block_end(S);
    return x;
}

static node *parse_statement(state *S) {
    token *t = cur(S);
    if (t->k != T_NAME)
        parse_fail(S, "a statement name");
    const int line = t->line;
    const jstr kw = t->s;
    S->pos++;
    if (jstr_eq(kw, "if"))
        return parse_if_rest(S, line);
    if (jstr_eq(kw, "for")) {
        node *x = new_node(S, N_FOR, line);
        parse_targets(S, x, 0);
        if (!is_name(cur(S), "in"))
            parse_fail(S, "'in'");
        S->pos++;
        x->a = parse_tuple(S, 0);
        if (is_name(cur(S), "if")) {
            S->pos++;
            x->b = parse_expr(S);
        }
        if (is_name(cur(S), "recursive"))
            fail(S, ER_ERR_UNSUPPORTED, line, "recursive for loops are not supported");
        expect_block_end(S);
        static const char *const stops[] = {"else", "endfor", NULL};
        parse_body(S, &x->body, stops);
        if (is_name(cur(S), "else")) {
            S->pos++;
            expect_block_end(S);
            static const char *const stops2[] = {"endfor", NULL};
            parse_body(S, &x->body2, stops2);
        }
        S->pos++;
        expect_block_end(S);
        return x;
    }
    if (jstr_eq(kw, "set")) {
        node *x = new_node(S, N_SET, line);
        parse_targets(S, x, 1);
        if (is_op(cur(S), "=")) {
            S->pos++;
            x->a = parse_tuple(S, 1);
            expect_block_end(S);
            return x;
        }
        if (is_op(cur(S), "|"))
            fail(S, ER_ERR_UNSUPPORTED, line, "filtered block assignments ({%% set x | filter %%}) are not supported");
        x->k = N_SETBLOCK;
        expect_block_end(S);
        static const char *const stops[] = {"endset", NULL};
        parse_body(S, &x->body, stops);
        S->pos++;
        expect_block_end(S);
        return x;
    }
    if (jstr_eq(kw, "macro")) {
        node *x = new_node(S, N_MACRO, line);
        if (cur(S)->k != T_NAME)
            parse_fail(S, "a macro name");
        x->name = cur(S)->s;
        S->pos++;
        expect_op(S, "(");
        size_t cap = 0;
        while (!is_op(cur(S), ")")) {
            if (x->args.n)
                expect_op(S, ",");
            if (cur(S)->k != T_NAME)
                parse_fail(S, "a parameter name");
            const jstr param = cur(S)->s;
            S->pos++;
            node *def = NULL;
            if (is_op(cur(S), "=")) {
                S->pos++;
                def = parse_expr(S);
            }
            nl_push(S, &x->args, def);
            if (x->args.n > cap) {
                const size_t ncap = cap ? 2 * cap : 4;
                jstr *k = ar_zalloc(S, ncap * sizeof *k);
                if (x->kwnames)
                    memcpy(k, x->kwnames, (x->args.n - 1) * sizeof *k);
                x->kwnames = k;
                cap = ncap;
            }
            x->kwnames[x->args.n - 1] = param;
        }
        S->pos++;
        expect_block_end(S);
        static const char *const stops[] = {"endmacro", NULL};
        parse_body(S, &x->body, stops);
        S->pos++;
        if (cur(S)->k == T_NAME) /* {% endmacro name %} */
            S->pos++;
        expect_block_end(S);
        return x;
    }
    if (jstr_eq(kw, "break") || jstr_eq(kw, "continue")) {
        expect_block_end(S);
        return new_node(S, jstr_eq(kw, "break") ? N_BREAK : N_CONTINUE, line);
    }
    if (jstr_eq(kw, "generation")) { /* Hugging Face's marker of assistant text: just its body */
        node *x = new_node(S, N_BLOCK, line);
        expect_block_end(S);
        static const char *const stops[] = {"endgeneration", NULL};
        parse_body(S, &x->body, stops);
        S->pos++;
        expect_block_end(S);
        return x;
    }
    if (in_words(kw, unsupported_tags))
        fail(S, ER_ERR_UNSUPPORTED, line, "the '{%% %.*s %%}' statement is not supported", SHOWN(kw));
    fail(S, ER_ERR_UNSUPPORTED, line, "unknown statement '{%% %.*s %%}'", SHOWN(kw));
}

/* Statements up to EOF or (when stops) a {% stop %} tag, left with cur on its name. */
static void parse_body(state *S, nlist *body, const char *const *stops) {
    for (;;) {
        token *t = cur(S);
        if (t->k == T_EOF) {
            if (stops) { /* name the closing tag: the stop word that starts with "end" */
                const char *const *end = stops;
                while (end[1] && strncmp(*end, "end", 3) != 0)
                    end++;
                fail(S, ER_ERR_FORMAT, t->line, "missing {%% %s %%}", *end);
            }
            return;
        }
        if (t->k == T_TEXT) {
            node *x = new_node(S, N_TEXT, t->line);
            x->lit = v_str(t->s);
            nl_push(S, body, x);
            S->pos++;
        } else if (t->k == T_VAR_BEGIN) {
            S->pos++;
            node *x = new_node(S, N_OUT, t->line);
            x->a = parse_tuple(S, 1);
            if (cur(S)->k != T_VAR_END)
                parse_fail(S, "the end of the tag ('}}')");
            S->pos++;
            nl_push(S, body, x);
        } else if (t->k == T_BLOCK_BEGIN) {
            S->pos++;
            token *name = cur(S);
            if (name->k == T_NAME && in_words(name->s, stops))
                return;
            if (name->k == T_NAME && in_words(name->s, end_tags))
                fail(S, ER_ERR_FORMAT, name->line, "unexpected {%% %.*s %%}", SHOWN(name->s));
            nl_push(S, body, parse_statement(S));
        } else {
            parse_fail(S, "text or a tag");
        }
    }
}

/* ---- evaluation ----------------------------------------------------------------------- */

static jv eval(state *S, scope *sc, const node *x);
static void render(state *S, scope *sc, const nlist *body, sbuf *out);

enum { B_RANGE, B_NAMESPACE, B_DICT, B_RAISE, B_STRFTIME };
static const char *const builtin_names[] = {"range", "namespace", "dict", "raise_exception", "strftime_now", NULL};

static scope *new_scope(state *S, scope *parent) {
    scope *sc = ar_zalloc(S, sizeof *sc);
    sc->parent = parent;
    return sc;
}

static jv lookup(state *S, scope *sc, jstr name) {
    for (scope *p = sc; p; p = p->parent) {
        const jv *v = dict_find(&p->vars, name);
        if (v)
            return *v;
    }
    const jv *v = S->ctx ? dict_find(S->ctx, name) : NULL;
    if (v)
        return *v;
    for (int i = 0; i < S->n_defaults; i++)
        if (jstr_eq(name, S->defaults[i].name))
            return S->defaults[i].str ? v_str(cstr(S->defaults[i].str)) : v_bool(S->defaults[i].boolean);
    for (int i = 0; builtin_names[i]; i++)
        if (jstr_eq(name, builtin_names[i]))
            return (jv){.t = J_BUILTIN, .builtin = i};
    return v_undef(name);
}

static _Noreturn void undefined_fail(state *S, int line, jv v) {
    fail(S, ER_ERR_INVALID_ARG, line, "'%.*s' is undefined", SHOWN(v.s));
}

/* Evaluated call arguments. */
typedef struct args {
    jv *v;
    jstr *kw; /* {NULL, 0} for positional */
    size_t n, n_pos;
    int line;
    const char *what; /* for messages */
} args;

static args eval_args(state *S, scope *sc, const node *call, const char *what) {
    args a = {NULL, NULL, call->args.n, 0, call->line, what};
    a.v = ar_alloc(S, (a.n ? a.n : 1) * sizeof *a.v);
    a.kw = ar_zalloc(S, (a.n ? a.n : 1) * sizeof *a.kw);
    for (size_t i = 0; i < a.n; i++) {
        a.v[i] = eval(S, sc, call->args.v[i]);
        if (call->kwnames && call->kwnames[i].s)
            a.kw[i] = call->kwnames[i];
        else
            a.n_pos++;
    }
    return a;
}

/* Argument `i` (positional) or `name` (keyword); NULL when absent. */
static const jv *arg(const args *a, size_t i, const char *name) {
    size_t k = 0;
    for (size_t j = 0; j < a->n; j++) {
        if (!a->kw[j].s) {
            if (k++ == i)
                return &a->v[j];
        } else if (name && jstr_eq(a->kw[j], name)) {
            return &a->v[j];
        }
    }
    return NULL;
}

static jstr arg_str(state *S, const args *a, size_t i, const char *name, const char *def) {
    const jv *v = arg(a, i, name);
    if (!v)
        return cstr(def);
    if (v->t != J_STR)
        fail(S, ER_ERR_INVALID_ARG, a->line, "%s: argument %s must be a string, not %s", a->what, name ? name : "", type_name(*v));
    return v->s;
}

static int64_t arg_int(state *S, const args *a, size_t i, const char *name, int64_t def) {
    const jv *v = arg(a, i, name);
    if (!v || v->t == J_NONE)
        return def;
    if (v->t != J_INT && v->t != J_BOOL)
        fail(S, ER_ERR_INVALID_ARG, a->line, "%s: argument %s must be an integer, not %s", a->what, name ? name : "", type_name(*v));
    return v->t == J_INT ? v->i : v->b;
}

static int arg_bool(const args *a, size_t i, const char *name, int def) {
    const jv *v = arg(a, i, name);
    return v ? truthy(*v) : def;
}

/* ---- strings, by code point where Python counts code points --------------------------- */

static size_t n_chars(jstr s) {
    size_t k = 0;
    for (size_t i = 0; i < s.n; i++)
        k += ((unsigned char)s.s[i] & 0xc0) != 0x80;
    return k;
}

/* Byte offsets of each code point: (n + 1) entries. */
static size_t *char_offsets(state *S, jstr s, size_t *n) {
    *n = n_chars(s);
    size_t *off = ar_alloc(S, (*n + 1) * sizeof *off);
    size_t k = 0;
    for (size_t i = 0; i < s.n; i++)
        if (((unsigned char)s.s[i] & 0xc0) != 0x80)
            off[k++] = i;
    off[k] = s.n;
    return off;
}

static int has_char(jstr set, int32_t cp) {
    for (size_t i = 0; i < set.n;)
        if (utf8_next((const unsigned char *)set.s, set.n, &i) == cp)
            return 1;
    return 0;
}

/* strip/lstrip/rstrip: chars NULL means white space. */
static jstr strip(jstr s, const jstr *chars, int left, int right) {
    size_t b = 0, e = s.n;
    if (left)
        while (b < e) {
            size_t k = b;
            const int32_t cp = utf8_next((const unsigned char *)s.s, e, &k);
            if (chars ? !has_char(*chars, cp) : !py_space(cp))
                break;
            b = k;
        }
    if (right)
        while (e > b) {
            size_t start = e - 1;
            while (start > b && ((unsigned char)s.s[start] & 0xc0) == 0x80)
                start--;
            size_t k = start;
            const int32_t cp = utf8_next((const unsigned char *)s.s, e, &k);
            if (chars ? !has_char(*chars, cp) : !py_space(cp))
                break;
            e = start;
        }
    return (jstr){s.s + b, e - b};
}

static const char *find_sub(jstr s, size_t from, jstr sub) {
    if (sub.n == 0)
        return s.s + from;
    for (size_t i = from; i + sub.n <= s.n; i++)
        if (s.s[i] == sub.s[0] && !memcmp(s.s + i, sub.s, sub.n))
            return s.s + i;
    return NULL;
}

static jv str_split(state *S, jstr s, const jstr *sep, int64_t maxsplit, int from_right) {
    jlist *l = new_list(S, 0);
    if (!sep) { /* runs of white space, none at the ends */
        jstr rest = strip(s, NULL, !from_right, from_right);
        size_t i = 0;
        int64_t splits = 0;
        if (!from_right) {
            while (i < rest.n) {
                size_t k = i, end = i;
                while (k < rest.n) {
                    size_t m = k;
                    if (py_space(utf8_next((const unsigned char *)rest.s, rest.n, &m)))
                        break;
                    k = m;
                }
                end = k;
                if (maxsplit >= 0 && splits >= maxsplit) {
                    list_push(S, l, v_str((jstr){rest.s + i, rest.n - i}));
                    return v_list(l);
                }
                list_push(S, l, v_str((jstr){rest.s + i, end - i}));
                splits++;
                i = skip_space(rest.s, rest.n, end);
            }
            return v_list(l);
        }
        /* rsplit() with no separator: split all, then join the first ones back */
        jv all = str_split(S, rest, NULL, -1, 0);
        const size_t n = all.l->n;
        if (maxsplit < 0 || (size_t)maxsplit + 1 >= n)
            return all;
        const size_t keep = n - (size_t)maxsplit; /* items merged into the first */
        const char *first_end = all.l->items[keep - 1].s.s + all.l->items[keep - 1].s.n;
        list_push(S, l, v_str((jstr){rest.s, (size_t)(first_end - rest.s)}));
        for (size_t k = keep; k < n; k++)
            list_push(S, l, all.l->items[k]);
        return v_list(l);
    }
    if (sep->n == 0)
        fail(S, ER_ERR_INVALID_ARG, 0, "split: empty separator");
    /* find all separators left to right; with from_right keep only the last maxsplit */
    size_t count = 0;
    for (const char *p = find_sub(s, 0, *sep); p; p = find_sub(s, (size_t)(p - s.s) + sep->n, *sep))
        count++;
    size_t skip = from_right && maxsplit >= 0 && (size_t)maxsplit < count ? count - (size_t)maxsplit : 0;
    size_t start = 0, done = 0;
    for (const char *p = find_sub(s, 0, *sep); p; p = find_sub(s, (size_t)(p - s.s) + sep->n, *sep)) {
        if (skip) {
            skip--;
            continue;
        }
        if (!from_right && maxsplit >= 0 && done >= (size_t)maxsplit)
            break;
        list_push(S, l, v_str((jstr){s.s + start, (size_t)(p - s.s) - start}));
        start = (size_t)(p - s.s) + sep->n;
        done++;
    }
    list_push(S, l, v_str((jstr){s.s + start, s.n - start}));
    return v_list(l);
}

static jstr map_case(state *S, jstr s, int mode) { /* 0 lower, 1 upper, 2 capitalize, 3 title; ASCII */
    char *p = ar_alloc(S, s.n + 1);
    int prev_cased = 0;
    for (size_t i = 0; i < s.n; i++) {
        char c = s.s[i];
        const int lower = c >= 'a' && c <= 'z', upper = c >= 'A' && c <= 'Z';
        int to_upper = mode == 1 || (mode == 2 && i == 0) || (mode == 3 && !prev_cased);
        if (to_upper && lower)
            c = (char)(c - 32);
        else if (!to_upper && upper)
            c = (char)(c + 32);
        prev_cased = lower || upper || ((unsigned char)c >= 0x80 && mode == 3 && prev_cased);
        p[i] = c;
    }
    p[s.n] = 0;
    return (jstr){p, s.n};
}

static jstr str_replace(state *S, jstr s, jstr old, jstr new_s, int64_t count) {
    sbuf b = {0};
    size_t i = 0;
    int64_t done = 0;
    if (old.n == 0) { /* Python inserts between every character */
        size_t n;
        size_t *off = char_offsets(S, s, &n);
        for (size_t k = 0; k <= n; k++) {
            if (count < 0 || done < count) {
                sb_put(S, &b, new_s.s, new_s.n);
                done++;
            }
            if (k < n)
                sb_put(S, &b, s.s + off[k], off[k + 1] - off[k]);
        }
        return sb_str(&b);
    }
    for (const char *p = find_sub(s, 0, old); p && (count < 0 || done < count); p = find_sub(s, i, old)) {
        sb_put(S, &b, s.s + i, (size_t)(p - s.s) - i);
        sb_put(S, &b, new_s.s, new_s.n);
        i = (size_t)(p - s.s) + old.n;
        done++;
    }
    sb_put(S, &b, s.s + i, s.n - i);
    return sb_str(&b);
}

/* ---- attribute and item access -------------------------------------------------------- */

static const char *const str_methods[] = {"startswith", "endswith", "strip", "lstrip", "rstrip", "split", "rsplit",
                                          "upper", "lower", "title", "capitalize", "replace", "find", "rfind",
                                          "count", "join", "splitlines", "isdigit", "isalpha", "isalnum", "isspace",
                                          "isupper", "islower", "index", NULL};
static const char *const dict_methods[] = {"items", "keys", "values", "get", NULL};

static jv loop_attr(const loopinfo *L, jstr name) {
    const size_t n = L->items->n, i = L->index0;
    if (jstr_eq(name, "index"))
        return v_int((int64_t)i + 1);
    if (jstr_eq(name, "index0"))
        return v_int((int64_t)i);
    if (jstr_eq(name, "revindex"))
        return v_int((int64_t)(n - i));
    if (jstr_eq(name, "revindex0"))
        return v_int((int64_t)(n - i - 1));
    if (jstr_eq(name, "first"))
        return v_bool(i == 0);
    if (jstr_eq(name, "last"))
        return v_bool(i + 1 == n);
    if (jstr_eq(name, "length"))
        return v_int((int64_t)n);
    if (jstr_eq(name, "previtem"))
        return i > 0 ? L->items->items[i - 1] : v_undef(cstr("previtem"));
    if (jstr_eq(name, "nextitem"))
        return i + 1 < n ? L->items->items[i + 1] : v_undef(cstr("nextitem"));
    if (jstr_eq(name, "depth"))
        return v_int(1);
    if (jstr_eq(name, "depth0"))
        return v_int(0);
    return v_undef(name);
}

static jv bind_method(state *S, jv obj, jstr name) {
    jv *self = ar_alloc(S, sizeof *self);
    *self = obj;
    return (jv){.t = J_METHOD, .m = {self, name}};
}

static jv get_attr(state *S, int line, jv obj, jstr name) {
    switch (obj.t) {
    case J_UNDEF: undefined_fail(S, line, obj);
    case J_DICT:
        if (!obj.d->ns && in_words(name, dict_methods))
            return bind_method(S, obj, name);
        {
            const jv *v = dict_find(obj.d, name);
            return v ? *v : v_undef(name);
        }
    case J_STR: return in_words(name, str_methods) ? bind_method(S, obj, name) : v_undef(name);
    case J_LOOP:
        if (jstr_eq(name, "cycle"))
            return bind_method(S, obj, name);
        return loop_attr(obj.loop, name);
    default: return v_undef(name);
    }
}

/* Python's index normalization; returns 0 when out of range. */
static int norm_index(int64_t i, size_t n, size_t *out) {
    if (i < 0)
        i += (int64_t)n;
    if (i < 0 || (uint64_t)i >= n)
        return 0;
    *out = (size_t)i;
    return 1;
}

static jv get_item(state *S, int line, jv obj, jv key) {
    switch (obj.t) {
    case J_UNDEF: undefined_fail(S, line, obj);
    case J_DICT:
        if (key.t == J_STR) {
            const jv *v = dict_find(obj.d, key.s);
            return v ? *v : v_undef(key.s);
        }
        return v_undef(cstr("item"));
    case J_LIST: {
        size_t i;
        if ((key.t == J_INT || key.t == J_BOOL) && norm_index(key.t == J_INT ? key.i : key.b, obj.l->n, &i))
            return obj.l->items[i];
        if (key.t == J_STR)
            return get_attr(S, line, obj, key.s);
        return v_undef(cstr("item"));
    }
    case J_STR: {
        size_t n, i;
        size_t *off = char_offsets(S, obj.s, &n);
        if (key.t == J_INT && norm_index(key.i, n, &i))
            return v_str((jstr){obj.s.s + off[i], off[i + 1] - off[i]});
        if (key.t == J_STR)
            return get_attr(S, line, obj, key.s);
        return v_undef(cstr("item"));
    }
    default: return key.t == J_STR ? get_attr(S, line, obj, key.s) : v_undef(cstr("item"));
    }
}

static int64_t slice_bound(const jv *v, int64_t def, int64_t n, int64_t step) {
    if (!v || v->t == J_NONE)
        return def;
    int64_t i = v->t == J_INT ? v->i : v->b;
    if (i < 0) {
        i += n;
        if (i < 0)
            i = step < 0 ? -1 : 0;
    } else if (i >= n) {
        i = step < 0 ? n - 1 : n;
    }
    return i;
}

static jv get_slice(state *S, int line, jv obj, const jv *start, const jv *stop, const jv *stepv) {
    int64_t step = 1;
    for (int k = 0; k < 3; k++) {
        const jv *v = k == 0 ? start : k == 1 ? stop : stepv;
        if (v && v->t != J_NONE && v->t != J_INT && v->t != J_BOOL)
            fail(S, ER_ERR_INVALID_ARG, line, "slice indices must be integers or None, not %s", type_name(*v));
    }
    if (stepv && stepv->t != J_NONE)
        step = stepv->t == J_INT ? stepv->i : stepv->b;
    if (step == 0)
        fail(S, ER_ERR_INVALID_ARG, line, "slice step cannot be zero");
    size_t n = 0, *off = NULL;
    if (obj.t == J_STR)
        off = char_offsets(S, obj.s, &n);
    else if (obj.t == J_LIST)
        n = obj.l->n;
    else if (obj.t == J_UNDEF)
        undefined_fail(S, line, obj);
    else
        fail(S, ER_ERR_INVALID_ARG, line, "'%s' object is not subscriptable", type_name(obj));
    const int64_t nn = (int64_t)n;
    const int64_t b = slice_bound(start, step < 0 ? nn - 1 : 0, nn, step);
    const int64_t e = slice_bound(stop, step < 0 ? -1 : nn, nn, step);
    if (obj.t == J_STR) {
        sbuf out = {0};
        for (int64_t i = b; step > 0 ? i < e : i > e; i += step)
            sb_put(S, &out, obj.s.s + off[i], off[i + 1] - off[i]);
        return v_str(sb_str(&out));
    }
    jlist *l = new_list(S, 0);
    l->tuple = obj.l->tuple;
    for (int64_t i = b; step > 0 ? i < e : i > e; i += step)
        list_push(S, l, obj.l->items[i]);
    return v_list(l);
}

/* The items a for loop (or list(), join, ...) iterates over. */
static jlist *iter_items(state *S, int line, jv v) {
    switch (v.t) {
    case J_LIST: return v.l;
    case J_UNDEF: return new_list(S, 0);
    case J_DICT: {
        jlist *l = new_list(S, v.d->n);
        for (size_t i = 0; i < v.d->n; i++)
            list_push(S, l, v_str(v.d->keys[i]));
        return l;
    }
    case J_STR: {
        size_t n;
        size_t *off = char_offsets(S, v.s, &n);
        jlist *l = new_list(S, n);
        for (size_t i = 0; i < n; i++)
            list_push(S, l, v_str((jstr){v.s.s + off[i], off[i + 1] - off[i]}));
        return l;
    }
    default: fail(S, ER_ERR_INVALID_ARG, line, "'%s' object is not iterable", type_name(v));
    }
}

static int contains(state *S, int line, jv container, jv item) {
    if (container.t == J_STR) {
        if (item.t != J_STR)
            fail(S, ER_ERR_INVALID_ARG, line, "'in <string>' requires string as left operand, not %s", type_name(item));
        return find_sub(container.s, 0, item.s) != NULL;
    }
    if (container.t == J_DICT)
        return item.t == J_STR && dict_find(container.d, item.s) != NULL;
    jlist *l = iter_items(S, line, container);
    for (size_t i = 0; i < l->n; i++)
        if (py_eq(l->items[i], item))
            return 1;
    return 0;
}

static size_t length_of(state *S, int line, jv v) {
    switch (v.t) {
    case J_STR: return n_chars(v.s);
    case J_LIST: return v.l->n;
    case J_DICT: return v.d->n;
    case J_UNDEF: return 0;
    default: fail(S, ER_ERR_INVALID_ARG, line, "object of type '%s' has no len()", type_name(v));
    }
}

/* ---- arithmetic ----------------------------------------------------------------------- */

static jv binop(state *S, int line, jstr op, jv a, jv b) {
    if (jstr_eq(op, "~")) {
        sbuf out = {0};
        put_str(S, &out, a);
        put_str(S, &out, b);
        return v_str(sb_str(&out));
    }
    if (a.t == J_UNDEF)
        undefined_fail(S, line, a);
    if (b.t == J_UNDEF)
        undefined_fail(S, line, b);
    if (jstr_eq(op, "+")) {
        if (a.t == J_STR && b.t == J_STR) {
            sbuf out = {0};
            sb_put(S, &out, a.s.s, a.s.n);
            sb_put(S, &out, b.s.s, b.s.n);
            return v_str(sb_str(&out));
        }
        if (a.t == J_LIST && b.t == J_LIST) {
            jlist *l = new_list(S, a.l->n + b.l->n);
            for (size_t i = 0; i < a.l->n; i++)
                list_push(S, l, a.l->items[i]);
            for (size_t i = 0; i < b.l->n; i++)
                list_push(S, l, b.l->items[i]);
            l->tuple = a.l->tuple && b.l->tuple;
            return v_list(l);
        }
    }
    if (jstr_eq(op, "*") && ((a.t == J_STR || a.t == J_LIST) && (b.t == J_INT || b.t == J_BOOL))) {
        const int64_t times = b.t == J_INT ? b.i : b.b;
        if (a.t == J_STR) {
            sbuf out = {0};
            for (int64_t i = 0; i < times; i++)
                sb_put(S, &out, a.s.s, a.s.n);
            return v_str(sb_str(&out));
        }
        jlist *l = new_list(S, 0);
        for (int64_t i = 0; i < times; i++)
            for (size_t k = 0; k < a.l->n; k++)
                list_push(S, l, a.l->items[k]);
        return v_list(l);
    }
    if (jstr_eq(op, "*") && (b.t == J_STR || b.t == J_LIST) && (a.t == J_INT || a.t == J_BOOL))
        return binop(S, line, op, b, a);
    if (jstr_eq(op, "%") && a.t == J_STR)
        fail(S, ER_ERR_UNSUPPORTED, line, "string formatting with '%%' is not supported");
    if (!is_num(a) || !is_num(b))
        fail(S, ER_ERR_INVALID_ARG, line, "unsupported operand type(s) for %.*s: '%s' and '%s'", SHOWN(op), type_name(a),
             type_name(b));
    const int ints = a.t != J_FLOAT && b.t != J_FLOAT;
    const int64_t x = a.t == J_INT ? a.i : a.b, y = b.t == J_INT ? b.i : b.b;
    const double fx = num(a), fy = num(b);
    int64_t r;
    switch (op.s[0]) {
    case '+':
        if (ints && !__builtin_add_overflow(x, y, &r))
            return v_int(r);
        return v_float(fx + fy);
    case '-':
        if (ints && !__builtin_sub_overflow(x, y, &r))
            return v_int(r);
        return v_float(fx - fy);
    case '*':
        if (op.n == 2) { /* ** */
            if (ints && y >= 0) {
                int64_t p = 1;
                int over = 0;
                for (int64_t k = 0; k < y && !over; k++)
                    over = __builtin_mul_overflow(p, x, &p);
                if (!over)
                    return v_int(p);
            }
            return v_float(pow(fx, fy));
        }
        if (ints && !__builtin_mul_overflow(x, y, &r))
            return v_int(r);
        return v_float(fx * fy);
    case '/':
        if (fy == 0)
            fail(S, ER_ERR_INVALID_ARG, line, "division by zero");
        if (op.n == 2) {
            if (ints)
                return v_int(x / y - ((x % y != 0) && ((x < 0) != (y < 0))));
            return v_float(floor(fx / fy));
        }
        return v_float(fx / fy);
    case '%':
        if (fy == 0)
            fail(S, ER_ERR_INVALID_ARG, line, "modulo by zero");
        if (ints) {
            int64_t m = x % y;
            if (m != 0 && ((m < 0) != (y < 0)))
                m += y;
            return v_int(m);
        } else {
            double m = fmod(fx, fy);
            if (m != 0 && ((m < 0) != (fy < 0)))
                m += fy;
            return v_float(m);
        }
    default: fail(S, ER_ERR_UNSUPPORTED, line, "operator '%.*s' is not supported", SHOWN(op));
    }
}

static int compare_op(state *S, int line, jstr op, jv a, jv b) {
    if (jstr_eq(op, "=="))
        return py_eq(a, b);
    if (jstr_eq(op, "!="))
        return !py_eq(a, b);
    if (jstr_eq(op, "in"))
        return contains(S, line, b, a);
    if (jstr_eq(op, "not in"))
        return !contains(S, line, b, a);
    const int c = py_cmp(S, line, a, b);
    if (jstr_eq(op, "<"))
        return c < 0;
    if (jstr_eq(op, "<="))
        return c <= 0;
    if (jstr_eq(op, ">"))
        return c > 0;
    return c >= 0;
}

/* ---- tests ---------------------------------------------------------------------------- */

static int run_test(state *S, int line, jstr name, jv v, const args *a) {
    const jv *x = arg(a, 0, NULL);
#define IS(n) jstr_eq(name, n)
    if (IS("defined"))
        return v.t != J_UNDEF;
    if (IS("undefined"))
        return v.t == J_UNDEF;
    if (IS("none"))
        return v.t == J_NONE;
    if (IS("boolean"))
        return v.t == J_BOOL;
    if (IS("true"))
        return v.t == J_BOOL && v.b;
    if (IS("false"))
        return v.t == J_BOOL && !v.b;
    if (IS("integer"))
        return v.t == J_INT;
    if (IS("float"))
        return v.t == J_FLOAT;
    if (IS("number"))
        return is_num(v);
    if (IS("string"))
        return v.t == J_STR;
    if (IS("mapping"))
        return v.t == J_DICT && !v.d->ns;
    if (IS("iterable"))
        return v.t == J_STR || v.t == J_LIST || v.t == J_DICT || v.t == J_UNDEF;
    if (IS("sequence"))
        return v.t == J_STR || v.t == J_LIST || v.t == J_DICT;
    if (IS("callable"))
        return v.t == J_MACRO || v.t == J_BUILTIN || v.t == J_METHOD;
    if (IS("lower") || IS("upper")) {
        if (v.t != J_STR)
            return 0;
        int cased = 0;
        for (size_t i = 0; i < v.s.n; i++) {
            const char c = v.s.s[i];
            if ((IS("lower") && c >= 'A' && c <= 'Z') || (IS("upper") && c >= 'a' && c <= 'z'))
                return 0;
            cased |= (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
        }
        return cased;
    }
    if (IS("even") || IS("odd") || IS("divisibleby")) {
        if (v.t != J_INT && v.t != J_BOOL)
            fail(S, ER_ERR_INVALID_ARG, line, "test '%.*s' wants an integer, not %s", SHOWN(name), type_name(v));
        const int64_t i = v.t == J_INT ? v.i : v.b;
        if (IS("divisibleby")) {
            const int64_t d = arg_int(S, a, 0, "num", 1);
            return d != 0 && i % d == 0;
        }
        return (i % 2 == 0) == IS("even");
    }
    if (IS("escaped"))
        return 0;
    static const char *const with_arg[] = {"sameas", "eq", "equalto", "==", "ne", "!=", "lt", "lessthan", "<", "le", "<=",
                                           "gt", "greaterthan", ">", "ge", ">=", "in", NULL};
    if (!in_words(name, with_arg))
        fail(S, ER_ERR_UNSUPPORTED, line, "test '%.*s' is not supported", SHOWN(name));
    if (!x)
        fail(S, ER_ERR_INVALID_ARG, line, "test '%.*s' needs an argument", SHOWN(name));
    if (IS("sameas"))
        return (v.t == J_NONE && x->t == J_NONE) || (v.t == J_BOOL && x->t == J_BOOL && v.b == x->b) ||
               ((v.t == J_LIST || v.t == J_DICT) && v.t == x->t && v.l == x->l);
    if (IS("eq") || IS("equalto") || IS("=="))
        return py_eq(v, *x);
    if (IS("ne") || IS("!="))
        return !py_eq(v, *x);
    if (IS("lt") || IS("lessthan") || IS("<"))
        return py_cmp(S, line, v, *x) < 0;
    if (IS("le") || IS("<="))
        return py_cmp(S, line, v, *x) <= 0;
    if (IS("gt") || IS("greaterthan") || IS(">"))
        return py_cmp(S, line, v, *x) > 0;
    if (IS("ge") || IS(">="))
        return py_cmp(S, line, v, *x) >= 0;
    if (IS("in"))
        return contains(S, line, *x, v);
#undef IS
    fail(S, ER_ERR_UNSUPPORTED, line, "test '%.*s' is not supported", SHOWN(name));
}

/* ---- filters -------------------------------------------------------------------------- */

static jv call_value(state *S, scope *sc, int line, jv callee, const args *a);

/* Arguments a[from..] as a new args (for select/map passing the rest to a test/filter). */
static args args_from(const args *a, size_t from) {
    args r = *a;
    size_t skip = 0, j = 0;
    for (; j < a->n && skip < from; j++)
        if (!a->kw[j].s)
            skip++;
    r.v = a->v + j;
    r.kw = a->kw + j;
    r.n = a->n - j;
    r.n_pos = a->n_pos > from ? a->n_pos - from : 0;
    return r;
}

static jv apply_filter(state *S, scope *sc, int line, jstr name, jv v, const args *a);

/* attribute="a.b" or an integer index, as jinja2's make_attrgetter. */
static jv attr_path(state *S, int line, jv v, jstr path) {
    size_t i = 0;
    while (i <= path.n) {
        size_t e = i;
        while (e < path.n && path.s[e] != '.')
            e++;
        const jstr part = {path.s + i, e - i};
        int all_digits = part.n > 0;
        for (size_t k = 0; k < part.n; k++)
            all_digits &= part.s[k] >= '0' && part.s[k] <= '9';
        v = all_digits ? get_item(S, line, v, v_int(strtoll(part.s, NULL, 10))) : get_item(S, line, v, v_str(part));
        i = e + 1;
    }
    return v;
}

static int sort_less(state *S, int line, jv x, jv y, int case_sensitive, const jstr *attribute) {
    if (attribute) {
        x = attr_path(S, line, x, *attribute);
        y = attr_path(S, line, y, *attribute);
    }
    if (!case_sensitive && x.t == J_STR && y.t == J_STR) {
        x = v_str(map_case(S, x.s, 0));
        y = v_str(map_case(S, y.s, 0));
    }
    return py_cmp(S, line, x, y) < 0;
}

static jlist *sorted(state *S, int line, jlist *in, int reverse, int case_sensitive, const jstr *attribute) {
    jlist *l = new_list(S, in->n);
    for (size_t i = 0; i < in->n; i++) { /* stable insertion sort */
        jv x = in->items[i];
        size_t j = l->n;
        list_push(S, l, x);
        while (j > 0 && (reverse ? sort_less(S, line, l->items[j - 1], x, case_sensitive, attribute)
                                 : sort_less(S, line, x, l->items[j - 1], case_sensitive, attribute))) {
            l->items[j] = l->items[j - 1];
            j--;
        }
        l->items[j] = x;
    }
    return l;
}

static jv apply_filter(state *S, scope *sc, int line, jstr name, jv v, const args *a) {
#define IS(n) jstr_eq(name, n)
    if (IS("default") || IS("d")) {
        const jv *def = arg(a, 0, "default_value");
        if (v.t == J_UNDEF || (arg_bool(a, 1, "boolean", 0) && !truthy(v)))
            return def ? *def : v_str(cstr(""));
        return v;
    }
    if (IS("safe"))
        return v;
    if (IS("string"))
        return v_str(to_str(S, v));
    if (IS("tojson")) {
        dump_opts o = {-1, {"", 0}, cstr(", "), cstr(": "), arg_bool(a, 3, "sort_keys", 0), arg_bool(a, 0, "ensure_ascii", 0)};
        const jv *indent = arg(a, 1, "indent");
        if (indent && indent->t != J_NONE) {
            o.item_sep = cstr(",");
            if (indent->t == J_STR) {
                o.indent = 1;
                o.indent_str = indent->s;
            } else {
                o.indent = (int)arg_int(S, a, 1, "indent", 0);
                char *sp = ar_alloc(S, (size_t)(o.indent > 0 ? o.indent : 0) + 1);
                memset(sp, ' ', (size_t)(o.indent > 0 ? o.indent : 0));
                o.indent_str = (jstr){sp, (size_t)(o.indent > 0 ? o.indent : 0)};
            }
        }
        const jv *seps = arg(a, 2, "separators");
        if (seps && seps->t == J_LIST && seps->l->n == 2 && seps->l->items[0].t == J_STR && seps->l->items[1].t == J_STR) {
            o.item_sep = seps->l->items[0].s;
            o.key_sep = seps->l->items[1].s;
        }
        sbuf out = {0};
        dump_json(S, line, &out, v, &o, 0);
        return v_str(sb_str(&out));
    }
    if (IS("length") || IS("count"))
        return v_int((int64_t)length_of(S, line, v));
    if (IS("list"))
        return v_list(iter_items(S, line, v));
    if (IS("first") || IS("last")) {
        jlist *l = iter_items(S, line, v);
        return l->n ? l->items[IS("first") ? 0 : l->n - 1] : v_undef(name);
    }
    if (IS("reverse")) {
        if (v.t == J_STR) {
            size_t n;
            size_t *off = char_offsets(S, v.s, &n);
            sbuf out = {0};
            for (size_t i = n; i-- > 0;)
                sb_put(S, &out, v.s.s + off[i], off[i + 1] - off[i]);
            return v_str(sb_str(&out));
        }
        jlist *in = iter_items(S, line, v), *l = new_list(S, in->n);
        for (size_t i = in->n; i-- > 0;)
            list_push(S, l, in->items[i]);
        return v_list(l);
    }
    if (IS("join")) {
        const jstr sep = arg_str(S, a, 0, "d", "");
        const jv *attribute = arg(a, 1, "attribute");
        jlist *l = iter_items(S, line, v);
        sbuf out = {0};
        for (size_t i = 0; i < l->n; i++) {
            if (i)
                sb_put(S, &out, sep.s, sep.n);
            jv item = l->items[i];
            if (attribute && attribute->t == J_STR)
                item = attr_path(S, line, item, attribute->s);
            put_str(S, &out, item);
        }
        return v_str(sb_str(&out));
    }
    if (IS("items")) {
        if (v.t == J_UNDEF)
            return v_list(new_list(S, 0));
        if (v.t != J_DICT)
            fail(S, ER_ERR_INVALID_ARG, line, "items: expected a mapping, not %s", type_name(v));
        jlist *l = new_list(S, v.d->n);
        for (size_t i = 0; i < v.d->n; i++) {
            jlist *pair = new_list(S, 2);
            pair->tuple = 1;
            list_push(S, pair, v_str(v.d->keys[i]));
            list_push(S, pair, v.d->vals[i]);
            list_push(S, l, v_list(pair));
        }
        return v_list(l);
    }
    if (IS("dictsort")) {
        jv items = apply_filter(S, sc, line, cstr("items"), v, a);
        const jstr by = arg_str(S, a, 1, "by", "key");
        const jstr key = cstr(jstr_eq(by, "value") ? "1" : "0");
        return v_list(sorted(S, line, items.l, arg_bool(a, 2, "reverse", 0), arg_bool(a, 0, "case_sensitive", 0), &key));
    }
    if (IS("sort")) {
        const jv *attribute = arg(a, 2, "attribute");
        return v_list(sorted(S, line, iter_items(S, line, v), arg_bool(a, 0, "reverse", 0),
                             arg_bool(a, 1, "case_sensitive", 0), attribute && attribute->t == J_STR ? &attribute->s : NULL));
    }
    if (IS("unique")) {
        jlist *in = iter_items(S, line, v), *l = new_list(S, 0);
        for (size_t i = 0; i < in->n; i++) {
            int seen = 0;
            for (size_t k = 0; k < l->n && !seen; k++)
                seen = py_eq(l->items[k], in->items[i]);
            if (!seen)
                list_push(S, l, in->items[i]);
        }
        return v_list(l);
    }
    if (IS("min") || IS("max")) {
        jlist *l = iter_items(S, line, v);
        if (!l->n)
            return v_undef(name);
        jv best = l->items[0];
        for (size_t i = 1; i < l->n; i++)
            if (IS("min") ? sort_less(S, line, l->items[i], best, 0, NULL) : sort_less(S, line, best, l->items[i], 0, NULL))
                best = l->items[i];
        return best;
    }
    if (IS("sum")) {
        const jv *attribute = arg(a, 0, "attribute");
        const jv *start = arg(a, 1, "start");
        jv total = start ? *start : v_int(0);
        jlist *l = iter_items(S, line, v);
        for (size_t i = 0; i < l->n; i++)
            total = binop(S, line, cstr("+"), total,
                          attribute && attribute->t == J_STR ? attr_path(S, line, l->items[i], attribute->s) : l->items[i]);
        return total;
    }
    if (IS("map")) {
        const jv *attribute = arg(a, 0, NULL) ? NULL : arg(a, 99, "attribute");
        jlist *in = iter_items(S, line, v), *l = new_list(S, in->n);
        if (attribute) {
            const jv *def = arg(a, 99, "default");
            for (size_t i = 0; i < in->n; i++) {
                jv x = attr_path(S, line, in->items[i], to_str(S, *attribute));
                list_push(S, l, x.t == J_UNDEF && def ? *def : x);
            }
            return v_list(l);
        }
        const jv *fname = arg(a, 0, NULL);
        if (!fname || fname->t != J_STR)
            fail(S, ER_ERR_INVALID_ARG, line, "map: wants a filter name or attribute=");
        const args rest = args_from(a, 1);
        for (size_t i = 0; i < in->n; i++)
            list_push(S, l, apply_filter(S, sc, line, fname->s, in->items[i], &rest));
        return v_list(l);
    }
    if (IS("select") || IS("reject") || IS("selectattr") || IS("rejectattr")) {
        const int by_attr = IS("selectattr") || IS("rejectattr"), keep = IS("select") || IS("selectattr");
        const jv *attribute = by_attr ? arg(a, 0, NULL) : NULL;
        if (by_attr && (!attribute || attribute->t != J_STR))
            fail(S, ER_ERR_INVALID_ARG, line, "%.*s: wants an attribute name", SHOWN(name));
        const jv *tname = arg(a, by_attr ? 1 : 0, NULL);
        const args rest = args_from(a, by_attr ? 2 : 1);
        jlist *in = iter_items(S, line, v), *l = new_list(S, 0);
        for (size_t i = 0; i < in->n; i++) {
            const jv item = by_attr ? attr_path(S, line, in->items[i], attribute->s) : in->items[i];
            int ok;
            if (!tname)
                ok = truthy(item);
            else if (tname->t != J_STR)
                fail(S, ER_ERR_INVALID_ARG, line, "%.*s: the test must be named by a string", SHOWN(name));
            else
                ok = run_test(S, line, tname->s, item, &rest);
            if (ok == keep)
                list_push(S, l, in->items[i]);
        }
        return v_list(l);
    }
    if (IS("attr")) {
        return get_attr(S, line, v, arg_str(S, a, 0, "name", ""));
    }
    if (IS("int")) {
        const int64_t def = arg_int(S, a, 0, "default", 0);
        if (v.t == J_INT)
            return v;
        if (v.t == J_BOOL)
            return v_int(v.b);
        if (v.t == J_FLOAT)
            return isfinite(v.f) ? v_int((int64_t)v.f) : v_int(def);
        if (v.t == J_STR) {
            const jstr t = strip(v.s, NULL, 1, 1);
            char tmp[64];
            if (t.n == 0 || t.n >= sizeof tmp)
                return v_int(def);
            memcpy(tmp, t.s, t.n);
            tmp[t.n] = 0;
            char *e;
            const long long i = strtoll(tmp, &e, 10);
            if (!*e)
                return v_int(i);
            const double f = strtod(tmp, &e);
            return !*e && isfinite(f) ? v_int((int64_t)f) : v_int(def);
        }
        return v_int(def);
    }
    if (IS("float")) {
        if (is_num(v))
            return v_float(num(v));
        if (v.t == J_STR) {
            const jstr t = strip(v.s, NULL, 1, 1);
            char tmp[64];
            if (t.n && t.n < sizeof tmp) {
                memcpy(tmp, t.s, t.n);
                tmp[t.n] = 0;
                char *e;
                const double f = strtod(tmp, &e);
                if (!*e)
                    return v_float(f);
            }
        }
        const jv *def = arg(a, 0, "default");
        return def ? *def : v_float(0.0);
    }
    if (IS("abs")) {
        if (v.t == J_INT)
            return v_int(v.i < 0 ? -v.i : v.i);
        if (is_num(v))
            return v.t == J_BOOL ? v_int(v.b) : v_float(fabs(v.f));
        fail(S, ER_ERR_INVALID_ARG, line, "bad operand type for abs(): '%s'", type_name(v));
    }
    if (IS("round")) {
        const int64_t prec = arg_int(S, a, 0, "precision", 0);
        const jstr method = arg_str(S, a, 1, "method", "common");
        const double scale = pow(10.0, (double)prec), x = num(v) * scale;
        const double r = jstr_eq(method, "ceil") ? ceil(x) : jstr_eq(method, "floor") ? floor(x) : (x < 0 ? -floor(-x + 0.5) : floor(x + 0.5));
        return v_float(r / scale);
    }
    /* string filters: the value is converted with str() first */
    const jstr s = to_str(S, v);
    if (IS("trim")) {
        const jv *chars = arg(a, 0, "chars");
        return v_str(strip(s, chars && chars->t == J_STR ? &chars->s : NULL, 1, 1));
    }
    if (IS("lower"))
        return v_str(map_case(S, s, 0));
    if (IS("upper"))
        return v_str(map_case(S, s, 1));
    if (IS("capitalize"))
        return v_str(map_case(S, s, 2));
    if (IS("title"))
        return v_str(map_case(S, s, 3));
    if (IS("replace"))
        return v_str(str_replace(S, s, arg_str(S, a, 0, "old", ""), arg_str(S, a, 1, "new", ""), arg_int(S, a, 2, "count", -1)));
    if (IS("escape") || IS("e") || IS("forceescape")) {
        sbuf out = {0};
        for (size_t i = 0; i < s.n; i++) {
            const char c = s.s[i];
            const char *rep = c == '&' ? "&amp;" : c == '<' ? "&lt;" : c == '>' ? "&gt;" : c == '"' ? "&#34;" : c == '\'' ? "&#39;" : NULL;
            if (rep)
                sb_puts(S, &out, rep);
            else
                sb_put(S, &out, &c, 1);
        }
        return v_str(sb_str(&out));
    }
    if (IS("indent")) {
        const jv *w = arg(a, 0, "width");
        jstr pad;
        if (w && w->t == J_STR) {
            pad = w->s;
        } else {
            const int64_t n = w ? arg_int(S, a, 0, "width", 4) : 4;
            char *p = ar_alloc(S, (size_t)(n > 0 ? n : 0) + 1);
            memset(p, ' ', (size_t)(n > 0 ? n : 0));
            pad = (jstr){p, (size_t)(n > 0 ? n : 0)};
        }
        const int first = arg_bool(a, 1, "first", 0), blank = arg_bool(a, 2, "blank", 0);
        sbuf out = {0};
        size_t i = 0;
        int line_no = 0;
        while (i <= s.n) {
            size_t e = i;
            while (e < s.n && s.s[e] != '\n')
                e++;
            const int is_blank = strip((jstr){s.s + i, e - i}, NULL, 1, 1).n == 0;
            if ((line_no > 0 || first) && (blank || !is_blank) && !(e == s.n && i == s.n && line_no > 0))
                sb_put(S, &out, pad.s, pad.n);
            sb_put(S, &out, s.s + i, e - i);
            if (e < s.n)
                sb_put(S, &out, "\n", 1);
            i = e + 1;
            line_no++;
        }
        return v_str(sb_str(&out));
    }
    if (IS("wordcount")) {
        jv words = str_split(S, s, NULL, -1, 0);
        return v_int((int64_t)words.l->n);
    }
    if (IS("format"))
        fail(S, ER_ERR_UNSUPPORTED, line, "filter 'format' is not supported");
#undef IS
    (void)sc;
    fail(S, ER_ERR_UNSUPPORTED, line, "filter '%.*s' is not supported", SHOWN(name));
}

/* ---- calls ---------------------------------------------------------------------------- */

static jv call_method(state *S, int line, jv self, jstr name, const args *a) {
#define IS(n) jstr_eq(name, n)
    if (self.t == J_LOOP && IS("cycle")) {
        if (!a->n_pos)
            fail(S, ER_ERR_INVALID_ARG, line, "loop.cycle() needs at least one value");
        return *arg(a, self.loop->index0 % a->n_pos, NULL);
    }
    if (self.t == J_DICT) {
        if (IS("get")) {
            const jv *def = arg(a, 1, "default");
            const jstr key = arg_str(S, a, 0, "key", "");
            const jv *v = dict_find(self.d, key);
            return v ? *v : def ? *def : v_none();
        }
        jlist *l = new_list(S, self.d->n);
        for (size_t i = 0; i < self.d->n; i++) {
            if (IS("keys")) {
                list_push(S, l, v_str(self.d->keys[i]));
            } else if (IS("values")) {
                list_push(S, l, self.d->vals[i]);
            } else {
                jlist *pair = new_list(S, 2);
                pair->tuple = 1;
                list_push(S, pair, v_str(self.d->keys[i]));
                list_push(S, pair, self.d->vals[i]);
                list_push(S, l, v_list(pair));
            }
        }
        return v_list(l);
    }
    const jstr s = self.s;
    if (IS("startswith") || IS("endswith")) {
        const jv *p = arg(a, 0, NULL);
        if (!p)
            fail(S, ER_ERR_INVALID_ARG, line, "%.*s() takes at least 1 argument", SHOWN(name));
        const jv *alts = p->t == J_LIST ? p->l->items : p;
        const size_t n_alts = p->t == J_LIST ? p->l->n : 1;
        for (size_t k = 0; k < n_alts; k++) {
            if (alts[k].t != J_STR)
                fail(S, ER_ERR_INVALID_ARG, line, "%.*s first arg must be str or a tuple of str, not %s", SHOWN(name), type_name(alts[k]));
            const jstr x = alts[k].s;
            if (x.n <= s.n && (x.n == 0 || !memcmp(IS("startswith") ? s.s : s.s + s.n - x.n, x.s, x.n)))
                return v_bool(1);
        }
        return v_bool(0);
    }
    if (IS("strip") || IS("lstrip") || IS("rstrip")) {
        const jv *chars = arg(a, 0, "chars");
        return v_str(strip(s, chars && chars->t == J_STR ? &chars->s : NULL, !IS("rstrip"), !IS("lstrip")));
    }
    if (IS("split") || IS("rsplit")) {
        const jv *sep = arg(a, 0, "sep");
        return str_split(S, s, sep && sep->t == J_STR ? &sep->s : NULL, arg_int(S, a, 1, "maxsplit", -1), IS("rsplit"));
    }
    if (IS("upper") || IS("lower") || IS("capitalize") || IS("title"))
        return v_str(map_case(S, s, IS("lower") ? 0 : IS("upper") ? 1 : IS("capitalize") ? 2 : 3));
    if (IS("replace"))
        return v_str(str_replace(S, s, arg_str(S, a, 0, "old", ""), arg_str(S, a, 1, "new", ""), arg_int(S, a, 2, "count", -1)));
    if (IS("find") || IS("rfind") || IS("index") || IS("count")) {
        const jstr sub = arg_str(S, a, 0, "sub", "");
        int64_t found = -1, count = 0;
        for (const char *p = find_sub(s, 0, sub); p; p = p + (sub.n ? sub.n : 1) <= s.s + s.n ? find_sub(s, (size_t)(p - s.s) + (sub.n ? sub.n : 1), sub) : NULL) {
            const int64_t at = (int64_t)n_chars((jstr){s.s, (size_t)(p - s.s)});
            if (found < 0 || IS("rfind"))
                found = at;
            count++;
            if (IS("find") || IS("index"))
                break;
        }
        if (IS("count"))
            return v_int(count);
        if (IS("index") && found < 0)
            fail(S, ER_ERR_INVALID_ARG, line, "substring not found");
        return v_int(found);
    }
    if (IS("join")) {
        const jv *items = arg(a, 0, NULL);
        jlist *l = iter_items(S, line, items ? *items : v_undef(cstr("iterable")));
        sbuf out = {0};
        for (size_t i = 0; i < l->n; i++) {
            if (l->items[i].t != J_STR)
                fail(S, ER_ERR_INVALID_ARG, line, "sequence item %zu: expected str instance, %s found", i, type_name(l->items[i]));
            if (i)
                sb_put(S, &out, s.s, s.n);
            sb_put(S, &out, l->items[i].s.s, l->items[i].s.n);
        }
        return v_str(sb_str(&out));
    }
    if (IS("splitlines")) {
        jlist *l = new_list(S, 0);
        size_t i = 0;
        while (i < s.n) {
            size_t e = i;
            while (e < s.n && s.s[e] != '\n' && s.s[e] != '\r')
                e++;
            list_push(S, l, v_str((jstr){s.s + i, e - i}));
            if (e < s.n && s.s[e] == '\r' && e + 1 < s.n && s.s[e + 1] == '\n')
                e++;
            i = e + 1;
        }
        return v_list(l);
    }
    if (IS("isdigit") || IS("isalpha") || IS("isalnum") || IS("isspace") || IS("isupper") || IS("islower")) {
        int ok = s.n > 0, cased = 0;
        for (size_t i = 0; i < s.n && ok;) {
            const int32_t cp = utf8_next((const unsigned char *)s.s, s.n, &i);
            const uint8_t cls = unicode_class(cp);
            if (IS("isdigit"))
                ok = cp >= '0' && cp <= '9';
            else if (IS("isalpha"))
                ok = (cls & UNI_LETTER) != 0;
            else if (IS("isalnum"))
                ok = (cls & (UNI_LETTER | UNI_NUMBER)) != 0;
            else if (IS("isspace"))
                ok = py_space(cp);
            else {
                const int up = cp >= 'A' && cp <= 'Z', low = cp >= 'a' && cp <= 'z';
                ok = IS("isupper") ? !low : !up;
                cased |= up || low;
            }
        }
        return v_bool(ok && (cased || IS("isdigit") || IS("isalpha") || IS("isalnum") || IS("isspace")));
    }
#undef IS
    fail(S, ER_ERR_UNSUPPORTED, line, "method '%.*s' of %s is not supported", SHOWN(name), type_name(self));
}

static jv call_macro(state *S, int line, const node *m, const args *a) {
    if (++S->depth > MAX_DEPTH)
        fail(S, ER_ERR_INVALID_ARG, line, "macro calls nested too deeply");
    scope *sc = new_scope(S, S->root);
    if (a->n_pos > m->args.n)
        fail(S, ER_ERR_INVALID_ARG, line, "macro '%.*s' takes %zu arguments, %zu given", SHOWN(m->name), m->args.n, a->n_pos);
    for (size_t i = 0; i < a->n; i++)
        if (a->kw[i].s) {
            int known = 0;
            for (size_t p = 0; p < m->args.n; p++)
                known |= jstr_same(m->kwnames[p], a->kw[i]);
            if (!known)
                fail(S, ER_ERR_INVALID_ARG, line, "macro '%.*s' has no parameter '%.*s'", SHOWN(m->name), SHOWN(a->kw[i]));
        }
    for (size_t p = 0; p < m->args.n; p++) {
        char pname[128];
        snprintf(pname, sizeof pname, "%.*s", (int)(m->kwnames[p].n < 127 ? m->kwnames[p].n : 127), m->kwnames[p].s);
        const jv *v = arg(a, p, pname);
        jv val = v ? *v : m->args.v[p] ? eval(S, sc, m->args.v[p]) : v_undef(m->kwnames[p]);
        dict_set(S, &sc->vars, m->kwnames[p], val);
    }
    sbuf out = {0};
    render(S, sc, &m->body, &out);
    S->brk = 0;
    S->depth--;
    return v_str(sb_str(&out));
}

static jv call_builtin(state *S, int line, int which, const args *a) {
    switch (which) {
    case B_RANGE: {
        int64_t start = 0, stop, step = 1;
        if (a->n_pos == 1) {
            stop = arg_int(S, a, 0, NULL, 0);
        } else {
            start = arg_int(S, a, 0, NULL, 0);
            stop = arg_int(S, a, 1, NULL, 0);
            step = arg_int(S, a, 2, NULL, 1);
        }
        if (step == 0)
            fail(S, ER_ERR_INVALID_ARG, line, "range() arg 3 must not be zero");
        jlist *l = new_list(S, 0);
        for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
            if (l->n >= 1000000)
                fail(S, ER_ERR_INVALID_ARG, line, "range() is too long");
            list_push(S, l, v_int(i));
        }
        return v_list(l);
    }
    case B_NAMESPACE:
    case B_DICT: {
        jdict *d = new_dict(S);
        d->ns = which == B_NAMESPACE;
        const jv *init = arg(a, 0, NULL);
        if (init && init->t == J_DICT)
            for (size_t i = 0; i < init->d->n; i++)
                dict_set(S, d, init->d->keys[i], init->d->vals[i]);
        for (size_t i = 0; i < a->n; i++)
            if (a->kw[i].s)
                dict_set(S, d, a->kw[i], a->v[i]);
        return v_dict(d);
    }
    case B_RAISE: {
        const jv *msg = arg(a, 0, NULL);
        const jstr m = msg ? to_str(S, *msg) : cstr("");
        fail(S, ER_ERR_INVALID_ARG, line, "raise_exception: %.*s", (int)(m.n > 300 ? 300 : m.n), m.s);
    }
    case B_STRFTIME: {
        const jstr fmt = arg_str(S, a, 0, "format", "%Y-%m-%d");
        char f[128], out[256];
        snprintf(f, sizeof f, "%.*s", (int)(fmt.n < 127 ? fmt.n : 127), fmt.s);
        const time_t now = time(NULL);
        struct tm tm;
        localtime_r(&now, &tm);
        const size_t n = strftime(out, sizeof out, f, &tm);
        return v_str(ar_str(S, out, n));
    }
    default: fail(S, ER_ERR_UNSUPPORTED, line, "unknown function");
    }
}

static jv call_value(state *S, scope *sc, int line, jv callee, const args *a) {
    (void)sc;
    switch (callee.t) {
    case J_MACRO: return call_macro(S, line, callee.macro, a);
    case J_BUILTIN: return call_builtin(S, line, callee.builtin, a);
    case J_METHOD: return call_method(S, line, *callee.m.self, callee.m.name, a);
    case J_UNDEF: fail(S, ER_ERR_UNSUPPORTED, line, "'%.*s' is undefined (a function this engine does not provide?)", SHOWN(callee.s));
    default: fail(S, ER_ERR_INVALID_ARG, line, "'%s' object is not callable", type_name(callee));
    }
}

/* ---- expressions ---------------------------------------------------------------------- */

static jv eval(state *S, scope *sc, const node *x) {
    switch (x->k) {
    case E_LIT: return x->lit;
    case E_NAME: return lookup(S, sc, x->name);
    case E_ATTR: return get_attr(S, x->line, eval(S, sc, x->a), x->name);
    case E_ITEM: return get_item(S, x->line, eval(S, sc, x->a), eval(S, sc, x->b));
    case E_SLICE: {
        const jv obj = eval(S, sc, x->a);
        jv parts[3];
        const jv *p[3] = {NULL, NULL, NULL};
        const node *src[3] = {x->b, x->args.v[0], x->args.v[1]};
        for (int k = 0; k < 3; k++)
            if (src[k]) {
                parts[k] = eval(S, sc, src[k]);
                p[k] = &parts[k];
            }
        return get_slice(S, x->line, obj, p[0], p[1], p[2]);
    }
    case E_CALL: {
        const args a = eval_args(S, sc, x, "call");
        return call_value(S, sc, x->line, eval(S, sc, x->a), &a);
    }
    case E_FILTER: {
        const jv v = eval(S, sc, x->a);
        char what[80];
        snprintf(what, sizeof what, "filter '%.*s'", SHOWN(x->name));
        args a = eval_args(S, sc, x, what);
        a.what = ar_str(S, what, strlen(what)).s;
        return apply_filter(S, sc, x->line, x->name, v, &a);
    }
    case E_TEST: {
        const jv v = eval(S, sc, x->a);
        const args a = eval_args(S, sc, x, "test");
        return v_bool(run_test(S, x->line, x->name, v, &a) != x->negate);
    }
    case E_NEG:
    case E_POS: {
        const jv v = eval(S, sc, x->a);
        if (v.t == J_UNDEF)
            undefined_fail(S, x->line, v);
        if (!is_num(v))
            fail(S, ER_ERR_INVALID_ARG, x->line, "bad operand type for unary %c: '%s'", x->k == E_NEG ? '-' : '+', type_name(v));
        if (x->k == E_POS)
            return v.t == J_BOOL ? v_int(v.b) : v;
        return v.t == J_FLOAT ? v_float(-v.f) : v_int(-(v.t == J_INT ? v.i : v.b));
    }
    case E_NOT: return v_bool(!truthy(eval(S, sc, x->a)));
    case E_AND: {
        const jv l = eval(S, sc, x->a);
        return truthy(l) ? eval(S, sc, x->b) : l;
    }
    case E_OR: {
        const jv l = eval(S, sc, x->a);
        return truthy(l) ? l : eval(S, sc, x->b);
    }
    case E_BIN: return binop(S, x->line, x->name, eval(S, sc, x->a), eval(S, sc, x->b));
    case E_CMP: {
        jv left = eval(S, sc, x->a);
        for (size_t i = 0; i < x->args.n; i++) {
            const node *operand = x->args.v[i];
            const jv right = eval(S, sc, operand->a);
            if (!compare_op(S, operand->line, operand->name, left, right))
                return v_bool(0);
            left = right;
        }
        return v_bool(1);
    }
    case E_COND:
        if (truthy(eval(S, sc, x->a)))
            return eval(S, sc, x->b);
        return x->c ? eval(S, sc, x->c) : v_undef(cstr("else"));
    case E_LIST:
    case E_TUPLE: {
        jlist *l = new_list(S, x->args.n);
        l->tuple = x->k == E_TUPLE;
        for (size_t i = 0; i < x->args.n; i++)
            list_push(S, l, eval(S, sc, x->args.v[i]));
        return v_list(l);
    }
    case E_DICT: {
        jdict *d = new_dict(S);
        for (size_t i = 0; i + 1 < x->args.n; i += 2) {
            const jv k = eval(S, sc, x->args.v[i]);
            if (k.t != J_STR)
                fail(S, ER_ERR_UNSUPPORTED, x->line, "dict keys other than strings are not supported");
            dict_set(S, d, k.s, eval(S, sc, x->args.v[i + 1]));
        }
        return v_dict(d);
    }
    default: fail(S, ER_ERR_FORMAT, x->line, "internal: not an expression");
    }
}

/* ---- statements ----------------------------------------------------------------------- */

static void assign(state *S, scope *sc, const node *x, jv v) {
    if (x->attr.s) { /* {% set ns.attr = v %} */
        const jv target = lookup(S, sc, x->args.v[0]->name);
        if (target.t != J_DICT || !target.d->ns)
            fail(S, ER_ERR_INVALID_ARG, x->line, "cannot assign attribute on non-namespace object '%.*s'", SHOWN(x->args.v[0]->name));
        dict_set(S, target.d, x->attr, v);
        return;
    }
    if (x->args.n == 1) {
        dict_set(S, &sc->vars, x->args.v[0]->name, v);
        return;
    }
    jlist *items = iter_items(S, x->line, v);
    if (items->n != x->args.n)
        fail(S, ER_ERR_INVALID_ARG, x->line, "cannot unpack %zu values into %zu names", items->n, x->args.n);
    for (size_t i = 0; i < x->args.n; i++)
        dict_set(S, &sc->vars, x->args.v[i]->name, items->items[i]);
}

static void render_for(state *S, scope *sc, const node *x, sbuf *out) {
    jlist *all = iter_items(S, x->line, eval(S, sc, x->a));
    jlist *items = all;
    if (x->b) { /* {% for a in b if cond %}: the loop (and loop.length) sees only what passes */
        items = new_list(S, 0);
        for (size_t i = 0; i < all->n; i++) {
            scope *tmp = new_scope(S, sc);
            assign(S, tmp, x, all->items[i]);
            if (truthy(eval(S, tmp, x->b)))
                list_push(S, items, all->items[i]);
        }
    }
    if (!items->n) {
        render(S, new_scope(S, sc), &x->body2, out);
        return;
    }
    for (size_t i = 0; i < items->n; i++) {
        scope *it = new_scope(S, sc); /* a fresh scope each iteration, as jinja2 */
        loopinfo *L = ar_alloc(S, sizeof *L);
        L->items = items;
        L->index0 = i;
        dict_set(S, &it->vars, cstr("loop"), (jv){.t = J_LOOP, .loop = L});
        assign(S, it, x, items->items[i]);
        render(S, it, &x->body, out);
        if (S->brk == 1) {
            S->brk = 0;
            break;
        }
        S->brk = 0;
    }
}

static void render(state *S, scope *sc, const nlist *body, sbuf *out) {
    if (++S->depth > MAX_DEPTH)
        fail(S, ER_ERR_INVALID_ARG, body->n ? body->v[0]->line : 0, "template nested too deeply");
    for (size_t i = 0; i < body->n && !S->brk; i++) {
        const node *x = body->v[i];
        switch (x->k) {
        case N_TEXT: sb_put(S, out, x->lit.s.s, x->lit.s.n); break;
        case N_OUT: put_str(S, out, eval(S, sc, x->a)); break;
        case N_IF: render(S, sc, truthy(eval(S, sc, x->a)) ? &x->body : &x->body2, out); break;
        case N_FOR: render_for(S, sc, x, out); break;
        case N_SET: assign(S, sc, x, eval(S, sc, x->a)); break;
        case N_SETBLOCK: {
            sbuf b = {0};
            render(S, sc, &x->body, &b);
            assign(S, sc, x, v_str(sb_str(&b)));
            break;
        }
        case N_MACRO: dict_set(S, &sc->vars, x->name, (jv){.t = J_MACRO, .macro = x}); break;
        case N_BREAK: S->brk = 1; break;
        case N_CONTINUE: S->brk = 2; break;
        case N_BLOCK: render(S, sc, &x->body, out); break;
        default: fail(S, ER_ERR_FORMAT, x->line, "internal: not a statement");
        }
    }
    S->depth--;
}

/* ---- entry point ---------------------------------------------------------------------- */

er_status jinja_render(const char *source, size_t n, const char *json, size_t json_len, const jinja_var *defaults,
                       int n_defaults, strbuf *out) {
    state *S = calloc(1, sizeof *S);
    if (!S)
        return er_fail(ER_ERR_NO_MEMORY, "chat template: out of memory");
    volatile er_status st = ER_OK;
    S->defaults = defaults;
    S->n_defaults = n_defaults;
    if (setjmp(S->fail)) {
        st = er_fail(S->status, "%s", S->msg);
        goto done;
    }
    /* newlines normalized to \n; one trailing newline dropped (keep_trailing_newline off) */
    char *src = ar_alloc(S, n + 1);
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        if (source[i] == '\r') {
            src[m++] = '\n';
            if (i + 1 < n && source[i + 1] == '\n')
                i++;
        } else {
            src[m++] = source[i];
        }
    }
    if (m && src[m - 1] == '\n')
        m--;
    src[m] = 0;
    S->src = src;
    S->n = m;
    if (json) {
        jparse J = {S, json, json, json + json_len};
        const jv ctx = json_value(&J, 0);
        json_ws(&J);
        if (J.p != J.end)
            json_fail(&J, "trailing characters");
        if (ctx.t != J_DICT)
            fail(S, ER_ERR_INVALID_ARG, 0, "the variables must be a JSON object");
        S->ctx = ctx.d;
    }
    lex(S);
    nlist body = {0};
    S->pos = 0;
    parse_body(S, &body, NULL);
    S->root = new_scope(S, NULL);
    sbuf result = {0};
    render(S, S->root, &body, &result);
    st = strbuf_append(out, result.p ? result.p : "", result.n);
done:
    while (S->arena) {
        ablock *next = S->arena->next;
        free(S->arena);
        S->arena = next;
    }
    free(S);
    return st;
}
