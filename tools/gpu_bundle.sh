#!/usr/bin/env bash
# Packs what a GPU machine needs to run braid's CUDA tests and benchmarks without building
# there: the build/cuda binaries (cuda_kernels_tests, device_step_cuda_tests, gpu_train_bench) and the
# Debian shared libraries they link (not libc, not CUDA's: the driver and cuBLASLt come from
# the GPU machine), in gpu-bundle/bundle.tar.xz. tools/gpu_run.sh unpacks and runs it there.
#
#   cmake -S . -B build/gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DBRAID_CUDA=ON -DBRAID_WITH_MPI=OFF \
#         -DBRAID_NATIVE=OFF -DCMAKE_CXX_FLAGS=-march=x86-64-v4 -DCMAKE_C_FLAGS=-march=x86-64-v4
#   cmake --build build/gpu --target cuda_kernels_tests device_step_cuda_tests gpu_train_bench nccl_tests \
#         trainer_cuda_tests braid
#   tools/gpu_bundle.sh build/gpu  # then carry gpu-bundle to the GPU machine (default: build/cuda)
set -euo pipefail
cd "$(dirname "$0")/.."
b=${1:-build/cuda}
bins=("$b/src/braid/kernels/cuda_kernels_tests" "$b/src/braid/train/device_step_cuda_tests"
      "$b/bench/gpu_train_bench")
[[ -x $b/src/braid/comm/nccl_tests ]] && bins+=("$b/src/braid/comm/nccl_tests")
[[ -x $b/src/braid/train/trainer_cuda_tests ]] && bins+=("$b/src/braid/train/trainer_cuda_tests")
[[ -x $b/src/braid/cli/braid ]] && bins+=("$b/src/braid/cli/braid")
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib" gpu-bundle
cp "${bins[@]}" "$stage/bin/"
# The shared libraries the binaries load, less the C runtime and CUDA's own.
ldd "${bins[@]}" | awk '/=> \//{print $3}' | sort -u |
  grep -v -E '/(libc|libm|libdl|librt|libpthread|ld-linux[^/]*|libcublas[^/]*|libcuda[^/]*|libnccl)\.so' |
  while read -r lib; do cp -L "$lib" "$stage/lib/"; done
tar -C "$stage" -cf - bin lib | xz -T2 -6 > gpu-bundle/bundle.tar.xz
ls -la gpu-bundle/bundle.tar.xz
