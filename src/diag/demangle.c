/*
 * demangle: Itanium C++ ABI names (_Z...) back into C++ for the frames of a stack report.
 *
 * Theory
 *   1. The runtime's __cxa_demangle allocates from the heap being reported on, which may be
 *      corrupt or locked, so this small demangler writes into the caller's fixed buffer and
 *      keeps its substitution table in a fixed array on the stack: nothing allocates.
 *   2. It knows the common forms: nested names, constructors, destructors, operators,
 *      conversions, templates with type and literal arguments, builtin, class, pointer,
 *      reference and cv-qualified parameters, substitutions and std:: abbreviations, clone
 *      suffixes. Function types, arrays, member pointers, template parameters and local names
 *      are not handled: the caller then prints the mangled name, or the name without its
 *      parameters when only those were not understood.
 *   3. One left-to-right pass: each component is appended to the output as it is read, and the
 *      text of each substitution candidate is copied aside when complete, so "S_"/"S0_" can
 *      repeat it.
 */
#include "demangle.h"

#include <stdint.h>
#include <string.h>

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

bool demangle_itanium(const char *mangled, char *out, size_t cap) {
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
