/*
 * mag: the magazine layer (Bonwick & Adams, USENIX 2001, section 3). Every cache has, per
 * thread or per CPU, a pair of magazines, a loaded and a previous one (mag_pair_t). This file
 * owns the thread caches (tcache_t) and their registry, the slow paths every pair shares,
 * malloc's and free's slow paths per class, counting, thread exit, trim and fork. The CPUs'
 * pairs are mag_percpu.c's, the threads' pairs of object caches mag_slots.c's, and taking the
 * pairs of idle threads and CPUs mag_reclaim.c's.
 *
 * Theory
 *   1. Allocation pops from the loaded magazine, free pushes onto it (mag_fast.h). When it is
 *      empty (full) the previous one is tried (theory 8), and only when both are is a magazine
 *      traded with the depot: a miss costs one depot trip per `cap` operations at worst, and
 *      alternating alloc and free never reaches the depot.
 *   2. The empty-magazine trick (kmem): a thread starts on tcache_boot, whose magazines are the
 *      shared sentinel mag_empty (no rounds, no room; loaded, its top MAG_TOP_NONE: theory 8).
 *      Its first allocation misses and the miss makes its tcache: the fast path never asks
 *      "initialised?". At exit (a pthread key's destructor) its magazines go to the depots, its
 *      counts into mag_folded, and the thread moves to tcache_dead, whose misses go straight to
 *      the slab layer.
 *   3. Only the owner works on its own pairs, without locks, but for the reaper, which takes
 *      those of an idle thread (mag_reclaim.c), and mag_cache_drain, which takes a destroyed
 *      object cache's (mag_slots.c). Others only read the owner's counts (STAT_ADD, mag.h).
 *   4. A slow path changes only the previous magazine (trading it with the depot, filling it
 *      from the slab layer) and then swaps the pair: a CPU's loaded magazine, which its
 *      sequences use without a lock, is never written here (mag_percpu.c).
 *   5. Slow start: a refill from the slab layer takes one cache line's worth of objects the
 *      first time (mag_fill_start) and twice as many each time after, up to the depot's size;
 *      a first magazine holds only that many rounds and is traded for a full-size one once
 *      outgrown. The first refill takes never-used objects where the slab has them (slab.c),
 *      so the run shares no line with other threads' blocks. A thread's refill is handed out
 *      lowest address first, as a program that writes what it allocates in turn then writes
 *      forwards, the direction processors prefetch (a CPU's is dealt out a line at a time
 *      instead: mag_percpu.c theory 3; docs/decisions/refill-ascending.md).
 *   6. Passive false sharing (Hoard's cache-scratch): a block freed by a thread (on a CPU)
 *      holding no magazine of its class was allocated elsewhere; kept, it would be the next
 *      block handed out here. So it goes back to its slab, and the pair gets an empty magazine
 *      for its next frees. A CPU's magazines serve many threads, so on them the test is the
 *      thread's own: its first free of a class, before it ever allocated one, sends the block
 *      home (the free count starts at MAG_FREES_UNSEEN, whose top bit makes that free miss).
 *   7. Counting: each thread counts its operations, 64-bit beside its own magazines, 32-bit on
 *      per-CPU magazines (mag.h), folded into mag_folded before they wrap. Held bytes (out of
 *      the slab layer, in magazines or live) change at each magazine movement.
 *   8. A loaded magazine of a malloc class, a thread's own or a CPU's (mag_percpu.c theory 1),
 *      is its top: a pointer to the slot above its last round. Loading it (mag_top_load)
 *      writes its end mark, its address with the low bit set, below its first round (into its
 *      depot link, unused while loaded) and above its last possible one (rounds[cap]:
 *      magazines are made one word longer). Blocks are 16-byte aligned, so the fast path tells
 *      a round from a mark by the low bit: a pop reads the word below the top, a push the word
 *      at it, and neither reads the header; the count n is stale until the magazine is
 *      unloaded (mag_top_unload: one read at either end, else a walk down to the lower mark).
 *      The top is one word, which the reaper exchanges (mag_reclaim.c); MAG_TOP_NONE is the
 *      sentinel. Trading a thread's pair, when the loaded magazine ran out (filled up) and the
 *      previous one can serve, is the slow path's first step, still without the lock
 *      (mag_own_trade), as for a CPU's pair.
 *   9. Sweep: a program's size mix moves on faster than reap_ms, and blocks cached in the
 *      classes it left, each on some slab of its class, keep those slabs from emptying while
 *      the new classes take slabs of their own (docs/decisions/class-sweep.md). So a thread
 *      with magazines of its own looks at its classes every sweep_ms, on a slow path (every
 *      MAG_SWEEP_MISSES misses it reads the clock): a class it allocated none of since the
 *      last look, whose depot no thread took a full magazine from for as long either, gives
 *      the depot's full magazines back to their slabs (depot.c theory 5), and where its slabs
 *      are packed into the slab arena (objects of a page at most: slab_packed) its pair's
 *      rounds too; the pair stays, empty. A bigger class's pair stays whole: its slabs come
 *      from the heap arena, which cut the slabs such a class made again later from fresh
 *      pages while those it freed stayed resident. Frees alone do not keep a class: a class
 *      being torn down frees until its last block. A consumer, which frees a class it never
 *      allocates, keeps its magazines while producers take them from the depot. The cost is
 *      bounded by the interval, not by the operations: one refill a class and thread per
 *      sweep_ms at most. CPUs' pairs, which many threads share, are left to the reap.
 *  10. Homes: the slab layer gives each home a slab of its own in a class to refill from, so
 *      that the blocks of two homes share no page (slab.c theory 8). Each CPU is one
 *      (MAG_HOME_CPU | cpu), and so is each thread that keeps magazines of its own while
 *      threads number at most mag_few_threads() at its start (tc->homed, its tid the key):
 *      homes stay bounded, and so do the partly carved slabs they keep. Other threads (those
 *      beyond, under percpu=0 or without rseq) refill from shared slabs. A homed thread's exit
 *      shares its slabs again (slab_disown).
 * Locking: mag_registry_lock guards the registry and mag_folded; a starting thread takes no
 * lock (its tcache waits on mag_registry_pending for the lock's next holder, who links it:
 * mag_registry_enter), nor does an exiting one that finds it taken (its tcache waits on
 * mag_registry_leaving, for the holder as it lets go: mag_registry_leave); a tcache's lock,
 * its owner's slow paths of malloc's classes against the reaper. front/fork.c writes the
 * order.
 */
