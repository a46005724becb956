/*
 * stress_cache: object caches shared by threads, with constructors and destructors.
 *
 * Several caches of different sizes and alignments are shared by all threads. Their constructor
 * writes a header (magic, the object's own address, the cache, a construction serial) and counts;
 * their destructor checks the header, marks it dead and counts. A thread allocates objects from
 * any cache, checks that each is constructed (magic, address, cache) and not already handed out,
 * fills the payload after the header with its pattern, and later checks and frees it, or trades
 * it to another thread through shared slots (atomic exchange), where it is checked and refilled.
 * One cache's constructor fails on every fail_every-th call: its allocations may return NULL
 * (errno ENOMEM), and a failed construction must not be destructed.
 *
 * Threads also create private caches now and then, use them, and destroy them.
 *
 * At the end, with every object freed, the caches are destroyed: for each, the constructors and
 * destructors that ran must balance, and no destructor may have run on an object in use or on an
 * object twice.
 */
#define _GNU_SOURCE
#include "stress.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TEST "stress_cache"
/* Header magic of a constructed object ("magpieOK"), and what the destructor leaves. */
#define OBJ_MAGIC 0x4b4f6569706761ULL
#define OBJ_DEAD 0xdeadc0dedeadc0deULL
/* Objects a private cache hands out at most during its short life. */
#define PRIVATE_MAX 300

typedef struct cache_rec cache_rec_t;

/* The constructed state: written by the constructor, left alone by users but for inuse/key. */
typedef struct {
  uint64_t magic;     /* OBJ_MAGIC while constructed, OBJ_DEAD after the destructor */
  uintptr_t self;     /* the object's address */
  uint64_t serial;    /* construction number within the cache */
  cache_rec_t *rec;   /* the cache */
  uint64_t id;        /* the cache's creation number (records of private caches are reused) */
  atomic_uint inuse;  /* 1 while handed out: set after alloc, cleared before free */
  uint32_t owner;     /* thread holding it, while in use */
  uint64_t key;       /* payload pattern key, while in use */
} obj_hdr_t;

struct cache_rec {
  magpie_cache_t *cache;
  char name[32];
  size_t size, align;
  uint64_t id;
  unsigned fail_every;     /* constructor fails on every fail_every-th call; 0: never */
  atomic_ullong ctor_calls; /* constructor invocations */
  atomic_ullong ctors;      /* successful constructions */
  atomic_ullong dtors;      /* destructions */
  atomic_ullong allocs, frees, nulls;
};

static long nthreads, nops, window, nslots, private_every, fail_every;
static stress_param_t params[] = {
    {"threads", 16, "threads", &nthreads},
    {"ops", 300000, "operations per thread", &nops},
    {"window", 48, "objects a thread holds at most", &window},
    {"slots", 64, "shared slots for trading objects", &nslots},
    {"private_every", 10000, "operations between private caches", &private_every},
    {"fail_every", 37, "the flaky cache's constructor fails every n-th call", &fail_every},
    {"seed", 1, "random seed", NULL},
    {"timeout", 120, "watchdog, seconds", NULL},
};
#define NPARAMS (sizeof params / sizeof params[0])

/* Shared caches: size, alignment (0: default), flaky constructor. */
static const struct {
  size_t size, align;
  int flaky;
} shapes[] = {
    {64, 0, 0}, {64, 64, 0}, {96, 0, 1}, {200, 8, 0}, {256, 256, 0}, {1000, 16, 0}, {4096, 0, 0},
    {5000, 0, 0},
};
#define NCACHES (sizeof shapes / sizeof shapes[0])

static uint64_t seed;
static cache_rec_t shared[NCACHES];
static _Atomic(obj_hdr_t *) *slots;
static atomic_ullong next_id = 1;

typedef struct {
  pthread_t thread;
  uint32_t index;
  cache_rec_t priv; /* this thread's private cache, recreated now and then */
} worker_t;

