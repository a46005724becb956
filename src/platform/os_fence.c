/*
 * os_fence: membarrier, and the rseq area glibc registered.
 *
 * Theory
 *   1. os_fence_rseq (membarrier) restarts every restartable sequence in flight on one CPU and
 *      orders memory with it: after it, a sequence there sees what the caller stored before.
 *      os_fence_rseq_all does it on every CPU that runs one of the process's threads.
 *      os_fence_threads is the same barrier on every CPU that runs one of the process's
 *      threads, without the restarts (a sleeping thread is ordered by its context switch).
 *   2. The rseq area: glibc's, where it registered one for each thread (__rseq_size, and
 *      __rseq_offset from the thread pointer); magpie never registers a second one. Where glibc
 *      has none to offer - before 2.35 it registers none and lacks both symbols - magpie
 *      registers one of its own in each thread that asks (os_rseq_register), in initial-exec
 *      TLS, so that it lies at the same offset in every thread, with glibc's signature.
 *      Where glibc has the symbols but registered none (glibc.pthread.rseq=0: the program or
 *      its user wants no area, or registers one itself), magpie registers none either, unless
 *      told to (own). A thread's registration ends with it; a forked child inherits the
 *      caller's.
 */
#define _GNU_SOURCE
#include "os.h"
#include "rseq.h"

#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>

extern const unsigned int __rseq_size __attribute__((weak));
extern const ptrdiff_t __rseq_offset __attribute__((weak));

static __thread rseq_area_t os_rseq_own __attribute__((tls_model("initial-exec"))) = {.cpu_id = -1};
static bool os_rseq_ours; /* set once, by os_rseq_choose */

static bool os_rseq_glibc(void) {
  return &__rseq_size != NULL && &__rseq_offset != NULL && __rseq_size >= 20;
}

bool os_rseq_choose(bool own) {
  if (os_rseq_glibc()) return true;
  os_rseq_ours = &__rseq_size == NULL || own; /* glibc before 2.35, or told to */
  return os_rseq_ours;
}

bool os_rseq_available(void) {
  return os_rseq_glibc() || os_rseq_ours;
}

ptrdiff_t os_rseq_offset(void) {
  if (!os_rseq_ours) return __rseq_offset;
  return (char *)&os_rseq_own - (char *)__builtin_thread_pointer();
}

void os_rseq_register(void) {
  if (os_rseq_ours && os_rseq_own.cpu_id == -1) /* a failure leaves it so: own magazines */
    (void)syscall(SYS_rseq, &os_rseq_own, sizeof os_rseq_own, 0, RSEQ_SIGNATURE);
}

bool os_fence_rseq_register(void) {
  return syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED_RSEQ, 0, 0) == 0;
}

bool os_fence_rseq(unsigned cpu) {
  return syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED_RSEQ, MEMBARRIER_CMD_FLAG_CPU,
                 (int)cpu) == 0;
}

bool os_fence_rseq_all(void) {
  return syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED_RSEQ, 0, 0) == 0;
}

bool os_fence_threads_register(void) {
  return syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0;
}

bool os_fence_threads(void) {
  return syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0) == 0;
}
