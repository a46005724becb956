/*
 * Shared harness of the concurrency stress tests (tests/stress/).
 *
 * 1. Blocks. Every block a test owns is described by a stress_block_t: address, requested size,
 *    and a key derived from (address, a per-block seed, size). The block's bytes are filled with
 *    a stream generated from the key right after allocation, and checked whenever the block
 *    changes hands and before it is freed. Word i of the stream depends on the key and on i, so a
 *    block that was overwritten by a neighbour, handed out twice, moved without its contents, or
 *    shifted shows up as a mismatch, and the report says where.
 *
 * 2. Failing. stress_fail() writes one message to stderr with write(2) (no stdio, no malloc: it
 *    is also called in forked children and with allocator locks possibly held) and aborts.
 *    Every check failure names the test, the thread and the operation that produced the block.
 *
 * 3. Determinism. Each thread draws from its own generator seeded by (run seed, thread index);
 *    what differs between two runs with the same seed is only the interleaving.
 *
 * 4. Parameters. Programs take name=value arguments (e.g. `threads=8 ops=20000 seed=7`); the
 *    TSan variants are registered with smaller ones. The values in effect are printed first, so
 *    a failure can be rerun as printed.
 *
 * The tests reach the allocator only through the magpie_* names: in the TSan build the core is
 * linked without interposition and malloc there is the sanitizer's.
 */
#ifndef STRESS_H
#define STRESS_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "magpie.h"

#if defined(__SANITIZE_THREAD__)
#define STRESS_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define STRESS_TSAN 1
#endif
#endif
#ifndef STRESS_TSAN
#define STRESS_TSAN 0
#endif

/* ---- random numbers (splitmix64) ---- */
typedef struct {
  uint64_t s;
} stress_rng_t;

static inline uint64_t stress_mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

static inline void stress_rng_seed(stress_rng_t *r, uint64_t seed, uint64_t stream) {
  r->s = stress_mix64(seed * 0x9e3779b97f4a7c15ULL + stress_mix64(stream + 0x5851f42d4c957f2dULL));
}

static inline uint64_t stress_rng_next(stress_rng_t *r) {
  r->s += 0x9e3779b97f4a7c15ULL;
  return stress_mix64(r->s);
}

/* Uniform in [0, n); 0 when n is 0. */
static inline uint64_t stress_rng_below(stress_rng_t *r, uint64_t n) {
  return (uint64_t)(((unsigned __int128)stress_rng_next(r) * n) >> 64);
}

/* Uniform in [lo, hi]. */
static inline uint64_t stress_rng_range(stress_rng_t *r, uint64_t lo, uint64_t hi) {
  return lo + stress_rng_below(r, hi - lo + 1);
}

/* True with probability pct/100. */
static inline int stress_rng_pct(stress_rng_t *r, unsigned pct) {
  return stress_rng_below(r, 100) < pct;
}

/*
 * A size in [lo, hi], biased small: the power of two is drawn with a quadratic skew towards lo,
 * then the size uniformly within that octave. Between 16 B and 64 KiB, about half the sizes are
 * below 256 B and one in twenty is above 16 KiB.
 */
size_t stress_size_skewed(stress_rng_t *r, size_t lo, size_t hi);

/* ---- blocks and patterns ---- */
typedef struct {
  void *p;         /* the block, or NULL for an empty descriptor */
  size_t size;     /* bytes requested; all of them carry the pattern */
  uint64_t key;    /* pattern key, stress_key(p, seed, size) */
  const char *how; /* operation that produced the block ("malloc", "realloc", ...) */
  uint32_t tid;    /* test thread that produced it */
  uint32_t align;  /* alignment asked for, 0 if none */
} stress_block_t;

uint64_t stress_key(const void *p, uint64_t seed, size_t size);
void stress_fill(void *p, size_t n, uint64_t key);
/* Checks bytes [0, n) of p against the stream of key; on mismatch reports and aborts. */
void stress_check_bytes(const void *p, size_t n, uint64_t key, const char *test, const char *what,
                        const stress_block_t *b);

/*
 * Records a freshly allocated block in b, checks it (non-NULL, usable size, alignment) and fills
 * it with the pattern of seed.
 */
void stress_block_new(stress_block_t *b, void *p, size_t size, uint64_t seed, const char *how,
                      uint32_t tid, uint32_t align, const char *test);
/* Checks the whole block; what says when ("before free", "after handover", ...). */
void stress_block_check(const stress_block_t *b, const char *test, const char *what);
/* Takes a checked block over: a fresh key, refilled (its new owner writes it). */
void stress_block_rekey(stress_block_t *b, uint64_t seed, uint32_t tid);
/*
 * Checks the block, reallocates it with magpie_realloc to size, checks that the common prefix
 * survived the move and refills it with the pattern of seed under its new address and size.
 */
void stress_block_realloc(stress_block_t *b, size_t size, uint64_t seed, uint32_t tid,
                          const char *test);
/* Checks the block and frees it with magpie_free; b becomes empty. */
void stress_block_free(stress_block_t *b, const char *test);

/* Checks that no two of the n non-empty blocks overlap (sorts a copy of the array). */
void stress_check_overlap(const stress_block_t *blocks, size_t n, const char *test,
                          const char *when);

/* ---- failing ---- */
__attribute__((noreturn, format(printf, 1, 2))) void stress_fail(const char *fmt, ...);
__attribute__((format(printf, 1, 2))) void stress_log(const char *fmt, ...);

/* Aborts the process with a message if it is still running after seconds (deadlock guard). */
void stress_watchdog(unsigned seconds, const char *test);

/* ---- parameters ---- */
typedef struct {
  const char *name;
  long value;
  const char *help;
  long *to; /* where stress_params stores the value, or NULL */
} stress_param_t;

/* Parses name=value arguments into params, stores each value where its entry says, prints the
   values in effect and starts the watchdog for the "timeout" parameter; exits 2 on error. */
void stress_params(int argc, char **argv, const char *test, stress_param_t *params, size_t n);
long stress_param(const stress_param_t *params, size_t n, const char *name);

/* ---- process measurements ---- */
/* Resident set size from /proc/self/statm, in bytes. */
size_t stress_rss_bytes(void);
/* The first "mapped_bytes" value of magpie_stats_write(fd, MAGPIE_STATS_JSON); fails if absent. */
size_t stress_mapped_bytes(const char *test);
/* The bytes malloc's classes cache (in magazines and depots), from the JSON statistics; each
   class that caches any is logged, with its share, under "when". */
size_t stress_cached_bytes(const char *test, const char *when);
/* magpie_stats_write(fd, MAGPIE_STATS_JSON), in a private mapping of *len bytes (fails the test
   if it cannot be had); stress_stats_release gives it back. */
const char *stress_stats_json(const char *test, size_t *len);
void stress_stats_release(const char *json, size_t len);
/* The number after the next field (a JSON key with its quotes) in [*from, end), and *from moved
   past it; false if there is none. */
bool stress_json_next(const char **from, const char *end, const char *field, size_t *value);
/* Monotonic seconds. */
double stress_now(void);

/* ---- threads ---- */
/* pthread_create that fails the test on error. */
void stress_thread_start(pthread_t *thread, void *(*fn)(void *), void *arg, const char *test);
void stress_thread_join(pthread_t thread, const char *test);

#endif
