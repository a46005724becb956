/*
 * populate: mapping the pages of a big fresh block at once, by one thread against several.
 *
 * Each repetition mallocs a block of -n MiB (fresh pages: magpie maps a block that big lazily,
 * and calloc would populate one of up to calloc_populate bytes itself) and maps all its pages,
 * four ways in turn, so that the machine's drift hits all four alike:
 *   one      one madvise(MADV_POPULATE_WRITE) by the calling thread (what calloc did before)
 *   par      magpie_populate: several threads at once, in 2 MiB chunks
 *   one_thp  as one, the block marked MADV_HUGEPAGE first (2 MiB pages where the kernel has them)
 *   par_thp  as par, marked likewise
 * Between two, the block is freed and magpie_trim gives its pages back, so each starts from
 * fresh pages. Only the mapping is timed. A byte written in each MiB before it must still be
 * there after it, and every other page must read zero. Prints the median and the spread
 * (min..max) of each, and the speed-up of par over one.
 * This workload links against libmagpie and runs only for magpie.
 *
 *   populate [-n MiB] [-i repetitions]
 */
#include "bench.h"

#include <magpie.h>
#include <sys/mman.h>

#define VARIANTS 4
#define MAX_REPS 64

static const char usage[] = "populate: map a fresh block's pages by one thread or several (magpie "
                            "only)\n  -n block size in MiB (default 1024)   -i repetitions "
                            "(default 5, at most 64)\n";

static const char *const names[VARIANTS] = {"one", "par", "one_thp", "par_thp"};

static double map_block(int variant, size_t size) {
  unsigned char *p = malloc(size);
  if (p == NULL) bench_die("malloc(%zu) returned NULL", size);
  for (size_t i = 0; i < size; i += 1 << 20)
    p[i] = (unsigned char)(i >> 20 | 1);
  if (variant >= 2 && madvise(p, size, MADV_HUGEPAGE) != 0) bench_die("MADV_HUGEPAGE failed");
  double start = bench_now();
  int error = variant % 2 ? magpie_populate(p, size)
                          : (madvise(p, size, MADV_POPULATE_WRITE) == 0 ? 0 : errno);
  double took = bench_now() - start;
  if (error) bench_die("%s: populate failed: %s", names[variant], strerror(error));
  for (size_t i = 0; i < size; i += 4096) {
    unsigned char want = i % (1 << 20) ? 0 : (unsigned char)(i >> 20 | 1);
    if (p[i] != want) bench_fail("%s: byte %zu is %d, not %d", names[variant], i, p[i], want);
  }
  free(p);
  magpie_trim();
  return took;
}

static int by_value(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

int main(int argc, char **argv) {
  bench_args_t a = {.threads = 1, .iters = 5, .seed = 1, .n = 1024};
  bench_parse(argc, argv, &a, usage);
  if (a.n < 1 || a.iters < 1 || a.iters > MAX_REPS) bench_die("bad -n or -i\n%s", usage);
  size_t size = (size_t)a.n << 20;
  static double t[VARIANTS][MAX_REPS];
  for (long r = 0; r < a.iters; r++)
    for (int v = 0; v < VARIANTS; v++)
      t[(v + r) % VARIANTS][r] = map_block((v + r) % VARIANTS, size); /* rotate the order */
  double median[VARIANTS], total = 0;
  for (int v = 0; v < VARIANTS; v++) {
    qsort(t[v], (size_t)a.iters, sizeof(double), by_value);
    median[v] = t[v][a.iters / 2];
    printf("%-8s %5ld MiB  median %.3f s  (%.3f..%.3f)  %.2f GiB/s\n", names[v], a.n, median[v],
           t[v][0], t[v][a.iters - 1], (double)size / (1 << 30) / median[v]);
    for (long r = 0; r < a.iters; r++)
      total += t[v][r];
  }
  printf("RESULT populate mib=%ld time=%.3f one=%.3f par=%.3f one_thp=%.3f par_thp=%.3f "
         "speedup=%.2f speedup_thp=%.2f\n",
         a.n, total, median[0], median[1], median[2], median[3], median[0] / median[1],
         median[2] / median[3]);
  return 0;
}
