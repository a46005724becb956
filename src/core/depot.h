/* depot: full and empty magazines shared by all threads, per cache. See depot.c. */
#ifndef MAGPIE_DEPOT_H
#define MAGPIE_DEPOT_H

#include "cache.h"
#include "export.h"

#define MAG_CAP_MAX 1024u /* the largest magazine depot_mag_new makes */

extern MAGPIE_HIDDEN mag_t mag_empty; /* the sentinel: no rounds, no room, never on a depot list */

/* How an exchange may go: DEPOT_MAKE, it may make a new magazine (a caller under a CPU's lock
   does not: a new magazine may map metadata, meta.c, a system call: mag_percpu.c theory 5);
   DEPOT_TRY, it only tries the depot's lock, and returns DEPOT_BUSY, nothing changed, where it is
   held (a caller under a CPU's lock, which waits with depot_wait after letting that go). */
#define DEPOT_MAKE 1u
#define DEPOT_TRY 2u
#define DEPOT_BUSY ((mag_t *)(uintptr_t)1) /* no magazine: odd */

void depot_init(cache_t *cp, uint32_t cap, uint32_t cap_max);
/* A non-empty magazine in exchange for `give` (an empty one, or the sentinel); NULL if none.
   taker: the calling thread's kernel id, which the depot compares with the magazine's giver. */
mag_t *depot_alloc_exchange(cache_t *cp, mag_t *give, uint32_t taker, unsigned how);
/* An empty magazine in exchange for `give` (a full one, its giver set); `give` itself, still full,
   when the depot keeps no more: the caller gives its rounds back to the slab layer; NULL (nothing
   kept) if the depot has no empty magazine and none may be made. */
mag_t *depot_free_exchange(cache_t *cp, mag_t *give, unsigned how);
/* Returns once the depot's lock was free: a CPU's slow path that found it held (DEPOT_TRY) waits
   here, its CPU's lock let go, and tries again. */
void depot_wait(cache_t *cp);
/* A new empty magazine of cap rounds (a power of two up to MAG_CAP_MAX), NULL when out of
   memory. */
mag_t *depot_mag_new(uint32_t cap);
/* The size of the magazines the depot makes now (read without its lock). */
uint32_t depot_cap(cache_t *cp);
/* An empty magazine of the current size: the depot's, or with DEPOT_MAKE, a new one; NULL if
   none (out of memory, or none may be made: a caller under a CPU's lock stocks the depot after). */
mag_t *depot_empty_mag(cache_t *cp, unsigned how);
/* Gives the depot a new empty magazine of its size (no lock held: it may map metadata). */
void depot_stock(cache_t *cp);
/* Takes a thread's magazine for good (thread exit, trim): kept if it holds rounds. */
void depot_put(cache_t *cp, mag_t *m);
/* Returns to the slab layer what the working set did not need since the last reap (all of
   it when everything), and grows the magazine size if the depot lock was contended. (A hot
   depot grows its magazines as it exchanges them.) */
void depot_reap(cache_t *cp, bool everything);

/* A thread stopped allocating cp's objects (mag.c theory 9): where no thread took a full
   magazine from the depot for idle_ns (as sweeps at now saw it), its full magazines go back to
   the slab layer (theory 5), and it returns true: the thread's pair may go too. */
bool depot_sweep(cache_t *cp, uint64_t now, uint64_t idle_ns);

/* A depot's figures for statistics, read under its lock. */
typedef struct depot_figures {
  uint64_t full_mags, empty_mags, rounds; /* rounds: objects in the full magazines */
  uint64_t mag_rounds, exchanges;
} depot_figures_t;
void depot_figures(cache_t *cp, depot_figures_t *f);

#endif
