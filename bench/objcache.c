/*
 * objcache: magpie object caches with a constructor, against malloc + initialise + free.
 *
 * Models the case object caching was invented for (Bonwick, "The Slab Allocator", 1994): objects
 * whose set-up costs more than their allocation, here a 256-byte connection record with a mutex,
 * a condition variable, a list head and a zeroed buffer. With malloc every use pays
 * malloc + init + destroy + free; with magpie_cache_* the constructor runs once when the object
 * enters the cache, and a freed object keeps its constructed state, so a use is alloc + free.
 * Both sides run the same work per object (lock, write a few fields and 16 buffer bytes, unlock)
 * and the cache side restores the fields it changed before freeing, as the contract requires.
 * Each thread allocates BATCH objects, uses them and frees them, -i objects in all (split between
 * threads), once with malloc and once with the cache. Objects are checked for their constructed
 * state on every cache allocation, and constructor and destructor calls must balance at the end.
 * This workload links against libmagpie and runs only for magpie.
 *
 *   objcache [-t threads] [-i objects] [-s seed]
 */
#include "bench.h"

#include <magpie.h>
#include <stdatomic.h>

#define BATCH 64
#define CONN_MAGIC 0x636f6e6e5f6f6b21ull /* "conn_ok!": written by the constructor */
#define BUF 160

static const char usage[] =
    "objcache: magpie_cache_alloc with a constructor vs malloc + init (magpie only)\n"
    "  -t threads (default 2)   -i total objects per side (default 2000000)   -s seed\n";

typedef struct conn {
  uint64_t magic;
  pthread_mutex_t lock;
  pthread_cond_t ready;
  struct conn *next, *prev;
  long requests;
  int state;
  unsigned char buf[BUF];
} conn_t;

static _Atomic long ctors, dtors;

static void conn_init(conn_t *c) {
  c->magic = CONN_MAGIC;
  pthread_mutex_init(&c->lock, NULL);
  pthread_cond_init(&c->ready, NULL);
  c->next = c->prev = c;
  c->requests = 0;
  c->state = 0;
  memset(c->buf, 0, sizeof(c->buf));
}

static void conn_fini(conn_t *c) {
  pthread_cond_destroy(&c->ready);
  pthread_mutex_destroy(&c->lock);
  c->magic = 0;
}

static int ctor(void *obj, void *arg, int flags) {
  (void)arg;
  (void)flags;
  conn_init(obj);
  atomic_fetch_add_explicit(&ctors, 1, memory_order_relaxed);
  return 0;
}

static void dtor(void *obj, void *arg) {
  (void)arg;
  conn_fini(obj);
  atomic_fetch_add_explicit(&dtors, 1, memory_order_relaxed);
}

/* The per-object work both sides do. */
static void use(conn_t *c, uint64_t v) {
  pthread_mutex_lock(&c->lock);
  c->requests++;
  c->state = 1;
  memcpy(c->buf, &v, 8);
  memcpy(c->buf + 8, &v, 8);
  pthread_mutex_unlock(&c->lock);
}

/* Restores what use() changed, so a freed cache object is in its constructed state. */
static void unuse(conn_t *c) {
  c->requests = 0;
  c->state = 0;
  memset(c->buf, 0, 16);
}

static void check_constructed(const conn_t *c) {
  if (c->magic != CONN_MAGIC || c->requests != 0 || c->state != 0 || c->next != c ||
      c->buf[0] != 0 || c->buf[15] != 0 || c->buf[BUF - 1] != 0)
    bench_fail("objcache: object %p is not in its constructed state", (const void *)c);
}

typedef struct {
  magpie_cache_t *cache; /* NULL: the malloc side */
  long count;
  char pad[BENCH_LINE];
} job_t;

static void *worker(void *arg) {
  job_t *j = arg;
  conn_t *objs[BATCH];
  for (long done = 0; done < j->count; done += BATCH) {
    int n = j->count - done < BATCH ? (int)(j->count - done) : BATCH;
    if (j->cache == NULL) {
      for (int i = 0; i < n; i++) {
        objs[i] = bench_xmalloc(sizeof(conn_t));
        conn_init(objs[i]);
      }
      for (int i = 0; i < n; i++)
        use(objs[i], (uint64_t)(done + i));
      for (int i = 0; i < n; i++) {
        if (objs[i]->requests != 1) bench_fail("objcache: malloc'ed object lost its update");
        conn_fini(objs[i]);
        free(objs[i]);
      }
    } else {
      for (int i = 0; i < n; i++) {
        objs[i] = magpie_cache_alloc(j->cache, MAGPIE_DEFAULT);
        if (objs[i] == NULL) bench_die("magpie_cache_alloc returned NULL");
        check_constructed(objs[i]);
      }
      for (int i = 0; i < n; i++)
        use(objs[i], (uint64_t)(done + i));
      for (int i = 0; i < n; i++) {
        if (objs[i]->requests != 1) bench_fail("objcache: cached object lost its update");
        unuse(objs[i]);
        magpie_cache_free(j->cache, objs[i]);
      }
    }
  }
  return NULL;
}

static double run(int t, long total, magpie_cache_t *cache) {
  job_t *jobs = calloc((size_t)t, sizeof(*jobs));
  pthread_t *tids = calloc((size_t)t, sizeof(pthread_t));
  if (jobs == NULL || tids == NULL) bench_die("out of memory");
  for (int i = 0; i < t; i++) {
    jobs[i].cache = cache;
    jobs[i].count = total / t;
  }
  double t0 = bench_now();
  bench_spawn(tids, t, worker, jobs, sizeof(*jobs), NULL, 0);
  bench_join(tids, t);
  double secs = bench_now() - t0;
  free(jobs);
  free(tids);
  return secs;
}

int main(int argc, char **argv) {
  bench_args_t a = {.threads = 2, .iters = 2000000, .seed = 1};
  bench_parse(argc, argv, &a, usage);
  magpie_cache_t *cache =
      magpie_cache_create("bench_conn", sizeof(conn_t), 64, ctor, dtor, NULL, 0);
  if (cache == NULL) bench_die("magpie_cache_create failed");
  double malloc_secs = run(a.threads, a.iters, NULL);
  double cache_secs = run(a.threads, a.iters, cache);
  magpie_cache_destroy(cache);
  long c = atomic_load(&ctors), d = atomic_load(&dtors);
  if (c == 0 || c != d)
    bench_fail("objcache: %ld constructor calls but %ld destructor calls", c, d);
  printf("RESULT objcache time=%.4f malloc_time=%.4f speedup=%.2f threads=%d objects=%ld "
         "constructed=%ld\n",
         cache_secs, malloc_secs, malloc_secs / cache_secs, a.threads, a.iters, c);
  return 0;
}
