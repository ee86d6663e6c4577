#!/usr/bin/env python3
"""A llama.cpp KL-divergence base file (llama-perplexity --kl-divergence-base) cut down to what a
test can commit: per scored position, the `--top` tokens of highest log-probability and the
log-probability of the token that follows, as llama.cpp stored them. A full file stores every
token of the vocabulary for every position (about 98 KB a position for a 49152-token vocabulary);
this keeps the part that carries the probability mass, so that hundreds of positions fit in a few
hundred KB. The test (tests/engine/llama_cpp_window_test.cc) scores the KL divergence over the
kept tokens plus one bucket for the rest, a lower bound of the full divergence.

Output (text):
  line 1:  baton-kld-top 1 N_CTX N_VOCAB N_CHUNK TOP
  line 2:  the file's tokens, N_CTX * N_CHUNK ids separated by spaces
  then one line per scored position, chunk after chunk:
           TARGET TARGET_LOGPROB ID:LOGPROB ... (TOP pairs, the most probable first)
Log-probabilities are written with 4 decimals (llama.cpp stores them in steps of 16/65535 nats).

usage: scripts/reference/kld_top_tokens.py IN.kld OUT.txt [--top 128]
"""

import argparse
import array
import struct


def scored_positions(n_ctx):
    return n_ctx // 2 - 1  # llama.cpp scores positions n_ctx/2 .. n_ctx-2


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("input")
    parser.add_argument("output")
    parser.add_argument("--top", type=int, default=128)
    args = parser.parse_args()
    with open(args.input, "rb") as f:
        data = f.read()
    if data[:8] != b"_logits_":
        raise SystemExit(f"{args.input}: not a llama.cpp KL-divergence base file")
    n_ctx, n_vocab, n_chunk = struct.unpack_from("<3i", data, 8)
    offset = 20
    tokens = array.array("i", data[offset:offset + 4 * n_ctx * n_chunk])
    offset += 4 * n_ctx * n_chunk
    row_words = 4 + n_vocab + (n_vocab % 2)  # codes padded to an even count
    n_scored = scored_positions(n_ctx)
    expected = offset + 2 * row_words * n_scored * n_chunk
    if len(data) != expected:
        raise SystemExit(f"{args.input}: {len(data)} bytes, want {expected}")
    lines = [f"baton-kld-top 1 {n_ctx} {n_vocab} {n_chunk} {args.top}",
             " ".join(str(t) for t in tokens)]
    for chunk in range(n_chunk):
        for i in range(n_scored):
            row = array.array("H", data[offset:offset + 2 * row_words])
            offset += 2 * row_words
            scale, floor = struct.unpack("<f", row[0:2].tobytes())[0], \
                struct.unpack("<f", row[2:4].tobytes())[0]
            codes = row[4:4 + n_vocab]
            target = tokens[chunk * n_ctx + n_ctx // 2 + i + 1]
            top = sorted(range(n_vocab), key=lambda v: -codes[v])[:args.top]
            pairs = " ".join(f"{v}:{scale * codes[v] + floor:.4f}" for v in top)
            lines.append(f"{target} {scale * codes[target] + floor:.4f} {pairs}")
    with open(args.output, "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
