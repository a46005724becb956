/*
 * large: big blocks: realloc growth, large-block churn, and calloc of large zeroed blocks; and
 * the waits of threads while another gives a big heap back.
 *
 * Six modes (-m), each a separate row in the runner's table:
 *   realloc  each thread builds, per round, a string of -n MiB by appending chunks of 1..4096
 *            bytes with realloc to the exact new length (naive C string building), and a vector
 *            of -n MiB whose capacity grows by half each time (std::vector-like), with a small
 *            malloc/free between appends so that the block being grown is not always the last
 *            one. Allocators that can grow a block in place (or remap it) avoid copying; the others
 *            pay a copy per realloc. Every byte of both is checked at the end of the round.
 *   churn    each thread keeps LARGE_SLOTS blocks of log-uniform 64 KiB..64 MiB and replaces a
 *            random one -i times (split between threads), writing one word in every page of each
 *            new block. This is where allocators differ in caching freed large blocks, returning
 *            them to the OS (munmap/madvise) and the page faults that follow.
 *   calloc   each thread callocs blocks of log-uniform 256 KiB..32 MiB, checks that they are zero
 *            (a word in each page, at a varying offset, and the first and last bytes), dirties
 *            them, and frees them; an allocator that reuses dirty memory must zero it, one that
 *            takes fresh pages from the kernel need not.
 *   shrink   thread 0 builds a heap of -n MiB in SHRINK_BLOCK blocks, writes every page, frees it
 *            all and calls malloc_trim(0), -i times; meanwhile the other threads allocate, touch
 *            and free WAIT_BLOCK blocks without pause and time each pair. Reported: their longest
 *            and 99th-percentile wait (wait_max_ms, wait_p99_ms) and how many pairs they made:
 *            an allocator that gives pages back to the kernel under a lock that allocations
 *            need stalls them for as long as the kernel takes (milliseconds a GiB).
 *   trim     as shrink, with a heap of -n MiB of TRIM_BLOCK blocks, of which one in TRIM_KEEP
 *            stays over the trim (freed after it): the trim gives back the pages inside slabs
 *            that hold no block. The other threads allocate and write TRIM_BATCH blocks of that
 *            size, timing each malloc, then free them: every batch goes past their caches to
 *            the blocks' slabs, where an allocator that gives those pages back under the lock
 *            the slabs need stalls them.
 *   wake     every thread builds its share of a heap of -n MiB of TRIM_BLOCK blocks, writes them
 *            and frees all but one in TRIM_KEEP; thread 0 calls malloc_trim(0); then all of
 *            them allocate and write the freed blocks again at once, -i times. Reported: the
 *            time of those rebuilds (rebuild_s). The trim gave back the pages inside slabs; an
 *            allocator that takes them back into use under a lock its refills need (each page
 *            faults in there) makes the threads rebuild one at a time.
 *
 *   large -m realloc|churn|calloc|shrink|trim|wake [-t threads] [-i rounds/ops] [-n MiB] [-s seed]
 */
#include "bench.h"

#include <malloc.h>
#include <stdbool.h>
#include <stdint.h>

#define PAGE 4096
#define LARGE_SLOTS 4
#define CHURN_MIN (64u * 1024)
#define CHURN_MAX (64u * 1024 * 1024)
#define CALLOC_MIN (256u * 1024)
#define CALLOC_MAX (32u * 1024 * 1024)
#define APPEND_MAX 4096 /* largest string append */
#define SIDE_SLOTS 64   /* small blocks allocated between appends */
#define SHRINK_BLOCK (16u * 1024 * 1024)
#define WAIT_BLOCK (1024u * 1024)
#define WAIT_BINS 4096 /* waits counted in 10-microsecond bins; longer ones in the last */
#define TRIM_BLOCK 64
#define TRIM_KEEP 256
#define TRIM_BATCH 4096

