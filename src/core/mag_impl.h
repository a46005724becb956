/*
 * mag_impl: private to the magazine files (mag*.c; scripts/check-layers.py checks): mag.c (thread
 * caches, the registry, the slow paths), mag_percpu.c (per-CPU magazines), mag_slots.c (object-
 * cache slots), mag_reclaim.c (the reaper's parking). Everyone else uses mag.h and mag_fast.h.
 */
#ifndef MAGPIE_MAG_IMPL_H
#define MAGPIE_MAG_IMPL_H

#include "depot.h"
#include "lock.h"
#include "mag.h"

#define MAG_PAIR_EMPTY                                                                             \
  { &mag_empty, &mag_empty }

/* mag.c: the registry of live thread caches, a circular list through mag_registry. */
extern lock_t mag_registry_lock;
extern tcache_t mag_registry;
/* Takes mag_registry_lock, links in the threads that started since and takes out those that
   exited (mag.c): a walk of the registry begins here, and mag_registry_leave ends it, taking
   out the threads that exited meanwhile. */
void mag_registry_enter(void);
void mag_registry_leave(void);

tcache_t *mag_self(void); /* the calling thread's tcache, made on its first call */

/* A magazine of cp to its depot (the sentinel: nothing), and both of a pair, which is left
   empty. */
void mag_to_depot(cache_t *cp, mag_t *m);
void mag_pair_to_depot(cache_t *cp, mag_pair_t *t);

/* The slow paths of a pair whose loaded magazine is empty (alloc) or full (free), called with
   the pair's lock held where it has one: they change only the previous magazine, trading it
   with the depot or filling it from the slab layer, and then make it the loaded one.
   mag_alloc_refill returns NULL when memory ran out; mag_free_room returns false when the
   caller must free obj to the slab layer itself. A caller that must not call the slab layer
   under its lock (a CPU's, mag_percpu.c) passes fill (drain): where that would be needed, the
   previous magazine leaves the pair, which keeps the sentinel in its place, and is handed out
   through *fill (*drain), NULL (false) returned: the caller fills it (mag_slab_fill) or drains
   it (mag_drain) once its lock is released. Such a caller gets no new magazine either (a
   mapping may make it): where one was needed, *drain is the sentinel, false returned, and the
   caller stocks the depot (depot_stock) once its lock is released. how says how the depot
   may be asked (depot.h): with DEPOT_TRY, where the depot's lock is held, *fill (*drain) is
   DEPOT_BUSY, NULL (false) returned, and nothing changed: the caller waits for the depot
   (depot_wait) after releasing its own lock, and tries again. */
void *mag_alloc_refill(cache_t *cp, mag_pair_t *t, mag_t **fill, unsigned how);
bool mag_free_room(cache_t *cp, mag_pair_t *t, void *obj, mag_t **drain, unsigned how);
/* Fills empty magazine p from the slab layer (or a new one in place of the sentinel, or a
   bigger one); returns what is now in p's place, with rounds unless memory ran out. home is
   the thread's or CPU's (MAG_HOME_CPU) whose magazine it is, 0 for one that owns no slabs
   (mag.c theory 10). A CPU's starts bigger and spreads its rounds over cache lines. */
#define MAG_HOME_CPU 0x80000000u /* | the CPU: a CPU's home (threads' are their ids) */
mag_t *mag_slab_fill(cache_t *cp, mag_t *p, uint32_t home);
/* Gives magazine m's rounds back to the slab layer; m is left empty. */
void mag_drain(cache_t *cp, mag_t *m);

/* A magazine loaded as a thread's or a CPU's (mag.c theory 8): its end marks written, its top
   returned (MAG_TOP_NONE for the sentinel). And back: the magazine whose top is top (the
   sentinel for MAG_TOP_NONE), and its count, how far top lies above its lower mark, into *n
   (find, where n is not NULL) or the magazine's n (unload). Only where nobody moves the
   magazine meanwhile: its thread's, or under its thread's or CPU's lock. A CPU's sequences may
   still pop and push on it (they write no mark): find then reads a count already stale. */
void **mag_top_load(mag_t *m);
mag_t *mag_top_find(void **top, uint32_t *n);
mag_t *mag_top_unload(void **top);

/* Takes a thread's or a CPU's lock l for a reap: waits for it where the reap takes everything
   (all: trim, an allocation that found no memory), else only takes it free, since its holder
   is in a slow path, so not idle, and may be preempted there (mag_reclaim.c). Returns whether
   it took it. */
static inline bool mag_reap_lock(lock_t *l, bool all) {
  if (!all) return lock_try(l);
  lock_acquire(l);
  return true;
}

/* Counts a miss past the magazines of cp (statistics; on slow paths only). */
static inline void mag_count_cache_miss(cache_t *cp) {
  __atomic_add_fetch(&cp->misses, 1, __ATOMIC_RELAXED);
}

/* A miss on a thread's own magazines of cp, wrapped in what a miss takes (mag_miss_begin). */
void *mag_own_alloc_miss(cache_t *cp, mag_pair_t *t);
bool mag_own_free_miss(cache_t *cp, mag_pair_t *t, void *obj);

/* One object straight from or to the slab layer, for a thread without magazines of cp. */
void *mag_direct_alloc(cache_t *cp);
void mag_direct_free(cache_t *cp, void *obj);

/* mag_percpu.c */
#define MAG_SPREAD_RUNS 8 /* line-aligned runs in a CPU's first refill of a small class */
void mag_cpu_init(void);
mag_cpu_t *mag_cpu(unsigned cpu); /* CPU cpu's record, cpu < mag_cpu_count() */
/* The per-CPU magazines for a thread starting as the live-th, or NULL: its own. */
char *mag_cpu_for_thread(unsigned live);
/* Threads that keep magazines of their own while CPUs' can be had: percpu_threads, twice the
   CPUs by default. */
size_t mag_few_threads(void);
void mag_cpu_spread_lines(void **rounds, uint32_t n);
/* The CPU's loaded magazine of class c ran out (filled up): it trades places with the previous
   one if that has rounds (room), and the pop (push) is tried again; NULL (0): it was not
   (theory 2). The caller counts the operation. */
void *mag_cpu_pop_traded(char *cpus, unsigned c);
int mag_cpu_push_traded(char *cpus, unsigned c, void *p);
void *mag_cpu_alloc_miss(cache_t *cp, unsigned c);
bool mag_cpu_free_miss(cache_t *cp, unsigned c, void *obj);
/* Gives the magazines of CPUs that have not missed since the last call (all: of every CPU) to
   the depots. */
void mag_cpu_reclaim(bool all);
/* Locks the CPUs' records set up so far, with no trade in flight on any (mag_percpu.c theory 2),
   and returns how many; unlocks that many. Records may be set up in between
   (mag_registry_lock), so the count goes from one to the other. */
unsigned mag_cpu_lock_all(void);
void mag_cpu_unlock_all(unsigned n);
void mag_cpu_reset_locks(void); /* in a fork's child */

/* mag_slots.c: gives a thread's object-cache magazines to the depots (mag_registry_lock held)
   at its exit, and unmaps its slots (after). */
void mag_slots_to_depot(tcache_t *tc);
void mag_slots_unmap(tcache_t *tc);

/* mag_reclaim.c */
void mag_reclaim_init(void);

#endif
