/*
 * parse.c - tokens -> a tree of statements and expressions, by recursive descent with
 * jinja2's precedence:
 *
 *   cond-expr < or < and < not < comparisons < + - < ~ < * / // % < ** < unary
 *   < filters and tests < postfix (.attr [item] (call))
 *
 * Statements are a table of keyword -> parser; a tag this engine does not know fails with
 * ER_ERR_UNSUPPORTED, a template that is not Jinja with ER_ERR_FORMAT, both naming the
 * line. Every recursion goes through parse_expr, parse_not, parse_unary or parse_body,
 * each a level of the depth guard (jinja_enter), so that a template cannot exhaust the
 * stack; elif chains are parsed in a loop, as jinja2 does, since they do not nest.
 */
#include <stdio.h>

#include "chat/engine.h"

static token *cur(state *S) { return &S->toks[S->pos]; }
static token *peek(state *S, size_t k) { return &S->toks[S->pos + k < S->ntok ? S->pos + k : S->ntok - 1]; }
static int is_op(const token *t, const char *op) { return t->k == T_OP && jstr_eq(t->s, op); }
static int is_name(const token *t, const char *name) { return t->k == T_NAME && jstr_eq(t->s, name); }

static int in_words(jstr s, const char *const *words) {
    for (; words && *words; words++)
        if (jstr_eq(s, *words))
            return 1;
    return 0;
}

static _Noreturn void parse_fail(state *S, const char *expected) {
    const token *t = cur(S);
    if (t->k == T_EOF)
        jinja_fail(S, ER_ERR_FORMAT, t->line, "expected %s, found the end of the template", expected);
    if (t->k == T_BLOCK_END || t->k == T_VAR_END)
        jinja_fail(S, ER_ERR_FORMAT, t->line, "expected %s, found the end of the tag", expected);
    jinja_fail(S, ER_ERR_FORMAT, t->line, "expected %s, found '%.*s'", expected, SHOWN(t->s));
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
    node *x = jinja_zalloc(S, sizeof *x);
    x->k = k;
    x->line = line;
    return x;
}

static void nl_push(state *S, nlist *l, node *x) {
    l->v = jinja_grow(S, l->v, l->n, 1, &l->cap, sizeof *l->v, 4);
    l->v[l->n++] = x;
}

/* Appends an argument (or a macro parameter's default) with its keyword name ({NULL, 0}:
 * positional); *cap is the capacity of x->kwnames. */
static void push_arg(state *S, node *x, node *value, jstr name, size_t *cap) {
    nl_push(S, &x->args, value);
    x->kwnames = jinja_grow(S, x->kwnames, x->args.n - 1, 1, cap, sizeof *x->kwnames, 4);
    x->kwnames[x->args.n - 1] = name;
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
            jinja_fail(S, ER_ERR_UNSUPPORTED, cur(S)->line, "*args and **kwargs in calls are not supported");
        jstr kw = {NULL, 0};
        if (cur(S)->k == T_NAME && is_op(peek(S, 1), "=")) {
            kw = cur(S)->s;
            S->pos += 2;
        }
        push_arg(S, call, parse_expr(S), kw, &cap);
    }
    S->pos++;
}

/* A call of x: "(" is cur(S) (token t). */
static node *parse_call(state *S, const token *t, node *x) {
    S->pos++;
    node *c = new_node(S, E_CALL, t->line);
    c->a = x;
    parse_args(S, c);
    return c;
}

/* A filter or a test, after its "|" or "is" (token t): [not] name, then its arguments in
 * parentheses, or for a test one bare argument ("is divisibleby 3"). */
static node *parse_filter_or_test(state *S, const token *t, nk k, node *x) {
    S->pos++;
    node *f = new_node(S, k, t->line);
    if (k == E_TEST && is_name(cur(S), "not")) {
        f->negate = 1;
        S->pos++;
    }
    if (cur(S)->k != T_NAME)
        parse_fail(S, k == E_TEST ? "a test name" : "a filter name");
    f->name = cur(S)->s;
    S->pos++;
    f->a = x;
    token *u = cur(S);
    if (is_op(u, "(")) {
        S->pos++;
        parse_args(S, f);
    } else if (k == E_TEST &&
               (u->k == T_NAME || u->k == T_STRING || u->k == T_INT || u->k == T_FLOAT || is_op(u, "[") || is_op(u, "{")) &&
               !is_name(u, "else") && !is_name(u, "or") && !is_name(u, "and")) {
        nl_push(S, &f->args, parse_postfix(S, parse_primary(S)));
        f->kwnames = jinja_zalloc(S, sizeof *f->kwnames);
    }
    return f;
}

