/*
 * stress_fork: fork while other threads allocate.
 *
 * `hammers` threads allocate, reallocate and free without pause, and publish some of their
 * blocks into shared slots (an atomic exchange hands a block over whole). They also use a shared
 * object cache, and now and then call magpie_trim and magpie_stats_write, which hold allocator
 * locks longest: a lock the fork handlers do not take shows up as a child stuck on it.
 * Meanwhile the main thread, which also holds blocks of its own, forks `forks` times at random
 * moments. Each child arms its watchdog (alarm(child_timeout)) so that a deadlock kills it
 * instead of hanging, then:
 *   - checks and frees the main thread's blocks and the published ones (memory allocated before
 *     the fork, some of it by threads that do not exist in the child);
 *   - mallocs and frees small and large blocks, reallocates a block up through the size classes
 *     to 2 MiB and back checking the preserved prefix, callocs (checks zeroes), posix_memaligns;
 *   - allocates from the shared object cache (checks the objects are constructed), creates,
 *     uses and destroys a cache of its own, trims and writes statistics;
 *   - in the plain build, starts two threads that free blocks allocated by other threads
 *     (the parent's main thread, the child's) and leave new ones for the child to free;
 * and exits 0 with _exit. The parent requires every child to exit 0 within child_timeout.
 *
 * TSan: after a fork of a multi-threaded process the TSan runtime stops checking in the child
 * and, with its default die_after_fork=1, kills a child that starts a thread: the TSan variant
 * runs with child_threads=0, and mostly checks that magpie's fork handlers neither deadlock nor
 * race in the parent. The child must also stay out of the sanitizer's own malloc: built against
 * glibc's malloc (under TSan's interceptors) this test's child hung about once in 200 forks
 * inside the TSan allocator, on a lock that another thread held at the fork, and its alarm never
 * fired because TSan defers signals while in its runtime. Here the child allocates only through
 * magpie_* (680 forks under TSan passed), and the parent still kills a child that outlives
 * child_timeout by 5 s, so a hang of either kind fails the test instead of stalling it.
 */
#define _GNU_SOURCE
#include "stress.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define TEST "stress_fork"
/* Live blocks per hammer thread, and blocks the main thread holds across each fork. */
#define WINDOW 32
/* Slots through which the hammers publish blocks for the children to free. */
#define NSLOTS 64
/* Operations of the child's malloc/free loop, and of each of its threads. */
#define CHILD_OPS 2000
/* Polling interval of the parent while it waits for a child. */
#define WAIT_NS 1000000L
/* Objects of the shared cache a hammer holds. */
#define CACHED 16
/* Size of the shared cache's objects, and the header its constructor writes. */
#define OBJ_SIZE 4000
#define OBJ_MAGIC 0x666f726b6f626aULL
/* One hammer operation in this many trims, one in this many writes statistics. */
#define TRIM_EVERY 2000
#define STATS_EVERY 1000

static long nhammers, nforks, child_timeout, child_threads;
static stress_param_t params[] = {
    {"hammers", 4, "threads allocating while the main thread forks", &nhammers},
    {"forks", 50, "children forked", &nforks},
    {"child_timeout", 10, "seconds a child may take (alarm in the child)", &child_timeout},
    {"child_threads", !STRESS_TSAN, "start threads in the child (0 under TSan)", &child_threads},
    {"seed", 1, "random seed", NULL},
    {"timeout", 120, "watchdog, seconds", NULL},
};
#define NPARAMS (sizeof params / sizeof params[0])

/* A block handed over through a slot carries its descriptor with it. */
typedef struct {
  stress_block_t b;
} parcel_t;

static uint64_t seed;
static atomic_int stop;
static magpie_cache_t *shared_cache;
static atomic_ullong ctors, dtors; /* of every cache here, parent side */
static int devnull = -1;
static _Atomic(parcel_t *) slots[NSLOTS];
static atomic_ullong hammer_ops;

typedef struct {
  pthread_t thread;
  uint32_t index;
} hammer_t;

