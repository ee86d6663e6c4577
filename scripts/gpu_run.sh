#!/usr/bin/env bash
# Runs on the GPU machine, from a bundle that scripts/gpu_bundle.sh made: the CUDA tests, the
# quantized products' sweep (`baton bench products`: every matrix-vector variant for 1-8 rows,
# every tensor-core variant, the f16 GEMM and cuBLAS alone past 8 rows and for 512, 2048 and
# 8192-token prefills, each checked and timed, the table chosen), then `baton bench engine
# --device cuda` on synthetic models written there (the default model does not fit a call), as
# the first version ran (exact decode products, no step graphs: the baseline), as built, and
# with the sweep's table and the tensor-core attention; then `baton bench handoff` between two
# workers on the GPU over NCCL and gRPC. Everything it prints is also written under $OUT (or
# /tmp/gpu-out).
#   bash gpu-bundle/gpu_run.sh [tests] [sweep] [bench] [handoff] [profile] | all   (default all)
# A call on the GPU machine may run 10 minutes: `tests sweep bench` in one (the bench runs with
# the table the sweep wrote), `handoff profile` in another; or `tests sweep`, then
# `PRODUCT_TABLE=product-table.txt ... bench` with the table the first call brought back.
# NCCL: the machine's libnccl.so.2, or $BATON_NCCL_LIBRARY (two ranks on one GPU need 2.30+).
set -uo pipefail
bundle="$(cd "$(dirname "$0")" && pwd)"
out="${OUT:-/tmp/gpu-out}"
mkdir -p "$out"
parts=" ${*:-all} "
wants() { [[ "$parts" == *" $1 "* || "$parts" == *" all "* ]]; }
cublas="$(find /usr/local /opt /usr/lib -name 'libcublas.so.13*' 2>/dev/null | head -1)"
if [ -z "$cublas" ]; then
  echo "gpu_run: no libcublas.so.13 on this machine" >&2
  exit 1
fi
export LD_LIBRARY_PATH="$bundle/lib:$(dirname "$cublas")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv |
  tee "$out/gpu.txt"
echo "cuBLAS from $(dirname "$cublas")" | tee -a "$out/gpu.txt"

if wants tests; then
  for t in device_info_test cuda_backend_test quantized_matmul_test cuda_transformer_test \
      prefill_scheduler_test \
      grpc_push_into_reservations_test nccl_link_factory_test nccl_link_test cublas_library_test; do
    timeout 300 "$bundle/bin/$t" --gtest_brief=1 2>&1 | tee "$out/$t.txt" | tail -8
    echo "$t: exit ${PIPESTATUS[0]}" | tee -a "$out/tests-summary.txt"
  done
  # compute-sanitizer's memcheck over the kernels' tests of every shape class.
  if command -v compute-sanitizer > /dev/null; then
    timeout 60 compute-sanitizer --tool memcheck "$bundle/bin/cuda_backend_test" --gtest_brief=1 \
      --gtest_filter='*KvTest*:*WideMatrix*:*MatchesTheReference/q4_K*:*MatchesTheReference/f32*' \
      > "$out/memcheck.txt" 2>&1
    echo "memcheck: exit $?" | tee -a "$out/tests-summary.txt"
    grep -E 'ERROR SUMMARY|PASSED|FAILED' "$out/memcheck.txt"
  fi
fi

if wants sweep; then
  # Decode: both models' shapes, 1 to 256 rows. Prefill: the 8B shape at 512, 2048 and 8192
  # tokens (the output matrix only up to 256 rows). Each writes its table's entries.
  timeout 300 "$bundle/bin/baton" bench products --device cuda --repeats 20 \
    --rows 1,2,4,8,16,32,64,128,256 > "$out/products-sweep-decode.md" 2>&1
  echo "products sweep, decode: exit $?" | tee -a "$out/tests-summary.txt"
  timeout 240 "$bundle/bin/baton" bench products --device cuda --repeats 10 \
    --models llama-3-8b --types q4_0,q8_0,q4_K,q6_K --rows 512,2048,8192 \
    > "$out/products-sweep-prefill.md" 2>&1
  echo "products sweep, prefill: exit $?" | tee -a "$out/tests-summary.txt"
  for f in decode prefill; do
    grep -E 'copy bandwidth|NO CORRECT|^table|^    \{' "$out/products-sweep-$f.md" | head -150
    grep -E '\| NO \|' "$out/products-sweep-$f.md" | head -20
  done
  # The two tables together (their row buckets do not overlap): what the "swept" bench runs
  # below use through BATON_CUDA_PRODUCT_TABLE, and what product_variants.cc takes.
  cat "$out"/products-sweep-{decode,prefill}.md | grep -E '^    \{' > "$out/product-table.txt"
fi