static node *parse_filter_expr(state *S, node *x) {
    for (;;) {
        token *t = cur(S);
        if (is_op(t, "|"))
            x = parse_filter_or_test(S, t, E_FILTER, x);
        else if (is_name(t, "is"))
            x = parse_filter_or_test(S, t, E_TEST, x);
        else if (is_op(t, "("))
            x = parse_call(S, t, x);
        else
            return x;
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
                jinja_fail(S, ER_ERR_FORMAT, t->line, "empty subscript");
            a->a = x;
            a->b = part[0];
            if (slice) {
                nl_push(S, &a->args, part[1]);
                nl_push(S, &a->args, part[2]);
            }
            x = a;
        } else if (is_op(t, "(")) {
            x = parse_call(S, t, x);
        } else {
            return x;
        }
    }
}

/* Adjacent string literals, concatenated (out of parse_primary's frame, which is on the
 * stack once per parenthesis). */
static JINJA_NOINLINE node *parse_strings(state *S, const token *t) {
    sbuf b = {0};
    while (cur(S)->k == T_STRING) {
        jinja_sb_put(S, &b, cur(S)->s.s, cur(S)->s.n);
        S->pos++;
    }
    node *x = new_node(S, E_LIT, t->line);
    x->lit = v_str(sb_str(&b));
    return x;
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
    if (t->k == T_STRING)
        return parse_strings(S, t);
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
    if (is_op(t, "[") || is_op(t, "{")) { /* [a, b,] and {k: v, k: v,} */
        const int dict = is_op(t, "{");
        S->pos++;
        x = new_node(S, dict ? E_DICT : E_LIST, t->line);
        while (!is_op(cur(S), dict ? "}" : "]")) {
            if (x->args.n)
                expect_op(S, ",");
            if (is_op(cur(S), dict ? "}" : "]"))
                break;
            nl_push(S, &x->args, parse_expr(S));
            if (dict) {
                expect_op(S, ":");
                nl_push(S, &x->args, parse_expr(S));
            }
        }
        S->pos++;
        return x;
    }
    parse_fail(S, "an expression");
}

static node *parse_unary(state *S, int with_filter) {
    token *t = cur(S);
    node *x;
    jinja_enter(S, ER_ERR_FORMAT, t->line, "expression");
    if (is_op(t, "-") || is_op(t, "+")) {
        S->pos++;
        x = new_node(S, is_op(t, "-") ? E_NEG : E_POS, t->line);
        x->a = parse_unary(S, 0);
    } else {
        x = parse_primary(S);
    }
    x = parse_postfix(S, x);
    jinja_leave(S);
    return with_filter ? parse_filter_expr(S, x) : x;
}

/* l op r: E_BIN keeps the operator (t) as its name; E_AND and E_OR need none. */
static node *binary(state *S, const token *t, nk k, node *l, node *r) {
    node *x = new_node(S, k, t->line);
    x->name = t->s;
    x->a = l;
    x->b = r;
    return x;
}

/* The binary operators by precedence, loosest first; each level is left-associative
 * (jinja2 parses ** so too) and binds tighter than the one before it. */
static const char *const binary_levels[][5] = {{"+", "-"}, {"~"}, {"*", "/", "//", "%"}, {"**"}};
enum { N_BINARY_LEVELS = sizeof binary_levels / sizeof binary_levels[0] };

static node *parse_binary(state *S, int level) {
    if (level == N_BINARY_LEVELS)
        return parse_unary(S, 1);
    node *x = parse_binary(S, level + 1);
    for (;;) {
        token *t = cur(S);
        if (t->k != T_OP || !in_words(t->s, binary_levels[level]))
            return x;
        S->pos++;
        x = binary(S, t, E_BIN, x, parse_binary(S, level + 1));
    }
}

static node *parse_compare(state *S) {
    node *x = parse_binary(S, 0);
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
        operand->a = parse_binary(S, 0);
        nl_push(S, &cmp->args, operand);
    }
    return cmp ? cmp : x;
}

static node *parse_not(state *S) {
    if (is_name(cur(S), "not")) {
        token *t = cur(S);
        S->pos++;
        node *x = new_node(S, E_NOT, t->line);
        jinja_enter(S, ER_ERR_FORMAT, t->line, "expression");
        x->a = parse_not(S);
        jinja_leave(S);
        return x;
    }
    return parse_compare(S);
}

static node *parse_and(state *S) {
    node *x = parse_not(S);
    for (token *t; is_name(t = cur(S), "and");) {
        S->pos++;
        x = binary(S, t, E_AND, x, parse_not(S));
    }
    return x;
}

static node *parse_or(state *S) {
    node *x = parse_and(S);
    for (token *t; is_name(t = cur(S), "or");) {
        S->pos++;
        x = binary(S, t, E_OR, x, parse_and(S));
    }
    return x;
}

