/*
 * debug_records: what debug mode knows of each block, kept out of band.
 *
 * Theory
 *   1. Records are carved from mappings of their own (never from the heap they describe) and
 *      found by user address in a chained hash table that doubles when records exceed twice its
 *      chains (a table that cannot grow is kept: longer chains, still correct).
 *   2. A record is LIVE, QUARANTINE (freed, its memory kept and filled with the freed pattern,
 *      or made inaccessible for a guarded block) or DEAD (memory given back; kept in a bounded
 *      graveyard so that a late double free is still named). A new block at a DEAD record's
 *      address replaces it; one at a LIVE or QUARANTINE record's address is a broken invariant.
 *   3. The quarantine is a FIFO bounded in bytes (chunk + record). When it is over its bound its
 *      oldest blocks leave, their freed pattern checked: a write after free is reported then,
 *      or by magpie_verify, whichever is first. A block that alone exceeds the bound, or one
 *      that no pattern or guard would check, goes straight to the graveyard.
 *   4. Locking: debug_lock protects every record, the table, both FIFOs and the counters. Its
 *      holder never calls the layers below (chunks leaving go into a chunk_batch_t, given back
 *      after) and never unwinds or reports (errors go into a pending_errors_t). Its place in
 *      the lock order is written in src/front/fork.c.
 */
#include "debug.h"
#include "debug_impl.h"
#include "os.h"

#include <string.h>

#define DEBUG_GRAVEYARD_MAX 4096           /* released records kept to name late double frees */
#define DEBUG_HASH_MIN ((size_t)1 << 12)   /* initial chains */
#define DEBUG_POOL_CHUNK ((size_t)1 << 20) /* records are carved from mappings of this size */

lock_t debug_lock = LOCK_INIT;
block_record_t **debug_hash;
size_t debug_hash_mask;
size_t debug_live;
size_t debug_record_size;

/* ---- state under debug_lock ---- */
static debug_figures_t debug_counts;   /* statistics */
static char *pool_next, *pool_end;     /* the pool mapping's unused part */
static block_record_t *pool_free_list; /* freed records, linked through hash_next */
static size_t debug_records;           /* records in use, any state */
static block_record_t *quarantine_oldest, *quarantine_newest;
static size_t quarantine_bytes;
static block_record_t *graveyard_oldest, *graveyard_newest;
static size_t graveyard_count;

void records_init(void) {
  debug_record_size =
      (sizeof(block_record_t) + 2 * debug_flags.depth * sizeof(uintptr_t) + 15) & ~(size_t)15;
}

void debug_totals(debug_figures_t *t) {
  lock_acquire(&debug_lock);
  *t = debug_counts;
  lock_release(&debug_lock);
}

/* ---- the pool ---- */

static block_record_t *pool_take(void) {
  block_record_t *r = pool_free_list;
  if (r) {
    pool_free_list = r->hash_next;
  } else {
    if ((size_t)(pool_end - pool_next) < debug_record_size) {
      char *mem = os_map(DEBUG_POOL_CHUNK);
      if (!mem) return NULL;
      pool_next = mem;
      pool_end = mem + DEBUG_POOL_CHUNK;
    }
    r = (block_record_t *)pool_next;
    pool_next += debug_record_size;
  }
  memset(r, 0, debug_record_size);
  debug_records++;
  return r;
}

static void pool_give(block_record_t *r) {
  r->hash_next = pool_free_list;
  pool_free_list = r;
  debug_records--;
}

/* ---- the hash table ---- */

static size_t hash_of(uintptr_t a) {
  return (size_t)(((a >> 4) * 0x9e3779b97f4a7c15ull) >> 20) & debug_hash_mask;
}

/* True when the table exists; grows it first when it is full. */
static bool hash_ready(void) {
  if (debug_hash && debug_records < 2 * (debug_hash_mask + 1)) return true;
  size_t n = debug_hash ? 2 * (debug_hash_mask + 1) : DEBUG_HASH_MIN;
  block_record_t **t = os_map(n * sizeof *t);
  if (!t) return debug_hash != NULL;
  block_record_t **old = debug_hash;
  size_t old_n = old ? debug_hash_mask + 1 : 0;
  debug_hash = t;
  debug_hash_mask = n - 1;
  for (size_t i = 0; i < old_n; i++)
    for (block_record_t *r = old[i], *next; r; r = next) {
      next = r->hash_next;
      size_t h = hash_of(r->user);
      r->hash_next = t[h];
      t[h] = r;
    }
  if (old) os_unmap(old, old_n * sizeof *old);
  return true;
}

block_record_t *record_find(uintptr_t user) {
  if (!debug_hash) return NULL;
  for (block_record_t *r = debug_hash[hash_of(user)]; r; r = r->hash_next)
    if (r->user == user) return r;
  return NULL;
}

