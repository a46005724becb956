/*
 * Shared harness of the API conformance tests (tests/api/).
 *
 * 1. Two builds. Each test source is built twice: linked with libmagpie.so (so the program's
 *    malloc is magpie's through ordinary symbol lookup order), and plain, run with LD_PRELOAD.
 *    Built plain and run by hand, a test exercises glibc's malloc, which is how the tests were
 *    checked against the reference behaviour. ctest sets MAGPIE_TEST_REQUIRE=1 for both
 *    registered variants; api_begin() then fails the test when magpie is not the malloc in use,
 *    so a broken LD_PRELOAD (ld.so only warns) cannot pass silently against glibc.
 *
 * 2. Checks. CHECK(expr) reports file:line and the expression and lets the test go on, so one run
 *    lists every broken behaviour; REQUIRE(expr) does the same and exits at once, for checks the
 *    rest of the test depends on (a NULL pointer about to be written). Each check line reports
 *    its first API_MAX_PER_LINE failures, so a check in a loop over 4096 sizes cannot flood the
 *    log nor hide the failures of other checks; NOTE(...) prints the values behind a failure,
 *    API_MAX_NOTES at most. main() returns api_end(), non-zero when anything failed.
 *
 * 3. Keeping the compiler honest. The tests are built with -fno-builtin, and sizes and pointers
 *    pass through opaque_size()/opaque_ptr(), so the compiler neither folds allocation results
 *    (calloc's zeros, malloc(0) != malloc(0)) nor warns about deliberately impossible sizes.
 */
#ifndef MAGPIE_TESTS_API_CHECK_H
#define MAGPIE_TESTS_API_CHECK_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define API_MAX_REPORTS 200 /* enough to see a pattern, few enough to read */
#define API_MAX_PER_LINE 3  /* a check in a loop reports its first few failures only */
#define API_LINE_SLOTS 256  /* distinct failing check lines remembered */

static unsigned long api_failures;
static const char *api_test_name = "api";

static inline void api_report(const char *file, int line, const char *expr) {
  static struct {
    const char *file;
    int line, count;
  } seen[API_LINE_SLOTS];
  static int seen_used;
  static unsigned long reported;
  api_failures++;
  int slot = 0;
  while (slot < seen_used && !(seen[slot].line == line && seen[slot].file == file))
    slot++;
  if (slot == seen_used && seen_used < API_LINE_SLOTS) {
    seen[slot].file = file;
    seen[slot].line = line;
    seen_used++;
  }
  int count = slot < API_LINE_SLOTS ? ++seen[slot].count : 1;
  if (count <= API_MAX_PER_LINE && reported < API_MAX_REPORTS) {
    reported++;
    fprintf(stderr, "%s:%d: %s: CHECK failed: %s%s\n", file, line, api_test_name, expr,
            count == API_MAX_PER_LINE ? " (further failures of this check not shown)" : "");
  }
  fflush(stderr);
}

/* Context for a failing check (the values involved); at most API_MAX_NOTES per run. */
#define API_MAX_NOTES 60
static unsigned long api_notes __attribute__((unused));
#define NOTE(...)                                                                                  \
  do {                                                                                             \
    if (api_notes++ < API_MAX_NOTES) fprintf(stderr, __VA_ARGS__);                                 \
  } while (0)