static size_t hammer_size(stress_rng_t *rng) {
  if (stress_rng_pct(rng, 2))
    return (size_t)stress_rng_range(rng, 128 * 1024, 1024 * 1024);
  return stress_size_skewed(rng, 1, 64 * 1024);
}

/*
 * Parcels are malloc'ed by the allocator under test too, so their own memory is exercised: a
 * parcel holds a block's descriptor, and itself is a 48-byte block.
 */
static parcel_t *parcel_new(const stress_block_t *b) {
  parcel_t *p = magpie_malloc(sizeof *p);
  if (!p)
    stress_fail(TEST ": malloc(%zu) for a parcel returned NULL", sizeof *p);
  p->b = *b;
  return p;
}

static void parcel_free(parcel_t *p, const char *what) {
  stress_block_check(&p->b, TEST, what);
  stress_block_free(&p->b, TEST);
  magpie_free(p);
}

/* The constructor writes the magic and the object's address; the destructor checks both. */
static int obj_ctor(void *obj, void *arg, int flags) {
  (void)arg;
  (void)flags;
  uint64_t *w = obj;
  w[0] = OBJ_MAGIC;
  w[1] = (uint64_t)(uintptr_t)obj;
  atomic_fetch_add_explicit(&ctors, 1, memory_order_relaxed);
  return 0;
}

static void obj_dtor(void *obj, void *arg) {
  (void)arg;
  uint64_t *w = obj;
  if (w[0] != OBJ_MAGIC || w[1] != (uint64_t)(uintptr_t)obj)
    stress_fail(TEST ": destructor: object %p is not constructed (%016llx %016llx)", obj,
                (unsigned long long)w[0], (unsigned long long)w[1]);
  w[0] = 0;
  atomic_fetch_add_explicit(&dtors, 1, memory_order_relaxed);
}

static void *obj_alloc(magpie_cache_t *c, const char *who) {
  uint64_t *w = magpie_cache_alloc(c, MAGPIE_DEFAULT);
  if (!w)
    stress_fail(TEST ": %s: magpie_cache_alloc returned NULL", who);
  if (w[0] != OBJ_MAGIC || w[1] != (uint64_t)(uintptr_t)w)
    stress_fail(TEST ": %s: magpie_cache_alloc returned %p, not constructed (%016llx %016llx)", who,
                (void *)w, (unsigned long long)w[0], (unsigned long long)w[1]);
  return w;
}

static void *hammer(void *arg) {
  hammer_t *h = arg;
  stress_rng_t rng;
  stress_rng_seed(&rng, seed, h->index);
  stress_block_t live[WINDOW];
  memset(live, 0, sizeof live);
  void *objs[CACHED] = {0};
  unsigned long long ops = 0;
  while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
    stress_block_t *b = &live[stress_rng_below(&rng, WINDOW)];
    size_t size = hammer_size(&rng);
    ops++;
    if (stress_rng_below(&rng, TRIM_EVERY) == 0) {
      magpie_trim();
    } else if (stress_rng_below(&rng, STATS_EVERY) == 0) {
      if (magpie_stats_write(devnull, (int)stress_rng_below(&rng, 2)) < 0)
        stress_fail(TEST ": magpie_stats_write failed");
    } else if (stress_rng_pct(&rng, 5)) {
      void **o = &objs[stress_rng_below(&rng, CACHED)];
      if (*o) {
        magpie_cache_free(shared_cache, *o);
        *o = NULL;
      } else {
        *o = obj_alloc(shared_cache, "hammer");
      }
    } else if (!b->p) {
      stress_block_new(b, magpie_malloc(size), size, stress_rng_next(&rng), "malloc", h->index, 0,
                       TEST);
    } else if (stress_rng_pct(&rng, 15)) {
      stress_block_realloc(b, size, stress_rng_next(&rng), h->index, TEST);
    } else if (stress_rng_pct(&rng, 10)) {
      /* Publish it; free whatever the slot held. */
      stress_block_check(b, TEST, "before publishing");
      parcel_t *mine = parcel_new(b), *old;
      memset(b, 0, sizeof *b);
      old = atomic_exchange(&slots[stress_rng_below(&rng, NSLOTS)], mine);
      if (old)
        parcel_free(old, "taken from a slot by a hammer thread");
    } else {
      stress_block_free(b, TEST);
    }
  }
  for (int k = 0; k < WINDOW; k++)
    stress_block_free(&live[k], TEST);
  for (int k = 0; k < CACHED; k++)
    if (objs[k])
      magpie_cache_free(shared_cache, objs[k]);
  atomic_fetch_add(&hammer_ops, ops);
  return NULL;
}

