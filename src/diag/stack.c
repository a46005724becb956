/*
 * stack: capturing the calling code's stack, for a report now or an audit trail kept for later.
 *
 * Theory
 *   1. Stacks are captured inside malloc and free (debug mode's audit trail, sampled blocks)
 *      and inside error reports, so capturing allocates nothing and takes no magpie lock: the
 *      addresses go to the caller's array. libgcc's unwinder (_Unwind_Backtrace) reads
 *      .eh_frame, which every x86-64 object has, so the program needs no frame pointers.
 *   2. The leading frames inside magpie's own shared object are left out, so the first frame
 *      is the caller's: magpie's address range is looked up once with dl_iterate_phdr. When
 *      magpie is linked into the executable there is no range to skip, and when every frame is
 *      magpie's the whole stack is kept.
 *   3. Capturing is cheap and symbolising slow, so they are apart: report_capture keeps bare
 *      addresses, report_frames (symbolize.c) turns them into text only when a report is made.
 */
#define _GNU_SOURCE
#include "stack.h"
#include "symbolize.h"

#include <link.h>
#include <unwind.h>

#define STACK_REPORT_FRAMES 24 /* deeper stacks rarely help find the culprit */

typedef struct trace {
  uintptr_t *ip;
  int n, max;
} trace_t;

static _Unwind_Reason_Code trace_step(struct _Unwind_Context *ctx, void *arg) {
  trace_t *t = arg;
  if (t->n >= t->max) return _URC_END_OF_STACK;
  uintptr_t ip = _Unwind_GetIP(ctx);
  if (ip == 0) return _URC_END_OF_STACK;
  t->ip[t->n++] = ip;
  return _URC_NO_REASON;
}

/* magpie's own address range, when magpie is a shared object apart from the program. */
static uintptr_t self_lo, self_hi;
static int self_known; /* atomic: 0 not yet looked up, 1 known */

static int self_range_step(struct dl_phdr_info *info, size_t size, void *arg) {
  (void)size;
  uintptr_t target = (uintptr_t)arg, lo = UINTPTR_MAX, hi = 0;
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    if (ph->p_type != PT_LOAD) continue;
    uintptr_t a = info->dlpi_addr + ph->p_vaddr;
    if (a < lo) lo = a;
    if (a + ph->p_memsz > hi) hi = a + ph->p_memsz;
  }
  if (target < lo || target >= hi) return 0;
  if (info->dlpi_name && info->dlpi_name[0]) { /* not the executable: skip these frames */
    self_lo = lo;
    self_hi = hi;
  }
  return 1;
}

static void self_range(void) {
  if (__atomic_load_n(&self_known, __ATOMIC_ACQUIRE)) return;
  dl_iterate_phdr(self_range_step, (void *)(uintptr_t)self_range);
  __atomic_store_n(&self_known, 1, __ATOMIC_RELEASE);
}

int report_capture(uintptr_t *ips, int max) {
  uintptr_t raw[REPORT_DEPTH_MAX + 16];
  if (max > REPORT_DEPTH_MAX) max = REPORT_DEPTH_MAX;
  trace_t t = {raw, 0, max + 16};
  self_range();
  _Unwind_Backtrace(trace_step, &t);
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
