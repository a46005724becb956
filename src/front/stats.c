/*
 * stats: what magpie did, one snapshot of it, and the reports' entry points.
 *
 * Theory
 *   1. Counting costs the fast path nothing shared: each thread bumps counters in its own
 *      tcache (mag.c); a report sums them over live threads and adds the folded totals of
 *      exited ones. What only slow paths see is counted there: misses per cache (an atomic on
 *      the cache), depot trades and magazine sizes (under the depot lock), slabs (under the
 *      slab lock), and each lock's acquisitions, contended acquisitions and time waited
 *      (lock.h). Slab and depot figures are read under their locks.
 *   2. Live bytes are exact at class granularity (allocs - frees per class, times the class
 *      size, plus large blocks). Peak live bytes is the peak of "held" bytes - objects threads
 *      took from the shared layers, in their magazines or live - tracked at each magazine
 *      movement: an upper bound of the true peak, within two magazines per thread and class.
 *      Bytes lost to rounding are estimated over all allocations: what the classes handed out
 *      (allocs times class size) less what small requests asked for (bytes requested less the
 *      part in large blocks). The fast path keeps no per-class request sizes, so that total is
 *      split between the classes by estimates: the heap profiler's samples of a class give its
 *      mean request (without samples: the middle of its range). An object cache's is exact:
 *      its stride less the size it was created for, per allocation.
 *   3. One snapshot (magpie_stats.h's layout, built in stats_snapshot under stats_lock) feeds
 *      every view: the text report (stats_text.c), the JSON report (stats_json.c), the live
 *      area (stats_live.c) and malloc_info (stats_glibc.c).
 *   4. Reports are built with diag's text builder (report_buf.h), in a buffer on the stack,
 *      and written with write(2), so they work at exit, in a signal-free context with a
 *      damaged heap, and from malloc_stats. The text report is the one `magpie run --stats`
 *      prints too; tables with no rows are left out.
 */
#include "stats.h"
#include "cache.h"
#include "caches.h"
#include "debug.h"
#include "depot.h"
#include "export.h"
#include "init.h"
#include "large.h"
#include "mag.h"
#include "meta.h"
#include "options.h"
#include "prof.h"
#include "report.h"
#include "sample.h"
#include "slab.h"
#include "stats_impl.h"

#include <string.h>

_Static_assert(sizeof(magpie_area_thread_t) == sizeof(mag_thread_row_t),
               "a thread's row is mag_thread_rows' row");
_Static_assert(offsetof(magpie_area_t, seq) == 16 && offsetof(magpie_area_t, pid) == 72 &&
                   offsetof(magpie_area_t, allocs) == 96 &&
                   offsetof(magpie_area_t, thread_row_size) == 248,
               "the live area's header is laid out as docs/stats.md says");

static mag_totals_t stats_totals_buf;           /* mag_totals' result; large, so not on the stack */
uint64_t stats_snap_words[STATS_AREA_SIZE / 8]; /* the snapshot (stats_lock) */
lock_t stats_lock = LOCK_INIT;                  /* protects the two above and the area's writes */

static void stats_fill(stats_summary_t *s, mag_totals_t *t) {
  uint64_t profiled_pages; /* sampled small blocks, moved from the large figures to their class */
  prof_class_totals(t, &profiled_pages);
  memset(s, 0, sizeof *s);
  for (unsigned c = 1; c <= SC_COUNT; c++) {
    s->allocs += t->allocs[c];
    s->frees += t->frees[c];
    if (t->allocs[c] > t->frees[c]) s->live_bytes += (t->allocs[c] - t->frees[c]) * sc_size(c);
  }
  debug_figures_t d = {0, 0, 0, 0, 0};
  if (debug_on) /* debug mode serves every block itself */
    debug_totals(&d);
  else /* sampled blocks bypass the threads' counters too */
    sample_totals(&d.allocs, &d.frees, &d.live_bytes);
  s->allocs += d.allocs;
  s->frees += d.frees;
  s->live_bytes += d.live_bytes;
  s->large_allocs = t->large_allocs;
  s->large_frees = t->large_frees;
  s->allocs += t->large_allocs;
  s->frees += t->large_frees;
  s->large_live_bytes = large_live_bytes();
  s->large_live_bytes -=
      profiled_pages < s->large_live_bytes ? profiled_pages : s->large_live_bytes;
  size_t peak_blocks, peak_bytes;
  large_peaks(&peak_blocks, &peak_bytes);
  s->large_peak_blocks = peak_blocks;
  s->large_peak_bytes = peak_bytes;
  s->live_bytes += s->large_live_bytes;
  s->bytes_requested = t->bytes_requested + d.requested;
  s->peak_live_bytes = mag_held_peak();
  if (s->peak_live_bytes < d.peak_live_bytes) s->peak_live_bytes = d.peak_live_bytes;
  if (s->peak_live_bytes < s->live_bytes) s->peak_live_bytes = s->live_bytes;
  s->mapped_bytes = os_mapped_bytes();
  s->peak_mapped_bytes = os_mapped_peak();
  s->threads_live = t->threads_live;
  s->threads_ever = t->threads_ever;
}

