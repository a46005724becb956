/*
 * prof: the heap profiler's samples: which blocks were sampled, from which stacks, and what
 * they stand for.
 *
 * Theory
 *   1. The decision is core's (prof_clock.c): a slow-path allocation that passed sampling
 *      points is sampled, and stands for points * profile_rate bytes of allocations of its
 *      unit (class size, or its own size when large): objects = that / unit, bytes = objects
 *      times the size requested. Both are summed per stack (the allocation profile) and, while
 *      the block lives, held by its record (the live-heap profile).
 *   2. A sampled block is served from the large path, page granular, whatever its size, and
 *      its page-map entry becomes record | PM_TAG_PROFILED: no class tag, so the fast free
 *      misses and the slow path finds the record in one load. No hash, no scan, and a sampled
 *      block can never sit in a magazine. The cost: a page for a small sampled block, about
 *      4 KiB per profile_rate bytes live (0.8% at the default rate). Its usable size is its
 *      class's (the block is that big at least), as if it came from the class, so that
 *      malloc_usable_size and realloc's hysteresis do not depend on sampling, and statistics
 *      count it in its class (prof_class_totals), not among the large blocks.
 *   3. Stacks are captured before the lock (the unwinder may take the dynamic loader's lock,
 *      which a thread in dlopen holds while it allocates), deduplicated in a hash table, and
 *      never freed: the writers read their frames without the lock once listed. A sample finds
 *      its stack without the lock too (a stack is listed whole, at its bucket's head, and never
 *      changes); a new one's record is made and filled before the lock, and looked for again
 *      under it, since another thread may have listed the same stack meanwhile.
 *   4. Records and stacks live in metadata pools, never in the heap they describe.
 *   Locking: prof_lock guards the stacks' figures, the table's changes and the list. Under it
 *   only the page map is written (a sampled block's entry, whose leaf is there), and no page is
 *   written first: a fault's return is a preemption point, and every thread whose allocation
 *   or free is sampled would wait for the holder (a quiet lock in the test build,
 *   platform/inject.h).
 */
#include "prof.h"
#include "inject.h"
#include "large.h"
#include "mag.h"
#include "meta.h"
#include "options.h"
#include "os.h"
#include "pagemap.h"
#include "prof_clock.h"
#include "report.h"

#include <string.h>

#define PROF_TABLE 4096 /* hash buckets of stacks (a power of two) */

/* A live sampled block: 128 bytes, so its address leaves the page-map tag's 7 bits free. */
typedef struct prof_block {
  uintptr_t user;        /* the block's address */
  uintptr_t large_entry; /* its page-map entry as a plain large block */
  prof_stack_t *stack;
  double objects, bytes; /* what it stands for */
  size_t usable;         /* its usable size: its class's for a small request (theory 2) */
  unsigned c;            /* its class (a small request; statistics count it there), or 0 */
} prof_block_t;

static lock_t prof_lock = LOCK_INIT;
static prof_stack_t *prof_table[PROF_TABLE]; /* (prof_lock) */
static prof_stack_t *prof_list;              /* (prof_lock) */
static size_t prof_stack_count;              /* (prof_lock) */
/* Sampled blocks of small requests, per class, and the pages of those live (prof_lock). */
static uint64_t prof_class_allocs[SC_COUNT + 1], prof_class_frees[SC_COUNT + 1];
static uint64_t prof_class_pages;
static double prof_class_objects[SC_COUNT + 1], prof_class_bytes[SC_COUNT + 1]; /* stood for */
static meta_pool_t prof_stack_pool = META_POOL(sizeof(prof_stack_t));
static meta_pool_t prof_block_pool = META_POOL(128);
static int prof_writing; /* a profile is being written (atomic; prof_write_begin) */

_Static_assert(sizeof(prof_block_t) <= 128, "a record fits its 128-byte slot");

static uint64_t prof_hash(const uintptr_t *ips, int n) {
  uint64_t h = 0x9e3779b97f4a7c15u;
  for (int i = 0; i < n; i++)
    h = (h ^ ips[i]) * 0x100000001b3u;
  return h ^ (h >> 29);
}

/* The listed stack of hash h with these frames in the bucket at head, or NULL. Without the
   lock (theory 3): a stack is listed whole at its bucket's head (release) and never changes. */
