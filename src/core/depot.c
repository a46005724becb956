/*
 * depot: the magazine layer's backing store (Bonwick & Adams, USENIX 2001, section 3).
 *
 * Theory
 *   1. Per cache, a list of magazines that hold rounds ("full"; a magazine flushed at thread
 *      exit may be partly full, which serves allocation just as well) and a list of empty
 *      magazines. A thread whose loaded and previous magazines are both exhausted trades one
 *      with the depot under the depot lock: an empty one for a full one when allocating, a
 *      full one for an empty one when freeing. So a thread reaches the depot at most once per
 *      `cap` operations, and producer/consumer pairs pass whole magazines through it: the
 *      consumer's frees become the producer's allocations, nothing is stranded. Each list is
 *      kept by the CPU the giver ran on (DEPOT_CPU_LISTS of each), and a taker takes from its
 *      own CPU's first, then from the next that has one: a magazine and the blocks in it were
 *      last written on the giver's CPU, and where threads that pass blocks share CPUs (a thread
 *      and the one it wakes often do) they stay there, where one list handed them to whichever
 *      CPU asked next, every block a line to move between processors
 *      (docs/decisions/depot-cpu-lists.md). The lock is still one.
 *   2. Growth: every exchange first tries the lock; failures are counted, and a depot that
 *      saw DEPOT_WINDOW_CONTENDED of them within DEPOT_HOT_EXCHANGES exchanges, or more than
 *      DEPOT_GROW_CONTENDED within a reap interval, doubles the size of the magazines it makes
 *      from then on, up to cap_max, which halves its lock traffic: many threads passing
 *      magazines through one depot reach the largest size within milliseconds. A depot
 *      that trades DEPOT_HOT_EXCHANGES magazines within DEPOT_HOT_NS doubles them at once,
 *      contended or not, while they hold fewer than DEPOT_HOT_ROUNDS, or, where the threads
 *      that give full magazines take them back, fewer than DEPOT_HOT_BYTES of objects
 *      (hot_max): an exchange costs about two allocations, and a class that hot (one thread
 *      churning batches of a class a little bigger than its two magazines) spends as much on
 *      trips to the depot as on the objects; from 32 rounds on, trips cost a sixteenth at
 *      most, and where producers pass magazines full to consumers, bigger ones only hold more
 *      memory in flight; a thread's own batches of small blocks gain a few percent more up to
 *      a few KiB a magazine (docs/decisions/depot-growth.md).
 *   3. Working set: full_min and empty_min record the lowest list lengths since the last reap;
 *      that many magazines were not needed during the interval, so depot_reap returns exactly
 *      those to the slab layer (their rounds) and to the metadata pool (the magazines).
 *   4. Bound: past DEPOT_FULL_BYTES_MAX of objects in full magazines, a freeing thread's full
 *      magazine goes back to the slab layer instead (the caller drains it: mag.c), so a burst
 *      of frees in one class cannot hold memory that other classes need (their slabs empty and
 *      go back to the arena). The bound is per cache and small (256 KiB, a few magazines):
 *      cached objects freed in random order each pin a slab (docs/decisions/depot-bound.md).
 *      A depot through which threads pass magazines to other threads (a window of
 *      DEPOT_HOT_EXCHANGES exchanges in which at least DEPOT_PASSED_MIN full magazines were
 *      taken, nearly all by threads other than their givers) keeps up to DEPOT_FLOW_BYTES for
 *      DEPOT_FLOW_NS after: producers and consumers scheduled in turns then meet in the depot
 *      instead of in the slab layer, and what the consumers leave behind is taken by the next
 *      reap (theory 3). Threads that free and allocate the same class each (a heap that grows
 *      and shrinks) take their own magazines back as often as others': their depots keep the
 *      small bound, and the objects they free go home, so that a shrunk heap is not scattered
 *      over more pages.
 *   5. Sweep: a thread that stopped allocating a class (mag.c theory 9) asks its depot to give
 *      back its full magazines (depot_sweep). The depot does so once no thread took one for
 *      the sweep interval, and tells the thread it may give back its own: a class nobody
 *      allocates any more needs none, and its cached blocks would keep its slabs from emptying
 *      until the next reap, long after a program's size mix moved on. A depot that producers
 *      take from keeps its magazines, and so do its consumers.
 *   6. Lock order: a depot lock is never held while calling the slab layer or the metadata
 *      pools; it is a leaf below the thread registry. Its holder only links magazines, and
 *      takes no page fault either: malloc's depots are quiet locks (inject.h), which a CPU's
 *      slow path waits for (mag_percpu.c theory 5).
 */
