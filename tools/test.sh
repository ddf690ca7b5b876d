#!/usr/bin/env bash
# Sets up (tools/setup.sh), then builds and tests opforge in both module modes:
#   build/      mode=prebuilt (Meson compiles every module; CUDA via nvcc and HIP via hipcc when found)
#   build-jit/  mode=jit      (no module prebuilt; the loader compiles at first use, NVRTC for CUDA)
# Ends with one line `N passed, N failed, N skipped` over every test case of both runs.
# Arguments are Meson options for both builds, e.g. `tools/test.sh -Dwerror=true` (what CI runs).
set -uo pipefail
cd "$(dirname "$0")/.."

status=0
tools/setup.sh build "$@" || exit 1
tools/setup.sh build-jit -Dmode=jit "$@" || exit 1

for b in build build-jit; do
  echo "== meson test -C $b" >&2
  meson test -C "$b" --print-errorlogs --num-processes 2 || status=1
done

python3 tools/test_summary.py build/meson-logs/testlog.junit.xml build-jit/meson-logs/testlog.junit.xml || status=1
exit $status
