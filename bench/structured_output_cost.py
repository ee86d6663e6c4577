#!/usr/bin/env python3
"""Structured output's cost, measured: one `baton up` cluster (deploy/local/cluster.yaml: prefill
and decode on a core each) and `baton bench serve` at 1 and 32 requests in flight, each run
twice: every request's output constrained by a JSON schema (bench/datasets/person_schema.json;
a request ends where its JSON does), and unconstrained with the constrained run's mean output
length (the baseline, in the same cluster). The decode worker reports the seconds it spent
masking each request's logits and advancing its grammar (Timings.mask_seconds); per decoded token,
against the step it is part of:

    mask share of a step = mask per token x sequences per step / decode host threads / step time

with the step time the constrained run's mean TPOT. The TPOTs of both runs are given beside it
(their ratio includes the different text the two runs generate).

usage: bench/structured_output_cost.py [--baton PATH] [--out DIR] [--num-prompts N]
Writes DIR (default build/bench-results/structured-output-DATE): each bench serve JSON and
summary.json; prints the table.
"""

import argparse
import datetime
import json
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
SCHEMA = ROOT / "bench" / "datasets" / "person_schema.json"
CONFIG = ROOT / "deploy" / "local" / "cluster.yaml"
DECODE_HOST_THREADS = 1  # deploy/local/cluster.yaml's decode worker


def start_cluster(baton, out):
    log = open(out / "up.log", "w")
    proc = subprocess.Popen([baton, "up", "--config", str(CONFIG)], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=log, text=True)
    for line in proc.stdout:
        if line.startswith("router: "):
            return proc, line.split()[1]
    sys.exit(f"baton up exited with {proc.wait()} (see {out / 'up.log'})")


def bench(baton, address, out, name, concurrency, num_prompts, extra):
    path = out / f"{name}.json"
    subprocess.run([baton, "bench", "serve", "--server", address, "--concurrency",
                    str(concurrency), "--num-prompts", str(num_prompts), "--warmup",
                    str(min(concurrency, 8)), "--input-len", "64", "--seed", "1", "--json",
                    str(path), "--no-per-request", *extra], check=True, stdout=subprocess.DEVNULL)
    return json.loads(path.read_text())


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--baton", default=str(ROOT / "build" / "bin" / "baton"))
    parser.add_argument("--out")
    parser.add_argument("--num-prompts", type=int, default=64)
    args = parser.parse_args()
    out = pathlib.Path(args.out or ROOT / "build" / "bench-results" /
                       f"structured-output-{datetime.datetime.now():%Y%m%d-%H%M%S}")
    out.mkdir(parents=True, exist_ok=True)
    proc, address = start_cluster(args.baton, out)
    rows = []
    try:
        for concurrency in (1, 32):
            n = max(args.num_prompts, 2 * concurrency)
            constrained = bench(args.baton, address, out, f"schema-c{concurrency}", concurrency, n,
                                ["--output-len", "160", "--json-schema", str(SCHEMA)])
            mean_out = round(constrained["total_output_tokens"] / constrained["completed"])
            plain = bench(args.baton, address, out, f"plain-c{concurrency}", concurrency, n,
                          ["--output-len", str(mean_out)])
            mask_us = constrained["structured_output"]["mask_us_per_token"]
            tpot_us = 1000 * constrained["mean_tpot_ms"]
            per_step = concurrency / DECODE_HOST_THREADS  # sequences masked per thread a step
            rows.append({
                "concurrency": concurrency,
                "mean_output_tokens": mean_out,
                "mask_us_per_token": mask_us,
                "tpot_ms_constrained": constrained["mean_tpot_ms"],
                "tpot_ms_plain": plain["mean_tpot_ms"],
                "mask_share_of_step": mask_us * per_step / tpot_us,
                "errors": constrained.get("failed", 0) + plain.get("failed", 0),
            })
    finally:
        proc.terminate()
        proc.wait()
    (out / "summary.json").write_text(json.dumps(rows, indent=2))
    print(f"{'in flight':>9} {'out tok':>7} {'mask us/tok':>11} {'TPOT ms':>8} "
          f"{'plain TPOT':>10} {'mask/step':>9}")
    for r in rows:
        print(f"{r['concurrency']:>9} {r['mean_output_tokens']:>7} {r['mask_us_per_token']:>11.1f} "
              f"{r['tpot_ms_constrained']:>8.2f} {r['tpot_ms_plain']:>10.2f} "
              f"{100 * r['mask_share_of_step']:>8.2f}%")
    print(f"results: {out}")


if __name__ == "__main__":
    main()
