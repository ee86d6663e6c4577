#!/usr/bin/env python3
"""Hugging Face tokenizer.json files and the ids Hugging Face's `tokenizers` gives for a corpus,
for tokenizer_json_test.cc. Runs by hand, not in CI:

    python3 -m venv /opt/hfref
    /opt/hfref/bin/pip install tokenizers transformers gguf sentencepiece protobuf torch
    /opt/hfref/bin/python tests/data/tokenizer/make_hf_tokenizer_refs.py LLAMA_CPP_MODELS_DIR

LLAMA_CPP_MODELS_DIR is vendor/llama.cpp/models of llama-cpp-python 0.3.16's source distribution
(its ggml-vocab-qwen2.gguf holds the Qwen2 vocabulary and merges, which Qwen2.5 and Qwen3 share).

The tokenizer.json files are made by transformers from GGUF files (AutoTokenizer with
gguf_file=, then save_pretrained), as a user without the hub would make them; where transformers'
converter leaves out a step that the published file has, the step is put back:
  - smollm2: models/SmolLM2-135M-Instruct.Q4_1.gguf; the published file splits digits one by one
    (Digits, individual_digits) before ByteLevel, as the GGUF's pre-tokenizer "smollm" says.
  - qwen2.5, qwen3: ggml-vocab-qwen2.gguf's BPE vocabulary and merges; the published files' NFC
    normalizer and their added tokens (Qwen3 = Qwen2.5's plus <tool_response>, </tool_response>,
    <think>, </think>), in place of the GGUF's [PAD...] tokens.
  - gemma3: models/gemma-3-270m-q4_k_m.gguf as converted.
They are written, with their tokenizer_config.json, into hf/tokenizers.tar.xz (the test extracts
it). For each tokenizer and each input of the corpus, hf/<name>.jsonl has one line:

    {"hex": <input as hex>, "ids": [...], "ids_no_special": [...], "ids_add_special": [...]}

from encode(text, add_special_tokens=False), the same with encode_special_tokens=True (special
tokens' text tokenized as text), and encode(text, add_special_tokens=True). The corpus is every
valid UTF-8 input of smollm2_corpus.jsonl plus the inputs below (normalization, special tokens,
whitespace). Deterministic.
"""
import io
import json
import os
import shutil
import sys
import tarfile
import tempfile

from tokenizers import Tokenizer
from transformers import AutoTokenizer

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
OUT = os.path.join(HERE, "hf")

QWEN25_ADDED = [
    ("<|endoftext|>", True), ("<|im_start|>", True), ("<|im_end|>", True),
    ("<|object_ref_start|>", True), ("<|object_ref_end|>", True), ("<|box_start|>", True),
    ("<|box_end|>", True), ("<|quad_start|>", True), ("<|quad_end|>", True),
    ("<|vision_start|>", True), ("<|vision_end|>", True), ("<|vision_pad|>", True),
    ("<|image_pad|>", True), ("<|video_pad|>", True), ("<tool_call>", False),
    ("</tool_call>", False), ("<|fim_prefix|>", False), ("<|fim_middle|>", False),
    ("<|fim_suffix|>", False), ("<|fim_pad|>", False), ("<|repo_name|>", False),
    ("<|file_sep|>", False),
]
QWEN3_ADDED = QWEN25_ADDED + [("<tool_response>", False), ("</tool_response>", False),
                              ("<think>", False), ("</think>", False)]
QWEN_FIRST_ADDED = 151643

EXTRA_INPUTS = [
    "e\u0301te\u0301 cafe\u0301 na\u0308ive",          # decomposed accents (NFC composes them)
    "\u1100\u1161\u11a8 \u1112\u1161\u11ab\u1100\u1173\u11af",  # Hangul jamo
    "\u212b \u2126 \u00c5\u030a A\u030a\u0323 q\u0307\u0323",    # singletons, reordering
    "\u0958\u0959 \ufb1d \u2adc",                       # composition exclusions
    "\u1e9b\u0323 \u0387 \u0344",
    "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n",
    "<think>\nreasoning\n</think>\n\n<tool_call>\n{\"name\": \"f\"}\n</tool_call>",
    "<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n",
    "<bos><eos><pad><unk> <mask>",
    "\n\n\n  \n\t\t  x\n\n",
    "    def f(x):\n        return x  # comment\n\n\n",
    "1234567890 3.14159 1,000,000 \u0661\u0662\u0663 \u00bd",
    "\U0001F468\u200D\U0001F469\u200D\U0001F467 \U0001F1EF\U0001F1F5 \u2764\ufe0f",
    "  leading and trailing spaces  ",
    "\u3000\u00a0\u2003mixed\u2009spaces\u202f",
]


