/*
 * api: the malloc family, exactly as the C standard and glibc's manual pages specify it.
 *
 * Theory
 *   1. Thin: each entry point checks its arguments, picks a size class (fast path, mag.c) or
 *      the large path (large.c), and sets errno the way glibc does. Nothing here is stateful.
 *   2. Errors of the program (freeing what magpie did not hand out, freeing twice, realloc of
 *      a freed block) are reported with the address and the caller's stack, then abort: a
 *      heap error is never silently ignored.
 *   3. Alignment: every small class is a multiple of 16 and its slab span is a power of two
 *      aligned to its size, so an aligned request up to 256 KiB takes the first class that is
 *      a multiple of the alignment; larger alignments come from the arena's aligned allocation.
 *   4. Out of memory: a request that found none is tried once more after magpie gave back what
 *      it caches and every wholly free span (cache_reclaim); then NULL with errno ENOMEM.
 *   5. Debug mode (debug.h): each slow path first hands the request to debug.c when debug_on;
 *      the fast path never looks, and in debug mode it always misses. So it does in memcheck
 *      mode (memcheck_mode.c), where the slow paths tell memcheck of each block they serve.
 *   Names: magpie_* here are the exported magpie API; interpose.c gives them glibc's names.
 */
#include "api.h"
#include "caches.h"
#include "debug.h"
#include "export.h"
#include "init.h"
#include "fastpath.h"
#include "large.h"
#include "memcheck_mode.h"
#include "options.h"
#include "populate.h"
#include "prof.h"
#include "prof_clock.h"
#include "report.h"
#include "sample.h"
#include "stats.h"

#include <errno.h>
#include <malloc.h>
#include <string.h>

/* The first class that is a multiple of align (a power of two; 1: the default) and holds size
   bytes, or 0: the large path. */
static unsigned class_of(size_t size, size_t align) {
  if (size > SC_SMALL_MAX || align > SC_SMALL_MAX) return 0;
  unsigned c = sc_of(size > align ? size : align);
  while (sc_size(c) & (align - 1))
    c++; /* the 256 KiB class is a multiple of any align */
  return c;
}

/* size bytes aligned to align from class c, or the large path. */
static void *alloc_once(unsigned c, size_t size, size_t align, bool zero) {
  if (c) return mag_malloc(c, size);
  return large_alloc(size ? size : 1, align > OS_PAGE ? align : OS_PAGE, zero);
}

/* alloc_once, and once more when it found no memory and magpie gave some back. Every
   allocation's slow path comes here: the heap profiler's clock is charged here (prof_clock.c),
   and a sampled block is served by the profiler. */
static void *alloc_fresh(size_t size, size_t align, bool zero) {
  unsigned c = class_of(size, align);
  uint64_t points = opt.profile_rate && !memcheck_on ? prof_clock_tick(c, size) : 0;
  if (points) {
    void *p = prof_alloc(size, align, zero, c, points);
    if (p) return p;
  }
  if (memcheck_on) memcheck_quiet();
  void *p = alloc_once(c, size, align, zero);
  if (!p && cache_reclaim(size)) p = alloc_once(c, size, align, zero);
  if (memcheck_on) {
    memcheck_loud();
    memcheck_served(p, size, zero);
  }
  if (!p) errno = ENOMEM; /* what the reclaim called may have set another */
  return p;
}

void *malloc_slow(size_t size) {
  magpie_init(); /* debug_on must be known before the first block */
  if (debug_on) return debug_alloc(size, 0, DEBUG_MALLOC, false);
  void *traded = mag_malloc_traded(size);
  if (traded) return traded;
  if (opt.sample && !memcheck_on) { /* a miss stands for a magazine of allocations */
    unsigned weight = size <= SC_SMALL_MAX ? mag_miss_weight(sc_of(size)) : 1;
    void *p = sample_maybe(size, weight);
    if (p) return p;
  }
  return alloc_fresh(size, 1, false);
}

