/*
 * options: one table, parsed once.
 *
 * Theory
 *   1. MAGPIE_OPTIONS="name=value,..." is read straight from environ at initialisation: getenv
 *      may not be usable that early and nothing here may allocate. Values are decimal with an
 *      optional k/m/g suffix (powers of 1024), or a word where the table lists words.
 *   2. An unknown name, or a value that does not parse, gives one warning naming it; the
 *      option keeps its default. A number outside its option's range is clamped to it, with a
 *      warning naming the option and the value used. Parsing never fails the program.
 *   3. opt is written only before the allocator serves its first request, then only read.
 *   4. A program in secure-execution mode (set-user-ID, set-group-ID, file capabilities) takes
 *      neither MAGPIE_OPTIONS nor MAGPIE_DEBUG, which another user set: they name files to
 *      create (stats_file, profile_file, log) and ask for reports of the heap. A warning says
 *      so; the program runs on the defaults, as glibc ignores its malloc tunables there.
 */
#include "options.h"
#include "os.h"
#include "report.h"

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

extern char **environ;

options_t opt = {
    .stats = OPT_STATS_OFF,
    .mag_rounds = 0,
    .reap_ms = 1000,       /* Bonwick's update interval was 15 s; allocation bursts are faster */
    .sweep_ms = 10,        /* a size mix that moves on in tens of ms (mag.c theory 9) */
    .retain = 256u << 20,  /* free memory kept between reaps: reuse beats fresh pages */
    .large_own = 1u << 20, /* above this, own mappings: freeing gives the pages back at once */
    .calloc_populate = 64u << 20, /* bigger zeroed blocks may be sparse: leave them lazy */
    .reaper = 1,
    .percpu = 1,
    .hugepages = OPT_HUGE_AUTO,
    .hugepages_min = 64u << 20, /* smaller slab heaps stay on 4 KiB pages (hugepage.c) */
    .purge_batch = OS_PURGE_LIST,
    .profile_rate = 512u << 10, /* a sample per 512 KiB (its cost: docs/profiling.md) */
};

typedef enum { OPT_SIZE, OPT_STATS_WORD, OPT_PATH, OPT_HUGE_WORD } opt_kind_t;

const char *const opt_hugepages_words[OPT_HUGE_WORDS] = {"auto", "always", "never", "hugetlb"};

typedef struct opt_entry {
  const char *name;
  opt_kind_t kind;
  size_t offset;
  size_t min, max; /* OPT_SIZE: the range; 0, 0: any value */
} opt_entry_t;

static const opt_entry_t opt_table[] = {
    {"stats", OPT_STATS_WORD, offsetof(options_t, stats), 0, 0},
    {"stats_file", OPT_PATH, offsetof(options_t, stats_file), 0, 0},
    {"mag_rounds", OPT_SIZE, offsetof(options_t, mag_rounds), 0, OPT_MAG_ROUNDS_MAX},
    {"reap_ms", OPT_SIZE, offsetof(options_t, reap_ms), 1, SIZE_MAX / 1000000}, /* 0: a busy loop */
    {"publish_ms", OPT_SIZE, offsetof(options_t, publish_ms), 0, SIZE_MAX / 1000000},
    {"sweep_ms", OPT_SIZE, offsetof(options_t, sweep_ms), 0, SIZE_MAX / 1000000},
    {"retain", OPT_SIZE, offsetof(options_t, retain), 0, 0},
    {"large_own", OPT_SIZE, offsetof(options_t, large_own), 0, 0},
    {"calloc_populate", OPT_SIZE, offsetof(options_t, calloc_populate), 0, 0},
    {"reaper", OPT_SIZE, offsetof(options_t, reaper), 0, 0},
    {"sample", OPT_SIZE, offsetof(options_t, sample), 0, 0},
    {"percpu", OPT_SIZE, offsetof(options_t, percpu), 0, 2},
    {"percpu_threads", OPT_SIZE, offsetof(options_t, percpu_threads), 0, 0},
    {"hugepages", OPT_HUGE_WORD, offsetof(options_t, hugepages), 0, 0},
    {"hugepages_min", OPT_SIZE, offsetof(options_t, hugepages_min), 0, 0},
    {"purge_batch", OPT_SIZE, offsetof(options_t, purge_batch), 0, OS_PURGE_LIST},
    {"profile_rate", OPT_SIZE, offsetof(options_t, profile_rate), 0, (size_t)1 << 40},
    {"profile_file", OPT_PATH, offsetof(options_t, profile_file), 0, 0},
#ifdef MAGPIE_INJECT /* the test build libmagpie_inject.so only: elsewhere an unknown option */
    {"inject", OPT_SIZE, offsetof(options_t, inject), 0, 0},
#endif
};

