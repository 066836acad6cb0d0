/*
 * cores.c - bpe_cores_available: how many threads a call uses when its caller leaves the
 * choice to us (n_threads 0).
 *
 * Two things bound it.  The CPU affinity set (taskset, a container's cpuset) says which cores
 * the process may run on; it is read on every call (one system call), so a change made while
 * the process runs is followed.  A cgroup CPU quota says how much CPU time it gets: a
 * container started with `--cpus=2` on a 64-core host keeps all 64 cores in its affinity set
 * but is throttled to two cores' worth of time per period, so 64 threads would only add
 * memory (each has its word cache and buffers), switching and throttling stalls.  The quota
 * counts as ceil(quota / period) cores, and the smallest quota on the path from the
 * process's cgroup up to its hierarchy's root applies (a parent's limit binds its children).
 *
 * Where the quota is: /proc/self/cgroup names the process's cgroup, for cgroup v2 on the line
 * "0::PATH" and for v1 on the line whose controller list holds "cpu"; /proc/self/mountinfo
 * says where that hierarchy is mounted (fields: mount root, mount point, ..., "-", fs type,
 * source, super options).  The cgroup's directory is the mount point followed by PATH less
 * the mount root (inside a container the mount root is often PATH itself).  v2 keeps the
 * quota in cpu.max ("max 100000" or "QUOTA PERIOD"), v1 in cpu.cfs_quota_us (-1: none) and
 * cpu.cfs_period_us.  Anything missing or unreadable means no quota: the affinity count
 * stands, as before this file existed.
 *
 * The quota is looked up on the first call and kept (see cgroup_limit: no lock, so fork()
 * cannot leave one held; a forked child inherits the answer).  A quota changed while the
 * process runs is not seen.  bpe_cgroup_cpu_limit does the lookup under a
 * directory prefix, which is how the tests give it made-up /proc and cgroup files.
 */
#if defined(__linux__) && !defined(_GNU_SOURCE)
#define _GNU_SOURCE       /* sched_getaffinity, CPU_COUNT */
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#if defined(__linux__)
#include <sched.h>
#endif

#include "bpe.h"

#define PATH_ROOM 4096
#define LINE_ROOM 8192

/* Where one cgroup hierarchy of the process is: its cgroup path, and (from mountinfo) the
 * hierarchy's mount root and mount point. */
typedef struct hierarchy {
    int v2;                      /* 1: cgroup v2 (cpu.max); 0: v1 (cpu.cfs_*_us) */
    char path[PATH_ROOM];        /* the process's cgroup, as /proc/self/cgroup names it */
    char mount_root[PATH_ROOM];  /* the cgroup the mount shows at its mount point */
    char mount_point[PATH_ROOM]; /* where it is mounted */
} hierarchy;

/* 1 when the comma-separated list holds the item exactly. */
static int list_has(const char *list, const char *item)
{
    size_t n = strlen(item);
    const char *p = list;
    while (p != NULL && *p != '\0') {
        if (strncmp(p, item, n) == 0 && (p[n] == ',' || p[n] == '\0'))
            return 1;
        p = strchr(p, ',');
        if (p != NULL)
            p++;
    }
    return 0;
}

static FILE *open_under(const char *prefix, const char *path)
{
    char full[PATH_ROOM];
    int n = snprintf(full, sizeof full, "%s%s", prefix, path);
    if (n < 0 || (size_t)n >= sizeof full)
        return NULL;
    return fopen(full, "r");
}

/* Reads a whole line into line (room bytes) without its newline; 0 at the end of the file or
 * for a line too long to be one we want (it is skipped). */
static int read_line(FILE *f, char *line, size_t room)
{
    size_t n;
    while (fgets(line, (int)room, f) != NULL) {
        n = strlen(line);
        if (n > 0 && line[n - 1] == '\n') {
            line[n - 1] = '\0';
            return 1;
        }
        if (feof(f))
            return 1;
        while (fgets(line, (int)room, f) != NULL && strchr(line, '\n') == NULL)
            ;      /* the rest of an overlong line */
    }
    return 0;
}

