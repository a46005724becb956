/*
 * inject: the actions of the test build's injection points (inject.h). Compiled into
 * libmagpie_inject.so only, with MAGPIE_INJECT defined.
 *
 * Theory
 *   1. Determinism: each thread's generator starts from the seed and its kernel thread id, so a
 *      run with a seed takes the same decisions in each thread; only the interleaving differs.
 *   2. A migration is sched_setaffinity to one other CPU of the thread's mask, which moves the
 *      thread before the call returns, then its old mask again, which leaves it where it is.
 *      Where the thread may use one CPU only, it yields instead.
 *   3. Raw system calls only: a point may be reached with any magpie lock held, in a signal
 *      handler or in a forked child; nothing here allocates or takes a lock.
 *   4. Quiet locks (inject.h): a thread notes its page-fault count (getrusage, RUSAGE_THREAD)
 *      when it takes one, and adds the difference to the count reported at exit when it lets
 *      it go. The holder reads the count itself, inline, and the faults taken inside this
 *      file's calls while it watches a lock are the test build's own and left out: their
 *      frames reach below the holder's, where lock.h's inline code would not. It keeps up to
 *      4 at once (the registry, a CPU's, a depot's, an arena's); one taken beyond is not
 *      watched, and one it no longer knows (forgotten, or taken before a fork) is ignored.
 *   5. This library's code is mapped when the points are turned on (MADV_POPULATE_READ on its
 *      executable segment). A code page that the kernel's fault-around left out when the
 *      library was loaded faults the first time it runs, and run first under a quiet lock it
 *      would count as the holder's fault: the count checks magpie's data and stack, and the
 *      library as shipped leaves its code to the kernel (docs/decisions/quiet-locks.md).
 */
#define _GNU_SOURCE
#include "inject.h"
#include "os.h"

#include <elf.h>
#include <link.h>
#include <sched.h>
#include <stdlib.h>
#include <time.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <unwind.h>

static uint64_t inject_seed;
static uint64_t inject_counts[INJECT_POINTS]; /* atomic */
static __thread uint64_t inject_state;        /* the thread's generator; 0: not seeded yet */

#define INJECT_QUIET_SETS 8
#define INJECT_HELD 4
static struct {
  const char *name;
  uintptr_t first;
  size_t count, stride;
} inject_quiet_set[INJECT_QUIET_SETS];
static unsigned inject_quiet_sets;   /* (atomic) */
static uint64_t inject_quiet_faults; /* page faults under quiet locks (atomic) */
static uint64_t inject_first_fault;  /* under which lock the first was: set << 32 | index + 1 */
static uintptr_t inject_first_taken; /* where that lock was taken (a code address) */
#define INJECT_TRACE 8
static uintptr_t inject_first_trace[INJECT_TRACE]; /* where it was let go, and the callers */
static int inject_first_depth;
extern const char __ehdr_start[];                    /* the linker's: this library's first byte */
static uintptr_t inject_code_start, inject_code_end; /* its code (inject_map_code) */
static __thread struct {
  const void *lock;
  uint64_t faults;    /* the thread's count when it took it */
  uintptr_t taken_at; /* the code that took it */
} inject_held[INJECT_HELD];
__thread unsigned inject_watched;
__thread uint64_t inject_own_faults;
__thread struct rusage inject_usage;

/* Notes where this library's code lies (the traces' bounds) and maps it (theory 5); a kernel
   before Linux 5.14 refuses the mapping, and nothing is done. */
static void inject_map_code(void) {
  const ElfW(Ehdr) *eh = (const void *)__ehdr_start;
  const ElfW(Phdr) *ph = (const void *)(__ehdr_start + eh->e_phoff);
  uintptr_t base = (uintptr_t)__ehdr_start;
  for (unsigned i = 0; i < eh->e_phnum; i++)
    if (ph[i].p_type == PT_LOAD && ph[i].p_offset == 0) base -= ph[i].p_vaddr;
  inject_code_start = UINTPTR_MAX;
  for (unsigned i = 0; i < eh->e_phnum; i++)
    if (ph[i].p_type == PT_LOAD && (ph[i].p_flags & PF_X)) {
      uintptr_t start = (base + ph[i].p_vaddr) & ~(uintptr_t)(OS_PAGE - 1);
      uintptr_t end = base + ph[i].p_vaddr + ph[i].p_memsz;
      if (start < inject_code_start) inject_code_start = start;
      if (end > inject_code_end) inject_code_end = end;
      syscall(SYS_madvise, start, end - start, MADV_POPULATE_READ);
    }
}

