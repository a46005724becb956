/* json: a small hand-written JSON scanner for the statistics files the library writes (no
 * libraries). It understands the whole JSON grammar well enough to skip any value, and reads the
 * integers and objects a caller asks for, so a reader keeps only the keys it knows and keys the
 * library adds later are ignored. Each function returns 0 on success, or -1 on a syntax error
 * with s->err saying what was wrong and s->p where. */
#ifndef MAGPIE_TOOL_JSON_H
#define MAGPIE_TOOL_JSON_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
  const char *base; /* start of the text, for error offsets */
  const char *p;    /* next character to read */
  const char *end;  /* one past the last character */
  const char *err;  /* first error met, or NULL */
} scan_t;

/* Records what as the error (unless one is recorded already); returns -1. */
int scan_fail(scan_t *s, const char *what);
/* Skips white space. */
void scan_ws(scan_t *s);
/* Reads a non-negative integer that fits in 64 bits. */
int scan_u64(scan_t *s, uint64_t *out);
/* Reads any JSON number (a record's times are fractions of seconds). */
int scan_number(scan_t *s, double *out);
/* Skips any value; depth is how deep it is nested, for the nesting limit. */
int scan_skip_value(scan_t *s, int depth);

/* Called for each member of an object with s positioned at the value; it must consume the value. */
typedef int member_fn(scan_t *s, const char *key, void *ctx);
/* Reads an object, calling fn for each member, or skipping the members when fn is NULL. *count,
 * if given, receives the number of members and *close the offset of the '}'. */
int scan_object(scan_t *s, int depth, member_fn *fn, void *ctx, size_t *count, size_t *close);

/* Called for each element of an array; it must consume the element. */
typedef int element_fn(scan_t *s, void *ctx);
/* Reads an array, calling fn for each element, or skipping the elements when fn is NULL. */
int scan_array(scan_t *s, int depth, element_fn *fn, void *ctx);

#endif
