// C++ allocation functions: every replaceable form of operator new and operator delete (plain,
// array, nothrow, sized, std::align_val_t, and their combinations). Results are aligned
// (__STDCPP_DEFAULT_NEW_ALIGNMENT__, or the requested alignment) and usable; an impossible size
// throws std::bad_alloc from the throwing forms and returns nullptr from the nothrow forms, after
// calling the installed new-handler.
#include "check.h"

#include <malloc.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <new>

namespace {

constexpr std::size_t kDefaultAlign = __STDCPP_DEFAULT_NEW_ALIGNMENT__;
constexpr std::size_t kMaxAlign = 4096; // aligned forms tried up to this

const std::size_t kSizes[] = {1, 8, 16, 24, 100, 1000, 4096, 5000, 70000, 3 << 20};

// The alignment promised to a plain operator new of n bytes: the default alignment, or for
// smaller requests the largest power of two not above n (no object of n bytes needs more).
std::size_t promised_alignment(std::size_t n) {
  std::size_t a = 1;
  while (a * 2 <= n && a < kDefaultAlign)
    a *= 2;
  return a;
}

void use_block(void *p, std::size_t n, std::size_t align) {
  REQUIRE(p != nullptr);
  if (!is_aligned(p, align)) NOTE("  %p (size %zu) not aligned to %zu\n", p, n, align);
  CHECK(is_aligned(p, align));
  CHECK(malloc_usable_size(p) >= n);
  std::memset(p, 0x5a, n);
}

void test_plain_forms() {
  for (std::size_t n : kSizes) {
    std::size_t a = promised_alignment(n);
    void *p = ::operator new(opaque_size(n));
    use_block(p, n, a);
    ::operator delete(p);

    p = ::operator new(opaque_size(n));
    use_block(p, n, a);
    ::operator delete(p, n); // sized

    p = ::operator new[](opaque_size(n));
    use_block(p, n, a);
    ::operator delete[](p);

    p = ::operator new[](opaque_size(n));
    use_block(p, n, a);
    ::operator delete[](p, n); // sized

    p = ::operator new(opaque_size(n), std::nothrow);
    use_block(p, n, a);
    ::operator delete(p, std::nothrow);

    p = ::operator new[](opaque_size(n), std::nothrow);
    use_block(p, n, a);
    ::operator delete[](p, std::nothrow);
  }
  // Size 0: a unique, non-null pointer each time.
  void *z1 = ::operator new(opaque_size(0));
  void *z2 = ::operator new(opaque_size(0));
  CHECK(z1 != nullptr && z2 != nullptr && z1 != z2);
  ::operator delete(z1);
  ::operator delete (z2, std::size_t{0});
  void *z3 = ::operator new[](opaque_size(0));
  CHECK(z3 != nullptr);
  ::operator delete[](z3);
  // Deleting null is a no-op in every form.
  ::operator delete(nullptr);
  ::operator delete[](nullptr);
  ::operator delete(nullptr, std::align_val_t(64));
}

void test_aligned_forms() {
  for (std::size_t align = 1; align <= kMaxAlign; align *= 2) {
    std::align_val_t al{align};
    for (std::size_t n : kSizes) {
      void *p = ::operator new(opaque_size(n), al);
      use_block(p, n, align);
      ::operator delete(p, al);

      p = ::operator new(opaque_size(n), al);
      use_block(p, n, align);
      ::operator delete(p, n, al); // sized, aligned

      p = ::operator new[](opaque_size(n), al);
      use_block(p, n, align);
      ::operator delete[](p, al);

      p = ::operator new[](opaque_size(n), al);
      use_block(p, n, align);
      ::operator delete[](p, n, al);

      p = ::operator new(opaque_size(n), al, std::nothrow);
      use_block(p, n, align);
      ::operator delete(p, al, std::nothrow);

      p = ::operator new[](opaque_size(n), al, std::nothrow);
      use_block(p, n, align);
      ::operator delete[](p, al, std::nothrow);
    }
  }
}

// New-expressions pick the forms above by themselves.
struct alignas(256) Overaligned {
  unsigned char bytes[300];
};

struct Tracked {
  static int live;
  std::uint64_t value[5];
  Tracked() : value{1, 2, 3, 4, 5} { live++; }
  ~Tracked() { live--; }
};
int Tracked::live = 0;

void test_expressions() {
  for (int i = 0; i < 100; i++) {
    Overaligned *o = new Overaligned;
    CHECK(is_aligned(o, 256));
    std::memset(o->bytes, i, sizeof o->bytes);
    delete o;
    Overaligned *arr = new Overaligned[opaque_size(7)];
    CHECK(is_aligned(arr, 256));
    for (int k = 0; k < 7; k++)
      std::memset(arr[k].bytes, k, sizeof arr[k].bytes);
    delete[] arr;
    Tracked *t = new Tracked[opaque_size(33)];
    CHECK(Tracked::live == 33);
    CHECK(t[32].value[4] == 5);
    delete[] t;
    CHECK(Tracked::live == 0);
    int *v = new int[opaque_size(1000)]();
    bool zero = true;
    for (int k = 0; k < 1000; k++)
      zero = zero && v[k] == 0;
    CHECK(zero);
    delete[] v;
  }
}

// Impossible sizes: bad_alloc from the throwing forms, nullptr from the nothrow forms.
template <typename Fn> bool throws_bad_alloc(Fn fn) {
  try {
    void *p = fn();
    ::operator delete(opaque_ptr(p)); // not reached when it throws
    return false;
  } catch (const std::bad_alloc &) {
    return true;
  }
}

void test_failures() {
  const std::size_t huge[] = {SIZE_MAX, SIZE_MAX - 4096, static_cast<std::size_t>(PTRDIFF_MAX) + 1};
  for (std::size_t n : huge) {
    CHECK(throws_bad_alloc([n] { return ::operator new(opaque_size(n)); }));
    CHECK(throws_bad_alloc([n] { return ::operator new[](opaque_size(n)); }));
    CHECK(throws_bad_alloc([n] { return ::operator new(opaque_size(n), std::align_val_t(64)); }));
    CHECK(
        throws_bad_alloc([n] { return ::operator new[](opaque_size(n), std::align_val_t(4096)); }));
    CHECK(::operator new(opaque_size(n), std::nothrow) == nullptr);
    CHECK(::operator new[](opaque_size(n), std::nothrow) == nullptr);
    CHECK(::operator new(opaque_size(n), std::align_val_t(128), std::nothrow) == nullptr);
    CHECK(::operator new[](opaque_size(n), std::align_val_t(128), std::nothrow) == nullptr);
  }
  // A new-expression of an impossible array: bad_alloc (or its subclass bad_array_new_length).
  bool threw = false;
  try {
    std::size_t count = opaque_size(SIZE_MAX / 8);
    std::uint64_t *arr = new std::uint64_t[count];
    delete[] static_cast<std::uint64_t *>(opaque_ptr(arr));
  } catch (const std::bad_alloc &) {
    threw = true;
  }
  CHECK(threw);
}

int handler_calls = 0;

// Counts the call and uninstalls itself, so the allocation that called it fails for good.
void counting_handler() {
  handler_calls++;
  std::set_new_handler(nullptr);
}

void test_new_handler() {
  handler_calls = 0;
  std::set_new_handler(counting_handler);
  CHECK(throws_bad_alloc([] { return ::operator new(opaque_size(SIZE_MAX)); }));
  CHECK(handler_calls == 1);
  std::set_new_handler(nullptr); // in case the handler was not called
  CHECK(std::get_new_handler() == nullptr);

  handler_calls = 0;
  std::set_new_handler(counting_handler);
  CHECK(throws_bad_alloc([] { return ::operator new[](opaque_size(SIZE_MAX)); }));
  CHECK(handler_calls == 1);
  std::set_new_handler(nullptr); // in case the handler was not called

  handler_calls = 0;
  std::set_new_handler(counting_handler);
  CHECK(throws_bad_alloc(
      [] { return ::operator new(opaque_size(SIZE_MAX), std::align_val_t(256)); }));
  CHECK(handler_calls == 1);
  std::set_new_handler(nullptr); // in case the handler was not called

  // The nothrow forms call the handler too, then return nullptr.
  handler_calls = 0;
  std::set_new_handler(counting_handler);
  CHECK(::operator new(opaque_size(SIZE_MAX), std::nothrow) == nullptr);
  CHECK(handler_calls == 1);
  std::set_new_handler(nullptr); // in case the handler was not called

  handler_calls = 0;
  std::set_new_handler(counting_handler);
  CHECK(::operator new(opaque_size(SIZE_MAX), std::align_val_t(64), std::nothrow) == nullptr);
  CHECK(handler_calls == 1);
  std::set_new_handler(nullptr); // in case the handler was not called

  // Without a handler nothing is called and the allocation fails at once.
  std::set_new_handler(nullptr);
  handler_calls = 0;
  CHECK(throws_bad_alloc([] { return ::operator new(opaque_size(SIZE_MAX)); }));
  CHECK(handler_calls == 0);
}

// Sized delete of blocks of every size up to 40 KiB, many at once and in a shuffled order, so
// that magazines fill and empty, slabs are made and given back, and (under MAGPIE_OPTIONS
// sample=1 or profile_rate=16k, in the option matrix) some blocks are sampled: a block freed
// into the wrong place is handed out again while another holds it (the patterns below see it)
// or is refused by its slab (magpie aborts). magpie's sized delete takes the class from the size
// where it can trust it (src/front/fastpath.h): this is where it must be right.
void test_sized_churn() {
  constexpr int kLive = 4096;
  static unsigned char *live[kLive];
  static std::size_t live_size[kLive];
  std::uint64_t rng = 88172645463325252u;
  auto next = [&rng] {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
  };
  auto pattern = [](const unsigned char *p, std::size_t n) {
    return static_cast<unsigned char>((reinterpret_cast<std::uintptr_t>(p) >> 4) ^ n);
  };
  bool intact = true;
  for (int round = 0; round < 60 * kLive; round++) {
    int i = static_cast<int>(next() % kLive);
    if (unsigned char *p = live[i]) {
      std::size_t n = live_size[i];
      intact = intact && p[0] == pattern(p, n) && p[n - 1] == pattern(p, n) &&
               p[n / 2] == pattern(p, n);
      if (round % 2)
        ::operator delete(opaque_ptr(p), n);
      else
        ::operator delete[](opaque_ptr(p), n);
    }
    // sizes spread over the classes, a few past the one-load table (32 KiB) and page multiples
    std::uint64_t r = next();
    std::size_t n = r % 8 == 0 ? 4096 * (1 + (r >> 3) % 9) : 1 + (r >> 3) % (r % 3 ? 512 : 40000);
    unsigned char *p = static_cast<unsigned char *>(
        round % 2 ? ::operator new(opaque_size(n)) : ::operator new[](opaque_size(n)));
    std::memset(p, pattern(p, n), n);
    live[i] = p;
    live_size[i] = n;
  }
  CHECK(intact);
  for (int i = 0; i < kLive; i++)
    if (live[i]) ::operator delete(opaque_ptr(live[i]), live_size[i]);
}

// With magpie in use, the operators are magpie's own.
void test_resolution() {
  if (!api_magpie_loaded()) return;
  for (const char *name : api_cxx_operators) {
    bool ok = api_symbol_is_magpie(name);
    if (!ok) NOTE("  %s comes from %s\n", name, api_object_of(dlsym(RTLD_DEFAULT, name)));
    CHECK(ok);
  }
}

} // namespace

int main() {
  api_begin("cxx_new");
  test_plain_forms();
  test_aligned_forms();
  test_expressions();
  test_sized_churn();
  test_failures();
  test_new_handler();
  test_resolution();
  return api_end();
}