static bool opt_parse_size(const char *s, size_t len, size_t *out) {
  size_t v = 0, i = 0;
  if (len == 0) return false;
  for (; i < len && s[i] >= '0' && s[i] <= '9'; i++) {
    if (v > (SIZE_MAX - 9) / 10) return false;
    v = v * 10 + (size_t)(s[i] - '0');
  }
  if (i == 0) return false;
  if (i + 1 == len) {
    unsigned shift = s[i] == 'k' || s[i] == 'K'   ? 10
                     : s[i] == 'm' || s[i] == 'M' ? 20
                     : s[i] == 'g' || s[i] == 'G' ? 30
                                                  : 0;
    if (shift == 0 || v > (SIZE_MAX >> shift)) return false;
    v <<= shift;
  } else if (i != len) {
    return false;
  }
  *out = v;
  return true;
}

static bool opt_word(const char *s, size_t len, const char *word) {
  return strlen(word) == len && memcmp(s, word, len) == 0;
}

/* Keeps *v in e's range; warns with the value used when it was not. */
static void opt_clamp(const opt_entry_t *e, size_t *v) {
  if (e->max == 0 || (*v >= e->min && *v <= e->max)) return;
  *v = *v < e->min ? e->min : e->max;
  report_buf_t b = {.len = 0};
  report_str(&b, "magpie: value out of range in MAGPIE_OPTIONS (set to ");
  report_dec(&b, *v);
  report_str(&b, "): ");
  report_str(&b, e->name);
  report_str(&b, "\n");
  report_flush(&b);
}

static bool opt_set(const opt_entry_t *e, const char *val, size_t len) {
  char *field = (char *)&opt + e->offset;
  switch (e->kind) {
  case OPT_SIZE:
    if (!opt_parse_size(val, len, (size_t *)field)) return false;
    opt_clamp(e, (size_t *)field);
    return true;
  case OPT_STATS_WORD: {
    size_t *v = (size_t *)field;
    if (opt_word(val, len, "0") || opt_word(val, len, "off"))
      *v = OPT_STATS_OFF;
    else if (opt_word(val, len, "1") || opt_word(val, len, "text"))
      *v = OPT_STATS_TEXT;
    else if (opt_word(val, len, "json"))
      *v = OPT_STATS_JSON;
    else
      return false;
    return true;
  }
  case OPT_HUGE_WORD:
    for (size_t i = 0; i < OPT_HUGE_WORDS; i++)
      if (opt_word(val, len, opt_hugepages_words[i])) {
        *(size_t *)field = i;
        return true;
      }
    return false;
  case OPT_PATH:
    if (len == 0 || len >= sizeof opt.stats_file) return false;
    memcpy(field, val, len);
    field[len] = '\0';
    return true;
  }
  return false;
}

void options_parse(const char *text) {
  const char *s = text;
  while (*s) {
    const char *end = s;
    while (*end && *end != ',')
      end++;
    const char *eq = s;
    while (eq < end && *eq != '=')
      eq++;
    size_t name_len = (size_t)(eq - s);
    const char *val = eq < end ? eq + 1 : end;
    size_t val_len = (size_t)(end - val);
    if (name_len > 0) {
      const opt_entry_t *found = NULL;
      for (size_t i = 0; i < sizeof opt_table / sizeof opt_table[0]; i++)
        if (opt_word(s, name_len, opt_table[i].name)) found = &opt_table[i];
      if (!found)
        report_warning_n("unknown option in MAGPIE_OPTIONS (ignored): ", s, name_len);
      else if (eq == end || !opt_set(found, val, val_len))
        report_warning_n("bad value in MAGPIE_OPTIONS (default kept): ", s, (size_t)(end - s));
    }
    s = *end ? end + 1 : end;
  }
}

const char *options_getenv(const char *name) {
  size_t n = strlen(name);
  if (!environ) return NULL;
  for (char **e = environ; *e; e++)
    if (strncmp(*e, name, n) == 0 && (*e)[n] == '=') {
      if (!os_secure_exec()) return *e + n + 1;
      report_warning("ignored in a set-user-ID, set-group-ID or capability-raising program: ",
                     name);
      return NULL;
    }
  return NULL;
}

size_t options_retain_for(uint64_t memory_limit) {
  size_t most = (size_t)256 << 20;
  return memory_limit && memory_limit / 8 < most ? (size_t)(memory_limit / 8) : most;
}

void options_init(void) {
  opt.retain = options_retain_for(os_memory_limit()); /* the default, unless the options say */
  const char *value = options_getenv("MAGPIE_OPTIONS");
  if (value) options_parse(value);
}
