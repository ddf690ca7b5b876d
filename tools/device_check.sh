#!/usr/bin/env bash
# One short run on a machine with an NVIDIA GPU: build the CUDA backend, run the GPU backend tests
# and the correctness suite for cuda (prebuilt fatbin, then NVRTC JIT, then JIT with a non-default
# block size), then the cuda benchmarks. Everything lands under $OUT (default results/device-check):
#   env.txt            nvidia-smi, nvcc, git sha        build.log     meson setup + ninja
#   gpu_backend.xml    GPU backend tests (JUnit)        *.log         each step's output
#   kernels_*.xml      correctness suite per variant    bench_cuda.json  google-benchmark JSON
#   ops.log            `opforge ops` (compatibility as the loader sees it)
#   summary.txt        one line per step: PASS/FAIL/TIMEOUT and seconds
# Usage: tools/device_check.sh [extra meson -D options]. Exit status: number of failed steps.
# Step time limits add up to < 600 s (one device call); a warm ccache or carried build dir helps.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-results/device-check}
B=${OPF_DEVICE_BUILD:-build-device}
mkdir -p "$OUT"
export OPFORGE_CACHE_DIR="$PWD/$B/jit-cache"
fails=0

step() {  # step NAME TIMEOUT_S CMD...: runs CMD, logs to $OUT/NAME.log, records the outcome
  local name=$1 limit=$2 t0=$SECONDS rc
  shift 2
  timeout "$limit" "$@" >"$OUT/$name.log" 2>&1
  rc=$?
  local verdict=PASS
  [ $rc -eq 124 ] && verdict=TIMEOUT
  [ $rc -ne 0 ] && [ $rc -ne 124 ] && verdict="FAIL(rc=$rc)"
  [ $rc -ne 0 ] && fails=$((fails + 1))
  printf '%-22s %-12s %4ss\n' "$name" "$verdict" $((SECONDS - t0)) | tee -a "$OUT/summary.txt"
  tail -n 5 "$OUT/$name.log"
  return $rc
}

: >"$OUT/summary.txt"
{
  date -u
  git rev-parse HEAD 2>/dev/null
  nvidia-smi --query-gpu=name,compute_cap,driver_version,memory.total --format=csv 2>&1
  /usr/local/cuda/bin/nvcc --version 2>&1 | tail -n 2
  nproc
} >"$OUT/env.txt"
cat "$OUT/env.txt"

# The GPU's own arch only (quick build); hip off (NVIDIA machine); chakra is not under test here.
ARCH=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n1 | tr -d ' ')
ARCH=${ARCH:-9.0}
setup=(meson setup "$B")
[ -d "$B/meson-private" ] && setup=(meson setup --reconfigure "$B")
step build 280 bash -c '"$@" && ninja -C "$0"' "$B" "${setup[@]}" -Dcuda=enabled -Dhip=disabled \
  "-Darch_cuda=$ARCH" -Dmode=both -Dchakra=disabled -Dtests=enabled -Dbench=enabled "$@" ||
  { echo "build failed: see $OUT/build.log"; exit 1; }

step ops 20 "$B/harness/opforge" ops
# Without a usable device every GPU test below skips; say so instead of reporting green.
if grep -q "incompatible cuda" "$OUT/ops.log"; then
  grep "incompatible cuda" "$OUT/ops.log" | sed 's/^ */NO DEVICE: /' | tee -a "$OUT/summary.txt"
  fails=$((fails + 1))
fi
T="$B/harness/suites/opforge-kernel-tests"
step gpu_backend 30 "$B/kernels/gpu/tests/gpu_backend_test" --gtest_output="xml:$OUT/gpu_backend.xml"
step kernels_prebuilt 60 "$T" --gtest_filter='kernel.*/cuda/*' --gtest_output="xml:$OUT/kernels_prebuilt.xml"
step kernels_jit 60 env OPFORGE_FORCE_JIT=1 "$T" --gtest_filter='kernel.*/cuda/*' \
  --gtest_output="xml:$OUT/kernels_jit.xml"
# A tuning override forces a JIT build with another block size: the plan read back from the
# module must follow it (prebuilt and JIT compile the same text).
step kernels_jit_block128 40 env OPFORGE_TUNE_LAYER_NORM_BLOCK=128 "$T" --gtest_filter='kernel.layer_norm/cuda/*' \
  --gtest_output="xml:$OUT/kernels_jit_block128.xml"
# fused_dense: the default run above gave cuBLASLt the calls it takes; the opforge GEMM gets all of
# them here, and a cuBLASLt-only run proves the library path ran (f32: every entry; else linear_bias).
step fused_dense_opforge_gemm 20 env OPFORGE_FUSED_DENSE_GEMM=opforge "$T" --gtest_filter='kernel.fused_dense/cuda/*' \
  --gtest_output="xml:$OUT/fused_dense_opforge_gemm.xml"
step fused_dense_cublaslt 20 env OPFORGE_FUSED_DENSE_GEMM=cublaslt "$T" \
  --gtest_filter='kernel.fused_dense/cuda/*/linear_bias_*:kernel.fused_dense/cuda/f32/linear_gelu_linear_*/*x96x*' \
  --gtest_output="xml:$OUT/fused_dense_cublaslt.xml"
# GPU benchmarks: device events, inputs rotated past the L2, medians of 3, beside the device copy
# probe and the cuBLASLt-alone peer of fused_dense (the CPU triad probes run too: cheap).
step bench_cuda 65 "$B/harness/suites/opforge-kernel-bench" --benchmark_filter='/cuda/|^probe/|^peer/cublaslt/' \
  --benchmark_min_time=0.05 --benchmark_repetitions=3 --benchmark_report_aggregates_only=true \
  --benchmark_out="$OUT/bench_cuda.json" --benchmark_out_format=json

echo "device check: $fails failed step(s); results in $OUT"
exit $fails