#include "mag.h"
#include "depot.h"
#include "inject.h"
#include "mag_fast.h"
#include "mag_impl.h"
#include "meta.h"
#include "options.h"
#include "os.h"
#include "pagemap.h"
#include "prof_clock.h"
#include "report.h"

#include <string.h>
#include "slab.h"

#include <errno.h>
#include <pthread.h>

#define MAG_SWEEP_MISSES 32 /* a thread reads the clock for a sweep every this many misses */

_Static_assert(offsetof(mag_pair_t, loaded) == 0, "rseq.h finds the loaded magazine at a slot");
_Static_assert(offsetof(mag_t, n) == 0 && offsetof(mag_t, cap) == 4 &&
                   offsetof(mag_t, rounds) == 24,
               "rseq.h's sequences use these offsets");
/* At a multiple of 32 bytes GCC folds the classes' offset into the class index, which costs
   the fast path instructions (docs/decisions/percpu-counts-32bit.md). */
_Static_assert(offsetof(tcache_t, own) % 32 != 0, "keep tcache_t's classes off a 32-byte offset");
_Static_assert(sizeof(mag_consts_t) == OS_LINE, "the fast path's constants fill one line");

_Static_assert(offsetof(mag_t, next) + sizeof(void *) == offsetof(mag_t, rounds),
               "a loaded magazine's depot link is the word below its first round (theory 8)");

void *mag_top_none[2] = {(void *)1, (void *)1}; /* the end marks of no magazine */
/* Every class's pair the sentinel: the fast path misses both ways. */
#define OWN_NONE .top = {[0 ... SC_COUNT] = MAG_TOP_NONE}, .prev = {[0 ... SC_COUNT] = &mag_empty}
tcache_t tcache_boot = {.own = {OWN_NONE}};
tcache_t tcache_dead = {.own = {OWN_NONE}};
__thread tcache_t *mag_tls __attribute__((tls_model("initial-exec"))) = &tcache_boot;
mag_consts_t mag_consts;
bool mag_magazines_off;

static meta_pool_t tcache_pool = META_POOL(META_LINES(sizeof(tcache_t)));
static meta_pool_t tcache_cpu_pool = META_POOL(META_LINES(TCACHE_CPU_SIZE)); /* counts only */
static pthread_key_t mag_key;
lock_t mag_registry_lock = LOCK_INIT;
tcache_t mag_registry = {.next = &mag_registry, .prev = &mag_registry};
/* Thread caches made since the registry's lock was last taken, linked through next: a starting
   thread pushes its own without the lock, the lock's next holder links them in
   (mag_registry_enter). Those of threads that exited meanwhile, linked through leaving: an
   exiting thread that finds the lock taken leaves its own there instead of waiting, and the
   lock's next holder takes them out of the registry. */
static tcache_t *mag_registry_pending, *mag_registry_leaving;
/* Tcaches taken out of the registry, whose memory goes back once its lock is let go
   (mag_registry_lock; linked through leaving). */
static tcache_t *mag_registry_retired;
/* Counts of exited threads, and those folded out of live threads' 32-bit per-CPU-layout counts
   (mag_registry_lock). */
static mag_totals_t mag_folded;
static unsigned mag_threads_live; /* threads with a tcache, or making one (atomic) */

static void mag_no_hook(bool alloc) {
  (void)alloc;
}

void (*mag_miss_hook)(bool alloc) = mag_no_hook;

static uint64_t mag_large_requested; /* bytes requested in large blocks, ever (atomic) */
static size_t mag_held;              /* bytes handed out or in magazines (atomic) */
static size_t mag_held_most;         /* its high-water mark (atomic) */

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
  INJECT_START(opt.inject);
  INJECT_QUIET("thread registry", &mag_registry_lock, 1, sizeof mag_registry_lock);
  mag_cpu_init();
  mag_reclaim_init();
  if (pthread_key_create(&mag_key, mag_thread_exit) != 0)
    report_fatal("no pthread key for thread exit", NULL, 0);
}

