/*
 * report: error messages that never allocate.
 *
 * Theory
 *   1. A report may be made from inside free() on a heap that is already corrupt, so nothing
 *      here allocates or takes an allocator lock: text is built in a buffer on the caller's
 *      stack and written with write(2) to stderr, or to the file debug mode's log=PATH names
 *      (opened at the first report, so a process that never errs leaves no file).
 *   2. The stack comes from libgcc's unwinder (_Unwind_Backtrace reads .eh_frame, which every
 *      x86-64 object has, so frame pointers are not needed). Leading frames inside magpie's own
 *      shared object are skipped, so the first frame shown is the caller's. report_capture
 *      keeps the addresses in an array (debug mode's audit trail) and report_frames prints
 *      them later: symbolising is the slow part, done only when a report is made.
 *   3. Each frame is symbolised from the ELF symbol table of its object file, mapped read-only
 *      (static functions have names there; dladdr only knows exported ones), falling back to
 *      dladdr, then to object+offset. Consecutive frames of one object share one mapping.
 *   4. C++ names are demangled here, by a small demangler that writes into a fixed buffer:
 *      the runtime's __cxa_demangle allocates from the heap being reported on. It knows the
 *      common Itanium forms (nested names, constructors, destructors, operators, templates
 *      with type arguments, builtin, class, pointer and reference parameters, substitutions);
 *      anything else prints as the mangled name, or as the demangled name without parameters.
 *   5. No locks: concurrent reports may interleave their lines; debug mode serialises its own.
 */
#define _GNU_SOURCE
#include "report.h"
#include "os.h"

#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <unwind.h>

#define REPORT_FRAMES_MAX 24 /* deeper stacks rarely help find the culprit */
#define REPORT_NAME_MAX 512  /* a demangled name longer than this is cut */

/* ---- output ---- */

enum { LOG_STDERR, LOG_PENDING, LOG_OPEN };
static char report_log_path[256];
static int report_log_state = LOG_STDERR; /* atomic */
static int report_log_fd = 2;
static int report_stderr_copy = -1; /* report_keep_stderr */
static uint64_t report_stderr_id[2];

void report_keep_stderr(void) {
  int fd = os_dup(2);
  if (fd >= 0 && os_file_id(fd, report_stderr_id))
    report_stderr_copy = fd;
  else if (fd >= 0)
    os_close(fd);
}

int report_stderr(void) {
  uint64_t id[2];
  int fd = report_stderr_copy;
  return fd >= 0 && os_file_id(fd, id) && id[0] == report_stderr_id[0] &&
                 id[1] == report_stderr_id[1]
             ? fd
             : 2;
}

void report_set_log(const char *path) {
  size_t n = strlen(path);
  if (n == 0 || n >= sizeof report_log_path) return;
  memcpy(report_log_path, path, n + 1);
  __atomic_store_n(&report_log_state, LOG_PENDING, __ATOMIC_RELEASE);
}

