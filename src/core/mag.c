/*
 * mag: the magazine layer (Bonwick & Adams, USENIX 2001, section 3): per CPU where glibc
 * registered an rseq area, per thread otherwise. docs/design.md says why and what each costs.
 *
 * Theory
 *   1. For every cache there is a loaded and a previous magazine, a CPU's or a thread's
 *      tcache's: a CPU's for malloc's classes in threads started while threads outnumber the
 *      CPUs (theory 3), the thread's own otherwise (and always for object caches, with
 *      percpu=0, without rseq, in ThreadSanitizer builds). Allocation pops from the loaded one,
 * free pushes onto it (fastpath.h). When the loaded magazine is empty (full), the previous one is
 * tried, and only when both are exhausted is a magazine traded with the depot: a miss costs one
 * depot trip per `cap` operations at worst, and alternating alloc/free never reaches the depot at
 * all.
 *   2. The empty-magazine trick (kmem): a thread starts on tcache_boot, whose magazines are the
 *      shared sentinel mag_empty (no rounds, no room) and which has no CPU magazines. Its first
 *      allocation misses, and the miss initialises magpie and the thread; the fast path never
 *      asks "initialised?". Fresh CPU magazines are sentinels too.
 *   3. Per CPU: pop and push are restartable sequences on the CPU's loaded magazine (rseq.h),
 *      correct against preemption, migration and signals without atomics. Everything else
 *      happens under the CPU's lock, and a slow path changes only the previous magazine (which
 *      no sequence touches) before making it the loaded one with a sequence that commits only
 *      on that CPU (mag_cpu_install). A thread that moved meanwhile leaves the CPU's loaded
 *      magazine in place and parks the new one as the previous: nothing is lost or shared.
 *      Memory is bounded by CPUs, not threads: hundreds of threads share two CPUs' magazines.
 *      But threads that take turns on a CPU get neighbouring objects from its magazines, which
 *      share cache lines once the threads run apart (thrash-t2 ran 3x slower on a busy machine):
 *      so the first percpu_threads threads (twice the CPUs) keep magazines of their own, which
 *      hand out line-aligned runs (theory 8), and only the threads beyond share the CPUs'. For
 *      those, a CPU's refill from the slab layer is dealt out a line at a time (one block of
 *      each line before a second of any; mag_spread_lines), and its first refill of a class
 *      of blocks smaller than a line covers MAG_SPREAD_RUNS lines, not one.
 *   4. Per thread: only the owner works on its magazines, without locks: it pops and pushes
 *      on the loaded one and, when that runs out or fills up, trades it for the previous one
 *      if that can serve (fast_trade; churn's batches straddled the two, and each trade under
 *      the lock cost 5% of its time). The reaper only takes them away (theory 5); the owner's
 *      slow paths, which trade with the depot, hold the tcache's lock against it. Others read
 *      its counters for statistics (see STAT_ADD in mag.h) and, under mag_registry_lock, take
 *      an object cache's magazines when that cache is destroyed (the program guarantees the
 *      cache is no longer in use then).
 *   5. Reaping idle magazines: at each reap (cache.c, at most once per reap_ms) a thread or CPU
 *      that has not missed since the last one gives its magazines to the depots, the loaded
 *      ones too. A CPU's loaded ones are replaced by the sentinel and the CPU is fenced
 *      (membarrier restarts any sequence still using one), after which they are the reaper's.
 *      A thread marks its lock-free work on its own magazines (tc->busy, fastpath.h); the
 *      reaper parks each loaded one (exchanges the sentinel in), fences every parked thread
 *      with one membarrier a batch, and then takes the parked and previous magazines from
 *      each thread that is not marked: such a thread either finished with them or will see
 *      the sentinel, with which it never trades. Where the owner traded in the window, the
 *      parked magazine is its previous one now, and stays. A marked thread gets the parked
 *      ones back. Without membarrier (or under ThreadSanitizer) threads keep their magazines
 *      until they exit or trim.
 *   6. Thread exit: a pthread key destructor gives the thread's magazines to the depots, folds
 *      its counters into mag_folded and switches the thread to tcache_dead, whose misses go
 *      straight to the slab layer for whatever the rest of thread teardown allocates.
 *   7. Counting: each thread counts its own allocations and frees, in either mode: 64-bit
 *      counts beside its own magazines; 32-bit ones for a thread on per-CPU magazines (half
 *      the tcache of each of hundreds of threads), moved into mag_folded by the owner when the
 *      top bit of one is set, under the registry lock, so no count wraps. Held bytes
 *      (objects out of the slab layer, in magazines or live) are counted at each magazine
 *      movement, a close upper bound of live bytes kept without any fast-path cost.
 *   8. Slow start: a magazine refilled from the slab layer takes one cache line's worth of
 *      objects the first time (mag_fill_start) and twice as many each time after, up to its
 *      size; a first magazine of a class holds only that many rounds and is traded for a
 *      full-size one once outgrown. A thread that allocates a few objects of a class so
 *      reserves a few objects and a few words. The first refill takes never-used objects where
 *      the slab has them (slab.c theory 2), so the run shares no line with other threads' blocks.
 *   9. Passive false sharing (Hoard's cache-scratch): a block freed by a thread, or on a CPU,
 *      holding no magazine of its class was allocated elsewhere, most likely next to blocks
 *      that other threads still write; kept, it would be the next block handed out there. So
 *      it goes back to its slab, and the thread (CPU) gets an empty magazine for its next
 *      frees. A consumer that never allocates pays one slab trip per class, and a thread whose
 *      magazines were reaped one per class it frees in again.
 *   Lock order: fork.c's list (mag_registry_lock, then a tcache's or a CPU's lock, then depot
 *   and slab locks).
 */
