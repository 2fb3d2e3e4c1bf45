#!/bin/sh
# memory_limited.sh KB COMMAND [ARGS...]: runs COMMAND with its virtual memory limited to
# KB kilobytes (ulimit -v), so that a request the command must refuse before doing the
# work fails the test when the work starts anyway (as bad_alloc or "out of memory"
# instead of the refusal the test expects). A sanitized build reserves terabytes of
# address space for its shadow memory and cannot run under the limit: it runs without it
# (the test still checks the refusal and, through its CTest timeout, that it comes quickly).
limit=$1
shift
if ! ldd "$1" 2>/dev/null | grep -q 'lib[at]san'; then
  ulimit -v "$limit" || exit 99
fi
exec "$@"