/* Pushes tc onto a list of the registry's (pending or leaving) through its field at link. */
static void mag_registry_push(tcache_t **list, tcache_t *tc, tcache_t **link) {
  *link = __atomic_load_n(list, __ATOMIC_RELAXED);
  while (!__atomic_compare_exchange_n(list, link, tc, true, __ATOMIC_RELEASE, __ATOMIC_RELAXED)) {
  }
}

/* Makes the calling thread's tcache; falls back to tcache_dead when memory is exhausted. Takes
   no lock of the registry's (but once, for the first thread on the CPUs' magazines: their
   setup, mag_percpu.c): the tcache goes onto mag_registry_pending. Threads that start
   together, or one preempted while it starts, hold up no other thread's start or exit, nor
   the reaper; where many threads share few CPUs, each acquisition that finds the lock taken
   waits for a woken thread's turn on a CPU. */
static tcache_t *mag_thread_start(void) {
  unsigned live = __atomic_add_fetch(&mag_threads_live, 1, __ATOMIC_RELAXED);
  char *cpus = mag_cpu_for_thread(live);
  tcache_t *tc = meta_alloc(cpus ? &tcache_cpu_pool : &tcache_pool);
  if (!tc) {
    __atomic_sub_fetch(&mag_threads_live, 1, __ATOMIC_RELAXED);
    return mag_tls = &tcache_dead;
  }
  tc->cpus = cpus;
  for (unsigned c = 0; c <= SC_COUNT; c++) /* the layout the thread uses (tcache_t) */
    if (cpus)
      tc->cpu_counts[c].frees = MAG_FREES_UNSEEN;
    else {
      tc->own.top[c] = MAG_TOP_NONE;
      tc->own.prev[c] = &mag_empty;
      tc->own.allocs[c] = tc->own.frees[c] = 0;
    }
  tc->sample_left = mag_sample_countdown();
  tc->stack = (uintptr_t)__builtin_frame_address(0);
  tc->tid = os_thread_id();
  tc->homed = !cpus && live <= mag_few_threads(); /* homes bounded (theory 10) */
  mag_registry_push(&mag_registry_pending, tc, &tc->next);
  mag_tls = tc; /* before pthread_setspecific, which may allocate */
  pthread_setspecific(mag_key, tc);
  return tc;
}

/* Counts an operation of class c that the fast path did not count (a miss), in tc's layout. */
static void mag_count_miss(tcache_t *tc, unsigned c, bool alloc) {
  if (tc == &tcache_dead) return; /* shared: its counts stay untouched */
  if (tc->cpus)
    STAT_ADD(*(alloc ? &tc->cpu_counts[c].allocs : &tc->cpu_counts[c].frees), 1);
  else if (alloc)
    STAT_ADD(tc->own.allocs[c], 1);
  else
    STAT_ADD(tc->own.frees[c], 1);
}

/* Before a slow path of class c: moves the calling thread's 32-bit counts of c into
   mag_folded once the top bit of either is set (the fast path then misses, mag.h). */
static void mag_fold_cpu_counts(tcache_t *tc, unsigned c) {
  mag_counts_cpu_t *n = &tc->cpu_counts[c];
  if (!tc->cpus) return;
  uint32_t frees = mag_frees_seen(STAT_READ(n->frees));
  if (((STAT_READ(n->allocs) | frees) >> 31) == 0) return;
  lock_acquire(&mag_registry_lock);
  mag_folded.allocs[c] += STAT_READ(n->allocs);
  mag_folded.frees[c] += frees;
  __atomic_store_n(&n->allocs, 0, __ATOMIC_RELAXED);           /* only the owner writes them */
  if (frees) __atomic_store_n(&n->frees, 0, __ATOMIC_RELAXED); /* UNSEEN stays */
  lock_release(&mag_registry_lock);
}

tcache_t *mag_self(void) {
  tcache_t *tc = mag_tls;
  if (tc != &tcache_boot) return tc;
  return mag_magazines_off ? (mag_tls = &tcache_dead) : mag_thread_start();
}

/* A thread's first refill of a class: the objects of one cache line's worth of a line-aligned
   run (4 of 16 or 48 bytes, 2 of 32, 1 of 64 or more). Slabs are carved in order, so refills of
   whole runs never give two threads parts of one line (docs/decisions/slow-start.md). A
   CPU's first refill of a class of blocks smaller than a line takes MAG_SPREAD_RUNS such runs,
   which mag_cpu_spread_lines deals out a line at a time to the threads taking turns on it. */
static uint32_t mag_fill_start(const cache_t *cp, bool cpu) {
  size_t low = cp->size & -cp->size; /* sizes are multiples of 16 */
  uint32_t run = low >= OS_LINE ? 1 : (uint32_t)(OS_LINE / low);
  return cpu && cp->size < OS_LINE ? MAG_SPREAD_RUNS * run : run;
}

/* Reverses rounds[0..n), which the slab layer fills lowest address first, so that pops, from
   the top, hand the run out lowest address first (theory 5). */
