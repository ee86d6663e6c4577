#!/usr/bin/env python3
"""Reference ids from llama.cpp beyond smollm2_corpus.jsonl, for tokenizer_test.cc.

1. gpt2_pre_variants.jsonl: the pre-tokenizers that no shipped vocabulary covers. The GPT-2
   vocabulary of llama.cpp's test vectors (tests/data/tokenizer-vectors) is re-labelled with
   other tokenizer.ggml.pre values ("default", "llama-bpe", "qwen2", "starcoder"), written as
   temporary vocabulary-only GGUF files, and every input is tokenized by llama.cpp with each of them:

       {"hex": <input bytes as hex>, "ids": {"<pre>": [...], ...}, "ids_special": {"<pre>": [...]}}

   ids_special (special=True) is written only for the inputs where it differs from ids.

2. llama_spm_corpus.jsonl: the same inputs through llama.cpp's SentencePiece vocabulary,

       {"hex": ..., "ids": [...], "ids_special": [...], "ids_bos": [...]}

   from tokenize(add_bos=False, special=False), (False, True) and (True, False).

The inputs are those of smollm2_corpus.jsonl plus the test vectors' inputs. Inputs on which
llama.cpp aborts (code points above U+10FFFF) are left out. Uses llama-cpp-python (see
scripts/reference/README.md); deterministic; runs by hand, not in CI:

    /opt/llamaref/bin/python tests/data/tokenizer/make_extra_tokenizer_refs.py
"""
import json
import os
import struct
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
VECTORS = os.path.join(REPO, "tests", "data", "tokenizer-vectors")
GPT2_VOCAB = os.path.join(VECTORS, "ggml-vocab-gpt-2.gguf")
SPM_VOCAB = os.path.join(VECTORS, "ggml-vocab-llama-spm.gguf")
CORPUS = os.path.join(HERE, "smollm2_corpus.jsonl")
PRE_OUT = os.path.join(HERE, "gpt2_pre_variants.jsonl")
SPM_OUT = os.path.join(HERE, "llama_spm_corpus.jsonl")
PRES = ["default", "llama-bpe", "qwen2", "starcoder"]

# Minimal GGUF v3 metadata reading and writing (no tensors): enough for vocabulary files.
SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q",
           12: "d"}


def read_gguf(path):
    data = open(path, "rb").read()
    pos = 0

    def take(fmt):
        nonlocal pos
        v = struct.unpack_from("<" + fmt, data, pos)[0]
        pos += struct.calcsize("<" + fmt)
        return v

    def string():
        nonlocal pos
        n = take("Q")
        s = data[pos:pos + n]
        pos += n
        return s

    def value(t):
        if t == 8:
            return string()
        if t == 9:
            et, n = take("I"), take("Q")
            return (et, [value(et) for _ in range(n)])
        return take(SCALARS[t])

    assert data[:4] == b"GGUF"
    pos = 4
    take("I")  # version
    n_tensors, n_kv = take("Q"), take("Q")
    assert n_tensors == 0
    kv = []
    for _ in range(n_kv):
        key = string()
        t = take("I")
        kv.append((key, t, value(t)))
    return kv


def write_gguf(path, kv):
    out = bytearray(b"GGUF" + struct.pack("<IQQ", 3, 0, len(kv)))

    def string(s):
        out.extend(struct.pack("<Q", len(s)) + s)

    def value(t, v):
        if t == 8:
            string(v)
        elif t == 9:
            et, items = v
            out.extend(struct.pack("<IQ", et, len(items)))
            for item in items:
                value(et, item)
        else:
            out.extend(struct.pack("<" + SCALARS[t], v))

    for key, t, v in kv:
        string(key)
        out.extend(struct.pack("<I", t))
        value(t, v)
    open(path, "wb").write(bytes(out))


def crashes_llama_cpp(b):
    """Whether llama.cpp's lenient UTF-8 decoder yields a code point above U+10FFFF."""
    i = 0
    while i < len(b):
        c = b[i]
        n = 1 if c < 0x80 else 0 if c < 0xC0 else 2 if c < 0xE0 else 3 if c < 0xF0 else \
            4 if c < 0xF8 else 0
        if n <= 1 or i + n - 1 >= len(b) or any((x & 0xC0) != 0x80 for x in b[i + 1:i + n]):
            i += 1
            continue
        cpt = c & (0xFF >> (n + 1))
        for x in b[i + 1:i + n]:
            cpt = (cpt << 6) | (x & 0x3F)
        if cpt > 0x10FFFF:
            return True
        i += n
    return False


def inputs():
    texts = []
    for line in open(CORPUS):
        if line.strip():
            texts.append(bytes.fromhex(json.loads(line)["hex"]))
    sep = b"\n__ggml_vocab_test__\n"
    inp = open(GPT2_VOCAB + ".inp", "rb").read()
    pos = 0
    while True:
        end = inp.find(sep, pos)
        if end < 0:
            break
        texts.append(inp[pos:end])
        pos = end + len(sep)
    seen = set()
    result = []
    for t in texts:
        if t not in seen and not crashes_llama_cpp(t):
            seen.add(t)
            result.append(t)
    return result


def main():
    import llama_cpp  # llama-cpp-python, e.g. /opt/llamaref

    texts = inputs()

    kv = read_gguf(GPT2_VOCAB)
    ids = {t: {} for t in texts}
    special = {t: {} for t in texts}
    with tempfile.TemporaryDirectory() as tmp:
        for pre in PRES:
            path = os.path.join(tmp, "vocab-%s.gguf" % pre)
            write_gguf(path, [(k, t, pre.encode() if k == b"tokenizer.ggml.pre" else v)
                              for k, t, v in kv])
            llm = llama_cpp.Llama(model_path=path, vocab_only=True, verbose=False)
            for t in texts:
                ids[t][pre] = llm.tokenize(t, add_bos=False, special=False)
                special[t][pre] = llm.tokenize(t, add_bos=False, special=True)
            del llm
    with open(PRE_OUT, "w") as f:
        for t in texts:
            record = {"hex": t.hex(), "ids": ids[t]}
            diff = {p: v for p, v in special[t].items() if v != ids[t][p]}
            if diff:
                record["ids_special"] = diff
            f.write(json.dumps(record, separators=(",", ":")) + "\n")
    print("wrote %d inputs x %d pre-tokenizers to %s" % (len(texts), len(PRES), PRE_OUT),
          file=sys.stderr)

    llm = llama_cpp.Llama(model_path=SPM_VOCAB, vocab_only=True, verbose=False)
    with open(SPM_OUT, "w") as f:
        for t in texts:
            record = {"hex": t.hex(),
                      "ids": llm.tokenize(t, add_bos=False, special=False),
                      "ids_special": llm.tokenize(t, add_bos=False, special=True),
                      "ids_bos": llm.tokenize(t, add_bos=True, special=False)}
            f.write(json.dumps(record, separators=(",", ":")) + "\n")
    print("wrote %d inputs to %s" % (len(texts), SPM_OUT), file=sys.stderr)


if __name__ == "__main__":
    main()
