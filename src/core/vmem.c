/*
 * vmem: arenas of page-granular spans (after Bonwick & Adams, USENIX 2001).
 *
 * Theory
 *   1. An arena manages address ranges in units of its quantum. It imports spans from a parent
 *      through the import/release functions it was given (the OS for the heap arena, a fake in
 *      tests) and hands out segments of them.
 *   2. Boundary tags: every span, free range and allocated range is a segment tag on one list,
 *      each span's segments in address order right after its VMEM_SPAN marker (the spans in
 *      the order they joined the arena). Freeing coalesces with the free neighbours on that
 *      list; the markers stop coalescing at span boundaries, so a wholly free span is one FREE
 *      segment right after its marker.
 *   3. Instant fit: free list i holds free segments of [2^i, 2^(i+1)) bytes, most recently
 *      freed first. A request of size s first looks (bounded) at list floor(log2 s), where
 *      freed segments of about its size return - reusing them reuses resident pages - then
 *      takes the first segment of the lowest non-empty list at or above ceil(log2 s): any
 *      segment there fits, found in constant time through the bitmap free_map. Aligned
 *      requests also look at the next list, then take any segment of at least
 *      s + align - quantum. After an import the request takes the new span, which is aligned
 *      to at least the alignment, unless room appeared meanwhile (theory 10).
 *   4. Allocated segments are found again by start address through a hash table, which grows
 *      fourfold once it holds more segments than buckets (the new table mapped and the old one
 *      unmapped outside the lock: theory 10); the first table is part of the arena.
 *   5. Quantum caches: freed allocations of 1..VMEM_QCACHE_MAX quanta are kept (a few per size)
 *      as allocated segments and handed out again without splitting or coalescing, to any
 *      request of their size whose alignment their address has (a slab's span is aligned to
 *      its size: a cached one serves the next slab of that span). A caller that keeps spans at
 *      hand itself (the slab layer's stashes, slab.c theory 9) takes several under one hold of
 *      the lock (vmem_alloc_some: cached and free space only, no import).
 *   6. A request that finds no free space imports import_min bytes, or, flagged VMEM_OWN, a
 *      span of exactly its size. An allocation that fills its whole span is resized by the
 *      parent when it can remap (mremap for the heap arena): page tables move, not bytes, so
 *      growing a big block step by step costs no copying. Where the parent can remap, a
 *      VMEM_OWN request that no free segment fits first regrows the largest wholly free span
 *      to its size: that span's pages are resident and only the difference is fresh.
 *   7. Memory goes back: a wholly free span is released to the parent when the arena's free
 *      bytes exceed both `retain` and its bytes in use (packing arenas: theory 9); below that
 *      it stays for the next requests (a fresh mapping costs a page fault per page touched,
 *      reuse costs none). A busy heap thus reuses its own pages; an idle one is purged by
 *      vmem_reap. Free segments are "dirty" until purged (MADV_DONTNEED through the OS, the
 *      owner told first) by vmem_reap; purged and never-touched memory is "clean" and reads as
 *      zero, which callers may use to skip memset.
 *   8. Each segment points at its span's marker, which counts the span's bytes in use and keeps
 *      two words for the arena's owner: the span's backing and a busy mark (the owner works on
 *      the span outside the lock, vmem_spans_take; it is not released meanwhile). An import
 *      says whether the span is known zero (a parent arena's reused space is not).
 *   9. Packing (vm->pack, for an arena whose spans are huge pages): a request takes, of the
 *      free segments a bounded search finds that fit, the one in the fullest span, so spans
 *      fill up or empty rather than all staying partly used; and a span that becomes wholly
 *      free goes back to the parent at once, whatever `retain` says (the parent keeps it).
 *   10. One lock per arena protects everything; it is taken after slab locks and before the
 *      metadata pool's and the OS's (which take none), and a child arena's before its parent's
 *      (fork's order: nothing holds one while it takes the other). Segment tags come from a
 *      metadata pool, through a stock the arena keeps (theory 11). Giving pages back to the
 *      kernel runs outside the lock, since its cost grows with the pages resident (a purge or an
 *      unmap of a big heap takes milliseconds, and every thread that makes a slab or a large
 *      block would wait): under the lock a segment to purge becomes VMEM_PURGING (off the free
 *      lists, so nothing allocates it; coalescing stops at it; counted clean already) and a
 *      span to release leaves the arena; after the OS's (or the parent's) calls the lock is
 *      taken again and a purged segment is freed as any other. A span in flight to the parent
 *      meanwhile sends a thread that needs one to the parent for another: with one importer
 *      at a time (below) that costs one import, not one a thread. Importing runs outside the
 *      lock too: a mapping is system calls (or the parent's lock), and a thread whose time is
 *      up is preempted on its way back from one, with every thread that makes a slab waiting
 *      behind it. One thread imports at a time (`importing`): others that find no room meanwhile
 *      wait for it without the lock and look again, so that a crowd maps one span, not one each,
 *      and only threads that need new memory wait at all. An importer that, under the lock again,
 *      finds room a free made meanwhile takes it and gives its span back untouched, after the lock.
 *      Remapping runs outside the lock as well (mremap moves a big block's page tables): the span
 *      leaves the address list and the counts (an allocated one the hash, a free one its list)
 *      where nothing finds it, and comes back, moved or not, at the list's end; a regrow stands for
 *      an import (`importing`). `unlocked` counts the threads between, so that fork's prepare can
 *      wait for them (lock_acquire_settled).
 *   11. Nothing under the lock takes a page fault (or maps memory): a fault's return to the
 *      program is a preemption point, as a system call's is, and every thread that makes a
 *      slab or a large block would wait for the preempted holder. The tags a request may split
 *      off are taken from the arena's stock of spare tags when it takes the lock, into a purse
 *      of its own (tags_take); where the stock is short the lock is let go while the pool
 *      makes more, each written once there, which maps its page. Tags freed under the lock go
 *      back to the stock, up to VMEM_TAGS_KEEP. An import's two tags are filled in before
 *      the lock is taken again, and a grown hash table is touched before the lock. The stack
 *      the holder's calls reach below the taker's frame is written before it (arena_lock): a
 *      thread's first call to reach a stack page faults there.
 */
