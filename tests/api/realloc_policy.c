/*
 * realloc's hysteresis (magpie's policy; the standard allows it, glibc's differs): a block
 * shrunk by less than a quarter stays where it is, and a block that grows gets a quarter more
 * room at least, so a string appended to piece by piece moves O(log n) times.
 */
#include "check.h"

#include <malloc.h>

static void test_size(size_t old) {
  unsigned char *p = malloc(opaque_size(old));
  REQUIRE(p != NULL);
  size_t usable = malloc_usable_size(p);
  memset(p, 0x6b, usable);
  unsigned char *q = realloc(p, opaque_size(usable - usable / 4));
  CHECK(q == p); /* a shrink by a quarter stays */
  REQUIRE(q != NULL);
  size_t grown = usable + 1;
  unsigned char *r = realloc(q, opaque_size(grown));
  REQUIRE(r != NULL);
  size_t room = malloc_usable_size(r);
  CHECK(room >= usable + usable / 4);
  if (room < usable + usable / 4)
    NOTE("realloc(%zu-byte block, %zu): usable %zu\n", usable, grown, room);
  CHECK(r[0] == 0x6b && r[usable - usable / 4 - 1] == 0x6b);
  unsigned char *s = realloc(r, opaque_size(usable / 2)); /* a real shrink may move */
  REQUIRE(s != NULL);
  CHECK(s[0] == 0x6b && s[usable / 2 - 1] == 0x6b);
  free(s);
}

/* Appending 16 bytes at a time up to 4 MiB: without the quarter rule every size class and
   every page would be a new block or a new mapping. */
static void test_appends(void) {
  size_t moves = 0, n = 0;
  unsigned char *s = NULL;
  while (n < 4 * MiB) {
    unsigned char *t = realloc(s, opaque_size(n + 16));
    REQUIRE(t != NULL);
    if (t != s) moves++;
    memset(t + n, (int)(n >> 4), 16);
    s = t;
    n += 16;
  }
  for (size_t i = 0; i < n; i += 16)
    CHECK(s[i] == (unsigned char)(i >> 4));
  CHECK(moves <= 60);
  if (moves > 60) NOTE("4 MiB by 16-byte appends moved %zu times\n", moves);
  free(s);
}

int main(void) {
  api_begin("realloc_policy");
  for (size_t old = 64; old <= 16 * MiB; old = old * 3 + 1000)
    test_size(old);
  test_appends();
  return api_end();
}
