# Thin wrapper over CMake: `make` builds build/libmagpie.so, build/libmagpie.a and build/magpie;
# `make test` runs every test through ctest; `make demo` runs a real workload under glibc and
# magpie side by side and prints the comparison. `make install` installs the library, header,
# command, man pages, magpie.pc and the CMake package under PREFIX (default /usr/local; DESTDIR
# is honoured), `make uninstall` removes what the last install put there, and `make deb` builds
# build/magpie_VERSION_ARCH.deb (install it with dpkg -i).
BUILD ?= build
PREFIX ?= /usr/local
JOBS ?= $(shell nproc)
# The build's own makes (under cmake --build) say nothing of the directories they enter.
MAKEFLAGS += --no-print-directory

FORMATTED = src/*/*.c src/*/*.h src/*/*.cc include/*.h tests/unit/*.c tests/unit/*.h

.PHONY: all build deps test demo bench install uninstall deb format format-check clean
all: build

# Each target installs only the tools it needs (scripts/deps.sh build|test|package|format);
# `make deps` installs them all.
build:
	@scripts/deps.sh build
	@test -f $(BUILD)/CMakeCache.txt || cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo
	cmake --build $(BUILD) -j $(JOBS)

deps:
	@scripts/deps.sh test
	@scripts/deps.sh format

# ctest prints no output of a skipped test: the reasons the tests gave ("SKIPPED: ...", e.g. a
# kernel without rseq or membarrier) are printed after its summary.
# A build configured before clang was installed left the fuzz target out, and one configured
# before glibc-source was installed left glibc's malloc tests out: configure it again.
test:
	@scripts/deps.sh test
	@! grep -qs '^MAGPIE_CLANG:FILEPATH=.*NOTFOUND' $(BUILD)/CMakeCache.txt || cmake $(BUILD) >/dev/null
	@! grep -qs '^MAGPIE_GLIBC_SOURCE:FILEPATH=.*NOTFOUND' $(BUILD)/CMakeCache.txt || cmake $(BUILD) >/dev/null
	@$(MAKE) build
	cd $(BUILD) && { ctest --output-on-failure -j $(JOBS); rc=$$?; \
	  grep -h '^SKIPPED: ' Testing/Temporary/LastTest.log; exit $$rc; }

demo: all
	python3 bench/run.py --demo

bench: all
	python3 bench/run.py --quick

# cmake --install writes the list of what it installed to $(BUILD)/install_manifest.txt, which
# uninstall reads (with the same DESTDIR, from the environment or the command line).
# Installing into the system itself (no DESTDIR, as root), ldconfig then updates ld.so's cache,
# so that programs linked with -lmagpie find libmagpie.so.1 under /usr/local too.
LDCONFIG = if [ -z "$(DESTDIR)" ] && [ "$$(id -u)" = 0 ]; then ldconfig; fi
install: all
	cmake --install $(BUILD) --prefix $(PREFIX)
	@$(LDCONFIG)

uninstall:
	cmake -DMANIFEST=$(CURDIR)/$(BUILD)/install_manifest.txt -P cmake/uninstall.cmake
	@$(LDCONFIG)

deb: all
	@scripts/deps.sh package
	cd $(BUILD) && cpack -G DEB
	@ls $(BUILD)/magpie_*.deb

format:
	@scripts/deps.sh format
	clang-format -i $(FORMATTED)

format-check:
	@scripts/deps.sh format
	clang-format --dry-run --Werror $(FORMATTED)

clean:
	rm -rf $(BUILD)
