#!/usr/bin/env bash
# Capacity against a load that shifts: a workload whose mix changes in phases (`bench serve
# --phases`: long prompts with short answers, then short prompts with long answers, then back)
# against every static assignment of N workers (one per core, one thread each) to prefill, decode
# or both, with the same seeds: goodput under the SLOs per phase and overall, TTFT and TPOT p99 per
# phase. Then the same load against the SLO planner (router --planner slo), started from each
# assignment in --planner-from (default: the even dedicated split and all colocated), which
# changes workers' roles in place as the phases shift: its goodput against the best static split,
# overall and per phase, the role changes it made (from the router's log, with their times), and
# whether each request's output (greedy) is the one every static split gave it.
#
# usage: bench/phase_experiment.sh [--workers N] [--phases IN:OUT:N[:RATE],...] [--rate R]
#        [--slo-ttft-ms MS] [--slo-tpot-ms MS] [--seed S] [--warmup W] [--out DIR] [--baton PATH]
#        [--planner-from "P-D-B ..."] [--planner-dwell-s S] [--static-only | --planner-only]
# Defaults: 2 workers; phases 768:16:30,256:256:30:1,768:16:30 (0.5 requests/s where no RATE is
# given): prefill-bound, then decode-bound with prompts that still interfere, then back. SLOs:
# TTFT 2000 ms, TPOT 50 ms (the routers are told them too); the planner looks every second, moves
# at most once per 10 s and lets a worker leaving decode drain 2 s. Writes DIR (default
# build/bench-results/phases-DATE): one bench serve JSON per run, summary.json and, with
# matplotlib, phases.png.
set -euo pipefail
cd "$(dirname "$0")/.."

workers=2 phases=768:16:30,256:256:30:1,768:16:30 rate=0.5 slo_ttft_ms=2000 slo_tpot_ms=50 seed=1
warmup=2 out="" baton="" planner_from="" planner_dwell_s=10 static_only=0 planner_only=0
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
    --planner-from) planner_from=$2; shift 2 ;;
    --planner-dwell-s) planner_dwell_s=$2; shift 2 ;;
    --static-only) static_only=1; shift ;;
    --planner-only) planner_only=1; shift ;;
    *) sed -n '12,14p' "$0" | sed 's/^# //' >&2; exit 2 ;;
  esac
done
baton=${baton:-${BATON:-build/bin/baton}}
planner_from=${planner_from:-"$((workers / 2))-$((workers - workers / 2))-0 0-0-$workers"}
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

write_config() {  # P D B FILE [ROUTER_ARGS]
  local cpu=0 role count
  {
    echo "host: 127.0.0.1"
    echo "router:"
    echo "  port: 0"
    echo "  args: [--slo-ttft-ms, $slo_ttft_ms, --slo-tpot-ms, $slo_tpot_ms${5:+, $5}]"
    for role in prefill decode colocated; do
      case $role in prefill) count=$1 ;; decode) count=$2 ;; colocated) count=$3 ;; esac
      ((count > 0)) || continue
      echo "$role:"
      for ((i = 0; i < count; i++)); do
        echo "  - threads: 1"
        echo "    cpus: [$((cpu++ % $(nproc)))]"
        echo "    kv_cache_memory: 256M"
      done
    done
  } >"$4"
}

run_load() {  # NAME P D B [ROUTER_ARGS]
  local name=$1
  write_config "$2" "$3" "$4" "$out/$name.yaml" "${5:-}"
  start_cluster "$name" "$out/$name.yaml" "router: "
  "$baton" bench serve --server "$address" --phases "$phases" --request-rate "$rate" \
    --warmup "$warmup" --seed "$seed" --slo-ttft-ms "$slo_ttft_ms" --slo-tpot-ms "$slo_tpot_ms" \
    --json "$out/$name.json" 2>"$out/$name.log" >/dev/null
  stop_cluster
}

names=()
while read -r p d b; do
  ((planner_only == 0)) || break
  names+=("P${p}-D${d}-B${b}")
  run_load "P${p}-D${d}-B${b}" "$p" "$d" "$b"
done < <(assignments)
planner_args="--planner, slo, --planner-interval-ms, 1000, --planner-dwell-s, $planner_dwell_s"
planner_args+=", --planner-drain-ms, 2000"
if ((static_only == 0)); then
  for start in $planner_from; do
    IFS=- read -r p d b <<<"$start"
    names+=("planner-P${p}-D${d}-B${b}")
    run_load "planner-P${p}-D${d}-B${b}" "$p" "$d" "$b" "$planner_args"
  done
fi

