/*
 * Shared harness of the stress tests: patterns, checks, failure reports, parameters and
 * measurements. See stress.h for the conventions.
 */
#define _GNU_SOURCE
#include "stress.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* Odd multipliers of the pattern stream; any odd constants with well-mixed bits would do. */
#define PATTERN_STEP 0x9e3779b97f4a7c15ULL
#define PATTERN_MUL 0xd6e8feb86659fd93ULL
/* Largest message stress_fail/stress_log write in one piece. */
#define MSG_MAX 4096

size_t stress_size_skewed(stress_rng_t *r, size_t lo, size_t hi) {
  if (lo < 1)
    lo = 1;
  if (hi <= lo)
    return lo;
  unsigned lo_log = 63 - (unsigned)__builtin_clzll(lo);
  unsigned hi_log = 63 - (unsigned)__builtin_clzll(hi);
  uint64_t u = stress_rng_below(r, 1u << 16);
  unsigned span = hi_log - lo_log + 1;
  unsigned e = lo_log + (unsigned)((u * u * span) >> 32); /* quadratic skew towards lo */
  size_t base = (size_t)1 << e;
  size_t size = base + (size_t)stress_rng_below(r, base);
  if (size < lo)
    size = lo;
  if (size > hi)
    size = hi;
  return size;
}

/* ---- patterns ---- */

uint64_t stress_key(const void *p, uint64_t seed, size_t size) {
  return stress_mix64((uint64_t)(uintptr_t)p ^ stress_mix64(seed ^ ((uint64_t)size << 17)));
}

static inline uint64_t pattern_word(uint64_t key, size_t i) {
  uint64_t x = (key ^ (i * PATTERN_STEP)) * PATTERN_MUL;
  return x ^ (x >> 29);
}

void stress_fill(void *p, size_t n, uint64_t key) {
  unsigned char *c = p;
  size_t words = n / 8, i;
  for (i = 0; i < words; i++) {
    uint64_t w = pattern_word(key, i);
    memcpy(c + 8 * i, &w, 8);
  }
  if (n % 8) {
    uint64_t w = pattern_word(key, words);
    memcpy(c + 8 * words, &w, n % 8);
  }
}

static inline unsigned char pattern_byte(uint64_t key, size_t off) {
  uint64_t w = pattern_word(key, off / 8);
  unsigned char b[8];
  memcpy(b, &w, 8);
  return b[off % 8];
}

static void describe_block(char *buf, size_t cap, const stress_block_t *b) {
  if (!b) {
    snprintf(buf, cap, "(no descriptor)");
    return;
  }
  snprintf(buf, cap, "block %p size %zu key %016llx from %s by thread %u%s%u", b->p, b->size,
           (unsigned long long)b->key, b->how ? b->how : "?", (unsigned)b->tid,
           b->align ? " align " : "", (unsigned)b->align);
}

__attribute__((noinline, noreturn)) static void
pattern_mismatch(const unsigned char *c, size_t n, uint64_t key, const char *test, const char *what,
                 const stress_block_t *b) {
  size_t first = n, last = 0, bad = 0, off;
  for (off = 0; off < n; off++) {
    if (c[off] != pattern_byte(key, off)) {
      if (first == n)
        first = off;
      last = off;
      bad++;
    }
  }
  char desc[256], got[3 * 16 + 1] = "", want[3 * 16 + 1] = "";
  describe_block(desc, sizeof desc, b);
  size_t start = first & ~(size_t)7;
  for (off = start; off < n && off < start + 16; off++) {
    snprintf(got + 3 * (off - start), 4, " %02x", c[off]);
    snprintf(want + 3 * (off - start), 4, " %02x", pattern_byte(key, off));
  }
  stress_fail("%s: pattern mismatch %s: %zu of %zu bytes differ, first at offset %zu (address %p), "
              "last at offset %zu\n  %s\n  at +%zu got :%s\n  at +%zu want:%s",
              test, what, bad, n, first, (const void *)(c + first), last, desc, start, got, start,
              want);
}

