#!/usr/bin/env bash
# Builds baton with CUDA here and collects what the GPU machine runs into gpu-bundle/ (ignored):
# `baton` and the CUDA tests, stripped, with every shared library ldd lists that a bare GPU
# machine lacks (all but the C library's family, libstdc++ and libgcc, which the machine's newer
# system has, and the CUDA driver and cuBLAS, which it brings itself), plus scripts/gpu_run.sh.
# The GPU machine has CUDA, cuBLAS and NCCL but none of our Debian packages and no registry.
#
# It is packed into gpu-bundle.tar.xz (ignored; about 10 MB, where the directory is over the 64 MiB
# a call carries):
#   scripts/gpu_bundle.sh        then carry gpu-bundle.tar.xz and run:
#                                tar -xJf gpu-bundle.tar.xz && bash gpu-bundle/gpu_run.sh
set -euo pipefail
cd "$(dirname "$0")/.."
binaries=(baton device_info_test cuda_backend_test quantized_matmul_test cuda_transformer_test
  prefill_scheduler_test
  grpc_push_into_reservations_test nccl_link_test nccl_link_factory_test cublas_library_test)
flock /tmp/baton-build.lock scripts/build.sh --target "${binaries[@]}"
if [ ! -f build/kernels/cuda/libbaton_kernels_cuda.a ]; then
  echo "gpu_bundle: this build has no CUDA backend (no toolkit at /usr/local/cuda?)" >&2
  exit 1
fi
out=gpu-bundle
rm -rf "$out"
mkdir -p "$out/bin" "$out/lib"
for b in "${binaries[@]}"; do strip -o "$out/bin/$b" "build/bin/$b"; done
ldd "$out"/bin/* | awk '/=> \//{print $3}' | sort -u | while read -r lib; do
  case "$(basename "$lib")" in
    libc.so.*|libm.so.*|libpthread.so.*|libdl.so.*|librt.so.*|ld-linux*|libstdc++.so.*|\
    libgcc_s.so.*|libcuda.so.*|libcublas*|libcudart*|libnccl*) ;;
    *) cp -L "$lib" "$out/lib/" ;;
  esac
done
cp scripts/gpu_run.sh "$out/"
tar -cJf gpu-bundle.tar.xz "$out"
du -sh "$out" gpu-bundle.tar.xz | awk '{print "gpu_bundle: " $1 " in " $2}'
