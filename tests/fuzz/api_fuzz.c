/*
 * api_fuzz: a libFuzzer target that drives magpie's allocation API with sequences of calls and
 * checks every result against a shadow model of the heap.
 *
 * Theory
 *   1. Input: a byte string read as operations, an opcode byte then argument bytes (bytes past
 *      the end read as 0), at most FUZZ_MAX_OPS of them. Sizes and alignments come from
 *      edge-heavy tables: 0, 1, powers of two and their neighbours, every size class and its
 *      neighbours, the small/large boundary (SC_SMALL_MAX), large blocks, and impossible values
 *      (2^48 and up, SIZE_MAX and its neighbours, multiplications that overflow).
 *   2. Shadow model: each live block has an id, and all its usable bytes hold the pattern of that
 *      id (check.h). Before a block is freed or reallocated, its bytes are checked; a new block
 *      is checked for alignment, usable size >= request, zeroes (calloc) and for overlapping no
 *      live block, then filled. Before each call the request is classed: a bad alignment must
 *      fail with EINVAL, an impossible size with ENOMEM (realloc keeping the old block), and a
 *      possible one must succeed (no resource limit is set). Sizes in between, too big for the
 *      model's budget yet mappable, are never requested.
 *   3. Other threads: a helper thread runs the jobs the input hands it, one at a time, while the
 *      main thread waits: it frees main-thread blocks and objects, allocates blocks and objects
 *      the main thread then owns, reallocates. A job can end the thread, whose magazines then go
 *      back to the depots; the next job starts a new one. The order of calls is the input's.
 *   4. Object caches: the constructor writes pattern(address ^ salt) and counts; the model checks
 *      each object arrives constructed, fills it with its own pattern while in use, restores the
 *      constructed state before freeing it, and after destroy checks that every constructed
 *      object was destructed once, in constructed state. A cache may fail every Nth constructor
 *      call: an allocation then fails with ENOMEM, or succeeds with a constructed object.
 *   5. The allocator is the core built without interposition, called by its magpie_* and api_*
 *      names (memalign is magpie_aligned_alloc, as interpose.c forwards it): libFuzzer's own
 *      allocations stay in glibc's malloc, and the model sees exactly the fuzzed calls.
 *   A failed check prints the operation and aborts, which libFuzzer records as a crash.
 *
 * Longer runs, new inputs going to a scratch directory (the build's fuzzer is in tests/fuzz/clang):
 *   mkdir -p /tmp/fz && build/tests/fuzz/clang/api_fuzz -max_total_time=600 /tmp/fz
 * tests/fuzz/corpus A crash leaves crash-<sha1> in the working directory; `api_fuzz crash-<sha1>`
 * replays it.
 */
#include "check.h"

#include "api.h"
#include "os.h"
#include "sizeclass.h"

#include <errno.h>
#include <magpie.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>

#define FUZZ_MAX_OPS 300
#define FUZZ_MAX_LIVE 96                   /* live blocks and objects */
#define FUZZ_MAX_CACHES 6                  /* live object caches */
#define FUZZ_BLOCK_MAX (6 * MiB)           /* bigger possible requests are never made */
#define FUZZ_LIVE_MAX (40 * MiB)           /* usable bytes of all live blocks */
#define FUZZ_ALIGN_MAX_SHIFT 30            /* possible alignments: up to 1 GiB */
#define IMPOSSIBLE_MIN ((size_t)1 << 48)   /* no mapping this big fits a 47-bit address space */
#define CACHE_OBJECT_MAX ((size_t)1 << 20) /* magpie_cache_create refuses bigger (cache.c) */
#define CACHE_ALIGN_MAX ((size_t)64 << 10) /* and more alignment */
#define MALLOC_ALIGN 16                    /* every block of the malloc family */
#define CONSTRUCTED_SALT 0x5a17c0de5a17c0deULL

/* ---- failing ---- */

static unsigned op_index;
static const char *op_name = "start";

__attribute__((noreturn, format(printf, 1, 2))) static void fuzz_fail(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "api_fuzz: operation %u (%s): ", op_index, op_name);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  abort();
}

#define EXPECT(cond, ...)                                                                          \
  do {                                                                                             \
    if (!(cond)) fuzz_fail(__VA_ARGS__);                                                           \
  } while (0)

/* ---- reading the input ---- */

typedef struct {
  const uint8_t *p;
  size_t left;
} input_t;

static unsigned in_byte(input_t *in) {
  if (!in->left) return 0;
  in->left--;
  return *in->p++;
}

static size_t in_u16(input_t *in) {
  size_t lo = in_byte(in);
  return lo | (size_t)in_byte(in) << 8;
}

