#!/usr/bin/env bash
# Prefix caching and KV-aware routing, measured: a multi-turn workload (`bench serve
# --conversations`: conversations sharing a system prompt, each turn repeating the last one and
# its answer) against 2 prefill + 2 decode workers, for each placement policy (round-robin,
# least-loaded, kv-aware) with the workers' prefix caches on and off: six clusters, the same
# seeded conversations each time. With --routers N the clusters run N routers that serve the same
# workers and the requests go to each router in turn (a conversation's turns on different routers):
# KV-aware routing's hit rate with several routers against one.
#
# usage: bench/prefix_cache_experiment.sh [--out DIR] [--baton PATH] [--conversations N]
#        [--turns T] [--system-prompt-len S] [--turn-len U] [--output-len O] [--concurrency C]
#        [--routers N] [--policies round-robin,least-loaded,kv-aware]
# Writes DIR (default build/bench-results/prefix-cache-DATE): one bench serve JSON per run and
# summary.json; prints TTFT p50/p99, prefill tokens computed, KV bytes handed off, goodput, and
# each run against the same policy with the cache off.
set -euo pipefail
cd "$(dirname "$0")/.."

out="" baton="" conversations=8 turns=4 system_len=1024 turn_len=64 output_len=32 concurrency=4
slo_ttft_ms=500 slo_tpot_ms=100 routers=1 policies=round-robin,least-loaded,kv-aware
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
    *) sed -n '12,14p' "$0" | sed 's/^# //' >&2; exit 2 ;;
  esac
done
baton=${baton:-${BATON:-build/bin/baton}}
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
    echo "  args: [--policy, $1]"
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

for policy in ${policies//,/ }; do
  for cache in off on; do
    name="$policy-cache-$cache"
    write_config "$policy" "$cache" "$out/$name.yaml"
    start_cluster "$name" "$out/$name.yaml" "router: "
    "$baton" bench serve --server "$(router_addresses "$name")" --conversations "$conversations" --turns "$turns" \
      --system-prompt-len "$system_len" --turn-len "$turn_len" --output-len "$output_len" \
      --concurrency "$concurrency" --warmup 1 --seed 7 --slo-ttft-ms "$slo_ttft_ms" \
      --slo-tpot-ms "$slo_tpot_ms" --no-per-request --json "$out/$name.json" \
      2>"$out/$name.log" >/dev/null
    stop_cluster
  done
done

python3 - "$out" "$slo_ttft_ms" "$slo_tpot_ms" "$policies" "$routers" <<'PY'
import json, sys
out, slo_ttft, slo_tpot, policies, routers = sys.argv[1:6]
print(f"{routers} router(s)")
print(f"{'policy':>13s} {'cache':>5s} {'TTFT p50':>9s} {'TTFT p99':>9s} {'prefill tok':>11s} "
      f"{'KV MB':>8s} {'goodput':>8s} {'failed':>6s} | {'TTFT p50 x':>10s} {'prefill x':>9s} "
      f"{'KV x':>6s}")
summary = {}
for policy in policies.split(","):
    runs = {c: json.load(open(f"{out}/{policy}-cache-{c}.json")) for c in ("off", "on")}
    base = runs["off"]
    for cache, r in runs.items():
        p = r["prefix_cache"]
        gain = lambda key_base, key_run: key_base / key_run if key_run else float("inf")
        ttft_x = gain(base["median_ttft_ms"], r["median_ttft_ms"])
        prefill_x = gain(base["prefix_cache"]["prefill_computed_tokens"], p["prefill_computed_tokens"])
        kv_x = gain(base["prefix_cache"]["kv_bytes_handed_off"], p["kv_bytes_handed_off"])
        print(f"{policy:>13s} {cache:>5s} {r['median_ttft_ms']:9.1f} {r['p99_ttft_ms']:9.1f} "
              f"{p['prefill_computed_tokens']:11d} {p['kv_bytes_handed_off'] / 1e6:8.1f} "
              f"{r['request_goodput'] or 0:8.2f} {r['failed']:6d} | {ttft_x:10.2f} "
              f"{prefill_x:9.2f} {kv_x:6.2f}")
        summary[f"{policy}-cache-{cache}"] = {
            "median_ttft_ms": r["median_ttft_ms"], "p99_ttft_ms": r["p99_ttft_ms"],
            "prefill_computed_tokens": p["prefill_computed_tokens"],
            "kv_bytes_handed_off": p["kv_bytes_handed_off"],
            "prefill_hit_rate": p["prefill_hit_rate"], "decode_hit_rate": p["decode_hit_rate"],
            "request_goodput": r["request_goodput"], "failed": r["failed"],
            "vs_cache_off": {"ttft_p50": ttft_x, "prefill_tokens": prefill_x, "kv_bytes": kv_x}}
json.dump(summary, open(f"{out}/summary.json", "w"), indent=2)
print(f"(ms; goodput: requests/s with TTFT <= {slo_ttft} ms and TPOT <= {slo_tpot} ms; "
      f"x: the same policy with the cache off / this run)\nJSON: {out}/summary.json")
PY
