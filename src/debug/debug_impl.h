/*
 * debug_impl: what the files of debug mode share with one another. Private to the debug*.c files
 * (scripts/check-layers.py checks); the front layer sees only debug.h.
 *
 *   debug_flags.c    MAGPIE_DEBUG parsed into debug_flags
 *   debug_chunks.c   the memory under a block, from the layers below
 *   debug_records.c  the block records: pool, hash table, quarantine, graveyard (debug_lock)
 *   debug_verify.c   patterns, redzone and freed-block checks, magpie_verify
 *   debug_report.c   errors found under debug_lock, and their reports after it
 *   debug_leaks.c    the leak report at exit
 *   debug.c          the entry points of debug.h
 */
#ifndef MAGPIE_DEBUG_IMPL_H
#define MAGPIE_DEBUG_IMPL_H

#include "lock.h"
#include "report.h"
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- flags (debug_flags.c) ---- */

typedef struct debug_flags {
  bool redzone;           /* patterned bytes around each block */
  bool patterns;          /* new and freed blocks filled; freed ones quarantined */
  bool audit;             /* allocation and free stacks and threads */
  bool guards;            /* large blocks end at a PROT_NONE page */
  bool guards_all;        /* every block does */
  bool leaks;             /* report blocks never freed at exit */
  bool leaks_unreachable; /* list those no pointer reaches, count the rest */
  bool leaks_all;         /* list every block never freed */
  bool leaks_children;    /* report in child processes of a debug-mode parent too */
  bool leaks_nochildren;  /* report in none of them (`leaks` reports in them by default) */
  bool keep_going;        /* `continue`: report and go on instead of aborting */
  unsigned depth;         /* frames kept per stack (audit or leaks); 0: none */
  size_t verify_every;    /* magpie_verify every this many operations; 0: never */
  size_t quarantine;      /* bytes of freed blocks (and their records) kept */
} debug_flags_t;

extern debug_flags_t debug_flags; /* written once by debug_init, read-only after */

/* Parses MAGPIE_DEBUG's value into debug_flags, warning of what it does not know; true when any
   known flag was given (debug mode is then on). Allocates nothing. */
bool debug_flags_parse(const char *value);

/* ---- records (debug_records.c) ---- */

enum { REC_LIVE = 1, REC_QUARANTINE, REC_DEAD }; /* block_record_t.state */
enum { SRC_SLAB = 1, SRC_LARGE, SRC_GUARD };     /* block_record_t.source: chunk's origin */

/* One block debug mode handed out: live, freed and in quarantine, or freed and released (kept a
   while to name double frees). Records live in a mapped pool of their own, never in the heap.
   Every field is protected by debug_lock. */
typedef struct block_record {
  struct block_record *hash_next;   /* hash chain (by user address) */
  struct block_record *next, *prev; /* quarantine or graveyard FIFO */
  uintptr_t user;                   /* the address handed out */
  size_t size;                      /* bytes requested */
  uintptr_t chunk; /* what the lower layer gave: slab object, large block, mapping */
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
  uintptr_t stack[]; /* allocation stack, then free stack; debug_flags.depth each */
} block_record_t;

/* The largest record: its header and two stacks of the most frames. */
#define DEBUG_RECORD_MAX (sizeof(block_record_t) + 2 * REPORT_DEPTH_MAX * sizeof(uintptr_t))

extern lock_t debug_lock;
extern block_record_t **debug_hash; /* debug_hash_mask + 1 chains (debug_lock) */
extern size_t debug_hash_mask;
extern size_t debug_live;        /* live records (debug_lock) */
extern size_t debug_record_size; /* bytes per record, set once by records_init */

/* ---- chunks (debug_chunks.c): called without debug_lock ---- */

#define DEBUG_BATCH 16 /* chunks given back per lock hold */

typedef struct chunk {
  uintptr_t base;
  size_t size;
  uint8_t source, cls; /* SRC_*; the size class of a SRC_SLAB chunk */
} chunk_t;

/* Chunks whose records left the quarantine under debug_lock, given back after it. */
typedef struct chunk_batch {
  chunk_t chunk[DEBUG_BATCH];
  int count;
} chunk_batch_t;

