/*
 * mag_percpu: per-CPU magazines, one record of pairs of malloc's classes per possible CPU
 * (mag_cpu_t, mag.h), for the threads started while threads outnumber the CPUs (the first
 * percpu_threads keep magazines of their own: docs/decisions/per-cpu-magazines.md). Only where
 * a thread has an rseq area, glibc's or, where glibc has none, magpie's own (os_fence.c theory
 * 2), and never with percpu=0 or under ThreadSanitizer. The records, a page each, are mapped
 * at start but set up only when the first thread takes them: a process that never has that
 * many threads touches none of them, however many CPUs the machine may hold, and its reaps and
 * forks do not walk them.
 *
 * Theory
 *   1. Pop and push are restartable sequences on the CPU's loaded magazine (rseq.h, mag_fast.h),
 *      correct against preemption, migration and signals without atomics. Memory is bounded
 *      by CPUs, not threads; each thread keeps only its counts (mag.h). The CPU's pair holds
 *      the loaded magazine as its top, both its ends marked, as a thread's own (mag.c theory
 *      8): a sequence commits the top, and the magazine's count is stale while it is loaded.
 *   2. A loaded magazine that ran out (filled up) trades places with the previous one, if that has
 *      rounds (room), in a sequence whose commit stores the swapped pair whole, and only while the
 *      CPU's lock is free (rseq_trade): first thing on a miss, before sampling or the profiler's
 *      clock (mag_malloc_traded, mag_free), as a thread's own pair does (mag.c theory 8). Else a
 *      working set that straddles a magazine's edge takes the lock at every crossing. Everything
 *      else happens under the CPU's lock, taken so that no trade is in flight (mag_cpu_quiesce): a
 *      thread that reads its CPU after taking the lock there knows it, since a sequence that saw
 *      the lock free has been preempted and starts again; one that took it elsewhere fences the
 *      CPU. A slow path works on a copy of the pair (the loaded magazine found from its top) and
 *      changes only the previous magazine, which then no sequence touches; the new loaded one's
 *      top is swapped in by a sequence that commits only on that CPU and reads the old top last,
 *      which gives the old magazine its count (mag_cpu_install). Both magazines of a pair carry
 *      their end marks, so that a trade can load the previous one. A thread that moved
 *      meanwhile leaves the CPU's loaded magazine in place and parks the new one as the
 *      previous: nothing is lost or shared. The sentinel is the exception: no sequence commits
 *      on it or trades with it, so it is replaced from any CPU, and a pair never holds the
 *      sentinel loaded beside a real magazine (mag_check.c checks).
 *      Without membarrier there is no fence, and no trade: every change takes the lock.
 *   3. Threads taking turns on a CPU get neighbouring objects from its magazines, and write
 *      the same lines once they run apart. So a CPU's refill from the slab layer is dealt out a
 *      line at a time (mag_cpu_spread_lines), and its first refill of a class of blocks smaller
 *      than a line covers MAG_SPREAD_RUNS lines (mag.c's mag_fill_start).
 *   4. The reaper takes the pairs of a CPU that has not missed since its last look: it exchanges
 *      the sentinel's top for each loaded one and fences the CPU (membarrier restarts any
 *      sequence still using one). A sequence that committed between the two stored its top over
 *      the sentinel: that magazine stays the CPU's. Where the sentinel is still there, the
 *      magazine is the reaper's, its count from the top it took. A CPU whose lock is held has
 *      a slow path under way, so it missed: the reap passes it by rather than wait for a holder
 *      that may be preempted (trim waits, mag_reclaim.c).
 *   5. A CPU's lock is never held across the slab layer (its lock, a fresh slab's mapping and
 *      page faults) or any system call but the fence, nor across a page fault of its own (a
 *      fault's return to the program is a preemption point, as a system call's is: a new
 *      magazine's pages are mapped when it is made, depot.c): a thread preempted there would
 *      stall every thread on the CPU that misses (docs/decisions/cross-thread-frees.md). A refill
 *      takes the empty previous magazine out of the pair and fills it after releasing the
 *      lock; a full one the depot does not keep leaves the pair and is drained after; an
 *      empty one the depot lacks is made after (a new magazine may map a metadata chunk), and
 *      the free that needed it goes to the slab layer. Under the lock: pairs and depot trades
 *      only, and a depot's lock is only tried there: where it is held, its holder may be
 *      preempted, and a thread that slept for it under the CPU's lock would queue for its CPU,
 *      once woken, with the lock still held. The slow path lets the CPU's lock go, waits for the
 *      depot's, and starts again (mag_cpu_depot_wait), waiting under the lock that second time
 *      only, when the depot's holder has just let go. Magazines that leave a pair under the
 *      lock (a refill's spare, the reaper's takings) go to the depot after it.
 * Locking: a CPU's lock guards its previous magazines, its misses and any change of a loaded
 * one outside a sequence; a trade only while it is free. It is taken after mag_registry_lock
 * (front/fork.c writes the order).
 */
