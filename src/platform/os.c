/*
 * os: every system call magpie makes goes through this file.
 *
 * Theory
 *   1. Memory: anonymous private mappings. os_map_aligned over-maps by the alignment and unmaps
 *      the ends, so an aligned span costs no waste after the call. os_purge uses MADV_DONTNEED:
 *      the pages go back at once and read as zero afterwards, which lets vmem mark purged
 *      ranges clean (calloc then skips the memset). MADV_FREE is lazier but leaves RSS high
 *      until the kernel is under pressure and gives no zero guarantee, so it is not used.
 *   2. Machine facts are read at os_init without allocating: the page size from the auxiliary
 *      vector; the CPUs from the affinity mask, bounded by the cgroup v2 CPU quota; the
 *      cgroup's memory limit (cpu.max, memory.max of the process's group and its ancestors);
 *      whether glibc registered an rseq area (__rseq_size; magpie never registers a second
 *      one). The possible CPU ids (what the kernel may write into an rseq area) come from sysfs.
 *   3. Accounting: os_mapped_bytes is what magpie holds from the kernel, metadata included.
 *   4. Futexes back lock.c's sleeping path; os_thread_start makes magpie's own threads, and
 *      os_run_parallel its short-lived helpers, joined before it returns with cancellation
 *      off (pthread_join is a cancellation point; malloc and calloc are not). Helpers go only
 *      to a process that runs threads already: a single-threaded one would stay marked as
 *      multithreaded by glibc (its single-thread fast paths lost, unshare(CLONE_NEWUSER)
 *      refused), and a forked child may only make async-signal-safe calls until it execs.
 *   5. os_fence_rseq (membarrier) restarts every restartable sequence in flight on one CPU and
 *      orders memory with it: after it, a sequence there sees what the caller stored before.
 *      os_fence_threads is the same barrier on every CPU that runs one of the process's
 *      threads, without the restarts (a sleeping thread is ordered by its context switch).
 *   6. Files are opened, read, written and closed with raw system calls, not libc's wrappers:
 *      those are cancellation points, and a thread cancelled inside a report would leave the
 *      lock it writes under held for good (malloc_stats, as glibc's, is no cancellation point).
 *   7. stdio's list lock: glibc's fork takes it after the atfork prepare handlers have run, so
 *      magpie's fork handler takes it first (os_stdio_lock), where glibc will take it too.
 *   8. Which mappings are magpie's: once os_track_start ran (debug mode's leak report asks, at
 *      bring-up), every os_map, os_map_aligned, os_remap and os_unmap records its range in a
 *      table of its own mapping, a slot claimed by a compare-and-swap (no lock: a fork or a
 *      signal never finds it held). The leak scan then reads the program's anonymous memory
 *      and leaves magpie's out, however the kernel merged the two into its mappings. A table
 *      that overflows says so, and is not trusted.
 * Nothing here allocates or takes a lock of magpie's; all of it is safe from any thread at any
 * time.
 */
#define _GNU_SOURCE
#include "os.h"
#include "vg_requests.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <linux/futex.h>
#include <linux/membarrier.h>
#include <sched.h>
#include <stddef.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <string.h>
#include <unistd.h>

#define OS_THREAD_STACK ((size_t)64 << 10) /* magpie's own threads only reap or populate */

extern const unsigned int __rseq_size __attribute__((weak));
extern char __libc_single_threaded __attribute__((weak)); /* glibc 2.32 and later */
void _IO_list_lock(void) __attribute__((weak));           /* glibc's stdio, exported since 2.2.5 */
void _IO_list_unlock(void) __attribute__((weak));
extern const ptrdiff_t __rseq_offset __attribute__((weak));

static size_t os_mapped;      /* bytes mapped now (atomic) */
static size_t os_mapped_max;  /* high-water mark of os_mapped (atomic) */
static unsigned os_ncpu = 1;  /* set once by os_init */
static int os_init_pid;       /* the process that ran os_init */
static os_cgroup_t os_limits; /* set once by os_init */
static bool os_hiding;        /* os_map_metadata hides from memcheck (os_hide_metadata) */

