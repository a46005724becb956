/*
 * os_thread: magpie's own threads, futexes and clocks.
 *
 * Theory
 *   1. Futexes back lock.c's sleeping path; os_thread_start makes magpie's own threads, and
 *      os_run_parallel its short-lived helpers, joined before it returns with cancellation
 *      off (pthread_join is a cancellation point; malloc and calloc are not). Helpers go only
 *      to a process that runs threads already: a single-threaded one would stay marked as
 *      multithreaded by glibc (its single-thread fast paths lost, unshare(CLONE_NEWUSER)
 *      refused), and a forked child may only make async-signal-safe calls until it execs.
 *   2. Clocks: a coarse monotonic one for periods (reap, publish), a fine one for lock waits,
 *      the wall clock for reports.
 * Nothing here allocates or takes a lock of magpie's.
 */
#define _GNU_SOURCE
#include "os.h"
#include "os_impl.h"

#include <linux/futex.h>
#include <pthread.h>
#include <signal.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define OS_THREAD_STACK ((size_t)64 << 10) /* magpie's own threads only reap or populate */

extern char __libc_single_threaded __attribute__((weak)); /* glibc 2.32 and later */

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

int os_getpid(void) {
  return (int)getpid();
}

uint32_t os_thread_id(void) {
  return (uint32_t)syscall(SYS_gettid);
}
