# The layers, checked on the includes (cmake -DSOURCE_DIR=<repo> -P include_rules.cmake):
#   * the replay core (include/durable/detail/replay/) includes only itself, the config and
#     UTF-8 helpers and the public error and states headers: nothing of the runtime, the store,
#     durable/pg or Asio but asio/awaitable.hpp (the journal interface's operations are
#     awaitables; no I/O object, timer or executor);
#   * durable/pg/ includes only itself and durable/detail/config.hpp: it is a standalone
#     PostgreSQL layer;
#   * the tools (src/) include public headers only: nothing under durable/detail/ or impl/
#     (a bare name, "cli.hpp", is a header of the tool itself);
#   * the test kit includes neither the engine nor the runtime, so that a kit test compiles like
#     a unit test (docs/testing.md, "Compile cost"): no header that durable/testing.hpp reaches,
#     transitively, is the engine's.
# Every broken rule is listed with its file and line; the test fails if there is one.
cmake_minimum_required(VERSION 3.20)

set(_broken "")

# check(<glob root> <allowed-regex> <rule name>): every `#include "..."` of a file under the
# root must match the regex; `#include <...>` of the standard library and of third-party
# headers is checked separately by `forbid_system`.
function(check_quoted root allowed rule)
  file(GLOB_RECURSE _files "${SOURCE_DIR}/${root}/*.hpp" "${SOURCE_DIR}/${root}/*.ipp"
       "${SOURCE_DIR}/${root}/*.cpp")
  foreach(_file IN LISTS _files)
    file(STRINGS "${_file}" _lines REGEX "^[ \t]*#[ \t]*include[ \t]*\"")
    foreach(_line IN LISTS _lines)
      string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]*\"([^\"]+)\".*" "\\1" _inc "${_line}")
      if(NOT _inc MATCHES "${allowed}")
        file(RELATIVE_PATH _rel "${SOURCE_DIR}" "${_file}")
        set(_broken "${_broken}\n  ${_rel}: includes \"${_inc}\" (${rule})" PARENT_SCOPE)
        set(_broken "${_broken}\n  ${_rel}: includes \"${_inc}\" (${rule})")
      endif()
    endforeach()
  endforeach()
endfunction()

function(forbid_system root forbidden rule)
  file(GLOB_RECURSE _files "${SOURCE_DIR}/${root}/*.hpp" "${SOURCE_DIR}/${root}/*.ipp")
  foreach(_file IN LISTS _files)
    file(STRINGS "${_file}" _lines REGEX "^[ \t]*#[ \t]*include[ \t]*<")
    foreach(_line IN LISTS _lines)
      string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]*<([^>]+)>.*" "\\1" _inc "${_line}")
      if(_inc MATCHES "${forbidden}" AND NOT _inc STREQUAL "asio/awaitable.hpp")
        file(RELATIVE_PATH _rel "${SOURCE_DIR}" "${_file}")
        set(_broken "${_broken}\n  ${_rel}: includes <${_inc}> (${rule})" PARENT_SCOPE)
        set(_broken "${_broken}\n  ${_rel}: includes <${_inc}> (${rule})")
      endif()
    endforeach()
  endforeach()
endfunction()

check_quoted("include/durable/detail/replay"
  "^durable/(detail/replay/.*|detail/config\\.hpp|detail/utf8\\.hpp|error\\.hpp|states\\.hpp)$"
  "the replay core includes no runtime, store or pg header")
forbid_system("include/durable/detail/replay" "^(asio|libpq|postgresql|pg_)"
  "the replay core does no I/O")
check_quoted("include/durable/pg" "^durable/(pg/.*|detail/config\\.hpp)$"
  "durable/pg includes nothing outside itself and the config header")
check_quoted("src" "^(durable(\\.hpp|/[a-z_]+\\.hpp)|[a-z_]+\\.hpp)$"
  "the tools use public headers only")

# Every header durable/testing.hpp reaches, transitively: none may be the engine's.
set(_engine "^(durable\\.hpp|durable/(engine\\.hpp|impl/engine|detail/runtime/|detail/engine_state|detail/group_commit|detail/store/|store\\.hpp|console|metrics_server|workflow_handle))")
set(_todo "durable/testing.hpp")
set(_done "")
while(_todo)
  list(POP_FRONT _todo _header)
  list(APPEND _done "${_header}")
  set(_path "${SOURCE_DIR}/include/${_header}")
  if(NOT EXISTS "${_path}")
    continue()  # generated (durable/version.hpp)
  endif()
  file(STRINGS "${_path}" _lines REGEX "^[ \t]*#[ \t]*include[ \t]*\"")
  foreach(_line IN LISTS _lines)
    string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]*\"([^\"]+)\".*" "\\1" _inc "${_line}")
    if(_inc MATCHES "${_engine}")
      set(_broken "${_broken}\n  include/${_header}: includes \"${_inc}\" (reached from durable/testing.hpp: the test kit compiles without the engine)")
    elseif(NOT _inc IN_LIST _done AND NOT _inc IN_LIST _todo)
      list(APPEND _todo "${_inc}")
    endif()
  endforeach()
endwhile()
list(LENGTH _done _reached)
if(_reached LESS 20)
  set(_broken "${_broken}\n  durable/testing.hpp reaches only ${_reached} headers: the walk is broken")
endif()

if(_broken)
  message(FATAL_ERROR "include rules broken:${_broken}")
endif()
message(STATUS "include rules hold")
