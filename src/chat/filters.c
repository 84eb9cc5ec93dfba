/*
 * filters.c - what a template can call by name: filters ({{ x | trim }}), tests
 * ({% if x is string %}), methods of str, dict and loop (x.strip(), d.items(),
 * loop.cycle()) and the global functions (range, namespace, dict, raise_exception,
 * strftime_now), with jinja2's semantics.
 *
 * Each kind is a table of name -> function, sorted by name (byte order) and searched with
 * bsearch; names that share one function (lstrip/rstrip, select/reject, ...) tell it
 * their variant through `mode`. jinja_check_tables (run by the unit tests) keeps the
 * tables sorted. A name missing from its table fails with ER_ERR_UNSUPPORTED naming it.
 */
#define _POSIX_C_SOURCE 200809L /* localtime_r */

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "chat/engine.h"
#include "tokenizer/unicode.h"

/* One call of a filter, test, method or global function. */
typedef struct call {
    state *S;
    int line;
    jstr name;     /* the name called, for messages */
    int mode;      /* the table entry's variant */
    const args *a; /* the arguments in parentheses (for a filter, after the value) */
} call;

typedef struct filter_entry {
    const char *name;
    jv (*fn)(const call *c, jv v);
    int mode;
} filter_entry;

/* Methods have the shape of filters: the object comes first. */
struct jinja_method {
    const char *name;
    jv (*fn)(const call *c, jv self);
    int mode;
};

typedef struct test_entry {
    const char *name;
    int (*fn)(const call *c, jv v, const jv *x); /* x: the first argument, or NULL */
    int mode;
    int needs_arg;
} test_entry;

typedef struct builtin_entry {
    const char *name;
    jv (*fn)(const call *c);
    int mode;
} builtin_entry;

/* Every table entry begins with its name: one comparison serves them all. */
static int by_name(const void *key, const void *entry) {
    const jstr *k = key;
    const char *name = *(const char *const *)entry;
    const size_t n = strlen(name);
    const int c = memcmp(k->s, name, k->n < n ? k->n : n);
    return c ? c : (k->n > n) - (k->n < n);
}

#define FIND(table, name) bsearch(&(name), table, sizeof table / sizeof table[0], sizeof table[0], by_name)

/* ---- tests ---------------------------------------------------------------------------- */

#define BIT(t) (1 << (t))
#define ALL_TYPES (BIT(J_LOOP + 1) - 1)

/* defined, none, string, ...: a test of the type alone; mode is the mask of the types
 * that pass (0 for escaped: nothing is marked safe here). */
static int t_type(const call *c, jv v, const jv *x) {
    (void)x;
    return (c->mode >> v.t) & 1;
}

static int t_mapping(const call *c, jv v, const jv *x) {
    (void)c, (void)x;
    return v.t == J_DICT && !v.d->ns;
}

static int t_bool(const call *c, jv v, const jv *x) { /* mode 1: true, 0: false */
    (void)x;
    return v.t == J_BOOL && (v.b != 0) == c->mode;
}

