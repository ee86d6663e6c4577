#!/usr/bin/env python3
"""CPU speed of baton against llama.cpp and ik_llama.cpp, in one run, same model, same threads.

The peers run as their own benchmark binaries, with their fastest flags, never through Python
bindings (whose per-token Python work measures the binding):
  prefill 512 tokens, decode 128 tokens   llama-bench -p 512 -n 128, the best of flash attention
                                          off/on (and, for ik_llama.cpp, run-time repacking off/on)
  batched decode                          llama-batched-bench -npp 16 -ntg 32 -npl 1,8,32: B
                                          sequences of a 16-token prompt, 32 steps each
baton's figures come from `baton bench engine --json` (the same shapes: a 512-token prefill, 128
decode steps after a 16-token prompt, 32 batched steps after 16-token prompts), which also
measures the memory read bandwidth and the decode roofline in the same run, and baton's decode
steps against plain reads of their weight bytes, one after each step (the pair sees the machine
at one moment: on a shared host the bandwidth measured once moves by tens of percent).

Outside CI: build each peer natively (GGML_NATIVE) from its source distribution on PyPI, outside
the repository:
  pip download --no-deps --no-binary :all: llama-cpp-python ik-llama-cpp-python
  tar xzf llama_cpp_python-*.tar.gz && tar xzf ik_llama_cpp_python-*.tar.gz
  # ik's sdist lacks vendor/ik_llama.cpp/common/cmake/build-info-gen-cpp.cmake: create it to set
  # BUILD_NUMBER, BUILD_COMMIT, BUILD_COMPILER, BUILD_TARGET to anything and configure_file()
  # ../build-info.cpp.in into ../build-info.cpp.
  for src in llama_cpp_python-*/vendor/llama.cpp ik_llama_cpp_python-*/vendor/ik_llama.cpp; do
    cmake -S $src -B $src/build -G Ninja -DGGML_NATIVE=ON -DCMAKE_BUILD_TYPE=Release \\
      -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF
    cmake --build $src/build --target llama-bench llama-batched-bench
  done
  bench/compare_cpu_engines.py --llama-bin llama_cpp_python-*/vendor/llama.cpp/build/bin \\
      --ik-bin ik_llama_cpp_python-*/vendor/ik_llama.cpp/build/bin [--threads 2] [--model PATH]

Each engine runs in its own processes, one after the other (never at the same time).

--decode-context N adds decode 128 after N tokens of context (a chat's history), where
attention reads the whole cache each step: llama-bench -p 0 -n 128 -d N for llama.cpp,
-p 0 -n 0 -gp N,128 for ik_llama.cpp (both time the generation alone), and
`baton bench engine --decode-context N`.

--long-prompt N adds prefill of an N-token prompt (a long document or chat history), where
attention over the prompt grows with its square: llama-bench -p N -n 0 for both peers (the best
of their flag sets) and `baton bench engine --prompt-tokens N`.

--types Q4_K_M,Q5_K_M,Q6_K,Q8_0,F16,BF16 runs the comparison on copies of --model requantized by
llama.cpp's llama-quantize --allow-requantize (the weights of real GGUF files), and ends with one
line per type.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

PROMPT_TOKENS = 512
DECODE_TOKENS = 128
BATCH_PROMPT_TOKENS = 16
BATCH_STEPS = 32

# Flag sets each peer's llama-bench tries (comma lists: every combination runs); the best wins.
BENCH_FLAGS = {
    "llama.cpp": ["-fa", "0,1"],
    "ik_llama.cpp": ["-fa", "0,1", "-rtr", "0,1"],
}
# llama-batched-bench takes one setting a run: the fast ones of each peer, in order, the first that
# runs (ik_llama.cpp 0.1.5's flash attention aborts on this model at 8 sequences:
# "iqk_fa_templates.h:1157: GGML_ASSERT(S > 0) failed"). Older builds take a bare -fa (llama-cpp-
# python 0.3.16's llama.cpp refuses "-fa on"), and no flag at all as the last resort.
BATCHED_FLAGS = {
    "llama.cpp": [["-fa", "on"], ["-fa", "off"], ["-fa"], []],
    "ik_llama.cpp": [["-fa", "on", "-rtr"], ["-fa", "off", "-rtr"], ["-fa", "off"], ["-fa", "-rtr"],
                     ["-rtr"], []],
}


def run(cmd, with_stderr=False, must_succeed=True):
    """stdout (and stderr) of cmd; None where it fails and need not succeed."""
    # In a scratch directory: ik_llama.cpp's tools leave a llama.log in their working directory.
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=tempfile.gettempdir())
    if done.returncode != 0:
        if not must_succeed:
            return None
        sys.exit(f"compare_cpu_engines: {' '.join(cmd)} failed ({done.returncode}):\n"
                 f"{done.stderr[-2000:]}")
    return done.stdout + (done.stderr if with_stderr else "")


def json_rows(out):
    """The JSON array of llama-bench's output, without the lines its model loader prints among
    them (ik_llama.cpp's, as it converts a DeepSeek file's latent-attention tensors): each line
    of llama-bench's JSON starts with a bracket, a brace or a quoted key."""
    return json.loads("\n".join(line for line in out.splitlines()
                                 if line.lstrip()[:1] in ("[", "]", "{", "}", '"')))


