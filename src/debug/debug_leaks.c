/*
 * debug_leaks: the leak report at exit (MAGPIE_DEBUG=leaks, leaks=unreachable), in the manner
 * of mdb's ::findleaks and LeakSanitizer.
 *
 * Theory
 *   1. At exit (library destructor) every live record is a block never freed. They are grouped
 *      by allocation stack (records keep it: `leaks` captures allocation stacks even without
 *      `audit`) and the groups printed largest first in bytes, with counts and size ranges.
 *   2. `leaks` (the default) follows LeakSanitizer's model: a conservative mark from the roots
 *      finds the reachable blocks, which are only counted in the report's first line; every
 *      other block is a leak, indirect if another leaked block points to it (the nodes of a
 *      list whose head was dropped; both blocks of a cycle nothing else points to), direct
 *      otherwise; the groups are by kind and stack, direct ones first. Nothing is printed when
 *      nothing leaked. leaks=all lists every block never freed, without a scan.
 *   3. The roots: the writable segments and this thread's TLS block of every loaded object
 *      (dl_iterate_phdr; magpie's own left out); this thread's stack from the frame of
 *      debug_at_exit to the top of its mapping (/proc/self/maps; magpie's own frames below it are
 *      left out, as their dead slots hold block addresses); the stack of every other live thread
 *      that allocated or freed from its stack pointer up (read from /proc/self/task/TID/syscall
 *      while the thread waits in the kernel; the frames below it are dead and their stale slots
 *      would keep what the thread dropped), the whole mapping if the thread keeps running (the top
 *      of a glibc thread's mapping also holds its descriptor and TLS); and every other writable
 *      anonymous mapping (the loader's own allocations, an interpreter's arenas such as Python's)
 *      less the ranges magpie mapped (os_tracked: its slabs, records and metadata hold block
 *      addresses that are no program pointer, and its slabs hold the blocks themselves, leaked or
 *      freed), less the thread stacks above and less the stacks that exited threads left in glibc's
 *      cache of stacks (recorded as each thread that allocated or freed exits; dead frames, but for
 *      the descriptor at their top, which glibc keeps and which holds its DTV). The report is made
 *      at exit, after main returned or from exit(), so no register of this thread holds a pointer
 *      that its frames above the report's do not. Then the mark goes on transitively through the
 *      marked blocks. Any aligned word whose value falls inside a live block (interior pointers
 *      included) marks it. Other threads still run: memory that is not a loaded object's is copied
 *      before it is read (os_read_self, which survives a thread that exits and unmaps its stack
 *      meanwhile), resident pages only, and their registers are not roots, so a block only a
 *      register of theirs holds is reported, and so is one a thread stored below the stack pointer
 *      it had when it was read. Where magpie's ranges are not known (the table overflowed),
 *      anonymous mappings other than thread stacks are not roots: more blocks are reported.
 *   4. Memory: the block list, the mark stack and the groups are mapped for the report and
 *      unmapped after it; nothing comes from the heap. Records are collected and marked under
 *      debug_lock; the roots are gathered before it (dl_iterate_phdr takes the loader's lock)
 *      and the report printed after it. Exiting threads record their stacks without a lock
 *      (record_exited_stack), so fork needs no handler for them.
 */
#define _GNU_SOURCE
#include "debug.h"
#include "debug_impl.h"
#include "mag.h"
#include "os.h"
#include "report.h"

#include <link.h>
#include <pthread.h>
#include <string.h>

#define LEAK_GROUPS_SHOWN 32 /* stacks printed in full; the rest are summed */
#define LEAK_ROOTS_MAX 512   /* root ranges: writable segments and TLS blocks */
#define LEAK_OWN_MAX 65536   /* magpie's ranges, left out of the anonymous memory scanned */
#define LEAK_STACKS_MAX 4096 /* other threads' stacks scanned */
#define LEAK_EXITED_MAX 1024 /* exited threads' stacks remembered (then the oldest give way) */
/* Two exits from one thread descriptor whose frames lie this close ran on the same stack. */
#define LEAK_SAME_STACK ((uintptr_t)64 << 10)
/* Bytes below a thread's stack pointer that its innermost function may still use (x86-64's
   red zone), scanned too. */
