/* stats: checking the library's JSON statistics before the tool adds its own keys to them, with
 * the scanner of json.c. The tool prints the library's report as it is (the text one, or the
 * JSON object with peak RSS, exit status and child processes added before its closing brace),
 * so it keeps only where that brace is, how many members precede it, and whether the object is
 * the library's: a file without the "magpie" version key is some other JSON and is rejected. */
#include "stats.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "json.h"

/* The largest stats file read; a real one is a few KiB (one line per size class used). */
#define STATS_MAX_BYTES (16u << 20)

static int top_member(scan_t *s, const char *key, void *ctx) {
  stats_t *st = ctx;
  if (strcmp(key, "magpie") == 0) {
    st->magpie = true;
    uint64_t version;
    return scan_u64(s, &version);
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
  if (!st->magpie) {
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
