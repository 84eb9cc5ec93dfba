/*
 * cpus.h - how many CPUs this process may use: what a default thread count is sized by,
 * and what an explicit one is capped to (more threads than CPUs wait for each other at
 * every barrier of the thread pool: -t 1024 on 2 CPUs had not made 64 tokens in 10
 * minutes).
 */
#ifndef ER_CORE_CPUS_H
#define ER_CORE_CPUS_H

/* The smaller of the CPUs in this thread's affinity mask (taskset, a cpuset cgroup) and
 * the cgroup CPU quota (v2 cpu.max of this process's cgroup and its ancestors, else v1
 * cpu.cfs_quota_us), the quota rounded up; at least 1. Reads /proc and /sys on each call. */
int er_usable_cpus(void);

/* The CPUs a cgroup v2 cpu.max line allows ("QUOTA PERIOD": QUOTA / PERIOD rounded up),
 * or 0 for no limit: "max ...", an empty or malformed line. */
int er_cpus_of_quota(const char *cpu_max);

#endif
