/*
 * main.c - the `edgerunner` command line: dispatch to one file per subcommand.
 *
 * Flags follow llama.cpp's where one exists. Output meant for programs (ids, text)
 * goes to stdout; logs and errors to stderr. Any error: one line on stderr, exit 1.
 */
#define _POSIX_C_SOURCE 200809L

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

/* A model file truncated while mapped: reading a page that is gone raises SIGBUS, which
 * no load-time check can prevent. The library installs no handlers (that is the
 * program's business); here it gives the one line naming the file, then exit 1. The
 * handler must be async-signal-safe: the line is formatted beforehand, it only writes. */
static char sigbus_line[1024];
static size_t sigbus_len;

static void on_sigbus(int sig) {
    (void)sig;
    if (write(STDERR_FILENO, sigbus_line, sigbus_len) < 0) {
        /* nothing more can be done */
    }
    _exit(1);
}

void cli_catch_sigbus(const char *path) {
    int n = snprintf(sigbus_line, sizeof sigbus_line - 1, "edgerunner: %.900s: the file was truncated or changed "
                     "while in use (SIGBUS); do not modify a model file while it is loaded", path);
    if (n < 0)
        n = 0;
    sigbus_len = (size_t)n < sizeof sigbus_line - 2 ? (size_t)n : sizeof sigbus_line - 2;
    for (size_t i = 0; i < sigbus_len; i++) /* one line, whatever the path holds */
        if ((unsigned char)sigbus_line[i] < 0x20)
            sigbus_line[i] = '?';
    sigbus_line[sigbus_len++] = '\n';
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigbus;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGBUS, &sa, NULL);
}

static void usage(FILE *out) {
    fprintf(out,
            "usage: edgerunner COMMAND [options]\n"
            "\n"
            "commands:\n"
            "  run   -m MODEL (-p TEXT [--special] | --prompt-ids ID,ID,...) [-n N] [--temp 0] [--ids] [--ignore-eos]\n"
            "        [-c N_CTX] [-b N_BATCH] [-t N_THREADS] [-ctk T] [-ctv T] [--backend cpu|cuda]\n"
            "        [--reference] [--dump-logits FILE] [--perf]\n"
            "        [sampling: --temp --top-k --top-p --min-p --repeat-penalty --repeat-last-n\n"
            "         --presence-penalty --frequency-penalty --seed]\n"
            "        generation (greedy with --temp 0) from a text prompt (BOS as the model asks; special tokens\n"
            "        parsed only with --special) or from token ids; prints text, or ids with --ids\n"
            "        --perf: the time of the prompt's pass and the generation (not the load) to stderr\n"
            "        --dump-logits writes the logits of every prompt token, float32\n"
            "        (n_prompt x n_vocab), and generates nothing unless -n is given\n"
            "        -ctk/--cache-type-k, -ctv/--cache-type-v: the KV cache's K and V types (run, chat,\n"
            "        perplexity, bench): f32, f16 or q8_0; default f16 on the CPU fast path (f32 or f16)\n"
            "        and on CUDA (one type for K and V), f32 with --reference (which rounds K and V\n"
            "        through f16 or q8_0 when asked, the oracle of the other backends)\n"
            "  chat  -m MODEL [--system TEXT] [-n N] [-c N_CTX] [-t N_THREADS] [-ctk T] [-ctv T] [--backend cpu|cuda]\n"
            "        [--reference]\n"
            "        interactive chat through the model's chat template, one user turn per line\n"
            "        on stdin (/reset, /exit); --render-json FILE [--template FILE] prints the\n"
            "        template's rendering of the JSON variables in FILE and exits\n"
            "  tokenize -m MODEL [--ids] [--special] [--no-bos] (TEXT | -f FILE) [--batch] [--decode]\n"
            "        token ids and pieces of TEXT (any GGUF with a tokenizer, vocab-only too);\n"
            "        --batch: NUL-separated texts, one line of ids each; --decode: ids -> text;\n"
            "        -- ends the options (every command), so that a TEXT may start with '-'\n"
            "  perplexity -m MODEL -f TEXT [-c 512] [--chunks N] [-b N_BATCH] [-t N_THREADS] [-ctk T] [-ctv T]\n"
            "        [--backend cpu|cuda] [--reference]\n"
            "        perplexity on TEXT as llama.cpp defines it: chunks of -c tokens, the second\n"
            "        half of each scored\n"
            "  serve -m MODEL [--host 127.0.0.1] [--port 8080] [-np|--parallel N] [--api-key KEY] [-a|--alias NAME]\n"
            "        [--chat-template-file FILE] [-c N_CTX] [-t N_THREADS] [-ctk T] [-ctv T] [--backend cpu|cuda]\n"
            "        [--reference]\n"
            "        an OpenAI- and Anthropic-compatible HTTP server: /v1/chat/completions, /v1/completions,\n"
            "        /v1/messages, /v1/models, /tokenize, /detokenize, /apply-template, /health, /metrics, a chat\n"
            "        page at /; N slots (one context each), a queue beyond them; SIGTERM/SIGINT finishes\n"
            "        what is in flight and exits 0\n"
            "  info  -m MODEL   metadata and tensor summary of a GGUF file (or of a folder, as GGUF)\n"
            "  quantize IN.gguf OUT.gguf TYPE [-t N] [--allow-requantize]\n"
            "        rewrites IN with its weights in TYPE: F32 F16 BF16 Q8_0 Q4_0 Q4_1 Q5_0 Q5_1\n"
            "        Q2_K Q3_K Q4_K Q5_K Q6_K (every weight in TYPE), or llama.cpp's mixes\n"
            "        Q4_K_M Q4_K_S Q5_K_M Q5_K_S\n"
            "  convert DIR OUT.gguf [TYPE] [-t N]\n"
            "        writes the Hugging Face folder DIR as a GGUF (llama.cpp's metadata keys and\n"
            "        tensor names); without TYPE every tensor keeps the folder's type\n");
    fputs(cli_bench_usage, out);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 1;
    }
    if (!strcmp(argv[1], "run"))
        return cmd_run(argc - 2, argv + 2);
    if (!strcmp(argv[1], "info"))
        return cmd_info(argc - 2, argv + 2);
    if (!strcmp(argv[1], "quantize"))
        return cmd_quantize(argc - 2, argv + 2);
    if (!strcmp(argv[1], "convert"))
        return cmd_convert(argc - 2, argv + 2);
    if (!strcmp(argv[1], "tokenize"))
        return cmd_tokenize(argc - 2, argv + 2);
    if (!strcmp(argv[1], "chat"))
        return cmd_chat(argc - 2, argv + 2);
    if (!strcmp(argv[1], "perplexity"))
        return cmd_perplexity(argc - 2, argv + 2);
    if (!strcmp(argv[1], "serve"))
        return cmd_serve(argc - 2, argv + 2);
    if (!strcmp(argv[1], "bench"))
        return cmd_bench(argc - 2, argv + 2);
    if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    fprintf(stderr, "edgerunner: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 1;
}
