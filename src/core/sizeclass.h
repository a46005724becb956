/* sizeclass: request size -> size class. See sizeclass.c for the table's theory. */
#ifndef MAGPIE_SIZECLASS_H
#define MAGPIE_SIZECLASS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "export.h"

#define SC_COUNT 96                   /* classes are numbered 1..SC_COUNT; 0 means "none" */
#define SC_SMALL_MAX ((size_t)262144) /* larger requests are large blocks, from vmem */
#define SC_LOOKUP_MAX ((size_t)32768) /* up to here one table load finds the class */
#define SC_SPAN_MAX ((size_t)2 << 20)

typedef struct sc_info {
  uint32_t size;      /* object size: a multiple of 16 */
  uint32_t span_mask; /* slab span size - 1; spans are aligned to their (power-of-two) size */
} sc_info_t;

/* Two tables indexed by class, and by any page-map tag (pagemap.h): the entries of 0 and of the
   tags above SC_COUNT are zero, so that sc_is_object_start is false for them and free's fast
   path need not test the tag's range first. Entries of 8 bytes each, so that free's fast path
   indexes both with its class scaled in the address; one object, so that it finds both from
   one address (a position-independent library computes a global array's address before
   indexing it). */
#define SC_INFO_ENTRIES 128
typedef struct sc_tables {
  sc_info_t info[SC_INFO_ENTRIES];
  uint64_t div_magic[SC_INFO_ENTRIES]; /* UINT64_MAX / size + 1: off % size == 0 iff
                                          off * magic < magic */
} sc_tables_t;
extern MAGPIE_HIDDEN sc_tables_t sc_tables;
extern MAGPIE_HIDDEN uint8_t sc_lookup[SC_LOOKUP_MAX / 16 + 1];

static MP_INLINE uint32_t sc_size(size_t c) { /* class c's object size (0 for no class) */
  return sc_tables.info[c].size;
}

/* A request size's class with the class's object-start test, indexed like sc_lookup: what a C++
   sized delete needs in one 16-byte entry (front/fastpath.h). All zero until
   sc_sized_trust(true), div_magic 0 again after sc_sized_trust(false): then no address
   passes. */
typedef struct __attribute__((aligned(16))) sc_sized {
  uint64_t div_magic;
  uint32_t span_mask;
  uint32_t class_;
} sc_sized_t;
extern MAGPIE_HIDDEN sc_sized_t sc_sized[SC_LOOKUP_MAX / 16 + 1];

void sc_init(void);
/* Lets sc_sized's tests pass (true: every block of a size up to SC_LOOKUP_MAX is in its size's
   class; the first time, at bring-up, also fills in the classes), or fail from now on (false:
   only div_magic changes, one atomic store an entry). */
void sc_sized_trust(bool trust);
/* The slab span for objects of size bytes: a power of two holding at least 8 of them. */
size_t sc_span_for(size_t size);

/* The class of a request of size bytes, size <= SC_SMALL_MAX. */
static inline unsigned sc_of(size_t size) {
  if (size <= SC_LOOKUP_MAX) return sc_lookup[(size + 15) >> 4];
  unsigned k = 63u - (unsigned)__builtin_clzl(size - 1); /* size in (2^k, 2^(k+1)] */
  return 8u + (k - 7u) * 8u + (unsigned)((size - 1) >> (k - 3)) - 7u;
}

/* True when address a, inside a span of span_mask + 1 bytes of objects whose size's magic is
   magic, is the start of an object: its offset in the span (spans are aligned to their size)
   is a multiple of the object size. False everywhere for magic 0. */
static MP_INLINE int sc_offset_is_start(uintptr_t a, uint32_t span_mask, uint64_t magic) {
  uint64_t off = (uint32_t)a & span_mask;
  return off * magic < magic; /* Lemire's test, with magic - 1 < off * magic folded */
}

/* sc_offset_is_start in a slab of class c. False for c 0 or above SC_COUNT (their magic is 0). */
static MP_INLINE int sc_is_object_start(size_t c, uintptr_t a) {
  return sc_offset_is_start(a, sc_tables.info[c].span_mask, sc_tables.div_magic[c]);
}

#endif
