/*
 * debug: MAGPIE_DEBUG mode, after libumem's UMEM_DEBUG. debug.h is the contract with the
 * allocator; docs/debug.md is the user's guide.
 *
 * Theory
 *   1. Flags. debug_init parses MAGPIE_DEBUG (flag,flag=value,...) into dopt before the first
 *      block is served, without allocating; an unknown flag or bad value is warned about and
 *      ignored. Debug mode is on when any known flag is; the misuse checks (double, interior,
 *      foreign free, size, alignment and kind mismatches) are then always on.
 *   2. Blocks. Every request takes a chunk from the layers below, never from a magazine: a
 *      slab object of the class that fits front redzone + size + tail redzone (slab_alloc, one
 *      object at a time), a large block (large_alloc), or with guards a mapping of its own whose
 *      last page is PROT_NONE, the block placed so that it ends (up to its alignment) at that
 *      page. The user address is chunk + front (16 bytes of redzone when the alignment allows).
 *   3. Records. What debug mode knows of a block lives out of band, in records carved from
 *      mappings of its own (never from the heap they describe), found by user address in a
 *      chained hash table that doubles when it gets full. A record is LIVE, QUARANTINE (freed,
 *      memory kept, filled with the freed pattern or made inaccessible) or DEAD (memory given
 *      back; kept in a bounded graveyard so a late double free is still named). A new block at
 *      a DEAD record's address replaces it.
 *   4. Quarantine. Freed blocks wait in a FIFO bounded in bytes (chunk + record); the oldest
 *      leave when it is over, their patterns checked: a write after free is reported then, or
 *      by magpie_verify, whichever is first.
 *   5. Locks. One lock, debug_lock, protects records, table, lists and counters. It is never
 *      held while calling the layers below (chunks are taken before and given back after), nor
 *      while unwinding or reporting (both may take the dynamic loader's lock, and a thread in
 *      dlopen may be waiting for malloc): errors found under the lock are copied out (derr_t,
 *      with a snapshot of the record) and reported after it is released. verify_lock serialises
 *      magpie_verify's error list; report_lock keeps reports whole. Order: verify_lock,
 *      report_lock, debug_lock; fork.c takes all three in its prepare handler.
 *   6. Reports. "magpie: <kind> of address <p>: <detail>", the block (requested size, kind,
 *      alignment, class or cache), the stack of the call, and with audit where the block was
 *      allocated and freed, by which thread. Then abort(), unless `continue`.
 *   7. Normal mode pays nothing: nothing here runs unless debug_on, which only slow paths test.
 */
#define _GNU_SOURCE
#include "debug.h"
#include "cache.h"
#include "debug_impl.h"
#include "mag.h"
#include "large.h"
#include "os.h"
#include "pagemap.h"
#include "report.h"
#include "sizeclass.h"
#include "slab.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define DEBUG_PAT_UNINIT 0xbaddcafeu  /* new blocks: uninitialised reads show a telltale value */
#define DEBUG_PAT_FREED 0xdeadbeefu   /* freed blocks in quarantine: any change is a write */
#define DEBUG_PAT_REDZONE 0xfeedfaceu /* bytes around a block: any change is an overrun */
#define DEBUG_FRONT 16                /* front redzone: one default alignment unit */
#define DEBUG_TAIL_MIN 16             /* a block whose size fills its class still gets these */
#define DEBUG_FILL_MAX ((size_t)64 << 10)  /* redzone bytes patterned at most (huge alignments) */
#define DEBUG_GUARD_MIN ((size_t)32 << 10) /* guards: blocks above this get a guard page */
#define DEBUG_DEPTH_DEFAULT 16 /* frames per audit stack: enough to see through wrappers */
#define DEBUG_QUARANTINE_DEFAULT ((size_t)4 << 20) /* a few MiB: catches most stale writes */
#define DEBUG_GRAVE_MAX 4096               /* released records kept to name late double frees */
#define DEBUG_HASH_MIN ((size_t)1 << 12)   /* initial chains; doubles when records exceed 2x */
#define DEBUG_POOL_CHUNK ((size_t)1 << 20) /* records are carved from mappings of this size */
#define DEBUG_SIZE_MAX ((size_t)1 << 46)   /* larger requests can never be mapped */
#define DEBUG_BATCH 16                     /* chunks given back per lock hold */
#define DEBUG_ERRS 3                       /* errors one operation may report */
#define DEBUG_VERIFY_ERRS 8                /* errors one verify reports in full */

#define DEBUG_REC_MAX (sizeof(drec_t) + 2 * REPORT_DEPTH_MAX * sizeof(uintptr_t))

