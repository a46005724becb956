/*
 * Huge pages for the heap (issue 14; src/core/hugepage.c), on the kernel's transparent huge pages.
 * One check per argument, each run under the MAGPIE_OPTIONS that tests/api/CMakeLists.txt sets:
 *   always      hugepages=always: a dense heap of small blocks lies >= 90% on huge pages, its
 *               mappings marked MADV_HUGEPAGE ("hg").
 *   never       hugepages=never: the same heap maps no huge page, nor does a large block, in
 *               either THP mode: under "always", where the kernel faults in any aligned 2 MiB
 *               whole unless told not to, their mappings are marked MADV_NOHUGEPAGE ("nh").
 *   small       hugepages=auto (the default), a heap below hugepages_min: no huge page either;
 *               under "always" the small blocks' mappings are marked "nh".
 * A large block is never marked MADV_HUGEPAGE ("hg"); but with never, the kernel's mode decides.
 *   collapse    hugepages=auto,hugepages_min=16m: the huge pages faulted on 4 KiB pages before
 *               the heap reached 16 MiB are collapsed by the reaper thread (every 20 ms here;
 *               the test runs a thread first, as the reaper starts only in programs that have),
 *               so the heap ends up >= 90% on huge pages all the same.
 *   subrelease  hugepages=always: with a few blocks left in each huge page, malloc_trim purges
 *               the free pages inside them (subrelease, counted in the stats) and marks those
 *               huge pages MADV_NOHUGEPAGE (VmFlags "nh"), so khugepaged does not fill them again.
 *   hugetlb     runs itself with hugepages=hugetlb where the kernel has no hugetlb pages
 *               reserved: magpie warns, naming the option, and goes on with hugepages=auto.
 * Without THP (madvise or always) the test is skipped. The heap profiler is off (profile_rate=0):
 * its samples are whole pages of the heap arena, which a check of a block's mapping could pick.
 */
#include "check.h"
#include "magpie.h"

#include <malloc.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

#define HEAP (96 * MiB)
#define BLOCK 64
#define BLOCKS (HEAP / BLOCK)
#define WINDOW (256 * KiB) /* subrelease: one block kept per window */

static void *blocks[BLOCKS];
static bool thp_always; /* the kernel's THP mode is "always" (else "madvise") */

/* A file's first line into buf ("" when it cannot be read). */
static void read_line(const char *path, char *buf, size_t cap) {
  buf[0] = '\0';
  FILE *f = fopen(path, "r");
  if (!f) return;
  if (!fgets(buf, (int)cap, f)) buf[0] = '\0';
  fclose(f);
}

/* The sum of a /proc/self/smaps_rollup field, in bytes. */
static size_t rollup_bytes(const char *field) {
  char line[256];
  size_t kib = 0, n = strlen(field);
  FILE *f = fopen("/proc/self/smaps_rollup", "r");
  REQUIRE(f != NULL);
  while (fgets(line, sizeof line, f))
    if (strncmp(line, field, n) == 0) kib = strtoul(line + n, NULL, 10);
  fclose(f);
  return kib << 10;
}

/* The line starting with field ("VmFlags:", "AnonHugePages:") of the mapping holding addr, from
   /proc/self/smaps. */
static void smaps_line_of(uintptr_t addr, const char *field, char *out, size_t cap) {
  char line[512];
  bool here = false;
  out[0] = '\0';
  FILE *f = fopen("/proc/self/smaps", "r");
  REQUIRE(f != NULL);
  while (fgets(line, sizeof line, f)) {
    unsigned long lo, hi;
    if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' '))
      here = addr >= lo && addr < hi;
    else if (here && strncmp(line, field, strlen(field)) == 0)
      snprintf(out, cap, "%s", line);
  }
  fclose(f);
}

/* magpie's JSON statistics, read through a pipe (a static buffer). */
static const char *stats_json(void) {
  static char json[1 << 16];
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  REQUIRE(magpie_stats_write(fds[1], MAGPIE_STATS_JSON) == 0);
  close(fds[1]);
  ssize_t n, have = 0;
  while ((n = read(fds[0], json + have, sizeof json - 1 - (size_t)have)) > 0)
    have += n;
  close(fds[0]);
  json[have] = '\0';
  return json;
}