#include "mag.h"
#include "depot.h"
#include "mag_fast.h"
#include "meta.h"
#include "options.h"
#include "os.h"
#include "pagemap.h"
#include "report.h"
#include "rseq.h"
#include "slab.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>

_Static_assert(offsetof(tclass_t, loaded) == 0, "rseq.h finds the loaded magazine at a slot");
_Static_assert(offsetof(mag_t, n) == 0 && offsetof(mag_t, cap) == 4 &&
                   offsetof(mag_t, rounds) == 24,
               "rseq.h's sequences use these offsets");
_Static_assert(sizeof(mag_cpu_t) == 4096, "rseq.h's sequences find CPU i's record at i << 12");
/* With the classes at a multiple of 32 bytes GCC folds their offset into the class index and
   spends three more instructions a call (callgrind: 78 -> 84 a malloc+free pair). */
_Static_assert(offsetof(tcache_t, cls) % 32 != 0, "keep tcache_t's classes off a 32-byte offset");

#define TCLASS_EMPTY                                                                               \
  { &mag_empty, &mag_empty }

tcache_t tcache_boot = {.cls.own = {[0 ... SC_COUNT] = {TCLASS_EMPTY, {0, 0}}}};
tcache_t tcache_dead = {.cls.own = {[0 ... SC_COUNT] = {TCLASS_EMPTY, {0, 0}}}};
__thread tcache_t *mag_tls __attribute__((tls_model("initial-exec"))) = &tcache_boot;
uintptr_t mag_secret;
ptrdiff_t mag_rseq_area;
static char *mag_cpus; /* mag_cpu_t[mag_ncpus], or NULL: magazines are per thread */
static unsigned mag_ncpus;
static bool mag_cpu_fence;    /* os_fence_rseq works: idle CPUs' loaded magazines can be taken */
static bool mag_thread_fence; /* os_fence_threads works: so can idle threads' */

static meta_pool_t tcache_pool = META_POOL(META_LINES(sizeof(tcache_t)));
static meta_pool_t tcache_cpu_pool = META_POOL(META_LINES(TCACHE_CPU_SIZE)); /* counts only */
static pthread_key_t mag_key;
static lock_t mag_registry_lock = LOCK_INIT;
static tcache_t mag_registry = {.next = &mag_registry, .prev = &mag_registry};
/* Counts of exited threads, and those folded out of live threads' 32-bit per-CPU-layout counts
   (mag_registry_lock). */
static mag_totals_t mag_folded;
static unsigned mag_threads_live; /* threads with a tcache (mag_registry_lock) */

static mag_cpu_t *mag_cpu(unsigned cpu) {
  return (mag_cpu_t *)(mag_cpus + (size_t)cpu * sizeof(mag_cpu_t));
}

static void mag_cpu_init(void) {
#if RSEQ_SUPPORTED
  unsigned n = os_cpu_possible();
  if (!opt.percpu || !os_rseq_available() || n == 0) return;
  mag_cpu_t *cpus = os_map(n * sizeof(mag_cpu_t)); /* zeroed: the locks are free */
  if (!cpus) return;
  for (unsigned i = 0; i < n; i++)
    for (unsigned c = 0; c <= SC_COUNT; c++)
      cpus[i].cls[c] = (tclass_t)TCLASS_EMPTY;
  mag_rseq_area = os_rseq_offset();
  mag_ncpus = n;
  mag_cpu_fence = os_fence_rseq_register();
  mag_cpus = (char *)cpus;
#endif
}

/* The per-CPU magazines for a thread starting as the live-th, if threads outnumber the CPUs
   enough (see theory 3) and it has a registered rseq area; NULL: its own magazines. */
static char *mag_cpu_thread(unsigned live) {
#if RSEQ_SUPPORTED
  size_t few = opt.percpu_threads ? opt.percpu_threads : 2 * (size_t)os_cpu_count();
  int cpu = mag_cpus && live > few ? rseq_cpu(mag_rseq_area) : -1;
  if (cpu >= 0 && (unsigned)cpu < mag_ncpus) return mag_cpus;
#else
  (void)live;
#endif
  return NULL;
}

static void mag_no_hook(void) {}

