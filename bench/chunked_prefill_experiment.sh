#!/usr/bin/env bash
# Chunked prefill against long-prompt head-of-line blocking: the same mixed load (mostly short
# prompts, every Kth one long; Poisson arrivals, fixed seed) against the default disaggregated
# cluster (prefill worker on core 0, decode worker on core 1) twice:
#   (a) chunked:    the prefill worker's token budget --budget (long prompts go in chunks, and a
#                   part-way prompt waits behind the prompts that arrived meanwhile)
#   (b) unchunked:  a budget larger than any prompt (each prompt prefills in one forward)
# and TTFT of the short and of the long prompts side by side.
#
# usage: bench/chunked_prefill_experiment.sh [--rate R] [--num-prompts N] [--short-len L]
#          [--long-len L] [--long-every K] [--budget B] [--output-len O] [--seed S] [--out DIR]
#          [--baton PATH]
# Writes into DIR (default build/bench-results/chunked-DATE): dataset.jsonl, chunked.json and
# unchunked.json (bench serve's JSON, per request), their logs; prints the table to stdout.
#
# Defaults (2-core machine): a 2048-token prompt takes several seconds on the one prefill core,
# so at 0.8 requests/s with every 10th prompt long the prefill core is busy most of the time, and
# a short prompt that arrives behind a long one waits for all of it unless the long one is
# chunked (measured: short-prompt TTFT median 0.6 s chunked vs 5.9 s unchunked).
set -euo pipefail
cd "$(dirname "$0")/.."
rate=0.8 num_prompts=80 short_len=64 long_len=2048 long_every=10 budget=256 output_len=16 seed=1
out="" baton=""
usage() { sed -n '10,12p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
while (($#)); do
  case "$1" in
    --rate) rate=$2; shift 2 ;;
    --num-prompts) num_prompts=$2; shift 2 ;;
    --short-len) short_len=$2; shift 2 ;;
    --long-len) long_len=$2; shift 2 ;;
    --long-every) long_every=$2; shift 2 ;;
    --budget) budget=$2; shift 2 ;;
    --output-len) output_len=$2; shift 2 ;;
    --seed) seed=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --baton) baton=$2; shift 2 ;;
    -h|--help) usage ;;
    *) echo "chunked_prefill_experiment: unknown argument '$1'" >&2; usage ;;
  esac
done
baton=${baton:-${BATON:-build/bin/baton}}
out=${out:-build/bench-results/chunked-$(date +%Y%m%d-%H%M%S)}  # build*/ is git-ignored
[ -x "$baton" ] || { echo "chunked_prefill_experiment: no baton binary at $baton" >&2; exit 1; }
mkdir -p "$out"

# The prompts: words of a small common vocabulary (about a token each), every long_every-th long.
python3 - "$out/dataset.jsonl" "$num_prompts" "$short_len" "$long_len" "$long_every" \
  "$output_len" "$seed" <<'PY'
import json, random, sys
path, n, short, long_, every, out_len, seed = sys.argv[1], *map(int, sys.argv[2:])
words = ("the of and to in is it that for on with as was at by be this are from or have an "
         "they which one you had not but what all were when we there can more if no out so "
         "said up its about into than them only other new some could time these two may first "
         "then do any like my now over such our man me even most made after also did many").split()
rng = random.Random(seed)
with open(path, "w") as f:
    for i in range(n):
        length = long_ if i % every == every - 1 else short
        prompt = " ".join(rng.choice(words) for _ in range(length))
        f.write(json.dumps({"prompt": prompt, "max_tokens": out_len}) + "\n")
PY

source bench/cluster_lib.sh

# run NAME BUDGET: the default cluster with the prefill worker's --max-batch-tokens BUDGET.
run() {
  local name=$1 config="$out/$1.yaml"
  cat >"$config" <<YAML
host: 127.0.0.1
router:
  port: 0
prefill:
  - threads: 1
    cpus: [0]
    args: ["--max-batch-tokens", "$2"]
decode:
  - threads: 1
    cpus: [1]
    kv_cache_memory: 256M
YAML
  start_cluster "$name" "$config" "router: " || return 1
  "$baton" bench serve --server "$address" --request-rate "$rate" --num-prompts "$num_prompts" \
    --dataset "$out/dataset.jsonl" --seed "$seed" --json "$out/$name.json" \
    2> >(tee "$out/$name.log" >&2)
  stop_cluster
}

run chunked "$budget"
run unchunked 1000000

python3 - "$out" "$short_len" "$long_len" "$budget" <<'PY'
import json, sys
out, short_len, long_len, budget = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
def pct(values, q):
    if not values: return float("nan")
    values = sorted(values); k = (len(values) - 1) * q / 100; i = int(k)
    return values[i] + (values[min(i + 1, len(values) - 1)] - values[i]) * (k - i)
rows = {}
for name in ("chunked", "unchunked"):
    r = json.load(open(f"{out}/{name}.json"))
    req = r["requests"]
    ok = [i for i, good in enumerate(req["ok"]) if good]
    cut = (short_len + long_len) / 2
    short = [req["ttfts"][i] * 1000 for i in ok if req["input_lens"][i] < cut]
    long_ = [req["ttfts"][i] * 1000 for i in ok if req["input_lens"][i] >= cut]
    rows[name] = (r, short, long_)
print(f"Chunked prefill experiment: {rows['chunked'][0]['num_prompts']} requests, Poisson "
      f"{rows['chunked'][0]['request_rate']} req/s, ~{short_len}-token prompts and every "
      f"long one ~{long_len}; prefill budget {budget} tokens (chunked) vs unlimited")
print(f"{'':34s} {'chunked':>14s} {'unchunked':>14s}")
def line(label, f):
    print(f"{label:34s} {f(rows['chunked']):>14s} {f(rows['unchunked']):>14s}")
line("completed / failed", lambda x: f"{x[0]['completed']} / {x[0]['failed']}")
line("short prompts: TTFT median (ms)", lambda x: f"{pct(x[1], 50):.0f}")
line("short prompts: TTFT p99 (ms)", lambda x: f"{pct(x[1], 99):.0f}")
line("long prompts: TTFT median (ms)", lambda x: f"{pct(x[2], 50):.0f}")
line("long prompts: TTFT p99 (ms)", lambda x: f"{pct(x[2], 99):.0f}")
line("short / long requests", lambda x: f"{len(x[1])} / {len(x[2])}")
PY
