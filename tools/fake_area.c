/*
 * fake_area: a process that publishes a magpie statistics area whose every figure is 2^64 - 1,
 * for the tests of `magpie stats` and `magpie top` (test_magpie.py, case stats_largest): their
 * tables must keep each figure apart from the next however wide it is. It makes the area as
 * magpie does (a memfd named MAGPIE_AREA_NAME, magpie_stats.h's layout), prints "ready", and
 * republishes every 50 ms until killed, its counts growing (top shows rates between snapshots).
 */
#define _GNU_SOURCE
#include "magpie_stats.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define ROWS_OFFSET 4096
#define AREA_SIZE (4 * 4096)

int main(void) {
  const uint64_t max = UINT64_MAX;
  int fd = memfd_create(MAGPIE_AREA_NAME, MFD_CLOEXEC);
  if (fd < 0 || ftruncate(fd, AREA_SIZE) != 0) return 1;
  char *area = mmap(NULL, AREA_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (area == MAP_FAILED) return 1;
  magpie_area_t *h = (magpie_area_t *)area;
  magpie_area_class_t *c = (magpie_area_class_t *)(area + ROWS_OFFSET);
  magpie_area_lock_t *l = (magpie_area_lock_t *)(area + 2 * ROWS_OFFSET);
  magpie_area_thread_t *t = (magpie_area_thread_t *)(area + 3 * ROWS_OFFSET);
  for (uint64_t published = 1;; published++) {
    __atomic_store_n(&h->seq, 2 * published - 1, __ATOMIC_SEQ_CST);
    magpie_area_t head = {.magic = MAGPIE_AREA_MAGIC,
                          .major = MAGPIE_AREA_MAJOR,
                          .minor = MAGPIE_AREA_MINOR,
                          .seq = 2 * published - 1,
                          .area_size = AREA_SIZE,
                          .header_size = sizeof head,
                          .class_row_size = sizeof *c,
                          .lock_row_size = sizeof *l,
                          .cpu_row_size = sizeof(magpie_area_cpu_t),
                          .class_offset = ROWS_OFFSET,
                          .class_count = 1,
                          .lock_offset = 2 * ROWS_OFFSET,
                          .lock_count = 1,
                          .cpu_offset = 2 * ROWS_OFFSET,
                          .pid = (uint64_t)getpid(),
                          .published = published,
                          .allocs = max,
                          .frees = max,
                          .bytes_requested = max,
                          .live_bytes = max,
                          .peak_live_bytes = max,
                          .cached_bytes = max,
                          .mapped_bytes = max,
                          .peak_mapped_bytes = max,
                          .rss_bytes = max,
                          .huge_bytes = max,
                          .rounding_bytes = max,
                          .misses = max,
                          .threads_live = max,
                          .threads_total = max,
                          .cpus = max,
                          .thread_row_size = sizeof *t,
                          .thread_offset = 3 * ROWS_OFFSET,
                          .thread_count = 1};
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    head.publish_ns = (uint64_t)now.tv_sec * 1000000000u + (uint64_t)now.tv_nsec;
    memcpy(area, &head, sizeof head);
    /* counts that grow by 2^58 a snapshot (wrapping after 64): top's rates, per second, are
       then as wide as a rate can be printed */
    uint64_t v = published << 58 | (max >> 6);
    *c = (magpie_area_class_t){.name = "malloc",
                               .kind = 0,
                               .index = 96,
                               .size = max,
                               .allocs = v,
                               .frees = v,
                               .live_bytes = max,
                               .misses = v,
                               .depot_exchanges = v,
                               .mag_rounds = max,
                               .cached_mags = max,
                               .cached_depot = max,
                               .slabs = max,
                               .slab_objects = max,
                               .slab_objects_out = max,
                               .rounding_bytes = max,
                               .swept = max};
    *l =
        (magpie_area_lock_t){.name = "heap-arena", .acquisitions = v, .contended = v, .wait_ns = v};
    *t = (magpie_area_thread_t){max, max, max, max, max};
    __atomic_store_n(&h->seq, 2 * published, __ATOMIC_RELEASE);
    if (published == 1) {
      puts("ready");
      fflush(stdout);
    }
    usleep(50000);
  }
}