# The table the bench's swept and flash runs use: this call's sweep's, else $PRODUCT_TABLE (one
# an earlier call wrote, carried in).
table="$out/product-table.txt"
[ -s "$table" ] || table="${PRODUCT_TABLE:-$table}"
bench() {  # bench NAME SHAPE TYPE LAYERS PROMPT_TOKENS BATCHES
  local model="/tmp/$1.gguf"
  [ -f "$model" ] || timeout 240 "$bundle/bin/baton" make-model --out "$model" --shape "$2" \
    --type "$3" ${4:+--layers $4} > /dev/null || { echo "make-model $1 failed"; return; }
  # exact: the first version (f32 decode products, no graphs: the baseline); built: this build
  # as it runs by default; swept: with the table this call's sweep chose (where it ran); flash:
  # that and prefill attention on the tensor cores. (Without step graphs, "eager", was measured
  # on 2026-11-28: BATON_CUDA_NO_GRAPHS=1.)
  local runs=(exact built)
  [ -s "$table" ] && runs+=(swept flash)
  for run in "${runs[@]}"; do
    local env=()
    case "$run" in
      exact) env=(BATON_CUDA_EXACT_PRODUCTS=1 BATON_CUDA_NO_GRAPHS=1) ;;
      swept) env=(BATON_CUDA_PRODUCT_TABLE="$table") ;;
      flash) env=(BATON_CUDA_PRODUCT_TABLE="$table" BATON_CUDA_FLASH_ATTENTION=1) ;;
    esac
    env "${env[@]}" timeout 300 "$bundle/bin/baton" bench engine --model "$model" --device cuda \
      --prompt-tokens "$5" --decode-tokens 64 --batch-sizes "$6" --repeats 2 \
      > "$out/bench-$1-$5-$run.json" 2>&1
    echo "== $1 prompt $5, $run"
    grep -E '"[0-9]+"|decode_tokens_per_s|decode_roofline_fraction|prefill_tokens|of_cublas' \
      "$out/bench-$1-$5-$run.json" | tr -s ' ' | paste -sd' '
  done
}
if wants bench; then
  bench smollm2-q4_1 smollm2-135m q4_1 "" 512 1,8,32
  bench llama8b-q4_0 llama-3-8b q4_0 "" 2048 1,8,32,128
  bench llama8b-q4_k_m llama-3-8b q4_k_m "" 2048 1,32
fi

# The KV hand-off between two workers on this GPU, from the synthetic 8B-shaped model: the
# pure transfer over NCCL (refused, saying why, where NCCL cannot link two ranks on one GPU) and
# over gRPC from GPU memory, then TTFT disaggregated / colocated at 2048 tokens.
if wants handoff; then
  model=/tmp/llama8b-q4_0.gguf
  [ -f "$model" ] || timeout 240 "$bundle/bin/baton" make-model --out "$model" \
    --shape llama-3-8b --type q4_0 > /dev/null
  for transport in nccl grpc; do
    timeout 240 "$bundle/bin/baton" bench handoff --model "$model" --device cuda \
      --transport "$transport" --no-e2e --prompt-tokens 128,512,2048,8192 --repeats 3 2>&1 |
      tee "$out/handoff-$transport.json" | grep -E 'bench handoff|error|NCCL'
  done
  timeout 300 "$bundle/bin/baton" bench handoff --model "$model" --device cuda \
    --transport auto --prompt-tokens 2048 --repeats 3 2>&1 | tee "$out/handoff-e2e.json" |
    grep -E 'bench handoff|ttft_ratio|error'
fi

# Where a decode step's time goes: Nsight Systems (where the machine has it) over a short
# decode of the 8B shape, batch 1: the kernels' total time per kind against the CUDA API's (a
# step whose API time exceeds its kernels' is bound by the host's launches); else Nsight
# Compute's per-kernel durations of one step.
nsys="$(command -v nsys ||
  ls /opt/nvidia/nsight-systems/*/bin/nsys /usr/local/cuda/bin/nsys 2>/dev/null | head -1)"
ncu="$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)"
if wants profile; then
  model=/tmp/llama8b-q4_0.gguf
  [ -f "$model" ] || timeout 240 "$bundle/bin/baton" make-model --out "$model" \
    --shape llama-3-8b --type q4_0 > /dev/null
  step=(bench engine --device cuda --prompt-tokens 16 --decode-tokens 32 --batch-sizes 1
        --repeats 1 --model "$model")
  if [ -n "$nsys" ]; then
    timeout 180 "$nsys" profile -o /tmp/step --force-overwrite true --trace cuda \
      "$bundle/bin/baton" "${step[@]}" > "$out/nsys-run.txt" 2>&1
    timeout 120 "$nsys" stats --report cuda_gpu_kern_sum,cuda_api_sum --format csv \
      /tmp/step.nsys-rep > "$out/nsys-llama8b-step.csv" 2>&1
    head -c 6000 "$out/nsys-llama8b-step.csv"
  elif [ -n "$ncu" ]; then
    timeout 150 "$ncu" --clock-control none --print-summary per-kernel --launch-skip 3000 \
      --launch-count 700 "$bundle/bin/baton" "${step[@]}" > "$out/ncu-llama8b-step.txt" 2>&1
    grep -E '^  [A-Za-z_].*\(|Duration|Invocations' "$out/ncu-llama8b-step.txt" | head -120
  else
    echo "profile: neither nsys nor ncu on this machine"
  fi
fi