/* CHILD_OPS random mallocs and frees of small and large blocks over live[WINDOW]. */
static void child_churn(stress_rng_t *rng, stress_block_t *live, uint32_t tid) {
  for (int op = 0; op < CHILD_OPS; op++) {
    stress_block_t *b = &live[stress_rng_below(rng, WINDOW)];
    size_t size = hammer_size(rng);
    if (!b->p)
      stress_block_new(b, magpie_malloc(size), size, stress_rng_next(rng), "malloc", tid, 0, TEST);
    else
      stress_block_free(b, TEST);
  }
}

/*
 * A thread of the child. set holds WINDOW blocks allocated by another thread: it frees the first
 * half, runs a malloc/free loop, and replaces the second half with new blocks, which the child's
 * main thread frees after joining it.
 */
static void *child_thread(void *arg) {
  stress_block_t *set = arg;
  stress_rng_t rng;
  stress_rng_seed(&rng, seed ^ (uint64_t)getpid(), (uint64_t)(uintptr_t)arg);
  for (int k = 0; k < WINDOW / 2; k++)
    stress_block_free(&set[k], TEST);
  stress_block_t live[WINDOW];
  memset(live, 0, sizeof live);
  child_churn(&rng, live, 1000);
  for (int k = 0; k < WINDOW; k++)
    stress_block_free(&live[k], TEST);
  for (int k = WINDOW / 2; k < WINDOW; k++) {
    size_t size = hammer_size(&rng);
    stress_block_free(&set[k], TEST);
    stress_block_new(&set[k], magpie_malloc(size), size, stress_rng_next(&rng), "malloc", 1000, 0,
                     TEST);
  }
  return NULL;
}

