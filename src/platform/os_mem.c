/*
 * os_mem: magpie's memory from the kernel: anonymous mappings, their advice and protection.
 *
 * Theory
 *   1. Anonymous private mappings. os_map_aligned over-maps by the alignment and unmaps the
 *      ends, so an aligned span costs no waste after the call. os_purge uses MADV_DONTNEED: the
 *      pages go back at once and read as zero afterwards, which lets vmem mark purged ranges
 *      clean (calloc then skips the memset). MADV_FREE is lazier but leaves RSS high until the
 *      kernel is under pressure and gives no zero guarantee, so it is not used.
 *   2. Accounting: os_mapped_bytes is what magpie holds from the kernel, metadata included.
 *      Every map, remap and unmap also tells the record of magpie's mappings (os_track.c).
 *   3. Under valgrind's memcheck, metadata mappings are hidden from it (os_hide_metadata).
 * Nothing here allocates or takes a lock of magpie's; all of it is safe from any thread at any
 * time.
 */
#define _GNU_SOURCE
#include "os.h"
#include "os_impl.h"
#include "vg_requests.h"

#include <errno.h>
#include <stddef.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>
static size_t os_mapped;     /* bytes mapped now (atomic) */
static size_t os_mapped_max; /* high-water mark of os_mapped (atomic) */
static bool os_hiding;       /* os_map_metadata hides from memcheck (os_hide_metadata) */

