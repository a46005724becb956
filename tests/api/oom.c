/*
 * Out of memory: under RLIMIT_AS, every allocation entry point fails cleanly once the address
 * space is gone, nothing already handed out is harmed, and what was freed fits again.
 *
 * The program limits its own address space to what it maps at start plus OOM_HEADROOM, then
 * runs the phase named by argv[1]:
 *   ranges    fills the headroom with blocks of one size range at a time (small classes, the
 *             other small classes, 256 KiB..1 MiB, 1..5 MiB), then with the four interleaved;
 *             the whole sequence twice;
 *   threads   OOM_THREADS threads exhaust memory at once, each with one range or all four
 *             interleaved; two rounds;
 *   metadata  fills the address space to its last page while the heap still holds free room,
 *             so that what cannot be mapped is the allocator's own records (slab descriptors,
 *             magazines, thread caches, object caches, segment tags, page-map leaves); then,
 *             with 0 to METADATA_SPARE_PAGES pages given back in turn, starts threads (kept
 *             alive to the end), creates an object cache and fills the heap with blocks of every
 *             size class; threads exit and everything is freed with memory still exhausted;
 *             then every class, a thread and an object cache work again, and after malloc_trim
 *             the address space is back for a thread with a default stack.
 * A round allocates until the smallest size of its range fails, takes what is left with every
 * size from 4 MiB down to 16 B, then calls each entry point (malloc, calloc, realloc,
 * reallocarray, posix_memalign, aligned_alloc, memalign, valloc, pvalloc, six forms of C++
 * operator new, magpie_cache_alloc) with sizes of every range until it fails. Memory cached for
 * one size class may serve a few more calls, but each entry point must end in a clean failure:
 * NULL with errno ENOMEM (posix_memalign returns ENOMEM and, as glibc does, also leaves it in
 * errno), std::bad_alloc from the throwing forms of new, nullptr from the nothrow ones; a failed
 * realloc or reallocarray leaves its block as it was, still usable. Every block handed out is
 * filled with a pattern derived from its address and size and checked before it is freed. A
 * round of a range must fit at least OOM_REFILL_PERCENT of the bytes of that range's first round
 * (freed memory is reusable), and every round of the ranges phase at least OOM_FILL_PERCENT of
 * the headroom (memory freed by blocks of one range serves blocks of the others).
 *
 * Blocks are recorded in arrays mapped before the limit is set, so the test's bookkeeping never
 * competes for the memory under test. Object caches are looked up with dlsym: the same source
 * runs against the system malloc when built plain and run without LD_PRELOAD, which is how the
 * expectations were checked against glibc.
 */
#include "check.h"
#include "oom_new.h"

#include <errno.h>
#include <magpie.h>
#include <malloc.h>
#include <pthread.h>
#include <stdbool.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#define OOM_HEADROOM (256 * MiB) /* address space the test may fill */
#define OOM_REFILL_PERCENT 90
#define OOM_FILL_PERCENT 80
#define OOM_THREADS 8
#define OOM_THREAD_STACK (256 * KiB)
#define OOM_BLOCKS_MAX (OOM_HEADROOM / 128) /* records per list: far more than rounds make */
#define OOM_DONORS (2 * NPROBES)            /* 16-byte blocks that realloc probes grow */
#define OOM_BIG_DONORS 2                    /* 1 MiB blocks that realloc probes grow */
#define METADATA_SPARE_PAGES 48   /* beyond a metadata pool's chunk (64 KiB) and a thread cache */
#define METADATA_THREADS 2        /* started at each step */
#define METADATA_STACK (64 * KiB) /* theirs, in the program's data */
#define METADATA_BLOCKS_MAX 1024  /* records of each such thread */
#define METADATA_ROOM (32 * MiB)  /* free room in the heap when its records run out */
#define BALLAST_MAX 256           /* mappings: halving sizes from 64 MiB to a page, a few each */