#include "depot.h"
#include "inject.h"
#include "meta.h"
#include "os.h"
#include "slab.h"

#define DEPOT_GROW_CONTENDED 16  /* failed try-locks per reap interval that justify larger mags */
#define DEPOT_WINDOW_CONTENDED 8 /* ... or per DEPOT_HOT_EXCHANGES exchanges: one in eight */
#define DEPOT_FULL_BYTES_MAX ((size_t)256 << 10) /* objects a depot keeps in full magazines */
#define DEPOT_FLOW_BYTES ((size_t)4 << 20)       /* ... while threads pass magazines through it */
#define DEPOT_PASSED_MIN 16      /* full magazines taken in a window, nearly all passed (7 in 8) */
#define DEPOT_FLOW_NS 100000000u /* 100 ms: several scheduler turns */
#define DEPOT_HOT_EXCHANGES 64   /* a power of two */
#define DEPOT_HOT_NS 10000000u   /* 10 ms: 6,400 exchanges a second */
#define DEPOT_HOT_ROUNDS 32      /* a hot depot grows magazines smaller than this, no further */
#define DEPOT_HOT_BYTES 8192     /* ... but those its threads take back, up to this of objects */
#define MAG_POOLS 11             /* magazine capacities 1, 2, 4, ..., MAG_CAP_MAX */

mag_t mag_empty = {0, 0, 0, 0, NULL};

static meta_pool_t mag_pools[MAG_POOLS] = {
/* Room for one word above the last round: a thread's loaded magazine marks its end there (mag.c
   theory 8). */
#define MAG_POOL(k) META_POOL(META_LINES(sizeof(mag_t) + sizeof(void *) * (((size_t)1 << (k)) + 1)))
    MAG_POOL(0), MAG_POOL(1), MAG_POOL(2), MAG_POOL(3), MAG_POOL(4),  MAG_POOL(5),
    MAG_POOL(6), MAG_POOL(7), MAG_POOL(8), MAG_POOL(9), MAG_POOL(10),
#undef MAG_POOL
};

_Static_assert(MAG_CAP_MAX == 1u << (MAG_POOLS - 1), "one pool per magazine capacity");

static unsigned mag_pool_index(uint32_t cap) {
  return (unsigned)__builtin_ctz(cap);
}

static void mag_destroy(mag_t *m) {
  meta_free(&mag_pools[mag_pool_index(m->cap)], m);
}

void depot_init(cache_t *cp, uint32_t cap, uint32_t cap_max) {
  depot_t *d = &cp->depot;
  lock_init(&d->lock);
  d->cap = cap;
  d->cap_max = cap_max;
  size_t rounds = DEPOT_HOT_BYTES / cp->size;
  d->hot_max = rounds <= DEPOT_HOT_ROUNDS ? DEPOT_HOT_ROUNDS
               : rounds < cap_max         ? (uint32_t)rounds
                                          : cap_max;
}

/* Takes d's lock; false where it is held and the caller only tries it (DEPOT_TRY). A try that
   failed counts toward growth (theory 2) either way: atomics, since a caller that does not wait
   counts without the lock. */
static bool depot_lock(depot_t *d, unsigned how) {
  if (!lock_try(&d->lock)) {
    __atomic_add_fetch(&d->contended, 1, __ATOMIC_RELAXED);
    __atomic_add_fetch(&d->window_contended, 1, __ATOMIC_RELAXED);
    if (how & DEPOT_TRY) return false;
    lock_acquire(&d->lock);
  }
  INJECT(INJECT_DEPOT);
  return true;
}

void depot_wait(cache_t *cp) {
  lock_wait_free(&cp->depot.lock);
}

static void push(mag_t **list, uint32_t *count, mag_t *m) {
  m->next = *list;
  *list = m;
  (*count)++;
}

static mag_t *pop(mag_t **list, uint32_t *count, uint32_t *low) {
  mag_t *m = *list;
  if (!m) return NULL;
  *list = m->next;
  if (--*count < *low) *low = *count;
  return m;
}

/* The list of the CPU the thread runs on (theory 1). */
static unsigned depot_cpu_list(void) {
  return os_cpu_now() % DEPOT_CPU_LISTS;
}