static void mag_rounds_reverse(void **rounds, uint32_t n) {
  for (uint32_t i = 0, j = n; i + 1 < j; i++, j--) {
    void *x = rounds[i];
    rounds[i] = rounds[j - 1];
    rounds[j - 1] = x;
  }
}

/* Fills the empty magazine p from the slab layer (slow start), or a new one for the sentinel
   or a full-size one for an outgrown one; returns the magazine now in p's place, which holds
   rounds unless memory ran out. A CPU's (cpu) starts bigger for blocks smaller than a line,
   and its rounds are spread over cache lines. */
mag_t *mag_slab_fill(cache_t *cp, mag_t *p, uint32_t home) {
  bool cpu = home & MAG_HOME_CPU, first_fill = p == &mag_empty;
  if (first_fill) { /* a first magazine as small as the first refill */
    mag_t *first = depot_mag_new(mag_fill_start(cp, cpu));
    if (!first) return p;
    p = first;
  } else if (p->fill > p->cap && p->cap < depot_cap(cp)) { /* outgrown: a full-size one */
    mag_t *big = depot_empty_mag(cp, DEPOT_MAKE);
    if (big) {
      big->fill = p->fill;
      depot_put(cp, p);
      p = big;
    }
  }
  uint32_t fill = p->fill ? p->fill : mag_fill_start(cp, cpu);
  fill = fill < p->cap ? fill : p->cap;
  p->n = slab_alloc(cp, p->rounds, fill, first_fill, home);
  if (cpu)
    mag_cpu_spread_lines(p->rounds, p->n);
  else
    mag_rounds_reverse(p->rounds, p->n);
  if (p->n) p->fill = 2 * fill; /* slow start: a thread that keeps missing gets more */
  mag_held_add((ptrdiff_t)(p->n * cp->size));
  return p;
}

void *mag_alloc_refill(cache_t *cp, mag_pair_t *t, mag_t **fill, unsigned how) {
  mag_t *p = t->prev;
  if (p->n == 0) {
    mag_t *full = depot_alloc_exchange(cp, p, mag_tls->tid, how);
    if (full == DEPOT_BUSY) {
      *fill = DEPOT_BUSY;
      return NULL;
    }
    if (full) {
      mag_held_add((ptrdiff_t)(full->n * cp->size));
    } else if (fill) { /* the caller fills it from the slab layer, outside its lock */
      *fill = p;
      t->prev = &mag_empty;
      return NULL;
    }
    t->prev = p = full ? full : mag_slab_fill(cp, p, mag_tls->homed ? mag_tls->tid : 0);
    if (p->n == 0) return NULL;
  }
  t->prev = t->loaded;
  t->loaded = p;
  return p->rounds[--p->n];
}

/* Marks full magazine m as given by the calling thread (depot.c, theory 4). */
static mag_t *mag_given(mag_t *m) {
  m->giver = mag_tls->tid;
  return m;
}

/* False also when t held no magazine at all (theory 6: obj goes home, and t gets an empty one
   for later). */
bool mag_free_room(cache_t *cp, mag_pair_t *t, void *obj, mag_t **drain, unsigned how) {
  if (t->loaded == &mag_empty) { /* the reaper took the pair, or it never had one */
    mag_t *e = depot_empty_mag(cp, how);
    if (e == DEPOT_BUSY) {
      *drain = DEPOT_BUSY;
      return false;
    }
    if (e) t->loaded = e; /* prev, the sentinel too (mag.h), stays */
    if (!e && drain) *drain = &mag_empty;
    return false;
  }
  mag_t *p = t->prev;
  if (p->n == p->cap) {
    size_t given = p->n * cp->size;
    mag_t *e =
        p == &mag_empty ? depot_empty_mag(cp, how) : depot_free_exchange(cp, mag_given(p), how);
    if (e == DEPOT_BUSY) {
      *drain = DEPOT_BUSY;
      return false;
    }
    if (!e && drain) *drain = &mag_empty;
    if (!e) return false;
    mag_held_add(-(ptrdiff_t)given);
    if (e == p) {  /* the depot keeps no more: p's rounds go back to their slabs */
      if (drain) { /* after the caller's lock is released */
        *drain = p;
        t->prev = &mag_empty;
        return false;
      }
      mag_drain(cp, p);
    }
    p = e;
  }
  p->rounds[p->n++] = obj;
  t->prev = t->loaded;
  t->loaded = p;
  return true;
}

void mag_drain(cache_t *cp, mag_t *m) {
  slab_free(cp, m->rounds, m->n);
  m->n = 0;
}

/* Gives the rounds of m, a thread's (counted held), back to their slabs; m stays, empty. */
static void mag_give_home(cache_t *cp, mag_t *m) {
  if (m->n == 0) return; /* the sentinel among them: never written */
  __atomic_add_fetch(&cp->swept, m->n, __ATOMIC_RELAXED);
  mag_held_add(-(ptrdiff_t)(m->n * cp->size));
  mag_drain(cp, m);
}

/* The lock a miss of the calling thread in cache cp takes: its tcache's for malloc's classes,
   whose previous magazines mag_reclaim takes; none for object caches, which it leaves
   alone, and whose constructors and destructors, run by the slab layer inside the miss, may
   call malloc and miss again. The periodic reap runs before, outside the lock: it takes other
   threads' tcache locks. */
