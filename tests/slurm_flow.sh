#!/usr/bin/env bash
# The Slurm flow without Slurm: tools/ci/slurm.sh against a stand-in sbatch that records what it is
# given, then every task of the generated array script run here with a stand-in opforge. Checks that
# there is one task per cell of the plan, each running what the GitHub cell job runs (matrix run
# PLAN --cell ID --out BUNDLES/ID), and that the merge job waits for the array and runs tools/ci/merge.sh.
# Usage: slurm_flow.sh SOURCE_ROOT OPFORGE MATRIX
set -euo pipefail
source=$1 opforge=$2 matrix=$3
fail() { echo "FAIL: $*" >&2; exit 1; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/opforge-slurm.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/bin"
cat >"$tmp/bin/sbatch" <<'SH'
#!/usr/bin/env bash
n=$(ls "$SBATCH_LOG" 2>/dev/null | wc -l)
{ printf '%s\n' "$@"; echo "OPFORGE=$OPFORGE"; } >"$SBATCH_LOG/$n"
echo "$((4100 + n));cluster"
SH
cat >"$tmp/bin/opforge-stub" <<'SH'
#!/usr/bin/env bash
printf '%s\n' "$@" >"$STUB_LOG"
SH
chmod +x "$tmp/bin/sbatch" "$tmp/bin/opforge-stub"
mkdir "$tmp/sbatch"

cd "$source"
PATH=$tmp/bin:$PATH SBATCH_LOG=$tmp/sbatch OPFORGE=$opforge \
  tools/ci/slurm.sh "$matrix" "$tmp/out" results/baselines/ci.json --timing advisory >"$tmp/submit.log" ||
  fail "tools/ci/slurm.sh failed: $(cat "$tmp/submit.log")"
cat "$tmp/submit.log"
out=$(realpath "$tmp/out")
[[ $(ls "$tmp/sbatch" | wc -l) == 2 ]] || fail "expected two submissions (array, merge), got $(ls "$tmp/sbatch")"
grep -qx "$out/matrix.sbatch" "$tmp/sbatch/0" || fail "first submission is not $out/matrix.sbatch: $(cat "$tmp/sbatch/0")"
grep -qx "OPFORGE=$(realpath "$opforge")" "$tmp/sbatch/0" || fail "the array does not get OPFORGE"
grep -qx -- "--dependency=afterany:4100" "$tmp/sbatch/1" || fail "the merge job does not wait for the array: $(cat "$tmp/sbatch/1")"
grep -qx -- "--wrap=tools/ci/merge.sh results/baselines/ci.json $out/bundles $out/run --timing advisory " "$tmp/sbatch/1" ||
  fail "the merge job does not run tools/ci/merge.sh on the bundles: $(cat "$tmp/sbatch/1")"

# Each array task, as Slurm would start it, against the cells of the plan the GitHub flow uses.
"$opforge" matrix plan "$matrix" --json --source "$source" >"$tmp/plan.json"
mapfile -t cells < <(python3 -c 'import json,sys; [print(c["id"]) for c in json.load(open(sys.argv[1]))["cells"]]' "$tmp/plan.json")
[[ $(wc -l <"$out/cells.txt") == "${#cells[@]}" ]] || fail "$out/cells.txt has not one line per cell of the plan"
for i in "${!cells[@]}"; do
  SLURM_ARRAY_TASK_ID=$i OPFORGE=$tmp/bin/opforge-stub STUB_LOG=$tmp/task.$i bash "$out/matrix.sbatch" ||
    fail "array task $i failed"
  want=$(printf '%s\n' matrix run "$out/plan.json" --cell "${cells[$i]}" --out "$out/bundles/${cells[$i]}")
  [[ $(cat "$tmp/task.$i") == "$want" ]] || fail "array task $i runs: $(cat "$tmp/task.$i" | tr '\n' ' '); expected: $(echo $want)"
done
echo "slurm flow: ${#cells[@]} array tasks, one per cell, then the merge job"