__attribute__((noreturn)) static void child(stress_block_t *held, int nr) {
  stress_watchdog((unsigned)child_timeout, TEST " child");
  stress_rng_t rng;
  stress_rng_seed(&rng, seed ^ 0xf04c, (uint64_t)nr);
  /* Memory allocated before the fork: the main thread's, and what the hammers published. */
  for (int k = 0; k < WINDOW; k++)
    stress_block_check(&held[k], TEST, "in the child, allocated by the parent's main thread");
  for (int k = 0; k < WINDOW; k += 2)
    stress_block_free(&held[k], TEST);
  for (int s = 0; s < NSLOTS; s++) {
    parcel_t *p = atomic_exchange(&slots[s], NULL);
    if (p)
      parcel_free(p, "in the child, published by a parent's hammer thread before the fork");
  }
  /* Small and large. */
  stress_block_t live[WINDOW];
  memset(live, 0, sizeof live);
  child_churn(&rng, live, 999);
  /* realloc up to 2 MiB and back down, through small, page and large sizes. */
  stress_block_t r;
  stress_block_new(&r, magpie_malloc(7), 7, stress_rng_next(&rng), "malloc", 999, 0, TEST);
  for (size_t size = 13; size <= 2 * 1024 * 1024; size = size * 3 / 2 + 1)
    stress_block_realloc(&r, size, stress_rng_next(&rng), 999, TEST);
  for (size_t size = 2 * 1024 * 1024; size > 5; size = size / 3)
    stress_block_realloc(&r, size, stress_rng_next(&rng), 999, TEST);
  stress_block_free(&r, TEST);
  /* calloc and posix_memalign. */
  for (int i = 0; i < 16; i++) {
    size_t size = i & 1 ? (size_t)stress_rng_range(&rng, 1, 4096)
                        : (size_t)stress_rng_range(&rng, 4096, 512 * 1024);
    unsigned char *z = magpie_calloc(1, size);
    if (!z)
      stress_fail(TEST ": child: calloc(1, %zu) returned NULL", size);
    for (size_t k = 0; k < size; k++)
      if (z[k])
        stress_fail(TEST ": child: calloc(1, %zu) = %p: byte %zu is %#x", size, (void *)z, k, z[k]);
    magpie_free(z);
    size_t align = (size_t)1 << stress_rng_range(&rng, 3, 16);
    void *a = NULL;
    int rc = magpie_posix_memalign(&a, align, size);
    if (rc)
      stress_fail(TEST ": child: posix_memalign(%zu, %zu) failed: %d", align, size, rc);
    stress_block_t ab;
    stress_block_new(&ab, a, size, stress_rng_next(&rng), "posix_memalign", 999, (uint32_t)align,
                     TEST);
    stress_block_free(&ab, TEST);
  }
  /* Object caches: the shared one, and one made here. */
  void *objs[CACHED];
  for (int k = 0; k < CACHED; k++)
    objs[k] = obj_alloc(shared_cache, "child");
  magpie_cache_t *own = magpie_cache_create("fork-child", 200, 64, obj_ctor, obj_dtor, NULL, 0);
  if (!own)
    stress_fail(TEST ": child: magpie_cache_create returned NULL");
  void *mine[CACHED];
  for (int k = 0; k < CACHED; k++)
    mine[k] = obj_alloc(own, "child's own cache");
  for (int k = 0; k < CACHED; k++) {
    magpie_cache_free(shared_cache, objs[k]);
    magpie_cache_free(own, mine[k]);
  }
  magpie_cache_destroy(own);
  magpie_trim();
  if (magpie_stats_write(devnull, MAGPIE_STATS_JSON) < 0)
    stress_fail(TEST ": child: magpie_stats_write failed");
  if (child_threads) {
    /* The first thread gets the parent main thread's remaining blocks, the second blocks this
     * thread allocates now; both leave new blocks behind that this thread frees. */
    stress_block_t sets[2][WINDOW];
    memset(sets, 0, sizeof sets);
    for (int k = 0; k < WINDOW / 2; k++)
      sets[0][k] = held[2 * k + 1];
    for (int k = 0; k < WINDOW; k++)
      stress_block_new(&sets[1][k], magpie_malloc(32 + (size_t)k * 8), 32 + (size_t)k * 8,
                       stress_rng_next(&rng), "malloc", 999, 0, TEST);
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
      stress_thread_start(&t[i], child_thread, sets[i], TEST);
    for (int i = 0; i < 2; i++)
      stress_thread_join(t[i], TEST);
    for (int i = 0; i < 2; i++)
      for (int k = 0; k < WINDOW; k++)
        stress_block_free(&sets[i][k], TEST);
  } else {
    for (int k = 1; k < WINDOW; k += 2)
      stress_block_free(&held[k], TEST);
  }
  for (int k = 0; k < WINDOW; k++)
    stress_block_free(&live[k], TEST);
  _exit(0);
}

