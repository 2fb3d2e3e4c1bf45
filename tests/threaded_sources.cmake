# Fails when a test file under DIR has a case that scripts/sanitize.sh's ThreadSanitizer
# run selects ([localization], [thread_pool] or [fault_injection]) but is missing from
# LISTED (tests/CMakeLists.txt's threaded_test_sources, '|'-separated): the
# thread-sanitized build compiles only the listed files, so such a case would never run
# under ThreadSanitizer.
cmake_minimum_required(VERSION 3.25)
string(REPLACE "|" ";" listed "${LISTED}")
file(GLOB_RECURSE sources RELATIVE "${DIR}" "${DIR}/*.cpp")
set(missing "")
foreach(source IN LISTS sources)
  file(STRINGS "${DIR}/${source}" tagged REGEX "\\[(localization|thread_pool|fault_injection)\\]")
  if(tagged AND NOT source IN_LIST listed)
    list(APPEND missing ${source})
  endif()
endforeach()
if(missing)
  list(JOIN missing ", " missing)
  message(FATAL_ERROR "test files with cases for the ThreadSanitizer run but not in tests/CMakeLists.txt's "
                      "threaded_test_sources: ${missing}")
endif()
list(LENGTH listed count)
message(STATUS "every test file with [localization], [thread_pool] or [fault_injection] cases is among the ${count} listed")
