/* stats: parsing the library's JSON statistics into stats_t, with the scanner of json.c. The
 * top-level counters are listed once in a table (key, seen bit, field), so adding one is one
 * line; "classes" and "large" have their own readers. A file without the "magpie" version key
 * is rejected: it is some other JSON, not the library's. */
#include "stats.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "json.h"

/* The largest stats file read; a real one is a few KiB (one line per size class used). */
#define STATS_MAX_BYTES (16u << 20)

/* One named counter: the key, the bit recorded when it is seen, where its value goes. */
typedef struct {
  const char *key;
  unsigned bit;
  size_t offset;
} counter_t;

#define COUNTER(key, bit, field)                                                                   \
  { key, bit, offsetof(stats_t, field) }
static const counter_t counters[] = {
    COUNTER("magpie", SEEN_VERSION, version),
    COUNTER("pid", SEEN_PID, pid),
    COUNTER("allocs", SEEN_ALLOCS, allocs),
    COUNTER("frees", SEEN_FREES, frees),
    COUNTER("bytes_requested", SEEN_REQUESTED, bytes_requested),
    COUNTER("live_bytes", SEEN_LIVE, live_bytes),
    COUNTER("peak_live_bytes", SEEN_PEAK_LIVE, peak_live_bytes),
    COUNTER("mapped_bytes", SEEN_MAPPED, mapped_bytes),
    COUNTER("peak_mapped_bytes", SEEN_PEAK_MAPPED, peak_mapped_bytes),
};

static int class_member(scan_t *s, const char *key, void *ctx) {
  class_stat_t *c = ctx;
  if (strcmp(key, "class") == 0) return scan_u64(s, &c->index);
  if (strcmp(key, "size") == 0) return scan_u64(s, &c->size);
  if (strcmp(key, "allocs") == 0) return scan_u64(s, &c->allocs);
  if (strcmp(key, "frees") == 0) return scan_u64(s, &c->frees);
  return scan_skip_value(s, 2);
}

static int class_element(scan_t *s, void *ctx) {
  stats_t *st = ctx;
  class_stat_t c = {0, 0, 0, 0};
  if (scan_object(s, 2, class_member, &c, NULL, NULL) < 0) return -1;
  if (st->nclasses == st->cap) {
    size_t cap = st->cap ? st->cap * 2 : 64;
    class_stat_t *grown = realloc(st->classes, cap * sizeof *grown);
    if (!grown) return scan_fail(s, "out of memory");
    st->classes = grown;
    st->cap = cap;
  }
  st->classes[st->nclasses++] = c;
  return 0;
}

static int large_member(scan_t *s, const char *key, void *ctx) {
  stats_t *st = ctx;
  if (strcmp(key, "allocs") == 0) return scan_u64(s, &st->large_allocs);
  if (strcmp(key, "frees") == 0) return scan_u64(s, &st->large_frees);
  return scan_skip_value(s, 2);
}

static int hugepages_member(scan_t *s, const char *key, void *ctx) {
  stats_t *st = ctx;
  if (strcmp(key, "mode") == 0) return scan_string(s, st->hp_mode, sizeof st->hp_mode);
  if (strcmp(key, "thp") == 0) return scan_string(s, st->hp_thp, sizeof st->hp_thp);
  if (strcmp(key, "huge_bytes") == 0) return scan_u64(s, &st->hp_huge_bytes);
  if (strcmp(key, "slab_bytes") == 0) return scan_u64(s, &st->hp_slab_bytes);
  if (strcmp(key, "collapses") == 0) return scan_u64(s, &st->hp_collapses);
  if (strcmp(key, "subreleases") == 0) return scan_u64(s, &st->hp_subreleases);
  return scan_skip_value(s, 2);
}

static int top_member(scan_t *s, const char *key, void *ctx) {
  stats_t *st = ctx;
  for (size_t i = 0; i < sizeof counters / sizeof counters[0]; i++) {
    if (strcmp(key, counters[i].key) == 0) {
      st->seen |= counters[i].bit;
      return scan_u64(s, (uint64_t *)((char *)st + counters[i].offset));
    }
  }
  if (strcmp(key, "classes") == 0) {
    st->seen |= SEEN_CLASSES;
    st->nclasses = 0; /* a repeated key replaces the earlier one */
    return scan_array(s, 1, class_element, st);
  }
  if (strcmp(key, "large") == 0) {
    st->seen |= SEEN_LARGE;
    return scan_object(s, 1, large_member, st, NULL, NULL);
  }
  if (strcmp(key, "hugepages") == 0) {
    st->seen |= SEEN_HUGEPAGES;
    return scan_object(s, 1, hugepages_member, st, NULL, NULL);
  }
  return scan_skip_value(s, 1);
}

int stats_parse(const char *text, size_t len, stats_t *st, const char **why, size_t *where) {
  scan_t s = {text, text, text + len, NULL};
  memset(st, 0, sizeof *st);
  if (scan_object(&s, 0, top_member, st, &st->nmembers, &st->close) == 0) {
    scan_ws(&s);
    if (s.p != s.end) scan_fail(&s, "text after the object");
  }
  if (s.err) {
    *why = s.err;
    *where = (size_t)(s.p - s.base);
    return -1;
  }
  if (!(st->seen & SEEN_VERSION)) {
    *why = "no \"magpie\" key: not a magpie stats file";
    *where = SIZE_MAX;
    return -1;
  }
  return 0;
}

char *stats_read_file(const char *path, size_t *len) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return NULL;
  size_t cap = 4096, n = 0;
  char *buf = malloc(cap);
  while (buf) {
    if (n + 1 == cap) {
      char *grown = cap < STATS_MAX_BYTES ? realloc(buf, cap * 2) : NULL;
      if (!grown) {
        free(buf);
        buf = NULL;
        errno = cap < STATS_MAX_BYTES ? ENOMEM : EFBIG;
        break;
      }
      buf = grown;
      cap *= 2;
    }
    ssize_t r = read(fd, buf + n, cap - 1 - n);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      int e = errno;
      free(buf);
      buf = NULL;
      errno = e;
      break;
    }
    if (r == 0) {
      buf[n] = '\0';
      *len = n;
      break;
    }
    n += (size_t)r;
  }
  int e = errno;
  close(fd);
  errno = e;
  return buf;
}
