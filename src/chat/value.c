/*
 * value.c - the values of the chat template engine and the arena they live in.
 *
 *   arena      blocks of 64 KiB (or one larger allocation), freed together by
 *              jinja_arena_free, at most S->max_bytes in all; jinja_grow doubles arrays
 *              within it
 *   limits     jinja_enter (the depth guard) and the step budget's failure
 *   values     lists and dicts (keys in insertion order, found by a scan while a dict is
 *              small, through a hash index from 8 keys on); Python's ==, < (TypeError
 *              where Python raises one); a stable merge sort
 *   printing   str() and repr() as Python prints them, floats as float.__repr__; a
 *              container met again inside itself (only a namespace can make one) prints
 *              as Python's [...], (...), {...}
 *   JSON       the variables read with core/json.h into values; tojson as json.dumps
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "chat/engine.h"
#include "core/json.h"

/* ---- arena and buffers ---------------------------------------------------------------- */

struct ablock {
    struct ablock *next;
    size_t used, cap;
    _Alignas(16) unsigned char data[]; /* (cap) */
};

void jinja_fail(state *S, er_status st, int line, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int k = line > 0 ? snprintf(S->msg, sizeof S->msg, "chat template line %d: ", line)
                     : snprintf(S->msg, sizeof S->msg, "chat template: ");
    vsnprintf(S->msg + k, sizeof S->msg - (size_t)k, fmt, ap);
    va_end(ap);
    for (char *p = S->msg; *p; p++) /* one line, whatever the template's text put in it */
        if ((unsigned char)*p < 0x20 || *p == 0x7f)
            *p = ' ';
    S->status = st;
    longjmp(S->fail, 1);
}

void jinja_depth_fail(state *S, er_status st, int line, const char *what) {
    jinja_fail(S, st, line, "%s nested too deeply (the limit is %d levels)", what, JINJA_MAX_DEPTH);
}

void jinja_steps_fail(state *S, int line) {
    jinja_fail(S, ER_ERR_UNSUPPORTED, line, "the template takes more than %lld steps, the limit of one rendering",
               (long long)S->max_steps);
}

static _Noreturn void memory_fail(state *S) {
    jinja_fail(S, ER_ERR_UNSUPPORTED, S->line, "the template needs more than %zu MiB, the memory limit of one rendering",
               S->max_bytes >> 20);
}

void *jinja_alloc(state *S, size_t size) {
    if (size > S->max_bytes - S->bytes) /* also keeps the rounding below from overflowing */
        memory_fail(S);
    size = (size + 15) & ~(size_t)15;
    if (!S->arena || S->arena->cap - S->arena->used < size) {
        const size_t cap = size > 65536 ? size : 65536;
        if (cap > S->max_bytes - S->bytes)
            memory_fail(S);
        S->bytes += cap;
        ablock *b = malloc(sizeof *b + cap);
        if (!b)
            jinja_fail(S, ER_ERR_NO_MEMORY, S->line, "out of memory");
        b->next = S->arena;
        b->used = 0;
        b->cap = cap;
        S->arena = b;
    }
    void *p = S->arena->data + S->arena->used;
    S->arena->used += size;
    return p;
}

void *jinja_zalloc(state *S, size_t size) { return memset(jinja_alloc(S, size), 0, size); }

/* 2 * c elements of `size` bytes, refused before the product could overflow. */
static size_t twice(state *S, size_t c, size_t size) {
    if (c > S->max_bytes / size / 2)
        memory_fail(S);
    return 2 * c;
}

void *jinja_grow(state *S, void *items, size_t n, size_t need, size_t *cap, size_t size, size_t first_cap) {
    if (*cap - n >= need)
        return items;
    size_t c = *cap ? twice(S, *cap, size) : first_cap;
    while (c - n < need)
        c = twice(S, c, size);
    void *p = jinja_alloc(S, c * size);
    if (n)
        memcpy(p, items, n * size);
    *cap = c;
    return p;
}

void jinja_arena_free(state *S) {
    while (S->arena) {
        ablock *next = S->arena->next;
        free(S->arena);
        S->arena = next;
    }
}