static prof_stack_t *prof_stack_find(prof_stack_t **head, uint64_t h, const uintptr_t *ips, int n) {
  for (prof_stack_t *s = __atomic_load_n(head, __ATOMIC_ACQUIRE); s; s = s->chain)
    if (s->hash == h && s->depth == n && memcmp(s->frames, ips, n * sizeof *ips) == 0) return s;
  return NULL;
}

/* A new stack's record for the bucket at head, filled in before the lock, the bucket's page
   written once too (first writes may fault); NULL without memory. */
static prof_stack_t *prof_stack_make(prof_stack_t **head, uint64_t h, const uintptr_t *ips, int n) {
  prof_stack_t *s = meta_alloc(&prof_stack_pool);
  if (!s) return NULL;
  os_touch(s, sizeof *s);                        /* a record may straddle two pages */
  __atomic_fetch_add(head, 0, __ATOMIC_RELAXED); /* its value kept: others read it meanwhile */
  s->hash = h;
  s->depth = n;
  memcpy(s->frames, ips, n * sizeof *ips);
  return s;
}

/* The stack listed meanwhile with made's frames, or made, listed now (prof_lock). */
static prof_stack_t *prof_stack_list(prof_stack_t **head, prof_stack_t *made) {
  prof_stack_t *s = prof_stack_find(head, made->hash, made->frames, made->depth);
  if (s) return s;
  made->chain = __atomic_load_n(head, __ATOMIC_RELAXED); /* others read it without the lock */
  __atomic_store_n(head, made, __ATOMIC_RELEASE);
  made->next = prof_list;
  prof_list = made;
  prof_stack_count++;
  return made;
}

/* Records large block p, sampled: a request of class c (0: large), whose usable size is the
   class's. */
static void *prof_record(void *p, size_t size, unsigned c, uint64_t points) {
  size_t unit = prof_clock_unit(c, size);
  uintptr_t ips[PROF_DEPTH];
  int depth = report_capture(ips, PROF_DEPTH);
  double objects = (double)points * (double)opt.profile_rate / (double)unit;
  double bytes = objects * (double)size;
  uintptr_t entry = pagemap_get((uintptr_t)p);
  prof_block_t *b = meta_alloc(&prof_block_pool); /* filled before the lock: a first write faults */
  if (b)
    *b = (prof_block_t){(uintptr_t)p, entry, NULL, objects, bytes, c ? unit : large_size(entry), c};
  uint64_t h = prof_hash(ips, depth);
  prof_stack_t **head = &prof_table[h & (PROF_TABLE - 1)];
  prof_stack_t *s = prof_stack_find(head, h, ips, depth), *made = NULL;
  if (!s) made = prof_stack_make(head, h, ips, depth);
  lock_acquire(&prof_lock);
  if (made) s = prof_stack_list(head, made);
  if (s) {
    s->alloc_objects += objects;
    s->alloc_bytes += bytes;
  }
  if (s && b) {
    b->stack = s;
    s->live_objects += objects;
    s->live_bytes += bytes;
    pagemap_set((uintptr_t)p, OS_PAGE, (uintptr_t)b | PM_TAG_PROFILED);
    if (c) {
      prof_class_allocs[c]++;
      prof_class_pages += large_size(entry);
      prof_class_objects[c] += objects;
      prof_class_bytes[c] += bytes;
    }
  }
  lock_release(&prof_lock);
  if (b && !s) meta_free(&prof_block_pool, b);              /* no stack listed: not recorded */
  if (made && made != s) meta_free(&prof_stack_pool, made); /* listed by another meanwhile */
  return p;
}

void *prof_adopt(void *p, size_t size, uint64_t points) {
  return prof_record(p, size, 0, points);
}

void *prof_alloc(size_t size, size_t align, bool zero, unsigned c, uint64_t points) {
  size_t unit = prof_clock_unit(c, size); /* a class's whole block: its usable size */
  void *p = large_alloc(c ? unit : size ? size : 1, align > OS_PAGE ? align : OS_PAGE, zero);
  return p ? prof_record(p, size, c, points) : NULL;
}

static prof_block_t *prof_block_of(void *p, uintptr_t entry, const char *what) {
  prof_block_t *b = (prof_block_t *)(entry & ~PM_TAG_MASK);
  if (b->user != (uintptr_t)p)
    report_heap_error(what, p, "interior pointer into a large block (sampled by the profiler)");
  return b;
}

uintptr_t prof_large_entry(void *p, uintptr_t entry) {
  return prof_block_of(p, entry, "invalid realloc")->large_entry;
}