static const char usage[] =
    "large: realloc growth to many MiB, 64 KiB..64 MiB block churn, large calloc, waits while\n"
    "  another thread shrinks its heap (of big blocks, of small ones mostly freed)\n"
    "  -m realloc|churn|calloc|shrink|trim|wake (default realloc)   -t threads (default 2)\n"
    "  -i realloc: rounds per thread (default 2); churn, calloc: total blocks (default 400);\n"
    "     shrink, trim, wake: heaps built and freed (default 3)\n"
    "  -n realloc: MiB per string and vector (default 8); shrink, trim, wake: MiB of the heap\n"
    "  -s seed\n";

typedef struct {
  int mode;
  bool lead; /* wake: thread 0, which trims and times */
  long count;
  size_t target;
  uint64_t seed;
  double bytes; /* bytes allocated, for the rate */
  char pad[BENCH_LINE];
} job_t;

enum { M_REALLOC, M_CHURN, M_CALLOC, M_SHRINK, M_TRIM, M_WAKE };

/* shrink, trim: the waiting threads run until the shrinking one is done; their waits, binned. */
static volatile int shrink_done;
static pthread_mutex_t wait_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t wait_bins[WAIT_BINS];
static double wait_max;
static uint64_t wait_pairs;

/* The byte at position i of a grown string or vector. */
static inline unsigned char grow_byte(size_t i, uint64_t seed) {
  return (unsigned char)((i * 131u + (i >> 12) * 7u + seed) & 0xff);
}

static void check_grown(const unsigned char *s, size_t len, uint64_t seed, const char *what) {
  for (size_t i = 0; i < len; i++)
    if (s[i] != grow_byte(i, seed))
      bench_fail("large realloc: %s byte %zu of %zu is %u, expected %u", what, i, len, s[i],
                 grow_byte(i, seed));
}

static void do_realloc(job_t *j, bench_rng_t *r) {
  void *side[SIDE_SLOTS] = {0};
  for (long round = 0; round < j->count; round++) {
    uint64_t seed = j->seed + (uint64_t)round;
    /* A string grown to exactly its length at each append. */
    size_t len = 0;
    unsigned char *s = NULL;
    while (len < j->target) {
      size_t add = bench_range(r, 1, APPEND_MAX);
      unsigned char *ns = realloc(s, len + add);
      if (ns == NULL) bench_die("realloc(%zu) returned NULL", len + add);
      s = ns;
      for (size_t i = 0; i < add; i++)
        s[len + i] = grow_byte(len + i, seed);
      len += add;
      size_t k = (size_t)bench_below(r, SIDE_SLOTS);
      free(side[k]);
      side[k] = bench_xmalloc(bench_logsize(r, 16, 512));
    }
    check_grown(s, len, seed, "string");
    j->bytes += (double)len;
    free(s);
    /* A vector of 8-byte elements whose capacity grows by half. */
    size_t cap = 4, n = 0, want = j->target / 8;
    uint64_t *v = bench_xmalloc(cap * sizeof(*v));
    while (n < want) {
      if (n == cap) {
        cap += cap / 2;
        uint64_t *nv = realloc(v, cap * sizeof(*v));
        if (nv == NULL) bench_die("realloc(%zu) returned NULL", cap * sizeof(*v));
        v = nv;
        size_t k = (size_t)bench_below(r, SIDE_SLOTS);
        free(side[k]);
        side[k] = bench_xmalloc(bench_logsize(r, 16, 512));
      }
      v[n] = n * 0x9e3779b97f4a7c15ull + seed;
      n++;
    }
    for (size_t i = 0; i < n; i++)
      if (v[i] != i * 0x9e3779b97f4a7c15ull + seed)
        bench_fail("large realloc: vector element %zu of %zu is wrong", i, n);
    j->bytes += (double)(n * 8);
    free(v);
  }
  for (int k = 0; k < SIDE_SLOTS; k++)
    free(side[k]);
}

static void touch_pages(unsigned char *p, size_t size, uint64_t tag) {
  for (size_t off = 0; off + 9 <= size; off += PAGE)
    memcpy(p + off, &tag, 8); /* not the last byte */
  bench_fill(p, size, tag);
}

static void check_pages(const unsigned char *p, size_t size, uint64_t tag) {
  bench_check(p, size, tag, "large churn");
  for (size_t off = PAGE; off + 9 <= size; off += PAGE) {
    uint64_t got;
    memcpy(&got, p + off, 8);
    if (got != tag) bench_fail("large churn: page at offset %zu of %zu lost its tag", off, size);
  }
}

