/*
 * rseq: the restartable sequences of the per-CPU magazines (x86-64; elsewhere there are none
 * and magazines are per thread).
 *
 * A sequence reads the number of the CPU it runs on from the thread's rseq area, works on that
 * CPU's data and ends with a single store, its commit. If the thread is preempted, migrated or
 * signalled before the commit, the kernel resumes it at the sequence's abort handler, which
 * starts it again. So a sequence that commits ran from start to end on one CPU, and no other
 * thread ran there in between: per-CPU data needs no atomic instruction and no lock.
 *
 * glibc registers each thread's area (at __rseq_offset from the thread pointer); magpie uses it
 * and registers none. Each sequence has a descriptor in section __rseq_cs (version, flags, start,
 * length, abort address), stored in the area's rseq_cs field before the sequence starts; the
 * abort handler follows the 4-byte signature glibc registered, which the kernel checks.
 *
 * ThreadSanitizer cannot see the ordering the kernel gives (a block freed by one thread and
 * allocated by another on the same CPU looks like a race to it), so its builds have no sequences
 * and test the per-thread magazines.
 *
 * The sequences work on an array of per-CPU records (mag.h: mag_cpu_t, 4 KiB apart): `slot` is
 * the address of a class's pair (the loaded magazine's top, then the previous magazine) in CPU
 * 0's record. A loaded magazine's rounds lie between its two end marks (mag.c theory 8): a pop
 * or push reads the top and the word beside it, never the magazine's header.
 */
#ifndef MAGPIE_RSEQ_H
#define MAGPIE_RSEQ_H

#include <stddef.h>
#include <stdint.h>

#define RSEQ_SIGNATURE 0x53053053 /* glibc's RSEQ_SIG on x86; magpie's own area's too */

/* The kernel's struct rseq (its original 32 bytes), for an area registered by hand: cpu_id is
   -1 until the kernel registers it (os_fence.c theory 2). */
typedef struct rseq_area {
  uint32_t cpu_id_start;
  int32_t cpu_id;
  uint64_t rseq_cs;
  uint32_t flags;
  uint32_t pad[3];
} __attribute__((aligned(32))) rseq_area_t;

#if defined(__x86_64__) && !defined(__SANITIZE_THREAD__)
#define RSEQ_SUPPORTED 1

#define RSEQ_STR_(x) #x
#define RSEQ_STR(x) RSEQ_STR_(x)
#define RSEQ_SIG RSEQ_STR(RSEQ_SIGNATURE) /* for the sequences' abort handlers */
#define RSEQ_CPU_ID "4"                   /* offsetof(struct rseq, cpu_id) */
#define RSEQ_CS "8"                       /* offsetof(struct rseq, rseq_cs) */
#define RSEQ_CPU_SHIFT "12" /* per-CPU records are 4 KiB apart (mag_percpu.c checks) */

/* Label 3: the descriptor of the sequence from 1 to 2 aborting to 4; label 0: (re)start, which
   publishes the descriptor. The abort handler, out of line, restarts. */
#define RSEQ_BEGIN(tmp, area)                                                                      \
  ".pushsection __rseq_cs, \"aw\"\n\t"                                                             \
  ".balign 32\n"                                                                                   \
  "3:\t.long 0, 0\n\t"                                                                             \
  ".quad 1f, 2f - 1f, 4f\n\t"                                                                      \
  ".popsection\n"                                                                                  \
  "0:\tleaq 3b(%%rip), " tmp "\n\t"                                                                \
  "movq " tmp ", %%fs:" RSEQ_CS "(" area ")\n"                                                     \
  "1:\t"

#define RSEQ_END                                                                                   \
  "2:\n\t"                                                                                         \
  ".pushsection __rseq_failure, \"ax\"\n\t"                                                        \
  ".byte 0x0f, 0xb9, 0x3d\n\t" /* ud1: the signature is the operand of a trapping opcode */        \
  ".long " RSEQ_SIG "\n"                                                                           \
  "4:\tjmp 0b\n\t"                                                                                 \
  ".popsection\n"

/* One instruction a line: */
/* clang-format off */

/* Pops an object from the current CPU's loaded magazine of the class at `slot`, whose top the
   slot holds (mag.h: the word below the top is a round, or the magazine's lower end mark, odd).
   Returns the object popped, or NULL where the word is the end mark of an empty magazine, which
   pops nothing: the caller's test of the result is the sequence's own branch. Commit: the top,
   one round lower. */
static inline void *rseq_pop(char *slot, ptrdiff_t area) {
  void *word;
  __asm__ goto(
      RSEQ_BEGIN("%%rax", "%[area]")
      "movl %%fs:" RSEQ_CPU_ID "(%[area]), %%eax\n\t"
      "shlq $" RSEQ_CPU_SHIFT ", %%rax\n\t"
      "movq (%%rax, %[slot]), %%rcx\n\t" /* the top */
      "movq -8(%%rcx), %[word]\n\t"      /* the round below it, or the lower end mark */
      "testl $1, %k[word]\n\t"
      "jnz %l[empty]\n\t"
      "subq $8, %%rcx\n\t"
      "movq %%rcx, (%%rax, %[slot])\n"   /* commit: the top lowered */
      RSEQ_END
      : [word] "=&r"(word)
      : [area] "r"(area), [slot] "r"(slot)
      : "memory", "cc", "rax", "rcx"
      : empty);
  if (word == NULL) __builtin_unreachable(); /* a round is a block: the caller need not test */
  return word;
empty:
  return NULL;
}

