/*
 * slab: spans cut into equal objects, one cache's objects per slab.
 *
 * Theory
 *   1. A slab is a span of cp->span bytes from the arena hugepage_arena names (the slab arena's
 *      huge pages packed with slabs of small objects, or the heap arena; the heap arena too when
 *      no whole huge page can be had, near the end of the address space), aligned to its size,
 *      with an
 *      out-of-band descriptor (from a metadata pool): user data never neighbours metadata.
 *      Every page of the span maps to the descriptor in the page map, tagged with the cache's
 *      size class, so free() finds an object's class in two loads (one in the hot leaf's GiB).
 *   2. Objects are carved lazily: [0, carved) have been handed out at least once, the rest were
 *      never touched, so a fresh slab costs no page faults until used. Returned objects are
 *      marked in the descriptor's bitmap, not linked through themselves: a refill then takes
 *      them lowest address first without reading them (a list through cold objects is a
 *      chain of dependent cache misses), and the slab layer never writes user memory.
 *      Returned objects go out first. A request for a run (a thread's first refill of a class,
 *      mag.c theory 5) takes never-used objects first where the first partial slab has enough:
 *      returned ones may share cache lines with blocks that other threads hold.
 *      Invariant: used + nfree == carved <= per_slab, nfree == the bits set in map, all below
 *      carved, none in the words below scan.
 *   3. The layer is entered only from the magazine layer's slow paths and moves objects in
 *      batches, under the cache's slab_lock (never a global lock): threads on different size
 *      classes never meet here, and cross-thread frees reach a slab only through magazines.
 *   4. Constructed state (object caches): objects leaving the slab layer are constructed,
 *      objects coming back are destructed, outside the lock (constructors may allocate).
 *   5. A slab whose objects have all come back is freed at once: the span goes to the arena,
 *      which decides when pages go back to the kernel. Partial slabs are served first-listed
 *      first, so the slabs that fill last are the ones that empty. The slab lock covers only
 *      the lists and bitmaps: a new slab is made (span, descriptor, page map) before it is
 *      listed, and an empty one is unlisted and unmapped under the lock but its span and
 *      descriptor given back after (slab_make, slab_retire, slab_release). A slab just made is
 *      taken from at once, so none is listed with nothing taken (it would never empty); where
 *      others listed slabs while it was being made (threads that missed together each make
 *      one), theirs serve first and it is given back unless they run out, so that a crowd of
 *      threads starting at once does not leave a crowd of partly used slabs. A fork while a
 *      thread makes one leaves the child its span, unlisted: one span lost there.
 *   6. Giving back pages inside a slab: when a reap keeps nothing (the program went quiet,
 *      retain=0, malloc_trim), each slab's chunks (a page, or span/64 for bigger spans) in its
 *      carved part on which every object is free go back to the kernel and read as zero: a
 *      heap that shrank leaves survivors in most slabs, yet most pages hold none. The free
 *      marker (fastpath.h) of their objects goes with them, so such a "hollow" chunk is taken
 *      back into use before any object on it leaves the slab: it must still read as zero (else
 *      a freed block was written: a double free or a use after free, reported), and its free
 *      objects get their markers back. Until then a double free of one of them is caught when
 *      it comes back here (its bit is set), or when its chunk is taken back. The caller keeps
 *      this away from object caches (constructed objects), and debug and memcheck modes, which
 *      keep their own records in free blocks, turn it off (slab_pages_may_go). Only slabs that
 *      took objects back since the last look are looked at again, so a quiet heap's repeated
 *      reaps cost a walk of the list. The purges run without the slab lock (a big heap's take
 *      tens of milliseconds, and every thread that misses in the class would wait): under the
 *      lock the chunks become hollow and the free objects on them leave the bitmap as if handed
 *      out (`giving` counts the give-backs and refills holding some), so that no refill takes
 *      one and the slab cannot empty; after the purges, under the lock again, they come back.
 *      Meanwhile an object on a hollow chunk whose bit is clear is one of them, and freeing it
 *      is a double free. Where the last such chunk reaches past the carved part, the objects up
 *      to its end are carved first, free, so that none is carved on it meanwhile.
 *      SLAB_GIVE_BATCH slabs at a time.
 *      Taking hollow chunks back into use runs without the lock too (their pages fault in, one
 *      after another, and every thread that misses in the class would wait): a refill that
 *      took objects on them holds the chunks' other free objects the same way, checks and
 *      marks the chunks unlocked, and puts the objects back. It keeps the bits it cleared:
 *      an object that lies on two chunks may be held already by a give-back or refill of the
 *      neighbour, which may put it back, and another refill hand it out, while this refill is
 *      at work; the check passes over such an object's words. Such refills are listed in the
 *      cache (`waking`): no other refill wakes their chunks, and an object on a hollow chunk
 *      whose bit is clear is a held one (freeing it is a double free) where a refill keeps its
 *      bit, or where one of its hollow chunks is no refill's (a give-back's). A refill wakes
 *      chunks of one slab: it stops before a second slab with hollow chunks. The cache's
 *      `giving_back` counts the give-backs and refills at work, so that fork's prepare can
 *      wait for none (lock_acquire_settled).
 *   7. Big blocks give their pages back as they come home, past a budget: a block of
 *      SLAB_BIG_PAGES pages or more that comes back to a slab other blocks keep would hold its
 *      pages resident until the slab empties, and a size mix that moves among such classes
 *      leaves tens of MiB so (docs/decisions/slab-big-pages.md). So where a class's free
 *      objects whose pages stayed (free_resident, an estimate) would pass SLAB_BIG_KEEP and an
 *      eighth of its bytes out of the slabs, the blocks coming back give their pages but the
 *      first (the one with the free marker) in one batch, before they are back (no lock: they
 *      are still the caller's). free_resident grows by the blocks returned with their pages and
 *      shrinks by the free objects taken, given back or not (an object taken is not known to
 *      be either, so the estimate errs low, towards giving back less). Below the budget a
 *      block's pages stay, for the refills that take it soon; a block handed out after giving
 *      its pages faults them in again, zero. Not for object caches (constructed state) nor
 *      without slab_pages_may_go (records in free blocks).
 *   8. Slabs of one's own: on many cores, blocks of two threads (or CPUs) that share a page are
 *      slower to use than blocks on pages of their own, though no line is shared: processors
 *      prefetch a page's neighbouring lines, and another core's writes there cost both cores
 *      misses (docs/decisions/slab-homes.md). So a refill for a home (mag.c theory 10) takes
 *      from the one slab that home owns in the class, else claims the first shared one, else
 *      makes one: owned slabs are on cp->owned, one per home and class at most, shared ones
 *      on cp->partial. A slab handed out to its last object is no one's (full slabs are
 *      unlisted; one that gets an object back is shared). Objects that others free into a
 *      home's slab wait for that home's refills, bounded by one slab a home and class; a homed
 *      thread's exit, a quiet heap's reap and a fork's child share them again (slab_disown).
 *      Refills without a home (0) take shared slabs only, and so do those of classes above
 *      SLAB_HOME_MAX and of object caches: a home's slab keeps pages resident for its blocks
 *      and the free objects among them, the more the bigger the blocks, where a page holds
 *      too few blocks of them for several homes' to meet on it often.
 *   9. Spans at hand: slabs of the slab arena's common span (SLAB_STASH_SPAN: every class of a
 *      page at most) take their spans from a stash kept by CPU (os_cpu_now, SLAB_STASH_SLOTS
 *      slots), which takes SLAB_STASH_SPANS of them from the arena under one hold of its lock
 *      (vmem_alloc_some), and slabs that empty put theirs back there while it has room. The
 *      arena's lock is one for every thread, and a crowd of threads that start at once each
 *      make a slab per class (theory 8). A stash's lock is only tried, never waited for: a
 *      thread whose holder was preempted goes to the arena instead. A quiet heap's reap, a trim
 *      and the reclaim after an allocation found no memory give the stashed spans back
 *      (slab_stash_flush); a fork's child frees the locks.
 *   Lock order: fork.c's list (slab_lock; a stash's lock; the slab and heap arenas' locks;
 *   metadata pools). malloc's slab locks are held across no page fault, as a crowd of threads
 *   that miss in a class waits on them: what a holder writes first (a refill's record of the
 *   chunks it wakes, on its stack; a new descriptor's bitmap, which may reach onto a page of
 *   its own) is mapped before; the test build counts (platform/inject.h).
 */