static void do_churn(job_t *j, bench_rng_t *r) {
  unsigned char *slot[LARGE_SLOTS] = {0};
  size_t size[LARGE_SLOTS] = {0};
  uint64_t tag[LARGE_SLOTS] = {0};
  for (long k = 0; k < j->count; k++) {
    int i = (int)bench_below(r, LARGE_SLOTS);
    if (slot[i] != NULL) {
      check_pages(slot[i], size[i], tag[i]);
      free(slot[i]);
    }
    size[i] = bench_logsize(r, CHURN_MIN, CHURN_MAX);
    tag[i] = bench_rand(r);
    slot[i] = bench_xmalloc(size[i]);
    touch_pages(slot[i], size[i], tag[i]);
    j->bytes += (double)size[i];
  }
  for (int i = 0; i < LARGE_SLOTS; i++)
    if (slot[i] != NULL) {
      check_pages(slot[i], size[i], tag[i]);
      free(slot[i]);
    }
}

static void do_calloc(job_t *j, bench_rng_t *r) {
  for (long k = 0; k < j->count; k++) {
    size_t total = bench_logsize(r, CALLOC_MIN, CALLOC_MAX);
    size_t elem = (size_t)1 << bench_below(r, 5); /* 1..16-byte elements */
    size_t n = total / elem;
    total = n * elem;
    unsigned char *p = calloc(n, elem);
    if (p == NULL) bench_die("calloc(%zu, %zu) returned NULL", n, elem);
    if (p[0] != 0 || p[total - 1] != 0) bench_fail("large calloc: block of %zu not zeroed", total);
    for (size_t off = 0, pg = 0; off < total; off += PAGE, pg++) {
      size_t at = off + ((pg * 7 * 64 + (size_t)k * 8) & (PAGE - 8));
      if (at + 8 > total) break;
      uint64_t w;
      memcpy(&w, p + at, 8);
      if (w != 0) bench_fail("large calloc: word at %zu of %zu-byte block is not zero", at, total);
      memset(p + at, 0xa5, 8); /* dirty it, so that reuse without zeroing is caught */
    }
    p[0] = p[total - 1] = 0xa5;
    j->bytes += (double)total;
    free(p);
  }
}

/* shrink, thread 0: builds, writes, frees and trims the heap j->count times. */
static void do_shrink(job_t *j) {
  size_t n = j->target / SHRINK_BLOCK + 1;
  unsigned char **blocks = bench_xmalloc(n * sizeof(*blocks));
  for (long k = 0; k < j->count; k++) {
    for (size_t i = 0; i < n; i++) {
      blocks[i] = bench_xmalloc(SHRINK_BLOCK);
      touch_pages(blocks[i], SHRINK_BLOCK, (uint64_t)i);
    }
    for (size_t i = 0; i < n; i++) {
      check_pages(blocks[i], SHRINK_BLOCK, (uint64_t)i);
      free(blocks[i]);
    }
    malloc_trim(0);
    j->bytes += (double)n * SHRINK_BLOCK;
  }
  free(blocks);
  __atomic_store_n(&shrink_done, 1, __ATOMIC_RELEASE);
}

/* trim, wake: allocates and writes n TRIM_BLOCK blocks, then frees all but one in TRIM_KEEP. */
static void trim_heap_build(unsigned char **blocks, size_t n) {
  for (size_t i = 0; i < n; i++) {
    blocks[i] = bench_xmalloc(TRIM_BLOCK);
    bench_fill(blocks[i], TRIM_BLOCK, (uint64_t)i);
  }
  for (size_t i = 0; i < n; i++)
    if (i % TRIM_KEEP) free(blocks[i]);
}

/* trim, thread 0: builds a heap of small blocks, writes them, frees all but one in TRIM_KEEP,
   trims and frees the rest, j->count times. */
