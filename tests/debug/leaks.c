/*
 * Known leaks for debug mode's leak report: 10 blocks of 48 bytes from leak_small, 3 blocks of
 * 5000 bytes from leak_big (both unreachable), and one block of 777 bytes from keep_global that a
 * global still points to (reported by `leaks`, left out by `leaks=unreachable`).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NOINLINE __attribute__((noinline))

void *kept_by_global;

NOINLINE void leak_small(void) {
  for (int i = 0; i < 10; i++) {
    char *volatile p = malloc(48);
    p[0] = 1;
  }
}

NOINLINE void leak_big(void) {
  for (int i = 0; i < 3; i++) {
    char *volatile p = malloc(5000);
    p[0] = 1;
  }
}

NOINLINE void keep_global(void) {
  kept_by_global = malloc(777);
}

/* Overwrites the dead stack below main, where the leaked pointers were. */
NOINLINE void scrub_stack(void) {
  volatile char junk[16384];
  memset((char *)junk, 0, sizeof junk);
}

int main(void) {
  leak_small();
  leak_big();
  keep_global();
  void *freed = malloc(100); /* freed: never reported */
  free(freed);
  scrub_stack();
  printf("leaks done\n");
  return 0;
}
