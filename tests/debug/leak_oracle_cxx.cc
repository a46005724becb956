// The C++ case of the LeakSanitizer oracle (leak_oracle.c says how it is used): an object made
// with new whose pointer is dropped holds a vector's buffer and a string's: the object is a
// direct leak, its two buffers indirect.
#include <cstdlib>
#include <string>
#include <vector>

#define NOINLINE __attribute__((noinline))

struct Widget {
  std::vector<long> values;
  std::string name;
};

NOINLINE void site_control() {
  char *volatile p = static_cast<char *>(std::malloc(77));
  p[0] = 1;
}

NOINLINE Widget *site_widget() {
  Widget *w = new Widget;
  w->values.assign(100, 7);
  w->name.assign(200, 'w');
  return w;
}

// The only pointer to the object dies with this frame.
NOINLINE void drop_widget() {
  Widget *volatile w = site_widget();
  (void)w;
}

int main() {
  drop_widget();
  site_control();
  std::exit(0);
}