/* The test's own CHECK for code that threads run: api_report keeps unlocked state. */
static pthread_mutex_t report_lock = PTHREAD_MUTEX_INITIALIZER;
#define OCHECK(expr)                                                                               \
  do {                                                                                             \
    if (!(expr)) {                                                                                 \
      pthread_mutex_lock(&report_lock);                                                            \
      api_report(__FILE__, __LINE__, #expr);                                                       \
      pthread_mutex_unlock(&report_lock);                                                          \
    }                                                                                              \
  } while (0)

/* ---- blocks and their patterns ---- */

enum { KIND_MALLOC, KIND_NEW, KIND_CACHE };

typedef struct {
  void *p;
  size_t n;            /* bytes filled with the pattern */
  unsigned char kind;  /* how to release it */
  unsigned char index; /* the operator new form, or the object cache */
} block_t;

typedef struct {
  block_t *v;
  size_t len, cap;
} blocks_t;

/* The 8-byte words of a block's pattern: filling 256 MiB a byte at a time would take seconds. */
static uint64_t block_seed(const void *p, size_t n) {
  return ((uint64_t)(uintptr_t)p ^ (uint64_t)n << 44) * 0x9e3779b97f4a7c15u;
}

static void pattern_fill_words(void *p, size_t n, uint64_t seed) {
  uint64_t *w = p;
  size_t words = n / 8;
  for (size_t i = 0; i < words; i++)
    w[i] = seed + i * 0xd6e8feb86659fd93u;
  pattern_fill((unsigned char *)p + words * 8, n % 8, seed);
}

static bool pattern_words_ok(const void *p, size_t n, uint64_t seed) {
  const uint64_t *w = p;
  size_t words = n / 8;
  uint64_t diff = 0;
  for (size_t i = 0; i < words; i++)
    diff |= w[i] ^ (seed + i * 0xd6e8feb86659fd93u);
  return diff == 0 && pattern_ok((const unsigned char *)p + words * 8, n % 8, seed);
}

static void blocks_init(blocks_t *b, size_t cap) {
  b->v = mmap(NULL, cap * sizeof(block_t), PROT_READ | PROT_WRITE,
              MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  REQUIRE(b->v != MAP_FAILED);
  b->len = 0;
  b->cap = cap;
}

/* Records block p of n bytes and fills it; returns its index. */
static size_t blocks_add(blocks_t *b, void *p, size_t n, int kind, int index) {
  REQUIRE(b->len < b->cap);
  pattern_fill_words(p, n, block_seed(p, n));
  b->v[b->len] = (block_t){p, n, (unsigned char)kind, (unsigned char)index};
  return b->len++;
}

static bool block_intact(const block_t *k) {
  return pattern_words_ok(k->p, k->n, block_seed(k->p, k->n));
}

/* ---- object caches, found at run time ---- */

static struct {
  __typeof__(magpie_cache_create) *create;
  __typeof__(magpie_cache_alloc) *alloc;
  __typeof__(magpie_cache_free) *free;
  __typeof__(magpie_cache_destroy) *destroy;
} mc;

#define CACHES_MAX 128
static magpie_cache_t *caches[CACHES_MAX];
static size_t cache_sizes[CACHES_MAX];
static int caches_used;

static void object_caches_find(void) {
  mc.create = (__typeof__(mc.create))dlsym(RTLD_DEFAULT, "magpie_cache_create");
  mc.alloc = (__typeof__(mc.alloc))dlsym(RTLD_DEFAULT, "magpie_cache_alloc");
  mc.free = (__typeof__(mc.free))dlsym(RTLD_DEFAULT, "magpie_cache_free");
  mc.destroy = (__typeof__(mc.destroy))dlsym(RTLD_DEFAULT, "magpie_cache_destroy");
  if (api_magpie_loaded()) REQUIRE(mc.create && mc.alloc && mc.free && mc.destroy);
  if (!mc.create)
    fprintf(stderr, "%s: no magpie_cache_*: object caches not tried\n", api_test_name);
}

/* Creates an object cache of objects of size bytes; -1 when creation failed (cleanly). */
static int cache_add(size_t size) {
  if (!mc.create || caches_used == CACHES_MAX) return -1;
  errno = 0;
  magpie_cache_t *cp = mc.create("oom", size, 0, NULL, NULL, NULL, 0);
  if (!cp) {
    if (errno != ENOMEM) NOTE("  magpie_cache_create(%zu) failed with errno %d\n", size, errno);
    OCHECK(errno == ENOMEM);
    return -1;
  }
  caches[caches_used] = cp;
  cache_sizes[caches_used] = size;
  return caches_used++;
}

static int cache_of_size(size_t size) {
  for (int i = 0; i < caches_used; i++)
    if (cache_sizes[i] == size) return i;
  return -1;
}

static void caches_destroy(void) {
  for (int i = 0; i < caches_used; i++)
    mc.destroy(caches[i]);
  caches_used = 0;
}

/* Frees block k the way it was allocated. */
static void release(const block_t *k) {
  if (k->kind == KIND_MALLOC)
    free(k->p);
  else if (k->kind == KIND_NEW)
    oom_delete(k->p, (oom_new_form_t)k->index);
  else
    mc.free(caches[k->index], k->p);
}

/* Checks every block's pattern, then releases it the way it was allocated. */
static void blocks_verify_release(blocks_t *b) {
  for (size_t i = 0; i < b->len; i++) {
    block_t *k = &b->v[i];
    if (!block_intact(k)) NOTE("  block %p (%zu bytes) lost its contents\n", k->p, k->n);
    OCHECK(block_intact(k));
    release(k);
  }
  b->len = 0;
}

/* ---- size ranges ---- */

typedef struct {
  const char *name;
  size_t lo, hi;
} range_t;

static const range_t ranges[] = {
    {"16 B..1 KiB", 16, 1 * KiB},
    {"1 KiB..256 KiB", 1 * KiB + 1, 256 * KiB},
    {"256 KiB..1 MiB", 256 * KiB + 1, 1 * MiB},
    {"1 MiB..5 MiB", 1 * MiB + 1, 5 * MiB},
};
#define NRANGES (int)(sizeof ranges / sizeof ranges[0])

/* A size in [lo, hi], its power of two drawn uniformly: as many 16-byte blocks as 1 KiB ones. */
static size_t pick_size(api_rng_t *rng, size_t lo, size_t hi) {
  unsigned a = 63u - (unsigned)__builtin_clzl(lo), b = 63u - (unsigned)__builtin_clzl(hi);
  unsigned e = a + (unsigned)(api_rng_next(rng) % (b - a + 1));
  size_t s = ((size_t)1 << e) + (size_t)(api_rng_next(rng) % ((size_t)1 << e));
  return s < lo ? lo : s > hi ? hi : s;
}

/* Sizes the probes try: from each range, a class's size and sizes beside the large threshold. */
static const size_t probe_sizes[] = {16, 200, 3000, 40000, 200000, 300 * KiB, 2 * MiB, 5 * MiB};
#define NPROBES (sizeof probe_sizes / sizeof probe_sizes[0])

/* ---- entry points ---- */

typedef struct {
  blocks_t blocks;
  api_rng_t rng;
  size_t donors[OOM_DONORS + OOM_BIG_DONORS]; /* indices into blocks; small ones first */
  int small_donors, big_donors;               /* not yet grown */
} ctx_t;

enum {
  E_MALLOC,
  E_CALLOC,
  E_REALLOC,
  E_REALLOCARRAY,
  E_POSIX_MEMALIGN,
  E_ALIGNED_ALLOC,
  E_MEMALIGN,
  E_VALLOC,
  E_PVALLOC,
  E_CACHE,
  E_NEW, /* E_NEW + form */
  E_COUNT = E_NEW + OOM_NEW_FORMS
};

static const char *const entry_names[E_NEW] = {
    "malloc",        "calloc",   "realloc", "reallocarray", "posix_memalign",
    "aligned_alloc", "memalign", "valloc",  "pvalloc",      "magpie_cache_alloc"};

static const char *entry_name(int e) {
  return e < E_NEW ? entry_names[e] : oom_new_name((oom_new_form_t)(e - E_NEW));
}

/* Checks that a C entry point's NULL came with errno ENOMEM. */
static void expect_enomem(int e, size_t size) {
  if (errno != ENOMEM) NOTE("  %s(%zu) returned NULL with errno %d\n", entry_name(e), size, errno);
  OCHECK(errno == ENOMEM);
}

/* realloc (or reallocarray) of a donor block to size bytes, then to twice that and so on until
   it fails: a block may grow in place into free neighbours that malloc does not reach (glibc's
   arenas), but not without end. The failure must leave the block as it was, still usable. */
static void grow_until_failure(ctx_t *c, int e, size_t size) {
  bool big = size > 2 * MiB; /* a large donor: the path that remaps */
  int *left = big ? &c->big_donors : &c->small_donors;
  REQUIRE(*left > 0);
  block_t *k = &c->blocks.v[c->donors[(big ? OOM_DONORS : 0) + --*left]];
  for (size_t s = size; s <= 2 * OOM_HEADROOM; s *= 2) {
    void *old = k->p;
    size_t old_n = k->n;
    errno = 0;
    void *q = e == E_REALLOC ? realloc(old, opaque_size(s)) : reallocarray(old, 2, s / 2);
    if (!q) {
      expect_enomem(e, s);
      if (!block_intact(k)) NOTE("  failed %s(%zu) changed its block\n", entry_name(e), s);
      OCHECK(block_intact(k));
      pattern_fill_words(k->p, k->n, ~block_seed(k->p, k->n)); /* still writable */
      pattern_fill_words(k->p, k->n, block_seed(k->p, k->n));
      return;
    }
    OCHECK(pattern_words_ok(q, old_n, block_seed(old, old_n))); /* the contents moved along */
    k->p = q;
    k->n = s;
    pattern_fill_words(q, s, block_seed(q, s));
  }
  NOTE("  %s kept growing a block with memory exhausted\n", entry_name(e));
  OCHECK(!"realloc kept succeeding with memory exhausted");
}

/* One call of entry point e (not realloc) for size bytes: true when it handed out a block
   (recorded), false when it failed, after checking that it failed cleanly. */
static bool call_entry(ctx_t *c, int e, size_t size) {
  void *p = NULL;
  int kind = KIND_MALLOC, index = 0;
  errno = 0;
  switch (e) {
  case E_MALLOC:
    p = malloc(opaque_size(size));
    break;
  case E_CALLOC:
    p = calloc(4, opaque_size(size / 4));
    if (p) OCHECK(all_bytes_are(p, size, 0));
    break;
  case E_POSIX_MEMALIGN: {
    int rc = posix_memalign(&p, 64, opaque_size(size));
    if (rc == 0) break;
    if (rc != ENOMEM) NOTE("  posix_memalign(64, %zu) returned %d\n", size, rc);
    OCHECK(rc == ENOMEM);
    OCHECK(errno == ENOMEM); /* glibc sets it as well; programs read it */
    return false;
  }
  case E_ALIGNED_ALLOC:
    p = aligned_alloc(64, opaque_size(size));
    break;
  case E_MEMALIGN:
    p = memalign(256, opaque_size(size));
    break;
  case E_VALLOC:
    p = valloc(opaque_size(size));
    break;
  case E_PVALLOC:
    p = pvalloc(opaque_size(size));
    break;
  case E_CACHE:
    index = cache_of_size(size);
    if (index < 0) return false; /* no cache of this size: nothing to try */
    p = mc.alloc(caches[index], MAGPIE_DEFAULT);
    kind = KIND_CACHE;
    break;
  default: {
    REQUIRE(e >= E_NEW); /* realloc and reallocarray: grow_until_failure */
    int threw;
    oom_new_form_t form = (oom_new_form_t)(e - E_NEW);
    p = oom_new(opaque_size(size), form, &threw);
    if (!p) {
      if (threw != oom_new_throws(form))
        NOTE("  %s(%zu) %s\n", entry_name(e), size, threw ? "threw" : "returned nullptr");
      OCHECK(threw == oom_new_throws(form));
      return false;
    }
    kind = KIND_NEW;
    index = form;
  }
  }
  if (!p) {
    expect_enomem(e, size);
    return false;
  }
  blocks_add(&c->blocks, p, size, kind, index);
  return true;
}

/* Calls entry point e until it fails; it must, within what the headroom could still cache. */
static void call_until_failure(ctx_t *c, int e, size_t size) {
  if (e == E_REALLOC || e == E_REALLOCARRAY) {
    if (size > 2 * 16) grow_until_failure(c, e, size); /* donors have 16 bytes */
    return;
  }
  size_t limit = OOM_HEADROOM / size + 1024;
  for (size_t calls = 0; calls < limit; calls++)
    if (!call_entry(c, e, size)) return;
  NOTE("  %s(%zu) succeeded %zu times with memory exhausted\n", entry_name(e), size, limit);
  OCHECK(!"an entry point kept succeeding with memory exhausted");
}

/* With memory gone: every entry point with every probe size. */
static void probe_entry_points(ctx_t *c) {
  for (size_t s = 0; s < NPROBES; s++)
    for (int e = 0; e < E_COUNT; e++)
      call_until_failure(c, e, probe_sizes[s]);
}

/* ---- rounds ---- */

/* Blocks the realloc probes grow, allocated while memory is free. */
static void take_donors(ctx_t *c) {
  for (int i = 0; i < (int)(OOM_DONORS + OOM_BIG_DONORS); i++) {
    size_t n = i < (int)OOM_DONORS ? 16 : 1 * MiB;
    void *p = malloc(opaque_size(n));
    REQUIRE(p != NULL);
    c->donors[i] = blocks_add(&c->blocks, p, n, KIND_MALLOC, 0);
  }
  c->small_donors = (int)OOM_DONORS;
  c->big_donors = OOM_BIG_DONORS;
}

/* Allocates sizes drawn from ranges[first..first+count) in turn until the smallest size of each
   fails; returns the bytes allocated. */
static size_t exhaust(ctx_t *c, int first, int count) {
  size_t hi[NRANGES], total = 0;
  int alive = count;
  for (int r = 0; r < count; r++)
    hi[r] = ranges[first + r].hi;
  for (int r = 0; alive > 0; r = (r + 1) % count) {
    const range_t *range = &ranges[first + r];
    if (hi[r] < range->lo) continue;
    size_t s = pick_size(&c->rng, range->lo, hi[r]);
    errno = 0;
    void *p = malloc(opaque_size(s));
    if (p) {
      blocks_add(&c->blocks, p, s, KIND_MALLOC, 0);
      total += s;
      continue;
    }
    expect_enomem(E_MALLOC, s);
    hi[r] = s - 1; /* sizes from s up fail now; below s is the rest of the range */
    if (hi[r] < range->lo) alive--;
  }
  return total;
}

/* Takes what exhaust() left: every size class's worth from 4 MiB down to 16 bytes. */
static void top_off(ctx_t *c) {
  for (size_t s = 4 * MiB; s >= 16; s -= s / 8 > 16 ? s / 8 : 16)
    call_until_failure(c, E_MALLOC, s);
}

/* Allocates the headroom full with ranges[first..first+count), tries every entry point with
   memory gone, checks and frees every block; returns the bytes exhaust() allocated. */
static size_t round_run(ctx_t *c, int first, int count) {
  take_donors(c);
  size_t total = exhaust(c, first, count);
  top_off(c);
  probe_entry_points(c);
  blocks_verify_release(&c->blocks);
  return total;
}

static const char *round_name(int first, int count) {
  return count == 1 ? ranges[first].name : "all ranges interleaved";
}

/* ---- address space ---- */

/* The process's address space now, in bytes (VmSize). */
static size_t address_space_in_use(void) {
  FILE *f = fopen("/proc/self/status", "r");
  REQUIRE(f != NULL);
  char line[256];
  size_t kib = 0;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "VmSize: %zu kB", &kib) == 1) break;
  fclose(f);
  REQUIRE(kib != 0);
  return kib * KiB;
}

