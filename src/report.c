/*
 * report: error messages that never allocate.
 *
 * Theory
 *   1. A report may be made from inside free() on a heap that is already corrupt, so nothing
 *      here allocates or takes an allocator lock: text is built in a stack buffer and written
 *      with write(2) to stderr.
 *   2. The stack comes from libgcc's unwinder (_Unwind_Backtrace reads .eh_frame, which every
 *      x86-64 object has, so frame pointers are not needed). Leading frames inside magpie's own
 *      shared object are skipped, so the first frame shown is the caller's.
 *   3. Each frame is symbolised from the ELF symbol table of its object file, mapped read-only
 *      (static functions have names there; dladdr only knows exported ones), falling back to
 *      dladdr, then to object+offset.
 */
#define _GNU_SOURCE
#include "report.h"
#include "os.h"

#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <unwind.h>

#define REPORT_FRAMES_MAX 24 /* deeper stacks rarely help find the culprit */

typedef struct rbuf {
  char text[4096];
  size_t len;
} rbuf_t;

static void rb_str(rbuf_t *b, const char *s) {
  while (*s && b->len < sizeof b->text - 1)
    b->text[b->len++] = *s++;
}

static void rb_hex(rbuf_t *b, uintptr_t v) {
  char tmp[20];
  int n = 0;
  do
    tmp[n++] = "0123456789abcdef"[v & 15];
  while ((v >>= 4) != 0);
  rb_str(b, "0x");
  while (n > 0 && b->len < sizeof b->text - 1)
    b->text[b->len++] = tmp[--n];
}

static void rb_dec(rbuf_t *b, size_t v) {
  char tmp[24];
  int n = 0;
  do
    tmp[n++] = (char)('0' + v % 10);
  while ((v /= 10) != 0);
  while (n > 0 && b->len < sizeof b->text - 1)
    b->text[b->len++] = tmp[--n];
}

static void rb_flush(rbuf_t *b) {
  os_write_all(2, b->text, b->len);
  b->len = 0;
}

typedef struct trace {
  uintptr_t ip[REPORT_FRAMES_MAX];
  int n;
} trace_t;

static _Unwind_Reason_Code trace_step(struct _Unwind_Context *ctx, void *arg) {
  trace_t *t = arg;
  if (t->n >= REPORT_FRAMES_MAX) return _URC_END_OF_STACK;
  uintptr_t ip = _Unwind_GetIP(ctx);
  if (ip == 0) return _URC_END_OF_STACK;
  t->ip[t->n++] = ip;
  return _URC_NO_REASON;
}

/* Finds the function containing ip in an object's ELF .symtab (or .dynsym); NULL if none. */
static const char *elf_symbol(const char *path, uintptr_t bias, uintptr_t ip, uintptr_t *off,
                              void **map, size_t *map_size) {
  *map = os_map_file(path, map_size);
  if (!*map || *map_size < sizeof(Elf64_Ehdr)) return NULL;
  const Elf64_Ehdr *eh = *map;
  if (memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0 || eh->e_shoff == 0 ||
      eh->e_shoff + (size_t)eh->e_shnum * sizeof(Elf64_Shdr) > *map_size)
    return NULL;
  const Elf64_Shdr *sh = (const Elf64_Shdr *)((const char *)*map + eh->e_shoff);
  const char *best = NULL;
  uintptr_t best_addr = 0, target = ip - bias;
  for (int pass = 0; pass < 2 && !best; pass++) {
    uint32_t want = pass == 0 ? SHT_SYMTAB : SHT_DYNSYM;
    for (unsigned i = 0; i < eh->e_shnum; i++) {
      if (sh[i].sh_type != want || sh[i].sh_link >= eh->e_shnum) continue;
      const Elf64_Shdr *strs = &sh[sh[i].sh_link];
      if (sh[i].sh_offset + sh[i].sh_size > *map_size ||
          strs->sh_offset + strs->sh_size > *map_size)
        continue;
      const Elf64_Sym *sym = (const Elf64_Sym *)((const char *)*map + sh[i].sh_offset);
      size_t count = sh[i].sh_size / sizeof *sym;
      for (size_t k = 0; k < count; k++) {
        if (ELF64_ST_TYPE(sym[k].st_info) != STT_FUNC || sym[k].st_value == 0) continue;
        uintptr_t lo = sym[k].st_value, hi = lo + (sym[k].st_size ? sym[k].st_size : 1);
        if (target >= lo && target < hi && lo >= best_addr && sym[k].st_name < strs->sh_size) {
          best = (const char *)*map + strs->sh_offset + sym[k].st_name;
          best_addr = lo;
        }
      }
    }
  }
  *off = target - best_addr;
  return best;
}