#include "vmem.h"
#include "meta.h"
#include "options.h"
#include "os.h"
#include "inject.h"
#include "report.h"

#include <limits.h>
#include <string.h>

#define VMEM_SPAN 1
#define VMEM_FREE 2
#define VMEM_ALLOC 3
#define VMEM_PURGING 4
#define VMEM_SEARCH_MAX 16 /* segments examined by a bounded search */
#define VMEM_JOBS 32       /* purges and releases a reap takes out from under the lock at a time */
#define VMEM_TAGS_MORE 8   /* tags made beyond a request's need when the stock is short */
#define VMEM_TAGS_KEEP 64  /* spare tags the stock keeps of those freed */

/* Pages to give back outside the lock (theory 10): a free segment to purge (VMEM_PURGING
   meanwhile), or a span already taken out of the arena, to release to the parent (seg NULL);
   and the span the owner splits first, if it asked (split_size 0: none). */
typedef struct vmem_job {
  vmem_seg_t *seg;
  uintptr_t start;
  size_t size;
  uintptr_t split_start;
  size_t split_size;
} vmem_job_t;
/* Jobs, in room for cap of them on the caller's stack: a free, resize or span's return settles
   one segment, which needs room for its span's release at most; a reap takes a batch. Room for
   a batch in every caller would take each thread that frees a span a stack page deeper, a page
   that stays resident in every thread of a pool. */
typedef struct vmem_jobs {
  unsigned n, cap;
  vmem_job_t *job;
} vmem_jobs_t;
#define VMEM_JOBS_IN(room) ((vmem_jobs_t){0, sizeof(room) / sizeof((room)[0]), (room)})

static meta_pool_t vmem_seg_pool = META_POOL(sizeof(vmem_seg_t));

/* Takes vm's lock from a caller's frame, the stack below it written first: the holder's calls
   (tags_take, the pool's free, a segment's coalescing) reach below that frame (theory 11). */
static inline void arena_lock(vmem_t *vm) {
  os_touch_stack();
  lock_acquire(&vm->lock);
}

static unsigned vmem_log2(size_t v) {
  return 63u - (unsigned)__builtin_clzl(v);
}

void vmem_init(vmem_t *vm, const char *name, size_t quantum, vmem_import_t *import,
               vmem_release_t *release, void *source, size_t import_min, size_t import_align) {
  memset(vm, 0, sizeof *vm);
  vm->name = name;
  vm->quantum = quantum;
  vm->import = import;
  vm->release = release;
  vm->source = source;
  vm->import_min = import_min;
  vm->import_align = import_align;
  vm->segs.anext = vm->segs.aprev = &vm->segs;
  vm->hash = vm->hash_first;
  vm->hash_size = VMEM_HASH_MIN;
  INJECT_QUIET(vm->name, &vm->lock, 1, sizeof vm->lock); /* theory 11 */
}

/* ---- free lists, hash, address list ---- */

static void free_insert(vmem_t *vm, vmem_seg_t *s) {
  unsigned i = vmem_log2(s->size);
  s->type = VMEM_FREE;
  s->lprev = NULL;
  s->lnext = vm->free_list[i];
  if (s->lnext) s->lnext->lprev = s;
  vm->free_list[i] = s;
  vm->free_map |= (uint64_t)1 << i;
}

static void free_remove(vmem_t *vm, vmem_seg_t *s) {
  unsigned i = vmem_log2(s->size);
  if (s->lprev)
    s->lprev->lnext = s->lnext;
  else
    vm->free_list[i] = s->lnext;
  if (s->lnext) s->lnext->lprev = s->lprev;
  if (!vm->free_list[i]) vm->free_map &= ~((uint64_t)1 << i);
}

static size_t hash_index(vmem_t *vm, uintptr_t start) {
  return (size_t)((start >> 12) * 0x9E3779B97F4A7C15ull >> 20) & (vm->hash_size - 1);
}

/* Moves the hash's segments into table, of size buckets (lock held); returns the old table. */
static vmem_seg_t **hash_move(vmem_t *vm, vmem_seg_t **table, size_t size) {
  vmem_seg_t **old = vm->hash;
  size_t old_size = vm->hash_size;
  vm->hash = table;
  vm->hash_size = size;
  for (size_t i = 0; i < old_size; i++)
    for (vmem_seg_t *s = old[i], *next; s; s = next) {
      next = s->lnext;
      size_t h = hash_index(vm, s->start);
      s->lnext = table[h];
      table[h] = s;
    }
  return old;
}

