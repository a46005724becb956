/*
 * Shared helpers for the magpie benchmark workloads (one .c file per workload in bench/).
 *
 * Every workload is a plain executable that calls the ordinary malloc family; the allocator under
 * test is chosen at run time with LD_PRELOAD (glibc: no preload). The contract with bench/run.py:
 *
 *   - options: -t threads, -i iterations, -s seed, plus a few workload-specific ones (-m mode,
 *     -n count or size, -w seconds); -h prints them. Defaults give a run of about a second.
 *   - output: exactly one line on stdout beginning "RESULT <workload>", followed by key=value
 *     pairs. Every line has time=<seconds of measured work>; memory workloads add their ratios.
 *   - verification: each workload writes a pattern into the memory it gets and checks it before
 *     freeing (and calloc'ed memory is checked for zeros), so an allocator that hands out the same
 *     block twice or loses writes fails loudly (exit 3) instead of looking fast.
 *   - exit status: 0 ok, 2 bad usage or setup failure, 3 verification failure.
 *
 * Everything here is static inline: each workload is a single translation unit plus this header.
 */
#ifndef MAGPIE_BENCH_H
#define MAGPIE_BENCH_H

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Cache line size assumed for padding per-thread state (x86-64 and most arm64 parts). */
#define BENCH_LINE 64

/* ---- failure ---------------------------------------------------------------------------- */

