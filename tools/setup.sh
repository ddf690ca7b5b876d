#!/usr/bin/env bash
# Installs the Debian 12 packages opforge needs (only those missing), then configures and builds
# a build tree. Usage: tools/setup.sh [BUILD_DIR [meson -D options...]]   (default: build)
#                      tools/setup.sh --packages-only   (CI images: .github/workflows/matrix.yml)
set -euo pipefail
cd "$(dirname "$0")/.."
packages_only=false
if [[ ${1:-} == --packages-only ]]; then
  packages_only=true
  shift
fi

packages=(
  meson ninja-build pkg-config g++ python3 ccache
  libgtest-dev libgmock-dev libbenchmark-dev libcli11-dev    # tests, benchmarks, CLI
  libhwy-dev libdnnl-dev libopenblas-dev libssl-dev          # SIMD dispatch, kernel GEMM and CPU peers, cache keys
  libtorch-dev                                               # the torch peers (PyTorch 1.13 eager; benchmark binary only)
  protobuf-compiler libprotobuf-dev libsimdjson-dev zlib1g-dev  # chakra
  libtomlplusplus-dev libxml2-dev                            # matrices, JUnit logs
  hipcc libamdhip64-dev rocm-device-libs                     # HIP compile path (no device needed)
  valgrind                                                   # instruction-count gating
  graphviz chromium-headless-shell                           # the Chakra visualizer's .dot (dot -Tsvg) and HTML (a real browser) checks
  yamllint                                                   # the CI workflow's lint test
  clang-format clang-tidy                                    # the style test (tools/format.sh --check), tools/tidy.sh
  clang libclang-rt-14-dev                                   # fuzz build: libFuzzer with ASan+UBSan (tools/fuzz.sh)
  lld                                                        # the CPU JIT's linker (faster than ld.bfd; kernels/meson.build)
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}" >&2
  sudo=""
  [[ $(id -u) -eq 0 ]] || sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get -o DPkg::Lock::Timeout=300 update -q
  $sudo apt-get -o DPkg::Lock::Timeout=300 install -y -q --no-install-recommends "${missing[@]}"
fi

$packages_only && exit 0

build=${1:-build}
shift || true
if [[ -f $build/build.ninja ]]; then
  meson setup --reconfigure "$build" "$@" >/dev/null
else
  meson setup "$build" "$@"
fi
ninja -C "$build"
