#!/usr/bin/env bash
# The accuracy contract, measured on the real model (docs/ACCURACY.md): baton's fast kernels and
# llama.cpp, both on the same quantized weights (the default model, Q4_1, or MODEL=FILE), scored by
# KL divergence against an exact (f32) computation of those weights. Two bases, so the file format
# is crossed both ways too:
#   llama-f32   llama-perplexity on an F32 copy of the model (`llama-quantize --allow-requantize
#               MODEL OUT F32`: the weights dequantized, nothing re-rounded); every chunk
#   baton-ref   `baton perplexity --reference-kernels` (scalar reference kernels, double sums;
#               slow, so only the first --ref-chunks chunks)
# and baton's reference scored against llama-f32: how far apart the two exact computations are.
# The text (default) is the repository's own prose: README.md, docs/*.md and the engine tests'
# reference text, about 20K tokens (40 chunks of 512); 5 chunks alone move the KLD by about 5%
# between equally accurate arithmetics.
#
# usage: bench/kld_experiment.sh --llama-bin DIR [--text FILE] [--ctx N] [--ref-chunks N] [--threads N] [--out DIR]
# DIR holds llama.cpp's llama-perplexity and llama-quantize, built natively outside the
# repository:
#   pip download --no-deps --no-binary :all: llama-cpp-python && tar xzf llama_cpp_python-*.tar.gz
#   cmake -S llama_cpp_python-*/vendor/llama.cpp -B B -G Ninja -DGGML_NATIVE=ON \
#     -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF && cmake --build B --target llama-perplexity \
#     llama-quantize          # DIR is then B/bin
# Writes DIR (default build/bench-results/kld-DATE): the base files (about 25 MB per 512-token
# chunk), every run's output, and summary.tsv; prints the table.
set -euo pipefail
cd "$(dirname "$0")/.."

llama_bin="" text="" ctx=512 ref_chunks=5 threads=2 out=""
while (($#)); do
  case "$1" in
    --llama-bin) llama_bin=$2; shift 2 ;;
    --text) text=$2; shift 2 ;;
    --ctx) ctx=$2; shift 2 ;;
    --ref-chunks) ref_chunks=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) sed -n '15p' "$0" | sed 's/^# //' >&2; exit 2 ;;
  esac
done
baton=${BATON:-build/bin/baton}
model=${MODEL:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
out=${out:-build/bench-results/kld-$(date +%Y%m%d-%H%M%S)}
for tool in llama-perplexity llama-quantize; do
  [ -x "$llama_bin/$tool" ] || { echo "kld_experiment: no $tool in '$llama_bin' (--llama-bin)" >&2; exit 1; }
done
[ -x "$baton" ] || { echo "kld_experiment: no baton binary at $baton" >&2; exit 1; }
mkdir -p "$out"
if [ -z "$text" ]; then
  text="$out/text.txt"
  cat README.md docs/*.md tests/data/engine/reference_text.txt >"$text"
fi

"$llama_bin/llama-quantize" --allow-requantize "$model" "$out/model-f32.gguf" F32 \
  >"$out/quantize.log" 2>&1
"$llama_bin/llama-perplexity" -m "$out/model-f32.gguf" -f "$text" -c "$ctx" -t "$threads" \
  --kl-divergence-base "$out/llama-f32.kld" >"$out/base-llama-f32.log" 2>&1
"$baton" perplexity --model "$model" --file "$text" --ctx "$ctx" --threads "$threads" \
  --chunks "$ref_chunks" --reference-kernels --kl-divergence-base "$out/baton-ref.kld" \
  >"$out/base-baton-ref.log" 2>&1

# score ENGINE BASE [FLAGS]: one scoring run, its output in $out/ENGINE-vs-BASE.log.
score() {
  local engine=$1 base=$2; shift 2
  local log="$out/$engine-vs-$base.log"
  case "$engine" in
    llama) "$llama_bin/llama-perplexity" -m "$model" -t "$threads" -c "$ctx" \
                  --kl-divergence-base "$out/$base.kld" --kl-divergence >"$log" 2>&1 ;;
    llama-no-fa) "$llama_bin/llama-perplexity" -m "$model" -t "$threads" -c "$ctx" -fa off \
                  --kl-divergence-base "$out/$base.kld" --kl-divergence >"$log" 2>&1 ;;
    baton-fast) "$baton" perplexity --model "$model" --threads "$threads" \
                  --kl-divergence-base "$out/$base.kld" --kl-divergence >"$log" 2>&1 ;;
    baton-ref)  "$baton" perplexity --model "$model" --threads "$threads" --reference-kernels \
                  --chunks "$ref_chunks" --kl-divergence-base "$out/$base.kld" --kl-divergence \
                  >"$log" 2>&1 ;;
  esac
  # Both engines print llama.cpp's summary lines.
  local kld top ratio
  kld=$(grep -m1 '^Mean    KLD:' "$log" | awk '{print $3}')
  top=$(grep -m1 '^Same top p:' "$log" | awk '{print $4}')
  ratio=$(grep -m1 '^Mean PPL(Q)/PPL(base)' "$log" | awk -F: '{print $2}' | awk '{print $1}')
  printf '%s\t%s\t%s\t%s\t%s\n' "$engine" "$base" "$kld" "$top" "$ratio" | tee -a "$out/summary.tsv"
}

printf 'engine\tbase\tmean_kld\tsame_top_pct\tppl_ratio\n' | tee "$out/summary.tsv"
for engine in llama llama-no-fa baton-fast; do score "$engine" llama-f32; done
for engine in llama baton-fast; do score "$engine" baton-ref; done
score baton-ref llama-f32
echo "kld_experiment: results in $out" >&2
