/*
 * debug_report: debug mode's error reports, "magpie: <kind> of address <p>: <detail>", then the
 * block (requested size, kind, alignment, class or mapping), the stack of the call, and with
 * audit where the block was allocated and freed, by which thread. Then abort(), unless
 * `continue`. tests/debug checks these texts.
 *
 * Theory
 *   1. Errors are found with debug_lock held, but reporting unwinds and symbolises, which may
 *      take the dynamic loader's lock, and a thread in dlopen may be waiting for malloc. So an
 *      error is first written into a pending_error_t (its detail text and a snapshot of the
 *      record, which may change once the lock is released) and reported after the release.
 *   2. An operation reports at most DEBUG_OP_ERRORS errors; further ones are dropped (the first
 *      aborts anyway unless `continue`).
 *   3. Locking: debug_report_lock keeps one report's lines together when threads report at
 *      once; it is never taken with debug_lock held. Its place in the lock order is written in
 *      src/front/fork.c.
 */
#include "debug.h"
#include "debug_impl.h"
#include "os.h"

#include <stdlib.h>
#include <string.h>

lock_t debug_report_lock = LOCK_INIT;

/* ---- pending errors (debug_lock held) ---- */

void detail_str(pending_error_t *e, const char *s) {
  while (*s && e->detail_len < sizeof e->detail - 1)
    e->detail[e->detail_len++] = *s++;
  e->detail[e->detail_len] = '\0';
}

void detail_dec(pending_error_t *e, size_t v) {
  char out[REPORT_DEC_MAX];
  report_format_dec(out, v);
  detail_str(e, out);
}

void detail_hex(pending_error_t *e, uintptr_t v) {
  char out[REPORT_HEX_MAX];
  report_format_hex(out, v);
  detail_str(e, out);
}

pending_error_t *pending_error_add(pending_errors_t *es, const char *kind, uintptr_t addr,
                                   const block_record_t *r) {
  if (es->count >= DEBUG_OP_ERRORS) return NULL;
  pending_error_t *e = &es->error[es->count++];
  e->kind = kind;
  e->addr = addr;
  e->detail_len = 0;
  e->detail[0] = '\0';
  e->has_record = r != NULL;
  if (r) memcpy(e->snapshot.bytes, r, debug_record_size);
  return e;
}

/* ---- the report (no debug_lock) ---- */

static void put_record_stacks(report_buf_t *b, const block_record_t *r) {
  if (debug_flags.depth == 0) {
    report_str(b, "  (MAGPIE_DEBUG=audit records where and by which thread blocks are allocated "
                  "and freed)\n");
    return;
  }
  report_str(b, "  allocated by thread ");
  report_dec(b, r->alloc_tid);
  report_str(b, " at:\n");
  report_frames(b, r->stack, r->alloc_depth);
  if (r->state != REC_LIVE) {
    report_str(b, "  freed by thread ");
    report_dec(b, r->free_tid);
    if (debug_flags.audit) {
      report_str(b, " at:\n");
      report_frames(b, r->stack + debug_flags.depth, r->free_depth);
    } else {
      report_str(b, " (MAGPIE_DEBUG=audit records where)\n");
    }
  }
}

static void put_block(report_buf_t *b, const block_record_t *r) {
  report_str(b, "  block ");
  report_hex(b, r->user);
  report_str(b, ": ");
  report_dec(b, r->size);
  report_str(b, " bytes requested from ");
  report_str(b, r->kind == DEBUG_NEW ? "operator new" : "malloc");
  if (r->align) {
    report_str(b, " with alignment ");
    report_dec(b, r->align);
  }
  report_str(b, r->state == REC_LIVE         ? ", live"
                : r->state == REC_QUARANTINE ? ", freed (in quarantine)"
                                             : ", freed (memory since given back)");
  if (r->source == SRC_SLAB) {
    report_str(b, "; chunk ");
    report_hex(b, r->chunk);
    report_str(b, " of malloc size class ");
    report_dec(b, r->cls);
    report_str(b, " (");
    report_dec(b, r->chunk_size);
    report_str(b, "-byte objects)\n");
  } else if (r->source == SRC_LARGE) {
    report_str(b, "; large block ");
    report_hex(b, r->chunk);
    report_str(b, " of ");
    report_dec(b, r->chunk_size);
    report_str(b, " bytes\n");
  } else {
    report_str(b, "; guarded mapping ");
    report_hex(b, r->chunk);
    report_str(b, " of ");
    report_dec(b, r->chunk_size);
    report_str(b, " bytes, guard page at ");
    report_hex(b, r->chunk + r->chunk_size - OS_PAGE);
    report_str(b, "\n");
  }
}

void debug_report_error(const pending_error_t *e) {
  lock_acquire(&debug_report_lock);
  report_buf_t b = {.len = 0};
  report_error_head(&b, e->kind, (const void *)e->addr, e->detail_len ? e->detail : NULL);
  report_str(&b, "\n");
  if (e->has_record) put_block(&b, &e->snapshot.record);
  report_current_stack(&b);
  if (e->has_record) put_record_stacks(&b, &e->snapshot.record);
  report_flush(&b);
  lock_release(&debug_report_lock);
  if (!debug_flags.keep_going) abort();
}

void debug_report_errors(const pending_errors_t *es) {
  for (int i = 0; i < es->count; i++)
    debug_report_error(&es->error[i]);
}