/* Grows the hash to size buckets, the lock not held: the table is mapped and the old one
   unmapped without it (theory 10); a thread that grew it meanwhile leaves nothing to do. A
   failed mapping only slows lookups. */
static void hash_grow(vmem_t *vm, size_t size) {
  vmem_seg_t **table = os_map(size * sizeof *table);
  if (!table) return;
  os_touch(table, size * sizeof *table); /* the move writes every page of it (theory 11) */
  arena_lock(vm);
  size_t old_size = vm->hash_size;
  vmem_seg_t **old = old_size < size ? hash_move(vm, table, size) : table;
  lock_release(&vm->lock);
  if (old != vm->hash_first) os_unmap(old, (old_size < size ? old_size : size) * sizeof *old);
}

static void hash_insert(vmem_t *vm, vmem_seg_t *s) {
  size_t h = hash_index(vm, s->start);
  s->type = VMEM_ALLOC;
  s->lnext = vm->hash[h];
  vm->hash[h] = s;
  vm->hash_count++;
}

static vmem_seg_t *hash_find(vmem_t *vm, uintptr_t start) {
  vmem_seg_t *s = vm->hash[hash_index(vm, start)];
  while (s && s->start != start)
    s = s->lnext;
  return s;
}

static void hash_remove(vmem_t *vm, vmem_seg_t *s) {
  vmem_seg_t **link = &vm->hash[hash_index(vm, s->start)];
  while (*link != s)
    link = &(*link)->lnext;
  *link = s->lnext;
  vm->hash_count--;
}

static void seg_link_after(vmem_seg_t *prev, vmem_seg_t *s) {
  s->aprev = prev;
  s->anext = prev->anext;
  prev->anext->aprev = s;
  prev->anext = s;
}

/* ---- segment tags (theory 11) ---- */

/* A purse of want tags from the stock, linked by lnext, for a request's splits (lock held),
   letting the lock go while the pool makes more where the stock has fewer; short only where
   the pool had no memory. */
static vmem_seg_t *tags_take(vmem_t *vm, unsigned want) {
  while (vm->tags_n < want) {
    unsigned make = want - vm->tags_n + VMEM_TAGS_MORE, made = 0;
    vmem_seg_t *tags = NULL, *last = NULL;
    lock_release(&vm->lock);
    INJECT(INJECT_UNLOCKED);
    for (vmem_seg_t *t; made < make && (t = meta_alloc(&vmem_seg_pool)); made++) {
      os_touch(t, sizeof *t); /* its pages mapped here: a tag may straddle two */
      t->lnext = tags;
      tags = t;
      if (!last) last = t;
    }
    lock_acquire(&vm->lock);
    if (last) {
      last->lnext = vm->tags;
      vm->tags = tags;
      vm->tags_n += made;
    }
    if (made < make) break;
  }
  vmem_seg_t *purse = NULL;
  for (unsigned n = 0; n < want && vm->tags; n++) {
    vmem_seg_t *t = vm->tags;
    vm->tags = t->lnext;
    vm->tags_n--;
    t->lnext = purse;
    purse = t;
  }
  return purse;
}

/* Puts tag t, no longer in use, back in the stock, or in the pool past VMEM_TAGS_KEEP (lock
   held). Stocked tags are zero but for lnext, as the pool's are. */
static void tag_put(vmem_t *vm, vmem_seg_t *t) {
  if (vm->tags_n >= VMEM_TAGS_KEEP) {
    meta_free(&vmem_seg_pool, t);
    return;
  }
  *t = (vmem_seg_t){.lnext = vm->tags};
  vm->tags = t;
  vm->tags_n++;
}

/* Puts the tags of its purse a request did not use back in the stock (lock held). */
static void tags_give(vmem_t *vm, vmem_seg_t *purse) {
  while (purse) {
    vmem_seg_t *t = purse;
    purse = t->lnext;
    tag_put(vm, t);
  }
}

static void seg_unlink(vmem_t *vm, vmem_seg_t *s) {
  s->aprev->anext = s->anext;
  s->anext->aprev = s->aprev;
  tag_put(vm, s);
}

/* Splits s at offset with a tag from purse: s keeps [start, start+offset), the returned tag
   the rest (same type); NULL where the purse is empty. */
static vmem_seg_t *seg_split(vmem_seg_t **purse, vmem_seg_t *s, size_t offset) {
  vmem_seg_t *rest = *purse;
  if (!rest) return NULL;
  *purse = rest->lnext;
  rest->start = s->start + offset;
  rest->size = s->size - offset;
  rest->type = s->type;
  rest->clean = s->clean;
  rest->span = s->span;
  s->size = offset;
  seg_link_after(s, rest);
  return rest;
}

/* ---- finding space ---- */

/* Links a whole span at the address list's end, its marker and then its one segment s (of its
   type already, ALLOC or FREE), and adds it to the arena's counts. */
static void span_attach(vmem_t *vm, vmem_seg_t *marker, vmem_seg_t *s) {
  seg_link_after(vm->segs.aprev, marker);
  seg_link_after(marker, s);
  marker->used = s->type == VMEM_ALLOC ? s->size : 0;
  vm->imported += s->size;
  vm->in_use += marker->used;
  if (s->type == VMEM_FREE && !s->clean) vm->dirty += s->size;
}

/* Takes a whole span, s its one segment (in no hash or free list now), out of the address list
   and the counts, its tags kept for span_attach. */
