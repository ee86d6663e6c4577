#!/usr/bin/env bash
# The P/D experiment: the same load (`baton bench serve`, fixed seed, Poisson arrivals) against
#   (a) colocated:      one colocated worker on both cores     (deploy/local/colocated.yaml)
#   (b) disaggregated:  prefill worker on core 0, decode on 1   (deploy/local/cluster.yaml)
# and TTFT / TPOT p99 and goodput side by side. Each cluster is started with `baton up`, loaded,
# and stopped before the next one starts, so they never share the machine.
#
# usage: bench/pd_experiment.sh [--rate R] [--num-prompts N] [--input-len L] [--output-len O]
#          [--slo-ttft-ms X] [--slo-tpot-ms Y] [--seed S] [--warmup W] [--protocol grpc|http]
#          [--out DIR] [--baton PATH] [--no-plot] [--link RATE[,DELAY] | --link-sweep R1,R2,...]
# Writes into DIR (default build/bench-results/pd-DATE): colocated.json and disaggregated.json
# (bench serve's JSON), their .log and .png (when gnuplot is installed), and summary.json; prints
# the table to stdout. BATON=PATH or --baton picks the binary (default build/bin/baton).
#
# Calibrated from the machine (the default; any of --rate, --slo-ttft-ms, --slo-tpot-ms given
# replaces its calibrated value): the disaggregated cluster first serves a few requests one at a
# time (--concurrency 1), which measures the light-load TTFT (a prompt's prefill on one core, T)
# and TPOT (a decode step on one core, D). The load then keeps the prefill core 60% busy (rate
# = 0.6 / T, bench/pd_calibrate.py says why): the disaggregated TTFT queues behind it, while the
# colocated worker prefills on both cores and makes its decode steps wait instead. The SLOs are
# 4 T and 4 D. The calibration's figures go into calibration.json and summary.json; the table
# ends with a verdict: each p99 side by side with who meets its SLO, TRADE-OFF when each setup
# wins one of TTFT and TPOT, NOT LOADED when both meet both SLOs (nothing to see: raise --rate),
# OVERLOADED when both collapse.
# A run on the 2-core development machine: docs/PD_EXPERIMENT.md.
#
# Emulated links (--link 10gbit,200us, or --link-sweep 1gbit,10gbit,25gbit,100gbit for one
# disaggregated run per bandwidth): the clusters run across network namespaces instead
# (tests/netns/netns_cluster.py, root needed): router in the root namespace, prefill worker in one
# namespace, decode worker in another, the KV hand-off over a veth pair shaped with tc (bandwidth)
# and netem or a delay relay (one-way delay). The colocated baseline runs there too (no hand-off).
# The table then has one row per link: where disaggregated TTFT parts from colocated TTFT is
# where the hand-off stops hiding behind prefill. Files: colocated.json, disaggregated-LINK.json.
set -euo pipefail
cd "$(dirname "$0")/.."

rate=auto num_prompts=150 input_len=512 output_len=128 slo_ttft_ms=auto slo_tpot_ms=auto seed=1
warmup=4 protocol=grpc out="" baton="" plot=1 links=()
usage() { sed -n '8,10p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
while (($#)); do
  case "$1" in
    --rate) rate=$2; shift 2 ;;
    --num-prompts) num_prompts=$2; shift 2 ;;
    --input-len) input_len=$2; shift 2 ;;
    --output-len) output_len=$2; shift 2 ;;
    --slo-ttft-ms) slo_ttft_ms=$2; shift 2 ;;
    --slo-tpot-ms) slo_tpot_ms=$2; shift 2 ;;
    --seed) seed=$2; shift 2 ;;
    --warmup) warmup=$2; shift 2 ;;
    --protocol) protocol=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --baton) baton=$2; shift 2 ;;
    --no-plot) plot=0; shift ;;
    --link) links=("$2"); shift 2 ;;
    --link-sweep) IFS=, read -r -a links <<<"$2"; shift 2 ;;
    -h|--help) usage ;;
    *) echo "pd_experiment: unknown argument '$1'" >&2; usage ;;
  esac
done
baton=${baton:-${BATON:-build/bin/baton}}
out=${out:-build/bench-results/pd-$(date +%Y%m%d-%H%M%S)}  # build*/ is git-ignored
[ -x "$baton" ] || { echo "pd_experiment: no baton binary at $baton (scripts/build.sh, or --baton)" >&2; exit 1; }
mkdir -p "$out"

netns_cluster=(python3 tests/netns/netns_cluster.py --baton "$baton")
for link in "${links[@]}"; do  # every link checked (and namespaces possible) before any run
  "${netns_cluster[@]}" --link "$link" --check || exit $?
done

source bench/cluster_lib.sh

