/*
 * eval.c - the tree -> text: expressions evaluated to values (jv) with Python's semantics,
 * statements rendered into a buffer, calls of macros, methods and global functions; and
 * jinja_render, which runs the whole pipeline in one arena.
 *
 * Scopes: the root scope holds the template's own set and macro names; each for iteration
 * and each macro call gets a fresh scope (as jinja2), looked up before the JSON variables,
 * the defaults (bos_token, ...) and the global functions. An undefined name is a value
 * (J_UNDEF) that fails only where jinja2's Undefined would: when it is used, not when it
 * is printed or tested.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "chat/engine.h"

static jv eval(state *S, scope *sc, const node *x);
static void render(state *S, scope *sc, const nlist *body, sbuf *out);

/* ---- names and arguments -------------------------------------------------------------- */

static scope *new_scope(state *S, scope *parent) {
    scope *sc = jinja_zalloc(S, sizeof *sc);
    sc->parent = parent;
    return sc;
}

static jv lookup(state *S, scope *sc, jstr name) {
    for (scope *p = sc; p; p = p->parent) {
        const jv *v = jinja_dict_find(S, &p->vars, name);
        if (v)
            return *v;
    }
    const jv *v = S->ctx ? jinja_dict_find(S, S->ctx, name) : NULL;
    if (v)
        return *v;
    for (int i = 0; i < S->n_defaults; i++)
        if (jstr_eq(name, S->defaults[i].name))
            return S->defaults[i].str ? v_str(cstr(S->defaults[i].str)) : v_bool(S->defaults[i].boolean);
    const int builtin = jinja_builtin_find(name);
    return builtin >= 0 ? (jv){.t = J_BUILTIN, .builtin = builtin} : v_undef(name);
}

static _Noreturn void undefined_fail(state *S, int line, jv v) {
    jinja_fail(S, ER_ERR_INVALID_ARG, line, "'%.*s' is undefined", SHOWN(v.s));
}

static args eval_args(state *S, scope *sc, const node *call, const char *what) {
    args a = {NULL, NULL, call->args.n, 0, call->line, what};
    a.v = jinja_alloc(S, (a.n ? a.n : 1) * sizeof *a.v);
    a.kw = jinja_zalloc(S, (a.n ? a.n : 1) * sizeof *a.kw);
    for (size_t i = 0; i < a.n; i++) {
        a.v[i] = eval(S, sc, call->args.v[i]);
        if (call->kwnames && call->kwnames[i].s)
            a.kw[i] = call->kwnames[i];
        else
            a.n_pos++;
    }
    return a;
}