static const size_t impossible_sizes[] = {SIZE_MAX,
                                          SIZE_MAX - 1,
                                          SIZE_MAX - 15,
                                          SIZE_MAX - OS_PAGE + 1,
                                          SIZE_MAX - OS_PAGE,
                                          SIZE_MAX / 2,
                                          SIZE_MAX / 2 + 1,
                                          SIZE_MAX / 2 - 4095,
                                          (SIZE_MAX >> 1) - ((size_t)1 << 31),
                                          (SIZE_MAX >> 1) - ((size_t)1 << 31) + 1,
                                          IMPOSSIBLE_MIN,
                                          (size_t)1 << 56,
                                          (size_t)1 << 62,
                                          ((size_t)1 << 63) - OS_PAGE};
#define N_IMPOSSIBLE (sizeof impossible_sizes / sizeof impossible_sizes[0])

enum { SZ_TINY, SZ_CLASS, SZ_POW2, SZ_PAGES, SZ_SMALL_MAX, SZ_LARGE, SZ_IMPOSSIBLE, SZ_RAW, SZ_N };

/* A size: a byte chooses the family and a distance to its edges, a byte the member; a family
   may read two more. */
static size_t in_size(input_t *in) {
  unsigned head = in_byte(in), kind = head % SZ_N, b = in_byte(in);
  size_t near = (size_t)(head >> 6) - 1; /* -1, 0, +1, +2 around an edge (0 - 1: impossible) */
  switch (kind) {
  case SZ_TINY:
    return b;
  case SZ_CLASS:
    return sc_size(1 + b % SC_COUNT) + near;
  case SZ_POW2:
    return ((size_t)1 << (b & 63) % 23) + near;
  case SZ_PAGES:
    return (b & 63) * OS_PAGE + near;
  case SZ_SMALL_MAX:
    return SC_SMALL_MAX + (size_t)(int8_t)b * 16;
  case SZ_LARGE: /* up to 1.25 MiB: past opt.large_own, where large blocks get own mappings */
    return SC_SMALL_MAX + in_u16(in) * 16 + near;
  case SZ_IMPOSSIBLE:
    return impossible_sizes[b % N_IMPOSSIBLE];
  default:
    return in_u16(in);
  }
}

static const size_t odd_alignments[] = {0,
                                        3,
                                        6,
                                        12,
                                        24,
                                        48,
                                        100,
                                        4095,
                                        4097,
                                        3 * OS_PAGE,
                                        SIZE_MAX,
                                        ((size_t)1 << 63) | 8,
                                        (size_t)1 << 48,
                                        (size_t)1 << 56,
                                        (size_t)1 << 62,
                                        (size_t)1 << 63};
#define N_ODD_ALIGN (sizeof odd_alignments / sizeof odd_alignments[0])

/* An alignment: mostly a power of two up to 1 GiB, sometimes invalid or impossible. */
static size_t in_align(input_t *in) {
  unsigned b = in_byte(in);
  if (b < 192) return (size_t)1 << (b % 21); /* 1 B .. 1 MiB */
  if (b < 224) return (size_t)1 << (21 + b % (FUZZ_ALIGN_MAX_SHIFT - 20));
  return odd_alignments[b % N_ODD_ALIGN];
}

/* A count for calloc and reallocarray: small ones, and ones whose product overflows. */
static size_t in_count(input_t *in) {
  static const size_t counts[] = {
      0, 1, 2, 3, 7, 16, 255, 4096, (size_t)1 << 32, SIZE_MAX / 2 + 1, SIZE_MAX};
  return counts[in_byte(in) % (sizeof counts / sizeof counts[0])];
}

/* ---- the model ---- */

typedef enum { FREE_PLAIN, FREE_SIZED, FREE_ALIGNED } free_kind_t;

typedef struct {
  unsigned char *p;
  size_t size;      /* bytes asked for (cache objects: the object size) */
  size_t usable;    /* bytes that hold the pattern */
  size_t align;     /* alignment asked for, for free_aligned_sized */
  free_kind_t free; /* which sized free the C standard allows for it */
  uint32_t id;
  int cache; /* index in caches[], or -1 for a block of the malloc family */
} block_t;

typedef struct {
  magpie_cache_t *cache;
  size_t size;
  size_t align;           /* as asked; objects honour max(align, 16) */
  unsigned fail_every;    /* constructor calls fail at every fail_every-th call; 0: never */
  bool allocates;         /* the constructor mallocs and frees a block */
  unsigned long calls;    /* constructor calls (atomic: any thread constructs) */
  unsigned long ctors;    /* constructor calls that succeeded */
  unsigned long dtors;    /* destructor calls (the reaper thread destructs too) */
  unsigned long bad_dtor; /* destructed objects not in constructed state */
} cache_rec_t;

