// A C++ program built against an installed magpie through find_package(magpie) (consumer/
// CMakeLists.txt), once with magpie::magpie and once with magpie::magpie_static. It passes only
// if magpie serves its operator new: new resolves to the object that defines magpie_malloc,
// and magpie knows the blocks new returns.
#include "check.h"

#include <magpie.h>

#include <memory>
#include <string>
#include <vector>

int main(int argc, char **argv) {
  api_test_name = argc > 1 ? argv[1] : "install_probe_cxx";
  const char *own = api_object_of(reinterpret_cast<void *>(magpie_malloc));
  const char *where = api_object_of(dlsym(RTLD_DEFAULT, "_Znwm"));
  if (strcmp(where, own) != 0)
    NOTE("  operator new resolves to %s, magpie_malloc is in %s\n", where, own);
  REQUIRE(strcmp(where, own) == 0);
  std::unique_ptr<char[]> block(new char[opaque_size(1000)]);
  CHECK(magpie_usable_size(block.get()) >= 1000);
  std::vector<std::string> words(100, std::string(100, 'm'));
  CHECK(magpie_usable_size(words.data()) >= 100 * sizeof(std::string));
  CHECK(magpie_usable_size(words[99].data()) >= 100);
  fprintf(stderr, "%s: operator new and magpie_malloc in %s\n", api_test_name, own);
  return api_end();
}