const jv *jinja_arg(const args *a, size_t i, const char *name) {
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

jstr jinja_arg_str(state *S, const args *a, size_t i, const char *name, const char *def) {
    const jv *v = jinja_arg(a, i, name);
    if (!v)
        return cstr(def);
    if (v->t != J_STR)
        jinja_fail(S, ER_ERR_INVALID_ARG, a->line, "%s: argument %s must be a string, not %s", a->what, name ? name : "", jinja_type_name(*v));
    return v->s;
}

int64_t jinja_arg_int(state *S, const args *a, size_t i, const char *name, int64_t def) {
    const jv *v = jinja_arg(a, i, name);
    if (!v || v->t == J_NONE)
        return def;
    if (v->t != J_INT && v->t != J_BOOL)
        jinja_fail(S, ER_ERR_INVALID_ARG, a->line, "%s: argument %s must be an integer, not %s", a->what, name ? name : "", jinja_type_name(*v));
    return jv_int(*v);
}

int jinja_arg_bool(const args *a, size_t i, const char *name, int def) {
    const jv *v = jinja_arg(a, i, name);
    return v ? jinja_truthy(*v) : def;
}

/* ---- attribute and item access -------------------------------------------------------- */

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

/* obj.name: a method of str, dict or loop bound to its object, a dict's value, a loop
 * variable; else undefined (which fails only once it is used). */
jv jinja_get_attr(state *S, int line, jv obj, jstr name) {
    if (obj.t == J_UNDEF)
        undefined_fail(S, line, obj);
    const jinja_method *method = jinja_method_find(obj, name);
    if (method) {
        jv *self = jinja_alloc(S, sizeof *self);
        *self = obj;
        return (jv){.t = J_METHOD, .m = {self, method}};
    }
    if (obj.t == J_DICT) {
        const jv *v = jinja_dict_find(S, obj.d, name);
        return v ? *v : v_undef(name);
    }
    return obj.t == J_LOOP ? loop_attr(obj.loop, name) : v_undef(name);
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

jv jinja_get_item(state *S, int line, jv obj, jv key) {
    switch (obj.t) {
    case J_UNDEF: undefined_fail(S, line, obj);
    case J_DICT:
        if (key.t == J_STR) {
            const jv *v = jinja_dict_find(S, obj.d, key.s);
            return v ? *v : v_undef(key.s);
        }
        return v_undef(cstr("item"));
    case J_LIST: {
        size_t i;
        if ((key.t == J_INT || key.t == J_BOOL) && norm_index(jv_int(key), obj.l->n, &i))
            return obj.l->items[i];
        if (key.t == J_STR)
            return jinja_get_attr(S, line, obj, key.s);
        return v_undef(cstr("item"));
    }
    case J_STR: {
        size_t i;
        jinja_step_bytes(S, line, obj.s.n);
        if (key.t == J_INT && norm_index(key.i, jinja_n_chars(obj.s), &i)) {
            const size_t b = jinja_char_at(obj.s, i);
            return v_str((jstr){obj.s.s + b, jinja_char_at((jstr){obj.s.s + b, obj.s.n - b}, 1)});
        }
        if (key.t == J_STR)
            return jinja_get_attr(S, line, obj, key.s);
        return v_undef(cstr("item"));
    }
    default: return key.t == J_STR ? jinja_get_attr(S, line, obj, key.s) : v_undef(cstr("item"));
    }
}

static int64_t slice_bound(const jv *v, int64_t def, int64_t n, int64_t step) {
    if (!v || v->t == J_NONE)
        return def;
    int64_t i = jv_int(*v);
    if (i < 0) {
        i += n;
        if (i < 0)
            i = step < 0 ? -1 : 0;
    } else if (i >= n) {
        i = step < 0 ? n - 1 : n;
    }
    return i;
}

static JINJA_NOINLINE jv get_slice(state *S, int line, jv obj, const jv *start, const jv *stop, const jv *stepv) {
    int64_t step = 1;
    for (int k = 0; k < 3; k++) {
        const jv *v = k == 0 ? start : k == 1 ? stop : stepv;
        if (v && v->t != J_NONE && v->t != J_INT && v->t != J_BOOL)
            jinja_fail(S, ER_ERR_INVALID_ARG, line, "slice indices must be integers or None, not %s", jinja_type_name(*v));
    }
    if (stepv && stepv->t != J_NONE)
        step = jv_int(*stepv);
    if (step == 0)
        jinja_fail(S, ER_ERR_INVALID_ARG, line, "slice step cannot be zero");
    size_t n = 0;
    if (obj.t == J_STR) {
        jinja_step_bytes(S, line, obj.s.n);
        n = jinja_n_chars(obj.s);
    } else if (obj.t == J_LIST)
        n = obj.l->n;
    else if (obj.t == J_UNDEF)
        undefined_fail(S, line, obj);
    else
        jinja_fail(S, ER_ERR_INVALID_ARG, line, "'%s' object is not subscriptable", jinja_type_name(obj));
    const int64_t nn = (int64_t)n;
    const int64_t b = slice_bound(start, step < 0 ? nn - 1 : 0, nn, step);
    const int64_t e = slice_bound(stop, step < 0 ? -1 : nn, nn, step);
    if (obj.t == J_STR && step == 1) { /* a part of the string itself */
        const size_t from = jinja_char_at(obj.s, (size_t)b), to = b < e ? jinja_char_at(obj.s, (size_t)e) : from;
        return v_str((jstr){obj.s.s + from, to - from});
    }
    /* i += step stops where it would overflow: past the end anyway */
    if (obj.t == J_STR) {
        size_t *off = jinja_char_offsets(S, obj.s, &n);
        sbuf out = {0};
        for (int64_t i = b; step > 0 ? i < e : i > e;) {
            jinja_sb_put(S, &out, obj.s.s + off[i], off[i + 1] - off[i]);
            if (__builtin_add_overflow(i, step, &i))
                break;
        }
        return v_str(sb_str(&out));
    }
    jlist *l = jinja_list_new(S, 0);
    l->tuple = obj.l->tuple;
    for (int64_t i = b; step > 0 ? i < e : i > e;) {
        jinja_list_push(S, l, obj.l->items[i]);
        if (__builtin_add_overflow(i, step, &i))
            break;
    }
    return v_list(l);
}

/* The items a for loop (or list(), join, ...) iterates over. */
jlist *jinja_iter(state *S, int line, jv v) {
    switch (v.t) {
    case J_LIST: return v.l;
    case J_UNDEF: return jinja_list_new(S, 0);
    case J_DICT: {
        jlist *l = jinja_list_new(S, v.d->n);
        for (size_t i = 0; i < v.d->n; i++)
            jinja_list_push(S, l, v_str(v.d->keys[i]));
        return l;
    }
    case J_STR: {
        size_t n;
        size_t *off = jinja_char_offsets(S, v.s, &n);
        jlist *l = jinja_list_new(S, n);
        for (size_t i = 0; i < n; i++)
            jinja_list_push(S, l, v_str((jstr){v.s.s + off[i], off[i + 1] - off[i]}));
        return l;
    }
    default: jinja_fail(S, ER_ERR_INVALID_ARG, line, "'%s' object is not iterable", jinja_type_name(v));
    }
}

int jinja_contains(state *S, int line, jv container, jv item) {
    if (container.t == J_STR) {
        if (item.t != J_STR)
            jinja_fail(S, ER_ERR_INVALID_ARG, line, "'in <string>' requires string as left operand, not %s", jinja_type_name(item));
        jinja_step_bytes(S, line, container.s.n);
        return jinja_find(container.s, 0, item.s) != NULL;
    }
    if (container.t == J_DICT)
        return item.t == J_STR && jinja_dict_find(S, container.d, item.s) != NULL;
    jlist *l = jinja_iter(S, line, container);
    for (size_t i = 0; i < l->n; i++)
        if (jinja_eq(S, line, l->items[i], item))
            return 1;
    return 0;
}

size_t jinja_length(state *S, int line, jv v) {
    switch (v.t) {
    case J_STR:
        jinja_step_bytes(S, line, v.s.n);
        return jinja_n_chars(v.s);
    case J_LIST: return v.l->n;
    case J_DICT: return v.d->n;
    case J_UNDEF: return 0;
    default: jinja_fail(S, ER_ERR_INVALID_ARG, line, "object of type '%s' has no len()", jinja_type_name(v));
    }
}

/* ---- arithmetic ----------------------------------------------------------------------- */

/* Python's ints are unbounded; ours are int64, so a result beyond it fails (never wraps,
 * never turns into a float). */
static _Noreturn void overflow_fail(state *S, int line, const char *op) {
    jinja_fail(S, ER_ERR_UNSUPPORTED, line, "integer overflow in %s (integers here are 64-bit)", op);
}

/* x ** y for y >= 0 by squaring: 63 steps at most, each product checked. */
static int64_t int_pow(state *S, int line, int64_t x, int64_t y) {
    int64_t r = 1;
    for (uint64_t e = (uint64_t)y; e; e >>= 1) {
        if ((e & 1) && __builtin_mul_overflow(r, x, &r))
            overflow_fail(S, line, "**");
        /* |x| >= 2 squared past int64 with bits left: the result would be past it too */
        if (e > 1 && __builtin_mul_overflow(x, x, &x))
            overflow_fail(S, line, "**");
    }
    return r;
}

/* s * times (str or list; times <= 0: empty), its size checked before anything is copied. */
static jv repeat(state *S, jv a, int64_t times) {
    const size_t n = a.t == J_STR ? a.s.n : a.l->n, size = a.t == J_STR ? 1 : sizeof(jv);
    const size_t k = times > 0 && n ? (size_t)times : 0;
    if (k && k > SIZE_MAX / n / size)
        jinja_alloc(S, SIZE_MAX); /* fails: more than the memory limit */
    if (a.t == J_STR) {
        char *p = jinja_alloc(S, k * n + 1);
        for (size_t i = 0; i < k; i++)
            memcpy(p + i * n, a.s.s, n);
        return v_str((jstr){p, k * n});
    }
    jlist *l = jinja_list_new(S, k * n);
    for (size_t i = 0; i < k; i++)
        for (size_t j = 0; j < n; j++)
            l->items[l->n++] = a.l->items[j];
    return v_list(l);
}

/* a + b of two strings, in one allocation of the exact size. */
static jstr concat(state *S, jstr a, jstr b) {
    char *p = jinja_alloc(S, a.n + b.n + 1);
    if (a.n)
        memcpy(p, a.s, a.n);
    if (b.n)
        memcpy(p + a.n, b.s, b.n);
    return (jstr){p, a.n + b.n};
}

jv jinja_binop(state *S, int line, jstr op, jv a, jv b) {
    jinja_step(S, line, 1); /* also when called per item (sum) */
    if (jstr_eq(op, "~"))
        return v_str(concat(S, jinja_str(S, a), jinja_str(S, b)));
    if (a.t == J_UNDEF)
        undefined_fail(S, line, a);
    if (b.t == J_UNDEF)
        undefined_fail(S, line, b);
    if (jstr_eq(op, "+")) {
        if (a.t == J_STR && b.t == J_STR)
            return v_str(concat(S, a.s, b.s));
        if (a.t == J_LIST && b.t == J_LIST) {
            jlist *l = jinja_list_new(S, a.l->n + b.l->n);
            for (size_t i = 0; i < a.l->n; i++)
                jinja_list_push(S, l, a.l->items[i]);
            for (size_t i = 0; i < b.l->n; i++)
                jinja_list_push(S, l, b.l->items[i]);
            l->tuple = a.l->tuple && b.l->tuple;
            return v_list(l);
        }
    }
    if (jstr_eq(op, "*") && ((a.t == J_STR || a.t == J_LIST) && (b.t == J_INT || b.t == J_BOOL)))
        return repeat(S, a, jv_int(b));
    if (jstr_eq(op, "*") && (b.t == J_STR || b.t == J_LIST) && (a.t == J_INT || a.t == J_BOOL))
        return repeat(S, b, jv_int(a));
    if (jstr_eq(op, "%") && a.t == J_STR)
        jinja_fail(S, ER_ERR_UNSUPPORTED, line, "string formatting with '%%' is not supported");
    if (!jv_is_num(a) || !jv_is_num(b))
        jinja_fail(S, ER_ERR_INVALID_ARG, line, "unsupported operand type(s) for %.*s: '%s' and '%s'", SHOWN(op), jinja_type_name(a),
             jinja_type_name(b));
    const int ints = a.t != J_FLOAT && b.t != J_FLOAT;
    const int64_t x = jv_int(a), y = jv_int(b);
    const double fx = jv_num(a), fy = jv_num(b);
    int64_t r;
    switch (op.s[0]) {
    case '+':
        if (!ints)
            return v_float(fx + fy);
        if (__builtin_add_overflow(x, y, &r))
            overflow_fail(S, line, "+");
        return v_int(r);
    case '-':
        if (!ints)
            return v_float(fx - fy);
        if (__builtin_sub_overflow(x, y, &r))
            overflow_fail(S, line, "-");
        return v_int(r);
    case '*':
        if (op.n == 2) { /* ** */
            if (ints && y >= 0)
                return v_int(int_pow(S, line, x, y));
            if (fx == 0 && fy < 0)
                jinja_fail(S, ER_ERR_INVALID_ARG, line, "0.0 cannot be raised to a negative power");
            if (fx < 0 && fy != floor(fy) && isfinite(fy))
                jinja_fail(S, ER_ERR_UNSUPPORTED, line, "a negative number to a fractional power is a complex number (not supported)");
            const double p = pow(fx, fy);
            if (isinf(p) && isfinite(fx) && isfinite(fy))
                jinja_fail(S, ER_ERR_INVALID_ARG, line, "float overflow in ** (numerical result out of range)");
            return v_float(p);
        }
        if (!ints)
            return v_float(fx * fy);
        if (__builtin_mul_overflow(x, y, &r))
            overflow_fail(S, line, "*");
        return v_int(r);
    case '/':
        if (fy == 0)
            jinja_fail(S, ER_ERR_INVALID_ARG, line, "division by zero");
        if (op.n == 2) {
            if (ints) {
                if (x == INT64_MIN && y == -1)
                    overflow_fail(S, line, "//");
                return v_int(x / y - ((x % y != 0) && ((x < 0) != (y < 0))));
            }
            /* Python's float floor division: from fmod, as float_floor_div computes it */
            double m = fmod(fx, fy), d = (fx - m) / fy;
            if (m != 0 && ((fy < 0) != (m < 0)))
                d -= 1.0;
            if (d == 0)
                return v_float(copysign(0.0, fx / fy));
            const double f = floor(d);
            return v_float(d - f > 0.5 ? f + 1.0 : f);
        }
        return v_float(fx / fy);
    case '%':
        if (fy == 0)
            jinja_fail(S, ER_ERR_INVALID_ARG, line, "modulo by zero");
        if (ints) {
            if (y == -1) /* x % -1 is 0; INT64_MIN % -1 would trap */
                return v_int(0);
            int64_t m = x % y;
            if (m != 0 && ((m < 0) != (y < 0)))
                m += y;
            return v_int(m);
        } else {
            double m = fmod(fx, fy);
            if (m != 0 && ((m < 0) != (fy < 0)))
                m += fy;
            else if (m == 0)
                m = copysign(0.0, fy); /* Python's float %: a zero takes the divisor's sign */
            return v_float(m);
        }
    default: jinja_fail(S, ER_ERR_UNSUPPORTED, line, "operator '%.*s' is not supported", SHOWN(op));
    }
}

static int compare_op(state *S, int line, jstr op, jv a, jv b) {
    if (jstr_eq(op, "=="))
        return jinja_eq(S, line, a, b);
    if (jstr_eq(op, "!="))
        return !jinja_eq(S, line, a, b);
    if (jstr_eq(op, "in"))
        return jinja_contains(S, line, b, a);
    if (jstr_eq(op, "not in"))
        return !jinja_contains(S, line, b, a);
    const int c = jinja_cmp(S, line, a, b);
    if (jstr_eq(op, "<"))
        return c < 0;
    if (jstr_eq(op, "<="))
        return c <= 0;
    if (jstr_eq(op, ">"))
        return c > 0;
    return c >= 0;
}

/* ---- calls ---------------------------------------------------------------------------- */

static JINJA_NOINLINE jv call_macro(state *S, int line, const node *m, const args *a) {
    jinja_enter(S, ER_ERR_INVALID_ARG, line, "macro calls");
    jinja_step(S, line, (int64_t)(a->n + 1) * (int64_t)(m->args.n + 1)); /* matching arguments to parameters */
    scope *sc = new_scope(S, S->root);
    if (a->n_pos > m->args.n)
        jinja_fail(S, ER_ERR_INVALID_ARG, line, "macro '%.*s' takes %zu arguments, %zu given", SHOWN(m->name), m->args.n, a->n_pos);
    for (size_t i = 0; i < a->n; i++)
        if (a->kw[i].s) {
            int known = 0;
            for (size_t p = 0; p < m->args.n; p++)
                known |= jstr_same(m->kwnames[p], a->kw[i]);
            if (!known)
                jinja_fail(S, ER_ERR_INVALID_ARG, line, "macro '%.*s' has no parameter '%.*s'", SHOWN(m->name), SHOWN(a->kw[i]));
        }
    for (size_t p = 0; p < m->args.n; p++) {
        char pname[128];
        snprintf(pname, sizeof pname, "%.*s", (int)(m->kwnames[p].n < 127 ? m->kwnames[p].n : 127), m->kwnames[p].s);
        const jv *v = jinja_arg(a, p, pname);
        jv val = v ? *v : m->args.v[p] ? eval(S, sc, m->args.v[p]) : v_undef(m->kwnames[p]);
        jinja_dict_set(S, &sc->vars, m->kwnames[p], val);
    }
    sbuf out = {0};
    render(S, sc, &m->body, &out);
    S->brk = 0;
    jinja_leave(S);
    return v_str(sb_str(&out));
}

static jv call_value(state *S, int line, jv callee, const args *a) {
    switch (callee.t) {
    case J_MACRO: return call_macro(S, line, callee.macro, a);
    case J_BUILTIN: return jinja_call_builtin(S, line, callee.builtin, a);
    case J_METHOD: return jinja_call_method(S, line, *callee.m.self, callee.m.method, a);
    case J_UNDEF: jinja_fail(S, ER_ERR_UNSUPPORTED, line, "'%.*s' is undefined (a function this engine does not provide?)", SHOWN(callee.s));
    default: jinja_fail(S, ER_ERR_INVALID_ARG, line, "'%s' object is not callable", jinja_type_name(callee));
    }
}

/* ---- expressions ---------------------------------------------------------------------- */

static jv eval_node(state *S, scope *sc, const node *x);

/* Every expression node costs a step and a level of the depth guard: the tree of `1+1+...`
 * or of `a.b.c...` is as deep as it is long, though the parser built it in a loop. */
static jv eval(state *S, scope *sc, const node *x) {
    jinja_step(S, x->line, 1);
    jinja_enter(S, ER_ERR_INVALID_ARG, x->line, "expression");
    S->line = x->line;
    const jv v = eval_node(S, sc, x);
    jinja_leave(S);
    return v;
}

/* The cases of eval_node with arrays and argument lists live in functions of their own,
 * given their operand already evaluated: eval_node's frame is on the stack once per level of
 * every expression, so it holds no arrays (under AddressSanitizer each costs a redzone). */

static JINJA_NOINLINE jv eval_slice(state *S, scope *sc, const node *x, jv obj) {
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

static JINJA_NOINLINE jv eval_call(state *S, scope *sc, const node *x, jv callee) {
    const args a = eval_args(S, sc, x, "call");
    return call_value(S, x->line, callee, &a);
}

static JINJA_NOINLINE jv eval_filter(state *S, scope *sc, const node *x, jv v) {
    char what[80];
    snprintf(what, sizeof what, "filter '%.*s'", SHOWN(x->name));
    args a = eval_args(S, sc, x, what);
    a.what = jinja_strdup(S, what, strlen(what)).s;
    return jinja_filter(S, x->line, x->name, v, &a);
}

static JINJA_NOINLINE jv eval_test(state *S, scope *sc, const node *x, jv v) {
    const args a = eval_args(S, sc, x, "test");
    return v_bool(jinja_test(S, x->line, x->name, v, &a) != x->negate);
}

static JINJA_NOINLINE jv eval_compare(state *S, scope *sc, const node *x, jv left) {
    for (size_t i = 0; i < x->args.n; i++) {
        const node *operand = x->args.v[i];
        const jv right = eval(S, sc, operand->a);
        if (!compare_op(S, operand->line, operand->name, left, right))
            return v_bool(0);
        left = right;
    }
    return v_bool(1);
}

static JINJA_NOINLINE jv eval_list(state *S, scope *sc, const node *x) {
    jlist *l = jinja_list_new(S, x->args.n);
    l->tuple = x->k == E_TUPLE;
    for (size_t i = 0; i < x->args.n; i++)
        jinja_list_push(S, l, eval(S, sc, x->args.v[i]));
    return v_list(l);
}

static JINJA_NOINLINE jv eval_dict(state *S, scope *sc, const node *x) {
    jdict *d = jinja_dict_new(S);
    for (size_t i = 0; i + 1 < x->args.n; i += 2) {
        const jv k = eval(S, sc, x->args.v[i]);
        if (k.t != J_STR)
            jinja_fail(S, ER_ERR_UNSUPPORTED, x->line, "dict keys other than strings are not supported");
        jinja_dict_set(S, d, k.s, eval(S, sc, x->args.v[i + 1]));
    }
    return v_dict(d);
}

static JINJA_NOINLINE jv eval_unary(state *S, const node *x, jv v) {
    if (v.t == J_UNDEF)
        undefined_fail(S, x->line, v);
    if (!jv_is_num(v))
        jinja_fail(S, ER_ERR_INVALID_ARG, x->line, "bad operand type for unary %c: '%s'", x->k == E_NEG ? '-' : '+', jinja_type_name(v));
    if (x->k == E_POS)
        return v.t == J_BOOL ? v_int(v.b) : v;
    if (v.t == J_INT && v.i == INT64_MIN)
        overflow_fail(S, x->line, "unary -");
    return v.t == J_FLOAT ? v_float(-v.f) : v_int(-jv_int(v));
}

static JINJA_NOINLINE jv eval_item(state *S, scope *sc, const node *x, jv obj) {
    return jinja_get_item(S, x->line, obj, eval(S, sc, x->b));
}

static JINJA_NOINLINE jv eval_binop(state *S, scope *sc, const node *x, jv a) {
    return jinja_binop(S, x->line, x->name, a, eval(S, sc, x->b));
}

/* The node's own operand (x->a) is evaluated once, here; what else is evaluated is either
 * returned as it is (and/or/if-else) or evaluated by a helper. */
static jv eval_node(state *S, scope *sc, const node *x) {
    switch (x->k) {
    case E_LIT: return x->lit;
    case E_NAME: return lookup(S, sc, x->name);
    case E_LIST:
    case E_TUPLE: return eval_list(S, sc, x);
    case E_DICT: return eval_dict(S, sc, x);
    default: break;
    }
    if (!x->a)
        jinja_fail(S, ER_ERR_FORMAT, x->line, "internal: not an expression");
    const jv a = eval(S, sc, x->a);
    const node *next = x->b; /* and, or, if-else: the operand that gives the value */
    switch (x->k) {
    case E_ATTR: return jinja_get_attr(S, x->line, a, x->name);
    case E_ITEM: return eval_item(S, sc, x, a);
    case E_SLICE: return eval_slice(S, sc, x, a);
    case E_CALL: return eval_call(S, sc, x, a); /* the callee first, as in Python */
    case E_FILTER: return eval_filter(S, sc, x, a);
    case E_TEST: return eval_test(S, sc, x, a);
    case E_NEG:
    case E_POS: return eval_unary(S, x, a);
    case E_NOT: return v_bool(!jinja_truthy(a));
    case E_BIN: return eval_binop(S, sc, x, a);
    case E_CMP: return eval_compare(S, sc, x, a);
    case E_AND:
        if (!jinja_truthy(a))
            return a;
        break;
    case E_OR:
        if (jinja_truthy(a))
            return a;
        break;
    case E_COND: /* a is the condition, b the value, c the else */
        next = jinja_truthy(a) ? x->b : x->c;
        if (!next)
            return v_undef(cstr("else"));
        break;
    default: jinja_fail(S, ER_ERR_FORMAT, x->line, "internal: not an expression");
    }
    return eval(S, sc, next);
}

/* ---- statements ----------------------------------------------------------------------- */

static void assign(state *S, scope *sc, const node *x, jv v) {
    if (x->attr.s) { /* {% set ns.attr = v %} */
        const jv target = lookup(S, sc, x->args.v[0]->name);
        if (target.t != J_DICT || !target.d->ns)
            jinja_fail(S, ER_ERR_INVALID_ARG, x->line, "cannot assign attribute on non-namespace object '%.*s'", SHOWN(x->args.v[0]->name));
        jinja_dict_set(S, target.d, x->attr, v);
        return;
    }
    if (x->args.n == 1) {
        jinja_dict_set(S, &sc->vars, x->args.v[0]->name, v);
        return;
    }
    jlist *items = jinja_iter(S, x->line, v);
    if (items->n != x->args.n)
        jinja_fail(S, ER_ERR_INVALID_ARG, x->line, "cannot unpack %zu values into %zu names", items->n, x->args.n);
    for (size_t i = 0; i < x->args.n; i++)
        jinja_dict_set(S, &sc->vars, x->args.v[i]->name, items->items[i]);
}

/* A scope made fresh for the next iteration, in the memory it already has. */
static void clear_scope(scope *sc) {
    sc->vars.n = 0;
    if (sc->vars.slots)
        memset(sc->vars.slots, 0, sc->vars.n_slots * sizeof *sc->vars.slots);
}

/* Each iteration gets a fresh scope, as in jinja2; one scope emptied each time, so that a
 * long loop does not grow the arena. `loop` is one object whose index moves, as jinja2's
 * LoopContext. */
static JINJA_NOINLINE void render_for(state *S, scope *sc, const node *x, sbuf *out) {
    jlist *all = jinja_iter(S, x->line, eval(S, sc, x->a));
    jlist *items = all;
    scope *it = new_scope(S, sc);
    if (x->b) { /* {% for a in b if cond %}: the loop (and loop.length) sees only what passes */
        items = jinja_list_new(S, 0);
        for (size_t i = 0; i < all->n; i++) {
            jinja_step(S, x->line, 1);
            clear_scope(it);
            assign(S, it, x, all->items[i]);
            if (jinja_truthy(eval(S, it, x->b)))
                jinja_list_push(S, items, all->items[i]);
        }
    }
    if (!items->n) {
        clear_scope(it);
        render(S, it, &x->body2, out);
        return;
    }
    loopinfo *L = jinja_alloc(S, sizeof *L);
    L->items = items;
    for (size_t i = 0; i < items->n; i++) {
        jinja_step(S, x->line, 1);
        clear_scope(it);
        L->index0 = i;
        jinja_dict_set(S, &it->vars, cstr("loop"), (jv){.t = J_LOOP, .loop = L});
        assign(S, it, x, items->items[i]);
        render(S, it, &x->body, out);
        if (S->brk == 1) {
            S->brk = 0;
            break;
        }
        S->brk = 0;
    }
}

static JINJA_NOINLINE void render_set_block(state *S, scope *sc, const node *x) {
    sbuf b = {0};
    render(S, sc, &x->body, &b);
    assign(S, sc, x, v_str(sb_str(&b)));
}

static void render(state *S, scope *sc, const nlist *body, sbuf *out) {
    jinja_enter(S, ER_ERR_INVALID_ARG, body->n ? body->v[0]->line : S->line, "template");
    for (size_t i = 0; i < body->n && !S->brk; i++) {
        const node *x = body->v[i];
        jinja_step(S, x->line, 1);
        S->line = x->line;
        switch (x->k) {
        case N_TEXT: jinja_sb_put(S, out, x->lit.s.s, x->lit.s.n); break;
        case N_OUT: jinja_print(S, out, eval(S, sc, x->a)); break;
        case N_IF: { /* an elif chain is walked here, not nested: it may be long */
            const node *c = x;
            int yes;
            while (!(yes = jinja_truthy(eval(S, sc, c->a))) && c->body2.n == 1 && c->body2.v[0]->elif)
                c = c->body2.v[0];
            render(S, sc, yes ? &c->body : &c->body2, out);
            break;
        }
        case N_FOR: render_for(S, sc, x, out); break;
        case N_SET: assign(S, sc, x, eval(S, sc, x->a)); break;
        case N_SETBLOCK: render_set_block(S, sc, x); break;
        case N_MACRO: jinja_dict_set(S, &sc->vars, x->name, (jv){.t = J_MACRO, .macro = x}); break;
        case N_BREAK: S->brk = 1; break;
        case N_CONTINUE: S->brk = 2; break;
        case N_BLOCK: render(S, sc, &x->body, out); break;
        default: jinja_fail(S, ER_ERR_FORMAT, x->line, "internal: not a statement");
        }
    }
    jinja_leave(S);
}

/* ---- entry point ---------------------------------------------------------------------- */

er_status jinja_render(const char *source, size_t n, const char *json, size_t json_len, const jinja_var *defaults,
                       int n_defaults, jinja_limits *limits, strbuf *out) {
    state *S = calloc(1, sizeof *S);
    if (!S)
        return er_fail(ER_ERR_NO_MEMORY, "chat template: out of memory");
    volatile er_status st = ER_OK;
    S->defaults = defaults;
    S->n_defaults = n_defaults;
    S->max_steps = limits && limits->max_steps > 0 ? limits->max_steps : JINJA_DEFAULT_STEPS;
    if (S->max_steps > INT64_MAX / 4) /* room for one charge past it without overflow */
        S->max_steps = INT64_MAX / 4;
    const size_t input = n + json_len, per_input = JINJA_DEFAULT_BYTES_PER_INPUT_BYTE;
    S->max_bytes = limits && limits->max_bytes ? limits->max_bytes
                   : input > (SIZE_MAX / 2 - JINJA_DEFAULT_BYTES) / per_input ? SIZE_MAX / 2
                                                                             : JINJA_DEFAULT_BYTES + per_input * input;
    if (S->max_bytes > SIZE_MAX / 2)
        S->max_bytes = SIZE_MAX / 2;
    if (setjmp(S->fail)) {
        st = er_fail(S->status, "%s", S->msg);
        goto done;
    }
    /* newlines normalized to \n; one trailing newline dropped (keep_trailing_newline off) */
    char *src = jinja_alloc(S, n + 1);
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
    if (json)
        S->ctx = jinja_read_json(S, json, json_len);
    jinja_lex(S);
    nlist body = {0};
    jinja_parse(S, &body);
    S->root = new_scope(S, NULL);
    sbuf result = {0};
    render(S, S->root, &body, &result);
    st = strbuf_append(out, result.p ? result.p : "", result.n);
done:
    if (limits) {
        limits->steps = S->steps;
        limits->bytes = S->bytes;
        limits->depth = S->depth_max;
    }
    jinja_arena_free(S);
    free(S);
    return st;
}