#include "slab.h"
#include "hugepage.h"
#include "inject.h"
#include "mag.h"
#include "san_hooks.h"
#include "meta.h"
#include "options.h"
#include "os.h"
#include "pagemap.h"
#include "report.h"

vmem_t heap_arena;
size_t slab_hollow_bytes;
bool slab_pages_may_go;

#define SLAB_GIVE_BATCH 64 /* slabs whose pages go back in one stretch without the lock */
#define SLAB_BIG_PAGES 4   /* blocks of this many pages or more give theirs (theory 7) */
#define SLAB_BIG_KEEP ((size_t)1 << 20) /* free bytes a class keeps resident, beyond ... */
#define SLAB_BIG_KEEP_SHIFT 3           /* ... an eighth of its bytes out of the slabs */

/* Descriptors with bitmaps for up to 512, 1536 and SLAB_OBJECTS_MAX objects. */
#define SLAB_POOLS 3
static meta_pool_t slab_pools[SLAB_POOLS] = {META_POOL(128), META_POOL(256), META_POOL(640)};
_Static_assert(sizeof(slab_t) + SLAB_OBJECTS_MAX / 8 <= 640, "the largest bitmap fits");
_Static_assert(sizeof(slab_t) == 64, "the smallest pool's descriptors map 512 objects");

/* Words in the bitmap of a slab of cp: one bit an object. */
static uint32_t slab_map_words(const cache_t *cp) {
  return (cp->per_slab + 63) / 64;
}

static meta_pool_t *slab_pool(const cache_t *cp) {
  size_t bytes = sizeof(slab_t) + slab_map_words(cp) * sizeof(uint64_t);
  for (unsigned i = 0; i < SLAB_POOLS; i++)
    if (bytes <= slab_pools[i].size) return &slab_pools[i];
  report_fatal("slab: more objects in a slab than its bitmap holds", cp, cp->per_slab);
}

/* The list s goes on: its owner's slabs or the shared partial ones (theory 8). */
static slab_t **slab_list_of(cache_t *cp, const slab_t *s) {
  return s->owner ? &cp->owned : &cp->partial;
}

/* Where home's slab is found first: cp->homes[slab_home_slot(home)]. */
static unsigned slab_home_slot(uint32_t home) {
  return (home * 0x9e3779b1u) >> 26; /* Fibonacci hashing: CPUs and tids spread over 64 */
}
_Static_assert(CACHE_HOME_SLOTS == 64, "slab_home_slot's shift");

/* Appends s to its list; the slab lock held, as for every list change. */
static void slab_list(cache_t *cp, slab_t *s) {
  slab_t **list = slab_list_of(cp, s), *head = *list; /* circular: head->prev is the tail */
  s->listed = true;
  if (s->owner) {
    __atomic_store_n(&cp->owners, cp->owners + 1, __ATOMIC_RELAXED);
    cp->homes[slab_home_slot(s->owner)] = s;
  }
  if (!head) {
    *list = s->next = s->prev = s;
    return;
  }
  s->next = head;
  s->prev = head->prev;
  head->prev->next = s;
  head->prev = s;
}

static void slab_unlist(cache_t *cp, slab_t *s) {
  slab_t **list = slab_list_of(cp, s);
  s->listed = false;
  if (s->owner) {
    __atomic_store_n(&cp->owners, cp->owners - 1, __ATOMIC_RELAXED);
    slab_t **slot = &cp->homes[slab_home_slot(s->owner)];
    if (*slot == s) *slot = NULL;
  }
  if (s->next == s) {
    *list = NULL;
    return;
  }
  s->prev->next = s->next;
  s->next->prev = s->prev;
  if (*list == s) *list = s->next;
}

/* Moves listed slab s to owner's list (0: the shared one). */
static void slab_own(cache_t *cp, slab_t *s, uint32_t owner) {
  slab_unlist(cp, s);
  s->owner = owner;
  slab_list(cp, s);
}

