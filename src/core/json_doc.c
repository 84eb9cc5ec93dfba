/*
 * json_doc.c - a JSON document as a tree (see json_doc.h).
 *
 * Built in one pass over the pull reader's items, without recursion: a stack holds, per
 * open container, its node and the last member seen, whose `next` the following member
 * fills in.
 */
#include "core/json_doc.h"

#include <stdlib.h>
#include <string.h>

#include "core/status.h"
#include "core/utf8.h"

struct json_doc {
    json_node *nodes; /* (n_nodes) in document order; nodes[0] is the top value */
    size_t n_nodes, cap_nodes;
    char *strings; /* (n_strings) decoded keys and strings, each followed by a NUL */
    size_t n_strings, cap_strings;
};

static int grow(void **buf, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap)
        return 1;
    size_t cap2 = *cap ? *cap : 64;
    while (cap2 < need)
        cap2 *= 2;
    void *p = realloc(*buf, cap2 * elem);
    if (!p)
        return 0;
    *buf = p;
    *cap = cap2;
    return 1;
}

/* Appends the decoded bytes of s and a NUL; its offset in *at. */
static int add_string(json_doc *d, json_str s, size_t *at) {
    if (!grow((void **)&d->strings, &d->cap_strings, d->n_strings + s.len + 1, 1))
        return 0;
    *at = d->n_strings;
    json_decode(s, d->strings + d->n_strings);
    d->strings[d->n_strings + s.len] = 0;
    d->n_strings += s.len + 1;
    return 1;
}

/* The offset of the first byte that is not well-formed UTF-8, or n. */
static size_t utf8_invalid_at(const char *text, size_t n) {
    for (size_t i = 0; i < n;) {
        const size_t at = i;
        if (utf8_next((const unsigned char *)text, n, &i) < 0)
            return at;
    }
    return n;
}

er_status json_doc_parse(const char *text, size_t n, const char *name, int max_depth, json_doc **out) {
    er_status st = ER_OK;
    typedef struct open_container {
        size_t node, last; /* last: its last member so far; 0 before the first */
    } open_container;
    open_container *stack = NULL; /* (max_depth + 1) */
    json_reader *r = malloc(sizeof *r);
    json_doc *d = calloc(1, sizeof *d);
    *out = NULL;
    if (max_depth < 0 || max_depth > JSON_MAX_DEPTH)
        max_depth = JSON_MAX_DEPTH;
    stack = malloc(((size_t)max_depth + 1) * sizeof *stack);
    if (!r || !d || !stack) {
        st = er_fail(ER_ERR_NO_MEMORY, "%s: out of memory", name);
        goto fail;
    }
    const size_t bad = utf8_invalid_at(text, n);
    if (bad < n) {
        st = er_fail(ER_ERR_FORMAT, "%s: JSON: not UTF-8 at byte %zu", name, bad);
        goto fail;
    }
    json_init(r, text, n, max_depth);
    r->big_int_as_float = 1;
    size_t depth = 0;
    json_item it;
    for (;;) {
        if (!json_next(r, &it)) {
            st = er_fail(ER_ERR_FORMAT, "%s: JSON: %s at byte %zu", name, r->error, r->error_at);
            goto fail;
        }
        if (it.kind == JSON_END) {
            if (depth == 0)
                break; /* the end of the text */
            depth--;
            continue;
        }
        if (!grow((void **)&d->nodes, &d->cap_nodes, d->n_nodes + 1, sizeof *d->nodes)) {
            st = er_fail(ER_ERR_NO_MEMORY, "%s: out of memory for %zu JSON values", name, d->n_nodes + 1);
            goto fail;
        }
        const size_t at = d->n_nodes++;
        json_node *node = &d->nodes[at];
        memset(node, 0, sizeof *node);
        node->kind = it.kind;
        node->i = it.kind == JSON_BOOL ? it.boolean : it.i;
        node->f = it.kind == JSON_INT ? (double)it.i : it.f;
        if ((it.kind == JSON_STRING && !add_string(d, it.str, &d->nodes[at].str))) {
            st = er_fail(ER_ERR_NO_MEMORY, "%s: out of memory for JSON strings", name);
            goto fail;
        }
        d->nodes[at].len = it.kind == JSON_STRING ? it.str.len : 0;
        if (depth > 0) {
            open_container *parent = &stack[depth - 1];
            if (d->nodes[parent->node].kind == JSON_OBJECT) {
                if (!add_string(d, it.key, &d->nodes[at].key)) {
                    st = er_fail(ER_ERR_NO_MEMORY, "%s: out of memory for JSON strings", name);
                    goto fail;
                }
                d->nodes[at].key_len = it.key.len;
            }
            if (parent->last)
                d->nodes[parent->last].next = at;
            parent->last = at;
            d->nodes[parent->node].len++;
        }
        if (it.kind == JSON_ARRAY || it.kind == JSON_OBJECT)
            stack[depth++] = (open_container){at, 0}; /* the reader bounds depth by max_depth */
    }
    free(stack);
    free(r);
    *out = d;
    return ER_OK;
fail:
    free(stack);
    free(r);
    json_doc_free(d);
    return st;
}

void json_doc_free(json_doc *d) {
    if (!d)
        return;
    free(d->nodes);
    free(d->strings);
    free(d);
}

const json_node *json_doc_root(const json_doc *d) { return &d->nodes[0]; }

const json_node *json_doc_first(const json_doc *d, const json_node *c) {
    (void)d;
    if (!c || (c->kind != JSON_ARRAY && c->kind != JSON_OBJECT) || c->len == 0)
        return NULL;
    return c + 1; /* members follow their container */
}

const json_node *json_doc_next(const json_doc *d, const json_node *m) { return m->next ? &d->nodes[m->next] : NULL; }

const json_node *json_doc_get(const json_doc *d, const json_node *obj, const char *key) {
    if (!obj || obj->kind != JSON_OBJECT)
        return NULL;
    const size_t n = strlen(key);
    for (const json_node *m = json_doc_first(d, obj); m; m = json_doc_next(d, m))
        if (m->key_len == n && !memcmp(d->strings + m->key, key, n))
            return m;
    return NULL;
}

const char *json_doc_str(const json_doc *d, const json_node *node) {
    return node && node->kind == JSON_STRING ? d->strings + node->str : "";
}

const char *json_doc_key(const json_doc *d, const json_node *m) { return d->strings + m->key; }

int json_doc_is(const json_doc *d, const json_node *node, const char *s) {
    return node && node->kind == JSON_STRING && node->len == strlen(s) && !memcmp(d->strings + node->str, s, node->len);
}