/* Pushes m on the list of lists for the CPU the thread runs on. */
static void push_here(mag_t **lists, uint32_t *count, mag_t *m) {
  push(&lists[depot_cpu_list()], count, m);
}

/* Takes a magazine from lists (count on them in all): from list `list` where it has one, else
   from the next that has. */
static mag_t *pop_near(mag_t **lists, uint32_t *count, uint32_t *low, unsigned list) {
  for (unsigned i = 0; i < DEPOT_CPU_LISTS && *count; i++) {
    mag_t **l = &lists[(list + i) % DEPOT_CPU_LISTS];
    if (*l) return pop(l, count, low);
  }
  return NULL;
}

/* Gives the rounds of the magazines on list ms, taken off a depot, back to their slabs and the
   magazines to their pools; returns the rounds. */
static uint64_t mags_home(cache_t *cp, mag_t *ms) {
  uint64_t rounds = 0;
  for (mag_t *m; (m = ms) != NULL;) {
    ms = m->next;
    rounds += m->n;
    slab_free(cp, m->rounds, m->n);
    mag_destroy(m);
  }
  return rounds;
}

static void depot_grow(depot_t *d) {
  if (d->cap < d->cap_max)
    __atomic_store_n(&d->cap, d->cap * 2, __ATOMIC_RELAXED); /* depot_cap reads it unlocked */
}

/* Counts an exchange that took a full magazine (take; passed: given by another thread) or gave
   one (depot lock held); at the end of each window of DEPOT_HOT_EXCHANGES, grows the magazines
   of a hot or contended depot and notes whether threads pass magazines through it (theory 2,
   4). */
static void depot_exchanged(depot_t *d, bool take, bool passed) {
  d->window_takes += take;
  d->window_passed += passed;
  if (++d->exchanges % DEPOT_HOT_EXCHANGES) return;
  uint64_t now = os_now_ns();
  bool passing = d->window_takes >= DEPOT_PASSED_MIN && d->window_passed * 8 >= d->window_takes * 7;
  bool hot =
      now - d->hot_since < DEPOT_HOT_NS && d->cap < (passing ? DEPOT_HOT_ROUNDS : d->hot_max);
  if (hot || __atomic_load_n(&d->window_contended, __ATOMIC_RELAXED) >= DEPOT_WINDOW_CONTENDED)
    depot_grow(d);
  if (passing) d->flow_until = now + DEPOT_FLOW_NS;
  d->hot_since = now;
  d->window_takes = d->window_passed = 0;
  __atomic_store_n(&d->window_contended, 0, __ATOMIC_RELAXED);
}

/* The bytes of objects the depot keeps in full magazines now (theory 4; its lock held). */
static size_t depot_bound(const depot_t *d) {
  return os_now_ns() < d->flow_until ? DEPOT_FLOW_BYTES : DEPOT_FULL_BYTES_MAX;
}

mag_t *depot_alloc_exchange(cache_t *cp, mag_t *give, uint32_t taker, unsigned how) {
  depot_t *d = &cp->depot;
  unsigned list = depot_cpu_list();
  if (!depot_lock(d, how)) return DEPOT_BUSY;
  mag_t *full = pop_near(d->full, &d->nfull, &d->full_min, list);
  if (full) {
    d->takes++;
    depot_exchanged(d, true, full->giver != taker);
    if (give != &mag_empty) push(&d->empty[list], &d->nempty, give);
  }
  lock_release(&d->lock);
  return full;
}

mag_t *depot_mag_new(uint32_t cap) {
  mag_t *m = meta_alloc(&mag_pools[mag_pool_index(cap)]);
  if (!m) return NULL;
  m->cap = cap;
  /* Its pages mapped now, under no lock: its rounds and end marks are written under a CPU's
     lock, where a page fault would be a preemption point (mag_percpu.c theory 5). */
  os_touch(m, sizeof *m + (cap + 1) * sizeof(void *));
  return m;
}

uint32_t depot_cap(cache_t *cp) {
  return __atomic_load_n(&cp->depot.cap, __ATOMIC_RELAXED);
}

mag_t *depot_empty_mag(cache_t *cp, unsigned how) {
  depot_t *d = &cp->depot;
  unsigned list = depot_cpu_list();
  if (!depot_lock(d, how)) return DEPOT_BUSY;
  mag_t *m = pop_near(d->empty, &d->nempty, &d->empty_min, list);
  uint32_t cap = d->cap;
  lock_release(&d->lock);
  if (m && m->cap == cap) return m;
  if (m) mag_destroy(m); /* made before the depot grew its magazines, or a thread's first */
  return how & DEPOT_MAKE ? depot_mag_new(cap) : NULL;
}

