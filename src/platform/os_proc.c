/*
 * os_proc: what /proc says of this process (or another): its mappings, its huge pages, its RSS.
 *
 * Theory
 *   1. /proc files are read through a fixed buffer on the stack, a line at a time (os_each_line),
 *      with the raw system calls of os_file.c: no allocation, no cancellation point.
 *   2. A mapping is a line of /proc/PID/maps; huge pages are counted from /proc/self/smaps, per
 *      mapping, asking the caller which mappings are its own only where there are some.
 * Nothing here allocates or takes a lock of magpie's.
 */
#define _GNU_SOURCE
#include "os.h"
#include "os_impl.h"

#include <fcntl.h>
#include <string.h>

static uintptr_t parse_hex(const char **s) {
  uintptr_t v = 0;
  for (;; (*s)++) {
    char c = **s;
    if (c >= '0' && c <= '9')
      v = v * 16 + (uintptr_t)(c - '0');
    else if (c >= 'a' && c <= 'f')
      v = v * 16 + (uintptr_t)(c - 'a' + 10);
    else
      return v;
  }
}

/* "/proc/PID/FILE", or "/proc/self/FILE" for pid 0. */
void os_proc_path(char *path, int pid, const char *file) {
  char digits[16];
  size_t n = 0;
  strcpy(path, "/proc/");
  if (pid <= 0) {
    strcat(path, "self");
  } else {
    for (unsigned v = (unsigned)pid; v; v /= 10)
      digits[n++] = (char)('0' + v % 10);
    size_t at = strlen(path);
    while (n)
      path[at++] = digits[--n];
    path[at] = '\0';
  }
  strcat(path, "/");
  strcat(path, file);
}

/* Calls fn on each line of a /proc file (NUL-terminated, without its newline), read through a
   fixed buffer; a line longer than the buffer is dropped. */
static void os_each_line(const char *path, void (*fn)(const char *line, void *arg), void *arg) {
  int fd = os_open(path, O_RDONLY, 0);
  if (fd < 0) return;
  char buf[4096];
  size_t have = 0;
  for (;;) {
    ssize_t n = os_read(fd, buf + have, sizeof buf - 1 - have);
    if (n <= 0) break;
    have += (size_t)n;
    buf[have] = '\0';
    char *line = buf, *nl;
    while ((nl = strchr(line, '\n')) != NULL) {
      *nl = '\0';
      fn(line, arg);
      line = nl + 1;
    }
    have -= (size_t)(line - buf);
    memmove(buf, line, have);
    if (have == sizeof buf - 1) have = 0;
  }
  os_close(fd);
}

typedef struct os_maps_walk {
  os_maps_fn *fn;
  void *ctx;
} os_maps_walk_t;

/* A maps line "lo-hi rest" to fn(ctx, lo, hi, rest). */
static void os_maps_line(const char *line, void *arg) {
  os_maps_walk_t *w = arg;
  const char *s = line;
  uintptr_t lo = parse_hex(&s), hi = 0;
  if (*s == '-') s++, hi = parse_hex(&s);
  while (*s == ' ')
    s++;
  w->fn(w->ctx, lo, hi, s);
}

void os_maps_each(int pid, os_maps_fn *fn, void *ctx) {
  char path[48];
  os_proc_path(path, pid, "maps");
  os_maps_walk_t w = {fn, ctx};
  os_each_line(path, os_maps_line, &w);
}

typedef struct mappings_query {
  const uintptr_t *addr;
  size_t count;
  uintptr_t *lo, *hi;
} mappings_query_t;

static void mappings_step(void *ctx, uintptr_t lo, uintptr_t hi, const char *rest) {
  mappings_query_t *q = ctx;
  (void)rest;
  for (size_t i = 0; i < q->count; i++)
    if (q->addr[i] >= lo && q->addr[i] < hi) {
      q->lo[i] = lo;
      q->hi[i] = hi;
    }
}

void os_mappings(const uintptr_t *addr, size_t count, uintptr_t *lo_out, uintptr_t *hi_out) {
  for (size_t i = 0; i < count; i++)
    lo_out[i] = hi_out[i] = 0;
  mappings_query_t q = {addr, count, lo_out, hi_out};
  os_maps_each(0, mappings_step, &q);
}

typedef struct os_huge_query {
  bool (*mine)(uintptr_t lo, uintptr_t hi);
  uintptr_t lo, hi; /* the mapping whose fields follow */
  int mine_here;    /* -1: not asked yet (mine is asked only of mappings with huge pages) */
  size_t bytes;
} os_huge_query_t;

static bool os_field(const char **s, const char *name) {
  size_t n = strlen(name);
  if (strncmp(*s, name, n) != 0) return false;
  *s += n;
  while (**s == ' ')
    (*s)++;
  return true;
}

static void os_huge_line(const char *line, void *arg) {
  os_huge_query_t *q = arg;
  const char *s = line;
  uintptr_t lo = parse_hex(&s);
  if (*s == '-' && s > line) { /* a mapping's header: "lo-hi perms ..." */
    s++;
    q->lo = lo;
    q->hi = parse_hex(&s);
    q->mine_here = -1;
    return;
  }
  s = line;
  if (!os_field(&s, "AnonHugePages:") && !os_field(&s, "Private_Hugetlb:") &&
      !os_field(&s, "Shared_Hugetlb:"))
    return;
  size_t kib = (size_t)os_parse_ulong(&s);
  if (kib && q->mine_here < 0) q->mine_here = q->mine(q->lo, q->hi);
  if (kib && q->mine_here) q->bytes += kib << 10;
}

size_t os_huge_bytes(bool (*mine)(uintptr_t lo, uintptr_t hi)) {
  os_huge_query_t q = {mine, 0, 0, -1, 0};
  os_each_line("/proc/self/smaps", os_huge_line, &q);
  return q.bytes;
}

size_t os_rss_bytes(void) {
  char buf[128];
  if (os_read_file("/proc/self/statm", buf, sizeof buf) <= 0) return 0;
  const char *s = buf;
  os_parse_ulong(&s);
  s++;
  return os_parse_ulong(&s) * OS_PAGE;
}
