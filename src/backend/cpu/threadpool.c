/*
 * threadpool.c - see threadpool.h.
 *
 * The task word `task` holds (generation << GEN_SHIFT) | OPEN | workers inside fn. The
 * caller publishes a task by storing fn and arg, then a new generation with OPEN and no
 * worker inside (seq_cst). A worker that sees a new generation joins by a compare-and-swap
 * that adds one to the inside count, which succeeds only while the word still shows that
 * generation and OPEN; only then does it read fn and arg. When the caller's own fn returns,
 * every work item has been taken: it clears OPEN (no one joins after that) and spins until
 * the inside count is zero, i.e. only on workers that are running the task's last items.
 * The next task's fn and arg are written only after that, so no worker reads them torn.
 * The generation wraps at 2^16; a worker that missed exactly 2^16 tasks and joins a task
 * it takes for an old one is harmless, since joining any open task is correct.
 *
 * Workers spin on the word (yielding the CPU at each step after YIELD_AFTER, as the
 * caller's wait does), then sleep once they have spun SPIN_ITERS times without news. A
 * worker increments `n_sleeping` under the mutex and re-checks the generation before
 * waiting; the caller reads `n_sleeping` after publishing and broadcasts under the mutex
 * when it is non-zero, so a wake-up is never lost (both sides use seq_cst: one of them
 * sees the other). Each shared word sits on its own cache line.
 */
#define _GNU_SOURCE

#include "backend/cpu/threadpool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "core/status.h"

enum { MAX_THREADS = 256, SPIN_ITERS = 1 << 17, YIELD_AFTER = 1 << 14, LINE = 64 };

/* the task word's fields */
#define GEN_SHIFT 16u
#define OPEN (1u << 15)
#define INSIDE (OPEN - 1u) /* > MAX_THREADS */

typedef struct worker {
    cpu_pool *pool;
    pthread_t thread;
    int ith;
    int started;
} worker;

struct cpu_pool {
    int n_threads;
    cpu_task_fn fn;
    void *arg;
    _Alignas(LINE) atomic_uint task; /* (generation << GEN_SHIFT) | OPEN | workers inside fn */
    _Alignas(LINE) atomic_int n_sleeping;
    atomic_int stop;
    pthread_mutex_t mutex;
    pthread_cond_t cond;
    worker *workers; /* (n_threads), [0] is the caller */
};

/* One step of a spin wait; after YIELD_AFTER steps it yields the CPU at each step, so
 * that on an oversubscribed machine the thread being waited for gets to run. */