static void limit_address_space(void) {
  free(malloc(opaque_size(1))); /* the allocator's start-up mappings count as in use */
  size_t in_use = address_space_in_use();
  struct rlimit lim;
  REQUIRE(getrlimit(RLIMIT_AS, &lim) == 0);
  lim.rlim_cur = in_use + OOM_HEADROOM;
  REQUIRE(setrlimit(RLIMIT_AS, &lim) == 0);
  fprintf(stderr, "%s: address space limited to %zu MiB (%zu MiB in use)\n", api_test_name,
          (size_t)(lim.rlim_cur / MiB), in_use / MiB);
}

/* ---- phases ---- */

/* The rounds of one kind: the second fits nearly what the first did. */
static void check_refill(const char *what, size_t first, size_t again) {
  fprintf(stderr, "%s: %s: %zu MiB, then %zu MiB\n", api_test_name, what, first / MiB, again / MiB);
  if (again * 100 < first * OOM_REFILL_PERCENT)
    NOTE("  %s: only %zu of %zu bytes fitted again\n", what, again, first);
  OCHECK(again * 100 >= first * OOM_REFILL_PERCENT);
}

/* A round that follows rounds of other ranges fills most of the headroom: what blocks of one
   range freed serves the others. */
static void check_fill(const char *what, size_t total) {
  if (total * 100 < OOM_HEADROOM * OOM_FILL_PERCENT)
    NOTE("  %s: %zu bytes of the %zu of headroom\n", what, total, OOM_HEADROOM);
  OCHECK(total * 100 >= OOM_HEADROOM * OOM_FILL_PERCENT);
}

