/*
 * vmem against a fake parent: randomised allocations (sizes, alignments, own spans) and frees,
 * each block stamped at both ends and checked at free (no overlap), the arena's invariants
 * checked after every operation (vmem_check), in-place resize, quantum caches (aligned requests
 * served from them too), several allocations under one hold of the lock, that a full
 * reap gives every imported span back to the parent, that pages go back and spans come in and
 * are remapped with the arena's lock free (the linker wraps os_purge_list_run here:
 * tests/unit/CMakeLists.txt), threads that import at once keeping one span; that segment tags
 * are made with the lock free (it wraps meta_alloc too); and that a purge list zeroes the pages
 * it lists and no other, in batches and one by one.
 */
#include "vmem.h"
#include "meta.h"
#include "os.h"
#include "unit.h"

#include <pthread.h>
#include <string.h>
#include <sys/mman.h>

#define REGION ((size_t)16 << 30) /* address space only: the fake never reuses ranges */
#define SPANS_MAX 4096
#define LIVE_MAX 512

typedef struct fake_parent {
  uintptr_t base, bump;
  struct {
    uintptr_t start;
    size_t size;
  } spans[SPANS_MAX];
  int nspans;
  size_t imported, released;
} fake_parent_t;

/* The arena whose lock the parent's release and os_purge_list_run look at, and how often they found
   it held; segments being purged, which no allocation may get meanwhile. */
static vmem_t *watched;
static int calls_locked, purges, releases;
static void *during_purge;
static size_t during_purge_size;

/* Whether the watched arena's lock is free (taking and dropping it). */
static bool watched_unlocked(void) {
  if (!lock_try(&watched->lock)) return false;
  lock_release(&watched->lock);
  return true;
}

void __real_os_purge_list_run(os_purge_list_t *list);
void __wrap_os_purge_list_run(os_purge_list_t *list) {
  for (size_t i = 0; watched && i < list->n; i++) {
    uintptr_t p = (uintptr_t)list->range[i].start;
    size_t size = list->range[i].size;
    purges++;
    if (!watched_unlocked()) {
      calls_locked++;
    } else if (!during_purge) { /* an allocation of its size meanwhile gets other space */
      bool clean;
      during_purge = vmem_alloc(watched, size, OS_PAGE, 0, &clean);
      during_purge_size = size;
      uintptr_t q = (uintptr_t)during_purge;
      UCHECK(q && (q + size <= p || q >= p + size));
    }
  }
  __real_os_purge_list_run(list);
}

/* Segment tags made while the lock of the arena whose tags are watched was held: none may be
   (vmem.c theory 11: a tag's first write may fault, and a pool that ran dry maps a chunk). */
static vmem_t *tags_watched;
static int tags_made, tags_made_locked;

void *__real_meta_alloc(meta_pool_t *pool);
void *__wrap_meta_alloc(meta_pool_t *pool) {
  if (tags_watched) {
    tags_made++;
    if (!lock_try(&tags_watched->lock))
      tags_made_locked++;
    else
      lock_release(&tags_watched->lock);
  }
  return __real_meta_alloc(pool);
}

/* Imports into the watched arena: how many; what the next does meanwhile (a thread that also
   finds no room and must wait for it, or a free that makes room), and what that thread got. */
static int imports;
static enum { IMPORT_ALONE, IMPORT_CROWD, IMPORT_FREE } import_next;
static void *crowd_block, *freed_meanwhile;
static size_t freed_size;

#define CROWD_BLOCK ((size_t)256 << 10) /* above the quantum caches' sizes */

static void *crowd_thread(void *arg) {
  bool clean;
  crowd_block = vmem_alloc(arg, CROWD_BLOCK, OS_PAGE, 0, &clean);
  return NULL;
}
static pthread_t crowd;