void inject_start(uint64_t seed) {
  inject_seed = seed;
  if (seed) inject_map_code();
}

/* A line of the exit report, built forward in a buffer of its own (nothing here allocates). */
typedef struct {
  char text[512];
  size_t n;
} inject_line_t;

static void inject_put(inject_line_t *l, const char *s) {
  for (; *s && l->n < sizeof l->text; s++)
    l->text[l->n++] = *s;
}

static void inject_put_number(inject_line_t *l, uint64_t v, unsigned base) {
  char digits[24], *p = digits + sizeof digits;
  *--p = 0;
  do
    *--p = "0123456789abcdef"[v % base];
  while (v /= base);
  inject_put(l, base == 16 ? "0x" : "");
  inject_put(l, p);
}

/* On stderr at exit: "magpie: inject: seed S, actions at each point: a b c d e", then "magpie:
   inject: page faults under quiet locks: N", and where N > 0, under which lock the first was
   and where that lock was taken and let go (and the calls that led there, as far as they are
   this library's), as offsets into this library for addr2line. */
__attribute__((destructor)) static void inject_report(void) {
  if (!inject_seed) return;
  inject_line_t l = {.n = 0};
  inject_put(&l, "magpie: inject: seed ");
  inject_put_number(&l, inject_seed, 10);
  inject_put(&l, ", actions at each point:");
  for (int i = 0; i < INJECT_POINTS; i++) {
    inject_put(&l, " ");
    inject_put_number(&l, __atomic_load_n(&inject_counts[i], __ATOMIC_RELAXED), 10);
  }
  inject_put(&l, "\nmagpie: inject: page faults under quiet locks: ");
  inject_put_number(&l, __atomic_load_n(&inject_quiet_faults, __ATOMIC_RELAXED), 10);
  uint64_t first = __atomic_load_n(&inject_first_fault, __ATOMIC_RELAXED);
  if (first) {
    inject_put(&l, " (the first under ");
    inject_put(&l, inject_quiet_set[first >> 32].name);
    inject_put(&l, " lock ");
    inject_put_number(&l, (uint32_t)first - 1, 10);
    inject_put(&l, ", taken at ");
    inject_put_number(&l, inject_first_taken - (uintptr_t)__ehdr_start, 16);
    inject_put(&l, ", let go at");
    for (int i = 0; i < inject_first_depth; i++) {
      inject_put(&l, i ? " < " : " ");
      inject_put_number(&l, inject_first_trace[i] - (uintptr_t)__ehdr_start, 16);
    }
    inject_put(&l, " in libmagpie_inject.so)");
  }
  inject_put(&l, "\n");
  os_write_all(2, l.text, l.n);
}

void inject_quiet(const char *name, const void *first, size_t count, size_t stride) {
  unsigned n = __atomic_load_n(&inject_quiet_sets, __ATOMIC_RELAXED);
  if (n == INJECT_QUIET_SETS) { /* a set not watched would leave its locks' faults uncounted */
    static const char full[] = "magpie: inject: more quiet lock sets than INJECT_QUIET_SETS\n";
    os_write_all(2, full, sizeof full - 1);
    abort();
  }
  inject_quiet_set[n].name = name;
  inject_quiet_set[n].first = (uintptr_t)first;
  inject_quiet_set[n].count = count;
  inject_quiet_set[n].stride = stride;
  __atomic_store_n(&inject_quiet_sets, n + 1, __ATOMIC_RELEASE);
}

/* Which quiet lock lock is: its set << 32 | its index in the set + 1; 0 for none. */
static uint64_t inject_quiet_which(const void *lock) {
  for (unsigned i = 0, n = __atomic_load_n(&inject_quiet_sets, __ATOMIC_ACQUIRE); i < n; i++) {
    uintptr_t off = (uintptr_t)lock - inject_quiet_set[i].first;
    if (off / inject_quiet_set[i].stride < inject_quiet_set[i].count &&
        off % inject_quiet_set[i].stride == 0)
      return (uint64_t)i << 32 | (off / inject_quiet_set[i].stride + 1);
  }
  return 0;
}

uint64_t *inject_lock_watch(const void *lock) {
  if (!inject_seed || inject_watched == INJECT_HELD || !inject_quiet_which(lock)) return NULL;
  inject_held[inject_watched].lock = lock;
  inject_held[inject_watched].taken_at = (uintptr_t)__builtin_return_address(0);
  return &inject_held[inject_watched++].faults;
}

