/* stream.c - stream a model's continuation of a prompt: the facade in a few lines.
 *   build/examples/stream -m tests/data/stories260K.gguf -p "Once upon a time" -n 64 --seed 42 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "edgerunner.h"

static int print_piece(const char *text, int64_t len, void *user) {
    (void)user;
    fwrite(text, 1, (size_t)len, stdout);
    return fflush(stdout) != 0; /* non-zero stops generation */
}

int main(int argc, char **argv) {
    const char *path = NULL, *prompt = "Once upon a time";
    er_text_params tp = er_text_default_params(); /* temperature 1.0, top-k 40, top-p 0.9 */
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "-m")) path = argv[i + 1];
        else if (!strcmp(argv[i], "-p")) prompt = argv[i + 1];
        else if (!strcmp(argv[i], "-n")) tp.max_tokens = atoll(argv[i + 1]);
        else if (!strcmp(argv[i], "--seed")) tp.sampling.seed = strtoull(argv[i + 1], NULL, 10);
    }
    er_model *model = NULL;
    er_context *ctx = NULL;
    er_status st = er_model_open(path, &model);
    if (st == ER_OK) st = er_context_create(model, NULL, &ctx);
    if (st == ER_OK) st = er_stream_text(ctx, prompt, &tp, print_piece, NULL, NULL);
    printf("\n");
    if (st != ER_OK) fprintf(stderr, "stream: %s\n", er_last_error());
    er_context_free(ctx);
    er_model_free(model);
    return st == ER_OK ? 0 : 1;
}
