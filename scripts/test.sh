#!/usr/bin/env bash
# The README's test command: sets up a fresh machine, builds, and runs every test.
#   1. all tests (ctest) in the default build
#   2. the GGUF/tokenizer tests again under ASan+UBSan
#   3. the GGUF, tokenizer, KV push and checkpoint (safetensors, tokenizer.json) fuzzers for a
#      bounded time each (FUZZ_SECONDS, default 45)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh

scripts/build.sh
(cd build && ctest --output-on-failure -j "$(nproc)" --timeout 600)

scripts/build.sh asan --target sanitize_tests
(cd build-asan && ctest --output-on-failure -E _NOT_BUILT -j "$(nproc)" --timeout 600)

scripts/build.sh fuzz --target fuzzers
scripts/run_fuzzers.sh "${FUZZ_SECONDS:-45}"