void stats_summary(stats_summary_t *out) {
  lock_acquire(&stats_lock);
  mag_totals(&stats_totals_buf);
  stats_fill(out, &stats_totals_buf);
  lock_release(&stats_lock);
}

/* ---- the snapshot (stats_lock held) ---- */

static void snap_name(char name[32], const char *a, unsigned n, bool numbered) {
  size_t len = strlen(a);
  if (len > 20) len = 20;
  memcpy(name, a, len);
  if (numbered) {
    name[len++] = ' ';
    len += (size_t)report_format_dec(name + len, n);
  }
  memset(name + len, 0, 32 - len);
}

static void snap_lock(const char *what, unsigned n, bool numbered, const lock_stats_t *l) {
  if (!l->acquisitions || SNAP->lock_count == STATS_LOCK_ROWS) return;
  magpie_area_lock_t *row = SNAP_LOCK(SNAP->lock_count++);
  snap_name(row->name, what, n, numbered);
  row->acquisitions = l->acquisitions;
  row->contended = l->contended;
  row->wait_ns = l->wait_ns;
}

/* A row for cache cp, whose allocs and frees (objects) and estimated rounding loss are known;
   its locks' rows. */
static void snap_cache(cache_t *cp, uint64_t kind, uint64_t index, uint64_t allocs, uint64_t frees,
                       uint64_t rounding) {
  depot_figures_t d;
  depot_figures(cp, &d);
  lock_acquire(&cp->slab_lock);
  uint64_t slabs = cp->slabs, out = cp->slab_objects_out, owned = cp->owners;
  lock_release(&cp->slab_lock);
  uint64_t misses = __atomic_load_n(&cp->misses, __ATOMIC_RELAXED);
  if (allocs || slabs || misses) {
    magpie_area_class_t *row = SNAP_CLASS(SNAP->class_count++);
    uint64_t live = allocs > frees ? allocs - frees : 0;
    snap_name(row->name, cp->name, 0, false);
    row->kind = kind;
    row->index = index;
    row->size = cp->size;
    row->allocs = allocs;
    row->frees = frees;
    row->live_bytes = live * cp->size;
    row->misses = misses;
    row->depot_exchanges = d.exchanges;
    row->mag_rounds = d.mag_rounds;
    row->cached_depot = d.rounds;
    /* what is out of the slabs and neither live nor in the depot is in magazines; debug mode
       takes malloc's chunks straight from the slabs, and its live and quarantined chunks are
       out of them but counted as no class's */
    row->cached_mags = out > live + d.rounds && kind == 0 && !debug_on ? out - live - d.rounds : 0;
    row->depot_full_mags = d.full_mags;
    row->depot_empty_mags = d.empty_mags;
    row->slabs = slabs;
    row->slabs_owned = owned;
    row->slab_objects = slabs * cp->per_slab;
    row->slab_objects_out = out;
    row->rounding_bytes = rounding;
    row->swept = __atomic_load_n(&cp->swept, __ATOMIC_RELAXED);
    SNAP->cached_bytes += (row->cached_mags + row->cached_depot) * cp->size;
    SNAP->misses += misses;
  }
  lock_stats_t l = {0, 0, 0};
  lock_stats_add(&l, &cp->depot.lock);
  snap_lock(kind ? "cache depot" : "depot", (unsigned)index, true, &l);
  l = (lock_stats_t){0, 0, 0};
  lock_stats_add(&l, &cp->slab_lock);
  snap_lock(kind ? "cache slab" : "slab", (unsigned)index, true, &l);
}

