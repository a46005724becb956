/*
 * os: the contract between magpie and the kernel, the one platform header the layers above
 * include for it. Its implementation, one concern a file, each with its theory:
 *   os_mem.c      anonymous mappings, advice, protection, the mapped-bytes count
 *   os_file.c     files through raw system calls, shared and file mappings, os_fatal
 *   os_thread.c   magpie's threads and helpers, futexes, clocks
 *   os_fence.c    membarrier, and the rseq area glibc registered
 *   os_machine.c  page size, CPUs, cgroup limits, THP mode, random bits (os_init)
 *   os_proc.c     /proc of this process: maps, huge pages in smaps, RSS
 *   os_track.c    the record of which mappings are magpie's
 *   os_parent.c   the parent-process probe
 *   os_stdio.c    stdio's list lock, for fork
 * os_impl.h is private to those files. Nothing here allocates or takes a lock of magpie's.
 */
#ifndef MAGPIE_OS_H
#define MAGPIE_OS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define OS_PAGE_SHIFT 12 /* magpie's page; os_init() checks the kernel agrees */
#define OS_PAGE ((size_t)1 << OS_PAGE_SHIFT)
#define OS_LINE ((size_t)64) /* the cache line of the machines magpie supports */
/* Every mapping the kernel makes without an address hint lies below 2^OS_ADDR_BITS (x86-64's
   four-level tables; with five it goes higher only for a hint above that, and magpie gives
   none), so no block can be as big. Elsewhere (arm64 maps up to 2^48) the page map would miss
   the heap: a build for another machine stops here rather than fail at run time. */
#define OS_ADDR_BITS 47
#if !defined(__x86_64__)
#error "magpie runs on x86-64 only: its page map covers the 47-bit user address space"
#endif

void os_init(void);
/* An error magpie cannot go on from, below where reports can be written (diag/report.h):
   "magpie: fatal: what" on stderr, then abort. */
__attribute__((noreturn)) void os_fatal(const char *what);
void *os_map(size_t size); /* zeroed, page aligned; NULL on failure */
/* Memcheck mode (vg_requests.h): from os_hide_metadata on, os_map_metadata's memory is hidden
   from memcheck: inaccessible, so its leak search finds no block address there, and accesses
   to it are not reported; os_show_metadata, at exit, has them reported again (memcheck warns
   of ranges left unreported) while the leak search still skips them. Otherwise os_map. */
void os_hide_metadata(void);
void *os_map_metadata(size_t size);
void os_show_metadata(void);
void *os_map_aligned(size_t size, size_t align); /* align: a power of two >= OS_PAGE */
void os_unmap(void *p, size_t size);
/* Resizes a mapping, moving it if it must (page tables move, not bytes); NULL on failure. */
void *os_remap(void *p, size_t old_size, size_t new_size);
void os_purge(void *p, size_t size); /* contents become zero, pages go back to the kernel */
/* Ranges to purge together: os_purge_list_add lists one (and runs the list once full),
   os_purge_list_run purges the listed ones and empties the list. Up to `batch` ranges go in one
   process_madvise call (Linux 6.16 on, the calling process: one TLB flush across the CPUs for
   all of them, where a madvise each interrupts every CPU the process runs on once a range);
   batch 0 or 1, or a kernel (or a seccomp filter) that refuses the call: a madvise a range.
   The ranges' room is the caller's, sized to what it lists (OS_PURGE_LIST_IN): on the free
   path a few ranges, in a reap a batch, whose room would take every thread that frees big
   blocks a stack page deeper. */
#define OS_PURGE_LIST 64 /* ranges of a reap's list: purge_batch's default and most */
typedef struct os_purge_range {
  void *start;
  size_t size;
} os_purge_range_t; /* laid out as struct iovec */
typedef struct os_purge_list {
  size_t n, cap, batch;
  os_purge_range_t *range;
} os_purge_list_t;
#define OS_PURGE_LIST_IN(room, batch_)                                                             \
  ((os_purge_list_t){0, sizeof(room) / sizeof((room)[0]), (batch_), (room)})
void os_purge_list_add(os_purge_list_t *list, void *p, size_t size);
void os_purge_list_run(os_purge_list_t *list);
/* Maps the range's pages now (their contents stay): 0, or the errno of MADV_POPULATE_WRITE
   (EINVAL before Linux 5.14, where nothing is done; ENOMEM or EFAULT short of memory). */
int os_populate(void *p, size_t size);
/* Maps the pages [p, p + size) touches now, by a write to a byte of each (its value kept), on
   any kernel: for memory of the caller's own that the holder of a lock writes first, where the
   fault's return would be a preemption point. */