def llama_bench(name, bin_dir, model, a):
    """Best prefill and decode tokens/s over the flag combinations, and the winning flags."""
    rows = json_rows(run([os.path.join(bin_dir, "llama-bench"), "-m", model, "-t", str(a.threads),
                          "-p", str(PROMPT_TOKENS), "-n", str(DECODE_TOKENS), "-r", str(a.repeats),
                          "-o", "json", *BENCH_FLAGS[name]]))
    best = {}
    for row in rows:
        test = "prefill" if row["n_prompt"] > 0 else "decode"
        flags = {k: row[k] for k in ("flash_attn", "run_time_repack", "repack") if k in row}
        if test not in best or row["avg_ts"] > best[test]["tokens_per_s"]:
            best[test] = {"tokens_per_s": row["avg_ts"], "flags": flags}
    return {"prefill_tokens_per_s": best["prefill"]["tokens_per_s"],
            "decode_tokens_per_s": best["decode"]["tokens_per_s"],
            "flags": {"prefill": best["prefill"]["flags"], "decode": best["decode"]["flags"]},
            "cpu": rows[0].get("cpu_info", "")}


def llama_bench_at_context(name, bin_dir, model, a):
    """Best decode tokens/s of DECODE_TOKENS after a.decode_context tokens, over the flag sets."""
    n = str(a.decode_context)
    depth = (["-n", "0", "-gp", f"{n},{DECODE_TOKENS}"] if name == "ik_llama.cpp"
             else ["-n", str(DECODE_TOKENS), "-d", n])
    rows = json_rows(run([os.path.join(bin_dir, "llama-bench"), "-m", model, "-t", str(a.threads),
                          "-p", "0", *depth, "-r", str(a.repeats), "-o", "json",
                          *BENCH_FLAGS[name]]))
    return max(row["avg_ts"] for row in rows if row["n_gen"] > 0)


def llama_bench_long_prompt(name, bin_dir, model, a):
    """Best prefill tokens/s of an a.long_prompt-token prompt, over the flag sets."""
    rows = json_rows(run([os.path.join(bin_dir, "llama-bench"), "-m", model, "-t", str(a.threads),
                          "-p", str(a.long_prompt), "-n", "0", "-r", str(a.repeats), "-o", "json",
                          *BENCH_FLAGS[name]]))
    return max(row["avg_ts"] for row in rows if row["n_prompt"] > 0)


def batched_bench(name, bin_dir, model, a):
    """Total generated tokens/s with B sequences decoding together, per B, from the markdown table
    both peers print (| PP | TG | B | N_KV | T_PP s | S_PP t/s | T_TG s | S_TG t/s | T s | S t/s |),
    with the first of the peer's flag sets that runs."""
    max_batch = max(a.batch_sizes)
    cmd = [os.path.join(bin_dir, "llama-batched-bench"), "-m", model, "-t", str(a.threads),
           "-c", str(max_batch * (BATCH_PROMPT_TOKENS + BATCH_STEPS) + 64), "-b", "2048",
           "-ub", "512", "-npp", str(BATCH_PROMPT_TOKENS), "-ntg", str(BATCH_STEPS),
           "-npl", ",".join(map(str, a.batch_sizes))]
    for flags in BATCHED_FLAGS[name]:
        out = run(cmd + flags, with_stderr=True, must_succeed=False)
        if out is None:
            print(f"{name}: llama-batched-bench {' '.join(flags)} failed; trying the next flags",
                  file=sys.stderr)
            continue
        rates = {"flags": " ".join(flags)}
        for line in out.splitlines():
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if len(cells) == 10 and cells[2].isdigit():
                rates[cells[2]] = float(cells[7])
        return rates
    return {"flags": "none ran"}


