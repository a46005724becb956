/*
 * magpie_populate: maps the pages of a block magpie handed out, by several threads when the
 * block is big, keeping its contents.
 *
 * 1. A fresh 256 MiB block: after the call the process's RSS holds it, the bytes written before
 *    are still there and the rest reads as zero. The kernel counts the faults of a populate to
 *    the thread that made them (RUSAGE_THREAD against RUSAGE_SELF). Argument "threads": once
 *    the program has run a thread, and where it may use two CPUs or more, helpers make some.
 *    Argument "single" (run under MAGPIE_OPTIONS=reaper=0, so that magpie starts no reaper):
 *    while the program is single-threaded the caller makes them all.
 * 2. Errors: NULL, a pointer magpie did not hand out, an interior pointer, a freed block and a
 *    length beyond the block's usable size give EINVAL; a kernel without MADV_POPULATE_WRITE
 *    gives EOPNOTSUPP.
 */
#include "check.h"

#include <errno.h>
#include <magpie.h>
#include <pthread.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#define BLOCK (256 * MiB)

static size_t rss_bytes(void) {
  FILE *f = fopen("/proc/self/statm", "r");
  REQUIRE(f != NULL);
  unsigned long size, resident;
  REQUIRE(fscanf(f, "%lu %lu", &size, &resident) == 2);
  fclose(f);
  return resident * (size_t)sysconf(_SC_PAGESIZE);
}

static long minor_faults(int who) {
  struct rusage ru;
  REQUIRE(getrusage(who, &ru) == 0);
  return ru.ru_minflt;
}

static int kernel_populates(void) {
  void *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  REQUIRE(p != MAP_FAILED);
  int ok = madvise(p, 4096, MADV_POPULATE_WRITE) == 0;
  munmap(p, 4096);
  return ok;
}

/* Populates a fresh block; whether helper threads made some of its faults. */
static int populate_big_block(void) {
  unsigned char *p = malloc(opaque_size(BLOCK));
  REQUIRE(p != NULL);
  size_t rss = rss_bytes(); /* before the marks: under THP "always" each faults in 2 MiB */
  size_t marks[] = {0, BLOCK / 3, BLOCK - 1};
  for (size_t i = 0; i < 3; i++)
    p[marks[i]] = (unsigned char)(0xa0 + i);
  long self = minor_faults(RUSAGE_SELF), caller = minor_faults(RUSAGE_THREAD);
  CHECK(magpie_populate(p, BLOCK) == 0);
  long by_self = minor_faults(RUSAGE_SELF) - self, by_caller = minor_faults(RUSAGE_THREAD) - caller;
  size_t grown = rss_bytes() - rss;
  CHECK(grown >= BLOCK - 4 * MiB);
  NOTE("populate: RSS grew %zu MiB; %ld faults, %ld by the caller\n", grown >> 20, by_self,
       by_caller);
  for (size_t i = 0; i < 3; i++)
    CHECK(p[marks[i]] == 0xa0 + i);
  p[marks[0]] = p[marks[1]] = p[marks[2]] = 0;
  CHECK(all_bytes_are(p, BLOCK, 0));
  free(p);
  magpie_trim(); /* the next block gets fresh pages */
  CHECK(by_self >= by_caller);
  return by_self > by_caller;
}

static void *nothing(void *arg) {
  return arg;
}

static void test_big_block(int single) {
  if (single) {
    CHECK(!populate_big_block());
    return;
  }
  pthread_t t;
  REQUIRE(pthread_create(&t, NULL, nothing, NULL) == 0);
  REQUIRE(pthread_join(t, NULL) == 0);
  cpu_set_t cpus;
  int several = sched_getaffinity(0, sizeof cpus, &cpus) == 0 && CPU_COUNT(&cpus) >= 2;
  int helped = populate_big_block();
  if (several) CHECK(helped);
}

static void test_errors(void) {
  int local = 0;
  CHECK(magpie_populate(NULL, 0) == EINVAL);
  CHECK(magpie_populate(&local, sizeof local) == EINVAL);
  unsigned char *big = malloc(opaque_size(4 * MiB));
  REQUIRE(big != NULL);
  size_t usable = magpie_usable_size(big);
  CHECK(magpie_populate(big + 4096, 4096) == EINVAL);
  CHECK(magpie_populate(big, usable + 1) == EINVAL);
  CHECK(magpie_populate(big, usable) == 0);
  CHECK(magpie_populate(big, 0) == 0);
  free(big);
  unsigned char *small = malloc(opaque_size(100));
  REQUIRE(small != NULL);
  CHECK(magpie_populate(small, 100) == 0);
  CHECK(magpie_populate(small + 16, 16) == EINVAL);
  free(small);
  CHECK(magpie_populate(small, 100) == EINVAL);
}

int main(int argc, char **argv) {
  api_begin("populate");
  REQUIRE(argc == 2 && (strcmp(argv[1], "threads") == 0 || strcmp(argv[1], "single") == 0));
  if (!kernel_populates()) {
    void *p = malloc(opaque_size(4 * MiB));
    REQUIRE(p != NULL);
    CHECK(magpie_populate(p, 4 * MiB) == EOPNOTSUPP);
    free(p);
    return api_end();
  }
  test_big_block(strcmp(argv[1], "single") == 0);
  test_errors();
  return api_end();
}
