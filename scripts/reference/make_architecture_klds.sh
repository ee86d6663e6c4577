#!/usr/bin/env bash
# Writes tests/data/engine/arch_<shape>_c128.kld: llama.cpp's log-probabilities over the
# reference text (2 chunks of 128 tokens) for each tiny synthetic architecture, the base that
# tests/engine/architecture_agreement_test.cc scores baton against. Run by hand, not in CI.
# Usage: scripts/reference/make_architecture_klds.sh LLAMA_BIN_DIR   (llama-perplexity's folder;
# README.md here says how the committed files' llama.cpp was built). Needs build/bin/baton.
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=${1:?usage: $0 LLAMA_BIN_DIR}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for shape in tiny tiny-qwen3 tiny-gemma3 tiny-qwen3moe tiny-qwen2moe tiny-mixtral tiny-gpt-oss \
    tiny-deepseek2 tiny-deepseek3; do
  build/bin/baton make-model --shape "$shape" --out "$tmp/$shape.gguf"
  "$bin/llama-perplexity" -m "$tmp/$shape.gguf" -f tests/data/engine/reference_text.txt \
    -c 128 --chunks 2 -t 2 -b 128 --kl-divergence-base "tests/data/engine/arch_${shape}_c128.kld" \
    > "$tmp/$shape.log" 2>&1 || { cat "$tmp/$shape.log"; exit 1; }
  grep -E "Final estimate|perplexity:" "$tmp/$shape.log" | tail -1
done