#define LEAK_RED_ZONE 128
/* A thread that runs has no stack pointer to read: it is asked again after a millisecond (it
   is most often about to block), up to this many milliseconds for all threads together. */
#define LEAK_SP_WAIT_MS 100
/* Other threads' stacks are copied and read this much at once. */
#define LEAK_CHUNK (64 * OS_PAGE)

/* block_record_t.mark in the scan: what reaches the block. */
#define LEAK_DIRECT 0   /* nothing: a direct leak, unless another leaked block points to it */
#define LEAK_REACHED 1  /* a root, or a block a root reaches: not a leak */
#define LEAK_INDIRECT 2 /* only other unreached blocks: an indirect leak */

typedef struct group {
  size_t count, bytes, min, max;
  int kind; /* LEAK_DIRECT or LEAK_INDIRECT (leaks=all: LEAK_DIRECT for every group) */
  uintptr_t first;
  uint32_t tid;
  int depth;
  uintptr_t ips[REPORT_DEPTH_MAX];
} group_t;

/* Only the exiting thread reports, once: these need no lock. */
static os_range_t roots[LEAK_ROOTS_MAX];
static int nroots;
static os_range_t self_segments[8]; /* magpie's own loaded segments: no roots */
static int nself;

static void add_root(uintptr_t lo, uintptr_t hi) {
  if (nroots < LEAK_ROOTS_MAX && hi > lo) roots[nroots++] = (os_range_t){lo, hi};
}

/* Stacks: an address in each, then its mapping. [0] is this thread's, from `from` up; the others
   (mag_thread_stacks) are other threads', from their stack pointer up where it is known. */
static uintptr_t stack_at[LEAK_STACKS_MAX + 1], stack_lo[LEAK_STACKS_MAX + 1],
    stack_hi[LEAK_STACKS_MAX + 1];
static uint32_t stack_tid[LEAK_STACKS_MAX + 1];
static size_t nstacks;        /* other threads' stacks, at [1..nstacks] */
static uintptr_t *stack_copy; /* LEAK_CHUNK bytes, mapped for the report */

/* Threads that exited: an address in the stack each left (glibc keeps stacks mapped, in its
   cache, for the next thread) and the thread's descriptor, which glibc places at the top of
   that stack. Written by each exiting thread without a lock (a slot claimed with an atomic
   counter, the pair checked again at the report: a torn pair fails the check, and its stack is
   then scanned, as before any of this). Read by the report. */
typedef struct exited_stack {
  uintptr_t frame, self;
} exited_stack_t;
static exited_stack_t exited[LEAK_EXITED_MAX];
static size_t exited_next; /* slots claimed (atomic); slot = count % LEAK_EXITED_MAX */
/* The report's: the exited stacks left out, and each one's descriptor. */
static uintptr_t exited_lo[LEAK_EXITED_MAX], exited_hi[LEAK_EXITED_MAX],
    exited_self[LEAK_EXITED_MAX];
static size_t nexited;
static pthread_key_t exit_key;
static bool exit_key_made;
static __thread bool exit_watched __attribute__((tls_model("initial-exec")));

/* The key's destructor, run as a thread that allocated exits: records its stack, unless a
   thread that ran on the same stack (a cached one, reused) is recorded already. */