static block_t live[FUZZ_MAX_LIVE];
static unsigned n_live;
static size_t live_bytes;
static uint32_t next_id;
static cache_rec_t caches[FUZZ_MAX_CACHES];

enum { OUTCOME_OK = 0, OUTCOME_SKIP = -1 }; /* otherwise the errno a call must fail with */

/* What a request for size bytes must do: succeed, fail with ENOMEM, or not be made (too big
   for the model's budget, or no room in its table). A reallocation gives back `released`
   bytes and needs no new slot. */
static int resize_outcome(size_t size, size_t released, bool new_slot) {
  if (size >= IMPOSSIBLE_MIN) return ENOMEM;
  if (size > FUZZ_BLOCK_MAX || live_bytes - released + size > FUZZ_LIVE_MAX ||
      (new_slot && n_live == FUZZ_MAX_LIVE))
    return OUTCOME_SKIP;
  return OUTCOME_OK;
}

static int size_outcome(size_t size) {
  return resize_outcome(size, 0, true);
}

/* The same for an aligned request; min_align: smaller alignments are invalid. */
static int aligned_outcome(size_t align, size_t size, size_t min_align) {
  if (align == 0 || (align & (align - 1)) || align < min_align) return EINVAL;
  if (align >= IMPOSSIBLE_MIN) return ENOMEM;
  return size_outcome(size);
}

static int product_outcome(size_t n, size_t size, size_t *total) {
  return __builtin_mul_overflow(n, size, total) ? ENOMEM : size_outcome(*total);
}

static uint32_t new_id(void) {
  return next_id++;
}

/*
 * Patterns. Word k of a block tagged `tag` holds pattern_word(tag, k), the last word cut to the
 * block's length: a prefix of a block holds the pattern of the block, as realloc must keep it.
 * Word-sized rather than check.h's bytes, and the loops without coverage instrumentation: blocks
 * run to megabytes, and traced comparisons per byte would cost more than the allocator's work
 * while teaching the fuzzer nothing.
 */
#define UNTRACED __attribute__((no_sanitize("coverage"), noinline))

static uint64_t pattern_word(uintptr_t tag, size_t k) {
  return (tag + 1) * 0x9e3779b97f4a7c15ULL ^ k * 0xbf58476d1ce4e5b9ULL;
}

UNTRACED static void fill(void *p, size_t n, uintptr_t tag) {
  unsigned char *b = p;
  size_t k = 0;
  for (; k < n / 8; k++) {
    uint64_t w = pattern_word(tag, k);
    memcpy(b + 8 * k, &w, 8);
  }
  uint64_t w = pattern_word(tag, k);
  memcpy(b + 8 * k, &w, n % 8);
}

/* Whole words [k, end) of b differ from the pattern somewhere. */
static bool words_differ(const unsigned char *b, size_t k, size_t end, uintptr_t tag) {
  uint64_t have, diff = 0;
  for (; k < end; k++) {
    memcpy(&have, b + 8 * k, 8);
    diff |= have ^ pattern_word(tag, k);
  }
  return diff != 0;
}

/* The offset of the first byte of p[0..n) that does not hold the pattern; n if none. Runs of
   words are compared whole (the compiler vectorises that), a differing run word by word. */
UNTRACED static size_t mismatch(const void *p, size_t n, uintptr_t tag) {
  enum { RUN = 64 };
  const unsigned char *b = p;
  size_t words = n / 8, k = 0;
  while (k < words && !words_differ(b, k, k + RUN < words ? k + RUN : words, tag))
    k += RUN;
  for (; k < words + 1 && 8 * k < n; k++) {
    uint64_t want = pattern_word(tag, k), have = want;
    memcpy(&have, b + 8 * k, n - 8 * k < 8 ? n - 8 * k : 8);
    if (have != want) return 8 * k + (size_t)__builtin_ctzll(have ^ want) / 8; /* little-endian */
  }
  return n;
}

UNTRACED static bool zeroed(const void *p, size_t n) {
  const unsigned char *b = p;
  uint64_t w, any = 0;
  for (size_t k = 0; k < n / 8; k++) {
    memcpy(&w, b + 8 * k, 8);
    any |= w;
  }
  w = 0;
  memcpy(&w, b + n / 8 * 8, n % 8);
  return (any | w) == 0;
}

static uintptr_t constructed_tag(const void *obj) {
  return (uintptr_t)obj ^ CONSTRUCTED_SALT;
}

static void block_check(const block_t *b) {
  size_t bad = mismatch(b->p, b->usable, b->id);
  EXPECT(bad == b->usable, "block %u at %p (%zu bytes, usable %zu): byte %zu changed", b->id,
         (void *)b->p, b->size, b->usable, bad);
}