void os_touch(void *p, size_t size);
/* Writes the stack about OS_STACK_AHEAD bytes below the caller's frame, for a caller about to
   take a lock whose holder calls out of line: a thread's stack pages are mapped at their first
   write, and the first call to reach a new depth would fault there, lock held. About as deep
   as the holder's calls reach and no deeper: a stack page once written stays resident for the
   thread's life (stress_stack_inject finds the depth). */
#define OS_STACK_AHEAD 96
void os_touch_stack(void);
#define OS_HUGE ((size_t)2 << 20) /* a transparent huge page (x86-64, arm64 with 4 KiB pages) */
/* Marks a range for huge pages at fault time and for khugepaged (MADV_HUGEPAGE), or against
   them (MADV_NOHUGEPAGE). */
void os_advise_huge(void *p, size_t size, bool huge);
/* Puts a range's resident pages on huge pages now (MADV_COLLAPSE, synchronous); false if not. */
bool os_collapse(void *p, size_t size);
/* A mapping on the kernel's reserved 2 MiB hugetlb pages (size a multiple of OS_HUGE), aligned
   to align; NULL if too few are reserved. os_unmap gives it back. */
void *os_map_hugetlb(size_t size, size_t align);
enum { OS_THP_NONE, OS_THP_NEVER, OS_THP_MADVISE, OS_THP_ALWAYS };
int os_thp_mode(void); /* the kernel's transparent huge page mode (sysfs), read now */
/* Bytes on huge pages (transparent or hugetlb) in the mappings for which mine(lo, hi) holds,
   from one read of /proc/self/smaps. os holds no lock while it calls mine. */
size_t os_huge_bytes(bool (*mine)(uintptr_t lo, uintptr_t hi));
/* Makes pages readable and writable, or inaccessible (guard pages); false on failure. */
bool os_protect(void *p, size_t size, bool accessible);
size_t os_mapped_bytes(void);
size_t os_mapped_peak(void);
unsigned os_cpu_count(void);    /* CPUs this process may use: affinity mask and cgroup quota */
uint64_t os_memory_limit(void); /* the cgroup's memory.max in bytes; 0: none */
/* The cgroup v2 limits of a process: proc_cgroup is its /proc/PID/cgroup ("0::/PATH"), root
   where the v2 hierarchy is mounted; the tightest of PATH's and its ancestors' cpu.max (as CPUs,
   rounded up) and memory.max; 0 where none is set. os_init reads the process's own. */
typedef struct os_cgroup {
  unsigned cpus;
  uint64_t memory;
} os_cgroup_t;
void os_cgroup_read(const char *proc_cgroup, const char *root, os_cgroup_t *out);
/* Chooses the rseq area (os_fence.c theory 2): glibc's, or magpie's own where glibc has none
   (before 2.35), or also where glibc's is turned off (own); false if none. Once, at start. */
bool os_rseq_choose(bool own);
bool os_rseq_available(void);   /* an rseq area was chosen: glibc's or magpie's */
ptrdiff_t os_rseq_offset(void); /* of the area from the thread pointer (if available) */
void os_rseq_register(void);    /* registers the calling thread's area, where it is magpie's */
unsigned os_cpu_possible(void); /* 1 + the highest CPU id the kernel may use; 0 if unknown */
unsigned os_cpu_now(void);      /* the CPU the thread runs on (a hint: it may move at once) */
/* Registers for os_fence_rseq (membarrier); false if the kernel refuses. */
bool os_fence_rseq_register(void);
/* Restarts the restartable sequences running on cpu, with a full memory barrier there. */
bool os_fence_rseq(unsigned cpu);
bool os_fence_rseq_all(void); /* the same on every CPU that runs one of the process's threads */
/* Registers for os_fence_threads (membarrier); false if the kernel refuses. */
bool os_fence_threads_register(void);
/* A full memory barrier in every thread of the process, running or not: after it, each has
   either seen what the caller stored before, or the caller sees what it stored before. */
bool os_fence_threads(void);
uint64_t os_now_ns(void);      /* monotonic, coarse (a few ms) */
uint64_t os_clock_ns(void);    /* monotonic, fine (a vDSO call): lock wait times */
uint64_t os_realtime_ns(void); /* wall-clock time, ns since the epoch */
void os_sleep_ms(size_t ms);
/* A detached thread with every signal blocked (they belong to the program's threads). */
bool os_thread_start(void *(*fn)(void *), const char *name);
/* Whether the process has run a thread besides its first (glibc's __libc_single_threaded;
   true where glibc does not say). Until then glibc's fork is async-signal-safe, and a thread
   of magpie's would end that. */
bool os_program_threaded(void);
/* Whether the process may get short-lived helper threads (os_run_parallel): it runs threads
   of its own already, and it is not a child forked after magpie started. */
bool os_helpers_welcome(void);
/* Runs fn(arg) on the calling thread and, at once, on up to `helpers` threads of its own (every
   signal blocked), and returns once all have returned: how many helpers ran (fewer when the
   system refused threads). */
