/*
 * debug: MAGPIE_DEBUG mode, after libumem's UMEM_DEBUG: the entry points of debug.h. debug.h is
 * the contract with the front layer, debug_impl.h maps the other files of debug mode, and
 * docs/debug.md is the user's guide.
 *
 * Theory
 *   1. Normal mode pays nothing: nothing here runs unless debug_on, which only the front's slow
 *      paths test. debug_init turns it on before the first block is served.
 *   2. An allocation takes its chunk (debug_chunks.c) and lays its patterns before taking
 *      debug_lock, then records the block under it (debug_records.c). A free checks the block
 *      and retires its record under the lock, and gives chunks back and reports errors
 *      (debug_report.c) after it. Stacks are captured before the lock, too.
 *   3. The misuse checks are made here, on every free and realloc: double, interior and foreign
 *      frees, mismatched allocation and deallocation kinds, sizes and alignments.
 *   4. Locking: debug_verify_lock, debug_report_lock and debug_lock are the three locks of debug
 *      mode; the fork handlers below take them in the lock order written in src/front/fork.c.
 *      Every operation here takes debug_lock once, and under it calls neither core (chunks)
 *      nor the unwinder and the report writer.
 */
#define _GNU_SOURCE
#include "debug.h"
#include "debug_impl.h"
#include "mag.h"
#include "os.h"

#include <errno.h>
#include <string.h>

#define DEBUG_FRONT 16                     /* front redzone: one default alignment unit */
#define DEBUG_FILL_MAX ((size_t)64 << 10)  /* redzone bytes patterned at most (huge alignments) */
#define DEBUG_GUARD_MIN ((size_t)32 << 10) /* guards: blocks above this get a guard page */
#define DEBUG_SIZE_MAX ((size_t)1 << 46)   /* larger requests can never be mapped */

bool debug_on;

static size_t debug_operations; /* counted for verify=N (debug_lock) */

static __thread uint32_t thread_id_cache __attribute__((tls_model("initial-exec")));
static __thread int capturing_stack __attribute__((tls_model("initial-exec")));

static uint32_t debug_thread_id(void) {
  if (!thread_id_cache) thread_id_cache = os_thread_id();
  return thread_id_cache;
}

void debug_init(const char *flags) {
  if (!debug_flags_parse(flags)) return;
  if (debug_flags.leaks_unreachable) {
    os_track_start(); /* the scan must tell magpie's mappings from the program's */
    debug_leaks_init();
  }
  records_init();
  debug_on = true;
}

/* Counts an operation (debug_lock held); true when it is time for a periodic verify. */
static bool count_operation(void) {
  return debug_flags.verify_every && ++debug_operations % debug_flags.verify_every == 0;
}

/* Captures the calling code's stack unless this thread is already capturing. */
static int capture_stack(uintptr_t *stack) {
  if (debug_flags.depth == 0 || capturing_stack) return 0;
  capturing_stack = 1;
  int n = report_capture(stack, (int)debug_flags.depth);
  capturing_stack = 0;
  return n;
}

/* With `leaks`, a thread that allocates or frees enters the registry, whose stacks are roots
   (debug_leaks.c), and its exit will be recorded: the stack it leaves is none. */
static void register_thread(void) {
  if (!debug_flags.leaks_unreachable) return;
  mag_thread_register();
  debug_leaks_thread_start();
}

/* ---- allocation ---- */