def baton_bench(model, a, *flags):
    return json.loads(run([a.baton, "bench", "engine", "--model", model, "--threads",
                           str(a.threads), "--json", "--repeats", str(a.repeats), *flags]))


def baton_at_context(model, a):
    """baton's decode tokens/s of DECODE_TOKENS after a.decode_context tokens (its prefill and
    batched runs kept to the least)."""
    r = baton_bench(model, a, "--decode-context", str(a.decode_context), "--prompt-tokens", "1",
                    "--batch-sizes", "1")
    return r["decode_tokens_per_s"]


def baton_long_prompt(model, a):
    """baton's prefill tokens/s of an a.long_prompt-token prompt (its decode runs kept short)."""
    r = baton_bench(model, a, "--prompt-tokens", str(a.long_prompt), "--decode-tokens", "1",
                    "--batch-sizes", "1")
    return r["prefill_tokens_per_s"]


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default=os.path.join(root, "models/SmolLM2-135M-Instruct.Q4_1.gguf"))
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--llama-bin", help="llama.cpp's build/bin (llama-bench, llama-batched-bench)")
    p.add_argument("--ik-bin", help="ik_llama.cpp's build/bin (llama-bench, llama-batched-bench)")
    p.add_argument("--baton", default=os.path.join(root, "build/bin/baton"))
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--batch-sizes", default="1,8,32",
                   type=lambda s: [int(x) for x in s.split(",")])
    p.add_argument("--types", type=lambda s: s.split(","), default=[],
                   help="compare on --model requantized to each of these llama-quantize types "
                        "(e.g. Q4_K_M,Q5_K_M,Q6_K,Q8_0,F16,BF16), with --llama-bin's llama-quantize")
    p.add_argument("--work", default=os.path.join(root, "build/bench-results/quantized"),
                   help="where the requantized copies are kept")
    p.add_argument("--decode-context", type=int, default=0,
                   help="also decode after this many tokens of context (0: not)")
    p.add_argument("--long-prompt", type=int, default=0,
                   help="also prefill a prompt of this many tokens (0: not)")
    p.add_argument("--json", help="also write the results here")
    a = p.parse_args()
    a.model, a.baton, a.work = map(os.path.abspath, (a.model, a.baton, a.work))
    a.llama_bin, a.ik_bin = (os.path.abspath(d) if d else None for d in (a.llama_bin, a.ik_bin))
    peers = {name: d for name, d in (("llama.cpp", a.llama_bin), ("ik_llama.cpp", a.ik_bin)) if d}
    if not peers:
        p.error("give --llama-bin and/or --ik-bin")

    models = {os.path.basename(a.model): a.model}
    if a.types:
        models = quantized_copies(a)
    results = {}
    for label, model in models.items():
        results[label] = compare(model, peers, a)
        report(label, results[label], peers, a)
    if len(models) > 1:
        summary(results, peers)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=2)


def quantized_copies(a):
    """--model requantized to each of --types with llama.cpp's llama-quantize (cached in --work)."""
    if not a.llama_bin:
        sys.exit("compare_cpu_engines: --types needs --llama-bin (its llama-quantize)")
    os.makedirs(a.work, exist_ok=True)
    base = os.path.splitext(os.path.basename(a.model))[0]
    models = {}
    for t in a.types:
        out = os.path.join(a.work, f"{base}.{t}.gguf")
        if not os.path.exists(out):
            print(f"quantizing to {t} ...", file=sys.stderr)
            run([os.path.join(a.llama_bin, "llama-quantize"), "--allow-requantize", a.model, out, t])
        models[t] = out
    return models


