/*
 * The C++ allocation forms that oom.c tries under memory exhaustion (oom_new.cc defines them).
 */
#ifndef MAGPIE_TESTS_API_OOM_NEW_H
#define MAGPIE_TESTS_API_OOM_NEW_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
  OOM_NEW,                 /* operator new(n) */
  OOM_NEW_ARRAY,           /* operator new[](n) */
  OOM_NEW_ALIGNED,         /* operator new(n, std::align_val_t(OOM_NEW_ALIGN)) */
  OOM_NEW_NOTHROW,         /* operator new(n, std::nothrow) */
  OOM_NEW_ARRAY_NOTHROW,   /* operator new[](n, std::nothrow) */
  OOM_NEW_ALIGNED_NOTHROW, /* operator new(n, std::align_val_t(OOM_NEW_ALIGN), std::nothrow) */
  OOM_NEW_FORMS
} oom_new_form_t;

#define OOM_NEW_ALIGN 256

/* Calls operator new of the given form; returns the block, or NULL with *threw set to 1 when it
   threw std::bad_alloc and to 0 when it returned nullptr. */
void *oom_new(size_t n, oom_new_form_t form, int *threw);
/* The operator delete that matches form. */
void oom_delete(void *p, oom_new_form_t form);
/* True for the forms that must throw rather than return nullptr. */
int oom_new_throws(oom_new_form_t form);
const char *oom_new_name(oom_new_form_t form);

#ifdef __cplusplus
}
#endif
#endif
