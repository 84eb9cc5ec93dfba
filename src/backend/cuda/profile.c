/*
 * profile.c - where the CUDA backend's time goes (profile.h), development only.
 *
 * The forward pass knows nothing of it. The decode step (and a prefill) is captured into
 * a graph as it normally runs; the graph is timed as a whole, then each of its kernel
 * nodes is replayed alone, as a one-node graph (same arguments and launch attributes),
 * between two events, in the step's order, so every kernel sees the data it would see.
 * All of it is queued behind a spin kernel so that the events time the GPU, not the
 * host's launches; each alone-replay still carries a few microseconds of event and
 * launch overhead, and loses the overlap with its neighbours (programmatic dependent
 * launch), so the one-by-one sum exceeds the graph's time. Kernels are grouped by name
 * (cudaFuncGetName) with their template arguments: k_matvec<type, mode> is enum
 * cuda_wtype (4: Q4_0, 3: Q8_0, ...) and enum cuda_matvec_mode (1: += residual, wo and
 * down; 2: RMSNorm folded in, qkv; 3: SwiGLU, 5: GeGLU, gate|up); k_matvec_stream<type,
 * mode, int8> and k_head<type, int8> add 1 where the input is quantized to int8
 * (matvec.cu), k_attention_decode<dims per
 * lane, wo's type or -1, KV cache type (enum cuda_kv_type: 0 F32, 1 F16, 2 Q8_0)>,
 * k_gemm<type, tokens, rows per tile>.
 */
#define _POSIX_C_SOURCE 200809L

#include "backend/cuda/profile.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/cuda/internal.h"

enum { MAX_GROUPS = 64, STEP_REPS = 10, PREFILL_REPS = 3 };

/* The kernels of a graph in order, each as its own executable one-node graph. */
typedef struct kernel_list {
    cudaGraphExec_t *exec; /* (n) */
    int *group;            /* (n) index into names */
    int n;
    char names[MAX_GROUPS][96];
    int n_groups;
    int n_other; /* nodes that are not kernels (memsets): not timed one by one */
    int n_alone_failed; /* kernel nodes the driver would not instantiate alone (invalid
                         * argument, seen on the H200 for Q4_K_M files): not timed either */
    int listed_order; /* the graph's edges could not be read: nodes as the runtime lists them */
} kernel_list;

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return 1e6 * (double)ts.tv_sec + 1e-3 * (double)ts.tv_nsec;
}

/* "_Z8k_matvecILi3ELi2EEv..." -> "k_matvec<3,2>"; other names as they are. */
static void short_name(const char *mangled, char *out, size_t cap) {
    const char *p = mangled;
    size_t len = 0;
    snprintf(out, cap, "%s", mangled);
    if (strncmp(p, "_Z", 2) != 0)
        return;
    p += 2;
    while (*p >= '0' && *p <= '9')
        len = len * 10 + (size_t)(*p++ - '0');
    if (len == 0 || strlen(p) < len)
        return;
    size_t o = (size_t)snprintf(out, cap, "%.*s", (int)len, p);
    p += len;
    if (*p++ != 'I')
        return;
    /* template arguments: L<type><digits>E, n before the digits for a negative value */
    for (int first = 1; *p == 'L' && o < cap; first = 0) {
        p += 2; /* 'L' and the type letter */
        const int neg = *p == 'n';
        p += neg;
        const char *digits = p;
        while (*p >= '0' && *p <= '9')
            p++;
        o += (size_t)snprintf(out + o, cap - o, "%s%s%.*s", first ? "<" : ",", neg ? "-" : "", (int)(p - digits), digits);
        if (*p++ != 'E')
            return;
    }
    if (o < cap)
        snprintf(out + o, cap - o, ">");
}

static void kernels_free(kernel_list *k) {
    for (int i = 0; i < k->n; i++)
        if (k->exec[i])
            cudaGraphExecDestroy(k->exec[i]);
    free(k->exec);
    free(k->group);
    memset(k, 0, sizeof *k);
}

/* order (n) = nodes (n) in Kahn's order: a node goes once every node it depends on has
 * gone; n_deps: scratch (n). */
