# What `make install` puts under the prefix (every path relative to it, cmake/dirs.cmake), and the
# Debian package built from the same rules by CPack (`make deb`):
#   bin/magpie, LIBDIR/libmagpie.so.1.x.y (+ .so.1, .so), LIBDIR/libmagpie.a, include/magpie.h,
#   include/magpie_stats.h (the live area's layout), LIBDIR/pkgconfig/magpie.pc,
#   LIBDIR/cmake/magpie/ (find_package(magpie): magpie::magpie, magpie::magpie_static), share/man/man1/magpie.1, share/man/man3/magpie.3.
# Each `cmake --install` lists what it wrote in the build directory's install_manifest.txt;
# `make uninstall` (cmake/uninstall.cmake) removes those files.
include(CMakePackageConfigHelpers)

# The static archive's users need the threads library; the shared library carries it itself.
target_link_libraries(magpie_static INTERFACE pthread)
foreach(lib magpie magpie_static)
  target_include_directories(${lib} INTERFACE $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
endforeach()

install(TARGETS magpie magpie_static EXPORT magpieTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(TARGETS magpie_cmd RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(FILES ${PROJECT_SOURCE_DIR}/include/magpie.h ${PROJECT_SOURCE_DIR}/include/magpie_stats.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})

# The CMake package: targets relative to the package's own directory, so it is relocatable.
set(MAGPIE_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/magpie)
install(EXPORT magpieTargets NAMESPACE magpie:: DESTINATION ${MAGPIE_CMAKE_DIR})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/magpieConfig.cmake.in
  ${PROJECT_BINARY_DIR}/magpieConfig.cmake INSTALL_DESTINATION ${MAGPIE_CMAKE_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/magpieConfigVersion.cmake
  COMPATIBILITY SameMajorVersion)
install(FILES ${PROJECT_BINARY_DIR}/magpieConfig.cmake ${PROJECT_BINARY_DIR}/magpieConfigVersion.cmake
  DESTINATION ${MAGPIE_CMAKE_DIR})

# magpie.pc names absolute directories, so it is written when installing, for the prefix of
# that install (cmake --install --prefix, or CPack's /usr), into a directory of the build tree
# named after that destination (concurrent installs to other prefixes leave it alone), then
# installed from there, DESTDIR and install_manifest.txt included.
install(CODE "
  set(MAGPIE_VERSION ${PROJECT_VERSION})
  set(MAGPIE_PREFIX \"\${CMAKE_INSTALL_PREFIX}\")
  set(MAGPIE_LIBDIR ${CMAKE_INSTALL_LIBDIR})
  set(MAGPIE_INCLUDEDIR ${CMAKE_INSTALL_INCLUDEDIR})
  string(MD5 destination \"\$ENV{DESTDIR}\${CMAKE_INSTALL_PREFIX}\")
  set(pc ${PROJECT_BINARY_DIR}/pkgconfig/\${destination}/magpie.pc)
  configure_file(${PROJECT_SOURCE_DIR}/cmake/magpie.pc.in \${pc} @ONLY)
  file(INSTALL DESTINATION \"\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_LIBDIR}/pkgconfig\"
    TYPE FILE FILES \${pc})")

# Man pages, generated at build time (scripts/gen-man.py) from docs/man/*.in and README.md's
# Options and Debug mode sections, so the options table cannot drift between them.
set(MAGPIE_MAN_PAGES ${PROJECT_BINARY_DIR}/man/magpie.1 ${PROJECT_BINARY_DIR}/man/magpie.3)
add_custom_command(OUTPUT ${MAGPIE_MAN_PAGES}
  COMMAND python3 ${PROJECT_SOURCE_DIR}/scripts/gen-man.py --version ${PROJECT_VERSION}
    --readme ${PROJECT_SOURCE_DIR}/README.md --out ${PROJECT_BINARY_DIR}/man
    ${PROJECT_SOURCE_DIR}/docs/man/magpie.1.in ${PROJECT_SOURCE_DIR}/docs/man/magpie.3.in
  DEPENDS ${PROJECT_SOURCE_DIR}/scripts/gen-man.py ${PROJECT_SOURCE_DIR}/README.md
    ${PROJECT_SOURCE_DIR}/docs/man/magpie.1.in ${PROJECT_SOURCE_DIR}/docs/man/magpie.3.in
  COMMENT "Generating the man pages")
add_custom_target(magpie_man ALL DEPENDS ${MAGPIE_MAN_PAGES})
install(FILES ${PROJECT_BINARY_DIR}/man/magpie.1 DESTINATION ${CMAKE_INSTALL_MANDIR}/man1)
install(FILES ${PROJECT_BINARY_DIR}/man/magpie.3 DESTINATION ${CMAKE_INSTALL_MANDIR}/man3)

# The Debian package (`make deb`): one package with everything above under /usr. Packaging runs
# the install rules only: the Makefile builds first (CPack would otherwise build every test too).
set(CMAKE_SKIP_INSTALL_ALL_DEPENDENCY ON)
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME magpie)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT "magpie maintainers <magpie@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "drop-in multithreaded memory allocator (kmem/libumem design)")
# The long description, under the summary; CPack indents each line.
set(CPACK_DEBIAN_PACKAGE_DESCRIPTION "magpie replaces malloc, free and the rest of the glibc allocation API, and C++
new/delete, by size-class object caches with per-thread and per-CPU magazines.
The package holds the shared and static library, the header, pkg-config and
CMake files, the magpie command (magpie run --stats -- PROGRAM) and man pages.")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT) # magpie_VERSION_ARCH.deb
set(CPACK_DEBIAN_PACKAGE_SECTION libs)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON) # Depends from dpkg-shlibdeps: libc6 (>= ...)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON) # shlibs (and ldconfig) for libmagpie.so.1
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS_POLICY ">=") # users depend on magpie (>= VERSION)
include(CPack)