#include "depot.h"
#include "inject.h"
#include "mag_impl.h"
#include "options.h"
#include "os.h"
#include "rseq.h"

#include <string.h>

_Static_assert(sizeof(mag_cpu_t) == 4096, "rseq.h's sequences find CPU i's record at i << 12");
_Static_assert(offsetof(mag_cpu_t, mags) % 16 == 0 && sizeof(mag_cpu_pair_t) == 16,
               "a trade stores a pair in one aligned 16-byte store");

#define MAG_SPREAD_MAX 64 /* rounds of a CPU's refill that mag_cpu_spread_lines orders */

static char *mag_cpus; /* mag_cpu_t[mag_ncpus], or NULL: magazines are per thread */
#if RSEQ_SUPPORTED
static unsigned mag_ncpus;
#endif
/* The records set up (mag_registry_lock to write; atomic): 0 until the first thread takes
   per-CPU magazines, then mag_ncpus. Every walk over the CPUs walks this many. */
static unsigned mag_ncpus_used;

mag_cpu_t *mag_cpu(unsigned cpu) {
  return (mag_cpu_t *)(mag_cpus + (size_t)cpu * sizeof(mag_cpu_t));
}

bool mag_percpu(void) {
  return mag_cpus != NULL;
}

void mag_cpu_init(void) {
#if RSEQ_SUPPORTED
  unsigned n = os_cpu_possible();
  if (!opt.percpu || n == 0 || !os_rseq_choose(opt.percpu == 2)) return;
  char *cpus = os_map(n * sizeof(mag_cpu_t)); /* zeroed, untouched until mag_cpu_setup */
  if (!cpus) return;
  os_advise_huge(cpus, n * sizeof(mag_cpu_t), false); /* a page per CPU used, not 2 MiB at once */
  mag_consts.rseq_area = os_rseq_offset();
  mag_ncpus = n;
  mag_consts.cpu_fence = os_fence_rseq_register();
  INJECT_QUIET("cpu", &((mag_cpu_t *)cpus)->lock, n, sizeof(mag_cpu_t)); /* theory 5 */
  mag_cpus = cpus;
#endif
}

#if RSEQ_SUPPORTED
/* Gives every CPU's record its sentinel pairs (the locks are free as mapped), once, before the
   first thread takes them: under mag_registry_lock, which fork's prepare holds to the parent
   handler, so that the records fork locked are the records it unlocks. Their pages are mapped
   before the lock (theory 5: a page fault is a preemption point, and a crowd of threads that
   start together would each sleep behind a holder preempted there). */
static void mag_cpu_setup(void) {
  if (__atomic_load_n(&mag_ncpus_used, __ATOMIC_ACQUIRE)) return;
  (void)os_populate(mag_cpus, mag_ncpus * sizeof(mag_cpu_t)); /* failed (Linux < 5.14): faults */
  lock_acquire(&mag_registry_lock);
  if (!mag_ncpus_used) {
    for (unsigned i = 0; i < mag_ncpus; i++)
      for (unsigned c = 0; c <= SC_COUNT; c++)
        mag_cpu(i)->mags[c] = (mag_cpu_pair_t){MAG_TOP_NONE, &mag_empty};
    __atomic_store_n(&mag_ncpus_used, mag_ncpus, __ATOMIC_RELEASE); /* the walks see them set */
  }
  lock_release(&mag_registry_lock);
}
#endif

size_t mag_few_threads(void) {
  return opt.percpu_threads ? opt.percpu_threads : 2 * (size_t)os_cpu_count();
}

