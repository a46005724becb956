/* debug_impl: what debug.c shares with debug_leaks.c (not part of the contract, see debug.h). */
#ifndef MAGPIE_DEBUG_IMPL_H
#define MAGPIE_DEBUG_IMPL_H

#include "lock.h"
#include "report.h"
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum { REC_LIVE = 1, REC_QUARANTINE, REC_DEAD }; /* drec_t.state */
enum { SRC_SLAB = 1, SRC_LARGE, SRC_GUARD };     /* drec_t.source: where the chunk came from */

/* One block debug mode handed out: live, freed and in quarantine, or freed and released (kept a
   while to name double frees). Records live in debug.c's own mapped pool, never in the heap.
   Every field is protected by debug_lock. */
typedef struct drec {
  struct drec *hnext;       /* hash chain (by user address) */
  struct drec *next, *prev; /* quarantine or graveyard FIFO */
  uintptr_t user;           /* the address handed out */
  size_t size;              /* bytes requested */
  uintptr_t chunk;          /* what the lower layer gave: slab object, large block, mapping */
  size_t chunk_size;
  uint32_t align;      /* alignment asked for (0: default) */
  uint32_t tail;       /* redzone bytes after user + size that hold the pattern */
  uint16_t front;      /* redzone bytes before user */
  uint8_t source;      /* SRC_* */
  uint8_t cls;         /* size class, for SRC_SLAB */
  uint8_t kind;        /* DEBUG_MALLOC or DEBUG_NEW */
  uint8_t state;       /* REC_* */
  uint8_t mark;        /* leak scan: reached */
  uint8_t alloc_depth; /* frames in stack[0 .. depth) */
  uint8_t free_depth;  /* frames in stack[depth .. 2 * depth) */
  uint32_t alloc_tid, free_tid;
  uintptr_t stack[]; /* allocation stack, then free stack; dopt.depth each */
} drec_t;

typedef struct debug_opts {
  bool redzone;           /* patterned bytes around each block */
  bool patterns;          /* new and freed blocks filled; freed ones quarantined */
  bool audit;             /* allocation and free stacks and threads */
  bool guards;            /* large blocks end at a PROT_NONE page */
  bool guards_all;        /* every block does */
  bool leaks;             /* report blocks never freed at exit */
  bool leaks_unreachable; /* only those no pointer reaches */
  bool cont;              /* report and go on */
  unsigned depth;         /* frames kept per stack (audit or leaks); 0: none */
  size_t verify_every;    /* magpie_verify every this many operations; 0: never */
  size_t quarantine;      /* bytes of freed blocks (and their records) kept */
} debug_opts_t;

extern debug_opts_t dopt;
extern lock_t debug_lock;
extern drec_t **debug_hash; /* debug_hash_mask + 1 chains (debug_lock) */
extern size_t debug_hash_mask;
extern size_t debug_live; /* live records (debug_lock) */

/* debug_leaks.c; stack_from: the lowest stack address that belongs to the program's frames */
void debug_leaks_report(uintptr_t stack_from);

#endif