/* Splits total, the rounding loss of all classes, between them (theory 2): a class's estimate
   is its allocations times the class size less the mean request its profiler samples stand
   for, or, without samples, less the middle of its range (requests spread evenly from the
   class below); the estimates are then scaled to add up to total. */
static void stats_rounding_shares(double share[SC_COUNT + 1], uint64_t total) {
  static double objects[SC_COUNT + 1], bytes[SC_COUNT + 1]; /* (stats_lock) */
  prof_class_requests(objects, bytes);
  double sum = 0;
  for (unsigned c = 1; c <= SC_COUNT; c++) {
    double size = sc_size(c), below = c > 1 ? sc_size(c - 1) : 0;
    double mean = objects[c] > 0 ? bytes[c] / objects[c] : (size + below + 1) / 2;
    share[c] = mean < size ? (double)stats_totals_buf.allocs[c] * (size - mean) : 0;
    sum += share[c];
  }
  for (unsigned c = 1; c <= SC_COUNT; c++)
    share[c] = sum > 0 ? share[c] * (double)total / sum : 0;
}

static void snap_object_cache(cache_t *cp, void *arg) {
  (void)arg;
  uint64_t allocs, frees;
  mag_cache_counts(cp, &allocs, &frees);
  if (SNAP->class_count < STATS_CLASS_ROWS) /* exact: every object asked for object_size */
    snap_cache(cp, 1, cp->id, allocs, frees, allocs * (cp->size - cp->object_size));
}

/* The huge-page figures (hugepage.c), from /proc/self/smaps: read for every report, for the
   live area at most once per HUGE_READ_NS, and not for its first snapshot, taken as the process
   is young (nothing is on huge pages yet, and reading smaps would cost most of it) (stats_lock). */
#define HUGE_READ_NS ((uint64_t)1000000000)
hugepage_stats_t stats_huge;
static uint64_t stats_huge_read_ns;

