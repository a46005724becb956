// A C++ program linked with build/libmagpie.a (with -lpthread; g++ adds -lstdc++): operator new
// and delete come from the archive and are exported from the executable, so allocations made
// inside libstdc++.so (std::string's growth is compiled there) and in the program's own code
// both reach magpie. Checked: the replaceable operators the loader resolves are defined in the
// same object as magpie_malloc, and blocks allocated through them count in magpie's figures.
#include "check.h"

#include <magpie.h>
#include <malloc.h>

#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

constexpr std::size_t kBig = 1 * MiB;

std::size_t live_bytes() {
  return mallinfo2().uordblks;
}

} // namespace

int main() {
  api_test_name = "static_cxx";
  const char *own = api_object_of(reinterpret_cast<void *>(magpie_malloc));
  auto check_resolves_here = [own](const char *name) {
    const char *where = api_object_of(dlsym(RTLD_DEFAULT, name));
    if (std::strcmp(where, own) != 0) NOTE("  %s resolves to %s, not %s\n", name, where, own);
    REQUIRE(std::strcmp(where, own) == 0);
  };
  check_resolves_here("malloc");
  check_resolves_here("free");
  for (const char *name : api_cxx_operators)
    check_resolves_here(name);
  std::size_t before = live_bytes();
  auto *raw = new char[kBig];
  std::memset(raw, 1, kBig);
  CHECK(live_bytes() >= before + kBig);
  CHECK(magpie_usable_size(raw) >= kBig);
  delete[] raw;
  CHECK(live_bytes() < before + kBig);

  before = live_bytes();
  std::string grown;
  for (std::size_t i = 0; i < kBig; i++)
    grown.push_back(static_cast<char>('a' + i % 26));
  CHECK(live_bytes() >= before + kBig); // libstdc++'s _M_create called operator new
  CHECK(grown[kBig - 1] == static_cast<char>('a' + (kBig - 1) % 26));
  grown = std::string();
  grown.shrink_to_fit();

  std::vector<std::unique_ptr<std::vector<int>>> nested;
  for (int i = 0; i < 1000; i++)
    nested.push_back(std::make_unique<std::vector<int>>(i % 50, i));
  long sum = 0;
  for (auto &v : nested)
    sum += static_cast<long>(v->size());
  CHECK(sum == 1000L / 50 * (49 * 50 / 2));
  nested.clear();

  bool caught = false;
  try { // the exception object comes from __cxa_allocate_exception's malloc
    throw std::runtime_error(std::string(200, 'e'));
  } catch (const std::runtime_error &e) {
    caught = std::strlen(e.what()) == 200;
  }
  CHECK(caught);
  CHECK(magpie_verify() == 0);
  return api_end();
}
