#!/usr/bin/env bash
# The tree's C++ style (.clang-format) with Debian 12's clang-format 14:
#   tools/format.sh           rewrite every tracked C++/CUDA file in place
#   tools/format.sh --check   list the files that differ and exit 1 (the `format` test in the lint suite)
# Formatting is pinned to major version 14: another major version formats some constructs differently.
set -euo pipefail
cd "$(dirname "$0")/.."
check=false
[[ ${1:-} == --check ]] && check=true
cf=$(command -v clang-format-14 || command -v clang-format || true)
if [[ -z $cf ]]; then
  echo "SKIP: clang-format not found (tools/setup.sh installs Debian's clang-format)"
  exit 77
fi
if ! "$cf" --version | grep -q 'version 14\.'; then
  echo "SKIP: $cf is not clang-format 14 ($("$cf" --version)); the style is pinned to Debian 12's version"
  exit 77
fi
if ! git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  echo "SKIP: $(pwd) is not a git checkout (the files to check are the tracked ones)"
  exit 77
fi
mapfile -t files < <(git ls-files '*.cpp' '*.cc' '*.h' '*.hpp' '*.cu' '*.cuh')
if ((${#files[@]} == 0)); then
  echo "no tracked C++ files under $(pwd)" >&2
  exit 1
fi
if ! $check; then
  "$cf" -i --style=file "${files[@]}"
  exit 0
fi
# one clang-format process for the whole tree; each unformatted file reports "FILE:LINE:COL: error: ..."
out=$("$cf" --style=file --dry-run -Werror "${files[@]}" 2>&1) && rc=0 || rc=$?
bad=$(sed -nE 's/^([^:]+):[0-9]+:[0-9]+: error: .*/\1/p' <<<"$out" | sort -u)
if ((rc != 0)) || [[ -n $bad ]]; then
  if [[ -z $bad ]]; then
    echo "clang-format failed: $(head -n 1 <<<"$out")" >&2
    exit 1
  fi
  sed 's/$/: not formatted (run tools\/format.sh)/' <<<"$bad"
  echo "$(wc -l <<<"$bad") of ${#files[@]} files differ from .clang-format" >&2
  exit 1
fi
echo "${#files[@]} files formatted as .clang-format says"