static void span_detach(vmem_t *vm, vmem_seg_t *s) {
  vmem_seg_t *marker = s->aprev;
  marker->aprev->anext = s->anext;
  s->anext->aprev = marker->aprev;
  vm->imported -= s->size;
  vm->in_use -= marker->used;
  if (s->type == VMEM_FREE && !s->clean) vm->dirty -= s->size;
}

/* Resizes the whole span that segment s fills (neither listed nor hashed now) through the
   parent, the lock let go meanwhile (theory 10): the span leaves the address list and the
   counts, where nothing finds it, and comes back, moved or not, at the list's end. Returns
   with the lock held; false if the parent could not (the span as it was). */
static bool span_remap(vmem_t *vm, vmem_seg_t *s, size_t new_size) {
  vmem_seg_t *marker = s->aprev;
  span_detach(vm, s);
  lock_pending_begin(&vm->unlocked, 1);
  lock_release(&vm->lock);
  INJECT(INJECT_UNLOCKED);
  void *moved = vm->remap(vm->source, (void *)s->start, s->size, new_size);
  lock_acquire(&vm->lock);
  lock_pending_end(&vm->unlocked, 1);
  if (moved) {
    marker->start = s->start = (uintptr_t)moved;
    marker->size = s->size = new_size;
    s->clean = 0; /* resident or not, it is no longer known zero */
  }
  span_attach(vm, marker, s);
  return moved != NULL;
}

static bool seg_fits(const vmem_seg_t *s, size_t size, size_t align) {
  uintptr_t start = (s->start + align - 1) & ~(uintptr_t)(align - 1);
  return start >= s->start && start - s->start + size <= s->size;
}

static vmem_seg_t *list_search(vmem_t *vm, unsigned list, size_t size, size_t align) {
  int budget = VMEM_SEARCH_MAX;
  for (vmem_seg_t *s = vm->free_list[list]; s && budget-- > 0; s = s->lnext)
    if (seg_fits(s, size, align)) return s;
  return NULL;
}

/* Packing: of the free segments that fit (a bounded search, smallest lists first), the one in
   the fullest span, so that spans fill up or empty instead of all staying half used. */
static vmem_seg_t *pack_find(vmem_t *vm, size_t size, size_t align) {
  vmem_seg_t *best = NULL;
  int budget = VMEM_SEARCH_MAX;
  uint64_t lists = vm->free_map & (~(uint64_t)0 << vmem_log2(size));
  for (; lists && budget > 0; lists &= lists - 1)
    for (vmem_seg_t *s = vm->free_list[__builtin_ctzll(lists)]; s && budget-- > 0; s = s->lnext)
      if (seg_fits(s, size, align) && (!best || s->span->used > best->span->used)) best = s;
  return best;
}

static vmem_seg_t *vmem_find(vmem_t *vm, size_t size, size_t align) {
  if (vm->pack) return pack_find(vm, size, align);
  unsigned low = vmem_log2(size);
  /* Recently freed segments of about this size first: the lists are LIFO, so this reuses
     resident pages, where instant fit alone would pass over a freed segment of exactly this
     size for fresh memory that faults when touched. Aligned requests look one list higher. */
  for (unsigned i = low; i <= low + (align > vm->quantum) && i < VMEM_LISTS; i++) {
    vmem_seg_t *s = list_search(vm, i, size, align);
    if (s) return s;
  }
  if (align > vm->quantum) {
    size += align - vm->quantum; /* any segment this large holds an aligned fit */
    if (size < align) return NULL;
  }
  unsigned want = vmem_log2(size) + ((size & (size - 1)) != 0);
  uint64_t above = want < VMEM_LISTS ? vm->free_map & (~(uint64_t)0 << want) : 0;
  return above ? vm->free_list[__builtin_ctzll(above)] : NULL;
}

static bool whole_span(const vmem_seg_t *s) {
  return s->aprev->type == VMEM_SPAN && s->aprev->size == s->size;
}

/* A span mapped for a request that found no room, which the request did not need after all:
   given back to the parent once the lock is let go. */
typedef struct vmem_spare {
  void *mem;
  size_t size;
  vmem_seg_t *marker, *seg;
  bool wake; /* threads wait for the import that ended: wake them */
} vmem_spare_t;

/* With the lock held, after an import (or a regrow): whether a thread waits for it. */
static bool import_end(vmem_t *vm) {
  bool waited = vm->importing == 2;
  vm->importing = 0;
  return waited;
}

/* For a VMEM_OWN request that no free segment fits, with no import under way: the largest
   wholly free span (of those a bounded search sees), remapped to size as an import maps one
   (`importing` set, the lock let go: theory 10) and listed again; NULL, the lock held
   throughout, if there is none, or, the lock let go, if the parent could not remap it. The
   threads that waited meanwhile are woken with *spare. */
static vmem_seg_t *span_regrow(vmem_t *vm, size_t size, vmem_spare_t *spare) {
  vmem_seg_t *best = NULL;
  int budget = VMEM_SEARCH_MAX;
  for (unsigned i = vmem_log2(size) + 1; i-- > 0 && !best && budget > 0;)
    for (vmem_seg_t *s = vm->free_list[i]; s && budget-- > 0; s = s->lnext)
      if (whole_span(s) && (!best || s->size > best->size)) best = s;
  if (!best) return NULL;
  free_remove(vm, best);
  vm->importing = 1;
  bool grown = span_remap(vm, best, size);
  spare->wake = import_end(vm);
  free_insert(vm, best);
  return grown ? best : NULL;
}

