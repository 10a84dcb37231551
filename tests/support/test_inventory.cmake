# Checks that every Catch2 test case is run by ctest exactly once (the `test_inventory` test).
#
#   cmake -DCTEST=<ctest> -DBUILD_DIR=<build dir> -DSOURCE_DIR=<tests dir>
#         -DBINARIES=<name>=<executable>|<name>=<executable>... -P test_inventory.cmake
#
# It compares three lists: the TEST_CASE / TEMPLATE_TEST_CASE names in SOURCE_DIR/*.cpp, what each
# test binary reports with --list-test-names-only, and the ctest entries (`ctest --show-only`)
# whose command runs one of the binaries. It fails, naming the test case, when
#   * a name contains ';' (catch_discover_tests would split it into entries that run nothing),
#   * a test case does not have exactly one ctest entry,
#   * a ctest entry runs a binary without selecting one of its test cases, or without
#     `--warn NoTests` (so a filter that matches nothing would pass),
#   * a binary lists a test case that is not found in the sources (or vice versa).
#
# Names are kept in CMake lists, so ';', '[' and ']' in them are replaced by placeholders first.

cmake_minimum_required(VERSION 3.20)

foreach(var CTEST BUILD_DIR SOURCE_DIR BINARIES)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "test_inventory: -D${var}=... is required")
  endif()
endforeach()

set(problems 0)
macro(problem)
  string(CONCAT _msg ${ARGN})
  string(REPLACE "<semicolon>" ";" _msg "${_msg}")
  string(REPLACE "<lb>" "[" _msg "${_msg}")
  string(REPLACE "<rb>" "]" _msg "${_msg}")
  message("test_inventory: ${_msg}")
  math(EXPR problems "${problems} + 1")
endmacro()

function(escape out text)
  string(REPLACE ";" "<semicolon>" text "${text}")
  string(REPLACE "[" "<lb>" text "${text}")
  string(REPLACE "]" "<rb>" text "${text}")
  set(${out} "${text}" PARENT_SCOPE)
endfunction()

# A variable name for an arbitrary string.
function(key out text)
  string(MD5 hash "${text}")
  set(${out} "k_${hash}" PARENT_SCOPE)
endfunction()

# --- 1. Test case names in the sources ---------------------------------------------------------
set(declared_plain "")
set(declared_template "")
file(GLOB sources "${SOURCE_DIR}/*.cpp")
# UNBUILT: sources of executables this build leaves out (failover_tests without
# DURABLE_BUILD_CHAOS), separated by '|'; their cases are not looked for.
if(DEFINED UNBUILT AND NOT UNBUILT STREQUAL "")
  string(REPLACE "|" ";" _unbuilt "${UNBUILT}")
  foreach(_file IN LISTS _unbuilt)
    list(REMOVE_ITEM sources "${SOURCE_DIR}/${_file}")
    message("test_inventory: ${_file} is not built here (its executable is off), so its cases are not checked")
  endforeach()
endif()
foreach(source IN LISTS sources)
  file(READ "${source}" text)
  escape(text "${text}")
  string(REGEX MATCHALL "\n[ \t]*[A-Z_]*(TEST_CASE|SCENARIO)[A-Z_]*[ \t]*\\([^\n]*" invocations
         "${text}")
  foreach(invocation IN LISTS invocations)
    string(STRIP "${invocation}" invocation)
    if(invocation MATCHES "^(TEMPLATE_)?TEST_CASE[ \t]*\\([ \t]*\"(([^\"\\\\]|\\\\.)*)\"")
      set(name "${CMAKE_MATCH_2}")
      set(macro "${CMAKE_MATCH_1}TEST_CASE")
      if(name MATCHES "<semicolon>")
        problem("${source}: test case \"${name}\" contains '<semicolon>'<semicolon> use ',' or ':' instead")
      endif()
      if(macro STREQUAL "TEMPLATE_TEST_CASE")
        list(APPEND declared_template "${name}")
      else()
        list(APPEND declared_plain "${name}")
      endif()
    else()
      problem("${source}: cannot read the test case name in `${invocation}` (this check "
              "understands TEST_CASE and TEMPLATE_TEST_CASE with the name on the same line)")
    endif()
  endforeach()
endforeach()
list(LENGTH declared_plain n_plain)
list(LENGTH declared_template n_template)
if(n_plain EQUAL 0)
  problem("no TEST_CASE found in ${SOURCE_DIR}/*.cpp")
endif()

# --- 2. What each binary lists -----------------------------------------------------------------
string(REPLACE "|" ";" binaries "${BINARIES}")
set(binary_names "")
foreach(binary IN LISTS binaries)
  if(NOT binary MATCHES "^([^=]+)=(.+)$")
    message(FATAL_ERROR "test_inventory: bad BINARIES element '${binary}'")
  endif()
  set(bin "${CMAKE_MATCH_1}")
  set(exe_${bin} "${CMAKE_MATCH_2}")
  list(APPEND binary_names "${bin}")
  # Catch2 2.x exits with the number of test cases here, so the result code says nothing.
  execute_process(COMMAND "${exe_${bin}}" --list-test-names-only OUTPUT_VARIABLE out
                  RESULT_VARIABLE rc)
  if(NOT rc MATCHES "^[0-9]+$")
    message(FATAL_ERROR "test_inventory: ${exe_${bin}} --list-test-names-only failed: ${rc}")
  endif()
  escape(out "${out}")
  string(REPLACE "\r" "" out "${out}")
  string(REPLACE "\n" ";" out "${out}")
  set(listed_${bin} "")
  foreach(name IN LISTS out)
    if(NOT name STREQUAL "")
      list(APPEND listed_${bin} "${name}")
      key(k "${bin}: ${name}")
      set(${k}_entries 0)
    endif()
  endforeach()
