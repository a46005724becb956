/*
 * Impossible sizes: every allocation function fails with NULL and errno ENOMEM (posix_memalign:
 * the return value) for sizes no object can have, including sizes whose rounding up to a size
 * class, a page or an alignment would wrap around; realloc and reallocarray leave the old block
 * valid and intact when they fail. Sizes that no address space has room for (2^47 bytes and up
 * on x86-64) fail before any system call: a seccomp filter makes an mmap or mremap that big
 * raise SIGSYS, which fails the test.
 */
#include "check.h"

#include <errno.h>
#include <malloc.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <string.h>
#include <unistd.h>
#if defined(__x86_64__)
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#endif

#define KEEP_SIZE 1000 /* the block that failed reallocs must leave intact */

/* Sizes above PTRDIFF_MAX (no object may be that large) and sizes just below SIZE_MAX, where
 * rounding up overflows. PTRDIFF_MAX itself is a valid request that no 64-bit address space
 * can satisfy. */
static const size_t impossible_sizes[] = {
    SIZE_MAX,
    SIZE_MAX - 1,
    SIZE_MAX - 15,
    SIZE_MAX - 16,
    SIZE_MAX - 4095,
    SIZE_MAX - 4096,
    SIZE_MAX - (2 << 20),
    SIZE_MAX - (1ULL << 30),
    (size_t)PTRDIFF_MAX + 1,
    (size_t)PTRDIFF_MAX,
    (size_t)PTRDIFF_MAX - 4095,
    SIZE_MAX / 2 + 4096,
};
#define NUM_IMPOSSIBLE (sizeof impossible_sizes / sizeof impossible_sizes[0])

static void report_size(const char *fn, size_t n, const void *p, int err) {
  if (p != NULL || err != ENOMEM)
    NOTE("  %s(%#zx) = %p, errno %d (wanted NULL, ENOMEM %d)\n", fn, n, p, err, ENOMEM);
}

static void test_malloc(void) {
  for (size_t i = 0; i < NUM_IMPOSSIBLE; i++) {
    size_t n = opaque_size(impossible_sizes[i]);
    errno = 0;
    void *p = malloc(n);
    int err = errno;
    report_size("malloc", n, p, err);
    CHECK(p == NULL);
    CHECK(err == ENOMEM);
    if (p != NULL) free(p);
  }
  /* The two the brief names, spelled out. */
  errno = 0;
  CHECK(malloc(opaque_size(SIZE_MAX)) == NULL && errno == ENOMEM);
  errno = 0;
  CHECK(malloc(opaque_size((size_t)PTRDIFF_MAX + 1)) == NULL && errno == ENOMEM);
}

static void test_calloc(void) {
  struct {
    size_t count, size;
  } cases[] = {
      {SIZE_MAX / 2 + 1, 4}, /* 2^65: wraps to 0 */
      {SIZE_MAX / 2 + 1, 2}, /* 2^64: wraps to 0 */
      {4, SIZE_MAX / 2 + 1},
      {SIZE_MAX, SIZE_MAX},
      {((size_t)1 << 32) + 1, (size_t)1 << 32}, /* wraps to 2^32: small if unchecked */
      {1, SIZE_MAX},
      {SIZE_MAX, 1},
      {(size_t)PTRDIFF_MAX / 8 + 1, 8},
      {16, SIZE_MAX / 16 + 1}, /* wraps to 0 */
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    errno = 0;
    void *p = calloc(opaque_size(cases[i].count), opaque_size(cases[i].size));
    int err = errno;
    if (p != NULL || err != ENOMEM)
      NOTE("  calloc(%#zx, %#zx) = %p, errno %d\n", cases[i].count, cases[i].size, p, err);
    CHECK(p == NULL);
    CHECK(err == ENOMEM);
    if (p != NULL) free(p);
  }
}

static void test_realloc(void) {
  unsigned char *keep = malloc(opaque_size(KEEP_SIZE));
  REQUIRE(keep != NULL);
  pattern_fill(keep, KEEP_SIZE, 7);
  for (size_t i = 0; i < NUM_IMPOSSIBLE; i++) {
    size_t n = opaque_size(impossible_sizes[i]);
    errno = 0;
    void *p = realloc(opaque_ptr(keep), n);
    int err = errno;
    report_size("realloc", n, p, err);
    CHECK(p == NULL);
    CHECK(err == ENOMEM);
    REQUIRE(p == NULL); /* otherwise keep is gone */
    CHECK(pattern_ok(keep, KEEP_SIZE, 7));
  }
  /* realloc(NULL, impossible) is malloc(impossible). */
  errno = 0;
  CHECK(realloc(NULL, opaque_size(SIZE_MAX)) == NULL);
  CHECK(errno == ENOMEM);
  /* The old block still works as a block: it can grow and be freed. */
  unsigned char *grown = realloc(keep, opaque_size(4 * KEEP_SIZE));
  REQUIRE(grown != NULL);
  CHECK(pattern_ok(grown, KEEP_SIZE, 7));
  free(grown);

  /* The same with a large block (large path). */
  size_t large = 3 * MiB;
  unsigned char *big = malloc(opaque_size(large));
  REQUIRE(big != NULL);
  pattern_fill(big, large, 9);
  errno = 0;
  CHECK(realloc(big, opaque_size(SIZE_MAX)) == NULL);
  CHECK(errno == ENOMEM);
  errno = 0;
  CHECK(realloc(big, opaque_size((size_t)PTRDIFF_MAX + 1)) == NULL);
  CHECK(errno == ENOMEM);
  CHECK(pattern_ok(big, large, 9));
  free(big);
}

