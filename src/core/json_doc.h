/*
 * json_doc.h - a whole JSON document as a tree, for the files a model folder holds
 * (config.json, tokenizer.json, the SafeTensors header), built on the pull reader of
 * json.h, which checks the text.
 *
 * The tree is two arrays: nodes in document order (a container's members follow it, each
 * with the index of the next member) and the decoded strings, each NUL-terminated (a
 * string may also hold a NUL of its own: its length says where it ends). Nothing points
 * into the text, which may be freed after parsing. A tree of N nodes takes about
 * 48 N bytes plus its strings: tokenizer.json of Llama-3 (9 MB) is ~30 MB.
 *
 *   json_doc *d;
 *   json_doc_parse(text, n, "config.json", 64, &d);        error: "config.json: JSON: ..."
 *   const json_node *root = json_doc_root(d);
 *   const json_node *h = json_doc_get(d, root, "hidden_size");     NULL: no such member
 *   for (const json_node *m = json_doc_first(d, obj); m; m = json_doc_next(d, m)) ...
 *   json_doc_free(d);
 */
#ifndef ER_CORE_JSON_DOC_H
#define ER_CORE_JSON_DOC_H

#include <stddef.h>
#include <stdint.h>

#include "core/json.h"
#include "edgerunner.h"

typedef struct json_node {
    json_kind kind; /* never JSON_END */
    size_t key;     /* a member of an object: its key, an offset into the strings */
    size_t key_len;
    size_t str;     /* JSON_STRING: offset into the strings */
    size_t len;     /* JSON_STRING: bytes; JSON_ARRAY, JSON_OBJECT: members */
    int64_t i;      /* JSON_INT, JSON_BOOL (0 or 1) */
    double f;       /* JSON_FLOAT, and JSON_INT as a double */
    size_t next;    /* the next member of the same container; 0: none */
} json_node;

typedef struct json_doc json_doc;

/* Parses text[0..n); `name` prefixes error messages; max_depth as json_init. Text that is
 * not UTF-8 is refused (naming the byte offset), as every JSON file of a model folder
 * must be UTF-8. */
er_status json_doc_parse(const char *text, size_t n, const char *name, int max_depth, json_doc **out);
void json_doc_free(json_doc *d); /* NULL-safe */

const json_node *json_doc_root(const json_doc *d);
/* The member `key` of object `obj`, or NULL (also when obj is NULL or not an object). */
const json_node *json_doc_get(const json_doc *d, const json_node *obj, const char *key);
/* The first member of a container (NULL: empty, or not a container), and the next one. */
const json_node *json_doc_first(const json_doc *d, const json_node *container);
const json_node *json_doc_next(const json_doc *d, const json_node *member);
/* A node's string (JSON_STRING) or key, NUL-terminated; "" for other kinds. */
const char *json_doc_str(const json_doc *d, const json_node *node);
const char *json_doc_key(const json_doc *d, const json_node *member);
/* Whether node is a string equal to s. */
int json_doc_is(const json_doc *d, const json_node *node, const char *s);

#endif