jstr jinja_strdup(state *S, const char *s, size_t n) {
    char *p = jinja_alloc(S, n + 1);
    if (n)
        memcpy(p, s, n);
    p[n] = 0;
    return (jstr){p, n};
}

void jinja_sb_put(state *S, sbuf *b, const char *s, size_t n) {
    b->p = jinja_grow(S, b->p, b->n, n, &b->cap, 1, 256);
    if (n)
        memcpy(b->p + b->n, s, n);
    b->n += n;
}

void jinja_sb_printf(state *S, sbuf *b, const char *fmt, ...) {
    char tmp[64];
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    jinja_sb_put(S, b, tmp, k < 0 ? 0 : (size_t)k < sizeof tmp ? (size_t)k : sizeof tmp - 1);
}

/* ---- values --------------------------------------------------------------------------- */

jlist *jinja_list_new(state *S, size_t cap) {
    jlist *l = jinja_zalloc(S, sizeof *l);
    if (cap) {
        l->items = jinja_alloc(S, cap * sizeof *l->items);
        l->cap = cap;
    }
    return l;
}

void jinja_list_push(state *S, jlist *l, jv v) {
    l->items = jinja_grow(S, l->items, l->n, 1, &l->cap, sizeof *l->items, 8);
    l->items[l->n++] = v;
}

jdict *jinja_dict_new(state *S) { return jinja_zalloc(S, sizeof(jdict)); }

/* FNV-1a: keys come from the template and its variables, so an input can make them collide;
 * jinja_dict_find charges every probe, and collisions cost steps, not a hang. */
static size_t key_hash(jstr k) {
    uint64_t h = 14695981039346656037u;
    for (size_t i = 0; i < k.n; i++)
        h = (h ^ (unsigned char)k.s[i]) * 1099511628211u;
    return (size_t)(h ^ (h >> 32));
}

enum { DICT_INDEX_FROM = 8 }; /* smaller dicts (scopes, messages) are scanned */

/* keys[i] == key, charged by the bytes compared when the lengths are equal. */
static int same_key(state *S, const jdict *d, size_t i, jstr key) {
    if (d->keys[i].n != key.n)
        return 0;
    jinja_step_bytes(S, S->line, key.n);
    return jstr_same(d->keys[i], key);
}

jv *jinja_dict_find(state *S, const jdict *d, jstr key) {
    if (!d->slots) {
        jinja_step(S, S->line, (int64_t)d->n + 1);
        for (size_t i = d->n; i-- > 0;)
            if (same_key(S, d, i, key))
                return &d->vals[i];
        return NULL;
    }
    jinja_step_bytes(S, S->line, key.n);
    const size_t mask = d->n_slots - 1;
    for (size_t h = key_hash(key) & mask;; h = (h + 1) & mask) {
        const uint32_t k = d->slots[h];
        jinja_step(S, S->line, 1);
        if (!k)
            return NULL;
        if (same_key(S, d, k - 1, key))
            return &d->vals[k - 1];
    }
}

static void index_key(jdict *d, size_t i) {
    const size_t mask = d->n_slots - 1;
    size_t h = key_hash(d->keys[i]) & mask;
    while (d->slots[h])
        h = (h + 1) & mask;
    d->slots[h] = (uint32_t)(i + 1);
}

void jinja_dict_set(state *S, jdict *d, jstr key, jv v) {
    jv *slot = jinja_dict_find(S, d, key);
    if (slot) {
        *slot = v;
        return;
    }
    if (d->n >= UINT32_MAX / 2)
        jinja_fail(S, ER_ERR_UNSUPPORTED, S->line, "a dict of more than %u keys", UINT32_MAX / 2);
    size_t cap = d->cap; /* keys and values grow together */
    d->keys = jinja_grow(S, d->keys, d->n, 1, &cap, sizeof *d->keys, 8);
    d->vals = jinja_grow(S, d->vals, d->n, 1, &d->cap, sizeof *d->vals, 8);
    d->keys[d->n] = key;
    d->vals[d->n++] = v;
    if (d->n >= DICT_INDEX_FROM && 2 * d->n > d->n_slots) { /* (re)build the index, at most half full */
        d->n_slots = d->n_slots ? 2 * d->n_slots : 4 * DICT_INDEX_FROM;
        d->slots = jinja_zalloc(S, d->n_slots * sizeof *d->slots);
        for (size_t i = 0; i < d->n; i++)
            index_key(d, i);
    } else if (d->slots) {
        index_key(d, d->n - 1);
    }
}

