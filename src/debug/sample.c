/*
 * sample: sampled guard allocations, in production mode (after GWP-ASan).
 *
 * Theory
 *   1. With MAGPIE_OPTIONS=sample=N (off by default), about one small allocation in N is served
 *      from a pool of SAMPLE_SLOTS slots instead of a slab. Each slot is one page between two
 *      inaccessible pages; the block ends at the end of its page (rounded up to 16 bytes for
 *      alignment), so a write past it faults at the faulting instruction. The few bytes of
 *      rounding are filled with a pattern and checked when the block is freed.
 *   2. Freed, a slot's page becomes inaccessible, so a use after free faults too. Slots are
 *      reused least recently freed first, which keeps that window as long as the pool allows.
 *   3. A SIGSEGV handler, installed when the pool is made, reports a fault inside the pool -
 *      overflow, underflow or use after free - with the block, its allocation stack and (for a
 *      use after free) its free stack, then aborts. Any other SIGSEGV goes to the handler the
 *      program had, as if magpie were not there: a fault comes again when the instruction runs
 *      again, a signal sent (kill, raise: a crash handler passing a fault on) is sent again,
 *      since returning from it would let the program go on.
 *   4. The decision costs the fast path nothing: it is taken in malloc's slow path, which runs
 *      once per magazine miss; each miss charges the thread's countdown with the magazine size
 *      (the allocations it stands for), so the rate is "about one in N". A thread that never
 *      misses (alternating malloc/free of one size) is never sampled.
 *   5. free of a sampled block comes to the slow path (page-map tag PM_TAG_SAMPLE): it must be
 *      the block's start and not already freed (reported otherwise, with both stacks).
 *   Locking: sample_lock protects the slots and the free list. The signal handler reads a
 *   slot without it: the fault stopped the thread that would change it, or the slot is freed.
 *   Stacks are captured before the lock is taken: the unwinder may take the dynamic loader's
 *   lock, and a thread in dlopen holds that while it allocates. Under sample_lock only the
 *   page map and the kernel are called (fork.c's lock order).
 */
#define _GNU_SOURCE
#include "sample.h"
#include "mag.h"
#include "options.h"
#include "os.h"
#include "pagemap.h"
#include "report.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>

#define SAMPLE_SLOTS 256       /* 2 MiB of address space; only pages in use cost memory */
#define SAMPLE_DEPTH 16        /* frames kept of each allocation and free */
#define SAMPLE_SLACK_BYTE 0xab /* fills the bytes between a block's end and its page's end */

enum { SLOT_UNUSED, SLOT_LIVE, SLOT_FREED };

typedef struct slot {
  uintptr_t user; /* the block's address */
  size_t size;    /* requested bytes */
  uint8_t state;  /* SLOT_UNUSED, _LIVE or _FREED */
  uint16_t next;  /* free list (sample_lock) */
  uint32_t alloc_tid, free_tid;
  int alloc_n, free_n;
  uintptr_t alloc_stack[SAMPLE_DEPTH], free_stack[SAMPLE_DEPTH];
} slot_t;

static lock_t sample_lock = LOCK_INIT;
static uint64_t sample_allocs, sample_frees, sample_live; /* blocks and live bytes (sample_lock) */
static char *pool; /* [guard][slot 0][guard][slot 1]...[guard] */
static slot_t slots[SAMPLE_SLOTS];
static int free_head = -1, free_tail = -1; /* slots to hand out, least recently freed first */
static bool pool_failed;
static struct sigaction previous_segv;

static char *slot_page(int i) {
  return pool + (2 * (size_t)i + 1) * OS_PAGE;
}

static void segv_handler(int sig, siginfo_t *info, void *context);

/* Maps the pool (all inaccessible) and installs the fault handler; sample_lock held. */
static bool pool_create(void) {
  size_t bytes = (2 * (size_t)SAMPLE_SLOTS + 1) * OS_PAGE;
  char *p = os_map(bytes);
  if (!p || !os_protect(p, bytes, false)) {
    if (p) os_unmap(p, bytes);
    return false;
  }
  pool = p;
  for (int i = 0; i < SAMPLE_SLOTS; i++)
    slots[i].next = (uint16_t)(i + 1);
  free_head = 0;
  free_tail = SAMPLE_SLOTS - 1;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = segv_handler;
  sa.sa_flags = SA_SIGINFO | SA_NODEFER;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGSEGV, &sa, &previous_segv);
  return true;
}

void *sample_maybe(size_t size, unsigned weight) {
  tcache_t *tc = mag_tls;
  if (!opt.sample || size > SAMPLE_SIZE_MAX || tc == &tcache_boot || tc == &tcache_dead)
    return NULL;
  if ((tc->sample_left -= (int64_t)weight) > 0) return NULL;
  tc->sample_left = mag_sample_countdown();
  uintptr_t stack[SAMPLE_DEPTH];
  int depth = report_capture(stack, SAMPLE_DEPTH);
  lock_acquire(&sample_lock);
  if (!pool && (pool_failed || !(pool_failed = !pool_create()))) {
    lock_release(&sample_lock);
    return NULL;
  }
  int i = free_head;
  if (i < 0 || !os_protect(slot_page(i), OS_PAGE, true)) {
    lock_release(&sample_lock);
    return NULL; /* every slot is in use: this one goes to the slabs */
  }
  free_head = slots[i].next < SAMPLE_SLOTS ? slots[i].next : -1;
  if (free_head < 0) free_tail = -1;
  slot_t *s = &slots[i];
  size_t rounded = (size + 15) & ~(size_t)15;
  s->user = (uintptr_t)slot_page(i) + OS_PAGE - (rounded ? rounded : 16);
  s->size = size;
  s->state = SLOT_LIVE;
  s->alloc_tid = os_thread_id();
  memcpy(s->alloc_stack, stack, sizeof stack);
  s->alloc_n = depth;
  s->free_n = 0;
  memset((char *)s->user + size, SAMPLE_SLACK_BYTE,
         (size_t)(slot_page(i) + OS_PAGE) - s->user - size);
  pagemap_set((uintptr_t)slot_page(i), OS_PAGE, (uintptr_t)i << 7 | PM_TAG_SAMPLE);
  sample_allocs++;
  sample_live += size;
  lock_release(&sample_lock);
  return (void *)s->user;
}