/* Adopts p, just handed out for `size` bytes aligned to `align`, into the model as block id. */
static void block_adopt(void *p, size_t size, size_t align, free_kind_t free_kind, int cache,
                        uint32_t id) {
  EXPECT(p != NULL, "a request of %zu bytes (align %zu) failed: errno %d", size, align, errno);
  size_t need = align > MALLOC_ALIGN ? align : MALLOC_ALIGN;
  EXPECT(is_aligned(p, need), "%p (%zu bytes) is not aligned to %zu", p, size, need);
  size_t usable = cache >= 0 ? size : magpie_usable_size(p);
  EXPECT(usable >= size, "%p: usable size %zu < %zu asked for", p, usable, size);
  uintptr_t lo = (uintptr_t)p, hi = lo + (usable ? usable : 1);
  for (unsigned i = 0; i < n_live; i++) {
    uintptr_t olo = (uintptr_t)live[i].p, ohi = olo + (live[i].usable ? live[i].usable : 1);
    EXPECT(hi <= olo || ohi <= lo, "new block [%p, +%zu) overlaps live block %u [%p, +%zu)", p,
           usable, live[i].id, (void *)live[i].p, live[i].usable);
  }
  block_t *b = &live[n_live++];
  *b = (block_t){p, size, usable, align, free_kind, id, cache};
  fill(b->p, b->usable, b->id);
  live_bytes += usable;
}

/* Takes block i out of the model and returns its record. */
static block_t block_drop(unsigned i) {
  block_t b = live[i];
  live[i] = live[--n_live];
  live_bytes -= b.usable;
  return b;
}

/* The same, after checking its bytes: the block is about to be freed. */
static block_t block_forget(unsigned i) {
  block_check(&live[i]);
  return block_drop(i);
}

/* Checks a failed call: NULL with errno `want`. */
static void expect_failure(const void *p, int err, int want, const char *what, size_t a, size_t b) {
  EXPECT(p == NULL, "%s(%#zx, %#zx) returned %p, expected failure with errno %d", what, a, b, p,
         want);
  EXPECT(err == want, "%s(%#zx, %#zx) failed with errno %d, expected %d", what, a, b, err, want);
}

/* ---- object caches ---- */

static int construct(void *obj, void *arg, int flags) {
  cache_rec_t *c = arg;
  (void)flags;
  EXPECT(c >= caches && c < caches + FUZZ_MAX_CACHES, "constructor called with arg %p", arg);
  unsigned long call = __atomic_add_fetch(&c->calls, 1, __ATOMIC_RELAXED);
  if (c->fail_every && call % c->fail_every == 0) return -1;
  if (c->allocates) {
    void *p = magpie_malloc(c->size);
    if (!p) return -1;
    memset(p, 0xc7, c->size);
    magpie_free(p);
  }
  fill(obj, c->size, constructed_tag(obj));
  __atomic_add_fetch(&c->ctors, 1, __ATOMIC_RELAXED);
  return 0;
}

static void destruct(void *obj, void *arg) {
  cache_rec_t *c = arg;
  EXPECT(c >= caches && c < caches + FUZZ_MAX_CACHES, "destructor called with arg %p", arg);
  if (mismatch(obj, c->size, constructed_tag(obj)) != c->size)
    __atomic_add_fetch(&c->bad_dtor, 1, __ATOMIC_RELAXED);
  __atomic_add_fetch(&c->dtors, 1, __ATOMIC_RELAXED);
}

/* Constructor calls of c that failed. */
static unsigned long cache_failures(const cache_rec_t *c) {
  return __atomic_load_n(&c->calls, __ATOMIC_RELAXED) -
         __atomic_load_n(&c->ctors, __ATOMIC_RELAXED);
}

/* An object just handed out by cache ci (or NULL, errno err, with `failures_before` the
   cache's failed constructor calls before the call): checks it and adopts it. */
static void cache_adopt(int ci, void *obj, int err, unsigned long failures_before) {
  cache_rec_t *c = &caches[ci];
  if (!obj) {
    EXPECT(cache_failures(c) > failures_before,
           "cache %d: alloc failed without a failed constructor", ci);
    EXPECT(err == ENOMEM, "cache %d: alloc failed with errno %d, expected ENOMEM", ci, err);
    return;
  }
  EXPECT(mismatch(obj, c->size, constructed_tag(obj)) == c->size,
         "cache %d: object %p handed out not in constructed state", ci, obj);
  block_adopt(obj, c->size, c->align, FREE_PLAIN, ci, new_id());
}

/* Takes object i out of the model and puts it back in constructed state, ready to free. */
static void *cache_release(unsigned i) {
  block_t b = block_forget(i);
  fill(b.p, b.size, constructed_tag(b.p));
  return b.p;
}

/* ---- the helper thread ---- */