/* The descriptor reports go to; opens the log file on first use. */
static int report_out(void) {
  int state = __atomic_load_n(&report_log_state, __ATOMIC_ACQUIRE);
  if (state == LOG_OPEN) return report_log_fd;
  if (state == LOG_STDERR) return report_stderr();
  char path[sizeof report_log_path + REPORT_DEC_MAX];
  report_expand_pid(path, sizeof path, report_log_path);
  int fd = os_open_write(path);
  int expected = LOG_PENDING;
  if (fd >= 0) {
    report_log_fd = fd;
    if (!__atomic_compare_exchange_n(&report_log_state, &expected, LOG_OPEN, false,
                                     __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
      os_close(fd); /* another thread opened it first */
    }
  } else {
    __atomic_compare_exchange_n(&report_log_state, &expected, LOG_STDERR, false, __ATOMIC_ACQ_REL,
                                __ATOMIC_ACQUIRE);
  }
  return __atomic_load_n(&report_log_state, __ATOMIC_ACQUIRE) == LOG_OPEN ? report_log_fd
                                                                          : report_stderr();
}

void report_str(report_buf_t *b, const char *s) {
  while (*s) {
    if (b->len >= sizeof b->text - 1) report_flush(b);
    b->text[b->len++] = *s++;
  }
}

void report_hex(report_buf_t *b, uintptr_t v) {
  char tmp[24];
  int n = 0;
  do
    tmp[n++] = "0123456789abcdef"[v & 15];
  while ((v >>= 4) != 0);
  tmp[n++] = 'x';
  tmp[n++] = '0';
  char out[24];
  for (int i = 0; i < n; i++)
    out[i] = tmp[n - 1 - i];
  out[n] = '\0';
  report_str(b, out);
}

int report_format_dec(char out[REPORT_DEC_MAX], uint64_t v) {
  char tmp[REPORT_DEC_MAX];
  int n = 0;
  do
    tmp[n++] = (char)('0' + v % 10);
  while ((v /= 10) != 0);
  for (int i = 0; i < n; i++)
    out[i] = tmp[n - 1 - i];
  out[n] = '\0';
  return n;
}

void report_expand_pid(char *out, size_t cap, const char *pattern) {
  size_t len = 0;
  for (const char *s = pattern; *s && len + REPORT_DEC_MAX < cap; s++) {
    if (s[0] == '%' && s[1] == 'p') {
      len += (size_t)report_format_dec(out + len, (uint64_t)os_getpid());
      s++;
    } else {
      out[len++] = *s;
    }
  }
  out[len] = '\0';
}

void report_dec(report_buf_t *b, size_t v) {
  char out[REPORT_DEC_MAX];
  report_format_dec(out, v);
  report_str(b, out);
}

void report_flush(report_buf_t *b) {
  os_write_all(report_out(), b->text, b->len);
  b->len = 0;
}

/* ---- C++ demangling (Itanium ABI, common forms) ---- */

#define DM_SUBS 48
typedef struct demangler {
  const char *s; /* the rest of the mangled name */
  char *out;
  size_t cap, len;
  bool fail;
  char subtext[1024]; /* substitution candidates' texts, back to back */
  size_t sublen;
  struct {
    uint16_t at, len;
  } sub[DM_SUBS];
  int nsub;
  char last[128]; /* the last source name: constructors and destructors repeat it */
} demangler_t;

static void dm_put(demangler_t *d, const char *s, size_t n) {
  for (size_t i = 0; i < n; i++) {
    if (d->len + 1 >= d->cap) {
      d->fail = true;
      return;
    }
    d->out[d->len++] = s[i];
  }
  d->out[d->len] = '\0';
}

static void dm_puts(demangler_t *d, const char *s) {
  dm_put(d, s, strlen(s));
}

/* Remembers out[from, len) as the next substitution candidate. */
static void dm_add_sub(demangler_t *d, size_t from) {
  size_t n = d->len - from;
  if (d->nsub >= DM_SUBS || d->sublen + n > sizeof d->subtext) return;
  memcpy(d->subtext + d->sublen, d->out + from, n);
  d->sub[d->nsub].at = (uint16_t)d->sublen;
  d->sub[d->nsub].len = (uint16_t)n;
  d->sublen += n;
  d->nsub++;
}

static size_t dm_number(demangler_t *d) {
  size_t v = 0;
  if (*d->s < '0' || *d->s > '9') d->fail = true;
  while (*d->s >= '0' && *d->s <= '9' && v < 100000)
    v = v * 10 + (size_t)(*d->s++ - '0');
  return v;
}

static void dm_source_name(demangler_t *d) {
  size_t n = dm_number(d);
  if (d->fail || strnlen(d->s, n) < n) {
    d->fail = true;
    return;
  }
  if (n >= 10 && memcmp(d->s, "_GLOBAL__N", 10) == 0)
    dm_puts(d, "(anonymous namespace)");
  else
    dm_put(d, d->s, n);
  size_t keep = n < sizeof d->last - 1 ? n : sizeof d->last - 1;
  memcpy(d->last, d->s, keep);
  d->last[keep] = '\0';
  d->s += n;
}

static const char *const dm_operators[][2] = {
    {"nw", "new"}, {"na", "new[]"}, {"dl", "delete"}, {"da", "delete[]"}, {"pl", "+"},
    {"mi", "-"},   {"ml", "*"},     {"dv", "/"},      {"rm", "%"},        {"an", "&"},
    {"or", "|"},   {"eo", "^"},     {"aS", "="},      {"pL", "+="},       {"mI", "-="},
    {"mL", "*="},  {"dV", "/="},    {"eq", "=="},     {"ne", "!="},       {"lt", "<"},
    {"gt", ">"},   {"le", "<="},    {"ge", ">="},     {"nt", "!"},        {"aa", "&&"},
    {"oo", "||"},  {"pp", "++"},    {"mm", "--"},     {"cl", "()"},       {"ix", "[]"},
    {"pt", "->"},  {"ls", "<<"},    {"rs", ">>"},     {"co", "~"},        {"ss", "<=>"},
    {"lS", "<<="}, {"rS", ">>="},   {"aN", "&="},     {"oR", "|="},       {"eO", "^="},
    {"cm", ","},   {"ps", "+"},     {"ng", "-"},      {"ad", "&"},        {"de", "*"},
};

static void dm_type(demangler_t *d);

/* I <args> E: types and integer literals. */
static void dm_template_args(demangler_t *d) {
  char last[sizeof d->last]; /* a constructor after the arguments repeats the template's name */
  memcpy(last, d->last, sizeof last);
  d->s++; /* 'I' */
  dm_puts(d, "<");
  bool first = true;
  while (!d->fail && *d->s != 'E') {
    if (!*d->s) {
      d->fail = true;
      return;
    }
    if (!first) dm_puts(d, ", ");
    first = false;
    if (*d->s == 'L') { /* L <type> <value> E: print the value only */
      d->s++;
      if (d->s[0] == 'b' && (d->s[1] == '0' || d->s[1] == '1') && d->s[2] == 'E') {
        dm_puts(d, d->s[1] == '1' ? "true" : "false");
        d->s += 3;
        continue;
      }
      size_t mark = d->len;
      dm_type(d);
      d->len = mark;
      if (*d->s == 'n') {
        dm_puts(d, "-");
        d->s++;
      }
      const char *v = d->s;
      while (*d->s >= '0' && *d->s <= '9')
        d->s++;
      dm_put(d, v, (size_t)(d->s - v));
      if (*d->s++ != 'E') d->fail = true;
    } else {
      dm_type(d);
    }
  }
  if (d->fail) return;
  d->s++;
  memcpy(d->last, last, sizeof last);
  if (d->len > 0 && d->out[d->len - 1] == '>') dm_puts(d, " ");
  dm_puts(d, ">");
}

/* A name component: source name, constructor, destructor or operator. ctor_dtor: set if one. */
static void dm_unqualified(demangler_t *d, bool *ctor_dtor) {
  const char *s = d->s;
  if (*s >= '0' && *s <= '9') {
    dm_source_name(d);
  } else if (s[0] == 'C' && s[1] >= '1' && s[1] <= '5') {
    dm_puts(d, d->last);
    d->s += 2;
    *ctor_dtor = true;
  } else if (s[0] == 'D' && s[1] >= '0' && s[1] <= '5') {
    dm_puts(d, "~");
    dm_puts(d, d->last);
    d->s += 2;
    *ctor_dtor = true;
  } else if (s[0] == 'L') {
    d->s++;
    dm_source_name(d);
  } else if (s[0] == 'c' && s[1] == 'v') {
    dm_puts(d, "operator ");
    d->s += 2;
    dm_type(d);
    *ctor_dtor = true; /* a conversion has no return type in its encoding either */
  } else {
    for (size_t i = 0; i < sizeof dm_operators / sizeof dm_operators[0]; i++)
      if (s[0] == dm_operators[i][0][0] && s[1] == dm_operators[i][0][1]) {
        dm_puts(d, "operator");
        const char *op = dm_operators[i][1];
        if (op[0] >= 'a' && op[0] <= 'z') dm_puts(d, " ");
        dm_puts(d, op);
        d->s += 2;
        return;
      }
    d->fail = true;
  }
}

/* S_, S<seq>_, St, Sa, Sb, Ss, Si, So, Sd. Returns true when it was "St" (a prefix follows). */
static bool dm_substitution(demangler_t *d) {
  const char *s = d->s + 1;
  static const char *const abbrev[][3] = {
      {"a", "std::allocator", "allocator"},   {"b", "std::basic_string", "basic_string"},
      {"s", "std::string", "basic_string"},   {"i", "std::istream", "basic_istream"},
      {"o", "std::ostream", "basic_ostream"}, {"d", "std::iostream", "basic_iostream"},
  };
  if (*s == 't') {
    d->s += 2;
    dm_puts(d, "std::");
    return true;
  }
  for (size_t i = 0; i < sizeof abbrev / sizeof abbrev[0]; i++)
    if (*s == abbrev[i][0][0]) {
      dm_puts(d, abbrev[i][1]);
      strcpy(d->last, abbrev[i][2]);
      d->s += 2;
      return false;
    }
  size_t index = 0;
  if (*s != '_') {
    while ((*s >= '0' && *s <= '9') || (*s >= 'A' && *s <= 'Z')) {
      index = index * 36 + (size_t)(*s <= '9' ? *s - '0' : *s - 'A' + 10);
      s++;
    }
    index++;
  }
  if (*s != '_' || index >= (size_t)d->nsub) {
    d->fail = true;
    return false;
  }
  dm_put(d, d->subtext + d->sub[index].at, d->sub[index].len);
  d->s = s + 1;
  return false;
}

/* N [qualifiers] prefix... E. The prefixes are candidates; the whole name is left to callers. */
static void dm_nested(demangler_t *d, bool *is_const, bool *ctor_dtor, bool *template_end) {
  d->s++; /* 'N' */
  while (*d->s == 'r' || *d->s == 'V' || *d->s == 'K') {
    if (*d->s == 'K') *is_const = true;
    d->s++;
  }
  if (*d->s == 'R' || *d->s == 'O') d->s++;
  size_t start = d->len;
  bool first = true, reference = false;
  while (!d->fail && *d->s != 'E') {
    if (!*d->s) {
      d->fail = true;
      return;
    }
    if (!first) {
      if (!reference) dm_add_sub(d, start); /* the prefix so far */
      dm_puts(d, "::");
    }
    *template_end = false;
    reference = false;
    if (*d->s == 'S') {
      if (dm_substitution(d))
        dm_unqualified(d, ctor_dtor);
      else
        reference = true; /* already a candidate */
    } else if (*d->s == 'I') {
      if (d->len >= 2) d->len -= 2; /* the "::" belongs to no template argument list */
      dm_template_args(d);
      *template_end = true;
    } else {
      dm_unqualified(d, ctor_dtor);
    }
    first = false;
  }
  if (!d->fail) d->s++;
}

static void dm_type(demangler_t *d) {
  static const char *const builtin[26] = {
      ['v' - 'a'] = "void",        ['w' - 'a'] = "wchar_t",
      ['b' - 'a'] = "bool",        ['c' - 'a'] = "char",
      ['a' - 'a'] = "signed char", ['h' - 'a'] = "unsigned char",
      ['s' - 'a'] = "short",       ['t' - 'a'] = "unsigned short",
      ['i' - 'a'] = "int",         ['j' - 'a'] = "unsigned int",
      ['l' - 'a'] = "long",        ['m' - 'a'] = "unsigned long",
      ['x' - 'a'] = "long long",   ['y' - 'a'] = "unsigned long long",
      ['n' - 'a'] = "__int128",    ['o' - 'a'] = "unsigned __int128",
      ['f' - 'a'] = "float",       ['d' - 'a'] = "double",
      ['e' - 'a'] = "long double", ['g' - 'a'] = "__float128",
      ['z' - 'a'] = "...",
  };
  char c = *d->s;
  size_t start = d->len;
  if (d->fail) return;
  if (c >= 'a' && c <= 'z' && builtin[c - 'a']) {
    dm_puts(d, builtin[c - 'a']);
    d->s++;
  } else if (c == 'P' || c == 'R' || c == 'O') {
    d->s++;
    dm_type(d);
    dm_puts(d, c == 'P' ? "*" : c == 'R' ? "&" : "&&");
    dm_add_sub(d, start);
  } else if (c == 'K' || c == 'V') {
    d->s++;
    dm_type(d);
    dm_puts(d, c == 'K' ? " const" : " volatile");
    dm_add_sub(d, start);
  } else if (c == 'D' && (d->s[1] == 'n' || d->s[1] == 'i' || d->s[1] == 's' || d->s[1] == 'u')) {
    dm_puts(d, d->s[1] == 'n'   ? "decltype(nullptr)"
               : d->s[1] == 'i' ? "char32_t"
               : d->s[1] == 's' ? "char16_t"
                                : "char8_t");
    d->s += 2;
  } else if (c == 'N') {
    bool is_const = false, ctor_dtor = false, template_end = false;
    dm_nested(d, &is_const, &ctor_dtor, &template_end);
    dm_add_sub(d, start);
  } else if ((c >= '0' && c <= '9') || c == 'S') {
    bool ctor_dtor = false, candidate = true;
    if (c != 'S')
      dm_source_name(d);
    else if (dm_substitution(d))
      dm_unqualified(d, &ctor_dtor); /* std::name is a new candidate */
    else
      candidate = false; /* a reference to an old one, or an abbreviation */
    if (candidate) dm_add_sub(d, start);
    if (*d->s == 'I') {
      dm_template_args(d);
      dm_add_sub(d, start);
    }
  } else {
    d->fail = true; /* function, array, member pointer, template parameter: not handled */
  }
}

bool report_demangle(const char *mangled, char *out, size_t cap) {
  static demangler_t zero;
  demangler_t d = zero;
  if (cap < 2 || mangled[0] != '_' || mangled[1] != 'Z') return false;
  d.s = mangled + 2;
  d.out = out;
  d.cap = cap;
  out[0] = '\0';
  bool is_const = false, ctor_dtor = false, template_end = false;
  char c = *d.s;
  if (c == 'N') {
    dm_nested(&d, &is_const, &ctor_dtor, &template_end);
  } else if (c == 'S' && d.s[1] == 't') {
    d.s += 2;
    dm_puts(&d, "std::");
    dm_unqualified(&d, &ctor_dtor);
  } else if (c == 'Z') {
    return false; /* local names */
  } else {
    dm_unqualified(&d, &ctor_dtor);
  }
  if (!d.fail && *d.s == 'I') { /* an unscoped template */
    dm_add_sub(&d, 0);
    dm_template_args(&d);
    template_end = true;
  }
  if (d.fail) return false;
  size_t name_end = d.len;
  if (*d.s && *d.s != '.') {
    if (template_end && !ctor_dtor) { /* the return type comes first: skip it */
      dm_type(&d);
      d.len = name_end;
    }
    dm_puts(&d, "(");
    if (d.s[0] == 'v' && (d.s[1] == '\0' || d.s[1] == '.')) {
      d.s++;
    } else {
      for (bool first = true; !d.fail && *d.s && *d.s != '.'; first = false) {
        if (!first) dm_puts(&d, ", ");
        dm_type(&d);
      }
    }
    dm_puts(&d, ")");
    if (is_const) dm_puts(&d, " const");
    if (d.fail) { /* the name is good; the parameters are not understood */
      d.fail = false;
      d.len = name_end;
      out[d.len] = '\0';
      while (*d.s && *d.s != '.')
        d.s++;
    }
  }
  if (*d.s == '.') {
    dm_puts(&d, " [clone ");
    dm_puts(&d, d.s);
    dm_puts(&d, "]");
  }
  return !d.fail;
}

/* ---- stacks ---- */

typedef struct trace {
  uintptr_t *ip;
  int n, max;
} trace_t;

static _Unwind_Reason_Code trace_step(struct _Unwind_Context *ctx, void *arg) {
  trace_t *t = arg;
  if (t->n >= t->max) return _URC_END_OF_STACK;
  uintptr_t ip = _Unwind_GetIP(ctx);
  if (ip == 0) return _URC_END_OF_STACK;
  t->ip[t->n++] = ip;
  return _URC_NO_REASON;
}

/* magpie's own address range, when magpie is a shared object apart from the program. */
static uintptr_t self_lo, self_hi;
static int self_known; /* atomic: 0 not yet looked up, 1 known */

static int self_range_step(struct dl_phdr_info *info, size_t size, void *arg) {
  (void)size;
  uintptr_t target = (uintptr_t)arg, lo = UINTPTR_MAX, hi = 0;
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    if (ph->p_type != PT_LOAD) continue;
    uintptr_t a = info->dlpi_addr + ph->p_vaddr;
    if (a < lo) lo = a;
    if (a + ph->p_memsz > hi) hi = a + ph->p_memsz;
  }
  if (target < lo || target >= hi) return 0;
  if (info->dlpi_name && info->dlpi_name[0]) { /* not the executable: skip these frames */
    self_lo = lo;
    self_hi = hi;
  }
  return 1;
}

