#!/usr/bin/env bash
# CI hand-off, step 1 (the GitHub Actions plan job; docs/ci.md): plan a matrix once, for every cell
# job to read, and print the GitHub strategy.matrix include list as one line of JSON.
# Usage: tools/ci/plan.sh MATRIX OUT_DIR      (OPFORGE: the opforge CLI, default build/harness/opforge)
# Writes OUT_DIR/plan.json (opforge.plan/1) and OUT_DIR/github.json (opforge.github-matrix/1).
set -euo pipefail
[[ $# -eq 2 ]] || { echo "usage: $0 MATRIX OUT_DIR" >&2; exit 2; }
opforge=${OPFORGE:-build/harness/opforge}
matrix=$1 out=$2
source=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$out"
# One plan for all jobs: cell ids stay those of this plan whatever each job's toolchain says.
"$opforge" matrix plan "$matrix" --json --source "$source" >"$out/plan.json.tmp"
mv "$out/plan.json.tmp" "$out/plan.json"
"$opforge" matrix plan "$out/plan.json" --emit github --out "$out/github.json" --source "$source"
python3 - "$out/github.json" <<'PY'
import json, sys
path = sys.argv[1]
doc = json.load(open(path))
chunks = doc["chunks"]
if len(chunks) != 1:
    sys.exit(f"{path}: {doc['cells']} cells make {len(chunks)} GitHub matrices (256 jobs each); "
             "the workflow runs one: split the matrix file")
print(json.dumps(chunks[0]["include"], separators=(",", ":")))
PY
