/*
 * sched.c - the scheduler: continuous batching over one shared context, and the slots'
 * KV rows as a prefix cache.
 *
 * One thread runs the loop: admit queued jobs into idle slots, build one batch from every
 * active slot (one token of each generating sequence, then the next chunk of each prompt
 * still being fed, while they fit in n_batch), decode it with er_context_decode_batch,
 * and hand each slot's logits to its er_text_gen. A request that arrives joins at the
 * next step; one that ends, or whose client leaves, frees its slot at that step.
 *
 * Exactness: with temperature 0 a request's text depends neither on who shares its steps
 * (the library's batch invariance) nor on whether its prefix came from the cache. The CPU
 * fast path multiplies a sequence's chunk of ER_PROMPT_CHUNK_MIN (32) tokens or more in
 * f32 and a shorter one with 8-bit activations, and nothing else changes a row's numbers;
 * so:
 *   - a prompt of 32 tokens or more is fed in chunks of at least 32 (a chunk that would
 *     leave fewer behind is shortened), as `edgerunner run` feeds it (in one, up to 512);
 *   - a cached prefix is reused only where its rows were computed that way (n_exact: the
 *     rows of a prompt of >= 32 tokens; not generated rows, computed one at a time), and
 *     only up to 32 tokens before the end of the new prompt, so that the rest is
 *     computed as it would be without the cache.
 * The price: a reply's own tokens are recomputed in the next turn of a chat.
 *
 * Prefix cache: an ended request's slot keeps its prompt's rows (its generated rows are
 * freed). A new request takes the idle slot whose rows share the longest usable prefix
 * with its prompt, else the least recently used idle slot (the eviction); a longer prefix
 * held by any other slot (busy ones too: rows already fed are final) is copied in
 * (er_context_seq_copy, a memcpy per layer, against recomputing it).
 */
#define _GNU_SOURCE

#include <stdlib.h>
#include <string.h>

#include "server.h"

enum { PROMPT_CHUNK = 256 }; /* prompt tokens of one slot per step: bounds the others' wait */

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* Leading tokens of its rows slot s may lend to prompt j (see the header). */
static int64_t usable_prefix(const slot *s, const job *j) {
    const int64_t limit = j->n_prompt >= ER_PROMPT_CHUNK_MIN ? j->n_prompt - ER_PROMPT_CHUNK_MIN : 0;
    const int64_t n = min64(s->n_exact, limit);
    int64_t i = 0;
    while (i < n && s->tokens[i] == j->prompt[i])
        i++;
    return i;
}

/* Adds or removes KV rows of the active slots in /metrics. */
static void count_kv(server *srv, int64_t n) {
    pthread_mutex_lock(&srv->mu);
    srv->m.kv_tokens += n;
    pthread_mutex_unlock(&srv->mu);
}

/* The end of s's request, for whatever reason: the API's last bytes, the job released,
 * the generated rows freed (the prompt's stay as a cached prefix), the slot idle. */
static void end_job(server *srv, slot *s, er_status st, er_stop_reason if_running) {
    job *j = s->job;
    er_text_result r;
    memset(&r, 0, sizeof r);
    r.stop_index = -1;
    if (st == ER_OK)
        st = er_text_gen_finish(s->gen, if_running, &r);
    r.n_prompt = j->n_prompt;
    j->api->finish(j, &r, st);
    er_text_gen_free(s->gen);
    s->gen = NULL;
    const int64_t held = s->n_tokens;
    if (er_context_seq_remove(srv->ctx, s->seq, s->n_exact) != ER_OK)
        s->n_exact = 0; /* cannot happen (n_exact <= n_tokens); then keep nothing */
    s->n_tokens = er_context_seq_pos(srv->ctx, s->seq);
    pthread_mutex_lock(&srv->mu);
    srv->m.kv_tokens -= held;
    srv->m.running--;
    if (st == ER_OK) {
        srv->m.requests_ok++;
        srv->m.prompt_tokens += (uint64_t)j->n_prompt;
    } else {
        srv->m.requests_failed++;
    }
    pthread_mutex_unlock(&srv->mu);
    pthread_mutex_lock(&j->mu);
    j->done = 1;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
    job_release(j);
    s->job = NULL;
    s->generating = 0;
    s->last_used = ++srv->clock;
}

/* Job j (already counted as running) into an idle slot, with the longest usable cached
 * prefix. */