/* Waits for pid; fails unless it exits 0 within limit seconds. */
static void wait_child(pid_t pid, int nr, double limit) {
  double start = stress_now();
  for (;;) {
    int status = 0;
    pid_t w = waitpid(pid, &status, WNOHANG);
    if (w < 0 && errno != EINTR)
      stress_fail(TEST ": waitpid(%d): errno %d", (int)pid, errno);
    if (w == pid) {
      if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
        return;
      if (WIFSIGNALED(status))
        stress_fail(TEST ": child %d (fork %d) killed by signal %d%s", (int)pid, nr,
                    WTERMSIG(status),
                    WTERMSIG(status) == SIGABRT
                        ? " (abort: a check or its watchdog failed, see the message above)"
                        : "");
      stress_fail(TEST ": child %d (fork %d) exited with status %d", (int)pid, nr,
                  WEXITSTATUS(status));
    }
    if (stress_now() - start > limit) {
      kill(pid, SIGKILL);
      waitpid(pid, NULL, 0);
      stress_fail(TEST ": child %d (fork %d) still running after %.0f s: killed", (int)pid, nr,
                  limit);
    }
    struct timespec ts = {0, WAIT_NS};
    nanosleep(&ts, NULL);
  }
}

int main(int argc, char **argv) {
  stress_params(argc, argv, TEST, params, NPARAMS);
  seed = (uint64_t)stress_param(params, NPARAMS, "seed");
  if (nhammers < 0 || nforks < 0 || child_timeout < 1)
    stress_fail(TEST ": bad parameters");

  double t0 = stress_now();
  devnull = open("/dev/null", O_WRONLY | O_CLOEXEC);
  shared_cache = magpie_cache_create("fork-shared", OBJ_SIZE, 0, obj_ctor, obj_dtor, NULL, 0);
  if (devnull < 0 || !shared_cache)
    stress_fail(TEST ": cannot open /dev/null or create the shared cache");
  hammer_t *h = calloc((size_t)nhammers + 1, sizeof *h);
  if (!h)
    stress_fail(TEST ": out of memory for thread records");
  for (long i = 0; i < nhammers; i++) {
    h[i].index = (uint32_t)i;
    stress_thread_start(&h[i].thread, hammer, &h[i], TEST);
  }
  stress_rng_t rng;
  stress_rng_seed(&rng, seed, 0xface);
  stress_block_t held[WINDOW];
  memset(held, 0, sizeof held);
  for (long nr = 0; nr < nforks; nr++) {
    /* Replace some of the main thread's blocks, then fork at a random moment. */
    for (int k = 0; k < WINDOW; k++)
      if (!held[k].p || stress_rng_pct(&rng, 30)) {
        stress_block_free(&held[k], TEST);
        size_t size = hammer_size(&rng);
        stress_block_new(&held[k], magpie_malloc(size), size, stress_rng_next(&rng), "malloc",
                         0xffff, 0, TEST);
      }
    struct timespec ts = {0, (long)stress_rng_below(&rng, 3000000)};
    nanosleep(&ts, NULL);
    pid_t pid = fork();
    if (pid < 0)
      stress_fail(TEST ": fork %ld failed: errno %d", nr, errno);
    if (pid == 0)
      child(held, (int)nr);
    wait_child(pid, (int)nr, (double)child_timeout + 5.0);
    /* The parent's copies are untouched by the child. */
    for (int k = 0; k < WINDOW; k++)
      stress_block_check(&held[k], TEST, "in the parent after a fork");
  }
  atomic_store(&stop, 1);
  for (long i = 0; i < nhammers; i++)
    stress_thread_join(h[i].thread, TEST);
  for (int s = 0; s < NSLOTS; s++) {
    parcel_t *p = atomic_exchange(&slots[s], NULL);
    if (p)
      parcel_free(p, "taken from a slot by the main thread at the end");
  }
  for (int k = 0; k < WINDOW; k++)
    stress_block_free(&held[k], TEST);
  magpie_cache_destroy(shared_cache);
  if (atomic_load(&ctors) != atomic_load(&dtors))
    stress_fail(TEST ": %llu objects constructed, %llu destructed after magpie_cache_destroy",
                (unsigned long long)atomic_load(&ctors), (unsigned long long)atomic_load(&dtors));
  close(devnull);
  free(h);
  stress_log(TEST ": ok: %ld children, %llu operations by %ld threads meanwhile (%.2f s)", nforks,
             (unsigned long long)atomic_load(&hammer_ops), nhammers, stress_now() - t0);
  return 0;
}
