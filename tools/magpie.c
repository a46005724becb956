/*
 * magpie: the command-line front end. `magpie run [--stats] [--json] [--] PROGRAM ARGS...` runs
 * PROGRAM with libmagpie.so preloaded and, with --stats, reports what the allocator saw.
 *
 * Theory
 * 1. Finding the library. The library sits beside this executable (both are built into the build
 *    directory, and installed side by side). /proc/self/exe gives the real path of this program,
 *    symlinks resolved; the library path is its directory plus "/libmagpie.so". It is put in front
 *    of any LD_PRELOAD the user already set, so it interposes before the other preloads.
 * 2. Collecting statistics. The library reads MAGPIE_OPTIONS. With --stats the tool appends
 *    "stats=json,stats_file=DIR/stats.%p" (DIR a fresh mkdtemp directory) after the user's own
 *    options, so the tool's settings come last, and the library keeps the last value of an
 *    option, so they win. At exit every process running the library writes one JSON object to
 *    DIR/stats.<its pid>. The tool reads the file of its direct child and only counts the others
 *    (the program's own children); it sums nothing across processes.
 * 3. Running the program. fork, then execvp in the child. The child reports an exec failure to
 *    the parent through a close-on-exec pipe (one errno value; end of file means exec succeeded),
 *    so "not found" is told apart from a program that itself exits 127. While the program runs
 *    the tool ignores SIGINT and SIGQUIT (the terminal sends them to the program too, and the tool
 *    must outlive it to report) and forwards SIGTERM and SIGHUP sent to the tool alone.
 * 4. Exit status. The tool exits with the program's exit code, or 128+N if signal N killed it,
 *    like a shell. Its own failures use the conventions of env(1) and the shells: 2 usage error,
 *    125 the tool failed, 126 the program could not be executed, 127 the program was not found.
 * 5. Reading the statistics. A small hand-written JSON scanner (no libraries): it understands the
 *    whole JSON grammar well enough to skip any value, and keeps only the keys it knows, so keys
 *    the library adds later are ignored. A missing or unreadable file is reported in plain words;
 *    peak RSS comes from wait4 and is reported either way. The temporary directory is removed
 *    before the tool exits.
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef MAGPIE_VERSION
#define MAGPIE_VERSION "0.1.0"
#endif

/* Exit statuses of the tool's own failures (see theory, 4). */
#define EXIT_USAGE 2
#define EXIT_TOOL_FAILED 125
#define EXIT_CANNOT_EXEC 126
#define EXIT_NOT_FOUND 127

#define LIBRARY_NAME "libmagpie.so"
/* The library's stats files are named STATS_PREFIX<pid> inside the temporary directory. */
#define STATS_PREFIX "stats."
/* The longest stats_file value the tool hands the library, whose option buffer holds 255 bytes;
 * a longer TMPDIR falls back to /tmp. */
#define STATS_PATH_MAX 200
#define STATS_DIR_NAME "magpie-stats.XXXXXX"
/* The largest stats file read; a real one is a few KiB (one line per size class used). */
#define STATS_MAX_BYTES (16u << 20)
/* How deep the scanner follows nested arrays and objects when skipping unknown values. */
#define JSON_MAX_DEPTH 64
/* How many size classes the text report lists. */
#define TOP_CLASSES 5

static const char usage_text[] =
    "Usage: magpie run [--stats] [--json] [--] PROGRAM [ARGS...]\n"
    "       magpie version\n"
    "       magpie --help\n"
    "\n"
    "magpie run starts PROGRAM with the magpie allocator (" LIBRARY_NAME ", found beside\n"
    "this executable) preloaded in place of the system malloc, waits for it, and exits\n"
    "with its exit status (128+N if signal N killed it).\n"
    "\n"
    "Options of run:\n"
    "  --stats     when PROGRAM ends, print a report on stderr: allocations, frees,\n"
    "              bytes requested, peak live bytes, peak RSS, peak mapped bytes and\n"
    "              the busiest size classes\n"
    "  --json      print the report as one JSON object instead (implies --stats)\n"
    "  --          end of options; what follows is PROGRAM and its arguments\n"
    "  -h, --help  show this help\n"
    "\n"
    "Environment:\n"
    "  MAGPIE_OPTIONS  allocator options (name=value,...), passed on to PROGRAM\n"
    "  LD_PRELOAD      kept; " LIBRARY_NAME " is put in front of it\n"
    "\n"
    "Exit status: PROGRAM's; 2 usage error; 125 magpie itself failed;\n"
    "126 PROGRAM could not be executed; 127 PROGRAM was not found.\n"
    "\n"
    "Example:\n"
    "  magpie run --stats -- python3 -c 'print(len([str(i) for i in range(10**6)]))'\n";