static void admit(server *srv, job *j) {
    slot *target = NULL, *source = NULL;
    int64_t n_target = 0, n_source = 0;
    for (int i = 0; i < srv->n_slots; i++) {
        slot *s = &srv->slots[i];
        const int64_t n = usable_prefix(s, j);
        if (!s->job && (!target || n > n_target || (n == n_target && s->last_used < target->last_used))) {
            target = s;
            n_target = n;
        }
        if (n > n_source) {
            source = s;
            n_source = n;
        }
    }
    /* target: the caller admits only while a slot is idle */
    int64_t reuse = n_target;
    er_status st = ER_OK;
    if (source && source != target && n_source > n_target) {
        if ((st = er_context_seq_copy(srv->ctx, source->seq, target->seq, n_source)) == ER_OK) {
            memcpy(target->tokens, source->tokens, (size_t)n_source * sizeof(int32_t));
            reuse = n_source;
        }
    }
    if (st == ER_OK)
        st = er_context_seq_remove(srv->ctx, target->seq, reuse);
    target->n_tokens = target->n_exact = target->n_fed = reuse;
    target->job = j;
    target->generating = 0;
    j->n_cached = reuse;
    j->params.on_token = job_on_token;
    j->params.on_token_user = j;
    pthread_mutex_lock(&srv->mu);
    srv->m.kv_tokens += reuse;
    srv->m.prefix_hits += reuse > 0;
    srv->m.cached_tokens += (uint64_t)reuse;
    pthread_mutex_unlock(&srv->mu);
    if (st == ER_OK && (st = er_text_gen_create(srv->model, &j->params, job_on_text, j, &target->gen)) == ER_OK)
        st = er_text_gen_prompt(target->gen, j->prompt, j->n_prompt);
    j->api->start(j);
    if (st != ER_OK)
        end_job(srv, target, st, ER_STOP_NONE);
}

/* Prompt tokens of s to feed this step (see the header: never a tail shorter than 32
 * behind a chunk of a prompt that has 32 or more left). */
static int64_t chunk_size(const server *srv, const slot *s) {
    const int64_t left = s->job->n_prompt - s->n_fed;
    if (left <= srv->chunk)
        return left;
    if (left - srv->chunk < ER_PROMPT_CHUNK_MIN && left - ER_PROMPT_CHUNK_MIN >= ER_PROMPT_CHUNK_MIN)
        return left - ER_PROMPT_CHUNK_MIN;
    return srv->chunk;
}

static void add_token(server *srv, int64_t *n, int32_t token, const slot *s, int64_t pos, int want) {
    srv->b_tokens[*n] = token;
    srv->b_seq[*n] = s->seq;
    srv->b_pos[*n] = pos;
    srv->b_want[*n] = (int8_t)want;
    srv->b_slot[*n] = (int32_t)(s - srv->slots);
    (*n)++;
}

/* One step: a batch of every active slot's tokens, decoded, each slot's logits to its
 * generator. */
static void step(server *srv) {
    int64_t n = 0;
    for (int pass = 0; pass < 2; pass++) /* generating slots first: a prompt never delays them */
        for (int i = 0; i < srv->n_slots; i++) {
            slot *s = &srv->slots[i];
            if (!s->job || s->generating != (pass == 0))
                continue;
            if (job_is_cancelled(s->job)) {
                end_job(srv, s, ER_OK, ER_STOP_CALLBACK);
            } else if (s->generating && s->n_tokens >= srv->n_ctx) {
                end_job(srv, s, ER_OK, ER_STOP_CONTEXT);
            } else if (s->generating) {
                add_token(srv, &n, s->next, s, s->n_tokens, 1);
            } else {
                const int64_t c = chunk_size(srv, s);
                if (n + c > srv->n_batch)
                    continue; /* waits for the next step */
                for (int64_t t = s->n_fed; t < s->n_fed + c; t++)
                    add_token(srv, &n, s->job->prompt[t], s, t, t == s->job->n_prompt - 1);
            }
        }
    if (n == 0)
        return;
    const er_batch b = {n, srv->b_tokens, srv->b_seq, srv->b_pos, srv->b_want};
    /* the logits rows stay in the context (page-locked on CUDA), read in place */
    const er_status st = er_context_decode_batch(srv->ctx, &b, NULL);
    pthread_mutex_lock(&srv->mu);
    srv->m.steps++;
    pthread_mutex_unlock(&srv->mu);
    if (st != ER_OK) { /* the checks make this a bug; the requests fail, the server goes on */
        for (int64_t t = 0; t < n; t++)
            if (srv->slots[srv->b_slot[t]].job)
                end_job(srv, &srv->slots[srv->b_slot[t]], st, ER_STOP_NONE);
        return;
    }
    count_kv(srv, n);
    int64_t row = 0;
    for (int64_t t = 0; t < n; t++) {
        slot *s = &srv->slots[srv->b_slot[t]];
        s->tokens[s->n_tokens++] = srv->b_tokens[t];
        if (!s->generating) {
            s->n_fed++;
            s->n_exact = s->job->n_prompt >= ER_PROMPT_CHUNK_MIN ? s->n_fed : 0;
        }
        if (!srv->b_want[t])
            continue;
        int32_t token = 0;
        int done = 0;
        const er_status gst = er_text_gen_step(s->gen, er_context_batch_logits(srv->ctx, row++), &token, &done);
        s->generating = 1;
        if (gst != ER_OK || done)
            end_job(srv, s, gst, ER_STOP_NONE);
        else
            s->next = token;
    }
}