/* A number from the JSON statistics ("key":N). */
static uint64_t stats_number(const char *key) {
  char pattern[64];
  snprintf(pattern, sizeof pattern, "\"%s\":", key);
  const char *at = strstr(stats_json(), pattern);
  REQUIRE(at != NULL);
  return strtoull(at + strlen(pattern), NULL, 10);
}

static void fill_heap(void) {
  for (size_t i = 0; i < BLOCKS; i++) {
    blocks[i] = malloc(BLOCK);
    REQUIRE(blocks[i] != NULL);
    memset(blocks[i], (int)(i & 0xff), BLOCK);
  }
}

/* Whether the mapping holding p carries VmFlags flag ("nh", "hg"). */
static bool mapped_with(const void *p, const char *flag) {
  char flags[512], word[8];
  smaps_line_of((uintptr_t)p, "VmFlags:", flags, sizeof flags);
  snprintf(word, sizeof word, " %s", flag);
  NOTE("%p: %s", p, flags);
  return strstr(flags, word) != NULL;
}

/* A large block, written through: never marked MADV_HUGEPAGE, and marked MADV_NOHUGEPAGE
   with hugepages=never (off); else the kernel's THP mode decides, as for other allocators. */
static void check_large_block(bool off) {
  size_t size = 8 * MiB;
  char *big = malloc(size);
  REQUIRE(big != NULL);
  memset(big, 1, size);
  CHECK(!mapped_with(big, "hg"));
  if (off && thp_always) CHECK(mapped_with(big, "nh"));
  free(big);
}

static void check_always(void) {
  fill_heap();
  size_t huge = rollup_bytes("AnonHugePages:");
  NOTE("%zu MiB of a %zu MiB heap on huge pages", huge >> 20, (size_t)HEAP >> 20);
  CHECK(huge >= HEAP / 10 * 9);
  CHECK(stats_number("huge_bytes") >= HEAP / 10 * 9);
  CHECK(mapped_with(blocks[BLOCKS / 2], "hg"));
  check_large_block(false);
}

static void *no_work(void *arg) {
  return arg;
}

static void check_collapse(void) {
  /* The reaper thread collapses; magpie starts it only in a program that has run a thread of
     its own (a single-threaded one must stay so: docs/guarantees.md, fork). */
  pthread_t thread;
  REQUIRE(pthread_create(&thread, NULL, no_work, NULL) == 0);
  REQUIRE(pthread_join(thread, NULL) == 0);
  fill_heap();
  size_t huge = 0;
  for (int wait = 0; wait < 100 && huge < HEAP / 10 * 9; wait++) { /* up to 5 s */
    usleep(50 * 1000);
    huge = rollup_bytes("AnonHugePages:");
  }
  NOTE("%zu MiB of a %zu MiB heap on huge pages", huge >> 20, (size_t)HEAP >> 20);
  CHECK(huge >= HEAP / 10 * 9);
  CHECK(stats_number("collapses") > 0);
}

/* Only magpie's heap is asked about: under THP "always" the kernel also puts the test's own
   array of blocks (.bss) on huge pages. */
static void check_never(void) {
  fill_heap();
  CHECK(stats_number("huge_bytes") == 0);
  CHECK(!mapped_with(blocks[BLOCKS / 2], "hg"));
  if (thp_always) CHECK(mapped_with(blocks[BLOCKS / 2], "nh"));
  check_large_block(true);
}

static void check_small(void) {
  for (size_t i = 0; i < BLOCKS / 12; i++) { /* 8 MiB: below hugepages_min */
    blocks[i] = malloc(BLOCK);
    REQUIRE(blocks[i] != NULL);
    memset(blocks[i], (int)(i & 0xff), BLOCK);
  }
  char huge[128]; /* the slabs' mapping; large blocks follow the kernel's mode (above) */
  smaps_line_of((uintptr_t)blocks[BLOCKS / 24], "AnonHugePages:", huge, sizeof huge);
  NOTE("%s", huge);
  CHECK(strtoul(huge + strlen("AnonHugePages:"), NULL, 10) == 0);
  CHECK(!mapped_with(blocks[BLOCKS / 24], "hg"));
  if (thp_always) CHECK(mapped_with(blocks[BLOCKS / 24], "nh"));
  check_large_block(false);
}

