/*
 * churn: single-threaded allocate/free of blocks of every size from 8 bytes to 32 KiB.
 *
 * Models the allocation pattern of a single-threaded program's inner loops: a batch of blocks is
 * allocated and then freed in one of three orders, which stress different parts of an allocator:
 *   lifo    freed in reverse order (stack-like; what a magazine or free-list cache likes best),
 *   fifo    freed in allocation order (queue-like; the cache's head is always the coldest block),
 *   random  freed in a random order (scatters frees over many slabs/pages; fragmentation).
 * Sizes are log-uniform over 8..32768 (each power-of-two band equally likely), drawn from a table
 * made before the clock starts so that the loop measures the allocator, not the random numbers.
 * Every block gets a tag in its first and last bytes, checked before it is freed.
 *
 *   churn [-i rounds] [-n batch] [-s seed] [-m lifo|fifo|random|all]
 */
#include "bench.h"

#define SIZE_MIN 8
#define SIZE_MAX_ 32768
#define SIZE_TABLE 65536 /* entries; a power of two so the rolling index is a mask */

static const char usage[] =
    "churn: single-thread alloc/free of 8..32768-byte blocks in LIFO, FIFO and random order\n"
    "  -i rounds per order (default 200)   -n blocks per batch (default 1000)\n"
    "  -s seed   -m lifo|fifo|random|all (default all)   -t must be 1\n";

static size_t sizes[SIZE_TABLE];

/* One round: allocate batch blocks, free them in the order given by order[] (a permutation). */
static void round_(void **blocks, const size_t *order, long batch, size_t *pos, uint64_t round) {
  size_t p = *pos;
  for (long i = 0; i < batch; i++) {
    size_t sz = sizes[(p + (size_t)i) & (SIZE_TABLE - 1)];
    void *b = malloc(sz);
    if (b == NULL) bench_die("malloc(%zu) returned NULL", sz);
    bench_fill(b, sz, round * 0x10001ull + (uint64_t)i);
    blocks[i] = b;
  }
  for (long k = 0; k < batch; k++) {
    size_t i = order[k];
    size_t sz = sizes[(p + i) & (SIZE_TABLE - 1)];
    bench_check(blocks[i], sz, round * 0x10001ull + (uint64_t)i, "churn");
    free(blocks[i]);
  }
  *pos = p + (size_t)batch * 7; /* a different window of the table next round */
}

int main(int argc, char **argv) {
  bench_args_t a = {.threads = 1, .iters = 200, .seed = 1, .mode = "all", .n = 1000};
  bench_parse(argc, argv, &a, usage);
  if (a.threads != 1 || a.n < 1) bench_die("churn is single-threaded (-t 1) and needs -n >= 1");
  long batch = a.n;

  bench_rng_t rng;
  bench_rng_init(&rng, a.seed, 0);
  for (size_t i = 0; i < SIZE_TABLE; i++)
    sizes[i] = bench_logsize(&rng, SIZE_MIN, SIZE_MAX_);

  void **blocks = bench_xmalloc((size_t)batch * sizeof(void *));
  size_t *lifo = bench_xmalloc((size_t)batch * sizeof(size_t));
  size_t *fifo = bench_xmalloc((size_t)batch * sizeof(size_t));
  size_t *rnd = bench_xmalloc((size_t)batch * sizeof(size_t));
  for (long i = 0; i < batch; i++) {
    fifo[i] = (size_t)i;
    lifo[i] = (size_t)(batch - 1 - i);
    rnd[i] = (size_t)i;
  }
  for (long i = batch - 1; i > 0; i--) { /* Fisher-Yates */
    size_t j = (size_t)bench_below(&rng, (uint64_t)i + 1), t = rnd[i];
    rnd[i] = rnd[j];
    rnd[j] = t;
  }

  static const char *const names[3] = {"lifo", "fifo", "random"};
  const size_t *orders[3] = {lifo, fifo, rnd};
  double secs[3] = {0, 0, 0};
  int ran = 0;
  size_t pos = 0;
  double t0 = bench_now();
  for (int o = 0; o < 3; o++) {
    if (strcmp(a.mode, "all") != 0 && strcmp(a.mode, names[o]) != 0) continue;
    ran++;
    double s = bench_now();
    for (long r = 0; r < a.iters; r++)
      round_(blocks, orders[o], batch, &pos, (uint64_t)r);
    secs[o] = bench_now() - s;
  }
  double total = bench_now() - t0;
  if (ran == 0) bench_die("unknown mode %s", a.mode);

  double ops = (double)ran * (double)a.iters * (double)batch; /* malloc+free pairs */
  printf("RESULT churn time=%.4f lifo=%.4f fifo=%.4f random=%.4f pairs=%.0f mpairs_per_s=%.2f\n",
         total, secs[0], secs[1], secs[2], ops, ops / total / 1e6);
  free(blocks);
  free(lifo);
  free(fifo);
  free(rnd);
  return 0;
}
