/*
 * profile_probe: a program whose allocation sites and amounts the heap-profile tests know.
 *
 *   profile_probe exit [LEAKS]   leak_here: LEAKS blocks of 256 bytes kept (default 20000);
 *                                keep_here: 20000 blocks of 768 bytes kept (three times the
 *                                bytes); churn_here: 20000 blocks of 1024 bytes, freed in
 *                                batches of 100; left_here and right_here, taking turns in
 *                                batches of 400 at the same depth: 10000 blocks each, of 512
 *                                and 640 bytes (two classes, so that each takes its own slow
 *                                paths, where samples are taken, and batches bigger than the
 *                                magazines, so that there are slow paths); then exits 0
 *   profile_probe wait FILE      the same, prints "ready PID", then allocates and frees a
 *                                batch every 10 ms (slow paths, so the library reaps and sees
 *                                a profile request) until FILE exists; at most 30 s
 *
 * Built with -fno-builtin and each site noinline, so every call and its frame stay.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define KEEP 20000
#define CHURN_BATCH 100
#define TURNS_BATCH 400

static void **kept; /* global, so that no allocation can be proven dead */

__attribute__((noinline)) void leak_here(size_t i) {
  kept[i] = malloc(256);
  memset(kept[i], 1, 256);
}

__attribute__((noinline)) void keep_here(size_t i) {
  kept[i] = malloc(768);
  memset(kept[i], 2, 768);
}

__attribute__((noinline)) void churn_here(void) {
  void *batch[CHURN_BATCH];
  for (int k = 0; k < CHURN_BATCH; k++) {
    batch[k] = malloc(1024);
    memset(batch[k], 3, 64);
  }
  for (int k = 0; k < CHURN_BATCH; k++)
    free(batch[k]);
}

/* Two sites whose samples reach the profiler at the same stack depth, one after the other. */
__attribute__((noinline)) void *left_here(void) {
  void *p = malloc(512);
  memset(p, 4, 64);
  return p;
}

__attribute__((noinline)) void *right_here(void) {
  void *p = malloc(640);
  memset(p, 5, 64);
  return p;
}

__attribute__((noinline)) void alternate_here(void) {
  void *batch[TURNS_BATCH];
  for (int k = 0; k < TURNS_BATCH; k++)
    batch[k] = k & 1 ? right_here() : left_here();
  for (int k = 0; k < TURNS_BATCH; k++)
    free(batch[k]);
}

int main(int argc, char **argv) {
  if (argc < 2 || (strcmp(argv[1], "exit") && strcmp(argv[1], "wait")) ||
      (!strcmp(argv[1], "wait") && argc < 3)) {
    fprintf(stderr, "usage: profile_probe exit [LEAKS] | wait FILE\n");
    return 2;
  }
  size_t leaks = !strcmp(argv[1], "exit") && argc > 2 ? strtoul(argv[2], NULL, 10) : 20000;
  kept = malloc((leaks + KEEP) * sizeof *kept);
  if (!kept) return 1;
  for (size_t i = 0; i < leaks; i++)
    leak_here(i);
  for (size_t i = 0; i < KEEP; i++)
    keep_here(leaks + i);
  for (int i = 0; i < KEEP / CHURN_BATCH; i++)
    churn_here();
  for (int i = 0; i < KEEP / TURNS_BATCH; i++)
    alternate_here();
  if (!strcmp(argv[1], "exit")) return 0;
  printf("ready %ld\n", (long)getpid());
  fflush(stdout);
  struct timespec tick = {0, 10 * 1000 * 1000};
  for (int i = 0; i < 3000 && access(argv[2], F_OK) != 0; i++) {
    churn_here();
    nanosleep(&tick, NULL);
  }
  return 0;
}