void *malloc_slow_kind(size_t size, size_t align, int kind) {
  magpie_init();
  if (debug_on) return debug_alloc(size, align, kind, false);
  return align ? api_memalign(align, size) : malloc_slow(size);
}

__attribute__((noreturn)) static void bad_pointer(const char *what, void *p, uintptr_t e) {
  uintptr_t tag = e & PM_TAG_MASK, freed = (uintptr_t)p ^ mag_consts.secret;
  uintptr_t freed_tag = pagemap_get(freed) & PM_TAG_MASK;
  if (tag == 0 && freed_tag >= 1 && freed_tag <= SC_COUNT && *(uintptr_t *)freed == (uintptr_t)p)
    report_heap_error(what, p,
                      "this value is the free marker of a freed block: the pointer was read "
                      "from freed memory (use after free, e.g. a double delete)");
  report_heap_error(what, p,
                    tag == PM_TAG_CACHE   ? "an object of a magpie_cache: use magpie_cache_free"
                    : tag == PM_TAG_LARGE ? "interior pointer into a large block"
                                          : "not a block magpie handed out (foreign pointer, "
                                            "interior pointer, or a large block already freed)");
}

/* Gives back block p (not NULL) to the layer its page-map tag names. */
static void free_block(void *p) {
  uintptr_t e = pagemap_get((uintptr_t)p), tag = e & PM_TAG_MASK;
  if (tag >= 1 && tag <= SC_COUNT)
    mag_free((unsigned)tag, p);
  else if (tag == PM_TAG_LARGE && ((uintptr_t)p & (OS_PAGE - 1)) == 0)
    large_free(p, e);
  else if (tag == PM_TAG_SAMPLE)
    sample_free(p, e);
  else if (tag == PM_TAG_PROFILED)
    prof_free(p, e);
  else
    bad_pointer("invalid free", p, e);
}

void free_slow(void *p) {
  if (debug_on) {
    debug_free(p, 0, 0, DEBUG_MALLOC);
    return;
  }
  if (!p) return;
  if (!memcheck_on) {
    free_block(p);
    return;
  }
  memcheck_freed(p);
  memcheck_quiet();
  free_block(p);
  memcheck_loud();
}

void free_slow_kind(void *p, size_t size, size_t align, int kind) {
  if (debug_on)
    debug_free(p, size, align, kind);
  else
    free_slow(p);
}

/* Whether p starts a block of class c (any tag: false for one that is no class) that is not
   free (its first word is not the free marker, fastpath.h). */
static MP_INLINE bool class_block_live(size_t c, void *p) {
  uintptr_t a = (uintptr_t)p;
  return sc_is_object_start(c, a) && *(uintptr_t *)p != (a ^ mag_consts.secret);
}

/* Whether p starts a live block magpie handed out, and its usable size (a sampled block that
   is not live is reported). */
static bool block_live(void *p, uintptr_t entry, size_t *size) {
  uintptr_t a = (uintptr_t)p, tag = entry & PM_TAG_MASK;
  if (tag >= 1 && tag <= SC_COUNT) {
    *size = sc_size(tag);
    return class_block_live(tag, p);
  }
  if (tag == PM_TAG_LARGE && (a & (OS_PAGE - 1)) == 0) {
    *size = large_size(entry);
    return true;
  }
  if (tag == PM_TAG_SAMPLE) {
    *size = sample_size(p, entry); /* 0 for malloc(0) */
    return true;
  }
  if (tag == PM_TAG_PROFILED) {
    *size = prof_size(p, entry);
    return true;
  }
  return false;
}

/* The class of p where p starts a live block of one of malloc's classes, told by the hot tags
   as free's fast path tells it (fastpath.h); else 0, and block_size tells what p is. */
static MP_INLINE unsigned small_block_class(void *p) {
  size_t c = pagemap_tag((uintptr_t)p);
  return class_block_live(c, p) ? (unsigned)c : 0;
}

