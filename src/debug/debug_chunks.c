/*
 * debug_chunks: the memory under a debug-mode block, taken from the layers below and given back
 * to them. Never from a magazine: debug mode keeps every thread's magazines empty.
 *
 * Theory
 *   1. A chunk is one of three: a slab object of the class that fits front redzone + size +
 *      tail redzone (slab_alloc, one object at a time), a large block (large_alloc), or, with
 *      guards, a mapping of its own whose last page is PROT_NONE, the block placed so that it
 *      ends (up to its alignment) at that page.
 *   2. The user address is chunk + front (front is 16 bytes of redzone when the alignment
 *      allows, else 0); a chunk always leaves DEBUG_TAIL_MIN bytes of tail redzone after the
 *      block when redzones are on, even when the size fills its class.
 *   3. Locking: these functions are called without debug_lock (the layers below take their own
 *      locks, which come after it in the lock order: src/front/fork.c). Chunks freed under
 *      debug_lock are collected in a chunk_batch_t and given back after it is released.
 */
#include "cache.h"
#include "debug_impl.h"
#include "large.h"
#include "os.h"
#include "pagemap.h"
#include "sizeclass.h"
#include "slab.h"

#define DEBUG_TAIL_MIN 16 /* a block whose size fills its class still gets these */

void chunk_put(const chunk_t *c) {
  void *p = (void *)c->base;
  if (c->source == SRC_SLAB)
    slab_free(&malloc_caches[c->cls], &p, 1);
  else if (c->source == SRC_LARGE)
    large_free(p, pagemap_get(c->base));
  else
    os_unmap(p, c->size);
}

void chunk_batch_put(chunk_batch_t *b) {
  for (int i = 0; i < b->count; i++)
    chunk_put(&b->chunk[i]);
  b->count = 0;
}

bool chunk_get(size_t size, size_t align, size_t front, bool guard, chunk_t *c, uintptr_t *user) {
  size_t tail = debug_flags.redzone ? DEBUG_TAIL_MIN : 0, a = align < 16 ? 16 : align;
  if (guard) {
    size_t body, map_align = a > OS_PAGE ? a : OS_PAGE;
    if (a <= OS_PAGE)
      body = (front + size + a - 1 + OS_PAGE - 1) & ~(OS_PAGE - 1);
    else
      body = (size + a - 1) & ~(a - 1);
    if (body == 0) body = OS_PAGE;
    void *m = os_map_aligned(body + OS_PAGE, map_align);
    if (!m) return false;
    if (!os_protect((char *)m + body, OS_PAGE, false)) {
      os_unmap(m, body + OS_PAGE);
      return false;
    }
    c->base = (uintptr_t)m;
    c->size = body + OS_PAGE;
    c->source = SRC_GUARD;
    *user = (c->base + body - size) & ~(uintptr_t)(a - 1);
    return true;
  }
  size_t need = front + size + tail;
  if (need < a) need = a;
  if (need == 0) need = 1;
  if (need <= SC_SMALL_MAX && a <= SC_SMALL_MAX) {
    unsigned cls = sc_of(need);
    while (sc_size(cls) & (a - 1))
      cls++; /* the 256 KiB class is a multiple of any alignment up to it */
    void *obj;
    if (slab_alloc(&malloc_caches[cls], &obj, 1, false, 0) != 1) return false;
    c->base = (uintptr_t)obj;
    c->size = sc_size(cls);
    c->source = SRC_SLAB;
    c->cls = (uint8_t)cls;
  } else {
    void *p = large_alloc(need, a > OS_PAGE ? a : OS_PAGE, false);
    if (!p) return false;
    c->base = (uintptr_t)p;
    c->size = large_size(pagemap_get((uintptr_t)p));
    c->source = SRC_LARGE;
  }
  *user = c->base + front;
  return true;
}
