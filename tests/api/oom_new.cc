// C++ allocation under memory exhaustion, for oom.c: with no new-handler installed, a throwing
// operator new that finds no memory throws std::bad_alloc (the exception itself comes from the
// C++ runtime's emergency pool, so throwing needs no memory), and a nothrow one returns nullptr.
// Any other exception, or a throwing form that returns nullptr, is a failure that oom.c reports.
#include "oom_new.h"

#include <new>

extern "C" void *oom_new(std::size_t n, oom_new_form_t form, int *threw) {
  const std::align_val_t align{OOM_NEW_ALIGN};
  *threw = 0;
  try {
    switch (form) {
    case OOM_NEW:
      return ::operator new(n);
    case OOM_NEW_ARRAY:
      return ::operator new[](n);
    case OOM_NEW_ALIGNED:
      return ::operator new(n, align);
    case OOM_NEW_NOTHROW:
      return ::operator new(n, std::nothrow);
    case OOM_NEW_ARRAY_NOTHROW:
      return ::operator new[](n, std::nothrow);
    case OOM_NEW_ALIGNED_NOTHROW:
      return ::operator new(n, align, std::nothrow);
    case OOM_NEW_FORMS:
      break;
    }
  } catch (const std::bad_alloc &) {
    *threw = 1;
  }
  return nullptr;
}

extern "C" void oom_delete(void *p, oom_new_form_t form) {
  const std::align_val_t align{OOM_NEW_ALIGN};
  switch (form) {
  case OOM_NEW:
    ::operator delete(p);
    break;
  case OOM_NEW_ARRAY:
    ::operator delete[](p);
    break;
  case OOM_NEW_ALIGNED:
    ::operator delete(p, align);
    break;
  case OOM_NEW_NOTHROW:
    ::operator delete(p, std::nothrow);
    break;
  case OOM_NEW_ARRAY_NOTHROW:
    ::operator delete[](p, std::nothrow);
    break;
  case OOM_NEW_ALIGNED_NOTHROW:
    ::operator delete(p, align, std::nothrow);
    break;
  case OOM_NEW_FORMS:
    break;
  }
}

extern "C" int oom_new_throws(oom_new_form_t form) {
  return form == OOM_NEW || form == OOM_NEW_ARRAY || form == OOM_NEW_ALIGNED;
}

extern "C" const char *oom_new_name(oom_new_form_t form) {
  static const char *const names[OOM_NEW_FORMS] = {
      "operator new",         "operator new[]",         "aligned operator new",
      "nothrow operator new", "nothrow operator new[]", "nothrow aligned operator new"};
  return form < OOM_NEW_FORMS ? names[form] : "?";
}