static er_status dependency_order(const cudaGraphNode_t *nodes, size_t n, int *n_deps, cudaGraphNode_t *order,
                                  size_t *n_order_out) {
    er_status st = ER_OK;
    size_t n_order = 0;
    for (size_t i = 0; i < n; i++) {
        size_t d = 0;
        CUDA_TRY(cudaGraphNodeGetDependencies(nodes[i], NULL, NULL, &d));
        n_deps[i] = (int)d;
        if (d == 0)
            order[n_order++] = nodes[i];
    }
    for (size_t head = 0; head < n_order; head++) {
        cudaGraphNode_t next[8];
        cudaGraphEdgeData edges[8]; /* programmatic (PDL) edges refuse a query without it */
        size_t n_next = 0;
        CUDA_TRY(cudaGraphNodeGetDependentNodes(order[head], NULL, NULL, &n_next));
        if (n_next == 0)
            continue; /* the last node: asking for none is an invalid argument */
        if (n_next > 8)
            return er_fail(ER_ERR_UNSUPPORTED, "profile: a graph node with %zu dependents", n_next);
        CUDA_TRY(cudaGraphNodeGetDependentNodes(order[head], next, edges, &n_next));
        for (size_t j = 0; j < n_next; j++)
            for (size_t i = 0; i < n; i++)
                if (nodes[i] == next[j] && --n_deps[i] == 0)
                    order[n_order++] = nodes[i];
    }
    if (n_order != n)
        return er_fail(ER_ERR_DEVICE, "profile: %zu of %zu graph nodes ordered", n_order, n);
    *n_order_out = n_order;
    return ER_OK;
fail:
    return st;
}

/* The kernel nodes of graph g in dependency order (a captured stream is a chain). */
static er_status kernels_of(cudaGraph_t g, kernel_list *k) {
    er_status st = ER_OK;
    cudaGraphNode_t *nodes = NULL, *order = NULL;
    int *n_deps = NULL;
    size_t n = 0;
    memset(k, 0, sizeof *k);
    CUDA_TRY(cudaGraphGetNodes(g, NULL, &n));
    nodes = calloc(n, sizeof *nodes);
    order = calloc(n, sizeof *order);
    n_deps = calloc(n, sizeof *n_deps);
    k->exec = calloc(n, sizeof *k->exec);
    k->group = calloc(n, sizeof *k->group);
    if (!nodes || !order || !n_deps || !k->exec || !k->group) {
        st = er_fail(ER_ERR_NO_MEMORY, "profile: out of memory for %zu graph nodes", n);
        goto fail;
    }
    CUDA_TRY(cudaGraphGetNodes(g, nodes, &n));
    size_t n_order = 0;
    if (dependency_order(nodes, n, n_deps, order, &n_order) != ER_OK) {
        /* the order cudaGraphGetNodes lists them in (the report says so); and the failed
         * call's error must not surface at the next launcher's cudaGetLastError */
        cudaGetLastError();
        memcpy(order, nodes, n * sizeof *nodes);
        n_order = n;
        k->listed_order = 1;
    }
    for (size_t i = 0; i < n_order; i++) {
        enum cudaGraphNodeType type;
        CUDA_TRY(cudaGraphNodeGetType(order[i], &type));
        if (type != cudaGraphNodeTypeKernel) {
            k->n_other++;
            continue;
        }
        struct cudaKernelNodeParams params;
        cudaGraph_t one = NULL;
        cudaGraphNode_t node = NULL;
        const char *mangled = NULL;
        char name[96];
        CUDA_TRY(cudaGraphKernelNodeGetParams(order[i], &params));
        if (cudaFuncGetName(&mangled, params.func) != cudaSuccess || !mangled)
            mangled = "kernel";
        short_name(mangled, name, sizeof name);
        CUDA_TRY(cudaGraphCreate(&one, 0));
        cudaError_t e = cudaGraphAddKernelNode(&node, one, NULL, 0, &params);
        if (e == cudaSuccess)
            e = cudaGraphKernelNodeCopyAttributes(node, order[i]);
        if (e == cudaSuccess)
            e = cudaGraphInstantiate(&k->exec[k->n], one, 0);
        cudaGraphDestroy(one);
        if (e != cudaSuccess) { /* a node that cannot run alone is counted, not timed */
            (void)cudaGetLastError();
            k->n_alone_failed++;
            continue;
        }
        int gi = 0;
        while (gi < k->n_groups && strcmp(k->names[gi], name) != 0)
            gi++;
        if (gi == k->n_groups && k->n_groups < MAX_GROUPS)
            snprintf(k->names[k->n_groups++], sizeof k->names[0], "%s", name);
        k->group[k->n] = gi < MAX_GROUPS ? gi : MAX_GROUPS - 1;
        k->n++;
    }
fail:
    free(nodes);
    free(order);
    free(n_deps);
    if (st != ER_OK)
        kernels_free(k);
    return st;
}

/* Replays k's kernels one by one, reps times, each after `before` (NULL: nothing) has
 * been enqueued; adds each group's microseconds into us (MAX_GROUPS) and its launches
 * into count. */