static inline void spin_step(int *spins) {
    if (++*spins > YIELD_AFTER) {
        sched_yield();
        return;
    }
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* Pins the calling thread to the ith CPU this process may run on, when there are enough
 * and EDGERUNNER_PIN=1. Off by default: on a machine shared with other jobs (ours is) a
 * pinned thread cannot move off a core another process is using, and a task's last
 * items wait for it; llama.cpp does not pin by default either. */
static void pin(int ith, int n_threads) {
    const char *env = getenv("EDGERUNNER_PIN");
    cpu_set_t allowed;
    if (!env || strcmp(env, "1") != 0)
        return;
    if (sched_getaffinity(0, sizeof allowed, &allowed) != 0 || CPU_COUNT(&allowed) < n_threads)
        return;
    for (int cpu = 0, k = 0; cpu < CPU_SETSIZE; cpu++) {
        if (!CPU_ISSET(cpu, &allowed))
            continue;
        if (k++ == ith) {
            cpu_set_t one;
            CPU_ZERO(&one);
            CPU_SET(cpu, &one);
            pthread_setaffinity_np(pthread_self(), sizeof one, &one);
            return;
        }
    }
}

static unsigned gen_of(unsigned task) { return task >> GEN_SHIFT; }

static void *worker_main(void *p) {
    worker *w = p;
    cpu_pool *pool = w->pool;
    unsigned seen = 0; /* the generation of the last task this worker saw */
    pin(w->ith, pool->n_threads);
    for (;;) {
        unsigned s;
        int spins = 0;
        while (gen_of(s = atomic_load(&pool->task)) == seen && !atomic_load(&pool->stop)) {
            if (spins < SPIN_ITERS) {
                spin_step(&spins);
                continue;
            }
            pthread_mutex_lock(&pool->mutex);
            atomic_fetch_add(&pool->n_sleeping, 1);
            while (gen_of(atomic_load(&pool->task)) == seen && !atomic_load(&pool->stop))
                pthread_cond_wait(&pool->cond, &pool->mutex);
            atomic_fetch_sub(&pool->n_sleeping, 1);
            pthread_mutex_unlock(&pool->mutex);
            spins = 0;
        }
        if (atomic_load(&pool->stop))
            return NULL;
        seen = gen_of(s);
        /* join while the task is open; a failed exchange reloads s */
        while ((s & OPEN) && gen_of(s) == seen) {
            if (atomic_compare_exchange_weak(&pool->task, &s, s + 1)) {
                pool->fn(pool->arg, w->ith, pool->n_threads);
                atomic_fetch_sub(&pool->task, 1);
                break;
            }
        }
    }
}

static void wake_all(cpu_pool *pool) {
    if (atomic_load(&pool->n_sleeping) > 0) {
        pthread_mutex_lock(&pool->mutex);
        pthread_cond_broadcast(&pool->cond);
        pthread_mutex_unlock(&pool->mutex);
    }
}

er_status cpu_pool_create(int n_threads, cpu_pool **out) {
    *out = NULL;
    if (n_threads < 1)
        n_threads = 1;
    if (n_threads > MAX_THREADS)
        n_threads = MAX_THREADS;
    cpu_pool *pool = aligned_alloc(LINE, (sizeof(cpu_pool) + LINE - 1) / LINE * LINE);
    if (!pool)
        return er_fail(ER_ERR_NO_MEMORY, "cpu_pool_create: out of memory");
    *pool = (cpu_pool){0};
    pool->n_threads = n_threads;
    atomic_init(&pool->task, 0);
    atomic_init(&pool->n_sleeping, 0);
    atomic_init(&pool->stop, 0);
    pthread_mutex_init(&pool->mutex, NULL);
    pthread_cond_init(&pool->cond, NULL);
    pool->workers = calloc((size_t)n_threads, sizeof *pool->workers);
    if (!pool->workers) {
        cpu_pool_free(pool);
        return er_fail(ER_ERR_NO_MEMORY, "cpu_pool_create: out of memory");
    }
    for (int i = 0; i < n_threads; i++) {
        pool->workers[i].pool = pool;
        pool->workers[i].ith = i;
    }
    for (int i = 1; i < n_threads; i++) {
        if (pthread_create(&pool->workers[i].thread, NULL, worker_main, &pool->workers[i]) != 0) {
            /* run with the threads we have: a pool of i threads */
            pool->n_threads = i;
            break;
        }
        pool->workers[i].started = 1;
    }
    *out = pool;
    return ER_OK;
}

void cpu_pool_free(cpu_pool *pool) {
    if (!pool)
        return;
    if (pool->workers) {
        pthread_mutex_lock(&pool->mutex);
        atomic_store(&pool->stop, 1);
        pthread_cond_broadcast(&pool->cond);
        pthread_mutex_unlock(&pool->mutex);
        for (int i = 1; i < pool->n_threads; i++)
            if (pool->workers[i].started)
                pthread_join(pool->workers[i].thread, NULL);
        free(pool->workers);
    }
    pthread_mutex_destroy(&pool->mutex);
    pthread_cond_destroy(&pool->cond);
    free(pool);
}

int cpu_pool_size(const cpu_pool *pool) { return pool ? pool->n_threads : 1; }

void cpu_pool_spin(int *spins) { spin_step(spins); }

void cpu_pool_run(cpu_pool *pool, cpu_task_fn fn, void *arg) {
    if (pool->n_threads == 1) {
        fn(arg, 0, 1);
        return;
    }
    pool->fn = fn;
    pool->arg = arg;
    /* no worker is inside (the last run waited for that): a new generation, open */
    atomic_store(&pool->task, (gen_of(atomic_load(&pool->task)) + 1u) << GEN_SHIFT | OPEN);
    wake_all(pool);
    fn(arg, 0, pool->n_threads);
    /* every item is taken: close, then wait for the workers still on their last items */
    unsigned s = atomic_fetch_and(&pool->task, ~OPEN);
    int spins = 0;
    while (s & INSIDE) {
        spin_step(&spins);
        s = atomic_load(&pool->task);
    }
}
