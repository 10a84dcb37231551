# cmake -P driver for package.cli_install: installs the `durable` program of an existing build
# (its install component durable_cli, with the determinism lint durable-lint) into a scratch
# prefix and runs both from there.
#
#   BUILD_DIR   the build tree    WORK_DIR   scratch prefix, wiped first
cmake_minimum_required(VERSION 3.20)
file(REMOVE_RECURSE "${WORK_DIR}")
execute_process(COMMAND "${CMAKE_COMMAND}" --install "${BUILD_DIR}" --prefix "${WORK_DIR}"
                        --component durable_cli
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "installing the durable program failed (${rc}):\n${out}")
endif()
set(program "${WORK_DIR}/bin/durable")
if(NOT EXISTS "${program}")
  message(FATAL_ERROR "the install put no program at ${program}:\n${out}")
endif()
execute_process(COMMAND "${program}" --help RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0 OR NOT out MATCHES "Subcommands:")
  message(FATAL_ERROR "${program} --help exited ${rc}:\n${out}\n${err}")
endif()
set(lint "${WORK_DIR}/bin/durable-lint")
execute_process(COMMAND "${lint}" --help RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0 OR NOT out MATCHES "durable-lint \\[-p BUILD_DIR\\]")
  message(FATAL_ERROR "${lint} --help exited ${rc}:\n${out}\n${err}")
endif()
message(STATUS "installed and ran ${program} and ${lint}")