/* With the lock held, no free segment fitting size at align and no other import under way:
   imports a span without the lock (theory 10) and returns, the lock held again, the free
   segment the request takes: the new span's, or where a free made room meanwhile, that room
   (the new span, untouched, is then *spare, given back after the lock). NULL: the parent had
   none. */
static vmem_seg_t *vmem_import(vmem_t *vm, size_t size, size_t align, bool own,
                               vmem_spare_t *spare) {
  size_t span = own || size > vm->import_min ? size : vm->import_min;
  size_t span_align = align > vm->import_align ? align : vm->import_align;
  if (!vm->import) return NULL;
  vm->importing = 1;
  lock_pending_begin(&vm->unlocked, 1);
  lock_release(&vm->lock);
  INJECT(INJECT_UNLOCKED);
  vmem_seg_t *marker = meta_alloc(&vmem_seg_pool), *seg = meta_alloc(&vmem_seg_pool);
  bool clean = true;
  uint8_t backing = 0;
  void *mem = marker && seg ? vm->import(vm->source, span, span_align, &clean, &backing) : NULL;
  if (mem) { /* filled in here, their pages mapped (theory 11; a tag may straddle two) */
    os_touch(marker, sizeof *marker);
    os_touch(seg, sizeof *seg);
    marker->start = seg->start = (uintptr_t)mem;
    marker->size = seg->size = span;
    marker->type = VMEM_SPAN;
    marker->backing = backing;
    seg->clean = clean;
    seg->span = marker;
  }
  lock_acquire(&vm->lock);
  bool wake = import_end(vm) || spare->wake; /* a failed regrow's waiters too */
  lock_pending_end(&vm->unlocked, 1);
  vmem_seg_t *fit = vmem_find(vm, size, align);
  if (!mem || fit) { /* what was mapped (if anything) goes back */
    *spare = (vmem_spare_t){mem, span, marker, seg, wake};
    return fit;
  }
  *spare = (vmem_spare_t){NULL, 0, NULL, NULL, wake};
  free_insert(vm, seg);
  span_attach(vm, marker, seg);
  return seg; /* aligned and large enough (theory 3) */
}

/* Gives back what vmem_import mapped and no request took, and wakes the threads that waited for
   the import, the lock let go. */
static void vmem_spare_drop(vmem_t *vm, const vmem_spare_t *spare) {
  if (spare->wake) os_futex_wake(&vm->importing, INT_MAX);
  if (spare->mem) vm->release(vm->source, spare->mem, spare->size);
  if (spare->marker) meta_free(&vmem_seg_pool, spare->marker);
  if (spare->seg) meta_free(&vmem_seg_pool, spare->seg);
}

/* Cuts an allocation of size bytes aligned to align out of free segment s (lock held), with up
   to two tags from purse: the allocated segment, or NULL where no tag was to be had (s stays
   free). */
static vmem_seg_t *seg_carve(vmem_t *vm, vmem_seg_t **purse, vmem_seg_t *s, size_t size,
                             size_t align) {
  free_remove(vm, s);
  uintptr_t start = (s->start + align - 1) & ~(uintptr_t)(align - 1);
  if (start > s->start) { /* leave the unaligned head free */
    vmem_seg_t *rest = seg_split(purse, s, start - s->start);
    free_insert(vm, s);
    if (!rest) return NULL;
    s = rest;
  }
  if (s->size > size) {
    vmem_seg_t *tail = seg_split(purse, s, size);
    if (!tail) {
      free_insert(vm, s);
      return NULL;
    }
    free_insert(vm, tail);
  }
  if (!s->clean) vm->dirty -= size;
  hash_insert(vm, s);
  vm->in_use += size;
  s->span->used += size;
  return s;
}

/* A quantum cache's allocation of size bytes aligned to align (lock held), or NULL. */
static void *qcache_take(vmem_t *vm, size_t size, size_t align) {
  size_t n = size / vm->quantum;
  if (n > VMEM_QCACHE_MAX) return NULL;
  for (unsigned i = vm->qcache_n[n]; i-- > 0;) {
    void *p = vm->qcache[n][i];
    if ((uintptr_t)p & (align - 1)) continue;
    vm->qcache[n][i] = vm->qcache[n][--vm->qcache_n[n]];
    return p;
  }
  return NULL;
}

unsigned vmem_alloc_some(vmem_t *vm, size_t size, size_t align, void **out, bool *clean,
                         unsigned n) {
  unsigned k = 0;
  os_touch(out, n * sizeof *out); /* written under the lock: mapped before (theory 11) */
  if (clean) os_touch(clean, n * sizeof *clean);
  arena_lock(vm);
  for (; k < n && (out[k] = qcache_take(vm, size, align)); k++)
    if (clean) clean[k] = false;
  vmem_seg_t *purse = k < n ? tags_take(vm, 2 * (n - k)) : NULL;
  for (vmem_seg_t *s;
       k < n && (s = vmem_find(vm, size, align)) && (s = seg_carve(vm, &purse, s, size, align));
       k++) {
    out[k] = (void *)s->start;
    if (clean) clean[k] = s->clean;
  }
  tags_give(vm, purse);
  size_t grow = vm->hash_count > vm->hash_size ? vm->hash_size * 4 : 0;
  lock_release(&vm->lock);
  if (grow) hash_grow(vm, grow);
  return k;
}

