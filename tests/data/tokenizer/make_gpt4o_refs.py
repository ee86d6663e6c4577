#!/usr/bin/env python3
"""llama.cpp's ids for the "gpt-4o" pre-tokenizer (gpt-oss, Llama 4), for tokenizer_test.cc.

As make_extra_tokenizer_refs.py does for the other pre-tokenizers: the GPT-2 vocabulary of
llama.cpp's test vectors re-labelled tokenizer.ggml.pre = "gpt-4o", every input of that script
tokenized by llama.cpp, here through its own llama-tokenize binary (llama-cpp-python 0.3.36's
vendored llama.cpp, scripts/reference/README.md) rather than the Python bindings:

    {"hex": <input bytes as hex>, "ids": [...]}

(special tokens not parsed: llama-tokenize has no flag to parse them).

Runs by hand, not in CI; deterministic:

    tests/data/tokenizer/make_gpt4o_refs.py LLAMA_BIN_DIR
"""
import json
import os
import subprocess
import sys
import tempfile

from make_extra_tokenizer_refs import GPT2_VOCAB, HERE, inputs, read_gguf, write_gguf

OUT = os.path.join(HERE, "gpt2_pre_gpt4o.jsonl")

# Inputs where o200k's splitting differs from the others': case changes inside words, upper-case
# contractions, letters outside ASCII of either case, marks, digit runs, slashes before newlines.
CASED = [
    "HelloWorld", "getHTTPResponseCode", "parseJSONString", "XMLHttpRequest", "iPhone iPad",
    "McDonald's", "I'M HERE", "YOU'LL SEE", "don'T", "WE'VE'RE", "camelCaseVariableName",
    "snake_case_name", "SCREAMING_SNAKE", "ÉcoleNormale", "straßeStraße", "ÀÉÎõü", "naïveCafé",
    "ΑθήναΑθήνα", "МоскваMoscow", "ǅungla ǈudevit", "e\u0301clair Cafe\u0301", "ﬁnance ﬂow",
    "1234567890", "3.14159 2,718", "a1b2C3D4", "x/\n\ny", "path/to/file\n", "a//b\r\n",
    "  leading and trailing  ", "tab\tSeparated\tValues", "emoji😀Text", "中文English混合",
    "ABCdefGHI", "aBcDeF", "The Quick BROWN fox'S", "O'Neil O'NEIL", "x'sY'S",
]


def tokenize(binary, vocab, text):
    out = subprocess.run(
        [binary, "-m", vocab, "--stdin", "--ids", "--no-bos", "--no-escape", "--log-disable",
         "--no-parse-special"],
        input=text, capture_output=True, check=True).stdout
    return json.loads(out.decode().strip().splitlines()[-1])


def main():
    binary = os.path.join(sys.argv[1], "llama-tokenize")
    texts = inputs()
    texts += [c.encode() for c in CASED]
    with tempfile.TemporaryDirectory() as tmp:
        vocab = os.path.join(tmp, "vocab-gpt-4o.gguf")
        write_gguf(vocab, [(k, t, b"gpt-4o" if k == b"tokenizer.ggml.pre" else v)
                           for k, t, v in read_gguf(GPT2_VOCAB)])
        with open(OUT, "w") as f:
            for t in texts:
                record = {"hex": t.hex(), "ids": tokenize(binary, vocab, t)}
                f.write(json.dumps(record, separators=(",", ":")) + "\n")
    print("wrote %d inputs to %s" % (len(texts), OUT), file=sys.stderr)


if __name__ == "__main__":
    main()
