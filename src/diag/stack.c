/*
 * stack: capturing the calling code's stack, for a report now or an audit trail kept for later.
 *
 * Theory
 *   1. Stacks are captured inside malloc and free (debug mode's audit trail, sampled blocks)
 *      and inside error reports, so capturing allocates nothing and takes no magpie lock: the
 *      addresses go to the caller's array. libgcc's unwinder (_Unwind_Backtrace, linked into
 *      the library rather than loaded as libgcc_s: docs/decisions/static-libgcc.md) reads
 *      .eh_frame, which every x86-64 object has, so the program needs no frame pointers.
 *   2. The leading frames inside magpie are left out, so the first frame is the caller's:
 *      magpie's address range is looked up once, with dl_iterate_phdr where magpie is a shared
 *      object, and from the section magpie_text where it is linked into the program (its static
 *      libraries keep their code there: CMakeLists.txt renames .text, and the linker provides
 *      the section's bounds, in whichever module holds it). A program linked with magpie's
 *      objects some other way has no range to skip, and when every frame is magpie's the whole
 *      stack is kept.
 *      A fully static program (no dynamic section) allocates before its C library can unwind
 *      (glibc's start-up code mallocs before the unwinder can find any frame's tables, and
 *      libgcc aborts then): there a capture before the program's constructors run is empty.
 *   3. Capturing is cheap and symbolising slow, so they are apart: report_capture keeps bare
 *      addresses, report_frames (symbolize.c) turns them into text only when a report is made.
 *   4. Unwinding costs over a thousand instructions a frame (each frame's unwind table found
 *      and interpreted), and the heap profiler captures a stack per sample, mostly from a few
 *      call chains. On x86-64 a return address lies just below a canonical frame address (CFA
 *      - 8): the unwinder reports frame i's address with the CFA of the frame it called, so
 *      *(cfa[i] - 8) == ip[i]. A chain unwound once is remembered with its CFAs, keyed by
 *      report_capture's own CFA (frame 1's) and return address: the next capture from the same
 *      place re-reads the return address at each remembered CFA from frame 1 on (frame 0's is
 *      report_capture's call of the unwinder, gone by then), and if every one is the
 *      remembered address, the stack is that chain. A place keeps a few chains (ways): a
 *      program calls malloc from many sites at the same depth, and with one chain a place, two
 *      sites taking turns unwound at every capture. Only words of the calling thread's own
 *      stack, above the capturing frame, are read; anything else unwinds. The stack's top is
 *      glibc's thread pointer for a thread it started (its TCB and static TLS sit at the top of
 *      the thread's stack block, so everything from the capturing frame up to it is mapped),
 *      and the top of the mapping in /proc/self/maps otherwise (the main thread, a thread on
 *      an alternate or a bigger stack; once per thread): reading the maps in every new thread
 *      cost a program that starts many threads dearly (docs/decisions/stack-top.md). Entries
 *      are claimed with a
 *      flag, never waited for: a busy entry means unwinding, so no lock is held here.
 */
#define _GNU_SOURCE
#include "stack.h"
#include "os.h"
#include "symbolize.h"

#include <link.h>
#include <stdbool.h>
#include <string.h>
#include <unwind.h>

#define STACK_REPORT_FRAMES 24 /* deeper stacks rarely help find the culprit */

#define STACK_RAW_MAX (REPORT_DEPTH_MAX + 16) /* frames unwound: magpie's own, then max */

typedef struct trace {
  uintptr_t *ip, *cfa;
  int n, max;
} trace_t;

static _Unwind_Reason_Code trace_step(struct _Unwind_Context *ctx, void *arg) {
  trace_t *t = arg;
  if (t->n >= t->max) return _URC_END_OF_STACK;
  uintptr_t ip = _Unwind_GetIP(ctx);
  if (ip == 0) return _URC_END_OF_STACK;
  t->cfa[t->n] = _Unwind_GetCFA(ctx);
  t->ip[t->n++] = ip;
  return _URC_NO_REASON;
}

/* ---- remembered chains (theory 4) ---- */

#if defined(__x86_64__)
#define CHAIN_SETS 16 /* places (capturing frames) remembered at once; a power of two */
#define CHAIN_WAYS 4  /* chains remembered a place, replaced in turn */

typedef struct chain {
  int busy;          /* claimed by a capture (atomic exchange) */
  int n, max;        /* frames, and the max they were unwound for */
  uintptr_t key_cfa; /* report_capture's CFA, 0: empty */
  uintptr_t key_ret; /* and the address it returns to */
  uintptr_t ip[STACK_RAW_MAX], cfa[STACK_RAW_MAX];
} chain_t;

/* How far below glibc's thread pointer a capturing frame may be for the pointer to stand for
   its stack's top: a default thread stack (8 MiB) and twice over. */
#define STACK_TP_WINDOW ((uintptr_t)16 << 20)

static chain_t chains[CHAIN_SETS][CHAIN_WAYS];
static unsigned chain_turn[CHAIN_SETS];       /* the way an unwound chain replaces next (atomic) */
static __thread uintptr_t stack_lo, stack_hi; /* known to be the calling thread's stack */

/* Sets stack_lo..stack_hi to a range of the calling thread's stack that holds cfa, a frame of
   it, and everything above cfa up to the stack's top (theory 4). */
static void stack_bounds(uintptr_t cfa) {
  uintptr_t tp = (uintptr_t)__builtin_thread_pointer();
  if (tp > cfa && tp - cfa <= STACK_TP_WINDOW) {
    stack_lo = cfa, stack_hi = tp;
    return;
  }
  uintptr_t lo, hi;
  os_mappings(&cfa, 1, &lo, &hi);
  stack_lo = lo, stack_hi = hi;
}