/* The slab home's refills take from (theory 8): its own, else the first shared one, which
   becomes its own; NULL if neither. Without a home, the first shared one. cp->homes finds a
   home's own slab at once, unless another home's hashed to the same slot since: then the
   list is walked (homes are few: mag.c theory 10), and the slot is the home's again. */
static slab_t *slab_home(cache_t *cp, uint32_t home) {
  if (!home) return cp->partial;
  slab_t **slot = &cp->homes[slab_home_slot(home)], *s = *slot;
  if (s && s->owner == home) return s;
  s = cp->owned;
  for (unsigned i = 0; i < cp->owners; i++, s = s->next)
    if (s->owner == home) return *slot = s;
  if ((s = cp->partial)) slab_own(cp, s, home);
  return s;
}

static vmem_t *slab_arena_of(const slab_t *s) {
  return s->from_heap ? &heap_arena : &slab_arena;
}

/* Theory 9: a stash's spans, by CPU slot. */
#define SLAB_STASH_SLOTS 64
#define SLAB_STASH_SPANS 8
#define SLAB_STASH_SPAN ((size_t)64 << 10)
typedef struct __attribute__((aligned(64))) slab_stash {
  lock_t lock;
  unsigned n;
  void *span[SLAB_STASH_SPANS]; /* [0, n): free spans of the slab arena's, the rest NULL */
} slab_stash_t;
static slab_stash_t slab_stash[SLAB_STASH_SLOTS];
size_t slab_stashed_bytes;

static slab_stash_t *slab_stash_here(void) {
  return &slab_stash[os_cpu_now() % SLAB_STASH_SLOTS];
}

/* A span of SLAB_STASH_SPAN bytes from the stash of the CPU the thread runs on, filled from the
   arena where empty; NULL where that stash is busy or the arena has no room (the caller goes
   to the arena, which imports). */
static void *slab_stash_take(void) {
  slab_stash_t *st = slab_stash_here();
  void *span = NULL;
  if (!lock_try(&st->lock)) return NULL;
  if (st->n == 0) {
    st->n = vmem_alloc_some(&slab_arena, SLAB_STASH_SPAN, SLAB_STASH_SPAN, st->span, NULL,
                            SLAB_STASH_SPANS);
    __atomic_add_fetch(&slab_stashed_bytes, st->n * SLAB_STASH_SPAN, __ATOMIC_RELAXED);
  }
  if (st->n) {
    __atomic_sub_fetch(&slab_stashed_bytes, SLAB_STASH_SPAN, __ATOMIC_RELAXED);
    span = st->span[--st->n];
    st->span[st->n] = NULL; /* no stale pointer to the block a leak checker looks for */
  }
  lock_release(&st->lock);
  return span;
}

/* Keeps a free span of SLAB_STASH_SPAN bytes in the stash of the CPU the thread runs on;
   false where that one is busy or full (the caller gives it to the arena). */
static bool slab_stash_put(void *span) {
  slab_stash_t *st = slab_stash_here();
  bool kept = false;
  if (!lock_try(&st->lock)) return false;
  if (st->n < SLAB_STASH_SPANS) {
    __atomic_add_fetch(&slab_stashed_bytes, SLAB_STASH_SPAN, __ATOMIC_RELAXED);
    st->span[st->n++] = span;
    kept = true;
  }
  lock_release(&st->lock);
  return kept;
}

void slab_stash_flush(void) {
  for (unsigned i = 0; i < SLAB_STASH_SLOTS; i++) {
    slab_stash_t *st = &slab_stash[i];
    lock_acquire(&st->lock);
    __atomic_sub_fetch(&slab_stashed_bytes, st->n * SLAB_STASH_SPAN, __ATOMIC_RELAXED);
    for (; st->n; st->span[st->n] = NULL)
      vmem_free(&slab_arena, st->span[--st->n], SLAB_STASH_SPAN);
    lock_release(&st->lock);
  }
}

void slab_stash_fork_child(void) {
  for (unsigned i = 0; i < SLAB_STASH_SLOTS; i++)
    lock_init(&slab_stash[i].lock);
}

/* A new slab for cp, its pages mapped to it, not yet listed; NULL when memory ran out. Without
   the slab lock: the arena and the page map (a new leaf, a fresh span's mapping) are slow,
   and a thread preempted there would hold up every thread that misses in the class. */
static slab_t *slab_make(cache_t *cp) {
  bool clean;
  vmem_t *arena = hugepage_arena(cp->size);
  void *span = arena == &slab_arena && cp->span == SLAB_STASH_SPAN ? slab_stash_take() : NULL;
  if (!span) span = vmem_alloc(arena, cp->span, cp->span, 0, &clean);
  if (!span && arena != &heap_arena) /* no whole huge page to be had: any free span will do */
    span = vmem_alloc(arena = &heap_arena, cp->span, cp->span, 0, &clean);
  if (!span) return NULL;
  slab_t *s = meta_alloc(slab_pool(cp));
  if (s) { /* fields before the page map; the slab lock that lists the slab publishes both */
    os_touch(s, sizeof(slab_t) + slab_map_words(cp) * sizeof(uint64_t)); /* theory's locks */
    s->base = (uintptr_t)span;
    s->cache = cp;
    s->from_heap = arena == &heap_arena;
  }
  if (!s || !pagemap_set((uintptr_t)span, cp->span, (uintptr_t)s | cp->tag)) {
    if (s) meta_free(slab_pool(cp), s);
    vmem_free(arena, span, cp->span);
    return NULL;
  }
  return s;
}

/* Bytes of a chunk (theory 6): at most 64 chunks a span. */
static size_t slab_chunk(const cache_t *cp) {
  return cp->span > 64 * OS_PAGE ? cp->span / 64 : OS_PAGE;
}

/* The next run of chunks set in mask `chunks` from chunk *i on: [*i, *j), or false if none. */
static bool slab_chunk_run(uint64_t chunks, uint32_t *i, uint32_t *j) {
  while (*i < 64 && !(chunks >> *i & 1))
    (*i)++;
  for (*j = *i; *j < 64 && chunks >> *j & 1; (*j)++) {
  }
  return *j > *i;
}

/* Free objects of cp whose pages stayed (theory 7) left the count, bytes of them at most (slab
   lock held). */