# run NAME CONFIG.yaml|colocated-netns|LINK: start the cluster, load it, stop it.
run() {
  local name=$1 config=$2 prefix="router: "
  [ "$protocol" = http ] && prefix="http: "
  case "$config" in
    *.yaml) start_cluster "$name" "$config" "$prefix" || return 1 ;;
    colocated-netns) start_cluster_cmd "$name" "$prefix" "${netns_cluster[@]}" --colocated || return 1 ;;
    *) start_cluster_cmd "$name" "$prefix" "${netns_cluster[@]}" --link "$config" || return 1 ;;
  esac
  local plot_args=()
  ((plot)) && plot_args=(--plot "$out/$name.png")
  "$baton" bench serve --server "$address" --protocol "$protocol" --request-rate "$rate" \
    --num-prompts "$num_prompts" --warmup "$warmup" --input-len "$input_len" \
    --output-len "$output_len" --slo-ttft-ms "$slo_ttft_ms" --slo-tpot-ms "$slo_tpot_ms" \
    --seed "$seed" --json "$out/$name.json" "${plot_args[@]}" 2> >(tee "$out/$name.log" >&2)
  stop_cluster
}

# calibrate: the disaggregated cluster's light-load TTFT and TPOT, and from them the rate and
# SLOs still "auto" (written to $out/calibration.json).
calibrate() {
  start_cluster calibration deploy/local/cluster.yaml "router: " || return 1
  "$baton" bench serve --server "$address" --concurrency 1 --num-prompts 4 --warmup 1 \
    --input-len "$input_len" --output-len "$output_len" --seed "$seed" --no-per-request \
    --json "$out/calibration-probe.json" 2>"$out/calibration.log" || return 1
  stop_cluster
  read -r rate slo_ttft_ms slo_tpot_ms < <(python3 bench/pd_calibrate.py "$out" "$rate" \
    "$slo_ttft_ms" "$slo_tpot_ms")
  [ -n "$slo_tpot_ms" ] || return 1
  echo "pd_experiment: calibrated: rate $rate req/s, SLO TTFT $slo_ttft_ms ms, TPOT" \
    "$slo_tpot_ms ms ($out/calibration.json)" >&2
}
if [ "$rate" = auto ] || [ "$slo_ttft_ms" = auto ] || [ "$slo_tpot_ms" = auto ]; then
  calibrate || { echo "pd_experiment: calibration failed (see $out/calibration.log)" >&2; exit 1; }
fi