__attribute__((noreturn, format(printf, 1, 2))) static inline void bench_die(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("bench: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  exit(2);
}

/* A verification failure: the allocator returned memory that does not hold what was written. */
__attribute__((noreturn, format(printf, 1, 2))) static inline void bench_fail(const char *fmt,
                                                                              ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("bench: CHECK FAILED: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  exit(3);
}

static inline void *bench_xmalloc(size_t size) {
  void *p = malloc(size);
  if (p == NULL) bench_die("malloc(%zu) returned NULL", size);
  return p;
}

/* ---- time and memory -------------------------------------------------------------------- */

static inline double bench_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Resident set size in bytes, from /proc/self/statm, read without stdio (no allocation). */
static inline size_t bench_rss(void) {
  char buf[128];
  int fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  ssize_t n = read(fd, buf, sizeof(buf) - 1);
  close(fd);
  if (n <= 0) return 0;
  buf[n] = '\0';
  char *p = buf;
  strtoul(p, &p, 10); /* size */
  unsigned long resident = strtoul(p, NULL, 10);
  return (size_t)resident * (size_t)sysconf(_SC_PAGESIZE);
}

/* ---- random numbers: splitmix64 to seed, xorshift64* to draw; one state per thread ---------- */

typedef struct {
  uint64_t s;
} bench_rng_t;

static inline uint64_t bench_splitmix(uint64_t *x) {
  uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static inline void bench_rng_init(bench_rng_t *r, uint64_t seed, uint64_t stream) {
  uint64_t x = seed * 0x100000001b3ull + stream;
  r->s = bench_splitmix(&x) | 1;
}

static inline uint64_t bench_rand(bench_rng_t *r) {
  r->s ^= r->s >> 12;
  r->s ^= r->s << 25;
  r->s ^= r->s >> 27;
  return r->s * 0x2545f4914f6cdd1dull;
}

/* Uniform in [0, n). */
static inline uint64_t bench_below(bench_rng_t *r, uint64_t n) {
  return (uint64_t)(((unsigned __int128)bench_rand(r) * n) >> 64);
}

/* Uniform in [lo, hi]. */
static inline size_t bench_range(bench_rng_t *r, size_t lo, size_t hi) {
  return lo + (size_t)bench_below(r, (uint64_t)(hi - lo + 1));
}

/*
 * Log-uniform in [lo, hi]: each power-of-two band [2^b, 2^(b+1)) is equally likely, uniform within
 * the band; hi itself belongs to the top band (so a power-of-two hi is not a band of its own, which
 * would make that one size as frequent as a whole band). Real programs allocate many more small
 * blocks than large ones; this is the usual stand-in.
 */
static inline size_t bench_logsize(bench_rng_t *r, size_t lo, size_t hi) {
  unsigned lb = 63u - (unsigned)__builtin_clzll(lo), hb = 63u - (unsigned)__builtin_clzll(hi);
  if (hb > lb && hi == (size_t)1 << hb) hb--;
  unsigned b = lb + (unsigned)bench_below(r, hb - lb + 1);
  size_t blo = (size_t)1 << b, bhi = b == hb ? hi : ((size_t)2 << b) - 1;
  if (blo < lo) blo = lo;
  if (bhi > hi) bhi = hi;
  return bench_range(r, blo, bhi);
}

/* ---- patterns: a tag in the first word and a byte derived from it in the last byte ---------- */

/* Object sizes here are always >= 8; an 8-byte block holds only the tag. */
static inline void bench_fill(void *p, size_t size, uint64_t tag) {
  memcpy(p, &tag, sizeof(tag));
  if (size > 8) ((unsigned char *)p)[size - 1] = (unsigned char)(tag ^ size ^ 0x5a);
}

static inline void bench_check(const void *p, size_t size, uint64_t tag, const char *where) {
  uint64_t got;
  memcpy(&got, p, sizeof(got));
  unsigned char last = ((const unsigned char *)p)[size - 1];
  if (size <= 8) last = (unsigned char)(tag ^ size ^ 0x5a);
  if (got != tag || last != (unsigned char)(tag ^ size ^ 0x5a))
    bench_fail("%s: block %p of %zu bytes holds tag %#llx/%#x, expected %#llx/%#x", where, p, size,
               (unsigned long long)got, last, (unsigned long long)tag,
               (unsigned char)(tag ^ size ^ 0x5a));
}

/* Blocks that carry their own size: the tag is the size in the low 32 bits and a salt above, so
   that any thread can check a block it did not allocate (bench_tagged_check). */
static inline void bench_tagged_fill(void *b, size_t size, bench_rng_t *r) {
  bench_fill(b, size, (bench_rand(r) << 32) | size);
}

/* Checks a block bench_tagged_fill wrote, whose size must be within [lo, hi]; returns it. */
static inline size_t bench_tagged_check(void *b, size_t lo, size_t hi, const char *where) {
  uint64_t tag;
  memcpy(&tag, b, sizeof(tag));
  size_t size = (size_t)(tag & 0xffffffffu);
  if (size < lo || size > hi)
    bench_fail("%s: block %p holds tag %#llx (size field out of range)", where, b,
               (unsigned long long)tag);
  bench_check(b, size, tag, where);
  return size;
}

/* A block a workload holds: where, how big, and the tag its pattern was written with. */
typedef struct {
  void *p;
  size_t size;
  uint64_t tag;
} bench_block_t;

/* Allocates b (size bytes, at least 8) and writes its pattern; dies when malloc fails. */
static inline void bench_block_new(bench_block_t *b, size_t size, bench_rng_t *r) {
  b->size = size;
  b->p = malloc(size);
  if (b->p == NULL) bench_die("malloc(%zu) returned NULL", size);
  b->tag = bench_rand(r);
  bench_fill(b->p, size, b->tag);
}

/* Checks b's pattern (bench_check, naming where) and frees it. */
static inline void bench_block_drop(bench_block_t *b, const char *where) {
  bench_check(b->p, b->size, b->tag, where);
  free(b->p);
}

/* ---- RSS over time ---------------------------------------------------------------------- */

static inline void bench_nap(double secs) {
  struct timespec d = {(time_t)secs, (long)((secs - (double)(time_t)secs) * 1e9)};
  nanosleep(&d, NULL);
}

/* (RSS - RSS at start) over live bytes: what the allocator holds per byte the program uses. */
static inline double bench_rss_ratio(size_t rss, size_t base, size_t live) {
  return live == 0 ? 0.0 : (double)(rss > base ? rss - base : 0) / (double)live;
}

/* Samples of (seconds since start, live bytes, RSS bytes), kept in memory while the run goes
   (allocated once, before it) and written as CSV when it is over: the file bench/run.py reads
   for its RSS-over-time chart (-m FILE). */
#define BENCH_MAX_SAMPLES 100000
typedef struct {
  float *v;
  long n;
} bench_series_t;

static inline void bench_series_init(bench_series_t *s) {
  s->v = calloc(BENCH_MAX_SAMPLES * 3, sizeof(float));
  if (s->v == NULL) bench_die("out of memory");
  s->n = 0;
}

/* Appends one sample while there is room. */
static inline void bench_series_add(bench_series_t *s, double when, size_t live, size_t rss) {
  if (s->n >= BENCH_MAX_SAMPLES) return;
  s->v[s->n * 3] = (float)when;
  s->v[s->n * 3 + 1] = (float)live;
  s->v[s->n * 3 + 2] = (float)rss;
  s->n++;
}

/* Writes the samples to path (nothing when path is NULL) and frees them. */
static inline void bench_series_finish(bench_series_t *s, const char *path) {
  if (path != NULL) {
    FILE *f = fopen(path, "w");
    if (f == NULL) bench_die("cannot write %s", path);
    fprintf(f, "seconds,live_bytes,rss_bytes\n");
    for (long i = 0; i < s->n; i++)
      fprintf(f, "%.3f,%.0f,%.0f\n", s->v[i * 3], s->v[i * 3 + 1], s->v[i * 3 + 2]);
    fclose(f);
  }
  free(s->v);
}

/* ---- command line ----------------------------------------------------------------------- */

typedef struct {
  int threads;      /* -t */
  long iters;       /* -i */
  uint64_t seed;    /* -s */
  const char *mode; /* -m, workload-specific */
  long n;           /* -n, workload-specific count or size */
  double wait;      /* -w, workload-specific seconds */
} bench_args_t;

/*
 * Parses the common options into a (pre-filled with defaults). usage describes the workload and
 * its -m/-n/-w meaning; it is printed for -h and on errors.
 */
static inline void bench_parse(int argc, char **argv, bench_args_t *a, const char *usage) {
  int c;
  while ((c = getopt(argc, argv, "t:i:s:m:n:w:h")) != -1) {
    switch (c) {
    case 't':
      a->threads = atoi(optarg);
      break;
    case 'i':
      a->iters = atol(optarg);
      break;
    case 's':
      a->seed = strtoull(optarg, NULL, 0);
      break;
    case 'm':
      a->mode = optarg;
      break;
    case 'n':
      a->n = atol(optarg);
      break;
    case 'w':
      a->wait = atof(optarg);
      break;
    case 'h':
      printf("%s", usage);
      exit(0);
    default:
      fprintf(stderr, "%s", usage);
      exit(2);
    }
  }
  if (optind != argc || a->threads < 1 || a->iters < 0) {
    fprintf(stderr, "%s", usage);
    exit(2);
  }
}

/* ---- threads ------------------------------------------------------------------------------ */

/* Starts n threads running fn(arg + i * stride) with stacks of the given size (0: default);
   given stacks, thread i runs on stacks + i * stack, memory the caller mapped (to measure it). */
static inline void bench_spawn(pthread_t *tids, int n, void *(*fn)(void *), void *arg,
                               size_t stride, char *stacks, size_t stack) {
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  if (stack != 0 && !stacks) pthread_attr_setstacksize(&attr, stack);
  for (int i = 0; i < n; i++) {
    if (stacks) pthread_attr_setstack(&attr, stacks + (size_t)i * stack, stack);
    int err = pthread_create(&tids[i], &attr, fn, (char *)arg + (size_t)i * stride);
    if (err != 0) bench_die("pthread_create (thread %d of %d): %s", i, n, strerror(err));
  }
  pthread_attr_destroy(&attr);
}

static inline void bench_join(pthread_t *tids, int n) {
  for (int i = 0; i < n; i++)
    pthread_join(tids[i], NULL);
}

#endif