static void os_account(ptrdiff_t delta) {
  size_t now = __atomic_add_fetch(&os_mapped, (size_t)delta, __ATOMIC_RELAXED);
  size_t peak = __atomic_load_n(&os_mapped_max, __ATOMIC_RELAXED);
  while (now > peak && !__atomic_compare_exchange_n(&os_mapped_max, &peak, now, true,
                                                    __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
  }
}

static void os_track_add(uintptr_t lo, uintptr_t hi);
static void os_track_remove(uintptr_t lo, uintptr_t hi);

void *os_map(size_t size) {
  void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return NULL;
  os_account((ptrdiff_t)size);
  os_track_add((uintptr_t)p, (uintptr_t)p + size);
  return p;
}

/* Maps size + extra bytes (extra: enough that an aligned start fits), keeps the size bytes from
   the first multiple of align, and unmaps the ends. */
static void *os_map_trimmed(size_t size, size_t extra, size_t align, int flags) {
  if (size + extra < size) return NULL;
  char *raw =
      mmap(NULL, size + extra, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | flags, -1, 0);
  if (raw == MAP_FAILED) return NULL;
  uintptr_t start = ((uintptr_t)raw + align - 1) & ~(uintptr_t)(align - 1);
  size_t head = start - (uintptr_t)raw, tail = extra - head;
  if (head) munmap(raw, head);
  if (tail) munmap((char *)start + size, tail);
  os_account((ptrdiff_t)size);
  os_track_add(start, start + size);
  return (void *)start;
}

void os_hide_metadata(void) {
  os_hiding = true;
}

void *os_map_metadata(size_t size) {
  void *p = os_map(size);
  if (p && os_hiding) vg_hide(p, size);
  return p;
}

void os_show_metadata(void) {
  if (os_hiding) vg_unhide((void *)OS_PAGE, ((uintptr_t)1 << 47) - OS_PAGE);
}

void *os_map_aligned(size_t size, size_t align) {
  if (align <= OS_PAGE) return os_map(size);
  return os_map_trimmed(size, align, align, 0);
}

void os_unmap(void *p, size_t size) {
  if (munmap(p, size) != 0) os_fatal("munmap of a range magpie mapped failed");
  if (os_hiding) vg_unhide(p, size); /* the range may be mapped again for the heap */
  os_account(-(ptrdiff_t)size);
  os_track_remove((uintptr_t)p, (uintptr_t)p + size);
}

void *os_remap(void *p, size_t old_size, size_t new_size) {
  void *q = mremap(p, old_size, new_size, MREMAP_MAYMOVE);
  if (q == MAP_FAILED) return NULL;
  os_account((ptrdiff_t)new_size - (ptrdiff_t)old_size);
  os_track_remove((uintptr_t)p, (uintptr_t)p + old_size);
  os_track_add((uintptr_t)q, (uintptr_t)q + new_size);
  return q;
}

void os_purge(void *p, size_t size) {
  madvise(p, size, MADV_DONTNEED);
}

int os_populate(void *p, size_t size) {
  return madvise(p, size, MADV_POPULATE_WRITE) == 0 ? 0 : errno; /* Linux 5.14 */
}

void os_advise_huge(void *p, size_t size, bool huge) {
  madvise(p, size, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
}

#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25 /* Linux 6.1 */
#endif

bool os_collapse(void *p, size_t size) {
  return madvise(p, size, MADV_COLLAPSE) == 0;
}

void *os_map_hugetlb(size_t size, size_t align) {
  if (align < OS_HUGE) align = OS_HUGE; /* hugetlb mappings are aligned to OS_HUGE already */
  return os_map_trimmed(size, align - OS_HUGE, align, MAP_HUGETLB | (21 << MAP_HUGE_SHIFT));
}

bool os_protect(void *p, size_t size, bool accessible) {
  return mprotect(p, size, accessible ? PROT_READ | PROT_WRITE : PROT_NONE) == 0;
}

size_t os_mapped_bytes(void) {
  return __atomic_load_n(&os_mapped, __ATOMIC_RELAXED);
}
size_t os_mapped_peak(void) {
  return __atomic_load_n(&os_mapped_max, __ATOMIC_RELAXED);
}

void os_fatal(const char *what) {
  static const char prefix[] = "magpie: fatal: ";
  os_write_all(2, prefix, sizeof prefix - 1);
  os_write_all(2, what, strlen(what));
  os_write_all(2, "\n", 1);
  abort();
}

/* Files through raw system calls: no cancellation point (theory 6). */
static int os_open(const char *path, int flags, int mode) {
  return (int)syscall(SYS_openat, AT_FDCWD, path, flags | O_CLOEXEC, mode);
}

ssize_t os_read(int fd, void *buf, size_t len) {
  ssize_t n;
  while ((n = syscall(SYS_read, fd, buf, len)) < 0 && errno == EINTR) {
  }
  return n;
}

void os_close(int fd) {
  syscall(SYS_close, fd);
}

ssize_t os_read_file(const char *path, char *buf, size_t cap) {
  int fd = os_open(path, O_RDONLY, 0);
  if (fd < 0) return -1;
  size_t have = 0;
  ssize_t n = 0;
  while (have < cap - 1 && (n = os_read(fd, buf + have, cap - 1 - have)) > 0)
    have += (size_t)n; /* files of /proc come a page per read */
  os_close(fd);
  if (n < 0) return -1;
  buf[have] = '\0';
  return (ssize_t)have;
}

int os_open_private(const char *path) {
  int fd = os_open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK, 0);
  struct stat st;
  if (fd < 0) return -1;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid() ||
      (st.st_mode & (S_IWGRP | S_IWOTH))) {
    os_close(fd);
    return -1;
  }
  return fd;
}

