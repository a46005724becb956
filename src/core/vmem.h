/* vmem: arenas of page-granular spans. See vmem.c for the theory. */
#ifndef MAGPIE_VMEM_H
#define MAGPIE_VMEM_H

#include "lock.h"
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define VMEM_LISTS 64       /* free list i holds free segments of [2^i, 2^(i+1)) bytes */
#define VMEM_QCACHE_MAX 32  /* quantum caches serve 1..32 quanta */
#define VMEM_QCACHE_DEPTH 4 /* segments each quantum cache may hold */
#define VMEM_OWN 0x1        /* vmem_alloc flag: if it must import, a span of exactly its size */
#define VMEM_HASH_MIN 256   /* the hash's first buckets; it grows 4x past one segment each */

/* Returns a span of size bytes aligned to align; *clean says whether it is known zero, and
   *backing (0 unless set) goes into the span's marker for the arena's owner. Called without the
   arena's lock (vmem.c theory 10). */
typedef void *vmem_import_t(void *source, size_t size, size_t align, bool *clean, uint8_t *backing);
typedef void vmem_release_t(void *source, void *addr, size_t size);
/* Optional: resizes a span the parent gave, perhaps moving it; NULL if it cannot. */
typedef void *vmem_remap_t(void *source, void *addr, size_t old_size, size_t new_size);
typedef struct vmem_seg vmem_seg_t;
/* Optional: the owner's record of a purge of free range [addr, addr + size) of span (its
   marker), called under the arena's lock just before the pages go back outside it; true if the
   span must first go through the owner's split, which then runs outside the lock too. */
typedef bool vmem_purging_t(void *source, vmem_seg_t *span, void *addr, size_t size);
typedef void vmem_split_t(void *source, void *span_start, size_t span_size);

struct vmem_seg {
  uintptr_t start;
  size_t size;
  vmem_seg_t *anext, *aprev; /* all segments of the arena, each span's after its marker */
  vmem_seg_t *lnext, *lprev; /* FREE: its free list; ALLOC: its hash chain (lnext only) */
  vmem_seg_t *span;          /* FREE, ALLOC: the marker of the span it lies in */
  size_t used;               /* SPAN: bytes of the span in ALLOC segments */
  size_t hollow;   /* SPAN: bytes of its ALLOC segments the owner gave back (its record) */
  uint8_t type;    /* VMEM_SPAN (import marker), VMEM_FREE, VMEM_ALLOC or VMEM_PURGING */
  uint8_t clean;   /* FREE, ALLOC: no byte written since mapped or purged */
  uint8_t backing; /* SPAN: the owner's record of how its pages are backed */
  uint8_t busy;    /* SPAN: the owner works on it unlocked; it is not released */
};

typedef struct vmem {
  const char *name;
  lock_t lock;         /* protects everything below */
  size_t quantum;      /* allocation unit, a power of two */
  size_t import_min;   /* smallest import from the parent */
  size_t import_align; /* alignment of every import */
  size_t retain;       /* free bytes kept mapped when a span empties */
  vmem_import_t *import;
  vmem_release_t *release;
  vmem_remap_t *remap;     /* NULL: whole-span allocations resize like any other */
  vmem_purging_t *purging; /* NULL: the owner keeps no record of purges */
  vmem_split_t *split;     /* what purging asks for, before the purge (with purging) */
  bool pack;               /* fullest span first; a wholly free span goes back at once */
  void *source;
  vmem_seg_t segs; /* sentinel of the address-ordered segment list */
  vmem_seg_t *free_list[VMEM_LISTS];
  uint64_t free_map; /* bit i set iff free_list[i] is not empty */
  vmem_seg_t **hash; /* ALLOC segments by start address */
  size_t hash_size, hash_count;
  vmem_seg_t *hash_first[VMEM_HASH_MIN]; /* the first table, in place: none to map */
  void *qcache[VMEM_QCACHE_MAX + 1][VMEM_QCACHE_DEPTH];
  uint8_t qcache_n[VMEM_QCACHE_MAX + 1];
  size_t imported;    /* bytes in spans */
  size_t in_use;      /* bytes in ALLOC segments (quantum caches included) */
  size_t dirty;       /* bytes in FREE segments that may hold data (not purged) */
  unsigned unlocked;  /* threads importing or giving back pages outside its lock (theory 10) */
  uint32_t importing; /* 1 while a thread imports, 2 once one waits (a futex they sleep on) */
  vmem_seg_t *tags;   /* spare segment tags, linked by lnext, their pages mapped (vmem.c 11) */
  unsigned tags_n;
} vmem_t;

void vmem_init(vmem_t *vm, const char *name, size_t quantum, vmem_import_t *import,
               vmem_release_t *release, void *source, size_t import_min, size_t import_align);
/* size bytes aligned to align (a power of two); *clean says whether they are known zero. */
void *vmem_alloc(vmem_t *vm, size_t size, size_t align, int flags, bool *clean);
void vmem_free(vmem_t *vm, void *addr, size_t size);
/* Up to n allocations of size bytes aligned to align (a multiple of the quantum) from the
   quantum caches and the free space there is, under one lock, none imported: out[0..k), and
   clean[0..k) where clean is not NULL; returns k. */
unsigned vmem_alloc_some(vmem_t *vm, size_t size, size_t align, void **out, bool *clean,
                         unsigned n);
/* Grows or shrinks an allocation: in place (returns addr), or, for one that fills its span when
   the parent can remap, wherever the parent moves it; NULL (nothing changed) if it cannot. */
void *vmem_resize(vmem_t *vm, void *addr, size_t old_size, size_t new_size);
/* Empties the quantum caches, purges dirty free memory above keep_dirty bytes, releases
   wholly free spans when release_spans; returns the bytes given back to the kernel or parent. */
size_t vmem_reap(vmem_t *vm, size_t keep_dirty, bool release_spans);
void vmem_check(vmem_t *vm); /* aborts with a report if an invariant is broken */
/* Up to max spans for which pick(span, arg) holds, in address order, marked busy so that the
   caller may work on them without the lock; it hands each back with vmem_span_done, which
   sets its backing (and releases it if it emptied meanwhile). */
typedef bool vmem_pick_t(const vmem_seg_t *span, void *arg);
size_t vmem_spans_take(vmem_t *vm, vmem_pick_t *pick, void *arg, vmem_seg_t **out, size_t max);
void vmem_span_done(vmem_t *vm, vmem_seg_t *span, uint8_t backing);
/* The marker of the span holding allocation addr, or NULL; vm->lock held. */
vmem_seg_t *vmem_span_of(vmem_t *vm, const void *addr);
/* Calls fn on every span, under the arena's lock (fn must not call into the arena). */
void vmem_spans_each(vmem_t *vm, void (*fn)(const vmem_seg_t *span, void *arg), void *arg);

#endif