static void check_subrelease(void) {
  fill_heap();
  uintptr_t lo = UINTPTR_MAX, kept = 0;
  for (size_t i = 0; i < BLOCKS; i++)
    if ((uintptr_t)blocks[i] < lo) lo = (uintptr_t)blocks[i];
  static unsigned char window_kept[(HEAP * 4) / WINDOW];
  for (size_t i = 0; i < BLOCKS; i++) {
    size_t w = ((uintptr_t)blocks[i] - lo) / WINDOW;
    if (w < sizeof window_kept && !window_kept[w]) {
      window_kept[w] = 1;
      kept = (uintptr_t)blocks[i];
      continue;
    }
    free(blocks[i]);
  }
  size_t rss_before = rollup_bytes("Rss:");
  malloc_trim(0);
  size_t rss_after = rollup_bytes("Rss:");
  char flags[512];
  smaps_line_of(kept, "VmFlags:", flags, sizeof flags);
  NOTE("RSS %zu -> %zu MiB; kept block %#lx: %s", rss_before >> 20, rss_after >> 20,
       (unsigned long)kept, flags);
  CHECK(stats_number("subreleases") > 0);
  CHECK(strstr(flags, " nh") != NULL);
  CHECK(rss_after < rss_before / 2);
}

static void check_hugetlb_fallback(char *self) {
  char reserved[64];
  read_line("/proc/sys/vm/nr_hugepages", reserved, sizeof reserved);
  if (atoi(reserved) > 0) {
    printf("SKIPPED: hugepages: hugetlb pages are reserved here, there is no fallback to see\n");
    exit(77);
  }
  int err[2];
  REQUIRE(pipe(err) == 0);
  pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    dup2(err[1], 2);
    setenv("MAGPIE_OPTIONS", "hugepages=hugetlb", 1);
    execl(self, self, "hugetlb-child", (char *)NULL);
    _exit(127);
  }
  close(err[1]);
  static char out[1 << 14];
  ssize_t n, have = 0;
  while ((n = read(err[0], out + have, sizeof out - 1 - (size_t)have)) > 0)
    have += n;
  out[have] = '\0';
  int status;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  NOTE("child's stderr: %s", out);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  CHECK(strstr(out, "hugepages=hugetlb") != NULL && strstr(out, "hugepages=auto") != NULL);
}

/* Under hugepages=hugetlb with none reserved: magpie works, as hugepages=auto. */
static void check_hugetlb_child(void) {
  void *p = malloc(100);
  REQUIRE(p != NULL);
  free(p);
  CHECK(strstr(stats_json(), "\"mode\":\"auto\"") != NULL);
}

int main(int argc, char **argv) {
  api_begin("hugepages");
  const char *what = argc > 1 ? argv[1] : "";
  char thp[128];
  read_line("/sys/kernel/mm/transparent_hugepage/enabled", thp, sizeof thp);
  thp_always = strstr(thp, "[always]") != NULL;
  bool usable = thp_always || strstr(thp, "[madvise]");
  if (strcmp(what, "hugetlb-child") == 0) {
    check_hugetlb_child();
    return api_end();
  }
  if (strcmp(what, "hugetlb") == 0) {
    check_hugetlb_fallback(argv[0]);
    return api_end();
  }
  if (!usable) {
    printf("SKIPPED: hugepages %s: transparent huge pages are \"%s\" here\n", what,
           thp[0] ? strtok(thp, "\n") : "absent");
    return 77;
  }
  if (strcmp(what, "always") == 0)
    check_always();
  else if (strcmp(what, "never") == 0)
    check_never();
  else if (strcmp(what, "small") == 0)
    check_small();
  else if (strcmp(what, "collapse") == 0)
    check_collapse();
  else if (strcmp(what, "subrelease") == 0)
    check_subrelease();
  else
    REQUIRE(!"argument: always, never, small, collapse, subrelease or hugetlb");
  return api_end();
}