static int obj_ctor(void *obj, void *arg, int flags) {
  (void)flags;
  cache_rec_t *rec = arg;
  obj_hdr_t *h = obj;
  uint64_t call = atomic_fetch_add(&rec->ctor_calls, 1);
  if (rec->align && ((uintptr_t)obj & (rec->align - 1)))
    stress_fail(TEST ": cache %s (align %zu) constructs a misaligned object %p", rec->name,
                rec->align, obj);
  if (h->magic == OBJ_MAGIC && h->self == (uintptr_t)obj && h->rec == rec && h->id == rec->id)
    stress_fail(TEST ": cache %s constructs object %p (serial %llu) again without destructing it",
                rec->name, obj, (unsigned long long)h->serial);
  if (rec->fail_every && call % rec->fail_every == rec->fail_every - 1)
    return 1;
  h->magic = OBJ_MAGIC;
  h->self = (uintptr_t)obj;
  h->serial = atomic_fetch_add(&rec->ctors, 1);
  h->rec = rec;
  h->id = rec->id;
  atomic_store_explicit(&h->inuse, 0, memory_order_relaxed);
  h->owner = 0;
  h->key = 0;
  return 0;
}

static void obj_dtor(void *obj, void *arg) {
  cache_rec_t *rec = arg;
  obj_hdr_t *h = obj;
  if (h->magic != OBJ_MAGIC)
    stress_fail(TEST ": cache %s destructs object %p %s (header magic %016llx)", rec->name, obj,
                h->magic == OBJ_DEAD ? "a second time" : "that was never constructed",
                (unsigned long long)h->magic);
  if (h->self != (uintptr_t)obj || h->rec != rec || h->id != rec->id)
    stress_fail(TEST ": cache %s destructs object %p whose header says address %p, cache %p id "
                "%llu (expected %p id %llu)",
                rec->name, obj, (void *)h->self, (void *)h->rec, (unsigned long long)h->id,
                (void *)rec, (unsigned long long)rec->id);
  if (atomic_load_explicit(&h->inuse, memory_order_relaxed))
    stress_fail(TEST ": cache %s destructs object %p while thread %u holds it", rec->name, obj,
                (unsigned)h->owner);
  h->magic = OBJ_DEAD;
  atomic_fetch_add(&rec->dtors, 1);
}

static void rec_create(cache_rec_t *rec, const char *name, size_t size, size_t align,
                       unsigned fail) {
  memset(rec, 0, sizeof *rec);
  snprintf(rec->name, sizeof rec->name, "%s", name);
  rec->size = size;
  rec->align = align;
  rec->fail_every = fail;
  rec->id = atomic_fetch_add(&next_id, 1);
  rec->cache = magpie_cache_create(rec->name, size, align, obj_ctor, obj_dtor, rec, 0);
  if (!rec->cache)
    stress_fail(TEST ": magpie_cache_create(%s, size %zu, align %zu) returned NULL", name, size,
                align);
}

static void rec_destroy(cache_rec_t *rec) {
  magpie_cache_destroy(rec->cache);
  rec->cache = NULL;
  unsigned long long c = atomic_load(&rec->ctors), d = atomic_load(&rec->dtors);
  unsigned long long a = atomic_load(&rec->allocs), f = atomic_load(&rec->frees);
  if (a != f)
    stress_fail(TEST ": harness bug: cache %s: %llu allocations, %llu frees", rec->name, a, f);
  if (c != d)
    stress_fail(TEST ": cache %s (size %zu): %llu objects constructed but %llu destructed after "
                "magpie_cache_destroy (%llu allocations)",
                rec->name, rec->size, c, d, a);
}

