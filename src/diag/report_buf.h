/* report_buf: the one text builder of magpie's reports, statistics and debug output, and where
   the reports go. See report_buf.c. */
#ifndef MAGPIE_REPORT_BUF_H
#define MAGPIE_REPORT_BUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Text under construction on the caller's stack, written out when full or flushed. Zero-
   initialised ({.len = 0}) it writes to the report log (report_set_log) or stderr; with to_fd
   set it writes to fd (the statistics: {.to_fd = true, .fd = fd}); with sink set, it hands the
   text to sink instead (malloc_info's FILE). */
typedef struct report_buf {
  bool to_fd;
  int fd;
  void (*sink)(void *ctx, const char *text, size_t len);
  void *sink_ctx;
  size_t len;
  char text[4096];
} report_buf_t;

void report_str(report_buf_t *b, const char *s);
/* s, then spaces up to width characters (a left-aligned column). */
void report_str_width(report_buf_t *b, const char *s, size_t width);
void report_hex(report_buf_t *b, uintptr_t v); /* "0x" and lower-case digits */
void report_dec(report_buf_t *b, uint64_t v);
/* v in decimal, right-aligned in width characters (never cut). */
void report_dec_width(report_buf_t *b, uint64_t v, int width);
/* v with thousands separators ("1,234,567"), right-aligned in width characters. */
void report_count_width(report_buf_t *b, uint64_t v, int width);
/* A byte count in binary units ("512 B", "1.5 KiB", "3.2 MiB"), right-aligned in width
   characters. */
void report_bytes_width(report_buf_t *b, uint64_t v, int width);
/* s right-aligned in width characters. */
void report_str_right(report_buf_t *b, const char *s, int width);
/* Writes the text out and empties the builder. */
void report_flush(report_buf_t *b);

/* v in decimal or "0x"-prefixed hexadecimal, NUL-terminated, into out; returns the length. For
   text built outside a report_buf_t (a detail kept for a later report, a file name). */
#define REPORT_DEC_MAX 24
int report_format_dec(char out[REPORT_DEC_MAX], uint64_t v);
#define REPORT_HEX_MAX 24
int report_format_hex(char out[REPORT_HEX_MAX], uint64_t v);
/* pattern with every "%p" replaced by the pid, into out (cap bytes, NUL-terminated; cut short
   rather than overflow). For the log and statistics file names. */
void report_expand_pid(char *out, size_t cap, const char *pattern);

/* Sends every later report to path ("%p" becomes the pid), opened at the first report; stderr if
   it cannot be opened. Called before any report (debug_init). */
void report_set_log(const char *path);
/* Keeps a copy of stderr for the reports written at exit: programs such as coreutils close
   fd 2 in an atexit handler, before magpie's destructor runs. */
void report_keep_stderr(void);
/* Where a report for stderr goes: the kept copy while it is still open on the file it was
   copied from (the program may have closed it and opened another file under its number),
   else fd 2. */
int report_stderr(void);

#ifdef __cplusplus
}
#endif

#endif