static void slab_resident_less(cache_t *cp, size_t bytes) {
  size_t left = cp->free_resident > bytes ? cp->free_resident - bytes : 0;
  __atomic_store_n(&cp->free_resident, left, __ATOMIC_RELAXED); /* read unlocked */
}

/* Takes s, all of whose objects came back, out of cp (slab lock held): unlisted and unmapped,
   no free finds it any more. The caller gives it back with slab_release once the lock is
   released, linked through next. */
static void slab_retire(cache_t *cp, slab_t *s, slab_t **retired) {
  slab_resident_less(cp, (size_t)s->nfree * cp->size);
  if (s->listed) slab_unlist(cp, s);
  pagemap_set(s->base, cp->span, 0);
  cp->slabs--;
  s->next = *retired;
  *retired = s;
}

/* Gives the retired slabs' spans to their arena and their descriptors back (no lock held). */
static void slab_release(cache_t *cp, slab_t *retired) {
  for (slab_t *s = retired, *next; s; s = next) {
    next = s->next;
    size_t hollow = (size_t)__builtin_popcountll(s->hollow) * slab_chunk(cp);
    if (hollow) {
      __atomic_sub_fetch(&slab_hollow_bytes, hollow, __ATOMIC_RELAXED);
      if (!s->from_heap) hugepage_slab_hollow((void *)s->base, -(ptrdiff_t)hollow, NULL);
    }
    if (s->from_heap || cp->span != SLAB_STASH_SPAN || !slab_stash_put((void *)s->base))
      vmem_free(slab_arena_of(s), (void *)s->base, cp->span);
    meta_free(slab_pool(cp), s);
  }
}

/* Object obj's index in its slab s. */
static uint32_t slab_index(const cache_t *cp, const slab_t *s, const void *obj) {
  /* offset / size as the high half of offset * div_magic (Lemire's division, exact for
     offsets below 2^32: a span is at most a few MiB), not a divide's tens of cycles */
  return (uint32_t)(((unsigned __int128)((uintptr_t)obj - s->base) * cp->div_magic) >> 64);
}

/* The chunks (theory 6) that object k lies on, as a mask. */
static uint64_t slab_object_chunks(const cache_t *cp, uint32_t k) {
  size_t chunk = slab_chunk(cp), lo = (size_t)k * cp->size / chunk;
  size_t hi = ((size_t)k * cp->size + cp->size - 1) / chunk;
  return (~(uint64_t)0 >> (63 - hi)) & (~(uint64_t)0 << lo);
}

/* Hollow chunks of one slab that a refill takes back into use (theory 6): the free objects on
   them held meanwhile, their bits kept here, as a give-back holds its chunks' objects. */
typedef struct slab_wake {
  slab_t *s; /* NULL: none */
  uint64_t chunks;
  uint32_t held;
  uint32_t lo, hi;                      /* kept[lo..hi] hold every bit taken */
  uint64_t kept[SLAB_OBJECTS_MAX / 64]; /* zero outside lo..hi */
  uint64_t others_first, others_last;   /* bit i: chunk i's first (last) object lies on the
                                           neighbour too, held by that one's give-back or refill */
  struct slab_wake *next;               /* on the cache's waking list while at work */
} slab_wake_t;

/* Whether object k of s, whose bit is clear, is held by a give-back or a refill (slab lock
   held; theory 6): a refill keeps its bit, or it lies on a hollow chunk that no refill wakes. */
static bool slab_held(const cache_t *cp, const slab_t *s, uint32_t k) {
  uint64_t under = s->giving ? s->hollow & slab_object_chunks(cp, k) : 0;
  for (const slab_wake_t *w = cp->waking; w && under; w = w->next)
    if (w->s == s) {
      if (w->kept[k / 64] >> k % 64 & 1) return true;
      under &= ~w->chunks;
    }
  return under != 0;
}

/* Reads obj's page-map entry and starts the cache misses of the descriptor it names, its
   header and the first words of its bitmap, which slab_return reads next for obj: a batch's
   objects lie on many slabs, one miss after another under the slab lock otherwise. A prefetch
   never faults, so an entry that names no slab costs nothing. */
#define SLAB_PREFETCH_AHEAD 4
static MP_INLINE uintptr_t slab_prefetch(const void *obj) {
  uintptr_t e = pagemap_get((uintptr_t)obj);
  __builtin_prefetch((const char *)(e & ~PM_TAG_MASK));
  __builtin_prefetch((const char *)(e & ~PM_TAG_MASK) + OS_LINE, 1);
  return e;
}

/* Returns unconstructed objects to their slabs. The page-map entries are read under the lock,
   SLAB_PREFETCH_AHEAD objects ahead: a slab retires under it, so an entry read before it could
   name a descriptor that a double free then finds reused. */
static void slab_return(cache_t *cp, void **objs, unsigned n, bool given) {
  slab_t *retired = NULL;
  uintptr_t ahead[SLAB_PREFETCH_AHEAD]; /* objs[i]'s entry at i % SLAB_PREFETCH_AHEAD */
  lock_acquire(&cp->slab_lock);
  for (unsigned i = 0; i < n && i < SLAB_PREFETCH_AHEAD; i++)
    ahead[i] = slab_prefetch(objs[i]);
  for (unsigned i = 0; i < n; i++) {
    uintptr_t e = ahead[i % SLAB_PREFETCH_AHEAD];
    if (i + SLAB_PREFETCH_AHEAD < n)
      ahead[i % SLAB_PREFETCH_AHEAD] = slab_prefetch(objs[i + SLAB_PREFETCH_AHEAD]);
    slab_t *s = slab_at(cp, objs[i], e);
    uint32_t k = s ? slab_index(cp, s, objs[i]) : 0;
    bool foreign = !s || k >= s->carved;
    if (foreign || s->map[k / 64] >> k % 64 & 1 || slab_held(cp, s, k)) {
      lock_release(&cp->slab_lock);
      slab_release(cp, retired);
      uintptr_t tag = pagemap_get((uintptr_t)objs[i]) & PM_TAG_MASK;
      if (!s && tag >= 1 && tag <= SC_COUNT && tag != cp->tag) /* fastpath.h trusted the size */
        report_heap_error("invalid free", objs[i],
                          "a block of another size class given back as one of this class: a C++ "
                          "sized delete with another size than its new's (MAGPIE_DEBUG names it)");
      if (foreign) report_heap_error("invalid free", objs[i], "not an object magpie handed out");
      report_heap_error("double free", objs[i], "already back in its slab");
    }
    s->map[k / 64] |= (uint64_t)1 << k % 64;
    s->nfree++;
    s->returned = true;
    if (k / 64 < s->scan) s->scan = k / 64;
    if (!s->listed) slab_list(cp, s);
    if (--s->used == 0) slab_retire(cp, s, &retired);
  }
  __atomic_store_n(&cp->slab_objects_out, cp->slab_objects_out - n, __ATOMIC_RELAXED);
  if (!given)
    __atomic_store_n(&cp->free_resident, cp->free_resident + n * cp->size, __ATOMIC_RELAXED);
  lock_release(&cp->slab_lock);
  slab_release(cp, retired);
}

