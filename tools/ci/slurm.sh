#!/usr/bin/env bash
# The matrix hand-off on Slurm (docs/ci.md): `opforge matrix plan --emit slurm` writes an sbatch
# array script (one task per cell, each recording its bundle under OUT_DIR/bundles/); this submits
# it, and a merge job that runs once every task has ended (tools/ci/merge.sh: merge, report, gate).
# Usage: tools/ci/slurm.sh MATRIX OUT_DIR [BASELINE [opforge gate options...]]
# Run it from the source root, on a file system the compute nodes share. OPFORGE: as in plan.sh.
set -euo pipefail
[[ $# -ge 2 ]] || { echo "usage: $0 MATRIX OUT_DIR [BASELINE [gate options...]]" >&2; exit 2; }
opforge=$(realpath "${OPFORGE:-build/harness/opforge}")
matrix=$1 out=$2 baseline=${3:-results/baselines/ci.json}
shift $(($# < 3 ? $# : 3))
"$opforge" matrix plan "$matrix" --emit slurm --out "$out"
out=$(realpath "$out")
# the array tasks run ${OPFORGE:-opforge}: this one, through the exported environment
array=$(OPFORGE=$opforge sbatch --parsable --export=ALL "$out/matrix.sbatch")
array=${array%%;*}  # --parsable: "jobid" or "jobid;cluster"
# afterany: failed cells are results too; the gate decides
merge=$(OPFORGE=$opforge sbatch --parsable --export=ALL --dependency="afterany:$array" --job-name=opforge-merge \
  --output="$out/logs/merge.out" --wrap="$(printf '%q ' tools/ci/merge.sh "$baseline" "$out/bundles" "$out/run" "$@")")
echo "submitted: array job $array ($(wc -l <"$out/cells.txt") cells), merge job ${merge%%;*}; report: $out/run/report.html, gate: $out/logs/merge.out"
