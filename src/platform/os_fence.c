/*
 * os_fence: membarrier, and the rseq area glibc registered.
 *
 * Theory
 *   1. os_fence_rseq (membarrier) restarts every restartable sequence in flight on one CPU and
 *      orders memory with it: after it, a sequence there sees what the caller stored before.
 *      os_fence_rseq_all does it on every CPU that runs one of the process's threads.
 *      os_fence_threads is the same barrier on every CPU that runs one of the process's
 *      threads, without the restarts (a sleeping thread is ordered by its context switch).
 *   2. Whether glibc registered an rseq area (__rseq_size) and where it lies from the thread
 *      pointer (__rseq_offset): magpie never registers a second one.
 */
#define _GNU_SOURCE
#include "os.h"

#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>

extern const unsigned int __rseq_size __attribute__((weak));
extern const ptrdiff_t __rseq_offset __attribute__((weak));

bool os_rseq_available(void) {
  return &__rseq_size != NULL && &__rseq_offset != NULL && __rseq_size >= 20;
}

ptrdiff_t os_rseq_offset(void) {
  return __rseq_offset;
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