def convert(gguf_path, out_dir):
    d, f = os.path.split(os.path.abspath(gguf_path))
    AutoTokenizer.from_pretrained(d, gguf_file=f).save_pretrained(out_dir)
    with open(os.path.join(out_dir, "tokenizer.json")) as fh:
        return json.load(fh)


def save(tokenizer_json, out_dir):
    with open(os.path.join(out_dir, "tokenizer.json"), "w") as fh:
        json.dump(tokenizer_json, fh, ensure_ascii=False)


def make_smollm2(work):
    out = os.path.join(work, "smollm2")
    j = convert(os.path.join(REPO, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"), out)
    j["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Digits", "individual_digits": True}, j["pre_tokenizer"]]}
    save(j, out)


def make_qwen(work, models_dir, name, added):
    out = os.path.join(work, name)
    j = convert(os.path.join(models_dir, "ggml-vocab-qwen2.gguf"), out)
    j["normalizer"] = {"type": "NFC"}
    vocab = j["model"]["vocab"]
    j["model"]["vocab"] = {t: i for t, i in vocab.items() if i < QWEN_FIRST_ADDED}
    j["added_tokens"] = [
        {"id": QWEN_FIRST_ADDED + k, "content": text, "single_word": False, "lstrip": False,
         "rstrip": False, "normalized": False, "special": special}
        for k, (text, special) in enumerate(added)]
    save(j, out)
    cfg_path = os.path.join(out, "tokenizer_config.json")
    with open(cfg_path) as fh:
        cfg = json.load(fh)
    cfg.update({"bos_token": None, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>",
                "unk_token": None, "add_bos_token": False})
    with open(cfg_path, "w") as fh:
        json.dump(cfg, fh, indent=2)
    for extra in ("chat_template.jinja",):
        if os.path.exists(os.path.join(out, extra)):
            os.remove(os.path.join(out, extra))


def make_gemma3(work):
    convert(os.path.join(REPO, "models", "gemma-3-270m-q4_k_m.gguf"), os.path.join(work, "gemma3"))


def corpus():
    inputs = []
    with open(os.path.join(HERE, "smollm2_corpus.jsonl")) as fh:
        for line in fh:
            raw = bytes.fromhex(json.loads(line)["hex"])
            try:
                inputs.append(raw.decode("utf-8"))
            except UnicodeDecodeError:
                pass
    return inputs + EXTRA_INPUTS


def write_refs(work, name, inputs):
    tok = Tokenizer.from_file(os.path.join(work, name, "tokenizer.json"))
    rows = []
    for text in inputs:
        tok.encode_special_tokens = False
        ids = tok.encode(text, add_special_tokens=False).ids
        ids_add = tok.encode(text, add_special_tokens=True).ids
        tok.encode_special_tokens = True
        ids_no = tok.encode(text, add_special_tokens=False).ids
        rows.append(json.dumps({"hex": text.encode("utf-8").hex(), "ids": ids,
                                "ids_no_special": ids_no, "ids_add_special": ids_add},
                               separators=(",", ":")))
    with open(os.path.join(OUT, name + ".jsonl"), "w") as fh:
        fh.write("\n".join(rows) + "\n")


def main():
    models_dir = sys.argv[1]
    os.makedirs(OUT, exist_ok=True)
    work = tempfile.mkdtemp()
    make_smollm2(work)
    make_qwen(work, models_dir, "qwen2.5", QWEN25_ADDED)
    make_qwen(work, models_dir, "qwen3", QWEN3_ADDED)
    make_gemma3(work)
    inputs = corpus()
    names = ["smollm2", "qwen2.5", "qwen3", "gemma3"]
    for name in names:
        write_refs(work, name, inputs)
    with tarfile.open(os.path.join(OUT, "tokenizers.tar.xz"), "w:xz", preset=9) as tar:
        for name in names:
            for f in sorted(os.listdir(os.path.join(work, name))):
                info = tar.gettarinfo(os.path.join(work, name, f), arcname=f"{name}/{f}")
                info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
                with open(os.path.join(work, name, f), "rb") as fh:
                    tar.addfile(info, fh)
    shutil.rmtree(work)
    print(len(inputs), "inputs")


if __name__ == "__main__":
    main()