/* Per-CPU magazines go to the threads beyond the first percpu_threads (twice the CPUs by
   default), where the thread has a registered rseq area (magpie registers its own here, where
   glibc has none: os_fence.c theory 2). */
char *mag_cpu_for_thread(unsigned live) {
#if RSEQ_SUPPORTED
  if (!mag_cpus || live <= mag_few_threads()) return NULL;
  os_rseq_register();
  int cpu = rseq_cpu(mag_consts.rseq_area);
  if (cpu < 0 || (unsigned)cpu >= mag_ncpus) return NULL;
  mag_cpu_setup();
  return mag_cpus;
#else
  (void)live;
#endif
  return NULL;
}

/* Orders the n rounds of a CPU's magazine, as the slab layer gave them (lowest address first),
   so that pops, from the top, take one block of each cache line before a second of any:
   threads taking turns on the CPU then hold blocks of different lines (theory 3). Only the top
   MAG_SPREAD_MAX rounds, the next to go, are ordered: a slow path keeps its stack small. */
void mag_cpu_spread_lines(void **rounds, uint32_t n) {
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

/* With CPU cpu's lock held: no trade is in flight there, and none starts until it is released
   (theory 2). */
static void mag_cpu_quiesce(unsigned cpu) {
#if RSEQ_SUPPORTED
  if (mag_consts.cpu_fence && (unsigned)rseq_cpu(mag_consts.rseq_area) != cpu)
    (void)os_fence_rseq(cpu); /* fails only for a CPU that is offline, where nothing runs */
#else
  (void)cpu;
#endif
}

#if RSEQ_SUPPORTED
/* Trades the pair of class c of the CPU the thread runs on where its loaded magazine ran out
   (alloc) or filled up (theory 2); returns whether it did. */
static int mag_cpu_trade(char *cpus, unsigned c, int alloc) {
  if (!mag_consts.cpu_fence) return 0;
  INJECT(INJECT_CPU_TRADE);
  return rseq_trade(cpus + MAG_CPU_SLOT(c), cpus + offsetof(mag_cpu_t, lock), mag_consts.rseq_area,
                    alloc);
}

void *mag_cpu_pop_traded(char *cpus, unsigned c) {
  return mag_cpu_trade(cpus, c, 1) ? rseq_pop(cpus + MAG_CPU_SLOT(c), mag_consts.rseq_area) : NULL;
}

int mag_cpu_push_traded(char *cpus, unsigned c, void *p) {
  return mag_cpu_trade(cpus, c, 0) && rseq_push(cpus + MAG_CPU_SLOT(c), mag_consts.rseq_area, p);
}

/* Takes the lock of the CPU the thread runs on (it may move away while it holds it:
   mag_cpu_install checks). */
static mag_cpu_t *mag_cpu_lock(unsigned *cpu) {
  *cpu = (unsigned)rseq_cpu(mag_consts.rseq_area);
  mag_cpu_t *mc = mag_cpu(*cpu);
  lock_acquire(&mc->lock);
  INJECT(INJECT_CPU_LOCKED);
  mag_cpu_quiesce(*cpu);
  return mc;
}

/* A miss on the CPU's magazines (an allocation's or a free's): reaps if it is time, then locks
   the CPU and counts the miss. */
static mag_cpu_t *mag_cpu_miss(cache_t *cp, unsigned *cpu, bool alloc) {
  mag_miss_hook(alloc);
  mag_cpu_t *mc = mag_cpu_lock(cpu);
  STAT_ADD(mc->misses, 1);
  mag_count_cache_miss(cp);
  return mc;
}

/* The CPU's pair of class c as a slow path works on it: its loaded magazine found from its
   top (mag_top_find), whose count, which the CPU's sequences change, stays unread. */
static mag_pair_t mag_cpu_pair(mag_cpu_t *mc, unsigned c) {
  return (mag_pair_t){mag_top_find(mc->mags[c].top, NULL), mc->mags[c].prev};
}

/* Makes t, a copy of the CPU's pair of class c as a slow path left it, the CPU's, both
   magazines marked for the CPU's sequences (mag_top_load). A loaded magazine changes in a
   sequence on that CPU, since one of its sequences may still be working on it, which also
   gives the top the old one had last, and so its count; the sentinel, on which no sequence
   commits anything, is replaced from anywhere. If the thread has moved off the CPU and a real
   magazine is loaded there, the CPU keeps it and the new one becomes the previous (the old
   previous is already in the new one's place or the depot's). Either way the sentinel stays
   loaded only beside the sentinel (mag.h). */
static void mag_cpu_install(mag_cpu_t *mc, unsigned cpu, unsigned c, const mag_pair_t *t) {
  mag_cpu_pair_t *slot = &mc->mags[c];
  mag_t *loaded = mag_top_find(slot->top, NULL);
  (void)mag_top_load(t->prev); /* marked for a trade to load it */
  void **old;
  if (t->loaded == loaded) {
    slot->prev = t->prev;
  } else if (loaded == &mag_empty) {
    __atomic_store_n(&slot->top, mag_top_load(t->loaded), __ATOMIC_RELEASE); /* rounds first */
    slot->prev = t->prev;
  } else if (rseq_swap_on(cpu, (void **)&slot->top, mag_top_load(t->loaded), (void **)&old,
                          mag_consts.rseq_area)) {
    loaded->n = (uint32_t)(old - loaded->rounds); /* t->prev: the old loaded one */
    slot->prev = t->prev;
  } else {
    slot->prev = t->loaded;
  }
}

/* The depot's lock was held (DEPOT_TRY): waits for it with the CPU's lock let go (theory 5),
   then takes the lock of the CPU the thread runs on now and the pair of class c again, into
   *t. */
static mag_cpu_t *mag_cpu_depot_wait(cache_t *cp, mag_cpu_t *mc, unsigned *cpu, unsigned c,
                                     mag_pair_t *t) {
  lock_release(&mc->lock);
  depot_wait(cp);
  mc = mag_cpu_lock(cpu);
  *t = mag_cpu_pair(mc, c);
  return mc;
}

/* Returns NULL when memory ran out. Where the depot has no full magazine, the CPU's empty
   previous one is filled from the slab layer without the lock (theory 5), and then joins the
   pair of the CPU the thread runs on, unless that one has found rounds meanwhile. */
void *mag_cpu_alloc_miss(cache_t *cp, unsigned c) {
  unsigned cpu;
  mag_cpu_t *mc = mag_cpu_miss(cp, &cpu, true);
  mag_pair_t t = mag_cpu_pair(mc, c);
  mag_t *fill = NULL;
  void *obj = mag_alloc_refill(cp, &t, &fill, DEPOT_TRY);
  if (fill == DEPOT_BUSY) { /* the second time it waits, the depot's holder just let go */
    mc = mag_cpu_depot_wait(cp, mc, &cpu, c, &t);
    fill = NULL;
    obj = mag_alloc_refill(cp, &t, &fill, 0);
  }
  mag_t *spare = &mag_empty; /* for the depot, once the lock is released */
  if (fill) {
    mc->mags[c].prev = t.prev; /* the sentinel: fill has left the pair */
    lock_release(&mc->lock);
    fill = mag_slab_fill(cp, fill, MAG_HOME_CPU | cpu);
    if (fill->n == 0) { /* out of memory */
      mag_to_depot(cp, fill);
      return NULL;
    }
    obj = fill->rounds[--fill->n];
    mc = mag_cpu_lock(&cpu);
    t = mag_cpu_pair(mc, c);
    if (t.prev->n == 0) {
      spare = t.prev;
      t.prev = t.loaded;
      t.loaded = fill;
    } else {
      spare = fill;
    }
  }
  INJECT(INJECT_CPU_INSTALL);
  mag_cpu_install(mc, cpu, c, &t);
  lock_release(&mc->lock);
  mag_to_depot(cp, spare);
  return obj;
}

/* Returns false when no magazine had room; the caller frees to the slab itself. A full
   previous magazine the depot does not keep is drained without the lock, and a magazine the
   depot lacked is made without it, for the next miss (theory 5). */
bool mag_cpu_free_miss(cache_t *cp, unsigned c, void *obj) {
  unsigned cpu;
  mag_cpu_t *mc = mag_cpu_miss(cp, &cpu, false);
  mag_pair_t t = mag_cpu_pair(mc, c);
  mag_t *drain = NULL;
  bool kept = mag_free_room(cp, &t, obj, &drain, DEPOT_TRY);
  if (drain == DEPOT_BUSY) {
    mc = mag_cpu_depot_wait(cp, mc, &cpu, c, &t);
    drain = NULL;
    kept = mag_free_room(cp, &t, obj, &drain, 0);
  }
  INJECT(INJECT_CPU_INSTALL);
  mag_cpu_install(mc, cpu, c, &t);
  lock_release(&mc->lock);
  if (drain == &mag_empty) {
    depot_stock(cp);
  } else if (drain) {
    mag_drain(cp, drain);
    mag_to_depot(cp, drain);
  }
  return kept;
}
#endif

/* A loaded magazine's top is first exchanged for the sentinel's; the fence then restarts any
   sequence on that CPU that still uses it. A sequence that committed in between stored its top
   over the sentinel: that magazine stays. Where the sentinel is still there, the magazine is
   the caller's, its count from the top it took (theory 4). What it takes goes to the depots
   once the CPU's lock is released (theory 5). */
void mag_cpu_reclaim(bool all) {
  void **taken_top[SC_COUNT + 1];
  mag_t *taken_prev[SC_COUNT + 1];
  for (unsigned i = 0, n = mag_cpu_count(); i < n; i++) {
    mag_cpu_t *mc = mag_cpu(i);
    if (!mag_reap_lock(&mc->lock, all)) continue; /* a slow path there, so not quiet */
    bool quiet = all || mc->misses == mc->misses_seen;
    if (quiet) {
      mag_cpu_quiesce(i);
      bool taken = false;
      for (unsigned c = 1; c <= SC_COUNT; c++) {
        taken_prev[c] = mc->mags[c].prev;
        mc->mags[c].prev = &mag_empty;
        taken_top[c] = MAG_TOP_NONE;
        if (mag_consts.cpu_fence && mc->mags[c].top != MAG_TOP_NONE) {
          taken_top[c] = __atomic_exchange_n(&mc->mags[c].top, MAG_TOP_NONE, __ATOMIC_RELAXED);
          taken = true;
        }
      }
      if (taken) INJECT(INJECT_CPU_PARKED);
      bool fenced = taken && os_fence_rseq(i);
      for (unsigned c = 1; c <= SC_COUNT && taken; c++) {
        void **none = MAG_TOP_NONE;
        if (taken_top[c] == MAG_TOP_NONE) continue;
        if (!fenced) /* no fence, no taking: a sequence may still be using it */
          __atomic_compare_exchange_n(&mc->mags[c].top, &none, taken_top[c], false,
                                      __ATOMIC_RELAXED, __ATOMIC_RELAXED);
        if (!fenced || __atomic_load_n(&mc->mags[c].top, __ATOMIC_RELAXED) != MAG_TOP_NONE)
          taken_top[c] = MAG_TOP_NONE; /* the CPU's still */
      }
    }
    mc->misses_seen = mc->misses;
    lock_release(&mc->lock);
    for (unsigned c = 1; c <= SC_COUNT && quiet; c++) {
      mag_to_depot(&malloc_caches[c], taken_prev[c]);
      if (taken_top[c] != MAG_TOP_NONE)
        mag_to_depot(&malloc_caches[c], mag_top_unload(taken_top[c]));
    }
  }
}

unsigned mag_cpu_count(void) {
  return __atomic_load_n(&mag_ncpus_used, __ATOMIC_ACQUIRE);
}

void mag_cpu_stats(unsigned cpu, uint64_t *misses, lock_stats_t *lock) {
  mag_cpu_t *mc = mag_cpu(cpu);
  *misses = __atomic_load_n(&mc->misses, __ATOMIC_RELAXED); /* written under its lock */
  lock_stats_add(lock, &mc->lock);
}

unsigned mag_cpu_lock_all(void) {
  unsigned n = mag_cpu_count();
  for (unsigned i = 0; i < n; i++)
    lock_acquire(&mag_cpu(i)->lock);
  if (n && mag_consts.cpu_fence)
    (void)os_fence_rseq_all(); /* no trade in flight on any (theory 2) */
  return n;
}

void mag_cpu_unlock_all(unsigned n) {
  for (unsigned i = 0; i < n; i++)
    lock_release(&mag_cpu(i)->lock);
}

void mag_cpu_reset_locks(void) {
  for (unsigned i = 0, n = mag_cpu_count(); i < n; i++)
    lock_init(&mag_cpu(i)->lock);
}