static lock_t *mag_miss_begin(cache_t *cp, bool alloc) {
  mag_miss_hook(alloc);
  mag_count_cache_miss(cp);
  if (cp->tag == PM_TAG_CACHE) return NULL;
  tcache_t *tc = mag_tls;
  lock_acquire(&tc->lock);
  tc->misses++;
  return &tc->lock;
}

void *mag_own_alloc_miss(cache_t *cp, mag_pair_t *t) {
  lock_t *held = mag_miss_begin(cp, true);
  void *obj = mag_alloc_refill(cp, t, NULL, DEPOT_MAKE);
  if (held) lock_release(held);
  return obj;
}

bool mag_own_free_miss(cache_t *cp, mag_pair_t *t, void *obj) {
  lock_t *held = mag_miss_begin(cp, false);
  bool kept = mag_free_room(cp, t, obj, NULL, DEPOT_MAKE);
  if (held) lock_release(held);
  return kept;
}

void *mag_direct_alloc(cache_t *cp) {
  void *obj;
  if (slab_alloc(cp, &obj, 1, false, 0) != 1) return NULL;
  mag_held_add((ptrdiff_t)cp->size);
  return obj;
}

void mag_direct_free(cache_t *cp, void *obj) {
  slab_free(cp, &obj, 1);
  mag_held_add(-(ptrdiff_t)cp->size);
}

void **mag_top_load(mag_t *m) {
  if (m == &mag_empty) return MAG_TOP_NONE;
  void *mark = (void *)((uintptr_t)m | 1);
  m->next = mark; /* rounds[-1] */
  m->rounds[m->cap] = mark;
  return &m->rounds[m->n];
}

mag_t *mag_top_find(void **top, uint32_t *n) {
  uint32_t below = 0;
  void *mark = *top; /* full: the upper mark (or the sentinel's) */
  bool full = mag_is_end(mark);
  if (!full) { /* else down from the top to the lower mark: one step if empty */
    while (!mag_is_end(top[-1 - (ptrdiff_t)below]))
      below++;
    mark = top[-1 - (ptrdiff_t)below];
  }
  mag_t *m = (mag_t *)((uintptr_t)mark & ~(uintptr_t)1);
  if (!m) return &mag_empty;
  if (n) *n = full ? m->cap : below;
  return m;
}

mag_t *mag_top_unload(void **top) {
  uint32_t n;
  mag_t *m = mag_top_find(top, &n);
  if (m != &mag_empty) m->n = n;
  return m;
}

/* Class c's own pair of tc, for a slow path (tc's lock held, so the reaper leaves it alone). */
static mag_pair_t mag_own_unpack(tcache_t *tc, unsigned c) {
  return (mag_pair_t){mag_top_unload(tc->own.top[c]), tc->own.prev[c]};
}

/* Puts pair t back as class c's own pair of tc (its lock held). */
static void mag_own_pack(tcache_t *tc, unsigned c, mag_pair_t t) {
  tc->own.prev[c] = t.prev;
  __atomic_store_n(&tc->own.top[c], mag_top_load(t.loaded), __ATOMIC_RELAXED);
}

/* Theory 9, on a slow path of class served under tc's lock: every sweep_ms, the classes tc
   used but allocated none of since the last sweep, whose depots no thread takes from, give the
   rounds of their depots, and of their pairs where their slabs are packed, back to the slab
   layer; served, just missed (its count comes after), is left alone. */
static void mag_own_sweep(tcache_t *tc, unsigned served) {
  if (!opt.sweep_ms || tc->misses % MAG_SWEEP_MISSES) return;
  uint64_t now = os_now_ns(), interval = (uint64_t)opt.sweep_ms * 1000000u;
  if (now - tc->swept_at < interval) return;
  tc->swept_at = now;
  for (unsigned c = 1; c <= SC_COUNT; c++) {
    uint32_t allocs = (uint32_t)STAT_READ(tc->own.allocs[c]);
    if (c == served || allocs != tc->allocs_swept[c]) {
      tc->allocs_swept[c] = allocs;
      continue;
    }
    cache_t *cp = &malloc_caches[c];
    if (!(allocs || STAT_READ(tc->own.frees[c])) || !depot_sweep(cp, now, interval)) continue;
    if (tc->own.top[c] != MAG_TOP_NONE && slab_packed(cp)) { /* the pair stays, empty (theory 9) */
      mag_pair_t t = mag_own_unpack(tc, c);
      mag_give_home(cp, t.loaded);
      mag_give_home(cp, t.prev);
      mag_own_pack(tc, c, t);
    }
  }
}

/* Misses of class c (cache cp) on tc's own magazines: under tc's lock, on the pair unpacked. */
static void *mag_own_class_alloc_miss(cache_t *cp, tcache_t *tc, unsigned c) {
  lock_t *held = mag_miss_begin(cp, true);
  mag_pair_t t = mag_own_unpack(tc, c);
  void *obj = mag_alloc_refill(cp, &t, NULL, DEPOT_MAKE);
  mag_own_pack(tc, c, t);
  mag_own_sweep(tc, c);
  lock_release(held);
  return obj;
}

