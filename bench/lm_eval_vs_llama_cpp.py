#!/usr/bin/env python3
"""lm-evaluation-harness on tests/data/lm_eval's multiple-choice task: baton against llama.cpp,
example by example, on the same GGUF file; writes the reference tests/http/test_lm_eval.py checks.

llama.cpp's own llama-server refuses `echo` ("Only no echo is supported"; ggml-org/llama.cpp
issue 27174), which log-likelihood tasks need, so llama.cpp's engine is driven through
llama-cpp-python's OpenAI server: its Python package from the 0.3.36 source distribution over
libllama built natively from the same tree (LLAMA_CPP_LIB_PATH), with
bench/patches/llama-cpp-python-echo-without-bos.patch (its echo scores a prompt without BOS one
position off). The same harness's `gguf` model type (text prompts, text offsets) runs against
both servers, and its `local-completions` type (token ids from baton's /tokenize) against baton.

  .venv-test/bin/python bench/lm_eval_vs_llama_cpp.py \
      --llama-cpp-python-src ~/peers/llama_cpp_python-0.3.36 --llama-cpp-lib ~/peers/B/bin \
      [--write-reference]

Needs build/bin/baton and .venv-test (scripts/python_env.sh: lm_eval is in it); makes a venv
for the llama-cpp-python server under --work.
"""

import argparse
import contextlib
import json
import os
import pathlib
import queue
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "http"))
from baton_cluster import small_cluster_yaml  # noqa: E402
from lm_eval_task import REFERENCE, TASK, run_lm_eval  # noqa: E402

PATCH = ROOT / "bench" / "patches" / "llama-cpp-python-echo-without-bos.patch"
SERVER_PACKAGES = ["fastapi", "uvicorn", "sse-starlette", "starlette-context",
                   "pydantic-settings", "numpy", "diskcache", "jinja2", "typing-extensions"]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(url, seconds):
    deadline = time.time() + seconds
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                return json.load(r)
        except OSError:
            time.sleep(0.5)
    sys.exit(f"{url} did not answer in {seconds} s")


def prepare_llama_server(work, src):
    """The server's venv and the patched llama_cpp package, made once under `work`."""
    venv = work / "venv"
    if not (venv / "bin" / "python").exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(venv / "bin" / "pip"), "install", "-q", *SERVER_PACKAGES], check=True)
    pylib = work / "pylib"
    if not (pylib / "llama_cpp").exists():
        shutil.copytree(src / "llama_cpp", pylib / "llama_cpp")
        subprocess.run(["patch", "-p1", "-i", str(PATCH)], cwd=pylib, check=True)
    return venv / "bin" / "python", pylib


@contextlib.contextmanager
def llama_server(python, pylib, lib, model):
    port = free_port()
    env = dict(os.environ, PYTHONPATH=str(pylib), LLAMA_CPP_LIB_PATH=str(lib))
    proc = subprocess.Popen(
        [str(python), "-m", "llama_cpp.server", "--model", str(model), "--host", "127.0.0.1",
         "--port", str(port), "--n_ctx", "2048", "--logits_all", "true", "--n_threads", "2",
         "--n_threads_batch", "2", "--verbose", "false"], env=env,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(f"http://127.0.0.1:{port}/v1/models", 120)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait()


@contextlib.contextmanager
def baton_cluster():
    with tempfile.TemporaryDirectory() as tmp:
        config = pathlib.Path(tmp) / "cluster.yaml"
        config.write_text(small_cluster_yaml())
        proc = subprocess.Popen([str(ROOT / "build" / "bin" / "baton"), "up", "--config",
                                 str(config)], cwd=ROOT, stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, text=True)
        lines = queue.Queue()
        threading.Thread(target=lambda: [lines.put(l) for l in proc.stdout], daemon=True).start()
        try:
            while True:
                line = lines.get(timeout=180)
                if line.startswith("http: "):
                    break
            url = f"http://{line.split()[1]}"
            model = wait_for(f"{url}/v1/models", 60)["data"][0]["id"]
            yield url, model
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait()


def summary(name, samples, reference=None):
    """A table row: accuracy, and against the reference the answers and log-likelihood gaps."""
    cells = [name, f"{sum(acc for acc, _ in samples.values()) / len(samples):.3f}", "", ""]
    if reference is not None:
        same = sum(samples[d][0] == reference[d][0] for d in samples)
        gaps = [abs(a - b) for d in samples for a, b in zip(samples[d][1], reference[d][1])]
        cells[2:] = [f"{same}/{len(samples)}", f"{max(gaps):.3f} / {sum(gaps) / len(gaps):.3f}"]
    return "| " + " | ".join(cells) + " |"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--llama-cpp-python-src", type=pathlib.Path, required=True)
    parser.add_argument("--llama-cpp-lib", type=pathlib.Path, required=True)
    parser.add_argument("--work", type=pathlib.Path,
                        default=pathlib.Path.home() / ".cache" / "baton-lm-eval")
    parser.add_argument("--model", type=pathlib.Path,
                        default=ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf")
    parser.add_argument("--write-reference", action="store_true")
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    python, pylib = prepare_llama_server(args.work, args.llama_cpp_python_src)
    with llama_server(python, pylib, args.llama_cpp_lib, args.model) as url:
        llama = run_lm_eval("gguf", f"base_url={url}")
    with baton_cluster() as (url, model):
        text = run_lm_eval("gguf", f"base_url={url}")
        ids = run_lm_eval(
            "local-completions",
            f"base_url={url}/v1/completions,model={model},tokenizer_backend=remote")
    print(f"lm_eval {TASK} ({len(llama)} questions), {args.model.name}\n")
    print("| engine, model type | accuracy | same answer as llama.cpp | "
          "log-likelihood gap max / mean |")
    print("| --- | ---: | ---: | ---: |")
    print(summary("llama.cpp (llama-cpp-python server), gguf", llama))
    print(summary("baton, gguf (text)", text, llama))
    print(summary("baton, local-completions (token ids)", ids, llama))
    if args.write_reference:
        accuracy = sum(acc for acc, _ in llama.values()) / len(llama)
        REFERENCE.write_text(json.dumps({
            "engine": "llama.cpp via llama-cpp-python 0.3.36's server "
                      "(bench/lm_eval_vs_llama_cpp.py), lm_eval model type gguf",
            "model": args.model.name, "task": TASK, "accuracy": accuracy,
            "docs": [{"doc_id": d, "acc": llama[d][0], "loglikelihoods": llama[d][1]}
                     for d in sorted(llama)]}, indent=1) + "\n")
        print(f"\nwrote {REFERENCE.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
