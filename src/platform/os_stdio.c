/*
 * os_stdio: stdio's list lock, in fork's lock order.
 *
 * Theory
 *   1. glibc's fork takes stdio's list lock after the atfork prepare handlers have run, so
 *      magpie's fork handler takes it first (os_stdio_lock), where glibc will take it too: in a
 *      multithreaded process only.
 */
#define _GNU_SOURCE
#include "os.h"

extern char __libc_single_threaded __attribute__((weak)); /* glibc 2.32 and later */
void _IO_list_lock(void) __attribute__((weak));           /* glibc's stdio, exported since 2.2.5 */
void _IO_list_unlock(void) __attribute__((weak));

bool os_stdio_lock(void) {
  if (!_IO_list_lock || !_IO_list_unlock || !&__libc_single_threaded || __libc_single_threaded)
    return false; /* glibc's fork takes the list lock only in a multithreaded process */
  _IO_list_lock();
  return true;
}

void os_stdio_unlock(void) {
  _IO_list_unlock();
}
