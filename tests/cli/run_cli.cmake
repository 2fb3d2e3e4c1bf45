# Runs the ndtcu CLI with ARGS (separated by |) in WORK and checks its exit code and that
# stdout+stderr match EXPECT_REGEX (and, when REJECT_REGEX is given, do not match it).
# Errors must be one line.
string(REPLACE "|" ";" ARGS "${ARGS}")
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})
execute_process(COMMAND ${EXE} ${ARGS} WORKING_DIRECTORY ${WORK}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL EXPECT_RC)
  message(FATAL_ERROR "exit code ${rc}, expected ${EXPECT_RC}\nstdout:\n${out}\nstderr:\n${err}")
endif()
if(NOT "${out}${err}" MATCHES "${EXPECT_REGEX}")
  message(FATAL_ERROR "output does not match '${EXPECT_REGEX}'\nstdout:\n${out}\nstderr:\n${err}")
endif()
if(DEFINED REJECT_REGEX AND "${out}${err}" MATCHES "${REJECT_REGEX}")
  message(FATAL_ERROR "output matches '${REJECT_REGEX}', which it must not\nstdout:\n${out}\nstderr:\n${err}")
endif()
if(EXPECT_RC EQUAL 1 AND NOT out STREQUAL "")
  message(FATAL_ERROR "an error must print nothing on stdout, got:\n${out}")
endif()
