#!/usr/bin/env bash
# Runs compute-sanitizer's tools over the GPU test cases, on a machine with a CUDA device.
#
#   scripts/gpu_sanitize.sh TESTS OUT [TOOL ...]
#
# TESTS is the ndtcu_tests binary, OUT a folder for the logs, TOOL any of memcheck,
# racecheck, initcheck, synccheck (default: all four, one after the other). The test cases
# that NDTCU_SANITIZE_FILTER selects (default: every `gpu` case but the soak, whose 10^5
# alignments would take hours under a sanitizer) are split round-robin into
# NDTCU_SANITIZE_SHARDS processes (default 8) that run at once: the tools are slow on the
# host side, and one process would take most of an hour. NDTCU_SANITIZE_CASES names a file
# of test-case names (one a line) to run instead of the filter's. NDTCU_SANITIZE_TIMEOUT
# (seconds, default 1800) bounds each process; a shard stopped by it reports how many
# reports its log holds so far.
#
# The tests run with NDTCU_TEST_UNDER_SANITIZER=1: the GPU cases then repeat less (the
# same code paths and checks of bits, fewer rounds) and report device free-memory readings
# instead of checking them, since they include the tool's own device memory
# (tests/support/test_support.hpp, under_sanitizer). The case comparing the graph launch
# with the stream launch skips itself under the three tools named next.
#
# racecheck, initcheck and synccheck run with NDTCU_CUDA_LOOP=stream: the device loop's
# kernels are launched on the stream rather than as one graph with a conditional while
# node (the same kernels, the same bits; a test compares them). Those three tools do not
# follow conditional nodes: under racecheck the graph's kernels, which the graph orders,
# are reported as racing on shared memory and the batch tests crash; under initcheck and
# synccheck a graph launch ends in cudaErrorIllegalAddress with no report from the tool,
# and synccheck reports barrier divergence at a barrier that every thread reaches. memcheck
# follows the graphs and runs them as they are, its shards one after the other (two
# memcheck processes at once over the graph launch report false out-of-bounds reads).
# Each case's time is in the logs (Catch2's durations: "SECONDS s: NAME").
# Prints one line per tool and shard (the test cases' outcome, the tool's error summary)
# and exits 1 when a tool reported an error or a shard did not finish. memcheck's reports
# of the out-of-memory errors that the allocation-failure tests cause on purpose count
# too: read them in OUT/memcheck.N.log.
set -uo pipefail
if (($# < 2)); then
  echo "usage: $0 TESTS OUT [memcheck|racecheck|initcheck|synccheck ...]" >&2
  exit 2
fi
tests=$1
out=$2
shift 2
tools=("$@")
((${#tools[@]} > 0)) || tools=(memcheck racecheck initcheck synccheck)
filter=${NDTCU_SANITIZE_FILTER:-[gpu]~CUDA soak*}
shards=${NDTCU_SANITIZE_SHARDS:-8}
timeout=${NDTCU_SANITIZE_TIMEOUT:-1800}
[[ -x $tests ]] || { echo "$0: $tests is not an executable" >&2; exit 2; }
command -v compute-sanitizer >/dev/null || { echo "$0: compute-sanitizer is not on PATH" >&2; exit 2; }
[[ $shards =~ ^[1-9][0-9]*$ ]] || { echo "$0: NDTCU_SANITIZE_SHARDS is '$shards'; it must be a positive integer" >&2; exit 2; }
mkdir -p "$out" || exit 2

if [[ -n ${NDTCU_SANITIZE_CASES:-} ]]; then
  mapfile -t cases < <(sed -e '/^$/d' "$NDTCU_SANITIZE_CASES")
else
  mapfile -t cases < <("$tests" --list-test-names-only "$filter" | sed -e '/^$/d' -e 's/^ *//')
fi
((${#cases[@]} > 0)) || { echo "$0: no test case matches '$filter'" >&2; exit 2; }
for ((s = 0; s < shards; ++s)); do : >"$out/cases.$s"; done
for i in "${!cases[@]}"; do
  # Catch2 reads names from the file literally, except that a leading '#' or a comma or
  # bracket would be taken as syntax: escape them.
  printf '%s\n' "${cases[$i]}" | sed -e 's/\\/\\\\/g' -e 's/,/\\,/g' -e 's/\[/\\[/g' >>"$out/cases.$((i % shards))"
done

status=0
for tool in "${tools[@]}"; do
  case $tool in
    memcheck | racecheck | initcheck | synccheck) ;;
    *) echo "$0: unknown tool '$tool'" >&2; exit 2 ;;
  esac
  loop=stream
  [[ $tool == memcheck ]] && loop=graph
  loop=${NDTCU_SANITIZE_LOOP:-$loop}
  # memcheck over the graph launch runs its shards one after the other: with two
  # sanitizer processes at once it reports reads inside live allocations as out of bounds
  # (docs/building.md, "Known limits"); alone it does not.
  sequential=0
  [[ $tool == memcheck && $loop == graph ]] && sequential=1
  pids=()
  rcs=()
  for ((s = 0; s < shards; ++s)); do
    [[ -s $out/cases.$s ]] || continue
    NDTCU_TEST_UNDER_SANITIZER=1 NDTCU_CUDA_LOOP=$loop timeout "$timeout" compute-sanitizer --tool "$tool" --error-exitcode 99 --print-limit 50 \
      "$tests" -d yes -f "$out/cases.$s" >"$out/$tool.$s.log" 2>&1 &
    pids[s]=$!
    if ((sequential)); then
      wait "${pids[$s]}"
      rcs[s]=$?
    fi
  done
  for s in "${!pids[@]}"; do
    if ((sequential)); then
      rc=${rcs[$s]}
    else
      wait "${pids[$s]}"
      rc=$?
    fi
    log=$out/$tool.$s.log
    outcome=$(grep -E '^(All tests passed|test cases:)' "$log" | tail -1)
    summary=$(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$log" | tail -1 | sed 's/^========= //')
    if [[ $rc == 124 ]]; then
      outcome="timed out after $timeout s with $(grep -cE '^========= (Error|Warning|Invalid|Uninitialized|Race)' "$log") reports so far; $outcome"
    fi
    printf '%-9s shard %d (%d cases): rc %d; %s; %s\n' "$tool" "$s" "$(wc -l <"$out/cases.$s")" "$rc" \
      "${outcome:-no test summary}" "${summary:-no sanitizer summary}"
    if [[ $rc == 99 || $rc == 124 || -z $summary ]] || ! [[ $summary =~ :\ 0\ (errors|hazards) ]]; then status=1; fi
  done
done
exit $status
