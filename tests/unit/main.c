/* main.c - runs every unit test suite; run from the repository root. */
#include <stdio.h>
#include <string.h>

#include "test.h"

int test_checks_failed;
int test_checks_passed;

typedef struct suite {
    const char *name;
    void (*run)(void);
} suite;

int main(int argc, char **argv) {
    /* a line at a time, also into a file: a run cut by a time limit (a device call) still
     * shows how far it got */
    setvbuf(stdout, NULL, _IOLBF, 0);
    static const suite suites[] = {
        {"gguf", test_gguf},
        {"safetensors", test_safetensors},
        {"hf_quant", test_hf_quant},
        {"types", test_types},
        {"model", test_model},
        {"batch", test_batch},
        {"tokenizer", test_tokenizer},
        {"chat", test_chat},
        {"quant", test_quant},
        {"sampler", test_sampler},
        {"cpu", test_cpu},
        {"cuda", test_cuda},
        {"cuda_gemm", test_cuda_gemm},
    };
    int n_suites_passed = 0, n_suites_failed = 0;
    for (size_t i = 0; i < sizeof suites / sizeof suites[0]; i++) {
        if (argc > 1 && strcmp(argv[1], suites[i].name) != 0)
            continue;
        const int failed_before = test_checks_failed, passed_before = test_checks_passed;
        suites[i].run();
        const int failed = test_checks_failed - failed_before;
        printf("%-6s %s: %d checks passed, %d failed\n", failed ? "FAIL" : "ok", suites[i].name,
               test_checks_passed - passed_before, failed);
        if (failed)
            n_suites_failed++;
        else
            n_suites_passed++;
    }
    printf("%d passed, %d failed\n", n_suites_passed, n_suites_failed);
    return n_suites_failed ? 1 : 0;
}
