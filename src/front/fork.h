/* fork: fork handlers and the lock order. See fork.c. */
#ifndef MAGPIE_FORK_H
#define MAGPIE_FORK_H

void fork_handlers_register(void); /* once, from the library constructor */

#endif