typedef enum {
  JOB_FREE,
  JOB_CACHE_FREE,
  JOB_MALLOC,
  JOB_REALLOC,
  JOB_CACHE_ALLOC,
  JOB_EXIT
} job_kind_t;

typedef struct {
  job_kind_t kind;
  void *p;
  size_t size;
  magpie_cache_t *cache;
  void *result;
  int err; /* the helper's errno after the call */
} job_t;

static pthread_mutex_t helper_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t helper_cond = PTHREAD_COND_INITIALIZER;
static job_t *helper_job; /* posted by the main thread, cleared by the helper when done */
static pthread_t helper_thread;
static bool helper_running;

static void *helper_main(void *unused) {
  (void)unused;
  pthread_mutex_lock(&helper_lock);
  for (;;) {
    while (!helper_job)
      pthread_cond_wait(&helper_cond, &helper_lock);
    job_t *j = helper_job;
    errno = 0;
    switch (j->kind) {
    case JOB_FREE:
      magpie_free(j->p);
      break;
    case JOB_CACHE_FREE:
      magpie_cache_free(j->cache, j->p);
      break;
    case JOB_MALLOC:
      j->result = magpie_malloc(j->size);
      break;
    case JOB_REALLOC:
      j->result = magpie_realloc(j->p, j->size);
      break;
    case JOB_CACHE_ALLOC:
      j->result = magpie_cache_alloc(j->cache, MAGPIE_DEFAULT);
      break;
    case JOB_EXIT:
      break;
    }
    j->err = errno;
    helper_job = NULL;
    pthread_cond_broadcast(&helper_cond);
    if (j->kind == JOB_EXIT) break;
  }
  pthread_mutex_unlock(&helper_lock);
  return NULL;
}

/* Runs j on the helper thread (starting one if none runs) and waits until it is done. */
static void helper_run(job_t *j) {
  if (!helper_running) {
    if (j->kind == JOB_EXIT) return;
    EXPECT(pthread_create(&helper_thread, NULL, helper_main, NULL) == 0, "pthread_create");
    helper_running = true;
  }
  pthread_mutex_lock(&helper_lock);
  helper_job = j;
  pthread_cond_broadcast(&helper_cond);
  while (helper_job)
    pthread_cond_wait(&helper_cond, &helper_lock);
  pthread_mutex_unlock(&helper_lock);
  if (j->kind == JOB_EXIT) {
    pthread_join(helper_thread, NULL);
    helper_running = false;
  }
}

/* ---- operations ---- */

/* The live block (or, with objects set, object) chosen by the next byte; -1 when none. */
static int in_block(input_t *in, bool objects) {
  unsigned b = in_byte(in), count = 0;
  for (unsigned i = 0; i < n_live; i++)
    count += (live[i].cache >= 0) == objects;
  if (!count) return -1;
  b %= count;
  for (unsigned i = 0; i < n_live; i++)
    if ((live[i].cache >= 0) == objects && b-- == 0) return (int)i;
  return -1;
}

static void op_malloc(input_t *in) {
  size_t size = in_size(in);
  int want = size_outcome(size);
  if (want == OUTCOME_SKIP) return;
  errno = 0;
  void *p = magpie_malloc(size);
  if (want)
    expect_failure(p, errno, want, "malloc", size, 0);
  else
    block_adopt(p, size, 0, FREE_SIZED, -1, new_id());
}

static void op_calloc(input_t *in) {
  size_t n = in_count(in), size = in_size(in), total;
  int want = product_outcome(n, size, &total);
  if (want == OUTCOME_SKIP) return;
  errno = 0;
  unsigned char *p = magpie_calloc(n, size);
  if (want) {
    expect_failure(p, errno, want, "calloc", n, size);
    return;
  }
  EXPECT(p != NULL, "calloc(%zu, %zu) failed: errno %d", n, size, errno);
  EXPECT(zeroed(p, total), "calloc(%zu, %zu) = %p is not zeroed", n, size, (void *)p);
  block_adopt(p, total, 0, FREE_SIZED, -1, new_id());
}

typedef enum { BY_REALLOC, BY_REALLOCARRAY, BY_HELPER } resize_by_t;

/* Reallocates block i to n * each bytes (realloc; reallocarray; realloc on the helper thread)
   and checks the outcome against the model. */