void *vmem_alloc(vmem_t *vm, size_t size, size_t align, int flags, bool *clean) {
  size_t q = vm->quantum;
  if (size == 0 || size > SIZE_MAX - q) return NULL;
  size = (size + q - 1) & ~(q - 1);
  if (align < q) align = q;
  bool own = (flags & VMEM_OWN) != 0; /* only shapes the import, if one is needed */
  vmem_spare_t spare = {NULL, 0, NULL, NULL, false};
  arena_lock(vm);
  void *cached = qcache_take(vm, size, align);
  if (cached) {
    lock_release(&vm->lock);
    *clean = false;
    return cached;
  }
  vmem_seg_t *purse = tags_take(vm, 2), *s;
  for (;;) {
    s = vmem_find(vm, size, align);
    if (s || !vm->importing) break;
    vm->importing = 2; /* another thread imports: wait for it (it wakes us), then look again */
    lock_release(&vm->lock);
    os_futex_wait(&vm->importing, 2);
    lock_acquire(&vm->lock);
  }
  if (!s && own && align == q && vm->remap) s = span_regrow(vm, size, &spare);
  if (!s && !(s = vmem_import(vm, size, align, own, &spare))) goto fail;
  if (!(s = seg_carve(vm, &purse, s, size, align))) goto fail;
  tags_give(vm, purse);
  size_t grow = vm->hash_count > vm->hash_size ? vm->hash_size * 4 : 0;
  void *p = (void *)s->start;
  *clean = s->clean;
  lock_release(&vm->lock);
  vmem_spare_drop(vm, &spare);
  if (grow) hash_grow(vm, grow);
  return p;
fail:
  tags_give(vm, purse);
  lock_release(&vm->lock);
  vmem_spare_drop(vm, &spare);
  return NULL;
}

/* ---- giving back ---- */

/* Merges free segment s with its free neighbours; returns the merged segment (not listed). */
static vmem_seg_t *coalesce(vmem_t *vm, vmem_seg_t *s) {
  vmem_seg_t *next = s->anext, *prev = s->aprev;
  if (next->type == VMEM_FREE) {
    free_remove(vm, next);
    if (s->clean != next->clean) vm->dirty += s->clean ? s->size : next->size;
    s->clean &= next->clean;
    s->size += next->size;
    seg_unlink(vm, next);
  }
  if (prev->type == VMEM_FREE) {
    free_remove(vm, prev);
    if (s->clean != prev->clean) vm->dirty += s->clean ? s->size : prev->size;
    prev->clean &= s->clean;
    prev->size += s->size;
    seg_unlink(vm, s);
    s = prev;
  }
  return s;
}

/* Whether free segment s covers its whole span and span_release may give it to the parent now:
   not while its owner works on it, nor where a job would take it and jobs has no room. */
static bool span_releasable(const vmem_t *vm, const vmem_seg_t *s, const vmem_jobs_t *jobs) {
  const vmem_seg_t *marker = s->aprev;
  return marker->type == VMEM_SPAN && marker->size == s->size && vm->release && !marker->busy &&
         jobs->n < jobs->cap;
}

/* Takes s's span out of the arena and leaves its release to the parent to a job (outside the
   lock), if s (not listed) covers all of it; true if it did. */
static bool span_release(vmem_t *vm, vmem_seg_t *s, vmem_jobs_t *jobs) {
  vmem_seg_t *marker = s->aprev;
  if (!span_releasable(vm, s, jobs)) return false;
  if (!s->clean) vm->dirty -= s->size;
  vm->imported -= s->size;
  jobs->job[jobs->n++] = (vmem_job_t){NULL, s->start, s->size, 0, 0};
  seg_unlink(vm, s);
  seg_unlink(vm, marker);
  return true;
}

/* Coalesces free segment s (not listed) and lists it, or releases its span (theory 7, 9). */
static void seg_settle(vmem_t *vm, vmem_seg_t *s, vmem_jobs_t *jobs) {
  s = coalesce(vm, s);
  size_t keep = vm->retain > vm->in_use ? vm->retain : vm->in_use;
  if (whole_span(s) && (vm->pack || vm->imported - vm->in_use > keep) && span_release(vm, s, jobs))
    return;
  free_insert(vm, s);
}

static void seg_free(vmem_t *vm, vmem_seg_t *s, vmem_jobs_t *jobs) {
  vm->in_use -= s->size;
  s->span->used -= s->size;
  vm->dirty += s->size;
  s->clean = 0;
  seg_settle(vm, s, jobs);
}

/* Purges the segments of jobs' purge jobs, after the splits their owner asked for (outside the
   lock). Out of line: only a reap purges, and its list of ranges stays off the stack of
   jobs_run's other callers. */
__attribute__((noinline)) static void jobs_purge(vmem_t *vm, const vmem_jobs_t *jobs) {
  os_purge_range_t room[VMEM_JOBS];
  os_purge_list_t list = OS_PURGE_LIST_IN(room, opt.purge_batch);
  for (unsigned i = 0; i < jobs->n; i++) {
    const vmem_job_t *j = &jobs->job[i];
    if (!j->seg) continue;
    if (j->split_size) vm->split(vm->source, (void *)j->split_start, j->split_size);
    os_purge_list_add(&list, (void *)j->start, j->size);
  }
  os_purge_list_run(&list);
}