/* Checks that obj is a constructed object of rec that nobody holds, and takes it. */
static void obj_take(obj_hdr_t *h, cache_rec_t *rec, uint32_t tid, uint64_t key) {
  if (rec->align && ((uintptr_t)h & (rec->align - 1)))
    stress_fail(TEST ": cache %s (align %zu) returned misaligned object %p", rec->name, rec->align,
                (void *)h);
  if (h->magic != OBJ_MAGIC || h->self != (uintptr_t)h || h->rec != rec || h->id != rec->id)
    stress_fail(TEST ": thread %u: cache %s returned object %p that is not constructed: magic "
                "%016llx self %p cache %p id %llu (expected cache %p id %llu)",
                (unsigned)tid, rec->name, (void *)h, (unsigned long long)h->magic,
                (void *)h->self, (void *)h->rec, (unsigned long long)h->id, (void *)rec,
                (unsigned long long)rec->id);
  if (atomic_exchange(&h->inuse, 1))
    stress_fail(TEST ": thread %u: cache %s returned object %p (serial %llu) that thread %u holds",
                (unsigned)tid, rec->name, (void *)h, (unsigned long long)h->serial,
                (unsigned)h->owner);
  atomic_fetch_add(&rec->allocs, 1);
  h->owner = tid;
  h->key = key;
  stress_fill(h + 1, rec->size - sizeof *h, key);
}

/* Checks a held object: header and payload. */
static void obj_check(obj_hdr_t *h, const char *what) {
  if (h->magic != OBJ_MAGIC || h->self != (uintptr_t)h || !atomic_load(&h->inuse) ||
      h->rec == NULL || h->rec->id != h->id)
    stress_fail(TEST ": object %p %s: header damaged: magic %016llx self %p inuse %u cache %p "
                "id %llu",
                (void *)h, what, (unsigned long long)h->magic, (void *)h->self,
                atomic_load(&h->inuse), (void *)h->rec, (unsigned long long)h->id);
  cache_rec_t *rec = h->rec;
  stress_block_t b = {h, rec->size, h->key, rec->name, h->owner, (uint32_t)rec->align};
  stress_check_bytes(h + 1, rec->size - sizeof *h, h->key, TEST, what, &b);
}

static void obj_free(obj_hdr_t *h) {
  cache_rec_t *rec = h->rec;
  obj_check(h, "before magpie_cache_free");
  atomic_fetch_add(&rec->frees, 1);
  h->key = 0;
  atomic_store(&h->inuse, 0);
  magpie_cache_free(rec->cache, h);
}

static obj_hdr_t *obj_alloc(cache_rec_t *rec, stress_rng_t *rng, uint32_t tid) {
  int flags = !rec->fail_every && stress_rng_pct(rng, 20) ? MAGPIE_NOFAIL : MAGPIE_DEFAULT;
  errno = 0;
  obj_hdr_t *h = magpie_cache_alloc(rec->cache, flags);
  if (!h) {
    if (!rec->fail_every || errno != ENOMEM)
      stress_fail(TEST ": thread %u: magpie_cache_alloc(%s, %s) returned NULL, errno %d",
                  (unsigned)tid, rec->name, flags ? "MAGPIE_NOFAIL" : "MAGPIE_DEFAULT", errno);
    atomic_fetch_add(&rec->nulls, 1);
    return NULL;
  }
  obj_take(h, rec, tid, stress_rng_next(rng));
  return h;
}

/* A private cache: create, fill, empty, refill partly, empty, destroy. */
static void private_round(worker_t *w, stress_rng_t *rng) {
  size_t align = stress_rng_pct(rng, 50) ? 0 : (size_t)8 << stress_rng_below(rng, 4);
  size_t size = (size_t)stress_rng_range(rng, sizeof(obj_hdr_t), 2048);
  char name[32];
  snprintf(name, sizeof name, "private-%u", (unsigned)w->index);
  rec_create(&w->priv, name, size, align, 0);
  obj_hdr_t *objs[PRIVATE_MAX];
  size_t n = (size_t)stress_rng_range(rng, 1, PRIVATE_MAX);
  for (int round = 0; round < 2; round++) {
    for (size_t k = 0; k < n; k++)
      objs[k] = obj_alloc(&w->priv, rng, w->index);
    for (size_t k = 0; k < n; k++)
      obj_free(objs[k]);
    n = (n + 1) / 2;
  }
  rec_destroy(&w->priv);
}

