/*
 * debug_verify: the byte patterns debug mode writes into and around blocks, their checks, and
 * magpie_verify.
 *
 * Theory
 *   1. Patterns are 32-bit words laid by address (byte i of a word at its place i), so a block
 *      at any alignment holds the same bytes at the same addresses: new blocks hold
 *      DEBUG_PAT_UNINIT, the redzones around a block DEBUG_PAT_REDZONE, a quarantined block
 *      DEBUG_PAT_FREED. A byte that differs is a write that should not have happened.
 *   2. Damage is recorded as a pending error and repaired at once, so the same damage is not
 *      reported again by the next check. A guarded block in quarantine is not checked: it is
 *      inaccessible, a write would have faulted.
 *   3. magpie_verify checks the magazines, slabs and arenas in any mode, and in debug mode every
 *      record's block too: a live block's redzones, a quarantined block's pattern. Errors are
 *      collected under debug_lock into verify_errors (at most DEBUG_VERIFY_ERRORS in full, the
 *      rest counted) and reported after it is released.
 *   4. Locking: debug_verify_lock guards verify_errors and is held across the report, so one
 *      verify's errors print together. Its place in the lock order is written in
 *      src/front/fork.c.
 */
#include "cache.h"
#include "debug.h"
#include "debug_impl.h"
#include "hugepage.h"
#include "mag.h"
#include "magpie.h"
#include "sizeclass.h"
#include "slab.h"
#include "vmem.h"

#include <string.h>

#define DEBUG_VERIFY_ERRORS 8 /* errors one verify reports in full */

lock_t debug_verify_lock = LOCK_INIT;
static pending_error_t verify_errors[DEBUG_VERIFY_ERRORS]; /* debug_verify_lock */

/* ---- patterns ---- */

static inline uint8_t pattern_byte(uint32_t pat, uintptr_t a) {
  return (uint8_t)(pat >> ((a & 3) * 8));
}

void pattern_fill(uintptr_t p, size_t n, uint32_t pat) {
  uintptr_t end = p + n;
  while (p < end && (p & 7))
    *(uint8_t *)p = pattern_byte(pat, p), p++;
  uint64_t w = (uint64_t)pat << 32 | pat;
  for (; p + 8 <= end; p += 8)
    *(uint64_t *)p = w;
  while (p < end)
    *(uint8_t *)p = pattern_byte(pat, p), p++;
}

/* The offset of the first byte of [p, p+n) that does not hold pat, or n. */
static size_t pattern_check(uintptr_t p, size_t n, uint32_t pat) {
  uintptr_t a = p, end = p + n;
  while (a < end && (a & 7)) {
    if (*(uint8_t *)a != pattern_byte(pat, a)) return a - p;
    a++;
  }
  uint64_t w = (uint64_t)pat << 32 | pat;
  for (; a + 8 <= end; a += 8)
    if (*(uint64_t *)a != w) break;
  for (; a < end; a++)
    if (*(uint8_t *)a != pattern_byte(pat, a)) return a - p;
  return n;
}

/* ---- checks of one record (debug_lock held) ---- */

void check_redzones(block_record_t *r, pending_errors_t *es, const char *when) {
  if (r->front) {
    size_t bad = pattern_check(r->user - r->front, r->front, DEBUG_PAT_REDZONE);
    if (bad != r->front) {
      pending_error_t *e = pending_error_add(es, "buffer underrun", r->user, r);
      if (e) {
        detail_str(e, "the redzone before the block was overwritten, ");
        detail_dec(e, r->front - bad);
        detail_str(e, " bytes before its start");
        detail_str(e, when);
      }
      pattern_fill(r->user - r->front, r->front, DEBUG_PAT_REDZONE);
    }
  }
  if (r->tail) {
    size_t bad = pattern_check(r->user + r->size, r->tail, DEBUG_PAT_REDZONE);
    if (bad != r->tail) {
      pending_error_t *e = pending_error_add(es, "buffer overrun", r->user, r);
      if (e) {
        detail_str(e, "byte ");
        detail_dec(e, r->size + bad);
        detail_str(e, " of a ");
        detail_dec(e, r->size);
        detail_str(e, "-byte block was written (");
        detail_dec(e, bad + 1);
        detail_str(e, " past its end, at ");
        detail_hex(e, r->user + r->size + bad);
        detail_str(e, ")");
        detail_str(e, when);
      }
      pattern_fill(r->user + r->size, r->tail, DEBUG_PAT_REDZONE);
    }
  }
}

void check_freed(block_record_t *r, pending_errors_t *es, const char *when) {
  if (r->source == SRC_GUARD) return;
  if (debug_flags.patterns) {
    size_t bad = pattern_check(r->user, r->size, DEBUG_PAT_FREED);
    if (bad != r->size) {
      pending_error_t *e = pending_error_add(es, "write after free", r->user, r);
      if (e) {
        detail_str(e, "byte ");
        detail_dec(e, bad);
        detail_str(e, " (at ");
        detail_hex(e, r->user + bad);
        detail_str(e, ") of the freed ");
        detail_dec(e, r->size);
        detail_str(e, "-byte block no longer holds the freed pattern");
        detail_str(e, when);
      }
      pattern_fill(r->user, r->size, DEBUG_PAT_FREED);
    }
  }
  check_redzones(r, es, when);
}

/* ---- verify ---- */

int debug_verify_records(void) {
  pending_errors_t es;
  size_t found = 0, shown = 0;
  lock_acquire(&debug_verify_lock);
  lock_acquire(&debug_lock);
  for (size_t i = 0; debug_hash && i <= debug_hash_mask; i++)
    for (block_record_t *r = debug_hash[i]; r; r = r->hash_next) {
      if (r->state == REC_DEAD) continue;
      es.count = 0;
      if (r->state == REC_LIVE)
        check_redzones(r, &es, ", found by magpie_verify");
      else
        check_freed(r, &es, ", found by magpie_verify");
      for (int k = 0; k < es.count; k++, found++)
        if (shown < DEBUG_VERIFY_ERRORS)
          memcpy(&verify_errors[shown++], &es.error[k], sizeof es.error[k]);
    }
  lock_release(&debug_lock);
  for (size_t k = 0; k < shown; k++)
    debug_report_error(&verify_errors[k]);
  lock_release(&debug_verify_lock);
  if (found > shown) {
    char not_shown[REPORT_DEC_MAX];
    report_format_dec(not_shown, found - shown);
    report_warning("magpie_verify: further damaged blocks not shown: ", not_shown);
  }
  return (int)found;
}

MAGPIE_EXPORT int magpie_verify(void) {
  mag_check();
  for (unsigned c = 1; c <= SC_COUNT; c++)
    slab_check(&malloc_caches[c]);
  vmem_check(&slab_arena);
  vmem_check(&heap_arena);
  return debug_on ? debug_verify_records() : 0;
}
