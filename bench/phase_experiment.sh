#!/usr/bin/env bash
# Capacity against a load that shifts: a workload whose mix changes in phases (`bench serve
# --phases`: long prompts with short answers, then short prompts with long answers, then back)
# against every static assignment of N workers (one per core, one thread each) to prefill, decode
# or both, with the same seeds: goodput under the SLOs per phase and overall, TTFT and TPOT p99 per
# phase. No static split suits every phase; this is the baseline a planner that moves workers
# between roles must beat.
#
# usage: bench/phase_experiment.sh [--workers N] [--phases IN:OUT:N[:RATE],...] [--rate R]
#        [--slo-ttft-ms MS] [--slo-tpot-ms MS] [--seed S] [--warmup W] [--out DIR] [--baton PATH]
# Defaults: 2 workers; phases 768:16:30,256:256:30:1,768:16:30 (0.5 requests/s where no RATE is
# given): prefill-bound, then decode-bound with prompts that still interfere, then back. SLOs:
# TTFT 2000 ms, TPOT 50 ms (the routers are told them too). Writes DIR (default
# build/bench-results/phases-DATE): one bench serve JSON per assignment and summary.json.
set -euo pipefail
cd "$(dirname "$0")/.."

workers=2 phases=768:16:30,256:256:30:1,768:16:30 rate=0.5 slo_ttft_ms=2000 slo_tpot_ms=50 seed=1
warmup=2 out="" baton=""
while (($#)); do
  case "$1" in
    --workers) workers=$2; shift 2 ;;
    --phases) phases=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    --slo-ttft-ms) slo_ttft_ms=$2; shift 2 ;;
    --slo-tpot-ms) slo_tpot_ms=$2; shift 2 ;;
    --seed) seed=$2; shift 2 ;;
    --warmup) warmup=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --baton) baton=$2; shift 2 ;;
    *) sed -n '9,10p' "$0" | sed 's/^# //' >&2; exit 2 ;;
  esac
done
baton=${baton:-${BATON:-build/bin/baton}}
out=${out:-build/bench-results/phases-$(date +%Y%m%d-%H%M%S)}
[ -x "$baton" ] || { echo "phase_experiment: no baton binary at $baton" >&2; exit 1; }
mkdir -p "$out"
source bench/cluster_lib.sh

# Every assignment of $workers workers to roles, as counts "P D B" (prefill, decode, both), that
# has a worker for each side.
assignments() {
  local p d
  for ((p = 0; p <= workers; p++)); do
    for ((d = 0; d <= workers - p; d++)); do
      local b=$((workers - p - d))
      ((p + b > 0 && d + b > 0)) && echo "$p $d $b"
    done
  done
}

write_config() {  # P D B FILE
  local cpu=0 role count
  {
    echo "host: 127.0.0.1"
    echo "router:"
    echo "  port: 0"
    echo "  args: [--slo-ttft-ms, $slo_ttft_ms, --slo-tpot-ms, $slo_tpot_ms]"
    for role in prefill decode colocated; do
      case $role in prefill) count=$1 ;; decode) count=$2 ;; colocated) count=$3 ;; esac
      ((count > 0)) || continue
      echo "$role:"
      for ((i = 0; i < count; i++)); do
        echo "  - threads: 1"
        echo "    cpus: [$((cpu++ % $(nproc)))]"
        [ "$role" = prefill ] || echo "    kv_cache_memory: 256M"
      done
    done
  } >"$4"
}

names=()
while read -r p d b; do
  name="P${p}-D${d}-B${b}"
  names+=("$name")
  write_config "$p" "$d" "$b" "$out/$name.yaml"
  start_cluster "$name" "$out/$name.yaml" "router: "
  "$baton" bench serve --server "$address" --phases "$phases" --request-rate "$rate" \
    --warmup "$warmup" --seed "$seed" --slo-ttft-ms "$slo_ttft_ms" --slo-tpot-ms "$slo_tpot_ms" \
    --no-per-request --json "$out/$name.json" 2>"$out/$name.log" >/dev/null
  stop_cluster
done < <(assignments)

python3 - "$out" "$slo_ttft_ms" "$slo_tpot_ms" "${names[@]}" <<'PY'
import json, sys
out, slo_ttft, slo_tpot, names = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
runs = {n: json.load(open(f"{out}/{n}.json")) for n in names}
phases = runs[names[0]]["phases"]
print("phases: " + ", ".join(f"{p['input_len']} in / {p['output_len']} out x {p['num_prompts']} "
                             f"at {p['request_rate']:g}/s" for p in phases))
print(f"SLOs: TTFT <= {slo_ttft} ms, TPOT <= {slo_tpot} ms; P/D/B: prefill, decode, both workers")
header = f"{'workers':>10s} {'goodput':>8s}" + "".join(
    f" | {'phase ' + str(k + 1) + ' goodput':>15s} {'TTFT p99':>9s} {'TPOT p99':>9s}"
    for k in range(len(phases))) + f" {'failed':>6s}"
print(header)
summary = {}
for n, r in runs.items():
    line = f"{n:>10s} {r['request_goodput'] or 0:8.2f}"
    for p in r["phases"]:
        line += (f" | {p['request_goodput'] or 0:15.2f} {p['p99_ttft_ms']:9.0f} "
                 f"{p['p99_tpot_ms']:9.1f}")
    print(line + f" {r['failed']:6d}")
    summary[n] = {"request_goodput": r["request_goodput"], "failed": r["failed"],
                  "phases": [{k: p[k] for k in ("request_goodput", "p99_ttft_ms", "p99_tpot_ms",
                                                "median_ttft_ms", "median_tpot_ms", "completed")}
                             for p in r["phases"]]}
def best_of(goodput):  # every split with the best goodput, tied ones joined by "="
    top = max(goodput(n) for n in runs)
    return "=".join(n for n in runs if goodput(n) == top)
best = best_of(lambda n: runs[n]["request_goodput"] or 0)
per_phase_best = [best_of(lambda n, k=k: round(runs[n]["phases"][k]["request_goodput"] or 0, 2))
                  for k in range(len(phases))]
print(f"best static split overall: {best}; per phase: {', '.join(per_phase_best)}")
summary["best_overall"], summary["best_per_phase"] = best, per_phase_best
json.dump(summary, open(f"{out}/summary.json", "w"), indent=2)
print(f"(goodput: requests/s meeting both SLOs, over the run / each phase's span)\nJSON: {out}/summary.json")
PY
