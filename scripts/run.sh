#!/usr/bin/env bash
# The README's run command: sets up a fresh machine, builds, starts the local cluster (router +
# prefill worker + decode worker, deploy/local/cluster.yaml) serving the default model, and answers
# a first request through it. In a terminal the cluster keeps serving until Ctrl-C; otherwise it
# stops after the first answer.
#   scripts/run.sh ["your question"]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh --target baton >/dev/null

log=$(mktemp)
build/bin/baton up >"$log" &
cluster=$!
trap 'kill -TERM $cluster 2>/dev/null || true; wait $cluster 2>/dev/null || true; rm -f "$log"' EXIT
for _ in $(seq 1 600); do
  grep -q '^http: ' "$log" && break  # printed right after router:
  kill -0 $cluster 2>/dev/null || { echo "run: the cluster failed to start" >&2; exit 1; }
  sleep 0.2
done
router=$(sed -n 's/^router: //p' "$log")
http=$(sed -n 's/^http: //p' "$log")
[ -n "$router" ] || { echo "run: the cluster did not come up in time" >&2; exit 1; }
echo "run: cluster up, router at $router, OpenAI-compatible API at http://$http/v1" >&2

build/bin/baton generate --server "$router" --max-tokens 64 \
  --chat "${1:-What is the capital of France? Answer in one sentence.}"

if [ -t 0 ]; then
  echo "run: serving at $router — try: build/bin/baton generate --server $router --chat 'Hello'" >&2
  echo "run: Ctrl-C stops the cluster" >&2
  wait $cluster
fi