/* The bits of objects first..last in word w of a bitmap. */
static uint64_t slab_word_mask(uint32_t w, uint32_t first, uint32_t last) {
  uint64_t mask = ~(uint64_t)0;
  if (w == first / 64) mask &= ~(uint64_t)0 << first % 64;
  if (w == last / 64) mask &= ~(uint64_t)0 >> (63 - last % 64);
  return mask;
}

/* The objects first..last lying on chunk i of a slab. */
static void slab_chunk_objects(const cache_t *cp, uint32_t i, uint32_t *first, uint32_t *last) {
  size_t chunk = slab_chunk(cp);
  *first = (uint32_t)(i * chunk / cp->size);
  *last = (uint32_t)(((i + 1) * chunk - 1) / cp->size);
  if (*last >= cp->per_slab) *last = cp->per_slab - 1;
}

/* Whether object k of s, on chunk i, also lies on a neighbour and is out of the bitmap, but
   neither held by wake nor one of out[0..n): held by the neighbour's give-back or refill. */
static bool slab_edge_others(const cache_t *cp, const slab_t *s, uint32_t i, uint32_t k,
                             void *const *out, unsigned n, const slab_wake_t *wake) {
  if (slab_object_chunks(cp, k) == (uint64_t)1 << i || s->map[k / 64] >> k % 64 & 1 ||
      wake->kept[k / 64] >> k % 64 & 1)
    return false;
  for (unsigned j = 0; j < n; j++) /* out may hold other slabs' objects too */
    if (out[j] == (void *)(s->base + (uintptr_t)k * cp->size)) return false;
  return true;
}

/* Holds into wake, whose slab is s or none, the free objects on the hollow chunks under
   out[from..n), objects just taken from s after out[0..from), but for chunks that other
   refills wake (slab lock held). */
static void slab_wake_hold(cache_t *cp, slab_t *s, void *const *out, unsigned from, unsigned n,
                           slab_wake_t *wake) {
  uint64_t chunks = 0;
  for (unsigned i = from; i < n; i++)
    chunks |= slab_object_chunks(cp, slab_index(cp, s, out[i]));
  chunks &= s->hollow & ~wake->chunks;
  for (const slab_wake_t *w = cp->waking; w && chunks; w = w->next)
    if (w->s == s) chunks &= ~w->chunks;
  if (!chunks) return;
  if (!wake->s) {
    *wake = (slab_wake_t){.s = s, .lo = UINT32_MAX, .next = cp->waking};
    cp->waking = wake;
    s->giving++;
    lock_pending_begin(&cp->giving_back, 1);
  }
  wake->chunks |= chunks;
  uint32_t first, last;
  for (uint64_t c = chunks; c; c &= c - 1) { /* before any of them is held */
    uint32_t i = (uint32_t)__builtin_ctzll(c);
    slab_chunk_objects(cp, i, &first, &last); /* a hollow chunk lies in the carved part */
    wake->others_first |= (uint64_t)slab_edge_others(cp, s, i, first, out, n, wake) << i;
    wake->others_last |= (uint64_t)slab_edge_others(cp, s, i, last, out, n, wake) << i;
  }
  for (; chunks; chunks &= chunks - 1) {
    slab_chunk_objects(cp, (uint32_t)__builtin_ctzll(chunks), &first, &last);
    for (uint32_t w = first / 64; w <= last / 64; w++) {
      uint64_t bits = s->map[w] & slab_word_mask(w, first, last);
      s->map[w] &= ~bits;
      wake->kept[w] |= bits;
      uint32_t held = (uint32_t)__builtin_popcountll(bits);
      wake->held += held;
      s->nfree -= held;
      s->used += held;
      if (w < wake->lo) wake->lo = w;
      if (w > wake->hi) wake->hi = w;
    }
  }
}

/* Checks that the woken chunks still read as zero, but for the objects at their edges that
   others hold (which may be back in use meanwhile: theory 6), and gives the held objects
   starting on them their markers (no lock held: their pages fault in here). Where every page
   holds an object start, and so is written soon, each run of chunks is mapped in one call
   first: reading a page given back maps the zero page, and the first write then faults
   again. */
static void slab_wake_mark(const cache_t *cp, const slab_wake_t *wake) {
  const slab_t *s = wake->s;
  size_t chunk = slab_chunk(cp), size = cp->size;
  for (uint32_t i = 0, j; size <= OS_PAGE && slab_chunk_run(wake->chunks, &i, &j); i = j)
    (void)os_populate((void *)(s->base + (uintptr_t)i * chunk), (j - i) * chunk);
  for (uint64_t under = wake->chunks; under; under &= under - 1) {
    uint32_t i = (uint32_t)__builtin_ctzll(under), first, last;
    uintptr_t start = s->base + (uintptr_t)i * chunk, lo = start, hi = start + chunk;
    slab_chunk_objects(cp, i, &first, &last);
    if (wake->others_first >> i & 1) lo = s->base + (uintptr_t)(first + 1) * size;
    if (wake->others_last >> i & 1) hi = s->base + (uintptr_t)last * size;
    for (const uint64_t *w = (const uint64_t *)lo; w < (const uint64_t *)hi; w++)
      if (*w)
        report_heap_error("write after free",
                          (void *)(s->base + ((uintptr_t)w - s->base) / size * size),
                          "a freed block was written after magpie gave its page back to the "
                          "kernel (a double free, or a use after free)");
    for (uint32_t k = (uint32_t)((start - s->base + size - 1) / size); k <= last; k++)
      if (wake->kept[k / 64] >> k % 64 & 1) { /* the held objects starting here */
        uintptr_t a = s->base + k * size;
        *(uintptr_t *)a = a ^ mag_consts.secret; /* the free marker (mag.h) */
      }
  }
}

