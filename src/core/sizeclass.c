/*
 * sizeclass: the table of small object sizes.
 *
 * Theory
 *   1. Classes are 16..128 in steps of 16, then eight classes per doubling up to 256 KiB
 *      (step = 1/8 of the lower power of two). A request just above a class boundary wastes
 *      less than one step, under 12.5% of the request above 128 bytes; every class is a
 *      multiple of 16, so every object is 16-byte aligned, and power-of-two classes are
 *      naturally aligned to their size (their spans are aligned to at least the object size).
 *   2. Each class gets the smallest power-of-two slab span from 64 KiB to 2 MiB that holds at
 *      least 8 objects with at most 1/16 of the span left over (at 2 MiB, less than an object);
 *      the table is in docs/sizeclasses.md. (Object caches of larger objects get larger spans,
 *      still of at least 8 objects.)
 *   3. The tables are filled once by sc_init, before the first request is served, then only read.
 *      Until then sc_lookup is zero (class 0), whose magazines are empty: the fast path falls
 *      into the slow path, which initialises.
 *   4. sc_lookup covers requests up to 32 KiB in 16-byte steps (2 KiB, of which a program
 *      touches the lines of the sizes it asks for), so that the fast path's branch between the
 *      table and the arithmetic is rarely taken both ways by one program: a program whose
 *      sizes straddle the table's end mispredicts it (docs/decisions/size-class-table-32k.md).
 *   5. sc_sized is sc_lookup for C++ sized delete: each 16-byte step's class with that class's
 *      object-start test beside it, so the size alone leads to both in one line (32 KiB, again
 *      touched only where a program's sizes are). It is zero, so that no address passes, until
 *      bring-up knows that every block is in its size's class, and stays so in a program
 *      without the C++ runtime, whose 8 pages it then never touches
 *      (docs/decisions/cxx-sized-delete.md).
 */
#include "sizeclass.h"
#include "pagemap.h"

#define SC_SPAN_MIN ((size_t)64 << 10)
#define SC_OBJECTS_MIN 8 /* fewer objects per span make slab churn cost more than it saves */
#define SC_WASTE_SHIFT 4 /* at most span >> 4 bytes of a span may be left over */

sc_tables_t sc_tables;
_Static_assert(SC_INFO_ENTRIES > SC_COUNT && SC_INFO_ENTRIES > PM_TAG_MASK,
               "every tag indexes sc_tables");
uint8_t sc_lookup[SC_LOOKUP_MAX / 16 + 1];
sc_sized_t sc_sized[SC_LOOKUP_MAX / 16 + 1];
static bool sc_sized_filled; /* its classes written: sc_sized_trust(true) ran */

size_t sc_span_for(size_t size) {
  size_t span = SC_SPAN_MIN; /* the waste bound gives way at SC_SPAN_MAX, the count never */
  while (span / size < SC_OBJECTS_MIN ||
         (span < SC_SPAN_MAX && (span % size) > (span >> SC_WASTE_SHIFT)))
    span *= 2;
  return span;
}

void sc_init(void) {
  unsigned c = 1;
  for (uint32_t size = 16; size <= 128; size += 16)
    sc_tables.info[c++].size = size;
  for (uint32_t base = 128; base < SC_SMALL_MAX; base *= 2)
    for (uint32_t j = 1; j <= 8; j++)
      sc_tables.info[c++].size = base + j * (base / 8);
  for (c = 1; c <= SC_COUNT; c++) {
    sc_tables.info[c].span_mask = (uint32_t)(sc_span_for(sc_size(c)) - 1);
    sc_tables.div_magic[c] = UINT64_MAX / sc_size(c) + 1;
  }
  unsigned k = 1; /* the requests ascend, and so do their classes */
  for (size_t i = 0; i <= SC_LOOKUP_MAX / 16; i++) {
    while (sc_size(k) < i * 16)
      k++;
    sc_lookup[i] = (uint8_t)k;
  }
}

void sc_sized_trust(bool trust) {
  if (!trust && !sc_sized_filled) return; /* all zero: nothing passes already */
  for (size_t i = 0; i <= SC_LOOKUP_MAX / 16; i++) {
    unsigned c = sc_lookup[i];
    if (trust && !sc_sized_filled) { /* read by sized deletes once filled: written once */
      sc_sized[i].class_ = c;
      sc_sized[i].span_mask = sc_tables.info[c].span_mask;
    }
    __atomic_store_n(&sc_sized[i].div_magic, trust ? sc_tables.div_magic[c] : 0, __ATOMIC_RELAXED);
  }
  sc_sized_filled |= trust;
}
