/*
 * lex.c - the template -> tokens (S->toks, ending in T_EOF), applying jinja2's whitespace
 * rules as its lexer does under Hugging Face's settings: newlines are already normalized
 * to \n and one trailing newline dropped (jinja_render does that), then lstrip_blocks
 * (spaces before a {% %} or {# #} alone on its line go), trim_blocks (the newline after
 * one goes), and the "-" and "+" markers that strip or keep the white space next to a tag.
 *
 * Text tokens point into S->src; string literals are decoded into the arena. Every token
 * carries its line, for the messages of the parser and the evaluator.
 */
#include <errno.h>
#include <stdlib.h>

#include "chat/engine.h"
#include "core/utf8.h"

/* The length of s[0..n) without its trailing white space. */
static size_t rstrip_len(const char *s, size_t n) {
    size_t end = 0;
    for (size_t i = 0; i < n;) {
        const int32_t cp = utf8_next((const unsigned char *)s, n, &i);
        if (!jinja_isspace(cp))
            end = i;
    }
    return end;
}

static token *push_tok(state *S, tk k, int line) {
    S->toks = jinja_grow(S, S->toks, S->ntok, 1, &S->captok, sizeof *S->toks, 256);
    token *t = &S->toks[S->ntok++];
    memset(t, 0, sizeof *t);
    t->k = k;
    t->line = line;
    return t;
}

static void push_text(state *S, const char *s, size_t n, int line) {
    token *t = push_tok(S, T_TEXT, line);
    t->s = (jstr){s, n};
}

