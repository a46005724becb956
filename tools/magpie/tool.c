/* tool: the magpie command's error message, shared by every part of it so that each message has
 * the same "magpie: " prefix and goes to stderr, where the program's own output does not. */
#include "tool.h"

#include <stdarg.h>
#include <stdio.h>

void error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("magpie: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}