endforeach()

# --- 3. The ctest entries ----------------------------------------------------------------------
execute_process(COMMAND "${CTEST}" --show-only=json-v1 WORKING_DIRECTORY "${BUILD_DIR}"
                OUTPUT_VARIABLE json RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "test_inventory: `ctest --show-only=json-v1` failed in ${BUILD_DIR}")
endif()
string(JSON n_tests LENGTH "${json}" tests)
math(EXPR last "${n_tests} - 1")
foreach(i RANGE 0 ${last})
  string(JSON entry GET "${json}" tests ${i} name)
  string(JSON command ERROR_VARIABLE no_command GET "${json}" tests ${i} command)
  if(no_command)
    continue()
  endif()
  string(JSON exe GET "${command}" 0)
  string(JSON n_args LENGTH "${command}")
  escape(entry "${entry}")
  foreach(bin IN LISTS binary_names)
    if(NOT exe STREQUAL exe_${bin})
      continue()
    endif()
    # The entry must carry `--warn NoTests`.
    set(warns OFF)
    math(EXPR last_arg "${n_args} - 2")
    if(last_arg GREATER_EQUAL 1)
      foreach(a RANGE 1 ${last_arg})
        math(EXPR b "${a} + 1")
        string(JSON arg GET "${command}" ${a})
        string(JSON next GET "${command}" ${b})
        if(arg STREQUAL "--warn" AND next STREQUAL "NoTests")
          set(warns ON)
        endif()
      endforeach()
    endif()
    if(NOT warns)
      problem("ctest entry \"${entry}\" runs ${bin} without `--warn NoTests`")
    endif()
    # The entry is named "<bin>:<test case>" (catch_discover_tests drops the space that
    # TEST_PREFIX ends with; accept it in case a later version keeps it).
    set(k "")
    string(LENGTH "${bin}:" prefix_length)
    string(SUBSTRING "${entry}" 0 ${prefix_length} prefix)
    if(prefix STREQUAL "${bin}:")
      string(SUBSTRING "${entry}" ${prefix_length} -1 rest)
      key(k "${bin}: ${rest}")
      if(NOT DEFINED ${k}_entries AND rest MATCHES "^ (.*)$")
        key(k "${bin}: ${CMAKE_MATCH_1}")
      endif()
    endif()
    if(k AND DEFINED ${k}_entries)
      math(EXPR ${k}_entries "${${k}_entries} + 1")
    else()
      problem("ctest entry \"${entry}\" runs ${bin} but names none of its test cases "
              "(a test case name split at '<semicolon>'?)")
    endif()
  endforeach()
endforeach()

# --- 4. Compare --------------------------------------------------------------------------------
# found_var := ON if some instance name in the list `names` belongs to a template in `templates`
# (Catch2 names a TEMPLATE_TEST_CASE instance "<template name> - <type>").
function(any_instance_of found_var names templates)
  set(found OFF)
  foreach(name IN LISTS names)
    foreach(template IN LISTS templates)
      string(FIND "${name}" "${template} - " at)
      if(at EQUAL 0)
        set(found ON)
      endif()
    endforeach()
  endforeach()
  set(${found_var} ${found} PARENT_SCOPE)
endfunction()

set(instances "")   # every name some binary lists
foreach(bin IN LISTS binary_names)
  foreach(name IN LISTS listed_${bin})
    list(APPEND instances "${name}")
    key(k "${bin}: ${name}")
    if(NOT ${k}_entries EQUAL 1)
      problem("test case \"${name}\" of ${bin} has ${${k}_entries} ctest entries, expected exactly one")
    endif()
    if(NOT name IN_LIST declared_plain)
      any_instance_of(found "${name}" "${declared_template}")
      if(NOT found)
        problem("${bin} lists test case \"${name}\", which is not a TEST_CASE in ${SOURCE_DIR}/*.cpp")
      endif()
    endif()
  endforeach()
endforeach()

foreach(name IN LISTS declared_plain)
  list(FIND instances "${name}" at)
  if(at EQUAL -1)
    problem("TEST_CASE \"${name}\" is not listed by any test binary, so ctest does not run it")
  endif()
endforeach()
foreach(template IN LISTS declared_template)
  any_instance_of(found "${instances}" "${template}")
  if(NOT found)
    problem("TEMPLATE_TEST_CASE \"${template}\" is not listed by any test binary")
  endif()
endforeach()

list(LENGTH instances n_instances)
if(problems GREATER 0)
  message(FATAL_ERROR "test_inventory: ${problems} problem(s)")
endif()
message("test_inventory: ${n_plain} TEST_CASEs and ${n_template} TEMPLATE_TEST_CASEs, "
        "${n_instances} test cases, each run by exactly one ctest entry with --warn NoTests")