/* Does the jobs outside the lock (held on entry and on return), then frees the purged
   segments, which may release spans: those are done in the same way. */
static void jobs_run(vmem_t *vm, vmem_jobs_t *jobs) {
  if (!jobs->n) return;
  lock_pending_begin(&vm->unlocked, 1);
  while (jobs->n) {
    lock_release(&vm->lock);
    INJECT(INJECT_GIVE_BACK);
    unsigned n = jobs->n, purges = 0;
    for (unsigned i = 0; i < n; i++) {
      vmem_job_t *j = &jobs->job[i];
      if (j->seg)
        purges++;
      else
        vm->release(vm->source, (void *)j->start, j->size);
    }
    if (purges) jobs_purge(vm, jobs);
    jobs->n = 0;
    lock_acquire(&vm->lock);
    /* Settling a segment adds one job at most (its span's release), at jobs->n <= i: job i is
       read before anything is written over it. */
    for (unsigned i = 0; i < n; i++) {
      vmem_seg_t *s = jobs->job[i].seg;
      if (!s) continue;
      s->type = VMEM_FREE;
      seg_settle(vm, s, jobs);
    }
  }
  lock_pending_end(&vm->unlocked, 1);
}

void vmem_free(vmem_t *vm, void *addr, size_t size) {
  size_t q = vm->quantum;
  size = (size + q - 1) & ~(q - 1);
  size_t n = size / q;
  vmem_job_t room[1];
  vmem_jobs_t jobs = VMEM_JOBS_IN(room);
  arena_lock(vm);
  vmem_seg_t *s = hash_find(vm, (uintptr_t)addr);
  if (!s || s->size != size)
    report_fatal("vmem_free of a range the arena did not allocate", addr, size);
  if (n <= VMEM_QCACHE_MAX && vm->qcache_n[n] < VMEM_QCACHE_DEPTH) {
    vm->qcache[n][vm->qcache_n[n]++] = addr; /* stays allocated in the arena */
  } else {
    hash_remove(vm, s);
    seg_free(vm, s, &jobs);
    jobs_run(vm, &jobs);
  }
  lock_release(&vm->lock);
}

void *vmem_resize(vmem_t *vm, void *addr, size_t old_size, size_t new_size) {
  size_t q = vm->quantum;
  old_size = (old_size + q - 1) & ~(q - 1);
  if (new_size == 0 || new_size > SIZE_MAX - q) return NULL;
  new_size = (new_size + q - 1) & ~(q - 1);
  if (new_size == old_size) return addr;
  vmem_job_t room[1];
  vmem_jobs_t jobs = VMEM_JOBS_IN(room);
  arena_lock(vm);
  vmem_seg_t *purse = tags_take(vm, 1);
  vmem_seg_t *s = hash_find(vm, (uintptr_t)addr);
  if (!s || s->size != old_size)
    report_fatal("vmem_resize of a range the arena did not allocate", addr, old_size);
  void *result = NULL;
  if (vm->remap && whole_span(s)) {
    hash_remove(vm, s);
    if (span_remap(vm, s, new_size)) result = (void *)s->start;
    hash_insert(vm, s);
  } else if (new_size < old_size) {
    vmem_seg_t *tail = seg_split(&purse, s, new_size); /* an ALLOC tag outside the hash */
    if (tail) {
      seg_free(vm, tail, &jobs);
      jobs_run(vm, &jobs);
      result = addr;
    }
  } else {
    vmem_seg_t *next = s->anext;
    size_t need = new_size - old_size;
    if (next->type == VMEM_FREE && next->size >= need) {
      free_remove(vm, next);
      vmem_seg_t *rest = next->size > need ? seg_split(&purse, next, need) : next;
      if (rest) {
        if (rest != next) free_insert(vm, rest);
        if (!next->clean) vm->dirty -= need;
        s->size += need;
        vm->in_use += need;
        s->span->used += need;
        seg_unlink(vm, next);
        result = addr;
      } else {
        free_insert(vm, next);
      }
    }
  }
  tags_give(vm, purse);
  lock_release(&vm->lock);
  return result;
}

/* Takes out up to the jobs' room of wholly free spans to release (release_spans) and of dirty
   segments to purge while the dirty bytes exceed keep_dirty, biggest first; returns their
   bytes. */
static size_t reap_take(vmem_t *vm, size_t keep_dirty, bool release_spans, vmem_jobs_t *jobs) {
  size_t given = 0;
  for (unsigned i = VMEM_LISTS; i-- > 0 && (vm->dirty > keep_dirty || release_spans);)
    for (vmem_seg_t *s = vm->free_list[i], *next; s && jobs->n < jobs->cap; s = next) {
      next = s->lnext;
      size_t size = s->size;
      if (release_spans && span_releasable(vm, s, jobs)) {
        free_remove(vm, s);
        span_release(vm, s, jobs);
        given += size;
      } else if (!s->clean && vm->dirty > keep_dirty) {
        free_remove(vm, s);
        s->type = VMEM_PURGING;
        s->clean = 1;
        vm->dirty -= size;
        given += size;
        bool split = vm->purging && vm->purging(vm->source, s->span, (void *)s->start, size);
        jobs->job[jobs->n++] =
            (vmem_job_t){s, s->start, size, split ? s->span->start : 0, split ? s->span->size : 0};
      }
    }
  return given;
}

