/*
 * debug: MAGPIE_DEBUG mode, after libumem's UMEM_DEBUG. The contract between the front layer and
 * debug mode (src/debug/; debug_impl.h maps its files).
 *
 * When the environment has a non-empty MAGPIE_DEBUG, magpie_init calls debug_init and sets
 * debug_on before serving anything. From then on no thread ever gets a filled magazine, so every
 * malloc and free misses the fast path, and the slow paths (api.c, cxx.cc) hand the request to
 * the functions below instead of the normal layers. Normal mode pays nothing for this: the fast
 * path never tests debug_on, only the slow paths do.
 *
 * kind says which API made or frees a block, so debug mode can catch mismatches:
 *   DEBUG_MALLOC   malloc, calloc, realloc, memalign family, free, free_sized
 *   DEBUG_NEW      C++ operator new / delete (scalar or array), any alignment
 * align is the alignment the caller asked for (0: the default, 16), and on free the alignment
 * the deallocation function was given (C++ aligned delete, free_aligned_sized; 0: none).
 * size on free is the size the caller claims (free_sized, sized delete; 0: not given).
 */
#ifndef MAGPIE_DEBUG_H
#define MAGPIE_DEBUG_H

#include "export.h"
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define DEBUG_MALLOC 0
#define DEBUG_NEW 1

extern MAGPIE_HIDDEN bool debug_on; /* set once by magpie_init, before the first request */

/* Parses MAGPIE_DEBUG's value (flags, comma-separated); warns of unknown flags; sets debug_on
   when any check is on. Called from magpie_init: must not allocate from the heap. */
void debug_init(const char *flags);
/* NULL with errno ENOMEM when out of memory; align is a power of two or 0. */
void *debug_alloc(size_t size, size_t align, int kind, bool zero);
void debug_free(void *p, size_t size, size_t align, int kind); /* p may be NULL */
void *debug_realloc(void *p, size_t size);                     /* C realloc semantics */
size_t debug_usable_size(void *p);
void debug_at_exit(void);      /* leak report when asked for */
void debug_fork_prepare(void); /* fork.c's handlers, in its lock order */
void debug_fork_parent(void);
void debug_fork_child(void);
/* Blocks served by debug mode (its blocks bypass the per-thread counters and the magazines'
   count of live bytes), for statistics: bytes as the program asked for them. */
typedef struct debug_figures {
  uint64_t allocs, frees, live_bytes, peak_live_bytes, requested;
} debug_figures_t;
void debug_totals(debug_figures_t *t);

#endif
