/*
 * cpus.c - the CPUs this process may use (cpus.h). sysconf(_SC_NPROCESSORS_ONLN) counts
 * the machine's: under `taskset -c 0`, or in a container limited by a cpuset or a CPU
 * quota, a thread per online CPU made decoding 180x slower (threads that cannot run at
 * once spin at every barrier).
 */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */

#include "core/cpus.h"

#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { MAX_CPUS = 1 << 20 };

int er_cpus_of_quota(const char *s) {
    char *end;
    if (!s)
        return 0;
    errno = 0;
    const long long quota = strtoll(s, &end, 10);
    if (errno || end == s || *end != ' ' || quota <= 0) /* "max", "-1" (cgroup v1): no limit */
        return 0;
    s = end;
    const long long period = strtoll(s, &end, 10);
    if (errno || end == s || (*end && *end != '\n') || period <= 0)
        return 0;
    const long long n = quota / period + (quota % period != 0);
    return n > MAX_CPUS ? MAX_CPUS : (int)n;
}

/* The first line of a small file, without its newline; 0 when it cannot be read. */
static int read_line(const char *path, char *buf, size_t cap) {
    FILE *f = fopen(path, "r");
    const int ok = f && fgets(buf, (int)cap, f) != NULL;
    if (f)
        fclose(f);
    if (ok)
        buf[strcspn(buf, "\n")] = '\0';
    return ok;
}

/* The smallest cgroup v2 cpu.max limit of this process's cgroup and its ancestors (a
 * parent's quota bounds its children), else cgroup v1's quota at the mount's root (what
 * a container sees); 0 when there is none. */
static int quota_cpus(void) {
    char line[4096], path[4200], v1[64];
    int best = 0;
    FILE *f = fopen("/proc/self/cgroup", "r");
    char *cg = NULL;
    while (f && !cg && fgets(line, sizeof line, f))
        if (!strncmp(line, "0::/", 4)) /* the v2 hierarchy's line */
            cg = line + 3;
    if (f)
        fclose(f);
    if (cg) {
        cg[strcspn(cg, "\n")] = '\0';
        if (strstr(cg, "/..")) /* outside our cgroup namespace: only its root is visible */
            cg[1] = '\0';
        for (;;) {
            char cpu_max[128];
            snprintf(path, sizeof path, "/sys/fs/cgroup%s/cpu.max", strcmp(cg, "/") ? cg : "");
            const int n = read_line(path, cpu_max, sizeof cpu_max) ? er_cpus_of_quota(cpu_max) : 0;
            if (n > 0 && (best == 0 || n < best))
                best = n;
            char *slash = strrchr(cg, '/');
            if (slash == cg) {
                if (cg[1] == '\0')
                    break;
                cg[1] = '\0'; /* the root, last */
            } else {
                *slash = '\0';
            }
        }
    }
    char quota[32], period[32];
    if (best == 0 && read_line("/sys/fs/cgroup/cpu/cpu.cfs_quota_us", quota, sizeof quota) &&
        read_line("/sys/fs/cgroup/cpu/cpu.cfs_period_us", period, sizeof period)) {
        snprintf(v1, sizeof v1, "%s %s", quota, period);
        best = er_cpus_of_quota(v1);
    }
    return best;
}

int er_usable_cpus(void) {
    cpu_set_t set;
    long n = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : sysconf(_SC_NPROCESSORS_ONLN);
    const int quota = quota_cpus();
    if (quota > 0 && quota < n)
        n = quota;
    return n < 1 ? 1 : n > MAX_CPUS ? MAX_CPUS : (int)n;
}