static void record_exited_stack(void *unused) {
  (void)unused;
  uintptr_t frame = (uintptr_t)__builtin_frame_address(0), self = (uintptr_t)pthread_self();
  size_t claimed = __atomic_load_n(&exited_next, __ATOMIC_RELAXED);
  size_t n = claimed < LEAK_EXITED_MAX ? claimed : LEAK_EXITED_MAX;
  for (size_t i = 0; i < n; i++) {
    uintptr_t f = __atomic_load_n(&exited[i].frame, __ATOMIC_RELAXED);
    if (__atomic_load_n(&exited[i].self, __ATOMIC_RELAXED) == self &&
        f - frame + LEAK_SAME_STACK < 2 * LEAK_SAME_STACK)
      return;
  }
  size_t slot = __atomic_fetch_add(&exited_next, 1, __ATOMIC_RELAXED) % LEAK_EXITED_MAX;
  __atomic_store_n(&exited[slot].frame, frame, __ATOMIC_RELAXED);
  __atomic_store_n(&exited[slot].self, self, __ATOMIC_RELAXED);
}

void debug_leaks_init(void) {
  exit_key_made = pthread_key_create(&exit_key, record_exited_stack) == 0;
}

void debug_leaks_thread_start(void) {
  if (exit_watched || !exit_key_made) return;
  exit_watched = true; /* first: pthread_setspecific may allocate */
  pthread_setspecific(exit_key, (void *)1);
}

static uintptr_t parse_hex(const char *s) {
  uintptr_t v = 0;
  if (s[0] == '0' && s[1] == 'x') s += 2;
  for (;; s++) {
    unsigned d = *s >= '0' && *s <= '9'   ? (unsigned)(*s - '0')
                 : *s >= 'a' && *s <= 'f' ? (unsigned)(*s - 'a' + 10)
                                          : 16;
    if (d == 16) return v;
    v = v * 16 + d;
  }
}

/* The stack pointer of thread `tid` of this process if it waits in the kernel (the next to last
   field of /proc/self/task/TID/syscall; "running" when it runs), else 0. */
static uintptr_t blocked_stack_pointer(uint32_t tid) {
  char path[48] = "/proc/self/task/", digits[12], buf[256];
  int nd = 0;
  do
    digits[nd++] = (char)('0' + tid % 10);
  while ((tid /= 10) && nd < (int)sizeof digits);
  size_t len = strlen(path);
  while (nd > 0)
    path[len++] = digits[--nd];
  memcpy(path + len, "/syscall", 9);
  ssize_t got = os_read_file(path, buf, sizeof buf);
  if (got <= 0 || buf[0] < '-' || buf[0] > '9') return 0;
  const char *field[10];
  int nfields = 0;
  for (char *c = buf; *c && nfields < 10;) {
    while (*c == ' ' || *c == '\n')
      c++;
    if (!*c) break;
    field[nfields++] = c;
    while (*c && *c != ' ' && *c != '\n')
      c++;
  }
  return nfields >= 3 ? parse_hex(field[nfields - 2]) : 0;
}

/* This thread's stack above `from` becomes a root; the other threads' stacks are found, all in
   one read of /proc/self/maps, and each scanned from its stack pointer (less the red zone)
   where the thread waits in the kernel: what lies below is dead frames, whose stale pointers
   would keep blocks the thread dropped. A thread still running after LEAK_SP_WAIT_MS has its
   stack read whole. */
static void find_stacks(uintptr_t from) {
  stack_at[0] = from;
  nstacks = mag_thread_stacks(stack_at + 1, stack_tid + 1, LEAK_STACKS_MAX);
  os_mappings(stack_at, nstacks + 1, stack_lo, stack_hi);
  if (stack_hi[0]) add_root(from, stack_hi[0]);
  size_t waited_ms = 0;
  for (size_t i = 1; i <= nstacks; i++) {
    uintptr_t sp = blocked_stack_pointer(stack_tid[i]);
    while (!sp && stack_hi[i] && waited_ms < LEAK_SP_WAIT_MS) {
      os_sleep_ms(1);
      waited_ms++;
      sp = blocked_stack_pointer(stack_tid[i]);
    }
    stack_at[i] =
        sp > stack_lo[i] + LEAK_RED_ZONE && sp < stack_hi[i] ? sp - LEAK_RED_ZONE : stack_lo[i];
  }
  stack_copy = os_map(LEAK_CHUNK);
}

