/*
 * symbolize: the lines of a stack report, each return address as the function and object file
 * it lies in.
 *
 * Theory
 *   1. Symbolising runs inside an error report, on a heap that may be corrupt, so nothing here
 *      allocates: the object file is mapped read-only with mmap(2) (os_map_file) and its ELF
 *      section and symbol tables are read in place; names are demangled into a stack buffer.
 *   2. A frame's object comes from dladdr1 (its path and load bias), or in a fully static
 *      program, where dladdr knows nothing, from the program headers (dl_iterate_phdr); its
 *      function from the object's .symtab, which names static functions too (dladdr knows only
 *      exported ones), else .dynsym, else dladdr's name, else the line shows the object alone.
 *      The address looked up is ip - 1, inside the call instruction, so a call that ends a
 *      function is still attributed to it.
 *   3. Limits: 64-bit ELF only; no DWARF, so no file or line numbers; an object without symbol
 *      tables (stripped, no exports) shows its frames by object only. Consecutive frames of one
 * object share one mapping, unmapped when the stack is done.
 */
#define _GNU_SOURCE
#include "symbolize.h"
#include "demangle.h"
#include "os.h"

#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <string.h>

#define SYMBOLIZE_NAME_MAX 512 /* a longer demangled name is shown mangled */

static void symfile_close(symfile_t *f) {
  if (f->map) os_unmap_file(f->map, f->size);
  f->map = NULL;
  f->path[0] = '\0';
}

/* Finds the function containing ip in an object's ELF .symtab (or .dynsym); NULL if none. */
static const char *elf_symbol(symfile_t *f, const char *path, uintptr_t bias, uintptr_t ip,
                              uintptr_t *off) {
  if (strcmp(f->path, path) != 0 || !f->map) {
    symfile_close(f);
    size_t n = strlen(path);
    if (n >= sizeof f->path) return NULL;
    f->map = os_map_file(path, &f->size);
    if (!f->map) return NULL;
    memcpy(f->path, path, n + 1);
  }
  void *map = f->map;
  size_t map_size = f->size;
  if (map_size < sizeof(Elf64_Ehdr)) return NULL;
  const Elf64_Ehdr *eh = map;
  if (memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0 || eh->e_shoff == 0 ||
      eh->e_shoff + (size_t)eh->e_shnum * sizeof(Elf64_Shdr) > map_size)
    return NULL;
  const Elf64_Shdr *sh = (const Elf64_Shdr *)((const char *)map + eh->e_shoff);
  const char *best = NULL;
  uintptr_t best_addr = 0, target = ip - bias;
  for (int pass = 0; pass < 2 && !best; pass++) {
    uint32_t want = pass == 0 ? SHT_SYMTAB : SHT_DYNSYM;
    for (unsigned i = 0; i < eh->e_shnum; i++) {
      if (sh[i].sh_type != want || sh[i].sh_link >= eh->e_shnum) continue;
      const Elf64_Shdr *strs = &sh[sh[i].sh_link];
      if (sh[i].sh_offset + sh[i].sh_size > map_size || strs->sh_offset + strs->sh_size > map_size)
        continue;
      const Elf64_Sym *sym = (const Elf64_Sym *)((const char *)map + sh[i].sh_offset);
      size_t count = sh[i].sh_size / sizeof *sym;
      for (size_t k = 0; k < count; k++) {
        if (ELF64_ST_TYPE(sym[k].st_info) != STT_FUNC || sym[k].st_value == 0) continue;
        uintptr_t lo = sym[k].st_value, hi = lo + (sym[k].st_size ? sym[k].st_size : 1);
        if (target >= lo && target < hi && lo >= best_addr && sym[k].st_name < strs->sh_size) {
          best = (const char *)map + strs->sh_offset + sym[k].st_name;
          best_addr = lo;
        }
      }
    }
  }
  *off = target - best_addr;
  return best;
}

typedef struct object_query {
  uintptr_t addr;
  symbolize_object_t *found;
} object_query_t;

