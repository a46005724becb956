/*
 * tlb: a big, long-lived heap of small nodes, pointer-chased in random order (TLB-bound).
 *
 * Models the data of a cache or an in-memory index: hundreds of MiB to GiBs of small objects
 * linked by pointers, read in an order that has nothing to do with where they lie. Each step to
 * the next node lands on another page, so on 4 KiB pages nearly every step misses the TLB (its
 * few thousand entries cover a few MiB) and waits for a page walk; on 2 MiB pages the same
 * entries cover GiBs. How much of its heap an allocator places on huge pages is then worth a
 * large share of the run time. The run:
 *   1. Each of T threads (-t) allocates its share of -n MiB in nodes of NODE_MIN..NODE_MAX bytes
 *      (uniform), fills them (bench_fill), and links them into a ring in random order.
 *   2. Timed: the threads walk their rings for -i steps in all, reading each node (a lookup);
 *      every UPDATE_EVERY-th step replaces the next node by a new one of a new size (an update:
 *      malloc, fill, relink, check and free the old one).
 *   3. The main thread reads /proc/self/smaps_rollup (the sums of /proc/self/smaps over all
 *      mappings): resident bytes and how many of them are anonymous huge pages.
 *   4. Each thread walks its ring once more, checks every node and that none was lost, and
 *      frees them.
 * Reported: time (step 2), huge_kib, rss_kib and huge_share = huge_kib / rss_kib (the program's
 * own few MiB of code and stacks are in rss_kib too: next to the heap they are noise), thp (the
 * kernel's transparent huge page mode), and checksum, the sum of the tags read, which depends on
 * the seed only, not on the allocator.
 *
 *   tlb [-t threads] [-i steps] [-n heap MiB] [-s seed]
 */
#include "bench.h"

#include <stddef.h>

#define NODE_MIN 48
#define NODE_MAX 200
#define UPDATE_EVERY 16 /* steps per update */

static const char usage[] =
    "tlb: a heap of small nodes linked in random order, walked by threads (TLB-bound)\n"
    "  -t threads (default 2)   -i total steps (default 20000000)\n"
    "  -n heap MiB (default 256)   -s seed\n";

/* A node: the pattern's tag sits in its second word (bench_fill at offset 8), its last byte at
   the end of its size bytes. */
typedef struct node {
  struct node *next;
  uint64_t tag;
  uint32_t size;
} node_t;

typedef struct {
  size_t budget; /* bytes of nodes to build */
  long steps;
  uint64_t seed;
  size_t count;      /* nodes in the ring (an update replaces one by one) */
  uint64_t checksum; /* sum of the tags read in step 2 */
  char pad[BENCH_LINE];
} job_t;

static pthread_barrier_t b_built, b_walked, b_measured;

static node_t *new_node(bench_rng_t *r) {
  size_t size = bench_range(r, NODE_MIN, NODE_MAX);
  node_t *n = bench_xmalloc(size);
  n->size = (uint32_t)size;
  bench_fill((char *)n + offsetof(node_t, tag), size - offsetof(node_t, tag), bench_rand(r));
  return n;
}

/* A node overwritten by another block (its size out of range, or its last byte not the one its
   tag and size give) fails here; a node lost from the ring fails the count in step 4. */
static void check_node(const node_t *n) {
  if (n->size < NODE_MIN || n->size > NODE_MAX)
    bench_fail("tlb: node %p has size %u, not within %d..%d", (const void *)n, n->size, NODE_MIN,
               NODE_MAX);
  bench_check((const char *)n + offsetof(node_t, tag), n->size - offsetof(node_t, tag), n->tag,
              "tlb");
}

/* Step 1: allocates nodes up to the budget (at least 2, so that an update never replaces the
   walker's own node) and links them in a random permutation; returns one of them. */
static node_t *build_ring(job_t *j, bench_rng_t *r) {
  size_t cap = 1024, n = 0, bytes = 0;
  node_t **all = bench_xmalloc(cap * sizeof(*all));
  while (bytes < j->budget || n < 2) {
    if (n == cap) {
      cap *= 2;
      all = realloc(all, cap * sizeof(*all));
      if (all == NULL) bench_die("out of memory");
    }
    all[n] = new_node(r);
    bytes += all[n++]->size;
  }
  for (size_t i = n - 1; i > 0; i--) {
    size_t k = (size_t)bench_below(r, i + 1);
    node_t *t = all[i];
    all[i] = all[k];
    all[k] = t;
  }
  for (size_t i = 0; i < n; i++)
    all[i]->next = all[(i + 1) % n];
  node_t *head = all[0];
  free(all);
  j->count = n;
  return head;
}

