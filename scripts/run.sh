#!/usr/bin/env bash
# The README's run command: sets up a fresh machine, builds, and answers a first request with the
# default model.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh --target baton >/dev/null
exec build/bin/baton generate --chat "${1:-What is the capital of France? Answer in one sentence.}" --max-tokens 64
