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
 *      vector, the CPUs from the affinity mask bounded by a cgroup v2 quota, and whether glibc
 *      registered an rseq area (__rseq_size; magpie never registers a second one). The
 *      possible CPU ids (what the kernel may write into an rseq area) come from sysfs.
 *   3. Accounting: os_mapped_bytes is what magpie holds from the kernel, metadata included.
 *   4. Futexes back lock.c's sleeping path; os_thread_start makes magpie's own threads.
 *   5. os_fence_rseq (membarrier) restarts every restartable sequence in flight on one CPU and
 *      orders memory with it: after it, a sequence there sees what the caller stored before.
 *      os_fence_threads is the same barrier on every CPU that runs one of the process's
 *      threads, without the restarts (a sleeping thread is ordered by its context switch).
 *   6. Files are opened, read, written and closed with raw system calls, not libc's wrappers:
 *      those are cancellation points, and a thread cancelled inside a report would leave the
 *      lock it writes under held for good (malloc_stats, as glibc's, is no cancellation point).
 *   7. stdio's list lock: glibc's fork takes it after the atfork prepare handlers have run, so
 *      magpie's fork handler takes it first (os_stdio_lock), where glibc will take it too.
 * Nothing here allocates or takes a lock of magpie's; all of it is safe from any thread at any
 * time.
 */
#define _GNU_SOURCE
#include "os.h"

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

#define OS_THREAD_STACK ((size_t)64 << 10) /* magpie's own threads only reap */

extern const unsigned int __rseq_size __attribute__((weak));
extern char __libc_single_threaded __attribute__((weak)); /* glibc 2.32 and later */
void _IO_list_lock(void) __attribute__((weak));           /* glibc's stdio, exported since 2.2.5 */
void _IO_list_unlock(void) __attribute__((weak));
extern const ptrdiff_t __rseq_offset __attribute__((weak));

static size_t os_mapped;     /* bytes mapped now (atomic) */
static size_t os_mapped_max; /* high-water mark of os_mapped (atomic) */
static unsigned os_ncpu = 1; /* set once by os_init */

static void os_account(ptrdiff_t delta) {
  size_t now = __atomic_add_fetch(&os_mapped, (size_t)delta, __ATOMIC_RELAXED);
  size_t peak = __atomic_load_n(&os_mapped_max, __ATOMIC_RELAXED);
  while (now > peak && !__atomic_compare_exchange_n(&os_mapped_max, &peak, now, true,
                                                    __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
  }
}

void *os_map(size_t size) {
  void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return NULL;
  os_account((ptrdiff_t)size);
  return p;
}

void *os_map_aligned(size_t size, size_t align) {
  if (align <= OS_PAGE) return os_map(size);
  if (size + align < size) return NULL;
  char *raw = mmap(NULL, size + align, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return NULL;
  uintptr_t start = ((uintptr_t)raw + align - 1) & ~(uintptr_t)(align - 1);
  size_t head = start - (uintptr_t)raw, tail = align - head;
  if (head) munmap(raw, head);
  if (tail) munmap((char *)start + size, tail);
  os_account((ptrdiff_t)size);
  return (void *)start;
}

void os_unmap(void *p, size_t size) {
  if (munmap(p, size) != 0) os_fatal("munmap of a range magpie mapped failed");
  os_account(-(ptrdiff_t)size);
}

void *os_remap(void *p, size_t old_size, size_t new_size) {
  void *q = mremap(p, old_size, new_size, MREMAP_MAYMOVE);
  if (q == MAP_FAILED) return NULL;
  os_account((ptrdiff_t)new_size - (ptrdiff_t)old_size);
  return q;
}

void os_purge(void *p, size_t size) {
  madvise(p, size, MADV_DONTNEED);
}

void os_populate(void *p, size_t size) {
  madvise(p, size, MADV_POPULATE_WRITE); /* Linux 5.14; before, or short of memory: lazy */
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

static ssize_t os_read(int fd, void *buf, size_t len) {
  ssize_t n;
  while ((n = syscall(SYS_read, fd, buf, len)) < 0 && errno == EINTR) {
  }
  return n;
}

void os_close(int fd) {
  syscall(SYS_close, fd);
}

/* Reads a small file into buf (NUL-terminated); returns the length, or -1. */
static ssize_t os_read_file(const char *path, char *buf, size_t cap) {
  int fd = os_open(path, O_RDONLY, 0);
  if (fd < 0) return -1;
  ssize_t n = os_read(fd, buf, cap - 1);
  os_close(fd);
  if (n < 0) return -1;
  buf[n] = '\0';
  return n;
}

static unsigned long os_parse_ulong(const char **s) {
  unsigned long v = 0;
  while (**s >= '0' && **s <= '9')
    v = v * 10 + (unsigned long)(*(*s)++ - '0');
  return v;
}

/* CPUs allowed by the cgroup v2 quota of this process ("max" or "QUOTA PERIOD"); 0 = no limit. */
static unsigned os_cgroup_cpus(void) {
  char buf[512], path[600];
  if (os_read_file("/proc/self/cgroup", buf, sizeof buf) <= 0) return 0;
  const char *line = buf; /* the v2 entry is "0::/path" */
  while (line && !(line[0] == '0' && line[1] == ':' && line[2] == ':')) {
    while (*line && *line != '\n')
      line++;
    line = *line ? line + 1 : NULL;
  }
  if (!line) return 0;
  size_t n = 0;
  const char *prefix = "/sys/fs/cgroup";
  while (*prefix)
    path[n++] = *prefix++;
  for (const char *s = line + 3; *s && *s != '\n' && n < sizeof path - 16; s++)
    path[n++] = *s;
  const char *leaf = "/cpu.max";
  while (*leaf)
    path[n++] = *leaf++;
  path[n] = '\0';
  if (os_read_file(path, buf, sizeof buf) <= 0 || buf[0] < '0' || buf[0] > '9') return 0;
  const char *s = buf;
  unsigned long quota = os_parse_ulong(&s);
  if (*s++ != ' ') return 0;
  unsigned long period = os_parse_ulong(&s);
  if (period == 0) return 0;
  return (unsigned)((quota + period - 1) / period);
}

void os_init(void) {
  unsigned long page = getauxval(AT_PAGESZ);
  if (page != 0 && page != OS_PAGE) os_fatal("the kernel's page size is not 4 KiB");
  cpu_set_t set;
  unsigned n = 1;
  if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0)
    n = (unsigned)CPU_COUNT(&set);
  unsigned quota = os_cgroup_cpus();
  os_ncpu = quota && quota < n ? quota : n;
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

bool os_thread_start(void *(*fn)(void *), const char *name) {
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old); /* the new thread inherits this mask */
  pthread_attr_t attr;
  pthread_t thread;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pthread_attr_setstacksize(&attr, OS_THREAD_STACK);
  bool ok = pthread_create(&thread, &attr, fn, NULL) == 0;
  if (ok) pthread_setname_np(thread, name);
  pthread_attr_destroy(&attr);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  return ok;
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

void os_mappings(const uintptr_t *addr, size_t count, uintptr_t *lo_out, uintptr_t *hi_out) {
  for (size_t i = 0; i < count; i++)
    lo_out[i] = hi_out[i] = 0;
  int fd = os_open("/proc/self/maps", O_RDONLY, 0);
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
      const char *s = line;
      uintptr_t lo = parse_hex(&s), hi = 0;
      if (*s == '-') s++, hi = parse_hex(&s);
      for (size_t i = 0; i < count; i++)
        if (addr[i] >= lo && addr[i] < hi) {
          lo_out[i] = lo;
          hi_out[i] = hi;
        }
      line = nl + 1;
    }
    have -= (size_t)(line - buf);
    memmove(buf, line, have);
    if (have == sizeof buf - 1) have = 0; /* a line longer than the buffer: drop it */
  }
  os_close(fd);
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