def compare(model, peers, a):
    """Every engine on one model, one after the other."""
    print(f"{os.path.basename(model)}: running baton ...", file=sys.stderr)
    batch_sizes = ",".join(map(str, a.batch_sizes))
    results = {"baton": baton_bench(model, a, "--batch-sizes", batch_sizes)}
    if a.decode_context:
        results["baton"]["decode_at_context_tokens_per_s"] = baton_at_context(model, a)
    if a.long_prompt:
        results["baton"]["long_prompt_prefill_tokens_per_s"] = baton_long_prompt(model, a)
    for name, bin_dir in peers.items():
        print(f"{os.path.basename(model)}: running {name} ...", file=sys.stderr)
        results[name] = llama_bench(name, bin_dir, model, a)
        results[name]["batched_decode_tokens_per_s"] = batched_bench(name, bin_dir, model, a)
        if a.decode_context:
            results[name]["decode_at_context_tokens_per_s"] = llama_bench_at_context(
                name, bin_dir, model, a)
        if a.long_prompt:
            results[name]["long_prompt_prefill_tokens_per_s"] = llama_bench_long_prompt(
                name, bin_dir, model, a)
    return results


def report(label, results, peers, a):
    baton = results["baton"]
    roofline = baton["decode_roofline_tokens_per_s"]
    print(f"\nmodel {label}, {a.threads} threads, memory read bandwidth "
          f"{baton['memory_read_gb_per_s']:.1f} GB/s -> decode roofline {roofline:.0f} tokens/s")
    if "decode_paired_read_fraction" in baton:
        print(f"baton's decode steps against reads of their weight bytes between them: "
              f"{baton['decode_paired_read_fraction']:.0%} of the reads' speed "
              f"({baton['decode_paired_read_gb_per_s']:.1f} GB/s)")
    print()
    batch_cols = "".join(f"{'x' + str(b) + ' tok/s':>12}" for b in a.batch_sizes)
    print(f"{'engine':<14}{'prefill ' + str(PROMPT_TOKENS):>13}{'decode ' + str(DECODE_TOKENS):>12}"
          f"{'/roofline':>10}{batch_cols}")
    for name in ("baton", *peers):
        r = results[name]
        batched = "".join(f"{r['batched_decode_tokens_per_s'].get(str(b), 0):>12.0f}"
                          for b in a.batch_sizes)
        print(f"{name:<14}{r['prefill_tokens_per_s']:>13.1f}{r['decode_tokens_per_s']:>12.1f}"
              f"{r['decode_tokens_per_s'] / roofline:>10.0%}{batched}")
    print()
    for name in peers:
        r = results[name]
        ratios = [f"prefill {baton['prefill_tokens_per_s'] / r['prefill_tokens_per_s']:.2f}x",
                  f"decode {baton['decode_tokens_per_s'] / r['decode_tokens_per_s']:.2f}x"]
        for b in a.batch_sizes:
            theirs = r["batched_decode_tokens_per_s"].get(str(b))
            if theirs:
                ratios.append(f"x{b} {baton['batched_decode_tokens_per_s'][str(b)] / theirs:.2f}x")
        print(f"baton / {name}: {', '.join(ratios)}   (its fastest flags: {r['flags']}; batched: "
              f"{r['batched_decode_tokens_per_s']['flags']})")
    if a.decode_context:
        print_extra(f"decode {DECODE_TOKENS} after {a.decode_context} tokens",
                    "decode_at_context_tokens_per_s", results, peers)
    if a.long_prompt:
        print_extra(f"prefill of {a.long_prompt} tokens", "long_prompt_prefill_tokens_per_s",
                    results, peers)


def print_extra(title, key, results, peers):
    """One line of an extra test: each engine's tokens/s, then baton's over each peer's."""
    baton = results["baton"][key]
    print(f"\n{title}: " + ", ".join(f"{name} {results[name][key]:.1f}"
                                     for name in ("baton", *peers)) +
          "; baton / " + ", ".join(f"{name} {baton / results[name][key]:.2f}x" for name in peers))


def summary(results, peers):
    """One line per weight type: baton's prefill and decode, and as ratios to each peer."""
    heads = "".join(f"{'pp /' + n[:8]:>13}{'tg /' + n[:8]:>13}" for n in peers)
    print(f"\n{'type':<10}{'baton pp':>10}{'baton tg':>10}{heads}")
    for label, r in results.items():
        b = r["baton"]
        cells = "".join(
            f"{b['prefill_tokens_per_s'] / r[n]['prefill_tokens_per_s']:>12.2f}x"
            f"{b['decode_tokens_per_s'] / r[n]['decode_tokens_per_s']:>12.2f}x" for n in peers)
        print(f"{label:<10}{b['prefill_tokens_per_s']:>10.0f}{b['decode_tokens_per_s']:>10.0f}{cells}")


if __name__ == "__main__":
    main()