/* One frame of the stack that let the first faulting quiet lock go, from inject_lock_released's
   caller on, while the frames are this library's code. */
static _Unwind_Reason_Code inject_trace_step(struct _Unwind_Context *context, void *skip) {
  uintptr_t ip = _Unwind_GetIP(context) - 1; /* the call, not its return */
  if ((*(int *)skip)-- > 0) return _URC_NO_REASON;
  if (ip < inject_code_start || ip >= inject_code_end || inject_first_depth == INJECT_TRACE)
    return _URC_END_OF_STACK;
  inject_first_trace[inject_first_depth++] = ip;
  return _URC_NO_REASON;
}

void inject_lock_released(const void *lock, uint64_t now) {
  for (unsigned i = inject_watched; i-- > 0;)
    if (inject_held[i].lock == lock) {
      if (now > inject_held[i].faults) {
        uint64_t none = 0;
        __atomic_add_fetch(&inject_quiet_faults, now - inject_held[i].faults, __ATOMIC_RELAXED);
        if (__atomic_compare_exchange_n(&inject_first_fault, &none, inject_quiet_which(lock), false,
                                        __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
          inject_first_taken = inject_held[i].taken_at - 1; /* the call, not its return */
          int skip = 1;                                     /* this function's own frame */
          _Unwind_Backtrace(inject_trace_step, &skip);
        }
      }
      inject_held[i] = inject_held[--inject_watched];
      return;
    }
}

void inject_lock_forget(void) {
  inject_watched = 0;
}

static uint64_t inject_next(void) {
  if (!inject_state) inject_state = inject_seed * 0x9e3779b97f4a7c15ull + os_thread_id() + 1;
  uint64_t x = (inject_state += 0x9e3779b97f4a7c15ull);
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/* Moves the calling thread to a CPU of its mask other than the one it runs on (theory 2);
   false where there is none. */
static bool inject_migrate(uint64_t r) {
  cpu_set_t mask, one;
  if (syscall(SYS_sched_getaffinity, 0, sizeof mask, &mask) <= 0) return false;
  unsigned here = (unsigned)sched_getcpu(), n = (unsigned)CPU_COUNT(&mask);
  if (n < 2) return false;
  unsigned pick = (unsigned)(r % (n - 1)); /* the pick-th allowed CPU other than here */
  for (unsigned cpu = 0; cpu < CPU_SETSIZE; cpu++) {
    if (!CPU_ISSET(cpu, &mask) || cpu == here || pick--) continue;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    syscall(SYS_sched_setaffinity, 0, sizeof one, &one);
    syscall(SYS_sched_setaffinity, 0, sizeof mask, &mask);
    return true;
  }
  return false;
}

/* Points passed far more often than the others act on one pass in 2^rarity: a trade comes
   every few dozen operations, and acting at each would make a stress run crawl. */
static const uint8_t inject_rarity[INJECT_POINTS] = {[INJECT_CPU_TRADE] = 6};

/* Points where the race is who else reaches the window while it is open (a slow step made
   outside a lock: threads that find the same lack meanwhile each make one) hold it open on
   every pass, for this many microseconds, so that a crowd of threads forms there each time. */
static const uint16_t inject_hold_us[INJECT_POINTS] = {[INJECT_UNLOCKED] = 1000};

void inject_at(inject_point_t point) {
  if (!inject_seed) return;
  if (inject_hold_us[point]) {
    struct timespec hold = {0, (long)inject_hold_us[point] * 1000};
    syscall(SYS_nanosleep, &hold, NULL);
    __atomic_add_fetch(&inject_counts[point], 1, __ATOMIC_RELAXED);
    return;
  }
  uint64_t r = inject_next();
  if (inject_rarity[point] && r >> (64 - inject_rarity[point])) return;
  switch (r & 7) {
  case 0:
  case 1:
  case 2: /* migrate */
    if (inject_migrate(r >> 8)) break;
    __attribute__((fallthrough)); /* nowhere to go */
  case 3:
    syscall(SYS_sched_yield);
    break;
  case 4: { /* spin up to about 16 microseconds */
    uint64_t until = os_clock_ns() + (r >> 8) % 16384;
    while (os_clock_ns() < until) {
    }
    break;
  }
  default: /* run on */
    return;
  }
  __atomic_add_fetch(&inject_counts[point], 1, __ATOMIC_RELAXED);
}