void stress_check_bytes(const void *p, size_t n, uint64_t key, const char *test, const char *what,
                        const stress_block_t *b) {
  const unsigned char *c = p;
  size_t words = n / 8, i;
  uint64_t diff = 0;
  for (i = 0; i < words; i++) {
    uint64_t w;
    memcpy(&w, c + 8 * i, 8);
    diff |= w ^ pattern_word(key, i);
    if (__builtin_expect(diff != 0, 0))
      pattern_mismatch(c, n, key, test, what, b);
  }
  if (n % 8) {
    uint64_t w = 0, want = pattern_word(key, words), mask = (~0ULL) >> (64 - 8 * (n % 8));
    memcpy(&w, c + 8 * words, n % 8);
    if ((w ^ want) & mask)
      pattern_mismatch(c, n, key, test, what, b);
  }
}

void stress_block_new(stress_block_t *b, void *p, size_t size, uint64_t seed, const char *how,
                      uint32_t tid, uint32_t align, const char *test) {
  if (!p)
    stress_fail("%s: thread %u: %s(%zu%s) returned NULL", test, (unsigned)tid, how, size,
                align ? ", aligned" : "");
  if (align && ((uintptr_t)p & (align - 1)))
    stress_fail("%s: thread %u: %s(align %u, size %zu) returned %p, not aligned", test,
                (unsigned)tid, how, (unsigned)align, size, p);
  size_t usable = magpie_usable_size(p);
  if (usable < size)
    stress_fail("%s: thread %u: %s(%zu) returned %p with magpie_usable_size %zu < size", test,
                (unsigned)tid, how, size, p, usable);
  b->p = p;
  b->size = size;
  b->key = stress_key(p, seed, size);
  b->how = how;
  b->tid = tid;
  b->align = align;
  stress_fill(p, size, b->key);
}

void stress_block_check(const stress_block_t *b, const char *test, const char *what) {
  if (b->p)
    stress_check_bytes(b->p, b->size, b->key, test, what, b);
}

void stress_block_rekey(stress_block_t *b, uint64_t seed, uint32_t tid) {
  b->key = stress_key(b->p, seed, b->size);
  b->tid = tid;
  stress_fill(b->p, b->size, b->key);
}

void stress_block_realloc(stress_block_t *b, size_t size, uint64_t seed, uint32_t tid,
                          const char *test) {
  stress_block_check(b, test, "before realloc");
  stress_block_t old = *b;
  void *p = magpie_realloc(b->p, size);
  if (!p)
    stress_fail("%s: thread %u: realloc(%p, %zu) of a %zu-byte block returned NULL", test,
                (unsigned)tid, old.p, size, old.size);
  /* The old block's pattern must have moved with it; its key still names the old address. */
  stress_check_bytes(p, old.size < size ? old.size : size, old.key, test,
                     "in the prefix preserved by realloc", &old);
  stress_block_new(b, p, size, seed, "realloc", tid, 0, test);
}

void stress_block_free(stress_block_t *b, const char *test) {
  if (!b->p)
    return;
  stress_block_check(b, test, "before free");
  magpie_free(b->p);
  b->p = NULL;
  b->size = 0;
}

static int compare_blocks(const void *x, const void *y) {
  uintptr_t a = (uintptr_t)((const stress_block_t *)x)->p;
  uintptr_t c = (uintptr_t)((const stress_block_t *)y)->p;
  return a < c ? -1 : a > c;
}

void stress_check_overlap(const stress_block_t *blocks, size_t n, const char *test,
                          const char *when) {
  size_t bytes = n * sizeof *blocks + 1, live = 0, i;
  stress_block_t *v = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (v == MAP_FAILED)
    stress_fail("%s: mmap of %zu bytes for the overlap check failed", test, bytes);
  for (i = 0; i < n; i++)
    if (blocks[i].p)
      v[live++] = blocks[i];
  qsort(v, live, sizeof *v, compare_blocks);
  for (i = 1; i < live; i++) {
    uintptr_t end = (uintptr_t)v[i - 1].p + (v[i - 1].size ? v[i - 1].size : 1);
    if (end > (uintptr_t)v[i].p) {
      char a[256], c[256];
      describe_block(a, sizeof a, &v[i - 1]);
      describe_block(c, sizeof c, &v[i]);
      stress_fail("%s: live blocks overlap (%s):\n  %s\n  %s", test, when, a, c);
    }
  }
  munmap(v, bytes);
}

