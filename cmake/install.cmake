# Install rules and the CMake package for find_package(durable). Included from the top-level
# CMakeLists.txt when DURABLE_INSTALL is ON.
#
#   <prefix>/include/durable.hpp, <prefix>/include/durable/... (durable/detail/sql_text.hpp generated)
#   <prefix>/<libdir>/libdurable.a                                (durable::compiled)
#   <prefix>/<libdir>/cmake/durable/durable-config.cmake          (+ -version, -targets, FindAsio)
include(CMakePackageConfigHelpers)

set(DURABLE_INSTALL_CMAKEDIR "${CMAKE_INSTALL_LIBDIR}/cmake/durable"
    CACHE STRING "Where to install durable's CMake package files (relative to the prefix)")
mark_as_advanced(DURABLE_INSTALL_CMAKEDIR)

install(DIRECTORY "${PROJECT_SOURCE_DIR}/include/"
        DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}"
        COMPONENT durable_development)
# The embedded SQL as this build generated it (it replaces the committed copy from include/).
install(FILES "${DURABLE_SQL_HEADER}"
        DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}/durable/detail"
        COMPONENT durable_development)

install(TARGETS durable durable_compiled durable_testing EXPORT durable-targets
        ARCHIVE DESTINATION "${CMAKE_INSTALL_LIBDIR}" COMPONENT durable_development)
install(EXPORT durable-targets
        NAMESPACE durable::
        FILE durable-targets.cmake
        DESTINATION "${DURABLE_INSTALL_CMAKEDIR}"
        COMPONENT durable_development)

configure_package_config_file(
  "${CMAKE_CURRENT_LIST_DIR}/durable-config.cmake.in"
  "${PROJECT_BINARY_DIR}/durable-config.cmake"
  INSTALL_DESTINATION "${DURABLE_INSTALL_CMAKEDIR}")
write_basic_package_version_file(
  "${PROJECT_BINARY_DIR}/durable-config-version.cmake"
  VERSION "${PROJECT_VERSION}"
  COMPATIBILITY SameMajorVersion)  # not ARCH_INDEPENDENT: durable::compiled is a library

install(FILES
          "${PROJECT_BINARY_DIR}/durable-config.cmake"
          "${PROJECT_BINARY_DIR}/durable-config-version.cmake"
          "${CMAKE_CURRENT_LIST_DIR}/FindAsio.cmake"
        DESTINATION "${DURABLE_INSTALL_CMAKEDIR}"
        COMPONENT durable_development)