static void *fake_import(void *source, size_t size, size_t align, bool *clean, uint8_t *backing) {
  fake_parent_t *f = source;
  *clean = true;
  (void)backing;
  if (watched) {
    bool unlocked = watched_unlocked();
    imports++;
    calls_locked += !unlocked;
    if (import_next == IMPORT_CROWD && unlocked) { /* it waits for this import */
      UCHECK(pthread_create(&crowd, NULL, crowd_thread, watched) == 0);
      os_sleep_ms(20);
      UCHECK(__atomic_load_n(&crowd_block, __ATOMIC_RELAXED) == NULL && watched_unlocked());
    } else if (import_next == IMPORT_FREE && unlocked) {
      vmem_free(watched, freed_meanwhile, freed_size);
    }
    import_next = IMPORT_ALONE;
  }
  uintptr_t start = (f->bump + align - 1) & ~(uintptr_t)(align - 1);
  if (start + size > f->base + REGION || f->nspans == SPANS_MAX) return NULL;
  f->bump = start + size;
  f->spans[f->nspans].start = start;
  f->spans[f->nspans++].size = size;
  f->imported += size;
  return (void *)start;
}

static void fake_release(void *source, void *addr, size_t size) {
  fake_parent_t *f = source;
  if (watched) {
    releases++;
    calls_locked += !watched_unlocked();
  }
  int i = 0;
  while (i < f->nspans && f->spans[i].start != (uintptr_t)addr)
    i++;
  UCHECK(i < f->nspans && f->spans[i].size == size); /* only whole imported spans come back */
  f->spans[i] = f->spans[--f->nspans];
  f->released += size;
}

/* Remaps in the watched arena: how many; whether the next allocates a page meanwhile, and
   what it got. */
static int remaps;
static bool remap_allocates;
static unsigned char *during_remap;

/* Moves a span to fresh address space, as mremap may (the old range stays reserved). In the
   watched arena, with its lock free, the arena's counts agree with its segments meanwhile (the
   span out of both), and an allocation gets other space. */
static void *fake_remap(void *source, void *addr, size_t old_size, size_t new_size) {
  fake_parent_t *f = source;
  if (watched) {
    bool unlocked = watched_unlocked();
    remaps++;
    calls_locked += !unlocked;
    if (unlocked) vmem_check(watched);
    if (remap_allocates && unlocked) {
      bool clean;
      during_remap = vmem_alloc(watched, OS_PAGE, OS_PAGE, 0, &clean);
      uintptr_t q = (uintptr_t)during_remap, p = (uintptr_t)addr;
      UCHECK(q && (q + OS_PAGE <= p || q >= p + old_size));
    }
    remap_allocates = false;
  }
  int i = 0;
  while (i < f->nspans && f->spans[i].start != (uintptr_t)addr)
    i++;
  UCHECK(i < f->nspans && f->spans[i].size == old_size);
  bool clean;
  uint8_t backing;
  void *moved = fake_import(source, new_size, OS_PAGE, &clean, &backing);
  if (!moved) return NULL;
  memcpy(moved, addr, old_size < new_size ? old_size : new_size);
  f->imported -= new_size; /* the import above was a move, not a new span */
  f->spans[i] = f->spans[--f->nspans];
  f->imported += new_size - old_size;
  return moved;
}

typedef struct block {
  unsigned char *p;
  size_t size;
  unsigned char stamp;
} block_t;

static void stamp(block_t *b) {
  b->p[0] = b->stamp;
  b->p[b->size - 1] = b->stamp;
}

/* A packing arena (the slab arena's shape: spans of one 2 MiB huge page): new allocations go to
   the fullest span, a span's bytes in use are counted, a wholly free span goes back at once. */
#define PACK_SPAN ((size_t)2 << 20)
#define PACK_BLOCK ((size_t)64 << 10)
#define PACK_PER_SPAN (PACK_SPAN / PACK_BLOCK)