/* Takes a chunk for size bytes aligned to align with front bytes before (guard: a mapping that
   ends at a PROT_NONE page); sets *user. False when out of memory. */
bool chunk_get(size_t size, size_t align, size_t front, bool guard, chunk_t *c, uintptr_t *user);
void chunk_put(const chunk_t *c);
void chunk_batch_put(chunk_batch_t *b); /* gives every chunk back; empties the batch */

/* ---- errors (debug_report.c) ---- */

#define DEBUG_OP_ERRORS 3 /* errors one operation may report */

/* An error found under debug_lock, reported after it is released (unwinding and symbolising
   may take the dynamic loader's lock): the message and a snapshot of the block's record. */
typedef struct pending_error {
  const char *kind;
  uintptr_t addr;
  char detail[256];
  size_t detail_len;
  bool has_record;
  union {
    block_record_t record;
    unsigned char bytes[DEBUG_RECORD_MAX];
  } snapshot;
} pending_error_t;

typedef struct pending_errors {
  pending_error_t error[DEBUG_OP_ERRORS];
  int count;
} pending_errors_t;

extern lock_t debug_report_lock; /* keeps one report's lines together */

/* A new error of the operation (r: the block's record, or NULL); NULL when es is full. */
pending_error_t *pending_error_add(pending_errors_t *es, const char *kind, uintptr_t addr,
                                   const block_record_t *r);
/* Append to an error's detail (cut short at its capacity). */
void detail_str(pending_error_t *e, const char *s);
void detail_dec(pending_error_t *e, size_t v);
void detail_hex(pending_error_t *e, uintptr_t v);
/* Report one error, or all of es; each aborts unless `continue`. Called without debug_lock. */
void debug_report_error(const pending_error_t *e);
void debug_report_errors(const pending_errors_t *es);

/* ---- patterns and checks (debug_verify.c) ---- */

#define DEBUG_PAT_UNINIT 0xbaddcafeu  /* new blocks: uninitialised reads show a telltale value */
#define DEBUG_PAT_FREED 0xdeadbeefu   /* freed blocks in quarantine: any change is a write */
#define DEBUG_PAT_REDZONE 0xfeedfaceu /* bytes around a block: any change is an overrun */

extern lock_t debug_verify_lock; /* serialises magpie_verify's error list */

/* Fills [p, p+n) with pat, each byte the one of its address's place in a 32-bit word. */
void pattern_fill(uintptr_t p, size_t n, uint32_t pat);
/* With debug_lock held: record damage to r's redzones (or, for a quarantined block, to its
   freed pattern) in es, `when` ending the detail, then repair it so it is reported once. */
void check_redzones(block_record_t *r, pending_errors_t *es, const char *when);
void check_freed(block_record_t *r, pending_errors_t *es, const char *when);
/* Checks every record's block and reports what is damaged; returns how many errors. */
int debug_verify_records(void);

/* ---- records, continued: debug_lock held for all ---- */

/* Sets debug_record_size from debug_flags.depth; debug_init calls it before debug mode is on. */
void records_init(void);
/* A zeroed record for a new block at user, a released record at that address retired; NULL when
   out of memory. A record at user that is not released is fatal (debug_lock released first). */
block_record_t *record_new_at(uintptr_t user);
void record_insert(block_record_t *r); /* r filled in: into the table, counted live */
block_record_t *record_find(uintptr_t user);
/* The record of a block containing address a, a live one before a freed one (slow). */
block_record_t *record_containing(uintptr_t a);
/* A freed block: into the quarantine, whose oldest may then leave it (their patterns checked,
   errors into es), or straight to the graveyard; chunks to give back go into b. */
void record_retire(block_record_t *r, chunk_batch_t *b, pending_errors_t *es);

/* ---- leaks (debug_leaks.c) ---- */

/* stack_from: the lowest stack address that belongs to the program's frames */
void debug_leaks_report(uintptr_t stack_from);
void debug_leaks_init(void);         /* at start, with `leaks`: watches thread exits */
void debug_leaks_thread_start(void); /* a thread allocates: its exit will be recorded */

#endif
