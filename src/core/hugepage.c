/*
 * hugepage: the slab arena, which hands out slab spans from whole 2 MiB huge pages, and how
 * those huge pages are backed and given back.
 *
 * Theory
 *   1. Slabs of objects of up to HP_OBJECT_MAX bytes come from slab_arena, a page-quantum arena
 *      that imports one huge page at a time (OS_HUGE bytes aligned to OS_HUGE; an object cache's
 *      bigger span: exactly that span) from the heap arena, which large blocks share. A huge
 *      page thus holds such slabs only, never a large block or metadata. Slabs of bigger objects
 *      come from the heap arena as large blocks do, which magpie never marks MADV_HUGEPAGE: a
 *      program may write only part of a big object (a buffer's head), and the pages it never
 *      touches cost nothing on 4 KiB pages, where on a huge page they would be resident (under
 *      the kernel's THP mode always they are, as other allocators' large blocks are: theory 2);
 *      an object of a page or less has a byte on every page it spans, so its slab's carved part
 *      is all resident anyway. When the heap arena has no aligned huge page to give (the
 *      address space nearly used up), a slab takes a span of the heap arena instead (slab.c).
 *      The slab arena packs (vmem.c theory 9): a new slab goes into the fullest huge page it
 *      fits, and a huge page whose slabs are all gone returns whole to the heap arena at once,
 *      so huge pages are either dense or free. Each span's marker records its backing
 *      (HP_SMALL, HP_HUGE, HP_SUBRELEASED) and bytes in use.
 *   2. Backing, by the hugepages option. never: no huge pages. always: each huge page is
 *      marked MADV_HUGEPAGE as it is imported, so that its first touch faults in one 2 MiB page.
 *      auto (the default): the same once the slab arena holds hugepages_min bytes, on kernels
 *      whose THP mode is madvise or always: a smaller heap's TLB misses cost little, and a marked
 *      huge page costs its whole 2 MiB however little of it slabs have touched (a slab's objects
 *      are carved lazily). hugetlb: huge pages come from the kernel's reserved pool
 *      (MAP_HUGETLB) instead of the heap arena, each its own mapping (a plain one when the pool
 *      runs dry); with none reserved at start, auto, and a warning naming the option.
 *      In THP mode always, where the kernel faults any aligned 2 MiB in whole unasked, each
 *      huge page the slab arena imports while huge pages are off is marked MADV_NOHUGEPAGE,
 *      and with never the heap arena's mappings too (hugepage_heap_mapped); in mode madvise
 *      nothing unmarked gets huge pages, and a mark would only split the heap's mappings, which
 *      a big block's mremap cannot then move whole. A huge page given back to the heap arena
 *      is marked MADV_NOHUGEPAGE. Large blocks and slabs of bigger objects follow the kernel's
 *      mode (but with never), as other allocators' do.
 *   3. Collapsing: once huge pages are on, the reaper thread - only it: MADV_COLLAPSE copies
 *      2 MiB and takes milliseconds - collapses up to HP_COLLAPSE_MAX dense huge pages per
 *      tick that are not on a huge page (faulted in before auto turned huge pages on, or
 *      subreleased and filled again). Dense: at least HP_DENSE_SHIFT's share in slabs, so a
 *      collapse populates little that is free. When a collapse fails or a tick's collapses
 *      are slow, the next tries wait twice as many ticks as the last wait (up to HP_BACKOFF_MAX).
 *   4. Release, whole huge pages first: a reap purges the heap arena's free memory (which holds
 *      the wholly free huge pages, purged whole, unsplit) before the free pages inside partly
 *      used huge pages (subrelease, which splits a huge page into 4 KiB ones). Together they
 *      purge what one heap arena did: dirty bytes above the reap's keep (`retain`; all when
 *      idle). With huge pages on, subrelease is further limited to what the slab arena holds
 *      beyond its recent peak demand (the most bytes in slabs at any of the last HP_HISTORY
 *      reaps), so a heap that breathes keeps its huge pages; not when the reap keeps nothing
 *      (the program went quiet, or retain=0), nor for malloc_trim: then all goes back, as it
 *      does on 4 KiB pages. A subreleased huge page is marked MADV_NOHUGEPAGE (before the
 *      purge, outside the arena's lock: hp_split), or khugepaged would fill its holes and make it
 *      whole again. hugetlb pages are never subreleased.
 *   5. Slabs give back pages inside themselves too, when the reap keeps nothing (slab.c theory
 *      6): the huge page they lie on counts those bytes as hollow, is subreleased as in theory 4,
 *      and is dense for theory 3 only by its slabs' bytes less the hollow ones, so a collapse
 *      does not fault back in what the slabs gave back. The slab layer marks it MADV_NOHUGEPAGE
 *      itself (hugepage_split), with the purges, outside its locks.
 *   Locks: the slab arena's lock comes after the slab locks and before the heap arena's (a
 *   release to the heap arena and an import run without it, vmem.c theory 10; an import counts
 *   what the slab arena holds for auto's threshold itself); fork.c lists it. The demand
 *   history is written under it.
 */
