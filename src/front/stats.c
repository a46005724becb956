/*
 * stats: what magpie did, as text, JSON or a live shared area, without allocating.
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
 *   3. One snapshot (magpie_stats.h's layout, built in stats_snap under stats_lock) feeds every
 *      view: the text and JSON reports and the live area. The area is a memfd mapped shared,
 *      made at the first publish (close-on-exec; a fork's child drops its parent's and makes
 *      its own). The reap publishes at most once per publish_ms (reap_ms by default) under a
 *      sequence lock (seq odd while writing), so a reader in another process (tools/magpie
 *      live.c) copies it without stopping this one (docs/decisions/obs-stats-area.md).
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
#include "hugepage.h"
#include "init.h"
#include "large.h"
#include "mag.h"
#include "magpie_stats.h"
#include "meta.h"
#include "options.h"
#include "os.h"
#include "prof.h"
#include "report.h"
#include "sample.h"
#include "slab.h"

#include <string.h>

#define STATS_OBJECT_CACHES 64 /* object caches with a row; later ones are left out */
#define STATS_CLASS_ROWS (SC_COUNT + STATS_OBJECT_CACHES)
#define STATS_CPU_ROWS 512
#define STATS_LOCK_ROWS (2 * STATS_CLASS_ROWS + 4 + STATS_CPU_ROWS)
#define STATS_CLASS_OFFSET ((sizeof(magpie_area_t) + 63) & ~(size_t)63)
#define STATS_LOCK_OFFSET (STATS_CLASS_OFFSET + STATS_CLASS_ROWS * sizeof(magpie_area_class_t))
#define STATS_CPU_OFFSET (STATS_LOCK_OFFSET + STATS_LOCK_ROWS * sizeof(magpie_area_lock_t))
#define STATS_THREAD_ROWS 64 /* the busiest live threads */
#define STATS_THREAD_OFFSET (STATS_CPU_OFFSET + STATS_CPU_ROWS * sizeof(magpie_area_cpu_t))
#define STATS_AREA_SIZE                                                                            \
  ((STATS_THREAD_OFFSET + STATS_THREAD_ROWS * sizeof(magpie_area_thread_t) + OS_PAGE - 1) &        \
   ~(OS_PAGE - 1))
#define STATS_TOP_ROWS 5 /* rows of the text report's tables */

_Static_assert(sizeof(magpie_area_thread_t) == sizeof(mag_thread_row_t),
               "a thread's row is mag_thread_rows' row");
_Static_assert(offsetof(magpie_area_t, seq) == 16 && offsetof(magpie_area_t, pid) == 72 &&
                   offsetof(magpie_area_t, allocs) == 96 &&
                   offsetof(magpie_area_t, thread_row_size) == 248,
               "the live area's header is laid out as docs/stats.md says");

static mag_totals_t stats_totals_buf; /* mag_totals' result; large, so not on the stack */
static uint64_t stats_snap_words[STATS_AREA_SIZE / 8]; /* the snapshot (stats_lock) */
static lock_t stats_lock = LOCK_INIT; /* protects the two above and the area's writes */
static char *stats_area;              /* the live area, or NULL before the first publish */
static int stats_area_fd = -1;
static bool stats_area_refused;  /* the kernel (or a sandbox) refused the memfd: not asked again */
static uint64_t stats_published; /* snapshots published (stats_lock) */
static uint64_t stats_publish_due; /* os_now_ns of the next publish (atomic) */

#define SNAP ((magpie_area_t *)stats_snap_words)
#define SNAP_CLASS(i) ((magpie_area_class_t *)((char *)stats_snap_words + STATS_CLASS_OFFSET) + (i))
#define SNAP_LOCK(i) ((magpie_area_lock_t *)((char *)stats_snap_words + STATS_LOCK_OFFSET) + (i))
#define SNAP_CPU(i) ((magpie_area_cpu_t *)((char *)stats_snap_words + STATS_CPU_OFFSET) + (i))
#define SNAP_THREAD(i)                                                                             \
  ((magpie_area_thread_t *)((char *)stats_snap_words + STATS_THREAD_OFFSET) + (i))

