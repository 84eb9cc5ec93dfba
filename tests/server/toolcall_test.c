/*
 * toolcall_test.c - tool_calls_parse (tools/server/toolcall.c) on the text a model
 * following Qwen3's or Hermes' template writes, and on text that only looks like it.
 * No random-weight model writes a tool call, so the server tests cannot reach these
 * cases through generation. Run by tests/server/run.sh; prints one line per check and
 * exits 1 if any fails.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../tools/server/server.h"

static int n_failed;

static void check(const char *name, int ok, const char *detail) {
    printf("%s  toolcall %s%s%s\n", ok ? "ok  " : "FAIL", name, ok ? "" : ": ", ok ? "" : detail);
    n_failed += !ok;
}

/* Parses text and compares (calls, content) with the JSON `want`: {"calls": [...] or
 * null, "content": ...}. Each call as {"name": ..., "arguments": text}; ids checked apart. */
static void expect(const char *name, const char *text, const char *want_json) {
    json_t *untouched = json_string("untouched"), *content = untouched;
    json_t *calls = tool_calls_parse(text, "t1", &content); /* sets content (a new reference) only with calls */
    json_t *got = json_object(), *simple = json_array(), *want = json_loads(want_json, 0, NULL);
    char ids_ok = 1;
    size_t i;
    json_t *call;
    json_array_foreach(calls, i, call) {
        char id[64];
        snprintf(id, sizeof id, "call_t1_%zu", i);
        json_t *fn = json_object_get(call, "function");
        ids_ok &= !strcmp(json_string_value(json_object_get(call, "id")), id) &&
                  !strcmp(json_string_value(json_object_get(call, "type")), "function");
        json_array_append_new(simple, json_pack("{s:O, s:O}", "name", json_object_get(fn, "name"), "arguments",
                                                json_object_get(fn, "arguments")));
    }
    json_object_set_new(got, "calls", calls ? simple : json_null());
    if (!calls)
        json_decref(simple);
    json_object_set(got, "content", content);
    char *got_text = json_dumps(got, JSON_COMPACT | JSON_SORT_KEYS);
    char *want_text = json_dumps(want, JSON_COMPACT | JSON_SORT_KEYS);
    char detail[2048];
    snprintf(detail, sizeof detail, "got %s, want %s", got_text, want_text ? want_text : "(bad want)");
    check(name, want && json_equal(got, want) && ids_ok, detail);
    free(got_text);
    free(want_text);
    json_decref(calls);
    json_decref(content);
    if (content != untouched)
        json_decref(untouched);
    json_decref(got);
    json_decref(want);
}

int main(void) {
    expect("one call, object arguments",
           "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"celsius\"}}\n</tool_call>",
           "{\"calls\": [{\"name\": \"get_weather\", \"arguments\": \"{\\\"city\\\":\\\"Paris\\\",\\\"unit\\\":\\\"celsius\\\"}\"}],"
           " \"content\": null}");
    expect("string arguments pass as they are", "<tool_call>{\"name\": \"get_time\", \"arguments\": \"{}\"}</tool_call>",
           "{\"calls\": [{\"name\": \"get_time\", \"arguments\": \"{}\"}], \"content\": null}");
    expect("two calls and the text around them",
           "Let me check both.\n<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>\n"
           "<tool_call>\n{\"name\": \"b\", \"arguments\": {\"x\": [1, 2]}}\n</tool_call>\n",
           "{\"calls\": [{\"name\": \"a\", \"arguments\": \"{}\"}, {\"name\": \"b\", \"arguments\": \"{\\\"x\\\":[1,2]}\"}],"
           " \"content\": \"Let me check both.\"}");
    expect("Qwen3's thinking stays in the content",
           "<think>\nThe user wants the weather.\n</think>\n\n<tool_call>\n{\"name\": \"w\", \"arguments\": {}}\n</tool_call>",
           "{\"calls\": [{\"name\": \"w\", \"arguments\": \"{}\"}],"
           " \"content\": \"<think>\\nThe user wants the weather.\\n</think>\"}");
    expect("plain text is no call", "It is sunny in Paris.", "{\"calls\": null, \"content\": \"untouched\"}");
    expect("an unclosed block is text", "<tool_call>\n{\"name\": \"w\", \"arguments\": {}}",
           "{\"calls\": null, \"content\": \"untouched\"}");
    expect("a block that is not JSON is text", "<tool_call>get_weather(Paris)</tool_call>",
           "{\"calls\": null, \"content\": \"untouched\"}");
    expect("a block without a name is text", "<tool_call>{\"arguments\": {}}</tool_call>",
           "{\"calls\": null, \"content\": \"untouched\"}");
    expect("arguments that are a number make it text", "<tool_call>{\"name\": \"w\", \"arguments\": 3}</tool_call>",
           "{\"calls\": null, \"content\": \"untouched\"}");
    expect("one bad block makes all of it text",
           "<tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call><tool_call>{oops}</tool_call>",
           "{\"calls\": null, \"content\": \"untouched\"}");
    expect("invalid UTF-8 around a call becomes U+FFFD", "\xff ok <tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call>",
           "{\"calls\": [{\"name\": \"a\", \"arguments\": \"{}\"}], \"content\": \"\\ufffd ok\"}");
    printf("%d failed\n", n_failed);
    return n_failed ? 1 : 0;
}
