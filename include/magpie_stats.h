/*
 * magpie_stats.h: the layout of the live statistics area, which a process running magpie
 * publishes in a shared memory file (a memfd named "magpie-live-stats") and another process reads
 * through /proc/PID/fd without stopping it (`magpie stats PID`). docs/stats.md describes every
 * field and the version rules; in short:
 *   - the area starts with magpie_area_t; rows of classes and locks follow at the offsets it
 *     gives, each row row_size bytes apart;
 *   - `seq` is a sequence lock: odd while the process writes, even when the copy is whole; a
 *     reader copies the area and keeps the copy only if seq was even and unchanged across it;
 *   - MAGPIE_AREA_MAJOR changes when a field moves or changes meaning: a reader refuses a
 *     major it does not know. Fields are only ever appended, to the header or to a row, with
 *     MAGPIE_AREA_MINOR raised: a reader uses the sizes the area gives (header_size,
 *     class_row_size, lock_row_size) and reads fields past them as 0.
 * Every count is a uint64_t in the process's byte order; byte counts are in bytes, times in ns.
 */
#ifndef MAGPIE_STATS_AREA_H
#define MAGPIE_STATS_AREA_H

#include <stdint.h>

#define MAGPIE_AREA_MAGIC 0x545345495047414dull /* the bytes "MAGPIEST" */
#define MAGPIE_AREA_MAJOR 1
#define MAGPIE_AREA_MINOR 4
/* The memfd's name: /proc/PID/fd/N links to "/memfd:<name> (deleted)". */
#define MAGPIE_AREA_NAME "magpie-live-stats"

/* The process's figures and where the rows are. */
typedef struct magpie_area {
  uint64_t magic;     /* MAGPIE_AREA_MAGIC */
  uint32_t major;     /* MAGPIE_AREA_MAJOR of the writer */
  uint32_t minor;     /* MAGPIE_AREA_MINOR of the writer */
  uint64_t seq;       /* sequence lock: odd while a snapshot is written */
  uint64_t area_size; /* bytes of the whole area */
  uint32_t header_size, class_row_size, lock_row_size, cpu_row_size;
  uint32_t class_offset, class_count, lock_offset, lock_count, cpu_offset, cpu_count;
  uint64_t pid;
  uint64_t published;  /* snapshots written so far (this one included) */
  uint64_t publish_ns; /* CLOCK_REALTIME of this snapshot, ns since the epoch */
  /* process totals */
  uint64_t allocs, frees; /* every block: size classes, object caches excluded, large blocks */
  uint64_t bytes_requested;
  uint64_t live_bytes;      /* blocks held by the program, at their class size */
  uint64_t peak_live_bytes; /* an upper bound of the peak of live_bytes */
  uint64_t cached_bytes;    /* free objects in magazines and depots */
  uint64_t mapped_bytes, peak_mapped_bytes, rss_bytes;
  uint64_t huge_bytes; /* heap bytes on huge pages; 0 until the arena reports them */
  uint64_t large_allocs, large_frees, large_live_bytes;
  uint64_t rounding_bytes; /* estimated bytes lost to size-class rounding, over all allocations */
  uint64_t misses;         /* operations past the magazines, all caches */
  uint64_t threads_live, threads_total, cpus, percpu;
  /* 1.2: rows of the busiest live threads */
  uint32_t thread_row_size, thread_offset, thread_count, thread_pad;
} magpie_area_t;

/* One cache: a malloc size class (kind 0, index = class) or an object cache (kind 1). */
typedef struct magpie_area_class {
  char name[32]; /* "malloc" or the object cache's name */
  uint64_t kind, index;
  uint64_t size; /* object size (class size) in bytes */
  uint64_t allocs, frees, live_bytes;
  uint64_t misses;          /* operations past the threads' or CPUs' magazines */
  uint64_t depot_exchanges; /* magazines traded with the depot */
  uint64_t mag_rounds;      /* magazine size for this cache now */
  uint64_t cached_mags;     /* free objects in threads' and CPUs' magazines */
  uint64_t cached_depot;    /* free objects in the depot's full magazines */
  uint64_t depot_full_mags, depot_empty_mags;
  uint64_t slabs, slab_objects; /* slabs held, and objects they can hold */
  uint64_t slab_objects_out;    /* objects out of the slabs: live or cached */
  /* 1.1: bytes lost to rounding, estimated from the heap profiler's samples (0 without) */
  uint64_t rounding_bytes;
  /* 1.3: objects threads' sweeps gave back from the depot and magazines to the slabs */
  uint64_t swept;
  /* 1.4: slabs of one thread's or CPU's own, which only its refills take from */
  uint64_t slabs_owned;
} magpie_area_class_t;

/* One lock, or a set of locks summed (name says which). */
typedef struct magpie_area_lock {
  char name[32]; /* "depot 12", "slab 12", "heap arena", "metadata pools", "cpu 3", ... */
  uint64_t acquisitions, contended, wait_ns;
} magpie_area_lock_t;

/* One live thread (1.2): the kernel's id, its malloc operations (size classes and large blocks,
   object caches excluded), those past its magazines, and the bytes it asked for. */
typedef struct magpie_area_thread {
  uint64_t tid, allocs, frees, misses, bytes_requested;
} magpie_area_thread_t;

/* One CPU's magazines (per-CPU mode only). */
typedef struct magpie_area_cpu {
  uint64_t cpu, misses;
} magpie_area_cpu_t;

#endif