static void self_range(void) {
  if (__atomic_load_n(&self_known, __ATOMIC_ACQUIRE)) return;
  dl_iterate_phdr(self_range_step, (void *)(uintptr_t)self_range);
  __atomic_store_n(&self_known, 1, __ATOMIC_RELEASE);
}

int report_capture(uintptr_t *ips, int max) {
  uintptr_t raw[REPORT_DEPTH_MAX + 16];
  if (max > REPORT_DEPTH_MAX) max = REPORT_DEPTH_MAX;
  trace_t t = {raw, 0, max + 16};
  self_range();
  _Unwind_Backtrace(trace_step, &t);
  int first = 0;
  while (first < t.n && raw[first] - 1 >= self_lo && raw[first] - 1 < self_hi)
    first++;
  if (first == t.n) first = 0; /* nothing outside magpie: show everything */
  int n = 0;
  for (int i = first; i < t.n && n < max; i++)
    ips[n++] = raw[i];
  return n;
}

/* The last object file mapped for symbolising, kept while consecutive frames share it. */
typedef struct symfile {
  char path[256];
  void *map;
  size_t size;
} symfile_t;

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

static void report_frame(report_buf_t *b, symfile_t *f, int index, uintptr_t ip) {
  Dl_info info;
  struct link_map *lm = NULL;
  report_str(b, "    #");
  report_dec(b, (size_t)index);
  report_str(b, " ");
  report_hex(b, ip);
  if (!dladdr1((void *)(ip - 1), &info, (void **)&lm, RTLD_DL_LINKMAP) || !lm) {
    report_str(b, "\n");
    return;
  }
  const char *path = info.dli_fname && info.dli_fname[0] ? info.dli_fname : "/proc/self/exe";
  uintptr_t off = 0;
  const char *name = elf_symbol(f, path, lm->l_addr, ip - 1, &off);
  if (!name && info.dli_sname) {
    name = info.dli_sname;
    off = ip - 1 - (uintptr_t)info.dli_saddr;
  }
  if (name) {
    char plain[REPORT_NAME_MAX];
    report_str(b, " in ");
    report_str(b, report_demangle(name, plain, sizeof plain) ? plain : name);
    report_str(b, "+");
    report_hex(b, off + 1);
  }
  report_str(b, " (");
  report_str(b, path);
  report_str(b, ")\n");
}