void os_unlink(const char *path) {
  syscall(SYS_unlinkat, AT_FDCWD, path, 0);
}

static unsigned long os_parse_ulong(const char **s) {
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

bool os_rseq_available(void) {
  return &__rseq_size != NULL && &__rseq_offset != NULL && __rseq_size >= 20;
}

ptrdiff_t os_rseq_offset(void) {
  return __rseq_offset;
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

bool os_fence_rseq_register(void) {
  return syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED_RSEQ, 0, 0) == 0;
}

bool os_fence_rseq(unsigned cpu) {
  return syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED_RSEQ, MEMBARRIER_CMD_FLAG_CPU,
                 (int)cpu) == 0;
}

bool os_fence_threads_register(void) {
  return syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0;
}

bool os_fence_threads(void) {
  return syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0) == 0;
}

uint64_t os_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

uint64_t os_realtime_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

uint64_t os_clock_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void os_sleep_ms(size_t ms) {
  struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

/* Starts up to n threads running fn(arg), every signal blocked in them (they belong to the
   program's threads), detached or joinable; returns how many started, their ids in ids. */
static unsigned os_threads_create(pthread_t *ids, unsigned n, void *(*fn)(void *), void *arg,
                                  bool detached) {
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old); /* a new thread inherits this mask */
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, detached ? PTHREAD_CREATE_DETACHED : PTHREAD_CREATE_JOINABLE);
  pthread_attr_setstacksize(&attr, OS_THREAD_STACK);
  unsigned started = 0;
  while (started < n && pthread_create(&ids[started], &attr, fn, arg) == 0)
    started++;
  pthread_attr_destroy(&attr);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  return started;
}

bool os_thread_start(void *(*fn)(void *), const char *name) {
  pthread_t thread;
  bool ok = os_threads_create(&thread, 1, fn, NULL, true) == 1;
  if (ok) pthread_setname_np(thread, name);
  return ok;
}

bool os_program_threaded(void) {
  return !&__libc_single_threaded || !__libc_single_threaded;
}

bool os_helpers_welcome(void) {
  return &__libc_single_threaded && !__libc_single_threaded && (int)getpid() == os_init_pid;
}

unsigned os_run_parallel(void *(*fn)(void *), void *arg, unsigned helpers) {
  pthread_t ids[OS_PARALLEL_MAX];
  unsigned started =
      os_threads_create(ids, helpers < OS_PARALLEL_MAX ? helpers : OS_PARALLEL_MAX, fn, arg, false);
  fn(arg);
  int cancel;
  pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &cancel);
  for (unsigned i = 0; i < started; i++)
    pthread_join(ids[i], NULL);
  pthread_setcancelstate(cancel, NULL);
  return started;
}