void depot_stock(cache_t *cp) {
  mag_t *m = depot_mag_new(depot_cap(cp));
  if (m) depot_put(cp, m);
}

mag_t *depot_free_exchange(cache_t *cp, mag_t *give, unsigned how) {
  depot_t *d = &cp->depot;
  unsigned list = depot_cpu_list();
  if (!depot_lock(d, how)) return DEPOT_BUSY;
  size_t kept = (size_t)d->nfull * d->cap * cp->size;
  /* the small bound first: below it no clock is read (depot_bound) */
  if (kept >= DEPOT_FULL_BYTES_MAX && kept >= depot_bound(d)) {
    lock_release(&d->lock); /* full enough: the caller gives these objects back to the slabs */
    return give;
  }
  mag_t *m = pop_near(d->empty, &d->nempty, &d->empty_min, list);
  if (m && m->cap == d->cap) { /* the common case: one trip */
    push(&d->full[list], &d->nfull, give);
    depot_exchanged(d, false, false);
    lock_release(&d->lock);
    return m;
  }
  if (m) push(&d->empty[list], &d->nempty, m); /* outdated size: depot_empty_mag replaces it */
  lock_release(&d->lock);
  m = depot_empty_mag(cp, how);
  if (m && m != DEPOT_BUSY) depot_put(cp, give); /* waits: rare (the depot's size just grew) */
  return m;
}

void depot_put(cache_t *cp, mag_t *m) {
  depot_t *d = &cp->depot;
  depot_lock(d, 0);
  if (m->n)
    push_here(d->full, &d->nfull, m);
  else
    push_here(d->empty, &d->nempty, m);
  lock_release(&d->lock);
}

bool depot_sweep(cache_t *cp, uint64_t now, uint64_t idle_ns) {
  depot_t *d = &cp->depot;
  mag_t *fulls = NULL;
  lock_acquire(&d->lock);
  bool idle = d->takes == d->takes_swept && now - d->swept_since >= idle_ns;
  if (d->takes != d->takes_swept) {
    d->takes_swept = d->takes;
    d->swept_since = now;
  }
  if (idle) { /* every full magazine */
    uint32_t junk = 0, none = 0;
    while (d->nfull)
      push(&fulls, &junk, pop_near(d->full, &d->nfull, &none, 0));
    d->full_min = 0;
  }
  lock_release(&d->lock);
  if (fulls) __atomic_add_fetch(&cp->swept, mags_home(cp, fulls), __ATOMIC_RELAXED);
  return idle;
}

void depot_figures(cache_t *cp, depot_figures_t *f) {
  depot_t *d = &cp->depot;
  lock_acquire(&d->lock);
  f->full_mags = d->nfull;
  f->empty_mags = d->nempty;
  f->mag_rounds = d->cap;
  f->exchanges = d->exchanges;
  f->rounds = 0;
  for (unsigned i = 0; i < DEPOT_CPU_LISTS; i++)
    for (mag_t *m = d->full[i]; m; m = m->next) /* bounded: DEPOT_FULL_BYTES_MAX, thread exits */
      f->rounds += m->n;
  lock_release(&d->lock);
}

void depot_reap(cache_t *cp, bool everything) {
  depot_t *d = &cp->depot;
  mag_t *fulls = NULL, *empties = NULL;
  uint32_t junk = 0, none = 0;
  lock_acquire(&d->lock);
  uint32_t nf = everything ? d->nfull : d->full_min, ne = everything ? d->nempty : d->empty_min;
  for (unsigned list = 0; nf-- > 0; list++)
    push(&fulls, &junk, pop_near(d->full, &d->nfull, &none, list));
  for (unsigned list = 0; ne-- > 0; list++)
    push(&empties, &junk, pop_near(d->empty, &d->nempty, &none, list));
  d->full_min = d->nfull;
  d->empty_min = d->nempty;
  if (__atomic_exchange_n(&d->contended, 0, __ATOMIC_RELAXED) > DEPOT_GROW_CONTENDED) depot_grow(d);
  lock_release(&d->lock);
  mags_home(cp, fulls);
  for (mag_t *m; (m = pop(&empties, &junk, &none)) != NULL;)
    mag_destroy(m);
}
