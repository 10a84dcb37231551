# cmake -P driver of the lint tests on sql/ (tests/CMakeLists.txt):
#
#   MODE=checksums  every migration file matches its line in sql/migrations/SHA256SUMS (the format
#                   of sha256sum): a released migration is never edited, only followed by a new one
#   MODE=fresh      include/durable/detail/sql_text.hpp, the committed copy of the embedded SQL, is
#                   what cmake/embed_sql.cmake makes of sql/ now
#   SOURCE_DIR      the source tree;  WORK_DIR  scratch directory (MODE=fresh)
cmake_minimum_required(VERSION 3.20)
set(sql "${SOURCE_DIR}/sql")
if(MODE STREQUAL "checksums")
  file(STRINGS "${sql}/migrations/SHA256SUMS" lines)
  set(pinned "")
  foreach(line IN LISTS lines)
    if(NOT line MATCHES "^([0-9a-f]+)  (.+)$")
      message(FATAL_ERROR "sql/migrations/SHA256SUMS: cannot read the line '${line}'")
    endif()
    set(sum_${CMAKE_MATCH_2} "${CMAKE_MATCH_1}")
    list(APPEND pinned "${CMAKE_MATCH_2}")
  endforeach()
  file(GLOB files RELATIVE "${sql}/migrations" "${sql}/migrations/*.sql")
  set(errors "")
  foreach(f IN LISTS files)
    file(SHA256 "${sql}/migrations/${f}" sum)
    if(NOT DEFINED sum_${f})
      string(APPEND errors "sql/migrations/${f} has no checksum in sql/migrations/SHA256SUMS; once "
                           "the migration is final, add it: (cd sql/migrations && sha256sum ${f} "
                           ">> SHA256SUMS)\n")
    elseif(NOT sum STREQUAL sum_${f})
      string(APPEND errors "sql/migrations/${f} was edited after its release (its SHA-256 is ${sum}, "
                           "SHA256SUMS pins ${sum_${f}}): databases have applied the released text "
                           "and will never run the new one; restore the file and add a new "
                           "migration that makes the change\n")
    endif()
    list(REMOVE_ITEM pinned "${f}")
  endforeach()
  foreach(f IN LISTS pinned)
    string(APPEND errors "sql/migrations/${f} is pinned in SHA256SUMS but missing: a released "
                         "migration is never removed\n")
  endforeach()
  if(errors)
    message(FATAL_ERROR "${errors}")
  endif()
  list(LENGTH files n)
  message(STATUS "${n} migrations match their pinned checksums")
elseif(MODE STREQUAL "fresh")
  set(generated "${WORK_DIR}/sql_text.hpp")
  execute_process(COMMAND "${CMAKE_COMMAND}" "-DSQL_DIR=${sql}" "-DOUTPUT=${generated}"
                          -DALWAYS_WRITE=ON -P "${SOURCE_DIR}/cmake/embed_sql.cmake"
                  RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "cmake/embed_sql.cmake failed")
  endif()
  file(READ "${generated}" want)
  file(READ "${SOURCE_DIR}/include/durable/detail/sql_text.hpp" have)
  if(NOT want STREQUAL have)
    message(FATAL_ERROR "include/durable/detail/sql_text.hpp is stale: sql/ changed since it was "
                        "copied. Run `cmake --build <build dir> --target durable_sql_sync` and "
                        "commit the header with the .sql files.")
  endif()
  message(STATUS "include/durable/detail/sql_text.hpp matches sql/")
else()
  message(FATAL_ERROR "check_sql.cmake: MODE is checksums or fresh")
endif()
