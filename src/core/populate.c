/*
 * populate: maps the pages of a big range by several threads at once, the way Solaris' vmtasks
 * populate a big segment.
 *
 * Theory
 *   1. Mapping a fresh page is the kernel's work (zeroing it, a page-table entry), a cost per
 *      page that one thread pays in sequence; faults of different pages of one mapping run in
 *      parallel (the mapping's lock is taken for reading), so N threads map a range up to N
 *      times as fast.
 *   2. The range is cut at 2 MiB boundaries, so that no huge page is ever split between two
 *      threads (the kernel maps it whole, in one fault, where the range may have one); chunks
 *      are handed out by an atomic cursor, so a thread slowed down takes fewer.
 *   3. Threads cost tens of microseconds each to start and join: a range gets one thread per
 *      POPULATE_PER_THREAD bytes, at most the CPUs the process may use, the caller being one
 *      of them; a smaller range is mapped by the caller alone, in one call, and so is every
 *      range of a process that must get no thread of magpie's (os_helpers_welcome: a
 *      single-threaded program, a forked child).
 *   4. The helpers (os_run_parallel) never allocate, and the caller holds no lock of magpie's
 *      while it waits, so creating them may allocate (glibc's thread descriptors) without
 *      deadlock. The first error stops the other threads at their next chunk.
 */
#include "populate.h"
#include "os.h"

#include <stdint.h>

#define POPULATE_CHUNK ((size_t)2 << 20)       /* a huge page */
#define POPULATE_PER_THREAD ((size_t)32 << 20) /* less does not pay for starting a thread */

typedef struct {
  uintptr_t base;  /* the start of the range rounded down to a chunk */
  uintptr_t start; /* [start, end): the pages to map */
  uintptr_t end;
  size_t chunks;
  size_t next; /* the next chunk to hand out (atomic) */
  int error;   /* the first error (atomic), 0 while none */
} populate_job_t;

static void *populate_worker(void *arg) {
  populate_job_t *job = arg;
  while (!__atomic_load_n(&job->error, __ATOMIC_RELAXED)) {
    size_t i = __atomic_fetch_add(&job->next, 1, __ATOMIC_RELAXED);
    if (i >= job->chunks) break;
    uintptr_t lo = job->base + i * POPULATE_CHUNK, hi = lo + POPULATE_CHUNK;
    if (lo < job->start) lo = job->start;
    if (hi > job->end) hi = job->end;
    int error = os_populate((void *)lo, hi - lo), none = 0;
    if (error)
      __atomic_compare_exchange_n(&job->error, &none, error, false, __ATOMIC_RELAXED,
                                  __ATOMIC_RELAXED);
  }
  return NULL;
}

int populate_range(void *p, size_t len) {
  if (len == 0) return 0;
  uintptr_t start = (uintptr_t)p & ~(OS_PAGE - 1);
  uintptr_t end = ((uintptr_t)p + len + OS_PAGE - 1) & ~(OS_PAGE - 1);
  size_t threads = (end - start) / POPULATE_PER_THREAD, cpus = os_cpu_count();
  if (threads > cpus) threads = cpus;
  if (threads <= 1 || !os_helpers_welcome()) return os_populate((void *)start, end - start);
  uintptr_t base = start & ~(POPULATE_CHUNK - 1);
  populate_job_t job = {base, start, end, (end - base + POPULATE_CHUNK - 1) / POPULATE_CHUNK, 0, 0};
  os_run_parallel(populate_worker, &job, (unsigned)threads - 1);
  return job.error;
}