#define CHECK(expr)                                                                                \
  do {                                                                                             \
    if (!(expr)) api_report(__FILE__, __LINE__, #expr);                                            \
  } while (0)

#define REQUIRE(expr)                                                                              \
  do {                                                                                             \
    if (!(expr)) {                                                                                 \
      api_report(__FILE__, __LINE__, #expr);                                                       \
      fprintf(stderr, "%s: FAILED (stopped at a required check)\n", api_test_name);                \
      exit(1);                                                                                     \
    }                                                                                              \
  } while (0)

static inline size_t opaque_size(size_t n) {
  __asm__ volatile("" : "+r"(n));
  return n;
}

static inline void *opaque_ptr(void *p) {
  __asm__ volatile("" : "+r"(p));
  return p;
}

/* The shared object that defines the code or data at addr, or "" when unknown. */
static inline const char *api_object_of(const void *addr) {
  Dl_info info;
  if (addr == NULL || dladdr(addr, &info) == 0 || info.dli_fname == NULL) return "";
  return info.dli_fname;
}

/* True when symbol `name`, as the program's own calls resolve it, is defined by libmagpie. */
static inline int api_symbol_is_magpie(const char *name) {
  void *anchor = dlsym(RTLD_DEFAULT, "magpie_malloc");
  void *sym = dlsym(RTLD_DEFAULT, name);
  if (anchor == NULL || sym == NULL) return 0;
  return strcmp(api_object_of(anchor), api_object_of(sym)) == 0;
}

/* The mangled names of the C++ operators magpie replaces, one of each form: plain, array,
   sized, aligned, nothrow (new and delete). */
static const char *const api_cxx_operators[] = {"_Znwm",
                                                "_Znam",
                                                "_ZdlPv",
                                                "_ZdaPv",
                                                "_ZdlPvm",
                                                "_ZnwmSt11align_val_t",
                                                "_ZdlPvSt11align_val_t",
                                                "_ZnwmRKSt9nothrow_t"};

/* True when the malloc this program calls is magpie's. */
static inline int api_magpie_loaded(void) {
  return api_symbol_is_magpie("malloc");
}

/* A deadline for tests of hangs: after `seconds`, a timer on CLOCK_MONOTONIC delivers SIGUSR2,
   whose handler writes "NAME: deadline passed: WHY" to fd 2 and exits with status 2.
   api_deadline_renew (async-signal-safe) moves it `seconds` from now: a test that renews it at
   each step of progress fails only when it stops progressing, however slow a loaded machine
   makes the steps. */
static const char *api_deadline_why;
static timer_t api_deadline_timer;
static int api_deadline_seconds;

static inline void api_deadline_passed(int sig) {
  (void)sig;
  static const char passed[] = ": deadline passed: ";
  (void)!write(2, api_test_name, strlen(api_test_name));
  (void)!write(2, passed, sizeof passed - 1);
  (void)!write(2, api_deadline_why, strlen(api_deadline_why));
  (void)!write(2, "\n", 1);
  _exit(2);
}

static inline int api_deadline_renew(void) {
  struct itimerspec when;
  memset(&when, 0, sizeof when);
  when.it_value.tv_sec = api_deadline_seconds;
  return timer_settime(api_deadline_timer, 0, &when, NULL);
}

static inline void api_deadline(int seconds, const char *why) {
  api_deadline_why = why;
  api_deadline_seconds = seconds;
  signal(SIGUSR2, api_deadline_passed);
  struct sigevent ev;
  memset(&ev, 0, sizeof ev);
  ev.sigev_notify = SIGEV_SIGNAL;
  ev.sigev_signo = SIGUSR2;
  if (timer_create(CLOCK_MONOTONIC, &ev, &api_deadline_timer) != 0 || api_deadline_renew() != 0) {
    fprintf(stderr, "%s: cannot arm the deadline timer\n", api_test_name);
    exit(1);
  }
}

static inline void api_begin(const char *name) {
  api_test_name = name;
  const char *require = getenv("MAGPIE_TEST_REQUIRE");
  int loaded = api_magpie_loaded();
  if (require != NULL && strcmp(require, "1") == 0 && !loaded) {
    fprintf(stderr, "%s: malloc is not magpie's (LD_PRELOAD=%s): refusing to test another malloc\n",
            name, getenv("LD_PRELOAD") ? getenv("LD_PRELOAD") : "(unset)");
    exit(1);
  }
  fprintf(stderr, "%s: testing %s\n", name, loaded ? "magpie" : "the system malloc");
}

static inline int api_end(void) {
  if (api_failures != 0) {
    fprintf(stderr, "%s: FAILED (%lu failed checks in all)\n", api_test_name, api_failures);
    return 1;
  }
  fprintf(stderr, "%s: ok\n", api_test_name);
  return 0;
}

/* Deterministic pattern helpers: byte i of a block tagged `tag`. */
static inline unsigned char pattern_byte(uintptr_t tag, size_t i) {
  return (unsigned char)((tag * 0x9e3779b1u) ^ (i * 131u) ^ (i >> 8));
}

static inline void pattern_fill(void *p, size_t n, uintptr_t tag) {
  unsigned char *b = (unsigned char *)p;
  for (size_t i = 0; i < n; i++)
    b[i] = pattern_byte(tag, i);
}

/* Index of the first byte that differs from the pattern, or n when all match. */
static inline size_t pattern_find_mismatch(const void *p, size_t n, uintptr_t tag) {
  const unsigned char *b = (const unsigned char *)p;
  for (size_t i = 0; i < n; i++)
    if (b[i] != pattern_byte(tag, i)) return i;
  return n;
}

static inline int pattern_ok(const void *p, size_t n, uintptr_t tag) {
  return pattern_find_mismatch(p, n, tag) == n;
}

static inline int all_bytes_are(const void *p, size_t n, unsigned char value) {
  const unsigned char *b = (const unsigned char *)p;
  for (size_t i = 0; i < n; i++)
    if (b[i] != value) return 0;
  return 1;
}

static inline int is_aligned(const void *p, size_t alignment) {
  return ((uintptr_t)p & (alignment - 1)) == 0;
}

/* A small deterministic generator (xorshift64*), for sizes and orders. */
typedef struct {
  uint64_t state;
} api_rng_t;

static inline uint64_t api_rng_next(api_rng_t *r) {
  r->state ^= r->state >> 12;
  r->state ^= r->state << 25;
  r->state ^= r->state >> 27;
  return r->state * 0x2545f4914f6cdd1dULL;
}

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)
#define GiB ((size_t)1 << 30)

#endif