static void *worker(void *arg) {
  worker_t *w = arg;
  uint32_t tid = w->index;
  stress_rng_t rng;
  stress_rng_seed(&rng, seed, tid);
  obj_hdr_t **win = calloc((size_t)window, sizeof *win);
  if (!win)
    stress_fail(TEST ": out of memory for a window");
  for (long op = 0; op < nops; op++) {
    if (private_every > 0 && op % private_every == private_every - 1)
      private_round(w, &rng);
    obj_hdr_t **o = &win[stress_rng_below(&rng, (uint64_t)window)];
    unsigned r = (unsigned)stress_rng_below(&rng, 100);
    if (!*o) {
      *o = obj_alloc(&shared[stress_rng_below(&rng, NCACHES)], &rng, tid);
    } else if (r < 40) {
      obj_free(*o);
      *o = NULL;
    } else if (r < 80) {
      obj_check(*o, "before handing over to a slot");
      obj_hdr_t *got = atomic_exchange(&slots[stress_rng_below(&rng, (uint64_t)nslots)], *o);
      *o = got;
      if (got) {
        obj_check(got, "after taking over from a slot");
        got->owner = tid;
        got->key = stress_rng_next(&rng);
        stress_fill(got + 1, got->rec->size - sizeof *got, got->key);
      }
    } else {
      obj_check(*o, "in place");
    }
  }
  for (long k = 0; k < window; k++)
    if (win[k])
      obj_free(win[k]);
  free(win);
  return NULL;
}

int main(int argc, char **argv) {
  stress_params(argc, argv, TEST, params, NPARAMS);
  seed = (uint64_t)stress_param(params, NPARAMS, "seed");
  if (nthreads < 1 || nops < 0 || window < 1 || nslots < 1 || fail_every < 0)
    stress_fail(TEST ": bad parameters");

  for (size_t c = 0; c < NCACHES; c++) {
    char name[32];
    snprintf(name, sizeof name, "shared-%zu-%zu%s", shapes[c].size, shapes[c].align,
             shapes[c].flaky ? "-flaky" : "");
    rec_create(&shared[c], name, shapes[c].size, shapes[c].align,
               shapes[c].flaky ? (unsigned)fail_every : 0);
  }
  slots = calloc((size_t)nslots, sizeof *slots);
  worker_t *w = calloc((size_t)nthreads, sizeof *w);
  if (!slots || !w)
    stress_fail(TEST ": out of memory");
  double t0 = stress_now();
  for (long t = 0; t < nthreads; t++) {
    w[t].index = (uint32_t)t;
    stress_thread_start(&w[t].thread, worker, &w[t], TEST);
  }
  for (long t = 0; t < nthreads; t++)
    stress_thread_join(w[t].thread, TEST);
  for (long k = 0; k < nslots; k++) {
    obj_hdr_t *h = atomic_exchange(&slots[k], NULL);
    if (h) {
      obj_check(h, "taken from a slot by the main thread");
      obj_free(h);
    }
  }
  for (size_t c = 0; c < NCACHES; c++) {
    cache_rec_t *rec = &shared[c];
    rec_destroy(rec);
    stress_log(TEST ": %-22s %8llu allocations, %6llu constructed, %6llu destructed, "
               "%llu constructor calls, %llu NULL",
               rec->name, (unsigned long long)atomic_load(&rec->allocs),
               (unsigned long long)atomic_load(&rec->ctors),
               (unsigned long long)atomic_load(&rec->dtors),
               (unsigned long long)atomic_load(&rec->ctor_calls),
               (unsigned long long)atomic_load(&rec->nulls));
    if (rec->fail_every && atomic_load(&rec->nulls) >
                               atomic_load(&rec->ctor_calls) - atomic_load(&rec->ctors))
      stress_fail(TEST ": cache %s: %llu allocations returned NULL but only %llu constructions "
                  "failed",
                  rec->name, (unsigned long long)atomic_load(&rec->nulls),
                  (unsigned long long)(atomic_load(&rec->ctor_calls) - atomic_load(&rec->ctors)));
  }
  free(slots);
  free(w);
  stress_log(TEST ": ok (%.2f s)", stress_now() - t0);
  return 0;
}
