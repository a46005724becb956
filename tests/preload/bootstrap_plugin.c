/* A library the program dlopens: its constructor allocates, and it hands blocks across. */
#include <stdlib.h>
#include <string.h>

static char *plugin_state;

__attribute__((constructor)) static void plugin_init(void) { plugin_state = strdup("plugin ready"); }

char *plugin_make(size_t n) {
  char *p = malloc(n + 1);
  if (p) {
    memset(p, 'p', n);
    p[n] = '\0';
  }
  return p;
}

const char *plugin_status(void) { return plugin_state; }
