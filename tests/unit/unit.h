/*
 * Harness of the layer unit tests: each test drives one layer directly (linked against
 * magpie_core_asan, the core under ASan+UBSan without malloc interposition). UCHECK stops the
 * test at the first broken expectation with file:line, which is where to start reading.
 */
#ifndef MAGPIE_TESTS_UNIT_H
#define MAGPIE_TESTS_UNIT_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdbool.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define UCHECK(expr)                                                                               \
  do {                                                                                             \
    if (!(expr)) {                                                                                 \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #expr);                     \
      exit(1);                                                                                     \
    }                                                                                              \
  } while (0)

/* Makes the test run with MAGPIE_OPTIONS=options whatever its environment says: magpie reads
   them once, before main, so a test that depends on them executes itself again with them. */
static inline void unit_options(char **argv, const char *options) {
  const char *now = getenv("MAGPIE_OPTIONS");
  if (now && strcmp(now, options) == 0) return;
  setenv("MAGPIE_OPTIONS", options, 1);
  execv("/proc/self/exe", argv);
  perror("unit_options: execv /proc/self/exe");
  exit(1);
}

/* A part of a test that needs what this kernel lacks (rseq, membarrier) is skipped, not failed
   and not passed in silence: unit_skip prints "SKIPPED: TEST: WHAT" on stdout, and unit_exit
   then ends the test with 77, which ctest shows as Skipped (SKIP_RETURN_CODE), once all the rest
   has passed. ctest prints no output of skipped tests; `make test` prints the SKIPPED lines. */
static int unit_skipped;

static inline void unit_skip(const char *test, const char *what) {
  printf("SKIPPED: %s: %s\n", test, what);
  fflush(stdout);
  unit_skipped = 1;
}

static inline int unit_exit(void) {
  return unit_skipped ? 77 : 0;
}

/* Runs fn(arg) in a child process (which then exits 0) with its stderr in report (at most
   cap - 1 bytes, NUL-terminated); returns the child's wait status. For checks that must abort
   with a report. raw: forked without the fork handlers, so that the child sees magpie's state
   as the caller left it in the middle of an operation (whose end the handlers would wait for). */
static inline int unit_in_child_how(void (*fn)(void *), void *arg, char *report, size_t cap,
                                    bool raw) {
  int fds[2];
  UCHECK(pipe(fds) == 0);
  pid_t pid = raw ? (pid_t)syscall(SYS_fork) : fork();
  UCHECK(pid >= 0);
  if (pid == 0) {
    dup2(fds[1], 2);
    fn(arg);
    _exit(0);
  }
  close(fds[1]);
  size_t len = 0;
  for (ssize_t n; len + 1 < cap && (n = read(fds[0], report + len, cap - 1 - len)) > 0;)
    len += (size_t)n;
  report[len] = '\0';
  close(fds[0]);
  int status;
  UCHECK(waitpid(pid, &status, 0) == pid);
  return status;
}

static inline int unit_in_child(void (*fn)(void *), void *arg, char *report, size_t cap) {
  return unit_in_child_how(fn, arg, report, cap, false);
}

/* xorshift64*: deterministic sequences for randomised operations. */
static inline uint64_t unit_rand(uint64_t *state) {
  *state ^= *state >> 12;
  *state ^= *state << 25;
  *state ^= *state >> 27;
  return *state * 0x2545f4914f6cdd1dULL;
}

#endif