static void do_trim(job_t *j) {
  size_t n = j->target / TRIM_BLOCK;
  unsigned char **blocks = bench_xmalloc(n * sizeof(*blocks));
  for (long k = 0; k < j->count; k++) {
    trim_heap_build(blocks, n);
    malloc_trim(0);
    for (size_t i = 0; i < n; i += TRIM_KEEP) {
      bench_check(blocks[i], TRIM_BLOCK, (uint64_t)i, "large trim");
      free(blocks[i]);
    }
    j->bytes += (double)n * TRIM_BLOCK;
  }
  free(blocks);
  __atomic_store_n(&shrink_done, 1, __ATOMIC_RELEASE);
}

/* wake: all threads meet here between the phases of a round; thread 0 times the rebuilds. */
static pthread_barrier_t wake_all;
static double wake_secs;

/* wake, every thread: builds its share of the heap, frees all but one in TRIM_KEEP, waits for
   thread 0's trim, builds the freed blocks again, then frees them all, j->count times. */
static void do_wake(job_t *j) {
  size_t n = j->target / TRIM_BLOCK;
  unsigned char **blocks = bench_xmalloc(n * sizeof(*blocks));
  for (long k = 0; k < j->count; k++) {
    trim_heap_build(blocks, n);
    pthread_barrier_wait(&wake_all);
    if (j->lead) malloc_trim(0);
    pthread_barrier_wait(&wake_all);
    double t0 = bench_now();
    for (size_t i = 0; i < n; i++)
      if (i % TRIM_KEEP) {
        blocks[i] = bench_xmalloc(TRIM_BLOCK);
        bench_fill(blocks[i], TRIM_BLOCK, (uint64_t)i);
      }
    pthread_barrier_wait(&wake_all);
    if (j->lead) wake_secs += bench_now() - t0;
    for (size_t i = 0; i < n; i++) {
      bench_check(blocks[i], TRIM_BLOCK, (uint64_t)i, "large wake");
      free(blocks[i]);
    }
    j->bytes += (double)n * TRIM_BLOCK;
  }
  free(blocks);
}

/* Counts one wait of d seconds. */
static inline void wait_count(uint64_t *bins, double d, double *worst) {
  size_t bin = (size_t)(d * 1e5);
  bins[bin < WAIT_BINS ? bin : WAIT_BINS - 1]++;
  if (d > *worst) *worst = d;
}

/* shrink, the other threads until thread 0 is done: times malloc + touch + free of WAIT_BLOCK;
   trim: times each malloc of TRIM_BATCH TRIM_BLOCK blocks, then frees them. */
static void do_wait(int mode) {
  static __thread uint64_t bins[WAIT_BINS];
  static __thread unsigned char *batch[TRIM_BATCH];
  double worst = 0;
  uint64_t pairs = 0;
  while (!__atomic_load_n(&shrink_done, __ATOMIC_ACQUIRE)) {
    if (mode == M_TRIM) {
      for (int i = 0; i < TRIM_BATCH; i++, pairs++) {
        double t0 = bench_now();
        batch[i] = bench_xmalloc(TRIM_BLOCK);
        wait_count(bins, bench_now() - t0, &worst);
        memset(batch[i], 1, TRIM_BLOCK);
      }
      for (int i = 0; i < TRIM_BATCH; i++)
        free(batch[i]);
      continue;
    }
    double t0 = bench_now();
    unsigned char *p = bench_xmalloc(WAIT_BLOCK);
    p[0] = p[WAIT_BLOCK / 2] = p[WAIT_BLOCK - 1] = 1;
    free(p);
    wait_count(bins, bench_now() - t0, &worst);
    pairs++;
  }
  pthread_mutex_lock(&wait_lock);
  for (size_t i = 0; i < WAIT_BINS; i++)
    wait_bins[i] += bins[i];
  if (worst > wait_max) wait_max = worst;
  wait_pairs += pairs;
  pthread_mutex_unlock(&wait_lock);
}

/* The 99th-percentile wait in ms: the upper edge of its bin. */
static double wait_p99_ms(void) {
  uint64_t seen = 0;
  for (size_t i = 0; i < WAIT_BINS; i++)
    if ((seen += wait_bins[i]) * 100 >= wait_pairs * 99) return (double)(i + 1) * 0.01;
  return 0;
}

