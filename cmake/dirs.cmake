# Install locations, set before tools/ so that the command can be built knowing where the library
# goes. GNUInstallDirs names them; on Debian the library directory is the multiarch one
# (lib/x86_64-linux-gnu) whatever the prefix, as Debian's own CMake packages do: ld.so.conf and
# pkg-config search it under /usr/local too. Every installed path is relative to the prefix, so
# one build installs anywhere: `make install PREFIX=...`, and the .deb under /usr.
if(CMAKE_LIBRARY_ARCHITECTURE AND EXISTS /etc/debian_version)
  set(CMAKE_INSTALL_LIBDIR lib/${CMAKE_LIBRARY_ARCHITECTURE} CACHE PATH "object code libraries")
endif()
include(GNUInstallDirs)
foreach(dir BINDIR LIBDIR INCLUDEDIR MANDIR)
  if(IS_ABSOLUTE "${CMAKE_INSTALL_${dir}}")
    message(FATAL_ERROR "CMAKE_INSTALL_${dir} must be relative to the prefix (one build serves "
      "every prefix): ${CMAKE_INSTALL_${dir}}")
  endif()
endforeach()
# The installed command finds the library at this path relative to its own directory.
file(RELATIVE_PATH MAGPIE_LIBDIR_FROM_BINDIR /prefix/${CMAKE_INSTALL_BINDIR}
  /prefix/${CMAKE_INSTALL_LIBDIR})
