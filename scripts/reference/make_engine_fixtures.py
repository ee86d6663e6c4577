#!/usr/bin/env python3
"""Generate engine reference data from llama.cpp (via llama-cpp-python).

Reads  tests/data/engine/reference_text.txt (hand-written prose, committed)
Writes tests/data/engine/smollm2_teacher_forced.json
       tests/data/engine/smollm2_greedy.json

Every token is evaluated on its own (one llama_decode of one token per position, "token by
token"): that is GGML's plain CPU path. A multi-token batch takes other kernels for some
products (llamafile's tinyBLAS for the f16 attention products once a batch has 2 or more
tokens), whose rounding differs; see README.md.

Teacher-forced: the whole text is tokenized (add_bos=True, which honours the model's
add_bos_token=false) and evaluated token by token with logits_all=True.  For each
position i in 0..n-2: argmax of logits_i (prediction of token i+1), nll_i =
-log_softmax(logits_i)[token_{i+1}] (float64), and top2_margin_i = best - second best logit.

Greedy: for each prompt, reset, eval the prompt token by token, then 32 times take argmax of
the last logits and eval it (pure greedy, no sampler, no stop on EOS).

Usage: make_engine_fixtures.py [MODEL.gguf] [--out-dir DIR] [--threads N]
"""
import argparse
import hashlib
import json
import math
import os
import sys

import numpy as np

REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
DEFAULT_MODEL = os.path.join(REPO_ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
DEFAULT_OUT_DIR = os.path.join(REPO_ROOT, "tests", "data", "engine")

N_CTX = 4096
N_GEN = 32

# (prompt, parse_special)
PROMPTS = [
    ("What is the capital of France?", False),
    ("Once upon a time, in a small village at the edge of a forest, there lived", False),
    ("def fibonacci(n):\n", False),
    ("Here is a list of five common fruits:\n1.", False),
    ("The speed of light in a vacuum is approximately", False),
    ("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
     "<|im_start|>user\nWhat are three tips for staying healthy?<|im_end|>\n<|im_start|>assistant\n", True),
    ("Water boils at 100 degrees Celsius at sea level because", False),
    ("#include <stdio.h>\n\nint main(void) {\n", False),
    ("Translate to French: \"Good morning, how are you?\"\nFrench:", False),
    ("The three primary colors are", False),
]


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def build_info():
    import ctypes
    import llama_cpp
    info = {"llama_cpp_python_version": llama_cpp.__version__}
    try:
        info["system_info"] = llama_cpp.llama_cpp.llama_print_system_info().decode().strip()
    except Exception:
        pass
    # ggml_commit() reports the git commit of the vendored llama.cpp tree it was built from.
    libdir = os.path.join(os.path.dirname(llama_cpp.__file__), "lib")
    for name in ("libggml-base.so", "libggml-base.dylib", "ggml-base.dll"):
        p = os.path.join(libdir, name)
        if os.path.exists(p):
            try:
                lib = ctypes.CDLL(p)
                for fn in ("ggml_commit", "ggml_version"):
                    f = getattr(lib, fn)
                    f.restype = ctypes.c_char_p
                    info["llama_cpp_" + fn] = f().decode()
            except Exception:
                pass
            break
    return info


def disable_extra_buffer_types(llama_cpp):
    """Load weights into plain CPU buffers (llama_model_params.use_extra_bufts = false).

    With the default (true), a llama.cpp built with -march=native on a CPU with AMX puts the
    Q4_1 weights in the AMX buffer type, and the vendored llama.cpp (commit 4227c9b) computes
    wrong results for multi-token batches there (teacher-forced perplexity ~300 instead of
    ~18; fixed upstream by ggml-org/llama.cpp PR #19925).  The plain CPU path is also the
    portable one.  Llama() has no keyword for this, so wrap the defaults function.
    """
    orig = llama_cpp.llama_cpp.llama_model_default_params
    if getattr(orig, "_baton_wrapped", False):
        return

    def params():
        p = orig()
        p.use_extra_bufts = False
        return p
    params._baton_wrapped = True
    llama_cpp.llama_cpp.llama_model_default_params = params


def logits_row(llm, i):
    return np.asarray(llm.scores[i], dtype=np.float64)


def eval_token_by_token(llm, tokens):
    """Evaluates tokens one llama_decode each (the plain GGML path; see the module docstring)."""
    for t in tokens:
        llm.eval([t])


def teacher_forced(llm, text, meta):
    tokens = llm.tokenize(text, add_bos=True, special=False)
    assert len(tokens) <= N_CTX, len(tokens)
    llm.reset()
    eval_token_by_token(llm, tokens)
    assert llm.n_tokens == len(tokens)
    argmax, nll, margin = [], [], []
    for i in range(len(tokens) - 1):
        z = logits_row(llm, i)
        m = z.max()
        lse = m + math.log(np.exp(z - m).sum())
        nll.append(round(float(lse - z[tokens[i + 1]]), 6))
        top2 = np.partition(z, -2)[-2:]
        argmax.append(int(np.argmax(z)))
        margin.append(round(float(top2[1] - top2[0]), 4))
    mean_nll = float(np.mean(nll))
    return dict(meta, **{
        "n_tokens": len(tokens),
        "tokens": [int(t) for t in tokens],
        "argmax": argmax,
        "nll": nll,
        "mean_nll": round(mean_nll, 6),
        "perplexity": round(math.exp(mean_nll), 6),
        "top1_accuracy": round(sum(a == t for a, t in zip(argmax, tokens[1:])) / len(argmax), 6),
        "top2_margin": margin,
    })


def greedy(llm, prompt, parse_special):
    ptoks = llm.tokenize(prompt.encode("utf-8"), add_bos=True, special=parse_special)
    llm.reset()
    eval_token_by_token(llm, ptoks)
    out, margins = [], []
    for _ in range(N_GEN):
        z = logits_row(llm, llm.n_tokens - 1)
        nxt = int(np.argmax(z))
        top2 = np.partition(z, -2)[-2:]
        margins.append(round(float(top2[1] - top2[0]), 4))
        out.append(nxt)
        llm.eval([nxt])
    text_b = llm.detokenize(out, special=True)
    return {
        "prompt": prompt,
        "parse_special": parse_special,
        "prompt_tokens": [int(t) for t in ptoks],
        "output_tokens": out,
        "output_text": text_b.decode("utf-8", errors="replace"),
        "output_text_hex": text_b.hex(),
        "top2_margin": margins,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", nargs="?", default=DEFAULT_MODEL)
    ap.add_argument("--out-dir", default=DEFAULT_OUT_DIR)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()

    import llama_cpp
    disable_extra_buffer_types(llama_cpp)
    llm = llama_cpp.Llama(model_path=args.model, n_ctx=N_CTX, logits_all=True, flash_attn=False,
                          n_threads=args.threads, n_threads_batch=args.threads,
                          seed=0, verbose=False)
    meta = {
        "model": os.path.basename(args.model),
        "model_sha256": sha256_file(args.model),
        "n_ctx": N_CTX,
        "n_batch": llm.n_batch,
        "generator": "scripts/reference/make_engine_fixtures.py",
        "use_extra_bufts": False,
        "eval_mode": "token_by_token",
        "flash_attn": False,
    }
    meta.update(build_info())

    text_path = os.path.join(args.out_dir, "reference_text.txt")
    with open(text_path, "rb") as f:
        text = f.read()
    tf = teacher_forced(llm, text, dict(meta, text_file="tests/data/engine/reference_text.txt"))
    with open(os.path.join(args.out_dir, "smollm2_teacher_forced.json"), "w") as f:
        json.dump(tf, f, separators=(",", ":"))
        f.write("\n")
    print("teacher-forced: %d tokens, %d positions, perplexity %.4f, top-1 acc %.4f"
          % (tf["n_tokens"], len(tf["nll"]), tf["perplexity"], tf["top1_accuracy"]))

    runs = []
    for prompt, ps in PROMPTS:
        r = greedy(llm, prompt, ps)
        r = dict(r, **{k: v for k, v in meta.items()}, n_generate=N_GEN,
                 note="output_text = detokenize(output_tokens, special=True), decoded as UTF-8 "
                      "with errors='replace'; output_text_hex is the exact bytes")
        runs.append(r)
        print("--- %r\n%s" % (prompt, r["output_text"]))
    with open(os.path.join(args.out_dir, "smollm2_greedy.json"), "w") as f:
        json.dump(runs, f, indent=1, ensure_ascii=False)
        f.write("\n")


if __name__ == "__main__":
    main()
