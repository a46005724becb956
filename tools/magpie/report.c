/* report: the text and JSON reports, and the number formatting they use. The text report is for
 * people: the library's own text report (counts with thousands separators, bytes in binary
 * units with the exact count beside them, the busiest size classes, the most contended locks)
 * under the tool's heading, with peak RSS added. The JSON report is for programs: the library's own
 * object passed through unchanged, with the tool's keys (peak RSS, exit status, child processes)
 * added before its closing brace. A missing or unreadable stats file is reported in plain words;
 * peak RSS comes from wait4 and is reported either way. */
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

char *fmt_count(uint64_t v, char *buf, size_t cap) {
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

/* One line of the text report: a label, then the value in a right-aligned column (the
 * library's layout). */
static void report_line(const char *label, const char *value, const char *exact) {
  if (exact && *exact)
    fprintf(stderr, "  %-20s%13s  (%s)\n", label, value, exact);
  else
    fprintf(stderr, "  %-20s%13s\n", label, value);
}

static void report_children(size_t children) {
  if (children == 1)
    fputs("  1 child process also ran under magpie (its figures are not included)\n", stderr);
  else if (children > 1)
    fprintf(stderr,
            "  %zu child processes also ran under magpie (their figures are not included)\n",
            children);
}

/* The library's own text report (MAGPIE_OPTIONS=stats=text: one format for both) under the
 * tool's heading, which replaces the library's first line, then what only the tool knows. */
static void report_text(const run_result_t *r, const char *text, const char *missing) {
  char how[160], h[40], b[40];
  describe_exit(r, how, sizeof how);
  fprintf(stderr, "\n== magpie: %s (pid %d) %s\n", r->program, (int)r->pid, how);
  if (missing) {
    fprintf(stderr, "  no statistics: %s\n", missing);
    if (r->exec_errno) return; /* the figures would be magpie's own, between fork and exec */
  } else {
    const char *body = strncmp(text, "== magpie", 9) == 0 ? strchr(text, '\n') : NULL;
    fputs(body ? body + 1 : text, stderr);
  }
  report_line("peak RSS", fmt_bytes(r->peak_rss, h, sizeof h),
              r->peak_rss >= 1024 ? fmt_count(r->peak_rss, b, sizeof b) : NULL);
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
  } else if (json) {
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
    report_text(r, text, missing);
  fflush(stderr);
  free(text);
}