/* Object caches for the probe sizes that an object cache can have. */
static void probe_caches_create(void) {
  for (size_t s = 0; s < NPROBES; s++)
    if (probe_sizes[s] <= 1 * MiB && mc.create) REQUIRE(cache_add(probe_sizes[s]) >= 0);
}

static void phase_ranges(void) {
  static ctx_t c = {.rng = {0x0123456789abcdefu}};
  blocks_init(&c.blocks, OOM_BLOCKS_MAX);
  limit_address_space();
  probe_caches_create();
  size_t first[NRANGES + 1];
  for (int pass = 0; pass < 2; pass++)
    for (int r = 0; r <= NRANGES; r++) {
      int from = r < NRANGES ? r : 0, count = r < NRANGES ? 1 : NRANGES;
      size_t total = round_run(&c, from, count);
      check_fill(round_name(from, count), total);
      if (pass == 0)
        first[r] = total;
      else
        check_refill(round_name(from, count), first[r], total);
    }
  caches_destroy();
}

typedef struct {
  ctx_t c;
  int first, count; /* the ranges this thread allocates */
  size_t total[2];  /* exhaust()'s bytes, per round */
  pthread_t thread;
} worker_t;

static pthread_barrier_t workers_barrier;

/* Two rounds in step with the other workers: nobody exhausts memory before everyone has taken
   donors, nobody frees before everyone has found memory gone and tried every entry point. */