void os_futex_wait(uint32_t *word, uint32_t expected) {
  syscall(SYS_futex, word, FUTEX_WAIT_PRIVATE, expected, NULL, NULL, 0);
}

void os_futex_wake(uint32_t *word, int count) {
  syscall(SYS_futex, word, FUTEX_WAKE_PRIVATE, count, NULL, NULL, 0);
}

void os_write_all(int fd, const char *buf, size_t len) {
  while (len > 0) {
    ssize_t n = syscall(SYS_write, fd, buf, len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    buf += n;
    len -= (size_t)n;
  }
}

int os_open_write(const char *path) {
  return os_open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
}

int os_dup(int fd) {
  return fcntl(fd, F_DUPFD_CLOEXEC, 3);
}

void *os_map_shared(const char *name, size_t size, int *fd) {
  int made = (int)syscall(SYS_memfd_create, name, MFD_CLOEXEC); /* raw: theory 6 */
  if (made < 0) return NULL;
  int high = (int)syscall(SYS_fcntl, made, F_DUPFD_CLOEXEC, OS_SHARED_FD_MIN);
  if (high >= 0) {
    os_close(made);
    made = high;
  }
  void *p = MAP_FAILED;
  if (syscall(SYS_ftruncate, made, (off_t)size) == 0)
    p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, made, 0);
  if (p == MAP_FAILED) {
    os_close(made);
    return NULL;
  }
  *fd = made;
  return p;
}

bool os_file_id(int fd, uint64_t id[2]) {
  struct stat st;
  if (fstat(fd, &st) != 0) return false;
  id[0] = (uint64_t)st.st_dev;
  id[1] = (uint64_t)st.st_ino;
  return true;
}

int os_getpid(void) {
  return (int)getpid();
}

static uintptr_t parse_hex(const char **s) {
  uintptr_t v = 0;
  for (;; (*s)++) {
    char c = **s;
    if (c >= '0' && c <= '9')
      v = v * 16 + (uintptr_t)(c - '0');
    else if (c >= 'a' && c <= 'f')
      v = v * 16 + (uintptr_t)(c - 'a' + 10);
    else
      return v;
  }
}

/* "/proc/PID/FILE", or "/proc/self/FILE" for pid 0. */
static void os_proc_path(char *path, int pid, const char *file) {
  char digits[16];
  size_t n = 0;
  strcpy(path, "/proc/");
  if (pid <= 0) {
    strcat(path, "self");
  } else {
    for (unsigned v = (unsigned)pid; v; v /= 10)
      digits[n++] = (char)('0' + v % 10);
    size_t at = strlen(path);
    while (n)
      path[at++] = digits[--n];
    path[at] = '\0';
  }
  strcat(path, "/");
  strcat(path, file);
}

/* Calls fn on each line of a /proc file (NUL-terminated, without its newline), read through a
   fixed buffer; a line longer than the buffer is dropped. */
static void os_each_line(const char *path, void (*fn)(const char *line, void *arg), void *arg) {
  int fd = os_open(path, O_RDONLY, 0);
  if (fd < 0) return;
  char buf[4096];
  size_t have = 0;
  for (;;) {
    ssize_t n = os_read(fd, buf + have, sizeof buf - 1 - have);
    if (n <= 0) break;
    have += (size_t)n;
    buf[have] = '\0';
    char *line = buf, *nl;
    while ((nl = strchr(line, '\n')) != NULL) {
      *nl = '\0';
      fn(line, arg);
      line = nl + 1;
    }
    have -= (size_t)(line - buf);
    memmove(buf, line, have);
    if (have == sizeof buf - 1) have = 0;
  }
  os_close(fd);
}

typedef struct os_maps_walk {
  os_maps_fn *fn;
  void *ctx;
} os_maps_walk_t;

/* A maps line "lo-hi rest" to fn(ctx, lo, hi, rest). */
static void os_maps_line(const char *line, void *arg) {
  os_maps_walk_t *w = arg;
  const char *s = line;
  uintptr_t lo = parse_hex(&s), hi = 0;
  if (*s == '-') s++, hi = parse_hex(&s);
  while (*s == ' ')
    s++;
  w->fn(w->ctx, lo, hi, s);
}