static void report_frame(rbuf_t *b, int index, uintptr_t ip) {
  Dl_info info;
  struct link_map *lm = NULL;
  rb_str(b, "    #");
  rb_dec(b, (size_t)index);
  rb_str(b, " ");
  rb_hex(b, ip);
  if (!dladdr1((void *)(ip - 1), &info, (void **)&lm, RTLD_DL_LINKMAP) || !lm) {
    rb_str(b, "\n");
    return;
  }
  const char *path = info.dli_fname && info.dli_fname[0] ? info.dli_fname : "/proc/self/exe";
  void *map;
  size_t map_size = 0;
  uintptr_t off = 0;
  const char *name = elf_symbol(path, lm->l_addr, ip - 1, &off, &map, &map_size);
  if (!name && info.dli_sname) {
    name = info.dli_sname;
    off = ip - 1 - (uintptr_t)info.dli_saddr;
  }
  if (name) {
    rb_str(b, " in ");
    rb_str(b, name);
    rb_str(b, "+");
    rb_hex(b, off + 1);
  }
  rb_str(b, " (");
  rb_str(b, path);
  rb_str(b, ")\n");
  rb_flush(b);
  if (map) os_unmap_file(map, map_size);
}

static void report_stack(rbuf_t *b) {
  trace_t t = {.n = 0};
  _Unwind_Backtrace(trace_step, &t);
  Dl_info self, info, exe;
  int first = 0;
  /* Skip magpie's own frames only when magpie is a shared object apart from the program. */
  if (dladdr((void *)report_stack, &self) && dladdr((void *)getauxval(AT_PHDR), &exe) &&
      self.dli_fbase != exe.dli_fbase) {
    while (first < t.n && dladdr((void *)(t.ip[first] - 1), &info) &&
           info.dli_fbase == self.dli_fbase)
      first++;
  }
  if (first == t.n) first = 0; /* magpie linked statically: show everything */
  rb_str(b, "  stack of the call:\n");
  for (int i = first; i < t.n; i++)
    report_frame(b, i - first, t.ip[i]);
}

void report_heap_error(const char *kind, const void *addr, const char *detail) {
  rbuf_t b = {.len = 0};
  rb_str(&b, "magpie: ");
  rb_str(&b, kind);
  rb_str(&b, " of address ");
  rb_hex(&b, (uintptr_t)addr);
  if (detail) {
    rb_str(&b, ": ");
    rb_str(&b, detail);
  }
  rb_str(&b, "\n");
  report_stack(&b);
  rb_flush(&b);
  abort();
}

void report_fatal(const char *what, const void *addr, size_t value) {
  rbuf_t b = {.len = 0};
  rb_str(&b, "magpie: fatal: ");
  rb_str(&b, what);
  rb_str(&b, " (address ");
  rb_hex(&b, (uintptr_t)addr);
  rb_str(&b, ", value ");
  rb_dec(&b, value);
  rb_str(&b, ")\n");
  report_stack(&b);
  rb_flush(&b);
  abort();
}

void report_warning(const char *what, const char *name) {
  rbuf_t b = {.len = 0};
  rb_str(&b, "magpie: ");
  rb_str(&b, what);
  rb_str(&b, name);
  rb_str(&b, "\n");
  rb_flush(&b);
}