static void *worker_main(void *arg) {
  worker_t *w = arg;
  for (int round = 0; round < 2; round++) {
    take_donors(&w->c);
    pthread_barrier_wait(&workers_barrier);
    w->total[round] = exhaust(&w->c, w->first, w->count);
    pthread_barrier_wait(&workers_barrier);
    top_off(&w->c);
    probe_entry_points(&w->c);
    pthread_barrier_wait(&workers_barrier);
    blocks_verify_release(&w->c.blocks);
    pthread_barrier_wait(&workers_barrier);
  }
  return NULL;
}

static void phase_threads(void) {
  static worker_t workers[OOM_THREADS];
  for (int i = 0; i < OOM_THREADS; i++) {
    workers[i].c.rng.state = 0x9e3779b97f4a7c15u * (uint64_t)(i + 1);
    workers[i].first = i % (NRANGES + 1) < NRANGES ? i % (NRANGES + 1) : 0;
    workers[i].count = i % (NRANGES + 1) < NRANGES ? 1 : NRANGES;
    blocks_init(&workers[i].c.blocks, OOM_BLOCKS_MAX);
  }
  limit_address_space();
  probe_caches_create();
  pthread_attr_t attr;
  REQUIRE(pthread_attr_init(&attr) == 0);
  REQUIRE(pthread_attr_setstacksize(&attr, OOM_THREAD_STACK) == 0);
  REQUIRE(pthread_barrier_init(&workers_barrier, NULL, OOM_THREADS) == 0);
  for (int i = 0; i < OOM_THREADS; i++)
    REQUIRE(pthread_create(&workers[i].thread, &attr, worker_main, &workers[i]) == 0);
  size_t total[2] = {0, 0};
  for (int i = 0; i < OOM_THREADS; i++) {
    REQUIRE(pthread_join(workers[i].thread, NULL) == 0);
    total[0] += workers[i].total[0];
    total[1] += workers[i].total[1];
  }
  check_refill("8 threads", total[0], total[1]);
  pthread_barrier_destroy(&workers_barrier);
  pthread_attr_destroy(&attr);
  caches_destroy();
}