void (*mag_miss_hook)(void) = mag_no_hook;

static size_t mag_held;      /* bytes handed out or in magazines (atomic) */
static size_t mag_held_most; /* its high-water mark (atomic) */

void mag_raise_peak(size_t *peak, size_t now) {
  size_t seen = __atomic_load_n(peak, __ATOMIC_RELAXED);
  while ((ptrdiff_t)now > 0 && now > seen &&
         !__atomic_compare_exchange_n(peak, &seen, now, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
  }
}

void mag_held_add(ptrdiff_t delta) {
  mag_raise_peak(&mag_held_most, __atomic_add_fetch(&mag_held, (size_t)delta, __ATOMIC_RELAXED));
}

size_t mag_held_peak(void) {
  return __atomic_load_n(&mag_held_most, __ATOMIC_RELAXED);
}

int64_t mag_sample_countdown(void) {
  return opt.sample ? (int64_t)(opt.sample / 2 + os_random() % (opt.sample + 1)) : 0;
}

void mag_init(void) {
  mag_cpu_init();
#ifndef __SANITIZE_THREAD__ /* ThreadSanitizer cannot see the fence's ordering (rseq.h) */
  mag_thread_fence = os_fence_threads_register();
#endif
  if (pthread_key_create(&mag_key, mag_thread_exit) != 0)
    report_fatal("no pthread key for thread exit", NULL, 0);
}

/* Makes the calling thread's tcache; falls back to tcache_dead when memory is exhausted. */
static tcache_t *mag_thread_start(void) {
  lock_acquire(&mag_registry_lock);
  char *cpus = mag_cpu_thread(mag_threads_live + 1);
  tcache_t *tc = meta_alloc(cpus ? &tcache_cpu_pool : &tcache_pool);
  if (!tc) {
    lock_release(&mag_registry_lock);
    return mag_tls = &tcache_dead;
  }
  mag_threads_live++;
  tc->cpus = cpus;
  for (unsigned c = 0; c <= SC_COUNT && !cpus; c++)
    tc->cls.own[c].mags = (tclass_t)TCLASS_EMPTY;
  tc->sample_left = mag_sample_countdown();
  tc->stack = (uintptr_t)__builtin_frame_address(0);
  tc->next = mag_registry.next;
  tc->prev = &mag_registry;
  mag_registry.next->prev = tc;
  mag_registry.next = tc;
  mag_folded.threads_ever++;
  lock_release(&mag_registry_lock);
  mag_tls = tc; /* before pthread_setspecific, which may allocate */
  pthread_setspecific(mag_key, tc);
  return tc;
}

/* Counts an operation of class c that the fast path did not count (a miss), in tc's layout. */
static void mag_count_miss(tcache_t *tc, unsigned c, bool alloc) {
  if (tc == &tcache_dead) return; /* shared: its counts stay untouched */
  if (tc->cpus)
    STAT_ADD(*(alloc ? &tc->cls.cpu[c].allocs : &tc->cls.cpu[c].frees), 1);
  else if (alloc)
    STAT_ADD(tc->cls.own[c].count.allocs, 1);
  else
    STAT_ADD(tc->cls.own[c].count.frees, 1);
}

/* Before a slow path of class c: moves the calling thread's 32-bit counts of c into the
   process's totals once the top bit of either is set (the fast path then misses, mag.h). */
static void mag_count_fold(tcache_t *tc, unsigned c) {
  tcount_cpu_t *n = &tc->cls.cpu[c];
  if (!tc->cpus || ((STAT_READ(n->allocs) | STAT_READ(n->frees)) >> 31) == 0) return;
  lock_acquire(&mag_registry_lock);
  mag_folded.allocs[c] += STAT_READ(n->allocs);
  mag_folded.frees[c] += STAT_READ(n->frees);
  __atomic_store_n(&n->allocs, 0, __ATOMIC_RELAXED); /* only the owner writes them */
  __atomic_store_n(&n->frees, 0, __ATOMIC_RELAXED);
  lock_release(&mag_registry_lock);
}

static tcache_t *mag_self(void) {
  tcache_t *tc = mag_tls;
  return tc == &tcache_boot ? mag_thread_start() : tc;
}

#define MAG_SPREAD_RUNS 8 /* line-aligned runs in a CPU's first refill of a small class */
#define MAG_SPREAD_MAX 64 /* rounds of a CPU's refill that mag_spread_lines orders */

/* A thread's first refill of a class: the objects of one cache line's worth of a line-aligned
   run (4 of 16 or 48 bytes, 2 of 32, 1 of 64 or more). Slabs are carved in order, so refills of
   whole runs never give two threads parts of one line: with single-object first refills, two
   threads' first 16-byte blocks shared a line and thrash-t2 ran 3.7x slower. A CPU's first
   refill of a class of blocks smaller than a line takes MAG_SPREAD_RUNS such runs, which
   mag_spread_lines deals out a line at a time to the threads taking turns on it (theory 3). */
static uint32_t mag_fill_start(const cache_t *cp, bool cpu) {
  size_t low = cp->size & -cp->size; /* sizes are multiples of 16 */
  uint32_t run = low >= OS_LINE ? 1 : (uint32_t)(OS_LINE / low);
  return cpu && cp->size < OS_LINE ? MAG_SPREAD_RUNS * run : run;
}

/* Orders the n rounds of a CPU's magazine, as the slab layer gave them (lowest address first),
   so that pops, from the top, take one block of each cache line before a second of any:
   threads taking turns on the CPU then hold blocks of different lines (theory 3). Only the top
   MAG_SPREAD_MAX rounds, the next to go, are ordered: a slow path keeps its stack small. */
static void mag_spread_lines(void **rounds, uint32_t n) {
  if (n > MAG_SPREAD_MAX) {
    rounds += n - MAG_SPREAD_MAX;
    n = MAG_SPREAD_MAX;
  }
  void *spread[MAG_SPREAD_MAX];
  uint8_t rank[MAG_SPREAD_MAX]; /* blocks before this one in its line (lines hold at most 4) */
  uint8_t ranks = 1;
  for (uint32_t i = 0; i < n; i++) {
    bool same = i > 0 && (uintptr_t)rounds[i] / OS_LINE == (uintptr_t)rounds[i - 1] / OS_LINE;
    rank[i] = same ? (uint8_t)(rank[i - 1] + 1) : 0;
    if (rank[i] >= ranks) ranks = (uint8_t)(rank[i] + 1);
  }
  if (ranks == 1) return; /* one block a line already */
  uint32_t top = n;
  for (uint8_t r = 0; r < ranks; r++)
    for (uint32_t i = 0; i < n; i++)
      if (rank[i] == r) spread[--top] = rounds[i];
  memcpy(rounds, spread, n * sizeof *rounds);
}

/* Fills the empty magazine p from the slab layer (slow start), or a new one for the sentinel
   or a full-size one for an outgrown one; returns the magazine now in p's place, which holds
   rounds unless memory ran out. A CPU's (cpu) starts bigger for blocks smaller than a line,
   and its rounds are spread over cache lines (theory 3). */
static mag_t *mag_slab_fill(cache_t *cp, mag_t *p, bool cpu) {
  bool first_fill = p == &mag_empty;
  if (first_fill) { /* a first magazine as small as the first refill */
    mag_t *first = depot_mag_new(mag_fill_start(cp, cpu));
    if (!first) return p;
    p = first;
  } else if (p->fill > p->cap && p->cap < depot_cap(cp)) { /* outgrown: a full-size one */
    mag_t *big = depot_empty_mag(cp);
    if (big) {
      big->fill = p->fill;
      depot_put(cp, p);
      p = big;
    }
  }
  uint32_t fill = p->fill ? p->fill : mag_fill_start(cp, cpu);
  fill = fill < p->cap ? fill : p->cap;
  p->n = slab_alloc(cp, p->rounds, fill, first_fill);
  if (cpu) mag_spread_lines(p->rounds, p->n);
  if (p->n) p->fill = 2 * fill; /* slow start: a thread that keeps missing gets more */
  mag_held_add((ptrdiff_t)(p->n * cp->size));
  return p;
}

/*
 * The slow paths shared by malloc classes and object caches, per thread and per CPU (under the
 * tcache's or the CPU's lock). The loaded magazine is full (free) or empty (allocation); they
 * change only the previous magazine - trading it with the depot, filling it from the slab
 * layer - which then becomes the loaded one, and the loaded one the previous: a CPU's loaded
 * magazine, which its sequences use without the lock, is never written here.
 */
static void *mag_alloc_refill(cache_t *cp, tclass_t *t, bool cpu) {
  mag_t *p = t->prev;
  if (p->n == 0) {
    mag_t *full = depot_alloc_exchange(cp, p);
    t->prev = p = full ? full : mag_slab_fill(cp, p, cpu);
    if (full) mag_held_add((ptrdiff_t)(p->n * cp->size));
    if (p->n == 0) return NULL;
  }
  t->prev = t->loaded;
  t->loaded = p;
  return p->rounds[--p->n];
}

/* Returns false when the caller must free obj to the slab itself: no empty magazine could be
   had, or t held none at all (theory 9: obj goes home, and t gets an empty one for later). */
static bool mag_free_room(cache_t *cp, tclass_t *t, void *obj) {
  mag_t *p = t->prev;
  if (p->n == p->cap) {
    size_t given = p->n * cp->size;
    mag_t *e = p == &mag_empty ? depot_empty_mag(cp) : depot_free_exchange(cp, p);
    if (!e) return false;
    mag_held_add(-(ptrdiff_t)given);
    if (t->loaded == &mag_empty) { /* and so is prev */
      t->loaded = e;
      return false;
    }
    p = e;
  }
  p->rounds[p->n++] = obj;
  t->prev = t->loaded;
  t->loaded = p;
  return true;
}

/* The lock a miss of the calling thread in cache cp takes: its tcache's for malloc's classes,
   whose previous magazines mag_reclaim_idle takes; none for object caches, which it leaves
   alone, and whose constructors and destructors, run by the slab layer inside the miss, may
   call malloc and miss again. The periodic reap runs before, outside the lock: it takes other
   threads' tcache locks. */
static lock_t *mag_miss_begin(cache_t *cp) {
  mag_miss_hook();
  if (cp->tag == PM_TAG_CACHE) return NULL;
  tcache_t *tc = mag_tls;
  lock_acquire(&tc->lock);
  tc->misses++;
  return &tc->lock;
}

static void *mag_alloc_miss(cache_t *cp, tclass_t *t) {
  lock_t *held = mag_miss_begin(cp);
  void *obj = mag_alloc_refill(cp, t, false);
  if (held) lock_release(held);
  return obj;
}

static bool mag_free_miss(cache_t *cp, tclass_t *t, void *obj) {
  lock_t *held = mag_miss_begin(cp);
  bool kept = mag_free_room(cp, t, obj);
  if (held) lock_release(held);
  return kept;
}

/* ---- per-CPU magazines ---- */

#if RSEQ_SUPPORTED
/* A miss on the CPU's magazines: reaps if it is time, then takes the lock of the CPU the thread
   runs on (it may move away while it holds it: mag_cpu_install checks). */
static mag_cpu_t *mag_cpu_lock(unsigned *cpu) {
  mag_miss_hook();
  *cpu = (unsigned)rseq_cpu(mag_rseq_area);
  mag_cpu_t *mc = mag_cpu(*cpu);
  lock_acquire(&mc->lock);
  mc->misses++;
  return mc;
}

/* Makes t, a copy of the CPU's magazines of class c as a slow path left it, the CPU's. The
   loaded magazine changes in a sequence on that CPU; if the thread has moved off it, the CPU
   keeps its loaded magazine and the new one becomes the previous (the old previous is already
   in the new one's place or the depot's). */
static void mag_cpu_install(mag_cpu_t *mc, unsigned cpu, unsigned c, const tclass_t *t) {
  tclass_t *slot = &mc->cls[c];
  if (t->loaded == slot->loaded ||
      rseq_store_on(cpu, (void **)&slot->loaded, t->loaded, mag_rseq_area))
    slot->prev = t->prev;
  else
    slot->prev = t->loaded;
}

static void *mag_cpu_alloc(cache_t *cp, unsigned c) {
  unsigned cpu;
  mag_cpu_t *mc = mag_cpu_lock(&cpu);
  tclass_t t = mc->cls[c];
  void *obj = mag_alloc_refill(cp, &t, true);
  mag_cpu_install(mc, cpu, c, &t);
  lock_release(&mc->lock);
  return obj;
}

/* Returns false when no magazine had room; the caller frees to the slab itself. */
static bool mag_cpu_free(cache_t *cp, unsigned c, void *obj) {
  unsigned cpu;
  mag_cpu_t *mc = mag_cpu_lock(&cpu);
  tclass_t t = mc->cls[c];
  bool kept = mag_free_room(cp, &t, obj);
  mag_cpu_install(mc, cpu, c, &t);
  lock_release(&mc->lock);
  return kept;
}
#endif

static void *mag_direct_alloc(cache_t *cp) {
  void *obj;
  if (slab_alloc(cp, &obj, 1, false) != 1) return NULL;
  mag_held_add((ptrdiff_t)cp->size);
  return obj;
}

static void mag_direct_free(cache_t *cp, void *obj) {
  slab_free(cp, &obj, 1);
  mag_held_add(-(ptrdiff_t)cp->size);
}

/* One object from the thread's magazines of object cache cp; s NULL: the thread has none
   (straight to the slab layer). */
static void *mag_pop(cache_t *cp, town_t *s) {
  if (!s) return mag_direct_alloc(cp);
  tclass_t *t = &s->mags;
  void *obj = t->loaded->n ? t->loaded->rounds[--t->loaded->n] : mag_alloc_miss(cp, t);
  if (obj) STAT_ADD(s->count.allocs, 1);
  return obj;
}

static void mag_push(cache_t *cp, town_t *s, void *obj) {
  if (!s) {
    mag_direct_free(cp, obj);
    return;
  }
  tclass_t *t = &s->mags;
  STAT_ADD(s->count.frees, 1);
  if (t->loaded->n < t->loaded->cap)
    t->loaded->rounds[t->loaded->n++] = obj;
  else if (!mag_free_miss(cp, t, obj))
    mag_direct_free(cp, obj);
}

/* After the fast path of class c missed (or was not tried: memalign), for a thread past its
   exit too, whose misses go to the slab layer (tcache_dead is shared: its counters stay
   untouched). */
static void *mag_malloc_miss(tcache_t *tc, unsigned c) {
  cache_t *cp = &malloc_caches[c];
  if (tc == &tcache_dead) return mag_direct_alloc(cp);
#if RSEQ_SUPPORTED
  if (tc->cpus) return mag_cpu_alloc(cp, c);
#endif
  return mag_alloc_miss(cp, &tc->cls.own[c].mags);
}

/* After the fast path of class c found the loaded magazine full; false when no magazine took
   p (a thread past its exit has none): the caller frees it to the slab layer. */
static bool mag_free_miss_class(tcache_t *tc, unsigned c, void *p) {
  cache_t *cp = &malloc_caches[c];
  if (tc == &tcache_dead) return false;
#if RSEQ_SUPPORTED
  if (tc->cpus) return mag_cpu_free(cp, c, p);
#endif
  return mag_free_miss(cp, &tc->cls.own[c].mags, p);
}

void *mag_malloc(unsigned c, size_t size) {
  tcache_t *tc = mag_self();
  mag_count_fold(tc, c);
  void *p = fast_pop(tc, c); /* counts itself */
  if (!p) {
    if (!(p = mag_malloc_miss(tc, c))) {
      errno = ENOMEM;
      return NULL;
    }
    mag_count_miss(tc, c, true);
  }
  *(uintptr_t *)p = 0;
  if (tc != &tcache_dead) STAT_ADD(tc->bytes_requested, size);
  return p;
}

void mag_free(unsigned c, void *p) {
  uintptr_t a = (uintptr_t)p;
  if (!sc_is_object_start(c, a))
    report_heap_error("invalid free", p, "interior pointer, not the start of a block");
  if (*(uintptr_t *)p == (a ^ mag_secret))
    report_heap_error("double free", p, "block already free");
  *(uintptr_t *)p = a ^ mag_secret;
  tcache_t *tc = mag_self();
  mag_count_fold(tc, c);
  if (fast_push(tc, c, p)) return; /* counted */
  mag_count_miss(tc, c, false);
  if (!mag_free_miss_class(tc, c, p)) mag_direct_free(&malloc_caches[c], p);
}

unsigned mag_miss_weight(unsigned c) {
  tcache_t *tc = mag_tls;
  if (tc->cpus) return depot_cap(&malloc_caches[c]) + 1;
  mag_t *loaded = __atomic_load_n(&tc->cls.own[c].mags.loaded, __ATOMIC_RELAXED); /* reaper's too */
  return loaded->cap + 1;
}

bool mag_percpu(void) {
  return mag_cpus != NULL;
}

void mag_large_count(size_t size, int sign) {
  tcache_t *tc = mag_self();
  if (tc == &tcache_dead) return;
  if (sign > 0) {
    STAT_ADD(tc->large_allocs, 1);
    STAT_ADD(tc->bytes_requested, size);
  } else {
    STAT_ADD(tc->large_frees, 1);
  }
}

/* ---- object caches ---- */

static town_t *mag_slot(tcache_t *tc, cache_t *cp) {
  if (tc == &tcache_dead || cp->id >= MAG_CACHE_SLOTS) return NULL;
  tslot_t *slots = tc->slots;
  if (!slots) { /* published atomically: mag_cache_drain reads it from other threads */
    if (!(slots = os_map(MAG_CACHE_SLOTS * sizeof(tslot_t)))) return NULL;
    __atomic_store_n(&tc->slots, slots, __ATOMIC_RELEASE);
  }
  tslot_t *s = &slots[cp->id];
  if (s->cache != cp) { /* first use, or the slot of a destroyed cache (already drained) */
    s->cache = cp;
    s->own = (town_t){TCLASS_EMPTY, {0, 0}};
  }
  return &s->own;
}

void *mag_cache_alloc(cache_t *cp) {
  return mag_pop(cp, mag_slot(mag_self(), cp));
}

void mag_cache_free(cache_t *cp, void *obj) {
  if (!slab_of(cp, obj)) report_heap_error("invalid free", obj, "not an object of this cache");
  mag_push(cp, mag_slot(mag_self(), cp), obj);
}

/* Gives a magazine of cp (or the sentinel: nothing) to its depot. */
static void mag_give(cache_t *cp, mag_t *m) {
  if (m == &mag_empty) return;
  mag_held_add(-(ptrdiff_t)(m->n * cp->size));
  depot_put(cp, m);
}

/* Gives a thread's magazines of one cache to its depot. */
static void mag_give_back(cache_t *cp, tclass_t *t) {
  mag_give(cp, t->loaded);
  mag_give(cp, t->prev);
  t->loaded = t->prev = &mag_empty;
}

void mag_cache_drain(cache_t *cp) {
  if (cp->id >= MAG_CACHE_SLOTS) return;
  lock_acquire(&mag_registry_lock);
  for (tcache_t *tc = mag_registry.next; tc != &mag_registry; tc = tc->next) {
    tslot_t *slots = __atomic_load_n(&tc->slots, __ATOMIC_ACQUIRE);
    if (slots && slots[cp->id].cache == cp) {
      mag_give_back(cp, &slots[cp->id].own.mags);
      slots[cp->id].cache = NULL;
    }
  }
  lock_release(&mag_registry_lock);
}

/* ---- thread exit, trim, statistics ---- */

static void mag_flush(tcache_t *tc) {
  lock_acquire(&tc->lock);
  for (unsigned c = 1; c <= SC_COUNT && !tc->cpus; c++)
    mag_give_back(&malloc_caches[c], &tc->cls.own[c].mags);
  lock_release(&tc->lock);
}

/* Gives the magazines of CPUs that have not missed since the last call (all: of every CPU) to
   the depots. A loaded magazine is first replaced by the sentinel; the fence then restarts any
   sequence on that CPU that still uses it, after which it is the caller's. */
static void mag_cpu_reclaim(bool all) {
  mag_t *loaded[SC_COUNT + 1];
  for (unsigned i = 0; i < mag_ncpus; i++) {
    mag_cpu_t *mc = mag_cpu(i);
    lock_acquire(&mc->lock);
    if (all || mc->misses == mc->misses_seen) {
      bool taken = false;
      for (unsigned c = 1; c <= SC_COUNT; c++) {
        mag_give(&malloc_caches[c], mc->cls[c].prev);
        mc->cls[c].prev = &mag_empty;
        loaded[c] = mc->cls[c].loaded;
        if (mag_cpu_fence && loaded[c] != &mag_empty) {
          __atomic_store_n(&mc->cls[c].loaded, &mag_empty, __ATOMIC_RELAXED);
          taken = true;
        }
      }
      bool fenced = taken && os_fence_rseq(i);
      for (unsigned c = 1; c <= SC_COUNT && taken; c++)
        if (loaded[c] != &mag_empty) {
          if (fenced)
            mag_give(&malloc_caches[c], loaded[c]);
          else /* no fence, no taking: a sequence may still be using it */
            __atomic_store_n(&mc->cls[c].loaded, loaded[c], __ATOMIC_RELAXED);
        }
    }
    mc->misses_seen = mc->misses;
    lock_release(&mc->lock);
  }
}

/* Where mag_reclaim_idle keeps the loaded magazines it parked, for MAG_PARK_BATCH threads under
   one fence (mag_registry_lock). Static: the reaper may run in a slow path, on a small stack. */
#define MAG_PARK_BATCH 8
static mag_t *mag_parked[MAG_PARK_BATCH][SC_COUNT + 1];

/* Parks the loaded magazines of a thread that has not missed since the last look (its lock
   held): swaps the sentinel in for each, keeping what it held in parked[]. The previous ones
   stay in place until the fence: the owner may be trading them with the loaded ones right now
   (fast_trade). Returns whether it parked any. */
static bool mag_thread_park(tcache_t *tc, mag_t **parked) {
  bool any = false;
  for (unsigned c = 1; c <= SC_COUNT; c++) {
    mag_t **loaded = &tc->cls.own[c].mags.loaded;
    parked[c] = &mag_empty;
    if (__atomic_load_n(loaded, __ATOMIC_RELAXED) != &mag_empty)
      parked[c] = __atomic_exchange_n(loaded, &mag_empty, __ATOMIC_RELAXED);
    any |= parked[c] != &mag_empty;
  }
  return any;
}

/* After the fence, a parked thread that is not between fast_enter and fast_leave has finished
   with its parked magazines and will see the sentinels from now on; it trades magazines only
   there, never with the sentinel loaded. So where the sentinel is still loaded, the parked
   magazine and the previous one go to the depots. Where it is not, the owner traded in the
   window (it had read the loaded magazine before the exchange): the parked one is its previous
   one now, and the class stays as it is. A thread still in between gets its parked magazines
   back where the sentinel is still loaded. */
static void mag_thread_settle(tcache_t *tc, mag_t *const *parked, bool fenced) {
  bool take = fenced && __atomic_load_n(&tc->busy, __ATOMIC_ACQUIRE) == 0;
  for (unsigned c = 1; c <= SC_COUNT; c++) {
    tclass_t *t = &tc->cls.own[c].mags;
    mag_t *sentinel = &mag_empty;
    if (parked[c] == &mag_empty) continue;
    if (!take)
      __atomic_compare_exchange_n(&t->loaded, &sentinel, parked[c], false, __ATOMIC_RELAXED,
                                  __ATOMIC_RELAXED);
    else if (__atomic_load_n(&t->loaded, __ATOMIC_RELAXED) == &mag_empty) {
      mag_give(&malloc_caches[c], parked[c]);
      mag_give(&malloc_caches[c], t->prev);
      t->prev = &mag_empty;
    }
  }
}

/* Threads that have not missed for an interval give up their magazines, where the fence works:
   parked a batch of threads at a time, which stay locked until one fence has covered them. */
void mag_reclaim_idle(void) {
  mag_cpu_reclaim(false);
  lock_acquire(&mag_registry_lock);
  for (tcache_t *tc = mag_registry.next; tc != &mag_registry;) {
    tcache_t *batch[MAG_PARK_BATCH];
    unsigned n = 0;
    for (; tc != &mag_registry && n < MAG_PARK_BATCH; tc = tc->next) {
      lock_acquire(&tc->lock);
      bool idle = !tc->cpus && tc->misses == tc->misses_seen;
      if (idle && mag_thread_fence && mag_thread_park(tc, mag_parked[n])) {
        batch[n++] = tc;
        continue;
      }
      tc->misses_seen = tc->misses;
      lock_release(&tc->lock);
    }
    bool fenced = n && os_fence_threads();
    for (unsigned i = 0; i < n; i++) {
      mag_thread_settle(batch[i], mag_parked[i], fenced);
      lock_release(&batch[i]->lock);
    }
  }
  lock_release(&mag_registry_lock);
}

void mag_flush_self(void) {
  mag_cpu_reclaim(true);
  tcache_t *tc = mag_tls;
  if (tc != &tcache_boot && tc != &tcache_dead) mag_flush(tc);
}

static void mag_fold(mag_totals_t *sum, tcache_t *tc) {
  for (unsigned c = 1; c <= SC_COUNT; c++) {
    if (tc->cpus) {
      sum->allocs[c] += STAT_READ(tc->cls.cpu[c].allocs);
      sum->frees[c] += STAT_READ(tc->cls.cpu[c].frees);
    } else {
      sum->allocs[c] += STAT_READ(tc->cls.own[c].count.allocs);
      sum->frees[c] += STAT_READ(tc->cls.own[c].count.frees);
    }
  }
  sum->bytes_requested += STAT_READ(tc->bytes_requested);
  sum->large_allocs += STAT_READ(tc->large_allocs);
  sum->large_frees += STAT_READ(tc->large_frees);
}

void mag_thread_exit(void *arg) {
  tcache_t *tc = arg;
  mag_flush(tc);
  lock_acquire(&mag_registry_lock);
  if (tc->slots)
    for (unsigned i = 0; i < MAG_CACHE_SLOTS; i++)
      if (tc->slots[i].cache) mag_give_back(tc->slots[i].cache, &tc->slots[i].own.mags);
  tc->prev->next = tc->next;
  tc->next->prev = tc->prev;
  mag_threads_live--;
  mag_fold(&mag_folded, tc);
  lock_release(&mag_registry_lock);
  if (tc->slots) os_unmap(tc->slots, MAG_CACHE_SLOTS * sizeof(tslot_t));
  mag_tls = &tcache_dead;
  meta_free(tc->cpus ? &tcache_cpu_pool : &tcache_pool, tc);
}

void mag_totals(mag_totals_t *out) {
  lock_acquire(&mag_registry_lock);
  *out = mag_folded;
  for (tcache_t *tc = mag_registry.next; tc != &mag_registry; tc = tc->next) {
    mag_fold(out, tc);
    out->threads_live++;
  }
  lock_release(&mag_registry_lock);
}

void mag_thread_register(void) {
  (void)mag_self();
}

size_t mag_thread_stacks(uintptr_t *out, size_t max) {
  size_t n = 0;
  lock_acquire(&mag_registry_lock);
  for (tcache_t *tc = mag_registry.next; tc != &mag_registry && n < max; tc = tc->next)
    if (tc != mag_tls) out[n++] = tc->stack;
  lock_release(&mag_registry_lock);
  return n;
}

void mag_fork_prepare(void) {
  lock_acquire(&mag_registry_lock);
  for (unsigned i = 0; i < mag_ncpus; i++)
    lock_acquire(&mag_cpu(i)->lock);
}
void mag_fork_parent(void) {
  for (unsigned i = 0; i < mag_ncpus; i++)
    lock_release(&mag_cpu(i)->lock);
  lock_release(&mag_registry_lock);
}

/* In the child only the forking thread exists: the other threads' caches are gone with them
   (their magazines are leaked, bounded by their size), and the registry holds just this one.
   Returns whether there were such threads. */
bool mag_fork_child(void) {
  lock_init(&mag_registry_lock);
  for (unsigned i = 0; i < mag_ncpus; i++)
    lock_init(&mag_cpu(i)->lock);
  tcache_t *self = mag_tls;
  bool others = false;
  for (tcache_t *tc = mag_registry.next, *next; tc != &mag_registry; tc = next) {
    next = tc->next;
    if (tc != self) {
      mag_fold(&mag_folded, tc);
      others = true;
    }
  }
  mag_registry.next = mag_registry.prev = &mag_registry;
  mag_threads_live = 0;
  if (self != &tcache_boot && self != &tcache_dead) {
    mag_threads_live = 1;
    lock_init(&self->lock);
    self->next = self->prev = &mag_registry;
    mag_registry.next = mag_registry.prev = self;
  }
  return others;
}
