/*
 * toolcall.c - tool calls out of generated text: Qwen3's and Hermes' convention (the one
 * their chat templates teach the model), one <tool_call>{"name": ..., "arguments": ...}
 * </tool_call> block per call, into OpenAI's tool_calls entries. Kept apart from the
 * endpoints so that tests/server/toolcall_test.c checks it on text no random-weight model
 * would write.
 */
#define _GNU_SOURCE

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server.h"

json_t *tool_calls_parse(const char *text, const char *id_prefix, json_t **content) {
    static const char open_tag[] = "<tool_call>", close_tag[] = "</tool_call>";
    json_t *calls = json_array();
    sbuf rest = {0};
    const char *at = text;
    for (const char *start; (start = strstr(at, open_tag)) != NULL;) {
        const char *body = start + strlen(open_tag), *end = strstr(body, close_tag);
        json_t *call = end ? json_loadb(body, (size_t)(end - body), 0, NULL) : NULL;
        json_t *name = json_object_get(call, "name"), *args = json_object_get(call, "arguments");
        if (!json_is_string(name) || !(json_is_object(args) || json_is_string(args))) {
            json_decref(call);
            goto not_calls;
        }
        char *args_text = json_is_string(args) ? strdup(json_string_value(args)) : json_dumps(args, JSON_COMPACT);
        char id[80];
        snprintf(id, sizeof id, "call_%.48s_%zu", id_prefix, json_array_size(calls));
        json_array_append_new(calls, json_pack("{s:s, s:s, s:{s:O, s:s}}", "id", id, "type", "function", "function",
                                               "name", name, "arguments", args_text ? args_text : "{}"));
        free(args_text);
        json_decref(call);
        sbuf_add(&rest, at, (size_t)(start - at));
        at = end + strlen(close_tag);
    }
    if (json_array_size(calls) == 0)
        goto not_calls;
    sbuf_add(&rest, at, strlen(at));
    const char *s = rest.data ? rest.data : "";
    size_t len = rest.len;
    while (len && strchr(" \t\r\n", *s))
        s++, len--;
    while (len && strchr(" \t\r\n", s[len - 1]))
        len--;
    *content = len ? json_text(s, len) : json_null();
    sbuf_free(&rest);
    return calls;
not_calls:
    sbuf_free(&rest);
    json_decref(calls);
    return NULL;
}