bool debug_on;
debug_opts_t dopt;
lock_t debug_lock = LOCK_INIT;
drec_t **debug_hash;
size_t debug_hash_mask;
size_t debug_live;
static uint64_t debug_allocs, debug_frees, debug_live_bytes; /* statistics (debug_lock) */

static lock_t verify_lock = LOCK_INIT;
static lock_t report_lock = LOCK_INIT;

/* ---- state under debug_lock ---- */
static size_t rec_size; /* bytes per record: header + 2 * depth frames, rounded to 16 */
static char *pool_bump, *pool_end;
static drec_t *pool_free; /* freed records, linked through hnext */
static size_t debug_records;
static drec_t *q_head, *q_tail; /* quarantine, oldest first */
static size_t q_bytes;
static drec_t *g_head, *g_tail; /* graveyard, oldest first */
static size_t g_count;
static size_t debug_ops;
static size_t debug_errors; /* reported so far (atomic) */

static __thread uint32_t debug_tid_cache __attribute__((tls_model("initial-exec")));
static __thread int debug_busy __attribute__((tls_model("initial-exec"))); /* capturing */

static uint32_t debug_tid(void) {
  if (!debug_tid_cache) debug_tid_cache = os_thread_id();
  return debug_tid_cache;
}

/* ---- flags ---- */

static bool flag_is(const char *s, size_t len, const char *word) {
  return strlen(word) == len && memcmp(s, word, len) == 0;
}

static bool parse_size(const char *s, size_t len, size_t *out) {
  size_t v = 0, i = 0;
  for (; i < len && s[i] >= '0' && s[i] <= '9'; i++) {
    if (v > (SIZE_MAX - 9) / 10) return false;
    v = v * 10 + (size_t)(s[i] - '0');
  }
  if (i == 0) return false;
  if (i + 1 == len) {
    unsigned shift = (s[i] | 32) == 'k'   ? 10
                     : (s[i] | 32) == 'm' ? 20
                     : (s[i] | 32) == 'g' ? 30
                                          : 0;
    if (!shift || v > (SIZE_MAX >> shift)) return false;
    v <<= shift;
  } else if (i != len) {
    return false;
  }
  *out = v;
  return true;
}

static void set_default(void) {
  dopt.redzone = dopt.patterns = dopt.audit = dopt.guards = dopt.leaks = true;
}

/* One flag; false when it is unknown or its value does not parse. */
static bool parse_flag(const char *s, size_t name_len, const char *val, size_t val_len,
                       bool has_val) {
  size_t v;
  if (!has_val) {
    if (flag_is(s, name_len, "default"))
      set_default();
    else if (flag_is(s, name_len, "redzone"))
      dopt.redzone = true;
    else if (flag_is(s, name_len, "patterns"))
      dopt.patterns = true;
    else if (flag_is(s, name_len, "audit"))
      dopt.audit = true;
    else if (flag_is(s, name_len, "guards"))
      dopt.guards = true;
    else if (flag_is(s, name_len, "leaks"))
      dopt.leaks = true;
    else if (flag_is(s, name_len, "continue"))
      dopt.cont = true;
    else if (flag_is(s, name_len, "checks"))
      ; /* the misuse checks alone */
    else
      return false;
    return true;
  }
  if (flag_is(s, name_len, "audit") && parse_size(val, val_len, &v) && v >= 1 &&
      v <= REPORT_DEPTH_MAX) {
    dopt.audit = true;
    dopt.depth = (unsigned)v;
  } else if (flag_is(s, name_len, "guards") && flag_is(val, val_len, "all")) {
    dopt.guards = dopt.guards_all = true;
  } else if (flag_is(s, name_len, "leaks") && flag_is(val, val_len, "unreachable")) {
    dopt.leaks = dopt.leaks_unreachable = true;
  } else if (flag_is(s, name_len, "verify") && parse_size(val, val_len, &v) && v >= 1) {
    dopt.verify_every = v;
  } else if (flag_is(s, name_len, "quarantine") && parse_size(val, val_len, &v)) {
    dopt.quarantine = v;
  } else if (flag_is(s, name_len, "log") && val_len > 0 && val_len < 256) {
    char path[256];
    memcpy(path, val, val_len);
    path[val_len] = '\0';
    report_set_log(path);
  } else {
    return false;
  }
  return true;
}