/* Ends the record of sampled block p; returns its plain large entry. */
static uintptr_t prof_end(void *p, uintptr_t entry) {
  prof_block_t *b = prof_block_of(p, entry, "invalid free");
  uintptr_t large = b->large_entry;
  lock_acquire(&prof_lock);
  b->stack->live_objects -= b->objects;
  b->stack->live_bytes -= b->bytes;
  if (b->c) {
    prof_class_frees[b->c]++;
    prof_class_pages -= large_size(large);
  }
  lock_release(&prof_lock);
  meta_free(&prof_block_pool, b);
  return large;
}

uintptr_t prof_release(void *p, uintptr_t entry) {
  uintptr_t large = prof_end(p, entry);
  pagemap_set((uintptr_t)p, OS_PAGE, large);
  return large;
}

void prof_forget(void *p, uintptr_t entry) {
  prof_end(p, entry);
}

void prof_free(void *p, uintptr_t entry) {
  large_free(p, prof_release(p, entry));
}

size_t prof_size(void *p, uintptr_t entry) {
  return prof_block_of(p, entry, "invalid pointer")->usable;
}

/* The figures the lock's holder writes are written once here (the stacks' table, a page of
   buckets at a time, when a new stack needs one: prof_stack_make). */
void prof_init(void) {
  os_touch(&prof_list, sizeof prof_list);
  os_touch(&prof_stack_count, sizeof prof_stack_count);
  os_touch(prof_class_allocs, sizeof prof_class_allocs);
  os_touch(prof_class_frees, sizeof prof_class_frees);
  os_touch(&prof_class_pages, sizeof prof_class_pages);
  os_touch(prof_class_objects, sizeof prof_class_objects);
  os_touch(prof_class_bytes, sizeof prof_class_bytes);
  INJECT_QUIET("heap profiler", &prof_lock, 1, sizeof prof_lock); /* theory's locking */
}

void prof_lock_stats(lock_stats_t *lock) {
  lock_stats_add(lock, &prof_lock);
}

void prof_class_requests(double objects[SC_COUNT + 1], double bytes[SC_COUNT + 1]) {
  os_touch(objects, sizeof prof_class_objects); /* written under the lock: no first write there */
  os_touch(bytes, sizeof prof_class_bytes);
  lock_acquire(&prof_lock);
  memcpy(objects, prof_class_objects, sizeof prof_class_objects);
  memcpy(bytes, prof_class_bytes, sizeof prof_class_bytes);
  lock_release(&prof_lock);
}

void prof_class_totals(mag_totals_t *t, uint64_t *pages) {
  lock_acquire(&prof_lock);
  for (unsigned c = 1; c <= SC_COUNT; c++) {
    t->allocs[c] += prof_class_allocs[c];
    t->frees[c] += prof_class_frees[c];
    t->large_allocs -=
        prof_class_allocs[c] < t->large_allocs ? prof_class_allocs[c] : t->large_allocs;
    t->large_frees -= prof_class_frees[c] < t->large_frees ? prof_class_frees[c] : t->large_frees;
  }
  *pages = prof_class_pages;
  lock_release(&prof_lock);
}

size_t prof_snapshot(prof_row_t *rows, size_t max) {
  lock_acquire(&prof_lock);
  size_t i = 0;
  for (const prof_stack_t *s = prof_list; s && i < max; s = s->next, i++)
    rows[i] = (prof_row_t){s, s->alloc_objects, s->alloc_bytes, s->live_objects, s->live_bytes};
  size_t n = prof_stack_count;
  lock_release(&prof_lock);
  return n;
}

bool prof_write_begin(bool wait) {
  int idle = 0;
  while (!__atomic_compare_exchange_n(&prof_writing, &idle, 1, false, __ATOMIC_ACQUIRE,
                                      __ATOMIC_RELAXED)) {
    if (!wait) return false;
    idle = 0;
    os_sleep_ms(1);
  }
  return true;
}

void prof_write_end(void) {
  __atomic_store_n(&prof_writing, 0, __ATOMIC_RELEASE);
}

void prof_fork_prepare(void) {
  lock_acquire(&prof_lock);
}

void prof_fork_parent(void) {
  lock_release(&prof_lock);
}

void prof_fork_child(void) {
  lock_init(&prof_lock);
  prof_writing = 0; /* a writer in another thread is not in the child */
}
