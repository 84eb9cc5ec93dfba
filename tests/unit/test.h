/*
 * test.h - the unit tests' tiny harness: CHECK counts a failure and goes on; each
 * suite is a function listed in main.c; the run ends with "N passed, M failed".
 */
#ifndef ER_TEST_H
#define ER_TEST_H

#include <stdint.h>
#include <stdio.h>

#include "edgerunner.h"

extern int test_checks_failed;
extern int test_checks_passed;

#define CHECK(cond, ...)                                                   \
    do {                                                                   \
        if (cond) {                                                        \
            test_checks_passed++;                                          \
        } else {                                                           \
            test_checks_failed++;                                          \
            fprintf(stderr, "%s:%d: CHECK(%s) failed: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                  \
            fprintf(stderr, "\n");                                         \
        }                                                                  \
    } while (0)

/* Where the test data lives (tests/data), relative to the repository root. */
#define TEST_DATA "tests/data/"

void test_gguf(void);
void test_safetensors(void);
void test_hf_quant(void);
void test_types(void);
void test_model(void);
void test_batch(void);
void test_tokenizer(void);
void test_chat(void);
void test_quant(void);
void test_sampler(void);
void test_cpu(void);

/* The CPU reference on model m at 2, 3 and 4 threads against 1 (test_cpu.c): every logit
 * of a prefill of prompt (n_prompt ids) and of n_gen greedy decode steps after it, bit for
 * bit; a failed CHECK for each difference. Returns the comparisons that matched (of 6). */
/* Resident kB of this process's mapping of `file` (a path suffix), from /proc/self/smaps
 * (test_hf_quant.c). */
long test_resident_kb(const char *file);

int test_reference_threads(er_model *m, const char *name, const int32_t *prompt, int64_t n_prompt, int64_t n_gen);
void test_cuda(void);
void test_cuda_gemm(void);

#endif
