#!/usr/bin/env bash
# Replays .github/workflows/matrix.yml here: its plan job (tools/ci/plan.sh), one cell job per
# entry of the include list (tools/ci/cell.sh, each into its own bundle, as the jobs' artifacts
# are), and its merge job (tools/ci/merge.sh: merge, report, gate), on tests/replay.toml; and
# `opforge matrix run` of the same plan in one go. Fails unless both ways pass every cell, agree on
# every cell's status, steps and test results, and the gate of the replayed run against the
# direct one finds nothing changed.
# Usage: workflow_replay.sh SOURCE_ROOT OPFORGE MATRIX
set -euo pipefail
source=$1 opforge=$2 matrix=$3
fail() { echo "FAIL: $*" >&2; exit 1; }
# What failed in a run's cells: their failed steps, and the failing lines of those steps' logs
# (the run is deleted when this test ends).
explain() {
  python3 - "$1" <<'PY'
import glob, json, os, sys
for path in sorted(glob.glob(os.path.join(sys.argv[1], "cells", "*", "cell.json"))):
    cell = json.load(open(path))
    for step in cell.get("steps", []):
        if step["status"] in ("pass", "skip"):
            continue
        print(f"cell {cell['name']}: {step['name']} {step['status']}: {step.get('detail', '')}")
        log = os.path.join(os.path.dirname(path), step.get("log", ""))
        if os.path.isfile(log):
            lines = open(log, errors="replace").read().splitlines()
            bad = [l for l in lines if l.startswith("fail") or "FAIL" in l] or lines[-20:]
            print("\n".join("    " + l for l in bad[:40]))
PY
}
# The cells run their own `meson test`, this test included: one replay is enough.
[[ -z ${OPFORGE_WORKFLOW_REPLAY:-} ]] || { echo "SKIP: running inside a cell of a workflow replay"; exit 77; }
export OPFORGE_WORKFLOW_REPLAY=1 OPFORGE=$opforge

cd "$source"  # where the workflow's steps run: the checkout
# Runs go where runs go (results/runs/, ignored by git); every cell builds one level below the
# checkout, like build/ (harness/matrix/build_dir.h), so ccache serves this test's second build of
# each cell whatever build/ compiled with the same flags.
mkdir -p "$source/results/runs"
tmp=$(mktemp -d "$source/results/runs/replay.XXXXXX")
# A cell stopped midway keeps its build (beside the checkout, named in its cell.json): removed too.
cleanup() {
  python3 - "$tmp" <<'PY' || true
import glob, json, shutil, sys
for path in glob.glob(sys.argv[1] + "*/**/cell.json", recursive=True):
    d = json.load(open(path)).get("build_dir")
    if d:
        shutil.rmtree(d, ignore_errors=True)
PY
  rm -rf "$tmp" "$tmp".*
}
trap cleanup EXIT

# The plan job
include=$(tools/ci/plan.sh "$matrix" "$tmp/plan") || fail "tools/ci/plan.sh failed"
echo "include: $include"
mapfile -t cells < <(python3 -c 'import json,sys; [print(e["cell"]) for e in json.loads(sys.argv[1])]' "$include")
((${#cells[@]} >= 2)) || fail "$matrix should plan at least two cells, got ${#cells[@]}"

# `opforge matrix run` of the same plan, first: its run is the baseline the merge job gates against.
"$opforge" matrix run "$tmp/plan/plan.json" --out "$tmp.direct" --source "$source" >"$tmp/direct.log" 2>&1 ||
  { cat "$tmp/direct.log"; explain "$tmp.direct"; fail "opforge matrix run of the plan failed"; }
grep -E '^(PASS|FAIL|STOP)  cell|^run ' "$tmp/direct.log"

# The cell jobs, then the merge job (after every cell job, whatever their outcome)
status=0
for cell in "${cells[@]}"; do
  tools/ci/cell.sh "$tmp/plan/plan.json" "$cell" "$tmp.$cell" >"$tmp/cell-$cell.log" 2>&1 ||
    { cat "$tmp/cell-$cell.log"; explain "$tmp.$cell"; echo "cell job $cell failed" >&2; status=1; }
  grep -E '^(PASS|FAIL|STOP)  cell|^run ' "$tmp/cell-$cell.log" || true
done
# the merge job's download: every bundle artifact side by side
mkdir "$tmp/bundles"
for cell in "${cells[@]}"; do [[ ! -d $tmp.$cell ]] || mv "$tmp.$cell" "$tmp/bundles/$cell"; done
gate=0
tools/ci/merge.sh "$tmp.direct" "$tmp/bundles" "$tmp/merged" --timing advisory >"$tmp/merge.log" 2>&1 || gate=$?
cat "$tmp/merge.log"
((status == 0)) || fail "a cell job failed"
((gate == 0)) || fail "the gate of the replayed run against opforge matrix run's exited $gate"
for f in report.md report.html gate.md; do
  [[ -s $tmp/merged/$f ]] || fail "the merge job left no $f"
done

python3 - "$tmp.direct" "$tmp/merged" "${cells[@]}" <<'PY'
import json, sys
direct, merged, cells = sys.argv[1], sys.argv[2], sys.argv[3:]
def load(path):
    with open(path) as f:
        return json.load(f)
def tests(run, cell):
    try:
        doc = load(f"{run}/cells/{cell}/tests.json")
    except FileNotFoundError:
        return {}
    rows = doc["tests"] if isinstance(doc, dict) else doc
    return {r["key"]: r["result"] for r in rows}
bad = []
for cell in cells:
    a, b = load(f"{direct}/cells/{cell}/cell.json"), load(f"{merged}/cells/{cell}/cell.json")
    steps = lambda c: [(s["name"], s["status"]) for s in c["steps"]]
    if a["status"] != "pass" or b["status"] != "pass":
        bad.append(f"cell {a['name']} ({cell}): status {a['status']} (matrix run), {b['status']} (workflow)")
    if steps(a) != steps(b):
        bad.append(f"cell {a['name']}: steps differ: {steps(a)} vs {steps(b)}")
    ta, tb = tests(direct, cell), tests(merged, cell)
    if ta != tb:
        diff = sorted(k for k in set(ta) | set(tb) if ta.get(k) != tb.get(k))
        bad.append(f"cell {a['name']}: {len(diff)} test results differ, first {diff[:3]}")
    if not ta and any(n == "test" and st != "skip" for n, st in steps(a)):
        bad.append(f"cell {a['name']}: its tests ran but left no results to compare")
    counts = {r: list(ta.values()).count(r) for r in sorted(set(ta.values()))}
    print(f"cell {a['name']} ({cell}): {a['status']} both ways; steps "
          f"{' '.join(f'{n}={s}' for n, s in steps(a))}; {len(ta)} test results identical {counts}")
sa, sb = load(f"{direct}/run.json")["summary"], load(f"{merged}/run.json")["summary"]
keys = ["cells_planned", "cells_finished", "passed", "failed", "gpu_debt"]
if [sa[k] for k in keys] != [sb[k] for k in keys]:
    bad.append(f"run summaries differ: {sa} vs {sb}")
if bad:
    sys.exit("FAIL: " + "\nFAIL: ".join(bad))
print("workflow replay == opforge matrix run: " + ", ".join(f"{k} {sa[k]}" for k in keys))
PY
