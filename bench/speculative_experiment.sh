#!/usr/bin/env bash
# Speculative decoding, measured: one cluster (deploy/local/speculative.yaml: the decode worker
# speculates with n-gram proposals) and the same requests with speculation and opted out of it
# (`bench serve --no-speculation`), so both runs share every process, core and cache. Two
# workloads: bench/datasets/copy_edit.jsonl (edit or repeat a given code or text: the output
# copies the input) and bench/datasets/chat.jsonl (open questions: little to copy); each at 1 and
# 8 requests in flight, greedy, each ending where the model ends its answer (at most max_tokens).
# Speculation keeps every output token for token, so both runs generate the same tokens; a run
# forced past the answer's end (`bench serve` without --stop-at-eos) would measure the model
# inventing a next turn, which copies nothing. Each pair (plain, then speculative) runs --repeats
# times; a shared VM moves one pair's ratio by 10% or more, so the table gives the median ratio
# and the range.
#
# usage: bench/speculative_experiment.sh [--config FILE] [--out DIR] [--baton PATH] [--repeats N]
# Writes DIR (default build/bench-results/speculative-DATE): one bench serve JSON per run and
# summary.json; prints the table: TPOT median, decode tokens/s per sequence (1000 / mean TPOT),
# acceptance, and speculative / plain (the median over the repeats, and their range).
set -euo pipefail
cd "$(dirname "$0")/.."

config=deploy/local/speculative.yaml out="" baton="" repeats=3
while (($#)); do
  case "$1" in
    --config) config=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --baton) baton=$2; shift 2 ;;
    --repeats) repeats=$2; shift 2 ;;
    *) grep '^# usage:' "$0" | sed 's/^# //' >&2; exit 2 ;;
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
    for ((repeat = 1; repeat <= repeats; repeat++)); do
      for mode in plain speculative; do
        flags=()
        [ "$mode" = plain ] && flags=(--no-speculation)
        run="$workload-c$concurrency-$mode-$repeat"
        "$baton" bench serve --server "$address" --dataset "bench/datasets/$workload.jsonl" \
          --concurrency "$concurrency" --num-prompts $((12 * concurrency)) --warmup 2 \
          --stop-at-eos --no-per-request "${flags[@]}" --json "$out/$run.json" \
          2>"$out/$run.log" >/dev/null
      done
    done
  done
done
# The decode worker's own view: acceptance and the token cost it learned from its step times.
metrics_address=$(sed -n 's/^metrics decode\[0\]: //p' "$out/speculative.up.out" | head -n 1)
python3 -c 'import sys, urllib.request as u; print(u.urlopen(sys.argv[1]).read().decode())' \
  "http://$metrics_address/metrics" | grep '^baton:spec_decode' >"$out/decode_metrics.txt" ||
  echo "no spec_decode metrics from the decode worker at $metrics_address" >"$out/decode_metrics.txt"
stop_cluster

python3 - "$out" "$repeats" <<'PY'
import json, statistics, sys
out, repeats = sys.argv[1], int(sys.argv[2])
print(f"{'workload':>10s} {'batch':>5s} {'mode':>12s} {'TPOT p50':>9s} {'tok/s/seq':>9s} "
      f"{'accepted':>9s} {'x plain':>8s} {'range':>11s}")
summary = {}
for workload in ("copy_edit", "chat"):
    for c in (1, 8):
        runs = {m: [json.load(open(f"{out}/{workload}-c{c}-{m}-{r}.json"))
                    for r in range(1, repeats + 1)] for m in ("plain", "speculative")}
        ratios = [p["mean_tpot_ms"] / s["mean_tpot_ms"]
                  for p, s in zip(runs["plain"], runs["speculative"])]
        for mode, rs in runs.items():
            tpot = statistics.median(r["median_tpot_ms"] for r in rs)
            rate = statistics.median(1000 / r["mean_tpot_ms"] for r in rs)
            drafted = sum(r.get("spec_decode", {}).get("draft_tokens", 0) for r in rs)
            kept = sum(r.get("spec_decode", {}).get("accepted_tokens", 0) for r in rs)
            acc = f"{100 * kept / drafted:.0f}%" if drafted else "-"
            ratio = statistics.median(ratios) if mode == "speculative" else 1.0
            span = f"{min(ratios):.2f}-{max(ratios):.2f}" if mode == "speculative" else ""
            print(f"{workload:>10s} {c:5d} {mode:>12s} {tpot:9.2f} {rate:9.1f} {acc:>9s} "
                  f"{ratio:8.2f} {span:>11s}")
            summary[f"{workload}-c{c}-{mode}"] = {
                "median_tpot_ms": tpot, "tokens_per_s_per_seq": rate, "ratio_to_plain": ratio,
                "ratios": ratios if mode == "speculative" else [],
                "failed": sum(r["failed"] for r in rs), "draft_tokens": drafted,
                "accepted_tokens": kept}
json.dump(summary, open(f"{out}/summary.json", "w"), indent=2)
print(f"(TPOT ms; tok/s/seq = 1000 / mean TPOT; x plain = median of {repeats} paired runs; "
      f"accepted = proposed tokens kept)\nJSON: {out}/summary.json")
print(open(f"{out}/decode_metrics.txt").read(), end="")
PY
