#!/usr/bin/env bash
# tools/ci/ab_changed.sh picks what CI's timing gate compares from the files a change touched: run on
# a scratch git repository shaped like this tree, with a stand-in `opforge` that prints its
# arguments, one commit per kind of change.
# Usage: ab_changed_selection.sh SOURCE_ROOT
set -euo pipefail
src=$(cd "$1" && pwd)
command -v git >/dev/null || { echo "SKIP: git not found (the script under test diffs git revisions)"; exit 77; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
git init -q . && git config user.email t@t && git config user.name t
mkdir -p tools/ci kernels/ops/layer_norm kernels/ops/syncbn kernels/cpu kernels/core kernels/include/opforge
cp "$src/tools/ci/ab_changed.sh" tools/ci/
printf '#!/bin/sh\necho "opforge $*"\n' > stand_in && chmod +x stand_in
for f in kernels/ops/layer_norm/cpu.cpp kernels/ops/layer_norm/test.cpp kernels/ops/syncbn/cpu.cpp \
         kernels/cpu/scratch.h kernels/core/thread_pool.cpp kernels/include/opforge/abi.h README.md; do
  echo 0 > "$f"
done
git add -A && git commit -qm base

fails=0
# expect DESCRIPTION FILE... -- REGEX...: edit FILEs, commit, run against the previous commit; some output
# line must match each REGEX, and none may match a REGEX written !REGEX
expect() {
  local what=$1; shift
  local files=()
  while [[ $1 != -- ]]; do files+=("$1"); shift; done
  shift
  for f in "${files[@]}"; do echo "$RANDOM" >> "$f"; done
  git commit -qam "$what"
  local got
  got=$(AB_BASE=$(git rev-parse HEAD~1) OPFORGE=./stand_in tools/ci/ab_changed.sh out 2>&1) || true
  for want in "$@"; do
    if [[ $want == !* ]] && grep -Eq -- "${want#!}" <<< "$got"; then
      echo "FAIL: $what: a line matches /${want#!}/ in:"; sed 's/^/  /' <<< "$got"; fails=$((fails + 1)); return
    elif [[ $want != !* ]] && ! grep -Eq -- "$want" <<< "$got"; then
      echo "FAIL: $what: no line matches /$want/ in:"; sed 's/^/  /' <<< "$got"; fails=$((fails + 1)); return
    fi
  done
  echo "ok: $what"
}
expect "one op's kernel" kernels/ops/layer_norm/cpu.cpp -- \
  '^opforge ab --base [0-9a-f]{40} --head \. --op layer_norm --skip-identical --out out$'
expect "two ops' kernels" kernels/ops/layer_norm/cpu.cpp kernels/ops/syncbn/cpu.cpp -- \
  ' --op layer_norm --op syncbn --skip-identical '
expect "an op's test only" kernels/ops/layer_norm/test.cpp -- '^ab: skipped: .* touches no kernel code' '!^opforge'
expect "no kernel code" README.md -- '^ab: skipped: ' '!^opforge'
expect "the kernels' shared headers" kernels/cpu/scratch.h kernels/ops/syncbn/cpu.cpp -- \
  " --filter /f32/\.\*/threads:1\(/\|\\$\) --skip-identical --out out$"
expect "the thread pool" kernels/core/thread_pool.cpp kernels/cpu/scratch.h -- \
  "^ab: host-side kernel code changed" " --filter /f32/\.\*/threads:\(\[2-9\]\|\[1-9\]\[0-9\]\+\)\(/\|\\$\) --out out$"
expect "the ABI header" kernels/include/opforge/abi.h -- "^ab: host-side kernel code changed" \
  ' --head \. --filter [^ ]+ --out out$' '!--skip-identical'
# a clone with one commit has nothing to compare with: skipped, exit 0
git checkout -q --orphan lone && git commit -qm lone
got=$(OPFORGE=./stand_in tools/ci/ab_changed.sh out 2>&1)
grep -q '^ab: skipped: no base commit' <<< "$got" && echo "ok: no base commit" || { echo "FAIL: no base commit: $got"; fails=$((fails + 1)); }
exit $((fails > 0))
