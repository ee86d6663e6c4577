#!/usr/bin/env python3
"""The P/D experiment's calibration (bench/pd_experiment.sh): from a light-load probe of the
disaggregated cluster (`baton bench serve --concurrency 1`'s JSON in OUT/calibration-probe.json),
the request rate and SLOs that load this machine, for each of them still "auto".

  T = the probe's median TTFT: one prompt's prefill on the single prefill core
  D = the probe's median TPOT: one decode step on the single decode core
  rate = 0.6 / T    (the prefill core 60% busy: the disaggregated TTFT queues at p99, while the
                     colocated worker, prefilling on both cores, stalls its decode steps)
  SLO TTFT = 4 T, SLO TPOT = 4 D
On the 2-core development machine (T 0.59 s, D 11 ms, 512 in / 128 out; docs/PD_EXPERIMENT.md):
at 0.6 / T colocated's TTFT p99 was 3.6 T and its TPOT p99 9.2 D, P/D's 10 T and 2.4 D; at
0.5 / T (a probe that read T 0.85 s on a slower moment of the machine) both met both SLOs; at
0.85 / T the colocated worker was overloaded (throughput 1.23 req/s of 1.42, TTFT p99 25 s).

usage: bench/pd_calibrate.py OUT RATE|auto SLO_TTFT_MS|auto SLO_TPOT_MS|auto
Prints "RATE SLO_TTFT_MS SLO_TPOT_MS"; writes OUT/calibration.json.
"""

import json
import sys

PREFILL_LOAD = 0.6
TTFT_SLO_OVER_LIGHT = 4.0
TPOT_SLO_OVER_LIGHT = 4.0


def main():
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    out, rate, ttft, tpot = sys.argv[1:5]
    probe = json.load(open(f"{out}/calibration-probe.json"))
    if probe.get("completed", 0) == 0:
        sys.exit(f"pd_calibrate: the probe completed no request ({out}/calibration-probe.json)")
    prefill_s = probe["median_ttft_ms"] / 1000
    step_ms = probe["median_tpot_ms"]
    chosen = {
        "rate": round(PREFILL_LOAD / prefill_s, 2) if rate == "auto" else float(rate),
        "slo_ttft_ms": round(TTFT_SLO_OVER_LIGHT * prefill_s * 1000) if ttft == "auto"
        else float(ttft),
        "slo_tpot_ms": round(TPOT_SLO_OVER_LIGHT * step_ms) if tpot == "auto" else float(tpot),
    }
    calibrated = [k for k, v in zip(("rate", "slo_ttft_ms", "slo_tpot_ms"), (rate, ttft, tpot))
                  if v == "auto"]
    with open(f"{out}/calibration.json", "w") as f:
        json.dump({"light_ttft_ms": probe["median_ttft_ms"], "light_tpot_ms": step_ms,
                   "calibrated": calibrated, **chosen}, f, indent=2)
    print(chosen["rate"], chosen["slo_ttft_ms"], chosen["slo_tpot_ms"])


if __name__ == "__main__":
    main()
