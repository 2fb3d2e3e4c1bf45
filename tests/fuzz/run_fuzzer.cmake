# Runs a libFuzzer binary for a fixed number of inputs from the committed seeds; an input
# that takes over 10 s counts as a hang and fails the test.
file(REMOVE_RECURSE ${SCRATCH})
file(MAKE_DIRECTORY ${SCRATCH})
execute_process(COMMAND ${FUZZER} ${SCRATCH} ${CORPUS} -runs=20000 -max_len=4096 -seed=1 -timeout=10
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "fuzzer failed (${rc}):\n${out}\n${err}")
endif()
string(REGEX MATCH "Done [0-9]+ runs" done "${err}")
message(STATUS "${FUZZER}: ${done}")