/* The usable size of a block magpie handed out; reports anything else. */
static size_t block_size(void *p, uintptr_t *entry, const char *what) {
  uintptr_t a = (uintptr_t)p, e = pagemap_get(a), tag = e & PM_TAG_MASK;
  size_t size;
  *entry = e;
  if (block_live(p, e, &size)) return size;
  if (tag >= 1 && tag <= SC_COUNT)
    report_heap_error(what, p,
                      sc_is_object_start((unsigned)tag, a)
                          ? "block already freed"
                          : "interior pointer, not the start of a block");
  bad_pointer(what, p, e);
}

MAGPIE_EXPORT void *magpie_malloc(size_t size) {
  return fast_malloc(size);
}

MAGPIE_EXPORT void magpie_free(void *p) {
  fast_free(p);
}

MAGPIE_EXPORT void *magpie_calloc(size_t n, size_t size) {
  size_t total;
  if (__builtin_mul_overflow(n, size, &total)) {
    errno = ENOMEM;
    return NULL;
  }
  magpie_init();
  if (debug_on) return debug_alloc(total, 0, DEBUG_MALLOC, true);
  if (total > SC_SMALL_MAX) return alloc_fresh(total, 1, true);
  void *p = fast_malloc(total);
  if (p) memset(p, 0, total);
  return p;
}

/* realloc in memcheck mode: in place only where memcheck can be told so exactly, and without
   the slack of normal mode, which would hide an overrun up to it. */
static void *realloc_memcheck(void *p, size_t size) {
  uintptr_t e;
  size_t old = block_size(p, &e, "invalid realloc");
  size_t requested = memcheck_requested(p, old);
  if (size <= old && size >= old - old / 4 && memcheck_resized(p, requested, size)) return p;
  void *q = fast_malloc(size);
  if (!q) return NULL;
  memcpy(q, p, requested < size ? requested : size);
  fast_free(p);
  return q;
}

MAGPIE_EXPORT void *magpie_realloc(void *p, size_t size) {
  if (!p) return fast_malloc(size);
  if (size == 0) { /* glibc: frees the block and returns NULL */
    fast_free(p);
    return NULL;
  }
  if (debug_on) return debug_realloc(p, size);
  if (memcheck_on) return realloc_memcheck(p, size);
  uintptr_t e = 0;
  unsigned c = small_block_class(p); /* the common case: its checks done once, here */
  size_t old = c ? sc_size(c) : block_size(p, &e, "invalid realloc");
  uintptr_t tag = c ? c : e & PM_TAG_MASK;
  /* Hysteresis: a block shrunk by less than a quarter stays; one that grows, grows by a
     quarter at least, so that a string appended to piece by piece moves or is remapped
     O(log n) times, not at every page or size class. */
  if (size <= old && size >= old - old / 4) return p;
  size_t want = size > old && size - old < old / 4 ? old + old / 4 : size;
  if ((tag == PM_TAG_LARGE || tag == PM_TAG_PROFILED) && size > SC_SMALL_MAX) {
    /* in place: a sampled block's record ends once the resize is done (if it fails, the block
       stays as it was, usable size included), and the result is a new allocation to the
       profiler's clock, as if moved */
    void *q = large_resize(p, tag == PM_TAG_PROFILED ? prof_large_entry(p, e) : e, want);
    if (q) {
      if (tag == PM_TAG_PROFILED) prof_forget(p, e);
      uint64_t points = opt.profile_rate ? prof_clock_tick(0, size) : 0;
      return points ? prof_adopt(q, size, points) : q;
    }
  }
  void *q = fast_malloc(want);
  if (!q) return NULL; /* errno is ENOMEM; the old block is untouched */
  memcpy(q, p, old < size ? old : size);
  if (!c)
    fast_free(p);
  else if (!fast_free_start_try(p, c, (uintptr_t)p ^ mag_consts.secret))
    free_slow(p);
  return q;
}

