// C++ deallocation errors for debug mode: sized delete with the wrong size, aligned and
// unaligned new/delete mixed, and new/free mixing. `misuse_cxx CASE` announces the address
// ("misuse: CASE ADDRESS"), then a culprit in a namespace (so its demangled name is checked).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>

struct Widget {
  int values[8];
};

struct alignas(64) Line {
  char bytes[64];
};

namespace victim {
struct Holder {
  __attribute__((noinline)) void drop_sized(Widget *w);
  __attribute__((noinline)) void drop_line(Line *l);
};

void Holder::drop_sized(Widget *w) {
  ::operator delete(w, sizeof(Widget) / 2); // the wrong size
}

void Holder::drop_line(Line *l) {
  ::operator delete(l); // new gave it with alignment 64: the aligned delete is required
}

__attribute__((noinline)) void drop_bytes_aligned(char *p) {
  ::operator delete[](p, std::align_val_t(64)); // it came from unaligned new[]
}

__attribute__((noinline)) void free_new_block(int *p) {
  std::free(p);
}
} // namespace victim

static void announce(const char *kind, const void *p) {
  std::printf("misuse: %s %p\n", kind, p);
  std::fflush(stdout);
}

int main(int argc, char **argv) {
  const char *c = argc > 1 ? argv[1] : "";
  victim::Holder h;
  if (!std::strcmp(c, "sized-delete")) {
    Widget *w = new Widget();
    announce(c, w);
    h.drop_sized(w);
  } else if (!std::strcmp(c, "aligned-new-plain-delete")) {
    Line *l = new Line();
    announce(c, l);
    h.drop_line(l);
  } else if (!std::strcmp(c, "plain-new-aligned-delete")) {
    char *p = new char[100];
    announce(c, p);
    victim::drop_bytes_aligned(p);
  } else if (!std::strcmp(c, "new-free")) {
    int *p = new int[4];
    announce(c, p);
    victim::free_new_block(p);
  } else {
    std::fprintf(stderr, "usage: %s CASE\n", argv[0]);
    return 2;
  }
  std::printf("not caught\n");
  return 0;
}
