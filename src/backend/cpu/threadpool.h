/*
 * threadpool.h - a fixed set of worker threads for the CPU fast path, created once per
 * context. cpu_pool_run(pool, fn, arg) runs fn(arg, ith, nth) on the caller (ith 0) and on
 * every worker that arrives while the caller is still inside fn, then returns once the
 * caller and every worker that joined have returned.
 *
 * Which workers take part is not known in advance: a worker that the kernel has not
 * scheduled (the machine is shared) or that sleeps simply misses the task. So fn must
 * take its work items from a shared counter (an atomic fetch-add) until none is left,
 * never split them by ith; the caller alone finishes any task. ith is unique among the
 * threads inside one task and < nth (the pool's size): an index into per-thread scratch.
 * Why: with a fixed split every task waits for its slowest thread, and on our shared
 * 2-core VM, with a compiler on one core, a descheduled thread made each of the ~300 tasks
 * of a decode step wait for a time slice (SmolLM2 decode at 2 threads: 4-12 tok/s with
 * the fixed split, 67-130 with this; docs/perf-log.md, 2026-12-02, second session).
 *
 * Workers spin on the task word for a while after a task (a decode step issues ~5 tasks
 * per layer, microseconds apart), then sleep on a condition variable, so an idle context
 * costs no CPU. Threads are pinned to the CPUs this process may use, one each, when there
 * are at least as many CPUs as threads and EDGERUNNER_PIN=1 (see threadpool.c).
 */
#ifndef ER_BACKEND_CPU_THREADPOOL_H
#define ER_BACKEND_CPU_THREADPOOL_H

#include "edgerunner.h"

typedef struct cpu_pool cpu_pool;
typedef void (*cpu_task_fn)(void *arg, int ith, int nth);

er_status cpu_pool_create(int n_threads, cpu_pool **out);
void cpu_pool_free(cpu_pool *pool); /* NULL-safe */
int cpu_pool_size(const cpu_pool *pool);

/* fn(arg, ith, nth) on the caller and on the workers that join in time (see above);
 * returns when all of those have returned. Not reentrant. */
void cpu_pool_run(cpu_pool *pool, cpu_task_fn fn, void *arg);

/* One step of a spin wait inside a task, for items other threads of the task have taken
 * (a pause; after many steps it yields the CPU). *spins starts at 0. */
void cpu_pool_spin(int *spins);

#endif