static void test_reallocarray(void) {
  errno = 0;
  CHECK(reallocarray(NULL, opaque_size(SIZE_MAX / 2 + 1), opaque_size(4)) == NULL);
  CHECK(errno == ENOMEM);
  unsigned char *keep = reallocarray(NULL, opaque_size(10), opaque_size(100));
  REQUIRE(keep != NULL);
  pattern_fill(keep, KEEP_SIZE, 11);
  size_t cases[][2] = {{SIZE_MAX / 2 + 1, 4},
                       {SIZE_MAX, SIZE_MAX},
                       {4, SIZE_MAX / 4 + 1},
                       {((size_t)1 << 33), ((size_t)1 << 31)}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    errno = 0;
    void *p = reallocarray(opaque_ptr(keep), opaque_size(cases[i][0]), opaque_size(cases[i][1]));
    int err = errno;
    CHECK(p == NULL);
    CHECK(err == ENOMEM);
    REQUIRE(p == NULL);
    CHECK(pattern_ok(keep, KEEP_SIZE, 11));
  }
  free(keep);
}

static void test_aligned(void) {
  for (size_t i = 0; i < NUM_IMPOSSIBLE; i++) {
    size_t n = opaque_size(impossible_sizes[i]);
    size_t alignments[] = {16, 64, 4096, 2 * MiB};
    for (size_t j = 0; j < sizeof alignments / sizeof alignments[0]; j++) {
      size_t a = opaque_size(alignments[j]);
      void *p = (void *)1;
      int rc = posix_memalign(&p, a, n);
      if (rc != ENOMEM) NOTE("  posix_memalign(%zu, %#zx) = %d\n", a, n, rc);
      CHECK(rc == ENOMEM);
      if (rc == 0) free(p);

      errno = 0;
      p = aligned_alloc(a, n);
      int err = errno;
      report_size("aligned_alloc", n, p, err);
      CHECK(p == NULL && err == ENOMEM);
      if (p != NULL) free(p);

      errno = 0;
      p = memalign(a, n);
      err = errno;
      report_size("memalign", n, p, err);
      CHECK(p == NULL && err == ENOMEM);
      if (p != NULL) free(p);
    }
    errno = 0;
    void *p = valloc(n);
    int err = errno;
    report_size("valloc", n, p, err);
    CHECK(p == NULL && err == ENOMEM);
    if (p != NULL) free(p);

    errno = 0;
    p = pvalloc(n);
    err = errno;
    report_size("pvalloc", n, p, err);
    CHECK(p == NULL && err == ENOMEM);
    if (p != NULL) free(p);
  }
}

#if defined(__x86_64__)
#define ADDR_BITS 47 /* the user address space the kernel maps into without a hint */

static void on_sigsys(int sig, siginfo_t *si, void *ctx) {
  (void)sig, (void)si, (void)ctx;
  static const char msg[] = "FAIL: a system call of 2^47 bytes or more (SIGSYS) for a size no "
                            "address space holds: it should fail at once\n";
  (void)!write(2, msg, sizeof msg - 1);
  _exit(1);
}

/* Kills the test (SIGSYS) at an mmap or mremap whose length is at least 2^ADDR_BITS: the
   length's high word, args[1] for mmap and args[2] for mremap, at least 2^(ADDR_BITS - 32). */
static bool forbid_huge_mappings(void) {
  struct sock_filter filter[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_mmap, 0, 2),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[1]) + 4),
      BPF_STMT(BPF_JMP | BPF_JA, 2), /* to the length's test */
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_mremap, 0, 3),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[2]) + 4),
      BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, 1u << (ADDR_BITS - 32), 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_TRAP),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  struct sock_fprog prog = {sizeof filter / sizeof filter[0], filter};
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_sigsys;
  sa.sa_flags = SA_SIGINFO;
  if (sigaction(SIGSYS, &sa, NULL) != 0) return false;
  return prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 &&
         prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) == 0;
}

/* Sizes from 2^47 up, each through every function that takes a size. */
static void test_beyond_address_space(void) {
  if (!forbid_huge_mappings()) {
    NOTE("  no seccomp filter (errno %d): the no-system-call part is not checked\n", errno);
    CHECK(!"seccomp filter installed");
    return;
  }
  static const size_t sizes[] = {(size_t)1 << ADDR_BITS, ((size_t)1 << ADDR_BITS) + 4096,
                                 (size_t)1 << 50, (size_t)1 << 62};
  unsigned char *keep = malloc(opaque_size(3 * MiB)); /* a large block, for realloc */
  REQUIRE(keep != NULL);
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    size_t n = opaque_size(sizes[i]);
    void *p;
    errno = 0;
    p = malloc(n);
    CHECK(p == NULL && errno == ENOMEM);
    errno = 0;
    p = calloc(1, n);
    CHECK(p == NULL && errno == ENOMEM);
    errno = 0;
    p = realloc(keep, n);
    CHECK(p == NULL && errno == ENOMEM);
    errno = 0;
    p = aligned_alloc(2 * MiB, n);
    CHECK(p == NULL && errno == ENOMEM);
    if ((n & (n - 1)) == 0) /* an alignment that big */
      CHECK(posix_memalign(&p, opaque_size(n), 64) == ENOMEM);
  }
  free(keep);
}
#endif

int main(void) {
  api_begin("limits");
  test_malloc();
  test_calloc();
  test_realloc();
  test_reallocarray();
  test_aligned();
#if defined(__x86_64__)
  test_beyond_address_space(); /* last: the filter stays */
#endif
  /* Failures must leave the allocator working. */
  void *after = malloc(opaque_size(100));
  CHECK(after != NULL);
  free(after);
  return api_end();
}