#define OS_PARALLEL_MAX 64u /* helpers at most */
unsigned os_run_parallel(void *(*fn)(void *), void *arg, unsigned helpers);
void os_futex_wait(uint32_t *word, uint32_t expected);
void os_futex_wake(uint32_t *word, int count);
/* Fork's prepare handler: takes stdio's list lock where glibc's fork will take it too (a
   multithreaded process), so that magpie's locks come after it; false where it took nothing.
   The parent releases it with os_stdio_unlock; glibc resets it in the child. */
bool os_stdio_lock(void);
void os_stdio_unlock(void);
void os_write_all(int fd, const char *buf, size_t len);
int os_open_write(const char *path); /* O_CREAT|O_TRUNC|O_CLOEXEC, mode 0644; -1 on failure */
void os_close(int fd);
ssize_t os_read(int fd, void *buf, size_t len); /* retried on EINTR; -1 on failure */
/* Reads a file (up to cap - 1 bytes) into buf, NUL-terminated; returns the length, or -1. */
ssize_t os_read_file(const char *path, char *buf, size_t cap);
/* Opens path for reading when it is a regular file of this process's user that no one else
   may write, not reached through a symbolic link (a request another user could not plant);
   -1 otherwise. */
int os_open_private(const char *path);
void os_unlink(const char *path);
/* The descriptors magpie keeps open are close-on-exec and numbered OS_KEPT_FD_MIN or more, out
   of the way of programs that expect their low descriptors (open returns the lowest free number;
   programs count, lay out and pass on theirs), lower only where a descriptor limit leaves no
   such number. A new file or memfd has the lowest free number until os_keep_fd moves it: made on
   the reaper thread, it can take a number another thread's open wanted in that instant, as any
   thread that opens a file can. */
#define OS_KEPT_FD_MIN 100
int os_dup(int fd);     /* a kept copy of fd (above); -1 on failure */
int os_keep_fd(int fd); /* moves fd to a kept number (above) and returns it; -1 stays -1 */
/* What file fd is open on (device and inode); false when fd is not open. */
bool os_file_id(int fd, uint64_t id[2]);
int os_getpid(void);
size_t os_rss_bytes(void);
/* The mappings holding addr[0..n), [lo[i], hi[i]) (for a stack: its top is hi[i]), in one
   read of /proc/self/maps; both 0 where no mapping holds addr[i]. */
void os_mappings(const uintptr_t *addr, size_t n, uintptr_t *lo, uintptr_t *hi);
/* Calls fn for each line of /proc/PID/maps (pid 0: this process) with its range and the rest
   of the line ("PERMS OFFSET DEVICE INODE PATH"), NUL-terminated. */
typedef void os_maps_fn(void *ctx, uintptr_t lo, uintptr_t hi, const char *rest);
void os_maps_each(int pid, os_maps_fn *fn, void *ctx);
/* From os_track_start on, the ranges magpie maps are recorded (os_track.c); os_tracked
   copies them into out[0..cap) and returns their count, or SIZE_MAX when they are not known
   (tracking off, the table overflowed, or more than cap). */
typedef struct os_range {
  uintptr_t lo, hi;
} os_range_t;
bool os_track_start(void);
size_t os_tracked(os_range_t *out, size_t cap);
int os_parent_pid(void);
/* Whether process pid maps the file that holds addr in this process (same device and inode). */
bool os_pid_maps_object_of(int pid, uintptr_t addr);
/* Whether process pid's environment (as it was at its exec) has an entry starting name_eq. */
bool os_pid_env_has(int pid, const char *name_eq);
/* Whether any page of [addr, addr + len) is resident; len at most 64 pages. */
bool os_resident(uintptr_t addr, size_t len);
/* Copies len bytes at src into dst without faulting on memory that is gone (another thread's
   stack, unmapped as it exits): the bytes copied, 0 where src is no longer mapped. Where a
   sandbox forbids process_vm_readv, a plain copy (the caller checked the pages are there). */
size_t os_read_self(void *dst, uintptr_t src, size_t len);
uint32_t os_thread_id(void); /* the kernel's id of the calling thread */

/* A shared, zeroed mapping of size bytes backed by a memfd called name (kept: os_dup), which
   other processes open through /proc/PID/fd; NULL on failure. */
void *os_map_shared(const char *name, size_t size, int *fd);
/* A read-only private mapping of a whole file (for symbolising); NULL on failure. */
void *os_map_file(const char *path, size_t *size);
void os_unmap_file(void *p, size_t size);
/* 64 random bits from the kernel's AT_RANDOM bytes, without a system call. */
uint64_t os_random(void);
/* Whether the program runs in secure-execution mode (AT_SECURE: set-user-ID, set-group-ID, or
   raising file capabilities), where its environment is another user's to set. */
bool os_secure_exec(void);
#endif