void *debug_alloc(size_t size, size_t align, int kind, bool zero) {
  uintptr_t stack[REPORT_DEPTH_MAX];
  if (size > DEBUG_SIZE_MAX || align > DEBUG_SIZE_MAX) {
    errno = ENOMEM;
    return NULL;
  }
  int depth = capture_stack(stack);
  register_thread();
  bool guard = debug_flags.guards && (debug_flags.guards_all || size > DEBUG_GUARD_MIN);
  size_t front = debug_flags.redzone && align <= 16 ? DEBUG_FRONT : 0;
  chunk_t c;
  uintptr_t user;
  if (!chunk_get(size, align, front, guard, &c, &user)) {
    errno = ENOMEM;
    return NULL;
  }
  uintptr_t end = c.source == SRC_GUARD ? c.base + c.size - OS_PAGE : c.base + c.size;
  size_t tail = 0;
  if (debug_flags.redzone) {
    tail = end - (user + size);
    if (tail > DEBUG_FILL_MAX) tail = DEBUG_FILL_MAX;
    pattern_fill(user - front, front, DEBUG_PAT_REDZONE);
    pattern_fill(user + size, tail, DEBUG_PAT_REDZONE);
  }
  if (zero) {
    if (c.source != SRC_GUARD) memset((void *)user, 0, size); /* fresh mappings are zero */
  } else if (debug_flags.patterns) {
    pattern_fill(user, size, DEBUG_PAT_UNINIT);
  }
  lock_acquire(&debug_lock);
  block_record_t *r = record_new_at(user);
  if (!r) {
    lock_release(&debug_lock);
    chunk_put(&c);
    errno = ENOMEM;
    return NULL;
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
  r->alloc_tid = debug_thread_id();
  r->alloc_depth = (uint8_t)depth;
  memcpy(r->stack, stack, (size_t)depth * sizeof *stack);
  record_insert(r);
  bool verify = count_operation();
  lock_release(&debug_lock);
  if (verify) magpie_verify();
  return (void *)user;
}

/* ---- the misuse checks (debug_lock held) ---- */

/* Names what was wrong with a pointer that is not a live block. */
static void name_bad_pointer(uintptr_t a, bool freeing, const char *op, pending_errors_t *es) {
  block_record_t *r = record_find(a);
  pending_error_t *e;
  if (r) { /* a freed block */
    e = pending_error_add(es, freeing ? "double free" : "use after free", a, r);
    detail_str(e, op);
    detail_str(e, " of a block already freed");
    return;
  }
  r = record_containing(a);
  if (r) {
    e = pending_error_add(es, freeing ? "interior free" : "invalid pointer", a, r);
    detail_str(e, op);
    detail_str(e, " of an interior pointer, ");
    if (a < r->user) {
      detail_dec(e, r->user - a);
      detail_str(e, " bytes before");
    } else {
      detail_dec(e, a - r->user);
      detail_str(e, " bytes into");
    }
    detail_str(e, r->state == REC_LIVE ? " a live " : " a freed ");
    detail_dec(e, r->size);
    detail_str(e, "-byte block at ");
    detail_hex(e, r->user);
    return;
  }
  e = pending_error_add(es, freeing ? "foreign free" : "invalid pointer", a, NULL);
  detail_str(e, op);
  detail_str(e, " of a foreign pointer: not a block magpie handed out (never allocated here, or "
                "freed long ago)");
}

static const char *free_name(size_t size, size_t align, int kind) {
  if (kind == DEBUG_NEW) return "operator delete";
  return align ? "free_aligned_sized" : size ? "free_sized" : "free";
}

/* The misuse checks of a free of live block r. */
static void check_free_of_live(block_record_t *r, size_t size, size_t align, int kind,
                               const char *op, pending_errors_t *es) {
  pending_error_t *e;
  if (r->kind != kind) {
    if ((e = pending_error_add(es, "mismatched deallocation", r->user, r))) {
      detail_str(e, "a block from ");
      detail_str(e, r->kind == DEBUG_NEW ? "operator new" : "malloc");
      detail_str(e, " released by ");
      detail_str(e, op);
    }
  } else if (kind == DEBUG_NEW
                 ? align != r->align
                 : (align && align != r->align) || (size && !align && r->align > 16)) {
    if ((e = pending_error_add(es, "alignment mismatch", r->user, r))) {
      detail_str(e, op);
      if (align) {
        detail_str(e, " given alignment ");
        detail_dec(e, align);
      } else {
        detail_str(e, " without an alignment");
      }
      detail_str(e, ", the block was allocated ");
      if (r->align) {
        detail_str(e, "with alignment ");
        detail_dec(e, r->align);
      } else {
        detail_str(e, "without one");
      }
    }
  }
  if (size && size != r->size && (e = pending_error_add(es, "size mismatch", r->user, r))) {
    detail_str(e, op);
    detail_str(e, " given size ");
    detail_dec(e, size);
    detail_str(e, ", the block was allocated with size ");
    detail_dec(e, r->size);
  }
  check_redzones(r, es, ", found when it was freed");
}

static void free_internal(void *p, size_t size, size_t align, int kind, const char *op) {
  uintptr_t stack[REPORT_DEPTH_MAX];
  int depth = debug_flags.audit ? capture_stack(stack) : 0;
  pending_errors_t es;
  es.count = 0;
  chunk_batch_t b;
  b.count = 0;
  lock_acquire(&debug_lock);
  block_record_t *r = record_find((uintptr_t)p);
  if (!r || r->state != REC_LIVE) {
    name_bad_pointer((uintptr_t)p, true, op, &es);
  } else {
    check_free_of_live(r, size, align, kind, op, &es);
    r->free_tid = debug_thread_id();
    if (debug_flags.audit) {
      memcpy(r->stack + debug_flags.depth, stack, (size_t)depth * sizeof *stack);
      r->free_depth = (uint8_t)depth;
    }
    record_retire(r, &b, &es);
  }
  bool verify = count_operation();
  lock_release(&debug_lock);
  chunk_batch_put(&b);
  debug_report_errors(&es);
  if (verify) magpie_verify();
}

void debug_free(void *p, size_t size, size_t align, int kind) {
  if (!p) return;
  register_thread();
  free_internal(p, size, align, kind, free_name(size, align, kind));
}

/* The live block at p, its size in *size; reports and returns false otherwise. */
static bool live_block(void *p, const char *op, size_t *size, int *kind) {
  pending_errors_t es;
  es.count = 0;
  lock_acquire(&debug_lock);
  block_record_t *r = record_find((uintptr_t)p);
  bool live = r && r->state == REC_LIVE;
  if (live) {
    *size = r->size;
    *kind = r->kind;
  } else {
    name_bad_pointer((uintptr_t)p, false, op, &es);
  }
  lock_release(&debug_lock);
  debug_report_errors(&es);
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

/* ---- exit and fork ---- */

/* Whether the parent process runs this same magpie in debug mode. `leaks` reports in such a
   child all the same, as LeakSanitizer does (it lists only leaks, and says nothing when there
   are none: a program started by a shell or a build that runs under debug mode too must still
   report its leaks), unless `nochildren`. leaks=all lists every block never freed, reachable
   or not: a shell, a build or a program forking workers would print one such list per child,
   each as long as the parent's (a forked child's heap is its parent's copy), so it reports
   only in the first process unless `children`. */
static bool parent_in_debug_mode(void) {
  int parent = os_parent_pid();
  return parent > 1 && os_pid_env_has(parent, "MAGPIE_DEBUG=") &&
         os_pid_maps_object_of(parent, (uintptr_t)debug_at_exit);
}

void debug_at_exit(void) {
  /* The leak scan reads the stack from this frame up: below it, magpie's own dead frames
     (the verify just run) still hold block addresses. */
  uintptr_t frame = (uintptr_t)__builtin_frame_address(0);
  if (debug_flags.redzone || debug_flags.patterns) debug_verify_records();
  bool in_children =
      debug_flags.leaks_children || (!debug_flags.leaks_nochildren && !debug_flags.leaks_all);
  if (debug_flags.leaks && (in_children || !parent_in_debug_mode())) debug_leaks_report(frame);
}

void debug_fork_prepare(void) {
  lock_acquire(&debug_verify_lock);
  lock_acquire(&debug_report_lock);
  lock_acquire(&debug_lock);
}

void debug_fork_parent(void) {
  lock_release(&debug_lock);
  lock_release(&debug_report_lock);
  lock_release(&debug_verify_lock);
}

void debug_fork_child(void) {
  lock_init(&debug_lock);
  lock_init(&debug_report_lock);
  lock_init(&debug_verify_lock);
  thread_id_cache = 0;
}
