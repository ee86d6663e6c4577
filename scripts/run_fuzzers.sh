#!/usr/bin/env bash
# Runs each libFuzzer target in build-fuzz/bin for a bounded time, seeded from tests/fuzz/seeds.
# Usage: scripts/run_fuzzers.sh SECONDS_PER_TARGET
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
for fuzzer in gguf_fuzz tokenizer_fuzz kv_push_fuzz checkpoint_fuzz; do
  corpus=build-fuzz/corpus-$fuzzer
  mkdir -p "$corpus"
  echo "fuzz: $fuzzer for ${seconds}s" >&2
  build-fuzz/bin/$fuzzer -max_total_time="$seconds" -rss_limit_mb=4096 -timeout=10 \
    -print_final_stats=1 "$corpus" tests/fuzz/seeds/$fuzzer 2>&1 | tail -n 12
  status=${PIPESTATUS[0]}
  if [ "$status" -ne 0 ]; then echo "fuzz: $fuzzer found a problem (exit $status)" >&2; exit 1; fi
done
echo "fuzz: no findings"