/* Puts the objects held in wake back, its chunks in use, and takes it off the list (slab lock
   held). */
static void slab_wake_settle(cache_t *cp, slab_wake_t *wake) {
  slab_t *s = wake->s;
  for (uint32_t w = wake->lo; w <= wake->hi; w++)
    s->map[w] |= wake->kept[w];
  if (wake->lo < s->scan) s->scan = wake->lo;
  s->nfree += wake->held;
  s->used -= wake->held; /* the refill's own objects keep it above zero */
  s->hollow &= ~wake->chunks;
  s->giving--;
  lock_pending_end(&cp->giving_back, 1);
  slab_wake_t **at = &cp->waking;
  while (*at != wake)
    at = &(*at)->next;
  *at = wake->next;
  size_t bytes = (size_t)__builtin_popcountll(wake->chunks) * slab_chunk(cp);
  __atomic_sub_fetch(&slab_hollow_bytes, bytes, __ATOMIC_RELAXED);
  if (!s->from_heap) hugepage_slab_hollow((void *)s->base, -(ptrdiff_t)bytes, NULL);
  if (!s->listed && s->nfree) { /* taken from while at the list's head: back there */
    slab_list(cp, s);
    cp->partial = s;
  }
}

/* Moves up to n - got objects of s to out[got...]: returned ones first (lowest address
   first), or never-used ones first when fresh; returns the new count. */
static unsigned slab_take(cache_t *cp, slab_t *s, void **out, unsigned got, unsigned n, bool fresh,
                          slab_wake_t *wake) {
  unsigned from = got;
  for (int pass = 0; pass < 2; pass++, fresh = !fresh)
    if (fresh)
      while (got < n && s->carved < cp->per_slab)
        out[got++] = (void *)(s->base + (uintptr_t)s->carved++ * cp->size);
    else
      while (got < n && s->nfree) {
        uint64_t *w = &s->map[s->scan];
        if (*w == 0) {
          s->scan++;
          continue;
        }
        uint32_t k = s->scan * 64 + (uint32_t)__builtin_ctzll(*w);
        *w &= *w - 1;
        s->nfree--;
        out[got++] = (void *)(s->base + (uintptr_t)k * cp->size);
      }
  if (s->hollow) slab_wake_hold(cp, s, out, from, got, wake);
  return got;
}

unsigned slab_alloc(cache_t *cp, void **out, unsigned n, bool run, uint32_t home) {
  unsigned got = 0;
  if (cp->size > SLAB_HOME_MAX || cp->tag == PM_TAG_CACHE) home = 0; /* theory 8 */
  slab_t *spare = NULL; /* made here while others listed slabs: taken from last, if at all */
  slab_wake_t wake;
  os_touch(&wake, sizeof wake); /* written under the lock where chunks wake: mapped before */
  wake.s = NULL;
  wake.chunks = 0;
  lock_acquire(&cp->slab_lock);
  while (got < n) {
    slab_t *s = slab_home(cp, home);
    if (!s && spare) {
      s = spare;
      spare = NULL;
    } else if (!s) { /* made without the lock, then taken from at once: a slab left listed
                        with nothing taken would never empty */
      lock_release(&cp->slab_lock);
      INJECT(INJECT_UNLOCKED);
      s = slab_make(cp);
      lock_acquire(&cp->slab_lock);
      slab_t *listed = slab_home(cp, home);
      if (!s || listed) { /* others' slabs first: threads that missed together made one
                             each, and each would stay partly used (theory 5) */
        spare = s;
        if (listed) continue;
        break;
      }
    }
    if (!s->listed) {
      cp->slabs++;
      s->owner = home;
      slab_list(cp, s);
    }
    if (wake.s && wake.s != s && s->hollow) break; /* one slab's chunks woken a refill */
    unsigned before = got;
    uint32_t free_before = s->nfree;
    got = slab_take(cp, s, out, got, n, run && cp->per_slab - s->carved >= n - got, &wake);
    if (s->nfree < free_before) /* free objects left, their pages there or not (theory 7) */
      slab_resident_less(cp, (size_t)(free_before - s->nfree) * cp->size);
    s->used += got - before;
    __atomic_store_n(&cp->slab_objects_out, cp->slab_objects_out + (got - before),
                     __ATOMIC_RELAXED); /* counted before the lock may be let go; read unlocked */
    if (!s->nfree && s->carved == cp->per_slab) { /* full: shared again once one comes back */
      slab_unlist(cp, s);
      s->owner = 0;
    }
  }
  lock_release(&cp->slab_lock);
  if (spare) { /* never listed, nothing taken: no free finds it */
    pagemap_set(spare->base, cp->span, 0);
    spare->next = NULL;
    slab_release(cp, spare);
  }
  if (wake.s) {
    INJECT(INJECT_UNLOCKED);
    slab_wake_mark(cp, &wake);
    lock_acquire(&cp->slab_lock);
    slab_wake_settle(cp, &wake);
    lock_release(&cp->slab_lock);
  }
  if (san_poisons()) /* a sanitized program's objects are poisoned while here (san_hooks.h) */
    for (unsigned i = 0; i < got; i++)
      san_unpoison(out[i], cp->size);
  if (cp->ctor)
    for (unsigned i = 0; i < got; i++)
      if (cp->ctor(out[i], cp->arg, 0) != 0) {
        slab_return(cp, out + i, got - i, false);
        return i;
      }
  return got;
}

void slab_disown(cache_t *cp, uint32_t home) {
  if (!__atomic_load_n(&cp->owners, __ATOMIC_RELAXED)) return;
  lock_acquire(&cp->slab_lock);
  slab_t *s = cp->owned;
  for (unsigned i = 0, n = cp->owners; i < n; i++) {
    slab_t *next = s->next;
    if (!home || s->owner == home) slab_own(cp, s, 0);
    s = next;
  }
  lock_release(&cp->slab_lock);
}

bool slab_packed(const cache_t *cp) {
  return hugepage_arena(cp->size) == &slab_arena;
}