#include "hugepage.h"
#include "options.h"
#include "os.h"
#include "report.h"
#include "slab.h"

vmem_t slab_arena;

#define HP_COLLAPSE_MAX 32                           /* collapses per reaper tick: 64 MiB */
#define HP_COLLAPSE_SLOW_NS ((uint64_t)20 * 1000000) /* a tick's collapses slower than this */
#define HP_BACKOFF_MAX 64                            /* ticks */
#define HP_DENSE_SHIFT 3                             /* dense: at most 1/8 of a huge page free */
#define HP_HISTORY 8                                 /* reaps of demand remembered */

static struct {
  int thp;                    /* os_thp_mode() at start */
  size_t mode;                /* opt.hugepages as used */
  size_t asked;               /* 1 + opt.hugepages when mode was set; 0 before */
  bool on;                    /* new huge pages are marked (atomic: stats read it) */
  size_t imported;            /* bytes of the heap arena's the slab arena holds (atomic) */
  size_t history[HP_HISTORY]; /* slab bytes in use at the last reaps (slab_arena.lock) */
  unsigned history_at;
  unsigned backoff, wait;                             /* reaper thread only */
  uint64_t collapses, collapse_failures, subreleases; /* atomic */
} hp;

static const char *const hp_thp_words[] = {"none", "never", "madvise", "always"};

static bool hp_thp_usable(void) {
  return hp.thp == OS_THP_MADVISE || hp.thp == OS_THP_ALWAYS;
}

/* The slab arena's import (without its lock: vmem.c theory 10): a huge page from the heap
   arena, marked MADV_HUGEPAGE once huge pages are on and, in THP mode always, MADV_NOHUGEPAGE
   before (theory 2). */
static void *hp_import(void *source, size_t size, size_t align, bool *clean, uint8_t *backing) {
  (void)source;
  if (hp.mode == OPT_HUGE_HUGETLB) {
    void *p = os_map_hugetlb(size, align);
    if (!p) p = os_map_aligned(size, align);
    *clean = true;
    *backing = HP_HUGE;
    return p;
  }
  void *p = vmem_alloc(&heap_arena, size, align, 0, clean);
  if (!p) return NULL;
  size_t imported = __atomic_add_fetch(&hp.imported, size, __ATOMIC_RELAXED);
  bool on = __atomic_load_n(&hp.on, __ATOMIC_RELAXED);
  if (!on && hp.mode == OPT_HUGE_AUTO && hp_thp_usable() && imported >= opt.hugepages_min)
    __atomic_store_n(&hp.on, on = true, __ATOMIC_RELAXED);
  if (on || hp.thp == OS_THP_ALWAYS) os_advise_huge(p, size, on);
  *backing = on ? HP_HUGE : HP_SMALL;
  return p;
}

static void hp_release(void *source, void *addr, size_t size) {
  (void)source;
  if (hp.mode == OPT_HUGE_HUGETLB) {
    os_unmap(addr, size);
    return;
  }
  if (__atomic_load_n(&hp.on, __ATOMIC_RELAXED)) /* it may be marked MADV_HUGEPAGE */
    os_advise_huge(addr, size, false);
  __atomic_sub_fetch(&hp.imported, size, __ATOMIC_RELAXED);
  vmem_free(&heap_arena, addr, size);
}

/* Counts a subrelease of span (slab arena lock held), which is then kept on 4 KiB pages. Returns
   whether it was on a huge page: the caller marks it MADV_NOHUGEPAGE before any purge. */
static bool hp_subreleased(vmem_seg_t *span) {
  __atomic_add_fetch(&hp.subreleases, 1, __ATOMIC_RELAXED);
  if (span->backing != HP_HUGE) return false;
  span->backing = HP_SUBRELEASED;
  return true;
}