/* The stacks of exited threads that are still mapped (in glibc's cache) and that no live
   thread of the registry runs on (one that never allocated nor freed is in none, and its stack
   would be left out too, a limit docs/debug.md gives): dead memory, left out of the roots, but for
   the thread descriptor at their top, which glibc keeps with the stack (it holds the DTV, glibc's,
   kept for the next thread). The recorded descriptor must lie in the same mapping (on x86-64, its
   first and third words pointing to itself, as glibc's TCB does): a mapping reused for something
   else is scanned. Sets nexited and exited_lo/hi/self. */
static void find_exited_stacks(void) {
  static uintptr_t at[2 * LEAK_EXITED_MAX], lo[2 * LEAK_EXITED_MAX], hi[2 * LEAK_EXITED_MAX];
  size_t claimed = __atomic_load_n(&exited_next, __ATOMIC_RELAXED);
  size_t n = claimed < LEAK_EXITED_MAX ? claimed : LEAK_EXITED_MAX, kept = 0;
  for (size_t i = 0; i < n; i++) {
    at[2 * i] = __atomic_load_n(&exited[i].frame, __ATOMIC_RELAXED);
    at[2 * i + 1] = __atomic_load_n(&exited[i].self, __ATOMIC_RELAXED);
  }
  os_mappings(at, 2 * n, lo, hi); /* one read of /proc/self/maps for them all */
  for (size_t i = 0; i < n; i++) {
    uintptr_t self = at[2 * i + 1], stack_lo_i = lo[2 * i], stack_hi_i = hi[2 * i];
    if (!stack_hi_i || stack_lo_i != lo[2 * i + 1] || stack_hi_i != hi[2 * i + 1]) continue;
#if defined(__x86_64__)
    uintptr_t tcb[3];
    if (self + sizeof tcb > stack_hi_i || os_read_self(tcb, self, sizeof tcb) != sizeof tcb ||
        tcb[0] != self || tcb[2] != self)
      continue;
#endif
    bool live = false; /* a thread that allocated or freed runs on it again */
    for (size_t s = 0; s <= nstacks && !live; s++)
      live = stack_lo[s] == stack_lo_i;
    if (!live) {
      exited_lo[kept] = stack_lo_i;
      exited_self[kept] = self;
      exited_hi[kept++] = stack_hi_i;
    }
  }
  nexited = kept;
}

static void release_stack_copy(void) {
  if (stack_copy) os_unmap(stack_copy, LEAK_CHUNK);
  stack_copy = NULL;
}

static int root_step(struct dl_phdr_info *info, size_t size, void *self) {
  (void)size;
  bool is_self = false;
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    uintptr_t lo = info->dlpi_addr + ph->p_vaddr;
    if (ph->p_type == PT_LOAD && (uintptr_t)self >= lo && (uintptr_t)self < lo + ph->p_memsz)
      is_self = info->dlpi_name && info->dlpi_name[0]; /* magpie as a shared object */
  }
  for (int i = 0; is_self && i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    uintptr_t lo = info->dlpi_addr + ph->p_vaddr;
    if (ph->p_type == PT_LOAD && nself < (int)(sizeof self_segments / sizeof self_segments[0]))
      self_segments[nself++] =
          (os_range_t){lo & ~(OS_PAGE - 1), (lo + ph->p_memsz + OS_PAGE - 1) & ~(OS_PAGE - 1)};
  }
  if (is_self) return 0;
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    if (ph->p_type == PT_LOAD && (ph->p_flags & PF_W)) {
      uintptr_t lo = info->dlpi_addr + ph->p_vaddr;
      add_root(lo, lo + ph->p_memsz);
    } else if (ph->p_type == PT_TLS && info->dlpi_tls_data) {
      add_root((uintptr_t)info->dlpi_tls_data, (uintptr_t)info->dlpi_tls_data + ph->p_memsz);
    }
  }
  return 0;
}