void os_maps_each(int pid, os_maps_fn *fn, void *ctx) {
  char path[48];
  os_proc_path(path, pid, "maps");
  os_maps_walk_t w = {fn, ctx};
  os_each_line(path, os_maps_line, &w);
}

typedef struct mappings_query {
  const uintptr_t *addr;
  size_t count;
  uintptr_t *lo, *hi;
} mappings_query_t;

static void mappings_step(void *ctx, uintptr_t lo, uintptr_t hi, const char *rest) {
  mappings_query_t *q = ctx;
  (void)rest;
  for (size_t i = 0; i < q->count; i++)
    if (q->addr[i] >= lo && q->addr[i] < hi) {
      q->lo[i] = lo;
      q->hi[i] = hi;
    }
}

void os_mappings(const uintptr_t *addr, size_t count, uintptr_t *lo_out, uintptr_t *hi_out) {
  for (size_t i = 0; i < count; i++)
    lo_out[i] = hi_out[i] = 0;
  mappings_query_t q = {addr, count, lo_out, hi_out};
  os_maps_each(0, mappings_step, &q);
}

/* ---- which mappings are magpie's (theory 8) ---- */

#define OS_TRACK_SLOTS ((size_t)1 << 16) /* a power of two */

static os_range_t *os_track;   /* NULL until os_track_start */
static bool os_track_overflow; /* a mapping found no slot: the table is incomplete */

static size_t os_track_slot(uintptr_t lo) {
  return (size_t)(((lo >> OS_PAGE_SHIFT) * 0x9e3779b97f4a7c15ull) >> 48) & (OS_TRACK_SLOTS - 1);
}

static void os_track_add(uintptr_t lo, uintptr_t hi) {
  os_range_t *t = __atomic_load_n(&os_track, __ATOMIC_ACQUIRE);
  if (!t || hi <= lo) return;
  size_t h = os_track_slot(lo);
  for (size_t i = 0; i < OS_TRACK_SLOTS; i++) {
    os_range_t *r = &t[(h + i) & (OS_TRACK_SLOTS - 1)];
    uintptr_t empty = 0;
    if (__atomic_compare_exchange_n(&r->lo, &empty, lo, false, __ATOMIC_ACQ_REL,
                                    __ATOMIC_RELAXED)) {
      __atomic_store_n(&r->hi, hi, __ATOMIC_RELEASE);
      return;
    }
  }
  __atomic_store_n(&os_track_overflow, true, __ATOMIC_RELAXED);
}

/* The slot of the range holding addr: from lo's own slot on, where a whole unmap finds it at
   once; an unmap of part of a range looks through the table. */
static os_range_t *os_track_find(os_range_t *t, uintptr_t addr) {
  size_t h = os_track_slot(addr);
  for (size_t i = 0; i < OS_TRACK_SLOTS; i++) {
    os_range_t *r = &t[(h + i) & (OS_TRACK_SLOTS - 1)];
    uintptr_t lo = __atomic_load_n(&r->lo, __ATOMIC_ACQUIRE);
    if (lo && addr >= lo && addr < __atomic_load_n(&r->hi, __ATOMIC_ACQUIRE)) return r;
  }
  return NULL;
}

static void os_track_remove(uintptr_t lo, uintptr_t hi) {
  os_range_t *t = __atomic_load_n(&os_track, __ATOMIC_ACQUIRE);
  if (!t || hi <= lo) return;
  os_range_t *r = os_track_find(t, lo);
  if (!r) return;
  uintptr_t was_lo = r->lo, was_hi = r->hi;
  __atomic_store_n(&r->hi, 0, __ATOMIC_RELEASE);
  __atomic_store_n(&r->lo, 0, __ATOMIC_RELEASE);
  if (was_lo < lo) os_track_add(was_lo, lo); /* the parts left mapped */
  if (hi < was_hi) os_track_add(hi, was_hi);
}

bool os_track_start(void) {
  if (__atomic_load_n(&os_track, __ATOMIC_ACQUIRE)) return true;
  size_t bytes = OS_TRACK_SLOTS * sizeof(os_range_t);
  void *t = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (t == MAP_FAILED) return false;
  os_range_t *none = NULL;
  if (!__atomic_compare_exchange_n(&os_track, &none, (os_range_t *)t, false, __ATOMIC_ACQ_REL,
                                   __ATOMIC_ACQUIRE)) {
    munmap(t, bytes);
    return true;
  }
  os_track_add((uintptr_t)t, (uintptr_t)t + bytes); /* the table is magpie's too */
  return true;
}