static unsigned chain_set(uintptr_t cfa, uintptr_t ret) {
  return ((cfa >> 4) ^ (ret * 0x9e3779b97f4a7c15ull >> 40)) & (CHAIN_SETS - 1);
}

static chain_t *chain_claim(chain_t *c) {
  return __atomic_exchange_n(&c->busy, 1, __ATOMIC_ACQUIRE) ? NULL : c;
}

static void chain_release(chain_t *c) {
  __atomic_store_n(&c->busy, 0, __ATOMIC_RELEASE);
}

/* Whether c is the calling chain: from frame 1 (whose CFA is report_capture's, cfa) on, every
   remembered CFA within this thread's stack and above the last, with the remembered return
   address below it. */
static bool chain_holds(const chain_t *c, uintptr_t cfa, uintptr_t ret, int raw_max) {
  if (c->key_cfa != cfa || c->key_ret != ret || c->max != raw_max || c->n < 2) return false;
  if (cfa < stack_lo || cfa >= stack_hi) stack_bounds(cfa);
  uintptr_t below = cfa - 1;
  for (int i = 1; i < c->n; i++) {
    if (c->cfa[i] <= below || c->cfa[i] < stack_lo + 8 || c->cfa[i] > stack_hi) return false;
    if (*(const uintptr_t *)(c->cfa[i] - 8) != c->ip[i]) return false;
    below = c->cfa[i];
  }
  return true;
}
#endif

/* magpie's own address range: its shared object's, or its section's in the program. */
static uintptr_t self_lo, self_hi;
/* The bounds of the section magpie_text, which the linker provides where the program holds it
   (weak: 0 in the shared object, whose code is in .text). */
extern const char __start_magpie_text[] __attribute__((weak, visibility("hidden")));
extern const char __stop_magpie_text[] __attribute__((weak, visibility("hidden")));
static int self_known; /* atomic: 0 not yet looked up, 1 known */

/* The module's dynamic section (link.h): none (0) in a fully static program. */
#pragma weak _DYNAMIC
static int stack_started; /* the program's constructors have begun: unwinding works */

__attribute__((constructor)) static void stack_start(void) {
  __atomic_store_n(&stack_started, 1, __ATOMIC_RELAXED);
}

static void self_range(void) {
  if (__atomic_load_n(&self_known, __ATOMIC_ACQUIRE)) return;
  uintptr_t text_lo = (uintptr_t)__start_magpie_text, text_hi = (uintptr_t)__stop_magpie_text;
  if (text_lo && text_hi > text_lo) {
    self_lo = text_lo;
    self_hi = text_hi;
  } else {
    symbolize_object_t o; /* where magpie is a shared object, not part of the program */
    if (symbolize_object_of((uintptr_t)self_range, &o) && o.path[0]) {
      self_lo = o.lo;
      self_hi = o.hi;
    }
  }
  __atomic_store_n(&self_known, 1, __ATOMIC_RELEASE);
}

int report_capture(uintptr_t *ips, int max) {
  if ((uintptr_t)_DYNAMIC == 0 && !__atomic_load_n(&stack_started, __ATOMIC_RELAXED)) return 0;
  uintptr_t raw[STACK_RAW_MAX], cfa[STACK_RAW_MAX];
  if (max > REPORT_DEPTH_MAX) max = REPORT_DEPTH_MAX;
  trace_t t = {raw, cfa, 0, max + 16};
  self_range();
#if defined(__x86_64__)
  uintptr_t here = (uintptr_t)__builtin_dwarf_cfa(), ret = (uintptr_t)__builtin_return_address(0);
  unsigned set = chain_set(here, ret);
  for (int way = 0; way < CHAIN_WAYS && t.n == 0; way++) {
    chain_t *c = chain_claim(&chains[set][way]);
    if (!c) continue;
    if (chain_holds(c, here, ret, t.max)) {
      t.n = c->n;
      memcpy(raw, c->ip, (size_t)t.n * sizeof raw[0]);
    }
    chain_release(c);
  }
  if (t.n == 0) {
    _Unwind_Backtrace(trace_step, &t);
    unsigned way = __atomic_fetch_add(&chain_turn[set], 1, __ATOMIC_RELAXED) % CHAIN_WAYS;
    chain_t *c = t.n > 1 && cfa[1] == here ? chain_claim(&chains[set][way]) : NULL;
    if (c) {
      c->key_cfa = here, c->key_ret = ret, c->max = t.max, c->n = t.n;
      memcpy(c->ip, raw, (size_t)t.n * sizeof raw[0]);
      memcpy(c->cfa, cfa, (size_t)t.n * sizeof cfa[0]);
      chain_release(c);
    }
  }
#else
  _Unwind_Backtrace(trace_step, &t);
#endif
  int first = 0;
  while (first < t.n && raw[first] - 1 >= self_lo && raw[first] - 1 < self_hi)
    first++;
  if (first == t.n) first = 0; /* nothing outside magpie: show everything */
  int n = 0;
  for (int i = first; i < t.n && n < max; i++)
    ips[n++] = raw[i];
  return n;
}

void report_current_stack(report_buf_t *b) {
  uintptr_t ips[STACK_REPORT_FRAMES];
  int n = report_capture(ips, STACK_REPORT_FRAMES);
  report_str(b, "  stack of the call:\n");
  report_frames(b, ips, n);
}