/* ---- sorting without the heap: heapsort of pointers ---- */

typedef int cmp_fn(const void *a, const void *b);

static void sift(void **v, size_t i, size_t n, cmp_fn *cmp) {
  for (;;) {
    size_t c = 2 * i + 1;
    if (c >= n) return;
    if (c + 1 < n && cmp(v[c], v[c + 1]) < 0) c++;
    if (cmp(v[i], v[c]) >= 0) return;
    void *t = v[i];
    v[i] = v[c];
    v[c] = t;
    i = c;
  }
}

static void heap_sort(void **v, size_t n, cmp_fn *cmp) {
  for (size_t i = n / 2; i-- > 0;)
    sift(v, i, n, cmp);
  for (size_t end = n; end-- > 1;) {
    void *t = v[0];
    v[0] = v[end];
    v[end] = t;
    sift(v, 0, end, cmp);
  }
}

static int by_address(const void *a, const void *b) {
  uintptr_t x = ((const block_record_t *)a)->user, y = ((const block_record_t *)b)->user;
  return x < y ? -1 : x > y;
}

/* By kind (direct before indirect), then allocation stack. */
static int by_stack(const void *a, const void *b) {
  const block_record_t *x = a, *y = b;
  if (x->mark != y->mark) return x->mark < y->mark ? -1 : 1;
  if (x->alloc_depth != y->alloc_depth) return x->alloc_depth < y->alloc_depth ? -1 : 1;
  for (int i = 0; i < x->alloc_depth; i++)
    if (x->stack[i] != y->stack[i]) return x->stack[i] < y->stack[i] ? -1 : 1;
  return 0;
}

static int by_start(const void *a, const void *b) {
  uintptr_t x = ((const os_range_t *)a)->lo, y = ((const os_range_t *)b)->lo;
  return x < y ? -1 : x > y;
}

/* Direct leaks before indirect ones (as LeakSanitizer prints them), each the larger first. */
static int by_bytes(const void *a, const void *b) {
  const group_t *g = a, *h = b;
  if (g->kind != h->kind) return g->kind == LEAK_DIRECT ? -1 : 1;
  size_t x = g->bytes, y = h->bytes;
  return x < y ? 1 : x > y ? -1 : 0;
}

/* ---- marking ---- */

typedef struct marker {
  block_record_t **blocks; /* live blocks by address */
  size_t n;
  uintptr_t lo, hi;       /* the span they cover */
  block_record_t **stack; /* marked, not yet scanned */
  size_t top;
} marker_t;

/* The live block that holds address w, or NULL. */
static block_record_t *block_at(const marker_t *m, uintptr_t w) {
  if (w < m->lo || w >= m->hi) return NULL;
  size_t lo = 0, hi = m->n; /* the last block starting at or below w */
  while (hi - lo > 1) {
    size_t mid = (lo + hi) / 2;
    if (m->blocks[mid]->user <= w)
      lo = mid;
    else
      hi = mid;
  }
  block_record_t *r = m->blocks[lo];
  return w >= r->user && w < r->user + (r->size ? r->size : 1) ? r : NULL;
}

static void mark_word(marker_t *m, uintptr_t w) {
  block_record_t *r = block_at(m, w);
  if (r && r->mark != LEAK_REACHED) {
    r->mark = LEAK_REACHED;
    m->stack[m->top++] = r;
  }
}

static void mark_range(marker_t *m, uintptr_t lo, uintptr_t hi) {
  for (uintptr_t a = (lo + 7) & ~(uintptr_t)7; a + 8 <= hi; a += 8)
    mark_word(m, *(const uintptr_t *)a);
}

/* Memory not a loaded object's, [lo, hi): its resident pages, copied first (another thread may
   unmap it meanwhile). */
