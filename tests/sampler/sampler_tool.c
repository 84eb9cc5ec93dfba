/*
 * sampler_tool.c - the sampler's penalties on given logits, for tests/sampler (compared
 * with llama.cpp's penalties sampler through llama-cpp-python).
 *
 * stdin, whitespace-separated:
 *   n_vocab repeat_last_n repeat_penalty frequency_penalty presence_penalty
 *   n_history id...        (accepted in this order; the sampler keeps the last repeat_last_n)
 *   logit...               (n_vocab of them)
 * stdout: the n_vocab penalized logits, one per line, as %.9g (float round-trips).
 */
#include <stdio.h>
#include <stdlib.h>

#include "edgerunner.h"

int main(void) {
    long long n_vocab, last_n, n_hist;
    float rep, freq, pres;
    if (scanf("%lld %lld %f %f %f %lld", &n_vocab, &last_n, &rep, &freq, &pres, &n_hist) != 6 || n_vocab <= 0 ||
        n_hist < 0) {
        fprintf(stderr, "sampler_tool: bad header\n");
        return 2;
    }
    er_sampler_params p = er_sampler_default_params();
    p.repeat_last_n = (int32_t)last_n;
    p.repeat_penalty = rep;
    p.frequency_penalty = freq;
    p.presence_penalty = pres;
    er_sampler *s = NULL;
    float *logits = malloc((size_t)n_vocab * sizeof *logits);
    if (!logits || er_sampler_create(&p, n_vocab, &s) != ER_OK) {
        fprintf(stderr, "sampler_tool: %s\n", er_last_error());
        return 2;
    }
    for (long long i = 0; i < n_hist; i++) {
        int id;
        if (scanf("%d", &id) != 1 || er_sampler_accept(s, id) != ER_OK) {
            fprintf(stderr, "sampler_tool: bad history\n");
            return 2;
        }
    }
    for (long long i = 0; i < n_vocab; i++)
        if (scanf("%f", &logits[i]) != 1) {
            fprintf(stderr, "sampler_tool: bad logits\n");
            return 2;
        }
    er_sampler_apply_penalties(s, logits);
    for (long long i = 0; i < n_vocab; i++)
        printf("%.9g\n", logits[i]);
    er_sampler_free(s);
    free(logits);
    return 0;
}
