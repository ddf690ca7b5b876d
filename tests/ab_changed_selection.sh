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
mkdir -p tools/ci kernels/ops/op_a kernels/ops/op_b kernels/cpu kernels/core kernels/include/opforge
cp "$src/tools/ci/ab_changed.sh" tools/ci/
printf '#!/bin/sh\necho "opforge $*"\n' > stand_in && chmod +x stand_in
for f in kernels/ops/op_a/cpu.cpp kernels/ops/op_a/test.cpp kernels/ops/op_b/cpu.cpp \
         kernels/cpu/scratch.h kernels/core/thread_pool.cpp kernels/core/loader.cpp kernels/include/opforge/abi.h \
         kernels/include/opforge/manifest.h README.md; do
  echo 0 > "$f"
done
git add -A && git commit -qm base

fails=0
# expect DESCRIPTION FILE... -- WANT...: edit FILEs, commit, run against the previous commit; some output
# line must match each WANT (an extended regex; =TEXT: contains TEXT), and none a WANT written !REGEX
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
    elif [[ $want == =* ]] && ! grep -Fq -- "${want#=}" <<< "$got"; then
      echo "FAIL: $what: no line contains '${want#=}' in:"; sed 's/^/  /' <<< "$got"; fails=$((fails + 1)); return
    elif [[ $want != !* && $want != =* ]] && ! grep -Eq -- "$want" <<< "$got"; then
      echo "FAIL: $what: no line matches /$want/ in:"; sed 's/^/  /' <<< "$got"; fails=$((fails + 1)); return
    fi
  done
  echo "ok: $what"
}
one_thread='/f32/.*/threads:1(/|$)'
above_one='/f32/.*/threads:([2-9]|[1-9][0-9]+)(/|$)'
expect "one op's kernel" kernels/ops/op_a/cpu.cpp -- \
  '^opforge ab --base [0-9a-f]{40} --head \. --op op_a --skip-identical --out out$'
expect "two ops' kernels" kernels/ops/op_a/cpu.cpp kernels/ops/op_b/cpu.cpp -- \
  ' --op op_a --op op_b --skip-identical '
expect "an op's test only" kernels/ops/op_a/test.cpp -- '^ab: skipped: .* touches no kernel code' '!^opforge'
expect "no kernel code" README.md -- '^ab: skipped: ' '!^opforge'
expect "the kernels' shared headers" kernels/cpu/scratch.h -- \
  "= --head . --filter $one_thread --skip-identical --out out" '!--op'
# several kinds at once: the union of their selections, by name (no --op: it would drop the other ops)
expect "shared headers and an op" kernels/cpu/scratch.h kernels/ops/op_b/cpu.cpp -- \
  "= --filter ($one_thread)|(^(op_b)/) --skip-identical --out out" '!--op'
expect "the thread pool" kernels/core/thread_pool.cpp -- \
  "^ab: host-side kernel code changed" "= --head . --filter $above_one --out out" '!--skip-identical'
expect "the thread pool and two ops" kernels/core/thread_pool.cpp kernels/ops/op_a/cpu.cpp kernels/ops/op_b/cpu.cpp -- \
  "= --filter ($above_one)|(^(op_a|op_b)/) --out out" '!--skip-identical' '!--op'
expect "the ABI header and shared headers" kernels/include/opforge/abi.h kernels/cpu/scratch.h -- \
  "^ab: host-side kernel code changed" "^ab: shared kernel code changed" \
  "= --filter ($above_one)|($one_thread) --out out" '!--skip-identical'
# load-time code (the loader, the manifest's types): never run per call, not timed; beside an op, the op alone
expect "the loader" kernels/core/loader.cpp kernels/include/opforge/manifest.h -- \
  "^ab: not timed: load-time code changed \(kernels/core/loader.cpp kernels/include/opforge/manifest.h\)" \
  '^ab: skipped: ' '!^opforge'
expect "the loader and an op" kernels/core/loader.cpp kernels/ops/op_a/cpu.cpp -- \
  '^opforge ab --base [0-9a-f]{40} --head \. --op op_a --skip-identical --out out$' '!host-side'
# a clone with one commit has nothing to compare with: skipped, exit 0
git checkout -q --orphan lone && git commit -qm lone
got=$(OPFORGE=./stand_in tools/ci/ab_changed.sh out 2>&1)
grep -q '^ab: skipped: no base commit' <<< "$got" && echo "ok: no base commit" || { echo "FAIL: no base commit: $got"; fails=$((fails + 1)); }
exit $((fails > 0))