jlist *jinja_dict_items(state *S, const jdict *d) {
    jlist *l = jinja_list_new(S, d->n);
    for (size_t i = 0; i < d->n; i++) {
        jlist *pair = jinja_list_new(S, 2);
        pair->tuple = 1;
        jinja_list_push(S, pair, v_str(d->keys[i]));
        jinja_list_push(S, pair, d->vals[i]);
        jinja_list_push(S, l, v_list(pair));
    }
    return l;
}

const char *jinja_type_name(jv v) {
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

int jinja_truthy(jv v) {
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

int jinja_eq(state *S, int line, jv a, jv b) {
    jinja_step(S, line, 1);
    if (jv_is_num(a) && jv_is_num(b)) {
        if (a.t != J_FLOAT && b.t != J_FLOAT)
            return jv_int(a) == jv_int(b);
        return jv_num(a) == jv_num(b);
    }
    if (a.t != b.t)
        return 0;
    int eq = 1;
    switch (a.t) {
    case J_UNDEF:
    case J_NONE: return 1;
    case J_STR:
        jinja_step_bytes(S, line, a.s.n);
        return jstr_same(a.s, b.s);
    case J_LIST:
        if (a.l->n != b.l->n || a.l->tuple != b.l->tuple)
            return 0;
        jinja_enter(S, ER_ERR_INVALID_ARG, line, "values compared with ==");
        for (size_t i = 0; i < a.l->n && eq; i++)
            eq = jinja_eq(S, line, a.l->items[i], b.l->items[i]);
        jinja_leave(S);
        return eq;
    case J_DICT:
        if (a.d->ns || b.d->ns) /* jinja2's Namespace has no __eq__: identity */
            return a.d == b.d;
        if (a.d->n != b.d->n)
            return 0;
        jinja_enter(S, ER_ERR_INVALID_ARG, line, "values compared with ==");
        for (size_t i = 0; i < a.d->n && eq; i++) {
            const jv *o = jinja_dict_find(S, b.d, a.d->keys[i]);
            eq = o && jinja_eq(S, line, a.d->vals[i], *o);
        }
        jinja_leave(S);
        return eq;
    case J_MACRO: return a.macro == b.macro;
    case J_BUILTIN: return a.builtin == b.builtin;
    default: return 0;
    }
}

/* -1, 0, 1; fails (Python's TypeError) on values that have no order. */
int jinja_cmp(state *S, int line, jv a, jv b) {
    jinja_step(S, line, 1);
    if (jv_is_num(a) && jv_is_num(b)) {
        if (a.t != J_FLOAT && b.t != J_FLOAT) {
            const int64_t x = jv_int(a), y = jv_int(b);
            return x < y ? -1 : x > y;
        }
        return jv_num(a) < jv_num(b) ? -1 : jv_num(a) > jv_num(b);
    }
    if (a.t == J_STR && b.t == J_STR) {
        const size_t n = a.s.n < b.s.n ? a.s.n : b.s.n;
        jinja_step_bytes(S, line, n);
        const int c = n ? memcmp(a.s.s, b.s.s, n) : 0; /* UTF-8 byte order is code point order */
        return c ? (c < 0 ? -1 : 1) : a.s.n < b.s.n ? -1 : a.s.n > b.s.n;
    }
    if (a.t == J_LIST && b.t == J_LIST) {
        jinja_enter(S, ER_ERR_INVALID_ARG, line, "values compared with <");
        int c = 0;
        size_t i = 0;
        while (i < a.l->n && i < b.l->n && jinja_eq(S, line, a.l->items[i], b.l->items[i]))
            i++;
        if (i < a.l->n && i < b.l->n)
            c = jinja_cmp(S, line, a.l->items[i], b.l->items[i]);
        else
            c = a.l->n < b.l->n ? -1 : a.l->n > b.l->n;
        jinja_leave(S);
        return c;
    }
    jinja_fail(S, ER_ERR_INVALID_ARG, line, "cannot compare %s and %s", jinja_type_name(a), jinja_type_name(b));
}

/* Bottom-up: runs of 1, 2, 4, ... merged from idx into tmp and back; on a tie the left
 * run's element goes first, which keeps the sort stable. */
void jinja_sort(state *S, size_t *idx, size_t n, int (*less)(state *S, void *ctx, size_t a, size_t b), void *ctx) {
    if (n < 2)
        return;
    size_t *tmp = jinja_alloc(S, n * sizeof *tmp), *from = idx, *to = tmp;
    for (size_t width = 1; width < n; width *= 2) {
        for (size_t lo = 0; lo < n; lo += 2 * width) {
            const size_t mid = lo + width < n ? lo + width : n, hi = mid + width < n ? mid + width : n;
            size_t i = lo, j = mid, k = lo;
            while (i < mid && j < hi)
                to[k++] = less(S, ctx, from[j], from[i]) ? from[j++] : from[i++];
            while (i < mid)
                to[k++] = from[i++];
            while (j < hi)
                to[k++] = from[j++];
        }
        size_t *t = from;
        from = to;
        to = t;
    }
    if (from != idx)
        memcpy(idx, from, n * sizeof *idx);
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
        jinja_sb_put(S, b, "-", 1);
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
            jinja_sb_put(S, b, "0.", 2);
            for (int i = 0; i < -exp - 1; i++)
                jinja_sb_put(S, b, "0", 1);
            jinja_sb_put(S, b, digits, (size_t)nd);
        } else {
            for (int i = 0; i <= exp; i++)
                jinja_sb_put(S, b, i < nd ? &digits[i] : "0", 1);
            jinja_sb_put(S, b, ".", 1);
            if (nd > exp + 1)
                jinja_sb_put(S, b, digits + exp + 1, (size_t)(nd - exp - 1));
            else
                jinja_sb_put(S, b, "0", 1);
        }
    } else {
        jinja_sb_put(S, b, digits, 1);
        if (nd > 1) {
            jinja_sb_put(S, b, ".", 1);
            jinja_sb_put(S, b, digits + 1, (size_t)nd - 1);
        }
        jinja_sb_printf(S, b, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    }
}

/* The containers being printed, innermost first (see put_repr). */
typedef struct open_container {
    const void *p;
    const struct open_container *up;
    int n_ns; /* namespaces among them: without one there is no cycle to look for */
} open_container;

static void put_repr(state *S, sbuf *b, jv v, const open_container *up);

/* repr() of a string: single quotes unless it has ' and no ". */
static void put_str_repr(state *S, sbuf *b, jstr s) {
    const int dq = memchr(s.s, '\'', s.n) && !memchr(s.s, '"', s.n);
    const char q = dq ? '"' : '\'';
    jinja_sb_put(S, b, &q, 1);
    for (size_t i = 0; i < s.n; i++) {
        const unsigned char c = (unsigned char)s.s[i];
        if (c == '\\' || c == (unsigned char)q) {
            jinja_sb_put(S, b, "\\", 1);
            jinja_sb_put(S, b, &s.s[i], 1);
        } else if (c == '\n') {
            sb_puts(S, b, "\\n");
        } else if (c == '\r') {
            sb_puts(S, b, "\\r");
        } else if (c == '\t') {
            sb_puts(S, b, "\\t");
        } else if (c < 0x20 || c == 0x7f) {
            jinja_sb_printf(S, b, "\\x%02x", c);
        } else {
            jinja_sb_put(S, b, &s.s[i], 1);
        }
    }
    jinja_sb_put(S, b, &q, 1);
}

/* str(): what {{ v }} prints. */
void jinja_print(state *S, sbuf *b, jv v) {
    switch (v.t) {
    case J_UNDEF: break;
    case J_NONE: sb_puts(S, b, "None"); break;
    case J_BOOL: sb_puts(S, b, v.b ? "True" : "False"); break;
    case J_INT: jinja_sb_printf(S, b, "%lld", (long long)v.i); break;
    case J_FLOAT: put_float(S, b, v.f); break;
    case J_STR: jinja_sb_put(S, b, v.s.s, v.s.n); break;
    default: put_repr(S, b, v, NULL); break;
    }
}

/* repr(); `up` lists the containers being printed around v: one met again inside itself
 * prints as Python's reprlib guard prints it ([...], (...), {...}; a namespace's dict so
 * "<Namespace {...}>"), which ends the cycles that namespaces can make. */
static void put_repr(state *S, sbuf *b, jv v, const open_container *up) {
    jinja_step(S, S->line, 1);
    switch (v.t) {
    case J_STR: put_str_repr(S, b, v.s); break;
    case J_LIST:
    case J_DICT: { /* [a, b], (a,), {'k': v}, <Namespace {'k': v}> */
        const int dict = v.t == J_DICT;
        const size_t n = dict ? v.d->n : v.l->n;
        const open_container here = {dict ? (const void *)v.d : (const void *)v.l, up,
                                     (up ? up->n_ns : 0) + (dict && v.d->ns)};
        for (const open_container *o = up && up->n_ns ? up : NULL; o; o = o->up) {
            jinja_step(S, S->line, 1);
            if (o->p == here.p) {
                sb_puts(S, b, dict ? (v.d->ns ? "<Namespace {...}>" : "{...}") : v.l->tuple ? "(...)" : "[...]");
                return;
            }
        }
        jinja_enter(S, ER_ERR_INVALID_ARG, S->line, "values printed");
        sb_puts(S, b, dict ? (v.d->ns ? "<Namespace {" : "{") : v.l->tuple ? "(" : "[");
        for (size_t i = 0; i < n; i++) {
            if (i)
                sb_puts(S, b, ", ");
            if (dict) {
                put_str_repr(S, b, v.d->keys[i]);
                sb_puts(S, b, ": ");
            }
            put_repr(S, b, dict ? v.d->vals[i] : v.l->items[i], &here);
        }
        sb_puts(S, b, dict ? (v.d->ns ? "}>" : "}") : v.l->tuple ? (n == 1 ? ",)" : ")") : "]");
        jinja_leave(S);
        break;
    }
    case J_UNDEF: sb_puts(S, b, "Undefined"); break;
    case J_MACRO:
    case J_BUILTIN:
    case J_METHOD: sb_puts(S, b, "<function>"); break;
    case J_LOOP: sb_puts(S, b, "<LoopContext>"); break;
    default: jinja_print(S, b, v); break;
    }
}

jstr jinja_str(state *S, jv v) {
    if (v.t == J_STR)
        return v.s;
    sbuf b = {0};
    jinja_print(S, &b, v);
    return sb_str(&b);
}

/* ---- JSON ----------------------------------------------------------------------------- */

static void next_item(state *S, json_reader *r, json_item *it) {
    if (!json_next(r, it))
        jinja_fail(S, ER_ERR_INVALID_ARG, 0, "variables JSON: %s at byte %zu", r->error, r->error_at);
}

static jstr json_text(state *S, json_str s) {
    char *p = jinja_alloc(S, s.len + 1);
    json_decode(s, p);
    p[s.len] = 0;
    return (jstr){p, s.len};
}

/* The value `it` starts; for a container, its members up to its JSON_END. The reader's
 * depth limit bounds this recursion. A repeated key keeps its first place and its last
 * value, as Python's dict does. */
static jv from_json(state *S, json_reader *r, const json_item *it) {
    switch (it->kind) {
    case JSON_NULL: return v_none();
    case JSON_BOOL: return v_bool(it->boolean);
    case JSON_INT: return v_int(it->i);
    case JSON_FLOAT: return v_float(it->f);
    case JSON_STRING: return v_str(json_text(S, it->str));
    default: break;
    }
    const int object = it->kind == JSON_OBJECT;
    jlist *l = object ? NULL : jinja_list_new(S, 0);
    jdict *d = object ? jinja_dict_new(S) : NULL;
    json_item m;
    for (next_item(S, r, &m); m.kind != JSON_END; next_item(S, r, &m)) {
        const jv x = from_json(S, r, &m);
        if (object)
            jinja_dict_set(S, d, json_text(S, m.key), x);
        else
            jinja_list_push(S, l, x);
    }
    return object ? v_dict(d) : v_list(l);
}

jdict *jinja_read_json(state *S, const char *json, size_t n) {
    json_reader r;
    json_item it;
    json_init(&r, json, n, JINJA_MAX_JSON_DEPTH);
    next_item(S, &r, &it);
    const jv vars = from_json(S, &r, &it);
    next_item(S, &r, &it); /* the end of the text: nothing may follow the object */
    if (vars.t != J_DICT)
        jinja_fail(S, ER_ERR_INVALID_ARG, 0, "the variables must be a JSON object");
    return vars.d;
}

static void dump_string(state *S, sbuf *b, jstr s, int ensure_ascii) {
    const size_t n = json_quote(NULL, s.s, s.n, ensure_ascii);
    b->p = jinja_grow(S, b->p, b->n, n, &b->cap, 1, 256);
    b->n += json_quote(b->p + b->n, s.s, s.n, ensure_ascii);
}

static void dump_newline(state *S, sbuf *b, const jinja_json_opts *o, int level) {
    jinja_sb_put(S, b, "\n", 1);
    for (int i = 0; i < level; i++)
        jinja_sb_put(S, b, o->indent_str.s, o->indent_str.n);
}

static int key_less(state *S, void *ctx, size_t a, size_t b) {
    const jdict *d = ctx;
    return jinja_cmp(S, S->line, v_str(d->keys[a]), v_str(d->keys[b])) < 0;
}

/* The order json.dumps writes a dict's keys in: as inserted, or sorted. */
static size_t *key_order(state *S, const jdict *d, int sort_keys) {
    size_t *order = jinja_alloc(S, d->n * sizeof *order);
    for (size_t i = 0; i < d->n; i++)
        order[i] = i;
    if (sort_keys)
        jinja_sort(S, order, d->n, key_less, (void *)d);
    return order;
}

static void dump_json(state *S, int line, sbuf *b, jv v, const jinja_json_opts *o, int level) {
    jinja_step(S, line, 1);
    switch (v.t) {
    case J_NONE: sb_puts(S, b, "null"); break;
    case J_BOOL: sb_puts(S, b, v.b ? "true" : "false"); break;
    case J_INT: jinja_sb_printf(S, b, "%lld", (long long)v.i); break;
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
    case J_DICT: {
        if (v.t == J_DICT && v.d->ns)
            jinja_fail(S, ER_ERR_INVALID_ARG, line, "tojson: a namespace is not JSON serializable");
        const char *brackets = v.t == J_LIST ? "[]" : "{}";
        const size_t n = v.t == J_LIST ? v.l->n : v.d->n;
        if (!n) {
            jinja_sb_put(S, b, brackets, 2);
            break;
        }
        const size_t *order = v.t == J_DICT ? key_order(S, v.d, o->sort_keys) : NULL;
        jinja_enter(S, ER_ERR_INVALID_ARG, line, "tojson: values");
        jinja_sb_put(S, b, brackets, 1);
        for (size_t k = 0; k < n; k++) {
            if (k)
                jinja_sb_put(S, b, o->item_sep.s, o->item_sep.n);
            if (o->indent >= 0)
                dump_newline(S, b, o, level + 1);
            if (order) {
                dump_string(S, b, v.d->keys[order[k]], o->ensure_ascii);
                jinja_sb_put(S, b, o->key_sep.s, o->key_sep.n);
            }
            dump_json(S, line, b, order ? v.d->vals[order[k]] : v.l->items[k], o, level + 1);
        }
        if (o->indent >= 0)
            dump_newline(S, b, o, level);
        jinja_sb_put(S, b, brackets + 1, 1);
        jinja_leave(S);
        break;
    }
    default: jinja_fail(S, ER_ERR_INVALID_ARG, line, "tojson: Object of type %s is not JSON serializable", jinja_type_name(v));
    }
}

jstr jinja_tojson(state *S, int line, jv v, const jinja_json_opts *o) {
    sbuf out = {0};
    dump_json(S, line, &out, v, o, 0);
    return sb_str(&out);
}
