/*
 * memcheck_mode: magpie's blocks told to valgrind's memcheck, when memcheck runs the program
 * and magpie does the allocating: a statically linked program, a dynamic one run with
 * --soname-synonyms=somalloc=nouserintercepts, and magpie_cache_* objects always (valgrind
 * replaces malloc in libmagpie.so by default, and then this mode is never on).
 * docs/valgrind.md is the user's guide.
 *
 * Theory
 *   1. On only under memcheck (vg_requests.h tells it from callgrind and the other tools) and
 *      without MAGPIE_DEBUG, decided at bring-up before the first block. Every thread then
 *      stays on tcache_dead (mag_magazines_off): the fast path always misses, so every
 *      operation reaches the front's slow paths, which call here, and goes straight to the
 *      slab layer, which keeps no freed block out of memcheck's sight (nor does malloc_slow
 *      sample: a guard page memcheck knows nothing of). Outside memcheck none of
 *      this runs, and the fast path is the same code either way.
 *   2. What memcheck sees: heap memory is inaccessible from the time it is mapped; a block
 *      handed out becomes accessible over the size requested (MALLOCLIKE_BLOCK), undefined
 *      from malloc, defined from calloc and object caches (a constructed object); a freed one
 *      inaccessible again (FREELIKE_BLOCK). An overrun past the size requested, a use after
 *      free and a block never freed are memcheck's to report, with its stacks.
 *   3. A live block's first word stays accessible and defined (it holds 0 until the program
 *      writes it): free's inline path (fastpath.h) reads it for the free marker before it can
 *      miss, and must not be reported. Blocks under 8 bytes so have 8 accessible.
 *   4. magpie's own accesses are not the program's errors: its metadata pools (meta.c), which
 *      hold block addresses (a slab's first object, a large block's start), are hidden
 *      (os_hide_metadata: inaccessible, so the leak search finds no block address in them, and
 *      accesses to them not reported), and a slow path's work on blocks (the free marker, an
 *      object cache's constructor and destructor) runs with the thread's reports off.
 *   5. realloc needs the old block's requested size, which magpie does not keep: it is where
 *      the block's accessible bytes end (vg_first_noaccess). That is ambiguous up to the first
 *      word (theory 3), so blocks that small move rather than resize in place.
 */
#include "memcheck_mode.h"
#include "debug.h"
#include "mag.h"
#include "os.h"
#include "vg_requests.h"

#include <stdint.h>

#define FIRST_WORD sizeof(uintptr_t)

bool memcheck_on;

void memcheck_init(void) {
  if (debug_on || !vg_memcheck_running()) return;
  memcheck_on = true;
  mag_magazines_off = true;
  os_hide_metadata();
}

void memcheck_at_exit(void) {
  if (memcheck_on) os_show_metadata();
}

void memcheck_heap_mapped(void *p, size_t size) {
  vg_noaccess(p, size);
}

void memcheck_quiet(void) {
  vg_errors_off();
}

void memcheck_loud(void) {
  vg_errors_on();
}

void memcheck_served(void *p, size_t size, bool zeroed) {
  if (!p) return;
  vg_block_alloc(p, size, zeroed);
  vg_defined(p, FIRST_WORD); /* theory 3 */
}

void memcheck_freed(void *p) {
  vg_block_free(p);
  vg_noaccess(p, FIRST_WORD);
}

size_t memcheck_requested(void *p, size_t usable) {
  vg_errors_off();
  char *end = vg_first_noaccess(p, usable);
  vg_errors_on();
  return end ? (size_t)(end - (char *)p) : usable;
}

bool memcheck_resized(void *p, size_t requested, size_t new_size) {
  if (requested <= FIRST_WORD || new_size <= FIRST_WORD) return false; /* theory 5 */
  vg_block_resize(p, requested, new_size);
  return true;
}
