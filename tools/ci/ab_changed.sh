#!/usr/bin/env bash
# CI's timing gate: `opforge ab` of this commit against its base, for the ops the change touched.
# Base: AB_BASE, else the merge base with origin/main, else (on main itself) the previous commit.
# Ops: every kernels/ops/<op>/ folder with a changed kernel file (not test.cpp, peer_*.cpp, docs, nor
# kernel.cu: GPU code, which the CPU benchmarks `ab` times never run);
# a change to the kernels' shared headers (kernels/cpu) compares every op on its f32 single-thread
# benchmarks (CI time), and an op whose built module is the same bytes in both trees is not timed
# (--skip-identical: a comment or a change the compiler folds away cannot be slower; ab.json lists
# those). A change to the host side (kernels/core: thread pool, call path; kernels/include: the ABI
# both sides compile) times every op's f32 benchmarks above 1 thread, identical modules included:
# that code runs outside the modules (8e47965's pool change left every module the same bytes, so
# --skip-identical timed nothing), the pool works only above 1 thread, and the call path runs
# there too (same CI time as the 1-thread set). Code of kernels/core and kernels/include that runs
# only before the first call (the loader, the op registry, the JIT's compile and cache, build
# facts, the GPU backends) is not timed: the prebuilt CPU benchmarks `ab` times never run it per
# call. A change of several kinds times the union of their selections. A change that touches no
# kernel code is skipped, with its reason.
# Exit: 0 pass or skipped, 1 a confirmed regression, 2 bad input or a failed build.
# Usage: tools/ci/ab_changed.sh OUT_DIR [more `opforge ab` arguments]
set -euo pipefail
out=${1:?usage: tools/ci/ab_changed.sh OUT_DIR [opforge ab args]}
shift
cd "$(dirname "$0")/../.."
opforge=${OPFORGE:-build/harness/opforge}

base=${AB_BASE:-}
if [[ -z $base ]]; then
  base=$(git merge-base HEAD origin/main 2>/dev/null || true)
  if [[ -z $base || $base == "$(git rev-parse HEAD)" ]]; then
    if ! base=$(git rev-parse --verify --quiet HEAD~1); then
      echo "ab: skipped: no base commit to compare with (a single-commit or shallow clone)"
      exit 0
    fi
  fi
fi

mapfile -t changed < <(git diff --name-only "$base" HEAD --)
ops=() shared=() host=() load=()
for f in "${changed[@]}"; do
  case $f in
    kernels/ops/*/test.cpp | kernels/ops/*/peer_*.cpp | kernels/ops/*/*.md | kernels/ops/*/kernel.cu) ;;
    kernels/ops/*/*) op=${f#kernels/ops/}; op=${op%%/*}
                     [[ -d kernels/ops/$op && " ${ops[*]} " != *" $op "* ]] && ops+=("$op") ;;
    kernels/cpu/*) shared+=("$f") ;;
    kernels/core/loader.cpp | kernels/core/registry.cpp | kernels/core/manifest_shapes.* | kernels/core/jit_cache.* | \
    kernels/core/cpu_jit.* | kernels/core/cpu_backend.cpp | kernels/core/build_info.cpp | kernels/core/install_root.cpp | \
    kernels/core/backend.h | kernels/core/gpu_* | kernels/core/cuda_* | kernels/core/hip_* | \
    kernels/include/opforge/loader.h | kernels/include/opforge/manifest.h | kernels/include/opforge/build_info.h) \
      load+=("$f") ;;
    kernels/include/* | kernels/core/*) host+=("$f") ;;
  esac
done

# A change of several kinds times the union of their selections, in one regex; --skip-identical
# only when no host-side file changed (that code is outside every module).
parts=() why=()
if [[ ${#host[@]} -gt 0 ]]; then
  parts+=('/f32/.*/threads:([2-9]|[1-9][0-9]+)(/|$)')
  why+=("host-side kernel code changed (${host[*]:0:3}${host[3]:+ ...}): every op, f32 above 1 thread")
fi
if [[ ${#shared[@]} -gt 0 ]]; then
  parts+=('/f32/.*/threads:1(/|$)')
  why+=("shared kernel code changed (${shared[*]:0:3}${shared[3]:+ ...}): every op, f32 at 1 thread")
fi
[[ ${#ops[@]} -gt 0 ]] && why+=("ops touched since ${base:0:12}: ${ops[*]}")
[[ ${#load[@]} -gt 0 ]] &&
  echo "ab: not timed: load-time code changed (${load[*]:0:3}${load[3]:+ ...}): runs before the first call"
if [[ ${#why[@]} -eq 0 ]]; then
  echo "ab: skipped: ${base:0:12}..HEAD touches no kernel code that runs per call (${#changed[@]} file(s) changed)"
  exit 0
fi
printf 'ab: %s\n' "${why[@]}"
args=()
if [[ ${#parts[@]} -eq 0 ]]; then
  for op in "${ops[@]}"; do args+=(--op "$op"); done  # the builds enable only these ops
else
  [[ ${#ops[@]} -gt 0 ]] && parts+=("^($(IFS='|'; echo "${ops[*]}"))/")
  union=${parts[0]}
  if [[ ${#parts[@]} -gt 1 ]]; then union=$(printf '|(%s)' "${parts[@]}"); union=${union:1}; fi
  args+=(--filter "$union")
fi
[[ ${#host[@]} -eq 0 ]] && args+=(--skip-identical)
rm -rf "$out"
exec "$opforge" ab --base "$base" --head . "${args[@]}" --out "$out" "$@"
