/* init: bringing magpie up once, and fork. See init.c. */
#ifndef MAGPIE_INIT_H
#define MAGPIE_INIT_H

void magpie_init(void); /* idempotent, thread safe, allocates nothing from the heap */

#endif