size_t os_tracked(os_range_t *out, size_t cap) {
  os_range_t *t = __atomic_load_n(&os_track, __ATOMIC_ACQUIRE);
  if (!t || __atomic_load_n(&os_track_overflow, __ATOMIC_RELAXED)) return SIZE_MAX;
  size_t n = 0;
  for (size_t i = 0; i < OS_TRACK_SLOTS; i++) {
    uintptr_t lo = __atomic_load_n(&t[i].lo, __ATOMIC_ACQUIRE);
    uintptr_t hi = __atomic_load_n(&t[i].hi, __ATOMIC_ACQUIRE);
    if (!lo || hi <= lo) continue;
    if (n == cap) return SIZE_MAX;
    out[n++] = (os_range_t){lo, hi};
  }
  return n;
}

/* ---- the parent process ---- */

int os_parent_pid(void) {
  return (int)getppid();
}

typedef struct object_query {
  uintptr_t addr;
  char id[64]; /* "DEVICE INODE" of the file mapped at addr; empty until found */
  bool found;
} object_query_t;

/* The device and inode fields of a maps line's rest ("PERMS OFFSET DEVICE INODE PATH"). */
static bool maps_file_id(const char *rest, char *id, size_t cap) {
  for (int field = 0; field < 2; field++) {
    while (*rest && *rest != ' ')
      rest++;
    while (*rest == ' ')
      rest++;
  }
  size_t n = 0;
  for (int field = 0; field < 2 && *rest; field++) {
    if (field) id[n++] = ' ';
    while (*rest && *rest != ' ' && n + 2 < cap)
      id[n++] = *rest++;
    while (*rest == ' ')
      rest++;
  }
  id[n] = '\0';
  return n > 0 && strcmp(id + n - 2, " 0") != 0; /* inode 0: anonymous */
}

static void object_of_addr_step(void *ctx, uintptr_t lo, uintptr_t hi, const char *rest) {
  object_query_t *q = ctx;
  if (q->addr >= lo && q->addr < hi) q->found = maps_file_id(rest, q->id, sizeof q->id);
}

static void object_mapped_step(void *ctx, uintptr_t lo, uintptr_t hi, const char *rest) {
  object_query_t *q = ctx;
  char id[64];
  (void)lo, (void)hi;
  if (!q->found && maps_file_id(rest, id, sizeof id) && strcmp(id, q->id) == 0) q->found = true;
}

bool os_pid_maps_object_of(int pid, uintptr_t addr) {
  object_query_t q = {.addr = addr};
  os_maps_each(0, object_of_addr_step, &q);
  if (!q.found) return false;
  q.found = false;
  os_maps_each(pid, object_mapped_step, &q);
  return q.found;
}

bool os_pid_env_has(int pid, const char *name_eq) {
  char path[48], buf[4096];
  os_proc_path(path, pid, "environ");
  int fd = os_open(path, O_RDONLY, 0);
  if (fd < 0) return false;
  size_t len = strlen(name_eq), matched = 0; /* bytes of name_eq matched; SIZE_MAX: none */
  bool found = false;
  ssize_t n;
  while (!found && (n = os_read(fd, buf, sizeof buf)) > 0)
    for (ssize_t i = 0; i < n && !found; i++) {
      if (buf[i] == '\0')
        matched = 0;
      else if (matched != SIZE_MAX)
        matched = buf[i] == name_eq[matched] ? matched + 1 : SIZE_MAX;
      found = matched == len;
    }
  os_close(fd);
  return found;
}

typedef struct os_huge_query {
  bool (*mine)(uintptr_t lo, uintptr_t hi);
  uintptr_t lo, hi; /* the mapping whose fields follow */
  int mine_here;    /* -1: not asked yet (mine is asked only of mappings with huge pages) */
  size_t bytes;
} os_huge_query_t;