if ((${#links[@]})); then
  run colocated colocated-netns
  names=()
  for link in "${links[@]}"; do
    run "disaggregated-${link//[^A-Za-z0-9.]/_}" "$link"
    names+=("disaggregated-${link//[^A-Za-z0-9.]/_}=$link")
  done
  python3 - "$out" "${names[@]}" <<'EOF'
import json, sys
out, runs = sys.argv[1], [a.split("=", 1) for a in sys.argv[2:]]
c = json.load(open(f"{out}/colocated.json"))
d = {link: json.load(open(f"{out}/{name}.json")) for name, link in runs}
print(f"P/D experiment over emulated P<->D links: {c['num_prompts']} requests, Poisson "
      f"{c['request_rate']} req/s, ~{c['input_len']} in / {c['output_len']} out tokens, seed "
      f"{c['seed']}, SLO TTFT <= {c['slo_ttft_ms']:g} ms and TPOT <= {c['slo_tpot_ms']:g} ms")
print(f"{'link':>14s} {'TTFT med':>9s} {'TTFT p99':>9s} {'med/coloc':>9s} {'p99/coloc':>9s} "
      f"{'TPOT p99':>9s} {'goodput':>8s} {'failed':>6s}")
def row(label, r):
    print(f"{label:>14s} {r['median_ttft_ms']:9.1f} {r['p99_ttft_ms']:9.1f} "
          f"{r['median_ttft_ms'] / c['median_ttft_ms']:9.2f} "
          f"{r['p99_ttft_ms'] / c['p99_ttft_ms']:9.2f} "
          f"{r['p99_tpot_ms']:9.1f} {r['request_goodput']:8.3f} {r['failed']:6d}")
row("colocated", c)
for link, r in d.items():
    row(link, r)
print("(ms; goodput: req/s meeting both SLOs; med/coloc, p99/coloc: disaggregated TTFT over colocated)")
keys = ["completed", "failed", "errors", "median_ttft_ms", "p99_ttft_ms", "median_tpot_ms",
        "p99_tpot_ms", "p99_e2el_ms", "good_requests", "request_goodput"]
json.dump({"colocated": {k: c[k] for k in keys},
           "links": {link: {k: r[k] for k in keys} for link, r in d.items()}},
          open(f"{out}/summary.json", "w"), indent=2)
print(f"JSON: {out}/summary.json")
EOF
  exit 0
fi

run colocated deploy/local/colocated.yaml
run disaggregated deploy/local/cluster.yaml

python3 - "$out" <<'EOF'
import json, sys
out = sys.argv[1]
runs = {name: json.load(open(f"{out}/{name}.json")) for name in ("colocated", "disaggregated")}
rows = [
    ("completed / failed", lambda r: f"{r['completed']} / {r['failed']}"),
    ("request throughput (req/s)", lambda r: f"{r['request_throughput']:.3f}"),
    ("output throughput (tok/s)", lambda r: f"{r['output_throughput']:.1f}"),
    ("TTFT median (ms)", lambda r: f"{r['median_ttft_ms']:.1f}"),
    ("TTFT p99 (ms)", lambda r: f"{r['p99_ttft_ms']:.1f}"),
    ("TPOT median (ms)", lambda r: f"{r['median_tpot_ms']:.1f}"),
    ("TPOT p99 (ms)", lambda r: f"{r['p99_tpot_ms']:.1f}"),
    ("ITL p99 (ms)", lambda r: f"{r['p99_itl_ms']:.1f}"),
    ("E2E p99 (ms)", lambda r: f"{r['p99_e2el_ms']:.1f}"),
    ("good requests (SLO met)", lambda r: f"{r['good_requests']} of {r['num_prompts']}"),
    ("goodput (req/s)", lambda r: f"{r['request_goodput']:.3f}"),
]
c, d = runs["colocated"], runs["disaggregated"]
print(f"P/D experiment: {c['num_prompts']} requests, Poisson {c['request_rate']} req/s, "
      f"~{c['input_len']} in / {c['output_len']} out tokens, seed {c['seed']}, "
      f"SLO TTFT <= {c['slo_ttft_ms']:g} ms and TPOT <= {c['slo_tpot_ms']:g} ms")
print(f"{'':30s} {'colocated (2 cores)':>22s} {'P/D (1 + 1 core)':>22s}")
for label, f in rows:
    print(f"{label:30s} {f(c):>22s} {f(d):>22s}")
for name, r in runs.items():
    if r["errors"]:
        print(f"{name} errors: {r['errors']}")


def met(r):
    """(TTFT p99 within its SLO, TPOT p99 within its SLO)"""
    return r["p99_ttft_ms"] <= r["slo_ttft_ms"], r["p99_tpot_ms"] <= r["slo_tpot_ms"]


(c_ttft, c_tpot), (d_ttft, d_tpot) = met(c), met(d)
if all((c_ttft, c_tpot, d_ttft, d_tpot)):
    verdict = ("NOT LOADED: both setups meet both SLOs at p99, so the table shows no trade-off; "
               "raise --rate (or lengthen the prompts)")
elif all(r["request_goodput"] < 0.1 * r["request_rate"] for r in runs.values()):
    verdict = "OVERLOADED: both setups' goodput collapsed; lower --rate"
else:
    def side(metric, colocated_ok, pd_ok):
        key = f"p99_{metric}_ms"
        met_by = " and ".join(n for n, ok in (("colocated", colocated_ok), ("P/D", pd_ok)) if ok)
        return (f"{metric.upper()} p99 {c[key]:.0f} ms colocated vs {d[key]:.0f} ms P/D "
                f"(SLO met by {met_by or 'neither'})")
    verdict = f"{side('ttft', c_ttft, d_ttft)}; {side('tpot', c_tpot, d_tpot)}"
    colocated_wins_ttft = c["p99_ttft_ms"] < d["p99_ttft_ms"]
    colocated_wins_tpot = c["p99_tpot_ms"] < d["p99_tpot_ms"]
    if colocated_wins_ttft != colocated_wins_tpot:
        verdict = "TRADE-OFF: " + verdict
print(verdict)
keys = ["completed", "failed", "errors", "request_throughput", "output_throughput",
        "median_ttft_ms", "p99_ttft_ms", "median_tpot_ms", "p99_tpot_ms", "p99_itl_ms",
        "p99_e2el_ms", "good_requests", "request_goodput"]
try:
    calibration = json.load(open(f"{out}/calibration.json"))
except OSError:
    calibration = None
summary = {"settings": {k: c[k] for k in ("num_prompts", "request_rate", "input_len",
                                            "output_len", "seed", "slo_ttft_ms", "slo_tpot_ms",
                                            "protocol")},
           "calibration": calibration, "verdict": verdict,
           **{name: {k: r[k] for k in keys} for name, r in runs.items()}}
json.dump(summary, open(f"{out}/summary.json", "w"), indent=2)
print(f"JSON: {out}/colocated.json {out}/disaggregated.json {out}/summary.json")
EOF
