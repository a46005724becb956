/* report: the text and JSON reports, and the number formatting they use. The text report is for
 * people: counts with thousands separators, bytes in binary units with the exact count beside
 * them, and the busiest size classes. The JSON report is for programs: the library's own object
 * passed through unchanged, with the tool's keys (peak RSS, exit status, child processes) added
 * before its closing brace. A missing or unreadable stats file is reported in plain words; peak
 * RSS comes from wait4 and is reported either way. */
#include "report.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "stats.h"
#include "tmpdir.h"
#include "tool.h"

/* How many size classes the text report lists. */
#define TOP_CLASSES 5

/* Writes v with thousands separators ("1,234,567") into buf; returns buf. */
static char *fmt_count(uint64_t v, char *buf, size_t cap) {
  char digits[32];
  int n = snprintf(digits, sizeof digits, "%llu", (unsigned long long)v);
  size_t o = 0;
  for (int i = 0; i < n && o + 2 < cap; i++) {
    if (i > 0 && (n - i) % 3 == 0) buf[o++] = ',';
    buf[o++] = digits[i];
  }
  buf[o] = '\0';
  return buf;
}

/* Writes a byte count in binary units ("512 B", "1.5 KiB", "3.2 MiB") into buf; returns buf. */
char *fmt_bytes(uint64_t v, char *buf, size_t cap) {
  static const char *const units[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (v < 1024) {
    snprintf(buf, cap, "%llu B", (unsigned long long)v);
    return buf;
  }
  double x = (double)v / 1024.0;
  size_t u = 0;
  /* 1023.95 and up would print as "1024.0": move to the next unit instead. */
  while (x >= 1023.95 && u + 1 < sizeof units / sizeof units[0]) {
    x /= 1024.0;
    u++;
  }
  snprintf(buf, cap, "%.1f %s", x, units[u]);
  return buf;
}

/* Why there are no statistics, in plain words; the text fills "no statistics: %s". */
static void missing_reason(const run_result_t *r, int file_errno, char *buf, size_t cap) {
  if (r->exec_errno)
    snprintf(buf, cap, "%s could not be run (%s)", r->program, strerror(r->exec_errno));
  else if (WIFSIGNALED(r->wait_status))
    snprintf(buf, cap, "%s was killed by signal %d (%s) before it could write them", r->program,
             WTERMSIG(r->wait_status), strsignal(WTERMSIG(r->wait_status)));
  else if (file_errno == ENOENT)
    snprintf(buf, cap,
             "%s wrote none: it ended without running exit handlers (_exit?), "
             "or did not load " LIBRARY_NAME " (a setuid or static program?)",
             r->program);
  else
    snprintf(buf, cap, "cannot read the statistics file: %s", strerror(file_errno));
}

static void describe_exit(const run_result_t *r, char *buf, size_t cap) {
  if (r->exec_errno)
    snprintf(buf, cap, "could not be run, status %d", r->exit_status);
  else if (WIFSIGNALED(r->wait_status))
    snprintf(buf, cap, "killed by signal %d (%s), status %d", WTERMSIG(r->wait_status),
             strsignal(WTERMSIG(r->wait_status)), r->exit_status);
  else
    snprintf(buf, cap, "exited with status %d", r->exit_status);
}

/* One line of the text report: a label, then the value in a right-aligned column. */
static void report_line(const char *label, const char *value, const char *exact) {
  if (exact && *exact)
    fprintf(stderr, "  %-20s %12s  (%s)\n", label, value, exact);
  else
    fprintf(stderr, "  %-20s %12s\n", label, value);
}

static void report_count(const stats_t *st, unsigned bit, const char *label, uint64_t v) {
  char b[40];
  report_line(label, (st->seen & bit) ? fmt_count(v, b, sizeof b) : "n/a", NULL);
}

static void report_bytes(const stats_t *st, unsigned bit, const char *label, uint64_t v) {
  char h[40], b[40];
  if (!(st->seen & bit))
    report_line(label, "n/a", NULL);
  else
    report_line(label, fmt_bytes(v, h, sizeof h), v >= 1024 ? fmt_count(v, b, sizeof b) : NULL);
}

static int by_allocs_desc(const void *a, const void *b) {
  const class_stat_t *x = a, *y = b;
  if (x->allocs != y->allocs) return x->allocs > y->allocs ? -1 : 1;
  return (x->size > y->size) - (x->size < y->size);
}

static void report_children(size_t children) {
  if (children == 1)
    fputs("  1 child process also ran under magpie (its figures are not included)\n", stderr);
  else if (children > 1)
    fprintf(stderr,
            "  %zu child processes also ran under magpie (their figures are not included)\n",
            children);
}

static void report_text(const run_result_t *r, const stats_t *st, const char *missing) {
  char how[160], h[40], b[40];
  describe_exit(r, how, sizeof how);
  fprintf(stderr, "\n== magpie: %s (pid %d) %s\n", r->program, (int)r->pid, how);
  if (missing) {
    fprintf(stderr, "  no statistics: %s\n", missing);
    if (r->exec_errno)
      return; /* the figures would be magpie's own, between fork and the failed exec */
    report_line("peak RSS", fmt_bytes(r->peak_rss, h, sizeof h),
                r->peak_rss >= 1024 ? fmt_count(r->peak_rss, b, sizeof b) : NULL);
    report_children(r->children);
    return;
  }
  report_count(st, SEEN_ALLOCS, "allocations", st->allocs);
  report_count(st, SEEN_FREES, "frees", st->frees);
  report_bytes(st, SEEN_REQUESTED, "bytes requested", st->bytes_requested);
  report_bytes(st, SEEN_PEAK_LIVE, "peak live bytes", st->peak_live_bytes);
  report_line("peak RSS", fmt_bytes(r->peak_rss, h, sizeof h),
              r->peak_rss >= 1024 ? fmt_count(r->peak_rss, b, sizeof b) : NULL);
  report_bytes(st, SEEN_PEAK_MAPPED, "peak mapped bytes", st->peak_mapped_bytes);
  if (st->nclasses > 0) {
    size_t n = st->nclasses < TOP_CLASSES ? st->nclasses : TOP_CLASSES;
    char sz[40], a[40], f[40];
    qsort(st->classes, st->nclasses, sizeof st->classes[0], by_allocs_desc);
    fprintf(stderr, "  busiest size classes (%zu of %zu used, by allocations):\n", n, st->nclasses);
    fprintf(stderr, "    %12s %14s %14s\n", "class size", "allocs", "frees");
    for (size_t i = 0; i < n; i++)
      fprintf(stderr, "    %12s %14s %14s\n", fmt_count(st->classes[i].size, sz, sizeof sz),
              fmt_count(st->classes[i].allocs, a, sizeof a),
              fmt_count(st->classes[i].frees, f, sizeof f));
  } else if (st->seen & SEEN_CLASSES) {
    fputs("  no size class was used\n", stderr);
  }
  if ((st->seen & SEEN_LARGE) && (st->large_allocs || st->large_frees)) {
    char a[40], f[40];
    fprintf(stderr, "  large allocations: %s allocs, %s frees\n",
            fmt_count(st->large_allocs, a, sizeof a), fmt_count(st->large_frees, f, sizeof f));
  }
  if (st->seen & SEEN_HUGEPAGES) {
    char exact[160];
    snprintf(exact, sizeof exact, "hugepages=%s, kernel THP %s; of %s in slab huge pages",
             st->hp_mode, st->hp_thp, fmt_bytes(st->hp_slab_bytes, b, sizeof b));
    report_line("on huge pages", fmt_bytes(st->hp_huge_bytes, h, sizeof h), exact);
    snprintf(exact, sizeof exact, "%s collapses, %s subreleases",
             fmt_count(st->hp_collapses, h, sizeof h), fmt_count(st->hp_subreleases, b, sizeof b));
    report_line("huge page work", "", exact);
  }
  if (st->version != 1)
    fprintf(stderr, "  (stats format %llu; this magpie knows format 1)\n",
            (unsigned long long)st->version);
  report_children(r->children);
}

/* Writes s as a JSON string. */
static void json_string(FILE *out, const char *s) {
  fputc('"', out);
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\')
      fprintf(out, "\\%c", c);
    else if (c < 0x20)
      fprintf(out, "\\u%04x", c);
    else
      fputc(c, out);
  }
  fputc('"', out);
}

