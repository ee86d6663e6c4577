#!/usr/bin/env bash
# Prefix caching and KV-aware routing, measured: a multi-turn workload (`bench serve
# --conversations`: conversations sharing a system prompt, each turn repeating the last one and
# its answer) against 2 prefill + 2 decode workers, for each placement policy (round-robin,
# least-loaded, kv-aware) with the workers' prefix caches on and off: six clusters, the same
# seeded conversations each time. With --routers N the clusters run N routers that serve the same
# workers and the requests go to each router in turn (a conversation's turns on different routers):
# KV-aware routing's hit rate with several routers against one. With --router-slo the routers
# are told the SLOs the goodput is counted under (--slo-ttft-ms, --slo-tpot-ms: KV-aware placement
# then aims for them); by default they run as they start by default.
#
# usage: bench/prefix_cache_experiment.sh [--out DIR] [--baton PATH] [--conversations N]
#        [--turns T] [--system-prompt-len S] [--turn-len U] [--output-len O] [--concurrency C]
#        [--routers N] [--policies round-robin,least-loaded,kv-aware] [--caches off,on]
#        [--slo-ttft-ms MS] [--slo-tpot-ms MS] [--router-slo] [--repeats R] [--warmup W]
# Writes DIR (default build/bench-results/prefix-cache-DATE): one bench serve JSON per run and
# summary.json; prints TTFT p50/p99, prefill tokens computed, KV bytes handed off, goodput, and
# each run against the same policy with the cache off. With --repeats R every cluster runs R
# times (the policies in turn each time) and the table shows the means, TTFT p99 and goodput
# with their range.
set -euo pipefail
cd "$(dirname "$0")/.."

out="" baton="" conversations=8 turns=4 system_len=1024 turn_len=64 output_len=32 concurrency=4
slo_ttft_ms=500 slo_tpot_ms=100 routers=1 policies=round-robin,least-loaded,kv-aware
caches=off,on router_slo=0 repeats=1 warmup=""
while (($#)); do
  case "$1" in
    --out) out=$2; shift 2 ;;
    --baton) baton=$2; shift 2 ;;
    --conversations) conversations=$2; shift 2 ;;
    --turns) turns=$2; shift 2 ;;
    --system-prompt-len) system_len=$2; shift 2 ;;
    --turn-len) turn_len=$2; shift 2 ;;
    --output-len) output_len=$2; shift 2 ;;
    --concurrency) concurrency=$2; shift 2 ;;
    --routers) routers=$2; shift 2 ;;
    --policies) policies=$2; shift 2 ;;
    --caches) caches=$2; shift 2 ;;
    --repeats) repeats=$2; shift 2 ;;
    --warmup) warmup=$2; shift 2 ;;
    --slo-ttft-ms) slo_ttft_ms=$2; shift 2 ;;
    --slo-tpot-ms) slo_tpot_ms=$2; shift 2 ;;
    --router-slo) router_slo=1; shift ;;
    *) sed -n '14,17p' "$0" | sed 's/^# //' >&2; exit 2 ;;
  esac
done
baton=${baton:-${BATON:-build/bin/baton}}
# Warm-up conversations, one per slot by default: a worker's first computation of the system
# prompt (a cold start every policy pays once per worker, whenever it first uses the worker) falls
# in the warm-up for every policy, not only for those that spread the first turns.
warmup=${warmup:-$concurrency}
out=${out:-build/bench-results/prefix-cache-$(date +%Y%m%d-%H%M%S)}
[ -x "$baton" ] || { echo "prefix_cache_experiment: no baton binary at $baton" >&2; exit 1; }
mkdir -p "$out"
source bench/cluster_lib.sh

# deploy/local/prefix_cache.yaml with the policy and the cache setting of one run.
write_config() {  # POLICY CACHE(on|off) FILE
  local worker_args=""
  [ "$2" = off ] && worker_args="    args: [--no-prefix-caching]"
  {
    echo "host: 127.0.0.1"
    echo "router:"
    echo "  port: 0"
    echo "  replicas: $routers"
    if ((router_slo)); then
      echo "  args: [--policy, $1, --slo-ttft-ms, $slo_ttft_ms, --slo-tpot-ms, $slo_tpot_ms]"
    else
      echo "  args: [--policy, $1]"
    fi
    for role in prefill decode; do
      echo "$role:"
      for cpu in 0 1; do
        echo "  - threads: 1"
        echo "    cpus: [$cpu]"
        if [ "$role" = decode ]; then echo "    kv_cache_memory: 256M"; fi
        if [ -n "$worker_args" ]; then echo "$worker_args"; fi
      done
    done
  } >"$3"
}

