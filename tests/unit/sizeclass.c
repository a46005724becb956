/* The size-class table: every request maps to the smallest class that holds it, waste stays
   under 12.5% above 128 bytes, classes are 16-byte multiples, spans hold >= 8 objects. */
#include "sizeclass.h"
#include "unit.h"

int main(void) {
  sc_init();
  for (unsigned c = 1; c <= SC_COUNT; c++) {
    size_t size = sc_size(c), span = (size_t)sc_tables.info[c].span_mask + 1;
    UCHECK(size % 16 == 0);
    UCHECK(c == 1 || sc_size(c - 1) < size);
    UCHECK((span & (span - 1)) == 0 && span >= ((size_t)64 << 10));
    UCHECK(span <= SC_SPAN_MAX);
    UCHECK(span / size >= 8);
    UCHECK(span % size <= span / 16 || (span == SC_SPAN_MAX && span % size < size));
    UCHECK(sc_span_for(size) == span);
    /* the multiply test agrees with %, at every byte of a span, wherever the span is */
    for (uint32_t off = 0; off < span; off++)
      if (sc_is_object_start(c, off) != (off % size == 0) ||
          sc_is_object_start(c, ((uintptr_t)0x7f5a << 32 | span * 3) + off) != (off % size == 0))
        UCHECK(!"sc_is_object_start disagrees with %");
  }
  UCHECK(sc_size(SC_COUNT) == SC_SMALL_MAX);
  /* a page-map tag that is no class is no object start anywhere (free's fast path relies on
     it: src/front/fastpath.h) */
  for (unsigned tag = 0; tag < SC_INFO_ENTRIES; tag = tag ? tag + 1 : SC_COUNT + 1)
    for (uintptr_t a = 0; a < ((uintptr_t)1 << 22); a += 16)
      if (sc_is_object_start(tag, ((uintptr_t)0x7f5a << 32) + a)) UCHECK(!"a tag passes");
  UCHECK(sc_of(0) == 1 && sc_of(1) == 1 && sc_of(16) == 1 && sc_of(17) == 2);
  for (size_t s = 1; s <= SC_SMALL_MAX; s++) {
    unsigned c = sc_of(s);
    UCHECK(c >= 1 && c <= SC_COUNT);
    UCHECK(sc_size(c) >= s);
    UCHECK(c == 1 || sc_size(c - 1) < s);
    if (s > 128) UCHECK((sc_size(c) - s) * 8 < s); /* internal fragmentation < 12.5% */
  }
  /* sc_sized: all zero until trusted (a distrust before changes nothing); then sc_lookup's
     class and its test, which pass nothing again once distrusted */
  UCHECK(((uintptr_t)sc_sized & 15) == 0); /* fastpath.h rounds an address into it */
  sc_sized_trust(false);
  for (size_t i = 0; i <= SC_LOOKUP_MAX / 16; i++)
    UCHECK(sc_sized[i].class_ == 0 && sc_sized[i].span_mask == 0 && sc_sized[i].div_magic == 0);
  for (int trust = 1; trust <= 2; trust++) {
    sc_sized_trust(trust == 1);
    for (size_t i = 0; i <= SC_LOOKUP_MAX / 16; i++) {
      unsigned c = sc_sized[i].class_;
      UCHECK(c == sc_lookup[i] && sc_sized[i].span_mask == sc_tables.info[c].span_mask);
      UCHECK(sc_sized[i].div_magic == (trust == 1 ? sc_tables.div_magic[c] : 0));
    }
  }
  printf("sizeclass: %u classes ok\n", SC_COUNT);
  return 0;
}
