# Build options. Never force a build type: only default it.
if(NOT CMAKE_BUILD_TYPE AND NOT CMAKE_CONFIGURATION_TYPES)
  set(CMAKE_BUILD_TYPE Release CACHE STRING "Build type" FORCE)
endif()

set(CMAKE_CXX_STANDARD 17)
set(CMAKE_CXX_STANDARD_REQUIRED ON)
set(CMAKE_CXX_EXTENSIONS OFF)
set(CMAKE_POSITION_INDEPENDENT_CODE ON)

check_language(CUDA)
if(CMAKE_CUDA_COMPILER)
  set(_ndtcu_cuda_default ON)
else()
  set(_ndtcu_cuda_default OFF)
endif()
option(NDTCU_WITH_CUDA "Build the CUDA backend (needs nvcc)" ${_ndtcu_cuda_default})
option(NDTCU_WITH_PCL "Build PCL baselines into tests and benchmarks (libpcl-dev)" ON)
option(NDTCU_BUILD_TESTS "Build the tests" ${PROJECT_IS_TOP_LEVEL})
option(NDTCU_BUILD_FUZZERS "Build the libFuzzer targets with clang++ when it is present" ON)

if(NDTCU_WITH_CUDA)
  if(NOT CMAKE_CUDA_COMPILER)
    message(FATAL_ERROR "NDTCU_WITH_CUDA=ON but no CUDA compiler was found; "
                        "install the CUDA toolkit or configure with -DNDTCU_WITH_CUDA=OFF")
  endif()
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    # Hopper (H100/H200) is the target; override with -DCMAKE_CUDA_ARCHITECTURES=...
    set(CMAKE_CUDA_ARCHITECTURES 90)
  endif()
  set(CMAKE_CUDA_STANDARD 17)
  set(CMAKE_CUDA_STANDARD_REQUIRED ON)
  enable_language(CUDA)
  find_package(CUDAToolkit REQUIRED)
  message(STATUS "ndtcu: CUDA backend ON (nvcc ${CMAKE_CUDA_COMPILER_VERSION}, arch ${CMAKE_CUDA_ARCHITECTURES})")
else()
  message(STATUS "ndtcu: CUDA backend OFF")
endif()

# Shared with targets below: warnings for our own code only.
add_library(ndtcu_warnings INTERFACE)
target_compile_options(ndtcu_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wshadow -Wno-unused-parameter>)

# Sanitized builds for the tests: -DNDTCU_SANITIZE=address,undefined or thread (a list for
# -fsanitize=). Unlike everything above, this is set for the whole tree rather than per
# target: a sanitizer checks a program only when every object in it is instrumented and
# the link brings in its runtime, and a target missed here (one added later, a test helper)
# would hold uninstrumented code that reports nothing. Host code only: nvcc does not take
# -fsanitize, so configure these builds with -DNDTCU_WITH_CUDA=OFF.
set(NDTCU_SANITIZE "" CACHE STRING "Build everything with -fsanitize=<list>, e.g. address,undefined or thread")
set(NDTCU_SANITIZE_EXCLUDE "" CACHE STRING "Checks left out of NDTCU_SANITIZE (-fno-sanitize=<list>), e.g. null")
if(NDTCU_SANITIZE)
  if(NDTCU_WITH_CUDA)
    message(FATAL_ERROR "NDTCU_SANITIZE=${NDTCU_SANITIZE} needs -DNDTCU_WITH_CUDA=OFF (nvcc does not take -fsanitize)")
  endif()
  # Every report ends the program (-fno-sanitize-recover: UBSan otherwise prints and goes
  # on, and a test that passes would hide it); frame pointers and line tables (-g1) give
  # readable stacks. -O1 after the build type's -O3: GCC compiles the instrumented Eigen
  # code three to four times faster at -O1, and the sanitizers' own documentation
  # recommends it; -g1 rather than -g for the same reason (the variables' debug info is
  # what the reports do not need).
  set(_ndtcu_sanitize_flags -fsanitize=${NDTCU_SANITIZE} -fno-sanitize-recover=all -fno-omit-frame-pointer -O1 -g1)
  if(NDTCU_SANITIZE_EXCLUDE)
    list(APPEND _ndtcu_sanitize_flags -fno-sanitize=${NDTCU_SANITIZE_EXCLUDE})
  endif()
  add_compile_options("$<$<COMPILE_LANGUAGE:C,CXX>:${_ndtcu_sanitize_flags}>")
  add_link_options(-fsanitize=${NDTCU_SANITIZE})
  message(STATUS "ndtcu: sanitizers ${NDTCU_SANITIZE}")
endif()
