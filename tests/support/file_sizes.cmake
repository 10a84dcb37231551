# No library or tool file is over the line limit (cmake -DSOURCE_DIR=<repo> -P file_sizes.cmake):
# a file that grows past it is split by concern (docs/architecture.md shows the layout). Every
# file of include/ and src/ is counted; the offenders are listed with their line counts.
cmake_minimum_required(VERSION 3.20)

set(_limit 650)

# Generated, not written: the SQL of sql/ embedded by cmake/embed_sql.cmake. Its size is the
# size of the SQL, which is reviewed as .sql files.
set(_generated "include/durable/detail/sql_text.hpp")

set(_pending "")

file(GLOB_RECURSE _files "${SOURCE_DIR}/include/*" "${SOURCE_DIR}/src/*")
set(_over "")
foreach(_file IN LISTS _files)
  file(RELATIVE_PATH _rel "${SOURCE_DIR}" "${_file}")
  if(_rel IN_LIST _generated OR _rel IN_LIST _pending)
    continue()
  endif()
  # Newlines, as wc -l counts (file(STRINGS) would skip the empty lines).
  file(READ "${_file}" _text)
  string(REGEX MATCHALL "\n" _newlines "${_text}")
  list(LENGTH _newlines _n)
  if(_n GREATER _limit)
    set(_over "${_over}\n  ${_rel}: ${_n} lines")
  endif()
endforeach()

if(_over)
  message(FATAL_ERROR "files over ${_limit} lines (split them by concern):${_over}")
endif()
message(STATUS "no file of include/ or src/ is over ${_limit} lines")