/* From s[i]: past spaces, tabs and newlines (what may stand between "{%" and "raw"). */
static size_t skip_blanks(const char *s, size_t n, size_t i) {
    while (i < n && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n'))
        i++;
    return i;
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
            jinja_sb_put(S, &b, &s[i], 1);
            continue;
        }
        const char e = s[++i];
        const char *simple = strchr("\\'\"abfnrtv\n", e);
        if (simple && e) {
            static const char out[] = "\\'\"\a\b\f\n\r\t\v";
            if (e != '\n') /* backslash-newline is a line continuation */
                jinja_sb_put(S, &b, &out[simple - "\\'\"abfnrtv\n"], 1);
            continue;
        }
        uint32_t u = 0;
        int digits = e == 'x' ? 2 : e == 'u' ? 4 : e == 'U' ? 8 : 0;
        if (digits) {
            if (i + (size_t)digits >= n)
                jinja_fail(S, ER_ERR_FORMAT, line, "truncated \\%c escape in a string", e);
            for (int k = 1; k <= digits; k++) {
                const char c = s[i + (size_t)k];
                const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
                if (d < 0)
                    jinja_fail(S, ER_ERR_FORMAT, line, "bad \\%c escape in a string", e);
                u = u * 16 + (uint32_t)d;
            }
            i += (size_t)digits;
        } else if (e >= '0' && e <= '7') {
            u = (uint32_t)(e - '0');
            for (int k = 0; k < 2 && i + 1 < n && s[i + 1] >= '0' && s[i + 1] <= '7'; k++)
                u = u * 8 + (uint32_t)(s[++i] - '0');
        } else {
            jinja_sb_put(S, &b, &s[i - 1], 2); /* unknown escapes stay as written */
            continue;
        }
        if (u > 0x10ffff)
            jinja_fail(S, ER_ERR_FORMAT, line, "escape beyond U+10FFFF in a string");
        char enc[4];
        jinja_sb_put(S, &b, enc, (size_t)utf8_put(u, enc));
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
            jinja_fail(S, ER_ERR_FORMAT, *line, "unexpected end of template inside a %s tag", block ? "{% %}" : "{{ }}");
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
            char *digits = jinja_alloc(S, k - i + 1); /* without the underscores, NUL-terminated */
            size_t m = 0;
            for (size_t j = i; j < k; j++)
                if (s[j] != '_')
                    digits[m++] = s[j];
            digits[m] = 0;
            t = push_tok(S, is_float ? T_FLOAT : T_INT, *line);
            t->s = (jstr){s + i, k - i}; /* as written, for messages */
            if (is_float) {
                t->f = strtod(digits, NULL);
            } else {
                errno = 0;
                t->i = strtoll(digits, NULL, 10);
                if (errno == ERANGE)
                    jinja_fail(S, ER_ERR_UNSUPPORTED, *line, "integer literal %.*s is beyond 64 bits", SHOWN(t->s));
            }
            i = k;
        } else if (c == '\'' || c == '"') {
            size_t k = i + 1;
            while (k < n && s[k] != c) {
                if (s[k] == '\\' && k + 1 < n)
                    k++;
                k++;
            }
            if (k >= n)
                jinja_fail(S, ER_ERR_FORMAT, *line, "unterminated string");
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
                jinja_fail(S, ER_ERR_FORMAT, *line, "unexpected character '%c' in a tag", c);
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

void jinja_lex(state *S) {
    const char *s = S->src;
    const size_t n = S->n;
    size_t pos = 0;
    int line = 1, line_starting = 1;
    while (pos < n) {
        size_t p = pos;
        while (p + 1 < n && !(s[p] == '{' && (s[p + 1] == '{' || s[p + 1] == '%' || s[p + 1] == '#')))
            p++;
        if (p + 1 >= n) {
            push_text(S, s + pos, n - pos, line);
            break;
        }
        const char kind = s[p + 1];
        const char sign = p + 2 < n && (s[p + 2] == '-' || s[p + 2] == '+') ? s[p + 2] : 0;
        size_t q = p + 2 + (sign != 0);
        /* {% raw %} ... {% endraw %} */
        int raw = 0;
        if (kind == '%') {
            const size_t k = skip_blanks(s, n, q);
            if (n - k >= 3 && !memcmp(s + k, "raw", 3)) {
                size_t e = skip_blanks(s, n, k + 3);
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
            if ((l_pos > 0 || line_starting) && l_pos < text_len && jinja_skip_space(s + pos, text_len, l_pos) == text_len)
                text_len = l_pos;
        }
        if (text_len)
            push_text(S, s + pos, text_len, line);
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
                body = jinja_skip_space(s, n, body);
            size_t e = body;
            for (;; e++) {
                if (e + 1 >= n)
                    jinja_fail(S, ER_ERR_FORMAT, line, "{%% raw %%} without {%% endraw %%}");
                if (s[e] == '{' && s[e + 1] == '%') {
                    const size_t k = skip_blanks(s, n, e + 2 + (s[e + 2] == '-' || s[e + 2] == '+'));
                    if (n - k >= 6 && !memcmp(s + k, "endraw", 6))
                        break;
                }
            }
            size_t body_len = e - body;
            if (s[e + 2] == '-')
                body_len = rstrip_len(s + body, body_len);
            if (body_len)
                push_text(S, s + body, body_len, line);
            line += count_lines(s + q, e - q);
            size_t k = e + 2;
            while (k + 1 < n && (s[k] != '%' || s[k + 1] != '}'))
                k++;
            if (k + 1 >= n)
                jinja_fail(S, ER_ERR_FORMAT, line, "unterminated {%% endraw %%} tag");
            end_sign = s[k - 1] == '-' || s[k - 1] == '+' ? s[k - 1] : 0;
            pos = k + 2;
        } else if (kind == '#') {
            size_t e = q;
            while (e + 1 < n && !(s[e] == '#' && s[e + 1] == '}'))
                e++;
            if (e + 1 >= n)
                jinja_fail(S, ER_ERR_FORMAT, line, "unterminated comment");
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
            pos = jinja_skip_space(s, n, pos);
        else if (end_sign != '+' && block_like && pos < n && s[pos] == '\n')
            pos++; /* trim_blocks */
        line += count_lines(s + before, pos - before);
        line_starting = pos > before ? s[pos - 1] == '\n' : 0;
    }
    push_tok(S, T_EOF, line);
}