/* Pushes obj onto the current CPU's loaded magazine of the class at `slot`; 0 if it is full
   (the word at the top is the upper end mark). Commit: the top, one round higher (the word at
   the top is free until then). */
static inline int rseq_push(char *slot, ptrdiff_t area, void *obj) {
  __asm__ goto(
      RSEQ_BEGIN("%%rax", "%[area]")
      "movl %%fs:" RSEQ_CPU_ID "(%[area]), %%eax\n\t"
      "shlq $" RSEQ_CPU_SHIFT ", %%rax\n\t"
      "movq (%%rax, %[slot]), %%rcx\n\t" /* the top */
      "testb $1, (%%rcx)\n\t"            /* the upper end mark */
      "jnz %l[full]\n\t"
      "movq %[obj], (%%rcx)\n\t"
      "addq $8, %%rcx\n\t"
      "movq %%rcx, (%%rax, %[slot])\n"   /* commit: the top raised */
      RSEQ_END
      :
      : [area] "r"(area), [slot] "r"(slot), [obj] "r"(obj)
      : "memory", "cc", "rax", "rcx"
      : full);
  return 1;
full:
  return 0;
}

/* Swaps the current CPU's loaded and previous magazines of the class at `slot` where the loaded
   one is empty (alloc: the word below its top is its end mark) or full (!alloc: the word at
   its top is), is no sentinel (whose marks name no magazine), and the previous one has rounds
   (room), while the CPU's lock, whose state word is at `lock` in CPU 0's record, is free;
   returns whether it did. The loaded magazine gets its count back (0, or its capacity) and the
   previous one's top is its count's round, both marked already (mag_percpu.c). Commit: the
   pair, (the previous one's top, the loaded magazine), in one 16-byte store. */
static inline int rseq_trade(char *slot, char *lock, ptrdiff_t area, int alloc) {
  uint32_t bound = alloc ? 0 : ~0u; /* & cap: the count at which a magazine cannot serve */
  ptrdiff_t end = alloc ? -8 : 0;   /* from the top: the word that is a mark once it cannot */
  __asm__ goto(
      RSEQ_BEGIN("%%rax", "%[area]")
      "movl %%fs:" RSEQ_CPU_ID "(%[area]), %%eax\n\t"
      "shlq $" RSEQ_CPU_SHIFT ", %%rax\n\t"
      "cmpl $0, (%%rax, %[lock])\n\t"     /* the lock is held: no trade */
      "jne %l[no]\n\t"
      "movq (%%rax, %[slot]), %%rcx\n\t"  /* the top */
      "movq (%%rcx, %[end]), %%rcx\n\t"   /* an end mark where the loaded one cannot serve */
      "btrq $0, %%rcx\n\t"
      "jnc %l[no]\n\t"
      "testq %%rcx, %%rcx\n\t"            /* the sentinel's marks name no magazine */
      "jz %l[no]\n\t"
      "movq 8(%%rax, %[slot]), %%rdx\n\t" /* prev */
      "movl 4(%%rdx), %%esi\n\t"
      "andl %k[bound], %%esi\n\t"
      "movl (%%rdx), %%edi\n\t"           /* prev's n */
      "cmpl %%esi, %%edi\n\t"             /* nor can prev */
      "je %l[no]\n\t"
      "movl 4(%%rcx), %%esi\n\t"
      "andl %k[bound], %%esi\n\t"
      "movl %%esi, (%%rcx)\n\t"           /* the loaded one's count */
      "leaq 24(%%rdx, %%rdi, 8), %%rdx\n\t" /* prev's top: &rounds[n] */
      "movq %%rdx, %%xmm0\n\t"
      "movq %%rcx, %%xmm1\n\t"
      "punpcklqdq %%xmm1, %%xmm0\n\t"     /* (prev's top, loaded) */
      "movdqa %%xmm0, (%%rax, %[slot])\n"  /* commit: the pair swapped */
      RSEQ_END
      :
      : [area] "r"(area), [slot] "r"(slot), [lock] "r"(lock), [bound] "r"(bound), [end] "r"(end)
      : "memory", "cc", "rax", "rcx", "rdx", "rsi", "rdi", "xmm0", "xmm1"
      : no);
  return 1;
no:
  return 0;
}

/* Stores v into *where if the thread runs on `cpu`, and what *where held into *old; returns
   whether it did. */
static inline int rseq_swap_on(unsigned cpu, void **where, void *v, void **old, ptrdiff_t area) {
  __asm__ goto(
      RSEQ_BEGIN("%%rax", "%[area]")
      "cmpl %%fs:" RSEQ_CPU_ID "(%[area]), %[cpu]\n\t"
      "jne %l[moved]\n\t"
      "movq (%[where]), %%rcx\n\t"
      "movq %%rcx, (%[old])\n\t"
      "movq %[v], (%[where])\n"           /* commit */
      RSEQ_END
      :
      : [area] "r"(area), [cpu] "r"(cpu), [where] "r"(where), [v] "r"(v), [old] "r"(old)
      : "memory", "cc", "rax", "rcx"
      : moved);
  return 1;
moved:
  return 0;
}

/* clang-format on */

/* The CPU the thread runs on (it may move at once); negative if its area is not registered. */
static inline int rseq_cpu(ptrdiff_t area) {
  return *(volatile int32_t *)((char *)__builtin_thread_pointer() + area + 4);
}

#else
#define RSEQ_SUPPORTED 0
#endif

#endif
