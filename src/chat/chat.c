/*
 * chat.c - chat templates: er_chat_apply_template and er_chat_render_json.
 *
 * The template is the file's tokenizer.chat_template, run by the Jinja engine (jinja.h)
 * with the variables Hugging Face's apply_chat_template passes (messages,
 * add_generation_prompt, and the special tokens' texts bos_token and eos_token), given to
 * it as one JSON object (written with core/json.h's json_quote). A file without a template
 * gets ChatML, as llama.cpp does.
 */
#include <stdlib.h>
#include <string.h>

#include "chat/jinja.h"
#include "core/json.h"
#include "core/status.h"
#include "tokenizer/vocab.h"

static const char chatml_template[] =
    "{%- for message in messages -%}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}";

/* The text of a special token as a NUL-terminated string in buf, or NULL. */
static const char *token_text(const vocab *v, int32_t id, char *buf, size_t cap) {
    if (id < 0 || id >= v->n_tokens || v->tokens[id].len >= cap)
        return NULL;
    memcpy(buf, v->tokens[id].data, v->tokens[id].len);
    buf[v->tokens[id].len] = 0;
    return buf;
}

static er_status render(const vocab *v, const char *template_source, const char *json, size_t json_len, strbuf *out) {
    const char *tmpl = template_source;
    size_t tmpl_len = template_source ? strlen(template_source) : 0;
    if (!tmpl && v->chat_template.data) {
        tmpl = v->chat_template.data;
        tmpl_len = v->chat_template.len;
    } else if (!tmpl) {
        tmpl = chatml_template;
        tmpl_len = sizeof chatml_template - 1;
    }
    char bos[256], eos[256];
    jinja_var defaults[3];
    int n = 0;
    defaults[n++] = (jinja_var){"add_generation_prompt", NULL, 0};
    if (token_text(v, v->bos, bos, sizeof bos))
        defaults[n++] = (jinja_var){"bos_token", bos, 0};
    if (token_text(v, v->eos, eos, sizeof eos))
        defaults[n++] = (jinja_var){"eos_token", eos, 0};
    return jinja_render(tmpl, tmpl_len, json, json_len, defaults, n, NULL, out);
}

/* snprintf convention: at most cap bytes with a NUL, *len the full length. */
static er_status copy_out(const strbuf *s, char *buf, int64_t cap, int64_t *len) {
    *len = (int64_t)s->len;
    if (cap > 0) {
        const size_t n = s->len < (size_t)cap ? s->len : (size_t)cap - 1;
        if (n)
            memcpy(buf, s->data, n);
        buf[n] = 0;
    }
    return ER_OK;
}

/* Appends s as a JSON string. */
static er_status put_quoted(strbuf *b, const char *s) {
    const size_t n = strlen(s), quoted = json_quote(NULL, s, n, 0);
    er_status st = strbuf_reserve(b, quoted);
    if (st == ER_OK)
        b->len += json_quote(b->data + b->len, s, n, 0);
    return st;
}

er_status er_chat_apply_template(const er_vocab *v, const er_chat_message *messages, int64_t n_messages,
                                 int add_generation_prompt, char *buf, int64_t cap, int64_t *len) {
    if (!v || (!messages && n_messages > 0) || n_messages < 0 || (!buf && cap > 0) || cap < 0 || !len)
        return er_fail(ER_ERR_INVALID_ARG, "er_chat_apply_template: %s", !v ? "NULL vocabulary" : "bad messages or buffer");
    *len = 0;
    strbuf json = {0}, out = {0};
    er_status st = strbuf_append(&json, "{\"messages\": [", 14);
    for (int64_t i = 0; st == ER_OK && i < n_messages; i++) {
        if (!messages[i].role || !messages[i].content) {
            st = er_fail(ER_ERR_INVALID_ARG, "er_chat_apply_template: message %lld has a NULL %s", (long long)i,
                         messages[i].role ? "content" : "role");
            break;
        }
        if ((i && (st = strbuf_append(&json, ", ", 2)) != ER_OK) || (st = strbuf_append(&json, "{\"role\": ", 9)) != ER_OK ||
            (st = put_quoted(&json, messages[i].role)) != ER_OK || (st = strbuf_append(&json, ", \"content\": ", 13)) != ER_OK ||
            (st = put_quoted(&json, messages[i].content)) != ER_OK || (st = strbuf_append(&json, "}", 1)) != ER_OK)
            break;
    }
    if (st == ER_OK)
        st = add_generation_prompt ? strbuf_append(&json, "], \"add_generation_prompt\": true}", 33)
                                   : strbuf_append(&json, "], \"add_generation_prompt\": false}", 34);
    if (st == ER_OK && (st = render(v, NULL, json.data, json.len, &out)) == ER_OK)
        st = copy_out(&out, buf, cap, len);
    strbuf_free(&json);
    strbuf_free(&out);
    return st;
}

er_status er_chat_render_json(const er_vocab *v, const char *template_source, const char *json, char *buf, int64_t cap,
                              int64_t *len) {
    if (!v || !json || (!buf && cap > 0) || cap < 0 || !len)
        return er_fail(ER_ERR_INVALID_ARG, "er_chat_render_json: %s", !v ? "NULL vocabulary" : !json ? "NULL json" : "bad buffer");
    *len = 0;
    strbuf out = {0};
    er_status st = render(v, template_source, json, strlen(json), &out);
    if (st == ER_OK)
        st = copy_out(&out, buf, cap, len);
    strbuf_free(&out);
    return st;
}