static void pack_test(fake_parent_t *parent) {
  static vmem_t vm;
  static void *blocks[4 * PACK_PER_SPAN];
  bool clean;
  vmem_init(&vm, "pack", OS_PAGE, fake_import, fake_release, parent, PACK_SPAN, PACK_SPAN);
  vm.pack = true;
  for (size_t i = 0; i < 4 * PACK_PER_SPAN; i++) { /* four full spans */
    blocks[i] = vmem_alloc(&vm, PACK_BLOCK, PACK_BLOCK, 0, &clean);
    UCHECK(blocks[i] != NULL);
  }
  vmem_check(&vm);
  UCHECK(vm.imported == 4 * PACK_SPAN && parent->nspans == 4);
  /* Free a quarter of span 0, half of span 1, all but one block of span 2 (largest holes
     first: first fit would reuse span 2's), and the whole of span 3: span 3 goes back. */
  size_t freed[4] = {PACK_PER_SPAN / 4, PACK_PER_SPAN / 2, PACK_PER_SPAN - 1, PACK_PER_SPAN};
  for (size_t sp = 0; sp < 4; sp++)
    for (size_t i = 0; i < freed[sp]; i++)
      vmem_free(&vm, blocks[sp * PACK_PER_SPAN + (PACK_PER_SPAN - 1 - i)], PACK_BLOCK);
  vmem_reap(&vm, SIZE_MAX, false); /* empties the quantum caches, purges nothing */
  vmem_check(&vm);
  UCHECK(vm.imported == 3 * PACK_SPAN && parent->nspans == 3); /* span 3 went back whole */
  /* Refill: the holes of span 0 (the fullest) fill first, then span 1's, then span 2's. */
  uintptr_t base[3];
  for (size_t sp = 0; sp < 3; sp++)
    base[sp] = (uintptr_t)blocks[sp * PACK_PER_SPAN];
  for (size_t sp = 0; sp < 3; sp++)
    for (size_t i = 0; i < freed[sp]; i++) {
      uintptr_t p = (uintptr_t)vmem_alloc(&vm, PACK_BLOCK, PACK_BLOCK, 0, &clean);
      UCHECK(p >= base[sp] && p < base[sp] + PACK_SPAN);
      blocks[sp * PACK_PER_SPAN + (PACK_PER_SPAN - 1 - i)] = (void *)p;
    }
  vmem_check(&vm);
  UCHECK(vm.imported == 3 * PACK_SPAN && vm.in_use == 3 * PACK_SPAN);
  for (size_t i = 0; i < 3 * PACK_PER_SPAN; i++)
    vmem_free(&vm, blocks[i], PACK_BLOCK);
  vmem_reap(&vm, SIZE_MAX, false);
  vmem_check(&vm);
  UCHECK(vm.imported == 0 && vm.in_use == 0 && parent->nspans == 0);
}

/* Purges and releases run with the arena's lock free (vmem.c theory 10). */
static void unlocked_test(fake_parent_t *parent) {
  static vmem_t vm;
  const size_t block = (size_t)256 << 10;
  bool clean;
  vmem_init(&vm, "unlocked", OS_PAGE, fake_import, fake_release, parent, (size_t)1 << 20, OS_PAGE);
  unsigned char *a = vmem_alloc(&vm, block, OS_PAGE, 0, &clean);
  unsigned char *b = vmem_alloc(&vm, block, OS_PAGE, 0, &clean);
  UCHECK(a && b && parent->nspans == 1);
  memset(a, 1, block);
  vmem_free(&vm, a, block); /* dirty, and b keeps the span */
  watched = &vm;
  vmem_reap(&vm, 0, false);
  vmem_check(&vm);
  UCHECK(purges >= 1 && during_purge && calls_locked == 0);
  UCHECK(vm.dirty == 0 && a[0] == 0 && a[block - 1] == 0); /* purged, and counted clean */
  vmem_free(&vm, during_purge, during_purge_size);
  vmem_free(&vm, b, block);
  vmem_reap(&vm, 0, true);
  vmem_check(&vm);
  UCHECK(releases >= 1 && calls_locked == 0 && vm.imported == 0 && parent->nspans == 0);
  watched = NULL;
}

/* Imports run with the arena's lock free (vmem.c theory 10), one at a time: a thread that finds
   no room meanwhile waits for the import and takes room in its span (one span for the two);
   an importer that finds room a free made meanwhile takes it and gives its span back,
   untouched, after the lock. */
