/*
 * init: bringing magpie up exactly once, and keeping it whole across fork.
 *
 * Theory
 *   1. magpie_init runs on the first slow-path call of any thread (the empty-magazine trick
 *      guarantees one happens before anything is served) or from the library constructor,
 *      whichever is first, possibly from inside the dynamic loader. It allocates nothing from
 *      the heap, calls no function that might (no stdio, no getenv, no dlsym), and is guarded
 *      by a three-state word: other threads wait; a recursive call from the initialising
 *      thread is an internal error, reported.
 *   2. Options: if the first call comes before libc has set environ, the constructor reads
 *      MAGPIE_OPTIONS again once environ exists. MAGPIE_DEBUG is read at the first call only:
 *      debug mode must be on before any block is handed out, or never.
 *   3. fork: the constructor registers fork.c's handlers, when malloc already works
 *      (pthread_atfork itself allocates).
 *   4. At exit, the destructor writes the leak report (MAGPIE_DEBUG) and the statistics report
 *      if MAGPIE_OPTIONS asked for one, to the stderr the program started with: the constructor
 *      keeps a copy (report_keep_stderr), since programs such as ls close fd 2 at exit before
 *      the destructor runs. Then the heap profile, if profile_file names one (debug/prof.h).
 */
#include "init.h"
#include "caches.h"
#include "debug.h"
#include "fastpath.h"
#include "fork.h"
#include "hugepage.h"
#include "mag.h"
#include "memcheck_mode.h"
#include "options.h"
#include "os.h"
#include "prof.h"
#include "report.h"
#include "san_hooks.h"
#include "sample.h"
#include "sizeclass.h"
#include "slab.h"
#include "stats.h"

#include <sched.h>

#define HEAP_IMPORT ((size_t)4 << 20) /* the heap arena maps at least this much at a time */

enum { INIT_NONE, INIT_RUNNING, INIT_DONE };
static int init_state;
static __thread int init_here; /* the calling thread is initialising */
static bool init_had_environ;

extern char **environ;

static void *heap_import(void *source, size_t size, size_t align, bool *clean, uint8_t *backing) {
  (void)source;
  (void)backing;
  *clean = true;
  void *p = os_map_aligned(size, align);
  if (p) hugepage_heap_mapped(p, size);
  if (p && memcheck_on) memcheck_heap_mapped(p, size);
  return p;
}

static void heap_release(void *source, void *addr, size_t size) {
  (void)source;
  os_unmap(addr, size);
}

static void *heap_remap(void *source, void *addr, size_t old_size, size_t new_size) {
  (void)source;
  void *p = os_remap(addr, old_size, new_size);
  if (p && memcheck_on && new_size > old_size)
    memcheck_heap_mapped((char *)p + old_size, new_size - old_size);
  return p;
}

/* The free bytes the heap may hold before a free releases a whole span: twice `retain`, which
   each reap purges down to (caches.c). Between reaps a program that churns big blocks reuses
   what it freed instead of unmapping and faulting it in again; the reaper bounds how long. */
static size_t heap_retain(void) {
  return opt.retain > SIZE_MAX / 2 ? SIZE_MAX : 2 * opt.retain;
}

/* Whether every block up to SC_LOOKUP_MAX that malloc or new serves comes from the class of
   its size or is a whole page (a heap-profiler sample): then a sized free may take the class
   from the size (fastpath.h). Sampled guard blocks end at their page's end, debug mode's carry
   redzones, and memcheck and sanitizer modes check every free. */
/* The C++ runtime's throw, a weak reference as in cxx.cc: set where the program loaded the
   runtime, so that a C++ sized delete may come; without it sc_sized is never touched (8 pages).
   A library opened later that brings the runtime gets its sized deletes through the page map. */
void __cxa_throw(void *obj, void *type, void (*dtor)(void *)) __attribute__((weak));

static bool sized_free_trusted(void) {
  return !debug_on && !memcheck_on && !mag_magazines_off && !opt.sample;
}

void magpie_init(void) {
  if (__atomic_load_n(&init_state, __ATOMIC_ACQUIRE) == INIT_DONE) return;
  int expected = INIT_NONE;
  if (!__atomic_compare_exchange_n(&init_state, &expected, INIT_RUNNING, false, __ATOMIC_ACQUIRE,
                                   __ATOMIC_ACQUIRE)) {
    if (init_here) report_fatal("magpie_init re-entered while initialising", NULL, 0);
    while (__atomic_load_n(&init_state, __ATOMIC_ACQUIRE) != INIT_DONE)
      sched_yield();
    return;
  }
  init_here = 1;
  os_init();
  init_had_environ = environ != NULL;
  options_init();
  const char *debug = options_getenv("MAGPIE_DEBUG");
  if (debug && *debug) debug_init(debug);
  memcheck_init();
  /* A sanitized program: its object caches' objects are checked one by one (san_hooks.h). */
  if (!debug_on && san_present()) mag_magazines_off = true;
  slab_pages_may_go = !debug_on && !memcheck_on;
  sc_init();
  mag_consts.secret = (uintptr_t)os_random() | 1; /* never 0: a zeroed word must not look freed */
  vmem_init(&heap_arena, "heap", OS_PAGE, heap_import, heap_release, NULL, HEAP_IMPORT,
            SC_SPAN_MAX);
  heap_arena.retain = heap_retain();
  heap_arena.remap = heap_remap;
  hugepage_init();
  cache_init();
  mag_init();
  prof_init();
  if (sized_free_trusted() && __cxa_throw) sc_sized_trust(true);
  init_here = 0;
  __atomic_store_n(&init_state, INIT_DONE, __ATOMIC_RELEASE);
}

__attribute__((constructor)) static void magpie_constructor(void) {
  magpie_init();
  if (!init_had_environ) {
    init_had_environ = true;
    options_init();
    heap_arena.retain = heap_retain();
    hugepage_options();
    /* only ever cleared: a block sampled before the options changed stays sampled */
    if (!sized_free_trusted()) sc_sized_trust(false);
  }
  if (debug_on || (opt.stats != OPT_STATS_OFF && !opt.stats_file[0])) report_keep_stderr();
  fork_handlers_register();
}

__attribute__((destructor)) static void magpie_destructor(void) {
  if (debug_on) debug_at_exit();
  stats_at_exit();
  memcheck_at_exit();
  prof_at_exit();
}
