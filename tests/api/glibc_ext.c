/*
 * glibc's malloc extensions: malloc_trim, mallinfo2, malloc_stats, malloc_info.
 */
#include "check.h"

#include <errno.h>
#include <malloc.h>
#include <unistd.h>

#define LIVE_VOLUME (10 * MiB) /* bytes held live in small blocks for mallinfo2 */
#define SMALL_BLOCK 100

static void test_malloc_trim(void) {
  /* Make something to trim: many small and a few large blocks, freed. */
  enum { COUNT = 20000 };
  static void *blocks[COUNT];
  for (int i = 0; i < COUNT; i++) {
    blocks[i] = malloc(opaque_size(i % 50 == 0 ? 200 * KiB : 64 + (size_t)(i % 7) * 48));
    REQUIRE(blocks[i] != NULL);
    memset(blocks[i], 3, 64);
  }
  for (int i = 0; i < COUNT; i++)
    free(blocks[i]);
  int rc = malloc_trim(0);
  CHECK(rc == 0 || rc == 1);
  rc = malloc_trim(opaque_size(1 * MiB));
  CHECK(rc == 0 || rc == 1);
  /* Later allocations work, and calloc after a trim is still zeroed. */
  for (int i = 0; i < COUNT; i++) {
    size_t n = i % 50 == 0 ? 200 * KiB : 64 + (size_t)(i % 7) * 48;
    blocks[i] = calloc(1, opaque_size(n));
    REQUIRE(blocks[i] != NULL);
    CHECK(all_bytes_are(blocks[i], n < 256 ? n : 256, 0));
    pattern_fill(blocks[i], 64, (uintptr_t)i);
  }
  unsigned long bad = 0;
  for (int i = 0; i < COUNT; i++) {
    if (!pattern_ok(blocks[i], 64, (uintptr_t)i)) bad++;
    free(blocks[i]);
  }
  CHECK(bad == 0);
  CHECK(malloc_trim(0) <= 1);
}

static void test_mallinfo2(void) {
  size_t count = LIVE_VOLUME / SMALL_BLOCK;
  void **blocks = malloc(count * sizeof *blocks);
  REQUIRE(blocks != NULL);
  struct mallinfo2 before = mallinfo2();
  for (size_t i = 0; i < count; i++) {
    blocks[i] = malloc(opaque_size(SMALL_BLOCK));
    REQUIRE(blocks[i] != NULL);
    memset(blocks[i], 5, SMALL_BLOCK);
  }
  struct mallinfo2 during = mallinfo2();
  for (size_t i = 0; i < count; i++)
    free(blocks[i]);
  struct mallinfo2 after = mallinfo2();
  free(blocks);
  fprintf(stderr,
          "  uordblks before %zu during %zu after %zu; arena %zu, hblkhd %zu, fordblks %zu\n",
          before.uordblks, during.uordblks, after.uordblks, during.arena, during.hblkhd,
          during.fordblks);
  /* In use grew by at least what was requested (count blocks, a little under LIVE_VOLUME: debug
     mode counts requested bytes exactly), and fell by at least half of it. */
  CHECK(during.uordblks >= before.uordblks + count * SMALL_BLOCK);
  CHECK(after.uordblks + count * SMALL_BLOCK / 2 <= during.uordblks);
  /* Memory in use cannot exceed memory obtained from the system. */
  CHECK(during.uordblks <= during.arena + during.hblkhd);
  CHECK(during.arena + during.hblkhd >= LIVE_VOLUME);

  /* A large live block shows up somewhere in the figures too. */
  struct mallinfo2 base = mallinfo2();
  void *big = malloc(opaque_size(32 * MiB));
  REQUIRE(big != NULL);
  memset(big, 1, 32 * MiB);
  struct mallinfo2 with_big = mallinfo2();
  CHECK(with_big.uordblks + with_big.hblkhd >= base.uordblks + base.hblkhd + 32 * MiB);
  free(big);
}

