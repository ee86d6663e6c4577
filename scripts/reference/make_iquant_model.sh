#!/usr/bin/env bash
# Writes tests/data/engine/iquants_tiny256.gguf, a tiny llama (`baton make-model --shape
# tiny-256`, rows of 256 values) whose matrices llama-quantize wrote in every i-quant type and
# MXFP4, and tests/data/engine/iquants_tiny256_c128.kld, llama.cpp's log-probabilities over the
# reference text for it: the base that tests/engine/architecture_agreement_test.cc scores baton
# against. IQ1/IQ2 types need an importance matrix; a uniform one (every column weighted 1,
# llama.cpp's legacy imatrix format) stands in. Run by hand, not in CI.
# Usage: scripts/reference/make_iquant_model.sh LLAMA_BIN_DIR   (llama-quantize's and
# llama-perplexity's folder; README.md here says which build). Needs build/bin/baton.
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=${1:?usage: $0 LLAMA_BIN_DIR}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
out=tests/data/engine/iquants_tiny256
build/bin/baton make-model --shape tiny-256 --out "$tmp/f32.gguf"
python3 - "$tmp/uniform.imatrix" <<'PY'
import struct, sys
entries = [("token_embd.weight", 256)]
for layer in range(2):
    for name, n_cols in [("attn_q", 256), ("attn_k", 256), ("attn_v", 256), ("attn_output", 256),
                         ("ffn_gate", 256), ("ffn_up", 256), ("ffn_down", 512)]:
        entries.append((f"blk.{layer}.{name}.weight", n_cols))
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<i", len(entries)))
    for name, n in entries:
        f.write(struct.pack("<i", len(name)) + name.encode() + struct.pack("<ii", 1, n))
        f.write(struct.pack(f"<{n}f", *([1.0] * n)))
PY
# Every type at least once; IQ4_NL and MXFP4 twice (rows of 512 and of 256).
types=(
  'blk\.0\.attn_q=iq2_xxs' 'blk\.0\.attn_k=iq2_xs' 'blk\.0\.attn_v=iq2_s'
  'blk\.0\.attn_output=iq3_xxs' 'blk\.0\.ffn_gate=iq3_s' 'blk\.0\.ffn_up=iq1_s'
  'blk\.0\.ffn_down=iq1_m' 'blk\.1\.attn_q=iq4_nl' 'blk\.1\.attn_k=iq4_xs'
  'blk\.1\.attn_v=mxfp4' 'blk\.1\.attn_output=iq4_xs' 'blk\.1\.ffn_gate=iq2_xxs'
  'blk\.1\.ffn_up=mxfp4' 'blk\.1\.ffn_down=iq4_nl'
)
args=()
for t in "${types[@]}"; do args+=(--tensor-type "$t"); done
LD_LIBRARY_PATH="$bin" "$bin/llama-quantize" --imatrix "$tmp/uniform.imatrix" \
  --token-embedding-type iq3_s "${args[@]}" "$tmp/f32.gguf" "$out.gguf" Q8_0 \
  > "$tmp/quantize.log" 2>&1 || { cat "$tmp/quantize.log"; exit 1; }
grep -E "converting to|size = " "$tmp/quantize.log" | head -20
LD_LIBRARY_PATH="$bin" "$bin/llama-perplexity" -m "$out.gguf" \
  -f tests/data/engine/reference_text.txt -c 128 --chunks 2 -t 2 -b 128 \
  --kl-divergence-base "${out}_c128.kld" > "$tmp/perplexity.log" 2>&1 ||
  { cat "$tmp/perplexity.log"; exit 1; }
grep -E "Final estimate" "$tmp/perplexity.log" | tail -1