/* A purge inside a slab huge page is a subrelease when the page is not wholly free; the page
   is split (hp_split, without the lock) before the first. */
static bool hp_purging(void *source, vmem_seg_t *span, void *addr, size_t size) {
  (void)source;
  (void)addr;
  return size != span->size && hp_subreleased(span);
}

static void hp_split(void *source, void *span_start, size_t span_size) {
  (void)source;
  hugepage_split(&(hugepage_split_t){span_start, span_size});
}

bool hugepage_slab_hollow(const void *slab, ptrdiff_t bytes, hugepage_split_t *split) {
  if (hp.mode == OPT_HUGE_HUGETLB) return false;
  lock_acquire(&slab_arena.lock);
  vmem_seg_t *span = vmem_span_of(&slab_arena, slab);
  if (span) {
    span->hollow += (size_t)bytes;
    if (bytes > 0 && hp_subreleased(span))
      *split = (hugepage_split_t){(void *)span->start, span->size};
  }
  lock_release(&slab_arena.lock);
  return true;
}

void hugepage_split(const hugepage_split_t *split) {
  if (split->size) os_advise_huge(split->start, split->size, false);
}

void hugepage_heap_mapped(void *p, size_t size) {
  if (hp.mode == OPT_HUGE_NEVER && hp.thp == OS_THP_ALWAYS) os_advise_huge(p, size, false);
}

void hugepage_init(void) {
  hp.thp = os_thp_mode();
  vmem_init(&slab_arena, "slab", OS_PAGE, hp_import, hp_release, NULL, OS_HUGE, OS_HUGE);
  slab_arena.pack = true;
  slab_arena.purging = hp_purging;
  slab_arena.split = hp_split;
  hugepage_options();
}

void hugepage_options(void) {
  lock_acquire(&slab_arena.lock); /* spans imported under one mode go back under it */
  bool settled = slab_arena.imported != 0 || (hp.asked && hp.asked - 1 == opt.hugepages);
  lock_release(&slab_arena.lock);
  if (settled) return;
  hp.asked = opt.hugepages + 1;
  hp.mode = opt.hugepages;
  if (hp.mode == OPT_HUGE_HUGETLB) {
    void *probe = os_map_hugetlb(OS_HUGE, OS_HUGE);
    if (probe)
      os_unmap(probe, OS_HUGE);
    else {
      report_warning("hugepages=hugetlb: the kernel has no huge pages reserved, using ",
                     "hugepages=auto");
      hp.mode = OPT_HUGE_AUTO;
    }
  }
  hp.on = hp.mode == OPT_HUGE_HUGETLB || (hp.mode == OPT_HUGE_ALWAYS && hp_thp_usable());
}

/* Bytes of the slab arena's free memory that a subrelease may purge (theory 4), recording this
   reap's demand. Called with the slab arena's lock held. */
static size_t hp_subrelease_allowed(void) {
  size_t peak = slab_arena.in_use;
  hp.history[hp.history_at++ % HP_HISTORY] = peak;
  for (unsigned i = 0; i < HP_HISTORY; i++)
    if (hp.history[i] > peak) peak = hp.history[i];
  if (!__atomic_load_n(&hp.on, __ATOMIC_RELAXED)) return SIZE_MAX;
  return slab_arena.imported > peak ? slab_arena.imported - peak : 0;
}

size_t hugepage_reap(size_t keep_dirty, bool everything) {
  /* Quantum caches and wholly free huge pages go to the heap arena first, unpurged. */
  size_t given = vmem_reap(&slab_arena, SIZE_MAX, everything);
  lock_acquire(&slab_arena.lock);
  size_t slab_dirty = slab_arena.dirty, allowed = hp_subrelease_allowed();
  lock_release(&slab_arena.lock);
  given +=
      vmem_reap(&heap_arena, keep_dirty > slab_dirty ? keep_dirty - slab_dirty : 0, everything);
  lock_acquire(&heap_arena.lock);
  size_t heap_dirty = heap_arena.dirty;
  lock_release(&heap_arena.lock);
  if (hp.mode == OPT_HUGE_HUGETLB) return given; /* a hugetlb page cannot be split */
  size_t keep = keep_dirty > heap_dirty ? keep_dirty - heap_dirty : 0;
  if (keep_dirty && !everything && slab_dirty > allowed && keep < slab_dirty - allowed)
    keep = slab_dirty - allowed;
  return given + vmem_reap(&slab_arena, keep, false);
}

