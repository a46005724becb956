/*
 * debug_leaks: the leak report at exit (MAGPIE_DEBUG=leaks, leaks=unreachable), in the manner
 * of mdb's ::findleaks.
 *
 * Theory
 *   1. At exit (library destructor) every live record is a block never freed. They are grouped
 *      by allocation stack (records keep it: `leaks` captures allocation stacks even without
 *      `audit`) and the groups printed largest first in bytes, with counts and size ranges.
 *   2. `leaks` (the default) lists only the blocks no pointer reaches, and counts the others in
 *      one line (leaks=all lists them all): a conservative mark from the roots, as valgrind's
 *      "definitely lost" - the writable segments and this thread's TLS block of every loaded
 *      object (dl_iterate_phdr; magpie's own left out), this thread's stack from the frame of
 *      debug_at_exit to the top of its mapping (/proc/self/maps; magpie's own frames below it
 *      are left out, as their dead slots hold block addresses), the whole stack mapping of
 *      every other live thread that allocated (the top of a glibc thread's mapping also holds
 *      its descriptor and TLS), and every other writable anonymous mapping (the loader's own
 *      allocations, an interpreter's arenas such as Python's, other threads' stacks) less
 *      the ranges magpie mapped (os_tracked: its slabs, records and metadata hold block
 *      addresses that are no program pointer). The report is made at exit, after main
 *      returned, so no register of this thread holds a program pointer. Then the mark goes on
 *      transitively through the marked blocks. Any aligned word whose value falls inside a
 *      live block (interior pointers included) marks it. Other threads still run: memory
 *      that is not a loaded object's is copied before it is read (os_read_self, which
 *      survives a thread that exits and unmaps its stack meanwhile), resident pages only, and
 *      their registers are not roots, so a block only a register of theirs holds is
 *      reported. Where magpie's ranges are not known (the table overflowed), anonymous
 *      mappings other than thread stacks are not roots: more blocks are reported.
 *   3. Memory: the block list, the mark stack and the groups are mapped for the report and
 *      unmapped after it; nothing comes from the heap. Records are collected and marked under
 *      debug_lock; the roots are gathered before it (dl_iterate_phdr takes the loader's lock)
 *      and the report printed after it.
 */
#define _GNU_SOURCE
#include "debug.h"
#include "debug_impl.h"
#include "mag.h"
#include "os.h"
#include "report.h"

#include <link.h>
#include <string.h>

#define LEAK_GROUPS_SHOWN 32 /* stacks printed in full; the rest are summed */
#define LEAK_ROOTS_MAX 512   /* root ranges: writable segments and TLS blocks */
#define LEAK_OWN_MAX 65536   /* magpie's ranges, left out of the anonymous memory scanned */
#define LEAK_STACKS_MAX 4096 /* other threads' stacks scanned */
/* Other threads' stacks are copied and read this much at once. */
#define LEAK_CHUNK (64 * OS_PAGE)

typedef struct group {
  size_t count, bytes, min, max;
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
   (mag_thread_stacks) are other threads', read whole. */
static uintptr_t stack_at[LEAK_STACKS_MAX + 1], stack_lo[LEAK_STACKS_MAX + 1],
    stack_hi[LEAK_STACKS_MAX + 1];
static size_t nstacks;        /* other threads' stacks, at [1..nstacks] */
static uintptr_t *stack_copy; /* LEAK_CHUNK bytes, mapped for the report */

/* This thread's stack above `from` becomes a root; the other threads' stacks are found, all in
   one read of /proc/self/maps. */
static void find_stacks(uintptr_t from) {
  stack_at[0] = from;
  nstacks = mag_thread_stacks(stack_at + 1, LEAK_STACKS_MAX);
  os_mappings(stack_at, nstacks + 1, stack_lo, stack_hi);
  if (stack_hi[0]) add_root(from, stack_hi[0]);
  stack_copy = os_map(LEAK_CHUNK);
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

static int by_stack(const void *a, const void *b) {
  const block_record_t *x = a, *y = b;
  if (x->alloc_depth != y->alloc_depth) return x->alloc_depth < y->alloc_depth ? -1 : 1;
  for (int i = 0; i < x->alloc_depth; i++)
    if (x->stack[i] != y->stack[i]) return x->stack[i] < y->stack[i] ? -1 : 1;
  return 0;
}

static int by_start(const void *a, const void *b) {
  uintptr_t x = ((const os_range_t *)a)->lo, y = ((const os_range_t *)b)->lo;
  return x < y ? -1 : x > y;
}

static int by_bytes(const void *a, const void *b) { /* the larger group sorts first */
  size_t x = ((const group_t *)a)->bytes, y = ((const group_t *)b)->bytes;
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

static void mark_word(marker_t *m, uintptr_t w) {
  if (w < m->lo || w >= m->hi) return;
  size_t lo = 0, hi = m->n; /* the last block starting at or below w */
  while (hi - lo > 1) {
    size_t mid = (lo + hi) / 2;
    if (m->blocks[mid]->user <= w)
      lo = mid;
    else
      hi = mid;
  }
  block_record_t *r = m->blocks[lo];
  if (w >= r->user && w < r->user + (r->size ? r->size : 1) && !r->mark) {
    r->mark = 1;
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
  size_t cap = LEAK_OWN_MAX - (size_t)nself - 1;
  size_t n = os_tracked(ranges, cap);
  if (n != SIZE_MAX) {
    for (int i = 0; i < nself; i++)
      ranges[n++] = self_segments[i];
    ranges[n++] = (os_range_t){stack_lo[0], stack_hi[0]};
    for (size_t i = 0; i < n; i++)
      sorted[i] = &ranges[i];
    heap_sort((void **)sorted, n, by_start);
    own_ranges_t own = {m, sorted, n};
    os_maps_each(0, anonymous_step, &own);
  }
  os_unmap(ranges, map_bytes);
}

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
    mark_copied(m, stack_lo[i], stack_hi[i]);
  mark_anonymous(m);
  while (m->top > 0) {
    block_record_t *r = m->stack[--m->top];
    mark_range(m, r->user, r->user + r->size);
  }
}

/* ---- the report ---- */

static void put_line_start(report_buf_t *b, const group_t *g) {
  report_str(b, "magpie: leak of ");
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
        r->mark = 0;
        blocks[k++] = r;
      }
  n = k;
  if (debug_flags.leaks_unreachable) {
    heap_sort((void **)blocks, n, by_address);
    marker_t m = {.blocks = blocks, .n = n, .stack = blocks + n, .top = 0};
    mark_all(&m);
    k = 0;
    for (size_t i = 0; i < n; i++) {
      if (!blocks[i]->mark) {
        blocks[k++] = blocks[i];
      } else {
        reachable++;
        reachable_bytes += blocks[i]->size;
      }
    }
    n = k;
  }
  heap_sort((void **)blocks, n, by_stack);
  size_t ngroups = 0, total = 0;
  for (size_t i = 0; i < n; i++) {
    if (i == 0 || by_stack(blocks[i - 1], blocks[i]) != 0) ngroups++;
    total += blocks[i]->size;
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

  report_buf_t b = {.len = 0};
  report_str(&b, "magpie: leak report: ");
  report_dec(&b, n);
  report_str(&b, n == 1 ? " block (" : " blocks (");
  report_dec(&b, total);
  report_str(&b,
             debug_flags.leaks_unreachable ? " bytes) unreachable at exit" : " bytes) never freed");
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