static void realloc_block(unsigned i, size_t n, size_t each, resize_by_t how) {
  size_t size;
  int want =
      __builtin_mul_overflow(n, each, &size) ? ENOMEM : resize_outcome(size, live[i].usable, false);
  if (want == OUTCOME_SKIP) return;
  block_check(&live[i]);
  block_t old = live[i];
  void *p;
  int err;
  errno = 0;
  if (how == BY_REALLOC) {
    p = magpie_realloc(old.p, size);
    err = errno;
  } else if (how == BY_REALLOCARRAY) {
    p = api_reallocarray(old.p, n, each);
    err = errno;
  } else {
    job_t j = {.kind = JOB_REALLOC, .p = old.p, .size = size};
    helper_run(&j);
    p = j.result;
    err = j.err;
  }
  if (want) {
    expect_failure(p, err, want, how == BY_REALLOCARRAY ? "reallocarray" : "realloc", n, each);
    block_check(&old); /* the old block stays, untouched */
    return;
  }
  if (size == 0) { /* realloc(p, 0) frees the block and returns NULL, as glibc does */
    EXPECT(p == NULL, "realloc(%p, 0) returned %p, not NULL", (void *)old.p, p);
    block_drop(i);
    return;
  }
  EXPECT(p != NULL, "realloc(%p, %zu) failed: errno %d", (void *)old.p, size, err);
  size_t kept = old.size < size ? old.size : size;
  size_t bad = mismatch(p, kept, old.id);
  EXPECT(bad == kept, "realloc(%p, %zu) = %p: byte %zu of %zu not kept", (void *)old.p, size, p,
         bad, kept);
  block_drop(i);
  block_adopt(p, size, 0, FREE_SIZED, -1, old.id); /* the kept bytes hold its pattern already */
}

static void op_realloc(input_t *in, resize_by_t how) {
  int i = in_block(in, false);
  size_t n = how == BY_REALLOCARRAY ? in_count(in) : 1, each = in_size(in);
  if (i >= 0) {
    realloc_block((unsigned)i, n, each, how);
    return;
  }
  /* realloc(NULL, size) is malloc(size) */
  size_t size;
  int want = product_outcome(n, each, &size);
  if (want == OUTCOME_SKIP) return;
  errno = 0;
  void *p = how == BY_REALLOCARRAY ? api_reallocarray(NULL, n, each) : magpie_realloc(NULL, size);
  if (want)
    expect_failure(p, errno, want, "realloc(NULL)", n, each);
  else
    block_adopt(p, size, 0, FREE_SIZED, -1, new_id());
}

/* A chain of reallocations of one block, each size derived from the last. */
static void op_realloc_chain(input_t *in) {
  int i = in_block(in, false);
  unsigned steps = 1 + in_byte(in) % 16;
  for (unsigned s = 0; s < steps && i >= 0; s++) {
    size_t cur = live[i].size, next;
    switch (in_byte(in) % 8) {
    case 0:
      next = cur + 1;
      break;
    case 1:
      next = cur + cur / 4 + 1;
      break;
    case 2:
      next = cur * 2 + 1;
      break;
    case 3:
      next = cur / 2;
      break;
    case 4:
      next = cur ? cur - 1 : 0;
      break;
    case 5:
      next = cur + OS_PAGE;
      break;
    case 6:
      next = cur - cur / 5;
      break;
    default:
      next = in_size(in);
      break;
    }
    if (next == 0) next = 1; /* realloc to 0 frees: the chain would end */
    unsigned id = live[i].id;
    realloc_block((unsigned)i, 1, next, BY_REALLOC);
    /* the block moved to another slot of the table: find it again */
    i = -1;
    for (unsigned k = 0; k < n_live; k++)
      if (live[k].id == id) i = (int)k;
  }
}

/* Frees a block by free, by free_sized or free_aligned_sized where the C standard allows them
   (otherwise free), by realloc(p, 0), or by reallocarray(p, 0, size). */
static void op_free(input_t *in) {
  enum { BY_FREE, BY_SIZED_FREE, BY_REALLOC_0, BY_REALLOCARRAY_0 };
  int i = in_block(in, false);
  unsigned how = in_byte(in) % 4;
  if (i < 0) {
    magpie_free(NULL);
    return;
  }
  block_t b = block_forget((unsigned)i);
  if (how == BY_SIZED_FREE && b.free == FREE_SIZED) {
    api_free_sized(b.p, b.size, 0);
  } else if (how == BY_SIZED_FREE && b.free == FREE_ALIGNED) {
    api_free_sized(b.p, b.size, b.align);
  } else if (how == BY_REALLOC_0) {
    void *r = magpie_realloc(b.p, 0);
    EXPECT(r == NULL, "realloc(%p, 0) returned %p, not NULL", (void *)b.p, r);
  } else if (how == BY_REALLOCARRAY_0) {
    void *r = api_reallocarray(b.p, 0, b.size);
    EXPECT(r == NULL, "reallocarray(%p, 0, %zu) returned %p, not NULL", (void *)b.p, b.size, r);
  } else {
    magpie_free(b.p);
  }
}

enum { AL_POSIX, AL_ALIGNED_ALLOC, AL_MEMALIGN, AL_VALLOC, AL_PVALLOC, AL_N };