static bool hp_collapsible(const vmem_seg_t *span, void *arg) {
  (void)arg;
  return span->backing != HP_HUGE &&
         span->used - span->hollow >= span->size - (span->size >> HP_DENSE_SHIFT);
}

void hugepage_tick(void) {
  if (!__atomic_load_n(&hp.on, __ATOMIC_RELAXED) || hp.mode == OPT_HUGE_HUGETLB) return;
  if (hp.wait) {
    hp.wait--;
    return;
  }
  vmem_seg_t *spans[HP_COLLAPSE_MAX];
  size_t n = vmem_spans_take(&slab_arena, hp_collapsible, NULL, spans, HP_COLLAPSE_MAX);
  bool failed = false;
  uint64_t start = os_now_ns();
  for (size_t i = 0; i < n; i++) {
    void *p = (void *)spans[i]->start;
    size_t size = spans[i]->size;
    uint8_t backing = spans[i]->backing;
    os_advise_huge(p, size, true); /* so that khugepaged keeps it whole, and for MADV_COLLAPSE */
    bool ok = os_collapse(p, size);
    if (!ok) {
      failed = true;
      if (backing == HP_SUBRELEASED) os_advise_huge(p, size, false);
    }
    __atomic_add_fetch(ok ? &hp.collapses : &hp.collapse_failures, 1, __ATOMIC_RELAXED);
    vmem_span_done(&slab_arena, spans[i], ok ? HP_HUGE : backing);
  }
  if (failed || os_now_ns() - start > HP_COLLAPSE_SLOW_NS) {
    hp.backoff =
        hp.backoff ? (hp.backoff * 2 > HP_BACKOFF_MAX ? HP_BACKOFF_MAX : hp.backoff * 2) : 1;
    hp.wait = hp.backoff;
  } else {
    hp.backoff = 0;
  }
}

/* ---- statistics ---- */

typedef struct hp_overlap {
  uintptr_t lo, hi;
  bool found;
  uint64_t partial_free;
} hp_overlap_t;

static void hp_span_overlaps(const vmem_seg_t *span, void *arg) {
  hp_overlap_t *o = arg;
  if (span->start < o->hi && span->start + span->size > o->lo) o->found = true;
}

/* Whether mapping [lo, hi) holds part of magpie's heap (os_huge_bytes' question). */
static bool hp_mine(uintptr_t lo, uintptr_t hi) {
  hp_overlap_t o = {.lo = lo, .hi = hi};
  vmem_spans_each(hp.mode == OPT_HUGE_HUGETLB ? &slab_arena : &heap_arena, hp_span_overlaps, &o);
  if (!o.found && hp.mode == OPT_HUGE_HUGETLB) vmem_spans_each(&heap_arena, hp_span_overlaps, &o);
  return o.found;
}

static void hp_span_partial(const vmem_seg_t *span, void *arg) {
  hp_overlap_t *o = arg;
  if (span->used && span->used < span->size) o->partial_free += span->size - span->used;
}

void hugepage_stats(hugepage_stats_t *out) {
  hp_overlap_t o = {0};
  vmem_spans_each(&slab_arena, hp_span_partial, &o);
  out->mode = opt_hugepages_words[hp.mode];
  out->thp = hp_thp_words[hp.thp];
  out->on = __atomic_load_n(&hp.on, __ATOMIC_RELAXED);
  out->huge_bytes = os_huge_bytes(hp_mine);
  lock_acquire(&slab_arena.lock);
  out->slab_bytes = slab_arena.imported;
  lock_release(&slab_arena.lock);
  out->partial_free_bytes = o.partial_free;
  out->slab_hollow_bytes = __atomic_load_n(&slab_hollow_bytes, __ATOMIC_RELAXED);
  out->slab_stashed_bytes = __atomic_load_n(&slab_stashed_bytes, __ATOMIC_RELAXED);
  out->collapses = __atomic_load_n(&hp.collapses, __ATOMIC_RELAXED);
  out->collapse_failures = __atomic_load_n(&hp.collapse_failures, __ATOMIC_RELAXED);
  out->subreleases = __atomic_load_n(&hp.subreleases, __ATOMIC_RELAXED);
}