static void import_test(fake_parent_t *parent) {
  static vmem_t vm;
  const size_t span = (size_t)1 << 20;
  bool clean;
  int spans = parent->nspans;
  vmem_init(&vm, "import", OS_PAGE, fake_import, fake_release, parent, span, OS_PAGE);
  vm.retain = (size_t)64 << 20; /* a wholly free span stays */
  watched = &vm;
  calls_locked = imports = releases = 0;
  import_next = IMPORT_CROWD;
  void *a = vmem_alloc(&vm, CROWD_BLOCK, OS_PAGE, 0, &clean);
  UCHECK(pthread_join(crowd, NULL) == 0);
  vmem_check(&vm);
  UCHECK(a && crowd_block && imports == 1 && releases == 0 && calls_locked == 0);
  UCHECK(parent->nspans == spans + 1 && vm.imported == span && vm.unlocked == 0);
  uintptr_t lo = (uintptr_t)a < (uintptr_t)crowd_block ? (uintptr_t)a : (uintptr_t)crowd_block;
  uintptr_t hi = (uintptr_t)a < (uintptr_t)crowd_block ? (uintptr_t)crowd_block : (uintptr_t)a;
  UCHECK(hi - lo < span); /* both in the one span */
  vmem_free(&vm, a, CROWD_BLOCK);
  vmem_free(&vm, crowd_block, CROWD_BLOCK);
  /* the span whole again; a block of all of it, then another: the second import's meanwhile
     the first block is freed */
  freed_meanwhile = vmem_alloc(&vm, span, OS_PAGE, 0, &clean);
  freed_size = span;
  UCHECK(freed_meanwhile && imports == 1);
  import_next = IMPORT_FREE;
  void *b = vmem_alloc(&vm, span, OS_PAGE, 0, &clean);
  vmem_check(&vm);
  UCHECK(b == freed_meanwhile && imports == 2 && releases == 1 && calls_locked == 0);
  UCHECK(parent->nspans == spans + 1 && vm.imported == span);
  watched = NULL;
  vmem_free(&vm, b, span);
  vmem_reap(&vm, 0, true);
  vmem_check(&vm);
  UCHECK(vm.imported == 0 && parent->nspans == spans);
}

/* Remaps run with the arena's lock free (vmem.c theory 10): a block with a span of its own
   grown in place of a copy, and a wholly free span regrown for a request of its own that
   nothing fits. */
static void remap_test(fake_parent_t *parent) {
  static vmem_t vm;
  const size_t page = OS_PAGE;
  bool clean;
  int spans = parent->nspans;
  vmem_init(&vm, "remap", OS_PAGE, fake_import, fake_release, parent, (size_t)1 << 20, OS_PAGE);
  vm.remap = fake_remap;
  vm.retain = (size_t)64 << 20; /* a wholly free span stays, to be regrown */
  unsigned char *a = vmem_alloc(&vm, 4 * page, OS_PAGE, VMEM_OWN, &clean); /* a span of its own */
  void *small = vmem_alloc(&vm, page, OS_PAGE, 0, &clean);                 /* a span with room */
  UCHECK(a && small && parent->nspans == spans + 2);
  memset(a, 7, 4 * page);
  watched = &vm;
  calls_locked = remaps = 0;
  remap_allocates = true;
  unsigned char *b = vmem_resize(&vm, a, 4 * page, 64 * page);
  vmem_check(&vm);
  UCHECK(b && b != a && b[0] == 7 && b[4 * page - 1] == 7 && during_remap);
  UCHECK(remaps == 1 && calls_locked == 0 && vm.unlocked == 0 && vm.in_use == 66 * page);
  vmem_free(&vm, b, 64 * page); /* its span stays, wholly free */
  void *c = vmem_alloc(&vm, 512 * page, OS_PAGE, VMEM_OWN, &clean); /* more than any room */
  vmem_check(&vm);
  UCHECK(c && !clean && remaps == 2 && calls_locked == 0 && vm.unlocked == 0);
  UCHECK(parent->nspans == spans + 2 && vm.in_use == 514 * page && !vm.importing);
  watched = NULL;
  vmem_free(&vm, c, 512 * page);
  vmem_free(&vm, small, page);
  vmem_free(&vm, during_remap, page);
  vmem_reap(&vm, 0, true);
  vmem_check(&vm);
  UCHECK(vm.imported == 0 && parent->nspans == spans);
}