static bool mag_own_class_free_miss(cache_t *cp, tcache_t *tc, unsigned c, void *obj) {
  lock_t *held = mag_miss_begin(cp, false);
  mag_pair_t t = mag_own_unpack(tc, c);
  bool kept = mag_free_room(cp, &t, obj, NULL, DEPOT_MAKE);
  mag_own_pack(tc, c, t);
  mag_own_sweep(tc, c);
  lock_release(held);
  return kept;
}

/* A miss of malloc's class c after the fast path (or without it: memalign), wherever the
   thread's magazines of c are: the CPU's, its own, or none after its exit (tcache_dead is
   shared: its counts stay untouched). */
static void *mag_class_alloc_miss(tcache_t *tc, unsigned c) {
  cache_t *cp = &malloc_caches[c];
  if (tc == &tcache_dead) return mag_direct_alloc(cp);
#if RSEQ_SUPPORTED
  if (tc->cpus) return mag_cpu_alloc_miss(cp, c);
#endif
  return mag_own_class_alloc_miss(cp, tc, c);
}

/* False when no magazine took p (a thread past its exit has none): the caller frees it to the
   slab layer. */
static bool mag_class_free_miss(tcache_t *tc, unsigned c, void *p) {
  cache_t *cp = &malloc_caches[c];
  if (tc == &tcache_dead) return false;
#if RSEQ_SUPPORTED
  if (tc->cpus) return mag_cpu_free_miss(cp, c, p);
#endif
  return mag_own_class_free_miss(cp, tc, c, p);
}

void *mag_malloc(unsigned c, size_t size) {
  tcache_t *tc = mag_self();
  mag_fold_cpu_counts(tc, c);
  void *p = fast_pop(tc, c); /* counts itself */
  if (!p) {
    if (!(p = mag_class_alloc_miss(tc, c))) {
      errno = ENOMEM;
      return NULL;
    }
    mag_count_miss(tc, c, true);
  }
  *(uintptr_t *)p = 0;
  if (tc != &tcache_dead) STAT_ADD(tc->bytes_requested, size);
  return p;
}

/* The thread's own loaded magazine of class c, whose top is top, ran out (alloc) or filled up:
   if the previous one has rounds (room), they trade places, between fast_enter and fast_leave
   and without the tcache's lock (mag_reclaim.c: how the reaper allows it). Returns the top now
   loaded, or NULL: the previous one cannot serve either, or the sentinel is loaded (how the
   reaper parks a class, and with which the owner never trades). Finding the magazine at
   either end of it reads one word. */
static void **mag_own_trade(tcache_t *tc, unsigned c, void **top, bool alloc) {
  mag_t *prev = tc->own.prev[c];
  if (top == MAG_TOP_NONE || (alloc ? prev->n == 0 : prev->n == prev->cap)) return NULL;
  mag_t *m = mag_top_unload(top);
  void **traded = mag_top_load(prev);
  __atomic_store_n(&tc->own.prev[c], m, __ATOMIC_RELAXED);
  __atomic_store_n(&tc->own.top[c], traded, __ATOMIC_RELAXED);
  return traded;
}

/* Pops (pushes) after a trade of the thread's own pair of class c; NULL (0) where it did not
   trade. Counts the operation. */
static void *mag_own_pop_traded(tcache_t *tc, unsigned c) {
  void **top = mag_own_trade(tc, c, fast_enter(tc, c), true);
  void *p = top ? fast_own_pop(tc, c, top) : NULL;
  fast_leave(tc);
  return p;
}

static int mag_own_push_traded(tcache_t *tc, unsigned c, void *p) {
  void **top = mag_own_trade(tc, c, fast_enter(tc, c), false);
  int pushed = top && fast_own_push(tc, c, top, p);
  fast_leave(tc);
  return pushed;
}

void *mag_malloc_traded(size_t size) {
  tcache_t *tc = mag_tls;
  unsigned c = size <= SC_SMALL_MAX ? sc_of(size) : 0;
  void *p = NULL;
  if (!c) return NULL;
#if RSEQ_SUPPORTED
  if (tc->cpus) {
    if (tc->cpu_counts[c].allocs >> 31) return NULL; /* the slow path folds it (mag.h) */
    if ((p = mag_cpu_pop_traded(tc->cpus, c))) STAT_ADD(tc->cpu_counts[c].allocs, 1);
  } else
#endif
    p = mag_own_pop_traded(tc, c); /* counts itself */
  if (!p) return NULL;
  *(uintptr_t *)p = 0;
  STAT_ADD(tc->bytes_requested, size);
  return p;
}

