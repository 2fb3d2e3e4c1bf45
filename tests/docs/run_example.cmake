# Runs EXE in DIR (the repository root, where the example's relative paths lead) and checks
# that it exits 0 and that its stdout matches EXPECT_REGEX (stderr holds the library's log).
execute_process(COMMAND ${EXE} WORKING_DIRECTORY ${DIR} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "exit code ${rc}, expected 0\nstdout:\n${out}\nstderr:\n${err}")
endif()
if(NOT "${out}" MATCHES "${EXPECT_REGEX}")
  message(FATAL_ERROR "stdout does not match '${EXPECT_REGEX}'\nstdout:\n${out}\nstderr:\n${err}")
endif()
message(STATUS "${out}")