static void op_aligned(input_t *in) {
  unsigned how = in_byte(in) % AL_N;
  size_t align = how >= AL_VALLOC ? OS_PAGE : in_align(in), size = in_size(in);
  size_t asked = size;
  if (how == AL_PVALLOC) /* pvalloc rounds up to whole pages, 0 to one page */
    asked = size == 0                   ? OS_PAGE
            : size > SIZE_MAX - OS_PAGE ? SIZE_MAX
                                        : (size + OS_PAGE - 1) & ~(OS_PAGE - 1);
  int want = aligned_outcome(align, asked, how == AL_POSIX ? sizeof(void *) : 1);
  if (want == OUTCOME_SKIP) return;
  void *p = NULL;
  if (how == AL_POSIX) {
    void *sentinel = (void *)&op_index;
    p = sentinel;
    errno = EDOM;
    int rc = magpie_posix_memalign(&p, align, size);
    EXPECT(rc == want, "posix_memalign(%zu, %zu) = %d, expected %d", align, size, rc, want);
    if (rc) {
      EXPECT(p == sentinel, "posix_memalign(%zu, %zu) failed and wrote *out", align, size);
      /* EINVAL leaves errno alone; ENOMEM is set in errno too, as glibc does. */
      EXPECT(rc == ENOMEM ? errno == ENOMEM : errno == EDOM,
             "posix_memalign(%zu, %zu) failed with %d and set errno to %d", align, size, rc, errno);
      return;
    }
  } else {
    errno = 0;
    p = how == AL_ALIGNED_ALLOC ? magpie_aligned_alloc(align, size)
        : how == AL_MEMALIGN    ? magpie_aligned_alloc(align, size) /* memalign (interpose.c) */
        : how == AL_VALLOC      ? api_valloc(size)
                                : api_pvalloc(size);
    if (want) {
      expect_failure(p, errno, want, "aligned allocation", align, size);
      return;
    }
  }
  block_adopt(p, asked, align, how <= AL_MEMALIGN ? FREE_ALIGNED : FREE_PLAIN, -1, new_id());
}

static void op_usable(input_t *in) {
  EXPECT(magpie_usable_size(NULL) == 0, "malloc_usable_size(NULL) != 0");
  int i = in_block(in, false);
  if (i < 0) return;
  size_t u = magpie_usable_size(live[i].p);
  EXPECT(u == live[i].usable, "usable size of %p changed from %zu to %zu", (void *)live[i].p,
         live[i].usable, u);
  block_check(&live[i]);
}

static void op_remote(input_t *in) {
  unsigned how = in_byte(in) % 4;
  if (how == 0) { /* free a block or object on the helper thread */
    bool objects = in_byte(in) & 1;
    int i = in_block(in, objects);
    if (i < 0) return;
    int ci = live[i].cache;
    job_t j = {.kind = ci >= 0 ? JOB_CACHE_FREE : JOB_FREE};
    if (ci >= 0) {
      j.cache = caches[ci].cache;
      j.p = cache_release((unsigned)i);
    } else {
      j.p = block_forget((unsigned)i).p;
    }
    helper_run(&j);
  } else if (how == 1) { /* the helper allocates; the main thread owns the block */
    size_t size = in_size(in);
    int want = size_outcome(size);
    if (want == OUTCOME_SKIP) return;
    job_t j = {.kind = JOB_MALLOC, .size = size};
    helper_run(&j);
    if (want)
      expect_failure(j.result, j.err, want, "malloc (helper)", size, 0);
    else
      block_adopt(j.result, size, 0, FREE_SIZED, -1, new_id());
  } else if (how == 2) {
    int i = in_block(in, false);
    size_t size = in_size(in);
    if (i >= 0) realloc_block((unsigned)i, 1, size, BY_HELPER);
  } else { /* the helper exits, its magazines go back; the next job starts another */
    job_t j = {.kind = JOB_EXIT};
    helper_run(&j);
  }
}

static void op_cache_create(input_t *in) {
  int ci = -1;
  for (int k = 0; k < FUZZ_MAX_CACHES && ci < 0; k++)
    if (!caches[k].cache) ci = k;
  size_t size = in_size(in), align = in_align(in);
  unsigned flags = in_byte(in);
  if (ci < 0) return;
  bool valid = size > 0 && size <= CACHE_OBJECT_MAX && (align & (align - 1)) == 0 &&
               align <= CACHE_ALIGN_MAX;
  cache_rec_t *c = &caches[ci];
  *c = (cache_rec_t){.size = size,
                     .align = align,
                     .allocates = flags & 1,
                     .fail_every = flags & 2 ? 2 + (flags >> 2) % 9 : 0};
  errno = 0;
  magpie_cache_t *cache = magpie_cache_create("fuzz", size, align, construct, destruct, c, 0);
  if (!valid) {
    expect_failure(cache, errno, EINVAL, "magpie_cache_create", size, align);
    return;
  }
  EXPECT(cache != NULL, "magpie_cache_create(%zu, %zu) failed: errno %d", size, align, errno);
  c->cache = cache;
}

