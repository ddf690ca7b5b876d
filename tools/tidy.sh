#!/usr/bin/env bash
# clang-tidy 14 with the tree's .clang-tidy, over C++ files of a configured build (its
# compile_commands.json):
#   tools/tidy.sh BUILD_DIR            the .cpp files changed since the base: TIDY_BASE, else the merge
#                                      base with origin/main, else (on main itself) the previous commit
#   tools/tidy.sh BUILD_DIR --all      every C++ file the build compiles (minutes per 10 files on 2 cores)
#   tools/tidy.sh BUILD_DIR FILE...    these files
# Only files git tracks: generated sources (protoc's et_def.pb.cc in the build dir) are not ours.
# Files the build does not compile (another backend's, a disabled op's) and the libtorch peers
# (clang 14 cannot parse libtorch's headers) are left out and named.
# Exit 1 on any finding, 0 when clean, 77 (skipped, with the reason) when there is nothing to check or
# no clang-tidy 14.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:?usage: tools/tidy.sh BUILD_DIR [--all | FILE...]}
shift
tidy=$(command -v clang-tidy-14 || command -v clang-tidy || true)
if [[ -z $tidy ]] || ! "$tidy" --version | grep -q 'version 14\.'; then
  echo "SKIP: clang-tidy 14 not found (tools/setup.sh installs Debian's clang-tidy)"
  exit 77
fi
db=$build/compile_commands.json
[[ -f $db ]] || { echo "tidy: $db: no such file (configure $build first)" >&2; exit 2; }
mapfile -t compiled < <(python3 -c '
import json, os, sys
root = os.getcwd()
for e in json.load(open(sys.argv[1])):
    p = os.path.normpath(os.path.join(e["directory"], e["file"]))
    if p.startswith(root + os.sep) and p.endswith((".cpp", ".cc")):
        print(os.path.relpath(p, root))' "$db" | sort -u | comm -12 - <(git ls-files -- '*.cpp' '*.cc' | sort))

if [[ ${1:-} == --all ]]; then
  files=("${compiled[@]}")
elif (($# > 0)); then
  files=("$@")
else
  base=${TIDY_BASE:-}
  if [[ -z $base ]]; then
    base=$(git merge-base HEAD origin/main 2>/dev/null || true)
    if [[ -z $base || $base == "$(git rev-parse HEAD)" ]]; then
      base=$(git rev-parse --verify --quiet HEAD~1) || { echo "SKIP: tidy: no base commit to compare with"; exit 77; }
    fi
  fi
  mapfile -t files < <(git diff --name-only --diff-filter=d "$base" HEAD -- '*.cpp' '*.cc')
  if ((${#files[@]} == 0)); then
    echo "SKIP: tidy: no C++ source changed since ${base:0:12}"
    exit 77
  fi
fi

todo=() left=() torch=()
for f in "${files[@]}"; do
  if [[ $f == */peer_torch.cpp ]]; then torch+=("$f")
  elif printf '%s\n' "${compiled[@]}" | grep -qxF -- "$f"; then todo+=("$f"); else left+=("$f"); fi
done
((${#left[@]} == 0)) || echo "tidy: not compiled by $build, left out: ${left[*]}"
# clang 14 cannot compile Debian's libtorch headers (c10::IValue incomplete in ivalue_inl.h)
((${#torch[@]} == 0)) || echo "tidy: left out, clang 14 cannot parse libtorch's headers: ${torch[*]}"
if ((${#todo[@]} == 0)); then
  echo "SKIP: tidy: $build compiles none of the ${#files[@]} file(s)"
  exit 77
fi
echo "tidy: ${#todo[@]} file(s) with $(basename "$tidy")"
jobs=$(nproc)
# clang-tidy exits non-zero on a finding: its output decides, one line per finding
found=$(printf '%s\0' "${todo[@]}" | xargs -0 -n 1 -P "$jobs" "$tidy" -p "$build" --quiet 2>/dev/null |
  grep -E '(warning|error): ' | sort -u || true)
if [[ -n $found ]]; then
  echo "$found"
  echo "tidy: $(wc -l <<<"$found") finding(s) (.clang-tidy: every finding is an error)" >&2
  exit 1
fi
echo "tidy: ${#todo[@]} file(s) clean"