static void hash_remove(block_record_t *r) {
  block_record_t **pp = &debug_hash[hash_of(r->user)];
  while (*pp != r)
    pp = &(*pp)->hash_next;
  *pp = r->hash_next;
}

block_record_t *record_containing(uintptr_t a) {
  block_record_t *best = NULL;
  if (!debug_hash) return NULL;
  for (size_t i = 0; i <= debug_hash_mask; i++)
    for (block_record_t *r = debug_hash[i]; r; r = r->hash_next) {
      size_t len = r->size ? r->size : 1;
      if (a >= r->user - r->front && a < r->user + len + r->tail &&
          (!best || r->state < best->state))
        best = r;
    }
  return best;
}

/* ---- FIFO lists: the quarantine and the graveyard, oldest first ---- */

static void fifo_push(block_record_t **oldest, block_record_t **newest, block_record_t *r) {
  r->next = NULL;
  r->prev = *newest;
  if (*newest)
    (*newest)->next = r;
  else
    *oldest = r;
  *newest = r;
}

static void fifo_unlink(block_record_t **oldest, block_record_t **newest, block_record_t *r) {
  if (r->prev)
    r->prev->next = r->next;
  else
    *oldest = r->next;
  if (r->next)
    r->next->prev = r->prev;
  else
    *newest = r->prev;
}

/* A released record leaves the graveyard, the table and the pool. */
static void graveyard_drop(block_record_t *r) {
  fifo_unlink(&graveyard_oldest, &graveyard_newest, r);
  graveyard_count--;
  hash_remove(r);
  pool_give(r);
}

/* A freed record's memory goes back (after the lock) and the record to the graveyard. */
static void graveyard_add(block_record_t *r, chunk_batch_t *b) {
  r->state = REC_DEAD;
  b->chunk[b->count++] = (chunk_t){r->chunk, r->chunk_size, r->source, r->cls};
  fifo_push(&graveyard_oldest, &graveyard_newest, r);
  if (++graveyard_count > DEBUG_GRAVEYARD_MAX) graveyard_drop(graveyard_oldest);
}

static size_t quarantine_cost(const block_record_t *r) {
  return r->chunk_size + debug_record_size;
}

/* Evicts the oldest quarantined blocks while the quarantine is over its bound. */
static void quarantine_trim(chunk_batch_t *b, pending_errors_t *es) {
  while (quarantine_bytes > debug_flags.quarantine && quarantine_oldest && b->count < DEBUG_BATCH) {
    block_record_t *r = quarantine_oldest;
    fifo_unlink(&quarantine_oldest, &quarantine_newest, r);
    quarantine_bytes -= quarantine_cost(r);
    check_freed(r, es, ", found when the block left quarantine");
    graveyard_add(r, b);
  }
}

/* ---- a block's life ---- */

block_record_t *record_new_at(uintptr_t user) {
  block_record_t *old = hash_ready() ? record_find(user) : NULL;
  block_record_t *r = debug_hash ? pool_take() : NULL;
  if (!r) return NULL;
  if (old) { /* a released block's record: the address is in use again */
    if (old->state != REC_DEAD) {
      lock_release(&debug_lock);
      report_fatal("debug: a chunk was handed out twice", (void *)user, old->state);
    }
    graveyard_drop(old);
  }
  return r;
}

void record_insert(block_record_t *r) {
  size_t h = hash_of(r->user);
  r->hash_next = debug_hash[h];
  debug_hash[h] = r;
  debug_live++;
  debug_counts.allocs++;
  debug_counts.live_bytes += r->size;
  debug_counts.requested += r->size;
  if (debug_counts.live_bytes > debug_counts.peak_live_bytes)
    debug_counts.peak_live_bytes = debug_counts.live_bytes;
}

void record_retire(block_record_t *r, chunk_batch_t *b, pending_errors_t *es) {
  debug_live--;
  debug_counts.frees++;
  debug_counts.live_bytes -= r->size;
  bool keep = (debug_flags.patterns || r->source == SRC_GUARD) &&
              quarantine_cost(r) <= debug_flags.quarantine;
  if (!keep) {
    graveyard_add(r, b);
    return;
  }
  if (r->source == SRC_GUARD)
    os_protect((void *)r->chunk, r->chunk_size - OS_PAGE, false);
  else
    pattern_fill(r->user, r->size, DEBUG_PAT_FREED);
  r->state = REC_QUARANTINE;
  fifo_push(&quarantine_oldest, &quarantine_newest, r);
  quarantine_bytes += quarantine_cost(r);
  quarantine_trim(b, es);
}
