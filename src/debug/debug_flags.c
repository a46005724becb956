/*
 * debug_flags: MAGPIE_DEBUG (flag,flag=value,...) parsed into debug_flags. docs/debug.md lists
 * the flags for the user.
 *
 * Theory
 *   1. Parsed once, by debug_init from magpie_init, before the first block is served, so
 *      debug_flags is read without a lock afterwards. Nothing here allocates: the heap is not
 *      up yet.
 *   2. An unknown flag or a value that does not parse is warned about and ignored; the others
 *      still apply. Debug mode is on when any known flag is given; the misuse checks (double,
 *      interior, foreign free, size, alignment and kind mismatches) are then always on, so
 *      `checks` is the flag that asks for them alone.
 *   3. `leaks` lists the blocks no pointer reaches and counts the others in one line, in every
 *      process, as LeakSanitizer, unless `nochildren`; leaks=all lists every block never freed,
 *      only in the process that debug mode started in, not in its children, unless `children`
 *      (debug.c).
 *   4. Stacks are kept (depth > 0) only when audit or leaks needs them; either gives a default
 *      depth when audit=N did not set one.
 */
#include "debug_impl.h"

#include <string.h>

#define DEBUG_DEPTH_DEFAULT 16 /* frames per audit stack: enough to see through wrappers */
#define DEBUG_QUARANTINE_DEFAULT ((size_t)4 << 20) /* a few MiB: catches most stale writes */

debug_flags_t debug_flags;

static bool word_is(const char *s, size_t len, const char *word) {
  return strlen(word) == len && memcmp(s, word, len) == 0;
}

/* A decimal count with an optional k, m or g suffix (binary units). */
static bool parse_size(const char *s, size_t len, size_t *out) {
  size_t v = 0, i = 0;
  for (; i < len && s[i] >= '0' && s[i] <= '9'; i++) {
    if (v > (SIZE_MAX - 9) / 10) return false;
    v = v * 10 + (size_t)(s[i] - '0');
  }
  if (i == 0) return false;
  if (i + 1 == len) {
    unsigned shift = (s[i] | 32) == 'k'   ? 10
                     : (s[i] | 32) == 'm' ? 20
                     : (s[i] | 32) == 'g' ? 30
                                          : 0;
    if (!shift || v > (SIZE_MAX >> shift)) return false;
    v <<= shift;
  } else if (i != len) {
    return false;
  }
  *out = v;
  return true;
}

static void set_default(void) {
  debug_flags.redzone = debug_flags.patterns = debug_flags.audit = debug_flags.guards =
      debug_flags.leaks = true;
}

/* One flag; false when it is unknown or its value does not parse. */
static bool parse_flag(const char *s, size_t name_len, const char *val, size_t val_len,
                       bool has_val) {
  size_t v;
  if (!has_val) {
    if (word_is(s, name_len, "default"))
      set_default();
    else if (word_is(s, name_len, "redzone"))
      debug_flags.redzone = true;
    else if (word_is(s, name_len, "patterns"))
      debug_flags.patterns = true;
    else if (word_is(s, name_len, "audit"))
      debug_flags.audit = true;
    else if (word_is(s, name_len, "guards"))
      debug_flags.guards = true;
    else if (word_is(s, name_len, "leaks"))
      debug_flags.leaks = true;
    else if (word_is(s, name_len, "children"))
      debug_flags.leaks_children = true;
    else if (word_is(s, name_len, "nochildren"))
      debug_flags.leaks_nochildren = true;
    else if (word_is(s, name_len, "continue"))
      debug_flags.keep_going = true;
    else if (word_is(s, name_len, "checks"))
      ; /* the misuse checks alone */
    else
      return false;
    return true;
  }
  if (word_is(s, name_len, "audit") && parse_size(val, val_len, &v) && v >= 1 &&
      v <= REPORT_DEPTH_MAX) {
    debug_flags.audit = true;
    debug_flags.depth = (unsigned)v;
  } else if (word_is(s, name_len, "guards") && word_is(val, val_len, "all")) {
    debug_flags.guards = debug_flags.guards_all = true;
  } else if (word_is(s, name_len, "leaks") && word_is(val, val_len, "unreachable")) {
    debug_flags.leaks = true; /* what `leaks` reports */
  } else if (word_is(s, name_len, "leaks") && word_is(val, val_len, "all")) {
    debug_flags.leaks = debug_flags.leaks_all = true;
  } else if (word_is(s, name_len, "verify") && parse_size(val, val_len, &v) && v >= 1) {
    debug_flags.verify_every = v;
  } else if (word_is(s, name_len, "quarantine") && parse_size(val, val_len, &v)) {
    debug_flags.quarantine = v;
  } else if (word_is(s, name_len, "log") && val_len > 0 && val_len < 256) {
    char path[256];
    memcpy(path, val, val_len);
    path[val_len] = '\0';
    report_set_log(path);
  } else {
    return false;
  }
  return true;
}

bool debug_flags_parse(const char *value) {
  bool any = false;
  debug_flags.quarantine = DEBUG_QUARANTINE_DEFAULT;
  for (const char *s = value; *s;) {
    const char *end = s, *eq;
    while (*end && *end != ',')
      end++;
    for (eq = s; eq < end && *eq != '='; eq++)
      ;
    if (end > s) {
      bool has_val = eq < end;
      const char *val = has_val ? eq + 1 : end;
      if (parse_flag(s, (size_t)(eq - s), val, (size_t)(end - val), has_val)) {
        any = true;
      } else {
        report_warning_n("unknown flag or bad value in MAGPIE_DEBUG (ignored): ", s,
                         (size_t)(end - s));
      }
    }
    s = *end ? end + 1 : end;
  }
  if (!any) return false;
  debug_flags.leaks_unreachable = debug_flags.leaks && !debug_flags.leaks_all;
  if ((debug_flags.audit || debug_flags.leaks) && debug_flags.depth == 0)
    debug_flags.depth = DEBUG_DEPTH_DEFAULT;
  if (!debug_flags.audit && !debug_flags.leaks) debug_flags.depth = 0;
  return true;
}
