/* Symbol visibility and branch hints. The library is built with -fvisibility=hidden; the public
   API is marked with MAGPIE_EXPORT. */
#ifndef MAGPIE_EXPORT_H
#define MAGPIE_EXPORT_H
#define MAGPIE_EXPORT __attribute__((visibility("default")))
/* Internal data the fast path reads: hidden, so it is addressed directly, not through the GOT. */
#define MAGPIE_HIDDEN __attribute__((visibility("hidden")))
/* The expected outcome of a test on a fast path. */
#define MP_LIKELY(x) __builtin_expect(!!(x), 1)
/* A fast-path function, inlined into its callers whatever the optimiser thinks of its size: in
   C++ (cxx.cc) GCC otherwise leaves the magazine pop out of line, a call and its spills. */
#define MP_INLINE inline __attribute__((always_inline))
/* An entry point whose whole common case is the inline fast path (malloc, free, new, delete):
   it starts a cache line, so that its few dozen instructions span as few lines, and as few of
   the processor's decoded-instruction windows, as they can wherever the linker places it among
   the rest of the library, which then cannot move its cost (docs/decisions/entry-aligned.md). */
#define MP_ENTRY __attribute__((aligned(64)))
#endif
