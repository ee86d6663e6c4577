#!/usr/bin/env bash
# Runs on the GPU machine, from a bundle that scripts/gpu_bundle.sh made: the CUDA tests, then
# `baton bench engine --device cuda` on synthetic models written there (the default model does
# not fit a call), then `baton bench handoff` between two workers on the GPU over NCCL and gRPC.
# Everything it prints is also written under $OUT (or /tmp/gpu-out).
#   bash gpu-bundle/gpu_run.sh [tests|bench|handoff|profile|all]   (default all)
# NCCL: the machine's libnccl.so.2, or $BATON_NCCL_LIBRARY (two ranks on one GPU need 2.30+).
set -uo pipefail
bundle="$(cd "$(dirname "$0")" && pwd)"
out="${OUT:-/tmp/gpu-out}"
mkdir -p "$out"
what="${1:-all}"
cublas="$(find /usr/local /opt /usr/lib -name 'libcublas.so.13*' 2>/dev/null | head -1)"
if [ -z "$cublas" ]; then
  echo "gpu_run: no libcublas.so.13 on this machine" >&2
  exit 1
fi
export LD_LIBRARY_PATH="$bundle/lib:$(dirname "$cublas")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv |
  tee "$out/gpu.txt"
echo "cuBLAS from $(dirname "$cublas")" | tee -a "$out/gpu.txt"

if [ "$what" = tests ] || [ "$what" = all ]; then
  for t in device_info_test cuda_backend_test cuda_transformer_test prefill_scheduler_test \
      grpc_push_into_reservations_test nccl_link_factory_test nccl_link_test cublas_library_test; do
    timeout 300 "$bundle/bin/$t" --gtest_brief=1 2>&1 | tee "$out/$t.txt" | tail -40
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

bench() {  # bench NAME SHAPE TYPE LAYERS PROMPT_TOKENS BATCHES
  local model="/tmp/$1.gguf"
  [ -f "$model" ] || timeout 240 "$bundle/bin/baton" make-model --out "$model" --shape "$2" \
    --type "$3" ${4:+--layers $4} > /dev/null || { echo "make-model $1 failed"; return; }
  timeout 300 "$bundle/bin/baton" bench engine --model "$model" --device cuda \
    --prompt-tokens "$5" --decode-tokens 64 --batch-sizes "$6" --repeats 2 2>&1 |
    tee "$out/bench-$1-$5.json"
}
if [ "$what" = bench ] || [ "$what" = all ]; then
  bench smollm2-q4_1 smollm2-135m q4_1 "" 512 1,8,32,128
  bench llama8b-q4_0 llama-3-8b q4_0 "" 2048 1,8,32,128
  bench llama8b-q4_0 llama-3-8b q4_0 "" 512 1
  bench llama8b-q4_k_m llama-3-8b q4_k_m "" 2048 1,32
fi

# The KV hand-off between two workers on this GPU, from the synthetic 8B-shaped model: the
# pure transfer over NCCL (refused, saying why, where NCCL cannot link two ranks on one GPU) and
# over gRPC from GPU memory, then TTFT disaggregated / colocated at 2048 tokens.
if [ "$what" = handoff ] || [ "$what" = all ]; then
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

# Nsight Compute: the kernels of one decode step of the default model's shape (time per
# kernel), and the weight-streaming kernel's memory throughput on the 8B shape.
ncu="$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)"
if { [ "$what" = profile ] || [ "$what" = all ]; } && [ -n "$ncu" ]; then
  step=(bench engine --device cuda --prompt-tokens 16 --decode-tokens 16 --batch-sizes 1
        --repeats 1)
  timeout 120 "$ncu" --clock-control none --print-summary per-kernel --launch-skip 2000 \
    --launch-count 500 "$bundle/bin/baton" "${step[@]}" --model /tmp/smollm2-q4_1.gguf \
    > "$out/ncu-smollm2-step.txt" 2>&1
  grep -E '^  [A-Za-z_].*\(|Duration|Invocations' "$out/ncu-smollm2-step.txt" | head -80
  timeout 90 "$ncu" --clock-control none --kernel-name regex:GemvTiled --launch-count 7 \
    --section SpeedOfLight "$bundle/bin/baton" "${step[@]}" --model /tmp/llama8b-q4_0.gguf \
    > "$out/ncu-llama8b-gemv.txt" 2>&1
  grep -E 'GemvTiled|DRAM Throughput|Memory Throughput|Duration' "$out/ncu-llama8b-gemv.txt"
fi