/* Copies src (at most room - 1 bytes) into dst; 0 when it does not fit. */
static int copy_str(char *dst, size_t room, const char *src)
{
    size_t n = strlen(src);
    if (n >= room)
        return 0;
    memcpy(dst, src, n + 1);
    return 1;
}

/* From /proc/self/cgroup: the v2 cgroup path, or the v1 path of the cpu controller.  A v1 cpu
 * line wins over the v2 line (on a hybrid system the cpu controller is v1's).  1 if found. */
static int find_cgroup(const char *prefix, hierarchy *h)
{
    char line[LINE_ROOM];
    int found = 0;
    FILE *f = open_under(prefix, "/proc/self/cgroup");
    if (f == NULL)
        return 0;
    while (read_line(f, line, sizeof line)) {
        char *controllers = strchr(line, ':'), *path;
        if (controllers == NULL || (path = strchr(controllers + 1, ':')) == NULL)
            continue;
        *controllers++ = '\0';
        *path++ = '\0';
        if (strcmp(line, "0") == 0 && *controllers == '\0' && !found) {
            h->v2 = 1;
            found = copy_str(h->path, sizeof h->path, path);
        } else if (list_has(controllers, "cpu")) {
            h->v2 = 0;
            found = copy_str(h->path, sizeof h->path, path);
            break;
        }
    }
    fclose(f);
    return found;
}

/* Decodes mountinfo's octal escapes (\040 for a space) in place. */
static void unescape(char *s)
{
    char *out = s;
    while (*s != '\0') {
        if (s[0] == '\\' && s[1] >= '0' && s[1] <= '3' && s[2] >= '0' && s[2] <= '7' &&
            s[3] >= '0' && s[3] <= '7') {
            *out++ = (char)((s[1] - '0') * 64 + (s[2] - '0') * 8 + (s[3] - '0'));
            s += 4;
        } else {
            *out++ = *s++;
        }
    }
    *out = '\0';
}

/* Splits a mountinfo line ("ID PARENT MAJ:MIN ROOT POINT OPTIONS [TAG:VALUE...] - TYPE
 * SOURCE SUPER_OPTIONS") into its mount root, mount point, fs type and super options; 0 for
 * a line of another shape. */
static int mount_fields(char *line, char **root, char **point, char **type, char **options)
{
    char *field[64], *save = NULL, *tok;
    int n = 0, dash;
    for (tok = strtok_r(line, " ", &save); tok != NULL && n < 64; tok = strtok_r(NULL, " ", &save))
        field[n++] = tok;
    for (dash = 6; dash < n && strcmp(field[dash], "-") != 0; dash++)
        ;
    if (dash + 3 >= n)
        return 0;
    *root = field[3];
    *point = field[4];
    *type = field[dash + 1];
    *options = field[dash + 3];
    return 1;
}

/* From /proc/self/mountinfo: the mount of h's hierarchy.  1 if found. */
static int find_mount(const char *prefix, hierarchy *h)
{
    char line[LINE_ROOM];
    int found = 0;
    FILE *f = open_under(prefix, "/proc/self/mountinfo");
    if (f == NULL)
        return 0;
    while (!found && read_line(f, line, sizeof line)) {
        char *root, *point, *type, *options;
        if (!mount_fields(line, &root, &point, &type, &options))
            continue;
        if (h->v2 ? strcmp(type, "cgroup2") != 0
                  : strcmp(type, "cgroup") != 0 || !list_has(options, "cpu"))
            continue;
        unescape(root);
        unescape(point);
        found = copy_str(h->mount_root, sizeof h->mount_root, root) &&
                copy_str(h->mount_point, sizeof h->mount_point, point);
    }
    fclose(f);
    return found;
}

/* The first line of the file prefix + dir + "/" + name, in line; 0 if unreadable. */
static int read_value(const char *prefix, const char *dir, const char *name, char *line,
                      size_t room)
{
    char path[PATH_ROOM];
    int n = snprintf(path, sizeof path, "%s/%s", dir, name), ok;
    FILE *f;
    if (n < 0 || (size_t)n >= sizeof path || (f = open_under(prefix, path)) == NULL)
        return 0;
    ok = read_line(f, line, room);
    fclose(f);
    return ok;
}

