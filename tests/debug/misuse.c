/*
 * Heap errors for debug mode to catch, one per case: `misuse CASE` announces the address it is
 * about to misuse ("misuse: CASE ADDRESS") and commits the error in a function of its own
 * (noinline, built -O0), which the report must name. run_case.py checks the outcome.
 * The guard-page cases end by SIGSEGV, which by itself proves nothing (any crash is one): their
 * handler first writes "misuse: fault at ADDRESS" on stderr, the faulting address the kernel
 * gives, for run_case.py to match with the announced one.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline))

/* C23, absent from glibc 2.36's headers: found at run time in the preloaded magpie. */
extern void free_sized(void *ptr, size_t size) __attribute__((weak));

static void announce(const char *kind, const void *p) {
  printf("misuse: %s %p\n", kind, p);
  fflush(stdout);
}

/* Writes the faulting address, with write(2) only, and returns: the handler is reset
   (SA_RESETHAND), so the access faults again and the program dies of SIGSEGV as it would have. */
static void report_fault(int sig, siginfo_t *info, void *context) {
  (void)sig;
  (void)context;
  char line[64] = "misuse: fault at 0x";
  size_t n = strlen(line);
  uintptr_t a = (uintptr_t)info->si_addr;
  int digits = 1;
  while (digits < (int)(2 * sizeof a) && a >> (4 * digits) != 0)
    digits++;
  for (int d = digits - 1; d >= 0; d--)
    line[n++] = "0123456789abcdef"[(a >> (4 * d)) & 15];
  line[n++] = '\n';
  ssize_t unused = write(2, line, n);
  (void)unused;
}

static void catch_fault(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = report_fault;
  sa.sa_flags = SA_SIGINFO | SA_RESETHAND;
  sigaction(SIGSEGV, &sa, NULL);
}

NOINLINE static char *alloc_site(size_t n) {
  return malloc(n);
}
NOINLINE static void release_site(void *p) {
  free(p);
}
NOINLINE static void overrun_writer(char *p, size_t n) {
  p[n] = 'x'; /* one byte past the requested size */
}
NOINLINE static void stale_writer(char *p) {
  p[3] = 'x';
}
NOINLINE static void second_free(void *p) {
  free(p);
}
NOINLINE static void interior_free(char *p) {
  free(p + 8);
}
NOINLINE static void foreign_free(void *p) {
  free(p);
}
NOINLINE static void sized_free_culprit(void *p) {
  free_sized(p, 64);
}
NOINLINE static void guard_writer(char *p, size_t n) {
  p[n] = 'x';
}
NOINLINE static void stale_reader(volatile char *p) {
  printf("read %d\n", p[0]);
}
NOINLINE static void realloc_culprit(void *p) {
  void *q = realloc(p, 100);
  printf("realloc gave %p\n", q);
}

/* Allocation and free traffic that pushes older blocks out of the quarantine. */
static void churn(int rounds) {
  for (int i = 0; i < rounds; i++)
    release_site(alloc_site(1000));
}

int main(int argc, char **argv) {
  const char *c = argc > 1 ? argv[1] : "";
  if (!strcmp(c, "overrun")) {
    char *p = alloc_site(24);
    announce(c, p);
    overrun_writer(p, 24);
    release_site(p);
  } else if (!strcmp(c, "write-after-free")) { /* caught when it leaves quarantine */
    char *p = alloc_site(40);
    announce(c, p);
    release_site(p);
    stale_writer(p);
    churn(200);
  } else if (!strcmp(c, "write-after-free-verify")) { /* caught by the periodic verify */
    char *p = alloc_site(40);
    announce(c, p);
    release_site(p);
    stale_writer(p);
    churn(2);
  } else if (!strcmp(c, "double-free")) {
    char *p = alloc_site(32);
    announce(c, p);
    release_site(p);
    second_free(p);
  } else if (!strcmp(c, "interior-free")) {
    char *p = alloc_site(64);
    announce(c, p + 8);
    interior_free(p);
  } else if (!strcmp(c, "foreign-free")) {
    static char not_heap[64];
    announce(c, not_heap + 16);
    foreign_free(not_heap + 16);
  } else if (!strcmp(c, "free-sized")) {
    char *p = alloc_site(100);
    announce(c, p);
    sized_free_culprit(p);
  } else if (!strcmp(c, "guard-overrun")) {
    size_t n = 100000; /* a large block, a multiple of 16: it ends at the guard page */
    char *p = alloc_site(n);
    announce(c, p + n);
    catch_fault();
    guard_writer(p, n);
  } else if (!strcmp(c, "guard-use-after-free")) {
    char *p = alloc_site(100000);
    announce(c, p);
    release_site(p);
    catch_fault();
    stale_reader(p);
  } else if (!strcmp(c, "realloc-freed")) {
    char *p = alloc_site(50);
    announce(c, p);
    release_site(p);
    realloc_culprit(p);
  } else if (!strcmp(c, "continue")) { /* two errors, each reported, then a normal exit */
    char *p = alloc_site(32);
    announce(c, p);
    release_site(p);
    second_free(p);
    char *q = alloc_site(24);
    printf("misuse: continue-overrun %p\n", (void *)q);
    fflush(stdout);
    overrun_writer(q, 24);
    release_site(q);
    printf("still running\n");
    return 0;
  } else {
    fprintf(stderr, "usage: %s CASE\n", argv[0]);
    return 2;
  }
  printf("not caught\n");
  return 0;
}