static int n_active(const server *srv) {
    int n = 0;
    for (int i = 0; i < srv->n_slots; i++)
        n += srv->slots[i].job != NULL;
    return n;
}

/* Queued jobs into idle slots, under srv->mu; a job cancelled while it waited ends unrun. */
static void admit_queued(server *srv) {
    while (srv->queue_head && n_active(srv) < srv->n_slots) {
        job *j = srv->queue_head;
        srv->queue_head = j->next;
        if (!srv->queue_head)
            srv->queue_tail = NULL;
        srv->m.waiting--;
        if (job_is_cancelled(j)) {
            pthread_mutex_lock(&j->mu);
            j->done = 1;
            pthread_cond_broadcast(&j->cv);
            pthread_mutex_unlock(&j->mu);
            job_release(j);
            continue;
        }
        srv->m.running++;
        pthread_mutex_unlock(&srv->mu);
        admit(srv, j);
        pthread_mutex_lock(&srv->mu);
    }
}

static void *scheduler(void *arg) {
    server *srv = arg;
    for (;;) {
        pthread_mutex_lock(&srv->mu);
        admit_queued(srv);
        while (n_active(srv) == 0 && !srv->queue_head && !srv->stopping)
            pthread_cond_wait(&srv->cv, &srv->mu);
        const int stop = srv->stopping && !srv->queue_head && n_active(srv) == 0;
        pthread_mutex_unlock(&srv->mu);
        if (stop)
            break;
        step(srv);
    }
    return NULL;
}

int pool_start(server *srv) {
    srv->n_ctx = er_context_n_ctx(srv->ctx);
    srv->n_threads = er_context_n_threads(srv->ctx);
    srv->n_batch = er_context_n_batch(srv->ctx);
    srv->chunk = min64(PROMPT_CHUNK, srv->n_batch - srv->n_slots);
    const size_t n_b = (size_t)srv->n_batch;
    srv->b_tokens = malloc(n_b * sizeof(int32_t));
    srv->b_seq = malloc(n_b * sizeof(int32_t));
    srv->b_slot = malloc(n_b * sizeof(int32_t));
    srv->b_pos = malloc(n_b * sizeof(int64_t));
    srv->b_want = malloc(n_b);
    int ok = srv->b_tokens && srv->b_seq && srv->b_slot && srv->b_pos && srv->b_want;
    for (int i = 0; ok && i < srv->n_slots; i++) {
        srv->slots[i].seq = i;
        ok = (srv->slots[i].tokens = malloc((size_t)srv->n_ctx * sizeof(int32_t))) != NULL;
    }
    if (!ok || pthread_create(&srv->sched, NULL, scheduler, srv) != 0)
        return -1;
    srv->sched_started = 1;
    return 0;
}

void pool_stop(server *srv) {
    pthread_mutex_lock(&srv->mu);
    srv->stopping = 1;
    pthread_cond_broadcast(&srv->cv);
    pthread_mutex_unlock(&srv->mu);
    if (srv->sched_started)
        pthread_join(srv->sched, NULL);
    srv->sched_started = 0;
    for (int i = 0; srv->slots && i < srv->n_slots; i++)
        free(srv->slots[i].tokens);
    free(srv->b_tokens);
    free(srv->b_seq);
    free(srv->b_slot);
    free(srv->b_pos);
    free(srv->b_want);
    er_context_free(srv->ctx);
    srv->ctx = NULL;
}
