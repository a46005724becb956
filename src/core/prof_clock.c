/*
 * prof_clock: the heap profiler's sampling decision, on slow paths only.
 *
 * Theory
 *   1. Sampling points form a Poisson process over the bytes each thread allocates, with one
 *      point per profile_rate bytes on average: the gaps between points are drawn from an
 *      exponential distribution, so whether a byte is a point does not depend on what came
 *      before, and the number of points in any b bytes has mean b / profile_rate.
 *   2. The fast path is not touched: it already counts each thread's allocations per class
 *      (mag_fast.h). A slow-path allocation of class c (a magazine miss, memalign, calloc)
 *      reads that count, charges the clock with the class's bytes allocated since the thread's
 *      last look at c, this one included, and counts the points they passed. A large block
 *      always takes the slow path and charges its own size. A thread's first allocation
 *      (tcache_boot) and allocations after its exit (tcache_dead) are not charged.
 *   3. When points were passed, the allocation at hand is the sample: it stands for
 *      points * profile_rate bytes, an unbiased estimate of the bytes charged (their mean).
 *      The block observed is the one at the miss, not the ones that passed the points: a
 *      stack is credited with the class's allocations in the interval its miss closes. That is
 *      unbiased when which stack allocates is not locked in step with the magazine's refills
 *      (docs/profiling.md discusses the bias). Allocations of a class that never misses are
 *      charged at its next miss, and never if none comes.
 *   4. State: each thread's clock (bytes left to the next point, the class counts already
 *      charged) comes from a metadata pool at its first charge and goes back at its exit. Only
 *      its thread touches it: no lock. A per-CPU thread's 32-bit counts restart from 0 when
 *      folded (mag.h); a count below the one charged is read as allocations since the fold.
 */
#include "prof_clock.h"
#include "mag.h"
#include "meta.h"
#include "options.h"
#include "os.h"

#include <string.h>

#define PROF_CLOCK_BULK 4096 /* a charge of more than this many rates counts its mean */

typedef struct prof_clock {
  int64_t bytes_left;          /* to the thread's next sampling point */
  uint64_t random;             /* the state of the gaps' generator (xorshift64*) */
  uint64_t seen[SC_COUNT + 1]; /* allocations of each class already charged */
} prof_clock_t;

static meta_pool_t prof_clock_pool = META_POOL(sizeof(prof_clock_t));
static __thread prof_clock_t *prof_clock_tls __attribute__((tls_model("initial-exec")));

/* ln(x) for x in (0, 1]: x = m * 2^e with m in [1, 2), ln m = 2 atanh((m - 1) / (m + 1)), whose
   series converges fast for (m - 1) / (m + 1) < 1/3 (the library links no libm). */
static double prof_ln(double x) {
  uint64_t bits;
  memcpy(&bits, &x, sizeof bits);
  int e = (int)((bits >> 52) & 0x7ff) - 1023;
  bits = (bits & ~((uint64_t)0x7ff << 52)) | (uint64_t)1023 << 52;
  double m;
  memcpy(&m, &bits, sizeof m);
  double z = (m - 1) / (m + 1), z2 = z * z, term = z, sum = 0;
  for (int k = 1; k < 40; k += 2, term *= z2)
    sum += term / k;
  return 2 * sum + e * 0.69314718055994530942;
}

/* The bytes to the next point: -rate * ln(U), U uniform in (0, 1], at least 1. */
static int64_t prof_clock_gap(prof_clock_t *t) {
  t->random ^= t->random >> 12;
  t->random ^= t->random << 25;
  t->random ^= t->random >> 27;
  uint64_t bits = t->random * 0x2545f4914f6cdd1du;
  double u = (double)((bits >> 11) + 1) / 9007199254740992.0; /* 2^53 */
  double gap = -(double)opt.profile_rate * prof_ln(u);
  return gap < 1 ? 1 : (int64_t)gap;
}

/* The thread's allocations of class c so far, in its layout. */
static uint64_t prof_clock_allocs(const tcache_t *tc, unsigned c) {
  return tc->cpus ? STAT_READ(tc->cpu_counts[c].allocs) : STAT_READ(tc->own.allocs[c]);
}

size_t prof_clock_unit(unsigned c, size_t size) {
  return c ? sc_size(c) : (size ? size : 1);
}

uint64_t prof_clock_tick(unsigned c, size_t size) {
  tcache_t *tc = mag_tls;
  if (!opt.profile_rate || tc == &tcache_boot || tc == &tcache_dead) return 0;
  prof_clock_t *t = prof_clock_tls;
  if (!t) {
    if (!(t = meta_alloc(&prof_clock_pool))) return 0;
    t->random = (os_random() ^ (uintptr_t)t) | 1; /* a seed of its own for each thread */
    t->bytes_left = prof_clock_gap(t);
    prof_clock_tls = t;
  }
  uint64_t bytes = prof_clock_unit(c, size);
  if (c) {
    uint64_t now = prof_clock_allocs(tc, c), seen = t->seen[c];
    bytes *= (now >= seen ? now - seen : now) + 1;
    t->seen[c] = now;
  }
  uint64_t points = 0;
  if (bytes / opt.profile_rate > PROF_CLOCK_BULK) { /* a huge block: its mean, not a loop */
    points = bytes / opt.profile_rate;
    t->bytes_left = prof_clock_gap(t);
  } else {
    t->bytes_left -= (int64_t)bytes;
    for (; t->bytes_left <= 0; points++)
      t->bytes_left += prof_clock_gap(t);
  }
  if (c && !points) t->seen[c]++; /* served from the class, which counts it */
  return points;
}

void prof_clock_thread_exit(void) {
  if (prof_clock_tls) meta_free(&prof_clock_pool, prof_clock_tls);
  prof_clock_tls = NULL;
}
