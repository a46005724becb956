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

static void test_malloc_stats(void) {
  void *keep = malloc(opaque_size(1000));
  size_t len = 0;
  char *text = capture_stderr(call_malloc_stats, &len);
  if (len == 0) NOTE("  malloc_stats() printed nothing on stderr\n");
  CHECK(len > 0);
  free(text);
  free(keep);
}

static void test_malloc_info(void) {
  FILE *fp = tmpfile();
  REQUIRE(fp != NULL);
  void *keep = malloc(opaque_size(1000));
  int rc = malloc_info(0, fp);
  CHECK(rc == 0);
  long size = ftell(fp);
  CHECK(size > 0);
  rewind(fp);
  char *text = calloc(1, (size_t)(size > 0 ? size : 0) + 1);
  REQUIRE(text != NULL);
  size_t got = fread(text, 1, (size_t)(size > 0 ? size : 0), fp);
  CHECK(got == (size_t)size);
  /* XML-ish: an element named malloc, opened first and closed last. */
  const char *start = text;
  while (*start == ' ' || *start == '\n' || *start == '\t')
    start++;
  size_t end = got;
  while (end > 0 && (text[end - 1] == ' ' || text[end - 1] == '\n' || text[end - 1] == '\t'))
    end--;
  if (strncmp(start, "<malloc", 7) != 0) NOTE("  malloc_info wrote: %.200s\n", text);
  CHECK(strncmp(start, "<malloc", 7) == 0);
  CHECK(strstr(text, "</malloc>") != NULL);
  CHECK(end > 0 && text[end - 1] == '>');
  free(text);
  fclose(fp);
  /* Options other than 0 are refused (glibc: "options must be zero"). */
  fp = tmpfile();
  REQUIRE(fp != NULL);
  CHECK(malloc_info(1, fp) != 0);
  fclose(fp);
  free(keep);
}

int main(void) {
  api_begin("glibc_ext");
  test_mallinfo2();
  test_malloc_trim();
  test_malloc_stats();
  test_malloc_info();
  return api_end();
}
