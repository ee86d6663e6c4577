#!/usr/bin/env bash
# Fetches the C++ dependencies Debian lacks from their source distributions on PyPI into
# third_party/ (not tracked), verifying the checksums recorded beside this script:
#   - llama.cpp's Jinja engine (common/jinja, MIT), the chat-template renderer, with the two
#     llama.cpp files it needs (common/json, common/unicode) and llama.cpp's corpus of real chat
#     templates (models/templates, the chat-template tests' input), from the llama-cpp-python
#     source distribution (scripts/llama-cpp-python.sha256), with baton's patches to it
#     (scripts/patches/llama-jinja/*.patch, each saying what it changes and why). CMake builds it
#     (cmake/LlamaJinja.cmake).
#   - xgrammar's C++ core (Apache-2.0), the grammar engine of structured output, from the xgrammar
#     source distribution (scripts/xgrammar.sha256), built here once into
#     third_party/xgrammar/lib/libxgrammar.a by cmake/xgrammar/CMakeLists.txt (optimized, whatever
#     the flavor of the baton build that links it: the default, sanitizer and fuzzer builds all
#     link this one archive, so a cold CI run compiles it once).
# Idempotent: nothing is downloaded or built while third_party/ holds what the checksums name.
set -euo pipefail
cd "$(dirname "$0")/.."

# fetch_sdist PACKAGE VERSION SUMS DIR: downloads PACKAGE==VERSION's source distribution into DIR
# and checks it against SUMS; prints the archive's path.
fetch_sdist() {
  echo "setup: downloading $1==$2 (source) from PyPI" >&2
  # --no-binary for the package alone: its build dependencies (needed to read its metadata) may
  # come as wheels.
  python3 -m pip download --quiet --no-deps --no-binary "$1" --disable-pip-version-check \
    -d "$4" "$1==$2" >&2
  if ! (cd "$4" && sha256sum --quiet -c "$OLDPWD/$3"); then
    echo "setup: checksum mismatch for $1==$2" >&2
    exit 1
  fi
  echo "$4/$(cut -d' ' -f3 "$3")"
}

fetch_llama_jinja() {
  local version=0.3.36 sums=scripts/llama-cpp-python.sha256 dest=third_party/llama-jinja
  local stamp="$dest/.sdist.sha256" patches=(scripts/patches/llama-jinja/*.patch)
  local want
  want=$(cat "$sums" "${patches[@]}" | sha256sum | cut -d' ' -f1)
  if [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then return; fi
  local tmp sdist root
  tmp=$(mktemp -d)
  sdist=$(fetch_sdist llama-cpp-python "$version" "$sums" "$tmp")
  root="llama_cpp_python-$version/vendor/llama.cpp"
  tar -xzf "$sdist" -C "$tmp" "$root/LICENSE" "$root/common/jinja" "$root/common/json.h" \
    "$root/common/json.cpp" "$root/common/unicode.h" "$root/common/unicode.cpp" \
    "$root/models/templates"
  rm -rf "$dest"; mkdir -p "$dest"
  cp -r "$tmp/$root/LICENSE" "$tmp/$root/common" "$tmp/$root/models/templates" "$dest/"
  for patch in "${patches[@]}"; do
    patch --quiet -d "$dest" -p1 < "$patch"
  done
  rm -rf "$tmp"
  echo "$want" > "$stamp"
  echo "setup: $dest ready" >&2
}

fetch_xgrammar() {
  local version=0.2.9 sums=scripts/xgrammar.sha256 dest=third_party/xgrammar
  local stamp="$dest/.sdist.sha256" recipe=cmake/xgrammar/CMakeLists.txt
  local want
  want=$(cat "$sums" "$recipe" | sha256sum | cut -d' ' -f1)
  if [ "$(cat "$stamp" 2>/dev/null)" = "$want" ] && [ -f "$dest/lib/libxgrammar.a" ]; then return; fi
  local tmp sdist root
  tmp=$(mktemp -d)
  sdist=$(fetch_sdist xgrammar "$version" "$sums" "$tmp")
  root="xgrammar-$version"
  tar -xzf "$sdist" -C "$tmp" "$root/LICENSE" "$root/NOTICE" "$root/cpp" "$root/include" \
    "$root/3rdparty/picojson" "$root/3rdparty/dlpack/include"
  rm -rf "$dest"; mkdir -p "$dest"
  cp -r "$tmp/$root/LICENSE" "$tmp/$root/NOTICE" "$tmp/$root/cpp" "$tmp/$root/include" \
    "$tmp/$root/3rdparty" "$dest/"
  rm -rf "$tmp"
  echo "setup: building xgrammar $version (once; about 3 CPU-minutes)" >&2
  local launcher=()
  if command -v ccache > /dev/null; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
  CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=1 cmake -S cmake/xgrammar -B "$dest/build" -G Ninja \
    -DCMAKE_BUILD_TYPE=Release -DXGRAMMAR_SOURCE_DIR="$PWD/$dest" "${launcher[@]}" > /dev/null
  CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=1 cmake --build "$dest/build" -j "$(nproc)" > /dev/null
  mkdir -p "$dest/lib"
  cp "$dest/build/libxgrammar.a" "$dest/lib/"
  rm -rf "$dest/build"
  echo "$want" > "$stamp"
  echo "setup: $dest ready" >&2
}

fetch_llama_jinja
fetch_xgrammar
