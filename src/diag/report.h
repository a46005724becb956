/* report: how magpie tells the user something went wrong, and the diag layer's interface: the
   layers above include this one header for the text builder (report_buf.h), stacks (stack.h)
   and their symbolised frames (symbolize.h). See report.c. */
#ifndef MAGPIE_REPORT_H
#define MAGPIE_REPORT_H

#include "report_buf.h"
#include "stack.h"
#include "symbolize.h"

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* "magpie: <kind> of address <addr>[: <detail>]", no newline: the first line of every heap error
   report, this layer's and debug mode's. */
void report_error_head(report_buf_t *b, const char *kind, const void *addr, const char *detail);
/* A program error on a heap block: prints kind, address, detail and the caller's stack, aborts. */
__attribute__((noreturn, cold)) void report_heap_error(const char *kind, const void *addr,
                                                       const char *detail);
/* magpie itself cannot go on (the kernel refused, an internal invariant broke). */
__attribute__((noreturn, cold)) void report_fatal(const char *what, const void *addr, size_t value);
/* One line: "magpie: <what><name>\n". */
void report_warning(const char *what, const char *name);
/* The same with the first len bytes of name, at most REPORT_QUOTE_MAX of them (a word quoted
   from a longer setting, which need not end there). */
#define REPORT_QUOTE_MAX 63
void report_warning_n(const char *what, const char *name, size_t len);

#ifdef __cplusplus
}
#endif

#endif
