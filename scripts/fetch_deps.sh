#!/usr/bin/env bash
# Fetches the C++ dependencies Debian lacks from their source distributions on PyPI into
# third_party/ (not tracked; CMake builds them as libraries outside the project's own code),
# verifying the checksums recorded beside this script:
#   - llama.cpp's Jinja engine (common/jinja, MIT), the chat-template renderer, with the two
#     llama.cpp files it needs (common/json, common/unicode) and llama.cpp's corpus of real chat
#     templates (models/templates, the chat-template tests' input), from the llama-cpp-python
#     source distribution (scripts/llama-cpp-python.sha256), with baton's patches to it
#     (scripts/patches/llama-jinja/*.patch, each saying what it changes and why).
# Idempotent: nothing is downloaded while third_party/ holds what the checksums name.
set -euo pipefail
cd "$(dirname "$0")/.."
version=0.3.36
sums=scripts/llama-cpp-python.sha256
dest=third_party/llama-jinja
stamp="$dest/.sdist.sha256"
patches=(scripts/patches/llama-jinja/*.patch)
want=$(cat "$sums" "${patches[@]}" | sha256sum | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then exit 0; fi

tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
echo "setup: downloading llama-cpp-python==$version (source) from PyPI" >&2
python3 -m pip download --quiet --no-deps --no-binary :all: --disable-pip-version-check \
  -d "$tmp" "llama-cpp-python==$version"
sdist="$tmp/llama_cpp_python-$version.tar.gz"
if ! (cd "$tmp" && sha256sum --quiet -c "$OLDPWD/$sums"); then
  echo "setup: checksum mismatch for $sdist" >&2
  exit 1
fi
root="llama_cpp_python-$version/vendor/llama.cpp"
tar -xzf "$sdist" -C "$tmp" "$root/LICENSE" "$root/common/jinja" "$root/common/json.h" \
  "$root/common/json.cpp" "$root/common/unicode.h" "$root/common/unicode.cpp" \
  "$root/models/templates"
rm -rf "$dest"; mkdir -p "$dest"
cp -r "$tmp/$root/LICENSE" "$tmp/$root/common" "$tmp/$root/models/templates" "$dest/"
for patch in "${patches[@]}"; do
  patch --quiet -d "$dest" -p1 < "$patch"
done
echo "$want" > "$stamp"
echo "setup: $dest ready" >&2
