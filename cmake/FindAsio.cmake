# FindAsio: standalone (non-Boost) Asio, which Debian's libasio-dev ships without a CMake package.
#
# Result: the imported target Asio::Asio, and Asio_FOUND, Asio_INCLUDE_DIR, Asio_VERSION.
find_path(Asio_INCLUDE_DIR NAMES asio.hpp asio/version.hpp)
if(Asio_INCLUDE_DIR AND EXISTS "${Asio_INCLUDE_DIR}/asio/version.hpp")
  file(STRINGS "${Asio_INCLUDE_DIR}/asio/version.hpp" _asio_version_line REGEX "^#define ASIO_VERSION [0-9]+")
  string(REGEX REPLACE "^#define ASIO_VERSION ([0-9]+).*" "\\1" _asio_version "${_asio_version_line}")
  math(EXPR _asio_major "${_asio_version} / 100000")
  math(EXPR _asio_minor "${_asio_version} / 100 % 1000")
  math(EXPR _asio_patch "${_asio_version} % 100")
  set(Asio_VERSION "${_asio_major}.${_asio_minor}.${_asio_patch}")
endif()
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(Asio REQUIRED_VARS Asio_INCLUDE_DIR VERSION_VAR Asio_VERSION)
if(Asio_FOUND AND NOT TARGET Asio::Asio)
  find_package(Threads REQUIRED)
  add_library(Asio::Asio INTERFACE IMPORTED)
  set_target_properties(Asio::Asio PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${Asio_INCLUDE_DIR}")
  target_compile_definitions(Asio::Asio INTERFACE ASIO_STANDALONE ASIO_NO_DEPRECATED)
  target_link_libraries(Asio::Asio INTERFACE Threads::Threads)
  # Asio 1.22 turns co_await on for Clang only with the Coroutines TS (__cpp_coroutines), which
  # Clang 14 and later do not define in C++20 mode; their C++20 coroutines work, so say so. (Asio
  # only sets ASIO_HAS_CO_AWAIT itself when it is not defined yet.)
  target_compile_definitions(Asio::Asio INTERFACE
    $<$<AND:$<CXX_COMPILER_ID:Clang>,$<VERSION_GREATER_EQUAL:$<CXX_COMPILER_VERSION>,14>>:ASIO_HAS_CO_AWAIT=1>)
endif()
mark_as_advanced(Asio_INCLUDE_DIR)