/* ceil(quota / period) as a core count (at most BPE_MAX_THREADS), or 0 for no quota. */
static int quota_cores(long long quota, long long period)
{
    long long cores;
    if (quota <= 0 || period <= 0)
        return 0;
    cores = quota / period + (quota % period != 0);
    return cores > BPE_MAX_THREADS ? BPE_MAX_THREADS : (int)cores;
}

/* The quota set on the cgroup directory dir alone, in cores, or 0 for none. */
static int dir_limit(const char *prefix, const hierarchy *h, const char *dir)
{
    char quota[64], period[64];
    if (h->v2) {
        char *end;
        long long q, p;
        if (!read_value(prefix, dir, "cpu.max", quota, sizeof quota) ||
            strncmp(quota, "max", 3) == 0)
            return 0;
        q = strtoll(quota, &end, 10);
        p = strtoll(end, NULL, 10);
        return quota_cores(q, p);
    }
    if (!read_value(prefix, dir, "cpu.cfs_quota_us", quota, sizeof quota) ||
        !read_value(prefix, dir, "cpu.cfs_period_us", period, sizeof period))
        return 0;
    return quota_cores(strtoll(quota, NULL, 10), strtoll(period, NULL, 10));
}

/* The process's cgroup directory: the mount point followed by its path less the mount root
 * (which must be a whole-component prefix of it).  0 when the cgroup is not under the
 * mount. */
static int cgroup_dir(const hierarchy *h, char *dir, size_t room)
{
    const char *rel = h->path;
    size_t n = strlen(h->mount_root);
    int len;
    if (strcmp(h->mount_root, "/") != 0) {
        if (strncmp(rel, h->mount_root, n) != 0 || (rel[n] != '\0' && rel[n] != '/'))
            return 0;
        rel += n;
    }
    len = snprintf(dir, room, "%s%s", h->mount_point, strcmp(rel, "/") == 0 ? "" : rel);
    return len >= 0 && (size_t)len < room;
}

int bpe_cgroup_cpu_limit(const char *prefix)
{
    hierarchy h;
    char dir[2 * PATH_ROOM];
    size_t base;
    int limit = 0, here;
    if (prefix == NULL)
        prefix = "";
    memset(&h, 0, sizeof h);
    if (!find_cgroup(prefix, &h) || !find_mount(prefix, &h) || !cgroup_dir(&h, dir, sizeof dir))
        return 0;
    base = strlen(h.mount_point);
    for (;;) {                        /* the cgroup, then each parent up to the mount point */
        char *slash;
        here = dir_limit(prefix, &h, dir);
        if (here > 0 && (limit == 0 || here < limit))
            limit = here;
        slash = strrchr(dir, '/');
        if (strlen(dir) <= base || slash == NULL || (size_t)(slash - dir) < base)
            break;
        *slash = '\0';
    }
    return limit;
}

/* bpe_cgroup_cpu_limit(""), or -1 before it is known.  Threads that find it unknown each look
 * it up and store the same answer (atomically): no lock, so nothing a fork() made while a
 * thread held it could leave locked in the child. */
static int process_limit = -1;

static int cgroup_limit(void)
{
    int limit = __atomic_load_n(&process_limit, __ATOMIC_RELAXED);
    if (limit < 0) {
        limit = bpe_cgroup_cpu_limit("");
        __atomic_store_n(&process_limit, limit, __ATOMIC_RELAXED);
    }
    return limit;
}

int bpe_cores_available(void)
{
    long n = 0;
    int limit;
#if defined(__linux__)
    cpu_set_t set;                       /* taskset / a container's cpuset, where set */
    if (sched_getaffinity(0, sizeof set, &set) == 0)
        n = CPU_COUNT(&set);
#endif
    if (n < 1)
        n = sysconf(_SC_NPROCESSORS_ONLN);
    if (n < 1)
        n = 1;
    limit = cgroup_limit();
    if (limit > 0 && limit < n)
        n = limit;
    return n > BPE_MAX_THREADS ? BPE_MAX_THREADS : (int)n;
}