/* ---- the allocator's own records ---- */

/* Anonymous mappings that take the address space the heap does not hold. */
static struct {
  void *p;
  size_t len;
} ballast[BALLAST_MAX];
static int ballast_used;

/* Maps all the address space that is left, a page at the least. */
static void ballast_take(void) {
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  for (size_t len = 64 * MiB; len >= page; len /= 2)
    while (ballast_used < BALLAST_MAX) {
      void *p = mmap(NULL, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (p == MAP_FAILED) break;
      ballast[ballast_used].p = p;
      ballast[ballast_used++].len = len;
    }
  REQUIRE(ballast_used < BALLAST_MAX);
}

/* Gives back pages of ballast (from the ends of its mappings). */
static void ballast_give(size_t pages) {
  size_t page = (size_t)sysconf(_SC_PAGESIZE), want = pages * page;
  for (int i = ballast_used - 1; i >= 0 && want > 0; i--) {
    size_t cut = ballast[i].len < want ? ballast[i].len : want;
    ballast[i].len -= cut;
    want -= cut;
    REQUIRE(munmap((char *)ballast[i].p + ballast[i].len, cut) == 0);
    if (ballast[i].len == 0) ballast_used = i; /* the last ones are the emptied ones */
  }
}

static void ballast_release(void) {
  for (int i = 0; i < ballast_used; i++)
    if (ballast[i].len) REQUIRE(munmap(ballast[i].p, ballast[i].len) == 0);
  ballast_used = 0;
}

/* A block of every size class with malloc, and a few with other entry points; failures must be
   clean. Returns the number of failures. */
static intptr_t allocate_classes(ctx_t *c) {
  intptr_t failed = 0;
  for (size_t s = 16; s <= 256 * KiB; s += s / 8 > 16 ? s / 8 : 16)
    failed += !call_entry(c, E_MALLOC, s);
  failed += !call_entry(c, E_NEW + OOM_NEW_NOTHROW, 100);
  failed += !call_entry(c, E_NEW + OOM_NEW, 5000);
  failed += !call_entry(c, E_POSIX_MEMALIGN, 700);
  return failed;
}

/* allocate_classes until a pass where everything fails: the heap's free room goes into slabs
   until their descriptors, magazines or segment tags cannot be mapped. */
static void fill_classes(ctx_t *c) {
  size_t before;
  do
    before = c->blocks.len;
  while ((allocate_classes(c), c->blocks.len > before));
}

/* Threads started under exhaustion stay until the end of the phase, so that their thread caches
   add up and their pool needs fresh memory too. */
#define METADATA_THREADS_MAX (METADATA_THREADS * (METADATA_SPARE_PAGES + 1))
static ctx_t metadata_threads[METADATA_THREADS_MAX];
static pthread_t metadata_thread_ids[METADATA_THREADS_MAX];
static int metadata_threads_started;
static pthread_mutex_t hold_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t hold_cond = PTHREAD_COND_INITIALIZER;
static bool hold; /* threads wait while set */

static void *metadata_thread(void *arg) {
  intptr_t failed = allocate_classes(arg);
  pthread_mutex_lock(&hold_lock);
  while (hold)
    pthread_cond_wait(&hold_cond, &hold_lock);
  pthread_mutex_unlock(&hold_lock);
  return (void *)failed;
}

/* Thread stacks that exist before memory runs out: starting a thread then maps no stack. */
static char metadata_stacks[METADATA_THREADS_MAX][METADATA_STACK] __attribute__((aligned(4096)));

/* Starts thread i on its own stack; returns pthread_create's result. */
static int start_thread(int i) {
  pthread_attr_t attr;
  REQUIRE(pthread_attr_init(&attr) == 0);
  REQUIRE(pthread_attr_setstack(&attr, metadata_stacks[i], METADATA_STACK) == 0);
  int rc = pthread_create(&metadata_thread_ids[i], &attr, metadata_thread, &metadata_threads[i]);
  pthread_attr_destroy(&attr);
  return rc;
}

/* Lets the held threads finish and joins them; returns how many failed allocations they saw. */
static intptr_t metadata_threads_join(void) {
  pthread_mutex_lock(&hold_lock);
  hold = false;
  pthread_cond_broadcast(&hold_cond);
  pthread_mutex_unlock(&hold_lock);
  intptr_t failed = 0;
  for (int i = 0; i < metadata_threads_started; i++) {
    void *thread_failed;
    REQUIRE(pthread_join(metadata_thread_ids[i], &thread_failed) == 0);
    failed += (intptr_t)thread_failed;
  }
  for (int i = 0; i < metadata_threads_started; i++)
    blocks_verify_release(&metadata_threads[i].blocks);
  metadata_threads_started = 0;
  return failed;
}

/* Blocks of every class up to 1 KiB, reserve_per_step of them for each step, taken while
   memory is free. */
static blocks_t reserve;
static size_t reserve_per_step;

static void reserve_take(void) {
  blocks_init(&reserve, METADATA_BLOCKS_MAX * (METADATA_SPARE_PAGES + 1));
  for (size_t step = 0; step <= METADATA_SPARE_PAGES; step++)
    for (size_t s = 16; s <= 1 * KiB; s += s / 8 > 16 ? s / 8 : 16) {
      void *p = malloc(opaque_size(s));
      REQUIRE(p != NULL);
      blocks_add(&reserve, p, s, KIND_MALLOC, 0);
    }
  reserve_per_step = reserve.len / (METADATA_SPARE_PAGES + 1);
}

/* Starts threads (new thread caches), creates an object cache and allocates from it, and fills
   the heap with blocks of every class; everything must work or fail cleanly. */
static void metadata_probe(ctx_t *main_ctx, size_t spare) {
  /* pthread_create allocates the thread's TLS vector with calloc: the blocks of this step's
     reserve, freed here and cached by this thread, let it start, and the thread then meets the
     exhaustion itself. */
  blocks_t *r = &reserve;
  for (size_t i = 0; i < reserve_per_step; i++) {
    block_t *k = &r->v[spare * reserve_per_step + i];
    OCHECK(block_intact(k));
    release(k);
  }
  for (int i = 0; i < METADATA_THREADS; i++) {
    int rc = start_thread(metadata_threads_started);
    if (rc != 0 && rc != EAGAIN) NOTE("  pthread_create failed with %d\n", rc);
    OCHECK(rc == 0 || rc == EAGAIN); /* its thread-local storage may not fit */
    if (rc == 0) metadata_threads_started++;
  }
  int k = cache_add(48 + 16 * spare); /* a new size each time: new slabs, new magazines */
  if (k >= 0) {
    errno = 0;
    void *obj = mc.alloc(caches[k], MAGPIE_DEFAULT);
    if (obj)
      blocks_add(&main_ctx->blocks, obj, cache_sizes[k], KIND_CACHE, k);
    else
      expect_enomem(E_CACHE, cache_sizes[k]);
  }
  fill_classes(main_ctx);
}

static void phase_metadata(void) {
  static ctx_t c = {.rng = {0xfedcba9876543210u}};
  blocks_init(&c.blocks, OOM_BLOCKS_MAX);
  for (int i = 0; i < METADATA_THREADS_MAX; i++)
    blocks_init(&metadata_threads[i].blocks, METADATA_BLOCKS_MAX);
  limit_address_space();
  reserve_take();
  /* Large blocks fill the address space; freeing METADATA_ROOM of them leaves the heap free room
     (with the system malloc, free address space), which the ballast does not take. */
  exhaust(&c, NRANGES - 1, 1);
  for (size_t freed = 0; freed < METADATA_ROOM;) {
    REQUIRE(c.blocks.len > 0);
    block_t *k = &c.blocks.v[--c.blocks.len];
    OCHECK(block_intact(k));
    freed += k->n;
    free(k->p);
  }
  ballast_take();
  hold = true;
  for (size_t spare = 0; spare <= METADATA_SPARE_PAGES; spare++) {
    ballast_give(spare);
    metadata_probe(&c, spare);
    ballast_take();
  }
  fprintf(stderr, "%s: %zu blocks, %d threads of %d started, %d object caches created\n",
          api_test_name, c.blocks.len, metadata_threads_started, METADATA_THREADS_MAX, caches_used);
  /* Thread exits and frees with memory still exhausted: magazines for the freed blocks cannot be
     mapped either. */
  metadata_threads_join();
  blocks_verify_release(&c.blocks);
  caches_destroy();
  ballast_release();
  /* With memory back, every class, a new thread (its stack is not new) and an object cache work
     again. */
  OCHECK(allocate_classes(&c) == 0);
  blocks_verify_release(&c.blocks);
  REQUIRE(start_thread(0) == 0);
  metadata_threads_started = 1;
  OCHECK(metadata_threads_join() == 0);
  if (mc.create) {
    int k = cache_add(100);
    REQUIRE(k >= 0);
    void *obj = mc.alloc(caches[k], MAGPIE_DEFAULT);
    OCHECK(obj != NULL);
    if (obj) mc.free(caches[k], obj);
    caches_destroy();
  }
  /* malloc_trim gives the address space back: a thread with a stack of the default size, mapped
     by the C library, starts. */
  malloc_trim(0);
  pthread_t t;
  void *thread_failed;
  int rc = pthread_create(&t, NULL, metadata_thread, &metadata_threads[0]);
  OCHECK(rc == 0);
  if (rc == 0) {
    REQUIRE(pthread_join(t, &thread_failed) == 0);
    OCHECK(thread_failed == NULL);
    blocks_verify_release(&metadata_threads[0].blocks);
  }
}

int main(int argc, char **argv) {
  const char *phase = argc > 1 ? argv[1] : "";
  static char name[64];
  snprintf(name, sizeof name, "oom %s", phase);
  api_begin(name);
  object_caches_find();
  if (strcmp(phase, "ranges") == 0)
    phase_ranges();
  else if (strcmp(phase, "threads") == 0)
    phase_threads();
  else if (strcmp(phase, "metadata") == 0)
    phase_metadata();
  else {
    fprintf(stderr, "usage: %s ranges|threads|metadata\n", argv[0]);
    return 2;
  }
  return api_end();
}
