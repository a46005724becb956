/*
 * os_machine: the machine's facts, read once at os_init without allocating.
 *
 * Theory
 *   1. The page size comes from the auxiliary vector (magpie's OS_PAGE must agree); the CPUs
 *      from the affinity mask, bounded by the cgroup v2 CPU quota; the cgroup's memory limit
 *      (cpu.max, memory.max of the process's group and its ancestors). The possible CPU ids
 *      (what the kernel may write into an rseq area) come from sysfs, the kernel's transparent
 *      huge page mode too, read when asked.
 *   2. os_random reads the kernel's AT_RANDOM bytes: no system call, usable before anything.
 * Nothing here allocates or takes a lock of magpie's.
 */
#define _GNU_SOURCE
#include "os.h"
#include "os_impl.h"

#include <sched.h>
#include <string.h>
#include <sys/auxv.h>
#include <unistd.h>

static unsigned os_ncpu = 1;  /* set once by os_init */
int os_init_pid;              /* the process that ran os_init */
static os_cgroup_t os_limits; /* set once by os_init */

unsigned long os_parse_ulong(const char **s) {
  unsigned long v = 0;
  while (**s >= '0' && **s <= '9')
    v = v * 10 + (unsigned long)(*(*s)++ - '0');
  return v;
}

/* Appends the NUL-terminated src to path[*n], within cap; false if it does not fit. */
static bool os_path_add(char *path, size_t *n, size_t cap, const char *src, size_t len) {
  if (*n + len >= cap) return false;
  memcpy(path + *n, src, len);
  *n += len;
  path[*n] = '\0';
  return true;
}

/* Tightens out by the limits in one cgroup's directory dir (dir_len bytes of path, whose room
   is cap): cpu.max ("max PERIOD" or "QUOTA PERIOD", the CPUs the quota buys, rounded up) and
   memory.max ("max" or bytes). */
static void os_cgroup_dir(char *path, size_t dir_len, size_t cap, os_cgroup_t *out) {
  char buf[64];
  size_t n = dir_len;
  if (os_path_add(path, &n, cap, "/cpu.max", 8) && os_read_file(path, buf, sizeof buf) > 0 &&
      buf[0] >= '0' && buf[0] <= '9') {
    const char *s = buf;
    unsigned long quota = os_parse_ulong(&s), period = *s++ == ' ' ? os_parse_ulong(&s) : 0;
    unsigned cpus = period ? (unsigned)((quota + period - 1) / period) : 0;
    if (cpus && (!out->cpus || cpus < out->cpus)) out->cpus = cpus;
  }
  n = dir_len;
  if (os_path_add(path, &n, cap, "/memory.max", 11) && os_read_file(path, buf, sizeof buf) > 0 &&
      buf[0] >= '0' && buf[0] <= '9') {
    const char *s = buf;
    uint64_t bytes = os_parse_ulong(&s);
    if (bytes && (!out->memory || bytes < out->memory)) out->memory = bytes;
  }
}

void os_cgroup_read(const char *proc_cgroup, const char *root, os_cgroup_t *out) {
  char buf[512], path[600];
  out->cpus = 0;
  out->memory = 0;
  if (os_read_file(proc_cgroup, buf, sizeof buf) <= 0) return;
  const char *line = buf; /* the v2 entry is "0::/path" */
  while (line && !(line[0] == '0' && line[1] == ':' && line[2] == ':')) {
    while (*line && *line != '\n')
      line++;
    line = *line ? line + 1 : NULL;
  }
  if (!line) return;
  size_t n = 0, group_len = 0;
  while (line[3 + group_len] && line[3 + group_len] != '\n')
    group_len++;
  if (!os_path_add(path, &n, sizeof path, root, strlen(root)) ||
      !os_path_add(path, &n, sizeof path - 16, line + 3, group_len))
    return;
  size_t root_len = strlen(root);
  for (;;) { /* the group and each of its ancestors: every one of their limits applies */
    os_cgroup_dir(path, n, sizeof path, out);
    while (n > root_len && path[n - 1] != '/')
      n--;
    if (n <= root_len) break;
    n--; /* the '/' */
  }
}

void os_init(void) {
  os_init_pid = (int)getpid();
  unsigned long page = getauxval(AT_PAGESZ);
  if (page != 0 && page != OS_PAGE) os_fatal("the kernel's page size is not 4 KiB");
  cpu_set_t set;
  unsigned n = 1;
  if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0)
    n = (unsigned)CPU_COUNT(&set);
  os_cgroup_read("/proc/self/cgroup", "/sys/fs/cgroup", &os_limits);
  os_ncpu = os_limits.cpus && os_limits.cpus < n ? os_limits.cpus : n;
}

uint64_t os_memory_limit(void) {
  return os_limits.memory;
}

unsigned os_cpu_count(void) {
  return os_ncpu;
}

unsigned os_cpu_now(void) {
  int cpu = sched_getcpu(); /* glibc reads its rseq area, or the vDSO's getcpu */
  return cpu < 0 ? 0 : (unsigned)cpu;
}

unsigned os_cpu_possible(void) {
  char buf[256]; /* "0-N", or a list such as "0,2-5": the last number is the highest id */
  if (os_read_file("/sys/devices/system/cpu/possible", buf, sizeof buf) <= 0) return 0;
  const char *s = buf;
  unsigned long last = 0;
  bool seen = false;
  while (*s) {
    if (*s >= '0' && *s <= '9') {
      last = os_parse_ulong(&s);
      seen = true;
    } else {
      s++;
    }
  }
  return seen && last < 65536 ? (unsigned)last + 1 : 0;
}

int os_thp_mode(void) {
  char buf[128];
  if (os_read_file("/sys/kernel/mm/transparent_hugepage/enabled", buf, sizeof buf) <= 0)
    return OS_THP_NONE;
  return strstr(buf, "[always]")    ? OS_THP_ALWAYS
         : strstr(buf, "[madvise]") ? OS_THP_MADVISE
                                    : OS_THP_NEVER;
}

bool os_secure_exec(void) {
  return getauxval(AT_SECURE) != 0;
}

uint64_t os_random(void) {
  uint64_t r = 0;
  const unsigned char *bytes = (const unsigned char *)getauxval(AT_RANDOM);
  if (bytes) memcpy(&r, bytes + 8, sizeof r); /* glibc uses the first 8 for the stack guard */
  return r ^ (uint64_t)(uintptr_t)&r;
}