/* Lists every other page of a written mapping, more than a batch, in a purge list of batch
   ranges a call: the listed pages read zero afterwards, the others keep their bytes. */
static void purge_list_check(size_t batch) {
  enum { ROOM = OS_PURGE_LIST, PAGES = 2 * (ROOM + ROOM / 2) + 1 };
  unsigned char *m =
      mmap(NULL, PAGES * OS_PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  UCHECK(m != MAP_FAILED);
  memset(m, 0xab, PAGES * OS_PAGE);
  os_purge_range_t room[ROOM];
  os_purge_list_t list = OS_PURGE_LIST_IN(room, batch);
  for (size_t i = 1; i < PAGES; i += 2)
    os_purge_list_add(&list, m + i * OS_PAGE, OS_PAGE);
  os_purge_list_run(&list);
  UCHECK(list.n == 0);
  for (size_t i = 0; i < PAGES; i++)
    UCHECK(m[i * OS_PAGE] == (i % 2 ? 0 : 0xab) && m[i * OS_PAGE + OS_PAGE - 1] == m[i * OS_PAGE]);
  munmap(m, PAGES * OS_PAGE);
}

int main(void) {
  purge_list_check(OS_PURGE_LIST);
  purge_list_check(7);
  purge_list_check(0);
  static fake_parent_t parent;
  void *region = mmap(NULL, REGION, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  UCHECK(region != MAP_FAILED);
  parent.base = parent.bump = (uintptr_t)region;
  static vmem_t vm;
  vmem_init(&vm, "test", OS_PAGE, fake_import, fake_release, &parent, (size_t)1 << 20,
            (size_t)64 << 10);
  vm.retain = (size_t)2 << 20;
  vm.remap = fake_remap;
  int remapped = 0;

  static block_t live[LIVE_MAX];
  int nlive = 0;
  size_t peak_imported = 0, peak_in_use = 0;
  uint64_t rng = 42;
  tags_watched = &vm;
  for (int op = 0; op < 20000; op++) {
    uint64_t r = unit_rand(&rng);
    if (nlive < LIVE_MAX && (nlive == 0 || r % 100 < 55)) {
      block_t *b = &live[nlive];
      size_t pages = r % 10 < 7 ? 1 + (r >> 8) % 8 : 1 + (r >> 8) % 600;
      size_t align = (r >> 20) % 5 == 0 ? (size_t)OS_PAGE << ((r >> 24) % 6) : 1;
      int flags = (r >> 30) % 10 == 0 ? VMEM_OWN : 0;
      bool clean;
      b->size = pages * OS_PAGE - (r >> 40) % 100; /* vmem rounds up to its quantum */
      b->p = vmem_alloc(&vm, b->size, align, flags, &clean);
      UCHECK(b->p != NULL);
      UCHECK(((uintptr_t)b->p & (align - 1)) == 0 && ((uintptr_t)b->p & (OS_PAGE - 1)) == 0);
      if (clean) UCHECK(b->p[0] == 0 && b->p[b->size - 1] == 0);
      b->stamp = (unsigned char)(1 + op % 250);
      stamp(b);
      nlive++;
    } else if (r % 100 < 90) {
      block_t *b = &live[(r >> 8) % nlive];
      UCHECK(b->p[0] == b->stamp && b->p[b->size - 1] == b->stamp);
      vmem_free(&vm, b->p, b->size);
      *b = live[--nlive];
    } else {
      block_t *b = &live[(r >> 8) % nlive];
      size_t new_size = (1 + (r >> 16) % 64) * OS_PAGE;
      size_t keep = new_size < b->size ? new_size : b->size;
      unsigned char first = b->p[0];
      unsigned char *moved = vmem_resize(&vm, b->p, b->size, new_size);
      if (moved) {
        UCHECK(moved[0] == first);
        if (moved != b->p) remapped++;
        b->p = moved;
        b->size = new_size;
        stamp(b);
      }
      UCHECK(keep > 0);
    }
    vmem_check(&vm);
    if (vm.imported > peak_imported) peak_imported = vm.imported;
    if (vm.in_use > peak_in_use) peak_in_use = vm.in_use;
  }
  /* everything back: the arena must hand every span back to the parent */
  while (nlive > 0) {
    block_t *b = &live[--nlive];
    UCHECK(b->p[0] == b->stamp && b->p[b->size - 1] == b->stamp);
    vmem_free(&vm, b->p, b->size);
  }
  vmem_check(&vm);
  vmem_reap(&vm, 0, true);
  vmem_check(&vm);
  UCHECK(vm.in_use == 0 && vm.imported == 0 && vm.dirty == 0);
  UCHECK(parent.nspans == 0 && parent.imported == parent.released);
  UCHECK(peak_imported < 2 * peak_in_use + ((size_t)16 << 20)); /* free space gets reused */
  UCHECK(remapped > 0); /* own spans were resized through the parent */

  /* quantum caches: a freed small allocation is handed out again as is */
  bool clean;
  void *a = vmem_alloc(&vm, 3 * OS_PAGE, 1, 0, &clean);
  UCHECK(a && clean);
  vmem_free(&vm, a, 3 * OS_PAGE);
  void *b = vmem_alloc(&vm, 3 * OS_PAGE, 1, 0, &clean);
  UCHECK(b == a && !clean);
  vmem_free(&vm, b, 3 * OS_PAGE);
  /* to an aligned request too, where its address has the alignment: a slab's span */
  void *span = vmem_alloc(&vm, 16 * OS_PAGE, 16 * OS_PAGE, 0, &clean);
  UCHECK(span && ((uintptr_t)span & (16 * OS_PAGE - 1)) == 0);
  vmem_free(&vm, span, 16 * OS_PAGE);
  UCHECK(vmem_alloc(&vm, 16 * OS_PAGE, 16 * OS_PAGE, 0, &clean) == span && !clean);
  /* several under one hold of the lock: the cached one, then free space; none imported */
  enum { SOME = 8 };
  void *some[SOME];
  bool some_clean[SOME];
  size_t imported = vm.imported;
  uint64_t taken = vm.lock.acquisitions;
  vmem_free(&vm, span, 16 * OS_PAGE);
  UCHECK(vmem_alloc_some(&vm, 16 * OS_PAGE, 16 * OS_PAGE, some, some_clean, SOME) == SOME);
  UCHECK(vm.lock.acquisitions == taken + 2 && vm.imported == imported && some[0] == span);
  for (int i = 0; i < SOME; i++) {
    UCHECK(((uintptr_t)some[i] & (16 * OS_PAGE - 1)) == 0);
    for (int j = 0; j < i; j++)
      UCHECK(some[i] != some[j]);
  }
  vmem_check(&vm);
  UCHECK(tags_made > 0 && tags_made_locked == 0);
  tags_watched = NULL;
  for (int i = 0; i < SOME; i++)
    vmem_free(&vm, some[i], 16 * OS_PAGE);
  vmem_reap(&vm, 0, true);
  UCHECK(vm.imported == 0 && parent.nspans == 0);
  UCHECK(vmem_alloc_some(&vm, OS_PAGE, OS_PAGE, some, some_clean, SOME) == 0); /* no import */
  pack_test(&parent);
  unlocked_test(&parent);
  import_test(&parent);
  remap_test(&parent);
  printf("vmem: ok (peak %zu bytes imported for %zu in use)\n", peak_imported, peak_in_use);
  return 0;
}