/* Gives back the pages of big blocks coming back to cp's slabs, objs[0..n), if the free
   objects of cp whose pages stayed would pass the budget (theory 7); returns whether it did.
   No lock: the blocks are the caller's until they are back. */
static bool slab_give_big_pages(const cache_t *cp, void *const *objs, unsigned n) {
  if (!slab_pages_may_go || cp->size < SLAB_BIG_PAGES * OS_PAGE || cp->tag == PM_TAG_CACHE)
    return false;
  size_t resident = __atomic_load_n(&cp->free_resident, __ATOMIC_RELAXED); /* an estimate */
  size_t out = __atomic_load_n(&cp->slab_objects_out, __ATOMIC_RELAXED) * cp->size;
  if (resident + n * cp->size <= SLAB_BIG_KEEP + (out >> SLAB_BIG_KEEP_SHIFT)) return false;
  /* room for a magazine of blocks of 16 KiB and up (cache.c: 256 KiB of objects at most); a
     longer list runs in parts */
  os_purge_range_t room[16];
  os_purge_list_t list = OS_PURGE_LIST_IN(room, opt.purge_batch);
  for (unsigned i = 0; i < n; i++) { /* the page of its first word keeps the free marker */
    uintptr_t a = (uintptr_t)objs[i], from = (a & ~(uintptr_t)(OS_PAGE - 1)) + OS_PAGE;
    uintptr_t to = (a + cp->size) & ~(uintptr_t)(OS_PAGE - 1);
    os_purge_list_add(&list, (void *)from, to - from);
  }
  os_purge_list_run(&list);
  return true;
}

void slab_free(cache_t *cp, void **objs, unsigned n) {
  if (cp->dtor)
    for (unsigned i = 0; i < n; i++)
      cp->dtor(objs[i], cp->arg);
  if (san_poisons())
    for (unsigned i = 0; i < n; i++)
      san_poison(objs[i], cp->size);
  slab_return(cp, objs, n, slab_give_big_pages(cp, objs, n));
}

/* Whether objects first..last of s are all free. */
static bool slab_all_free(const slab_t *s, uint32_t first, uint32_t last) {
  for (uint32_t w = first / 64; w <= last / 64; w++) {
    uint64_t mask = slab_word_mask(w, first, last);
    if ((s->map[w] & mask) != mask) return false;
  }
  return true;
}

/* Whether chunk i of s starts in its carved part and every carved object on it is free. */
static bool slab_chunk_free(const cache_t *cp, const slab_t *s, size_t chunk, uint32_t i) {
  if ((size_t)i * chunk >= (size_t)s->carved * cp->size) return false;
  uint32_t first, last;
  slab_chunk_objects(cp, i, &first, &last);
  return slab_all_free(s, first, last < s->carved ? last : s->carved - 1);
}

/* Moves the free objects on chunks `chunks` of s out of its bitmap, as if handed out (hold), or
   back (slab lock held; theory 6). Returns how many. */
static uint32_t slab_hold(const cache_t *cp, slab_t *s, uint64_t chunks, bool hold) {
  size_t chunk = slab_chunk(cp);
  uint32_t moved = 0, next = 0; /* objects below next are done: one may lie on two chunks */
  for (uint32_t i = 0; i < 64; i++) {
    if (!(chunks >> i & 1)) continue;
    uint32_t first, last;
    slab_chunk_objects(cp, i, &first, &last);
    if (first < next) first = next;
    if (last >= s->carved) last = s->carved - 1;
    for (uint32_t w = first / 64; first <= last && w <= last / 64; w++) {
      uint64_t mask = slab_word_mask(w, first, last);
      s->map[w] = hold ? s->map[w] & ~mask : s->map[w] | mask;
      moved += (uint32_t)__builtin_popcountll(mask);
    }
    if (first <= last) next = last + 1;
  }
  if (!hold && chunks) {
    uint32_t low = (uint32_t)((size_t)__builtin_ctzll(chunks) * chunk / cp->size / 64);
    if (low < s->scan) s->scan = low;
  }
  return moved;
}

/* Carves, free, the objects of s up to the end of the last of chunks `chunks` (slab lock held):
   where it reaches past the carved part, an object could otherwise be carved on it while its
   pages go back (theory 6). */
static void slab_carve_to(const cache_t *cp, slab_t *s, uint64_t chunks) {
  size_t end = (size_t)(64 - __builtin_clzll(chunks)) * slab_chunk(cp);
  uint32_t last = (uint32_t)((end - 1) / cp->size);
  if (last >= cp->per_slab) last = cp->per_slab - 1;
  if (last < s->carved) return;
  for (uint32_t w = s->carved / 64; w <= last / 64; w++)
    s->map[w] |= slab_word_mask(w, s->carved, last);
  s->nfree += last + 1 - s->carved;
  s->carved = last + 1;
}

/* A slab whose pages go back, the free objects on them held meanwhile. */
typedef struct slab_give {
  slab_t *s;
  uint64_t chunks;
  uint32_t held;
  hugepage_split_t split; /* the huge page it lies on, to split first, or none */
} slab_give_t;

/* Takes up to SLAB_GIVE_BATCH of cp's slabs that have chunks to give back into give, walking
   the list from `from` (NULL: its head): the chunks hollow, the free objects on them held (slab
   lock held). Returns how many; *lap set where the walk reached the list's end. */
static unsigned slab_give_take(cache_t *cp, slab_give_t *give, slab_t *from, bool *lap) {
  size_t chunk = slab_chunk(cp);
  uint32_t chunks = (uint32_t)(cp->span / chunk);
  unsigned n = 0;
  slab_t *s = from ? from : cp->partial;
  while (s && n < SLAB_GIVE_BATCH) {
    if (s->returned) { /* else nothing came back since the last look: nothing more is free */
      s->returned = false;
      uint64_t more = 0;
      for (uint32_t i = 0; i < chunks; i++)
        if (!(s->hollow >> i & 1) && slab_chunk_free(cp, s, chunk, i)) more |= (uint64_t)1 << i;
      size_t bytes = (size_t)__builtin_popcountll(more) * chunk;
      hugepage_split_t split = {NULL, 0};
      if (more &&
          (s->from_heap || hugepage_slab_hollow((void *)s->base, (ptrdiff_t)bytes, &split))) {
        slab_carve_to(cp, s, more);
        uint32_t held = slab_hold(cp, s, more, true);
        s->nfree -= held;
        s->used += held;
        s->hollow |= more;
        s->giving++;
        __atomic_add_fetch(&slab_hollow_bytes, bytes, __ATOMIC_RELAXED);
        give[n++] = (slab_give_t){s, more, held, split};
      }
    }
    s = s->next == cp->partial ? NULL : s->next;
  }
  *lap = s == NULL;
  if (n) lock_pending_begin(&cp->giving_back, n);
  return n;
}

