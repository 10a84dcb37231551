# cmake -P driver for package.without_cli11: configures the source tree as if CLI11 were not
# installed (CMAKE_DISABLE_FIND_PACKAGE_CLI11) and expects the configure to succeed, to say that
# the `durable` program is skipped and how to get it, and to leave the program out.
#
#   DURABLE_SOURCE_DIR  the source tree    WORK_DIR  scratch build dir, wiped first
#   CONSUMER_GENERATOR  the generator      CONSUMER_CXX_COMPILER  the compiler
cmake_minimum_required(VERSION 3.20)
file(REMOVE_RECURSE "${WORK_DIR}")
execute_process(
  COMMAND "${CMAKE_COMMAND}" -S "${DURABLE_SOURCE_DIR}" -B "${WORK_DIR}" -G "${CONSUMER_GENERATOR}"
          "-DCMAKE_CXX_COMPILER=${CONSUMER_CXX_COMPILER}" -DCMAKE_DISABLE_FIND_PACKAGE_CLI11=ON
          -DDURABLE_BUILD_TESTS=OFF -DDURABLE_BUILD_EXAMPLES=OFF -DDURABLE_INSTALL=ON
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "configuring without CLI11 failed (${rc}); it should skip the program:\n"
                      "${out}\n${err}")
endif()
if(NOT err MATCHES "CLI11 2.1 or newer was not found" OR NOT err MATCHES "libcli11-dev"
   OR NOT err MATCHES "DURABLE_BUILD_CLI=OFF")
  message(FATAL_ERROR "configuring without CLI11 did not say that the program is skipped, nor "
                      "how to get it:\n${out}\n${err}")
endif()
set(targets "")
foreach(build_file build.ninja Makefile)
  if(EXISTS "${WORK_DIR}/${build_file}")
    file(READ "${WORK_DIR}/${build_file}" targets)
  endif()
endforeach()
if(targets STREQUAL "" OR targets MATCHES "durable_cli")
  message(FATAL_ERROR "without CLI11 the build still has the durable_cli target (or no build "
                      "file was written in ${WORK_DIR})")
endif()
file(REMOVE_RECURSE "${WORK_DIR}")
message(STATUS "without CLI11: configured, the program skipped with a message")
