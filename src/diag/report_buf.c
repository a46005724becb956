/*
 * report_buf: the text builder every report, statistics report and debug message is made with,
 * and the file the reports go to.
 *
 * Theory
 *   1. A report may be made from inside free() on a heap that is already corrupt, or at exit
 *      after the program closed stderr, so nothing here allocates or takes an allocator lock:
 *      text is built in a buffer on the caller's stack, numbers are formatted by hand (printf
 *      may allocate), and the text is written with write(2) when the buffer fills or is
 *      flushed.
 *   2. A builder writes to the report log or stderr unless it was given a descriptor: error
 *      reports go where debug mode's log=PATH says (the file is opened at the first report, so
 *      a process that never errs leaves none), statistics to the descriptor asked for.
 *   3. No locks: concurrent reports may interleave their flushes; debug mode serialises its
 *      own. The log's state moves once from pending to open (or back to stderr) by
 *      compare-and-swap, so racing first reports open it once.
 */
#include "report_buf.h"
#include "os.h"

#include <string.h>

enum { LOG_STDERR, LOG_PENDING, LOG_OPEN };
static char report_log_path[256];
static int report_log_state = LOG_STDERR; /* atomic */
static int report_log_fd = 2;
static int report_stderr_copy = -1; /* report_keep_stderr */
static uint64_t report_stderr_id[2];

void report_keep_stderr(void) {
  int fd = os_dup(2);
  if (fd >= 0 && os_file_id(fd, report_stderr_id))
    report_stderr_copy = fd;
  else if (fd >= 0)
    os_close(fd);
}

int report_stderr(void) {
  uint64_t id[2];
  int fd = report_stderr_copy;
  return fd >= 0 && os_file_id(fd, id) && id[0] == report_stderr_id[0] &&
                 id[1] == report_stderr_id[1]
             ? fd
             : 2;
}

void report_set_log(const char *path) {
  size_t n = strlen(path);
  if (n == 0 || n >= sizeof report_log_path) return;
  memcpy(report_log_path, path, n + 1);
  __atomic_store_n(&report_log_state, LOG_PENDING, __ATOMIC_RELEASE);
}

/* The descriptor reports go to; opens the log file on first use. */
static int report_log(void) {
  int state = __atomic_load_n(&report_log_state, __ATOMIC_ACQUIRE);
  if (state == LOG_OPEN) return report_log_fd;
  if (state == LOG_STDERR) return report_stderr();
  char path[sizeof report_log_path + REPORT_DEC_MAX];
  report_expand_pid(path, sizeof path, report_log_path);
  int fd = os_keep_fd(os_open_write(path)); /* open for the rest of the process */
  int expected = LOG_PENDING;
  if (fd >= 0) {
    report_log_fd = fd;
    if (!__atomic_compare_exchange_n(&report_log_state, &expected, LOG_OPEN, false,
                                     __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
      os_close(fd); /* another thread opened it first */
    }
  } else {
    __atomic_compare_exchange_n(&report_log_state, &expected, LOG_STDERR, false, __ATOMIC_ACQ_REL,
                                __ATOMIC_ACQUIRE);
  }
  return __atomic_load_n(&report_log_state, __ATOMIC_ACQUIRE) == LOG_OPEN ? report_log_fd
                                                                          : report_stderr();
}

void report_flush(report_buf_t *b) {
  if (b->sink)
    b->sink(b->sink_ctx, b->text, b->len);
  else
    os_write_all(b->to_fd ? b->fd : report_log(), b->text, b->len);
  b->len = 0;
}

void report_str(report_buf_t *b, const char *s) {
  while (*s) {
    if (b->len == sizeof b->text) report_flush(b);
    b->text[b->len++] = *s++;
  }
}

void report_str_width(report_buf_t *b, const char *s, size_t width) {
  report_str(b, s);
  for (size_t n = strlen(s); n < width; n++)
    report_str(b, " ");
}

/* The digits of v in base (10 or 16), most significant first, after prefix, into out. */
static int format_digits(char *out, const char *prefix, uint64_t v, unsigned base) {
  char tmp[REPORT_DEC_MAX];
  int n = 0, len = 0;
  do
    tmp[n++] = "0123456789abcdef"[v % base];
  while ((v /= base) != 0);
  while (*prefix)
    out[len++] = *prefix++;
  while (n > 0)
    out[len++] = tmp[--n];
  out[len] = '\0';
  return len;
}

int report_format_dec(char out[REPORT_DEC_MAX], uint64_t v) {
  return format_digits(out, "", v, 10);
}

int report_format_hex(char out[REPORT_HEX_MAX], uint64_t v) {
  return format_digits(out, "0x", v, 16);
}

void report_hex(report_buf_t *b, uintptr_t v) {
  char out[REPORT_HEX_MAX];
  report_format_hex(out, v);
  report_str(b, out);
}

void report_dec(report_buf_t *b, uint64_t v) {
  report_dec_width(b, v, 0);
}

void report_dec_width(report_buf_t *b, uint64_t v, int width) {
  char out[REPORT_DEC_MAX];
  for (int pad = width - report_format_dec(out, v); pad > 0; pad--)
    report_str(b, " ");
  report_str(b, out);
}

void report_str_right(report_buf_t *b, const char *s, int width) {
  for (int pad = width - (int)strlen(s); pad > 0; pad--)
    report_str(b, " ");
  report_str(b, s);
}

void report_count_width(report_buf_t *b, uint64_t v, int width) {
  char digits[REPORT_DEC_MAX], out[REPORT_DEC_MAX + REPORT_DEC_MAX / 3];
  int n = report_format_dec(digits, v), len = 0;
  for (int i = 0; i < n; i++) {
    if (i > 0 && (n - i) % 3 == 0) out[len++] = ',';
    out[len++] = digits[i];
  }
  out[len] = '\0';
  report_str_right(b, out, width);
}

/* In integers (no floating point in the library's reports): tenths of the largest unit not
   above v, rounded; a value that would print as 1024.0 moves to the next unit. */
void report_bytes_width(report_buf_t *b, uint64_t v, int width) {
  static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  const unsigned last = sizeof units / sizeof units[0] - 1;
  char out[REPORT_DEC_MAX + 8];
  unsigned u = 0;
  uint64_t scale = 1;
  while (u < last && v / scale >= 1024) {
    scale *= 1024;
    u++;
  }
  int len = 0;
  if (u == 0) {
    len = report_format_dec(out, v);
  } else {
    uint64_t tenths = v / scale * 10 + ((v % scale) * 10 + scale / 2) / scale;
    if (tenths >= 10240 && u < last) {
      tenths = 10;
      u++;
    }
    len = report_format_dec(out, tenths / 10);
    out[len++] = '.';
    out[len++] = (char)('0' + tenths % 10);
  }
  out[len++] = ' ';
  for (const char *s = units[u]; *s; s++)
    out[len++] = *s;
  out[len] = '\0';
  report_str_right(b, out, width);
}

void report_expand_pid(char *out, size_t cap, const char *pattern) {
  size_t len = 0;
  for (const char *s = pattern; *s && len + REPORT_DEC_MAX < cap; s++) {
    if (s[0] == '%' && s[1] == 'p') {
      len += (size_t)report_format_dec(out + len, (uint64_t)os_getpid());
      s++;
    } else {
      out[len++] = *s;
    }
  }
  out[len] = '\0';
}
