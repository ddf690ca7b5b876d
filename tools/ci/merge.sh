#!/usr/bin/env bash
# CI hand-off, step 3 (the GitHub Actions merge job, or the Slurm merge job): every cell bundle
# merged into one run, its report, and the gate against a baseline.
# Usage: tools/ci/merge.sh BASELINE BUNDLES_DIR RUN_DIR [opforge gate options...]
#   BUNDLES_DIR holds one bundle per cell (BUNDLES_DIR/<cell-id>/run.json ...); RUN_DIR must not exist.
# Writes RUN_DIR/report.md, report.html and gate.md. Exit status: the gate's (0 nothing regressed,
# 1 a confirmed regression, 2 bad input); a failed merge or report exits non-zero before it.
set -euo pipefail
[[ $# -ge 3 ]] || { echo "usage: $0 BASELINE BUNDLES_DIR RUN_DIR [gate options...]" >&2; exit 2; }
opforge=${OPFORGE:-build/harness/opforge}
baseline=$1 bundles=$2 run=$3
shift 3
shopt -s nullglob
list=("$bundles"/*/)
((${#list[@]})) || { echo "$0: no bundles in $bundles" >&2; exit 2; }
"$opforge" merge -o "$run" "${list[@]%/}"
"$opforge" report "$run"
exec "$opforge" gate --baseline "$baseline" --current "$run" --markdown "$run/gate.md" "$@"
