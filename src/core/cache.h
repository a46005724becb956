/*
 * cache: one object cache = a slab layer + a depot (+ the magazines threads hold for it).
 * malloc's size classes are caches without constructors; magpie_cache_create makes others.
 * The structure is shared by slab.c, depot.c, mag.c and front/caches.c; each field says who
 * owns it.
 */
#ifndef MAGPIE_CACHE_H
#define MAGPIE_CACHE_H

#include "lock.h"
#include "magpie.h"
#include "os.h"
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct slab slab_t;

#define CACHE_HOME_SLOTS 64 /* cache_t's homes: slab.c theory 8 */

/* A magazine: a stack of object pointers (Bonwick). */
typedef struct mag {
  uint32_t n;       /* rounds held */
  uint32_t cap;     /* rounds it can hold; 0 only for mag_empty, the shared sentinel */
  uint32_t fill;    /* rounds the next refill from the slab layer takes (slow start) */
  uint32_t giver;   /* the kernel id of the thread that gave it to the depot full (depot.c) */
  struct mag *next; /* on a depot list */
  void *rounds[];
} mag_t;

/* A depot keeps magazines by the CPU their giver ran on (depot.c theory 1): CPU i's go on list
   i % DEPOT_CPU_LISTS. */
#define DEPOT_CPU_LISTS 16

typedef struct depot {
  lock_t lock;                   /* protects the fields below */
  mag_t *full[DEPOT_CPU_LISTS];  /* non-empty magazines */
  mag_t *empty[DEPOT_CPU_LISTS]; /* empty magazines */
  uint32_t nfull, nempty;        /* on all the lists */
  uint32_t full_min;             /* lowest nfull since the last reap: magazines nobody needed */
  uint32_t empty_min;            /* same for nempty */
  uint32_t cap;                  /* rounds in magazines made from now on */
  uint32_t cap_max;
  uint32_t hot_max;          /* hot growth stops here where givers take back */
  uint64_t contended;        /* lock_try failures since the last reap */
  uint64_t exchanges;        /* magazine exchanges, ever (statistics) */
  uint64_t takes;            /* full magazines taken, ever */
  uint64_t takes_swept;      /* takes when a sweep last saw them change (depot_sweep) */
  uint64_t swept_since;      /* os_now_ns of that sweep */
  uint64_t hot_since;        /* os_now_ns when the current DEPOT_HOT_EXCHANGES began */
  uint32_t window_contended; /* lock_try failures since hot_since */
  uint32_t window_takes;     /* full magazines taken since hot_since */
  uint32_t window_passed;    /* ... of them by a thread other than the one that gave it */
  uint64_t flow_until;       /* os_now_ns until which the depot may keep DEPOT_FLOW_BYTES */
} depot_t;

typedef struct cache {
  /* set at creation, then read-only: the lines every slow path of the cache reads */
  char name[32];
  size_t size;        /* object stride: a multiple of 16 and of the alignment */
  size_t object_size; /* what magpie_cache_create was asked for (0: a size class) */
  uint64_t div_magic; /* UINT64_MAX / size + 1: off % size == 0 iff off * magic <= magic - 1 */
  size_t span;        /* slab span bytes: a power of two, spans aligned to it */
  uint32_t per_slab;  /* objects in a slab */
  uintptr_t tag;      /* page-map tag of its slabs: the size class, or PM_TAG_CACHE */
  unsigned id;        /* malloc: the class; object caches: slot in the threads' tables */
  magpie_ctor_t *ctor;
  magpie_dtor_t *dtor;
  void *arg;
  /* slab layer, on a line of its own, so that its lock's traffic leaves the lines above alone;
     the lock protects the fields below and every slab's free list */
  lock_t slab_lock __attribute__((aligned(OS_LINE)));
  slab_t *partial;          /* slabs with free or never-used objects, first served first */
  slab_t *owned;            /* such slabs that one home's refills take from (slab.c theory 8) */
  unsigned owners;          /* slabs on owned (written under the lock; read unlocked) */
  size_t slabs;             /* slabs held */
  size_t slab_objects_out;  /* objects out of the slabs (written under the lock) */
  size_t free_resident;     /* free bytes whose pages stayed (slab.c theory 7; ditto) */
  unsigned giving_back;     /* slabs whose hollow chunks give-backs and refills work on unlocked */
  struct slab_wake *waking; /* those refills, listed (slab.c theory 6) */
  slab_t *homes[CACHE_HOME_SLOTS]; /* owned slabs by their home's hash, where no other's */
  /* depot, from a line of its own; the miss count beside it, since nearly every miss goes on
     to the depot's lock and fields (one line transfer on many cores, not two) */
  depot_t depot __attribute__((aligned(OS_LINE)));
  uint64_t misses; /* operations that went past a thread's or CPU's magazines (atomic) */
  uint64_t swept;  /* objects sweeps gave back to the slabs (atomic; mag.c theory 9) */
  /* rarely written: object caches' exited threads' counts (mag_registry_lock) and their list
     of all object caches (cache_list_lock) */
  uint64_t exited_allocs, exited_frees;
  struct cache *next;
} cache_t;

extern cache_t malloc_caches[]; /* [1..SC_COUNT]: malloc's size classes */

/* Sets up cp for objects of stride bytes (a multiple of their alignment), tagged tag in the
   page map (a class number, or PM_TAG_CACHE): its slab geometry, locks and depot. */
void cache_setup(cache_t *cp, const char *name, size_t stride, uintptr_t tag);

#endif
