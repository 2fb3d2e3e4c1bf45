#!/usr/bin/env bash
# Builds the tests with sanitizers and runs them; scripts/test.sh runs this after the
# normal build. CUDA is off in these builds (nvcc does not take -fsanitize); the CUDA
# backend is tested by the normal build.
#
#   address  AddressSanitizer + UndefinedBehaviorSanitizer (leaks included): the unit and
#            data tests, less the [heavy] accuracy studies (tests/CMakeLists.txt), in
#            $NDTCU_BUILD_DIR-asan (build-asan)
#   thread   ThreadSanitizer: the localizer's tests (the scan prefetcher's reader threads,
#            the CPU backend's pool under it), the thread pool's, and the allocation
#            failure sweeps (exceptions thrown on the pool's workers), in build-tsan
#
#   scripts/sanitize.sh [address] [thread]     (no argument: both)
#
# Every report is fatal (halt_on_error, -fno-sanitize-recover) and fails the script: the
# process ends with exit code 86, which no test expects, and each report is also written
# under the build folder's sanitizer-reports/ and printed at the end, so one made by a
# child process whose exit code a test does not look at fails the run all the same.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
base=${NDTCU_BUILD_DIR:-$root/build}
jobs=${NDTCU_JOBS:-$(nproc)}
modes=("$@")
source "$root/scripts/ccache.sh"
((${#modes[@]})) || modes=(address thread)

# Configures $1 with -DNDTCU_SANITIZE=$2 (less the checks in $3) and builds those of the
# targets named after them that the configuration has.
build() {
  local dir=$1 sanitize=$2 exclude=$3
  shift 3
  mkdir -p "$dir"
  # The libFuzzer targets are sanitized builds of their own, made by the normal build.
  cmake -S "$root" -B "$dir" -DCMAKE_BUILD_TYPE=Release -DNDTCU_WITH_CUDA=OFF -DNDTCU_BUILD_FUZZERS=OFF \
    "${ccache_flags[@]}" -DNDTCU_SANITIZE="$sanitize" -DNDTCU_SANITIZE_EXCLUDE="$exclude" >"$dir/configure.log" 2>&1 || {
    cat "$dir/configure.log" >&2
    echo "sanitize.sh: configure of $dir failed (log above)" >&2
    exit 1
  }
  local known targets=()
  known=$(cmake --build "$dir" --target help)
  for t in "$@"; do
    # Makefiles list "... NAME", Ninja "NAME: phony".
    if grep -qE "^(\.\.\. )?$t(:| |\$)" <<<"$known"; then targets+=(--target "$t"); fi
  done
  cmake --build "$dir" -j "$jobs" "${targets[@]}"
}

# Fails when a sanitizer wrote a report under $1, printing it.
check_reports() {
  local reports=$1 found=0
  for f in "$reports"/report.*; do
    [[ -e $f ]] || continue
    found=1
    echo "sanitize.sh: sanitizer report $f:" >&2
    cat "$f" >&2
  done
  ((found == 0)) || exit 1
}

for mode in "${modes[@]}"; do
  case $mode in
    address)
      dir=$base-asan
      # The programs the tests below run, not the benchmarks (nothing runs them here) nor
      # ndtcu_ndt_parity (left out of the run, see below); ndtcu_io_parity exists when PCL
      # was found.
      # UBSan's null check is left out: it instruments every reference bound and member
      # reached through a pointer, which in Eigen's expression templates makes GCC take
      # about three times as long over each file, while a null dereference itself is a
      # SEGV that AddressSanitizer reports (and fails the run) all the same.
      build "$dir" address,undefined null ndtcu_tests ndtcu_cli ndtcu_fuzz_replay_pcd ndtcu_fuzz_replay_ply \
        ndtcu_fuzz_replay_mcap ndtcu_fuzz_replay_ros1bag ndtcu_rosbag_tests ndtcu_io_parity ndtcu_readme_example
      reports=$dir/sanitizer-reports
      rm -rf "$reports" && mkdir -p "$reports"
      common="exitcode=86:log_path=$reports/report"
      export ASAN_OPTIONS="halt_on_error=1:detect_leaks=1:detect_stack_use_after_return=1:strict_string_checks=1:check_initialization_order=1:$common"
      export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:$common"
      # Left out (the normal build runs both):
      # - package_consumer: it installs this build and links a separate project against
      #   it, which is not built with -fsanitize and so cannot link the sanitized library.
      # - ndt_parity: it destroys PCL's voxel grids, whose Eigen vectors PCL's prebuilt
      #   library allocated with plain malloc, in code built here, where Eigen frees through
      #   its own aligned allocator (Eigen/src/Core/util/Memory.h does not count on malloc's
      #   alignment under __SANITIZE_ADDRESS__) and reads a header that is not there:
      #   AddressSanitizer reports a heap-buffer-overflow in Eigen::internal::
      #   handmade_aligned_free. A mismatch of the two builds of Eigen, not a bug of either.
      # - pcl_dropin_unit and pcl_dropin_tutorial: they run PCL's own NDT beside the drop-in
      #   as the reference, and its voxel grid is freed the same way (the same report).
      status=0
      (cd "$dir" && ctest --output-on-failure -j "$jobs" -L 'unit|data' \
        -E '^(package_consumer|ndt_parity|pcl_dropin_unit|pcl_dropin_tutorial)$') ||
        status=$?
      check_reports "$reports"
      ((status == 0)) || exit "$status"
      ;;
    thread)
      dir=${base}-tsan
      # ndtcu_thread_tests: the test files that hold the cases run here (tests/CMakeLists.txt).
      build "$dir" thread "" ndtcu_thread_tests
      reports=$dir/sanitizer-reports
      rm -rf "$reports" && mkdir -p "$reports"
      export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:exitcode=86:log_path=$reports/report"
      status=0
      # Left out: the [heavy] cases (the kidnap scenario, whose wide search screens some
      # 87,000 hypotheses and aligns 1,600 on the pool: minutes under ThreadSanitizer on 2
      # cores); the pool, the prefetcher and the searches run in the other tests all the
      # same. The allocation failure sweeps take about 25 s here.
      "$dir/tests/ndtcu_thread_tests" '[localization]~[heavy],[thread_pool],[fault_injection]' || status=$?
      check_reports "$reports"
      ((status == 0)) || exit "$status"
      ;;
    *)
      echo "sanitize.sh: unknown mode '$mode' (address or thread)" >&2
      exit 2
      ;;
  esac
done