void mag_free(unsigned c, void *p) {
  uintptr_t a = (uintptr_t)p;
  if (!sc_is_object_start(c, a))
    report_heap_error("invalid free", p, "interior pointer, not the start of a block");
  if (*(uintptr_t *)p == (a ^ mag_consts.secret))
    report_heap_error("double free", p, "block already free");
  *(uintptr_t *)p = a ^ mag_consts.secret;
  tcache_t *tc = mag_self();
  if (tc->cpus && STAT_READ(tc->cpu_counts[c].frees) == MAG_FREES_UNSEEN) {
    bool home = STAT_READ(tc->cpu_counts[c].allocs) == 0; /* allocated elsewhere (theory 6) */
    __atomic_store_n(&tc->cpu_counts[c].frees, home, __ATOMIC_RELAXED); /* else counted below */
    if (home) {
      mag_direct_free(&malloc_caches[c], p);
      return;
    }
  }
  mag_fold_cpu_counts(tc, c);
  if (fast_push(tc, c, p)) return; /* counted */
#if RSEQ_SUPPORTED
  if (tc->cpus && mag_cpu_push_traded(tc->cpus, c, p)) {
    STAT_ADD(tc->cpu_counts[c].frees, 1); /* folded above: no wrap */
    return;
  }
#endif
  if (!tc->cpus && mag_own_push_traded(tc, c, p)) return; /* counted */
  mag_count_miss(tc, c, false);
  if (!mag_class_free_miss(tc, c, p)) mag_direct_free(&malloc_caches[c], p);
}

unsigned mag_miss_weight(unsigned c) {
  tcache_t *tc = mag_tls;
  if (tc->cpus) return depot_cap(&malloc_caches[c]) + 1;
  unsigned cap = mag_top_find(fast_enter(tc, c), NULL)->cap; /* busy: the reaper leaves it */
  fast_leave(tc);
  return cap + 1;
}

void mag_large_count(size_t size, int sign) {
  tcache_t *tc = mag_self();
  if (tc == &tcache_dead) return;
  if (sign > 0) {
    __atomic_add_fetch(&mag_large_requested, size, __ATOMIC_RELAXED);
    STAT_ADD(tc->large_allocs, 1);
    STAT_ADD(tc->bytes_requested, size);
  } else {
    STAT_ADD(tc->large_frees, 1);
  }
}

void mag_to_depot(cache_t *cp, mag_t *m) {
  if (m == &mag_empty) return;
  mag_held_add(-(ptrdiff_t)(m->n * cp->size));
  depot_put(cp, m);
}

void mag_pair_to_depot(cache_t *cp, mag_pair_t *t) {
  mag_to_depot(cp, t->loaded);
  mag_to_depot(cp, t->prev);
  t->loaded = t->prev = &mag_empty;
}

/* ---- thread exit, trim, statistics, fork ---- */

/* Gives the thread's own magazines of malloc's classes to the depots. */
static void mag_thread_flush(tcache_t *tc) {
  lock_acquire(&tc->lock);
  for (unsigned c = 1; c <= SC_COUNT && !tc->cpus; c++) {
    mag_pair_t t = mag_own_unpack(tc, c);
    mag_pair_to_depot(&malloc_caches[c], &t);
    mag_own_pack(tc, c, t);
  }
  lock_release(&tc->lock);
}

void mag_flush_self(void) {
  tcache_t *tc = mag_tls;
  if (tc != &tcache_boot && tc != &tcache_dead) mag_thread_flush(tc);
}

/* Adds the counts of thread tc to sum. */
static void mag_sum_thread(mag_totals_t *sum, tcache_t *tc) {
  for (unsigned c = 1; c <= SC_COUNT; c++) {
    if (tc->cpus) {
      sum->allocs[c] += STAT_READ(tc->cpu_counts[c].allocs);
      sum->frees[c] += mag_frees_seen(STAT_READ(tc->cpu_counts[c].frees));
    } else {
      sum->allocs[c] += STAT_READ(tc->own.allocs[c]);
      sum->frees[c] += STAT_READ(tc->own.frees[c]);
    }
  }
  sum->bytes_requested += STAT_READ(tc->bytes_requested);
  sum->large_allocs += STAT_READ(tc->large_allocs);
  sum->large_frees += STAT_READ(tc->large_frees);
}

/* With mag_registry_lock held: links in the threads that started, then takes out those that
   exited. Leaving first: a thread pushes its tcache onto the pending list before the leaving
   one, so one taken from the leaving list is either linked already or on the pending list
   taken next. */
static void mag_registry_settle(void) {
  tcache_t *left = __atomic_exchange_n(&mag_registry_leaving, NULL, __ATOMIC_ACQUIRE);
  tcache_t *tc = __atomic_exchange_n(&mag_registry_pending, NULL, __ATOMIC_ACQUIRE);
  for (tcache_t *next; tc; tc = next) {
    next = tc->next;
    tc->next = mag_registry.next;
    tc->prev = &mag_registry;
    mag_registry.next->prev = tc;
    mag_registry.next = tc;
    mag_folded.threads_ever++;
  }
  for (tcache_t *next; left; left = next) { /* its object caches' magazines and counts */
    next = left->leaving;
    mag_slots_to_depot(left);
    left->prev->next = left->next;
    left->next->prev = left->prev;
    mag_sum_thread(&mag_folded, left);
    left->leaving = mag_registry_retired;
    mag_registry_retired = left;
  }
}

void mag_registry_enter(void) {
  lock_acquire(&mag_registry_lock);
  mag_registry_settle();
}