static int in_cache(input_t *in) {
  unsigned b = in_byte(in);
  for (unsigned k = 0; k < FUZZ_MAX_CACHES; k++) {
    unsigned ci = (b + k) % FUZZ_MAX_CACHES;
    if (caches[ci].cache) return (int)ci;
  }
  return -1;
}

static void op_cache_alloc(input_t *in) {
  int ci = in_cache(in);
  bool remote = in_byte(in) & 1;
  if (ci < 0 || size_outcome(caches[ci].size) != OUTCOME_OK) return;
  unsigned long failures = cache_failures(&caches[ci]);
  void *obj;
  int err;
  if (remote) {
    job_t j = {.kind = JOB_CACHE_ALLOC, .cache = caches[ci].cache};
    helper_run(&j);
    obj = j.result;
    err = j.err;
  } else {
    errno = 0;
    obj = magpie_cache_alloc(caches[ci].cache, MAGPIE_DEFAULT);
    err = errno;
  }
  cache_adopt(ci, obj, err, failures);
}

static void op_cache_free(input_t *in) {
  int i = in_block(in, true);
  if (i < 0) return;
  magpie_cache_t *cache = caches[live[i].cache].cache;
  magpie_cache_free(cache, cache_release((unsigned)i));
}

/* Frees the cache's live objects, destroys it, and checks its constructor/destructor counts. */
static void cache_destroy(int ci) {
  cache_rec_t *c = &caches[ci];
  for (unsigned i = n_live; i-- > 0;)
    if (live[i].cache == ci) magpie_cache_free(c->cache, cache_release(i));
  magpie_cache_destroy(c->cache);
  c->cache = NULL;
  unsigned long ctors = __atomic_load_n(&c->ctors, __ATOMIC_RELAXED);
  unsigned long dtors = __atomic_load_n(&c->dtors, __ATOMIC_RELAXED);
  EXPECT(ctors == dtors, "cache %d destroyed: %lu objects constructed, %lu destructed", ci, ctors,
         dtors);
  EXPECT(c->bad_dtor == 0, "cache %d: %lu objects destructed not in constructed state", ci,
         c->bad_dtor);
}

static void op_cache_destroy(input_t *in) {
  int ci = in_cache(in);
  if (ci >= 0) cache_destroy(ci);
}

/* Whole-heap operations: trim, verify; live blocks must come through unchanged. */
static void op_heap(input_t *in) {
  if (in_byte(in) & 1)
    magpie_trim();
  else
    EXPECT(magpie_verify() == 0, "magpie_verify found errors");
  for (unsigned i = 0; i < n_live; i++)
    block_check(&live[i]);
}

typedef struct {
  const char *name;
  void (*run)(input_t *in);
} op_t;

static void op_realloc_plain(input_t *in) {
  op_realloc(in, BY_REALLOC);
}

static void op_reallocarray(input_t *in) {
  op_realloc(in, BY_REALLOCARRAY);
}

static const op_t ops[] = {
    {"malloc", op_malloc},
    {"calloc", op_calloc},
    {"realloc", op_realloc_plain},
    {"reallocarray", op_reallocarray},
    {"realloc chain", op_realloc_chain},
    {"free", op_free},
    {"aligned", op_aligned},
    {"usable size", op_usable},
    {"helper thread", op_remote},
    {"cache create", op_cache_create},
    {"cache alloc", op_cache_alloc},
    {"cache free", op_cache_free},
    {"cache destroy", op_cache_destroy},
    {"trim/verify", op_heap},
    {"malloc", op_malloc}, /* the plain allocation twice as often: blocks to work on */
    {"free", op_free},
};
#define N_OPS (sizeof ops / sizeof ops[0])

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  magpie_free(magpie_malloc(1)); /* initialises magpie: sc_tables is read below */
  input_t in = {data, size};
  for (op_index = 0; op_index < FUZZ_MAX_OPS && in.left; op_index++) {
    const op_t *op = &ops[in_byte(&in) % N_OPS];
    op_name = op->name;
    op->run(&in);
  }
  op_name = "end of input";
  while (n_live) {
    unsigned i = n_live - 1;
    if (live[i].cache >= 0)
      magpie_cache_free(caches[live[i].cache].cache, cache_release(i));
    else
      magpie_free(block_forget(i).p);
  }
  for (int ci = 0; ci < FUZZ_MAX_CACHES; ci++)
    if (caches[ci].cache) cache_destroy(ci);
  EXPECT(live_bytes == 0, "the model lost count of live bytes");
  return 0;
}
