#!/usr/bin/env bash
# CI hand-off, step 2 (one GitHub Actions matrix job, or one Slurm array task): one cell of a plan,
# recorded as a bundle (a run directory holding that cell) for `opforge merge`.
# Usage: tools/ci/cell.sh PLAN_JSON CELL_ID BUNDLE_DIR      (OPFORGE as in plan.sh)
# Exit status: opforge matrix run's (1: the cell failed; its bundle is still written).
set -euo pipefail
[[ $# -eq 3 ]] || { echo "usage: $0 PLAN_JSON CELL_ID BUNDLE_DIR" >&2; exit 2; }
opforge=${OPFORGE:-build/harness/opforge}
source=$(cd "$(dirname "$0")/../.." && pwd)
exec "$opforge" matrix run "$1" --cell "$2" --out "$3" --source "$source"