python3 - "$out" "$slo_ttft_ms" "$slo_tpot_ms" "${names[@]}" <<'PY'
import json, re, sys
out, slo_ttft, slo_tpot, names = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
runs = {n: json.load(open(f"{out}/{n}.json")) for n in names}
static = [n for n in names if not n.startswith("planner")]
planned = [n for n in names if n.startswith("planner")]
phases = runs[names[0]]["phases"]
def role_changes(name):  # the changes the router made, each with its seconds into the run
    from datetime import datetime
    log = open(f"{out}/{name}.up.log", errors="replace").read()
    stamp = lambda s: datetime.strptime(s, "%Y-%m-%dT%H:%M:%S.%fZ").timestamp()
    start = re.search(r"^(\S+Z) ", log, re.M)
    return [f"{change} at {stamp(when) - stamp(start.group(1)):.0f} s"
            for when, change in re.findall(r"^(\S+Z) .*changed role (\w+ -> \w+)", log, re.M)]
print("phases: " + ", ".join(f"{p['input_len']} in / {p['output_len']} out x {p['num_prompts']} "
                             f"at {p['request_rate']:g}/s" for p in phases))
print(f"SLOs: TTFT <= {slo_ttft} ms, TPOT <= {slo_tpot} ms; P/D/B: prefill, decode, both workers")
header = f"{'workers':>18s} {'goodput':>8s}" + "".join(
    f" | {'phase ' + str(k + 1) + ' goodput':>15s} {'TTFT p99':>9s} {'TPOT p99':>9s}"
    for k in range(len(phases))) + f" {'failed':>6s} {'changes':>7s}"
print(header)
summary = {}
for n, r in runs.items():
    changes = role_changes(n)
    line = f"{n:>18s} {r['request_goodput'] or 0:8.2f}"
    for p in r["phases"]:
        line += (f" | {p['request_goodput'] or 0:15.2f} {p['p99_ttft_ms']:9.0f} "
                 f"{p['p99_tpot_ms']:9.1f}")
    print(line + f" {r['failed']:6d} {len(changes):7d}")
    summary[n] = {"request_goodput": r["request_goodput"], "failed": r["failed"],
                  "role_changes": changes,
                  "phases": [{k: p[k] for k in ("request_goodput", "p99_ttft_ms", "p99_tpot_ms",
                                                "median_ttft_ms", "median_tpot_ms", "completed")}
                             for p in r["phases"]]}
def goodput(n, k=None):
    r = runs[n] if k is None else runs[n]["phases"][k]
    return round(r["request_goodput"] or 0, 2)
def best_of(k=None):  # every static split with the best goodput, tied ones joined by "="
    top = max(goodput(n, k) for n in static)
    return "=".join(n for n in static if goodput(n, k) == top), top
if static:
    best, best_goodput = best_of()
    per_phase = [best_of(k) for k in range(len(phases))]
    print(f"best static split overall: {best}; per phase: {', '.join(b for b, _ in per_phase)}")
    summary["best_overall"], summary["best_per_phase"] = best, [b for b, _ in per_phase]
def same_outputs(a, b):  # requests completed in both runs, and of them those with the same text
    ra, rb = runs[a]["requests"], runs[b]["requests"]
    both = [i for i in range(len(ra["ok"])) if ra["ok"][i] and rb["ok"][i]]
    return len(both), sum(ra["generated_texts"][i] == rb["generated_texts"][i] for i in both)
for n in planned:
    print(f"{n}: role changes: {', '.join(role_changes(n)) or 'none'}")
    for s in static:
        completed, same = same_outputs(n, s)
        print(f"{n}: outputs identical to {s}'s for {same} of the {completed} requests both "
              "completed")
        summary[n].setdefault("identical_outputs", {})[s] = [same, completed]
    if not static:
        continue
    ratio = goodput(n) / best_goodput if best_goodput else float("inf")
    within = [goodput(n, k) >= 0.85 * top for k, (_, top) in enumerate(per_phase)]
    print(f"{n}: {ratio:.2f}x the best static split overall; within 15% of each phase's best: "
          f"{', '.join('yes' if w else 'no' for w in within)}")
    summary[n]["vs_best_static"] = ratio
    summary[n]["within_15_percent_per_phase"] = within
json.dump(summary, open(f"{out}/summary.json", "w"), indent=2)
try:  # goodput per phase, one bar group per phase
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(9, 4))
    width = 0.8 / len(names)
    for i, n in enumerate(names):
        ax.bar([k + i * width for k in range(len(phases))], [goodput(n, k) for k in range(len(phases))],
               width, label=n)
    ax.set_xticks([k + 0.4 - width / 2 for k in range(len(phases))])
    ax.set_xticklabels([f"phase {k + 1}: {p['input_len']} in / {p['output_len']} out"
                        for k, p in enumerate(phases)])
    ax.set_ylabel("goodput (requests/s within both SLOs)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(f"{out}/phases.png", dpi=120)
    print(f"plot: {out}/phases.png")
except ImportError:
    print("(no matplotlib: no plot)")
print(f"(goodput: requests/s meeting both SLOs, over the run / each phase's span)\nJSON: {out}/summary.json")
PY