/* ---- failing and logging ---- */

static void write_all(int fd, const char *s, size_t n) {
  while (n) {
    ssize_t w = write(fd, s, n);
    if (w <= 0) {
      if (w < 0 && errno == EINTR)
        continue;
      return;
    }
    s += w;
    n -= (size_t)w;
  }
}

static void vmessage(int fd, const char *prefix, const char *fmt, va_list ap) {
  char buf[MSG_MAX];
  int len = snprintf(buf, sizeof buf, "%s", prefix);
  if (len < 0)
    len = 0;
  int more = vsnprintf(buf + len, sizeof buf - (size_t)len - 1, fmt, ap);
  if (more > 0)
    len += more;
  if ((size_t)len > sizeof buf - 2)
    len = (int)sizeof buf - 2;
  buf[len++] = '\n';
  write_all(fd, buf, (size_t)len);
}

void stress_fail(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char prefix[64];
  snprintf(prefix, sizeof prefix, "STRESS FAIL [pid %d]: ", (int)getpid());
  vmessage(2, prefix, fmt, ap);
  va_end(ap);
  abort();
}

void stress_log(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vmessage(1, "", fmt, ap);
  va_end(ap);
}

static const char *watchdog_test = "stress";
static unsigned watchdog_seconds;

static void watchdog_fire(int sig) {
  (void)sig;
  char buf[256];
  int len = snprintf(buf, sizeof buf,
                     "STRESS FAIL [pid %d]: %s: watchdog: still running after %u s "
                     "(deadlock or livelock?)\n",
                     (int)getpid(), watchdog_test, watchdog_seconds);
  if (len > 0)
    write_all(2, buf, (size_t)len < sizeof buf ? (size_t)len : sizeof buf - 1);
  abort();
}

void stress_watchdog(unsigned seconds, const char *test) {
  watchdog_test = test;
  watchdog_seconds = seconds;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = watchdog_fire;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGALRM, &sa, NULL);
  alarm(seconds);
}

/* ---- parameters ---- */

void stress_params(int argc, char **argv, const char *test, stress_param_t *params, size_t n) {
  for (int a = 1; a < argc; a++) {
    const char *eq = strchr(argv[a], '=');
    size_t i = n;
    if (eq)
      for (i = 0; i < n; i++)
        if (strlen(params[i].name) == (size_t)(eq - argv[a]) &&
            !memcmp(params[i].name, argv[a], (size_t)(eq - argv[a])))
          break;
    char *end = NULL;
    long v = 0;
    if (i < n) {
      errno = 0;
      v = strtol(eq + 1, &end, 0);
    }
    if (i == n || errno || end == eq + 1 || *end) {
      fprintf(stderr, "%s: bad argument '%s'\nusage: %s [name=value]...\n", test, argv[a],
              argv[0]);
      for (i = 0; i < n; i++)
        fprintf(stderr, "  %-12s %ld\t%s\n", params[i].name, params[i].value, params[i].help);
      exit(2);
    }
    params[i].value = v;
  }
  for (size_t i = 0; i < n; i++)
    if (params[i].to) *params[i].to = params[i].value;
  char line[MSG_MAX];
  size_t len = (size_t)snprintf(line, sizeof line, "%s%s:", test, STRESS_TSAN ? " (tsan)" : "");
  for (size_t i = 0; i < n && len < sizeof line; i++)
    len += (size_t)snprintf(line + len, sizeof line - len, " %s=%ld", params[i].name,
                            params[i].value);
  stress_log("%s", line);
  stress_watchdog((unsigned)stress_param(params, n, "timeout"), test);
}

long stress_param(const stress_param_t *params, size_t n, const char *name) {
  for (size_t i = 0; i < n; i++)
    if (!strcmp(params[i].name, name))
      return params[i].value;
  stress_fail("no parameter %s", name);
}

/* ---- measurements ---- */