/* lower (mode 0), upper (1): some cased letter, and none of the other case (ASCII). */
static int t_case(const call *c, jv v, const jv *x) {
    (void)x;
    if (v.t != J_STR)
        return 0;
    jinja_step_bytes(c->S, c->line, v.s.n);
    int cased = 0;
    for (size_t i = 0; i < v.s.n; i++) {
        const char ch = v.s.s[i];
        if ((c->mode == 0 && ch >= 'A' && ch <= 'Z') || (c->mode == 1 && ch >= 'a' && ch <= 'z'))
            return 0;
        cased |= (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z');
    }
    return cased;
}

enum { EVEN, ODD, DIVISIBLEBY };

static int t_divisible(const call *c, jv v, const jv *x) {
    (void)x;
    if (v.t != J_INT && v.t != J_BOOL)
        jinja_fail(c->S, ER_ERR_INVALID_ARG, c->line, "test '%.*s' wants an integer, not %s", SHOWN(c->name), jinja_type_name(v));
    const int64_t i = jv_int(v);
    if (c->mode == DIVISIBLEBY) {
        const int64_t d = jinja_arg_int(c->S, c->a, 0, "num", 1);
        return d != 0 && (d == -1 || i % d == 0); /* INT64_MIN % -1 would trap */
    }
    return (i % 2 == 0) == (c->mode == EVEN);
}

static int t_sameas(const call *c, jv v, const jv *x) {
    (void)c;
    return (v.t == J_NONE && x->t == J_NONE) || (v.t == J_BOOL && x->t == J_BOOL && v.b == x->b) ||
           ((v.t == J_LIST || v.t == J_DICT) && v.t == x->t && v.l == x->l);
}

static int t_eq(const call *c, jv v, const jv *x) { /* mode 1: ne */
    return jinja_eq(c->S, c->line, v, *x) != c->mode;
}

enum { LT, LE, GT, GE };

static int t_order(const call *c, jv v, const jv *x) {
    const int k = jinja_cmp(c->S, c->line, v, *x);
    return c->mode == LT ? k < 0 : c->mode == LE ? k <= 0 : c->mode == GT ? k > 0 : k >= 0;
}

static int t_in(const call *c, jv v, const jv *x) { return jinja_contains(c->S, c->line, *x, v); }

static const test_entry tests[] = { /* sorted by name (bsearch), a line per initial */
    {"!=", t_eq, 1, 1}, {"<", t_order, LT, 1}, {"<=", t_order, LE, 1},
    {"==", t_eq, 0, 1}, {">", t_order, GT, 1}, {">=", t_order, GE, 1},
    {"boolean", t_type, BIT(J_BOOL), 0},
    {"callable", t_type, BIT(J_MACRO) | BIT(J_BUILTIN) | BIT(J_METHOD), 0},
    {"defined", t_type, ALL_TYPES & ~BIT(J_UNDEF), 0}, {"divisibleby", t_divisible, DIVISIBLEBY, 0},
    {"eq", t_eq, 0, 1}, {"equalto", t_eq, 0, 1}, {"escaped", t_type, 0, 0}, {"even", t_divisible, EVEN, 0},
    {"false", t_bool, 0, 0}, {"float", t_type, BIT(J_FLOAT), 0},
    {"ge", t_order, GE, 1}, {"greaterthan", t_order, GT, 1}, {"gt", t_order, GT, 1},
    {"in", t_in, 0, 1}, {"integer", t_type, BIT(J_INT), 0},
    {"iterable", t_type, BIT(J_STR) | BIT(J_LIST) | BIT(J_DICT) | BIT(J_UNDEF), 0},
    {"le", t_order, LE, 1}, {"lessthan", t_order, LT, 1}, {"lower", t_case, 0, 0}, {"lt", t_order, LT, 1},
    {"mapping", t_mapping, 0, 0},
    {"ne", t_eq, 1, 1}, {"none", t_type, BIT(J_NONE), 0}, {"number", t_type, BIT(J_INT) | BIT(J_FLOAT) | BIT(J_BOOL), 0},
    {"odd", t_divisible, ODD, 0},
    {"sameas", t_sameas, 0, 1}, {"sequence", t_type, BIT(J_STR) | BIT(J_LIST) | BIT(J_DICT), 0},
    {"string", t_type, BIT(J_STR), 0},
    {"true", t_bool, 1, 0},
    {"undefined", t_type, BIT(J_UNDEF), 0}, {"upper", t_case, 1, 0},
};

int jinja_test(state *S, int line, jstr name, jv v, const args *a) {
    const test_entry *t = FIND(tests, name);
    if (!t)
        jinja_fail(S, ER_ERR_UNSUPPORTED, line, "test '%.*s' is not supported", SHOWN(name));
    const jv *x = jinja_arg(a, 0, NULL);
    if (t->needs_arg && !x)
        jinja_fail(S, ER_ERR_INVALID_ARG, line, "test '%.*s' needs an argument", SHOWN(name));
    jinja_step(S, line, 1);
    const call c = {S, line, name, t->mode, a};
    return t->fn(&c, v, x);
}

/* ---- filters -------------------------------------------------------------------------- */

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

/* attribute="a.b" or an integer index, as jinja2's make_attrgetter. */
static jv attr_path(state *S, int line, jv v, jstr path) {
    size_t i = 0;
    while (i <= path.n) {
        size_t e = i;
        while (e < path.n && path.s[e] != '.')
            e++;
        const jstr part = {path.s + i, e - i};
        int64_t index = 0; /* all digits: an index; one beyond int64 is out of range anyway */
        int all_digits = part.n > 0;
        for (size_t k = 0; k < part.n && all_digits; k++) {
            all_digits = part.s[k] >= '0' && part.s[k] <= '9';
            index = index > (INT64_MAX - 9) / 10 ? INT64_MAX : index * 10 + (part.s[k] - '0');
        }
        v = jinja_get_item(S, line, v, all_digits ? v_int(index) : v_str(part));
        i = e + 1;
    }
    return v;
}

/* The attribute= argument `i` when it is a string, else NULL. */
static const jstr *attribute_arg(const args *a, size_t i) {
    const jv *attribute = jinja_arg(a, i, "attribute");
    return attribute && attribute->t == J_STR ? &attribute->s : NULL;
}

/* The key a sort or min/max compares an item by: its attribute, lowercased (ASCII) unless
 * case_sensitive. */
static jv sort_key(state *S, int line, jv x, int case_sensitive, const jstr *attribute) {
    if (attribute)
        x = attr_path(S, line, x, *attribute);
    return !case_sensitive && x.t == J_STR ? v_str(jinja_case(S, x.s, CASE_LOWER)) : x;
}

static int sort_less(state *S, int line, jv x, jv y, int case_sensitive, const jstr *attribute) {
    return jinja_cmp(S, line, sort_key(S, line, x, case_sensitive, attribute), sort_key(S, line, y, case_sensitive, attribute)) < 0;
}

typedef struct sort_ctx {
    const jv *keys; /* (n) each item's key, computed once as Python's key= does */
    int line, reverse;
} sort_ctx;

static int key_less(state *S, void *ctx, size_t a, size_t b) {
    const sort_ctx *k = ctx;
    return k->reverse ? jinja_cmp(S, k->line, k->keys[b], k->keys[a]) < 0 : jinja_cmp(S, k->line, k->keys[a], k->keys[b]) < 0;
}

/* Python's sorted(): stable, also with reverse (equal items keep their order). */
static jlist *sorted(state *S, int line, jlist *in, int reverse, int case_sensitive, const jstr *attribute) {
    jv *keys = jinja_alloc(S, (in->n ? in->n : 1) * sizeof *keys);
    size_t *order = jinja_alloc(S, (in->n ? in->n : 1) * sizeof *order);
    for (size_t i = 0; i < in->n; i++) {
        keys[i] = sort_key(S, line, in->items[i], case_sensitive, attribute);
        order[i] = i;
    }
    sort_ctx k = {keys, line, reverse};
    jinja_sort(S, order, in->n, key_less, &k);
    jlist *l = jinja_list_new(S, in->n);
    for (size_t i = 0; i < in->n; i++)
        jinja_list_push(S, l, in->items[order[i]]);
    return l;
}

static jv f_default(const call *c, jv v) {
    const jv *def = jinja_arg(c->a, 0, "default_value");
    if (v.t == J_UNDEF || (jinja_arg_bool(c->a, 1, "boolean", 0) && !jinja_truthy(v)))
        return def ? *def : v_str(cstr(""));
    return v;
}

static jv f_safe(const call *c, jv v) {
    (void)c;
    return v;
}

static jv f_string(const call *c, jv v) { return v_str(jinja_str(c->S, v)); }

static jv f_tojson(const call *c, jv v) {
    const args *a = c->a;
    jinja_json_opts o = {-1, {"", 0}, cstr(", "), cstr(": "), jinja_arg_bool(a, 3, "sort_keys", 0), jinja_arg_bool(a, 0, "ensure_ascii", 0)};
    const jv *indent = jinja_arg(a, 1, "indent");
    if (indent && indent->t != J_NONE) {
        o.item_sep = cstr(",");
        if (indent->t == J_STR) {
            o.indent = 1;
            o.indent_str = indent->s;
        } else {
            o.indent = (int)jinja_arg_int(c->S, a, 1, "indent", 0);
            o.indent_str = jinja_spaces(c->S, o.indent);
        }
    }
    const jv *seps = jinja_arg(a, 2, "separators");
    if (seps && seps->t == J_LIST && seps->l->n == 2 && seps->l->items[0].t == J_STR && seps->l->items[1].t == J_STR) {
        o.item_sep = seps->l->items[0].s;
        o.key_sep = seps->l->items[1].s;
    }
    return v_str(jinja_tojson(c->S, c->line, v, &o));
}

static jv f_length(const call *c, jv v) { return v_int((int64_t)jinja_length(c->S, c->line, v)); }

static jv f_list(const call *c, jv v) { return v_list(jinja_iter(c->S, c->line, v)); }

static jv f_first_last(const call *c, jv v) { /* mode 0: first, 1: last */
    if (v.t == J_STR && v.s.n) { /* one character, without listing them all */
        jinja_step_bytes(c->S, c->line, v.s.n); /* a "character" may be a long invalid run */
        size_t b = 0;
        if (c->mode == 0)
            b = jinja_char_at(v.s, 0);
        else
            for (b = v.s.n - 1; b > 0 && ((unsigned char)v.s.s[b] & 0xc0) == 0x80;)
                b--;
        if (b < v.s.n && ((unsigned char)v.s.s[b] & 0xc0) != 0x80) { /* else no character at all */
            const jstr rest = {v.s.s + b, v.s.n - b};
            return v_str((jstr){rest.s, jinja_char_at(rest, 1)});
        }
    }
    jlist *l = jinja_iter(c->S, c->line, v);
    return l->n ? l->items[c->mode == 0 ? 0 : l->n - 1] : v_undef(c->name);
}

static jv f_reverse(const call *c, jv v) {
    if (v.t == J_STR) {
        size_t n;
        size_t *off = jinja_char_offsets(c->S, v.s, &n);
        sbuf out = {0};
        for (size_t i = n; i-- > 0;)
            jinja_sb_put(c->S, &out, v.s.s + off[i], off[i + 1] - off[i]);
        return v_str(sb_str(&out));
    }
    jlist *in = jinja_iter(c->S, c->line, v), *l = jinja_list_new(c->S, in->n);
    for (size_t i = in->n; i-- > 0;)
        jinja_list_push(c->S, l, in->items[i]);
    return v_list(l);
}

static jv f_join(const call *c, jv v) {
    const jstr sep = jinja_arg_str(c->S, c->a, 0, "d", "");
    const jstr *attribute = attribute_arg(c->a, 1);
    jlist *l = jinja_iter(c->S, c->line, v);
    sbuf out = {0};
    for (size_t i = 0; i < l->n; i++) {
        jinja_step(c->S, c->line, 1);
        if (i)
            jinja_sb_put(c->S, &out, sep.s, sep.n);
        jinja_print(c->S, &out, attribute ? attr_path(c->S, c->line, l->items[i], *attribute) : l->items[i]);
    }
    return v_str(sb_str(&out));
}

static jv f_items(const call *c, jv v) {
    if (v.t == J_UNDEF)
        return v_list(jinja_list_new(c->S, 0));
    if (v.t != J_DICT)
        jinja_fail(c->S, ER_ERR_INVALID_ARG, c->line, "items: expected a mapping, not %s", jinja_type_name(v));
    return v_list(jinja_dict_items(c->S, v.d));
}

static jv f_dictsort(const call *c, jv v) {
    const jv items = f_items(c, v);
    const jstr by = jinja_arg_str(c->S, c->a, 1, "by", "key");
    const jstr key = cstr(jstr_eq(by, "value") ? "1" : "0");
    return v_list(sorted(c->S, c->line, items.l, jinja_arg_bool(c->a, 2, "reverse", 0), jinja_arg_bool(c->a, 0, "case_sensitive", 0), &key));
}

static jv f_sort(const call *c, jv v) {
    const jstr *attribute = attribute_arg(c->a, 2);
    return v_list(sorted(c->S, c->line, jinja_iter(c->S, c->line, v), jinja_arg_bool(c->a, 0, "reverse", 0),
                         jinja_arg_bool(c->a, 1, "case_sensitive", 0), attribute));
}

/* The key of a number or None in unique's hash set: equal numbers (1, 1.0, True) get the
 * same text, as they have the same hash in Python. A NaN gets none (NULL): it equals
 * nothing, so every NaN is kept. */
static const char *hash_text(jv key, char *buf, size_t cap) {
    if (key.t == J_NONE)
        return "None";
    if (key.t == J_FLOAT && isnan(key.f))
        return NULL;
    if (key.t == J_FLOAT && !(key.f == floor(key.f) && key.f >= -9223372036854775808.0 && key.f < 9223372036854775808.0))
        snprintf(buf, cap, "f%.17g", key.f);
    else
        snprintf(buf, cap, "i%lld", (long long)(key.t == J_FLOAT ? (int64_t)key.f : jv_int(key)));
    return buf;
}

/* jinja2's unique: the first item of each key (case-insensitive unless case_sensitive). Keys
 * that Python hashes (strings, numbers, None) are looked up in a hash set, the others
 * (which Python refuses as unhashable, but for tuples) compared with ==. */
static jv f_unique(const call *c, jv v) {
    state *S = c->S;
    const int case_sensitive = jinja_arg_bool(c->a, 0, "case_sensitive", 0);
    const jstr *attribute = attribute_arg(c->a, 1);
    jlist *in = jinja_iter(S, c->line, v), *l = jinja_list_new(S, 0), *other_keys = jinja_list_new(S, 0);
    jdict *strings = jinja_dict_new(S), *numbers = jinja_dict_new(S);
    for (size_t i = 0; i < in->n; i++) {
        const jv key = sort_key(S, c->line, in->items[i], case_sensitive, attribute);
        char buf[40];
        const char *text = jv_is_num(key) || key.t == J_NONE ? hash_text(key, buf, sizeof buf) : NULL;
        jdict *set = key.t == J_STR ? strings : text ? numbers : NULL;
        const jstr k = key.t == J_STR ? key.s : text ? jinja_strdup(S, text, strlen(text)) : cstr("");
        int seen = 0;
        if (set) {
            seen = jinja_dict_find(S, set, k) != NULL;
            if (!seen)
                jinja_dict_set(S, set, k, v_none());
        } else if (!(key.t == J_FLOAT && isnan(key.f))) {
            for (size_t j = 0; j < other_keys->n && !seen; j++)
                seen = jinja_eq(S, c->line, other_keys->items[j], key);
            if (!seen)
                jinja_list_push(S, other_keys, key);
        }
        if (!seen)
            jinja_list_push(S, l, in->items[i]);
    }
    return v_list(l);
}

static jv f_min_max(const call *c, jv v) { /* mode 0: min, 1: max */
    jlist *l = jinja_iter(c->S, c->line, v);
    if (!l->n)
        return v_undef(c->name);
    jv best = l->items[0];
    for (size_t i = 1; i < l->n; i++)
        if (c->mode == 0 ? sort_less(c->S, c->line, l->items[i], best, 0, NULL) : sort_less(c->S, c->line, best, l->items[i], 0, NULL))
            best = l->items[i];
    return best;
}

static jv f_sum(const call *c, jv v) {
    const jstr *attribute = attribute_arg(c->a, 0);
    const jv *start = jinja_arg(c->a, 1, "start");
    jv total = start ? *start : v_int(0);
    jlist *l = jinja_iter(c->S, c->line, v);
    for (size_t i = 0; i < l->n; i++)
        total = jinja_binop(c->S, c->line, cstr("+"), total, attribute ? attr_path(c->S, c->line, l->items[i], *attribute) : l->items[i]);
    return total;
}

static jv f_map(const call *c, jv v) {
    state *S = c->S;
    const jv *attribute = jinja_arg(c->a, 0, NULL) ? NULL : jinja_arg(c->a, 99, "attribute");
    jlist *in = jinja_iter(S, c->line, v), *l = jinja_list_new(S, in->n);
    if (attribute) {
        const jv *def = jinja_arg(c->a, 99, "default");
        for (size_t i = 0; i < in->n; i++) {
            jv x = attr_path(S, c->line, in->items[i], jinja_str(S, *attribute));
            jinja_list_push(S, l, x.t == J_UNDEF && def ? *def : x);
        }
        return v_list(l);
    }
    const jv *fname = jinja_arg(c->a, 0, NULL);
    if (!fname || fname->t != J_STR)
        jinja_fail(S, ER_ERR_INVALID_ARG, c->line, "map: wants a filter name or attribute=");
    const args rest = args_from(c->a, 1);
    for (size_t i = 0; i < in->n; i++)
        jinja_list_push(S, l, jinja_filter(S, c->line, fname->s, in->items[i], &rest));
    return v_list(l);
}

enum { KEEP = 1, BY_ATTR = 2 }; /* select: KEEP, reject: 0, selectattr: KEEP | BY_ATTR, ... */

static jv f_select(const call *c, jv v) {
    state *S = c->S;
    const int by_attr = (c->mode & BY_ATTR) != 0, keep = (c->mode & KEEP) != 0;
    const jv *attribute = by_attr ? jinja_arg(c->a, 0, NULL) : NULL;
    if (by_attr && (!attribute || attribute->t != J_STR))
        jinja_fail(S, ER_ERR_INVALID_ARG, c->line, "%.*s: wants an attribute name", SHOWN(c->name));
    const jv *tname = jinja_arg(c->a, by_attr ? 1 : 0, NULL);
    const args rest = args_from(c->a, by_attr ? 2 : 1);
    jlist *in = jinja_iter(S, c->line, v), *l = jinja_list_new(S, 0);
    for (size_t i = 0; i < in->n; i++) {
        const jv item = by_attr ? attr_path(S, c->line, in->items[i], attribute->s) : in->items[i];
        int ok;
        if (!tname)
            ok = jinja_truthy(item);
        else if (tname->t != J_STR)
            jinja_fail(S, ER_ERR_INVALID_ARG, c->line, "%.*s: the test must be named by a string", SHOWN(c->name));
        else
            ok = jinja_test(S, c->line, tname->s, item, &rest);
        if (ok == keep)
            jinja_list_push(S, l, in->items[i]);
    }
    return v_list(l);
}

static jv f_attr(const call *c, jv v) { return jinja_get_attr(c->S, c->line, v, jinja_arg_str(c->S, c->a, 0, "name", "")); }

/* s without its surrounding white space, as a C string in tmp (64 bytes): 0 when that is
 * empty or does not fit, as int() and float() of such a string fail. */
static int number_text(state *S, int line, jstr s, char *tmp) {
    jinja_step_bytes(S, line, s.n);
    const jstr t = jinja_strip(s, NULL, 1, 1);
    if (t.n == 0 || t.n >= 64)
        return 0;
    memcpy(tmp, t.s, t.n);
    tmp[t.n] = 0;
    return 1;
}

/* A float's integer part as Python's int() gives it, which past int64 is a big int: those
 * fail here. NaN has none: *ok = 0 (a ValueError, which the int filter turns into its
 * default). */
static int64_t float_to_int(const call *c, double f, int *ok) {
    *ok = !isnan(f);
    if (!*ok)
        return 0;
    if (isinf(f))
        jinja_fail(c->S, ER_ERR_INVALID_ARG, c->line, "int: cannot convert float infinity to integer");
    if (!(f >= -9223372036854775808.0 && f < 9223372036854775808.0)) /* [-2^63, 2^63) */
        jinja_fail(c->S, ER_ERR_UNSUPPORTED, c->line, "int: %.17g is beyond 64-bit integers", f);
    return (int64_t)f;
}

/* jinja2's do_int: int(value), else int(float(value)); a ValueError or TypeError (and in
 * the second, an OverflowError) gives the default. */
static jv f_int(const call *c, jv v) {
    const int64_t def = jinja_arg_int(c->S, c->a, 0, "default", 0);
    char tmp[64], *e;
    int ok;
    if (v.t == J_INT)
        return v;
    if (v.t == J_BOOL)
        return v_int(v.b);
    if (v.t == J_FLOAT) {
        const int64_t i = float_to_int(c, v.f, &ok);
        return v_int(ok ? i : def);
    }
    if (v.t != J_STR || !number_text(c->S, c->line, v.s, tmp))
        return v_int(def);
    errno = 0;
    const long long i = strtoll(tmp, &e, 10);
    if (!*e) {
        if (errno == ERANGE)
            jinja_fail(c->S, ER_ERR_UNSUPPORTED, c->line, "int: %s is beyond 64-bit integers", tmp);
        return v_int(i);
    }
    const double f = strtod(tmp, &e);
    if (*e || !isfinite(f)) /* int(float('inf')) is an OverflowError: the default */
        return v_int(def);
    const int64_t k = float_to_int(c, f, &ok);
    return v_int(ok ? k : def);
}

static jv f_float(const call *c, jv v) {
    char tmp[64], *e;
    if (jv_is_num(v))
        return v_float(jv_num(v));
    if (v.t == J_STR && number_text(c->S, c->line, v.s, tmp)) {
        const double f = strtod(tmp, &e);
        if (!*e)
            return v_float(f);
    }
    const jv *def = jinja_arg(c->a, 0, "default");
    return def ? *def : v_float(0.0);
}

static jv f_abs(const call *c, jv v) {
    if (v.t == J_INT) {
        if (v.i == INT64_MIN)
            jinja_fail(c->S, ER_ERR_UNSUPPORTED, c->line, "integer overflow in abs (integers here are 64-bit)");
        return v_int(v.i < 0 ? -v.i : v.i);
    }
    if (jv_is_num(v))
        return v.t == J_BOOL ? v_int(v.b) : v_float(fabs(v.f));
    jinja_fail(c->S, ER_ERR_INVALID_ARG, c->line, "bad operand type for abs(): '%s'", jinja_type_name(v));
}

/* Python's round(x, nd) of an int: x itself for nd >= 0, else the nearest multiple of
 * 10^-nd, a half to the even multiple. */
static int64_t round_int(const call *c, int64_t x, int64_t nd) {
    if (nd >= 0)
        return x;
    if (nd < -19) /* |x| < 10^19 / 2 */
        return 0;
    int64_t q, r, m = 1, out;
    if (nd == -19) { /* 10^19 is past int64: only 0 or an overflow */
        q = x > 5000000000000000000 ? 1 : x < -5000000000000000000 ? -1 : 0;
        if (q)
            jinja_fail(c->S, ER_ERR_UNSUPPORTED, c->line, "integer overflow in round (integers here are 64-bit)");
        return 0;
    }
    for (int64_t k = 0; k < -nd; k++)
        m *= 10;
    q = x / m;
    r = x % m;
    if (r < 0) { /* floor division, as Python's divmod */
        r += m;
        q--;
    }
    if (r > m - r || (r == m - r && (q & 1)))
        q++;
    if (__builtin_mul_overflow(q, m, &out))
        jinja_fail(c->S, ER_ERR_UNSUPPORTED, c->line, "integer overflow in round (integers here are 64-bit)");
    return out;
}

/* Python's round(x, nd) of a float: the exact binary value rounded to nd decimals, a half
 * to even, as its _Py_dg_dtoa (mode 3) does. glibc prints a double exactly and rounds %.Nf
 * so; for nd < 0 the exact digits of the integer part are rounded here. */
static double round_float(const call *c, double x, int64_t nd) {
    if (!isfinite(x) || x == 0 || nd > 323)
        return x;
    if (nd < -308)
        return copysign(0.0, x);
    char buf[720]; /* 309 integer digits, '.', 323 decimals; or the rounded digits, "e308" */
    if (nd >= 0) {
        snprintf(buf, sizeof buf, "%.*f", (int)nd, x);
        return strtod(buf, NULL);
    }
    const double ip = trunc(x), frac = x - ip; /* exact */
    const int k = (int)-nd;
    int n = snprintf(buf, sizeof buf, "%.0f", fabs(ip));
    if (n <= k) { /* fewer than k + 1 digits: zeros in front, so that one is kept */
        memmove(buf + (k + 1 - n), buf, (size_t)n + 1);
        memset(buf, '0', (size_t)(k + 1 - n));
        n = k + 1;
    }
    const int cut = n - k; /* the kept digits: buf[0..cut) */
    int rest = frac != 0;
    for (int i = cut + 1; i < n; i++)
        rest |= buf[i] != '0';
    if (buf[cut] > '5' || (buf[cut] == '5' && (rest || (buf[cut - 1] - '0') % 2 == 1))) {
        int i = cut - 1;
        for (; i >= 0 && buf[i] == '9'; i--)
            buf[i] = '0';
        if (i >= 0) {
            buf[i]++;
        } else { /* 99.. -> 100..: one more digit */
            memmove(buf + 1, buf, (size_t)n + 1);
            buf[0] = '1';
            n++;
        }
    }
    snprintf(buf + (n - k), sizeof buf - (size_t)(n - k), "e%d", k);
    const double r = copysign(strtod(buf, NULL), x);
    if (isinf(r))
        jinja_fail(c->S, ER_ERR_INVALID_ARG, c->line, "round: rounded value too large to represent");
    return r;
}

/* jinja2's do_round: "common" is Python's round(value, precision) (an int stays an int);
 * ceil and floor scale by 10^precision. */
static jv f_round(const call *c, jv v) {
    const int64_t prec = jinja_arg_int(c->S, c->a, 0, "precision", 0);
    const jstr method = jinja_arg_str(c->S, c->a, 1, "method", "common");
    const int common = jstr_eq(method, "common"), up = jstr_eq(method, "ceil");
    if (!common && !up && !jstr_eq(method, "floor"))
        jinja_fail(c->S, ER_ERR_INVALID_ARG, c->line, "round: method must be common, ceil or floor");
    if (!jv_is_num(v))
        jinja_fail(c->S, ER_ERR_INVALID_ARG, c->line, "round: type %s doesn't define __round__ method", jinja_type_name(v));
    if (common)
        return v.t == J_FLOAT ? v_float(round_float(c, v.f, prec)) : v_int(round_int(c, jv_int(v), prec));
    const double scale = pow(10.0, (double)prec), x = jv_num(v) * scale;
    if (!isfinite(x))
        jinja_fail(c->S, ER_ERR_INVALID_ARG, c->line, "round: cannot convert float %s to integer", isnan(x) ? "NaN" : "infinity");
    return v_float((up ? ceil(x) : floor(x)) / scale);
}

/* The string filters convert the value with str() first. */

/* strip, charged at most what it can cost: each code point looked at is compared with
 * each of chars (Python's strip(chars) is so too). */
static jstr strip(const call *c, jstr s, const jv *chars, int left, int right) {
    const jstr *set = chars && chars->t == J_STR ? &chars->s : NULL;
    const size_t per = set && set->n ? set->n : 1;
    jinja_step_bytes(c->S, c->line, s.n > SIZE_MAX / per ? SIZE_MAX : s.n * per);
    return jinja_strip(s, set, left, right);
}

static jv f_trim(const call *c, jv v) {
    return v_str(strip(c, jinja_str(c->S, v), jinja_arg(c->a, 0, "chars"), 1, 1));
}

static jv f_case(const call *c, jv v) { return v_str(jinja_case(c->S, jinja_str(c->S, v), c->mode)); }

/* replace(old, new[, count]), the filter and the method. The arguments are checked last
 * to first, as they always were (a bad count is reported before a bad old). */
static jv replace(const call *c, jstr s) {
    const int64_t count = jinja_arg_int(c->S, c->a, 2, "count", -1);
    const jstr new_s = jinja_arg_str(c->S, c->a, 1, "new", ""), old = jinja_arg_str(c->S, c->a, 0, "old", "");
    return v_str(jinja_replace(c->S, s, old, new_s, count));
}

static jv f_replace(const call *c, jv v) { return replace(c, jinja_str(c->S, v)); }

static jv f_escape(const call *c, jv v) {
    const jstr s = jinja_str(c->S, v);
    sbuf out = {0};
    for (size_t i = 0; i < s.n; i++) {
        const char ch = s.s[i];
        const char *rep = ch == '&' ? "&amp;" : ch == '<' ? "&lt;" : ch == '>' ? "&gt;" : ch == '"' ? "&#34;" : ch == '\'' ? "&#39;" : NULL;
        if (rep)
            sb_puts(c->S, &out, rep);
        else
            jinja_sb_put(c->S, &out, &ch, 1);
    }
    return v_str(sb_str(&out));
}

static jv f_indent(const call *c, jv v) {
    state *S = c->S;
    const jstr s = jinja_str(S, v);
    const jv *w = jinja_arg(c->a, 0, "width");
    const jstr pad = w && w->t == J_STR ? w->s : jinja_spaces(S, w ? jinja_arg_int(S, c->a, 0, "width", 4) : 4);
    const int first = jinja_arg_bool(c->a, 1, "first", 0), blank = jinja_arg_bool(c->a, 2, "blank", 0);
    sbuf out = {0};
    size_t i = 0;
    int line_no = 0;
    while (i <= s.n) {
        size_t e = i;
        while (e < s.n && s.s[e] != '\n')
            e++;
        const int is_blank = jinja_strip((jstr){s.s + i, e - i}, NULL, 1, 1).n == 0;
        if ((line_no > 0 || first) && (blank || !is_blank) && !(e == s.n && i == s.n && line_no > 0))
            jinja_sb_put(S, &out, pad.s, pad.n);
        jinja_sb_put(S, &out, s.s + i, e - i);
        if (e < s.n)
            jinja_sb_put(S, &out, "\n", 1);
        i = e + 1;
        line_no++;
    }
    return v_str(sb_str(&out));
}

static jv f_wordcount(const call *c, jv v) { return v_int((int64_t)jinja_split(c->S, jinja_str(c->S, v), NULL, -1, 0).l->n); }

static const filter_entry filters[] = { /* sorted by name (bsearch), a line per initial */
    {"abs", f_abs, 0}, {"attr", f_attr, 0},
    {"capitalize", f_case, CASE_CAPITALIZE}, {"count", f_length, 0},
    {"d", f_default, 0}, {"default", f_default, 0}, {"dictsort", f_dictsort, 0},
    {"e", f_escape, 0}, {"escape", f_escape, 0},
    {"first", f_first_last, 0}, {"float", f_float, 0}, {"forceescape", f_escape, 0},
    {"indent", f_indent, 0}, {"int", f_int, 0}, {"items", f_items, 0},
    {"join", f_join, 0},
    {"last", f_first_last, 1}, {"length", f_length, 0}, {"list", f_list, 0}, {"lower", f_case, CASE_LOWER},
    {"map", f_map, 0}, {"max", f_min_max, 1}, {"min", f_min_max, 0},
    {"reject", f_select, 0}, {"rejectattr", f_select, BY_ATTR}, {"replace", f_replace, 0}, {"reverse", f_reverse, 0},
    {"round", f_round, 0},
    {"safe", f_safe, 0}, {"select", f_select, KEEP}, {"selectattr", f_select, KEEP | BY_ATTR}, {"sort", f_sort, 0},
    {"string", f_string, 0}, {"sum", f_sum, 0},
    {"title", f_case, CASE_TITLE}, {"tojson", f_tojson, 0}, {"trim", f_trim, 0},
    {"unique", f_unique, 0}, {"upper", f_case, CASE_UPPER},
    {"wordcount", f_wordcount, 0},
};

jv jinja_filter(state *S, int line, jstr name, jv v, const args *a) {
    const filter_entry *f = FIND(filters, name);
    if (!f) /* "format" too: printf-style formatting is not implemented */
        jinja_fail(S, ER_ERR_UNSUPPORTED, line, "filter '%.*s' is not supported", SHOWN(name));
    jinja_step(S, line, 1);
    const call c = {S, line, name, f->mode, a};
    return f->fn(&c, v);
}

/* ---- methods -------------------------------------------------------------------------- */

static jv m_cycle(const call *c, jv self) {
    if (!c->a->n_pos)
        jinja_fail(c->S, ER_ERR_INVALID_ARG, c->line, "loop.cycle() needs at least one value");
    return *jinja_arg(c->a, self.loop->index0 % c->a->n_pos, NULL);
}

static jv m_get(const call *c, jv self) {
    const jv *def = jinja_arg(c->a, 1, "default");
    const jstr key = jinja_arg_str(c->S, c->a, 0, "key", "");
    const jv *v = jinja_dict_find(c->S, self.d, key);
    return v ? *v : def ? *def : v_none();
}

static jv m_items(const call *c, jv self) { return v_list(jinja_dict_items(c->S, self.d)); }

static jv m_keys_values(const call *c, jv self) { /* mode 0: keys, 1: values */
    jlist *l = jinja_list_new(c->S, self.d->n);
    for (size_t i = 0; i < self.d->n; i++)
        jinja_list_push(c->S, l, c->mode == 0 ? v_str(self.d->keys[i]) : self.d->vals[i]);
    return v_list(l);
}

static jv m_startswith(const call *c, jv self) { /* mode 0: startswith, 1: endswith */
    const jstr s = self.s;
    const jv *p = jinja_arg(c->a, 0, NULL);
    if (!p)
        jinja_fail(c->S, ER_ERR_INVALID_ARG, c->line, "%.*s() takes at least 1 argument", SHOWN(c->name));
    const jv *alts = p->t == J_LIST ? p->l->items : p;
    const size_t n_alts = p->t == J_LIST ? p->l->n : 1;
    for (size_t k = 0; k < n_alts; k++) {
        jinja_step(c->S, c->line, 1);
        if (alts[k].t != J_STR)
            jinja_fail(c->S, ER_ERR_INVALID_ARG, c->line, "%.*s first arg must be str or a tuple of str, not %s", SHOWN(c->name),
                       jinja_type_name(alts[k]));
        const jstr x = alts[k].s;
        jinja_step_bytes(c->S, c->line, x.n);
        if (x.n <= s.n && (x.n == 0 || !memcmp(c->mode == 0 ? s.s : s.s + s.n - x.n, x.s, x.n)))
            return v_bool(1);
    }
    return v_bool(0);
}

enum { LEFT = 1, RIGHT = 2 };

static jv m_strip(const call *c, jv self) {
    return v_str(strip(c, self.s, jinja_arg(c->a, 0, "chars"), c->mode & LEFT, c->mode & RIGHT));
}

static jv m_split(const call *c, jv self) { /* mode 1: rsplit */
    const jv *sep = jinja_arg(c->a, 0, "sep");
    return jinja_split(c->S, self.s, sep && sep->t == J_STR ? &sep->s : NULL, jinja_arg_int(c->S, c->a, 1, "maxsplit", -1), c->mode);
}

static jv m_case(const call *c, jv self) { return v_str(jinja_case(c->S, self.s, c->mode)); }

static jv m_replace(const call *c, jv self) { return replace(c, self.s); }

enum { FIND, RFIND, INDEX, COUNT };

/* find, rfind, index, count; the character index of a match is counted on from the one
 * before, so that count() stays linear. */
static jv m_find(const call *c, jv self) {
    const jstr s = self.s, sub = jinja_arg_str(c->S, c->a, 0, "sub", "");
    jinja_step_bytes(c->S, c->line, s.n);
    int64_t found = -1, count = 0;
    if (!sub.n) { /* Python: '' is found at 0, last at len(s), len(s) + 1 times */
        const int64_t n = (int64_t)jinja_n_chars(s);
        found = c->mode == RFIND ? n : 0;
        count = n + 1;
    }
    size_t at = 0, at_byte = 0;
    for (const char *p = sub.n ? jinja_find(s, 0, sub) : NULL; p; p = jinja_find(s, (size_t)(p - s.s) + sub.n, sub)) {
        jinja_step(c->S, c->line, 1);
        at += jinja_n_chars((jstr){s.s + at_byte, (size_t)(p - s.s) - at_byte});
        at_byte = (size_t)(p - s.s);
        if (found < 0 || c->mode == RFIND)
            found = (int64_t)at;
        count++;
        if (c->mode == FIND || c->mode == INDEX)
            break;
    }
    if (c->mode == COUNT)
        return v_int(count);
    if (c->mode == INDEX && found < 0)
        jinja_fail(c->S, ER_ERR_INVALID_ARG, c->line, "substring not found");
    return v_int(found);
}

static jv m_join(const call *c, jv self) {
    const jv *items = jinja_arg(c->a, 0, NULL);
    jlist *l = jinja_iter(c->S, c->line, items ? *items : v_undef(cstr("iterable")));
    sbuf out = {0};
    for (size_t i = 0; i < l->n; i++) {
        jinja_step(c->S, c->line, 1);
        if (l->items[i].t != J_STR)
            jinja_fail(c->S, ER_ERR_INVALID_ARG, c->line, "sequence item %zu: expected str instance, %s found", i,
                       jinja_type_name(l->items[i]));
        if (i)
            jinja_sb_put(c->S, &out, self.s.s, self.s.n);
        jinja_sb_put(c->S, &out, l->items[i].s.s, l->items[i].s.n);
    }
    return v_str(sb_str(&out));
}

static jv m_splitlines(const call *c, jv self) {
    const jstr s = self.s;
    jinja_step_bytes(c->S, c->line, s.n);
    jlist *l = jinja_list_new(c->S, 0);
    size_t i = 0;
    while (i < s.n) {
        size_t e = i;
        while (e < s.n && s.s[e] != '\n' && s.s[e] != '\r')
            e++;
        jinja_list_push(c->S, l, v_str((jstr){s.s + i, e - i}));
        if (e < s.n && s.s[e] == '\r' && e + 1 < s.n && s.s[e + 1] == '\n')
            e++;
        i = e + 1;
    }
    return v_list(l);
}

enum { ISDIGIT, ISALPHA, ISALNUM, ISSPACE, ISUPPER, ISLOWER };

/* isdigit ... islower: every code point passes, and there is one; isupper and islower
 * also want a cased letter (ASCII). */
static jv m_is(const call *c, jv self) {
    const jstr s = self.s;
    jinja_step_bytes(c->S, c->line, s.n);
    int ok = s.n > 0, cased = 0;
    for (size_t i = 0; i < s.n && ok;) {
        const int32_t cp = utf8_next((const unsigned char *)s.s, s.n, &i);
        const uint8_t cls = unicode_class(cp);
        if (c->mode == ISDIGIT)
            ok = cp >= '0' && cp <= '9';
        else if (c->mode == ISALPHA)
            ok = (cls & UNI_LETTER) != 0;
        else if (c->mode == ISALNUM)
            ok = (cls & (UNI_LETTER | UNI_NUMBER)) != 0;
        else if (c->mode == ISSPACE)
            ok = jinja_isspace(cp);
        else {
            const int up = cp >= 'A' && cp <= 'Z', low = cp >= 'a' && cp <= 'z';
            ok = c->mode == ISUPPER ? !low : !up;
            cased |= up || low;
        }
    }
    return v_bool(ok && (cased || c->mode < ISUPPER));
}

static const jinja_method str_methods[] = { /* sorted by name (bsearch), a line per initial */
    {"capitalize", m_case, CASE_CAPITALIZE}, {"count", m_find, COUNT},
    {"endswith", m_startswith, 1},
    {"find", m_find, FIND},
    {"index", m_find, INDEX}, {"isalnum", m_is, ISALNUM}, {"isalpha", m_is, ISALPHA}, {"isdigit", m_is, ISDIGIT},
    {"islower", m_is, ISLOWER}, {"isspace", m_is, ISSPACE}, {"isupper", m_is, ISUPPER},
    {"join", m_join, 0},
    {"lower", m_case, CASE_LOWER}, {"lstrip", m_strip, LEFT},
    {"replace", m_replace, 0}, {"rfind", m_find, RFIND}, {"rsplit", m_split, 1}, {"rstrip", m_strip, RIGHT},
    {"split", m_split, 0}, {"splitlines", m_splitlines, 0}, {"startswith", m_startswith, 0}, {"strip", m_strip, LEFT | RIGHT},
    {"title", m_case, CASE_TITLE},
    {"upper", m_case, CASE_UPPER},
};

static const jinja_method dict_methods[] = { /* sorted by name */
    {"get", m_get, 0},
    {"items", m_items, 0},
    {"keys", m_keys_values, 0},
    {"values", m_keys_values, 1},
};

static const jinja_method loop_methods[] = {
    {"cycle", m_cycle, 0},
};

const jinja_method *jinja_method_find(jv obj, jstr name) {
    switch (obj.t) {
    case J_STR: return FIND(str_methods, name);
    case J_DICT: return obj.d->ns ? NULL : FIND(dict_methods, name); /* a namespace has attributes only */
    case J_LOOP: return FIND(loop_methods, name);
    default: return NULL;
    }
}

jv jinja_call_method(state *S, int line, jv self, const jinja_method *m, const args *a) {
    const call c = {S, line, cstr(m->name), m->mode, a};
    return m->fn(&c, self);
}

/* ---- global functions ----------------------------------------------------------------- */

/* jinja2's sandbox allows at most this many items in a range (sandbox.MAX_RANGE). */
enum { MAX_RANGE = 100000 };

static jv b_range(const call *c) {
    const args *a = c->a;
    int64_t start = 0, stop, step = 1;
    if (a->n_pos == 1) {
        stop = jinja_arg_int(c->S, a, 0, NULL, 0);
    } else {
        start = jinja_arg_int(c->S, a, 0, NULL, 0);
        stop = jinja_arg_int(c->S, a, 1, NULL, 0);
        step = jinja_arg_int(c->S, a, 2, NULL, 1);
    }
    if (step == 0)
        jinja_fail(c->S, ER_ERR_INVALID_ARG, c->line, "range() arg 3 must not be zero");
    /* the length in uint64, where the distances between int64s fit */
    uint64_t n = 0;
    if (step > 0 && start < stop)
        n = ((uint64_t)stop - (uint64_t)start - 1) / (uint64_t)step + 1;
    else if (step < 0 && start > stop)
        n = ((uint64_t)start - (uint64_t)stop - 1) / (0 - (uint64_t)step) + 1;
    if (n > MAX_RANGE)
        jinja_fail(c->S, ER_ERR_INVALID_ARG, c->line, "range() is too long: more than %d items (jinja2's sandbox limit)",
                   MAX_RANGE);
    jinja_step(c->S, c->line, (int64_t)n);
    jlist *l = jinja_list_new(c->S, n);
    for (uint64_t k = 0; k < n; k++) /* start + k * step lies between start and stop */
        jinja_list_push(c->S, l, v_int((int64_t)((uint64_t)start + k * (uint64_t)step)));
    return v_list(l);
}

static jv b_dict(const call *c) { /* mode 1: namespace(), the one mutable object */
    jdict *d = jinja_dict_new(c->S);
    d->ns = c->mode;
    const jv *init = jinja_arg(c->a, 0, NULL);
    if (init && init->t == J_DICT)
        for (size_t i = 0; i < init->d->n; i++)
            jinja_dict_set(c->S, d, init->d->keys[i], init->d->vals[i]);
    for (size_t i = 0; i < c->a->n; i++)
        if (c->a->kw[i].s)
            jinja_dict_set(c->S, d, c->a->kw[i], c->a->v[i]);
    return v_dict(d);
}

static jv b_raise(const call *c) {
    const jv *msg = jinja_arg(c->a, 0, NULL);
    const jstr m = msg ? jinja_str(c->S, *msg) : cstr("");
    jinja_fail(c->S, ER_ERR_INVALID_ARG, c->line, "raise_exception: %.*s", (int)(m.n > 300 ? 300 : m.n), m.s);
}

static jv b_strftime(const call *c) {
    const jstr fmt = jinja_arg_str(c->S, c->a, 0, "format", "%Y-%m-%d");
    char f[128], out[256];
    snprintf(f, sizeof f, "%.*s", (int)(fmt.n < 127 ? fmt.n : 127), fmt.s);
    const time_t now = time(NULL);
    struct tm tm;
    localtime_r(&now, &tm);
    const size_t n = strftime(out, sizeof out, f, &tm);
    return v_str(jinja_strdup(c->S, out, n));
}

static const builtin_entry builtins[] = { /* sorted by name */
    {"dict", b_dict, 0},
    {"namespace", b_dict, 1},
    {"raise_exception", b_raise, 0},
    {"range", b_range, 0},
    {"strftime_now", b_strftime, 0},
};

int jinja_builtin_find(jstr name) {
    const builtin_entry *b = FIND(builtins, name);
    return b ? (int)(b - builtins) : -1;
}

jv jinja_call_builtin(state *S, int line, int which, const args *a) {
    const call c = {S, line, cstr(builtins[which].name), builtins[which].mode, a};
    return builtins[which].fn(&c);
}

/* ---- the tables' order ---------------------------------------------------------------- */

#define FIRST_UNSORTED(table)                                                                                          \
    for (size_t i = 1; i < sizeof table / sizeof table[0]; i++)                                                        \
        if (strcmp(table[i - 1].name, table[i].name) >= 0)                                                             \
            return table[i].name;

const char *jinja_check_tables(void) {
    FIRST_UNSORTED(tests)
    FIRST_UNSORTED(filters)
    FIRST_UNSORTED(str_methods)
    FIRST_UNSORTED(dict_methods)
    FIRST_UNSORTED(loop_methods)
    FIRST_UNSORTED(builtins)
    return NULL;
}