static void os_account(ptrdiff_t delta) {
  size_t now = __atomic_add_fetch(&os_mapped, (size_t)delta, __ATOMIC_RELAXED);
  size_t peak = __atomic_load_n(&os_mapped_max, __ATOMIC_RELAXED);
  while (now > peak && !__atomic_compare_exchange_n(&os_mapped_max, &peak, now, true,
                                                    __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
  }
}

void *os_map(size_t size) {
  void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return NULL;
  os_account((ptrdiff_t)size);
  os_track_add((uintptr_t)p, (uintptr_t)p + size);
  return p;
}

/* Maps size + extra bytes (extra: enough that an aligned start fits), keeps the size bytes from
   the first multiple of align, and unmaps the ends. */
static void *os_map_trimmed(size_t size, size_t extra, size_t align, int flags) {
  if (size + extra < size) return NULL;
  char *raw =
      mmap(NULL, size + extra, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | flags, -1, 0);
  if (raw == MAP_FAILED) return NULL;
  uintptr_t start = ((uintptr_t)raw + align - 1) & ~(uintptr_t)(align - 1);
  size_t head = start - (uintptr_t)raw, tail = extra - head;
  if (head) munmap(raw, head);
  if (tail) munmap((char *)start + size, tail);
  os_account((ptrdiff_t)size);
  os_track_add(start, start + size);
  return (void *)start;
}

void os_hide_metadata(void) {
  os_hiding = true;
}

void *os_map_metadata(size_t size) {
  void *p = os_map(size);
  if (p && os_hiding) vg_hide(p, size);
  return p;
}

void os_show_metadata(void) {
  if (os_hiding) vg_unhide((void *)OS_PAGE, ((uintptr_t)1 << OS_ADDR_BITS) - OS_PAGE);
}

void *os_map_aligned(size_t size, size_t align) {
  if (align <= OS_PAGE) return os_map(size);
  return os_map_trimmed(size, align, align, 0);
}

void os_unmap(void *p, size_t size) {
  if (munmap(p, size) != 0) os_fatal("munmap of a range magpie mapped failed");
  if (os_hiding) vg_unhide(p, size); /* the range may be mapped again for the heap */
  os_account(-(ptrdiff_t)size);
  os_track_remove((uintptr_t)p, (uintptr_t)p + size);
}

void *os_remap(void *p, size_t old_size, size_t new_size) {
  void *q = mremap(p, old_size, new_size, MREMAP_MAYMOVE);
  if (q == MAP_FAILED) return NULL;
  os_account((ptrdiff_t)new_size - (ptrdiff_t)old_size);
  os_track_remove((uintptr_t)p, (uintptr_t)p + old_size);
  os_track_add((uintptr_t)q, (uintptr_t)q + new_size);
  return q;
}

void os_purge(void *p, size_t size) {
  madvise(p, size, MADV_DONTNEED);
}

#ifndef SYS_process_madvise
#define SYS_process_madvise 440 /* Linux 5.10 */
#endif
#define OS_PIDFD_SELF (-10000) /* PIDFD_SELF_THREAD (Linux 6.14): the caller's own process */
_Static_assert(sizeof(os_purge_range_t) == sizeof(struct iovec) &&
                   offsetof(struct iovec, iov_len) == sizeof(void *),
               "a listed range is an iovec");

/* process_madvise failed once, or valgrind runs the program (its tools do not know the call and
   say so): madvise from then on. */
static bool os_purge_vector_refused;

void os_purge_list_run(os_purge_list_t *list) {
  size_t i = 0;
  if (list->n && vg_running()) __atomic_store_n(&os_purge_vector_refused, true, __ATOMIC_RELAXED);
  while (i < list->n && list->batch > 1 &&
         !__atomic_load_n(&os_purge_vector_refused, __ATOMIC_RELAXED)) {
    size_t k = list->n - i < list->batch ? list->n - i : list->batch, bytes = 0;
    for (size_t j = i; j < i + k; j++)
      bytes += list->range[j].size;
    long done = syscall(SYS_process_madvise, OS_PIDFD_SELF, (struct iovec *)&list->range[i], k,
                        MADV_DONTNEED, 0);
    if (done < 0) __atomic_store_n(&os_purge_vector_refused, true, __ATOMIC_RELAXED);
    if ((size_t)done != bytes) break; /* those ranges one by one: a second purge is harmless */
    i += k;
  }
  for (; i < list->n; i++)
    os_purge(list->range[i].start, list->range[i].size);
  list->n = 0;
}

void os_purge_list_add(os_purge_list_t *list, void *p, size_t size) {
  if (list->n == list->cap) os_purge_list_run(list);
  list->range[list->n].start = p;
  list->range[list->n++].size = size;
}

int os_populate(void *p, size_t size) {
  return madvise(p, size, MADV_POPULATE_WRITE) == 0 ? 0 : errno; /* Linux 5.14 */
}

void os_touch(void *p, size_t size) {
  /* a read-modify-write faults once, for writing; a load and a store would fault twice (the
     zero page, then a copy) */
  for (char *c = p, *end = c + size; c < end; c += OS_PAGE - (uintptr_t)c % OS_PAGE)
    __atomic_fetch_or(c, 0, __ATOMIC_RELAXED);
}

__attribute__((noinline)) void os_touch_stack(void) {
  char below[OS_STACK_AHEAD]; /* the frame's bottom, the return address above it */
  below[0] = 0;
  __asm__ volatile("" : : "r"(below) : "memory"); /* the write is made */
}

void os_advise_huge(void *p, size_t size, bool huge) {
  madvise(p, size, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
}

#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25 /* Linux 6.1 */
#endif

bool os_collapse(void *p, size_t size) {
  return madvise(p, size, MADV_COLLAPSE) == 0;
}

void *os_map_hugetlb(size_t size, size_t align) {
  if (align < OS_HUGE) align = OS_HUGE; /* hugetlb mappings are aligned to OS_HUGE already */
  return os_map_trimmed(size, align - OS_HUGE, align, MAP_HUGETLB | (21 << MAP_HUGE_SHIFT));
}

bool os_protect(void *p, size_t size, bool accessible) {
  return mprotect(p, size, accessible ? PROT_READ | PROT_WRITE : PROT_NONE) == 0;
}

size_t os_mapped_bytes(void) {
  return __atomic_load_n(&os_mapped, __ATOMIC_RELAXED);
}
size_t os_mapped_peak(void) {
  return __atomic_load_n(&os_mapped_max, __ATOMIC_RELAXED);
}

bool os_resident(uintptr_t addr, size_t len) {
  unsigned char vec[65];
  uintptr_t start = addr & ~(OS_PAGE - 1);
  size_t pages = (addr + len - start + OS_PAGE - 1) / OS_PAGE;
  if (pages > sizeof vec || mincore((void *)start, addr + len - start, vec) != 0) return false;
  for (size_t i = 0; i < pages; i++)
    if (vec[i] & 1) return true;
  return false;
}

size_t os_read_self(void *dst, uintptr_t src, size_t len) {
  struct iovec local = {dst, len}, remote = {(void *)src, len};
  ssize_t n = process_vm_readv(getpid(), &local, 1, &remote, 1, 0);
  if (n < 0 && (errno == ENOSYS || errno == EPERM)) { /* a sandbox that forbids it */
    memcpy(dst, (const void *)src, len);
    return len;
  }
  return n > 0 ? (size_t)n : 0;
}
