# Sourced by scripts/build.sh and scripts/sanitize.sh: compiler launcher flags for ccache
# (C++, CUDA and the sanitized builds alike) in the array ccache_flags, empty when ccache
# is not installed or NDTCU_CCACHE=0.
#
# CCACHE_BASEDIR makes the paths under the checkout relative before they are hashed, and
# CCACHE_NOHASHDIR leaves the working directory out of the hash, so a fresh clone in
# another folder hits what an earlier build of the same sources left in the cache
# (ccache's default, ~/.cache/ccache, or $CCACHE_DIR).
ccache_flags=()
if [[ ${NDTCU_CCACHE:-1} == 1 ]] && command -v ccache >/dev/null; then
  export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$root}
  export CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-1}
  ccache_flags=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache
    -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
fi