static void mark_copied(marker_t *m, uintptr_t lo, uintptr_t hi) {
  for (uintptr_t a = lo; a < hi && stack_copy; a += LEAK_CHUNK) {
    size_t len = hi - a < LEAK_CHUNK ? hi - a : LEAK_CHUNK;
    if (!os_resident(a, len)) continue;
    size_t got = os_read_self(stack_copy, a, len);
    mark_range(m, (uintptr_t)stack_copy, (uintptr_t)stack_copy + got);
  }
}

/* The ranges the anonymous scan leaves out, sorted by start: magpie's mappings, its loaded
   segments (their .bss tail is an anonymous mapping) and this thread's stack (its part below
   the report's frame holds magpie's dead slots). */
typedef struct own_ranges {
  marker_t *m;
  const os_range_t **sorted;
  size_t n;
} own_ranges_t;

/* A writable private mapping of no file ("", "[heap]" or a name given with prctl, "[anon:..."),
   less the ranges magpie owns. */
static void anonymous_step(void *ctx, uintptr_t lo, uintptr_t hi, const char *rest) {
  const own_ranges_t *own = ctx;
  if (rest[0] != 'r' || rest[1] != 'w' || rest[3] != 'p') return;
  const char *s = rest;
  for (int field = 0; field < 4; field++) { /* perms, offset, device, inode */
    while (*s == ' ')
      s++;
    const char *start = s;
    while (*s && *s != ' ')
      s++;
    if (field == 3 && !(s - start == 1 && *start == '0')) return; /* a file's */
  }
  while (*s == ' ')
    s++;
  if (*s && strcmp(s, "[heap]") != 0 && strncmp(s, "[anon:", 6) != 0) return;
  size_t first = 0, last = own->n; /* the first own range ending above lo */
  while (first < last) {
    size_t mid = (first + last) / 2;
    if (own->sorted[mid]->hi <= lo)
      first = mid + 1;
    else
      last = mid;
  }
  uintptr_t at = lo;
  for (size_t i = first; i < own->n && own->sorted[i]->lo < hi; i++) {
    if (own->sorted[i]->lo > at) mark_copied(own->m, at, own->sorted[i]->lo);
    if (own->sorted[i]->hi > at) at = own->sorted[i]->hi;
  }
  if (at < hi) mark_copied(own->m, at, hi);
}

static void mark_anonymous(marker_t *m) {
  size_t map_bytes = LEAK_OWN_MAX * (sizeof(os_range_t) + sizeof(os_range_t *));
  os_range_t *ranges = os_map(map_bytes);
  if (!ranges) return;
  const os_range_t **sorted = (const os_range_t **)(ranges + LEAK_OWN_MAX);
  size_t cap = LEAK_OWN_MAX - (size_t)nself - (nstacks + 1) - nexited;
  size_t n = os_tracked(ranges, cap);
  if (n != SIZE_MAX) {
    for (int i = 0; i < nself; i++)
      ranges[n++] = self_segments[i];
    for (size_t i = 0; i <= nstacks; i++) /* read from their stack pointers, or not at all */
      if (stack_hi[i]) ranges[n++] = (os_range_t){stack_lo[i], stack_hi[i]};
    for (size_t i = 0; i < nexited; i++)
      ranges[n++] = (os_range_t){exited_lo[i], exited_hi[i]};
    for (size_t i = 0; i < n; i++)
      sorted[i] = &ranges[i];
    heap_sort((void **)sorted, n, by_start);
    own_ranges_t own = {m, sorted, n};
    os_maps_each(0, anonymous_step, &own);
  }
  os_unmap(ranges, map_bytes);
}

/* Marks what the roots reach, then sorts the rest as LeakSanitizer does: a block that another
   unreached block points to is an indirect leak (mark LEAK_INDIRECT), the others direct (0). A
   cycle that nothing else points to is thus all indirect. */