void debug_init(const char *flags) {
  bool any = false;
  dopt.quarantine = DEBUG_QUARANTINE_DEFAULT;
  for (const char *s = flags; *s;) {
    const char *end = s, *eq;
    while (*end && *end != ',')
      end++;
    for (eq = s; eq < end && *eq != '='; eq++)
      ;
    if (end > s) {
      bool has_val = eq < end;
      const char *val = has_val ? eq + 1 : end;
      if (parse_flag(s, (size_t)(eq - s), val, (size_t)(end - val), has_val)) {
        any = true;
      } else {
        char quoted[64];
        size_t n = (size_t)(end - s) < sizeof quoted - 1 ? (size_t)(end - s) : sizeof quoted - 1;
        memcpy(quoted, s, n);
        quoted[n] = '\0';
        report_warning("unknown flag or bad value in MAGPIE_DEBUG (ignored): ", quoted);
      }
    }
    s = *end ? end + 1 : end;
  }
  if (!any) return;
  if ((dopt.audit || dopt.leaks) && dopt.depth == 0) dopt.depth = DEBUG_DEPTH_DEFAULT;
  if (!dopt.audit && !dopt.leaks) dopt.depth = 0;
  rec_size = (sizeof(drec_t) + 2 * dopt.depth * sizeof(uintptr_t) + 15) & ~(size_t)15;
  debug_on = true;
}

/* ---- patterns ---- */

static inline uint8_t pat_byte(uint32_t pat, uintptr_t a) {
  return (uint8_t)(pat >> ((a & 3) * 8));
}

/* Fills [p, p+n) with pat, each byte the one of its address's place in a 32-bit word. */
static void pat_fill(uintptr_t p, size_t n, uint32_t pat) {
  uintptr_t end = p + n;
  while (p < end && (p & 7))
    *(uint8_t *)p = pat_byte(pat, p), p++;
  uint64_t w = (uint64_t)pat << 32 | pat;
  for (; p + 8 <= end; p += 8)
    *(uint64_t *)p = w;
  while (p < end)
    *(uint8_t *)p = pat_byte(pat, p), p++;
}

/* The offset of the first byte of [p, p+n) that does not hold pat, or n. */
static size_t pat_check(uintptr_t p, size_t n, uint32_t pat) {
  uintptr_t a = p, end = p + n;
  while (a < end && (a & 7)) {
    if (*(uint8_t *)a != pat_byte(pat, a)) return a - p;
    a++;
  }
  uint64_t w = (uint64_t)pat << 32 | pat;
  for (; a + 8 <= end; a += 8)
    if (*(uint64_t *)a != w) break;
  for (; a < end; a++)
    if (*(uint8_t *)a != pat_byte(pat, a)) return a - p;
  return n;
}

/* ---- errors: found under the lock, reported after ---- */

typedef struct derr {
  const char *kind;
  uintptr_t addr;
  char detail[256];
  size_t dlen;
  bool has_rec;
  union {
    drec_t rec;
    unsigned char bytes[DEBUG_REC_MAX];
  } snap;
} derr_t;

typedef struct errs {
  derr_t e[DEBUG_ERRS];
  int n;
} errs_t;

static void d_str(derr_t *e, const char *s) {
  while (*s && e->dlen < sizeof e->detail - 1)
    e->detail[e->dlen++] = *s++;
  e->detail[e->dlen] = '\0';
}

static void d_dec(derr_t *e, size_t v) {
  char out[REPORT_DEC_MAX];
  report_format_dec(out, v);
  d_str(e, out);
}

static void d_hex(derr_t *e, uintptr_t v) {
  char tmp[24], out[24];
  int n = 0;
  do
    tmp[n++] = "0123456789abcdef"[v & 15];
  while ((v >>= 4) != 0);
  out[0] = '0';
  out[1] = 'x';
  for (int i = 0; i < n; i++)
    out[2 + i] = tmp[n - 1 - i];
  out[n + 2] = '\0';
  d_str(e, out);
}

/* A new error of the operation; NULL when it already has as many as it can hold. */
static derr_t *err_new(errs_t *es, const char *kind, uintptr_t addr, const drec_t *r) {
  if (es->n >= DEBUG_ERRS) return NULL;
  derr_t *e = &es->e[es->n++];
  e->kind = kind;
  e->addr = addr;
  e->dlen = 0;
  e->detail[0] = '\0';
  e->has_rec = r != NULL;
  if (r) memcpy(e->snap.bytes, r, rec_size);
  return e;
}

static void report_rec_stacks(report_buf_t *b, const drec_t *r) {
  if (dopt.depth == 0) {
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
    if (dopt.audit) {
      report_str(b, " at:\n");
      report_frames(b, r->stack + dopt.depth, r->free_depth);
    } else {
      report_str(b, " (MAGPIE_DEBUG=audit records where)\n");
    }
  }
}