void report_frames(report_buf_t *b, const uintptr_t *ips, int n) {
  symfile_t f = {.map = NULL};
  f.path[0] = '\0';
  for (int i = 0; i < n; i++)
    report_frame(b, &f, i, ips[i]);
  symfile_close(&f);
  if (n == 0) report_str(b, "    (no frames)\n");
}

void report_current_stack(report_buf_t *b) {
  uintptr_t ips[REPORT_FRAMES_MAX];
  int n = report_capture(ips, REPORT_FRAMES_MAX);
  report_str(b, "  stack of the call:\n");
  report_frames(b, ips, n);
}

/* ---- the reports of normal mode ---- */

void report_heap_error(const char *kind, const void *addr, const char *detail) {
  report_buf_t b = {.len = 0};
  report_str(&b, "magpie: ");
  report_str(&b, kind);
  report_str(&b, " of address ");
  report_hex(&b, (uintptr_t)addr);
  if (detail) {
    report_str(&b, ": ");
    report_str(&b, detail);
  }
  report_str(&b, "\n");
  report_current_stack(&b);
  report_flush(&b);
  abort();
}

void report_fatal(const char *what, const void *addr, size_t value) {
  report_buf_t b = {.len = 0};
  report_str(&b, "magpie: fatal: ");
  report_str(&b, what);
  report_str(&b, " (address ");
  report_hex(&b, (uintptr_t)addr);
  report_str(&b, ", value ");
  report_dec(&b, value);
  report_str(&b, ")\n");
  report_current_stack(&b);
  report_flush(&b);
  abort();
}

void report_warning(const char *what, const char *name) {
  report_buf_t b = {.len = 0};
  report_str(&b, "magpie: ");
  report_str(&b, what);
  report_str(&b, name);
  report_str(&b, "\n");
  report_flush(&b);
}
