// Bootstrap orders: a preloaded library's constructor (bootstrap_early.c) and this program's
// static constructors allocate before main; main checks and frees those blocks, dlopens a
// plugin whose blocks it frees, and checks that malloc is magpie's throughout. Run with
// libmagpie preloaded before and after the early library (tests/preload/CMakeLists.txt).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <map>
#include <string>
#include <vector>

extern "C" char **early_blocks(int *count);

namespace {

struct Registry { // a static constructor that allocates (C++ containers, strings)
  std::map<std::string, std::vector<int>> entries;
  Registry() {
    for (int i = 0; i < 500; i++) entries["key" + std::to_string(i)] = std::vector<int>(i % 17, i);
  }
};
Registry registry;

int failures;

void check(bool ok, const char *what) {
  if (!ok) {
    std::fprintf(stderr, "bootstrap: FAILED: %s\n", what);
    failures++;
  }
}

const char *object_of(void *addr) {
  Dl_info info;
  return addr && dladdr(addr, &info) && info.dli_fname ? info.dli_fname : "";
}

} // namespace

int main(int argc, char **argv) {
  check(argc == 2, "usage: bootstrap_main PLUGIN.so");
  if (argc != 2) return 2;
  void *magpie = dlsym(RTLD_DEFAULT, "magpie_malloc");
  check(magpie != nullptr, "magpie is loaded");
  check(std::strcmp(object_of(magpie), object_of(dlsym(RTLD_DEFAULT, "malloc"))) == 0,
        "malloc is magpie's");

  int count = 0;
  char **blocks = early_blocks(&count);
  for (int i = 0; i < count; i++) {
    size_t size = 8 + static_cast<size_t>(i) * 1500;
    check(blocks[i] != nullptr, "the early constructor's block exists");
    if (!blocks[i]) continue;
    bool intact = true;
    for (size_t k = 0; k < size; k++) intact &= blocks[i][k] == 'a' + i % 26;
    check(intact, "the early constructor's block is intact");
    std::free(blocks[i]);
  }
  check(registry.entries.size() == 500 && registry.entries["key499"].size() == 499 % 17,
        "the static constructor's containers are intact");
  registry.entries.clear();

  void *plugin = dlopen(argv[1], RTLD_NOW);
  check(plugin != nullptr, "dlopen of the plugin");
  if (plugin) {
    auto make = reinterpret_cast<char *(*)(size_t)>(dlsym(plugin, "plugin_make"));
    auto status = reinterpret_cast<const char *(*)()>(dlsym(plugin, "plugin_status"));
    check(make && status && std::strcmp(status(), "plugin ready") == 0, "plugin constructor ran");
    for (size_t n = 1; make && n < 200000; n = n * 3 + 1) {
      char *p = make(n);
      check(p && std::strlen(p) == n, "plugin block");
      std::free(p); // allocated in the plugin, freed here
    }
    dlclose(plugin);
  }
  auto verify = reinterpret_cast<int (*)()>(dlsym(RTLD_DEFAULT, "magpie_verify"));
  check(verify && verify() == 0, "magpie_verify finds the heap consistent");
  std::printf("bootstrap: %s\n", failures ? "FAILED" : "ok");
  return failures ? 1 : 0;
}
