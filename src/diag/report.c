/*
 * report: the messages of normal mode: a program error on a heap block, magpie's own fatal
 * errors, and one-line warnings.
 *
 * Theory
 *   1. A report is made where something already went wrong: inside free() on a corrupt heap,
 *      or where the kernel refused memory. So it allocates nothing and takes no allocator lock:
 *      the text is built on the stack (report_buf.c), with the calling code's stack
 *      (stack.c, symbolize.c), and written with write(2).
 *   2. Errors abort (SIGABRT): a damaged heap cannot be trusted to go on, and a debugger or a
 *      core dump then stops at the culprit. Warnings (a bad option, a report that could not be
 *      completed) print one line and return.
 *   3. Debug mode and sampling write their richer reports with the same pieces (debug/).
 */
#include "report.h"

#include <stdlib.h>
#include <string.h>

void report_error_head(report_buf_t *b, const char *kind, const void *addr, const char *detail) {
  report_str(b, "magpie: ");
  report_str(b, kind);
  report_str(b, " of address ");
  report_hex(b, (uintptr_t)addr);
  if (detail && detail[0]) {
    report_str(b, ": ");
    report_str(b, detail);
  }
}

void report_heap_error(const char *kind, const void *addr, const char *detail) {
  report_buf_t b = {.len = 0};
  report_error_head(&b, kind, addr, detail);
  report_str(&b, "\n");
  report_current_stack(&b);
  report_flush(&b);
  abort();
}

void report_fatal(const char *what, const void *addr, size_t value) {
  report_buf_t b = {.len = 0};
  report_str(&b, "magpie: fatal: ");
  report_str(&b, what);
  report_str(&b, " (address ");
  report_hex(&b, (uintptr_t)addr);
  report_str(&b, ", value ");
  report_dec(&b, value);
  report_str(&b, ")\n");
  report_current_stack(&b);
  report_flush(&b);
  abort();
}

void report_warning(const char *what, const char *name) {
  report_warning_n(what, name, strlen(name));
}

void report_warning_n(const char *what, const char *name, size_t len) {
  char quoted[REPORT_QUOTE_MAX + 1];
  if (len > REPORT_QUOTE_MAX) len = REPORT_QUOTE_MAX;
  memcpy(quoted, name, len);
  quoted[len] = '\0';
  report_buf_t b = {.len = 0};
  report_str(&b, "magpie: ");
  report_str(&b, what);
  report_str(&b, quoted);
  report_str(&b, "\n");
  report_flush(&b);
}