# Every router's gRPC address, comma-separated, once baton up has printed them (right after router:).
router_addresses() {  # NAME
  local all=$address i
  for ((i = 1; i < routers; i++)); do
    local more=""
    for _ in $(seq 1 50); do
      more=$(sed -n "s/^router\[$i\]: //p" "$out/$1.up.out")
      [ -n "$more" ] && break
      sleep 0.1
    done
    [ -n "$more" ] || { echo "$1: no router[$i] line" >&2; return 1; }
    all="$all,$more"
  done
  echo "$all"
}

for ((rep = 1; rep <= repeats; rep++)); do
 for policy in ${policies//,/ }; do
  for cache in ${caches//,/ }; do
    name="$policy-cache-$cache-r$rep"
    write_config "$policy" "$cache" "$out/$name.yaml"
    start_cluster "$name" "$out/$name.yaml" "router: "
    "$baton" bench serve --server "$(router_addresses "$name")" --conversations "$conversations" --turns "$turns" \
      --system-prompt-len "$system_len" --turn-len "$turn_len" --output-len "$output_len" \
      --concurrency "$concurrency" --warmup "$warmup" --seed 7 --slo-ttft-ms "$slo_ttft_ms" \
      --slo-tpot-ms "$slo_tpot_ms" --no-per-request --json "$out/$name.json" \
      2>"$out/$name.log" >/dev/null
    stop_cluster
  done
 done
done

python3 - "$out" "$slo_ttft_ms" "$slo_tpot_ms" "$policies" "$routers" "$caches" "$repeats" <<'PY'
import json, sys
out, slo_ttft, slo_tpot, policies, routers, caches, repeats = sys.argv[1:8]
runs_of = lambda policy, cache: [json.load(open(f"{out}/{policy}-cache-{cache}-r{k}.json"))
                                 for k in range(1, int(repeats) + 1)]
mean = lambda xs: sum(xs) / len(xs)

def measures(runs):
    return {
        "median_ttft_ms": mean([r["median_ttft_ms"] for r in runs]),
        "p99_ttft_ms": mean([r["p99_ttft_ms"] for r in runs]),
        "p99_ttft_ms_range": [min(r["p99_ttft_ms"] for r in runs), max(r["p99_ttft_ms"] for r in runs)],
        "prefill_computed_tokens": mean([r["prefix_cache"]["prefill_computed_tokens"] for r in runs]),
        "kv_bytes_handed_off": mean([r["prefix_cache"]["kv_bytes_handed_off"] for r in runs]),
        "prefill_hit_rate": mean([r["prefix_cache"]["prefill_hit_rate"] for r in runs]),
        "decode_hit_rate": mean([r["prefix_cache"]["decode_hit_rate"] for r in runs]),
        "request_goodput": mean([r["request_goodput"] or 0 for r in runs]),
        "request_goodput_range": [min(r["request_goodput"] or 0 for r in runs),
                                  max(r["request_goodput"] or 0 for r in runs)],
        "failed": sum(r["failed"] for r in runs)}

print(f"{routers} router(s), {repeats} run(s) each: means (range)")
print(f"{'policy':>13s} {'cache':>5s} {'TTFT p50':>9s} {'TTFT p99 (range)':>22s} {'prefill tok':>11s} "
      f"{'KV MB':>8s} {'goodput (range)':>19s} {'failed':>6s} | {'TTFT p50 x':>10s} "
      f"{'prefill x':>9s} {'KV x':>6s}")
summary = {}
for policy in policies.split(","):
    by_cache = {c: measures(runs_of(policy, c)) for c in caches.split(",")}
    base = by_cache.get("off")  # without it, the x columns compare a run with itself
    for cache, m in by_cache.items():
        b = base or m
        gain = lambda key: b[key] / m[key] if m[key] else float("inf")
        m["vs_cache_off"] = {"ttft_p50": gain("median_ttft_ms"),
                             "prefill_tokens": gain("prefill_computed_tokens"),
                             "kv_bytes": gain("kv_bytes_handed_off")}
        lo, hi = m["p99_ttft_ms_range"]
        glo, ghi = m["request_goodput_range"]
        print(f"{policy:>13s} {cache:>5s} {m['median_ttft_ms']:9.1f} "
              f"{m['p99_ttft_ms']:7.0f} ({lo:5.0f}-{hi:5.0f}) {m['prefill_computed_tokens']:11.0f} "
              f"{m['kv_bytes_handed_off'] / 1e6:8.1f} {m['request_goodput']:5.2f} ({glo:4.2f}-{ghi:4.2f}) "
              f"{m['failed']:6d} | {m['vs_cache_off']['ttft_p50']:10.2f} "
              f"{m['vs_cache_off']['prefill_tokens']:9.2f} {m['vs_cache_off']['kv_bytes']:6.2f}")
        summary[f"{policy}-cache-{cache}"] = m
json.dump(summary, open(f"{out}/summary.json", "w"), indent=2)
print(f"(ms; goodput: requests/s with TTFT <= {slo_ttft} ms and TPOT <= {slo_tpot} ms; "
      f"x: the same policy with the cache off / this run)\nJSON: {out}/summary.json")
PY