static int object_step(struct dl_phdr_info *info, size_t size, void *arg) {
  (void)size;
  object_query_t *q = arg;
  uintptr_t lo = UINTPTR_MAX, hi = 0;
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    if (ph->p_type != PT_LOAD) continue;
    uintptr_t a = info->dlpi_addr + ph->p_vaddr;
    if (a < lo) lo = a;
    if (a + ph->p_memsz > hi) hi = a + ph->p_memsz;
  }
  if (q->addr < lo || q->addr >= hi) return 0;
  *q->found = (symbolize_object_t){lo, hi, info->dlpi_addr, info->dlpi_name ? info->dlpi_name : ""};
  return 1;
}

bool symbolize_object_of(uintptr_t addr, symbolize_object_t *o) {
  object_query_t q = {addr, o};
  return dl_iterate_phdr(object_step, &q) != 0;
}

/* The object and function of return address ip: path (dladdr's, or /proc/self/exe) and the
   mangled name with ip's offset in it (NULL when no table names it); false when no object holds
   ip. */
static bool frame_lookup(symfile_t *f, uintptr_t ip, const char **path, const char **name,
                         uintptr_t *off, uintptr_t *bias) {
  Dl_info info = {0};
  struct link_map *lm = NULL;
  if (dladdr1((void *)(ip - 1), &info, (void **)&lm, RTLD_DL_LINKMAP) && lm) {
    *path = info.dli_fname && info.dli_fname[0] ? info.dli_fname : "/proc/self/exe";
    *bias = lm->l_addr;
  } else { /* a fully static program: no dynamic linker to ask */
    symbolize_object_t o;
    if (!symbolize_object_of(ip - 1, &o)) return false;
    *path = o.path[0] ? o.path : "/proc/self/exe";
    *bias = o.bias;
  }
  *off = 0;
  *name = elf_symbol(f, *path, *bias, ip - 1, off);
  if (!*name && info.dli_sname) {
    *name = info.dli_sname;
    *off = ip - 1 - (uintptr_t)info.dli_saddr;
  }
  return true;
}

static void report_frame(report_buf_t *b, symfile_t *f, int index, uintptr_t ip) {
  const char *path, *name;
  uintptr_t off, bias;
  report_str(b, "    #");
  report_dec(b, (size_t)index);
  report_str(b, " ");
  report_hex(b, ip);
  if (!frame_lookup(f, ip, &path, &name, &off, &bias)) {
    report_str(b, "\n");
    return;
  }
  if (name) {
    char plain[SYMBOLIZE_NAME_MAX];
    report_str(b, " in ");
    report_str(b, demangle_itanium(name, plain, sizeof plain) ? plain : name);
    report_str(b, "+");
    report_hex(b, off + 1);
  }
  report_str(b, " (");
  report_str(b, path);
  report_str(b, ")\n");
}

bool symbolize_ip(symfile_t *f, uintptr_t ip, char *name, size_t cap, const char **path) {
  const char *found;
  uintptr_t off, bias;
  *path = NULL;
  if (cap < REPORT_HEX_MAX + 4) return false;
  if (!frame_lookup(f, ip, path, &found, &off, &bias)) return false;
  if (found && demangle_itanium(found, name, cap)) return true;
  if (!found) { /* "[object+0xoffset]": the same in every run, wherever the object loads */
    const char *base = strrchr(*path, '/') ? strrchr(*path, '/') + 1 : *path;
    size_t n = strlen(base);
    if (n > cap - REPORT_HEX_MAX - 4) n = cap - REPORT_HEX_MAX - 4;
    name[0] = '[';
    memcpy(name + 1, base, n);
    name[n + 1] = '+';
    n += 2 + (size_t)report_format_hex(name + n + 2, ip - bias);
    name[n] = ']';
    name[n + 1] = '\0';
    return false;
  }
  size_t n = strlen(found);
  if (n >= cap) n = cap - 1;
  memcpy(name, found, n);
  name[n] = '\0';
  return true;
}

void symbolize_end(symfile_t *f) {
  symfile_close(f);
}

void report_frames(report_buf_t *b, const uintptr_t *ips, int n) {
  symfile_t f = {.map = NULL};
  f.path[0] = '\0';
  for (int i = 0; i < n; i++)
    report_frame(b, &f, i, ips[i]);
  symfile_close(&f);
  if (n == 0) report_str(b, "    (no frames)\n");
}
