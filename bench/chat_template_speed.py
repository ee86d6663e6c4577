#!/usr/bin/env python3
"""Chat-template rendering time: baton (llama.cpp's Jinja engine, `baton chat-template --jsonl`)
against Python's jinja2 under transformers' settings, measured in the same run.

For each template and conversation, baton renders N copies in one process (its start-up, measured
with no input, taken off) and jinja2 renders the compiled template N times; both include reading
the request's JSON. Prints microseconds per rendering and baton/jinja2.

usage: .venv-test/bin/python bench/chat_template_speed.py [--baton build/bin/baton] [-n 1000]
"""
import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "engine"))
import chat_template_corpus_test as corpus  # noqa: E402  (transformers' jinja2 set-up, tools)

TEMPLATES = ["Qwen-Qwen3-0.6B", "Qwen-Qwen2.5-7B-Instruct", "meta-llama-Llama-3.1-8B-Instruct",
             "HuggingFaceTB-SmolLM3-3B"]


def conversations():
    short = {"messages": [{"role": "system", "content": "You are terse."},
                          {"role": "user", "content": "What is the capital of France?"}]}
    turns = []
    for i in range(25):
        turns += [{"role": "user", "content": f"Question {i} about the weather in Paris?"},
                  {"role": "assistant", "content": f"Answer {i}, of moderate length and detail."}]
    long = {"messages": turns + [{"role": "user", "content": "And now?"}], "tools": corpus.TOOLS}
    return {"2 messages": short, "51 messages + 2 tools": long}


def baton_seconds(baton, template, lines):
    start = time.perf_counter()
    subprocess.run([baton, "chat-template", "--template", str(template), "--bos", "<s>",
                    "--jsonl"], input=lines, capture_output=True, text=True, check=True)
    return time.perf_counter() - start


def jinja2_seconds(env, source, request, n):
    line = json.dumps(request)
    start = time.perf_counter()
    template = env.from_string(source)
    for _ in range(n):
        r = json.loads(line)
        json.dumps({"text": template.render(
            messages=r["messages"], tools=r.get("tools"), documents=None,
            add_generation_prompt=True, bos_token="<s>", eos_token="</s>")})
    return time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--baton", default=str(ROOT / "build" / "bin" / "baton"))
    parser.add_argument("-n", type=int, default=1000)
    args = parser.parse_args()
    env = corpus.transformers_environment()
    print(f"{'template':34} {'conversation':22} {'baton us':>9} {'jinja2 us':>9} {'ratio':>6}")
    for name in TEMPLATES:
        path = ROOT / "third_party" / "llama-jinja" / "templates" / f"{name}.jinja"
        source = path.read_text(encoding="utf-8")
        startup = min(baton_seconds(args.baton, path, "") for _ in range(3))
        for label, request in conversations().items():
            lines = (json.dumps(request) + "\n") * args.n
            ours = (min(baton_seconds(args.baton, path, lines) for _ in range(3)) - startup)
            theirs = min(jinja2_seconds(env, source, request, args.n) for _ in range(3))
            print(f"{name:34} {label:22} {ours / args.n * 1e6:9.0f} "
                  f"{theirs / args.n * 1e6:9.0f} {ours / theirs:6.2f}")


if __name__ == "__main__":
    main()
