# cmake -P driver for the package.* tests (see CMakeLists.txt next to this file).
#
#   MODE                   find_package | add_subdirectory
#   DURABLE_SOURCE_DIR     the durable source tree
#   DURABLE_VERSION        its version (the find_package consumer asks for it)
#   CONSUMER_SOURCE_DIR    the consumer project
#   WORK_DIR               scratch directory, wiped first
#   BUILD_DIR              find_package: the build tree whose install is checked (built already)
#   CONSUMER_GENERATOR, CONSUMER_CXX_COMPILER, CONSUMER_CXX_COMPILER_LAUNCHER   optional
cmake_minimum_required(VERSION 3.20)

foreach(var MODE DURABLE_SOURCE_DIR CONSUMER_SOURCE_DIR WORK_DIR)
  if(NOT DEFINED ${var} OR "${${var}}" STREQUAL "")
    message(FATAL_ERROR "run_consumer.cmake: -D${var}=... is required")
  endif()
endforeach()

function(run step)
  message(STATUS "[${MODE}] ${step}")
  execute_process(COMMAND ${ARGN}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    string(JOIN " " command ${ARGN})
    message(FATAL_ERROR "[${MODE}] ${step} failed (${rc}):\n  ${command}\n${out}")
  endif()
  set(last_output "${out}" PARENT_SCOPE)
endfunction()

set(common_args)
if(CONSUMER_GENERATOR)
  list(APPEND common_args -G "${CONSUMER_GENERATOR}")
endif()
if(CONSUMER_CXX_COMPILER)
  list(APPEND common_args "-DCMAKE_CXX_COMPILER=${CONSUMER_CXX_COMPILER}")
endif()
if(CONSUMER_CXX_COMPILER_LAUNCHER)
  list(APPEND common_args "-DCMAKE_CXX_COMPILER_LAUNCHER=${CONSUMER_CXX_COMPILER_LAUNCHER}")
endif()

file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")
set(consumer_build "${WORK_DIR}/consumer-build")

if(MODE STREQUAL "find_package")
  if(NOT BUILD_DIR)
    message(FATAL_ERROR "run_consumer.cmake: MODE=find_package needs -DBUILD_DIR=...")
  endif()
  set(prefix "${WORK_DIR}/prefix")
  # The install of the build this suite runs in (its libdurable.a is already compiled): what is
  # checked is what the install puts where and what the package defines, not the code again.
  run("install durable" "${CMAKE_COMMAND}" --install "${BUILD_DIR}" --prefix "${prefix}"
      --component durable_development)

  file(GLOB_RECURSE config "${prefix}/*/durable-config.cmake")
  if(NOT config)
    message(FATAL_ERROR "no durable-config.cmake under ${prefix}")
  endif()
  foreach(f durable.hpp durable/error.hpp)
    if(NOT EXISTS "${prefix}/include/${f}")
      message(FATAL_ERROR "${prefix}/include/${f} was not installed")
    endif()
  endforeach()

  # Only the fresh install may satisfy find_package(durable): no package registries, no system copy.
  run("configure consumer"
      "${CMAKE_COMMAND}" -S "${CONSUMER_SOURCE_DIR}" -B "${consumer_build}" ${common_args}
      "-DCMAKE_PREFIX_PATH=${prefix}" -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF
      -DCMAKE_FIND_USE_SYSTEM_PACKAGE_REGISTRY=OFF "-DDURABLE_REQUIRED_VERSION=${DURABLE_VERSION}")
  file(STRINGS "${consumer_build}/CMakeCache.txt" durable_dir REGEX "^durable_DIR:")
  string(REGEX REPLACE "^durable_DIR:[A-Z]+=" "" durable_dir "${durable_dir}")
  file(REAL_PATH "${prefix}" real_prefix)
  file(REAL_PATH "${durable_dir}" real_durable_dir)
  string(FIND "${real_durable_dir}" "${real_prefix}/" at)
  if(NOT at EQUAL 0)
    message(FATAL_ERROR "find_package(durable) used ${durable_dir}, not the install in ${prefix}")
  endif()
  # SameMajorVersion: asking for the next major version must fail.
  if(DURABLE_VERSION MATCHES "^([0-9]+)")
    math(EXPR next_major "${CMAKE_MATCH_1} + 1")
    execute_process(
      COMMAND "${CMAKE_COMMAND}" -S "${CONSUMER_SOURCE_DIR}" -B "${WORK_DIR}/wrong-version-build"
              ${common_args} "-DCMAKE_PREFIX_PATH=${prefix}" -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF
              -DCMAKE_FIND_USE_SYSTEM_PACKAGE_REGISTRY=OFF
              "-DDURABLE_REQUIRED_VERSION=${next_major}.0"
      RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
    if(rc EQUAL 0 OR NOT out MATCHES "compatible with requested version")
      message(FATAL_ERROR
              "find_package(durable ${next_major}.0) should reject version ${DURABLE_VERSION}:\n${out}")
    endif()
  endif()
elseif(MODE STREQUAL "add_subdirectory")
  run("configure consumer"
      "${CMAKE_COMMAND}" -S "${CONSUMER_SOURCE_DIR}" -B "${consumer_build}" ${common_args}
      "-DDURABLE_SOURCE_DIR=${DURABLE_SOURCE_DIR}")
else()
  message(FATAL_ERROR "unknown MODE '${MODE}'")
endif()

run("build consumer" "${CMAKE_COMMAND}" --build "${consumer_build}")
set(consumers consumer_compiled)
if(MODE STREQUAL "find_package")
  list(APPEND consumers consumer)
endif()
foreach(consumer IN LISTS consumers)
  run("run ${consumer}" "${consumer_build}/${consumer}")
  string(STRIP "${last_output}" last_output)
  message(STATUS "[${MODE}] ${consumer} printed: ${last_output}")
endforeach()