/* Purges the chunks of give[0..n) (no lock held), each run of them a range, after splitting
   the huge pages they lie on. */
static void slab_give_purge(const cache_t *cp, const slab_give_t *give, unsigned n) {
  size_t chunk = slab_chunk(cp);
  os_purge_range_t room[OS_PURGE_LIST];
  os_purge_list_t list = OS_PURGE_LIST_IN(room, opt.purge_batch);
  for (unsigned k = 0; k < n; k++) {
    hugepage_split(&give[k].split);
    for (uint32_t i = 0, j; slab_chunk_run(give[k].chunks, &i, &j); i = j)
      os_purge_list_add(&list, (void *)(give[k].s->base + (uintptr_t)i * chunk), (j - i) * chunk);
  }
  os_purge_list_run(&list);
}

/* Puts the objects held in give[0..n) back (slab lock held); slabs that emptied meanwhile go
   onto *retired. Returns the bytes given back. */
static size_t slab_give_settle(cache_t *cp, const slab_give_t *give, unsigned n, slab_t **retired) {
  size_t given = 0;
  for (unsigned k = 0; k < n; k++) {
    slab_t *s = give[k].s;
    slab_hold(cp, s, give[k].chunks, false);
    s->nfree += give[k].held;
    s->used -= give[k].held;
    s->giving--;
    given += (size_t)__builtin_popcountll(give[k].chunks) * slab_chunk(cp);
    if (s->used == 0)
      slab_retire(cp, s, retired);
    else if (!s->listed)
      slab_list(cp, s);
  }
  lock_pending_end(&cp->giving_back, n); /* n > 0: a give-back's settle */
  return given;
}

size_t slab_give_back(cache_t *cp) {
  slab_give_t give[SLAB_GIVE_BATCH];
  size_t given = 0;
  unsigned n = 0;
  if (!slab_pages_may_go) return 0;
  bool lap = false;
  for (;;) { /* puts the last batch back and takes the next under one hold of the lock */
    slab_t *retired = NULL, *from = NULL;
    lock_acquire(&cp->slab_lock);
    if (n) {
      size_t settled = slab_give_settle(cp, give, n, &retired);
      slab_resident_less(cp, settled);
      given += settled;
      slab_t *last = give[n - 1].s; /* held until now: listed unless it emptied or filled */
      from = last->listed && !last->owner && last->next != cp->partial ? last->next : NULL;
      lap |= from == NULL; /* one that filled or was owned meanwhile left its place: the rest
                              waits */
    }
    n = lap ? 0 : slab_give_take(cp, give, from, &lap);
    lock_release(&cp->slab_lock);
    slab_release(cp, retired);
    if (n == 0) return given;
    INJECT(INJECT_GIVE_BACK);
    slab_give_purge(cp, give, n);
  }
}

/* Checks the slabs on list (owned: cp->owned, each its own home's; else cp->partial, no
   owner's); returns how many (slab lock held). */
static size_t slab_check_list(cache_t *cp, slab_t *list, bool owned) {
  size_t listed = 0;
  slab_t *s = list;
  do {
    if (!s) break;
    uint32_t free_count = 0;
    for (uint32_t w = 0; w < slab_map_words(cp); w++) {
      uint64_t bits = s->map[w], lo = (uint64_t)w * 64; /* objects lo..lo+63 */
      uint64_t carved = s->carved <= lo        ? 0
                        : s->carved - lo >= 64 ? ~(uint64_t)0
                                               : ((uint64_t)1 << (s->carved - lo)) - 1;
      if ((bits & ~carved) || (w < s->scan && bits))
        report_fatal("slab: bitmap marks an object free that cannot be", (void *)s->base, w);
      free_count += (uint32_t)__builtin_popcountll(bits);
    }
    if (s->used + free_count != s->carved || free_count != s->nfree || s->carved > cp->per_slab ||
        !s->listed || s->base & (cp->span - 1) || s->next->prev != s)
      report_fatal("slab: descriptor accounting broken", (void *)s->base, s->used);
    for (uint32_t i = 0; i < 64 && !s->giving; i++) /* its held objects are out meanwhile */
      if (s->hollow >> i & 1 && !slab_chunk_free(cp, s, slab_chunk(cp), i))
        report_fatal("slab: a hollow chunk holds an object in use", (void *)s->base, i);
    if (pagemap_get(s->base + cp->span - 1) != ((uintptr_t)s | cp->tag))
      report_fatal("slab: page map does not point at the slab", (void *)s->base, 0);
    if (!s->owner == owned)
      report_fatal("slab: a slab on the wrong list for its owner", (void *)s->base, s->owner);
    slab_t *slot = cp->homes[slab_home_slot(s->owner)];
    if (owned && slot && (!slot->listed || !slot->owner))
      report_fatal("slab: a home's slot points at a slab no home owns", (void *)slot->base, 0);
    for (slab_t *o = list; owned && o != s; o = o->next)
      if (o->owner == s->owner)
        report_fatal("slab: two slabs of one home", (void *)s->base, s->owner);
    listed++;
    s = s->next;
  } while (s != list);
  return listed;
}

void slab_check(cache_t *cp) {
  lock_acquire(&cp->slab_lock);
  INJECT_LOCK_FORGET(); /* it reads the page map and hollow chunks: not a crowd's faults */
  size_t owned = slab_check_list(cp, cp->owned, true);
  if (owned != cp->owners) report_fatal("slab: owned slabs miscounted", NULL, owned);
  size_t listed = owned + slab_check_list(cp, cp->partial, false);
  if (listed > cp->slabs) report_fatal("slab: more listed slabs than held", NULL, listed);
  lock_release(&cp->slab_lock);
}
