/*
 * threadpool.h - a fixed set of worker threads for the CPU fast path, created once per
 * context. cpu_pool_run(pool, fn, arg) runs fn(arg, ith, nth) on all nth threads (the
 * caller is thread 0) and returns when every one has finished. Workers spin on a
 * generation counter for a while after a task (a decode step issues ~10 tasks per layer,
 * microseconds apart), then sleep on a condition variable, so an idle context costs no
 * CPU. Threads are pinned to the CPUs this process may use, one each, when there are at
 * least as many CPUs as threads and EDGERUNNER_PIN=1 (see threadpool.c).
 */
#ifndef ER_BACKEND_CPU_THREADPOOL_H
#define ER_BACKEND_CPU_THREADPOOL_H

#include "edgerunner.h"

typedef struct cpu_pool cpu_pool;
typedef void (*cpu_task_fn)(void *arg, int ith, int nth);

er_status cpu_pool_create(int n_threads, cpu_pool **out);
void cpu_pool_free(cpu_pool *pool); /* NULL-safe */
int cpu_pool_size(const cpu_pool *pool);

/* fn(arg, ith, nth) on every thread; returns when all have returned. Not reentrant. */
void cpu_pool_run(cpu_pool *pool, cpu_task_fn fn, void *arg);

/* Inside a task: waits until all nth threads of the pool have reached it (spinning). */
void cpu_pool_barrier(cpu_pool *pool);

#endif