static void report_block(report_buf_t *b, const drec_t *r) {
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

/* Reports one error; aborts unless `continue`. */
static void debug_report(const derr_t *e) {
  lock_acquire(&report_lock);
  report_buf_t b = {.len = 0};
  report_str(&b, "magpie: ");
  report_str(&b, e->kind);
  report_str(&b, " of address ");
  report_hex(&b, e->addr);
  if (e->dlen) {
    report_str(&b, ": ");
    report_str(&b, e->detail);
  }
  report_str(&b, "\n");
  if (e->has_rec) report_block(&b, &e->snap.rec);
  report_current_stack(&b);
  if (e->has_rec) report_rec_stacks(&b, &e->snap.rec);
  report_flush(&b);
  lock_release(&report_lock);
  __atomic_add_fetch(&debug_errors, 1, __ATOMIC_RELAXED);
  if (!dopt.cont) abort();
}

static void report_all(const errs_t *es) {
  for (int i = 0; i < es->n; i++)
    debug_report(&es->e[i]);
}

/* ---- records (debug_lock held) ---- */

static drec_t *rec_new(void) {
  drec_t *r = pool_free;
  if (r) {
    pool_free = r->hnext;
  } else {
    if ((size_t)(pool_end - pool_bump) < rec_size) {
      char *mem = os_map(DEBUG_POOL_CHUNK);
      if (!mem) return NULL;
      pool_bump = mem;
      pool_end = mem + DEBUG_POOL_CHUNK;
    }
    r = (drec_t *)pool_bump;
    pool_bump += rec_size;
  }
  memset(r, 0, rec_size);
  debug_records++;
  return r;
}

static void rec_free(drec_t *r) {
  r->hnext = pool_free;
  pool_free = r;
  debug_records--;
}

static size_t hash_of(uintptr_t a) {
  return (size_t)(((a >> 4) * 0x9e3779b97f4a7c15ull) >> 20) & debug_hash_mask;
}

static bool hash_ready(void) {
  if (debug_hash && debug_records < 2 * (debug_hash_mask + 1)) return true;
  size_t n = debug_hash ? 2 * (debug_hash_mask + 1) : DEBUG_HASH_MIN;
  drec_t **t = os_map(n * sizeof *t);
  if (!t) return debug_hash != NULL; /* keep the old table: longer chains, still correct */
  drec_t **old = debug_hash;
  size_t old_n = old ? debug_hash_mask + 1 : 0;
  debug_hash = t;
  debug_hash_mask = n - 1;
  for (size_t i = 0; i < old_n; i++)
    for (drec_t *r = old[i], *next; r; r = next) {
      next = r->hnext;
      size_t h = hash_of(r->user);
      r->hnext = t[h];
      t[h] = r;
    }
  if (old) os_unmap(old, old_n * sizeof *old);
  return true;
}

static drec_t *hash_find(uintptr_t user) {
  if (!debug_hash) return NULL;
  for (drec_t *r = debug_hash[hash_of(user)]; r; r = r->hnext)
    if (r->user == user) return r;
  return NULL;
}

static void hash_remove(drec_t *r) {
  drec_t **pp = &debug_hash[hash_of(r->user)];
  while (*pp != r)
    pp = &(*pp)->hnext;
  *pp = r->hnext;
}

/* FIFO lists: quarantine and graveyard. */
static void fifo_push(drec_t **head, drec_t **tail, drec_t *r) {
  r->next = NULL;
  r->prev = *tail;
  if (*tail)
    (*tail)->next = r;
  else
    *head = r;
  *tail = r;
}

static void fifo_unlink(drec_t **head, drec_t **tail, drec_t *r) {
  if (r->prev)
    r->prev->next = r->next;
  else
    *head = r->next;
  if (r->next)
    r->next->prev = r->prev;
  else
    *tail = r->prev;
}

/* The record of a block containing address a (the slow search of an error path): a live
   block first, then a freed one. */
static drec_t *find_containing(uintptr_t a) {
  drec_t *best = NULL;
  if (!debug_hash) return NULL;
  for (size_t i = 0; i <= debug_hash_mask; i++)
    for (drec_t *r = debug_hash[i]; r; r = r->hnext) {
      size_t len = r->size ? r->size : 1;
      if (a >= r->user - r->front && a < r->user + len + r->tail &&
          (!best || r->state < best->state))
        best = r;
    }
  return best;
}

/* ---- chunks: the memory under a block, from the layers below (no debug_lock) ---- */

typedef struct chunk {
  uintptr_t base;
  size_t size;
  uint8_t source, cls;
} chunk_t;

static void chunk_put(const chunk_t *c) {
  void *p = (void *)c->base;
  if (c->source == SRC_SLAB)
    slab_free(&malloc_caches[c->cls], &p, 1);
  else if (c->source == SRC_LARGE)
    large_free(p, pagemap_get(c->base));
  else
    os_unmap(p, c->size);
}

/* Takes a chunk for size bytes aligned to align with front bytes before; sets *user. */
static bool chunk_get(size_t size, size_t align, size_t front, bool guard, chunk_t *c,
                      uintptr_t *user) {
  size_t tail = dopt.redzone ? DEBUG_TAIL_MIN : 0, a = align < 16 ? 16 : align;
  if (guard) {
    size_t body, map_align = a > OS_PAGE ? a : OS_PAGE;
    if (a <= OS_PAGE)
      body = (front + size + a - 1 + OS_PAGE - 1) & ~(OS_PAGE - 1);
    else
      body = (size + a - 1) & ~(a - 1);
    if (body == 0) body = OS_PAGE;
    void *m = os_map_aligned(body + OS_PAGE, map_align);
    if (!m) return false;
    if (!os_protect((char *)m + body, OS_PAGE, false)) {
      os_unmap(m, body + OS_PAGE);
      return false;
    }
    c->base = (uintptr_t)m;
    c->size = body + OS_PAGE;
    c->source = SRC_GUARD;
    *user = (c->base + body - size) & ~(uintptr_t)(a - 1);
    return true;
  }
  size_t need = front + size + tail;
  if (need < a) need = a;
  if (need == 0) need = 1;
  if (need <= SC_SMALL_MAX && a <= SC_SMALL_MAX) {
    unsigned cls = sc_of(need);
    while (sc_info[cls].size & (a - 1))
      cls++; /* the 256 KiB class is a multiple of any alignment up to it */
    void *obj;
    if (slab_alloc(&malloc_caches[cls], &obj, 1, false) != 1) return false;
    c->base = (uintptr_t)obj;
    c->size = sc_info[cls].size;
    c->source = SRC_SLAB;
    c->cls = (uint8_t)cls;
  } else {
    void *p = large_alloc(need, a > OS_PAGE ? a : OS_PAGE, false);
    if (!p) return false;
    c->base = (uintptr_t)p;
    c->size = large_size(pagemap_get((uintptr_t)p));
    c->source = SRC_LARGE;
  }
  *user = c->base + front;
  return true;
}

/* ---- redzones and patterns of one record (debug_lock held) ---- */

/* Checks the redzones; on damage records an error, then repairs them (reported once). */
static void check_redzones(drec_t *r, errs_t *es, const char *when) {
  if (r->front) {
    size_t bad = pat_check(r->user - r->front, r->front, DEBUG_PAT_REDZONE);
    if (bad != r->front) {
      derr_t *e = err_new(es, "buffer underrun", r->user, r);
      if (e) {
        d_str(e, "the redzone before the block was overwritten, ");
        d_dec(e, r->front - bad);
        d_str(e, " bytes before its start");
        d_str(e, when);
      }
      pat_fill(r->user - r->front, r->front, DEBUG_PAT_REDZONE);
    }
  }
  if (r->tail) {
    size_t bad = pat_check(r->user + r->size, r->tail, DEBUG_PAT_REDZONE);
    if (bad != r->tail) {
      derr_t *e = err_new(es, "buffer overrun", r->user, r);
      if (e) {
        d_str(e, "byte ");
        d_dec(e, r->size + bad);
        d_str(e, " of a ");
        d_dec(e, r->size);
        d_str(e, "-byte block was written (");
        d_dec(e, bad + 1);
        d_str(e, " past its end, at ");
        d_hex(e, r->user + r->size + bad);
        d_str(e, ")");
        d_str(e, when);
      }
      pat_fill(r->user + r->size, r->tail, DEBUG_PAT_REDZONE);
    }
  }
}

/* A quarantined block must still hold the freed pattern. */
static void check_freed(drec_t *r, errs_t *es, const char *when) {
  if (r->source == SRC_GUARD) return; /* inaccessible: a write would have faulted */
  if (dopt.patterns) {
    size_t bad = pat_check(r->user, r->size, DEBUG_PAT_FREED);
    if (bad != r->size) {
      derr_t *e = err_new(es, "write after free", r->user, r);
      if (e) {
        d_str(e, "byte ");
        d_dec(e, bad);
        d_str(e, " (at ");
        d_hex(e, r->user + bad);
        d_str(e, ") of the freed ");
        d_dec(e, r->size);
        d_str(e, "-byte block no longer holds the freed pattern");
        d_str(e, when);
      }
      pat_fill(r->user, r->size, DEBUG_PAT_FREED);
    }
  }
  check_redzones(r, es, when);
}

/* ---- freeing (debug_lock held) ---- */

typedef struct batch {
  chunk_t c[DEBUG_BATCH];
  int n;
} batch_t;

static void batch_put(batch_t *b) {
  for (int i = 0; i < b->n; i++)
    chunk_put(&b->c[i]);
  b->n = 0;
}

/* A freed record's memory goes back (after the lock) and the record to the graveyard. */
static void to_grave(drec_t *r, batch_t *b) {
  r->state = REC_DEAD;
  b->c[b->n++] = (chunk_t){r->chunk, r->chunk_size, r->source, r->cls};
  fifo_push(&g_head, &g_tail, r);
  if (++g_count > DEBUG_GRAVE_MAX) {
    drec_t *old = g_head;
    fifo_unlink(&g_head, &g_tail, old);
    g_count--;
    hash_remove(old);
    rec_free(old);
  }
}

static size_t q_cost(const drec_t *r) {
  return r->chunk_size + rec_size;
}

/* Evicts the oldest quarantined blocks while the quarantine is over its bound. */
static void q_trim(batch_t *b, errs_t *es) {
  while (q_bytes > dopt.quarantine && q_head && b->n < DEBUG_BATCH) {
    drec_t *r = q_head;
    fifo_unlink(&q_head, &q_tail, r);
    q_bytes -= q_cost(r);
    check_freed(r, es, ", found when the block left quarantine");
    to_grave(r, b);
  }
}

static void rec_release(drec_t *r, const uintptr_t *stack, int depth, batch_t *b, errs_t *es) {
  debug_live--;
  debug_frees++;
  debug_live_bytes -= r->size;
  r->free_tid = debug_tid();
  if (dopt.audit) {
    memcpy(r->stack + dopt.depth, stack, (size_t)depth * sizeof *stack);
    r->free_depth = (uint8_t)depth;
  }
  bool keep = (dopt.patterns || r->source == SRC_GUARD) && q_cost(r) <= dopt.quarantine;
  if (!keep) {
    to_grave(r, b);
    return;
  }
  if (r->source == SRC_GUARD)
    os_protect((void *)r->chunk, r->chunk_size - OS_PAGE, false);
  else
    pat_fill(r->user, r->size, DEBUG_PAT_FREED);
  r->state = REC_QUARANTINE;
  fifo_push(&q_head, &q_tail, r);
  q_bytes += q_cost(r);
  q_trim(b, es);
}

/* Counts an operation; true when it is time for a periodic verify. */
static bool count_op(void) {
  return dopt.verify_every && ++debug_ops % dopt.verify_every == 0;
}

/* Captures the calling code's stack unless this thread is already capturing. */
static int capture(uintptr_t *stack) {
  if (dopt.depth == 0 || debug_busy) return 0;
  debug_busy = 1;
  int n = report_capture(stack, (int)dopt.depth);
  debug_busy = 0;
  return n;
}

/* ---- the contract ---- */

void debug_totals(uint64_t *allocs, uint64_t *frees, uint64_t *live_bytes) {
  lock_acquire(&debug_lock);
  *allocs = debug_allocs;
  *frees = debug_frees;
  *live_bytes = debug_live_bytes;
  lock_release(&debug_lock);
}

void *debug_alloc(size_t size, size_t align, int kind, bool zero) {
  uintptr_t stack[REPORT_DEPTH_MAX];
  if (size > DEBUG_SIZE_MAX || align > DEBUG_SIZE_MAX) {
    errno = ENOMEM;
    return NULL;
  }
  int depth = capture(stack);
  if (dopt.leaks_unreachable) mag_thread_register(); /* its stack is a root (debug_leaks.c) */
  bool guard = dopt.guards && (dopt.guards_all || size > DEBUG_GUARD_MIN);
  size_t front = dopt.redzone && align <= 16 ? DEBUG_FRONT : 0;
  chunk_t c;
  uintptr_t user;
  if (!chunk_get(size, align, front, guard, &c, &user)) {
    errno = ENOMEM;
    return NULL;
  }
  uintptr_t end = c.source == SRC_GUARD ? c.base + c.size - OS_PAGE : c.base + c.size;
  size_t tail = 0;
  if (dopt.redzone) {
    tail = end - (user + size);
    if (tail > DEBUG_FILL_MAX) tail = DEBUG_FILL_MAX;
    pat_fill(user - front, front, DEBUG_PAT_REDZONE);
    pat_fill(user + size, tail, DEBUG_PAT_REDZONE);
  }
  if (zero) {
    if (c.source != SRC_GUARD) memset((void *)user, 0, size); /* fresh mappings are zero */
  } else if (dopt.patterns) {
    pat_fill(user, size, DEBUG_PAT_UNINIT);
  }
  lock_acquire(&debug_lock);
  drec_t *old = hash_ready() ? hash_find(user) : NULL;
  drec_t *r = debug_hash ? rec_new() : NULL;
  if (!r) {
    lock_release(&debug_lock);
    chunk_put(&c);
    errno = ENOMEM;
    return NULL;
  }
  if (old) { /* a released block's record: the address is in use again */
    if (old->state != REC_DEAD) {
      lock_release(&debug_lock);
      report_fatal("debug: a chunk was handed out twice", (void *)user, old->state);
    }
    fifo_unlink(&g_head, &g_tail, old);
    g_count--;
    hash_remove(old);
    rec_free(old);
  }
  r->user = user;
  r->size = size;
  r->chunk = c.base;
  r->chunk_size = c.size;
  r->source = c.source;
  r->cls = c.cls;
  r->align = (uint32_t)align;
  r->front = (uint16_t)front;
  r->tail = (uint32_t)tail;
  r->kind = (uint8_t)kind;
  r->state = REC_LIVE;
  r->alloc_tid = debug_tid();
  r->alloc_depth = (uint8_t)depth;
  memcpy(r->stack, stack, (size_t)depth * sizeof *stack);
  size_t h = hash_of(user);
  r->hnext = debug_hash[h];
  debug_hash[h] = r;
  debug_live++;
  debug_allocs++;
  debug_live_bytes += size;
  bool verify = count_op();
  lock_release(&debug_lock);
  if (verify) magpie_verify();
  return (void *)user;
}

/* Names what was wrong with a pointer that is not a live block (debug_lock held). */
static void classify_bad(uintptr_t a, bool freeing, const char *op, errs_t *es) {
  drec_t *r = hash_find(a);
  derr_t *e;
  if (r) { /* a freed block */
    e = err_new(es, freeing ? "double free" : "use after free", a, r);
    d_str(e, op);
    d_str(e, " of a block already freed");
    return;
  }
  r = find_containing(a);
  if (r) {
    e = err_new(es, freeing ? "interior free" : "invalid pointer", a, r);
    d_str(e, op);
    d_str(e, " of an interior pointer, ");
    if (a < r->user) {
      d_dec(e, r->user - a);
      d_str(e, " bytes before");
    } else {
      d_dec(e, a - r->user);
      d_str(e, " bytes into");
    }
    d_str(e, r->state == REC_LIVE ? " a live " : " a freed ");
    d_dec(e, r->size);
    d_str(e, "-byte block at ");
    d_hex(e, r->user);
    return;
  }
  e = err_new(es, freeing ? "foreign free" : "invalid pointer", a, NULL);
  d_str(e, op);
  d_str(e, " of a foreign pointer: not a block magpie handed out (never allocated here, or "
           "freed long ago)");
}

static const char *op_name(size_t size, size_t align, int kind) {
  if (kind == DEBUG_NEW) return "operator delete";
  return align ? "free_aligned_sized" : size ? "free_sized" : "free";
}

/* The misuse checks of a free of live block r (debug_lock held). */
static void check_free(drec_t *r, size_t size, size_t align, int kind, const char *op, errs_t *es) {
  derr_t *e;
  if (r->kind != kind) {
    if ((e = err_new(es, "mismatched deallocation", r->user, r))) {
      d_str(e, "a block from ");
      d_str(e, r->kind == DEBUG_NEW ? "operator new" : "malloc");
      d_str(e, " released by ");
      d_str(e, op);
    }
  } else if (kind == DEBUG_NEW
                 ? align != r->align
                 : (align && align != r->align) || (size && !align && r->align > 16)) {
    if ((e = err_new(es, "alignment mismatch", r->user, r))) {
      d_str(e, op);
      if (align) {
        d_str(e, " given alignment ");
        d_dec(e, align);
      } else {
        d_str(e, " without an alignment");
      }
      d_str(e, ", the block was allocated ");
      if (r->align) {
        d_str(e, "with alignment ");
        d_dec(e, r->align);
      } else {
        d_str(e, "without one");
      }
    }
  }
  if (size && size != r->size && (e = err_new(es, "size mismatch", r->user, r))) {
    d_str(e, op);
    d_str(e, " given size ");
    d_dec(e, size);
    d_str(e, ", the block was allocated with size ");
    d_dec(e, r->size);
  }
  check_redzones(r, es, ", found when it was freed");
}

static void free_internal(void *p, size_t size, size_t align, int kind, const char *op) {
  uintptr_t stack[REPORT_DEPTH_MAX];
  int depth = dopt.audit ? capture(stack) : 0;
  errs_t es;
  es.n = 0;
  batch_t b;
  b.n = 0;
  lock_acquire(&debug_lock);
  drec_t *r = hash_find((uintptr_t)p);
  if (!r || r->state != REC_LIVE) {
    classify_bad((uintptr_t)p, true, op, &es);
  } else {
    check_free(r, size, align, kind, op, &es);
    rec_release(r, stack, depth, &b, &es);
  }
  bool verify = count_op();
  lock_release(&debug_lock);
  batch_put(&b);
  report_all(&es);
  if (verify) magpie_verify();
}

void debug_free(void *p, size_t size, size_t align, int kind) {
  if (!p) return;
  free_internal(p, size, align, kind, op_name(size, align, kind));
}

/* The live block at p, its size in *size; reports and returns false otherwise. */
static bool live_block(void *p, const char *op, size_t *size, int *kind) {
  errs_t es;
  es.n = 0;
  lock_acquire(&debug_lock);
  drec_t *r = hash_find((uintptr_t)p);
  bool live = r && r->state == REC_LIVE;
  if (live) {
    *size = r->size;
    *kind = r->kind;
  } else {
    classify_bad((uintptr_t)p, false, op, &es);
  }
  lock_release(&debug_lock);
  report_all(&es);
  return live;
}

void *debug_realloc(void *p, size_t size) {
  if (!p) return debug_alloc(size, 0, DEBUG_MALLOC, false);
  size_t old;
  int kind;
  if (!live_block(p, "realloc", &old, &kind)) {
    errno = EINVAL; /* only reached with `continue`: the block is left alone */
    return NULL;
  }
  void *q = debug_alloc(size, 0, DEBUG_MALLOC, false);
  if (!q) return NULL;
  memcpy(q, p, old < size ? old : size);
  free_internal(p, 0, 0, DEBUG_MALLOC, "realloc");
  return q;
}

size_t debug_usable_size(void *p) {
  size_t size = 0;
  int kind;
  if (!p) return 0;
  return live_block(p, "malloc_usable_size", &size, &kind) ? size : 0;
}

/* ---- verify ---- */

static derr_t verify_errs[DEBUG_VERIFY_ERRS]; /* verify_lock */

/* Checks every block's redzones and every quarantined block's pattern; returns the errors. */
static int debug_verify_blocks(void) {
  errs_t es;
  size_t found = 0, shown = 0;
  lock_acquire(&verify_lock);
  lock_acquire(&debug_lock);
  for (size_t i = 0; debug_hash && i <= debug_hash_mask; i++)
    for (drec_t *r = debug_hash[i]; r; r = r->hnext) {
      if (r->state == REC_DEAD) continue;
      es.n = 0;
      if (r->state == REC_LIVE)
        check_redzones(r, &es, ", found by magpie_verify");
      else
        check_freed(r, &es, ", found by magpie_verify");
      for (int k = 0; k < es.n; k++, found++)
        if (shown < DEBUG_VERIFY_ERRS) memcpy(&verify_errs[shown++], &es.e[k], sizeof es.e[k]);
    }
  lock_release(&debug_lock);
  for (size_t k = 0; k < shown; k++)
    debug_report(&verify_errs[k]);
  lock_release(&verify_lock);
  if (found > shown) {
    char n[24];
    size_t len = 0, v = found - shown;
    char tmp[24];
    do
      tmp[len++] = (char)('0' + v % 10);
    while ((v /= 10) != 0);
    for (size_t i = 0; i < len; i++)
      n[i] = tmp[len - 1 - i];
    n[len] = '\0';
    report_warning("magpie_verify: further damaged blocks not shown: ", n);
  }
  return (int)found;
}

MAGPIE_EXPORT int magpie_verify(void) {
  for (unsigned c = 1; c <= SC_COUNT; c++)
    slab_check(&malloc_caches[c]);
  vmem_check(&heap_arena);
  return debug_on ? debug_verify_blocks() : 0;
}

/* ---- exit and fork ---- */

void debug_at_exit(void) {
  /* The leak scan reads the stack from this frame up: below it, magpie's own dead frames
     (the verify just run) still hold block addresses. */
  uintptr_t frame = (uintptr_t)__builtin_frame_address(0);
  if (dopt.redzone || dopt.patterns) debug_verify_blocks();
  if (dopt.leaks) debug_leaks_report(frame);
}

void debug_fork_prepare(void) {
  lock_acquire(&verify_lock);
  lock_acquire(&report_lock);
  lock_acquire(&debug_lock);
}

void debug_fork_parent(void) {
  lock_release(&debug_lock);
  lock_release(&report_lock);
  lock_release(&verify_lock);
}

void debug_fork_child(void) {
  lock_init(&debug_lock);
  lock_init(&report_lock);
  lock_init(&verify_lock);
  debug_tid_cache = 0;
}