static void json_tail(FILE *out, const run_result_t *r) {
  fprintf(out, "\"peak_rss_bytes\":%llu,\"exit_status\":%d,\"child_processes\":%zu",
          (unsigned long long)r->peak_rss, r->exit_status, r->children);
}

/* The library's object with our keys added before its closing brace, or, without one, an object
 * holding "error" and our keys. */
static void report_json(const run_result_t *r, const char *text, const stats_t *st,
                        const char *missing) {
  if (missing) {
    fputs("{\"error\":", stderr);
    json_string(stderr, missing);
    fputc(',', stderr);
    json_tail(stderr, r);
    fputs("}\n", stderr);
    return;
  }
  fwrite(text, 1, st->close, stderr);
  if (st->nmembers > 0) fputc(',', stderr);
  json_tail(stderr, r);
  fputs("}\n", stderr);
}

void report_stats(const run_result_t *r, const char *stats_dir, int json) {
  char path[PATH_MAX + 32], why[PATH_MAX + 256];
  const char *missing = NULL;
  size_t len = 0;
  char *text = NULL;
  stats_t st;
  memset(&st, 0, sizeof st);
  snprintf(path, sizeof path, "%s/" STATS_PREFIX "%d", stats_dir, (int)r->pid);
  if (r->exec_errno) {
    missing_reason(r, 0, why, sizeof why);
    missing = why;
  } else if ((text = stats_read_file(path, &len)) == NULL) {
    missing_reason(r, errno, why, sizeof why);
    missing = why;
  } else {
    const char *bad;
    size_t at;
    if (stats_parse(text, len, &st, &bad, &at) < 0) {
      if (at == SIZE_MAX)
        snprintf(why, sizeof why, "cannot understand the statistics file: %s", bad);
      else
        snprintf(why, sizeof why, "cannot understand the statistics file: %s at byte %zu of %zu",
                 bad, at, len);
      missing = why;
    }
  }
  if (json)
    report_json(r, text, &st, missing);
  else
    report_text(r, &st, missing);
  fflush(stderr);
  free(st.classes);
  free(text);
}
