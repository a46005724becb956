/*
 * The text report's tables with the largest figures (issue 21, part 4): a snapshot whose every
 * class and lock figure is 2^64 - 1 is written as the exit report writes it (stats_write_text),
 * and each table row must still read as its columns, each figure apart from the next. Reaches
 * into the statistics module (stats_impl.h) to fill the snapshot without counting that far.
 */
#include "stats_impl.h"
#include "unit.h"

static char text[1 << 16];
static size_t text_len;

static void collect(void *ctx, const char *s, size_t len) {
  (void)ctx;
  UCHECK(text_len + len < sizeof text);
  memcpy(text + text_len, s, len);
  text_len += len;
}

/* The line of text that follows the line holding head; copied into out. */
static void line_after(const char *head, char *out, size_t cap) {
  const char *at = strstr(text, head);
  UCHECK(at);
  at = strchr(at, '\n');
  UCHECK(at);
  at++;
  const char *end = strchr(at, '\n');
  UCHECK(end && (size_t)(end - at) < cap);
  memcpy(out, at, (size_t)(end - at));
  out[end - at] = '\0';
}

int main(void) {
  const uint64_t max = UINT64_MAX;
  const char *count = "18,446,744,073,709,551,615";
  memset(stats_snap_words, 0, sizeof stats_snap_words);
  stats_huge.mode = "auto";
  stats_huge.thp = "madvise";
  SNAP->pid = 1;
  SNAP->allocs = SNAP->frees = SNAP->live_bytes = max;
  SNAP->class_count = 1;
  *SNAP_CLASS(0) = (magpie_area_class_t){.kind = 0,
                                         .index = 1,
                                         .size = max,
                                         .allocs = max,
                                         .frees = max,
                                         .live_bytes = max,
                                         .misses = max,
                                         .slabs = max,
                                         .mag_rounds = max};
  SNAP->lock_count = 1;
  *SNAP_LOCK(0) = (magpie_area_lock_t){
      .name = "heap-arena", .acquisitions = max, .contended = max, .wait_ns = max};
  report_buf_t b = {.sink = collect};
  stats_write_text(&b);
  report_flush(&b);
  text[text_len] = '\0';
  fputs(text, stdout);

  char row[512];
  line_after("    class size", row, sizeof row);
  /* every figure apart from the one before it (at least one space), in order */
  const char *at = row;
  const char *figures[] = {count, count, count, "16.0 EiB", count, count, "18446744073709551615"};
  for (size_t i = 0; i < sizeof figures / sizeof figures[0]; i++) {
    UCHECK(*at == ' ');
    while (*at == ' ')
      at++;
    UCHECK(strncmp(at, figures[i], strlen(figures[i])) == 0);
    at += strlen(figures[i]);
  }
  UCHECK(*at == '\0');

  line_after("    lock ", row, sizeof row);
  at = row;
  while (*at == ' ')
    at++;
  UCHECK(strncmp(at, "heap-arena", 10) == 0);
  at += 10;
  const char *ms = "18,446,744,073,709"; /* wait_ns in ms */
  const char *locks[] = {count, count, ms};
  for (size_t i = 0; i < sizeof locks / sizeof locks[0]; i++) {
    UCHECK(*at == ' ');
    while (*at == ' ')
      at++;
    UCHECK(strncmp(at, locks[i], strlen(locks[i])) == 0);
    at += strlen(locks[i]);
  }
  UCHECK(*at == '\0');
  return 0;
}