/* Step 2: walks the ring from p; returns the node it ends on. */
static node_t *walk(job_t *j, bench_rng_t *r, node_t *p) {
  uint64_t sum = 0;
  for (long k = 1; k <= j->steps; k++) {
    node_t *q = p->next;
    if (k % UPDATE_EVERY == 0) {
      node_t *n = new_node(r);
      n->next = q->next;
      p->next = n;
      check_node(q);
      free(q);
      q = n;
    }
    sum += q->tag;
    p = q;
  }
  j->checksum = sum;
  return p;
}

/* Step 4: checks every node of the ring and that there are still count of them; frees them. */
static void check_and_free(const job_t *j, node_t *p) {
  size_t n = 0;
  node_t *q = p->next;
  p->next = NULL;
  while (q != NULL) {
    node_t *next = q->next;
    check_node(q);
    free(q);
    n++;
    if (n > j->count) bench_fail("tlb: the ring holds more than its %zu nodes", j->count);
    q = next;
  }
  if (n != j->count) bench_fail("tlb: the ring holds %zu nodes, expected %zu", n, j->count);
}

static void *worker(void *arg) {
  job_t *j = arg;
  bench_rng_t r;
  bench_rng_init(&r, j->seed, 7);
  node_t *p = build_ring(j, &r);
  pthread_barrier_wait(&b_built);
  p = walk(j, &r, p);
  pthread_barrier_wait(&b_walked);
  pthread_barrier_wait(&b_measured);
  check_and_free(j, p);
  return NULL;
}

/* Rss and AnonHugePages (KiB) summed over the process's mappings; 0 where unreadable. */
static void read_smaps(size_t *rss_kib, size_t *huge_kib) {
  *rss_kib = *huge_kib = 0;
  FILE *f = fopen("/proc/self/smaps_rollup", "r");
  if (f == NULL) return;
  char line[256];
  while (fgets(line, sizeof(line), f) != NULL) {
    size_t v;
    if (sscanf(line, "Rss: %zu kB", &v) == 1) *rss_kib = v;
    if (sscanf(line, "AnonHugePages: %zu kB", &v) == 1) *huge_kib = v;
  }
  fclose(f);
}

/* The kernel's THP mode: the bracketed word of .../transparent_hugepage/enabled, or "none". */
static void read_thp_mode(char *mode, size_t size) {
  snprintf(mode, size, "none");
  FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
  if (f == NULL) return;
  char line[128];
  if (fgets(line, sizeof(line), f) != NULL) {
    char *lb = strchr(line, '['), *rb = lb ? strchr(lb, ']') : NULL;
    if (rb != NULL) snprintf(mode, size, "%.*s", (int)(rb - lb - 1), lb + 1);
  }
  fclose(f);
}

int main(int argc, char **argv) {
  bench_args_t a = {.threads = 2, .iters = 20000000, .seed = 1, .n = 256};
  bench_parse(argc, argv, &a, usage);
  int t = a.threads;
  if (a.n < 1) bench_die("-n must be >= 1");
  job_t *jobs = calloc((size_t)t, sizeof(*jobs));
  pthread_t *tids = calloc((size_t)t, sizeof(pthread_t));
  if (jobs == NULL || tids == NULL) bench_die("out of memory");
  for (int i = 0; i < t; i++) {
    jobs[i].budget = (size_t)a.n * 1024 * 1024 / (size_t)t;
    jobs[i].steps = a.iters / t;
    jobs[i].seed = a.seed * 1000003u + (uint64_t)i;
  }
  pthread_barrier_init(&b_built, NULL, (unsigned)t + 1);
  pthread_barrier_init(&b_walked, NULL, (unsigned)t + 1);
  pthread_barrier_init(&b_measured, NULL, (unsigned)t + 1);
  bench_spawn(tids, t, worker, jobs, sizeof(*jobs), NULL, 0);
  pthread_barrier_wait(&b_built);
  double t0 = bench_now();
  pthread_barrier_wait(&b_walked);
  double secs = bench_now() - t0;
  size_t rss_kib, huge_kib;
  read_smaps(&rss_kib, &huge_kib);
  pthread_barrier_wait(&b_measured);
  bench_join(tids, t);

  char thp[32];
  read_thp_mode(thp, sizeof(thp));
  size_t nodes = 0;
  uint64_t checksum = 0;
  for (int i = 0; i < t; i++) {
    nodes += jobs[i].count;
    checksum += jobs[i].checksum;
  }
  printf("RESULT tlb time=%.4f threads=%d heap_mib=%ld nodes=%zu steps=%ld huge_kib=%zu "
         "rss_kib=%zu huge_share=%.3f thp=%s checksum=%#llx\n",
         secs, t, a.n, nodes, a.iters / t * t, huge_kib, rss_kib,
         rss_kib ? (double)huge_kib / (double)rss_kib : 0.0, thp, (unsigned long long)checksum);
  pthread_barrier_destroy(&b_built);
  pthread_barrier_destroy(&b_walked);
  pthread_barrier_destroy(&b_measured);
  free(jobs);
  free(tids);
  return 0;
}
