#!/usr/bin/env bash
# Speculative decoding, measured: one cluster (deploy/local/speculative.yaml: the decode worker
# speculates with n-gram proposals) and the same requests with speculation and opted out of it
# (`bench serve --no-speculation`), so both runs share every process, core and cache. Two
# workloads: bench/datasets/copy_edit.jsonl (edit or repeat a given code or text: the output
# copies the input) and bench/datasets/chat.jsonl (open questions: little to copy); each at 1 and
# 8 requests in flight, greedy, exactly max_tokens each.
#
# usage: bench/speculative_experiment.sh [--config FILE] [--out DIR] [--baton PATH]
# Writes DIR (default build/bench-results/speculative-DATE): one bench serve JSON per run and
# summary.json; prints the table: TPOT median, decode tokens/s per sequence (1000 / mean TPOT),
# acceptance, and speculative / plain.
set -euo pipefail
cd "$(dirname "$0")/.."

config=deploy/local/speculative.yaml out="" baton=""
while (($#)); do
  case "$1" in
    --config) config=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --baton) baton=$2; shift 2 ;;
    *) sed -n '9p' "$0" | sed 's/^# //' >&2; exit 2 ;;
  esac
done
baton=${baton:-${BATON:-build/bin/baton}}
out=${out:-build/bench-results/speculative-$(date +%Y%m%d-%H%M%S)}
[ -x "$baton" ] || { echo "speculative_experiment: no baton binary at $baton" >&2; exit 1; }
mkdir -p "$out"
source bench/cluster_lib.sh

start_cluster speculative "$config" "router: "
for workload in copy_edit chat; do
  for concurrency in 1 8; do
    for mode in plain speculative; do
      flags=()
      [ "$mode" = plain ] && flags=(--no-speculation)
      "$baton" bench serve --server "$address" --dataset "bench/datasets/$workload.jsonl" \
        --concurrency "$concurrency" --num-prompts $((12 * concurrency)) --warmup 2 \
        --no-per-request "${flags[@]}" --json "$out/$workload-c$concurrency-$mode.json" \
        2>"$out/$workload-c$concurrency-$mode.log" >/dev/null
    done
  done
done
stop_cluster

python3 - "$out" <<'PY'
import json, sys
out = sys.argv[1]
print(f"{'workload':>10s} {'batch':>5s} {'mode':>12s} {'TPOT p50':>9s} {'tok/s/seq':>9s} "
      f"{'accepted':>9s} {'x plain':>8s}")
summary = {}
for workload in ("copy_edit", "chat"):
    for c in (1, 8):
        runs = {m: json.load(open(f"{out}/{workload}-c{c}-{m}.json")) for m in ("plain", "speculative")}
        base = 1000 / runs["plain"]["mean_tpot_ms"]
        for mode, r in runs.items():
            rate = 1000 / r["mean_tpot_ms"]
            spec = r.get("spec_decode", {})
            acc = f"{100 * spec['acceptance_rate']:.0f}%" if spec.get("draft_tokens") else "-"
            print(f"{workload:>10s} {c:5d} {mode:>12s} {r['median_tpot_ms']:9.2f} {rate:9.1f} "
                  f"{acc:>9s} {rate / base:8.2f}")
            summary[f"{workload}-c{c}-{mode}"] = {
                "median_tpot_ms": r["median_tpot_ms"], "tokens_per_s_per_seq": rate,
                "ratio_to_plain": rate / base, "failed": r["failed"], "spec_decode": spec}
json.dump(summary, open(f"{out}/summary.json", "w"), indent=2)
print(f"(TPOT ms; tok/s/seq = 1000 / mean TPOT; accepted = proposed tokens kept)\nJSON: {out}/summary.json")
PY
