#!/usr/bin/env bash
# Runs on a GPU machine (the device tool of this workplace, or any Linux box with an NVIDIA
# GPU, its driver and CUDA 13's cuBLASLt): unpacks gpu-bundle/bundle.tar.xz (tools/gpu_bundle.sh)
# and runs the CUDA kernel tests suite by suite (an illegal address in one would poison the
# CUDA context of the rest), the GPU-vs-CPU training step, then GPT-2 124M training in braid
# beside PyTorch eager and torch.compile (bench/gpu_train_torch.py). Logs go to $OUT (or ./gpu-out).
#
#   tools/gpu_run.sh [all|tests|bench|braid|fusion|measure]
#     braid: tests and braid's bench, no PyTorch; fusion: tests, then braid's bench with the
#     kernels' fused paths off and on (BRAID_CUDA_FUSION, kernels/cuda/runtime.h), alternating;
#     measure: fusion, then torch.compile and `braid train` in the same call (one lease's worth:
#     about 6 minutes on an H200, the most needed first)
set -uo pipefail
cd "$(dirname "$0")/.."
what=${1:-all}
out=${OUT:-gpu-out}
mkdir -p "$out"
b=/tmp/braid-gpu
rm -rf "$b" && mkdir -p "$b" && tar -C "$b" -xJf gpu-bundle/bundle.tar.xz
lt=$(find /usr/local/cuda*/ /usr/lib /opt -name 'libcublasLt.so.13*' 2>/dev/null | head -1)
nccl=$(find /usr/local/cuda*/ /usr/lib /opt -name 'libnccl.so.2*' 2>/dev/null | head -1)
export LD_LIBRARY_PATH="$b/lib:$(dirname "${lt:-/x/x}"):$(dirname "${nccl:-/x/x}")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
{
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader
  lscpu | grep -m1 'Model name'
  echo "cuBLASLt: $lt"
  echo "NCCL: $nccl"
} 2>&1 | tee "$out/machine.txt"

run() {  # run NAME SECONDS CMD...: its log in $out/NAME.log, a one-line verdict on stdout
  local name=$1 secs=$2
  shift 2
  local t0=$SECONDS
  timeout -k 5 "$secs" "$@" > "$out/$name.log" 2>&1
  local rc=$?
  echo "$name: rc=$rc ($((SECONDS - t0)) s) $(grep -E '^\[  (PASSED|FAILED) ' "$out/$name.log" |
    tr '\n' ' ' | cut -c1-300)"
  return $rc
}

if [[ $what == all || $what == tests || $what == braid || $what == fusion || $what == measure ]]; then
  for suite in CudaMemory Dtypes/CudaLinear Cuda/CudaElementwise Cuda/CudaCrossEntropy \
               Dtypes/CudaNnOps Dtypes/CudaAttention; do
    run "kernels_${suite//\//_}" 120 "$b/bin/cuda_kernels_tests" --gtest_filter="$suite.*"
    grep -E '^\[  FAILED  \]|Failure|error' "$out/kernels_${suite//\//_}.log" | head -8
  done
  run gpu_step 150 "$b/bin/device_step_cuda_tests"
  grep -E '^\[  FAILED  \]|Failure|Which is|error' "$out/gpu_step.log" | head -12
  if [[ -x $b/bin/nccl_tests ]]; then
    run nccl 150 "$b/bin/nccl_tests"
    grep -E '^\[  FAILED  \]|Failure|Which is|error' "$out/nccl.log" | head -12
  fi
  if [[ -x $b/bin/trainer_cuda_tests ]]; then  # braid train on the GPU, over NCCL at world 1
    run trainer_cuda 200 "$b/bin/trainer_cuda_tests"
    grep -E '^\[  FAILED  \]|Failure|Which is|error' "$out/trainer_cuda.log" | head -12
  fi
fi
if [[ $what == all || $what == bench || $what == braid ]]; then
  run bench_braid 120 "$b/bin/gpu_train_bench" --batch 16 --seq 1024 --steps 10 --warmup 3 ||
    run bench_braid_generic_attention 120 env BRAID_CUDA_ATTENTION=generic \
      "$b/bin/gpu_train_bench" --batch 16 --seq 1024 --steps 10 --warmup 3
  grep -h -E '^(device|measured|model|braid|allocator|RESULT)' "$out"/bench_braid*.log
  tail -3 "$out"/bench_braid*.log
  run bench_braid_profile 120 env BRAID_CUDA_PROFILE=1 "$b/bin/gpu_train_bench" --batch 16 \
    --seq 1024 --steps 10 --warmup 3
  sed -n '/BRAID_CUDA_PROFILE/,$p' "$out/bench_braid_profile.log" | head -40
fi
if [[ $what == fusion || $what == measure ]]; then
  for round in 1 2; do
    for f in 0 1; do
      run "bench_fusion${f}_$round" 120 env BRAID_CUDA_FUSION=$f "$b/bin/gpu_train_bench" \
        --batch 16 --seq 1024 --steps 10 --warmup 3
      grep -h '^braid:' "$out/bench_fusion${f}_$round.log"
    done
  done
  run bench_fusion_profile 120 env BRAID_CUDA_FUSION=1 BRAID_CUDA_PROFILE=1 \
    "$b/bin/gpu_train_bench" --batch 16 --seq 1024 --steps 10 --warmup 3
  sed -n '/BRAID_CUDA_PROFILE/,$p' "$out/bench_fusion_profile.log" | head -40
fi
if [[ $what == measure ]]; then
  run torch_compile 200 python3 bench/gpu_train_torch.py --mode compile --steps 10
  grep -E '^(pytorch|RESULT)' "$out/torch_compile.log"; tail -2 "$out/torch_compile.log"
fi
if [[ -x $b/bin/braid && ( $what == all || $what == braid || $what == measure ) ]]; then
  run braid_train 180 "$b/bin/braid" train configs/gpu-gpt2.yaml --set output.dir="$b/out"
  grep -E 'step|error|tokens/s|MFU' "$out/braid_train.log" | tail -6
fi
if [[ $what == all || $what == bench ]]; then
  run torch_eager 120 python3 bench/gpu_train_torch.py --mode eager --steps 10
  grep -E '^(pytorch|RESULT)' "$out/torch_eager.log"; tail -2 "$out/torch_eager.log"
  run torch_compile 200 python3 bench/gpu_train_torch.py --mode compile --steps 10
  grep -E '^(pytorch|RESULT)' "$out/torch_compile.log"; tail -2 "$out/torch_compile.log"
fi