static bool os_field(const char **s, const char *name) {
  size_t n = strlen(name);
  if (strncmp(*s, name, n) != 0) return false;
  *s += n;
  while (**s == ' ')
    (*s)++;
  return true;
}

static void os_huge_line(const char *line, void *arg) {
  os_huge_query_t *q = arg;
  const char *s = line;
  uintptr_t lo = parse_hex(&s);
  if (*s == '-' && s > line) { /* a mapping's header: "lo-hi perms ..." */
    s++;
    q->lo = lo;
    q->hi = parse_hex(&s);
    q->mine_here = -1;
    return;
  }
  s = line;
  if (!os_field(&s, "AnonHugePages:") && !os_field(&s, "Private_Hugetlb:") &&
      !os_field(&s, "Shared_Hugetlb:"))
    return;
  size_t kib = (size_t)os_parse_ulong(&s);
  if (kib && q->mine_here < 0) q->mine_here = q->mine(q->lo, q->hi);
  if (kib && q->mine_here) q->bytes += kib << 10;
}

size_t os_huge_bytes(bool (*mine)(uintptr_t lo, uintptr_t hi)) {
  os_huge_query_t q = {mine, 0, 0, -1, 0};
  os_each_line("/proc/self/smaps", os_huge_line, &q);
  return q.bytes;
}

int os_thp_mode(void) {
  char buf[128];
  if (os_read_file("/sys/kernel/mm/transparent_hugepage/enabled", buf, sizeof buf) <= 0)
    return OS_THP_NONE;
  return strstr(buf, "[always]")    ? OS_THP_ALWAYS
         : strstr(buf, "[madvise]") ? OS_THP_MADVISE
                                    : OS_THP_NEVER;
}

bool os_resident(uintptr_t addr, size_t len) {
  unsigned char vec[65];
  uintptr_t start = addr & ~(OS_PAGE - 1);
  size_t pages = (addr + len - start + OS_PAGE - 1) / OS_PAGE;
  if (pages > sizeof vec || mincore((void *)start, addr + len - start, vec) != 0) return false;
  for (size_t i = 0; i < pages; i++)
    if (vec[i] & 1) return true;
  return false;
}

size_t os_read_self(void *dst, uintptr_t src, size_t len) {
  struct iovec local = {dst, len}, remote = {(void *)src, len};
  ssize_t n = process_vm_readv(getpid(), &local, 1, &remote, 1, 0);
  if (n < 0 && (errno == ENOSYS || errno == EPERM)) { /* a sandbox that forbids it */
    memcpy(dst, (const void *)src, len);
    return len;
  }
  return n > 0 ? (size_t)n : 0;
}

uint32_t os_thread_id(void) {
  return (uint32_t)syscall(SYS_gettid);
}

size_t os_rss_bytes(void) {
  char buf[128];
  if (os_read_file("/proc/self/statm", buf, sizeof buf) <= 0) return 0;
  const char *s = buf;
  os_parse_ulong(&s);
  s++;
  return os_parse_ulong(&s) * OS_PAGE;
}

bool os_stdio_lock(void) {
  if (!_IO_list_lock || !_IO_list_unlock || !&__libc_single_threaded || __libc_single_threaded)
    return false; /* glibc's fork takes the list lock only in a multithreaded process */
  _IO_list_lock();
  return true;
}

void os_stdio_unlock(void) {
  _IO_list_unlock();
}

void *os_map_file(const char *path, size_t *size) {
  int fd = os_open(path, O_RDONLY, 0);
  if (fd < 0) return NULL;
  off_t end = lseek(fd, 0, SEEK_END);
  void *p = end > 0 ? mmap(NULL, (size_t)end, PROT_READ, MAP_PRIVATE, fd, 0) : MAP_FAILED;
  os_close(fd);
  if (p == MAP_FAILED) return NULL;
  *size = (size_t)end;
  return p;
}

void os_unmap_file(void *p, size_t size) {
  munmap(p, size);
}

uint64_t os_random(void) {
  uint64_t r = 0;
  const unsigned char *bytes = (const unsigned char *)getauxval(AT_RANDOM);
  if (bytes) memcpy(&r, bytes + 8, sizeof r); /* glibc uses the first 8 for the stack guard */
  return r ^ (uint64_t)(uintptr_t)&r;
}