static er_status time_kernels(cuda_context *cc, const kernel_list *k, const cuda_step_state *before, int reps,
                              double *us, int *count) {
    er_status st = ER_OK;
    cudaEvent_t *ev = calloc((size_t)k->n + 1, sizeof *ev);
    int n_ev = 0;
    if (!ev)
        return er_fail(ER_ERR_NO_MEMORY, "profile: out of memory");
    for (; n_ev <= k->n; n_ev++)
        CUDA_TRY(cudaEventCreate(&ev[n_ev]));
    for (int r = 0; r < reps; r++) {
        if (before)
            CUDA_TRY(cudaMemcpyAsync(cc->state, before, sizeof *before, cudaMemcpyHostToDevice, cc->stream));
        CUDA_TRY(cuda_spin(3000000, cc->stream));
        CUDA_TRY(cudaEventRecord(ev[0], cc->stream));
        for (int i = 0; i < k->n; i++) {
            CUDA_TRY(cudaGraphLaunch(k->exec[i], cc->stream));
            CUDA_TRY(cudaEventRecord(ev[i + 1], cc->stream));
        }
        CUDA_TRY(cudaStreamSynchronize(cc->stream));
        for (int i = 0; i < k->n; i++) {
            float ms = 0.0f;
            CUDA_TRY(cudaEventElapsedTime(&ms, ev[i], ev[i + 1]));
            us[k->group[i]] += 1e3 * ms;
            count[k->group[i]]++;
        }
    }
fail:
    for (int i = 0; i < n_ev; i++)
        cudaEventDestroy(ev[i]);
    free(ev);
    return st;
}

/* The graph replayed whole, reps times after `before`: microseconds per replay. */
static er_status time_graph(cuda_context *cc, cudaGraphExec_t exec, const cuda_step_state *before, int reps, double *us) {
    er_status st = ER_OK;
    cudaEvent_t g0 = NULL, g1 = NULL;
    *us = 0.0;
    CUDA_TRY(cudaEventCreate(&g0));
    CUDA_TRY(cudaEventCreate(&g1));
    for (int r = 0; r < reps; r++) {
        float ms = 0.0f;
        if (before)
            CUDA_TRY(cudaMemcpyAsync(cc->state, before, sizeof *before, cudaMemcpyHostToDevice, cc->stream));
        CUDA_TRY(cuda_spin(1000000, cc->stream));
        CUDA_TRY(cudaEventRecord(g0, cc->stream));
        CUDA_TRY(cudaGraphLaunch(exec, cc->stream));
        CUDA_TRY(cudaEventRecord(g1, cc->stream));
        CUDA_TRY(cudaStreamSynchronize(cc->stream));
        CUDA_TRY(cudaEventElapsedTime(&ms, g0, g1));
        *us += 1e3 * ms / reps;
    }
fail:
    if (g0)
        cudaEventDestroy(g0);
    if (g1)
        cudaEventDestroy(g1);
    return st;
}

/* One line per kernel group: launches and microseconds per repetition, share. */
static size_t table(char *report, size_t cap, size_t len, const kernel_list *k, const double *us, const int *count,
                    int reps) {
    double sum = 0.0;
    for (int g = 0; g < k->n_groups; g++)
        sum += us[g] / reps;
    for (int g = 0; g < k->n_groups && len < cap; g++)
        len += (size_t)snprintf(report + len, cap - len, "  %-30s %4d launches %8.1f us %5.1f%%\n", k->names[g],
                                count[g] / reps, us[g] / reps, 100.0 * us[g] / reps / sum);
    if (k->listed_order && len < cap)
        len += (size_t)snprintf(report + len, cap - len, "  (kernels replayed in the order the graph lists them)\n");
    if (k->n_other && len < cap)
        len += (size_t)snprintf(report + len, cap - len, "  (%d other nodes, memsets, not timed alone)\n", k->n_other);
    if (k->n_alone_failed && len < cap)
        len += (size_t)snprintf(report + len, cap - len, "  (%d kernel nodes could not be replayed alone: not timed)\n",
                                k->n_alone_failed);
    return len;
}

/* Captures what enqueue puts on cc->stream into a graph (a prefill when T > 0, else the
 * step at position pos), and instantiates it. */
static er_status capture(cuda_context *cc, int64_t T, int64_t pos, cudaGraph_t *graph, cudaGraphExec_t *exec) {
    er_status st = ER_OK;
    *graph = NULL;
    *exec = NULL;
    CUDA_TRY(cudaStreamBeginCapture(cc->stream, cudaStreamCaptureModeThreadLocal));
    st = T > 0 ? cuda_enqueue_prefill(cc, T, 0, NULL) : cuda_enqueue_step(cc, pos >= cc->split_min);
    {
        cudaError_t e = cudaStreamEndCapture(cc->stream, graph);
        if (st != ER_OK)
            goto fail;
        CUDA_TRY(e);
    }
    CUDA_TRY(cudaGraphInstantiate(exec, *graph, 0));
fail:
    return st;
}