static node *parse_expr(state *S) {
    jinja_enter(S, ER_ERR_FORMAT, cur(S)->line, "expression");
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
    jinja_leave(S);
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

/* The body of a block tag: its "%}", the statements, and the word `end` that closes them
 * (left after that word, before its "%}"). */
static void parse_block(state *S, nlist *body, const char *end) {
    const char *const stops[] = {end, NULL};
    expect_block_end(S);
    parse_body(S, body, stops);
    S->pos++;
}

/* ---- statements: each parses its tag after the keyword, to the end of its end tag ----- */

/* if after its keyword: condition, body, then each elif (an if marked elif, the only
 * statement of the else body before it), else or endif. */
static node *parse_if(state *S, int line) {
    node *first = new_node(S, N_IF, line), *x = first;
    static const char *const stops[] = {"elif", "else", "endif", NULL};
    for (;;) {
        x->a = parse_expr(S);
        expect_block_end(S);
        parse_body(S, &x->body, stops);
        token *end = cur(S);
        S->pos++;
        if (!jstr_eq(end->s, "elif")) {
            if (jstr_eq(end->s, "else"))
                parse_block(S, &x->body2, "endif");
            expect_block_end(S);
            return first;
        }
        node *elif = new_node(S, N_IF, end->line);
        elif->elif = 1;
        nl_push(S, &x->body2, elif);
        x = elif;
    }
}

static node *parse_for(state *S, int line) {
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
        jinja_fail(S, ER_ERR_UNSUPPORTED, line, "recursive for loops are not supported");
    expect_block_end(S);
    static const char *const stops[] = {"else", "endfor", NULL};
    parse_body(S, &x->body, stops);
    if (is_name(cur(S), "else")) { /* its body renders when nothing was iterated */
        S->pos++;
        parse_block(S, &x->body2, "endfor");
    } else {
        S->pos++; /* past endfor */
    }
    expect_block_end(S);
    return x;
}

static node *parse_set(state *S, int line) {
    node *x = new_node(S, N_SET, line);
    parse_targets(S, x, 1);
    if (is_op(cur(S), "=")) {
        S->pos++;
        x->a = parse_tuple(S, 1);
        expect_block_end(S);
        return x;
    }
    if (is_op(cur(S), "|"))
        jinja_fail(S, ER_ERR_UNSUPPORTED, line, "filtered block assignments ({%% set x | filter %%}) are not supported");
    x->k = N_SETBLOCK;
    parse_block(S, &x->body, "endset");
    expect_block_end(S);
    return x;
}

static node *parse_macro(state *S, int line) {
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
        push_arg(S, x, def, param, &cap);
    }
    S->pos++;
    parse_block(S, &x->body, "endmacro");
    if (cur(S)->k == T_NAME) /* {% endmacro name %} */
        S->pos++;
    expect_block_end(S);
    return x;
}

static node *parse_break(state *S, int line) {
    expect_block_end(S);
    return new_node(S, N_BREAK, line);
}

static node *parse_continue(state *S, int line) {
    expect_block_end(S);
    return new_node(S, N_CONTINUE, line);
}

/* Hugging Face's marker of assistant text: just its body. */
static node *parse_generation(state *S, int line) {
    node *x = new_node(S, N_BLOCK, line);
    parse_block(S, &x->body, "endgeneration");
    expect_block_end(S);
    return x;
}

static const struct {
    const char *name;
    node *(*parse)(state *S, int line); /* after the keyword */
} statements[] = {
    {"if", parse_if},
    {"for", parse_for},
    {"set", parse_set},
    {"macro", parse_macro},
    {"break", parse_break},
    {"continue", parse_continue},
    {"generation", parse_generation},
};

static node *parse_statement(state *S) {
    token *t = cur(S);
    if (t->k != T_NAME)
        parse_fail(S, "a statement name");
    const int line = t->line;
    const jstr kw = t->s;
    S->pos++;
    for (size_t i = 0; i < sizeof statements / sizeof statements[0]; i++)
        if (jstr_eq(kw, statements[i].name))
            return statements[i].parse(S, line);
    if (in_words(kw, unsupported_tags))
        jinja_fail(S, ER_ERR_UNSUPPORTED, line, "the '{%% %.*s %%}' statement is not supported", SHOWN(kw));
    jinja_fail(S, ER_ERR_UNSUPPORTED, line, "unknown statement '{%% %.*s %%}'", SHOWN(kw));
}

/* Statements up to EOF or (when stops) a {% stop %} tag, left with cur on its name. */
static void parse_body(state *S, nlist *body, const char *const *stops) {
    jinja_enter(S, ER_ERR_FORMAT, cur(S)->line, "template");
    for (;;) {
        token *t = cur(S);
        if (t->k == T_EOF) {
            if (stops) { /* name the closing tag: the stop word that starts with "end" */
                const char *const *end = stops;
                while (end[1] && strncmp(*end, "end", 3) != 0)
                    end++;
                jinja_fail(S, ER_ERR_FORMAT, t->line, "missing {%% %s %%}", *end);
            }
            jinja_leave(S);
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
            if (name->k == T_NAME && in_words(name->s, stops)) {
                jinja_leave(S);
                return;
            }
            if (name->k == T_NAME && in_words(name->s, end_tags))
                jinja_fail(S, ER_ERR_FORMAT, name->line, "unexpected {%% %.*s %%}", SHOWN(name->s));
            nl_push(S, body, parse_statement(S));
        } else {
            parse_fail(S, "text or a tag");
        }
    }
}


void jinja_parse(state *S, nlist *body) {
    S->pos = 0;
    parse_body(S, body, NULL);
}
