/* report: how magpie tells the user something went wrong. See report.c. */
#ifndef MAGPIE_REPORT_H
#define MAGPIE_REPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define REPORT_DEPTH_MAX 64 /* frames a captured stack may hold */

/* A report under construction: text on the caller's stack, written out when full or flushed. */
typedef struct report_buf {
  char text[4096];
  size_t len;
} report_buf_t;

/* A program error on a heap block: prints kind, address, detail and the caller's stack, aborts. */
__attribute__((noreturn, cold)) void report_heap_error(const char *kind, const void *addr,
                                                       const char *detail);
/* magpie itself cannot go on (the kernel refused, an internal invariant broke). */
__attribute__((noreturn, cold)) void report_fatal(const char *what, const void *addr, size_t value);
/* One line: "magpie: <what><name>\n". */
void report_warning(const char *what, const char *name);

/* Building reports (debug mode): append text, numbers, stacks; flush writes to the report file. */
void report_str(report_buf_t *b, const char *s);
void report_hex(report_buf_t *b, uintptr_t v);
void report_dec(report_buf_t *b, size_t v);
/* v in decimal, NUL-terminated, into out; returns the digit count. For every report writer. */
#define REPORT_DEC_MAX 24
int report_format_dec(char out[REPORT_DEC_MAX], uint64_t v);
/* pattern with every "%p" replaced by the pid, into out (cap bytes, NUL-terminated; cut short
   rather than overflow). For the log and statistics file names. */
void report_expand_pid(char *out, size_t cap, const char *pattern);
void report_flush(report_buf_t *b);
/* The calling code's return addresses, magpie's own leading frames left out; returns how many
   (at most max). Allocates nothing and takes no magpie lock. */
int report_capture(uintptr_t *ips, int max);
/* One line per frame, symbolised, C++ names demangled. */
void report_frames(report_buf_t *b, const uintptr_t *ips, int n);
/* "  stack of the call:" and the calling code's frames. */
void report_current_stack(report_buf_t *b);
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
/* Demangles an Itanium C++ name (the common forms) into out; false when it cannot. No heap. */
bool report_demangle(const char *mangled, char *out, size_t cap);

#ifdef __cplusplus
}
#endif

#endif