/* Runs fn with stderr going to a temporary file; returns what was written (caller frees). */
static char *capture_stderr(void (*fn)(void), size_t *len) {
  fflush(stderr);
  FILE *tmp = tmpfile();
  REQUIRE(tmp != NULL);
  int saved = dup(2);
  REQUIRE(saved >= 0);
  REQUIRE(dup2(fileno(tmp), 2) == 2);
  fn();
  fflush(stderr);
  REQUIRE(dup2(saved, 2) == 2);
  close(saved);
  long size = lseek(fileno(tmp), 0, SEEK_END);
  REQUIRE(size >= 0);
  char *text = malloc((size_t)size + 1);
  REQUIRE(text != NULL);
  REQUIRE(pread(fileno(tmp), text, (size_t)size, 0) == size);
  text[size] = '\0';
  fclose(tmp);
  *len = (size_t)size;
  return text;
}

static void call_malloc_stats(void) {
  malloc_stats();
}

/*
 * malloc_stats prints glibc's layout, which programs and scripts parse: "Arena 0:", its
 * "system bytes" and "in use bytes", "Total (incl. mmap):" with the same two lines, then
 * "max mmap regions" and "max mmap bytes", each value right-aligned in 10 columns or more.
 */
enum {
  STATS_ARENA_SYSTEM,
  STATS_ARENA_IN_USE,
  STATS_TOTAL_SYSTEM,
  STATS_TOTAL_IN_USE,
  STATS_MMAP_REGIONS,
  STATS_MMAP_BYTES,
  STATS_VALUES
};

/* Parses the report into v[STATS_VALUES]; false (with a note) when the layout differs. */
static int stats_parse(const char *text, unsigned long long v[STATS_VALUES]) {
  static const char *const layout[] = {"Arena 0:",
                                       "system bytes     = ",
                                       "in use bytes     = ",
                                       "Total (incl. mmap):",
                                       "system bytes     = ",
                                       "in use bytes     = ",
                                       "max mmap regions = ",
                                       "max mmap bytes   = "};
  const char *line = text;
  int value = 0;
  for (size_t i = 0; i < sizeof layout / sizeof layout[0]; i++) {
    size_t n = strlen(layout[i]);
    if (strncmp(line, layout[i], n) != 0) {
      NOTE("  malloc_stats line %zu: wanted \"%s\", got: %.60s\n", i + 1, layout[i], line);
      return 0;
    }
    line += n;
    if (layout[i][n - 1] == ' ') {
      char *end;
      if (strspn(line, " ") + strcspn(line + strspn(line, " "), "\n") < 10) return 0;
      v[value++] = strtoull(line, &end, 10);
      if (end == line) return 0;
      line = end;
    }
    if (*line++ != '\n') return 0;
  }
  return *line == '\0';
}

static void test_malloc_stats(void) {
  unsigned long long before[STATS_VALUES], after[STATS_VALUES];
  size_t len = 0;
  char *text = capture_stderr(call_malloc_stats, &len);
  int parsed = stats_parse(text, before);
  if (!parsed) NOTE("  malloc_stats printed:\n%s\n", text);
  CHECK(parsed);
  free(text);
  /* Figures that follow the heap: held small blocks count in the arena, a big block as an
     mmapped region (glibc: above its mmap threshold; magpie: a large block). */
  enum { HELD = 1000 };
  static void *held[HELD];
  for (int i = 0; i < HELD; i++)
    REQUIRE((held[i] = malloc(opaque_size(1000))) != NULL);
  void *big = malloc(opaque_size(8 * MiB));
  REQUIRE(big != NULL);
  memset(big, 1, 8 * MiB);
  text = capture_stderr(call_malloc_stats, &len);
  parsed = stats_parse(text, after);
  CHECK(parsed);
  free(text);
  free(big);
  for (int i = 0; i < HELD; i++)
    free(held[i]);
  if (!parsed) return;
  CHECK(after[STATS_ARENA_IN_USE] >= before[STATS_ARENA_IN_USE] + HELD * 1000ull);
  CHECK(after[STATS_TOTAL_SYSTEM] >= after[STATS_TOTAL_IN_USE]);
  CHECK(after[STATS_ARENA_SYSTEM] >= after[STATS_ARENA_IN_USE]);
  if (getenv("MAGPIE_DEBUG") != NULL) return; /* debug mode maps big blocks itself, in "Arena 0" */
  CHECK(after[STATS_TOTAL_IN_USE] >= after[STATS_ARENA_IN_USE] + 8 * MiB);
  CHECK(after[STATS_MMAP_REGIONS] >= 1);
  CHECK(after[STATS_MMAP_BYTES] >= 8 * MiB);
}