static void stats_fill(stats_summary_t *s, mag_totals_t *t) {
  uint64_t profiled_pages; /* sampled small blocks, moved from the large figures to their class */
  prof_class_totals(t, &profiled_pages);
  memset(s, 0, sizeof *s);
  for (unsigned c = 1; c <= SC_COUNT; c++) {
    s->allocs += t->allocs[c];
    s->frees += t->frees[c];
    if (t->allocs[c] > t->frees[c]) s->live_bytes += (t->allocs[c] - t->frees[c]) * sc_info[c].size;
  }
  uint64_t allocs, frees, live;
  if (debug_on) /* debug mode serves every block itself */
    debug_totals(&allocs, &frees, &live);
  else /* sampled blocks bypass the threads' counters too */
    sample_totals(&allocs, &frees, &live);
  s->allocs += allocs;
  s->frees += frees;
  s->live_bytes += live;
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
  s->bytes_requested = t->bytes_requested;
  s->peak_live_bytes = mag_held_peak();
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
  uint64_t slabs = cp->slabs, out = cp->slab_objects_out;
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
    row->cached_mags = out > live + d.rounds && kind == 0 ? out - live - d.rounds : 0;
    row->depot_full_mags = d.full_mags;
    row->depot_empty_mags = d.empty_mags;
    row->slabs = slabs;
    row->slab_objects = slabs * cp->per_slab;
    row->slab_objects_out = out;
    row->rounding_bytes = rounding;
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
    double size = sc_info[c].size, below = c > 1 ? sc_info[c - 1].size : 0;
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
   live area at most once per HUGE_READ_NS (stats_lock). */
#define HUGE_READ_NS ((uint64_t)1000000000)
static hugepage_stats_t stats_huge;
static uint64_t stats_huge_read_ns;

static void stats_snapshot(bool report) {
  uint64_t now = os_now_ns();
  if (report || !stats_huge_read_ns || now - stats_huge_read_ns >= HUGE_READ_NS) {
    hugepage_stats(&stats_huge);
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
    handed_out += stats_totals_buf.allocs[c] * sc_info[c].size;
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
  meta_lock_stats(&l);
  snap_lock("metadata pools", 0, false, &l);
  l = (lock_stats_t){0, 0, 0};
  mag_registry_lock_stats(&l);
  snap_lock("thread registry", 0, false, &l);
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

/* ---- the live area ---- */

/* Copies the snapshot into the area under its sequence lock (stats_lock held: one writer). */
static void stats_area_write(void) {
  if (!stats_area) {
    stats_area = os_map_shared(MAGPIE_AREA_NAME, STATS_AREA_SIZE, &stats_area_fd);
    if (!stats_area) {
      stats_area_refused = true;
      return;
    }
  }
  magpie_area_t *area = (magpie_area_t *)stats_area;
  /* The odd count before any field: a sequentially consistent exchange is a full barrier on
     the machines magpie supports (and ThreadSanitizer accepts it, unlike a lone fence). */
  uint64_t seq = __atomic_exchange_n(&area->seq, __atomic_load_n(&area->seq, __ATOMIC_RELAXED) + 1,
                                     __ATOMIC_SEQ_CST);
  SNAP->seq = seq + 1;
  SNAP->published = ++stats_published;
  SNAP->publish_ns = os_realtime_ns();
  /* The header and the rows in use: rows past the counts are never read. */
  const magpie_area_t *a = SNAP;
  memcpy(stats_area, a, sizeof *a);
  memcpy(stats_area + a->class_offset, SNAP_CLASS(0), a->class_count * sizeof(magpie_area_class_t));
  memcpy(stats_area + a->lock_offset, SNAP_LOCK(0), a->lock_count * sizeof(magpie_area_lock_t));
  memcpy(stats_area + a->cpu_offset, SNAP_CPU(0), a->cpu_count * sizeof(magpie_area_cpu_t));
  memcpy(stats_area + a->thread_offset, SNAP_THREAD(0),
         a->thread_count * sizeof(magpie_area_thread_t));
  __atomic_store_n(&area->seq, seq + 2, __ATOMIC_RELEASE); /* every field before the even count */
}

void stats_publish(uint64_t now) {
  size_t ms = opt.publish_ms ? opt.publish_ms : opt.reap_ms;
  uint64_t due = __atomic_load_n(&stats_publish_due, __ATOMIC_RELAXED);
  if (due == 0) { /* the first call starts the clock: a short process never publishes */
    __atomic_compare_exchange_n(&stats_publish_due, &due, now + (uint64_t)ms * 1000000u, false,
                                __ATOMIC_RELAXED, __ATOMIC_RELAXED);
    return;
  }
  if (now < due ||
      !__atomic_compare_exchange_n(&stats_publish_due, &due, now + (uint64_t)ms * 1000000u, false,
                                   __ATOMIC_RELAXED, __ATOMIC_RELAXED))
    return;
  lock_acquire(&stats_lock);
  if (!stats_area_refused) {
    stats_snapshot(false);
    stats_area_write();
  }
  lock_release(&stats_lock);
}

/* ---- output (diag's text builder, written to the descriptor asked for) ---- */

/* ,"key":v */
static void json_field(report_buf_t *b, const char *key, uint64_t v) {
  report_str(b, ",\"");
  report_str(b, key);
  report_str(b, "\":");
  report_dec(b, v);
}

static void json_name(report_buf_t *b, const char *name) {
  report_str(b, "{\"name\":\""); /* names are the library's own: no quotes or controls */
  report_str(b, name);
  report_str(b, "\"");
}

typedef struct json_figure {
  const char *key;
  uint64_t v;
} json_figure_t;

static void json_figures(report_buf_t *b, const json_figure_t *f, size_t n) {
  for (size_t i = 0; i < n; i++)
    json_field(b, f[i].key, f[i].v);
}

/* A class's or object cache's figures, after its "class" or "name" (docs/stats.md). */
static void json_cache_figures(report_buf_t *b, const magpie_area_class_t *r) {
  const json_figure_t figures[] = {
      {"size", r->size},
      {"allocs", r->allocs},
      {"frees", r->frees},
      {"live_bytes", r->live_bytes},
      {"misses", r->misses},
      {"depot_exchanges", r->depot_exchanges},
      {"mag_rounds", r->mag_rounds},
      {"cached", r->cached_mags + r->cached_depot},
      {"cached_mags", r->cached_mags},
      {"cached_depot", r->cached_depot},
      {"depot_full", r->depot_full_mags},
      {"depot_empty", r->depot_empty_mags},
      {"slabs", r->slabs},
      {"slab_objects", r->slab_objects},
      {"slab_objects_out", r->slab_objects_out},
      {"rounding_bytes", r->rounding_bytes},
  };
  json_figures(b, figures, sizeof figures / sizeof figures[0]);
}

static void stats_write_json(report_buf_t *b) {
  const magpie_area_t *a = SNAP;
  report_str(b, "{\"magpie\":1,\"schema\":");
  report_dec(b, MAGPIE_STATS_SCHEMA);
  const json_figure_t top[] = {
      {"pid", a->pid},
      {"allocs", a->allocs},
      {"frees", a->frees},
      {"bytes_requested", a->bytes_requested},
      {"live_bytes", a->live_bytes},
      {"peak_live_bytes", a->peak_live_bytes},
      {"cached_bytes", a->cached_bytes},
      {"mapped_bytes", a->mapped_bytes},
      {"peak_mapped_bytes", a->peak_mapped_bytes},
      {"rss_bytes", a->rss_bytes},
      {"huge_bytes", a->huge_bytes},
      {"rounding_bytes", a->rounding_bytes},
      {"misses", a->misses},
      {"threads_live", a->threads_live},
      {"threads_total", a->threads_total},
      {"cpus", a->cpus},
      {"memory_limit", os_memory_limit()},
      {"retain", opt.retain},
      {"rseq", os_rseq_available()},
      {"percpu", a->percpu},
  };
  json_figures(b, top, sizeof top / sizeof top[0]);
  for (uint64_t kind = 0; kind < 2; kind++) {
    report_str(b, kind ? "],\"object_caches\":[" : ",\"classes\":[");
    for (uint32_t i = 0, first = 1; i < a->class_count; i++) {
      const magpie_area_class_t *r = SNAP_CLASS(i);
      if (r->kind != kind) continue;
      if (!first) report_str(b, ",");
      first = 0;
      if (kind) {
        json_name(b, r->name);
      } else {
        report_str(b, "{\"class\":");
        report_dec(b, r->index);
      }
      json_cache_figures(b, r);
      report_str(b, "}");
    }
  }
  report_str(b, "],\"locks\":[");
  for (uint32_t i = 0; i < a->lock_count; i++) {
    const magpie_area_lock_t *r = SNAP_LOCK(i);
    if (i) report_str(b, ",");
    json_name(b, r->name);
    json_field(b, "acquisitions", r->acquisitions);
    json_field(b, "contended", r->contended);
    json_field(b, "wait_ns", r->wait_ns);
    report_str(b, "}");
  }
  report_str(b, "],\"cpus_misses\":[");
  for (uint32_t i = 0; i < a->cpu_count; i++) {
    if (i) report_str(b, ",");
    report_dec(b, SNAP_CPU(i)->misses);
  }
  report_str(b, "],\"threads\":[");
  for (uint32_t i = 0; i < a->thread_count; i++) {
    const magpie_area_thread_t *t = SNAP_THREAD(i);
    report_str(b, i ? ",{\"tid\":" : "{\"tid\":");
    report_dec(b, t->tid);
    json_field(b, "allocs", t->allocs);
    json_field(b, "frees", t->frees);
    json_field(b, "misses", t->misses);
    json_field(b, "bytes_requested", t->bytes_requested);
    report_str(b, "}");
  }
  report_str(b, "],\"large\":{\"allocs\":");
  report_dec(b, a->large_allocs);
  json_field(b, "frees", a->large_frees);
  json_field(b, "live_bytes", a->large_live_bytes);
  const hugepage_stats_t *h = &stats_huge;
  report_str(b, "},\"hugepages\":{\"mode\":\"");
  report_str(b, h->mode);
  report_str(b, "\",\"thp\":\"");
  report_str(b, h->thp);
  report_str(b, "\"");
  json_field(b, "on", h->on);
  json_field(b, "huge_bytes", h->huge_bytes);
  json_field(b, "slab_bytes", h->slab_bytes);
  json_field(b, "partial_free_bytes", h->partial_free_bytes);
  json_field(b, "slab_hollow_bytes", h->slab_hollow_bytes);
  json_field(b, "collapses", h->collapses);
  json_field(b, "collapse_failures", h->collapse_failures);
  json_field(b, "subreleases", h->subreleases);
  report_str(b, "}}\n");
}

/* "  label<padding>value", then " (exact)" for a byte count of 1 KiB or more. */
static void text_line(report_buf_t *b, const char *label, uint64_t v, bool bytes) {
  report_str(b, "  ");
  report_str_width(b, label, 20);
  if (bytes) {
    report_bytes_width(b, v, 13);
    if (v >= 1024) {
      report_str(b, "  (");
      report_count_width(b, v, 0);
      report_str(b, ")");
    }
  } else {
    report_count_width(b, v, 13);
  }
  report_str(b, "\n");
}

/* The indices of the n rows with the largest key, largest first (insertion into top). */
static unsigned text_top(uint32_t count, uint64_t (*key)(uint32_t i), uint32_t top[STATS_TOP_ROWS],
                         unsigned *used) {
  unsigned n = 0;
  *used = 0;
  for (uint32_t i = 0; i < count; i++) {
    uint64_t k = key(i);
    if (!k) continue;
    (*used)++;
    unsigned at = n < STATS_TOP_ROWS ? n++ : STATS_TOP_ROWS;
    while (at > 0 && key(top[at - 1]) < k) {
      if (at < STATS_TOP_ROWS) top[at] = top[at - 1];
      at--;
    }
    if (at < STATS_TOP_ROWS) top[at] = i;
  }
  return n;
}

static uint64_t class_allocs(uint32_t i) {
  return SNAP_CLASS(i)->kind == 0 ? SNAP_CLASS(i)->allocs : 0;
}

static uint64_t lock_waited(uint32_t i) {
  return SNAP_LOCK(i)->contended ? SNAP_LOCK(i)->wait_ns + 1 : 0;
}

static void text_table_head(report_buf_t *b, const char *what, unsigned n, unsigned used,
                            const char *by, const char *columns) {
  report_str(b, "  ");
  report_str(b, what);
  report_str(b, " (");
  report_dec(b, n);
  report_str(b, " of ");
  report_dec(b, used);
  report_str(b, by);
  report_str(b, columns);
}

static void stats_write_text(report_buf_t *b) {
  const magpie_area_t *a = SNAP;
  report_str(b, "== magpie (pid ");
  report_dec(b, a->pid);
  report_str(b, ")\n");
  text_line(b, "allocations", a->allocs, false);
  text_line(b, "frees", a->frees, false);
  text_line(b, "bytes requested", a->bytes_requested, true);
  text_line(b, "live bytes", a->live_bytes, true);
  text_line(b, "peak live bytes", a->peak_live_bytes, true);
  text_line(b, "cached bytes", a->cached_bytes, true);
  text_line(b, "lost to rounding", a->rounding_bytes, true);
  text_line(b, "mapped bytes", a->mapped_bytes, true);
  text_line(b, "peak mapped bytes", a->peak_mapped_bytes, true);
  text_line(b, "RSS", a->rss_bytes, true);
  text_line(b, "threads", a->threads_total, false);
  text_line(b, "CPUs", a->cpus, false);
  if (os_memory_limit()) text_line(b, "memory limit", os_memory_limit(), true);
  const hugepage_stats_t *h = &stats_huge;
  report_str(b, "  ");
  report_str_width(b, "on huge pages", 20);
  report_bytes_width(b, h->huge_bytes, 13);
  report_str(b, "  (hugepages=");
  report_str(b, h->mode);
  report_str(b, ", kernel THP ");
  report_str(b, h->thp);
  report_str(b, "; ");
  report_bytes_width(b, h->slab_bytes, 0);
  report_str(b, " in slab huge pages, ");
  report_count_width(b, h->collapses, 0);
  report_str(b, " collapses, ");
  report_count_width(b, h->subreleases, 0);
  report_str(b, " subreleases; ");
  report_bytes_width(b, h->slab_hollow_bytes, 0);
  report_str(b, " given back inside slabs)\n");
  uint32_t top[STATS_TOP_ROWS];
  unsigned used, n = text_top(a->class_count, class_allocs, top, &used);
  if (n) {
    text_table_head(b, "busiest size classes", n, used, " used, by allocations):\n",
                    "    class size       allocs        frees   live bytes   misses  slabs mag\n");
    for (unsigned i = 0; i < n; i++) {
      const magpie_area_class_t *r = SNAP_CLASS(top[i]);
      report_str(b, "  ");
      report_count_width(b, r->size, 12);
      report_count_width(b, r->allocs, 13);
      report_count_width(b, r->frees, 13);
      report_bytes_width(b, r->live_bytes, 13);
      report_count_width(b, r->misses, 9);
      report_count_width(b, r->slabs, 7);
      report_dec_width(b, r->mag_rounds, 4);
      report_str(b, "\n");
    }
  }
  if (a->large_allocs || a->large_frees) {
    report_str(b, "  large allocations: ");
    report_count_width(b, a->large_allocs, 0);
    report_str(b, " allocs, ");
    report_count_width(b, a->large_frees, 0);
    report_str(b, " frees\n");
  }
  n = text_top(a->lock_count, lock_waited, top, &used);
  if (n) {
    text_table_head(b, "most contended locks", n, used, " contended, by time waited):\n",
                    "    lock                   acquisitions    contended    waited ms\n");
    for (unsigned i = 0; i < n; i++) {
      const magpie_area_lock_t *r = SNAP_LOCK(top[i]);
      report_str(b, "    ");
      report_str_width(b, r->name, 20);
      report_count_width(b, r->acquisitions, 15);
      report_count_width(b, r->contended, 13);
      report_count_width(b, r->wait_ns / 1000000, 13);
      report_str(b, "\n");
    }
  }
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

/* glibc's malloc_stats layout, which programs and scripts parse: magpie's one heap is
   "Arena 0" (everything but large blocks), and large blocks stand for glibc's mmapped chunks,
   the blocks too big for its arenas. Values are never truncated to 32 bits. */
void stats_write_glibc(int fd) {
  stats_summary_t s;
  stats_summary(&s);
  uint64_t small_mapped =
      s.mapped_bytes > s.large_live_bytes ? s.mapped_bytes - s.large_live_bytes : 0;
  const struct {
    const char *label;
    uint64_t value;
  } lines[] = {
      {"Arena 0:\n", 0},
      {"system bytes     = ", small_mapped},
      {"in use bytes     = ", s.live_bytes - s.large_live_bytes},
      {"Total (incl. mmap):\n", 0},
      {"system bytes     = ", s.mapped_bytes},
      {"in use bytes     = ", s.live_bytes},
      {"max mmap regions = ", s.large_peak_blocks},
      {"max mmap bytes   = ", s.large_peak_bytes},
  };
  report_buf_t b = {.to_fd = true, .fd = fd};
  for (size_t i = 0; i < sizeof lines / sizeof lines[0]; i++) {
    report_str(&b, lines[i].label);
    if (lines[i].label[strlen(lines[i].label) - 1] == '\n') continue; /* a heading */
    report_dec_width(&b, lines[i].value, 10);
    report_str(&b, "\n");
  }
  report_flush(&b);
}

/* <tag a="v" ...> */
static void xml_attr(report_buf_t *b, const char *name, uint64_t v) {
  report_str(b, " ");
  report_str(b, name);
  report_str(b, "=\"");
  report_dec(b, v);
  report_str(b, "\"");
}

/* <NAME type="TYPE" count="N" size="N"/>, a negative count left out. */
static void xml_figure(report_buf_t *b, const char *name, const char *type, int64_t count,
                       uint64_t size) {
  report_str(b, "<");
  report_str(b, name);
  report_str(b, " type=\"");
  report_str(b, type);
  report_str(b, "\"");
  if (count >= 0) xml_attr(b, "count", (uint64_t)count);
  xml_attr(b, "size", size);
  report_str(b, "/>\n");
}

/* One class's free objects, as malloc_info shows them. */
typedef struct xml_class {
  uint64_t index, size, mags, depot;
} xml_class_t;

/* glibc's malloc_info element layout: one heap (magpie's arena), a <size> per class holding
   free objects (from..to: the requests it serves; total: the bytes free in it; count: the
   objects), glibc's totals (fast: free in magazines; rest: free in depots; mmap: large blocks)
   and system figures, for the heap and the process. Magpie adds <total type="live">: blocks
   the program holds. The figures are copied out of the snapshot and the lock let go before
   any text goes out: b's sink is the caller's FILE, whose writes are cancellation points. */
void stats_write_xml(report_buf_t *b) {
  xml_class_t rows[SC_COUNT];
  unsigned n = 0;
  lock_acquire(&stats_lock);
  stats_snapshot(false);
  magpie_area_t a = *SNAP;
  for (uint32_t i = 0; i < a.class_count && n < SC_COUNT; i++) {
    const magpie_area_class_t *r = SNAP_CLASS(i);
    if (r->kind == 0) rows[n++] = (xml_class_t){r->index, r->size, r->cached_mags, r->cached_depot};
  }
  lock_release(&stats_lock);
  uint64_t mags = 0, mags_n = 0, depot = 0, depot_n = 0;
  report_str(b, "<malloc version=\"1\">\n<heap nr=\"0\">\n<sizes>\n");
  for (unsigned i = 0; i < n; i++) {
    const xml_class_t *r = &rows[i];
    mags += r->mags * r->size;
    mags_n += r->mags;
    depot += r->depot * r->size;
    depot_n += r->depot;
    if (!r->mags && !r->depot) continue;
    report_str(b, "  <size");
    xml_attr(b, "from", r->index > 1 ? sc_info[r->index - 1].size + 1 : 1);
    xml_attr(b, "to", r->size);
    xml_attr(b, "total", (r->mags + r->depot) * r->size);
    xml_attr(b, "count", r->mags + r->depot);
    report_str(b, "/>\n");
  }
  report_str(b, "</sizes>\n");
  uint64_t heap = a.mapped_bytes > a.large_live_bytes ? a.mapped_bytes - a.large_live_bytes : 0;
  for (int whole = 0; whole < 2; whole++) {
    xml_figure(b, "total", "fast", (int64_t)mags_n, mags);
    xml_figure(b, "total", "rest", (int64_t)depot_n, depot);
    if (whole) {
      xml_figure(b, "total", "mmap", (int64_t)(a.large_allocs - a.large_frees), a.large_live_bytes);
      xml_figure(b, "total", "live", (int64_t)(a.allocs - a.frees), a.live_bytes);
    }
    xml_figure(b, "system", "current", -1, whole ? a.mapped_bytes : heap);
    xml_figure(b, "system", "max", -1, a.peak_mapped_bytes);
    xml_figure(b, "aspace", "total", -1, whole ? a.mapped_bytes : heap);
    xml_figure(b, "aspace", "mprotect", -1, whole ? a.mapped_bytes : heap);
    report_str(b, whole ? "</malloc>\n" : "</heap>\n");
  }
  report_flush(b);
}

void stats_fork_prepare(void) {
  lock_acquire(&stats_lock);
}
void stats_fork_parent(void) {
  lock_release(&stats_lock);
}
/* The parent's area is shared with the child: the child lets go of it and makes its own. */
void stats_fork_child(void) {
  lock_init(&stats_lock);
  if (stats_area) {
    os_unmap_file(stats_area, STATS_AREA_SIZE); /* like a file's: not counted as heap */
    os_close(stats_area_fd);
    stats_area = NULL;
    stats_area_fd = -1;
  }
  stats_published = 0;
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