void *api_reallocarray(void *p, size_t n, size_t size) {
  size_t total;
  if (__builtin_mul_overflow(n, size, &total)) {
    errno = ENOMEM;
    return NULL;
  }
  return magpie_realloc(p, total);
}

void *api_memalign(size_t align, size_t size) {
  magpie_init();
  if (debug_on) return debug_alloc(size, align, DEBUG_MALLOC, false);
  if (align <= 16) return fast_malloc(size);
  return alloc_fresh(size, align, false); /* size 0: still a unique block */
}

MAGPIE_EXPORT void *magpie_aligned_alloc(size_t align, size_t size) {
  if (align == 0 || (align & (align - 1))) {
    errno = EINVAL;
    return NULL;
  }
  return api_memalign(align, size);
}

MAGPIE_EXPORT int magpie_posix_memalign(void **out, size_t align, size_t size) {
  if (align < sizeof(void *) || (align & (align - 1))) return EINVAL;
  int saved = errno;
  void *p = api_memalign(align, size);
  if (!p) return errno = ENOMEM; /* glibc sets errno too, and programs read it */
  errno = saved;
  *out = p;
  return 0;
}

void *api_valloc(size_t size) {
  return api_memalign(OS_PAGE, size);
}

void *api_pvalloc(size_t size) {
  if (size > SIZE_MAX - OS_PAGE) {
    errno = ENOMEM;
    return NULL;
  }
  return api_memalign(OS_PAGE, size ? (size + OS_PAGE - 1) & ~(OS_PAGE - 1) : OS_PAGE);
}

MAGPIE_EXPORT size_t magpie_usable_size(void *p) {
  if (debug_on) return debug_usable_size(p);
  if (!p) return 0;
  uintptr_t e;
  unsigned c = small_block_class(p);
  size_t usable = c ? sc_size(c) : block_size(p, &e, "malloc_usable_size of an invalid pointer");
  return memcheck_on ? memcheck_requested(p, usable) : usable; /* as memcheck's own malloc */
}

void api_free_sized(void *p, size_t size, size_t align) {
  if (!fast_free_try(p)) free_slow_kind(p, size, align, DEBUG_MALLOC); /* debug mode checks */
}

MAGPIE_EXPORT int magpie_populate(void *p, size_t len) {
  size_t size = 0;
  bool live = !p         ? false
              : debug_on ? (size = debug_usable_size(p)) > 0
                         : block_live(p, pagemap_get((uintptr_t)p), &size);
  if (!live || len > size) return EINVAL;
  int error = populate_range(p, len);
  return error == EINVAL ? EOPNOTSUPP : error; /* the kernel has no MADV_POPULATE_WRITE */
}

MAGPIE_EXPORT size_t magpie_trim(void) {
  return cache_trim();
}

int api_trim(size_t pad) {
  (void)pad; /* magpie keeps no top pad: everything free is given back */
  return cache_trim() > 0;
}

struct mallinfo2 api_mallinfo2(void) {
  stats_summary_t s;
  stats_summary(&s);
  struct mallinfo2 mi;
  memset(&mi, 0, sizeof mi);
  mi.arena = s.mapped_bytes; /* everything magpie maps */
  mi.hblks = s.large_allocs - s.large_frees;
  mi.hblkhd = s.large_live_bytes;
  mi.usmblks = s.peak_mapped_bytes;
  mi.uordblks = s.live_bytes;
  mi.fordblks = s.mapped_bytes > s.live_bytes ? s.mapped_bytes - s.live_bytes : 0;
  return mi;
}

void api_malloc_stats(void) {
  stats_write_glibc(2); /* magpie's own report: MAGPIE_OPTIONS=stats, magpie run --stats */
}

static void api_info_sink(void *fp, const char *text, size_t len) {
  fwrite(text, 1, len, fp);
}

int api_malloc_info(int options, FILE *fp) {
  if (options != 0) {
    errno = EINVAL;
    return -1;
  }
  report_buf_t b = {.sink = api_info_sink, .sink_ctx = fp};
  stats_write_xml(&b);
  return 0;
}