void mag_registry_leave(void) {
  for (;;) {
    tcache_t *retired = mag_registry_retired;
    mag_registry_retired = NULL;
    lock_release(&mag_registry_lock);
    for (tcache_t *next; retired; retired = next) { /* memory back, a munmap perhaps: unlocked */
      next = retired->leaving;
      mag_slots_unmap(retired);
      meta_free(retired->cpus ? &tcache_cpu_pool : &tcache_pool, retired);
    }
    /* threads that exited while it was held: taken out now, unless another holds it again */
    if (!__atomic_load_n(&mag_registry_leaving, __ATOMIC_RELAXED) || !lock_try(&mag_registry_lock))
      return;
    mag_registry_settle();
  }
}

/* A thread's exit: its magazines go to the depots; its tcache leaves the registry now where the
   lock is free, else when its holder lets it go (mag_registry_leave): an exit never waits. */
void mag_thread_exit(void *arg) {
  tcache_t *tc = arg;
  mag_thread_flush(tc);
  for (unsigned c = 1; c <= SC_COUNT && tc->homed; c++) /* shared again (theory 10) */
    slab_disown(&malloc_caches[c], tc->tid);
  prof_clock_thread_exit();
  mag_tls = &tcache_dead;
  __atomic_sub_fetch(&mag_threads_live, 1, __ATOMIC_RELAXED);
  mag_registry_push(&mag_registry_leaving, tc, &tc->leaving);
  if (lock_try(&mag_registry_lock)) {
    mag_registry_settle();
    mag_registry_leave();
  }
}

void mag_totals(mag_totals_t *out) {
  mag_registry_enter();
  *out = mag_folded;
  out->large_bytes_requested = __atomic_load_n(&mag_large_requested, __ATOMIC_RELAXED);
  for (tcache_t *tc = mag_registry.next; tc != &mag_registry; tc = tc->next) {
    mag_sum_thread(out, tc);
    out->threads_live++;
  }
  mag_registry_leave();
}

size_t mag_thread_rows(mag_thread_row_t *rows, size_t max) {
  static mag_totals_t one; /* (mag_registry_lock) */
  size_t n = 0;
  mag_registry_enter();
  for (tcache_t *tc = mag_registry.next; tc != &mag_registry && max; tc = tc->next) {
    memset(&one, 0, sizeof one);
    mag_sum_thread(&one, tc);
    mag_thread_row_t r = {tc->tid, one.large_allocs, one.large_frees, 0, one.bytes_requested};
    for (unsigned c = 1; c <= SC_COUNT; c++) {
      r.allocs += one.allocs[c];
      r.frees += one.frees[c];
    }
    lock_acquire(&tc->lock);
    r.misses = tc->misses;
    lock_release(&tc->lock);
    if (n < max) {
      rows[n++] = r;
      continue;
    }
    size_t least = 0; /* full: the least busy row gives way to a busier one */
    for (size_t i = 1; i < max; i++)
      if (rows[i].allocs + rows[i].frees < rows[least].allocs + rows[least].frees) least = i;
    if (r.allocs + r.frees > rows[least].allocs + rows[least].frees) rows[least] = r;
  }
  mag_registry_leave();
  return n;
}

void mag_registry_lock_stats(lock_stats_t *lock) {
  lock_stats_add(lock, &mag_registry_lock);
}

void mag_thread_register(void) {
  (void)mag_self();
}

size_t mag_thread_stacks(uintptr_t *stacks, uint32_t *tids, size_t max) {
  size_t n = 0;
  mag_registry_enter();
  for (tcache_t *tc = mag_registry.next; tc != &mag_registry && n < max; tc = tc->next)
    if (tc != mag_tls) {
      stacks[n] = tc->stack;
      tids[n++] = tc->tid;
    }
  mag_registry_leave();
  return n;
}

/* The registry lock, held from prepare to parent, keeps the CPUs' records from being set up
   in between: the count locked is the count unlocked. */
void mag_fork_prepare(void) {
  mag_registry_enter();
  (void)mag_cpu_lock_all();
}

void mag_fork_parent(void) {
  mag_cpu_unlock_all(mag_cpu_count());
  mag_registry_leave();
}

/* In the child only the forking thread exists: the other threads' caches are gone with them
   (their magazines are leaked, bounded by their size), and the registry holds just this one.
   Returns whether there were such threads. */
bool mag_fork_child(void) {
  lock_init(&mag_registry_lock);
  mag_cpu_reset_locks();
  tcache_t *self = mag_tls;
  /* threads that started or exited during the fork */
  bool others = mag_registry_pending != NULL || mag_registry_leaving != NULL;
  mag_registry_pending = mag_registry_leaving = mag_registry_retired = NULL;
  for (tcache_t *tc = mag_registry.next, *next; tc != &mag_registry; tc = next) {
    next = tc->next;
    if (tc != self) {
      mag_sum_thread(&mag_folded, tc);
      others = true;
    }
  }
  mag_registry.next = mag_registry.prev = &mag_registry;
  __atomic_store_n(&mag_threads_live, 0, __ATOMIC_RELAXED);
  if (self != &tcache_boot && self != &tcache_dead) {
    __atomic_store_n(&mag_threads_live, 1, __ATOMIC_RELAXED);
    lock_init(&self->lock);
    self->tid = os_thread_id();
    self->next = self->prev = &mag_registry;
    mag_registry.next = mag_registry.prev = self;
  }
  return others;
}