static void mark_all(marker_t *m) {
  if (m->n == 0) return;
  m->lo = m->blocks[0]->user;
  m->hi = 0;
  for (size_t i = 0; i < m->n; i++) {
    block_record_t *r = m->blocks[i];
    uintptr_t end = r->user + (r->size ? r->size : 1);
    if (end > m->hi) m->hi = end;
  }
  for (int i = 0; i < nroots; i++)
    mark_range(m, roots[i].lo, roots[i].hi);
  for (size_t i = 1; i <= nstacks; i++)
    if (stack_hi[i]) mark_copied(m, stack_at[i], stack_hi[i]);
  find_exited_stacks();
  for (size_t i = 0; i < nexited; i++)
    mark_copied(m, exited_self[i], exited_hi[i]);
  mark_anonymous(m);
  while (m->top > 0) {
    block_record_t *r = m->stack[--m->top];
    mark_range(m, r->user, r->user + r->size);
  }
  for (size_t i = 0; i < m->n; i++) {
    block_record_t *from = m->blocks[i];
    if (from->mark == LEAK_REACHED) continue;
    for (uintptr_t a = (from->user + 7) & ~(uintptr_t)7; a + 8 <= from->user + from->size; a += 8) {
      block_record_t *to = block_at(m, *(const uintptr_t *)a);
      if (to && to != from && to->mark == LEAK_DIRECT) to->mark = LEAK_INDIRECT;
    }
  }
}

/* ---- the report ---- */

static void put_line_start(report_buf_t *b, const group_t *g) {
  report_str(b, !debug_flags.leaks_unreachable ? "magpie: leak of "
                : g->kind == LEAK_DIRECT       ? "magpie: direct leak of "
                                               : "magpie: indirect leak of ");
  report_dec(b, g->count);
  report_str(b, g->count == 1 ? " block, " : " blocks, ");
  report_dec(b, g->bytes);
  report_str(b, " bytes (");
  report_dec(b, g->min);
  if (g->max != g->min) {
    report_str(b, "..");
    report_dec(b, g->max);
  }
  report_str(b, g->count == 1 ? " bytes), at " : " bytes each), first at ");
  report_hex(b, g->first);
  report_str(b, ", allocated by thread ");
  report_dec(b, g->tid);
  report_str(b, " at:\n");
}