void stats_snapshot(bool report) {
  uint64_t now = os_now_ns();
  if (report || (stats_huge_read_ns && now - stats_huge_read_ns >= HUGE_READ_NS)) {
    hugepage_stats(&stats_huge);
    stats_huge_read_ns = now;
  } else if (!stats_huge_read_ns) {
    stats_huge_read_ns = now;
  }
  mag_totals(&stats_totals_buf);
  stats_summary_t s;
  stats_fill(&s, &stats_totals_buf);
  magpie_area_t *a = SNAP;
  memset(a, 0, sizeof *a); /* rows are written whole as they are added */
  a->magic = MAGPIE_AREA_MAGIC;
  a->major = MAGPIE_AREA_MAJOR;
  a->minor = MAGPIE_AREA_MINOR;
  a->area_size = STATS_AREA_SIZE;
  a->header_size = sizeof(magpie_area_t);
  a->class_row_size = sizeof(magpie_area_class_t);
  a->lock_row_size = sizeof(magpie_area_lock_t);
  a->cpu_row_size = sizeof(magpie_area_cpu_t);
  a->class_offset = STATS_CLASS_OFFSET;
  a->lock_offset = STATS_LOCK_OFFSET;
  a->cpu_offset = STATS_CPU_OFFSET;
  a->thread_row_size = sizeof(magpie_area_thread_t);
  a->thread_offset = STATS_THREAD_OFFSET;
  a->pid = (uint64_t)os_getpid();
  a->allocs = s.allocs;
  a->frees = s.frees;
  a->bytes_requested = s.bytes_requested;
  a->live_bytes = s.live_bytes;
  a->peak_live_bytes = s.peak_live_bytes;
  a->mapped_bytes = s.mapped_bytes;
  a->peak_mapped_bytes = s.peak_mapped_bytes;
  a->rss_bytes = os_rss_bytes();
  a->large_allocs = s.large_allocs;
  a->large_frees = s.large_frees;
  a->large_live_bytes = s.large_live_bytes;
  a->threads_live = s.threads_live;
  a->threads_total = s.threads_ever;
  a->cpus = os_cpu_count();
  a->huge_bytes = stats_huge.huge_bytes;
  a->percpu = mag_percpu();
  uint64_t handed_out = 0; /* class bytes of every small allocation (theory 2) */
  for (unsigned c = 1; c <= SC_COUNT; c++)
    handed_out += stats_totals_buf.allocs[c] * sc_size(c);
  uint64_t small_requested =
      stats_totals_buf.bytes_requested - stats_totals_buf.large_bytes_requested;
  a->rounding_bytes = handed_out > small_requested ? handed_out - small_requested : 0;
  static double share[SC_COUNT + 1]; /* each class's share of it (theory 2; stats_lock) */
  stats_rounding_shares(share, a->rounding_bytes);
  for (unsigned c = 1; c <= SC_COUNT; c++)
    snap_cache(&malloc_caches[c], 0, c, stats_totals_buf.allocs[c], stats_totals_buf.frees[c],
               (uint64_t)share[c]);
  cache_each_object_cache(snap_object_cache, NULL);
  lock_stats_t l = {0, 0, 0};
  lock_stats_add(&l, &heap_arena.lock);
  snap_lock("heap arena", 0, false, &l);
  l = (lock_stats_t){0, 0, 0};
  lock_stats_add(&l, &slab_arena.lock);
  snap_lock("slab arena", 0, false, &l);
  l = (lock_stats_t){0, 0, 0};
  meta_lock_stats(&l);
  snap_lock("metadata pools", 0, false, &l);
  l = (lock_stats_t){0, 0, 0};
  mag_registry_lock_stats(&l);
  snap_lock("thread registry", 0, false, &l);
  l = (lock_stats_t){0, 0, 0};
  prof_lock_stats(&l);
  snap_lock("heap profiler", 0, false, &l);
  for (unsigned i = 0, n = mag_cpu_count(); i < n && i < STATS_CPU_ROWS; i++) {
    l = (lock_stats_t){0, 0, 0};
    magpie_area_cpu_t *row = SNAP_CPU(a->cpu_count++);
    row->cpu = i;
    mag_cpu_stats(i, &row->misses, &l);
    snap_lock("cpu", i, true, &l);
  }
  static mag_thread_row_t threads[STATS_THREAD_ROWS]; /* (stats_lock) */
  a->thread_count = (uint32_t)mag_thread_rows(threads, STATS_THREAD_ROWS);
  for (uint32_t i = 0; i < a->thread_count; i++)
    *SNAP_THREAD(i) = (magpie_area_thread_t){threads[i].tid, threads[i].allocs, threads[i].frees,
                                             threads[i].misses, threads[i].bytes_requested};
}

void stats_write(int fd, int format) {
  magpie_init(); /* a report may be the program's first call: the arenas must exist */
  report_buf_t b = {.to_fd = true, .fd = fd};
  lock_acquire(&stats_lock);
  stats_snapshot(true);
  if (format == MAGPIE_STATS_JSON)
    stats_write_json(&b);
  else
    stats_write_text(&b);
  lock_release(&stats_lock);
  report_flush(&b);
}

void stats_fork_prepare(void) {
  lock_acquire(&stats_lock);
}
void stats_fork_parent(void) {
  lock_release(&stats_lock);
}
/* The child's lock is new; it lets go of its parent's live area (stats_live.c). */
void stats_fork_child(void) {
  lock_init(&stats_lock);
  stats_area_drop();
}

MAGPIE_EXPORT int magpie_stats_write(int fd, int format) {
  if (fd < 0 || (format != MAGPIE_STATS_TEXT && format != MAGPIE_STATS_JSON)) return -1;
  stats_write(fd, format);
  return 0;
}

void stats_at_exit(void) {
  if (opt.stats == OPT_STATS_OFF) return;
  int fd = -1;
  if (opt.stats_file[0]) {
    char path[sizeof opt.stats_file + REPORT_DEC_MAX];
    report_expand_pid(path, sizeof path, opt.stats_file);
    if ((fd = os_open_write(path)) < 0) return;
  }
  stats_write(fd >= 0 ? fd : report_stderr(),
              opt.stats == OPT_STATS_JSON ? MAGPIE_STATS_JSON : MAGPIE_STATS_TEXT);
  if (fd >= 0) os_close(fd);
}