size_t vmem_reap(vmem_t *vm, size_t keep_dirty, bool release_spans) {
  size_t given = 0;
  vmem_job_t room[VMEM_JOBS];
  vmem_jobs_t jobs = VMEM_JOBS_IN(room);
  arena_lock(vm);
  for (size_t n = 1; n <= VMEM_QCACHE_MAX; n++)
    while (vm->qcache_n[n] > 0) {
      vmem_seg_t *s = hash_find(vm, (uintptr_t)vm->qcache[n][--vm->qcache_n[n]]);
      hash_remove(vm, s);
      seg_free(vm, s, &jobs);
      if (jobs.n == jobs.cap) jobs_run(vm, &jobs); /* so that every release finds room */
    }
  jobs_run(vm, &jobs);
  for (size_t taken = 1; taken;) { /* until a look finds nothing more to give back */
    taken = reap_take(vm, keep_dirty, release_spans, &jobs);
    given += taken;
    jobs_run(vm, &jobs);
  }
  lock_release(&vm->lock);
  return given;
}

void vmem_check(vmem_t *vm) {
  arena_lock(vm);
  size_t imported = 0, in_use = 0, dirty = 0, free_count = 0, listed = 0, span_used = 0;
  uintptr_t span_end = 0, cursor = 0;
  vmem_seg_t *marker = NULL;
  for (vmem_seg_t *s = vm->segs.anext; s != &vm->segs; s = s->anext) {
    if (s->anext->aprev != s) report_fatal("vmem: address list broken", (void *)s->start, 0);
    if (s->type == VMEM_SPAN) {
      imported += s->size;
      cursor = s->start;
      span_end = s->start + s->size;
      marker = s;
      span_used = 0;
    } else {
      if (s->start != cursor || s->start + s->size > span_end || s->size % vm->quantum ||
          s->span != marker)
        report_fatal("vmem: segments do not tile their span", (void *)s->start, s->size);
      cursor += s->size;
      if (s->type == VMEM_ALLOC) span_used += s->size;
    }
    if (s->anext->type == VMEM_SPAN || s->anext == &vm->segs) {
      if (span_used != marker->used || marker->hollow > span_used)
        report_fatal("vmem: a span's bytes in use disagree with its segments", marker, span_used);
      in_use += span_used;
    }
    if (s->type == VMEM_SPAN) continue;
    if (s->type == VMEM_FREE) {
      free_count++;
      if (!s->clean) dirty += s->size;
      if (s->anext->type == VMEM_FREE)
        report_fatal("vmem: adjacent free segments", (void *)s->start, 0);
    }
  }
  for (unsigned i = 0; i < VMEM_LISTS; i++) {
    if (((vm->free_map >> i) & 1) != (vm->free_list[i] != NULL))
      report_fatal("vmem: free bitmap disagrees with its lists", NULL, i);
    for (vmem_seg_t *s = vm->free_list[i]; s; s = s->lnext, listed++)
      if (s->type != VMEM_FREE || vmem_log2(s->size) != i)
        report_fatal("vmem: segment on the wrong free list", (void *)s->start, i);
  }
  if (imported != vm->imported || in_use != vm->in_use || dirty != vm->dirty ||
      listed != free_count)
    report_fatal("vmem: accounting disagrees with the segments", NULL, imported);
  unsigned stocked = 0;
  for (vmem_seg_t *t = vm->tags; t; t = t->lnext, stocked++)
    if (t->type || t->size) report_fatal("vmem: a spare tag is in use", t, t->type);
  if (stocked != vm->tags_n) report_fatal("vmem: the spare tags miscounted", NULL, stocked);
  lock_release(&vm->lock);
}

/* ---- spans, for the arena's owner ---- */

size_t vmem_spans_take(vmem_t *vm, vmem_pick_t *pick, void *arg, vmem_seg_t **out, size_t max) {
  size_t n = 0;
  arena_lock(vm);
  for (vmem_seg_t *s = vm->segs.anext; s != &vm->segs && n < max; s = s->anext)
    if (s->type == VMEM_SPAN && !s->busy && pick(s, arg)) {
      s->busy = 1;
      out[n++] = s;
    }
  lock_release(&vm->lock);
  return n;
}

void vmem_span_done(vmem_t *vm, vmem_seg_t *span, uint8_t backing) {
  arena_lock(vm);
  span->busy = 0;
  span->backing = backing;
  vmem_seg_t *first = span->anext;
  if (vm->pack && first->type == VMEM_FREE && whole_span(first)) {
    vmem_job_t room[1];
    vmem_jobs_t jobs = VMEM_JOBS_IN(room);
    free_remove(vm, first);
    if (!span_release(vm, first, &jobs)) free_insert(vm, first);
    jobs_run(vm, &jobs);
  }
  lock_release(&vm->lock);
}

vmem_seg_t *vmem_span_of(vmem_t *vm, const void *addr) {
  vmem_seg_t *s = hash_find(vm, (uintptr_t)addr);
  return s ? s->span : NULL;
}

void vmem_spans_each(vmem_t *vm, void (*fn)(const vmem_seg_t *span, void *arg), void *arg) {
  arena_lock(vm);
  for (vmem_seg_t *s = vm->segs.anext; s != &vm->segs; s = s->anext)
    if (s->type == VMEM_SPAN) fn(s, arg);
  lock_release(&vm->lock);
}