void debug_leaks_report(uintptr_t stack_from) {
  nroots = 0;
  nstacks = 0;
  nexited = 0;
  nself = 0;
  size_t reachable = 0, reachable_bytes = 0;
  if (debug_flags.leaks_unreachable) {
    dl_iterate_phdr(root_step, (void *)(uintptr_t)debug_leaks_report);
    find_stacks(stack_from);
  }
  lock_acquire(&debug_lock);
  size_t n = debug_live, map_bytes = (2 * n + 1) * sizeof(block_record_t *);
  block_record_t **blocks = os_map(map_bytes);
  if (!blocks) {
    lock_release(&debug_lock);
    release_stack_copy();
    report_warning("leak report: ", "no memory for the block list");
    return;
  }
  size_t k = 0;
  for (size_t i = 0; debug_hash && i <= debug_hash_mask; i++)
    for (block_record_t *r = debug_hash[i]; r; r = r->hash_next)
      if (r->state == REC_LIVE && k < n) {
        r->mark = LEAK_DIRECT;
        blocks[k++] = r;
      }
  n = k;
  if (debug_flags.leaks_unreachable) {
    heap_sort((void **)blocks, n, by_address);
    marker_t m = {.blocks = blocks, .n = n, .stack = blocks + n, .top = 0};
    mark_all(&m);
    k = 0;
    for (size_t i = 0; i < n; i++) {
      if (blocks[i]->mark != LEAK_REACHED) {
        blocks[k++] = blocks[i];
      } else {
        reachable++;
        reachable_bytes += blocks[i]->size;
      }
    }
    n = k;
  }
  heap_sort((void **)blocks, n, by_stack);
  size_t ngroups = 0, total = 0, indirect = 0, indirect_bytes = 0;
  for (size_t i = 0; i < n; i++) {
    if (i == 0 || by_stack(blocks[i - 1], blocks[i]) != 0) ngroups++;
    total += blocks[i]->size;
    if (blocks[i]->mark == LEAK_INDIRECT) {
      indirect++;
      indirect_bytes += blocks[i]->size;
    }
  }
  size_t group_bytes = ngroups * (sizeof(group_t) + sizeof(group_t *));
  group_t *groups = ngroups ? os_map(group_bytes) : NULL;
  group_t **order = groups ? (group_t **)(groups + ngroups) : NULL;
  if (groups) {
    group_t *g = NULL;
    for (size_t i = 0; i < n; i++) {
      block_record_t *r = blocks[i];
      if (!g || by_stack(blocks[i - 1], r) != 0) {
        g = g ? g + 1 : groups;
        g->min = g->max = r->size;
        g->first = r->user;
        g->kind = r->mark;
        g->tid = r->alloc_tid;
        g->depth = r->alloc_depth;
        memcpy(g->ips, r->stack, (size_t)r->alloc_depth * sizeof(uintptr_t));
      }
      g->count++;
      g->bytes += r->size;
      if (r->size < g->min) g->min = r->size;
      if (r->size > g->max) g->max = r->size;
    }
  }
  lock_release(&debug_lock);
  os_unmap(blocks, map_bytes);
  release_stack_copy();

  /* `leaks` says nothing when nothing leaked, as LeakSanitizer: the reachable blocks are a
     count in the first line of a report, never a report of their own. */
  if (debug_flags.leaks_unreachable && n == 0) return;
  report_buf_t b = {.len = 0};
  report_str(&b, "magpie: leak report: ");
  report_dec(&b, n);
  report_str(&b, n == 1 ? " block (" : " blocks (");
  report_dec(&b, total);
  report_str(&b,
             debug_flags.leaks_unreachable ? " bytes) unreachable at exit" : " bytes) never freed");
  if (debug_flags.leaks_unreachable) {
    report_str(&b, " (");
    report_dec(&b, n - indirect);
    report_str(&b, " direct, ");
    report_dec(&b, total - indirect_bytes);
    report_str(&b, " bytes; ");
    report_dec(&b, indirect);
    report_str(&b, " indirect, ");
    report_dec(&b, indirect_bytes);
    report_str(&b, " bytes)");
  }
  if (n) {
    report_str(&b, ", from ");
    report_dec(&b, ngroups);
    report_str(&b, ngroups == 1 ? " allocation stack" : " allocation stacks, largest first");
  }
  if (debug_flags.leaks_unreachable) {
    report_str(&b, "; ");
    report_dec(&b, reachable);
    report_str(&b, reachable == 1 ? " block (" : " blocks (");
    report_dec(&b, reachable_bytes);
    report_str(&b, " bytes) still reachable, not listed (leaks=all lists them)");
  }
  report_str(&b, "\n");
  report_flush(&b);
  if (!groups) {
    if (ngroups) report_warning("leak report: ", "no memory for the groups");
    return;
  }
  for (size_t i = 0; i < ngroups; i++)
    order[i] = &groups[i];
  heap_sort((void **)order, ngroups, by_bytes);
  size_t rest_count = 0, rest_bytes = 0;
  for (size_t i = 0; i < ngroups; i++) {
    const group_t *g = order[i];
    if (i >= LEAK_GROUPS_SHOWN) {
      rest_count += g->count;
      rest_bytes += g->bytes;
      continue;
    }
    put_line_start(&b, g);
    report_frames(&b, g->ips, g->depth);
    report_flush(&b);
  }
  if (rest_count) {
    report_str(&b, "magpie: leak: ");
    report_dec(&b, ngroups - LEAK_GROUPS_SHOWN);
    report_str(&b, " more allocation stacks, ");
    report_dec(&b, rest_count);
    report_str(&b, " blocks, ");
    report_dec(&b, rest_bytes);
    report_str(&b, " bytes, not shown\n");
    report_flush(&b);
  }
  os_unmap(groups, group_bytes);
}
