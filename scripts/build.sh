#!/usr/bin/env bash
# Configures and builds baton. Usage: scripts/build.sh [asan|fuzz] [extra cmake --build args]
#   (none)  build/       RelWithDebInfo, CUDA when found, everything
#   asan    build-asan/  ASan+UBSan (gcc), CUDA off
#   fuzz    build-fuzz/  clang + libFuzzer, CUDA off
set -euo pipefail
cd "$(dirname "$0")/.."
flavor=default
case "${1:-}" in asan|fuzz) flavor=$1; shift ;; esac
jobs=$(nproc)
# Let ccache share results between checkouts in different directories (CI clones afresh).
export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=1 CCACHE_MAXSIZE="${CCACHE_MAXSIZE:-5G}"
case "$flavor" in
  default) dir=build; args=() ;;
  asan) dir=build-asan; args=(-DBATON_SANITIZE=ON -DBATON_CUDA=OFF -DCMAKE_BUILD_TYPE=Debug) ;;
  fuzz) dir=build-fuzz; args=(-DBATON_FUZZ=ON -DBATON_CUDA=OFF -DCMAKE_C_COMPILER=clang
          -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo) ;;
esac
scripts/fetch_deps.sh
if [ ! -f "$dir/build.ninja" ]; then
  cmake -S . -B "$dir" -G Ninja "${args[@]}" >&2
fi
cmake --build "$dir" -j "$jobs" "$@"