static void print_stack(report_buf_t *b, const char *what, uint32_t tid, const uintptr_t *ips,
                        int n) {
  report_str(b, "  ");
  report_str(b, what);
  report_str(b, " by thread ");
  report_dec(b, tid);
  report_str(b, " at:\n");
  report_frames(b, ips, n);
}

/* The error report for slot s; current: the stack of the faulting or freeing call. */
__attribute__((noreturn)) static void sample_report(const char *kind, const void *addr,
                                                    const slot_t *s, const char *detail) {
  report_buf_t b = {.len = 0};
  report_error_head(&b, kind, addr, detail);
  report_str(&b, " (sampled block of ");
  report_dec(&b, s->size);
  report_str(&b, " bytes at ");
  report_hex(&b, s->user);
  report_str(&b, ")\n");
  report_current_stack(&b);
  print_stack(&b, "allocated", s->alloc_tid, s->alloc_stack, s->alloc_n);
  if (s->state == SLOT_FREED) print_stack(&b, "freed", s->free_tid, s->free_stack, s->free_n);
  report_flush(&b);
  signal(SIGABRT, SIG_DFL);
  abort();
}

void sample_free(void *p, uintptr_t entry) {
  slot_t *s = &slots[entry >> 7];
  uintptr_t stack[SAMPLE_DEPTH];
  int depth = report_capture(stack, SAMPLE_DEPTH);
  lock_acquire(&sample_lock);
  slot_t copy = *s; /* reported after the lock is released */
  const char *kind = NULL, *detail = NULL;
  if (s->state == SLOT_FREED) {
    kind = "double free", detail = "block already freed";
  } else if ((uintptr_t)p != s->user) {
    kind = "invalid free", detail = "interior pointer, not the start of a block";
  } else {
    const unsigned char *slack = (const unsigned char *)s->user + s->size;
    for (uintptr_t a = (uintptr_t)slack; a < (uintptr_t)slot_page((int)(entry >> 7)) + OS_PAGE; a++)
      if (*(const unsigned char *)a != SAMPLE_SLACK_BYTE) {
        kind = "heap overflow", detail = "bytes past the end of the block were written";
        break;
      }
  }
  if (!kind) {
    int i = (int)(entry >> 7);
    s->state = SLOT_FREED;
    sample_frees++;
    sample_live -= s->size;
    s->free_tid = os_thread_id();
    memcpy(s->free_stack, stack, sizeof stack);
    s->free_n = depth;
    os_protect(slot_page(i), OS_PAGE, false); /* a use after free now faults */
    s->next = SAMPLE_SLOTS;
    if (free_tail >= 0)
      slots[free_tail].next = (uint16_t)i;
    else
      free_head = i;
    free_tail = i;
  }
  lock_release(&sample_lock);
  if (kind) sample_report(kind, p, &copy, detail);
}

void sample_totals(uint64_t *allocs, uint64_t *frees, uint64_t *live_bytes) {
  lock_acquire(&sample_lock);
  *allocs = sample_allocs;
  *frees = sample_frees;
  *live_bytes = sample_live;
  lock_release(&sample_lock);
}

void sample_fork_prepare(void) {
  lock_acquire(&sample_lock);
}

void sample_fork_parent(void) {
  lock_release(&sample_lock);
}

void sample_fork_child(void) {
  lock_init(&sample_lock);
}

size_t sample_size(void *p, uintptr_t entry) {
  const slot_t *s = &slots[entry >> 7];
  if (s->state != SLOT_LIVE || (uintptr_t)p != s->user)
    report_heap_error("invalid pointer", p, "not the start of a live sampled block");
  return s->size;
}

static void segv_handler(int sig, siginfo_t *info, void *context) {
  uintptr_t a = (uintptr_t)info->si_addr, base = (uintptr_t)pool;
  size_t bytes = (2 * (size_t)SAMPLE_SLOTS + 1) * OS_PAGE;
  bool fault = info->si_code > 0; /* the kernel's: si_addr is the address (not kill's fields) */
  if (fault && pool && a >= base && a < base + bytes) {
    size_t page = (a - base) / OS_PAGE;
    if (page % 2 == 1) { /* a slot's own page: only inaccessible once freed */
      const slot_t *s = &slots[page / 2];
      sample_report("use after free", (void *)a, s, "access to a freed block");
    }
    /* a guard page: past the end of the slot before it, or before the start of the one after */
    if (page > 0 && slots[page / 2 - 1].state != SLOT_UNUSED)
      sample_report("heap overflow", (void *)a, &slots[page / 2 - 1],
                    "access past the end of the block");
    if (page / 2 < SAMPLE_SLOTS && slots[page / 2].state != SLOT_UNUSED)
      sample_report("heap underflow", (void *)a, &slots[page / 2],
                    "access before the start of the block");
  }
  /* not ours: the program's handler (or the default action) takes it (theory 3) */
  sigaction(SIGSEGV, &previous_segv, NULL);
  if (!fault) raise(sig);
  (void)context;
}