static void *worker(void *arg) {
  job_t *j = arg;
  bench_rng_t r;
  bench_rng_init(&r, j->seed, 7);
  if (j->mode == M_REALLOC)
    do_realloc(j, &r);
  else if (j->mode == M_CHURN)
    do_churn(j, &r);
  else if (j->mode == M_CALLOC)
    do_calloc(j, &r);
  else if (j->mode == M_WAKE)
    do_wake(j);
  else if (j->count)
    (j->mode == M_SHRINK ? do_shrink : do_trim)(j);
  else
    do_wait(j->mode);
  return NULL;
}

int main(int argc, char **argv) {
  bench_args_t a = {.threads = 2, .iters = 0, .seed = 1, .mode = "realloc", .n = 8};
  bench_parse(argc, argv, &a, usage);
  int mode;
  if (strcmp(a.mode, "realloc") == 0)
    mode = M_REALLOC;
  else if (strcmp(a.mode, "churn") == 0)
    mode = M_CHURN;
  else if (strcmp(a.mode, "calloc") == 0)
    mode = M_CALLOC;
  else if (strcmp(a.mode, "shrink") == 0)
    mode = M_SHRINK;
  else if (strcmp(a.mode, "trim") == 0)
    mode = M_TRIM;
  else if (strcmp(a.mode, "wake") == 0)
    mode = M_WAKE;
  else
    bench_die("unknown mode %s (realloc, churn, calloc, shrink, trim or wake)", a.mode);
  bool waits = mode == M_SHRINK || mode == M_TRIM;
  if (a.iters == 0) /* -i 0: the mode's default */
    a.iters = mode == M_REALLOC ? 2 : waits || mode == M_WAKE ? 3 : 400;
  if (a.n < 1) bench_die("-n must be >= 1");
  if (waits && a.threads < 2) bench_die("-m %s needs -t 2 or more", a.mode);

  /* calloc must refuse a product that overflows, whatever the allocator. */
  volatile size_t huge = SIZE_MAX / 2; /* volatile: keep the compiler from flagging it */
  void *bad = calloc(huge, 4);
  if (bad != NULL) bench_fail("calloc(SIZE_MAX/2, 4) did not fail");

  int t = a.threads;
  job_t *jobs = calloc((size_t)t, sizeof(*jobs));
  pthread_t *tids = calloc((size_t)t, sizeof(pthread_t));
  if (jobs == NULL || tids == NULL) bench_die("out of memory");
  if (mode == M_WAKE && pthread_barrier_init(&wake_all, NULL, (unsigned)t) != 0)
    bench_die("pthread_barrier_init failed");
  for (int i = 0; i < t; i++) {
    jobs[i].mode = mode;
    jobs[i].lead = i == 0;
    jobs[i].count = mode == M_REALLOC || mode == M_WAKE ? a.iters
                    : waits                             ? (i == 0 ? a.iters : 0)
                                                        : a.iters / t + (i < a.iters % t);
    jobs[i].target = (size_t)a.n * 1024 * 1024 / (mode == M_WAKE ? (size_t)t : 1);
    jobs[i].seed = a.seed * 1000003u + (uint64_t)i;
  }
  double t0 = bench_now();
  bench_spawn(tids, t, worker, jobs, sizeof(*jobs), NULL, 0);
  bench_join(tids, t);
  double secs = bench_now() - t0;
  double bytes = 0;
  for (int i = 0; i < t; i++)
    bytes += jobs[i].bytes;
  printf("RESULT large time=%.4f mode=%s threads=%d gib=%.2f gib_per_s=%.2f", secs, a.mode, t,
         bytes / (1 << 30), bytes / (1 << 30) / secs);
  if (waits)
    printf(" wait_max_ms=%.2f wait_p99_ms=%.2f wait_pairs=%llu", wait_max * 1e3, wait_p99_ms(),
           (unsigned long long)wait_pairs);
  if (mode == M_WAKE) printf(" rebuild_s=%.4f", wake_secs);
  printf("\n");
  free(jobs);
  free(tids);
  return 0;
}