static void usage(FILE *out) {
  fputs(usage_text, out);
}

static void error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("magpie: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}

static int usage_error(const char *fmt, const char *what) __attribute__((format(printf, 1, 0)));
static int usage_error(const char *fmt, const char *what) {
  fputs("magpie: ", stderr);
  fprintf(stderr, fmt, what);
  fputs("\nTry 'magpie --help' for usage.\n", stderr);
  return EXIT_USAGE;
}

/* ---- Number formatting ---------------------------------------------------------------------- */

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
static char *fmt_bytes(uint64_t v, char *buf, size_t cap) {
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

/* ---- The JSON scanner --------------------------------------------------------------------------
 * Walks a buffer that holds one JSON value. Each function returns 0 on success, -1 on a syntax
 * error, with s->err saying what was wrong and s->p where. */

typedef struct {
  const char *base; /* start of the text, for error offsets */
  const char *p;    /* next character to read */
  const char *end;  /* one past the last character */
  const char *err;  /* first error met, or NULL */
} scan_t;

static int scan_fail(scan_t *s, const char *what) {
  if (!s->err) s->err = what;
  return -1;
}

static void scan_ws(scan_t *s) {
  while (s->p < s->end && (*s->p == ' ' || *s->p == '\t' || *s->p == '\n' || *s->p == '\r'))
    s->p++;
}

/* Skips white space, then consumes c if it is next; returns 1 if it was. */
static int scan_take(scan_t *s, char c) {
  scan_ws(s);
  if (s->p < s->end && *s->p == c) {
    s->p++;
    return 1;
  }
  return 0;
}

/* Reads a string into out (truncated to cap-1 bytes; escapes other than \uXXXX decoded,
 * \uXXXX kept as '?'), or only skips it when out is NULL. */
static int scan_string(scan_t *s, char *out, size_t cap) {
  size_t o = 0;
  if (!scan_take(s, '"')) return scan_fail(s, "expected a string");
  while (s->p < s->end) {
    unsigned char c = (unsigned char)*s->p++;
    if (c == '"') {
      if (out) out[o] = '\0';
      return 0;
    }
    if (c < 0x20) return scan_fail(s, "control character in string");
    if (c == '\\') {
      if (s->p >= s->end) break;
      c = (unsigned char)*s->p++;
      switch (c) {
      case '"':
      case '\\':
      case '/':
        break;
      case 'b':
        c = '\b';
        break;
      case 'f':
        c = '\f';
        break;
      case 'n':
        c = '\n';
        break;
      case 'r':
        c = '\r';
        break;
      case 't':
        c = '\t';
        break;
      case 'u':
        for (int i = 0; i < 4; i++, s->p++) {
          if (s->p >= s->end || !isxdigit((unsigned char)*s->p))
            return scan_fail(s, "bad \\u escape in string");
        }
        c = '?';
        break;
      default:
        return scan_fail(s, "bad escape in string");
      }
    }
    if (out && o + 1 < cap) out[o++] = (char)c;
  }
  return scan_fail(s, "unterminated string");
}

/* Reads a non-negative integer that fits in 64 bits. */
static int scan_u64(scan_t *s, uint64_t *out) {
  uint64_t v = 0;
  scan_ws(s);
  const char *start = s->p;
  while (s->p < s->end && *s->p >= '0' && *s->p <= '9') {
    unsigned d = (unsigned)(*s->p - '0');
    if (v > (UINT64_MAX - d) / 10) return scan_fail(s, "number too large");
    v = v * 10 + d;
    s->p++;
  }
  if (s->p == start) return scan_fail(s, "expected a non-negative integer");
  if (s->p < s->end && (*s->p == '.' || *s->p == 'e' || *s->p == 'E'))
    return scan_fail(s, "expected an integer, found a fraction");
  if (s->p - start > 1 && *start == '0') return scan_fail(s, "leading zero in number");
  *out = v;
  return 0;
}

/* Skips any JSON number: -?int frac? exp? */
static int scan_skip_number(scan_t *s) {
  const char *start = s->p;
  if (s->p < s->end && *s->p == '-') s->p++;
  size_t digits = 0;
  while (s->p < s->end && (isdigit((unsigned char)*s->p) || *s->p == '.' || *s->p == 'e' ||
                           *s->p == 'E' || *s->p == '+' || *s->p == '-')) {
    digits += *s->p >= '0' && *s->p <= '9';
    s->p++;
  }
  if (digits == 0) {
    s->p = start;
    return scan_fail(s, "expected a value");
  }
  return 0;
}

static int scan_skip_value(scan_t *s, int depth);

typedef int member_fn(scan_t *s, const char *key, void *ctx);

/* Reads an object, calling fn for each member with s positioned at the value; fn must consume the
 * value. *count, if given, receives the number of members and *close the offset of the '}'. */
static int scan_object(scan_t *s, int depth, member_fn *fn, void *ctx, size_t *count,
                       size_t *close) {
  char key[64];
  size_t n = 0;
  if (depth > JSON_MAX_DEPTH) return scan_fail(s, "values nested too deeply");
  if (!scan_take(s, '{')) return scan_fail(s, "expected an object");
  if (!scan_take(s, '}')) {
    do {
      if (scan_string(s, key, sizeof key) < 0) return -1;
      if (!scan_take(s, ':')) return scan_fail(s, "expected ':' after a key");
      if ((fn ? fn(s, key, ctx) : scan_skip_value(s, depth + 1)) < 0) return -1;
      n++;
    } while (scan_take(s, ','));
    if (!scan_take(s, '}')) return scan_fail(s, "expected ',' or '}' in an object");
  }
  if (count) *count = n;
  if (close) *close = (size_t)(s->p - 1 - s->base);
  return 0;
}

/* Reads an array, calling fn (if given) for each element, else skipping the elements. */
typedef int element_fn(scan_t *s, void *ctx);
static int scan_array(scan_t *s, int depth, element_fn *fn, void *ctx) {
  if (depth > JSON_MAX_DEPTH) return scan_fail(s, "values nested too deeply");
  if (!scan_take(s, '[')) return scan_fail(s, "expected an array");
  if (scan_take(s, ']')) return 0;
  do {
    if ((fn ? fn(s, ctx) : scan_skip_value(s, depth + 1)) < 0) return -1;
  } while (scan_take(s, ','));
  if (!scan_take(s, ']')) return scan_fail(s, "expected ',' or ']' in an array");
  return 0;
}

static int scan_word(scan_t *s, const char *word) {
  size_t n = strlen(word);
  if ((size_t)(s->end - s->p) < n || memcmp(s->p, word, n) != 0)
    return scan_fail(s, "expected a value");
  s->p += n;
  return 0;
}

static int scan_skip_value(scan_t *s, int depth) {
  scan_ws(s);
  if (s->p >= s->end) return scan_fail(s, "unexpected end of text");
  switch (*s->p) {
  case '{':
    return scan_object(s, depth, NULL, NULL, NULL, NULL);
  case '[':
    return scan_array(s, depth, NULL, NULL);
  case '"':
    return scan_string(s, NULL, 0);
  case 't':
    return scan_word(s, "true");
  case 'f':
    return scan_word(s, "false");
  case 'n':
    return scan_word(s, "null");
  default:
    return scan_skip_number(s);
  }
}

/* ---- The library's statistics ------------------------------------------------------------------
 */

typedef struct {
  uint64_t index;  /* "class": the size class number */
  uint64_t size;   /* "size": the largest request it serves, in bytes */
  uint64_t allocs; /* "allocs" */
  uint64_t frees;  /* "frees" */
} class_stat_t;

/* Bits of stats_t.seen: which top-level keys the file held. */
enum {
  SEEN_VERSION = 1 << 0,
  SEEN_ALLOCS = 1 << 1,
  SEEN_FREES = 1 << 2,
  SEEN_REQUESTED = 1 << 3,
  SEEN_LIVE = 1 << 4,
  SEEN_PEAK_LIVE = 1 << 5,
  SEEN_MAPPED = 1 << 6,
  SEEN_PEAK_MAPPED = 1 << 7,
  SEEN_CLASSES = 1 << 8,
  SEEN_LARGE = 1 << 9,
  SEEN_PID = 1 << 10,
};

typedef struct {
  unsigned seen; /* SEEN_* bits */
  uint64_t version, pid, allocs, frees, bytes_requested, live_bytes, peak_live_bytes;
  uint64_t mapped_bytes, peak_mapped_bytes, large_allocs, large_frees;
  class_stat_t *classes; /* "classes", in file order; malloc'd */
  size_t nclasses, cap;
  size_t nmembers; /* members of the top-level object */
  size_t close;    /* offset of the top-level object's '}' */
} stats_t;

/* One named counter: the key, the bit recorded when it is seen, where its value goes. */
typedef struct {
  const char *key;
  unsigned bit;
  size_t offset;
} counter_t;

#define COUNTER(key, bit, field) {key, bit, offsetof(stats_t, field)}
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
  return scan_skip_value(s, 1);
}

/* Parses the text of a stats file into st; on failure returns -1 with *why and *where set. */
static int stats_parse(const char *text, size_t len, stats_t *st, const char **why, size_t *where) {
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

/* Reads a whole file into a malloc'd, NUL-terminated buffer; returns NULL with errno set. */
static char *read_file(const char *path, size_t *len) {
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

/* ---- The temporary directory -------------------------------------------------------------------
 */

/* Creates the directory the library writes into; returns 0, or -1 after reporting why. */
static int make_stats_dir(char *dir, size_t cap) {
  const char *tmp = getenv("TMPDIR");
  /* The path goes into MAGPIE_OPTIONS, where ',' and '=' separate options and '%' expands. */
  if (!tmp || tmp[0] != '/' || strpbrk(tmp, ",=%") ||
      strlen(tmp) + sizeof("/" STATS_DIR_NAME "/" STATS_PREFIX "%p") > STATS_PATH_MAX)
    tmp = "/tmp";
  if ((size_t)snprintf(dir, cap, "%s/" STATS_DIR_NAME, tmp) >= cap || !mkdtemp(dir)) {
    error("cannot create a temporary directory in %s: %s", tmp, strerror(errno));
    return -1;
  }
  return 0;
}

/* Counts the stats files in dir other than the one named own: the program's children's. */
static size_t count_other_stats(const char *dir, const char *own) {
  size_t others = 0;
  DIR *d = opendir(dir);
  if (d) {
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
      others += strncmp(e->d_name, STATS_PREFIX, strlen(STATS_PREFIX)) == 0 &&
                strcmp(e->d_name, own) != 0;
    closedir(d);
  }
  return others;
}

/* Removes everything dir holds, then dir. */
static void remove_stats_dir(const char *dir) {
  DIR *d = opendir(dir);
  if (d) {
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
      if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
        unlinkat(dirfd(d), e->d_name, 0);
    }
    closedir(d);
  }
  if (rmdir(dir) < 0) error("warning: could not remove %s: %s", dir, strerror(errno));
}

/* ---- Reports -----------------------------------------------------------------------------------
 */

typedef struct {
  const char *program; /* argv[0] of the program, for messages */
  pid_t pid;           /* the program's pid */
  int wait_status;     /* from wait4; meaningless when exec_errno != 0 */
  int exec_errno;      /* why exec failed, or 0 */
  int exit_status;     /* what the tool exits with */
  uint64_t peak_rss;   /* bytes, from ru_maxrss */
  size_t children;     /* other stats files: the program's children */
} run_result_t;

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

/* ---- Running the program -----------------------------------------------------------------------
 */

static volatile sig_atomic_t child_pid; /* the program, for the forwarding handler */

static void forward_signal(int sig) {
  if (child_pid > 0) kill((pid_t)child_pid, sig);
}

/* Finds LIBRARY_NAME beside this executable; returns 0, or -1 after reporting why. */
static int find_library(char *lib, size_t cap) {
  char exe[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n < 0) {
    error("cannot find this executable through /proc/self/exe: %s", strerror(errno));
    return -1;
  }
  exe[n] = '\0';
  char *slash = strrchr(exe, '/');
  if (slash) *slash = '\0';
  if ((size_t)snprintf(lib, cap, "%s/%s", exe, LIBRARY_NAME) >= cap) {
    error("path of %s too long", LIBRARY_NAME);
    return -1;
  }
  if (access(lib, R_OK) < 0) {
    error("cannot find the allocator library %s: %s (it must sit beside the magpie executable)",
          lib, strerror(errno));
    return -1;
  }
  /* ld.so splits LD_PRELOAD at spaces and colons. */
  if (strpbrk(lib, " :")) {
    error("the path %s holds a space or ':', which LD_PRELOAD cannot carry", lib);
    return -1;
  }
  return 0;
}

/* Sets name to value, or to value SEP old when name is already set and not empty; the first
 * argument order puts ours first (LD_PRELOAD), the second last (MAGPIE_OPTIONS). */
static int join_env(const char *name, const char *value, char sep, int ours_first) {
  const char *old = getenv(name);
  if (!old || !*old) return setenv(name, value, 1);
  size_t n = strlen(old) + strlen(value) + 2;
  char *joined = malloc(n);
  if (!joined) return -1;
  if (ours_first)
    snprintf(joined, n, "%s%c%s", value, sep, old);
  else
    snprintf(joined, n, "%s%c%s", old, sep, value);
  int rc = setenv(name, joined, 1);
  free(joined);
  return rc;
}

/* The child: set up the environment, exec, and report an exec failure on fd. */
static void run_child(char **argv, const char *lib, const char *stats_dir, const sigset_t *mask,
                      int fd) {
  int err = 0;
  sigprocmask(SIG_SETMASK, mask, NULL);
  if (join_env("LD_PRELOAD", lib, ':', 1) < 0) err = errno;
  if (!err && stats_dir) {
    char opts[PATH_MAX + 64];
    snprintf(opts, sizeof opts, "stats=json,stats_file=%s/" STATS_PREFIX "%%p", stats_dir);
    if (join_env("MAGPIE_OPTIONS", opts, ',', 0) < 0) err = errno;
  }
  if (!err) {
    execvp(argv[0], argv);
    err = errno;
  }
  while (write(fd, &err, sizeof err) < 0 && errno == EINTR) {
  }
  _exit(err == ENOENT ? EXIT_NOT_FOUND : EXIT_CANNOT_EXEC);
}

/* Runs argv to completion; fills r; returns 0, or -1 when the tool itself failed. */
static int run_program(char **argv, const char *lib, const char *stats_dir, run_result_t *r) {
  int pipefd[2];
  sigset_t forwarded, old_mask;
  struct sigaction ign = {0}, fwd = {0}, old_int, old_quit;

  if (pipe2(pipefd, O_CLOEXEC) < 0) {
    error("pipe: %s", strerror(errno));
    return -1;
  }
  sigemptyset(&forwarded);
  sigaddset(&forwarded, SIGTERM);
  sigaddset(&forwarded, SIGHUP);
  sigprocmask(SIG_BLOCK, &forwarded, &old_mask);
  fflush(NULL);
  pid_t pid = fork();
  if (pid < 0) {
    error("fork: %s", strerror(errno));
    sigprocmask(SIG_SETMASK, &old_mask, NULL);
    close(pipefd[0]);
    close(pipefd[1]);
    return -1;
  }
  if (pid == 0) {
    close(pipefd[0]);
    run_child(argv, lib, stats_dir, &old_mask, pipefd[1]);
  }
  close(pipefd[1]);
  r->pid = pid;
  child_pid = pid;
  ign.sa_handler = SIG_IGN;
  sigaction(SIGINT, &ign, &old_int);
  sigaction(SIGQUIT, &ign, &old_quit);
  fwd.sa_handler = forward_signal;
  fwd.sa_flags = SA_RESTART;
  sigemptyset(&fwd.sa_mask);
  sigaction(SIGTERM, &fwd, NULL);
  sigaction(SIGHUP, &fwd, NULL);
  sigprocmask(SIG_SETMASK, &old_mask, NULL);

  int err = 0;
  ssize_t got;
  while ((got = read(pipefd[0], &err, sizeof err)) < 0 && errno == EINTR) {
  }
  close(pipefd[0]);
  r->exec_errno = got == (ssize_t)sizeof err ? err : 0;

  struct rusage ru;
  int status = 0;
  while (wait4(pid, &status, 0, &ru) < 0) {
    if (errno != EINTR) {
      error("waiting for %s: %s", r->program, strerror(errno));
      return -1;
    }
  }
  sigaction(SIGINT, &old_int, NULL);
  sigaction(SIGQUIT, &old_quit, NULL);
  r->wait_status = status;
  r->peak_rss = (uint64_t)ru.ru_maxrss * 1024;
  if (r->exec_errno)
    r->exit_status = r->exec_errno == ENOENT ? EXIT_NOT_FOUND : EXIT_CANNOT_EXEC;
  else if (WIFSIGNALED(status))
    r->exit_status = 128 + WTERMSIG(status);
  else
    r->exit_status = WEXITSTATUS(status);
  return 0;
}

/* Reads and reports the program's statistics. */
static void report(const run_result_t *r, const char *stats_dir, int json) {
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
  } else if ((text = read_file(path, &len)) == NULL) {
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

static int cmd_run(int argc, char **argv) {
  int stats = 0, json = 0, i;
  for (i = 0; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--") == 0) {
      i++;
      break;
    }
    if (a[0] != '-' || a[1] == '\0') break;
    if (strcmp(a, "--stats") == 0) {
      stats = 1;
    } else if (strcmp(a, "--json") == 0) {
      stats = json = 1;
    } else if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
      usage(stdout);
      return 0;
    } else {
      return usage_error("unknown option '%s' for run", a);
    }
  }
  if (i >= argc) return usage_error("%s", "run: no PROGRAM given");

  char lib[PATH_MAX], dir[PATH_MAX];
  if (find_library(lib, sizeof lib) < 0) return EXIT_TOOL_FAILED;
  if (stats && make_stats_dir(dir, sizeof dir) < 0) return EXIT_TOOL_FAILED;

  run_result_t r;
  memset(&r, 0, sizeof r);
  r.program = argv[i];
  int rc = run_program(argv + i, lib, stats ? dir : NULL, &r);
  if (rc == 0 && r.exec_errno) {
    if (r.exec_errno == ENOENT)
      error("%s: program not found", r.program);
    else
      error("cannot run %s: %s", r.program, strerror(r.exec_errno));
  }
  if (stats) {
    char own[32];
    snprintf(own, sizeof own, STATS_PREFIX "%d", (int)r.pid);
    if (rc == 0) {
      r.children = count_other_stats(dir, own);
      report(&r, dir, json);
    }
    remove_stats_dir(dir);
  }
  return rc < 0 ? EXIT_TOOL_FAILED : r.exit_status;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    usage(stderr);
    return EXIT_USAGE;
  }
  const char *cmd = argv[1];
  if (strcmp(cmd, "-h") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "help") == 0) {
    usage(stdout);
    return 0;
  }
  if (strcmp(cmd, "version") == 0 || strcmp(cmd, "--version") == 0) {
    printf("magpie %s\n", MAGPIE_VERSION);
    return 0;
  }
  if (strcmp(cmd, "run") == 0) return cmd_run(argc - 2, argv + 2);
  if (cmd[0] == '-') return usage_error("unknown option '%s'", cmd);
  return usage_error("unknown command '%s'", cmd);
}