size_t stress_rss_bytes(void) {
  char buf[256];
  int fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    stress_fail("open /proc/self/statm: errno %d", errno);
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0)
    stress_fail("read /proc/self/statm: errno %d", errno);
  buf[n] = 0;
  unsigned long long size = 0, resident = 0;
  if (sscanf(buf, "%llu %llu", &size, &resident) != 2)
    stress_fail("cannot parse /proc/self/statm: '%s'", buf);
  return (size_t)resident * (size_t)sysconf(_SC_PAGESIZE);
}

const char *stress_stats_json(const char *test, size_t *len) {
  int fd = memfd_create("magpie-stats", MFD_CLOEXEC);
  if (fd < 0)
    stress_fail("%s: memfd_create: errno %d", test, errno);
  int rc = magpie_stats_write(fd, MAGPIE_STATS_JSON);
  struct stat st;
  if (fstat(fd, &st) != 0)
    stress_fail("%s: fstat of the stats memfd: errno %d", test, errno);
  if (rc < 0 || st.st_size <= 0)
    stress_fail("%s: magpie_stats_write(fd, MAGPIE_STATS_JSON) returned %d and wrote %lld bytes",
                test, rc, (long long)st.st_size);
  *len = (size_t)st.st_size;
  const char *json = mmap(NULL, *len, PROT_READ, MAP_PRIVATE, fd, 0);
  close(fd);
  if (json == MAP_FAILED)
    stress_fail("%s: mmap of the stats memfd: errno %d", test, errno);
  return json;
}

void stress_stats_release(const char *json, size_t len) {
  munmap((void *)json, len);
}

bool stress_json_next(const char **from, const char *end, const char *field, size_t *value) {
  size_t n = strlen(field);
  const char *at = memmem(*from, (size_t)(end - *from), field, n);
  if (!at)
    return false;
  const char *c = at + n;
  while (c < end && (*c == ' ' || *c == '\t' || *c == '\n' || *c == '\r' || *c == ':'))
    c++;
  if (c >= end || *c < '0' || *c > '9')
    return false;
  size_t v = 0;
  while (c < end && *c >= '0' && *c <= '9')
    v = v * 10 + (size_t)(*c++ - '0');
  *value = v;
  *from = c;
  return true;
}

size_t stress_mapped_bytes(const char *test) {
  size_t len, v;
  const char *json = stress_stats_json(test, &len), *from = json;
  if (!stress_json_next(&from, json + len, "\"mapped_bytes\"", &v))
    stress_fail("%s: the JSON statistics (%zu bytes) have no number for \"mapped_bytes\": %.200s",
                test, len, json);
  stress_stats_release(json, len);
  return v;
}

size_t stress_cached_bytes(const char *test, const char *when) {
  size_t len, cls, size, cached, mags, depot, bytes = 0;
  const char *json = stress_stats_json(test, &len), *end = json + len;
  static const char classes[] = "\"classes\"";
  const char *at = memmem(json, len, classes, sizeof classes - 1);
  if (!at) stress_fail("%s: the JSON statistics have no \"classes\"", test);
  while (stress_json_next(&at, end, "\"class\"", &cls) &&
         stress_json_next(&at, end, "\"size\"", &size) &&
         stress_json_next(&at, end, "\"cached\"", &cached) &&
         stress_json_next(&at, end, "\"cached_mags\"", &mags) &&
         stress_json_next(&at, end, "\"cached_depot\"", &depot)) {
    if (!cached) continue;
    stress_log("%s: %s class %zu (%zu bytes) still caches %zu blocks (%zu in magazines, %zu in "
               "its depot)",
               test, when, cls, size, cached, mags, depot);
    bytes += cached * size;
  }
  stress_stats_release(json, len);
  return bytes;
}

double stress_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- threads ---- */

void stress_thread_start(pthread_t *thread, void *(*fn)(void *), void *arg, const char *test) {
  int rc = pthread_create(thread, NULL, fn, arg);
  if (rc)
    stress_fail("%s: pthread_create failed: error %d", test, rc);
}

void stress_thread_join(pthread_t thread, const char *test) {
  int rc = pthread_join(thread, NULL);
  if (rc)
    stress_fail("%s: pthread_join failed: error %d", test, rc);
}
