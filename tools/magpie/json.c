/* json: the scanner declared in json.h. It walks a buffer that holds one JSON value, without
 * building a tree: strings are copied into a caller's buffer or skipped, numbers are read as the
 * non-negative integers the statistics hold or, for records, as doubles, and nesting is
 * followed up to JSON_MAX_DEPTH so that a hostile file cannot exhaust the stack. */
#include "json.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

/* How deep the scanner follows nested arrays and objects. */
#define JSON_MAX_DEPTH 64

int scan_fail(scan_t *s, const char *what) {
  if (!s->err) s->err = what;
  return -1;
}

void scan_ws(scan_t *s) {
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

int scan_u64(scan_t *s, uint64_t *out) {
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

int scan_number(scan_t *s, double *out) {
  char text[64];
  scan_ws(s);
  const char *start = s->p;
  if (scan_skip_number(s) < 0) return -1;
  size_t len = (size_t)(s->p - start);
  if (len >= sizeof text) return scan_fail(s, "number too long");
  memcpy(text, start, len);
  text[len] = '\0';
  char *end;
  *out = strtod(text, &end);
  if (end != text + len) return scan_fail(s, "malformed number");
  return 0;
}

int scan_object(scan_t *s, int depth, member_fn *fn, void *ctx, size_t *count, size_t *close) {
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

int scan_array(scan_t *s, int depth, element_fn *fn, void *ctx) {
  if (depth > JSON_MAX_DEPTH) return scan_fail(s, "values nested too deeply");
  if (!scan_take(s, '[')) return scan_fail(s, "expected an array");
  if (scan_take(s, ']')) return 0;
  do {
    if ((fn ? fn(s, ctx) : scan_skip_value(s, depth + 1)) < 0) return -1;
  } while (scan_take(s, ','));
  if (!scan_take(s, ']')) return scan_fail(s, "expected ',' or ']' in an array");
  return 0;
}

/* Consumes the literal word (true, false, null). */
static int scan_word(scan_t *s, const char *word) {
  size_t n = strlen(word);
  if ((size_t)(s->end - s->p) < n || memcmp(s->p, word, n) != 0)
    return scan_fail(s, "expected a value");
  s->p += n;
  return 0;
}

int scan_skip_value(scan_t *s, int depth) {
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