er_status cuda_profile(void *ctx, int64_t pos, const int32_t *tokens, int64_t n_tokens, char *report, size_t cap) {
    cuda_context *cc = ctx;
    er_status st = ER_OK;
    const model_config *c = &cc->cm->m->config;
    const cuda_step_state s = {0, 1, (int32_t)pos, 0};
    kernel_list k;
    cudaGraph_t graph = NULL;
    cudaGraphExec_t exec = NULL, step = NULL;
    double us[MAX_GROUPS] = {0}, graph_us = 0.0, host_step_us = 0.0, host_logits_us = 0.0;
    int count[MAX_GROUPS] = {0};
    float *host_logits = malloc((size_t)c->n_vocab * sizeof(float)); /* (n_vocab) */
    size_t len = 0;
    memset(&k, 0, sizeof k);
    if (!host_logits)
        return er_fail(ER_ERR_NO_MEMORY, "profile: out of memory");
    if (pos < 0 || pos >= cc->n_ctx || n_tokens < 0 || (n_tokens > 0 && (n_tokens <= CUDA_SMALL_PROMPT || n_tokens > cc->n_batch))) {
        st = er_fail(ER_ERR_INVALID_ARG, "profile: position %lld or prefill of %lld tokens out of range", (long long)pos,
                     (long long)n_tokens);
        goto fail;
    }
    /* the step: the graph as decode replays it, and what a 1-token prompt costs the host
     * (time to first token): the step launched and waited for, the logits copied */
    if ((st = cuda_step_graph(cc, pos, &step)) != ER_OK ||
        (st = time_graph(cc, step, &s, STEP_REPS, &graph_us)) != ER_OK)
        goto fail;
    for (int r = 0; r < STEP_REPS; r++) {
        const double t0 = now_us();
        CUDA_TRY(cudaMemcpyAsync(cc->state, &s, sizeof s, cudaMemcpyHostToDevice, cc->stream));
        CUDA_TRY(cudaGraphLaunch(step, cc->stream));
        CUDA_TRY(cudaStreamSynchronize(cc->stream));
        const double t1 = now_us();
        if ((st = cuda_copy_logits(cc, host_logits)) != ER_OK)
            goto fail;
        host_step_us += (t1 - t0) / STEP_REPS;
        host_logits_us += (now_us() - t1) / STEP_REPS;
    }
    len = (size_t)snprintf(report, cap,
                           "step at position %lld: graph %.1f us (host: launched and waited %.1f us, logits to host "
                           "%.1f us); weights %.1f MB, %.0f GB/s over the graph; kernels one by one:\n",
                           (long long)pos, graph_us, host_step_us, host_logits_us,
                           (double)cc->cm->weight_bytes / 1e6, (double)cc->cm->weight_bytes / (graph_us * 1e3));
    if ((st = capture(cc, 0, pos, &graph, &exec)) != ER_OK || (st = kernels_of(graph, &k)) != ER_OK ||
        (st = time_kernels(cc, &k, &s, STEP_REPS, us, count)) != ER_OK)
        goto fail;
    len = table(report, cap, len, &k, us, count, STEP_REPS);
    kernels_free(&k);
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    exec = NULL;
    graph = NULL;
    /* the prefill */
    if (n_tokens > 0) {
        memset(us, 0, sizeof us);
        memset(count, 0, sizeof count);
        CUDA_TRY(cudaMemcpy(cc->tokens, tokens, (size_t)n_tokens * sizeof(int32_t), cudaMemcpyHostToDevice));
        if ((st = capture(cc, n_tokens, 0, &graph, &exec)) != ER_OK || (st = kernels_of(graph, &k)) != ER_OK ||
            (st = time_kernels(cc, &k, NULL, PREFILL_REPS, us, count)) != ER_OK ||
            (st = time_graph(cc, exec, NULL, PREFILL_REPS, &graph_us)) != ER_OK)
            goto fail;
        if (len < cap)
            len += (size_t)snprintf(report + len, cap - len, "prefill of %lld tokens: %.1f us; kernels one by one:\n",
                                    (long long)n_tokens, graph_us);
        table(report, cap, len, &k, us, count, PREFILL_REPS);
    }
fail:
    if (st != ER_OK && len > 0 && len < cap) /* the graph's time stands; say what did not */
        snprintf(report + len, cap - len, "  (not timed further: %s)\n", er_last_error());
    kernels_free(&k);
    if (exec)
        cudaGraphExecDestroy(exec);
    if (graph)
        cudaGraphDestroy(graph);
    free(host_logits);
    return st;
}
