#!/usr/bin/env bash
# Installs everything baton needs on a fresh Debian 12 machine and fetches the default model.
# Idempotent: a second run installs nothing and downloads nothing.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  build-essential cmake ninja-build ccache pkg-config git python3 python3-pip python3-venv
  clang libclang-rt-dev
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler grpc-proto
  libabsl-dev libgtest-dev libgmock-dev googletest libbenchmark-dev
  libpcre2-dev libxxhash-dev nlohmann-json3-dev libcpp-httplib-dev libyaml-cpp-dev libboost-dev
  curl unzip openssl gnuplot-nox
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}" >&2
  sudo=""; [ "$(id -u)" = 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
fi

scripts/fetch_deps.sh
scripts/fetch_model.sh
scripts/python_env.sh