/*
 * malloc_info writes XML: one <malloc version="..."> element whose children carry the figures
 * as attributes (<total type="..." count="N" size="N"/>, <system type="current" size="N"/>,
 * ...). glibc and magpie name their totals differently (glibc: fast, rest, mmap; magpie: live,
 * large); both give the memory obtained from the system as system type="current" and "max".
 * A tool reading it needs well-formed XML and figures that follow the program's use.
 */
#define INFO_FIGURES 64 /* children of <malloc> remembered */
#define INFO_HELD (4 * MiB)
#define INFO_HELD_BLOCK 256
#define INFO_BIG (16 * MiB)

typedef struct {
  char name[16], type[16];
  unsigned long long count, size;
} info_figure_t;

typedef struct {
  int well_formed;
  char version[32];
  int figures;
  info_figure_t figure[INFO_FIGURES];
} info_t;

static const char *info_skip_space(const char *s) {
  while (*s == ' ' || *s == '\n' || *s == '\t' || *s == '\r')
    s++;
  return s;
}

/* Copies the name at s (letters, digits, '_', '-') into out; returns the end, or NULL if none. */
static const char *info_name(const char *s, char *out, size_t cap) {
  size_t n = 0;
  while ((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
         *s == '_' || *s == '-') {
    if (n + 1 < cap) out[n++] = *s;
    s++;
  }
  out[n] = '\0';
  return n > 0 ? s : NULL;
}

/* Parses malloc_info's text: tags nest and close in order, attributes are quoted, nothing but
   white space lies between tags, and the document is one <malloc> element. Children of <malloc>
   are kept with their type, count and size attributes. */
static void info_parse(const char *text, info_t *info) {
  char stack[8][16];
  int depth = 0, roots = 0;
  memset(info, 0, sizeof *info);
  const char *s = info_skip_space(text);
  while (*s != '\0') {
    if (*s++ != '<') return;
    if (*s == '/') {
      char name[16];
      s = info_name(s + 1, name, sizeof name);
      if (s == NULL || *s++ != '>' || depth == 0 || strcmp(stack[--depth], name) != 0) return;
    } else {
      char name[16], attr[16], value[32];
      info_figure_t fig;
      memset(&fig, 0, sizeof fig);
      s = info_name(s, name, sizeof name);
      if (s == NULL || depth == (int)(sizeof stack / sizeof stack[0])) return;
      snprintf(fig.name, sizeof fig.name, "%s", name);
      for (;;) {
        const char *after = info_skip_space(s);
        if (*after == '/' || *after == '>') {
          s = after;
          break;
        }
        if (after == s || (s = info_name(after, attr, sizeof attr)) == NULL) return;
        if (*s++ != '=' || *s++ != '"') return;
        size_t n = 0;
        for (; *s != '"' && *s != '\0' && *s != '<'; s++)
          if (n + 1 < sizeof value) value[n++] = *s;
        value[n] = '\0';
        if (*s++ != '"') return;
        if (strcmp(attr, "type") == 0) snprintf(fig.type, sizeof fig.type, "%s", value);
        if (strcmp(attr, "count") == 0) fig.count = strtoull(value, NULL, 10);
        if (strcmp(attr, "size") == 0) fig.size = strtoull(value, NULL, 10);
        if (depth == 0 && strcmp(attr, "version") == 0)
          snprintf(info->version, sizeof info->version, "%s", value);
      }
      int empty = *s == '/';
      if (empty) s++;
      if (*s++ != '>') return;
      if (depth == 0 && (roots++ > 0 || strcmp(name, "malloc") != 0)) return;
      if (depth == 1 && info->figures < INFO_FIGURES) info->figure[info->figures++] = fig;
      if (!empty) snprintf(stack[depth++], sizeof stack[0], "%s", name);
    }
    s = info_skip_space(s);
  }
  info->well_formed = depth == 0 && roots == 1;
}

/* The child of <malloc> named `name` with type `type`, or NULL. */
static const info_figure_t *info_find(const info_t *info, const char *name, const char *type) {
  for (int i = 0; i < info->figures; i++)
    if (strcmp(info->figure[i].name, name) == 0 && strcmp(info->figure[i].type, type) == 0)
      return &info->figure[i];
  return NULL;
}

/* The sum of the sizes of <malloc>'s <total> children. */
static unsigned long long info_total_size(const info_t *info) {
  unsigned long long sum = 0;
  for (int i = 0; i < info->figures; i++)
    if (strcmp(info->figure[i].name, "total") == 0) sum += info->figure[i].size;
  return sum;
}

/* Calls malloc_info and parses what it wrote; shows the text when it is not well formed. */
static void info_take(info_t *info) {
  static char text[64 * 1024];
  FILE *fp = tmpfile();
  REQUIRE(fp != NULL);
  CHECK(malloc_info(0, fp) == 0);
  rewind(fp);
  size_t got = fread(text, 1, sizeof text - 1, fp);
  text[got] = '\0';
  fclose(fp);
  info_parse(text, info);
  if (!info->well_formed) NOTE("  malloc_info wrote:\n%.2000s\n", text);
  CHECK(info->well_formed);
  CHECK(info->version[0] != '\0');
  const info_figure_t *current = info_find(info, "system", "current");
  const info_figure_t *max = info_find(info, "system", "max");
  CHECK(current != NULL && max != NULL);
  if (current != NULL && max != NULL) CHECK(max->size >= current->size);
}

static void test_malloc_info(void) {
  static info_t before, held, big;
  info_take(&before);
  size_t count = INFO_HELD / INFO_HELD_BLOCK;
  void **blocks = malloc(count * sizeof *blocks);
  REQUIRE(blocks != NULL);
  for (size_t i = 0; i < count; i++) {
    blocks[i] = malloc(opaque_size(INFO_HELD_BLOCK));
    REQUIRE(blocks[i] != NULL);
    memset(blocks[i], 9, INFO_HELD_BLOCK);
  }
  info_take(&held);
  const info_figure_t *current = info_find(&held, "system", "current");
  CHECK(current != NULL && current->size >= INFO_HELD);
  const info_figure_t *live_before = info_find(&before, "total", "live");
  const info_figure_t *live_held = info_find(&held, "total", "live");
  if (api_magpie_loaded()) { /* magpie's own figure: blocks and bytes in use */
    CHECK(live_before != NULL && live_held != NULL);
    if (live_before != NULL && live_held != NULL) {
      CHECK(live_held->count >= live_before->count + count);
      CHECK(live_held->size >= live_before->size + INFO_HELD);
    }
  }
  /* A big block shows in the totals (glibc: mmap, magpie: large and live). */
  void *p = malloc(opaque_size(INFO_BIG));
  REQUIRE(p != NULL);
  memset(p, 1, INFO_BIG);
  info_take(&big);
  CHECK(info_total_size(&big) >= info_total_size(&held) + INFO_BIG);
  free(p);
  for (size_t i = 0; i < count; i++)
    free(blocks[i]);
  free(blocks);
  /* Options other than 0 are refused (glibc: "options must be zero"). */
  FILE *fp = tmpfile();
  REQUIRE(fp != NULL);
  CHECK(malloc_info(1, fp) != 0);
  fclose(fp);
}

int main(void) {
  api_begin("glibc_ext");
  test_mallinfo2();
  test_malloc_trim();
  test_malloc_stats();
  test_malloc_info();
  return api_end();
}
