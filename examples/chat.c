/*
 * chat.c - a chat loop on the public API: each line on stdin is a user turn; the whole
 * conversation goes through the model's chat template, and the reply streams to stdout.
 *   build/examples/chat -m MODEL.gguf [-n MAX_TOKENS] [--seed S] [--temp T]
 *
 * For clarity this re-feeds the whole conversation each turn (er_context_rewind(ctx, 0));
 * `edgerunner chat` (tools/cli/chat.c) shows how to feed only what is new.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "edgerunner.h"

typedef struct reply {
    char *text;
    size_t len;
} reply;

static int on_text(const char *text, int64_t len, void *user) {
    reply *r = user;
    char *grown = realloc(r->text, r->len + (size_t)len + 1);
    if (!grown)
        return 1;
    memcpy(grown + r->len, text, (size_t)len);
    r->text = grown;
    r->len += (size_t)len;
    r->text[r->len] = 0;
    fwrite(text, 1, (size_t)len, stdout);
    fflush(stdout);
    return 0;
}

int main(int argc, char **argv) {
    const char *path = NULL;
    er_text_params tp = er_text_default_params();
    tp.parse_special = 1; /* the template's <|im_start|> etc. are control tokens */
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "-m"))
            path = argv[i + 1];
        else if (!strcmp(argv[i], "-n"))
            tp.max_tokens = atoll(argv[i + 1]);
        else if (!strcmp(argv[i], "--seed"))
            tp.sampling.seed = strtoull(argv[i + 1], NULL, 10);
        else if (!strcmp(argv[i], "--temp"))
            tp.sampling.temperature = strtof(argv[i + 1], NULL);
    }
    er_model *model = NULL;
    er_context *ctx = NULL;
    er_chat_message *msgs = NULL;
    int64_t n_msgs = 0;
    char *line = NULL, *prompt = NULL;
    size_t cap = 0;
    er_status st = er_model_open(path, &model);
    if (st == ER_OK)
        st = er_context_create(model, NULL, &ctx);
    while (st == ER_OK && getline(&line, &cap, stdin) > 0) {
        line[strcspn(line, "\r\n")] = 0;
        er_chat_message *grown = realloc(msgs, (size_t)(n_msgs + 2) * sizeof *msgs);
        if (!grown)
            break;
        msgs = grown;
        msgs[n_msgs++] = (er_chat_message){"user", strdup(line)};
        int64_t len = 0;
        const er_vocab *vocab = er_model_vocab(model);
        if ((st = er_chat_apply_template(vocab, msgs, n_msgs, 1, NULL, 0, &len)) != ER_OK ||
            !(prompt = realloc(prompt, (size_t)len + 1)) ||
            (st = er_chat_apply_template(vocab, msgs, n_msgs, 1, prompt, len + 1, &len)) != ER_OK)
            break;
        reply r = {NULL, 0};
        er_context_rewind(ctx, 0);
        st = er_stream_text(ctx, prompt, &tp, on_text, &r, NULL);
        printf("\n");
        msgs[n_msgs++] = (er_chat_message){"assistant", r.text ? r.text : strdup("")};
    }
    if (st != ER_OK)
        fprintf(stderr, "chat: %s\n", er_last_error());
    for (int64_t i = 0; i < n_msgs; i++)
        free((char *)msgs[i].content);
    free(msgs);
    free(line);
    free(prompt);
    er_context_free(ctx);
    er_model_free(model);
    return st == ER_OK ? 0 : 1;
}
